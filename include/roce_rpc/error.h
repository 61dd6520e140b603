/* SPDX-License-Identifier: MIT */
/*
 * roce-rpc error codes.
 *
 * Every function of the library returns an int: 0 on success, a negative
 * number on failure.  A negative number between -1 and -999 is a negated
 * errno value (-ENOMEM, -EINVAL, ...); the project's own codes live in the
 * range -1000 and below and are listed once, in RRPC_ERRNO_MAP below.
 * Codes are never renumbered.
 *
 * Positive numbers are application error codes: a handler that fails a call
 * with rrpc_respond_error(req, 42, "...") makes the caller see status 42.
 *
 * For a person, rrpc_strerror() gives a one-line description of any code
 * and rrpc_ctx_last_error() (see rrpc.h) the detail of the last failure
 * in a context: which peer, which device, and what to do about it.
 */
#ifndef ROCE_RPC_ERROR_H
#define ROCE_RPC_ERROR_H

#include <roce_rpc/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description).  -1011 is retired (it named a case nothing
 * produced); it is never reused. */
#define RRPC_ERRNO_MAP(X)                                                           \
    X(PROTO, -1000, "protocol error: malformed frame from the peer")             \
    X(VERSION, -1001, "protocol version mismatch with the peer")                 \
    X(NO_METHOD, -1002, "no handler is registered for this method")              \
    X(BAD_CLASS, -1003, "unknown QoS class")                                      \
    X(TOO_BIG, -1004, "message exceeds the maximum message size")                \
    X(ACCESS, -1005, "remote memory access denied (wrong key, bounds or rights)") \
    X(CONN_LOST, -1006, "connection lost")                                        \
    X(DEADLINE, -1007, "deadline expired")                                        \
    X(NO_DEVICE, -1008, "no RDMA device serves this address")                     \
    X(URI, -1009, "malformed endpoint URI")                                       \
    X(CLOSED, -1010, "object is closed")                                          \
    X(CREDIT, -1012, "peer sent more messages than it had credits for")          \
    X(DEADLOCK, -1013, "blocking call from the loop thread would deadlock")      \
    X(ARGS, -1014, "msgpack arguments do not match the expected format")         \
    X(TRANSPORT, -1015, "transport not available in this build")                 \
    X(REGION, -1016, "memory is not inside a registered region")                 \
    X(TICKET, -1017,                                                             \
      "connection ticket missing, forged, expired, replayed or for another service") \
    X(LIMIT, -1018, "a configured limit was reached (connections, queued bytes, offers)") \
    X(UNKNOWN_HOST, -1019, "the host name does not resolve")                      \
    X(CANCELLED, -1020, "the call was cancelled by its caller")                  \
    X(GRANT, -1021,                                                              \
      "remote access through a grant refused (revoked, expired, another peer "   \
      "or class, outside its range or rights)")                                  \
    X(METADATA, -1022,                                                           \
      "call metadata breaks its bounds (entries, key or value size, key characters)")

typedef enum rrpc_errno {
#define RRPC_ERRNO_ENUM_(name, value, desc) RRPC_E_##name = (value),
    RRPC_ERRNO_MAP(RRPC_ERRNO_ENUM_)
#undef RRPC_ERRNO_ENUM_
} rrpc_errno;

/*
 * A one-line description of @code: a project code, a negated errno, 0
 * ("success") or a positive application code.  Never NULL; the string is
 * static (for an unknown code, a thread-local buffer).
 */
RRPC_API const char *rrpc_strerror(int code);

/*
 * The symbolic name of @code, for example "RRPC_E_DEADLINE" or "ENOMEM".
 * Never NULL; static (for an unknown code, a thread-local buffer).
 */
RRPC_API const char *rrpc_err_name(int code);

#ifdef __cplusplus
}
#endif
#endif

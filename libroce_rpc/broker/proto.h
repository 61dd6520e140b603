/* SPDX-License-Identifier: MIT */
/*
 * The control protocol's schema (docs/broker.md), defined once for its two
 * ends: the broker client (libroce_rpc_broker) and rrpcd, which links it from
 * the internal static library roce_rpc_broker_internal (daemon/meson.build).
 * Here: the version and frame limit, the framing, every operation, key and
 * error code by name, and the checks and packers of untrusted msgpack both
 * ends use.  Nothing here allocates or keeps state.
 */
#ifndef RRPCI_BROKER_PROTO_H
#define RRPCI_BROKER_PROTO_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* docs/broker.md: each frame is a u32 little-endian length (1..CTL_MAX_FRAME)
 * and one msgpack map whose "v" is CTL_VERSION.  Version 2: register and renew
 * answer the ticket keys (signed tickets), no longer a shared secret. */
#define CTL_VERSION 2
#define CTL_MAX_FRAME (1u << 20)
#define CTL_STR_(x) #x
#define CTL_STR(x) CTL_STR_(x)
#define CTL_VERSION_STR CTL_STR(CTL_VERSION) /* "2", for messages a person reads */

/* ---- operations ("op") ------------------------------------------------- */

/* X(ENUM, "name"): every request a client may send.  The order is the enum's
 * and is never changed (rrpcd's metrics label the first five).  "pairs" is
 * rrpc-agent's report of its ESP pairs (docs/deployment.md). */
#define RRPCI_CTL_OPS(X)          \
    X(HELLO, "hello")             \
    X(REGISTER, "register")       \
    X(RENEW, "renew")             \
    X(UNREGISTER, "unregister")   \
    X(LOOKUP, "lookup")           \
    X(WATCH, "watch")             \
    X(UNWATCH, "unwatch")         \
    X(STATUS, "status")           \
    X(PAIRS, "pairs")

enum rrpci_ctl_op {
#define RRPCI_CTL_OP_ENUM(e, name) CTL_OP_##e,
    RRPCI_CTL_OPS(RRPCI_CTL_OP_ENUM)
#undef RRPCI_CTL_OP_ENUM
    CTL_OP_COUNT
};

/* The wire name of @op; "?" for a value that is no operation. */
const char *rrpci_ctl_op_name(int op);
/* The operation named by the @len bytes at @name (no NUL needed), or -1 when
 * there is none of that name (rrpcd answers bad_request "unknown op"). */
int rrpci_ctl_op_parse(const char *name, size_t len);

/* ---- error codes ("err" of an answer whose "ok" is false) --------------- */

/* X(ENUM, "name", code the client returns): the order is the enum's (and
 * rrpcd's metrics' result labels), never changed. */
#define RRPCI_CTL_ERRS(X)                                   \
    X(BAD_REQUEST, "bad_request", -EPROTO)                  \
    X(VERSION, "version", RRPC_E_VERSION)                   \
    X(UNAUTHENTICATED, "unauthenticated", -EACCES)          \
    X(AUTH_FAILED, "auth_failed", -EACCES)                  \
    X(DENIED, "denied", -EPERM)                             \
    X(NOT_FOUND, "not_found", -ENOENT)                      \
    X(LIMIT, "limit", -ENOSPC)                              \
    X(BUSY, "busy", -EAGAIN)                                \
    X(INTERNAL, "internal", -EPROTO)

enum rrpci_ctl_err {
    CTL_OK = 0, /* not an error: "ok": true */
#define RRPCI_CTL_ERR_ENUM(e, name, code) CTL_ERR_##e,
    RRPCI_CTL_ERRS(RRPCI_CTL_ERR_ENUM)
#undef RRPCI_CTL_ERR_ENUM
    CTL_ERR_COUNT
};

/* The wire name of @err ("ok" for CTL_OK); "?" for a value that is none. */
const char *rrpci_ctl_err_name(int err);
/* The error code named @name, or -1 for a name rrpcd does not send. */
int rrpci_ctl_err_parse(const char *name);
/* What the broker client returns for rrpcd's refusal @name: -EACCES,
 * -EPERM, -ENOENT, -EAGAIN, -ENOSPC, RRPC_E_VERSION, or -EPROTO (also for a
 * name it does not know). */
int rrpci_ctl_err_code(const char *name);

/* ---- keys of the maps, and fixed values --------------------------------- */

/* The envelope: every request has v, op, id; every answer v, id, ok (err and
 * msg when not ok); a push (id 0) has push. */
#define CTL_K_V "v"
#define CTL_K_OP "op"
#define CTL_K_ID "id"
#define CTL_K_OK "ok"
#define CTL_K_ERR "err"
#define CTL_K_MSG "msg"
#define CTL_K_PUSH "push"
/* hello */
#define CTL_K_TOKEN "token"
#define CTL_K_PRINCIPAL "principal"
/* register, renew, unregister */
#define CTL_K_SERVICE "service"
#define CTL_K_INSTANCE "instance"
#define CTL_K_ENDPOINTS "endpoints"
#define CTL_K_CLASSES "classes"
#define CTL_K_LEASE_MS "lease_ms"
#define CTL_K_REG "reg"
#define CTL_K_KEYS "keys"
/* register (optional true), and its answer: rrpcd says true back when it keeps
 * the flag, so a server never believes an rrpcd that ignored it. */
#define CTL_K_REQUIRE_ESP "require_esp"
/* lookup */
#define CTL_K_TICKET "ticket"
#define CTL_K_EXPIRY_MS "expiry_ms"
#define CTL_K_INSTANCES "instances"
/* watch, unwatch, and the push of a watch (CTL_K_PUSH is CTL_PUSH_WATCH) */
#define CTL_K_WATCH "watch"
#define CTL_PUSH_WATCH "watch"
/* status */
#define CTL_K_REGISTRY "registry"
#define CTL_K_DEGRADED "degraded"
#define CTL_K_WHY "why"
#define CTL_K_SERVICES "services"
#define CTL_K_REGISTRATIONS "registrations"
#define CTL_K_SESSIONS "sessions"
/* pairs: {local: ADDR, pairs: [{peer: ADDR, expires_s: N}...]} */
#define CTL_K_LOCAL "local"
#define CTL_K_PAIRS "pairs"
#define CTL_K_PEER "peer"
#define CTL_K_EXPIRES_S "expires_s"
#define CTL_REGISTRY_MEMORY "memory"
#define CTL_REGISTRY_ETCD "etcd"
/* an endpoint */
#define CTL_K_TRANSPORT "transport"
#define CTL_K_HOST "host"
#define CTL_K_PORT "port"
#define CTL_TRANSPORT_TCP "tcp"
#define CTL_TRANSPORT_RDMA "rdma"

/* Bounds both ends check. */
#define CTL_MAX_ENDPOINTS 64 /* of one registration */
#define CTL_LEASE_MIN_MS 100
#define CTL_MAX_DEPTH 8 /* msgpack nesting of a frame */
#define CTL_MAX_PAIRS 256            /* of one pairs report (rrpc-agent's --peer limit) */
#define CTL_MAX_PAIRS_FRAME (64u << 10) /* bytes of a pairs request */
#define CTL_MAX_PAIR_EXPIRES_S 604800u  /* a week */

/* ---- framing and msgpack ------------------------------------------------- */

static inline void rrpci_put_le32(uint8_t out[4], uint32_t v)
{
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
    out[3] = (uint8_t)(v >> 24);
}

static inline uint32_t rrpci_get_le32(const uint8_t in[4])
{
    return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

/* Packs the C string @s as a msgpack str. */
static inline void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/*
 * 0 when @buf/@len is exactly one msgpack object, nested at most @max_depth
 * deep, whose arrays and maps claim no more elements than bytes remain
 * (msgpack-c allocates a container's claimed size before reading it).
 * -1 otherwise.
 */
int rrpci_mp_check(const void *buf, size_t len, int max_depth);

/* The value of the string key @key in the map @map, or NULL (also when @map
 * is not a map). */
const msgpack_object *rrpci_mp_get(const msgpack_object *map, const char *key);

/* A non-negative integer into *@out; false for anything else. */
bool rrpci_mp_uint(const msgpack_object *o, uint64_t *out);

/* ---- the control schema's shared pieces (docs/broker.md), for rrpcd and the
 * broker client alike ---------------------------------------------------- */

/* A name (service, principal, host, class, transport): a str of
 * 1..@outlen-1 bytes without NUL or control characters, copied to @out. */
bool rrpci_mp_str(const msgpack_object *o, char *out, size_t outlen);

/* A message (an error's code and words): any str without NUL, possibly
 * empty, cut to @outlen-1 bytes; "" when @o is no str. */
void rrpci_mp_text(const msgpack_object *o, char *out, size_t outlen);

/* An endpoint of a registration or a lookup answer:
 * {"transport": "tcp"|"rdma", "host": HOST, "port": 1..65535[, "classes": [...]]}. */
struct rrpci_endpoint {
    char transport[8];
    char host[256];
    uint16_t port;
};

/* Packs @e with its "classes" (bit 1 << class, public numbers) when
 * @with_classes. */
void rrpci_pk_endpoint(msgpack_packer *pk, const struct rrpci_endpoint *e, bool with_classes,
                       unsigned class_mask);

/* Reads the endpoint map @o into *@e; false when a field is missing or
 * malformed (an unknown transport, port 0 or above 65535). */
bool rrpci_mp_endpoint(const msgpack_object *o, struct rrpci_endpoint *e);

/* Packs the classes of @mask as an array of names; reads such an array back
 * into a mask (names it does not know are skipped; -1 when @o is no array). */
void rrpci_pk_classes(msgpack_packer *pk, unsigned mask);
long rrpci_mp_classes(const msgpack_object *o);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The broker client and connection tickets.
 *
 * rrpcd (daemon/, docs/broker.md) is the control plane: servers register
 * the endpoints of a service with it, clients look a service up and receive
 * a short-lived ticket that the server checks on the first message of every
 * new connection.  Everything here talks to rrpcd over TLS 1.3 (mutual TLS
 * or a pre-shared token); the control protocol is in docs/broker.md.
 *
 * A broker handle (rrpc_broker) is one authenticated client of one rrpcd.
 * Every function may be called from any thread; round trips are serialised
 * on the handle.  All calls here block (at most the handle's timeout per
 * round trip) and must not be made from a callback of a context's loop.
 *
 * Tickets are usable without rrpcd too: rrpc_ticket_issue() makes one, a
 * verifier checks them (HMAC-SHA256, expiry with a clock-skew allowance,
 * a replay cache of nonces, the service name).
 */
#ifndef ROCE_RPC_BROKER_H
#define ROCE_RPC_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <roce_rpc/export.h>
#include <roce_rpc/context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tickets -------------------------------------------------------------- */

/*
 * Ticket layout (all integers little-endian; docs/broker.md §Tickets):
 *   0   4  magic "RTKT"
 *   4   1  version (1)
 *   5   1  principal length P (1..255)
 *   6   1  service length S (1..255)
 *   7   1  reserved, 0
 *   8   8  expiry, ms since the Unix epoch (wall clock)
 *   16  16 nonce (random)
 *   32  P  principal, then S service (no NULs)
 *   ..  32 HMAC-SHA256 over every byte before it, keyed with the service secret
 */
#define RRPC_TICKET_SECRET_LEN 32
#define RRPC_TICKET_NONCE_LEN 16
#define RRPC_TICKET_MAX_LEN (32 + 255 + 255 + 32)

/*
 * Makes a ticket for @principal to connect to @service, valid until
 * @expiry_ms (ms since the Unix epoch), signed with @secret.  @nonce may be
 * NULL (a random one is drawn).  Writes it to @buf (@buflen >= the ticket;
 * RRPC_TICKET_MAX_LEN always suffices) and its length to *ret_len.
 * Errors: -EINVAL (a name empty, longer than 255 bytes, or with a NUL),
 * -ENOSPC (@buflen too small), -EIO (no randomness).
 */
RRPC_API int rrpc_ticket_issue(const uint8_t secret[RRPC_TICKET_SECRET_LEN],
                               const char *principal, const char *service, int64_t expiry_ms,
                               const uint8_t *nonce, void *buf, size_t buflen, size_t *ret_len);

/*
 * Reads the unauthenticated fields of @ticket (no HMAC check; for logs and
 * tests).  @principal and @service (may be NULL) receive NUL-terminated
 * copies and need 256 bytes each.  Errors: RRPC_E_PROTO (malformed).
 */
RRPC_API int rrpc_ticket_peek(const void *ticket, size_t len, char *principal, char *service,
                              int64_t *ret_expiry_ms);

/* A verifier: one service, its secret(s), a replay cache. */
typedef struct rrpc_ticket_verifier rrpc_ticket_verifier;

/*
 * Creates a verifier for @service (copied) with @secret (copied; NULL: none
 * yet, every ticket is refused until rrpc_ticket_verifier_set_secret).
 * @skew_ms (>= 0) is the clock-skew allowance: a ticket is accepted until
 * expiry + skew.  On success *ret_v is the caller's (rrpc_ticket_verifier_
 * destroy).  Errors: -EINVAL, -ENOMEM.
 */
RRPC_API int rrpc_ticket_verifier_create(const char *service,
                                         const uint8_t secret[RRPC_TICKET_SECRET_LEN],
                                         int skew_ms, rrpc_ticket_verifier **ret_v);

/*
 * Replaces the secret of @v (copied).  The previous secret stays valid too
 * (until the next change), so a broker restart, which makes a new secret,
 * does not refuse tickets already handed out.  Thread-safe.
 */
RRPC_API void rrpc_ticket_verifier_set_secret(rrpc_ticket_verifier *v,
                                              const uint8_t secret[RRPC_TICKET_SECRET_LEN]);

/*
 * Checks @ticket at time @now_ms (ms since the Unix epoch; 0: now).
 * Returns 0 and records its nonce (a second use is refused), or
 * RRPC_E_TICKET (-1017) with the reason in @why (NUL-terminated, may be
 * NULL): malformed, bad signature, expired, replayed, for another service,
 * replay cache full, no secret yet.  When accepted and @principal is non-NULL it receives
 * the principal (256 bytes).  Thread-safe.
 */
RRPC_API int rrpc_ticket_verify(rrpc_ticket_verifier *v, const void *ticket, size_t len,
                                int64_t now_ms, char *principal, char *why, size_t whylen);

/*
 * rrpc_ticket_verify at the current time, in the shape of the gate callback
 * (rrpc_ticket_verify_fn, context.h) with @user the verifier:
 *     rrpc_ctx_require_ticket(ctx, rrpc_ticket_verify_cb, verifier);
 */
RRPC_API int rrpc_ticket_verify_cb(void *user, const void *ticket, size_t len, char *why,
                                   size_t whylen);

/* Frees @v.  Accepts NULL.  Nothing may use @v any more (a context gate). */
RRPC_API void rrpc_ticket_verifier_destroy(rrpc_ticket_verifier *v);

/* ---- the broker client ------------------------------------------------------ */

typedef struct rrpc_broker rrpc_broker;

/*
 * How to reach and authenticate to rrpcd.  Strings are copied by
 * rrpc_broker_open; NULL/0 fields take the default.
 */
typedef struct rrpc_broker_opts {
    const char *ca_file;     /* PEM CA that signed rrpcd's certificate (required) */
    const char *cert_file;   /* PEM client certificate for mutual TLS, or NULL */
    const char *key_file;    /* its private key (default: cert_file) */
    const char *token;       /* pre-shared token (sent once per TLS session), or NULL */
    const char *server_name; /* name or IP to verify in rrpcd's certificate
                                (default: the host of the address) */
    int timeout_ms;          /* per connect / round trip; default 5000 */
    int skew_ms;             /* ticket clock-skew allowance of servers; default 5000 */
    rrpc_log_fn log;         /* lease and re-registration events; NULL: RRPC_LOG_LEVEL */
    void *log_user;
    int log_level;           /* messages at or below (syslog levels); 0: LOG_INFO with @log */
} rrpc_broker_opts;

/*
 * Connects to the rrpcd at @addr ("HOST:PORT", "[IPv6]:PORT", or the same
 * behind "tls://") and authenticates: by the client certificate (the
 * principal is its subject CN) and/or @opts->token.  On success *ret_b is
 * the caller's, released with rrpc_broker_close().  If the connection later
 * drops it is made again on the next round trip.
 * Errors: -EINVAL (bad @addr or @opts), -ENOENT/-EACCES (a file cannot be
 * read), -ECONNREFUSED, -ETIMEDOUT, -EPROTO (TLS failed: rrpcd's certificate
 * did not verify, or rrpcd refused ours), -EACCES (the token was refused),
 * RRPC_E_VERSION (rrpcd speaks another control protocol version).  On
 * failure nothing is left and rrpc_broker_last_error(NULL) has the detail.
 */
RRPC_API int rrpc_broker_open(const char *addr, const rrpc_broker_opts *opts,
                              rrpc_broker **ret_b);

/*
 * Unregisters every service registered through @b (best effort), stops its
 * lease thread and frees it.  Accepts NULL.  A context that a registration
 * put a ticket gate on keeps a pointer into @b: destroy such contexts
 * (rrpc_ctx_destroy) before closing @b.
 */
RRPC_API void rrpc_broker_close(rrpc_broker *b);

/*
 * The detail of the last failure of @b on any thread (which file, what
 * rrpcd said, what to do); with @b NULL, the last failure of
 * rrpc_broker_open on the calling thread.  Valid until the next call on
 * @b.  Never NULL.
 */
RRPC_API const char *rrpc_broker_last_error(rrpc_broker *b);

/* The principal rrpcd authenticated @b as (certificate CN or token owner). */
RRPC_API const char *rrpc_broker_principal(rrpc_broker *b);

/*
 * Puts a ticket gate for @service on @ctx (rrpc_ctx_require_ticket): every
 * new connection of @ctx must then present a ticket for @service, and until
 * rrpc_broker_register succeeds every ticket is refused.  The core takes a
 * gate only before the context's first rrpc_listen, so call this (or
 * rrpc_broker_register) first, then listen, then register; this order lets
 * a server listen on port 0 and register the port it got.  Idempotent for
 * the same @ctx and @service.  One service per context.
 * Errors: -EINVAL, -EEXIST (@ctx serves another service through @b),
 * -EBUSY (@ctx already listens), -ENOMEM.
 */
RRPC_API int rrpc_broker_gate(rrpc_broker *b, rrpc_ctx *ctx, const char *service);

/*
 * Registers @service (1..255 bytes) at the @n (1..64) endpoint URIs @uris
 * ("tcp://HOST:PORT", "rdma://HOST:PORT": the addresses clients should
 * dial, not a wildcard or port 0) serving the QoS classes in @class_mask
 * (bit 1<<cls; 0: all).  Puts the gate on @ctx first if rrpc_broker_gate did
 * not.  rrpcd hands back the service's ticket secret (over TLS), which the
 * gate then checks tickets with.  A lease thread renews the registration and
 * registers again by itself when rrpcd lost it (restart, expiry); the secret
 * is then updated in place (tickets signed with the previous one stay good).
 * Strings are copied.  Errors: -EINVAL, RRPC_E_URI, -EPERM (the ACL does not
 * let this principal register @service), -EEXIST (already registered through
 * @b, or @ctx serves another service), -EBUSY (no gate yet and @ctx already
 * listens), connection errors as rrpc_broker_open.
 */
RRPC_API int rrpc_broker_register(rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                                  const char *const *uris, size_t n, unsigned class_mask);

/*
 * Removes the registration of @service (rrpcd forgets it now, not at lease
 * expiry) and stops renewing it.  The context keeps its gate (tickets issued
 * before still work until they expire); rrpc_broker_register may register
 * it again.  Errors: -ENOENT, connection errors.
 */
RRPC_API int rrpc_broker_unregister(rrpc_broker *b, const char *service);

/* One live endpoint of a looked-up service. */
typedef struct rrpc_service_endpoint {
    char uri[300];       /* "tcp://HOST:PORT" or "rdma://HOST:PORT" */
    unsigned class_mask; /* the QoS classes served (bit 1<<cls) */
} rrpc_service_endpoint;

/* The answer to a lookup: owned by the caller, freed with rrpc_service_info_free. */
typedef struct rrpc_service_info {
    size_t n_endpoints;
    rrpc_service_endpoint *endpoints; /* live endpoints, at least one */
    uint8_t ticket[RRPC_TICKET_MAX_LEN];
    size_t ticket_len;
    int64_t ticket_expiry_ms; /* ms since the Unix epoch */
} rrpc_service_info;

/*
 * Looks @service up: its live endpoints and a fresh single-use ticket.  On
 * success *ret_info is the caller's.  Errors: -ENOENT (no live
 * registration), -EPERM (the ACL does not let this principal look it up),
 * connection errors as rrpc_broker_open.
 */
RRPC_API int rrpc_broker_lookup(rrpc_broker *b, const char *service,
                                rrpc_service_info **ret_info);

/* Frees @info.  Accepts NULL. */
RRPC_API void rrpc_service_info_free(rrpc_service_info *info);

/*
 * Connects @ctx to @service by name: a lookup, then rrpc_connect_ticket to
 * each endpoint in turn (each attempt with a fresh ticket) until one is up,
 * waiting at most @timeout_ms per attempt.  @fn/@user and *ret_conn as in
 * rrpc_connect_sync: on success the handle is the caller's until
 * rrpc_conn_close.  Errors: those of rrpc_broker_lookup, then of the last
 * connection attempt (RRPC_E_TICKET, -ECONNREFUSED, -ETIMEDOUT, ...).
 */
RRPC_API int rrpc_connect_service(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                                  int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                  rrpc_conn **ret_conn);

#ifdef __cplusplus
}
#endif
#endif

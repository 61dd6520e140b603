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
 * A broker handle (rrpc_broker) is one authenticated client of one rrpcd
 * at a time, chosen from a list of brokers that share a registry (several
 * rrpcd on one etcd): when the current one is unreachable or its session
 * dies, the handle moves to the next (docs/broker.md, "Several brokers").
 * Every function may be called from any thread; round trips are serialised
 * on the handle.  All calls here block (at most the handle's timeout per
 * round trip) and must not be made from a callback of a context's loop.
 *
 * Tickets are usable without rrpcd too: rrpc_ticket_issue() signs one with
 * an Ed25519 key, a verifier checks them with the public keys it accepts
 * (the signature, expiry with a clock-skew allowance, a replay cache of
 * nonces, the service name, the server instance, the client identity).
 */
#ifndef ROCE_RPC_BROKER_H
#define ROCE_RPC_BROKER_H

#include <stddef.h>
#include <stdint.h>
#include <roce_rpc/export.h>
#include <roce_rpc/context.h>
#include <roce_rpc/rpc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tickets -------------------------------------------------------------- */

/*
 * Ticket layout, version 3 (all integers little-endian; docs/broker.md
 * §Ticket format):
 *   0   4  magic "RTKT"
 *   4   1  version: 3
 *   5   1  principal length P (1..255)
 *   6   1  service length S (1..255)
 *   7   1  reserved, 0
 *   8   8  expiry, ms since the Unix epoch (wall clock)
 *   16  16 nonce (random)
 *   32  16 the server instance id (all zero: bound to no instance)
 *   48  8  key id: the first 8 bytes of SHA-256 of the signing public key
 *   56  P  principal (the client identity rrpcd authenticated), then S service
 *           (no NULs)
 *   ..  64 Ed25519 signature over every byte before it
 * A connection presents the ticket followed by the identity the client
 * claims (rrpc_ticket_present):
 *   ..  1  identity length N (1..255)
 *   ..  N  identity (no NULs)
 * The verifier accepts the ticket only when that identity is the signed
 * principal.  Versions 1 and 2 (HMAC under a shared secret) are refused.
 */
#define RRPC_TICKET_NONCE_LEN 16
#define RRPC_TICKET_INSTANCE_LEN 16
#define RRPC_TICKET_KEY_LEN 32    /* an Ed25519 public key, raw */
#define RRPC_TICKET_KEY_ID_LEN 8  /* the first bytes of SHA-256 of the public key */
#define RRPC_TICKET_MAX_KEYS 8    /* public keys a verifier accepts at once */
/* The longest signed ticket, and the longest as presented (with an identity). */
#define RRPC_TICKET_SIGNED_MAX_LEN (56 + 255 + 255 + 64)
#define RRPC_TICKET_MAX_LEN (RRPC_TICKET_SIGNED_MAX_LEN + 1 + 255)

/* A signing key: an Ed25519 private key (only brokers hold one). */
typedef struct rrpc_ticket_key rrpc_ticket_key;

/*
 * Loads the PEM private key in the file @path (PKCS#8, as
 * `openssl genpkey -algorithm ed25519` writes it).  On success *ret_k is the
 * caller's (rrpc_ticket_key_free).  Errors: -ENOENT/-EACCES (cannot read
 * @path), -EINVAL (not a PEM private key), -EPROTONOSUPPORT (a key of
 * another type than Ed25519), -ENOMEM; @why (may be NULL) says which and
 * what to do.
 */
RRPC_API int rrpc_ticket_key_load(const char *path, rrpc_ticket_key **ret_k, char *why,
                                  size_t whylen);

/*
 * Makes a signing key from the 32-byte Ed25519 seed @seed, or a random one
 * when @seed is NULL (an rrpcd without a configured key; tests).  On success
 * *ret_k is the caller's.  Errors: -EIO (no randomness), -ENOMEM.
 */
RRPC_API int rrpc_ticket_key_new(const uint8_t *seed, rrpc_ticket_key **ret_k);

/* Copies the raw public half of @k to @pub (RRPC_TICKET_KEY_LEN bytes). */
RRPC_API void rrpc_ticket_key_public(const rrpc_ticket_key *k, uint8_t pub[RRPC_TICKET_KEY_LEN]);

/* Frees @k (cleansing it).  Accepts NULL. */
RRPC_API void rrpc_ticket_key_free(rrpc_ticket_key *k);

/*
 * Reads the Ed25519 public key in the PEM file @path (a PUBLIC KEY, as
 * `openssl pkey -pubout` writes it, or a private key, whose public half is
 * taken) into @pub.  Errors as rrpc_ticket_key_load.
 */
RRPC_API int rrpc_ticket_public_key_load(const char *path, uint8_t pub[RRPC_TICKET_KEY_LEN],
                                         char *why, size_t whylen);

/* The key id of the public key @pub: the first 8 bytes of its SHA-256. */
RRPC_API void rrpc_ticket_key_id(const uint8_t pub[RRPC_TICKET_KEY_LEN],
                                 uint8_t id[RRPC_TICKET_KEY_ID_LEN]);

/*
 * Makes a ticket for @principal to connect to @service, bound to the server
 * instance @instance (RRPC_TICKET_INSTANCE_LEN bytes; NULL or all zero: to
 * none), valid until @expiry_ms (ms since the Unix epoch), signed with @k.
 * @nonce may be NULL (a random one is drawn).  Writes it to @buf (@buflen >=
 * the ticket; RRPC_TICKET_SIGNED_MAX_LEN always suffices) and its length to
 * *ret_len.  Thread-safe.  Errors: -EINVAL (a name empty, longer than 255
 * bytes, or with a NUL), -ENOSPC (@buflen too small), -EIO (no randomness,
 * or the signature failed).
 */
RRPC_API int rrpc_ticket_issue(const rrpc_ticket_key *k, const char *principal,
                               const char *service, const uint8_t *instance, int64_t expiry_ms,
                               const uint8_t *nonce, void *buf, size_t buflen, size_t *ret_len);

/*
 * Writes to @buf what a connection presents: the signed @ticket (@len
 * bytes, copied as is) followed by the claimed @identity (1..255 bytes, no
 * NUL).  @buflen >= @len + 1 + strlen(@identity); RRPC_TICKET_MAX_LEN always
 * suffices.  rrpc_broker_lookup does this with the handle's principal.
 * Errors: -EINVAL (@ticket is not one signed ticket, a bad @identity),
 * -ENOSPC.
 */
RRPC_API int rrpc_ticket_present(const void *ticket, size_t len, const char *identity, void *buf,
                                 size_t buflen, size_t *ret_len);

/*
 * Reads the unauthenticated fields of @ticket, signed or presented (no
 * signature check; for logs and tests).  @principal and @service (may be
 * NULL) receive NUL-terminated copies and need 256 bytes each.  Errors:
 * RRPC_E_PROTO (malformed, or not version 3).
 */
RRPC_API int rrpc_ticket_peek(const void *ticket, size_t len, char *principal, char *service,
                              int64_t *ret_expiry_ms);

/*
 * Copies the (unauthenticated) instance id of @ticket, signed or presented,
 * to @instance (RRPC_TICKET_INSTANCE_LEN bytes).  Errors: -ENOENT (bound to
 * no instance), RRPC_E_PROTO (malformed).
 */
RRPC_API int rrpc_ticket_peek_instance(const void *ticket, size_t len,
                                       uint8_t instance[RRPC_TICKET_INSTANCE_LEN]);

/* A verifier: one service, the public keys it accepts, a replay cache, and
 * optionally the server instance it belongs to. */
typedef struct rrpc_ticket_verifier rrpc_ticket_verifier;

/*
 * Creates a verifier for @service (copied) that accepts no key yet: every
 * ticket is refused until rrpc_ticket_verifier_set_keys.  @skew_ms (>= 0)
 * is the clock-skew allowance: a ticket is accepted until expiry + skew.
 * On success *ret_v is the caller's (rrpc_ticket_verifier_destroy).
 * Errors: -EINVAL, -ENOMEM.
 */
RRPC_API int rrpc_ticket_verifier_create(const char *service, int skew_ms,
                                         rrpc_ticket_verifier **ret_v);

/*
 * Replaces the public keys @v accepts with the @n (0..RRPC_TICKET_MAX_KEYS)
 * raw Ed25519 keys at @keys (@n * RRPC_TICKET_KEY_LEN bytes, copied): a key
 * not in the new set is refused from now on.  The broker client calls this
 * with rrpcd's current and previous keys at every registration and lease
 * renewal.  Errors: -EINVAL (@n too large, or OpenSSL refuses a key);
 * @v is unchanged then.  Thread-safe.
 */
RRPC_API int rrpc_ticket_verifier_set_keys(rrpc_ticket_verifier *v, const uint8_t *keys,
                                           size_t n);

/*
 * Binds @v to the server instance @instance (copied; RRPC_TICKET_INSTANCE_LEN
 * bytes, not all zero).  From then on @v accepts only tickets issued for
 * that instance: a ticket used on another instance of the same service or
 * on an earlier run of this server (whose replay cache is gone) is refused,
 * so a ticket is used at most once anywhere.  Without an instance, @v
 * accepts only tickets bound to none.  Give each run of a server a new
 * random instance (rrpc_broker_gate does).  Errors: -EINVAL (NULL, or all
 * zero).  Thread-safe.
 */
RRPC_API int rrpc_ticket_verifier_set_instance(rrpc_ticket_verifier *v,
                                               const uint8_t instance[RRPC_TICKET_INSTANCE_LEN]);

/*
 * Checks the presented ticket @ticket (rrpc_ticket_present) at time @now_ms
 * (ms since the Unix epoch; 0: now).  Returns 0 and records its nonce (a
 * second use is refused), or RRPC_E_TICKET (-1017) with the reason in @why
 * (NUL-terminated, may be NULL): malformed, an old version (HMAC), no
 * identity presented, signed by a key @v does not accept (unknown, or
 * rotated out), bad signature, for another service, for another server
 * instance (or for none when @v has one), issued to another identity than
 * the one presented, expired, replayed, the client identity's share of the
 * replay cache full (256 tickets a second over the ticket lifetime + skew,
 * 16..16384; RRPC_TICKET_RATE for the gates of rrpc_broker_gate; other
 * clients are still accepted), no keys yet.
 * When accepted and @principal is non-NULL it receives the principal (256
 * bytes).  Thread-safe.
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

/* The most brokers a broker address list (rrpc_broker_open) may name. */
#define RRPC_BROKER_MAX_ADDRS 16

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
                                (default: the host of each broker's address;
                                set, it is checked for every broker of a list) */
    int timeout_ms;          /* per broker connect (TCP, TLS and hello together)
                                and per round trip; default 5000 */
    int skew_ms;             /* ticket clock-skew allowance of servers; default 5000 */
    rrpc_log_fn log;         /* lease and re-registration events; NULL: RRPC_LOG_LEVEL */
    void *log_user;
    int log_level;           /* messages at or below (syslog levels); 0: LOG_INFO with @log */
    uint64_t reserved[4]; /* must be zero (new fields come out of it) */
} rrpc_broker_opts;

/*
 * Connects to the rrpcd at @addr ("HOST:PORT", "[IPv6]:PORT", or the same
 * behind "tls://") and authenticates: by the client certificate (the
 * principal is its subject CN) and/or @opts->token.  On success *ret_b is
 * the caller's, released with rrpc_broker_close().  If the connection later
 * drops it is made again on the next round trip.
 *
 * @addr may list up to RRPC_BROKER_MAX_ADDRS brokers separated by commas
 * ("a:7700,b:7700"; blanks around an entry are ignored), each checked here:
 * an empty, malformed or repeated entry, or too many, is -EINVAL naming the
 * entry.  They must share one registry (rrpcd on etcd).  The handle talks to
 * one at a time, the first that answers, from the first of the list.  When
 * a session cannot be made or dies, the handle tries the brokers in list
 * order, beginning with the current one and going round once, each for at
 * most timeout_ms (TCP, TLS and hello together); a round trip that failed on
 * the dead session is sent once more on the new one.  So a round trip takes
 * at most (number of brokers + 2) × timeout_ms before it is answered or
 * fails.  Every broker that fails and every move to another is logged (@log,
 * LOG_WARNING) with the reason.  When all fail, the error
 * (rrpc_broker_last_error) names each broker and its reason, and the code is
 * the last broker's.  A lookup after a move goes to the new broker;
 * registrations are renewed there, or registered again (same instance id)
 * when it does not know them.  Connections already made are not touched:
 * they never depended on the broker.
 *
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
 * Writes the address of the broker @b is using ("HOST:PORT", or
 * "[IPv6]:PORT"; while no session is up, the one tried first next) to @buf
 * (@len bytes, NUL-terminated) and returns its index in the address list
 * (0 for the first).  Thread-safe; does not wait for a round trip.
 * Errors: -EINVAL, -ENOSPC (@len too small).
 */
RRPC_API int rrpc_broker_current(rrpc_broker *b, char *buf, size_t len);

/* What a broker says of itself (rrpc_broker_status). */
typedef struct rrpc_broker_state {
    char broker[300];       /* the broker that answered ("HOST:PORT") */
    char registry[16];      /* "memory" or "etcd" */
    int degraded;           /* 1: its registry on etcd is unreachable (lookups answer from
                               its cache, registrations are refused); 0 otherwise */
    char why[300];          /* why it is degraded; "" when it is not */
    uint64_t services;      /* services with at least one live registration */
    uint64_t registrations; /* live registrations, all services together */
    uint64_t sessions;      /* control sessions open at that broker */
    uint64_t reserved[4];
} rrpc_broker_state;

/*
 * Asks the broker @b uses how it is (one round trip, failing over along the
 * list as the others do): its registry, whether it is degraded and why, and
 * its counts.  Any authenticated principal may ask.  Errors: -EINVAL,
 * -EPROTO (an answer that is not a status), connection errors as
 * rrpc_broker_open.
 */
RRPC_API int rrpc_broker_status(rrpc_broker *b, rrpc_broker_state *ret);

/*
 * Puts a ticket gate for @service on @ctx (rrpc_ctx_require_ticket): every
 * new connection of @ctx must then present a ticket for @service, and until
 * rrpc_broker_register succeeds every ticket is refused.  The gate draws a
 * random instance id (new for every gate, so for every run of a server) and
 * accepts only tickets rrpcd issued for that instance: a ticket used on
 * another instance of the service, or before a restart, is refused here.  The core takes a
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
 * (bit 1<<cls; 0: all), with the gate's instance id.  Puts the gate on @ctx
 * first if rrpc_broker_gate did not.  rrpcd answers with the public keys
 * its tickets are signed with (the current one and those still in their
 * rotation overlap), over TLS; the gate accepts exactly those.  A lease
 * thread renews the registration, takes the keys of every renewal's answer
 * (so a key rotated out at rrpcd stops being accepted at the next renewal),
 * and registers again by itself when rrpcd lost it (restart, expiry).
 * When @ctx was made with RRPC_REQUIRE_ESP (rrpc_ctx_require_esp), the
 * registration asks rrpcd to hand its tickets only to clients whose host
 * has an ESP pair with the endpoints' hosts, as rrpc-agents report them
 * (docs/deployment.md); an rrpcd that does not say it keeps that is older
 * than the flag, and the register fails with -EPROTO (undone at rrpcd).
 * Strings are copied.  Errors: -EINVAL, RRPC_E_URI, -EPERM (the ACL does not
 * let this principal register @service), -ENOSPC (a limit of rrpcd: too many
 * endpoints, instances of @service, or bytes in its lookup answer; the detail
 * names the setting), -EEXIST (already registered through @b, or @ctx serves
 * another service), -EBUSY (no gate yet and @ctx already listens),
 * connection errors as rrpc_broker_open.
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
    unsigned class_mask; /* the QoS classes served (bit 1<<cls; RRPC_CLASS_MASK_ALL) */
    size_t instance;     /* the server behind it: an index into rrpc_service_info.instances */
} rrpc_service_endpoint;

/* One live registration (a server instance) of a looked-up service. */
typedef struct rrpc_service_instance {
    uint8_t id[RRPC_TICKET_INSTANCE_LEN]; /* all zero: the server registered none */
    uint8_t ticket[RRPC_TICKET_MAX_LEN];  /* as presented (with this handle's identity):
                                             accepted once, by this instance only */
    size_t ticket_len;
} rrpc_service_instance;

/* The answer to a lookup: owned by the caller, freed with rrpc_service_info_free. */
typedef struct rrpc_service_info {
    size_t n_endpoints;
    rrpc_service_endpoint *endpoints; /* live endpoints, at least one, grouped by instance */
    uint8_t ticket[RRPC_TICKET_MAX_LEN]; /* the ticket of instances[0], endpoints[0]'s */
    size_t ticket_len;
    int64_t ticket_expiry_ms; /* ms since the Unix epoch, of every ticket */
    size_t n_instances;       /* at least one */
    rrpc_service_instance *instances;
} rrpc_service_info;

/*
 * Looks @service up: its live instances, their endpoints, and for each
 * instance a fresh ticket that only that instance accepts, once (rrpcd
 * rotates the order from lookup to lookup; endpoints[0] belongs to
 * instances[0]).  On success *ret_info is the caller's.  Errors: -ENOENT
 * (no live registration), -EPERM (the ACL does not let this principal look
 * it up), connection errors as rrpc_broker_open.
 */
RRPC_API int rrpc_broker_lookup(rrpc_broker *b, const char *service,
                                rrpc_service_info **ret_info);

/* Frees @info.  Accepts NULL. */
RRPC_API void rrpc_service_info_free(rrpc_service_info *info);

/*
 * Connects @ctx to @service by name: a lookup, then rrpc_connect_ticket to
 * each endpoint in turn, with the ticket of its instance (each attempt with
 * a ticket not presented before: a fresh lookup when one was) until one is up,
 * waiting at most @timeout_ms per attempt.  @fn/@user and *ret_conn as in
 * rrpc_connect_sync: on success the handle is the caller's until
 * rrpc_conn_close.  Errors: those of rrpc_broker_lookup, then of the last
 * connection attempt (RRPC_E_TICKET, -ECONNREFUSED, -ETIMEDOUT, ...).
 */
RRPC_API int rrpc_connect_service(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                                  int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                  rrpc_conn **ret_conn);

/* ---- watching a service ---------------------------------------------------- */

/*
 * A watch (rrpc_broker_watch) follows the set of live instances of one
 * service: rrpcd pushes the set whenever it changes (a server registered,
 * unregistered, its lease expired; with the registry on etcd, through any
 * broker), and the watch turns each push into events: an instance that
 * came (RRPC_WATCH_ADDED) or left (RRPC_WATCH_REMOVED).  An instance is its
 * instance id and its endpoints: one that registers again elsewhere leaves
 * and comes.  The first events are the instances live when the watch
 * starts.
 *
 * A watch has a TLS session of its own (to the broker its handle uses, with
 * the same list and credentials; the ACL's "lookup" rule decides who may
 * watch) and a thread that reads it.  When the session dies the thread
 * subscribes again, failing over along the list as round trips do, and
 * reports only what changed meanwhile.  rrpcd answers a watch session at
 * most 64 subscriptions and holds at most one pending set per subscription
 * for a reader that is slow; the thread holds at most 4096 events not taken
 * yet, then stops reading (rrpcd then coalesces).
 */
typedef struct rrpc_broker_watch rrpc_broker_watch;

#define RRPC_WATCH_ADDED 1
#define RRPC_WATCH_REMOVED 2
#define RRPC_WATCH_MAX_ENDPOINTS 64

/* One change of a watched service's set of instances. */
typedef struct rrpc_watch_event {
    int type;                                   /* RRPC_WATCH_ADDED or RRPC_WATCH_REMOVED */
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN]; /* all zero: the server registered none */
    size_t n_endpoints;
    rrpc_service_endpoint endpoints[RRPC_WATCH_MAX_ENDPOINTS]; /* .instance is 0 */
} rrpc_watch_event;

/*
 * Starts watching @service (1..255 bytes) through @b's list of brokers:
 * makes the watch's own session and subscribes before it returns.  On
 * success *ret_w is the caller's (rrpc_broker_watch_close); @b may be closed
 * before it (the watch holds what it needs).  Errors: -EINVAL, -EPERM (the
 * ACL does not let this principal look @service up), connection errors as
 * rrpc_broker_open, with the detail in rrpc_broker_last_error(@b).
 */
RRPC_API int rrpc_broker_watch_open(rrpc_broker *b, const char *service,
                                    rrpc_broker_watch **ret_w);

/*
 * Takes the next event of @w into *@ev, waiting up to @timeout_ms (>= 0).
 * Returns 0 (an event), -ETIMEDOUT (none came), or once per failure the
 * error of a subscription that failed again (every broker unreachable:
 * -ECONNREFUSED, -ETIMEDOUT, ...; detail in rrpc_broker_watch_last_error);
 * the watch keeps trying, with a backoff up to 2 s, and reports what changed
 * once it is back.  Thread-safe; one taker at a time gets each event.
 */
RRPC_API int rrpc_broker_watch_next(rrpc_broker_watch *w, int timeout_ms,
                                    rrpc_watch_event *ev);

/* The detail of the watch's last failure (which broker, why).  Never NULL. */
RRPC_API const char *rrpc_broker_watch_last_error(rrpc_broker_watch *w);

/* Stops the thread (waiting for a subscription under way: at most a round trip,
 * see rrpc_broker_open), closes the session, frees @w and its events.  Accepts
 * NULL.  No other thread may use @w any more. */
RRPC_API void rrpc_broker_watch_close(rrpc_broker_watch *w);

/* ---- a reconnecting service handle ------------------------------------------ */

/*
 * A service handle (rrpc_service) keeps one connection of a context to a
 * service named in the broker, and makes it again when it is gone: after
 * the connection went down (the server died, was restarted, moved), the next
 * use does a fresh lookup through the broker (new endpoints, a new ticket)
 * and connects.  Failed attempts are spaced by an exponential backoff with
 * jitter between backoff_min_ms and backoff_max_ms; a successful connection
 * resets it.  Calls are never retried: a call in flight when the connection
 * drops fails (RRPC_E_CONN_LOST), exactly once, and the server may or may not
 * have run it; a call made after the service is back reconnects.
 *
 * Every function may be called from any thread (a mutex guards the handle;
 * one thread connects at a time, the others that need a connection wait for
 * its outcome).  All of them may block (a broker round trip and a connection
 * attempt) and none may be made from a callback of a context's loop.  The
 * handle never holds its mutex while it calls into the context, so it adds
 * no lock order of its own.
 */
typedef struct rrpc_service rrpc_service;

/* Options of rrpc_service_open; NULL or 0 fields take the default. */
typedef struct rrpc_service_opts {
    int backoff_min_ms;     /* delay after the first failed attempt; default 100 */
    int backoff_max_ms;     /* the delay doubles up to this (jitter: the upper half
                               of the doubled delay, never below the minimum);
                               default 5000, at least backoff_min_ms */
    int connect_timeout_ms; /* per endpoint of an attempt (rrpc_connect_service);
                               default 3000 */
    int wait_ms;            /* the @wait_ms of rrpc_service_call_sync's
                               rrpc_service_conn; default 0: while backing off,
                               calls fail at once with the last attempt's error */
    uint64_t reserved[4]; /* must be zero (new fields come out of it) */
} rrpc_service_opts;

/*
 * Makes a handle for @service (1..255 bytes, copied) reached through @b with
 * connections of @ctx.  Nothing is looked up or connected yet: the first
 * rrpc_service_conn or rrpc_service_call_sync does it, so this succeeds while
 * the service is down.  @ctx and @b stay the caller's and must outlive the
 * handle: close the handle (rrpc_service_close) before rrpc_ctx_destroy(@ctx)
 * and rrpc_broker_close(@b).  On success *ret_svc is the caller's, released
 * with rrpc_service_close.  Errors: -EINVAL (a NULL argument, a bad name, a
 * negative option, backoff_max_ms below backoff_min_ms), -ENOMEM.
 */
RRPC_API int rrpc_service_open(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                               const rrpc_service_opts *opts, rrpc_service **ret_svc);

/*
 * Closes the connection of @svc (pending calls on it fail with RRPC_E_CLOSED)
 * and frees @svc.  Accepts NULL.  Waits for a connection attempt of another
 * thread to end.  Every connection borrowed with rrpc_service_conn must have
 * been released first, and no other thread may use @svc any more.
 */
RRPC_API void rrpc_service_close(rrpc_service *svc);

/*
 * Borrows the connection of @svc: the current one when it is up; otherwise
 * (none yet, or it went down) a new one, from a fresh lookup and ticket
 * (rrpc_connect_service), when the backoff allows an attempt now.  It keeps
 * making attempts, spaced by the backoff, while the next one is due within
 * @wait_ms (>= 0) of the call, and fails with the last attempt's error as
 * soon as it is not: with @wait_ms 0, it makes an attempt only when one is
 * due and otherwise fails at once.  When another thread is connecting, it
 * waits for that attempt's outcome.  An attempt takes up to the broker's
 * timeout per lookup plus connect_timeout_ms per endpoint, whatever @wait_ms.
 * On success *ret_conn may carry calls (rrpc_call, rrpc_call_sync, ...)
 * until rrpc_service_conn_release(@svc, *ret_conn), which must follow exactly
 * once; the handle stays valid until then even if the connection goes down
 * or @svc connects again meanwhile (calls on it then fail with RRPC_E_CLOSED).
 * Do not rrpc_conn_close it: it stays @svc's.
 * Errors: -EINVAL, RRPC_E_CLOSED (@svc is being closed), the last attempt's
 * error (those of rrpc_connect_service: -ENOENT when the service has no live
 * registration, -EPERM, -ECONNREFUSED, -ETIMEDOUT, RRPC_E_TICKET, ...), with
 * the detail in rrpc_service_last_error.
 */
RRPC_API int rrpc_service_conn(rrpc_service *svc, int wait_ms, rrpc_conn **ret_conn);

/*
 * Gives back a connection borrowed with rrpc_service_conn; @conn may be
 * invalid once this returns (a connection that @svc replaced is closed when
 * its last borrower releases it).  @conn not borrowed from @svc is ignored.
 * Accepts NULL.
 */
RRPC_API void rrpc_service_conn_release(rrpc_service *svc, rrpc_conn *conn);

/*
 * rrpc_call_sync on the connection of @svc: borrows it (rrpc_service_conn
 * with the handle's wait_ms), calls, releases.  Returns the status as
 * rrpc_call_sync (0 with the response in *ret_data and *ret_len, malloc'ed, the
 * caller's to free(); an application code > 0; a negative library code), or
 * the error of rrpc_service_conn when there is no connection (then nothing
 * was sent).  A call that fails with RRPC_E_CONN_LOST or RRPC_E_CLOSED (its
 * connection went down while it was in flight) is not sent again: the
 * server may or may not have run it.  @svc then drops that connection, and
 * the next call looks the service up again and reconnects.
 */
RRPC_API int rrpc_service_call_sync(rrpc_service *svc, const char *method, const void *req,
                                    size_t len, const rrpc_call_opts *opts, void **ret_data,
                                    size_t *ret_len);

/* Counters and state of a service handle (rrpc_service_stats). */
typedef struct rrpc_service_stat {
    uint64_t attempts;  /* connection attempts made (each begins with a lookup) */
    uint64_t failures;  /* attempts that failed */
    uint64_t connects;  /* attempts that gave a connection */
    uint64_t drops;     /* connections found down (and replaced on next use) */
    int up;             /* 1 while the current connection is up (as far as known) */
    int last_error;     /* the last attempt's error, 0 when it succeeded */
    int backoff_ms;     /* ms until the next attempt is allowed; 0: one may be made now */
} rrpc_service_stat;

/* Fills *ret with the counters of @svc.  Errors: -EINVAL. */
RRPC_API int rrpc_service_stats(rrpc_service *svc, rrpc_service_stat *ret);

/*
 * The detail of the last failed attempt of @svc (what the broker said,
 * which endpoint refused, when the next attempt is due), in a buffer of the
 * calling thread valid until its next call of this function.  Never NULL
 * ("" when there was none).
 */
RRPC_API const char *rrpc_service_last_error(rrpc_service *svc);

#ifdef __cplusplus
}
#endif
#endif

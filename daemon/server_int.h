/* SPDX-License-Identifier: MIT */
/*
 * The server's files and what crosses between them (rrpcd.h has what the
 * rest of rrpcd sees: server_start, server_stop):
 *
 *   server.c    the listener: TLS context, listen, accept (max_connections,
 *               evicting anonymous sessions first), the sweep timer
 *   admit.c     per-source session counts, rate-limited refusal logs
 *   session.c   one session: non-blocking TLS, the frame reader (each frame
 *               goes to srv->handle_frame), the answers queued, timeouts
 *   dispatch.c  the requests: hello, register, renew, unregister, status,
 *               watch and unwatch, each checked as wire input
 *   lookup.c    lookup: instances in rotation and the tickets issued; of a
 *               service that requires ESP, only instances whose host has a
 *               pair with the client's host
 *   pairs.c     the ESP pairs rrpc-agents report (op pairs: dispatch.c)
 *
 * The calls go one way: server -> dispatch -> lookup -> session -> admit
 * (server also to session and admit, dispatch to session).
 *   (answer.c, rrpcd.h: how a registration appears in answers; the etcd
 *   store sizes registrations with it too)
 *
 * Everything runs on the loop thread.  No file reaches for another's
 * statics: a session knows its server (c->srv), the server holds the
 * registry, the store and the watches it was handed or made.
 */
#ifndef RRPCD_SERVER_INT_H
#define RRPCD_SERVER_INT_H

#include <ev.h>
#include <msgpack.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include "rrpcd.h"

#define SOURCE_BUCKETS 1024
#define PRINCIPAL_BUCKETS 1024
#define EVICT_LOG_EVERY_MS 10000 /* evictions are logged at most this often, with a count */

/* The sessions of one source address (for max_connections_per_source). */
struct source {
    struct source *next;
    int family;
    uint8_t addr[16];
    int n;
};

/*
 * What one authenticated principal holds (admit.c): its sessions
 * (max_sessions_per_principal), the bytes its sessions make rrpcd hold
 * (partly received requests, answers not sent yet: max_held_per_principal),
 * and its register rate (max_registers_per_s, a token bucket).  Kept while
 * it has sessions or bytes, or its bucket is not full.
 */
struct principal {
    struct principal *next;
    int sessions;
    size_t held;
    double reg_tokens;
    int64_t reg_ms; /* when reg_tokens was last brought up to date */
    char name[256];
};

/* ---- pairs.c: the ESP pairs rrpc-agents report --------------------------------- */

#define PAIRS_REPORT_TTL_MS 30000 /* a report not renewed this long is dropped */

/* A host's address: AF_INET (the first 4 bytes) or AF_INET6; an IPv4-mapped
 * IPv6 address is kept as the IPv4 one (host_addr_normalize). */
struct host_addr {
    int family;
    uint8_t addr[16];
};
/* One pair of a report: the peer host, and until when the pair holds (monotonic). */
struct pair_entry {
    struct host_addr peer;
    int64_t until_ms;
};
struct pairs;

void host_addr_normalize(struct host_addr *a);
/* The IP literal @s (no host name) into *@out; with @family not 0, only of
 * that family (after normalizing).  false otherwise. */
bool host_addr_parse(const char *s, int family, struct host_addr *out);
const char *host_addr_text(const struct host_addr *a, char *buf, size_t len);
/* An empty table, or NULL without memory; pairs_free: NULL is nothing. */
struct pairs *pairs_new(void);
void pairs_free(struct pairs *p);
/* The report of the agent of @local (its @n pairs copied), sent on the session
 * @serial at @now: replaces the last one of @local.  -ENOSPC when @local has
 * none and @max_agents hosts have, -ENOMEM. */
int pairs_report(struct pairs *p, const struct host_addr *local, const struct pair_entry *e,
                 size_t n, uint64_t serial, int64_t now, size_t max_agents);
/* The session @serial that reported for @local ended: its report goes, unless
 * a later session replaced it. */
void pairs_session_gone(struct pairs *p, const struct host_addr *local, uint64_t serial);
/* Drops the reports not renewed within PAIRS_REPORT_TTL_MS. */
void pairs_sweep(struct pairs *p, int64_t now);
/* Whether @a's agent reports a pair with @b and @b's agent one with @a, both
 * unexpired at @now. */
bool pairs_agreed(struct pairs *p, const struct host_addr *a, const struct host_addr *b,
                  int64_t now);
/* Hosts with a report held. */
size_t pairs_count(const struct pairs *p);

struct server {
    struct ev_loop *loop;
    struct config *cfg;
    struct registry *reg;
    struct store *st;
    struct watch *watch;
    struct pairs *pairs;
    SSL_CTX *sslctx;
    int lfd;
    ev_io accept_w;
    ev_timer sweep_w, accept_pause_w;
    struct conn *conns, *conns_tail; /* the sessions, oldest first */
    int n_conns;
    uint64_t serials;  /* the last session's serial */
    unsigned rotation; /* lookup: the instance that comes first next time */
    /* lookup.c: the live registrations of the service looked up, a buffer kept
     * from lookup to lookup and grown to the most a service has held live
     * (max_instances_per_service bounds only this rrpcd's registers, not
     * those learnt from etcd). */
    struct registration **lookup_regs;
    size_t lookup_cap;
    struct source *sources[SOURCE_BUCKETS];
    /* What a session's frame reader hands each frame to (dispatch_frame). */
    void (*handle_frame)(struct conn *c, const uint8_t *buf, size_t len);
    int64_t refusal_logged_ms; /* admit.c: the last refusal logged, and those since */
    unsigned refusals_quiet;
    int64_t evict_logged_ms; /* admit.c: the last eviction logged, and those since */
    unsigned evictions_quiet;
    struct principal *principals[PRINCIPAL_BUCKETS];
    size_t held; /* bytes of partly received requests and unsent answers, all sessions */
    int64_t principals_swept_ms;
    int64_t pairs_swept_ms;
};

/*
 * A session.  Until hello succeeds it is "anonymous": one deadline from its
 * accept (auth_timeout_ms) that nothing it sends extends, frames of at most
 * auth_max_frame bytes, and it is the first to go when max_connections is
 * reached.  Once authenticated, the timer is the idle timeout.
 */
struct conn {
    struct server *srv;
    struct conn *prev, *next; /* the server's list of sessions, oldest first */
    ev_io io;
    ev_timer timer;
    int fd;
    SSL *ssl;
    struct source *src;
    struct principal *pr; /* once authenticated */
    int64_t last_rx_ms;   /* monotonic: accept, or the last time bytes came */
    size_t held;          /* what of srv->held is this session's: frame_cap + wcap */
    bool handshaken, closing, draining;
    bool authed;
    bool idle_timer; /* the timer has been switched to the idle timeout */
    char peer[64];
    char cert_cn[256]; /* "" without a verified client certificate */
    char principal[256];
    uint8_t hdr[4];
    size_t hdr_got;
    uint8_t *frame;    /* the body being read: frame_got of frame_len bytes, room for frame_cap */
    size_t frame_len, frame_got, frame_cap;
    uint8_t *wbuf;
    size_t wlen, woff, wcap;
    uint64_t serial; /* names the session to answers that come later (etcd writes) */
    bool agent;      /* it sent a pairs report, for agent_local: dropped when it ends */
    struct host_addr agent_local;
};

/* ---- admit.c ----------------------------------------------------------------- */

/* The entry of @ss's address with one more session, or NULL when that address has
 * max_connections_per_source (*@ret_full) or there is no memory. */
struct source *admit_source_get(struct server *srv, const struct sockaddr_storage *ss,
                                bool *ret_full);
void admit_source_put(struct server *srv, struct source *s);
/* A refusal at accept, logged at most once a second with the number left unlogged. */
void admit_log_refusal(struct server *srv, const char *peer, const char *why);
/*
 * At the session cap, the session to close for a new one from @src (already
 * counted in @src->n): an anonymous session of @src itself or of an address
 * holding at least as many; of those, one of the address holding the most,
 * then one without a TLS handshake, then the one silent longest.  NULL when
 * there is none (every candidate authenticated).
 */
struct conn *admit_pick_victim(struct server *srv, const struct source *src);
/* Closes @victim for a new session from @peer; logs it at most once per
 * EVICT_LOG_EVERY_MS with the count since, and counts it in the metrics. */
void admit_evict(struct server *srv, struct conn *victim, const char *peer);
/* Counts an authenticated session of @name: its entry, or NULL with the reason in
 * @why (max_sessions_per_principal, or no memory). */
struct principal *admit_principal_get(struct server *srv, const char *name, char *why,
                                      size_t whylen);
/* The session of @pr ended (NULL: nothing). */
void admit_principal_put(struct server *srv, struct principal *pr);
/* Frees entries that hold nothing and whose bucket is full again (called now and then). */
void admit_principals_sweep(struct server *srv);
/* Whether @pr may register now (a token of its bucket taken); false past
 * max_registers_per_s. */
bool admit_register_rate(struct server *srv, struct principal *pr);
/* Whether @c may hold @more bytes more (partly received request, answer): within
 * max_held_per_principal for its principal and max_held_total for all; false with
 * the reason in @why. */
bool admit_hold_ok(struct conn *c, size_t more, char *why, size_t whylen);
/* @c now holds @held bytes (its frame buffer's and write buffer's sizes). */
void admit_held(struct conn *c, size_t held);

/* ---- session.c --------------------------------------------------------------- */

/* A new session on the accepted, non-blocking @fd (TLS not begun), in @srv's list,
 * its timers started; NULL without memory (@fd is then the caller's). */
struct conn *session_new(struct server *srv, int fd, struct source *src, const char *peer);
/* Closes and frees @c; @why is logged (NULL: nothing). */
void session_close(struct conn *c, const char *why);
/* Feeds bytes read from @c to its frame reader, which hands each frame to
 * c->srv->handle_frame. */
void session_feed(struct conn *c, const uint8_t *p, size_t n);
/* The session @c should wait for @events (EV_READ, EV_WRITE). */
void session_set_events(struct conn *c, int events);
/* A watch_push_fn: queues the frame @buf to @c. */
int session_push(struct conn *c, const void *buf, size_t len);
/* The OpenSSL error queue's first reason, or "connection closed". */
const char *session_ssl_reason(void);

/* An answer: begin with @n extra map entries, pack them, then answer_end. */
struct answer {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
    bool ok; /* only ok answers can be refused for what they would make rrpcd hold */
};
void answer_begin(struct answer *a, uint64_t id, bool ok, uint32_t n);
/* Queues it to @c (or, above the frame limit, an error instead). */
void answer_end(struct conn *c, struct answer *a);
void answer_error(struct conn *c, uint64_t id, enum rrpci_ctl_err code, const char *msg);
/* Answers with an error and closes the session once it has gone out. */
void answer_fatal(struct conn *c, uint64_t id, enum rrpci_ctl_err code, const char *msg);

/* ---- dispatch.c, lookup.c ------------------------------------------------------ */

/* One frame of @len bytes from @c: checked, then handled by its op. */
void dispatch_frame(struct conn *c, const uint8_t *buf, size_t len);
/* A store_done_fn (@arg: the server). */
bool dispatch_register_done(void *arg, uint64_t serial, uint64_t req_id, struct registration *r,
                            int err, const char *why);
void op_lookup(struct conn *c, uint64_t id, const msgpack_object *m);
/* pairs: rrpc-agent's report (@len: the frame's bytes). */
void op_pairs(struct conn *c, uint64_t id, const msgpack_object *m, size_t len);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The broker client's files and what crosses between them (the public side
 * is include/roce_rpc/broker.h):
 *
 *   client.c    the handle: open, close, status, a second one for a watch
 *   error.c     its errors (rrpc_broker_last_error) and its log
 *   wait.c      the one way a thread of the client waits: a monotonic
 *               condition variable with a deadline
 *   session.c   one TLS session with one rrpcd: connect, hello, TLS I/O,
 *               the framing of requests, answers and pushes
 *   failover.c  the list of brokers, and a round trip that (re)makes the
 *               session down that list
 *   gate.c      a context's ticket gate (its verifier and instance id)
 *   lease.c     register, renew, unregister and the lease thread
 *   lookup.c    lookup, and connecting to a service by name
 *   watch.c     watching a service: a session and a thread of its own
 *   service.c   the reconnecting service handle (rrpc_service)
 *   proto.c     the control schema shared with rrpcd (proto.h)
 *
 * Locks: @io serialises round trips and guards the session and the
 * registrations; @lock guards the lease thread's stop flag and wake-up, the
 * current broker's name and the error text.  @io is never taken while @lock
 * is held.
 */
#ifndef RRPCI_BROKER_CLIENT_INT_H
#define RRPCI_BROKER_CLIENT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

#include <msgpack.h>
#include <openssl/ssl.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker/proto.h"

#define ERR_MAX 4096 /* room for the reason of every broker of a list */
#define HOST_MAX 256
#define WHY_MAX 240  /* one broker's reason in the error of a list that failed */

/* Sets how many tickets a second one client identity may use on @v (its share of the
 * replay cache: @per_s times the ticket lifetime + skew, 16..16384).  ticket.c. */
void rrpci_ticket_verifier_set_rate(rrpc_ticket_verifier *v, int per_s);

/* A context's gate, and its registration when it has one (gate.c, lease.c). */
struct reg {
    struct reg *next;
    char service[256];
    rrpc_ctx *ctx;
    struct rrpci_endpoint *eps;
    size_t n_eps;
    unsigned class_mask;
    /* the context's RRPC_REQUIRE_ESP, read when it registered: the lease
     * thread registers again without touching the context, which may be
     * gone by then (rrpc_broker_close's order) */
    bool require_esp;
    uint64_t id;       /* rrpcd's registration id; 0 while not registered */
    uint32_t lease_ms;
    int64_t due_ms;    /* monotonic: next renew (or retry) */
    int backoff_ms;
    rrpc_ticket_verifier *v;
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN]; /* this gate's; tickets are bound to it */
};

struct rrpc_broker {
    pthread_mutex_t io;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* @lock: stop, or kick (the lease thread looks again) */
    pthread_t thread;
    bool thread_started, stop, kick;

    /* The list of brokers (rrpc_broker_open's HOST:PORT,...); @cur is the
     * one of the session, or the first to try for the next one.  @host,
     * @port and @server_name are @cur's (the messages name them). */
    struct baddr {
        char host[HOST_MAX];
        char port[8];
    } addrs[RRPC_BROKER_MAX_ADDRS];
    int n_addrs, cur;
    char cur_addr[HOST_MAX + 16]; /* @lock: @cur as rrpc_broker_current gives it */
    bool own_server_name; /* opts->server_name: the same name for every broker */
    char host[HOST_MAX];
    char port[8];
    char server_name[HOST_MAX];
    char *token;
    int timeout_ms, skew_ms;
    int ticket_rate; /* RRPC_TICKET_RATE, for the gates made through this handle */
    rrpc_log_fn log;
    void *log_user;
    int log_level;

    SSL_CTX *sslctx;
    SSL *ssl;
    int fd;
    uint64_t next_id;
    char principal[256];
    struct reg *regs;
    char err[ERR_MAX];
};

/* ---- error.c: errors and the log ------------------------------------------- */

/* Records the detail of a failure of @b (rrpc_broker_last_error) and returns
 * @code. */
int rrpci_broker_fail(struct rrpc_broker *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for rrpc_broker_open, before there is a handle; _clear empties it
 * at the start of an open. */
void rrpci_broker_open_clear(void);
int rrpci_broker_open_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A copy of @b's error text into @buf (under @lock). */
void rrpci_broker_err_copy(struct rrpc_broker *b, char *buf, size_t len);
/* Logs through the library's sink (util/log.h) when @level is within @b's;
 * BLOG tests the level before anything is formatted. */
void rrpci_broker_log(struct rrpc_broker *b, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define BLOG(b, level, ...)                                                                   \
    do {                                                                                      \
        if ((level) <= (b)->log_level)                                                        \
            rrpci_broker_log(b, level, __VA_ARGS__);                                          \
    } while (0)
/* OpenSSL's first queued reason into @buf (then the queue is cleared). */
void rrpci_ssl_errstr(char *buf, size_t len);

/* ---- client.c: the handle ---------------------------------------------------- */

/* A second handle on @b's list, credentials and log, sharing its TLS context
 * and starting at its current broker, not connected yet (watch.c); NULL
 * without memory.  Released with rrpc_broker_close. */
struct rrpc_broker *rrpci_broker_clone(struct rrpc_broker *b);

/* ---- wait.c: time and waits -------------------------------------------------- */

int64_t rrpci_mono_ms(void);
/* Initialises @c on CLOCK_MONOTONIC, the clock every deadline here is on. */
void rrpci_cond_init(pthread_cond_t *c);
/* One wait on @c with @mu held, until it is signalled or the monotonic
 * @deadline_ms passes (INT64_MAX: no deadline); false once it has passed. */
bool rrpci_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t deadline_ms);
/* Waits on @c with @mu held until @pred is true or @deadline_ms passes; the
 * one waiting loop of the client (@pred is evaluated under @mu). */
#define RRPCI_WAIT_FOR(c, mu, deadline_ms, pred)                                              \
    do {                                                                                      \
        while (!(pred) && rrpci_cond_wait_until(c, mu, deadline_ms))                          \
            ;                                                                                 \
    } while (0)

/* ---- session.c: one TLS session ------------------------------------------- */

/* An answer or a push: msgpack-c's objects point into the buffer they came from. */
struct reply {
    msgpack_unpacked u;
    char *buf;
};
void rrpci_reply_init(struct reply *rp);
void rrpci_reply_destroy(struct reply *rp);

/* A request: its frame (4 bytes of length, set when sent, then the msgpack
 * map) and its id. */
struct req {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
};
/* Starts a request map for @op with @n entries besides "v", "op" and "id"
 * (under @io: it takes the next id); the caller packs them.  rrpci_req_free
 * releases it. */
void rrpci_req_start(struct rrpc_broker *b, struct req *q, enum rrpci_ctl_op op, uint32_t n);
void rrpci_req_free(struct req *q);

/* Connects to the broker @b->cur, handshakes and authenticates ("hello"),
 * all within one timeout_ms; @io held.  0 or a code with @b's error set. */
int rrpci_session_connect(struct rrpc_broker *b);
/* Ends the session (nothing when there is none). */
void rrpci_session_close(struct rrpc_broker *b);
/*
 * Sends @q on the current session and reads the answer into @rp; checks the
 * envelope.  0 (rp->u.data is the answer map), a session error (-ECONN*,
 * -ETIMEDOUT, -EPROTO: the caller may reconnect), or rrpcd's refusal
 * (rrpci_ctl_err_code) with *@refused set.  @deadline: monotonic ms.
 */
int rrpci_session_exchange(struct rrpc_broker *b, struct req *q, struct reply *rp, bool *refused,
                           int64_t deadline);
/* Waits up to @wait_ms for a frame (a push) and reads it into @rp: 0, -EAGAIN
 * (nothing came), or a session error (the session is then closed). */
int rrpci_session_read(struct rrpc_broker *b, struct reply *rp, int wait_ms);

/* ---- failover.c: the list of brokers --------------------------------------- */

/* HOST:PORT, [IPv6]:PORT or tls://HOST:PORT into @host and @port (1..65535). */
int rrpci_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen);
/* Splits rrpc_broker_open's list into @b->addrs, naming a bad entry
 * (rrpci_broker_open_fail). */
int rrpci_parse_addrs(struct rrpc_broker *b, const char *list);
/* Makes the broker @i current. */
void rrpci_select_addr(struct rrpc_broker *b, int i);
/* A session with the first broker of the list that answers, from the
 * current one round the list once; @why: how the previous session ended, or
 * NULL.  @io held. */
int rrpci_connect_any(struct rrpc_broker *b, const char *why);
/* One round trip with @io held, (re)making the session as needed; a request
 * that failed on an older session is sent once more on a new one. */
int rrpci_roundtrip(struct rrpc_broker *b, struct req *q, struct reply *u);

/* ---- gate.c, lease.c --------------------------------------------------------- */

/* Finds or makes the gate of @ctx for @service; @io held. */
int rrpci_gate_locked(struct rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                      struct reg **ret_g);
void rrpci_reg_free(struct reg *g);
/* Sends "unregister" for the registration @id; @io held. */
int rrpci_send_unregister(struct rrpc_broker *b, uint64_t id);

/* ---- lookup.c: reading endpoints (also watch.c) ---------------------------- */

/* Whether @eps is an array of 1..CTL_MAX_ENDPOINTS endpoints. */
bool rrpci_endpoints_ok(const msgpack_object *eps);
/* Appends the endpoints in the array @eps (of instance @k) to @info, whose
 * endpoints have room for them. */
int rrpci_add_endpoints(struct rrpc_broker *b, const char *service, const msgpack_object *eps,
                        size_t k, rrpc_service_info *info);

#endif

/* SPDX-License-Identifier: MIT */
/* The core's objects.  Private to libroce_rpc/core and the transports. */
#ifndef RRPCI_CORE_H
#define RRPCI_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <roce_rpc/rrpc.h>

#include "core/connsm.h"
#include "core/credit.h"
#include "util/nic_counters.h"

#define RRPCI_ESP_CACHE 64
#include "core/evloop.h"
#include "core/governor.h"
#include "core/frame.h"
#include "core/sched.h"
#include "transport/transport.h"
#include "transport/tunables.h"
#include "util/idmap.h"
#include "util/list.h"

#define RRPCI_NTRANSPORTS 3
#define RRPCI_ERRMSG_MAX 512
/* One-sided writes are emulated in frames of at most this many data bytes. */
#define RRPCI_OS_CHUNK (1u << 20)
/* CANCELs of one class the peer may not have read yet (docs/protocol.md
 * §10): a CANCEL takes no credit, and on verbs each takes a receive buffer
 * of the peer's exempt reserve (8 per queue pair, shared with CREDIT and
 * LEND frames). */
#ifndef RRPCI_CANCEL_WINDOW /* a build may set it, to show what it bounds */
#define RRPCI_CANCEL_WINDOW 2
#endif

struct rrpci_class_cfg {
    int dscp;
    uint32_t weight;
    uint32_t credits;
};

/* Text tunables (rrpc_config_set only): room for a value, NUL included. */
#define RRPCI_TEXT_MAX 300
/* The context's tunables, typed; core/config.c's table describes each. */
struct rrpci_config {
    uint32_t max_msg;
    int deadline_ms;
    int connect_timeout_ms;
    int log_level;
    int keepalive_ms;         /* probe a connection idle this long; 0: off */
    int keepalive_timeout_ms; /* down when nothing arrived this long (0: 3 x the interval) */
    int auth_timeout_ms;      /* passive: accept to authenticated (or up without tickets) */
    int max_conns;            /* passive connections held at once (0: from RLIMIT_NOFILE) */
    int max_conns_per_source; /* ... from one peer address */
    int ticket_rate;          /* broker gates: tickets a second one client may use */
    int max_conns_per_principal; /* ... authenticated as one principal */
    int conns_reserve_pct;    /* share of max_conns kept for addresses holding none */
    int idle_evict_ms;        /* no tickets: idle this long, a connection may make room */
    long max_answer_backlog;  /* answer bytes queued for a peer before its credit is held */
    long max_answer_bytes;    /* ... for all peers together; above it, shares (send.c) */
    int credit_lending;       /* 1: a connection starts at credit_base, the rest lent (lend.c) */
    int credit_base;          /* the grant a connection starts with, per class */
    int credit_budget;        /* credit lent at once beyond the base, per class, all peers */
    int credit_idle_ms;       /* a connection idle this long gives its lent credit back */
    long max_partial_bytes;   /* large frames being received, all connections (partial.c) */
    int max_grants;           /* grants alive at once on the context (RRPC_MAX_GRANTS) */
    int sync_spin_us;         /* thread mode: a blocking call spins this long before sleeping */
    int busy_poll_us;         /* after activity the loop polls this long before it sleeps */
    int busy_poll_budget_pct; /* share of one core the loop's thread may spend while polling */
    int busy_poll_min_share_pct; /* below this share of the time it polls, it stops (contention) */
    int metrics_max_conns;    /* metrics_listen: HTTP connections held at once */
    int metrics_timeout_s;    /* ... each closed after this long without progress */
    int metrics_header_timeout_s; /* ... a request head must arrive whole within this */
    int handler_threads;      /* threads of the RRPC_HANDLER_ON_WORKER handlers */
    int handler_relief_ms;    /* a loop-thread handler this long is relieved; 0: never */
    long handler_queue_bytes; /* request bytes they may hold; above it requests are refused */
    uint64_t tensor_max_bytes; /* tensor servers: offered bytes not yet arrived */
    int tensor_max_pending;    /* tensor servers: offers accepted and not yet done */
    char metrics_listen[RRPCI_TEXT_MAX]; /* serve GET /metrics here; "": off */
    char require_esp[RRPCI_TEXT_MAX];    /* the local rrpc-agent's query socket; "": off */
    /* Each transport's own values, by slot (transport/tunables.h). */
    _Alignas(max_align_t) unsigned char tp[RRPCI_CONF_NSLOTS][RRPCI_CONF_SLOT_BYTES];
};

struct rrpc_ctx {
    /* The loop (core/loop.c says who runs it). */
    struct rrpci_evloop *ev;
    pthread_mutex_t lock; /* recursive; the runner releases it while it waits */
    _Atomic int lock_waiters; /* threads waiting for the lock: the runner yields to them */
    struct rrpci_async wake;  /* other threads wake the runner through it */
    pthread_t thread;
    bool thread_mode;
    bool stopping;
    pthread_t owner; /* the runner, valid when in_run */
    int in_run;      /* the runner's passes, nested */
    /* Thread mode: the loop thread sleeps on thread_fd (the loop's fd and
     * thread_ctl_fd); loop_sleeping while it does, until sleep_until (-1:
     * no limit); loop_yielded while, polling, it let go of the lock
     * between two passes for the threads waiting for it.  taken: a
     * blocking call runs the loop (rrpci_loop_take), and the loop's fd is
     * out of thread_fd meanwhile. */
    int thread_fd, thread_ctl_fd;
    _Atomic bool loop_sleeping, loop_yielded;
    double sleep_until;
    bool taken;
    uint64_t thread_wakeups, takeovers; /* rrpc_stats.loop_thread_wakeups, loop_takeovers */
    /* rrpc_ctx_wait_until's threads asleep while another runs the loop
     * (core/sync.c), under the lock. */
    struct rrpci_flag_wait *flag_waiters;
    /* Driven mode: a timer fd in the loop's fd, armed to the next timer
     * (rrpci_driven_rearm) once the application asked for the fd. */
    int timer_fd;
    struct rrpci_io timer_w;
    bool timer_armed;
    double timer_due;
    struct rrpci_governor gov; /* polling (core/governor.h) */
    rrpc_stats stats; /* the metrics (core/stats.c), under the lock */
    /* Per peer: the counters of its connections gone down (the ones up are
     * summed when read); slot RRPC_STATS_PEERS is "other". */
    struct rrpci_peer {
        char name[48];
        rrpc_conn_stat gone;
    } peers[RRPC_STATS_PEERS + 1];
    uint32_t n_peers; /* slots used below RRPC_STATS_PEERS */
    bool peer_other;  /* some connection counted under "other" */

    struct rrpci_config cfg;
    struct rrpci_class_cfg cls[RRPCI_MAX_CLASSES];
    uint32_t lent[RRPCI_MAX_CLASSES]; /* credit lent to all peers, beyond their first grants */
    bool endpoints_made;

    struct rrpci_idmap methods;
    struct rrpci_idmap regions; /* by tcp emulation key */
    struct rrpci_idmap grants;  /* in force, by emulation key (core/grant.c) */
    unsigned n_grants;          /* alive (not yet revoked), for RRPC_MAX_GRANTS */
    struct rrpci_list grant_list; /* every grant not yet revoked (ctx_link) */
    struct rrpci_list conns;
    struct rrpci_list listeners;
    struct rrpci_list credit_dirty; /* conns owing explicit credit */
    struct rrpci_list owned;        /* handles from rrpc_connect not yet closed */
    void *tpriv[RRPCI_NTRANSPORTS];
    const struct rrpci_transport_ops *tops[RRPCI_NTRANSPORTS];

    rrpc_notify_fn notify_fn;
    void *notify_user;
    rrpc_ticket_verify_fn ticket_fn;
    void *ticket_user;
    rrpc_conn *verifying; /* whose ticket ticket_fn is deciding on, or NULL */
    rrpc_log_fn log_fn;
    void *log_user;
    int log_max;
    struct rrpci_mhttp *metrics_http; /* serving GET /metrics (core/metrics_serve.c), or NULL */
    struct rrpci_workers *workers;    /* handler workers (core/workers.c), or NULL */
    struct rrpci_relief *relief;      /* thread mode: relief of long handlers, or NULL */
    bool defer_handlers; /* the loop thread's pass: handlers run after each callback (relief.c) */
    /* What peers make the context hold, and what was refused or evicted for
     * it (core/admit.c, send.c, xfer/tensor.c; the metrics text), under the
     * lock. */
    struct rrpci_guard {
        uint64_t evicted_unauth, evicted_idle; /* closed at a cap to admit another */
        uint64_t refused_source, refused_full; /* refused at accept */
        uint64_t refused_principal; /* refused at its ticket: its principal's cap */
        size_t answer_bytes;     /* every connection's answer_bytes together */
        uint32_t answer_holders; /* connections with answer bytes queued */
        uint64_t answer_holds;   /* requests held back, READs refused: RRPC_MAX_ANSWER_BYTES */
        uint64_t tensor_pending; /* tensor offers accepted and not yet done */
        uint64_t tensor_refusals; /* offers refused at RRPC_TENSOR_MAX_PENDING */
        size_t partial_bytes;     /* large frames' payload buffers being received (partial.c) */
        uint64_t partial_waits;   /* sockets that waited for RRPC_MAX_PARTIAL_BYTES */
        uint64_t cancels_found;   /* CANCEL frames that found their request (rpc.c) */
        uint64_t not_run_deadline, not_run_cancelled; /* requests skipped before their handler */
        uint64_t slow_handlers;   /* loop-thread handlers that ran past RRPCI_SLOW_HANDLER_S */
        uint64_t reliefs;         /* loop-thread handlers the loop moved away from (relief.c) */
        uint64_t meta_refused_request;  /* requests answered RRPC_E_METADATA (rpc.c) */
        uint64_t meta_refused_response; /* responses whose metadata failed their call */
        double log_t0;           /* admission's log: one line per interval, with counts */
        uint32_t log_evicted, log_refused;
    } guard;
    struct rrpci_list partial_waiters; /* struct rrpci_partial_wait.link (partial.c) */
    double rx_arrival; /* rrpci_ctx_rx_arrival: when the bytes being handed up came; 0 */
    struct rrpci_timer partial_wake;    /* runs the waiters once room came */
    /* The RDMA devices the context uses (rrpci_ctx_nic_used), whose ports'
     * kernel counters the metrics text carries; under the lock. */
    struct rrpci_nic_dev nics[RRPCI_CTX_NICS];
    unsigned n_nics;
    /* RRPC_REQUIRE_ESP: peers the agent said yes for, until when (admit.c) */
    struct {
        uint8_t key[16];
        double until;
    } esp_yes[RRPCI_ESP_CACHE];
};

struct rrpc_listener {
    rrpc_ctx *ctx;
    const struct rrpci_transport_ops *ops;
    struct rrpci_list link;
    rrpc_conn_event_fn fn;
    void *user;
    void *priv;
};


struct rrpci_class_state {
    struct rrpci_credit credit;
    struct rrpci_msg *head, *tail; /* waiting for credit or for the transport */
    bool blocked;                  /* the transport said -EAGAIN */
    uint32_t held; /* consumed requests whose credit is held back: answer backlog */
    double stall_t0; /* rrpci_stats_now() since frames wait for credit; 0: none wait */
    uint32_t lent;    /* credit lent to the peer beyond the first grant (lend.c) */
    bool lend_queued; /* a LEND frame waits in the queue; it reads credit.rx_announce */
    /* CANCELs sent that the peer may not have read yet: the credited frames
     * sent before each (credit.tx_sent then).  See rrpci_cancel_room. */
    uint64_t cancel_mark[RRPCI_CANCEL_WINDOW];
    unsigned cancels;
};

struct rrpc_conn {
    rrpc_ctx *ctx;
    const struct rrpci_transport_ops *ops;
    struct rrpci_list link;
    struct rrpci_list dirty_link; /* in ctx->credit_dirty when linked */
    int refs;
    enum rrpci_conn_state state; /* changed only by conn_enter (conn.c) */
    bool wire_up;        /* the transport said it is established (a fact, kept) */
    bool announced;      /* it reached UP: DOWN is owed (a fact, kept) */
    bool passive;        /* accepted from a listener */
    bool has_src;        /* passive: @src holds the peer's address */
    uint8_t src[16];     /* IPv6, or IPv4 mapped: the per-source connection cap */
    bool ticket_acked;   /* passive, no ticket required: the one TICKET was acknowledged */
    char *principal;     /* passive: as its ticket's verifier named it, or NULL */
    size_t answer_bytes; /* RESPONSE / OS_ACK bytes queued here, not yet taken by the transport */
    uint8_t *ticket;     /* active side: presented as the first message */
    size_t ticket_len;
    bool user_owned; /* from rrpc_connect: DOWN is owed even before UP, and the
                      * application holds a reference until rrpc_conn_close */
    struct rrpci_list grants; /* struct rrpc_grant.conn_link (core/grant.c) */
    struct rrpci_list owned_link;
    bool in_flush;
    int down_reason;
    char down_why[256]; /* why it went down, for a caller waiting on another thread */
    rrpc_conn_event_fn fn;
    void *user;
    uint32_t peer_max_msg;
    uint64_t next_id;
    struct rrpci_idmap pending;
    struct rrpci_idmap serving; /* requests being served, by id: a CANCEL finds them (rpc.c) */
    /* CANCELs a transport holds ahead of their requests (rrpci_conn_cancel_ahead) */
    uint64_t cancel_ahead[RRPCI_CANCEL_AHEAD];
    unsigned n_cancel_ahead;
    struct rrpci_class_state cls[RRPCI_MAX_CLASSES];
    struct rrpci_sched sched;
    struct rrpci_timer setup_timer; /* CONNECTING, AUTHENTICATING: the deadline */
    struct rrpci_timer close_timer; /* REFUSING, CLOSING: when it goes DOWN */
    /* Liveness: any received frame refreshes @last_rx; a connection idle for
     * the keepalive interval sends one probe, and goes down when nothing at
     * all arrived within the keepalive timeout. */
    struct rrpci_timer ka_timer;
    struct rrpci_timer lend_timer; /* lent credit: the idle check (lend.c) */
    double last_rx, ka_sent; /* rrpci_ctx_now() */
    double last_data;        /* a request or an answer last arrived (accept at first) */
    bool ka_probe_out;
    rrpc_conn_stat stats; /* its counters (core/stats.c), under the lock */
    int peer_slot;        /* its peer's slot in ctx->peers + 1; 0: it never came up */
    void *priv;
};

/* ---- context ---------------------------------------------------------- */
void rrpci_lock(rrpc_ctx *ctx);
/* Unlocks, and wakes the loop when called from another thread than the one in it. */
void rrpci_unlock(rrpc_ctx *ctx);
/* True when the calling thread is running a callback of @ctx. */
bool rrpci_in_callback(rrpc_ctx *ctx);
/*
 * The one blocking mechanism: rrpc_call_sync, the blocking one-sided
 * operations, the blocking tensor and KV transfers, and rrpc_connect_sync
 * all wait on a struct rrpci_sync of their own.  The completion (on the
 * loop) records its status and its detail in it, so blocking operations on
 * several threads never read each other's detail, then sets its done flag.
 * The caller waits as rrpc_ctx_wait_until does: it takes a sleeping loop
 * thread over before the operation starts and runs the loop itself, or
 * sleeps on a futex of its own until a runner sees the flag set, never on
 * the context lock, so it does not compete with the loop to wake up.
 *
 *     struct rrpci_sync s;
 *     int r = rrpci_sync_begin(&s, ctx, "... from a callback; use the async form");
 *     if (r) return r;
 *     return rrpci_sync_end(&s, start(..., rrpci_sync_op_cb, &s));
 */
struct rrpci_sync {
    int done; /* set (release) by rrpci_sync_done, last */
    bool taken; /* the caller took the loop over in rrpci_sync_begin */
    rrpc_ctx *ctx;
    int status;
    char detail[RRPCI_ERRMSG_MAX]; /* this operation's, when @status is a failure */
};
/* The context whose blocking operation the calling thread is starting,
 * between rrpci_sync_begin and rrpci_sync_end (rrpci_unlock then wakes
 * nobody), or NULL. */
extern _Thread_local rrpc_ctx *rrpci_sync_starting;
/* Refuses from a callback of @ctx (RRPC_E_DEADLOCK, detail @why_not_here:
 * the operation would wait for itself); otherwise readies @s and returns 0
 * with the context lock held. */
int rrpci_sync_begin(struct rrpci_sync *s, rrpc_ctx *ctx, const char *why_not_here);
/* Calls @ready(@arg) without sleeping until it says true or about @us
 * passed (us <= 0: not at all); whether it said true. */
bool rrpci_spin(bool (*ready)(void *arg), void *arg, int us);
/* On the loop, with the context lock held: records @status and, for a
 * failure, the detail (printf-like; NULL: the code's text), and wakes the
 * waiter.  @s belongs to the waiter again once this returns. */
void rrpci_sync_done(struct rrpci_sync *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An rrpc_op_cb for user = the sync: a failure's detail is the loop
 * thread's last error, which every failing completion sets just before its
 * callback (the rrpc_op_cb contract, memory.h). */
void rrpci_sync_op_cb(int status, void *user);
/* When @started is 0 waits for the completion (driving the loop itself in
 * driven mode) and takes its status; a failure's own detail becomes the
 * calling thread's last error.  Then unlocks, releases @s and returns the
 * status, or @started when that is non-zero (its detail is already set). */
int rrpci_sync_end(struct rrpci_sync *s, int started);
/* With the lock held, after callbacks may have run: wakes (and unlinks) the
 * rrpc_ctx_wait_until sleepers whose flag is set.  One load when none. */
void rrpci_flag_waiters_wake(rrpc_ctx *ctx);
/* The transport of URI scheme @scheme; for "rdma" the verbs module is loaded
 * (transport/module.h) the first time.  NULL with the reason in @why when
 * the scheme is unknown or its module will not load. */
const struct rrpci_transport_ops *rrpci_transport_by_scheme(const char *scheme, char *why,
                                                            size_t whylen);
/* The @i-th transport (0 .. RRPCI_NTRANSPORTS - 1), or NULL when it is not
 * built in nor loaded. */
const struct rrpci_transport_ops *rrpci_transport_nth(int i);
int rrpci_transport_use(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops);

/* ---- connections ------------------------------------------------------ */
/* Named questions about a connection's state, used everywhere instead of
 * reading fields. */
/* New calls, one-sided operations and tensors may start on it. */
static inline bool rrpci_conn_accepts_calls(const rrpc_conn *c)
{
    return c->state == RRPCI_CONNECTING || c->state == RRPCI_AUTHENTICATING ||
           c->state == RRPCI_UP;
}
/* Frames may still be queued on it (answers, the refusal's ERROR). */
static inline bool rrpci_conn_takes_frames(const rrpc_conn *c)
{
    return c->state != RRPCI_CLOSING && c->state != RRPCI_DOWN;
}
/* The transport carries frames both ways (handshake done, not down). */
static inline bool rrpci_conn_wire_open(const rrpc_conn *c)
{
    return c->wire_up && c->state != RRPCI_DOWN;
}
/* The peer is authenticated: data frames pass. */
static inline bool rrpci_conn_authenticated(const rrpc_conn *c)
{
    return c->announced && c->state != RRPCI_DOWN;
}
/* It is UP now. */
static inline bool rrpci_conn_is_up(const rrpc_conn *c)
{
    return c->state == RRPCI_UP;
}
/* It waits for the peer's ticket (or, passive, its first frame). */
static inline bool rrpci_conn_authenticating(const rrpc_conn *c)
{
    return c->state == RRPCI_AUTHENTICATING;
}
/* Facts that stay once true: it reached UP (DOWN is owed to the
 * application); the transport said it was established. */
static inline bool rrpci_conn_reached_up(const rrpc_conn *c)
{
    return c->announced;
}
static inline bool rrpci_conn_wire_was_up(const rrpc_conn *c)
{
    return c->wire_up;
}

/*
 * Queues @m on class @cls (taking a credit unless the type is exempt, in
 * which case it jumps the queue) and runs the scheduler.  Takes @m.
 * Returns 0 or RRPC_E_CLOSED (then @m is freed).
 */
int rrpci_conn_submit(rrpc_conn *c, int cls, struct rrpci_msg *m);
/* Before the loop sleeps: explicit CREDIT frames for what is owed. */
void rrpci_credit_return(rrpc_ctx *ctx);
/* Traffic arrived: with RRPC_BUSY_POLL_US, the loop polls for that long
 * before it sleeps again. */
void rrpci_ctx_activity(rrpc_ctx *ctx);
/* The same for a blocking call about to wait for its answer (the runner, the
 * lock held): the loop's clock is read afresh first.  It was last set when a
 * runner last waited, which may be long ago; a window started from it
 * counted that time as a stretch of polling with no CPU (a contention stop,
 * polling held back for 0.1-1.6 s) and could be over before it began. */
void rrpci_ctx_activity_fresh(rrpc_ctx *ctx);
uint64_t rrpci_conn_new_id(rrpc_conn *c);
/* Releases the application's reference of an rrpc_connect handle (once). */
void rrpci_conn_release_user(rrpc_conn *c);
/* More answer bytes are queued for the peer than RRPC_MAX_ANSWER_BACKLOG:
 * it does not take what it asked for. */
bool rrpci_conn_backlogged(const rrpc_conn *c);
/* Its ticket was accepted: 0, or RRPC_E_LIMIT with the reason in @why when
 * its principal holds RRPC_MAX_CONNS_PER_PRINCIPAL already (admit.c). */
int rrpci_admit_principal(rrpc_conn *c, char *why, size_t whylen);
/* ... because of the context's RRPC_MAX_ANSWER_BYTES (its share), not its own bound. */
bool rrpci_conn_over_answer_share(const rrpc_conn *c);
/* Its queued answers are gone (it went down): out of the context's count. */
void rrpci_conn_answers_drop(rrpc_conn *c);

/* ---- rpc / one-sided (pending table) ---------------------------------- */
enum rrpci_pending_kind { RRPCI_PEND_CALL, RRPCI_PEND_OS };
struct rrpci_pending {
    struct rrpci_idnode node;
    enum rrpci_pending_kind kind;
    rrpc_conn *conn;
    struct rrpci_timer deadline;
    int deadline_ms;
    /* call */
    rrpc_call_cb cb;
    void *user;
    /* RRPC_CALL_BORROW: the frame that still reads the caller's buffer
     * (rrpci_msg_free clears this).  Every path that completes a call
     * (rrpci_pending_fail, rrpci_rpc_on_response) lets it go first, for the
     * caller may reuse the buffer in its callback. */
    struct rrpci_msg *borrowed;
    /* one-sided: an operation split in @parts frames, done when all answered */
    rrpc_op_cb op_cb;
    rrpc_region *local;
    size_t local_off;
    uint64_t remote_addr; /* where the operation starts at the target */
    size_t len;
    uint32_t parts_left;
    int op_status;
    bool is_read;
    bool grant; /* through a grant's token */
    int cls;   /* for the metrics */
    double t0; /* rrpci_stats_now() when the call was made */
};
/* Serves a request; true when a handler worker took it, and with it the
 * request's credit, which its job gives back when it ends (workers.c), or
 * when the method keeps the credit until the answer
 * (RRPC_HANDLER_CREDIT_ON_ANSWER: rrpc_respond gives it back). */
bool rrpci_rpc_on_request(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p);
/* Answers @req now with @status (0: @msg is the result, else the message);
 * frees @req (rrpc_respond's rules). */
int rrpci_respond_now(rrpc_request *req, int32_t status, const void *msg, size_t len);
/* A CANCEL for request @id on @c (rpc.c). */
void rrpci_rpc_on_cancel(rrpc_conn *c, uint64_t id);
/* The connection goes down: its requests being served read as cancelled. */
void rrpci_rpc_serving_drop(rrpc_conn *c);
/* A handler worker is about to run @req: false when it must not (its caller
 * cancelled it or its deadline passed; it is answered so, and freed). */
bool rrpci_request_should_run(rrpc_request *req, const char *method);
/* A handler to run off the receive path, with its own copy of the request's
 * payload: a worker's (RRPC_HANDLER_ON_WORKER), or one the loop thread runs
 * at the end of its pass (relief.c).  It holds a reference to its
 * connection and, until it ends, the request's credit. */
struct rrpci_job {
    struct rrpci_job *next;
    rrpc_request *req;
    rrpc_conn *conn;
    int cls;
    rrpc_handler_fn fn;
    void *user;
    size_t len;
    uint64_t method_id;
    const char *method; /* a copy, after the payload */
    uint8_t data[];     /* the request's payload, copied off the receive buffer */
};
/* A job for @req (a reference to @c taken), or NULL without memory. */
struct rrpci_job *rrpci_job_new(rrpc_request *req, rrpc_conn *c, int cls, rrpc_handler_fn fn,
                               void *user, const uint8_t *p, size_t len, const char *method);
/* The job is over: the request's credit goes back, the reference is
 * dropped and @j freed (takes the context lock). */
void rrpci_job_end(rrpc_ctx *ctx, struct rrpci_job *j);
/* Jobs never begun (a list by next): each caller is answered E_CLOSED (the
 * context is going) and the job ended. */
void rrpci_jobs_drop(rrpc_ctx *ctx, struct rrpci_job *list);
/* workers.c: the threads of RRPC_HANDLER_ON_WORKER handlers, started with
 * the first such method (context lock held), stopped by rrpc_ctx_destroy
 * after the loop thread (context lock not held). */
int rrpci_workers_start(rrpc_ctx *ctx);
void rrpci_workers_stop(rrpc_ctx *ctx);
/* On the loop: queues @req's handler @fn with a copy of the payload; false
 * when it could not (RRPC_HANDLER_QUEUE_BYTES reached, no memory), after
 * answering the caller with the reason. */
bool rrpci_workers_submit(rrpc_ctx *ctx, rrpc_request *req, rrpc_conn *c, int cls,
                          rrpc_handler_fn fn, void *user, const uint8_t *p, size_t len,
                          const char *method);

/* Metrics (core/stats.c): the context's counters, under its lock; @cls is
 * an internal class index. */
double rrpci_stats_now(void);
/* The round-trip bucket of @us microseconds (see RRPC_STATS_RTT_BUCKETS). */
int rrpci_stats_bucket(double us);
/* The Prometheus text of the snapshot @st, as rrpc_ctx_stats_text (whose
 * body it is, the snapshot taken); pure, for the unit tests. */
int rrpci_stats_render(const rrpc_stats *st, const rrpc_peer_stats *peers, size_t n_peers,
                       char *buf, size_t len, size_t *ret_len);
void rrpci_stats_call(rrpc_conn *c, int cls, size_t len);
void rrpci_stats_call_done(rrpc_conn *c, int cls, int status, size_t len, double t0);
void rrpci_stats_request(rrpc_conn *c, int cls);
/* A frame of @len payload bytes taken by the transport / received on @c. */
void rrpci_stats_frame_out(rrpc_conn *c, size_t len);
void rrpci_stats_frame_in(rrpc_conn *c, size_t len);
void rrpci_stats_onesided(rrpc_conn *c, int cls, size_t len);
/* A one-sided operation started at @t0 completed with @status. */
void rrpci_stats_onesided_done(rrpc_conn *c, int cls, int status, double t0);
/* A frame of @s's class queued with no credit from the peer: counts the
 * stall and starts the class's wait clock; _credit_sent stops it when a frame
 * that waited leaves, and restarts it if the rest still has no credit. */
void rrpci_stats_credit_stall(rrpc_ctx *ctx, int cls, struct rrpci_class_state *s);
void rrpci_stats_credit_sent(rrpc_ctx *ctx, int cls, struct rrpci_class_state *s);
/* @c came up: it is counted, and under its peer from now on. */
void rrpci_stats_conn_up(rrpc_conn *c);
/* @c leaves the context's list: its counters stay with its peer. */
void rrpci_stats_conn_gone(rrpc_conn *c);
void rrpci_rpc_on_response(rrpc_conn *c, const struct rrpci_hdr *h, const uint8_t *p);
void rrpci_os_on_frame(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p);
void rrpci_os_on_ack(rrpc_conn *c, const struct rrpci_hdr *h, const uint8_t *p);
/* Completes @pd with a local error and frees it (already removed from the
 * table); a one-sided operation's detail says what failed and @msg. */
void rrpci_pending_fail(struct rrpci_pending *pd, int status, const char *msg);
/* Sets a failed one-sided operation's detail as the last error (onesided.c);
 * @words: the target's (@peer) or a local reason, @n bytes. */
void rrpci_os_fail_detail(const struct rrpci_pending *pd, int status, bool peer,
                          const uint8_t *words, size_t n);
struct rrpci_pending *rrpci_pending_new(rrpc_conn *c, enum rrpci_pending_kind kind,
                                        int deadline_ms);
/* The class index of public class @cls from an options struct, @dflt (an
 * index) for RRPC_CLASS_DEFAULT; RRPC_E_BAD_CLASS with the detail set. */
int rrpci_class_arg(rrpc_ctx *ctx, int cls, int dflt, int *ret_idx);
/* 0 when options struct @o (NULL allowed) has its reserved words zero, else
 * -EINVAL with the detail naming @what and the word (util/reserved.h). */
#define RRPCI_OPTS_CHECK(ctx, o, what)                                                            \
    rrpci_reserved_check((ctx), (o) ? (o)->reserved : NULL,                                      \
                         sizeof((o)->reserved) / sizeof((o)->reserved[0]), (what))
int rrpci_reserved_check(rrpc_ctx *ctx, const uint64_t *r, size_t n, const char *what);
void rrpci_methods_fini(rrpc_ctx *ctx);
void rrpci_regions_fini(rrpc_ctx *ctx);

/* region.c: the generation of a new region, unique in the process (any
 * thread, no lock needed). */
uint64_t rrpci_region_next_generation(void);

struct rrpc_region {
    struct rrpci_idnode node; /* in ctx->regions, by key */
    rrpc_ctx *ctx;
    void *addr;
    size_t len;
    unsigned access;
    uint64_t generation;
    void *tpriv;
    struct rrpci_list grants; /* struct rrpc_grant.region_link */
};

/*
 * A grant (core/grant.c; include/roce_rpc/memory.h): one connection's
 * access to part of a region.  In force until it ends (@ended says why:
 * revoked, expired, its connection or region gone); freed by
 * rrpc_grant_revoke only.  Transports with grant ops (verbs) enforce it in
 * the NIC; for the others the core checks it (rrpci_region_check).
 */
struct rrpc_grant {
    struct rrpci_idnode node; /* in ctx->grants while in force (emulated) */
    rrpc_ctx *ctx;
    rrpc_region *region;      /* NULL once it is deregistered */
    rrpc_conn *conn;          /* referenced while the grant exists */
    struct rrpci_list region_link, conn_link, ctx_link;
    uint64_t addr, len;       /* the range, as the owner's addresses */
    uint64_t key;             /* what the peer's token names it by */
    unsigned access;
    int cls;                  /* class index the peer's operations must use */
    const char *ended;        /* NULL while in force */
    struct rrpci_timer expiry;
    struct rrpci_sync *waiter; /* a blocking rrpc_region_grant waiting for the transport */
    void *tpriv;               /* the transport's (verbs: its memory window) */
};
/* The grant ends (idempotent): later accesses fail with @why. */
void rrpci_grant_end(rrpc_grant *g, const char *why);
/* Ends every grant of @c (it went down) or of @r (being deregistered). */
void rrpci_grants_conn_down(rrpc_conn *c);
void rrpci_grants_region_gone(rrpc_region *r);
void rrpci_grants_fini(rrpc_ctx *ctx);
void rrpci_partial_fini(rrpc_ctx *ctx); /* core/partial.c */

/*
 * The check a NIC makes for a remote access, done by the tcp emulation:
 * a region with @key exists, allows @need, and [addr, addr+len) is inside it
 * (no overflow).  Returns the region or NULL with *why set.
 */
rrpc_region *rrpci_region_check(rrpc_ctx *ctx, uint64_t key, uint64_t addr, uint64_t len,
                                unsigned need, const char **why);
/* The same check for an access by @c on class @cls: a region's key, or a
 * grant's (in force, for @c and @cls, allowing @need over the range);
 * *@grant says whether @key named a grant. */
rrpc_region *rrpci_access_check(rrpc_conn *c, int cls, uint64_t key, uint64_t addr,
                                uint64_t len, unsigned need, const char **why, bool *grant);
/* Pure bounds check, shared with the initiator's own validation. */
bool rrpci_range_inside(uint64_t base, uint64_t blen, uint64_t addr, uint64_t len);

/* ---- shared between the core's own files ------------------------------- */

/* config.c: the configuration of a new context: @from's values, or the
 * environment's when NULL.  0, or -EINVAL with the detail set. */
int rrpci_config_resolve(const rrpc_config *from, struct rrpci_config *ret_cfg);
/* The core's table of tunables (core/config.c), over struct rrpci_config. */
extern const struct rrpci_conf_table rrpci_core_conf;
/* Prints the tables of tunables (@all: also those of transports not built
 * in, as the man page lists them) in @style (util/conf.h). */
void rrpci_config_print_as(FILE *fp, enum rrpci_conf_style style, bool all);
/* metrics_serve.c: with metrics_listen set, serves GET /metrics on a thread of its own
 * (0, or the error set with the address and what to do); stops and joins it
 * (the lock not held: a scrape takes it). */
int rrpci_serve_start(rrpc_ctx *ctx);
void rrpci_serve_stop(rrpc_ctx *ctx);
/* log.c: @ctx is being destroyed: the calling thread's last error no longer
 * belongs to it. */
void rrpci_error_forget(rrpc_ctx *ctx);
/* class.c: every class's DSCP, weight and credits before rrpc_class_set. */
extern const struct rrpci_class_cfg rrpci_class_defaults[RRPCI_MAX_CLASSES];
/* loop.c: the context's loop (rrpci_loop_init at creation). */
int rrpci_loop_init(rrpc_ctx *ctx);
/* One pass by the calling thread, the lock held once: waits at most
 * @max_ms (-1: no limit) for events, then invokes what is ready. */
void rrpci_loop_pass(rrpc_ctx *ctx, int max_ms);
/* Milliseconds the runner may wait (rounded up): 0 when work is pending,
 * -1 when no timer runs.  The lock held. */
int rrpci_loop_timeout(rrpc_ctx *ctx);
/* The same for a driven context's fd (driven.c): polling counts only for
 * work that wakes no fd (a transport's unarmed CQ). */
int rrpci_loop_fd_timeout(rrpc_ctx *ctx);
/* Thread mode: the loop thread, its sleeping set, and its stop. */
/* The loop thread's and the relief threads' loop (the context lock held):
 * runs the loop while this thread is its runner, watches the handlers
 * while it is not (relief.c), until the context stops. */
void rrpci_loop_thread_body(rrpc_ctx *ctx);
/* The runner lets go of the context lock (held once) / takes it again,
 * letting the threads that wait for it through first. */
void rrpci_runner_release(rrpc_ctx *ctx);
void rrpci_runner_acquire(rrpc_ctx *ctx);
/* A relief thread takes over the pass of the runner it relieved. */
void rrpci_loop_inherit(rrpc_ctx *ctx);
/* relief.c: a handler on the loop thread that runs long no longer holds the
 * loop.  Started with the loop thread (context lock held; nothing with
 * RRPC_HANDLER_RELIEF_MS=0), stopped (signalled, then joined, after the
 * loop thread) by rrpc_ctx_destroy. */
#define RRPCI_RELIEF_COPY_MAX 4096u /* payloads copied to run off the receive path */
#define RRPCI_RELIEF_THREADS 4 /* relief threads beyond the first watcher */
int rrpci_relief_start(rrpc_ctx *ctx);
void rrpci_relief_stop(rrpc_ctx *ctx);
void rrpci_relief_join(rrpc_ctx *ctx);
/* Whether this thread runs the loop (always, without relief). */
bool rrpci_relief_runs_loop(rrpc_ctx *ctx);
/* Queues @req's handler to run after the current callback (a copy of the
 * payload);
 * false when it could not, after answering the caller. */
bool rrpci_relief_defer(rrpc_ctx *ctx, rrpc_request *req, rrpc_conn *c, int cls,
                        rrpc_handler_fn fn, void *user, const uint8_t *p, size_t len,
                        const char *method, uint64_t method_id);
/* Runs the queued handlers (the runner, the lock held once, in a pass);
 * false when this thread was relieved meanwhile and no longer runs the loop. */
bool rrpci_relief_run(rrpc_ctx *ctx);
/* The context whose queued handler this thread runs, or NULL: a blocking
 * call from it is refused (sync.c) after a relief too. */
extern _Thread_local rrpc_ctx *rrpci_relief_handler;
/* Whether handlers are queued; runs them in place, before a request that
 * is not queued (its handler runs on the receive path), so handlers still
 * run in the order their requests came. */
bool rrpci_relief_queued(rrpc_ctx *ctx);
void rrpci_relief_flush(rrpc_ctx *ctx);
/* A thread that does not run the loop watches the handlers until it does
 * (or the context stops); called and returns with the context lock held. */
void rrpci_relief_watch(rrpc_ctx *ctx);
/* A handler of method @method_id took @took s (@moved: it was relieved);
 * a long one is counted and logged once per method (rpc.c). */
void rrpci_handler_took(rrpc_ctx *ctx, uint64_t method_id, double took, bool moved);
int rrpci_loop_thread_init(rrpc_ctx *ctx);
void rrpci_loop_thread_fini(rrpc_ctx *ctx);
void *rrpci_loop_thread(void *arg);
void rrpci_loop_thread_stop(rrpc_ctx *ctx);
/* A blocking call, the lock held, outside callbacks: takes the loop over
 * from a thread-mode loop thread asleep in its wait (true), so the caller
 * runs it with rrpci_loop_pass until rrpci_loop_give_back. */
bool rrpci_loop_take(rrpc_ctx *ctx);
void rrpci_loop_give_back(rrpc_ctx *ctx);
/* driven.c: arms the context's timer fd to the loop's next timer; closes it. */
void rrpci_driven_rearm(rrpc_ctx *ctx);
void rrpci_driven_fini(rrpc_ctx *ctx);

/* conn.c: the one transition function of the state machine (connsm.h):
 * applies @ev, starting and stopping the timers of the new state; false
 * when @ev does not apply (ignored). */
bool rrpci_conn_enter(rrpc_conn *c, enum rrpci_conn_event ev);
rrpc_conn *rrpci_conn_alloc(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops,
                            rrpc_conn_event_fn fn, void *user, int timeout_ms);
/* A frame outside credits and the scheduler (TICKET, ERROR, KEEPALIVE...). */
int rrpci_send_exempt(rrpc_conn *c, uint8_t type, int32_t code, const void *p, size_t len);
/* UP: the application hears of the connection, and what waited is sent. */
void rrpci_conn_announce(rrpc_conn *c, enum rrpci_conn_event ev);
/* keepalive.c */
void rrpci_ka_timer_cb(struct rrpci_timer *t);

/* lend.c: credit lent beyond a peer's first grant and taken back. */
/* The grant a connection's peer starts with for @cls (its hello). */
uint32_t rrpci_lend_first_grant(const rrpc_ctx *ctx, int cls);
void rrpci_lend_conn_init(rrpc_conn *c);
/* A credited frame of @cls arrived with RRPCI_F_LAST: the peer has no
 * credit left, and is lent more, budget permitting. */
void rrpci_lend_on_rx(rrpc_conn *c, int cls);
/* A LEND or LEND_ACK from the peer: 0, or an error code with *@why. */
int rrpci_lend_on_frame(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const char **why);
/* The connection is down: its lent credit goes back to the budget. */
void rrpci_lend_conn_down(rrpc_conn *c);
uint32_t rrpci_lend_total(const rrpc_ctx *ctx, int cls);
void rrpci_ka_start(rrpc_conn *c);
/* send.c: hands what credits and the scheduler allow to the transport. */
void rrpci_conn_flush(rrpc_conn *c);
/* send.c: a request of class @cls was consumed: its credit is owed back. */
void rrpci_conn_consumed(rrpc_conn *c, int cls);

#endif

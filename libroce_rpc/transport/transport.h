/* SPDX-License-Identifier: MIT */
/*
 * The transport ops table: what the core needs from a transport, and the
 * upcalls a transport makes into the core.  The core never includes
 * <infiniband/verbs.h>; a transport never touches the RPC engine.
 *
 * Rules:
 *  - Everything runs on the context's loop thread with the context lock held.
 *  - The core allocates the transport's private state (the *_priv_size
 *    fields) zeroed, next to its own objects: rrpci_conn_priv() etc.
 *  - Upcalls may re-enter the transport (an RPC handler may send, close the
 *    connection, ...).  A transport that walks its own structures around an
 *    upcall holds a reference (rrpci_conn_ref) and re-checks its state after.
 *  - Optional ops are NULL; the core then emulates (one-sided over frames)
 *    or returns -EOPNOTSUPP.
 */
#ifndef RRPCI_TRANSPORT_H
#define RRPCI_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/evloop.h"
#include "core/frame.h"
#include "core/qos.h"
#include "util/uri.h"

typedef struct rrpc_ctx rrpc_ctx;
typedef struct rrpc_conn rrpc_conn;
typedef struct rrpc_listener rrpc_listener;
typedef struct rrpc_region rrpc_region;
typedef struct rrpc_grant rrpc_grant;
struct sockaddr;

#define RRPCI_TRANSPORT_OPS_VERSION 8 /* 2: no query op; rrpci_timer. 3: busy_poll. 4: tunables.
                                        * 5: the library's own loop (core/evloop.h). 6: busy_poll under the governor;
                                        * typed tunables (transport/tunables.h). 7: grants. 8: rx_grow */

/*
 * An outbound frame.  The core fills @h (credits are set at hand-off) and the
 * payload: @len bytes in @data, then @ext_len bytes at @ext (memory the
 * caller guarantees until completion, e.g. a registered region).  Once
 * ops->send accepted it, the transport owns it and releases it with
 * rrpci_msg_free() when the bytes are gone (written / send completed).
 * A borrowed @ext (rrpc_call's RRPC_CALL_BORROW) is named by *@lender, which
 * rrpci_msg_free clears; the core may point @ext at its own copy
 * (@ext_owned, freed with the frame) while a transport whose ops say
 * ext_repointable holds the frame.
 */
struct rrpci_msg {
    struct rrpci_msg *next;
    struct rrpci_hdr h;
    uint8_t hdr[RRPCI_HDR_SIZE]; /* encoded at hand-off */
    const uint8_t *ext;
    size_t ext_len;
    struct rrpci_msg **lender;
    bool ext_owned;
    double due; /* REQUEST: when its call's deadline passes (rrpci_stats_now); 0: none */
    double queued; /* inproc: when the sender handed it over (CLOCK_REALTIME seconds) */
    size_t len;
    uint8_t data[];
};
static inline size_t rrpci_msg_payload_len(const struct rrpci_msg *m)
{
    return m->len + m->ext_len;
}

/* A native one-sided operation (verbs). */
enum rrpci_rdma_opcode { RRPCI_RDMA_WRITE, RRPCI_RDMA_WRITE_IMM, RRPCI_RDMA_READ };
struct rrpci_rdma_op {
    enum rrpci_rdma_opcode opcode;
    int cls;
    rrpc_region *local;
    size_t local_off;
    uint64_t remote_addr; /* absolute address at the target */
    uint64_t remote_key;
    size_t len;
    uint32_t imm;
    uint64_t id; /* completes through rrpci_rdma_done(conn, id, status) */
};

struct rrpci_transport_ops {
    uint32_t version; /* RRPCI_TRANSPORT_OPS_VERSION */
    const char *name;   /* "tcp", "verbs", "inproc" */
    const char *scheme; /* URI scheme: "tcp", "rdma", "inproc" */
    size_t ctx_priv_size;
    size_t conn_priv_size;
    size_t listener_priv_size;

    /* Mandatory (checked when a context first uses the transport).  What a
     * transport can do shows in which optional ops it has: one-sided
     * operations are native when it has rdma, else the core emulates them. */
    int (*listen)(rrpc_listener *l, const struct rrpci_uri *uri);
    void (*listener_close)(rrpc_listener *l);
    /* Starts connecting; later rrpci_conn_established() or rrpci_conn_down(). */
    int (*connect)(rrpc_conn *c, const struct rrpci_uri *uri);
    /* 0: the transport took @m.  -EAGAIN: no room now, the core keeps @m and
     * waits for rrpci_conn_writable(c, cls).  Other: the connection is broken. */
    int (*send)(rrpc_conn *c, int cls, struct rrpci_msg *m);
    /* Releases every transport resource of @c; no upcall for @c after this. */
    void (*conn_close)(rrpc_conn *c);

    /* Optional. */
    int (*ctx_init)(rrpc_ctx *ctx);  /* first use of the transport in @ctx */
    void (*ctx_fini)(rrpc_ctx *ctx); /* context destroyed */
    int (*class_dscp)(rrpc_conn *c, int cls, int *ret_dscp);
    int (*peer_name)(rrpc_conn *c, char *buf, size_t len);
    int (*listener_port)(rrpc_listener *l);
    /* One-sided, native: the key of @r on @c's device (registering it), the
     * release of all of @r's registrations, and the operation itself. */
    int (*region_key)(rrpc_conn *c, rrpc_region *r, uint64_t *ret_key);
    void (*region_release)(rrpc_ctx *ctx, rrpc_region *r);
    int (*rdma)(rrpc_conn *c, const struct rrpci_rdma_op *op);
    /* Grants enforced by the device (without these ops the core checks
     * them, as for emulated one-sided access).  grant_bind puts @g in force
     * for @c's peer (rrpci_grant_get says what), sets its key
     * (rrpci_grant_set_key) and calls rrpci_grant_bound once, on the loop,
     * when it is in force or failed; or returns an error (no call then).
     * grant_end: from its return on, no access through @g can succeed
     * (also called for a grant whose bind failed or is still under way;
     * the connection may be down); it releases what grant_bind made. */
    int (*grant_bind)(rrpc_conn *c, rrpc_grant *g);
    void (*grant_end)(rrpc_conn *c, rrpc_grant *g);
    /* The connection has received nothing for a keepalive interval: release
     * memory that can be made again when traffic resumes. */
    void (*trim)(rrpc_conn *c);
    /* Lent credit (core/lend.c): the core is about to let @c's peer have
     * up to @grant frames of class @cls in flight (more than before).  0
     * once the transport can take them all, or an error: then the core
     * lends nothing.  Without this op the transport takes any grant up to
     * rrpci_ctx_class_credits. */
    int (*rx_grow)(rrpc_conn *c, int cls, uint32_t grant);
    /* While the context polls (core/governor.h decides; rrpci_ctx_busy
     * asks it to), between two loop passes: look for completions that wake
     * no fd, without waiting, and return how many were handled, or -1 when
     * the transport has nothing left unarmed.  With @arm polling has ended:
     * arm everything left unarmed (rrpci_ctx_polling already says false). */
    int (*busy_poll)(rrpc_ctx *ctx, bool arm);

    /* The transport reads a frame's @ext only through m->ext, on the loop
     * thread, each time it needs bytes of it, and never after
     * rrpci_msg_free: the core may then send a caller's buffer without a
     * copy and point @ext at a copy of it if the call completes while the
     * transport still holds the frame (RRPC_CALL_BORROW).  False: such
     * calls are copied into the frame. */
    bool ext_repointable;
};

/* The transports compiled in. */
extern const struct rrpci_transport_ops rrpci_tcp_ops;
extern const struct rrpci_transport_ops rrpci_inproc_ops;
#ifdef RRPC_HAVE_VERBS
extern const struct rrpci_transport_ops rrpci_verbs_ops;
#endif

/* ---- the loop ------------------------------------------------------------ */

/*
 * Transports watch fds with struct rrpci_io, time with struct rrpci_timer
 * and take wake-ups from other threads with struct rrpci_async, all on the
 * context's loop (core/evloop.h has their semantics).  Every fd and timer
 * the library watches is one of these: driven mode's fd and timeout are
 * made of them.  Callbacks run on the loop with the context lock held.
 */
void rrpci_timer_init(rrpc_ctx *ctx, struct rrpci_timer *t, void (*cb)(struct rrpci_timer *t),
                      double after, double repeat);

/* ---- core services for transports ------------------------------------- */

struct rrpci_evloop *rrpci_ctx_loop(rrpc_ctx *ctx);
/* The loop's time, CLOCK_MONOTONIC seconds as of its last wake-up. */
double rrpci_ctx_now(rrpc_ctx *ctx);
/* Runs @a's callback on @ctx's loop soon, from any thread, with no lock
 * held (rrpci_async_send; a driven application's fd becomes readable). */
void rrpci_ctx_wake(rrpc_ctx *ctx, struct rrpci_async *a);
void *rrpci_ctx_tpriv(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops);
void *rrpci_conn_priv(rrpc_conn *c);
void *rrpci_listener_priv(rrpc_listener *l);
rrpc_ctx *rrpci_conn_ctx(rrpc_conn *c);
rrpc_ctx *rrpci_listener_ctx(rrpc_listener *l);
void rrpci_conn_ref(rrpc_conn *c);
void rrpci_conn_unref(rrpc_conn *c);
/* True once the connection is going down: stop touching it. */
bool rrpci_conn_is_down(rrpc_conn *c);
/* True from the transport's rrpci_conn_established until the connection
 * goes down: frames may be posted (the core's state, not a copy of it). */
bool rrpci_conn_is_wired(rrpc_conn *c);
/* Traffic arrived: the governor polls instead of sleeping for at least
 * @us from now, calling ops->busy_poll between loop passes (the core's own
 * RRPC_BUSY_POLL_US window extends it on every frame).  Returns false, and
 * does nothing, while a stop holds polling back (its CPU budget is spent,
 * or its thread does not get its CPU): the transport must then arm what it
 * would have polled.  When polling ends, busy_poll is called with arm. */
bool rrpci_ctx_busy(rrpc_ctx *ctx, unsigned us);
/* Whether the governor polls now (a transport may leave things unarmed). */
bool rrpci_ctx_polling(rrpc_ctx *ctx);
/* The largest payload this side accepts (RRPC_MAX_MSG). */
uint32_t rrpci_ctx_max_msg(rrpc_ctx *ctx);
/* A transport that knows when the bytes it hands up next arrived (the
 * kernel's receive timestamp, in CLOCK_REALTIME seconds, as the kernel
 * stamps them) says so before it hands them up, and 0 after: a request's
 * remaining time counts from then, not from when the loop got to it
 * (core/rpc.c, which reads the clock only for a request with a deadline). */
void rrpci_ctx_rx_arrival(rrpc_ctx *ctx, double at);
/* A write was cut to the policy's shared piece (rrpc_stats.qos_pieces_cut). */
void rrpci_ctx_qos_piece_cut(rrpc_ctx *ctx);
/* A turn ended early for a higher class's input (rrpc_stats.qos_turns_preempted). */
void rrpci_ctx_qos_preempted(rrpc_ctx *ctx);
/* A transport's tunables: transport/tunables.h (typed, by slot). */
/* The DSCP and the scheduler weight configured for class @cls. */
int rrpci_ctx_class_dscp(rrpc_ctx *ctx, int cls);
unsigned rrpci_ctx_class_weight(rrpc_ctx *ctx, int cls);
/* The most credit @ctx ever grants a peer for class @cls (lending included,
 * core/lend.c): what a transport's receive buffers must cover. */
uint32_t rrpci_ctx_class_credits(rrpc_ctx *ctx, int cls);
/* The grant a connection's peer starts with for class @cls (its hello):
 * more is lent only through ops->rx_grow. */
uint32_t rrpci_ctx_class_first_grant(rrpc_ctx *ctx, int cls);
/* The receive-side QoS policy (core/qos.h) of @ctx's classes, their
 * weights, with a transport's @knobs, in *@ret.  Call it from ops->ctx_init
 * or later: the classes are fixed once the context's first endpoint exists. */
void rrpci_ctx_qos(rrpc_ctx *ctx, const struct rrpci_qos_knobs *knobs, struct rrpci_qos *ret);
/* The loop priority for the watchers of class @cls: the class the policy
 * serves first (rrpci_qos_rank 0) gets the highest.  Transports set no
 * priority of their own choosing. */
int rrpci_rx_prio(rrpc_ctx *ctx, int cls);
/* The name of class index @idx ("?" when none). */
const char *rrpci_class_name(int idx);
/* Whether @c was accepted from a listener (else it was connected). */
bool rrpci_conn_passive(rrpc_conn *c);
/* Region helpers for transports. */
void *rrpci_region_tpriv(rrpc_region *r); /* one pointer slot for the transport */
void rrpci_region_set_tpriv(rrpc_region *r, void *p);
void *rrpci_region_addr(rrpc_region *r);
size_t rrpci_region_len(rrpc_region *r);
unsigned rrpci_region_access(rrpc_region *r);
uint64_t rrpci_region_generation(rrpc_region *r);
/* The transport opened RDMA device @dev, with @ports ports: the context's
 * metrics text carries their kernel counters (util/nic_counters.h).  Once
 * per device is enough; a device named again is ignored, and so are more
 * than RRPCI_CTX_NICS (logged). */
#define RRPCI_CTX_NICS 16
void rrpci_ctx_nic_used(rrpc_ctx *ctx, const char *dev, unsigned ports);

/* Grant helpers for transports (ops->grant_bind). */
struct rrpci_grant_info {
    rrpc_region *region;
    uint64_t addr, len; /* the range, as the owner's addresses */
    unsigned access;    /* RRPC_ACCESS_REMOTE_* */
    int cls;            /* the class index the peer's operations use */
};
void rrpci_grant_get(rrpc_grant *g, struct rrpci_grant_info *ret);
void rrpci_grant_set_key(rrpc_grant *g, uint64_t key);
void *rrpci_grant_tpriv(rrpc_grant *g);
void rrpci_grant_set_tpriv(rrpc_grant *g, void *p);
/* ops->grant_bind is done: @status 0 (in force) or the error, @why its
 * detail (NULL: the code's text). */
void rrpci_grant_bound(rrpc_grant *g, int status, const char *why);

/* ---- upcalls ---------------------------------------------------------- */

/*
 * A passive side: a new connection from @peer (NULL when unknown) arrives on
 * @l.  Admission applies the context's caps: RRPC_MAX_CONNS_PER_SOURCE
 * connections from one address, and RRPC_MAX_CONNS in all, where the oldest
 * connection that has not yet authenticated is closed to make room (an
 * authenticated one never is).  Returns 0 and a connection object (with its
 * transport private state) in *@ret, or RRPC_E_LIMIT / -ENOMEM with the
 * reason, for the peer, in @why.  The connection is not announced to the
 * application until established and authenticated, and must be both within
 * RRPC_AUTH_TIMEOUT_MS.
 */
int rrpci_listener_accept(rrpc_listener *l, const struct sockaddr *peer, rrpc_conn **ret,
                          char *why, size_t whylen);


/*
 * Handshake: the record this side sends (its grants), and the check of the
 * peer's record.  rrpci_conn_hello_peer returns 0 or RRPC_E_VERSION /
 * RRPC_E_PROTO (with the detail in the context's last error).
 */
void rrpci_conn_hello_local(rrpc_conn *c, struct rrpci_hello *h);
int rrpci_conn_hello_peer(rrpc_conn *c, const struct rrpci_hello *peer);

/* Every class is connected and the handshake done: the connection is UP. */
void rrpci_conn_established(rrpc_conn *c);

/*
 * The transport saw the connection fail (or the peer close): @reason is an
 * RRPC_E_* code or a negated errno, @why a static or short-lived text for the
 * log.  The core fails pending work, tells the application, and calls
 * ops->conn_close.  Safe to call more than once.
 */
void rrpci_conn_down(rrpc_conn *c, int reason, const char *why);

/*
 * The active side: the peer refused the connection before it was up (an
 * ERROR frame during the transport's handshake, or the transport's own
 * word for it; the core calls it too for a refused ticket), with @code (an
 * RRPC_E_* code or a negated errno; one >= 0 reads as RRPC_E_PROTO before
 * rrpci_conn_established, as RRPC_E_TICKET after) and its reason, @len
 * bytes at @reason (not NUL-terminated; read during the call only).  The
 * core records it as the context's last error and takes the connection
 * down.
 */
void rrpci_conn_refused(rrpc_conn *c, int code, const uint8_t *reason, size_t len);

/* A frame arrived on class @cls, its header decoded and validated with
 * rrpci_hdr_decode.  @payload is valid only during the call. */
void rrpci_conn_recv(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *payload);

/* A transport that holds received frames before it hands them up (verbs'
 * ordered receive queue) and finds among them a CANCEL (RRPCI_T_CANCEL) of
 * request @id says so before it hands up the frames ahead of it: a request
 * @id handed up before its CANCEL is answered as cancelled, not run.  For
 * a transport with no receive time (rrpci_ctx_rx_arrival), this is how a
 * request whose caller gave up while a handler held the loop is not run
 * after.  At most RRPCI_CANCEL_AHEAD per connection are remembered (more
 * are ignored: that work runs, nothing is lost); the CANCEL, handed up in
 * its turn, forgets it. */
#define RRPCI_CANCEL_AHEAD 16
void rrpci_conn_cancel_ahead(rrpc_conn *c, uint64_t id);

/* A frame's header arrived on class @cls (decoded with rrpci_hdr_decode), and
 * its payload is still to come: a transport calls this before it buffers or
 * reads a payload, so that a frame the peer had no credit for is refused
 * before it costs memory.  Returns 0, or an RRPC_E_* code after taking the
 * connection down (the transport then drops the frame). */
int rrpci_conn_rx_admit(rrpc_conn *c, int cls, const struct rrpci_hdr *h);

/* Receiving into the final buffer (tcp): a large emulated WRITE admitted
 * with rrpci_conn_rx_admit whose @n >= RRPCI_OS_HDR_SIZE first payload bytes
 * at @p have come.  Returns where its data goes, inside a region that
 * allows the peer to write there, or NULL: then the frame is to be read and
 * handed up as any other (rrpci_conn_recv refuses it or answers it).  Before
 * each read into the target, call it again (same frame, under the context):
 * NULL means the region was deregistered meanwhile, and the rest of the
 * data must be read and dropped.  Once all of it has come, hand the frame
 * up with h->placed set and the sub-header alone as its payload. */
uint8_t *rrpci_os_write_target(rrpc_conn *c, const struct rrpci_hdr *h, const uint8_t *p,
                               size_t n);

/*
 * The context's budget of large frames being received (RRPC_MAX_PARTIAL_BYTES,
 * core/partial.c): a transport reserves a frame's announced length before it
 * makes the frame's buffer, and releases it once the whole frame came (or the
 * connection went).  Refused, @w is queued: its @cb runs later on the loop
 * (never inside rrpci_partial_release) when room may have come; the transport
 * then asks again, and meanwhile leaves the socket unread, so TCP pushes back
 * on the sender.  A frame is always let in when nothing else is held.
 */
struct rrpci_partial_wait {
    struct rrpci_list link; /* zeroed or unlinked: not queued */
    void (*cb)(struct rrpci_partial_wait *w);
    void *data;
};
bool rrpci_partial_reserve(rrpc_ctx *ctx, size_t len, struct rrpci_partial_wait *w);
void rrpci_partial_release(rrpc_ctx *ctx, size_t len);
/* Takes @w out of the queue if it is there (the transport's socket goes). */
void rrpci_partial_cancel(struct rrpci_partial_wait *w);

/* Class @cls can take frames again after an -EAGAIN from ops->send. */
void rrpci_conn_writable(rrpc_conn *c, int cls);

/* Native one-sided completions. */
void rrpci_rdma_done(rrpc_conn *c, uint64_t id, int status);
/* A write-with-immediate landed here. */
void rrpci_conn_notify(rrpc_conn *c, uint32_t imm);

/* Outbound messages. */
struct rrpci_msg *rrpci_msg_new(size_t len);
void rrpci_msg_free(struct rrpci_msg *m);

/* Errors and logs, for every layer. */
int rrpci_set_error(rrpc_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rrpci_log(rrpc_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define RRPCI_LOG(ctx, level, ...)                                  \
    do {                                                            \
        if (rrpci_log_enabled((ctx), (level)))                      \
            rrpci_log((ctx), (level), __VA_ARGS__);                 \
    } while (0)
bool rrpci_log_enabled(rrpc_ctx *ctx, int level);

#endif

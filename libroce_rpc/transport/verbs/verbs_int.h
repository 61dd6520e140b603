/* SPDX-License-Identifier: MIT */
#ifndef RRPC_VERBS_INT_H
#define RRPC_VERBS_INT_H
/*
 * The verbs transport: RoCEv2 through librdmacm + libibverbs.
 *
 * One RC queue pair per (connection, QoS class), each on its own rdma_cm id,
 * connected when the class is first used: a connection starts with its
 * first QP, low_latency's (VB_FIRST), and is up when that one is
 * established; the first frame of another class (or one-sided operation,
 * or grant) connects that class's QP, and the passive side asks the active
 * side for it with an immediate on the first QP (VB_ENV_OPEN).  The
 * connection's own frames (keepalive, ERROR, ticket: rrpci_type_is_conn_frame)
 * travel on the first QP.  The active side sets the class's TOS on the id
 * right after creating it (later has no effect on rxe; the passive side
 * inherits it from the REQ).
 * All the QPs of a connection share one CQ; the CQs of a context share one
 * completion channel per device, and the rdma_cm ids one event channel per
 * context: both fds are struct rrpci_io watchers on the context's loop.
 *
 * Wire, on top of the frame format of core/frame.h (docs/protocol.md):
 *
 *  - Connection private data (REQ and REP, 44 bytes; a REQ carries <= 56):
 *      0  rrpci_hello (32 bytes, rrpci_hello_encode; rx_buf = our receive
 *         buffer size, header included)
 *      32 u8 verbs layout version (3)   33 u8 class of this QP
 *      34 u8 WRITE_WITH_IMM credits granted for this class now (0 from
 *         layout 3 on: they are asked for, VB_ENV_NASK)   35 u8 'V' (0x56)
 *      36 u64 connection cookie (random, chosen by the active side)
 *    The first QP's REQ makes the connection on the passive side; a later
 *    class's REQ attaches to it by cookie, from the same peer address, while
 *    it is up (its hello is not looked at again).  A class's QP that is not
 *    established within RRPC_AUTH_TIMEOUT_MS of the first frame that needed
 *    it takes the connection down, on either side.  Version 1 connected all
 *    four QPs at once; a version-1 peer is refused (RRPC_E_VERSION).
 *    A REJ from us carries 8 bytes: u32 "RRVR" magic, i32 reason.
 *
 *  - Envelope: the immediate data tells what a SEND is; it costs no bytes.
 *      SEND without immediate        one frame: 32-byte header + payload
 *                                    (payload <= the peer's rx_buf - 32)
 *      SEND_WITH_IMM (1 << 24)       rendezvous: the 32-byte header of the
 *                                    frame (len = whole payload), then
 *                                    u32 token, u8 nseg (1..2), 3 x u8 0,
 *                                    nseg x {u64 addr, u32 len, u32 rkey}.
 *                                    The receiver RDMA READs the segments
 *                                    back to back into one buffer of len
 *                                    bytes and delivers the frame from it.
 *      SEND_WITH_IMM (2 << 24 | token)  rendezvous done: the sender may
 *                                    release the payload (0 bytes)
 *      SEND_WITH_IMM (3 << 24 | n)   n WRITE_WITH_IMM credits returned; the
 *                                    first after our ask grants them (n =
 *                                    1..16, the most we may hold)
 *      SEND_WITH_IMM (4 << 24 | cls) passive -> active, on the first QP:
 *                                    connect class cls's QP (ignored when
 *                                    it is connected or being connected)
 *      SEND_WITH_IMM (5 << 24)       initiator -> target, once per QP, before
 *                                    its first write with notify: grant me
 *                                    notify credits (a second ask, or a
 *                                    notify beyond the grant, is a
 *                                    protocol error)
 *      RDMA_WRITE_WITH_IMM           one-sided notify: the whole 32-bit
 *                                    immediate goes to rrpci_conn_notify.
 *    Frames, rendezvous frames and notifies of one class are delivered in
 *    arrival order.
 *
 *  - Receive buffers per class: the grant the peer has, made in chunks: the
 *    first grant's when the QP is made, more when the core lends more
 *    (ops->rx_grow, before the LEND goes; they stay until the connection
 *    closes, a take-back only returns the credit to the core's budget); the
 *    receive queue is sized for the class's credits, the most ever lent
 *    (core/lend.c) + 8 for exempt frames (the core sends a
 *    CREDIT frame only when half a grant is owed, so at most 2 are in flight)
 *    + 8 for rendezvous-done messages (we allow 8 rendezvous sends in flight
 *    per class) + 16 for WRITE_WITH_IMM (the initiator holds 16 notify
 *    credits per class, returned in batches of 8) + 1 for the peer's ask
 *    for them + 2 for those returns + 1 spare (+ VB_FIRST_RESERVE on the
 *    first QP, for the connection's own frames and the passive side's
 *    VB_ENV_OPEN asks), so a buffer is re-posted before its frame is
 *    delivered and the credit the application's handler returns is always
 *    backed.  The rendezvous-done buffers are made before the QP's first
 *    rendezvous send, the notify buffers when the peer asks for notify
 *    credits (vb_rx_extra): a QP that carries only small frames holds
 *    neither.
 *    RNR retry is still infinite, as a safety net.
 *  - Send buffers (a frame above the inline limit is copied into one until
 *    its SEND completes) are lent by the device's pool to the QPs of all
 *    connections, at most VB_NSEND per QP; an idle connection holds none
 *    (sendpool.c).
 *
 * Behaviour worth knowing:
 *  - RDMA READs (rendezvous) and one-sided READ/WRITEs go in chunks of
 *    RRPC_VERBS_CHUNK bytes (256 KiB), RRPC_VERBS_DATA_DEPTH (2) in flight
 *    per QP.  Soft-RoCE over a veth drops bursts beyond the backlog (1000
 *    packets); a dropped tail then waits for the ~0.5 s ACK timeout, which
 *    made one 1 MiB READ take 2.3 s instead of 10 ms.
 *  - A frame is not posted while a one-sided operation of its class waits
 *    for room, so on one class a frame sent after a WRITE arrives after it.
 *  - The active side is up, and sends, once its first QP is established;
 *    the passive side may receive on a QP before its first QP's ESTABLISHED
 *    event.  What arrives meanwhile waits in order in the receive queue:
 *    an eager frame in its buffer, a rendezvous descriptor parsed but not
 *    yet admitted by the core (no buffer, no READ) until the connection is
 *    reported established (recv.c, vb_rndv_admit_held).
 *  - A remote access error (forged key, deregistered region) fails the
 *    operation with RRPC_E_ACCESS and, RC semantics, breaks the QP: the
 *    connection goes down with RRPC_E_CONN_LOST.
 *  - A closed connection keeps its QPs until its last SENDs completed and
 *    the peer READ its rendezvous payloads (at most 5 s), so a final
 *    response or ERROR frame is not lost; then it disconnects.
 *  - rdma_destroy_id can block in the kernel (measured on rxe after a link
 *    went down: from 3 s to over 2 minutes, while the CM's DREQ could not be
 *    sent).  The loop never calls it: a reaper thread of the
 *    context does, and a cm_id handed to it has its context set to a marker
 *    so that its late events are only acknowledged.
 *  - Tunables (the context's configuration: rrpc_config_set or the RRPC_*
 *    environment, validated when the context is made; read here when it
 *    first uses rdma://):
 *    RRPC_VERBS_EAGER (8192: larger payloads use the rendezvous),
 *    RRPC_VERBS_BUSY_POLL_US (1000: after completions, the context's polling
 *    governor keeps the loop polling the CQ without sleeping until this long
 *    passed without one, or its CPU budget or contention stop holds it
 *    back, then the CQ is re-armed: cq.c, core/governor.h),
 *    RRPC_VERBS_RNDV_POOL_BYTES (rndvpool.c),
 *    RRPC_VERBS_CHUNK, RRPC_VERBS_DATA_DEPTH.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <roce_rpc/error.h>
#include <roce_rpc/memory.h>

#include "transport/transport.h"
#include "transport/tunables.h"
#include "util/idmap.h" /* rrpci_container_of */
#include "util/resolve.h"

#define VB_NCLS RRPCI_MAX_CLASSES
#define VB_PD_VERSION 3
#define VB_FIRST RRPCI_CLS_LOW_LATENCY /* the class of a connection's first QP */
#define VB_FIRST_RESERVE (VB_NCLS + 2)
#define VB_PD_SIZE 44
#define VB_PD_MARK 0x56 /* 'V': tells a roce-rpc peer from junk before the version */
#define VB_REJ_MAGIC 0x52565252u /* "RRVR" */
#define VB_REJ_SIZE 8

#define VB_EXEMPT_RESERVE 8
#define VB_RNDV_MAX 8 /* rendezvous sends in flight per class (<= 256) */
#define VB_NOTIFY_CREDITS 16
#define VB_NCREDIT_RESERVE 2
#define VB_NASK_RESERVE 1 /* the peer's one ask for notify credits (VB_ENV_NASK) */
#define VB_SPARE 1
#define VB_NSEND 32 /* send buffers a class's QP may hold at once (sendpool.c) */
/* 2^k - 1: rxe rounds a queue's entries + 1 up to a power of two (rxe_queue_init),
 * so 128 would make 256 slots of 512 bytes, 127 makes 128 (64 KiB per QP). */
#define VB_SQ_DEPTH 127
#define VB_SQ_CTL_RESERVE 8 /* send-queue slots frames and ops leave to internal messages */
#define VB_MAX_INLINE 128
#define VB_RD_ATOMIC_MAX 16
#define VB_RESOLVE_MS 2000
#define VB_LINGER_S 5.0
#define VB_REAP_WAIT_S 2 /* what rrpc_ctx_destroy waits for the reaper */
#define VB_REAP_PORT_WAIT_US (30 * 1000000ull) /* a destroy waits this long for its port */
#define VB_BACKLOG 128
#define VB_POLL_BUDGET 64 /* completions handled per CQ visit before the loop gets a turn */
#define VB_DRAIN_BUDGET (1u << 20) /* the same, for the last visit before a teardown */
#define VB_CM_BUDGET 16 /* connection events handled per visit of the event channel */

#define VB_ENV_RNDV 1u
#define VB_ENV_DONE 2u
#define VB_ENV_NCREDIT 3u
#define VB_ENV_OPEN 4u
#define VB_ENV_NASK 5u
#define VB_DESC_HEAD 8
#define VB_DESC_SEG 16
#define VB_DESC_MAX (VB_DESC_HEAD + 2 * VB_DESC_SEG)
#define VB_MIN_RX_BUF (RRPCI_HDR_SIZE + VB_DESC_MAX)

#define VB_CACHE_BUCKETS 256
#define VB_RXE_VENDOR_ID 0xffffff /* Soft-RoCE's ibv_device_attr.vendor_id */


/* What a cm_id's context or a work request's wr_id points at. */
enum vb_kind {
    VB_K_LISTENER = 1,
    VB_K_QP,
    VB_K_RECV,
    VB_K_SEND, /* a frame from a registered send buffer */
    VB_K_CTL,  /* inline frame or internal message: nothing to release */
    VB_K_READ, /* a rendezvous READ chunk */
    VB_K_OP,   /* a one-sided operation of the core */
    VB_K_REAPED, /* a cm_id handed to the reaper */
    VB_K_BIND,   /* a grant's memory window being bound (grant.c) */
};
/* What waits in a class's ordered receive queue. */
enum vb_item { VB_I_EAGER = 1, VB_I_RNDV, VB_I_NOTIFY };

struct vb_wr {
    uint8_t kind;
    uint8_t cls;
};
struct vb_item_hdr {
    struct vb_item_hdr *next;
    uint8_t type;
};

struct vb_rbuf {
    struct vb_wr wr;
    struct vb_item_hdr it;
    struct vb_rbuf *free_next;
    uint8_t *buf;
    uint32_t lkey; /* its chunk's registration */
    struct rrpci_hdr h;
};

/* Receive buffers of one queue pair, registered together (qp.c): the first
 * chunk when the QP is made, one more each time lent credit needs more. */
struct vb_rchunk {
    struct vb_rchunk *next;
    struct ibv_mr *mr;
    uint8_t *mem;
    size_t len;
    unsigned n;
    struct vb_rbuf rb[];
};

/* A send buffer of a device's pool (sendpool.c): lent to a class's queue
 * pair from the post of its SEND to the completion. */
struct vb_sbuf {
    struct vb_wr wr;
    struct vb_sbuf *next;  /* its slab's free list; lent: the QP's list */
    struct vb_sbuf *hprev; /* lent: the QP's list */
    struct vb_qp *q;       /* lent to; NULL when free */
    struct vb_slab *slab;
    uint8_t *buf;
};

#define VB_SLAB_BUFS 32
struct vb_slab {
    struct vb_slab *next;          /* every slab of the device */
    struct vb_slab *fnext, *fprev; /* slabs with a free buffer (on_free) */
    bool on_free;
    struct vb_dev *dev;
    struct ibv_mr *mr;
    uint8_t *mem;
    unsigned out; /* buffers lent */
    struct vb_sbuf *free;
    struct vb_sbuf sb[VB_SLAB_BUFS];
};

/* A payload we advertised for the peer to READ. */
struct vb_rout {
    struct rrpci_msg *m;
    struct ibv_mr *mr[2];
    uint16_t gen;
    bool used;
};

struct vb_seg {
    uint64_t addr;
    uint32_t len;
    uint32_t rkey;
};

/* A payload the peer advertised, being READ. */
struct vb_rin {
    struct vb_wr wr;
    struct vb_item_hdr it;
    struct vb_rin *rnext; /* read queue */
    struct rrpci_hdr h;
    uint32_t token;
    uint8_t *buf;
    struct ibv_mr *mr;
    struct vb_pbuf *pb; /* buf and mr are lent by pdev's pool; NULL: our own */
    struct vb_dev *pdev;
    int nseg;
    struct vb_seg seg[2];
    int cur_seg;
    uint32_t cur_off;
    size_t buf_off;
    unsigned reads_out;
    bool all_posted, complete;
};

struct vb_note {
    struct vb_item_hdr it;
    uint32_t imm;
};

/* A one-sided operation of the core, posted in chunks. */
struct vb_op {
    struct vb_wr wr;
    struct vb_op *next;          /* class queue, until every chunk is posted */
    struct vb_op *aprev, *anext; /* every op of the connection */
    struct rrpci_rdma_op op;
    uint64_t laddr;
    uint32_t lkey;
    size_t off;   /* bytes posted */
    unsigned out; /* chunks posted, not completed */
    bool all_posted, reported;
};

struct vb_ctx;
struct vb_conn;

/*
 * The part of a connection's life only this transport has; in order, a
 * connection only moves forward (vb_advance).  The rest is the core's state
 * machine, asked, never copied: vb_live (not down), vb_wired (the first QP
 * established and reported with rrpci_conn_established), !vc->conn (the
 * core closed it: torn down on the way out of the current upcall, after the
 * linger).
 */
enum vb_phase {
    VB_GATHERING, /* the first QP being established; the peer's hello (it rides on
                   * the private data) not taken yet */
    VB_HELLO,     /* the peer's hello is taken: the core has its grants */
    VB_LINGERING, /* closed by the core: its last SENDs and the peer's READs of its
                   * rendezvous payloads get up to VB_LINGER_S */
    VB_FINAL,     /* the peer is gone or the linger expired: nothing to wait for */
};

/* One queue pair's setup; a failed work request sets vb_qp.err. */
enum vb_qp_state {
    VB_QP_NONE,        /* a cm_id at most (attach_at says since when it is wanted) */
    VB_QP_CREATED,     /* rdma_create_qp done */
    VB_QP_ESTABLISHED, /* the CM's ESTABLISHED event came */
};

/* A registered rendezvous receive buffer of a device's pool (rndvpool.c). */
struct vb_pbuf {
    struct vb_pbuf *next;
    uint8_t *buf;
    size_t cap;
    struct ibv_mr *mr;
};

struct vb_dev {
    struct vb_dev *next;
    struct vb_ctx *vx;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct rrpci_io w;
    int max_rd_atom, max_init_rd_atom, max_qp_wr, max_cqe;
    bool mw2; /* type 2 memory windows: grants (grant.c) */
    bool mw_range_unchecked; /* ... whose range the device does not check */
    uint32_t max_msg_sz;
    struct vb_mr *cache[VB_CACHE_BUCKETS];
    struct vb_pbuf *pfree; /* rendezvous receive buffers not lent out */
    size_t pool_bytes;     /* capacity of all of them, free and lent: <= RRPC_VERBS_RNDV_POOL_BYTES */
    struct vb_slab *slabs, *sfree; /* the send buffer pool (sendpool.c) */
    unsigned nslabs;
};

/* A registration of a region on a device: the cache entry, keyed by
 * (addr, len, generation), and a link in the region's own list (its tpriv). */
struct vb_mr {
    struct vb_mr *hnext, *rnext;
    struct vb_dev *dev;
    rrpc_region *r;
    uintptr_t addr;
    size_t len;
    uint64_t gen;
    struct ibv_mr *mr;
};

struct vb_qp {
    uint8_t kind; /* VB_K_QP: first, the cm_id's context */
    uint8_t cls;
    struct vb_conn *vc;
    struct rdma_cm_id *id;
    enum vb_qp_state state;
    bool err; /* a work request failed: the QP is in error, its work is flushed */
    uint32_t max_inline;
    uint64_t attach_at; /* vb_now_us() when the class was first wanted; 0: not yet */
    bool wake_own;      /* the first QP: a connection frame waits for room on it */
    int sq_depth, sq_inflight;
    int sq_sends; /* SENDs not completed: what a closing connection waits for */
    unsigned nrbuf;  /* receive buffers made, in chunks */
    unsigned cover;  /* the grant they cover (the peer's frames in flight) */
    unsigned extra; /* the receive buffers made on demand: bits of enum vb_rx_extra */
    struct vb_rchunk *chunks;
    size_t pool_len; /* their bytes */
    struct vb_rbuf *rfree;
    struct vb_grant *binds; /* grants waiting for this QP to be established */
    struct vb_sbuf *sheld; /* send buffers lent to this QP */
    unsigned sb_out;       /* how many: <= VB_NSEND */
    struct vb_item_hdr *rxq, **rxq_tail;
    bool draining;
    struct vb_rout rout[VB_RNDV_MAX];
    unsigned rout_used;
    struct vb_rin *readq, **readq_tail;
    uint32_t *doneq;
    unsigned done_n, done_cap;
    unsigned data_out;               /* READ/WRITE chunks in flight */
    uint32_t ncredit_owed;           /* notify credits to give back (or grant) */
    uint32_t ncredits, ncredits_max; /* notify credits we hold */
    bool nwant, nasked;              /* a write with notify waits: ask (VB_ENV_NASK), asked */
    struct vb_op *opq, **opq_tail;
    bool blocked, blocked_rndv;
    struct vb_wr ctl;
};

struct vb_conn {
    rrpc_conn *conn; /* NULL once the core closed it */
    rrpc_ctx *ctx;
    struct vb_ctx *vx;
    struct vb_conn *next, *prev;
    struct rdma_cm_id *listen_id; /* passive, while gathering its classes */
    uint64_t cookie;
    enum vb_phase phase; /* only forward: vb_advance */
    int busy;
    struct rrpci_hello hello;
    uint32_t eager_send; /* largest payload sent eagerly */
    uint32_t bsz;        /* size of one send/receive buffer */
    struct vb_dev *dev;
    struct ibv_cq *cq;
    int cqe; /* its size: the completions its QPs can have outstanding */
    struct vb_op *ops;
    struct sockaddr_storage dst, src; /* active: where later classes connect */
    bool has_src;
    struct rrpci_timer attach; /* a wanted class's QP must be established in time */
    struct rrpci_timer linger;
    struct rrpci_timer repoll; /* a CQ visit that used its budget comes back through this */
    /* The CQ is busy-polled, not armed: the context looks at it between
     * its loop passes (vb_busy_poll) while its governor polls, then it is
     * armed again (cq.c). */
    bool cq_busy;
    struct vb_conn *bnext, *bprev; /* the context's busy-polled connections, while cq_busy */
    unsigned poll_gen;
    char peer[INET6_ADDRSTRLEN + 8];
    char why[256]; /* the text of the last rrpci_conn_down */
    char err[192]; /* detail of a setup step that failed */
    struct vb_qp q[VB_NCLS];
};

struct vb_reap {
    struct vb_reap *next;
    struct rdma_cm_id *id;
    struct ibv_context *verbs; /* read on the loop thread, when queued */
    uint8_t port_num;
    bool dreq;   /* established and not disconnected: the destroy sends a DREQ */
    uint64_t at; /* vb_now_us() when queued */
};

/* The thread that destroys cm_ids.  Shared by the context and the thread;
 * the last of the two to leave frees it (and the event channel, which must
 * outlive its cm_ids). */
struct vb_reaper {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    struct vb_reap *head, **tail;
    unsigned pending; /* queued or being destroyed */
    bool stop, orphan;
    struct rdma_event_channel *ech;
};

/* What rendezvous receives cost in registrations (vb_rndv_counts). */
struct vb_rndv_counts {
    uint64_t regs;      /* ibv_reg_mr of a receive buffer: new pool buffers and fallbacks */
    uint64_t reuses;    /* receives served by a pool buffer registered before */
    uint64_t fallbacks; /* receives registered for themselves: the pool was full */
};

struct vb_ctx {
    rrpc_ctx *ctx;
    bool open;
    struct rdma_event_channel *ech;
    struct vb_reaper *reaper; /* started with the first cm_id to destroy */
    struct rrpci_io ech_w;
    struct vb_dev *devs;
    struct vb_conn *vcs;
    uint32_t eager;
    unsigned busy_poll_us; /* RRPC_VERBS_BUSY_POLL_US: the window asked of the governor */
    unsigned poll_gen;     /* vb_busy_poll's pass, to visit each connection once */
    struct vb_conn *busy_head, *busy_tail; /* connections whose CQ is busy-polled */
    uint32_t chunk;       /* bytes per READ/WRITE work request */
    unsigned data_depth;  /* such chunks in flight per QP */
    size_t rndv_pool_max; /* RRPC_VERBS_RNDV_POOL_BYTES, per device */
    struct vb_rndv_counts rndv; /* the rendezvous receive pool's counters */
};

struct vb_listener {
    uint8_t kind; /* VB_K_LISTENER: first, the cm_id's context */
    rrpc_listener *l;
    struct vb_ctx *vx;
    struct rdma_cm_id *id;
};

struct vb_conn_priv {
    struct vb_conn *vc;
};

/* The private data of one class's REQ or REP, decoded (pdata.c). */
struct vb_pd {
    struct rrpci_hello hello;
    int cls;
    unsigned ncredits;
    uint64_t cookie;
};

/* ---- small helpers ------------------------------------------------------- */

/* The size of one send or receive buffer: a frame of RRPC_VERBS_EAGER bytes,
 * header included, rounded up to 64. */
static inline uint32_t vb_bsz(const struct vb_ctx *vx)
{
    return (RRPCI_HDR_SIZE + vx->eager + 63u) & ~63u;
}

/* Calls that return -1 or NULL and set errno. */
static inline int vb_errno(void)
{
    return errno > 0 ? -errno : -EIO;
}

/* ibv_post_*, ibv_query_* and friends return an errno value (some providers
 * a negated one). */
static inline int vb_ret(int ret)
{
    if (ret > 0)
        return -ret;
    if (ret == -1)
        return vb_errno();
    return ret;
}

static inline uint64_t vb_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}


/* teardown.c */
extern uint8_t vb_reaped_kind;

/* ---- device.c ---- */
void vb_sa_str(const struct sockaddr *sa, char *buf, size_t len);
int vb_no_device(rrpc_ctx *ctx, const char *what);
struct vb_ctx *vb_vx(rrpc_ctx *ctx);
int vb_ctx_open(rrpc_ctx *ctx, struct vb_ctx **ret);
struct vb_dev *vb_dev_get(struct vb_ctx *vx, struct ibv_context *verbs, int *ret);
/* RRPC_ACCESS_REMOTE_* bits as ibv access flags (device.c). */
unsigned vb_remote_access(unsigned access);
/* @len bytes (rounded up to whole pages) of pages of their own, registered on @pd
 * for local writes, in *@mr (its addr and length say where).  They are mapped for
 * themselves, not taken from the heap: freeing gives them back to the system at
 * once (the heap would keep them resident below its top), and no other allocation
 * shares a registered page.  0, or -errno with *@mapped saying whether the mapping
 * or the registration failed. */
int vb_pages_reg(struct ibv_pd *pd, size_t len, struct ibv_mr **mr, bool *mapped);
/* Deregisters and unmaps what vb_pages_reg gave. */
void vb_pages_dereg(struct ibv_mr *mr);
int vb_mr_get(struct vb_dev *d, rrpc_region *r, struct vb_mr **ret);
void vb_region_release(rrpc_ctx *ctx, rrpc_region *r);

/* ---- sendpool.c ---- */
/* Whether @q may take another send buffer (the pool grows as needed). */
bool vb_sbuf_room(const struct vb_qp *q);
/* A send buffer lent to @q; NULL with *rc -EAGAIN (wait for @q's own SENDs
 * to complete) or an error (none could be registered and @q has none). */
struct vb_sbuf *vb_sbuf_get(struct vb_qp *q, int *rc);
void vb_sbuf_put(struct vb_sbuf *sb);
/* Every buffer @q holds back to the pool: its QP is destroyed. */
void vb_sbuf_put_all(struct vb_qp *q);
/* Frees the slabs that lend nothing, but one. */
void vb_spool_trim(struct vb_dev *d);
void vb_spool_clear(struct vb_dev *d);
struct vb_spool_counts {
    unsigned slabs; /* of VB_SLAB_BUFS buffers, on every device */
    unsigned lent;  /* buffers lent out */
};
/* The context's send pool (tests); -ENOENT when it has not used rdma://. */
int vb_spool_counts(rrpc_ctx *ctx, struct vb_spool_counts *ret);

/* ---- teardown.c ---- */
void vb_destroy_id(struct vb_ctx *vx, struct rdma_cm_id *id, bool dreq);
void vb_reaper_stop(struct vb_ctx *vx);
struct vb_conn *vb_vc(rrpc_conn *c);
struct vb_conn *vb_conn_new(struct vb_ctx *vx, rrpc_conn *c);
void vb_rin_free(struct vb_rin *r);
/* Gives @r a registered buffer of r->h.len bytes: from @d's pool, or, when
 * the pool is at RRPC_VERBS_RNDV_POOL_BYTES, registered for this message
 * alone (counted, logged at debug).  vb_rin_free gives it back. */
int vb_rndv_buf_get(struct vb_dev *d, struct vb_rin *r, const char **why);
/* Deregisters and frees the free buffers of @d's pool (lent ones come back
 * through vb_rin_free first: the connections go before the devices). */
void vb_rndv_pool_clear(struct vb_dev *d);
/* The context's rendezvous receive counters (tests); -ENOENT when it has
 * not used rdma://. */
int vb_rndv_counts(rrpc_ctx *ctx, struct vb_rndv_counts *ret);
void vb_rout_release(struct vb_rout *o);
void vb_teardown(struct vb_conn *vc);
void vb_enter(struct vb_conn *vc);
void vb_leave(struct vb_conn *vc);
bool vb_live(struct vb_conn *vc);
bool vb_wired(struct vb_conn *vc);

/* grant.c */
struct vb_grant {
    struct vb_wr wr;
    struct vb_grant *pnext; /* its QP's binds, until that is established */
    rrpc_grant *g; /* NULL once the core ended it */
    struct ibv_mw *mw;
    struct ibv_mr *mr; /* the grant's own MR, where the device ignores a window's range */
    struct ibv_mr *bind_mr; /* what the window is bound over: mr or the region's */
    uint64_t addr, len;
    uint32_t rkey;
    unsigned access; /* IBV_ACCESS_REMOTE_* */
    bool bind_out; /* its BIND_MW not completed yet */
    bool waiting;  /* on its QP's binds: the QP is not established yet */
};
int vb_grant_bind(rrpc_conn *c, rrpc_grant *g);
void vb_grant_end(rrpc_conn *c, rrpc_grant *g);
void vb_grant_bind_done(struct vb_grant *vg, const struct ibv_wc *wc);
/* Posts the binds that waited for @q to be established. */
void vb_grant_post_waiting(struct vb_qp *q);
/* @q goes away: its waiting binds are dropped (the core ends their grants). */
void vb_grant_drop_waiting(struct vb_qp *q);
void vb_advance(struct vb_conn *vc, enum vb_phase p);
/* Takes the connection down with @reason and the formatted why (once). */
void vb_fail(struct vb_conn *vc, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- qp.c ---- */
int vb_conn_setup(struct vb_conn *vc, struct ibv_context *verbs);
int vb_post_recv(struct vb_qp *q, struct vb_rbuf *rb);
int vb_qp_create(struct vb_qp *q);
/* ops->rx_grow: receive buffers for a grant of @grant on class @cls. */
int vb_rx_grow(rrpc_conn *c, int cls, uint32_t grant);
/* Receive buffers a QP makes the first time it needs them, not with the QP
 * (they stay until the connection closes): VB_RX_RNDV, VB_RNDV_MAX before
 * our first rendezvous send, for the peer's DONE answers; VB_RX_NOTIFY,
 * VB_NOTIFY_CREDITS when the peer first asks for notify credits. */
enum vb_rx_extra { VB_RX_RNDV = 1, VB_RX_NOTIFY = 2 };
/* Makes and posts @what's buffers on @q once (q->extra says which are
 * made); 0, or -errno with vc->err saying why.  A post that fails takes the
 * connection down. */
int vb_rx_extra(struct vb_qp *q, enum vb_rx_extra what);
/* Deregisters and frees @q's receive buffers. */
void vb_qp_buffers_free(struct vb_qp *q);

/* ---- pdata.c ---- */
void vb_pd_encode(const struct vb_conn *vc, int cls, uint8_t out[VB_PD_SIZE]);
int vb_pd_decode(const uint8_t *p, size_t len, struct vb_pd *pd, const char **why);
void vb_reject(struct rdma_cm_id *id, int code);
int vb_hello_peer(struct vb_conn *vc, const struct rrpci_hello *h);
void vb_conn_param(struct vb_conn *vc, struct rdma_conn_param *p, const uint8_t *pd,
                   int resp, int init);

/* ---- send.c ---- */
bool vb_sq_room(const struct vb_qp *q, int reserve);
int vb_post_send(struct vb_qp *q, struct ibv_send_wr *wr);
int vb_post_ctl(struct vb_qp *q, uint32_t env, uint32_t val);
int vb_send(rrpc_conn *c, int cls, struct rrpci_msg *m);

/* ---- onesided.c ---- */
void vb_op_unlink(struct vb_conn *vc, struct vb_op *o);
int vb_rdma(rrpc_conn *c, const struct rrpci_rdma_op *op);
int vb_region_key(rrpc_conn *c, rrpc_region *r, uint64_t *ret_key);
int vb_kick(struct vb_qp *q);
void vb_wake(struct vb_qp *q);

/* ---- recv.c ---- */
void vb_drain(struct vb_qp *q);
/* The connection is wired: rendezvous descriptors that came before are
 * admitted now, in order, and their READs start. */
void vb_rndv_admit_held(struct vb_qp *q);
void vb_on_recv(struct vb_qp *q, struct vb_rbuf *rb, const struct ibv_wc *wc);

/* ---- cq.c ---- */
/* Puts @vc on or takes it off its context's list of busy-polled CQs. */
void vb_set_busy(struct vb_conn *vc, bool busy);
unsigned vb_poll(struct vb_conn *vc, unsigned budget);
int vb_busy_poll(rrpc_ctx *ctx, bool arm);
void vb_repoll_cb(struct rrpci_timer *w);
void vb_cq_cb(struct rrpci_io *w, unsigned revents);

/* ---- cm.c ---- */
void vb_cm_cb(struct rrpci_io *w, unsigned revents);
/* Active side: connects class @cls's QP (its rdma_cm id, TOS, address). */
int vb_attach(struct vb_conn *vc, int cls);
/* Class @q is needed and its QP is not established: the active side
 * connects it, the passive side asks for it; both bound the wait.  0, or
 * the connection failed. */
int vb_want(struct vb_qp *q);
void vb_attach_cb(struct rrpci_timer *w);

#endif

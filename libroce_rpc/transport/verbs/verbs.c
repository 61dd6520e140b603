/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport: RoCEv2 through librdmacm + libibverbs.
 *
 * One RC queue pair per (connection, QoS class), each on its own rdma_cm id.
 * The active side sets the class's TOS on the id right after creating it
 * (later has no effect on rxe; the passive side inherits it from the REQ).
 * All four QPs of a connection share one CQ; the CQs of a context share one
 * completion channel per device, and the rdma_cm ids one event channel per
 * context: both fds are ev_io watchers on the context's loop.
 *
 * Wire, on top of the frame format of core/frame.h (docs/protocol.md):
 *
 *  - Connection private data (REQ and REP, 44 bytes; a REQ carries <= 56):
 *      0  rrpci_hello (32 bytes, rrpci_hello_encode; rx_buf = our receive
 *         buffer size, header included)
 *      32 u8 verbs layout version (1)   33 u8 class of this QP
 *      34 u8 WRITE_WITH_IMM credits granted for this class   35 u8 'V' (0x56)
 *      36 u64 connection cookie (random, chosen by the active side)
 *    Every class carries the hello, so the passive side can create the
 *    connection on whichever class arrives first and attach the others to it
 *    by cookie.  A REJ from us carries 8 bytes: u32 "RRVR" magic, i32 reason.
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
 *      SEND_WITH_IMM (3 << 24 | n)   n WRITE_WITH_IMM credits returned
 *      RDMA_WRITE_WITH_IMM           one-sided notify: the whole 32-bit
 *                                    immediate goes to rrpci_conn_notify.
 *    Frames, rendezvous frames and notifies of one class are delivered in
 *    arrival order.
 *
 *  - Receive buffers per class: the credits we grant (the core bounds the
 *    frames in flight with them) + 8 for exempt frames (the core sends a
 *    CREDIT frame only when half a grant is owed, so at most 2 are in flight)
 *    + 8 for rendezvous-done messages (we allow 8 rendezvous sends in flight
 *    per class) + 16 for WRITE_WITH_IMM (the initiator holds 16 notify
 *    credits per class, returned in batches of 8) + 2 for those returns
 *    + 1 spare, so a buffer is re-posted before its frame is delivered and
 *    the credit the application's handler returns is always backed.
 *    RNR retry is still infinite, as a safety net.
 *
 * Behaviour worth knowing:
 *  - RDMA READs (rendezvous) and one-sided READ/WRITEs go in chunks of
 *    RRPC_VERBS_CHUNK bytes (256 KiB), RRPC_VERBS_DATA_DEPTH (2) in flight
 *    per QP.  Soft-RoCE over a veth drops bursts beyond the backlog (1000
 *    packets); a dropped tail then waits for the ~0.5 s ACK timeout, which
 *    made one 1 MiB READ take 2.3 s instead of 10 ms.
 *  - A frame is not posted while a one-sided operation of its class waits
 *    for room, so on one class a frame sent after a WRITE arrives after it.
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
 *  - Tunables (environment, read when a context first uses rdma://):
 *    RRPC_VERBS_EAGER (8192: larger payloads use the rendezvous),
 *    RRPC_VERBS_BUSY_POLL_US (0: after completions, poll the CQ this long
 *    before re-arming), RRPC_VERBS_CHUNK, RRPC_VERBS_DATA_DEPTH.
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

#include <ev.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <roce_rpc/error.h>
#include <roce_rpc/memory.h>

#include "transport/transport.h"
#include "util/idmap.h" /* rrpci_container_of */
#include "util/resolve.h"

#define VB_NCLS RRPCI_MAX_CLASSES
#define VB_PD_VERSION 1
#define VB_PD_SIZE 44
#define VB_PD_MARK 0x56 /* 'V': tells a roce-rpc peer from junk before the version */
#define VB_REJ_MAGIC 0x52565252u /* "RRVR" */
#define VB_REJ_SIZE 8

#define VB_EXEMPT_RESERVE 8
#define VB_RNDV_MAX 8 /* rendezvous sends in flight per class (<= 256) */
#define VB_NOTIFY_CREDITS 16
#define VB_NCREDIT_RESERVE 2
#define VB_SPARE 1
#define VB_NSEND 32 /* registered send buffers per class */
#define VB_SQ_DEPTH 128
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

#define VB_ENV_RNDV 1u
#define VB_ENV_DONE 2u
#define VB_ENV_NCREDIT 3u
#define VB_DESC_HEAD 8
#define VB_DESC_SEG 16
#define VB_DESC_MAX (VB_DESC_HEAD + 2 * VB_DESC_SEG)
#define VB_MIN_RX_BUF (RRPCI_HDR_SIZE + VB_DESC_MAX)

#define VB_CACHE_BUCKETS 256


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
    struct rrpci_hdr h;
};

struct vb_sbuf {
    struct vb_wr wr;
    struct vb_sbuf *next;
    uint8_t *buf;
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

struct vb_dev {
    struct vb_dev *next;
    struct vb_ctx *vx;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    ev_io w;
    int max_rd_atom, max_init_rd_atom, max_qp_wr, max_cqe;
    uint32_t max_msg_sz;
    struct vb_mr *cache[VB_CACHE_BUCKETS];
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
    bool has_qp, established, err;
    uint32_t max_inline;
    int sq_depth, sq_inflight;
    int sq_sends; /* SENDs not completed: what a closing connection waits for */
    unsigned nrbuf, nsbuf;
    struct vb_rbuf *rb, *rfree;
    struct vb_sbuf *sb, *sfree;
    struct vb_item_hdr *rxq, **rxq_tail;
    bool draining;
    struct vb_rout rout[VB_RNDV_MAX];
    unsigned rout_used;
    struct vb_rin *readq, **readq_tail;
    uint32_t *doneq;
    unsigned done_n, done_cap;
    unsigned data_out;               /* READ/WRITE chunks in flight */
    uint32_t ncredit_owed;           /* notify credits to give back */
    uint32_t ncredits, ncredits_max; /* notify credits we hold */
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
    bool passive, hello_done, up, closing, lingering, linger_expired, peer_gone;
    int busy;
    unsigned nestab;
    struct rrpci_hello hello;
    uint32_t eager_send; /* largest payload sent eagerly */
    uint32_t bsz;        /* size of one send/receive buffer */
    struct vb_dev *dev;
    struct ibv_cq *cq;
    uint8_t *pool;
    size_t pool_len;
    struct ibv_mr *pool_mr;
    struct vb_op *ops;
    struct rrpci_timer linger;
    struct rrpci_timer repoll; /* a CQ visit that used its budget comes back through this */
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

struct vb_ctx {
    rrpc_ctx *ctx;
    bool open;
    struct rdma_event_channel *ech;
    struct vb_reaper *reaper; /* started with the first cm_id to destroy */
    ev_io ech_w;
    struct vb_dev *devs;
    struct vb_conn *vcs;
    uint32_t eager;
    unsigned busy_poll_us;
    uint32_t chunk;       /* bytes per READ/WRITE work request */
    unsigned data_depth;  /* such chunks in flight per QP */
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

const struct rrpci_transport_ops rrpci_verbs_ops;

/* ---- rdma-core's error conventions, converted here once ---------------- */

/* Calls that return -1 or NULL and set errno. */
static int vb_errno(void)
{
    return errno > 0 ? -errno : -EIO;
}
/* ibv_post_*, ibv_query_* and friends return an errno value (some providers
 * a negated one). */
static int vb_ret(int ret)
{
    if (ret > 0)
        return -ret;
    if (ret == -1)
        return vb_errno();
    return ret;
}

static uint64_t vb_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void vb_sa_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        snprintf(buf, len, "?");
    }
}

/* @what says what has no device, e.g. "rdma://h:p: no RDMA device serves h". */
static int vb_no_device(rrpc_ctx *ctx, const char *what)
{
    return rrpci_set_error(ctx, RRPC_E_NO_DEVICE,
                           "%s. The verbs transport (rdma://) needs an RDMA device and never "
                           "falls back to tcp; for Soft-RoCE on a host without RDMA hardware: "
                           "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <if> (then "
                           "use that interface's address), or use tcp://",
                           what);
}

/* ---- context ------------------------------------------------------------ */

static void vb_cm_cb(struct ev_loop *loop, ev_io *w, int revents);
static void vb_cq_cb(struct ev_loop *loop, ev_io *w, int revents);

static struct vb_ctx *vb_vx(rrpc_ctx *ctx)
{
    return rrpci_ctx_tpriv(ctx, &rrpci_verbs_ops);
}

static int vb_ctx_open(rrpc_ctx *ctx, struct vb_ctx **ret)
{
    struct vb_ctx *vx = vb_vx(ctx);
    if (vx->open) {
        *ret = vx;
        return 0;
    }
    vx->ctx = ctx;
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list)
        ibv_free_device_list(list);
    if (!list || n == 0)
        return vb_no_device(ctx, "rdma://: no RDMA device on this host");
    vx->ech = rdma_create_event_channel();
    if (!vx->ech) {
        int err = vb_errno();
        if (err == -ENODEV || err == -ENOENT || err == -ENOSYS)
            return vb_no_device(ctx, "rdma://: rdma_cm is not available on this host");
        return rrpci_set_error(ctx, err, "rdma_create_event_channel: %s", rrpc_strerror(err));
    }
    int fl = fcntl(vx->ech->fd, F_GETFL);
    if (fl < 0 || fcntl(vx->ech->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int err = vb_errno();
        rdma_destroy_event_channel(vx->ech);
        vx->ech = NULL;
        return err;
    }
    /* Validated, with their defaults, in the context's configuration table. */
    vx->eager = (unsigned)rrpci_ctx_tunable(ctx, "RRPC_VERBS_EAGER");
    vx->busy_poll_us = (unsigned)rrpci_ctx_tunable(ctx, "RRPC_VERBS_BUSY_POLL_US");
    vx->chunk = (unsigned)rrpci_ctx_tunable(ctx, "RRPC_VERBS_CHUNK");
    vx->data_depth = (unsigned)rrpci_ctx_tunable(ctx, "RRPC_VERBS_DATA_DEPTH");
    ev_io_init(&vx->ech_w, vb_cm_cb, vx->ech->fd, EV_READ);
    vx->ech_w.data = vx;
    ev_io_start(rrpci_ctx_loop(ctx), &vx->ech_w);
    vx->open = true;
    *ret = vx;
    return 0;
}

/* ---- destroying cm_ids, off the loop -------------------------------------- */

static uint8_t vb_reaped_kind = VB_K_REAPED;

static void vb_reaper_free(struct vb_reaper *r)
{
    if (r->ech)
        rdma_destroy_event_channel(r->ech);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* Whether the port is known to be down.  The CM sends a DREQ when an
 * established cm_id is disconnected or destroyed; on rxe, a DREQ sent while
 * the port is down left the device's CM unable to send anything afterwards
 * (measured: after a link flap, no new connection came up from that device,
 * while another program's connections did when no DREQ had been sent during
 * the outage).  So both wait for the port, as far as they can: the port may
 * go down right after the check, and the reaper gives up waiting after
 * VB_REAP_PORT_WAIT_US.  Until then the peer learns of the close only
 * through its keepalive. */
static bool vb_port_down(struct ibv_context *verbs, uint8_t port_num)
{
    struct ibv_port_attr pa;
    if (!verbs || !port_num || ibv_query_port(verbs, port_num, &pa))
        return false;
    return pa.state != IBV_PORT_ACTIVE;
}

static void *vb_reaper_main(void *arg)
{
    struct vb_reaper *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->head && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (!r->head)
            break;
        struct vb_reap *it = r->head;
        r->head = it->next;
        if (!r->head)
            r->tail = &r->head;
        pthread_mutex_unlock(&r->mu);
        while (it->dreq && vb_port_down(it->verbs, it->port_num) &&
               vb_now_us() - it->at < VB_REAP_PORT_WAIT_US)
            usleep(100 * 1000);
        rdma_destroy_id(it->id);
        free(it);
        pthread_mutex_lock(&r->mu);
        r->pending--;
        pthread_cond_broadcast(&r->cv);
    }
    bool orphan = r->orphan;
    pthread_mutex_unlock(&r->mu);
    if (orphan)
        vb_reaper_free(r);
    return NULL;
}

/* Destroys @id without blocking the loop: its events from now on are only
 * acknowledged (vb_cm_cb), and the reaper thread calls rdma_destroy_id.
 * @dreq: the id is established and was not disconnected, so the destroy
 * will send a DREQ and waits for the port first. */
static void vb_destroy_id(struct vb_ctx *vx, struct rdma_cm_id *id, bool dreq)
{
    id->context = &vb_reaped_kind;
    struct vb_reaper *r = vx->reaper;
    struct vb_reap *it = malloc(sizeof(*it));
    if (!r && it && (r = calloc(1, sizeof(*r)))) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->cv, &ca);
        pthread_condattr_destroy(&ca);
        r->tail = &r->head;
        if (pthread_create(&r->th, NULL, vb_reaper_main, r)) {
            vb_reaper_free(r);
            r = NULL;
        } else {
            vx->reaper = r;
        }
    }
    if (!r || !it) {
        RRPCI_LOG(vx->ctx, LOG_WARNING,
                  "verbs: no memory or thread for the cm_id reaper; destroying on the loop");
        free(it);
        rdma_destroy_id(id);
        return;
    }
    it->id = id;
    it->verbs = id->verbs;
    it->port_num = id->port_num;
    it->dreq = dreq;
    it->at = vb_now_us();
    it->next = NULL;
    pthread_mutex_lock(&r->mu);
    *r->tail = it;
    r->tail = &it->next;
    r->pending++;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* At the context's end: waits VB_REAP_WAIT_S for the reaper, then leaves it
 * to finish alone with the event channel, which it then destroys. */
static void vb_reaper_stop(struct vb_ctx *vx)
{
    struct vb_reaper *r = vx->reaper;
    if (!r) {
        rdma_destroy_event_channel(vx->ech);
        return;
    }
    vx->reaper = NULL;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += VB_REAP_WAIT_S;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    r->ech = vx->ech;
    pthread_cond_broadcast(&r->cv);
    while (r->pending && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0)
        ;
    unsigned left = r->pending;
    r->orphan = left > 0;
    if (left)
        pthread_detach(r->th); /* under the lock: the thread frees @r once it is released */
    pthread_mutex_unlock(&r->mu);
    if (left) {
        RRPCI_LOG(vx->ctx, LOG_WARNING,
                  "verbs: %u cm_id(s) still being destroyed after %d s (waiting for a port "
                  "that is down, or blocked in the kernel); leaving them to a background "
                  "thread, which the process may wait for at exit",
                  left, VB_REAP_WAIT_S);
        return;
    }
    pthread_join(r->th, NULL);
    vb_reaper_free(r);
}

static struct vb_dev *vb_dev_get(struct vb_ctx *vx, struct ibv_context *verbs, int *ret)
{
    struct vb_dev *d;
    for (d = vx->devs; d; d = d->next)
        if (d->verbs == verbs)
            return d;
    d = calloc(1, sizeof(*d));
    if (!d) {
        *ret = -ENOMEM;
        return NULL;
    }
    d->vx = vx;
    d->verbs = verbs;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    int rc = vb_ret(ibv_query_device(verbs, &da));
    if (rc)
        goto fail;
    d->max_rd_atom = da.max_qp_rd_atom;
    d->max_init_rd_atom = da.max_qp_init_rd_atom;
    d->max_qp_wr = da.max_qp_wr;
    d->max_cqe = da.max_cqe;
    d->max_msg_sz = vx->chunk;
    if (vb_ret(ibv_query_port(verbs, 1, &pa)) == 0 && pa.max_msg_sz && pa.max_msg_sz < d->max_msg_sz)
        d->max_msg_sz = pa.max_msg_sz;
    d->pd = ibv_alloc_pd(verbs);
    if (!d->pd) {
        rc = vb_errno();
        goto fail;
    }
    d->ch = ibv_create_comp_channel(verbs);
    if (!d->ch) {
        rc = vb_errno();
        goto fail;
    }
    int fl = fcntl(d->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(d->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        rc = vb_errno();
        goto fail;
    }
    ev_io_init(&d->w, vb_cq_cb, d->ch->fd, EV_READ);
    d->w.data = d;
    ev_io_start(rrpci_ctx_loop(vx->ctx), &d->w);
    d->next = vx->devs;
    vx->devs = d;
    RRPCI_LOG(vx->ctx, LOG_DEBUG, "verbs: using device %s (chunk %u, rd_atom %d/%d)",
              ibv_get_device_name(verbs->device), d->max_msg_sz, d->max_rd_atom,
              d->max_init_rd_atom);
    return d;
fail:
    if (d->ch)
        ibv_destroy_comp_channel(d->ch);
    if (d->pd)
        ibv_dealloc_pd(d->pd);
    free(d);
    *ret = rrpci_set_error(vx->ctx, rc, "verbs: setting up device %s: %s",
                           ibv_get_device_name(verbs->device), rrpc_strerror(rc));
    return NULL;
}

/* ---- registration cache ----------------------------------------------- */

static unsigned vb_hash(uintptr_t a, size_t l, uint64_t g)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)l + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
    h ^= g * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return (unsigned)(h % VB_CACHE_BUCKETS);
}

static int vb_mr_get(struct vb_dev *d, rrpc_region *r, struct vb_mr **ret)
{
    uintptr_t a = (uintptr_t)rrpci_region_addr(r);
    size_t l = rrpci_region_len(r);
    uint64_t g = rrpci_region_generation(r);
    unsigned h = vb_hash(a, l, g);
    struct vb_mr *m;
    for (m = d->cache[h]; m; m = m->hnext)
        if (m->addr == a && m->len == l && m->gen == g) {
            *ret = m;
            return 0;
        }
    unsigned acc = rrpci_region_access(r);
    int fl = IBV_ACCESS_LOCAL_WRITE;
    if (acc & RRPC_ACCESS_REMOTE_READ)
        fl |= IBV_ACCESS_REMOTE_READ;
    if (acc & RRPC_ACCESS_REMOTE_WRITE)
        fl |= IBV_ACCESS_REMOTE_WRITE;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->mr = ibv_reg_mr(d->pd, (void *)a, l, fl);
    if (!m->mr) {
        int rc = vb_errno();
        free(m);
        return rrpci_set_error(d->vx->ctx, rc, "ibv_reg_mr of %zu bytes on %s: %s%s", l,
                               ibv_get_device_name(d->verbs->device), rrpc_strerror(rc),
                               rc == -ENOMEM || rc == -EPERM || rc == -EAGAIN
                                   ? " (is the locked-memory limit, ulimit -l, too low?)"
                                   : "");
    }
    m->dev = d;
    m->r = r;
    m->addr = a;
    m->len = l;
    m->gen = g;
    m->hnext = d->cache[h];
    d->cache[h] = m;
    m->rnext = rrpci_region_tpriv(r);
    rrpci_region_set_tpriv(r, m);
    *ret = m;
    return 0;
}

static void vb_mr_unhash(struct vb_mr *m)
{
    struct vb_mr **pp = &m->dev->cache[vb_hash(m->addr, m->len, m->gen)];
    while (*pp && *pp != m)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = m->hnext;
}

static void vb_region_release(rrpc_ctx *ctx, rrpc_region *r)
{
    struct vb_mr *m = rrpci_region_tpriv(r);
    while (m) {
        struct vb_mr *next = m->rnext;
        vb_mr_unhash(m);
        ibv_dereg_mr(m->mr);
        free(m);
        m = next;
    }
    rrpci_region_set_tpriv(r, NULL);
}

/* ---- connection objects ------------------------------------------------ */

static struct vb_conn *vb_vc(rrpc_conn *c)
{
    struct vb_conn_priv *p = rrpci_conn_priv(c);
    return p ? p->vc : NULL;
}

static void vb_linger_cb(struct ev_loop *loop, ev_timer *w, int revents);
static void vb_repoll_cb(struct ev_loop *loop, ev_timer *w, int revents);

static struct vb_conn *vb_conn_new(struct vb_ctx *vx, rrpc_conn *c)
{
    struct vb_conn *vc = calloc(1, sizeof(*vc));
    if (!vc)
        return NULL;
    vc->conn = c;
    vc->ctx = vx->ctx;
    vc->vx = vx;
    rrpci_conn_hello_local(c, &vc->hello);
    vc->hello.rx_buf = RRPCI_HDR_SIZE + vx->eager;
    vc->bsz = (RRPCI_HDR_SIZE + vx->eager + 63u) & ~63u;
    snprintf(vc->peer, sizeof(vc->peer), "?");
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        q->kind = VB_K_QP;
        q->cls = (uint8_t)i;
        q->vc = vc;
        q->rxq_tail = &q->rxq;
        q->readq_tail = &q->readq;
        q->opq_tail = &q->opq;
        q->ctl.kind = VB_K_CTL;
        q->ctl.cls = (uint8_t)i;
    }
    rrpci_timer_init(vc->ctx, &vc->linger, vb_linger_cb, VB_LINGER_S, 0);
    vc->linger.w.data = vc;
    rrpci_timer_init(vc->ctx, &vc->repoll, vb_repoll_cb, 0, 0);
    vc->repoll.w.data = vc;
    vc->next = vx->vcs;
    if (vx->vcs)
        vx->vcs->prev = vc;
    vx->vcs = vc;
    struct vb_conn_priv *p = rrpci_conn_priv(c);
    p->vc = vc;
    return vc;
}

static void vb_rin_free(struct vb_rin *r)
{
    if (r->mr)
        ibv_dereg_mr(r->mr);
    free(r->buf);
    free(r);
}

static void vb_rout_release(struct vb_rout *o)
{
    for (int i = 0; i < 2; i++)
        if (o->mr[i]) {
            ibv_dereg_mr(o->mr[i]);
            o->mr[i] = NULL;
        }
    if (o->m)
        rrpci_msg_free(o->m);
    o->m = NULL;
    o->used = false;
}

/* Destroys everything: QPs, then what their work requests pointed at, the
 * CQ, the buffers and the cm_ids.  No upcall. */
static void vb_teardown(struct vb_conn *vc)
{
    struct vb_ctx *vx = vc->vx;
    rrpci_timer_stop(&vc->linger);
    rrpci_timer_stop(&vc->repoll);
    if (vc->conn) {
        struct vb_conn_priv *p = rrpci_conn_priv(vc->conn);
        p->vc = NULL;
        vc->conn = NULL;
    }
    if (vc->prev)
        vc->prev->next = vc->next;
    else
        vx->vcs = vc->next;
    if (vc->next)
        vc->next->prev = vc->prev;
    bool dreq[VB_NCLS] = {false};
    for (int i = 0; i < VB_NCLS; i++) {
        struct rdma_cm_id *id = vc->q[i].id;
        if (!id || !vc->q[i].established)
            continue;
        if (vb_port_down(id->verbs, id->port_num))
            dreq[i] = true; /* left to the destroy, once the port is back */
        else
            rdma_disconnect(id);
    }
    for (int i = 0; i < VB_NCLS; i++)
        if (vc->q[i].has_qp)
            rdma_destroy_qp(vc->q[i].id);
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        for (int k = 0; k < VB_RNDV_MAX; k++)
            if (q->rout[k].used)
                vb_rout_release(&q->rout[k]);
        struct vb_item_hdr *it = q->rxq;
        while (it) {
            struct vb_item_hdr *next = it->next;
            if (it->type == VB_I_RNDV)
                vb_rin_free(rrpci_container_of(it, struct vb_rin, it));
            else if (it->type == VB_I_NOTIFY)
                free(rrpci_container_of(it, struct vb_note, it));
            it = next;
        }
    }
    while (vc->ops) {
        struct vb_op *o = vc->ops;
        vc->ops = o->anext;
        free(o);
    }
    if (vc->cq)
        ibv_destroy_cq(vc->cq);
    if (vc->pool_mr)
        ibv_dereg_mr(vc->pool_mr);
    free(vc->pool);
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        if (q->id)
            vb_destroy_id(vx, q->id, dreq[i]);
        free(q->rb);
        free(q->sb);
        free(q->doneq);
    }
    free(vc);
}

static bool vb_needs_linger(struct vb_conn *vc)
{
    if (vc->peer_gone || vc->linger_expired || vc->nestab < VB_NCLS)
        return false;
    bool busy = false;
    for (int i = 0; i < VB_NCLS; i++) {
        if (vc->q[i].err)
            return false;
        if (vc->q[i].sq_sends > 0 || vc->q[i].rout_used > 0)
            busy = true;
    }
    return busy;
}

/* A closed connection lets its last SENDs (an ERROR frame, a response) and
 * the peer's READs of its rendezvous payloads finish, for a bounded time,
 * before it disconnects. */
static void vb_close_step(struct vb_conn *vc)
{
    if (vb_needs_linger(vc)) {
        if (!vc->lingering) {
            vc->lingering = true;
            rrpci_timer_start(&vc->linger);
        }
        return;
    }
    vb_teardown(vc);
}

/* Every entry from the loop (cm event, CQ event, timer) brackets its work
 * with these, so a close from inside an upcall only marks the connection
 * and the teardown happens on the way out. */
static void vb_enter(struct vb_conn *vc)
{
    vc->busy++;
}
static void vb_leave(struct vb_conn *vc)
{
    if (--vc->busy == 0 && vc->closing)
        vb_close_step(vc);
}

static bool vb_live(struct vb_conn *vc)
{
    return vc->conn && !rrpci_conn_is_down(vc->conn);
}

__attribute__((format(printf, 3, 4))) static void vb_fail(struct vb_conn *vc, int reason,
                                                          const char *fmt, ...)
{
    rrpc_conn *c = vc->conn;
    if (!c || rrpci_conn_is_down(c))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vc->why, sizeof(vc->why), fmt, ap);
    va_end(ap);
    if (reason == RRPC_E_NO_DEVICE)
        rrpci_set_error(vc->ctx, reason, "%s", vc->why);
    rrpci_conn_ref(c);
    vc->busy++;
    rrpci_conn_down(c, reason, vc->why);
    vc->busy--;
    rrpci_conn_unref(c);
}

static void vb_linger_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct vb_conn *vc = w->data;
    vb_enter(vc);
    vc->linger_expired = true;
    vb_leave(vc);
}

/* ---- buffers, QPs ------------------------------------------------------- */

static unsigned vb_nrbuf(const struct vb_conn *vc, int cls)
{
    return vc->hello.credits[cls] + VB_EXEMPT_RESERVE + VB_RNDV_MAX + VB_NOTIFY_CREDITS +
           VB_NCREDIT_RESERVE + VB_SPARE;
}

/* The connection's device, CQ and buffer pool, on the first class to learn
 * its device. */
static int vb_conn_setup(struct vb_conn *vc, struct ibv_context *verbs)
{
    if (vc->dev) {
        if (vc->dev->verbs == verbs)
            return 0;
        snprintf(vc->err, sizeof(vc->err), "the QoS classes resolved to different RDMA devices");
        return -EXDEV;
    }
    int rc = 0;
    struct vb_dev *d = vb_dev_get(vc->vx, verbs, &rc);
    if (!d)
        return rc;
    int depth = VB_SQ_DEPTH < d->max_qp_wr ? VB_SQ_DEPTH : d->max_qp_wr;
    size_t nb = 0;
    int cqe = 0;
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        q->nrbuf = vb_nrbuf(vc, i);
        q->nsbuf = VB_NSEND;
        q->sq_depth = depth;
        nb += q->nrbuf + q->nsbuf;
        cqe += depth + (int)q->nrbuf;
        q->rb = calloc(q->nrbuf, sizeof(*q->rb));
        q->sb = calloc(q->nsbuf, sizeof(*q->sb));
        if (!q->rb || !q->sb)
            return -ENOMEM;
    }
    vc->pool_len = nb * vc->bsz;
    void *pool = NULL;
    if (posix_memalign(&pool, 4096, vc->pool_len))
        return -ENOMEM;
    vc->pool = pool;
    vc->pool_mr = ibv_reg_mr(d->pd, vc->pool, vc->pool_len, IBV_ACCESS_LOCAL_WRITE);
    if (!vc->pool_mr) {
        rc = vb_errno();
        snprintf(vc->err, sizeof(vc->err),
                 "registering %zu bytes of buffers on %s: %s (locked-memory limit, ulimit -l?)",
                 vc->pool_len, ibv_get_device_name(verbs->device), rrpc_strerror(rc));
        return rc;
    }
    uint8_t *p = vc->pool;
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        for (unsigned k = 0; k < q->nrbuf; k++, p += vc->bsz) {
            q->rb[k].wr.kind = VB_K_RECV;
            q->rb[k].wr.cls = (uint8_t)i;
            q->rb[k].it.type = VB_I_EAGER;
            q->rb[k].buf = p;
        }
        for (unsigned k = 0; k < q->nsbuf; k++, p += vc->bsz) {
            q->sb[k].wr.kind = VB_K_SEND;
            q->sb[k].wr.cls = (uint8_t)i;
            q->sb[k].buf = p;
            q->sb[k].next = q->sfree;
            q->sfree = &q->sb[k];
        }
    }
    if (cqe > d->max_cqe)
        cqe = d->max_cqe;
    vc->cq = ibv_create_cq(verbs, cqe, vc, d->ch, 0);
    if (!vc->cq) {
        rc = vb_errno();
        snprintf(vc->err, sizeof(vc->err), "ibv_create_cq(%d): %s", cqe, rrpc_strerror(rc));
        return rc;
    }
    rc = vb_ret(ibv_req_notify_cq(vc->cq, 0));
    if (rc)
        return rc;
    vc->dev = d;
    return 0;
}

static int vb_post_recv(struct vb_qp *q, struct vb_rbuf *rb)
{
    struct vb_conn *vc = q->vc;
    struct ibv_sge sge = {(uintptr_t)rb->buf, vc->bsz, vc->pool_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)&rb->wr, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    return vb_ret(ibv_post_recv(q->id->qp, &wr, &bad));
}

static int vb_qp_create(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof(a));
    a.send_cq = vc->cq;
    a.recv_cq = vc->cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    a.cap.max_send_wr = (uint32_t)q->sq_depth;
    a.cap.max_recv_wr = q->nrbuf;
    a.cap.max_send_sge = 3;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = VB_MAX_INLINE;
    if (rdma_create_qp(q->id, vc->dev->pd, &a)) {
        a.cap.max_inline_data = 0;
        if (rdma_create_qp(q->id, vc->dev->pd, &a)) {
            int rc = vb_errno();
            snprintf(vc->err, sizeof(vc->err), "rdma_create_qp (class %d): %s", q->cls,
                     rrpc_strerror(rc));
            return rc;
        }
    }
    q->has_qp = true;
    q->max_inline = a.cap.max_inline_data;
    for (unsigned k = 0; k < q->nrbuf; k++) {
        if (k < q->nrbuf - VB_SPARE) {
            int rc = vb_post_recv(q, &q->rb[k]);
            if (rc) {
                snprintf(vc->err, sizeof(vc->err), "ibv_post_recv: %s", rrpc_strerror(rc));
                return rc;
            }
        } else {
            q->rb[k].free_next = q->rfree;
            q->rfree = &q->rb[k];
        }
    }
    return 0;
}

/* ---- private data ------------------------------------------------------- */

struct vb_pd {
    struct rrpci_hello hello;
    int cls;
    unsigned ncredits;
    uint64_t cookie;
};

static void vb_pd_encode(const struct vb_conn *vc, int cls, uint8_t out[VB_PD_SIZE])
{
    rrpci_hello_encode(&vc->hello, out);
    out[32] = VB_PD_VERSION;
    out[33] = (uint8_t)cls;
    out[34] = VB_NOTIFY_CREDITS;
    out[35] = VB_PD_MARK;
    rrpci_put64(out + 36, vc->cookie);
}

static int vb_pd_decode(const uint8_t *p, size_t len, struct vb_pd *pd, const char **why)
{
    if (len < VB_PD_SIZE || p[35] != VB_PD_MARK) {
        *why = "the connection's private data is not roce-rpc's";
        return RRPC_E_PROTO;
    }
    if (p[32] != VB_PD_VERSION) {
        *why = "unknown verbs private data layout: run the same roce-rpc release on both sides";
        return RRPC_E_VERSION;
    }
    if (p[33] >= VB_NCLS) {
        *why = "malformed verbs private data (class)";
        return RRPC_E_PROTO;
    }
    if (rrpci_hello_decode(p, RRPCI_HELLO_SIZE, &pd->hello)) {
        *why = "malformed hello record";
        return RRPC_E_PROTO;
    }
    if (pd->hello.rx_buf < VB_MIN_RX_BUF) {
        *why = "the peer's receive buffers are too small";
        return RRPC_E_PROTO;
    }
    pd->cls = p[33];
    pd->ncredits = p[34];
    pd->cookie = rrpci_get64(p + 36);
    return 0;
}

static void vb_reject(struct rdma_cm_id *id, int code)
{
    uint8_t b[VB_REJ_SIZE];
    rrpci_put32(b, VB_REJ_MAGIC);
    rrpci_put32(b + 4, (uint32_t)code);
    rdma_reject(id, b, VB_REJ_SIZE);
}

/* The peer's hello: the core checks it and takes the peer's grants. */
static int vb_hello_peer(struct vb_conn *vc, const struct rrpci_hello *h)
{
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    int rc = rrpci_conn_hello_peer(c, h);
    rrpci_conn_unref(c);
    if (rc)
        return rc;
    vc->hello_done = true;
    uint32_t e = h->rx_buf - RRPCI_HDR_SIZE;
    vc->eager_send = e < vc->vx->eager ? e : vc->vx->eager;
    return 0;
}

static void vb_conn_param(struct vb_conn *vc, struct rdma_conn_param *p, const uint8_t *pd,
                          int resp, int init)
{
    memset(p, 0, sizeof(*p));
    p->private_data = pd;
    p->private_data_len = VB_PD_SIZE;
    p->responder_resources = (uint8_t)(resp < VB_RD_ATOMIC_MAX ? resp : VB_RD_ATOMIC_MAX);
    p->initiator_depth = (uint8_t)(init < VB_RD_ATOMIC_MAX ? init : VB_RD_ATOMIC_MAX);
    p->retry_count = 7;
    p->rnr_retry_count = 7;
}

/* ---- sending ------------------------------------------------------------ */

static bool vb_sq_room(const struct vb_qp *q, int reserve)
{
    return q->sq_inflight < q->sq_depth - reserve;
}

static int vb_post_send(struct vb_qp *q, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    int rc = vb_ret(ibv_post_send(q->id->qp, wr, &bad));
    if (rc) {
        q->err = true;
        RRPCI_LOG(q->vc->ctx, LOG_WARNING, "verbs: ibv_post_send on class %d: %s", q->cls,
                  rrpc_strerror(rc));
        return rc;
    }
    q->sq_inflight++;
    return 0;
}

static int vb_post_ctl(struct vb_qp *q, uint32_t env, uint32_t val)
{
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uintptr_t)&q->ctl;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(env << 24 | (val & 0xffffffu));
    int rc = vb_post_send(q, &wr);
    if (!rc)
        q->sq_sends++;
    return rc;
}

static int vb_send_eager(struct vb_qp *q, struct rrpci_msg *m)
{
    struct vb_conn *vc = q->vc;
    size_t n = RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
    struct ibv_sge sge[3];
    struct ibv_send_wr wr;
    struct vb_sbuf *sb = NULL;
    int ns = 0;
    memset(&wr, 0, sizeof(wr));
    if (n <= q->max_inline) {
        sge[ns++] = (struct ibv_sge){(uintptr_t)m->hdr, RRPCI_HDR_SIZE, 0};
        if (m->len)
            sge[ns++] = (struct ibv_sge){(uintptr_t)m->data, (uint32_t)m->len, 0};
        if (m->ext_len)
            sge[ns++] = (struct ibv_sge){(uintptr_t)m->ext, (uint32_t)m->ext_len, 0};
        wr.send_flags = IBV_SEND_INLINE;
        wr.wr_id = (uintptr_t)&q->ctl;
    } else {
        sb = q->sfree;
        if (!sb) {
            q->blocked = true;
            return -EAGAIN;
        }
        memcpy(sb->buf, m->hdr, RRPCI_HDR_SIZE);
        if (m->len)
            memcpy(sb->buf + RRPCI_HDR_SIZE, m->data, m->len);
        if (m->ext_len)
            memcpy(sb->buf + RRPCI_HDR_SIZE + m->len, m->ext, m->ext_len);
        sge[ns++] = (struct ibv_sge){(uintptr_t)sb->buf, (uint32_t)n, vc->pool_mr->lkey};
        wr.wr_id = (uintptr_t)&sb->wr;
    }
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = sge;
    wr.num_sge = ns;
    int rc = vb_post_send(q, &wr);
    if (rc)
        return RRPC_E_CONN_LOST;
    if (sb)
        q->sfree = sb->next;
    q->sq_sends++;
    rrpci_msg_free(m);
    return 0;
}

static int vb_send_rndv(struct vb_qp *q, struct rrpci_msg *m)
{
    struct vb_conn *vc = q->vc;
    int slot = -1;
    for (int i = 0; i < VB_RNDV_MAX; i++)
        if (!q->rout[i].used) {
            slot = i;
            break;
        }
    if (slot < 0) {
        q->blocked = q->blocked_rndv = true;
        return -EAGAIN;
    }
    struct vb_rout *o = &q->rout[slot];
    const void *piece[2] = {m->data, m->ext};
    size_t plen[2] = {m->len, m->ext_len};
    struct vb_seg seg[2];
    int nseg = 0;
    uint8_t desc[RRPCI_HDR_SIZE + VB_DESC_MAX];
    size_t n;
    struct vb_sbuf *sb = NULL;

    if (RRPCI_HDR_SIZE + VB_DESC_MAX > q->max_inline && !(sb = q->sfree)) {
        q->blocked = true;
        return -EAGAIN;
    }
    for (int i = 0; i < 2; i++) {
        if (!plen[i])
            continue;
        if (plen[i] > UINT32_MAX)
            goto toobig;
        o->mr[i] = ibv_reg_mr(vc->dev->pd, (void *)(uintptr_t)piece[i], plen[i],
                              IBV_ACCESS_REMOTE_READ);
        if (!o->mr[i]) {
            int rc = vb_errno();
            RRPCI_LOG(vc->ctx, LOG_WARNING,
                      "verbs: registering a %zu-byte payload for rendezvous: %s", plen[i],
                      rrpc_strerror(rc));
            o->m = NULL; /* @m stays the core's */
            vb_rout_release(o);
            return rc;
        }
        seg[nseg++] = (struct vb_seg){(uintptr_t)piece[i], (uint32_t)plen[i], o->mr[i]->rkey};
    }
    o->gen++;
    uint32_t token = (uint32_t)slot | (uint32_t)o->gen << 8;
    memcpy(desc, m->hdr, RRPCI_HDR_SIZE);
    uint8_t *p = desc + RRPCI_HDR_SIZE;
    rrpci_put32(p, token & 0xffffffu);
    p[4] = (uint8_t)nseg;
    p[5] = p[6] = p[7] = 0;
    for (int i = 0; i < nseg; i++) {
        rrpci_put64(p + VB_DESC_HEAD + VB_DESC_SEG * i, seg[i].addr);
        rrpci_put32(p + VB_DESC_HEAD + VB_DESC_SEG * i + 8, seg[i].len);
        rrpci_put32(p + VB_DESC_HEAD + VB_DESC_SEG * i + 12, seg[i].rkey);
    }
    n = RRPCI_HDR_SIZE + VB_DESC_HEAD + VB_DESC_SEG * (size_t)nseg;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    if (!sb) {
        sge = (struct ibv_sge){(uintptr_t)desc, (uint32_t)n, 0};
        wr.send_flags = IBV_SEND_INLINE;
        wr.wr_id = (uintptr_t)&q->ctl;
    } else {
        memcpy(sb->buf, desc, n);
        sge = (struct ibv_sge){(uintptr_t)sb->buf, (uint32_t)n, vc->pool_mr->lkey};
        wr.wr_id = (uintptr_t)&sb->wr;
    }
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(VB_ENV_RNDV << 24);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (vb_post_send(q, &wr)) {
        o->m = NULL;
        vb_rout_release(o);
        return RRPC_E_CONN_LOST;
    }
    if (sb)
        q->sfree = sb->next;
    q->sq_sends++;
    o->m = m;
    o->used = true;
    q->rout_used++;
    RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d: rendezvous send of %zu bytes (slot %d)",
              vc->peer, q->cls, rrpci_msg_payload_len(m), slot);
    return 0;
toobig:
    o->m = NULL;
    vb_rout_release(o);
    return RRPC_E_TOO_BIG;
}

static int vb_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (cls < 0 || cls >= VB_NCLS)
        return RRPC_E_BAD_CLASS;
    struct vb_qp *q = &vc->q[cls];
    if (q->err)
        return RRPC_E_CONN_LOST;
    if (!vc->up || q->opq || !vb_sq_room(q, VB_SQ_CTL_RESERVE)) {
        q->blocked = true;
        return -EAGAIN;
    }
    if (rrpci_msg_payload_len(m) <= vc->eager_send)
        return vb_send_eager(q, m);
    return vb_send_rndv(q, m);
}

/* ---- one-sided ---------------------------------------------------------- */

static int vb_kick(struct vb_qp *q);

static bool vb_data_room(const struct vb_qp *q)
{
    return vb_sq_room(q, VB_SQ_CTL_RESERVE) && q->data_out < q->vc->vx->data_depth;
}

/* The next chunk of @o; a WRITE with notify carries the immediate (and takes
 * a notify credit) on its last chunk only, so it lands after all the data. */
static bool vb_op_ready(const struct vb_qp *q, const struct vb_op *o)
{
    if (!vb_data_room(q))
        return false;
    bool last = o->op.len - o->off <= q->vc->dev->max_msg_sz;
    return o->op.opcode != RRPCI_RDMA_WRITE_IMM || !last || q->ncredits > 0;
}

static int vb_post_op(struct vb_qp *q, struct vb_op *o)
{
    size_t left = o->op.len - o->off;
    uint32_t n = left < q->vc->dev->max_msg_sz ? (uint32_t)left : q->vc->dev->max_msg_sz;
    bool last = n == left;
    struct ibv_sge sge = {o->laddr + o->off, n, o->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uintptr_t)&o->wr;
    wr.sg_list = &sge;
    wr.num_sge = n ? 1 : 0;
    wr.wr.rdma.remote_addr = o->op.remote_addr + o->off;
    wr.wr.rdma.rkey = (uint32_t)o->op.remote_key;
    switch (o->op.opcode) {
    case RRPCI_RDMA_WRITE:
        wr.opcode = IBV_WR_RDMA_WRITE;
        break;
    case RRPCI_RDMA_WRITE_IMM:
        wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        wr.imm_data = htonl(o->op.imm);
        break;
    case RRPCI_RDMA_READ:
        wr.opcode = IBV_WR_RDMA_READ;
        break;
    }
    int rc = vb_post_send(q, &wr);
    if (rc)
        return rc;
    if (last && o->op.opcode == RRPCI_RDMA_WRITE_IMM)
        q->ncredits--;
    o->off += n;
    o->out++;
    q->data_out++;
    o->all_posted = last;
    return 0;
}

static void vb_op_unlink(struct vb_conn *vc, struct vb_op *o)
{
    if (o->aprev)
        o->aprev->anext = o->anext;
    else
        vc->ops = o->anext;
    if (o->anext)
        o->anext->aprev = o->aprev;
}

static int vb_rdma(rrpc_conn *c, const struct rrpci_rdma_op *op)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc || !vc->up)
        return RRPC_E_CLOSED;
    if (op->cls < 0 || op->cls >= VB_NCLS)
        return RRPC_E_BAD_CLASS;
    struct vb_qp *q = &vc->q[op->cls];
    if (q->err)
        return RRPC_E_CONN_LOST;
    if (op->remote_key > UINT32_MAX)
        return rrpci_set_error(vc->ctx, RRPC_E_ACCESS,
                               "remote key 0x%llx is not a verbs rkey (tokens must come from a "
                               "verbs connection)",
                               (unsigned long long)op->remote_key);
    struct vb_mr *m;
    int rc = vb_mr_get(vc->dev, op->local, &m);
    if (rc)
        return rc;
    if (op->local_off > m->len || op->len > m->len - op->local_off)
        return RRPC_E_REGION;
    struct vb_op *o = calloc(1, sizeof(*o));
    if (!o)
        return -ENOMEM;
    o->wr.kind = VB_K_OP;
    o->wr.cls = (uint8_t)op->cls;
    o->op = *op;
    o->laddr = m->addr + op->local_off;
    o->lkey = m->mr->lkey;
    o->anext = vc->ops;
    if (vc->ops)
        vc->ops->aprev = o;
    vc->ops = o;
    *q->opq_tail = o;
    q->opq_tail = &o->next;
    /* Posts what fits now; the rest goes as completions free room.  On a
     * failure the op stays listed (freed at teardown) and the core fails it. */
    if (vb_kick(q)) {
        o->reported = true;
        return RRPC_E_CONN_LOST;
    }
    return 0;
}

static int vb_region_key(rrpc_conn *c, rrpc_region *r, uint64_t *ret_key)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (!vc->dev)
        return rrpci_set_error(vc->ctx, -ENOTCONN,
                               "the connection has no RDMA device yet; ask for a token once it is "
                               "up");
    struct vb_mr *m;
    int rc = vb_mr_get(vc->dev, r, &m);
    if (rc)
        return rc;
    *ret_key = m->mr->rkey;
    return 0;
}

/* ---- the loop side: internal messages, reads, queued ops ---------------- */

static int vb_kick(struct vb_qp *q)
{
    int rc;
    while (q->done_n && vb_sq_room(q, 0)) {
        if ((rc = vb_post_ctl(q, VB_ENV_DONE, q->doneq[q->done_n - 1])))
            return rc;
        q->done_n--;
    }
    if (q->ncredit_owed >= (VB_NOTIFY_CREDITS + 1) / 2 && vb_sq_room(q, 0)) {
        if ((rc = vb_post_ctl(q, VB_ENV_NCREDIT, q->ncredit_owed)))
            return rc;
        q->ncredit_owed = 0;
    }
    while (q->readq && vb_data_room(q)) {
        struct vb_rin *r = q->readq;
        struct vb_seg *s = &r->seg[r->cur_seg];
        uint32_t left = s->len - r->cur_off;
        uint32_t n = left < q->vc->dev->max_msg_sz ? left : q->vc->dev->max_msg_sz;
        struct ibv_sge sge = {(uintptr_t)(r->buf + r->buf_off), n, r->mr->lkey};
        struct ibv_send_wr wr;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = (uintptr_t)&r->wr;
        wr.opcode = IBV_WR_RDMA_READ;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = s->addr + r->cur_off;
        wr.wr.rdma.rkey = s->rkey;
        if ((rc = vb_post_send(q, &wr)))
            return rc;
        r->reads_out++;
        q->data_out++;
        r->buf_off += n;
        r->cur_off += n;
        if (r->cur_off == s->len) {
            r->cur_off = 0;
            if (++r->cur_seg == r->nseg) {
                r->all_posted = true;
                q->readq = r->rnext;
                if (!q->readq)
                    q->readq_tail = &q->readq;
            }
        }
    }
    while (q->opq && vb_op_ready(q, q->opq)) {
        struct vb_op *o = q->opq;
        if ((rc = vb_post_op(q, o)))
            return rc;
        if (o->all_posted) {
            q->opq = o->next;
            if (!q->opq)
                q->opq_tail = &q->opq;
        }
    }
    return 0;
}

static void vb_wake(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    if (!q->blocked || !vc->up || !vb_live(vc) || q->err)
        return;
    if (q->opq || !vb_sq_room(q, VB_SQ_CTL_RESERVE) || !q->sfree)
        return;
    if (q->blocked_rndv && q->rout_used == VB_RNDV_MAX)
        return;
    q->blocked = q->blocked_rndv = false;
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    rrpci_conn_writable(c, q->cls);
    rrpci_conn_unref(c);
}

/* ---- receiving ---------------------------------------------------------- */

static void vb_rxq_push(struct vb_qp *q, struct vb_item_hdr *it)
{
    it->next = NULL;
    *q->rxq_tail = it;
    q->rxq_tail = &it->next;
}

/* Delivers what is at the head of the class's receive queue, in order, up to
 * a rendezvous whose READ is still running. */
static void vb_drain(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    if (q->draining)
        return;
    q->draining = true;
    /* Frames may arrive on a class before the last class is established:
     * they wait (in their buffers, with their credits) until it is. */
    while (q->rxq && vc->up && vb_live(vc)) {
        struct vb_item_hdr *it = q->rxq;
        if (it->type == VB_I_RNDV && !rrpci_container_of(it, struct vb_rin, it)->complete)
            break;
        q->rxq = it->next;
        if (!q->rxq)
            q->rxq_tail = &q->rxq;
        rrpc_conn *c = vc->conn;
        rrpci_conn_ref(c);
        if (it->type == VB_I_EAGER) {
            struct vb_rbuf *rb = rrpci_container_of(it, struct vb_rbuf, it);
            /* Re-post a spare before the handler can give the credit back. */
            struct vb_rbuf *repl = q->rfree;
            int rc = 0;
            if (repl) {
                q->rfree = repl->free_next;
                rc = vb_post_recv(q, repl);
            }
            if (rc) {
                vb_fail(vc, RRPC_E_CONN_LOST, "ibv_post_recv on class %d: %s", q->cls,
                        rrpc_strerror(rc));
            } else {
                rrpci_conn_recv(c, q->cls, &rb->h, rb->buf + RRPCI_HDR_SIZE);
                if (repl || !vb_live(vc)) {
                    rb->free_next = q->rfree;
                    q->rfree = rb;
                } else if ((rc = vb_post_recv(q, rb))) {
                    vb_fail(vc, RRPC_E_CONN_LOST, "ibv_post_recv on class %d: %s", q->cls,
                            rrpc_strerror(rc));
                }
            }
        } else if (it->type == VB_I_RNDV) {
            struct vb_rin *r = rrpci_container_of(it, struct vb_rin, it);
            rrpci_conn_recv(c, q->cls, &r->h, r->buf);
            vb_rin_free(r);
        } else {
            struct vb_note *nt = rrpci_container_of(it, struct vb_note, it);
            rrpci_conn_notify(c, nt->imm);
            free(nt);
        }
        rrpci_conn_unref(c);
    }
    q->draining = false;
}

static int vb_rndv_arrive(struct vb_qp *q, const uint8_t *buf, uint32_t n, const char **why)
{
    struct vb_conn *vc = q->vc;
    struct rrpci_hdr h;
    if (n < RRPCI_HDR_SIZE + VB_DESC_HEAD) {
        *why = "short rendezvous descriptor";
        return RRPC_E_PROTO;
    }
    int rc = rrpci_hdr_decode(buf, rrpci_ctx_max_msg(vc->ctx), &h, why);
    if (rc)
        return rc;
    const uint8_t *p = buf + RRPCI_HDR_SIZE;
    uint32_t token = rrpci_get32(p);
    int nseg = p[4];
    if (nseg < 1 || nseg > 2 || p[5] || p[6] || p[7] || token > 0xffffffu ||
        n != RRPCI_HDR_SIZE + VB_DESC_HEAD + VB_DESC_SEG * (uint32_t)nseg) {
        *why = "malformed rendezvous descriptor";
        return RRPC_E_PROTO;
    }
    struct vb_seg seg[2];
    uint64_t sum = 0;
    for (int i = 0; i < nseg; i++) {
        const uint8_t *s = p + VB_DESC_HEAD + VB_DESC_SEG * i;
        seg[i].addr = rrpci_get64(s);
        seg[i].len = rrpci_get32(s + 8);
        seg[i].rkey = rrpci_get32(s + 12);
        if (!seg[i].len) {
            *why = "empty rendezvous segment";
            return RRPC_E_PROTO;
        }
        sum += seg[i].len;
    }
    if (sum != h.len) {
        *why = "rendezvous segments do not add up to the frame's length";
        return RRPC_E_PROTO;
    }
    /* Before the payload buffer is allocated (this takes the connection down
     * when the peer had no credit for the frame). */
    if ((rc = rrpci_conn_rx_admit(vc->conn, q->cls, &h))) {
        *why = "frame refused at its header";
        return rc;
    }
    struct vb_rin *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    void *b = NULL;
    if (posix_memalign(&b, 4096, h.len)) {
        free(r);
        *why = "out of memory for a rendezvous buffer";
        return -ENOMEM;
    }
    r->buf = b;
    r->mr = ibv_reg_mr(vc->dev->pd, r->buf, h.len, IBV_ACCESS_LOCAL_WRITE);
    if (!r->mr) {
        rc = vb_errno();
        vb_rin_free(r);
        *why = "cannot register a rendezvous buffer (locked-memory limit?)";
        return rc;
    }
    r->wr.kind = VB_K_READ;
    r->wr.cls = q->cls;
    r->it.type = VB_I_RNDV;
    r->h = h;
    r->token = token;
    r->nseg = nseg;
    memcpy(r->seg, seg, sizeof(seg));
    RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d: reading a %u-byte rendezvous payload",
              vc->peer, q->cls, h.len);
    vb_rxq_push(q, &r->it);
    r->rnext = NULL;
    *q->readq_tail = r;
    q->readq_tail = &r->rnext;
    return 0;
}

static int vb_on_done(struct vb_qp *q, uint32_t token, const char **why)
{
    unsigned slot = token & 0xffu;
    uint16_t gen = (uint16_t)(token >> 8);
    if (slot >= VB_RNDV_MAX || !q->rout[slot].used || q->rout[slot].gen != gen) {
        *why = "unexpected rendezvous completion";
        return RRPC_E_PROTO;
    }
    vb_rout_release(&q->rout[slot]);
    q->rout_used--;
    return 0;
}

static void vb_on_recv(struct vb_qp *q, struct vb_rbuf *rb, const struct ibv_wc *wc)
{
    struct vb_conn *vc = q->vc;
    const char *why = NULL;
    int rc = 0;
    uint32_t imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc->imm_data) : 0;
    bool ctl = wc->opcode == IBV_WC_RECV && (wc->wc_flags & IBV_WC_WITH_IMM);
    if (!vb_live(vc)) {
        /* Closing: only the peer's READs of our payloads still matter. */
        if (ctl && imm >> 24 == VB_ENV_DONE)
            vb_on_done(q, imm & 0xffffffu, &why);
        if (!vc->conn && !q->err)
            vb_post_recv(q, rb);
        return;
    }
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        struct vb_note *nt = malloc(sizeof(*nt));
        if (!nt) {
            vb_fail(vc, -ENOMEM, "out of memory for a notification");
            return;
        }
        nt->it.type = VB_I_NOTIFY;
        nt->imm = imm;
        rc = vb_post_recv(q, rb);
        q->ncredit_owed++;
        vb_rxq_push(q, &nt->it);
    } else if (ctl) {
        switch (imm >> 24) {
        case VB_ENV_RNDV:
            rc = vb_rndv_arrive(q, rb->buf, wc->byte_len, &why);
            break;
        case VB_ENV_DONE:
            rc = vb_on_done(q, imm & 0xffffffu, &why);
            break;
        case VB_ENV_NCREDIT:
            if ((imm & 0xffffffu) > q->ncredits_max - q->ncredits) {
                why = "peer returned more notify credit than it owed";
                rc = RRPC_E_PROTO;
            }
            q->ncredits += imm & 0xffffffu;
            break;
        default:
            why = "unknown verbs envelope";
            rc = RRPC_E_PROTO;
            break;
        }
        if (!rc)
            rc = vb_post_recv(q, rb);
    } else if (wc->opcode == IBV_WC_RECV) {
        if (wc->byte_len < RRPCI_HDR_SIZE) {
            why = "frame shorter than its header";
            rc = RRPC_E_PROTO;
        } else if (!(rc = rrpci_hdr_decode(rb->buf, rrpci_ctx_max_msg(vc->ctx), &rb->h, &why)) &&
                   rb->h.len != wc->byte_len - RRPCI_HDR_SIZE) {
            why = "frame length does not match the message size";
            rc = RRPC_E_PROTO;
        }
        if (!rc)
            vb_rxq_push(q, &rb->it);
    } else {
        why = "unexpected receive completion";
        rc = RRPC_E_PROTO;
    }
    if (rc) {
        vb_fail(vc, rc, "peer %s, class %d: %s", vc->peer, q->cls, why ? why : rrpc_strerror(rc));
        return;
    }
    vb_drain(q);
}

/* ---- completions -------------------------------------------------------- */

static const char *vb_opname(int kind)
{
    switch (kind) {
    case VB_K_RECV:
        return "receive";
    case VB_K_SEND:
    case VB_K_CTL:
        return "send";
    case VB_K_READ:
        return "rendezvous READ";
    case VB_K_OP:
        return "one-sided operation";
    default:
        return "work request";
    }
}

static void vb_wc_error(struct vb_conn *vc, struct vb_qp *q, const struct vb_wr *w,
                        const struct ibv_wc *wc)
{
    bool first = !q->err;
    q->err = true;
    if (!vb_live(vc))
        return;
    int reason = RRPC_E_CONN_LOST;
    const char *hint = "";
    switch (wc->status) {
    case IBV_WC_WR_FLUSH_ERR:
        hint = first ? ": the queue pair went to the error state (peer disconnected?)" : "";
        break;
    case IBV_WC_RETRY_EXC_ERR:
        hint = ": the peer stopped acknowledging (gone, or the path is down)";
        break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
        hint = ": the peer had no receive buffer";
        break;
    case IBV_WC_LOC_LEN_ERR:
        if (w->kind == VB_K_RECV) {
            reason = RRPC_E_PROTO;
            hint = ": the peer sent a message larger than its receive buffer";
        }
        break;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
        hint = w->kind == VB_K_OP ? ": the target refused the access (key, bounds or rights); on "
                                    "verbs that breaks the queue pair"
                                  : ": the peer refused our access";
        if (w->kind == VB_K_READ)
            reason = RRPC_E_PROTO;
        break;
    default:
        break;
    }
    vb_fail(vc, reason, "peer %s, class %d: %s failed: %s%s", vc->peer, q->cls,
            vb_opname(w->kind), ibv_wc_status_str(wc->status), hint);
}

static void vb_handle_wc(struct vb_conn *vc, const struct ibv_wc *wc)
{
    struct vb_wr *w = (struct vb_wr *)(uintptr_t)wc->wr_id;
    const struct vb_wr wcopy = *w; /* @w may be freed below */
    struct vb_qp *q = &vc->q[w->cls];
    bool ok = wc->status == IBV_WC_SUCCESS;
    if (w->kind != VB_K_RECV)
        q->sq_inflight--;
    switch (w->kind) {
    case VB_K_RECV:
        if (ok)
            vb_on_recv(q, rrpci_container_of(w, struct vb_rbuf, wr), wc);
        break;
    case VB_K_SEND: {
        struct vb_sbuf *sb = rrpci_container_of(w, struct vb_sbuf, wr);
        sb->next = q->sfree;
        q->sfree = sb;
        q->sq_sends--;
        break;
    }
    case VB_K_CTL:
        q->sq_sends--;
        break;
    case VB_K_READ: {
        struct vb_rin *r = rrpci_container_of(w, struct vb_rin, wr);
        r->reads_out--;
        q->data_out--;
        if (ok && r->all_posted && !r->reads_out) {
            r->complete = true;
            if (q->done_n == q->done_cap) {
                unsigned cap = q->done_cap ? 2 * q->done_cap : 16;
                uint32_t *d = realloc(q->doneq, cap * sizeof(*d));
                if (!d) {
                    vb_fail(vc, -ENOMEM, "out of memory");
                    return;
                }
                q->doneq = d;
                q->done_cap = cap;
            }
            q->doneq[q->done_n++] = r->token;
        }
        break;
    }
    case VB_K_OP: {
        struct vb_op *o = rrpci_container_of(w, struct vb_op, wr);
        o->out--;
        q->data_out--;
        if (o->reported || (ok && (!o->all_posted || o->out)))
            break;
        /* Done, or failed: reported once; a failed op stays listed until the
         * teardown, for its other chunks' flushed completions. */
        uint64_t id = o->op.id;
        int st = 0;
        if (ok) {
            vb_op_unlink(vc, o);
            free(o);
        } else {
            o->reported = true;
            st = (wc->status == IBV_WC_REM_ACCESS_ERR || wc->status == IBV_WC_REM_INV_REQ_ERR)
                     ? RRPC_E_ACCESS
                     : RRPC_E_CONN_LOST;
        }
        if (vb_live(vc) && (ok || wc->status != IBV_WC_WR_FLUSH_ERR)) {
            rrpc_conn *c = vc->conn;
            rrpci_conn_ref(c);
            rrpci_rdma_done(c, id, st);
            rrpci_conn_unref(c);
        }
        break;
    }
    default:
        break;
    }
    if (!ok) {
        vb_wc_error(vc, q, &wcopy, wc);
        return;
    }
    if (!vb_live(vc))
        return;
    int rc = vb_kick(q);
    if (rc) {
        vb_fail(vc, RRPC_E_CONN_LOST, "peer %s, class %d: ibv_post_send: %s", vc->peer, q->cls,
                rrpc_strerror(rc));
        return;
    }
    if (wcopy.kind == VB_K_READ)
        vb_drain(q);
    vb_wake(q);
}

/* Handles the CQ's completions until it is empty and armed again, or until
 * VB_POLL_BUDGET of them: a completion callback that posts the next operation
 * (a chain of one-sided WRITEs, say) can keep the CQ non-empty forever, and
 * the loop must still get its turn for timers, other connections and, in
 * driven mode, to return from rrpc_ctx_progress.  The rest is then handled
 * from a zero-delay timer, on the loop's next iteration. */
static void vb_poll(struct vb_conn *vc, unsigned budget)
{
    struct ibv_wc wc[16];
    uint64_t until = 0;
    bool armed = false;
    unsigned busy_us = vc->vx->busy_poll_us, handled = 0;
    vb_enter(vc);
    for (;;) {
        if (handled >= budget) {
            rrpci_timer_start(&vc->repoll);
            break;
        }
        int n = ibv_poll_cq(vc->cq, 16, wc);
        if (n < 0) {
            vb_fail(vc, RRPC_E_CONN_LOST, "ibv_poll_cq failed");
            break;
        }
        for (int i = 0; i < n; i++)
            vb_handle_wc(vc, &wc[i]);
        handled += (unsigned)n;
        if (n > 0) {
            armed = false;
            if (busy_us)
                until = vb_now_us() + busy_us;
            continue;
        }
        if (busy_us && !vc->closing && vb_now_us() < until)
            continue;
        if (armed)
            break;
        if (ibv_req_notify_cq(vc->cq, 0)) {
            vb_fail(vc, RRPC_E_CONN_LOST, "ibv_req_notify_cq failed");
            break;
        }
        armed = true; /* poll once more: a completion may have come before the arming */
    }
    vb_leave(vc);
}

static void vb_repoll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    vb_poll(w->data, VB_POLL_BUDGET);
}

static void vb_cq_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct vb_dev *d = w->data;
    struct ibv_cq *cq;
    void *cq_ctx;
    while (ibv_get_cq_event(d->ch, &cq, &cq_ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        vb_poll(cq_ctx, VB_POLL_BUDGET);
    }
}

/* ---- connection management events --------------------------------------- */

static void vb_established(struct vb_conn *vc)
{
    vc->up = true;
    vc->listen_id = NULL;
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    rrpci_conn_established(c);
    rrpci_conn_unref(c);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_drain(&vc->q[i]);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_wake(&vc->q[i]);
}

static void vb_on_route(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    int rc = vb_conn_setup(vc, q->id->verbs);
    if (!rc)
        rc = vb_qp_create(q);
    if (rc) {
        vb_fail(vc, rc, "connecting to %s: %s", vc->peer, vc->err[0] ? vc->err : rrpc_strerror(rc));
        return;
    }
    uint8_t pd[VB_PD_SIZE];
    struct rdma_conn_param p;
    vb_pd_encode(vc, q->cls, pd);
    vb_conn_param(vc, &p, pd, vc->dev->max_rd_atom, vc->dev->max_init_rd_atom);
    if (rdma_connect(q->id, &p)) {
        rc = vb_errno();
        vb_fail(vc, rc, "rdma_connect to %s (class %d): %s", vc->peer, q->cls, rrpc_strerror(rc));
    }
}

static void vb_on_established(struct vb_qp *q, const uint8_t *pd, size_t pdlen)
{
    struct vb_conn *vc = q->vc;
    if (!vc->passive) {
        struct vb_pd p;
        const char *why = NULL;
        int rc = vb_pd_decode(pd, pdlen, &p, &why);
        if (!rc && (p.cls != q->cls || p.cookie != vc->cookie)) {
            why = "the accept does not match the request (class or cookie)";
            rc = RRPC_E_PROTO;
        }
        if (rc) {
            vb_fail(vc, rc, "handshake with %s: %s", vc->peer, why);
            return;
        }
        if (!vc->hello_done && (rc = vb_hello_peer(vc, &p.hello))) {
            vb_fail(vc, rc, "handshake with %s refused", vc->peer);
            return;
        }
        q->ncredits = q->ncredits_max = p.ncredits;
    }
    if (q->established)
        return;
    q->established = true;
    RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d established", vc->peer, q->cls);
    if (++vc->nestab == VB_NCLS && vb_live(vc))
        vb_established(vc);
}

static int vb_status_reason(int status, int dflt)
{
    if (status == -ENODEV)
        return RRPC_E_NO_DEVICE;
    if (status < 0 && status > -4096)
        return status;
    return dflt;
}

static void vb_on_qp_event(struct vb_qp *q, const struct rdma_cm_event *e, const uint8_t *pd,
                           size_t pdlen)
{
    struct vb_conn *vc = q->vc;
    int rc;
    vb_enter(vc);
    if (!vb_live(vc)) {
        if (e->event == RDMA_CM_EVENT_DISCONNECTED || e->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
            vc->peer_gone = true;
        vb_leave(vc);
        return;
    }
    switch (e->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(q->id, VB_RESOLVE_MS)) {
            rc = vb_errno();
            if (rc == -ENODEV)
                vb_fail(vc, RRPC_E_NO_DEVICE,
                        "no RDMA device serves the route to %s (for Soft-RoCE: rdma link add "
                        "rxe0 type rxe netdev <if>; ?src=ADDR picks the local address)",
                        vc->peer);
            else
                vb_fail(vc, rc, "rdma_resolve_route to %s: %s", vc->peer, rrpc_strerror(rc));
        }
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        vb_on_route(q);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        vb_on_established(q, pd, pdlen);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        rc = vb_status_reason(e->status, -EHOSTUNREACH);
        if (rc == RRPC_E_NO_DEVICE)
            vb_fail(vc, rc,
                    "no RDMA device serves the route to %s: the verbs transport needs one on the "
                    "outgoing interface (for Soft-RoCE: rdma link add rxe0 type rxe netdev <if>; "
                    "?src=ADDR picks the local address)",
                    vc->peer);
        else
            vb_fail(vc, rc, "resolving the address %s: %s", vc->peer, rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        rc = vb_status_reason(e->status, -EHOSTUNREACH);
        vb_fail(vc, rc, "resolving the route to %s: %s", vc->peer, rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        rc = vb_status_reason(e->status, -ETIMEDOUT);
        vb_fail(vc, rc, "%s is unreachable (class %d): %s", vc->peer, q->cls, rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        rc = vb_status_reason(e->status, RRPC_E_CONN_LOST);
        vb_fail(vc, rc, "connection error with %s (class %d): %s", vc->peer, q->cls,
                rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_REJECTED: {
        rc = -ECONNREFUSED;
        if (pdlen >= VB_REJ_SIZE && rrpci_get32(pd) == VB_REJ_MAGIC) {
            int32_t r = (int32_t)rrpci_get32(pd + 4);
            if (r < 0)
                rc = r;
            vb_fail(vc, rc, "%s rejected the connection: %s", vc->peer, rrpc_strerror(rc));
        } else {
            vb_fail(vc, rc, "%s refused the connection (class %d, reject reason %d%s)", vc->peer,
                    q->cls, e->status,
                    e->status == 8 ? ": nothing listens on that port" : "");
        }
        break;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
        vc->peer_gone = true;
        /* What already arrived goes first, all of it (the connection is torn
         * down right after): an ERROR frame explains the close. */
        if (vc->cq)
            vb_poll(vc, VB_DRAIN_BUDGET);
        vb_fail(vc, RRPC_E_CONN_LOST, "%s disconnected", vc->peer);
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        vc->peer_gone = true;
        vb_fail(vc, RRPC_E_CONN_LOST, "the RDMA device was removed");
        break;
    default:
        RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d: ignoring %s", vc->peer, q->cls,
                  rdma_event_str(e->event));
        break;
    }
    vb_leave(vc);
}

static struct vb_conn *vb_find_pending(struct vb_ctx *vx, struct rdma_cm_id *lid, uint64_t cookie)
{
    for (struct vb_conn *vc = vx->vcs; vc; vc = vc->next)
        if (vc->passive && !vc->up && vc->conn && vc->listen_id == lid && vc->cookie == cookie)
            return vc;
    return NULL;
}

static void vb_on_conn_req(struct vb_ctx *vx, struct vb_listener *vl, struct rdma_cm_event *e,
                           const uint8_t *pd, size_t pdlen)
{
    struct rdma_cm_id *id = e->id;
    struct vb_pd p;
    const char *why = NULL;
    char peer[INET6_ADDRSTRLEN + 8];
    vb_sa_str(rdma_get_peer_addr(id), peer, sizeof(peer));
    id->context = NULL;
    int rc = vb_pd_decode(pd, pdlen, &p, &why);
    if (rc) {
        RRPCI_LOG(vx->ctx, LOG_WARNING, "verbs: refusing a connection from %s: %s", peer, why);
        vb_reject(id, rc);
        vb_destroy_id(vx, id, false);
        return;
    }
    struct vb_conn *vc = vb_find_pending(vx, e->listen_id, p.cookie);
    if (!vc) {
        rrpc_conn *c = NULL;
        char lwhy[200];
        rc = rrpci_listener_accept(vl->l, rdma_get_peer_addr(id), &c, lwhy, sizeof(lwhy));
        if (rc) {
            RRPCI_LOG(vx->ctx, LOG_NOTICE, "verbs: refusing a connection from %s: %s", peer, lwhy);
            vb_reject(id, rc);
            vb_destroy_id(vx, id, false);
            return;
        }
        vc = vb_conn_new(vx, c);
        if (!vc) {
            vb_reject(id, -ENOMEM);
            vb_destroy_id(vx, id, false);
            rrpci_conn_down(c, -ENOMEM, "out of memory for a verbs connection");
            return;
        }
        vc->passive = true;
        vc->cookie = p.cookie;
        vc->listen_id = e->listen_id;
        snprintf(vc->peer, sizeof(vc->peer), "%s", peer);
        vb_enter(vc);
        if ((rc = vb_hello_peer(vc, &p.hello))) {
            vb_reject(id, rc);
            vb_destroy_id(vx, id, false);
            vb_fail(vc, rc, "handshake with %s refused", peer);
            vb_leave(vc);
            return;
        }
    } else {
        vb_enter(vc);
        if (vc->q[p.cls].id) {
            vb_reject(id, RRPC_E_PROTO);
            vb_destroy_id(vx, id, false);
            vb_fail(vc, RRPC_E_PROTO, "%s connected class %d twice", peer, p.cls);
            vb_leave(vc);
            return;
        }
    }
    struct vb_qp *q = &vc->q[p.cls];
    q->id = id;
    id->context = q;
    q->ncredits = q->ncredits_max = p.ncredits;
    rc = vb_conn_setup(vc, id->verbs);
    if (!rc)
        rc = vb_qp_create(q);
    if (!rc) {
        uint8_t mine[VB_PD_SIZE];
        struct rdma_conn_param cp;
        vb_pd_encode(vc, p.cls, mine);
        int resp = e->param.conn.initiator_depth;
        int init = e->param.conn.responder_resources;
        vb_conn_param(vc, &cp, mine, resp < vc->dev->max_rd_atom ? resp : vc->dev->max_rd_atom,
                      init < vc->dev->max_init_rd_atom ? init : vc->dev->max_init_rd_atom);
        if (rdma_accept(id, &cp)) {
            rc = vb_errno();
            snprintf(vc->err, sizeof(vc->err), "rdma_accept: %s", rrpc_strerror(rc));
        }
    }
    if (rc) {
        vb_reject(id, rc);
        vb_fail(vc, rc, "accepting %s (class %d): %s", peer, p.cls,
                vc->err[0] ? vc->err : rrpc_strerror(rc));
    }
    vb_leave(vc);
}

static void vb_cm_event(struct vb_ctx *vx, struct rdma_cm_event *e, const uint8_t *pd,
                        size_t pdlen)
{
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        struct vb_listener *vl = e->listen_id ? e->listen_id->context : NULL;
        if (!vl || vl->kind != VB_K_LISTENER || !vl->id) {
            rdma_reject(e->id, NULL, 0);
            vb_destroy_id(vx, e->id, false);
            return;
        }
        vb_on_conn_req(vx, vl, e, pd, pdlen);
        return;
    }
    uint8_t *kind = e->id ? e->id->context : NULL;
    if (!kind)
        return;
    if (*kind == VB_K_QP)
        vb_on_qp_event((struct vb_qp *)(void *)kind, e, pd, pdlen);
    else
        RRPCI_LOG(vx->ctx, LOG_DEBUG, "verbs: listener: %s", rdma_event_str(e->event));
}

static void vb_cm_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct vb_ctx *vx = w->data;
    struct rdma_cm_event *ev;
    while (vx->ech && rdma_get_cm_event(vx->ech, &ev) == 0) {
        /* Checked before the acknowledgement, which lets the reaper free it. */
        struct rdma_cm_id *cid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->listen_id : ev->id;
        if (cid && cid->context == &vb_reaped_kind) {
            struct rdma_cm_id *nid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;
            rdma_ack_cm_event(ev);
            if (nid) {
                rdma_reject(nid, NULL, 0);
                vb_destroy_id(vx, nid, false);
            }
            continue;
        }
        struct rdma_cm_event e = *ev;
        RRPCI_LOG(vx->ctx, LOG_DEBUG, "verbs: cm event %s (status %d) on cm_id %p",
                  rdma_event_str(ev->event), ev->status, (void *)ev->id);
        uint8_t pd[256];
        size_t pdlen = 0;
        if ((e.event == RDMA_CM_EVENT_CONNECT_REQUEST || e.event == RDMA_CM_EVENT_ESTABLISHED ||
             e.event == RDMA_CM_EVENT_REJECTED) &&
            ev->param.conn.private_data) {
            pdlen = ev->param.conn.private_data_len;
            if (pdlen > sizeof(pd))
                pdlen = sizeof(pd);
            memcpy(pd, ev->param.conn.private_data, pdlen);
        }
        rdma_ack_cm_event(ev);
        e.param.conn.private_data = NULL;
        vb_cm_event(vx, &e, pd, pdlen);
    }
}

/* ---- endpoints ---------------------------------------------------------- */

static int vb_getaddr(rrpc_ctx *ctx, const char *host, int port, bool passive,
                      struct sockaddr_storage *ss)
{
    struct addrinfo hints, *res, *ai;
    char ps[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    snprintf(ps, sizeof(ps), "%d", port);
    const char *h = host && host[0] && strcmp(host, "*") ? host : NULL;
    int rc = getaddrinfo(h, ps, &hints, &res);
    if (rc)
        return rrpci_set_error(ctx, rrpci_resolve_code(rc, errno), "cannot resolve \"%s\": %s",
                               h ? h : "*", rrpci_resolve_why(rc));
    for (ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET)
            break;
    if (!ai)
        ai = res;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static int vb_ctx_init(rrpc_ctx *ctx)
{
    struct vb_ctx *vx;
    return vb_ctx_open(ctx, &vx);
}

static void vb_ctx_fini(rrpc_ctx *ctx)
{
    struct vb_ctx *vx = vb_vx(ctx);
    if (!vx || !vx->open)
        return;
    struct ev_loop *loop = rrpci_ctx_loop(ctx);
    while (vx->vcs)
        vb_teardown(vx->vcs);
    while (vx->devs) {
        struct vb_dev *d = vx->devs;
        vx->devs = d->next;
        for (int b = 0; b < VB_CACHE_BUCKETS; b++)
            while (d->cache[b]) {
                struct vb_mr *m = d->cache[b];
                d->cache[b] = m->hnext;
                rrpci_region_set_tpriv(m->r, NULL);
                ibv_dereg_mr(m->mr);
                free(m);
            }
        ev_io_stop(loop, &d->w);
        ibv_destroy_comp_channel(d->ch);
        ibv_dealloc_pd(d->pd);
        free(d);
    }
    ev_io_stop(loop, &vx->ech_w);
    vb_reaper_stop(vx);
    vx->ech = NULL;
    vx->open = false;
}

static int vb_listen(rrpc_listener *l, const struct rrpci_uri *uri)
{
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    struct vb_listener *vl = rrpci_listener_priv(l);
    struct vb_ctx *vx;
    struct sockaddr_storage ss;
    int rc = vb_ctx_open(ctx, &vx);
    if (rc)
        return rc;
    if ((rc = vb_getaddr(ctx, uri->host, uri->port, true, &ss)))
        return rc;
    vl->kind = VB_K_LISTENER;
    vl->l = l;
    vl->vx = vx;
    if (rdma_create_id(vx->ech, &vl->id, vl, RDMA_PS_TCP)) {
        rc = vb_errno();
        vl->id = NULL;
        return rrpci_set_error(ctx, rc, "rdma_create_id: %s", rrpc_strerror(rc));
    }
    if (rdma_bind_addr(vl->id, (struct sockaddr *)&ss)) {
        rc = vb_errno();
        rdma_destroy_id(vl->id);
        vl->id = NULL;
        char what[2 * RRPCI_URI_HOST_MAX + 64];
        snprintf(what, sizeof(what), "rdma://%s:%d", uri->host, uri->port);
        if (rc == -ENODEV) {
            snprintf(what, sizeof(what), "rdma://%s:%d: no RDMA device serves %s", uri->host,
                     uri->port, uri->host);
            return vb_no_device(ctx, what);
        }
        return rrpci_set_error(ctx, rc, "%s: rdma_bind_addr: %s%s", what, rrpc_strerror(rc),
                               rc == -EADDRNOTAVAIL ? " (not a local address)" : "");
    }
    if (rdma_listen(vl->id, VB_BACKLOG)) {
        rc = vb_errno();
        rdma_destroy_id(vl->id);
        vl->id = NULL;
        return rrpci_set_error(ctx, rc, "rdma://%s:%d: rdma_listen: %s", uri->host, uri->port,
                               rrpc_strerror(rc));
    }
    return 0;
}

static void vb_listener_close(rrpc_listener *l)
{
    struct vb_listener *vl = rrpci_listener_priv(l);
    if (!vl->id)
        return;
    for (struct vb_conn *vc = vl->vx->vcs; vc; vc = vc->next)
        if (vc->listen_id == vl->id)
            vc->listen_id = NULL; /* its missing classes can no longer arrive */
    /* At once, not through the reaper: the port is free for the next listen.
     * A listening id sends no DREQ, and its events were all acknowledged. */
    rdma_destroy_id(vl->id);
    vl->id = NULL;
}

static int vb_listener_port(rrpc_listener *l)
{
    struct vb_listener *vl = rrpci_listener_priv(l);
    if (!vl->id)
        return RRPC_E_CLOSED;
    return ntohs(rdma_get_src_port(vl->id));
}

static int vb_connect(rrpc_conn *c, const struct rrpci_uri *uri)
{
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    struct vb_ctx *vx;
    struct sockaddr_storage dst, src;
    int rc = vb_ctx_open(ctx, &vx);
    if (rc)
        return rc;
    if ((rc = vb_getaddr(ctx, uri->host, uri->port, false, &dst)))
        return rc;
    if (uri->src[0] && (rc = vb_getaddr(ctx, uri->src, 0, false, &src)))
        return rc;
    struct vb_conn *vc = vb_conn_new(vx, c);
    if (!vc)
        return -ENOMEM;
    vb_sa_str((struct sockaddr *)&dst, vc->peer, sizeof(vc->peer));
    if (getrandom(&vc->cookie, sizeof(vc->cookie), 0) != sizeof(vc->cookie))
        vc->cookie = (uint64_t)vb_now_us() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)vc;
    const char *step = "rdma_create_id";
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        if (rdma_create_id(vx->ech, &q->id, q, RDMA_PS_TCP)) {
            q->id = NULL;
            goto fail;
        }
        /* Right after creating the id: later settings do not reach the wire. */
        uint8_t tos = (uint8_t)(rrpci_ctx_class_dscp(ctx, i) << 2);
        step = "rdma_set_option(TOS)";
        if (rdma_set_option(q->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)))
            goto fail;
        step = "rdma_resolve_addr";
        if (rdma_resolve_addr(q->id, uri->src[0] ? (struct sockaddr *)&src : NULL,
                              (struct sockaddr *)&dst, VB_RESOLVE_MS))
            goto fail;
        step = "rdma_create_id";
    }
    return 0;
fail:
    rc = vb_errno();
    vb_teardown(vc);
    if (rc == -ENODEV) {
        char what[2 * RRPCI_URI_HOST_MAX + 64];
        snprintf(what, sizeof(what), "rdma://%s:%d: no RDMA device serves %s", uri->host,
                 uri->port, uri->src[0] ? uri->src : "the route to it");
        return vb_no_device(ctx, what);
    }
    return rrpci_set_error(ctx, rc, "rdma://%s:%d: %s: %s", uri->host, uri->port, step,
                           rrpc_strerror(rc));
}

static void vb_conn_close(rrpc_conn *c)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return;
    struct vb_conn_priv *p = rrpci_conn_priv(c);
    p->vc = NULL;
    vc->conn = NULL;
    vc->closing = true;
    vc->listen_id = NULL;
    if (vc->busy == 0) {
        vc->busy++;
        vb_leave(vc);
    }
}

static int vb_class_dscp(rrpc_conn *c, int cls, int *ret_dscp)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (cls < 0 || cls >= VB_NCLS)
        return RRPC_E_BAD_CLASS;
    struct vb_qp *q = &vc->q[cls];
    if (!q->has_qp || !q->established)
        return -ENOTCONN;
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = vb_ret(ibv_query_qp(q->id->qp, &a, IBV_QP_AV, &ia));
    if (rc)
        return rc;
    *ret_dscp = a.ah_attr.grh.traffic_class >> 2;
    return 0;
}

static int vb_peer_name(rrpc_conn *c, char *buf, size_t len)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (vc->q[0].id)
        vb_sa_str(rdma_get_peer_addr(vc->q[0].id), buf, len);
    else
        snprintf(buf, len, "%s", vc->peer);
    return 0;
}

const struct rrpci_transport_ops rrpci_verbs_ops = {
    .version = RRPCI_TRANSPORT_OPS_VERSION,
    .name = "verbs",
    .scheme = "rdma",
    .ctx_priv_size = sizeof(struct vb_ctx),
    .conn_priv_size = sizeof(struct vb_conn_priv),
    .listener_priv_size = sizeof(struct vb_listener),
    .listen = vb_listen,
    .listener_close = vb_listener_close,
    .connect = vb_connect,
    .send = vb_send,
    .conn_close = vb_conn_close,
    .ctx_init = vb_ctx_init,
    .ctx_fini = vb_ctx_fini,
    .class_dscp = vb_class_dscp,
    .peer_name = vb_peer_name,
    .listener_port = vb_listener_port,
    .region_key = vb_region_key,
    .region_release = vb_region_release,
    .rdma = vb_rdma,
};

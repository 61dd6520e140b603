/* SPDX-License-Identifier: MIT */
/*
 * The inproc transport: client and server in one process, in one context or
 * in two (each possibly on its own loop thread).  inproc://NAME names a
 * listener in a process-wide registry.
 *
 * A connection is a pipe shared by its two ends: per direction and class, a
 * queue of frames under the pipe's mutex.  ops->send hands the core's frame
 * buffer (struct rrpci_msg) itself to the peer's queue and wakes the peer's
 * loop with the end's rrpci_async; the peer delivers the payload from that
 * buffer and frees it.  Zero copy, except for a frame whose payload is in two
 * pieces (data plus an external part, as an emulated one-sided WRITE's
 * header and region bytes): those are joined by one memcpy, because
 * rrpci_conn_recv takes one contiguous payload.  The receiving side decodes
 * and validates the encoded header as if it had come off a wire.
 *
 * One-sided operations are the core's emulation over frames, with its key
 * and bounds checks (rrpci_region_check), as on tcp.  Credits and QoS are
 * the core's: each class has its own queue, and one wake-up serves the
 * classes in the order of the core's receive-side QoS policy (core/qos.h),
 * each for a turn of at most (class weight x TURN_BYTES) bytes, before the
 * loop runs its other watchers.
 *
 * Locks: the registry mutex, then a pipe's mutex; neither is held across an
 * upcall, and no context lock is taken under them (the caller's context lock
 * is held outside, as everywhere in a transport).  A pipe lives until both
 * ends let go; an end lets go in conn_close, under the pipe's mutex, so the
 * other end never wakes a watcher that is gone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <syslog.h>

#include <roce_rpc/rrpc.h>

#include "transport/transport.h"
#include "util/idmap.h" /* rrpci_container_of */
#include "util/list.h"

#define NCLS RRPCI_MAX_CLASSES
/* Bytes queued towards the peer on one class before send says -EAGAIN (as
 * tcp's socket buffer would), and the level at which the sender is told to
 * go on. */
#define Q_HIGH (512 * 1024)
#define Q_LOW (Q_HIGH / 2)
/* Bytes one wake-up delivers on a class, per unit of its weight: the
 * policy's turns are counted in bytes here, not timed, so that the core's
 * unit tests over inproc run the same way every time. */
#define TURN_BYTES (64 * 1024)

enum { ACTIVE = 0, PASSIVE = 1 };

struct ip_queue {
    struct rrpci_msg *head, *tail;
    size_t bytes;
    bool sender_waits; /* the sender got -EAGAIN: tell it when below Q_LOW */
};

struct ip_end {
    rrpc_conn *conn; /* NULL once this end let go (or, passive, before accept) */
    struct rrpci_async *wake;
    struct ip_queue in[NCLS]; /* frames towards this end */
    unsigned writable;        /* classes on which this end may send again */
    bool hello_set;
    struct rrpci_hello hello; /* what this end granted */
};

struct ip_pipe {
    pthread_mutex_t mu;
    int refs;
    struct ip_end end[2];
    int refused; /* the passive side refused: the code, and why */
    char why[256];
    struct rrpci_list link; /* in the listener's backlog until accepted */
};

struct ip_conn {
    struct ip_pipe *p;
    int side;
    struct rrpci_async wake;
    bool hello_done; /* active: the passive side's hello was checked */
    char name[RRPCI_URI_HOST_MAX];
};

struct ip_ctx {
    struct rrpci_qos qos;
};

struct ip_listener {
    rrpc_listener *l;
    char name[RRPCI_URI_HOST_MAX];
    struct rrpci_list link;    /* in the registry */
    struct rrpci_list backlog; /* pipes waiting for accept (under registry_mu) */
    struct rrpci_async wake;
    bool registered;
};

static struct ip_ctx *ipctx(rrpc_ctx *ctx)
{
    return rrpci_ctx_tpriv(ctx, &rrpci_inproc_ops);
}

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rrpci_list registry = {&registry, &registry};

static void msgs_free(struct ip_queue *q)
{
    while (q->head) {
        struct rrpci_msg *m = q->head;
        q->head = m->next;
        rrpci_msg_free(m);
    }
    q->tail = NULL;
    q->bytes = 0;
}

/* Drops one reference; called with p->mu held, which it releases. */
static void pipe_put_locked(struct ip_pipe *p)
{
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < NCLS; i++)
            msgs_free(&p->end[s].in[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void wake_end(struct ip_end *e)
{
    if (e->conn && e->wake)
        rrpci_ctx_wake(rrpci_conn_ctx(e->conn), e->wake);
}

/* ---- send ---------------------------------------------------------------- */

static int inproc_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct ip_conn *ic = rrpci_conn_priv(c);
    struct ip_pipe *p = ic->p;
    pthread_mutex_lock(&p->mu);
    struct ip_end *peer = &p->end[!ic->side];
    if (!peer->conn) {
        pthread_mutex_unlock(&p->mu);
        return RRPC_E_CONN_LOST; /* its close reaches this end by the wake-up */
    }
    struct ip_queue *q = &peer->in[cls];
    if (q->bytes > Q_HIGH) {
        q->sender_waits = true;
        pthread_mutex_unlock(&p->mu);
        return -EAGAIN;
    }
    /* The buffer itself changes hands: no copy. */
    m->next = NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->queued = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9; /* its arrival, for deadlines */
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->bytes += RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
    wake_end(peer);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* ---- receive -------------------------------------------------------------- */

/* Hands @m up on class @cls and frees it.  False when the connection went
 * down. */
static bool deliver(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    struct rrpci_hdr h;
    const char *why = NULL;
    int r = rrpci_hdr_decode(m->hdr, rrpci_ctx_max_msg(ctx), &h, &why);
    if (r == 0 && h.len != rrpci_msg_payload_len(m)) {
        r = RRPC_E_PROTO;
        why = "the header's length differs from the frame's";
    }
    if (r < 0) {
        rrpci_msg_free(m);
        rrpci_set_error(ctx, r, "bad frame from the inproc peer: %s; connection closed", why);
        rrpci_conn_down(c, r, why);
        return false;
    }
    const uint8_t *payload = m->data;
    uint8_t *joined = NULL;
    if (m->ext_len && m->len == 0) {
        payload = m->ext; /* still the sender's until the frame is freed */
    } else if (m->ext_len) {
        /* Two pieces: the one copy this transport makes. */
        joined = malloc(h.len);
        if (!joined) {
            rrpci_msg_free(m);
            rrpci_conn_down(c, -ENOMEM, "out of memory for an inproc frame");
            return false;
        }
        memcpy(joined, m->data, m->len);
        memcpy(joined + m->len, m->ext, m->ext_len);
        payload = joined;
    }
    rrpci_ctx_rx_arrival(ctx, m->queued);
    rrpci_conn_recv(c, cls, &h, payload);
    rrpci_ctx_rx_arrival(ctx, 0);
    free(joined);
    rrpci_msg_free(m);
    return !rrpci_conn_is_down(c);
}

/* The active side checks the passive side's hello.  False when down. */
static bool active_hello(rrpc_conn *c, struct ip_conn *ic, const struct rrpci_hello *peer)
{
    int r = rrpci_conn_hello_peer(c, peer);
    if (r < 0) {
        rrpci_conn_down(c, r, rrpc_ctx_last_error(rrpci_conn_ctx(c)));
        return false;
    }
    ic->hello_done = true;
    rrpci_conn_established(c);
    return !rrpci_conn_is_down(c);
}

static void conn_wake_cb(struct rrpci_async *w)
{
    rrpc_conn *c = w->data;
    struct ip_conn *ic = rrpci_conn_priv(c);
    struct ip_pipe *p = ic->p;
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    rrpci_conn_ref(c);

    pthread_mutex_lock(&p->mu);
    struct ip_end *me = &p->end[ic->side], *peer = &p->end[!ic->side];
    int refused = p->refused;
    char why[sizeof(p->why)];
    memcpy(why, p->why, sizeof(why));
    bool hello = !ic->hello_done && ic->side == ACTIVE && peer->hello_set;
    struct rrpci_hello ph = peer->hello;
    unsigned writable = me->writable;
    me->writable = 0;
    pthread_mutex_unlock(&p->mu);

    if (refused && !ic->hello_done) {
        rrpci_conn_refused(c, refused, (const uint8_t *)why, strlen(why));
        goto out;
    }
    if (hello && !active_hello(c, ic, &ph))
        goto out;
    for (int i = 0; i < NCLS && writable; i++)
        if (writable & (1u << i)) {
            rrpci_conn_writable(c, i);
            if (rrpci_conn_is_down(c))
                goto out;
        }
    if (ic->side == ACTIVE && !ic->hello_done)
        goto out; /* nothing is sent before the hello */

    const struct rrpci_qos *qos = &ipctx(ctx)->qos;
    int order[NCLS];
    rrpci_qos_order(qos, order);
    bool more = false;
    for (int k = 0; k < NCLS; k++) {
        int cls = order[k];
        struct rrpci_qos_turn turn;
        rrpci_qos_turn_begin(qos, cls, 0, &turn);
        for (bool open = true; open;) {
            pthread_mutex_lock(&p->mu);
            struct ip_queue *q = &me->in[cls];
            struct rrpci_msg *m = q->head;
            if (m) {
                size_t n = RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
                q->head = m->next;
                if (!q->head)
                    q->tail = NULL;
                q->bytes -= n;
                open = rrpci_qos_turn_charge(&turn, n, 0);
                if (q->sender_waits && q->bytes <= Q_LOW) {
                    q->sender_waits = false;
                    peer->writable |= 1u << cls;
                    wake_end(peer);
                }
            }
            pthread_mutex_unlock(&p->mu);
            if (!m)
                break;
            if (!deliver(c, cls, m))
                goto out;
        }
        pthread_mutex_lock(&p->mu);
        more |= me->in[cls].head != NULL;
        pthread_mutex_unlock(&p->mu);
    }
    if (more) {
        rrpci_async_send(rrpci_ctx_loop(ctx), w); /* the rest on the next iteration */
        goto out;
    }
    /* Everything the peer sent before it let go is delivered: now its close. */
    pthread_mutex_lock(&p->mu);
    bool gone = !peer->conn && (ic->side == PASSIVE || ic->hello_done);
    pthread_mutex_unlock(&p->mu);
    if (gone)
        rrpci_conn_down(c, RRPC_E_CONN_LOST, "the inproc peer closed the connection");
out:
    rrpci_conn_unref(c);
}

/* Starts @c's end of @p: its wake-up watcher and its place in the pipe. */
static void end_attach(rrpc_conn *c, struct ip_pipe *p, int side)
{
    struct ip_conn *ic = rrpci_conn_priv(c);
    ic->p = p;
    ic->side = side;
    rrpci_async_init(&ic->wake, conn_wake_cb);
    ic->wake.data = c;
    rrpci_async_start(rrpci_ctx_loop(rrpci_conn_ctx(c)), &ic->wake);
    p->end[side].conn = c;
    p->end[side].wake = &ic->wake;
}

static void inproc_conn_close(rrpc_conn *c)
{
    struct ip_conn *ic = rrpci_conn_priv(c);
    struct ip_pipe *p = ic->p;
    if (!p)
        return;
    ic->p = NULL;
    pthread_mutex_lock(&p->mu);
    struct ip_end *me = &p->end[ic->side];
    me->conn = NULL;
    me->wake = NULL;
    for (int i = 0; i < NCLS; i++)
        msgs_free(&me->in[i]); /* what the peer sent and this end never read */
    wake_end(&p->end[!ic->side]);
    pipe_put_locked(p);
    rrpci_async_stop(rrpci_ctx_loop(rrpci_conn_ctx(c)), &ic->wake);
}

/* ---- passive side --------------------------------------------------------- */

/* Refuses @p: the active end goes down with @code and @why. */
static void pipe_refuse(struct ip_pipe *p, int code, const char *why)
{
    pthread_mutex_lock(&p->mu);
    p->refused = code;
    snprintf(p->why, sizeof(p->why), "%s", why);
    wake_end(&p->end[ACTIVE]);
    pipe_put_locked(p);
}

static void accept_one(rrpc_listener *l, struct ip_listener *il, struct ip_pipe *p)
{
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    pthread_mutex_lock(&p->mu);
    bool alive = p->end[ACTIVE].conn != NULL;
    struct rrpci_hello peer = p->end[ACTIVE].hello;
    pthread_mutex_unlock(&p->mu);
    if (!alive) { /* the active side gave up while it waited */
        pthread_mutex_lock(&p->mu);
        pipe_put_locked(p);
        return;
    }
    rrpc_conn *c = NULL;
    char why[200];
    int r = rrpci_listener_accept(l, NULL, &c, why, sizeof(why));
    if (r < 0) {
        RRPCI_LOG(ctx, LOG_NOTICE, "refused an inproc connection to %s: %s", il->name, why);
        pipe_refuse(p, r, why);
        return;
    }
    r = rrpci_conn_hello_peer(c, &peer);
    if (r < 0) {
        pipe_refuse(p, r, rrpc_ctx_last_error(ctx));
        rrpci_conn_down(c, r, "handshake refused");
        return;
    }
    struct ip_conn *ic = rrpci_conn_priv(c);
    snprintf(ic->name, sizeof(ic->name), "%s", il->name);
    struct rrpci_hello mine;
    rrpci_conn_hello_local(c, &mine);
    pthread_mutex_lock(&p->mu);
    /* The backlog's reference becomes this end's. */
    end_attach(c, p, PASSIVE);
    p->end[PASSIVE].hello = mine;
    p->end[PASSIVE].hello_set = true;
    wake_end(&p->end[ACTIVE]);
    pthread_mutex_unlock(&p->mu);
    rrpci_conn_established(c);
}

static void listener_wake_cb(struct rrpci_async *w)
{
    rrpc_listener *l = w->data;
    struct ip_listener *il = rrpci_listener_priv(l);
    for (;;) {
        pthread_mutex_lock(&registry_mu);
        struct ip_pipe *p = NULL;
        if (!rrpci_list_empty(&il->backlog)) {
            p = rrpci_container_of(il->backlog.next, struct ip_pipe, link);
            rrpci_list_del(&p->link);
        }
        pthread_mutex_unlock(&registry_mu);
        if (!p)
            break;
        accept_one(l, il, p);
    }
}

static struct ip_listener *registry_find(const char *name)
{
    for (struct rrpci_list *i = registry.next; i != &registry; i = i->next) {
        struct ip_listener *il = rrpci_container_of(i, struct ip_listener, link);
        if (strcmp(il->name, name) == 0)
            return il;
    }
    return NULL;
}

static int inproc_listen(rrpc_listener *l, const struct rrpci_uri *u)
{
    struct ip_listener *il = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    il->l = l;
    snprintf(il->name, sizeof(il->name), "%s", u->host);
    rrpci_list_init(&il->backlog);
    pthread_mutex_lock(&registry_mu);
    bool taken = registry_find(il->name) != NULL;
    if (!taken) {
        rrpci_list_add(&registry, &il->link);
        il->registered = true;
    }
    pthread_mutex_unlock(&registry_mu);
    if (taken)
        return rrpci_set_error(ctx, -EADDRINUSE,
                               "an inproc listener named \"%s\" already exists in this "
                               "process: pick another name",
                               il->name);
    rrpci_async_init(&il->wake, listener_wake_cb);
    il->wake.data = l;
    rrpci_async_start(rrpci_ctx_loop(ctx), &il->wake);
    return 0;
}

static void inproc_listener_close(rrpc_listener *l)
{
    struct ip_listener *il = rrpci_listener_priv(l);
    if (!il->registered)
        return;
    struct rrpci_list pend;
    rrpci_list_init(&pend);
    pthread_mutex_lock(&registry_mu);
    rrpci_list_del(&il->link);
    il->registered = false;
    while (!rrpci_list_empty(&il->backlog)) {
        struct rrpci_list *n = il->backlog.next;
        rrpci_list_del(n);
        rrpci_list_add(&pend, n);
    }
    pthread_mutex_unlock(&registry_mu);
    while (!rrpci_list_empty(&pend)) {
        struct ip_pipe *p = rrpci_container_of(pend.next, struct ip_pipe, link);
        rrpci_list_del(&p->link);
        pipe_refuse(p, -ECONNREFUSED, "the listener closed before accepting it");
    }
    rrpci_async_stop(rrpci_ctx_loop(rrpci_listener_ctx(l)), &il->wake);
}

/* ---- active side ----------------------------------------------------------- */

static int inproc_connect(rrpc_conn *c, const struct rrpci_uri *u)
{
    struct ip_conn *ic = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    struct ip_pipe *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    p->refs = 2; /* this end, and the listener's backlog (then the passive end) */
    snprintf(ic->name, sizeof(ic->name), "%s", u->host);
    rrpci_conn_hello_local(c, &p->end[ACTIVE].hello);
    p->end[ACTIVE].hello_set = true;
    end_attach(c, p, ACTIVE);
    pthread_mutex_lock(&registry_mu);
    struct ip_listener *il = registry_find(u->host);
    if (il) {
        rrpci_list_add(&il->backlog, &p->link);
        rrpci_ctx_wake(rrpci_listener_ctx(il->l), &il->wake);
    }
    pthread_mutex_unlock(&registry_mu);
    if (!il) {
        p->refs = 1;
        return rrpci_set_error(ctx, -ECONNREFUSED,
                               "no inproc listener named \"%s\" in this process (rrpc_listen "
                               "\"inproc://%s\" first, in any context of the process)",
                               u->host, u->host);
    }
    return 0;
}

static int inproc_ctx_init(rrpc_ctx *ctx)
{
    static const struct rrpci_qos_knobs knobs = {.turn_bytes = TURN_BYTES};
    rrpci_ctx_qos(ctx, &knobs, &ipctx(ctx)->qos);
    return 0;
}

static int inproc_peer_name(rrpc_conn *c, char *buf, size_t len)
{
    struct ip_conn *ic = rrpci_conn_priv(c);
    snprintf(buf, len, "inproc://%s", ic->name);
    return 0;
}

const struct rrpci_transport_ops rrpci_inproc_ops = {
    .version = RRPCI_TRANSPORT_OPS_VERSION,
    .name = "inproc",
    .scheme = "inproc",
    .ctx_priv_size = sizeof(struct ip_ctx),
    .conn_priv_size = sizeof(struct ip_conn),
    .listener_priv_size = sizeof(struct ip_listener),
    .listen = inproc_listen,
    .listener_close = inproc_listener_close,
    .connect = inproc_connect,
    .send = inproc_send,
    .conn_close = inproc_conn_close,
    .ctx_init = inproc_ctx_init,
    .peer_name = inproc_peer_name,
};

/* SPDX-License-Identifier: MIT */
/* The verbs transport: taking connections down: the reaper thread that destroys cm_ids off the
 * loop, connection objects, teardown and the linger of a closing connection. */
#include "transport/verbs/verbs_int.h"

/* ---- destroying cm_ids, off the loop -------------------------------------- */

uint8_t vb_reaped_kind = VB_K_REAPED;

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
void vb_destroy_id(struct vb_ctx *vx, struct rdma_cm_id *id, bool dreq)
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
void vb_reaper_stop(struct vb_ctx *vx)
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

/* ---- connection objects ------------------------------------------------ */

struct vb_conn *vb_vc(rrpc_conn *c)
{
    struct vb_conn_priv *p = rrpci_conn_priv(c);
    return p ? p->vc : NULL;
}

static void vb_linger_cb(struct rrpci_timer *w);

struct vb_conn *vb_conn_new(struct vb_ctx *vx, rrpc_conn *c)
{
    struct vb_conn *vc = calloc(1, sizeof(*vc));
    if (!vc)
        return NULL;
    vc->conn = c;
    vc->ctx = vx->ctx;
    vc->vx = vx;
    rrpci_conn_hello_local(c, &vc->hello);
    vc->hello.rx_buf = RRPCI_HDR_SIZE + vx->eager;
    vc->bsz = vb_bsz(vx);
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
    vc->linger.data = vc;
    rrpci_timer_init(vc->ctx, &vc->repoll, vb_repoll_cb, 0, 0);
    vc->repoll.data = vc;
    rrpci_timer_init(vc->ctx, &vc->attach, vb_attach_cb, 0, 0);
    vc->attach.data = vc;
    vc->next = vx->vcs;
    if (vx->vcs)
        vx->vcs->prev = vc;
    vx->vcs = vc;
    struct vb_conn_priv *p = rrpci_conn_priv(c);
    p->vc = vc;
    return vc;
}

void vb_rin_free(struct vb_rin *r)
{
    if (r->pb) {
        r->pb->next = r->pdev->pfree;
        r->pdev->pfree = r->pb;
    } else if (r->mr) {
        vb_pages_dereg(r->mr); /* its own buffer (vb_rndv_buf_get) */
    }
    free(r);
}

void vb_rout_release(struct vb_rout *o)
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
void vb_teardown(struct vb_conn *vc)
{
    struct vb_ctx *vx = vc->vx;
    rrpci_timer_stop(&vc->linger);
    rrpci_timer_stop(&vc->repoll);
    rrpci_timer_stop(&vc->attach);
    vb_set_busy(vc, false);
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
        if (!id || vc->q[i].state != VB_QP_ESTABLISHED)
            continue;
        if (vb_port_down(id->verbs, id->port_num))
            dreq[i] = true; /* left to the destroy, once the port is back */
        else
            rdma_disconnect(id);
    }
    for (int i = 0; i < VB_NCLS; i++)
        if (vc->q[i].state >= VB_QP_CREATED)
            rdma_destroy_qp(vc->q[i].id);
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        vb_sbuf_put_all(q);
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
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        vb_qp_buffers_free(q);
        vb_grant_drop_waiting(q);
    }
    if (vc->dev)
        vb_spool_trim(vc->dev);
    for (int i = 0; i < VB_NCLS; i++) {
        struct vb_qp *q = &vc->q[i];
        if (q->id)
            vb_destroy_id(vx, q->id, dreq[i]);
        free(q->doneq);
    }
    free(vc);
}

static bool vb_needs_linger(struct vb_conn *vc)
{
    if (vc->phase == VB_FINAL || vc->q[VB_FIRST].state != VB_QP_ESTABLISHED)
        return false;
    bool busy = false;
    for (int i = 0; i < VB_NCLS; i++) {
        const struct vb_qp *q = &vc->q[i];
        if (q->state != VB_QP_ESTABLISHED)
            continue;
        if (q->err)
            return false;
        if (q->sq_sends > 0 || q->rout_used > 0)
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
        if (vc->phase < VB_LINGERING) {
            vb_advance(vc, VB_LINGERING);
            rrpci_timer_start(&vc->linger);
        }
        return;
    }
    vb_teardown(vc);
}

/* Every entry from the loop (cm event, CQ event, timer) brackets its work
 * with these, so a close from inside an upcall only marks the connection
 * and the teardown happens on the way out. */
void vb_enter(struct vb_conn *vc)
{
    vc->busy++;
}
void vb_leave(struct vb_conn *vc)
{
    if (--vc->busy == 0 && !vc->conn)
        vb_close_step(vc);
}

bool vb_live(struct vb_conn *vc)
{
    return vc->conn && !rrpci_conn_is_down(vc->conn);
}

bool vb_wired(struct vb_conn *vc)
{
    return vc->conn && rrpci_conn_is_wired(vc->conn);
}

void vb_advance(struct vb_conn *vc, enum vb_phase p)
{
    if (p > vc->phase)
        vc->phase = p;
}

void vb_fail(struct vb_conn *vc, int reason, const char *fmt, ...)
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

static void vb_linger_cb(struct rrpci_timer *w)
{
    struct vb_conn *vc = w->data;
    vb_enter(vc);
    vb_advance(vc, VB_FINAL);
    vb_leave(vc);
}

/* SPDX-License-Identifier: MIT */
/* The verbs transport: completions: the CQ, polled from its completion channel's watcher. */
#include "transport/verbs/verbs_int.h"

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
        vb_sbuf_put(rrpci_container_of(w, struct vb_sbuf, wr));
        q->sq_sends--;
        break;
    }
    case VB_K_CTL:
        q->sq_sends--;
        break;
    case VB_K_BIND:
        vb_grant_bind_done(rrpci_container_of(w, struct vb_grant, wr), wc);
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

/* A batch of completions may hold a request and, behind it, its CANCEL
 * (its caller gave up while a handler held this loop): verbs has no receive
 * time to tell the core the request came long ago, so the core is told of
 * the CANCEL first and answers the request without running it. */
static void vb_cancels_ahead(struct vb_conn *vc, const struct ibv_wc *wc, int n)
{
    if (!vb_live(vc))
        return;
    for (int i = 1; i < n; i++) {
        const struct vb_wr *w = (const struct vb_wr *)(uintptr_t)wc[i].wr_id;
        if (w->kind != VB_K_RECV || wc[i].status != IBV_WC_SUCCESS ||
            wc[i].opcode != IBV_WC_RECV || (wc[i].wc_flags & IBV_WC_WITH_IMM) ||
            wc[i].byte_len != RRPCI_HDR_SIZE)
            continue;
        const struct vb_rbuf *rb = rrpci_container_of(w, struct vb_rbuf, wr);
        struct rrpci_hdr h;
        const char *why;
        if (rrpci_hdr_decode(rb->buf, 0, &h, &why) == 0 && h.type == RRPCI_T_CANCEL)
            rrpci_conn_cancel_ahead(vc->conn, h.id);
    }
}

/* Handles the CQ's completions until it is empty and armed again, or until
 * VB_POLL_BUDGET of them: a completion callback that posts the next operation
 * (a chain of one-sided WRITEs, say) can keep the CQ non-empty forever, and
 * the loop must still get its turn for timers, other connections and, in
 * driven mode, to return from rrpc_ctx_progress.  The rest is then handled
 * from a zero-delay timer, on the loop's next iteration.
 *
 * With RRPC_VERBS_BUSY_POLL_US, a CQ that had completions asks the
 * context's polling governor to poll for that long (rrpci_ctx_busy) and is
 * left unarmed: the loop does not sleep, and looks at it between its passes
 * (vb_busy_poll) for as long as the governor polls; when it stops (the
 * window passed without traffic, or its CPU budget or contention stop) the
 * CQ is armed again.  While a stop holds polling back, rrpci_ctx_busy
 * refuses and the CQ is armed as without polling.
 * Returns how many completions were handled. */
unsigned vb_poll(struct vb_conn *vc, unsigned budget)
{
    struct ibv_wc wc[16];
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
        if (n > 1)
            vb_cancels_ahead(vc, wc, n);
        for (int i = 0; i < n; i++)
            vb_handle_wc(vc, &wc[i]);
        handled += (unsigned)n;
        if (n > 0) {
            armed = false;
            continue;
        }
        if (busy_us && vc->conn) {
            if (handled && rrpci_ctx_busy(vc->ctx, busy_us)) {
                vb_set_busy(vc, true);
                break;
            }
            if (vc->cq_busy && rrpci_ctx_polling(vc->ctx))
                break; /* looked at again between the loop's passes */
        }
        if (armed)
            break;
        if (ibv_req_notify_cq(vc->cq, 0)) {
            vb_fail(vc, RRPC_E_CONN_LOST, "ibv_req_notify_cq failed");
            break;
        }
        vb_set_busy(vc, false);
        armed = true; /* poll once more: a completion may have come before the arming */
    }
    vb_leave(vc);
    return handled;
}

static void vb_busy_unlink(struct vb_ctx *vx, struct vb_conn *vc)
{
    if (vc->bprev)
        vc->bprev->bnext = vc->bnext;
    else
        vx->busy_head = vc->bnext;
    if (vc->bnext)
        vc->bnext->bprev = vc->bprev;
    else
        vx->busy_tail = vc->bprev;
    vc->bnext = vc->bprev = NULL;
}

static void vb_busy_append(struct vb_ctx *vx, struct vb_conn *vc)
{
    vc->bnext = NULL;
    vc->bprev = vx->busy_tail;
    if (vx->busy_tail)
        vx->busy_tail->bnext = vc;
    else
        vx->busy_head = vc;
    vx->busy_tail = vc;
}

void vb_set_busy(struct vb_conn *vc, bool busy)
{
    if (vc->cq_busy == busy)
        return;
    vc->cq_busy = busy;
    if (busy)
        vb_busy_append(vc->vx, vc);
    else
        vb_busy_unlink(vc->vx, vc);
}

/* Each busy-polled CQ once; how many completions that handled.  Only the
 * busy ones are on the list, so a pass costs nothing per idle connection.
 * A completion's upcall may close or tear down any connection, or make
 * another one busy, so the head is read again after each visit: a visited
 * connection goes to the tail first, and the pass ends when the head is
 * one visited in this pass (or the list is empty). */
static unsigned vb_busy_pass(struct vb_ctx *vx)
{
    unsigned gen = ++vx->poll_gen, handled = 0;
    for (struct vb_conn *vc; (vc = vx->busy_head) && vc->poll_gen != gen;) {
        vc->poll_gen = gen;
        vb_busy_unlink(vx, vc);
        vb_busy_append(vx, vc);
        handled += vb_poll(vc, VB_POLL_BUDGET);
    }
    return handled;
}

/* ops->busy_poll: each busy-polled CQ once (with the governor stopped,
 * that visit arms it); -1 when none is. */
int vb_busy_poll(rrpc_ctx *ctx, bool arm)
{
    (void)arm; /* vb_poll arms once rrpci_ctx_polling says false */
    struct vb_ctx *vx = vb_vx(ctx);
    if (!vx->open)
        return -1;
    return vx->busy_head ? (int)vb_busy_pass(vx) : -1;
}

void vb_repoll_cb(struct rrpci_timer *w)
{
    vb_poll(w->data, VB_POLL_BUDGET);
}

void vb_cq_cb(struct rrpci_io *w, unsigned revents)
{
    struct vb_dev *d = w->data;
    struct ibv_cq *cq;
    void *cq_ctx;
    while (ibv_get_cq_event(d->ch, &cq, &cq_ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        vb_poll(cq_ctx, VB_POLL_BUDGET);
    }
}

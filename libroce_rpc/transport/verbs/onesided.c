/* SPDX-License-Identifier: MIT */
/* The verbs transport: one-sided operations of the core, and the loop side that posts what waits
 * (internal messages, rendezvous READs, queued operations). */
#include "transport/verbs/verbs_int.h"

/* ---- one-sided ---------------------------------------------------------- */


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

void vb_op_unlink(struct vb_conn *vc, struct vb_op *o)
{
    if (o->aprev)
        o->aprev->anext = o->anext;
    else
        vc->ops = o->anext;
    if (o->anext)
        o->anext->aprev = o->aprev;
}

int vb_rdma(rrpc_conn *c, const struct rrpci_rdma_op *op)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc || !vb_wired(vc))
        return RRPC_E_CLOSED;
    if (op->cls < 0 || op->cls >= VB_NCLS)
        return RRPC_E_BAD_CLASS;
    struct vb_qp *q = &vc->q[op->cls];
    if (q->err)
        return RRPC_E_CONN_LOST;
    if (op->opcode == RRPCI_RDMA_WRITE_IMM && !q->ncredits_max)
        q->nwant = true; /* vb_kick asks the peer for notify credits */
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
    /* Posts what fits now; the rest goes as completions free room, or once
     * the class's QP is connected, which the first operation of a class
     * sets going.  On a failure the op stays listed (freed at teardown)
     * and the core fails it. */
    if (q->state != VB_QP_ESTABLISHED && vb_want(q)) {
        o->reported = true;
        return RRPC_E_CONN_LOST;
    }
    if (vb_kick(q)) {
        o->reported = true;
        return RRPC_E_CONN_LOST;
    }
    return 0;
}

int vb_region_key(rrpc_conn *c, rrpc_region *r, uint64_t *ret_key)
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

int vb_kick(struct vb_qp *q)
{
    int rc;
    if (q->state != VB_QP_ESTABLISHED)
        return 0; /* what waits goes once it is (vb_class_up) */
    while (q->done_n && vb_sq_room(q, 0)) {
        if ((rc = vb_post_ctl(q, VB_ENV_DONE, q->doneq[q->done_n - 1])))
            return rc;
        q->done_n--;
    }
    if (q->nwant && !q->nasked && !q->ncredits_max && vb_sq_room(q, 0)) {
        if ((rc = vb_post_ctl(q, VB_ENV_NASK, 0)))
            return rc;
        q->nasked = true;
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

void vb_wake(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    if (!q->blocked || !vb_wired(vc) || q->err || q->state != VB_QP_ESTABLISHED)
        return;
    if (q->opq || !vb_sq_room(q, VB_SQ_CTL_RESERVE) || !vb_sbuf_room(q))
        return;
    if (q->blocked_rndv && q->rout_used == VB_RNDV_MAX)
        return;
    bool own = q->wake_own;
    q->blocked = q->blocked_rndv = q->wake_own = false;
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    rrpci_conn_writable(c, q->cls);
    if (own && vb_live(vc)) /* the connection's own frames, of class control */
        rrpci_conn_writable(c, RRPCI_CLS_CONTROL);
    rrpci_conn_unref(c);
}

/* SPDX-License-Identifier: MIT */
/* The verbs transport: buffers and queue pairs of a connection. */
#include "transport/verbs/verbs_int.h"

/* ---- buffers, QPs ------------------------------------------------------- */

/* The credits cover the most the core ever grants the peer, lent credit
 * included (core/lend.c), not the first grant in our hello. */
static unsigned vb_nrbuf(const struct vb_conn *vc, int cls)
{
    return rrpci_ctx_class_credits(vc->ctx, cls) + VB_EXEMPT_RESERVE + VB_RNDV_MAX + VB_NOTIFY_CREDITS +
           VB_NCREDIT_RESERVE + VB_SPARE + (cls == VB_FIRST ? VB_FIRST_RESERVE : 0);
}

/* The completions @cls's QP can have outstanding: its send queue and its
 * receive buffers. */
static int vb_qp_cqe(const struct vb_conn *vc, int cls)
{
    return vc->q[cls].sq_depth + (int)vb_nrbuf(vc, cls);
}

/* The connection's device and CQ, on the first QP to learn its device; the
 * CQ holds the first QP's completions and grows as other classes' QPs are
 * made (vb_qp_create).  Receive buffers are each QP's, send buffers the
 * device's pool's (sendpool.c). */
int vb_conn_setup(struct vb_conn *vc, struct ibv_context *verbs)
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
    for (int i = 0; i < VB_NCLS; i++)
        vc->q[i].sq_depth = depth;
    int cqe = vb_qp_cqe(vc, VB_FIRST);
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
    vc->cqe = cqe;
    vc->dev = d;
    return 0;
}

/* Room in the CQ for @cls's QP too (ibv_resize_cq keeps what it holds). */
static int vb_cq_grow(struct vb_conn *vc, int cls)
{
    int want = 0;
    for (int i = 0; i < VB_NCLS; i++)
        if (i == cls || vc->q[i].state >= VB_QP_CREATED)
            want += vb_qp_cqe(vc, i);
    if (want > vc->dev->max_cqe)
        want = vc->dev->max_cqe;
    if (want <= vc->cqe)
        return 0;
    int rc = vb_ret(ibv_resize_cq(vc->cq, want));
    if (rc) {
        snprintf(vc->err, sizeof(vc->err), "ibv_resize_cq(%d) for the %s class: %s", want,
                 rrpci_class_name(cls), rrpc_strerror(rc));
        return rc;
    }
    vc->cqe = want;
    return 0;
}

int vb_post_recv(struct vb_qp *q, struct vb_rbuf *rb)
{
    struct vb_conn *vc = q->vc;
    struct ibv_sge sge = {(uintptr_t)rb->buf, vc->bsz, q->pool_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)&rb->wr, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    return vb_ret(ibv_post_recv(q->id->qp, &wr, &bad));
}

/* @q's receive buffers, registered. */
static int vb_qp_buffers(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    q->nrbuf = vb_nrbuf(vc, q->cls);
    q->rb = calloc(q->nrbuf, sizeof(*q->rb));
    if (!q->rb)
        return -ENOMEM;
    q->pool_len = (size_t)q->nrbuf * vc->bsz;
    void *pool = NULL;
    if (posix_memalign(&pool, 4096, q->pool_len))
        return -ENOMEM;
    q->pool = pool;
    q->pool_mr = ibv_reg_mr(vc->dev->pd, q->pool, q->pool_len, IBV_ACCESS_LOCAL_WRITE);
    if (!q->pool_mr) {
        int rc = vb_errno();
        snprintf(vc->err, sizeof(vc->err),
                 "registering %zu bytes of buffers on %s: %s (locked-memory limit, ulimit -l?)",
                 q->pool_len, ibv_get_device_name(vc->dev->verbs->device), rrpc_strerror(rc));
        return rc;
    }
    uint8_t *p = q->pool;
    for (unsigned k = 0; k < q->nrbuf; k++, p += vc->bsz) {
        q->rb[k].wr.kind = VB_K_RECV;
        q->rb[k].wr.cls = q->cls;
        q->rb[k].it.type = VB_I_EAGER;
        q->rb[k].buf = p;
    }
    return 0;
}

int vb_qp_create(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    int rc = vb_cq_grow(vc, q->cls);
    if (!rc)
        rc = vb_qp_buffers(q);
    if (rc)
        return rc;
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
            rc = vb_errno();
            snprintf(vc->err, sizeof(vc->err), "rdma_create_qp (class %d): %s", q->cls,
                     rrpc_strerror(rc));
            return rc;
        }
    }
    q->state = VB_QP_CREATED;
    q->max_inline = a.cap.max_inline_data;
    for (unsigned k = 0; k < q->nrbuf; k++) {
        if (k < q->nrbuf - VB_SPARE) {
            rc = vb_post_recv(q, &q->rb[k]);
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

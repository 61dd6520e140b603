/* SPDX-License-Identifier: MIT */
/* The verbs transport: buffers and queue pairs of a connection. */
#include "transport/verbs/verbs_int.h"

/* ---- buffers, QPs ------------------------------------------------------- */

/* What a QP receives besides the frames its grant bounds (verbs_int.h),
 * but for what it makes on demand (vb_rx_extra). */
static unsigned vb_nreserve(int cls)
{
    return VB_EXEMPT_RESERVE + VB_NASK_RESERVE + VB_NCREDIT_RESERVE + VB_SPARE +
           (cls == VB_FIRST ? VB_FIRST_RESERVE : 0);
}

static unsigned vb_extra_n(enum vb_rx_extra what)
{
    return what == VB_RX_RNDV ? VB_RNDV_MAX : VB_NOTIFY_CREDITS;
}

/* The most receive buffers @cls's QP ever holds: for the class's credits,
 * the most the core lends (core/lend.c), and for rendezvous answers.  Its
 * receive queue's size. */
static unsigned vb_nrbuf(const struct vb_conn *vc, int cls)
{
    return rrpci_ctx_class_credits(vc->ctx, cls) + vb_nreserve(cls) + vb_extra_n(VB_RX_RNDV) +
           vb_extra_n(VB_RX_NOTIFY);
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
    struct ibv_sge sge = {(uintptr_t)rb->buf, q->vc->bsz, rb->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)&rb->wr, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    return vb_ret(ibv_post_recv(q->id->qp, &wr, &bad));
}

/* @n more receive buffers for @q, registered; on its chunk list. */
static struct vb_rchunk *vb_rchunk_new(struct vb_qp *q, unsigned n)
{
    struct vb_conn *vc = q->vc;
    struct vb_rchunk *k = calloc(1, sizeof(*k) + n * sizeof(k->rb[0]));
    if (!k)
        return NULL;
    k->n = n;
    k->len = (size_t)n * vc->bsz;
    bool mapped;
    int rc = vb_pages_reg(vc->dev->pd, k->len, &k->mr, &mapped);
    if (rc) {
        if (mapped)
            snprintf(vc->err, sizeof(vc->err),
                     "registering %zu bytes of receive buffers on %s: %s (locked-memory "
                     "limit, ulimit -l?)",
                     k->len, ibv_get_device_name(vc->dev->verbs->device), rrpc_strerror(rc));
        else
            snprintf(vc->err, sizeof(vc->err), "out of memory for %zu bytes of receive buffers",
                     k->len);
        free(k);
        errno = -rc;
        return NULL;
    }
    k->mem = k->mr->addr;
    uint8_t *p = k->mem;
    for (unsigned i = 0; i < n; i++, p += vc->bsz) {
        k->rb[i].wr.kind = VB_K_RECV;
        k->rb[i].wr.cls = q->cls;
        k->rb[i].it.type = VB_I_EAGER;
        k->rb[i].buf = p;
        k->rb[i].lkey = k->mr->lkey;
    }
    k->next = q->chunks;
    q->chunks = k;
    q->nrbuf += n;
    q->pool_len += k->len;
    return k;
}

void vb_qp_buffers_free(struct vb_qp *q)
{
    while (q->chunks) {
        struct vb_rchunk *k = q->chunks;
        q->chunks = k->next;
        vb_pages_dereg(k->mr);
        free(k);
    }
}

/* Posts all of @k on @q; a failure takes the connection down. */
static int vb_rchunk_post(struct vb_qp *q, struct vb_rchunk *k)
{
    for (unsigned i = 0; i < k->n; i++) {
        int rc = vb_post_recv(q, &k->rb[i]);
        if (rc) {
            vb_fail(q->vc, RRPC_E_CONN_LOST, "ibv_post_recv on class %d: %s", q->cls,
                    rrpc_strerror(rc));
            return rc;
        }
    }
    return 0;
}

int vb_rx_extra(struct vb_qp *q, enum vb_rx_extra what)
{
    if (q->extra & what)
        return 0;
    struct vb_rchunk *k = vb_rchunk_new(q, vb_extra_n(what));
    if (!k) {
        int rc = vb_errno();
        RRPCI_LOG(q->vc->ctx, LOG_WARNING, "verbs: %s: no receive buffers for %s on class %s: %s",
                  q->vc->peer, what == VB_RX_RNDV ? "rendezvous answers" : "notifies",
                  rrpci_class_name(q->cls), q->vc->err);
        return rc;
    }
    int rc = vb_rchunk_post(q, k);
    if (!rc)
        q->extra |= what;
    return rc;
}

int vb_rx_grow(rrpc_conn *c, int cls, uint32_t grant)
{
    struct vb_conn *vc = vb_vc(c);
    struct vb_qp *q = vc ? &vc->q[cls] : NULL;
    if (!q || q->state < VB_QP_CREATED || q->err)
        return -ENOTCONN;
    if (grant <= q->cover)
        return 0; /* made for an earlier lend */
    struct vb_rchunk *k = vb_rchunk_new(q, grant - q->cover);
    if (!k) {
        int rc = vb_errno();
        RRPCI_LOG(vc->ctx, LOG_WARNING, "verbs: %s: no more credit lent on class %s: %s",
                  vc->peer, rrpci_class_name(cls), vc->err);
        return rc;
    }
    int rc = vb_rchunk_post(q, k);
    if (rc)
        return rc;
    q->cover = grant;
    return 0;
}

int vb_qp_create(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    int rc = vb_cq_grow(vc, q->cls);
    if (rc)
        return rc;
    uint32_t first = rrpci_ctx_class_first_grant(vc->ctx, q->cls);
    struct vb_rchunk *k = vb_rchunk_new(q, first + vb_nreserve(q->cls));
    if (!k)
        return vb_errno();
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof(a));
    a.send_cq = vc->cq;
    a.recv_cq = vc->cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    a.cap.max_send_wr = (uint32_t)q->sq_depth;
    a.cap.max_recv_wr = vb_nrbuf(vc, q->cls);
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
    for (unsigned i = 0; i < k->n; i++) {
        if (i < k->n - VB_SPARE) {
            rc = vb_post_recv(q, &k->rb[i]);
            if (rc) {
                snprintf(vc->err, sizeof(vc->err), "ibv_post_recv: %s", rrpc_strerror(rc));
                return rc;
            }
        } else {
            k->rb[i].free_next = q->rfree;
            q->rfree = &k->rb[i];
        }
    }
    q->cover = first;
    return 0;
}

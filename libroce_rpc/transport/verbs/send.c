/* SPDX-License-Identifier: MIT */
/* The verbs transport: sending frames: eager SENDs from registered buffers and rendezvous. */
#include "transport/verbs/verbs_int.h"

/* ---- sending ------------------------------------------------------------ */

bool vb_sq_room(const struct vb_qp *q, int reserve)
{
    return q->sq_inflight < q->sq_depth - reserve;
}

int vb_post_send(struct vb_qp *q, struct ibv_send_wr *wr)
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

int vb_post_ctl(struct vb_qp *q, uint32_t env, uint32_t val)
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
        int rc;
        if (!(sb = vb_sbuf_get(q, &rc))) {
            if (rc == -EAGAIN)
                q->blocked = true;
            return rc;
        }
        memcpy(sb->buf, m->hdr, RRPCI_HDR_SIZE);
        if (m->len)
            memcpy(sb->buf + RRPCI_HDR_SIZE, m->data, m->len);
        if (m->ext_len)
            memcpy(sb->buf + RRPCI_HDR_SIZE + m->len, m->ext, m->ext_len);
        sge[ns++] = (struct ibv_sge){(uintptr_t)sb->buf, (uint32_t)n, sb->slab->mr->lkey};
        wr.wr_id = (uintptr_t)&sb->wr;
    }
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = sge;
    wr.num_sge = ns;
    if (vb_post_send(q, &wr)) {
        if (sb)
            vb_sbuf_put(sb);
        return RRPC_E_CONN_LOST;
    }
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

    for (int i = 0; i < 2; i++)
        if (plen[i] > UINT32_MAX)
            return RRPC_E_TOO_BIG;
    int rrc = vb_rx_extra(q, VB_RX_RNDV); /* room for the peer's DONE, before the first */
    if (rrc)
        return rrc;
    if (RRPCI_HDR_SIZE + VB_DESC_MAX > q->max_inline) {
        int rc;
        if (!(sb = vb_sbuf_get(q, &rc))) {
            if (rc == -EAGAIN)
                q->blocked = true;
            return rc;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (!plen[i])
            continue;
        o->mr[i] = ibv_reg_mr(vc->dev->pd, (void *)(uintptr_t)piece[i], plen[i],
                              IBV_ACCESS_REMOTE_READ);
        if (!o->mr[i]) {
            int rc = vb_errno();
            RRPCI_LOG(vc->ctx, LOG_WARNING,
                      "verbs: registering a %zu-byte payload for rendezvous: %s", plen[i],
                      rrpc_strerror(rc));
            o->m = NULL; /* @m stays the core's */
            vb_rout_release(o);
            if (sb)
                vb_sbuf_put(sb);
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
        sge = (struct ibv_sge){(uintptr_t)sb->buf, (uint32_t)n, sb->slab->mr->lkey};
        wr.wr_id = (uintptr_t)&sb->wr;
    }
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(VB_ENV_RNDV << 24);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (vb_post_send(q, &wr)) {
        o->m = NULL;
        vb_rout_release(o);
        if (sb)
            vb_sbuf_put(sb);
        return RRPC_E_CONN_LOST;
    }
    q->sq_sends++;
    o->m = m;
    o->used = true;
    q->rout_used++;
    RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d: rendezvous send of %zu bytes (slot %d)",
              vc->peer, q->cls, rrpci_msg_payload_len(m), slot);
    return 0;
}

/* The core's class @cls waits for room on @q (the first QP, for the
 * connection's own frames, or its own). */
static int vb_block(struct vb_qp *q, int cls)
{
    q->blocked = true;
    if (cls != q->cls)
        q->wake_own = true;
    return -EAGAIN;
}

int vb_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (cls < 0 || cls >= VB_NCLS)
        return RRPC_E_BAD_CLASS;
    /* The connection's own frames travel on the first QP. */
    struct vb_qp *q = &vc->q[rrpci_type_is_conn_frame(m->h.type) ? VB_FIRST : cls];
    if (q->err)
        return RRPC_E_CONN_LOST;
    if (!vb_wired(vc))
        return vb_block(q, cls);
    if (q->state != VB_QP_ESTABLISHED) {
        int rc = vb_want(q); /* its first frame: connect the class's QP */
        return rc ? rc : vb_block(q, cls);
    }
    if (q->opq || !vb_sq_room(q, VB_SQ_CTL_RESERVE))
        return vb_block(q, cls);
    int rc = rrpci_msg_payload_len(m) <= vc->eager_send ? vb_send_eager(q, m) : vb_send_rndv(q, m);
    if (rc == -EAGAIN)
        vb_block(q, cls);
    return rc;
}

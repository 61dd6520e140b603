/* SPDX-License-Identifier: MIT */
/* The verbs transport: receiving: the ordered receive queue per class, rendezvous READs in, and
 * notifies. */
#include "transport/verbs/verbs_int.h"

/* ---- receiving ---------------------------------------------------------- */

static void vb_rxq_push(struct vb_qp *q, struct vb_item_hdr *it)
{
    it->next = NULL;
    *q->rxq_tail = it;
    q->rxq_tail = &it->next;
}

/* The class a frame that came on @q is handed up as: the connection's own
 * frames (they travel on the first QP) keep their header's class. */
static int vb_up_cls(const struct vb_qp *q, const struct rrpci_hdr *h)
{
    return rrpci_type_is_conn_frame(h->type) ? h->cls : q->cls;
}

/* A connection's own frame only on the first QP, with the class control or
 * low_latency (docs/protocol.md 14). */
static int vb_frame_fits(const struct vb_qp *q, const struct rrpci_hdr *h, const char **why)
{
    if (!rrpci_type_is_conn_frame(h->type))
        return 0;
    if (q->cls == VB_FIRST && (h->cls == RRPCI_CLS_CONTROL || h->cls == RRPCI_CLS_LOW_LATENCY))
        return 0;
    *why = q->cls == VB_FIRST ? "a connection frame with a class other than control or "
                                "low_latency (docs/protocol.md 14)"
                              : "a connection frame on a queue pair other than the first "
                                "(docs/protocol.md 14)";
    return RRPC_E_PROTO;
}

/* Delivers what is at the head of the class's receive queue, in order, up to
 * a rendezvous whose READ is still running. */
void vb_drain(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    if (q->draining)
        return;
    q->draining = true;
    /* Frames may arrive on a class before the last class is established:
     * they wait (in their buffers, with their credits) until it is. */
    while (q->rxq && vb_wired(vc)) {
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
                rrpci_conn_recv(c, vb_up_cls(q, &rb->h), &rb->h, rb->buf + RRPCI_HDR_SIZE);
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
            rrpci_conn_recv(c, vb_up_cls(q, &r->h), &r->h, r->buf);
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

/* Validates a rendezvous descriptor (@n bytes at @buf) into @r: header,
 * token, segments.  No memory yet, and nothing asked of the core. */
static int vb_rndv_parse(struct vb_conn *vc, const uint8_t *buf, uint32_t n, struct vb_rin *r,
                         const char **why)
{
    if (n < RRPCI_HDR_SIZE + VB_DESC_HEAD) {
        *why = "short rendezvous descriptor";
        return RRPC_E_PROTO;
    }
    int rc = rrpci_hdr_decode(buf, rrpci_ctx_max_msg(vc->ctx), &r->h, why);
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
    uint64_t sum = 0;
    for (int i = 0; i < nseg; i++) {
        const uint8_t *s = p + VB_DESC_HEAD + VB_DESC_SEG * i;
        r->seg[i].addr = rrpci_get64(s);
        r->seg[i].len = rrpci_get32(s + 8);
        r->seg[i].rkey = rrpci_get32(s + 12);
        if (!r->seg[i].len) {
            *why = "empty rendezvous segment";
            return RRPC_E_PROTO;
        }
        sum += r->seg[i].len;
    }
    if (sum != r->h.len) {
        *why = "rendezvous segments do not add up to the frame's length";
        return RRPC_E_PROTO;
    }
    r->token = token;
    r->nseg = nseg;
    return 0;
}

/* Admits @r's frame with the core (which takes the connection down when
 * the peer had no credit for it, or is not authenticated yet), then gives
 * it a registered buffer and queues its READs. */
static int vb_rndv_admit(struct vb_qp *q, struct vb_rin *r, const char **why)
{
    struct vb_conn *vc = q->vc;
    int rc = rrpci_conn_rx_admit(vc->conn, vb_up_cls(q, &r->h), &r->h);
    if (rc) {
        *why = "frame refused at its header";
        return rc;
    }
    if ((rc = vb_rndv_buf_get(vc->dev, r, why)))
        return rc;
    RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d: reading a %u-byte rendezvous payload",
              vc->peer, q->cls, r->h.len);
    r->rnext = NULL;
    *q->readq_tail = r;
    q->readq_tail = &r->rnext;
    return 0;
}

/* A rendezvous descriptor arrived.  The active side may send one as soon
 * as all its classes are established, before this (passive) side has seen
 * its last class established and reported the connection to the core: such
 * a descriptor waits, in order in the receive queue and with no buffer,
 * until vb_rndv_admit_held (its receive buffer is re-posted, and what the
 * peer can send meanwhile is bounded by our posted receives). */
static int vb_rndv_arrive(struct vb_qp *q, const uint8_t *buf, uint32_t n, const char **why)
{
    struct vb_rin *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    int rc = vb_rndv_parse(q->vc, buf, n, r, why);
    if (!rc)
        rc = vb_frame_fits(q, &r->h, why);
    if (!rc && vb_wired(q->vc))
        rc = vb_rndv_admit(q, r, why);
    if (rc) {
        vb_rin_free(r);
        return rc;
    }
    r->wr.kind = VB_K_READ;
    r->wr.cls = q->cls;
    r->it.type = VB_I_RNDV;
    vb_rxq_push(q, &r->it);
    return 0;
}

void vb_rndv_admit_held(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    for (struct vb_item_hdr *it = q->rxq; it && vb_wired(vc); it = it->next) {
        struct vb_rin *r = rrpci_container_of(it, struct vb_rin, it);
        if (it->type != VB_I_RNDV || r->buf)
            continue;
        const char *why = NULL;
        int rc = vb_rndv_admit(q, r, &why);
        if (rc) {
            vb_fail(vc, rc, "peer %s, class %d: %s", vc->peer, q->cls, why);
            return;
        }
    }
    int rc = vb_wired(vc) ? vb_kick(q) : 0;
    if (rc)
        vb_fail(vc, RRPC_E_CONN_LOST, "peer %s, class %d: ibv_post_send: %s", vc->peer, q->cls,
                rrpc_strerror(rc));
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

void vb_on_recv(struct vb_qp *q, struct vb_rbuf *rb, const struct ibv_wc *wc)
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
        /* The notify buffers are made when we grant the credits (VB_ENV_NASK). */
        unsigned granted = q->extra & VB_RX_NOTIFY ? VB_NOTIFY_CREDITS : 0;
        if (q->ncredit_owed >= granted) {
            vb_fail(vc, RRPC_E_PROTO, "peer %s wrote with notify on class %s beyond the %u "
                    "notify credits granted", vc->peer, rrpci_class_name(q->cls), granted);
            return;
        }
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
        case VB_ENV_OPEN: {
            /* The passive side asks us to connect a class's QP. */
            uint32_t k = imm & 0xffffffu;
            if (rrpci_conn_passive(vc->conn) || q->cls != VB_FIRST || k >= VB_NCLS ||
                k == VB_FIRST) {
                why = "unexpected request for a class's queue pair";
                rc = RRPC_E_PROTO;
            } else {
                rc = vb_want(&vc->q[k]);
            }
            break;
        }
        case VB_ENV_NCREDIT: {
            uint32_t n = imm & 0xffffffu;
            if (!q->ncredits_max && q->nasked) { /* the grant we asked for */
                if (!n || n > VB_NOTIFY_CREDITS) {
                    why = "peer granted a number of notify credits out of 1..16";
                    rc = RRPC_E_PROTO;
                } else {
                    q->ncredits = q->ncredits_max = n;
                }
            } else if (n > q->ncredits_max - q->ncredits) {
                why = "peer returned more notify credit than it owed";
                rc = RRPC_E_PROTO;
            } else {
                q->ncredits += n;
            }
            break;
        }
        case VB_ENV_NASK:
            /* The peer's one ask for notify credits: the buffers first, then
             * the grant goes as a return of all of them (vb_kick). */
            if (q->extra & VB_RX_NOTIFY) {
                why = "peer asked for notify credits twice";
                rc = RRPC_E_PROTO;
            } else if ((rc = vb_rx_extra(q, VB_RX_NOTIFY))) {
                why = vc->err;
            } else {
                q->ncredit_owed = VB_NOTIFY_CREDITS;
            }
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
        } else if (!rc) {
            rc = vb_frame_fits(q, &rb->h, &why);
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

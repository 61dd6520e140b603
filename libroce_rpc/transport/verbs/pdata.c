/* SPDX-License-Identifier: MIT */
/* The verbs transport: the connection private data (REQ/REP/REJ) and the hello it carries. */
#include "transport/verbs/verbs_int.h"

/* ---- private data ------------------------------------------------------- */

void vb_pd_encode(const struct vb_conn *vc, int cls, uint8_t out[VB_PD_SIZE])
{
    rrpci_hello_encode(&vc->hello, out);
    out[32] = VB_PD_VERSION;
    out[33] = (uint8_t)cls;
    out[34] = 0; /* notify credits: granted when asked for (VB_ENV_NASK) */
    out[35] = VB_PD_MARK;
    rrpci_put64(out + 36, vc->cookie);
}

int vb_pd_decode(const uint8_t *p, size_t len, struct vb_pd *pd, const char **why)
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

void vb_reject(struct rdma_cm_id *id, int code)
{
    uint8_t b[VB_REJ_SIZE];
    rrpci_put32(b, VB_REJ_MAGIC);
    rrpci_put32(b + 4, (uint32_t)code);
    rdma_reject(id, b, VB_REJ_SIZE);
}

/* The peer's hello: the core checks it and takes the peer's grants. */
int vb_hello_peer(struct vb_conn *vc, const struct rrpci_hello *h)
{
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    int rc = rrpci_conn_hello_peer(c, h);
    rrpci_conn_unref(c);
    if (rc)
        return rc;
    vb_advance(vc, VB_HELLO);
    uint32_t e = h->rx_buf - RRPCI_HDR_SIZE;
    vc->eager_send = e < vc->vx->eager ? e : vc->vx->eager;
    return 0;
}

void vb_conn_param(struct vb_conn *vc, struct rdma_conn_param *p, const uint8_t *pd,
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

/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport: the rendezvous receive pool.  A payload above
 * RRPC_VERBS_EAGER is READ into a registered buffer; registering one per
 * message costs a system call and page pinning each time, so each device
 * keeps the buffers it registered, up to RRPC_VERBS_RNDV_POOL_BYTES of them
 * (free and lent together), and lends them out again.  A buffer's capacity
 * is the payload's length rounded up to a power of two (at least
 * VB_PBUF_MIN), so one size serves the messages of that size and somewhat
 * smaller.  A payload the pool cannot hold, even after it dropped its free
 * buffers, is registered for itself as before: counted (fallbacks) and
 * logged at debug.
 */
#include "transport/verbs/verbs_int.h"

#define VB_PBUF_MIN (64u << 10)

static size_t vb_pbuf_cap(size_t len)
{
    size_t cap = VB_PBUF_MIN;
    while (cap < len && cap <= SIZE_MAX / 2)
        cap <<= 1;
    return cap;
}

static void vb_pbuf_drop(struct vb_dev *d, struct vb_pbuf *pb)
{
    d->pool_bytes -= pb->cap;
    vb_pages_dereg(pb->mr);
    free(pb);
}

/* The smallest free buffer of @d that holds @len bytes, taken off the free
 * list; NULL: none. */
static struct vb_pbuf *vb_pbuf_take(struct vb_dev *d, size_t len)
{
    struct vb_pbuf **best = NULL;
    for (struct vb_pbuf **pp = &d->pfree; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= len && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    if (!best)
        return NULL;
    struct vb_pbuf *pb = *best;
    *best = pb->next;
    return pb;
}

/* A registered buffer of @len bytes at least in *@buf / *@mr. */
static int vb_rndv_reg(struct vb_dev *d, size_t len, uint8_t **buf, struct ibv_mr **mr,
                       const char **why)
{
    bool mapped;
    int rc = vb_pages_reg(d->pd, len, mr, &mapped);
    if (rc) {
        *why = mapped ? "cannot register a rendezvous buffer (locked-memory limit?)"
                      : "out of memory for a rendezvous buffer";
        return rc;
    }
    d->vx->rndv.regs++;
    *buf = (*mr)->addr;
    return 0;
}

int vb_rndv_buf_get(struct vb_dev *d, struct vb_rin *r, const char **why)
{
    struct vb_ctx *vx = d->vx;
    size_t len = r->h.len, cap = vb_pbuf_cap(len);
    struct vb_pbuf *pb = vb_pbuf_take(d, len);
    if (pb) {
        vx->rndv.reuses++;
    } else if (cap <= vx->rndv_pool_max) {
        /* Make room by dropping free buffers (of other sizes: none fits). */
        while (d->pool_bytes + cap > vx->rndv_pool_max && d->pfree) {
            struct vb_pbuf *f = d->pfree;
            d->pfree = f->next;
            vb_pbuf_drop(d, f);
        }
        if (d->pool_bytes + cap <= vx->rndv_pool_max) {
            if (!(pb = calloc(1, sizeof(*pb)))) {
                *why = "out of memory for a rendezvous buffer";
                return -ENOMEM;
            }
            int rc = vb_rndv_reg(d, cap, &pb->buf, &pb->mr, why);
            if (rc) {
                free(pb);
                return rc;
            }
            pb->cap = cap;
            d->pool_bytes += cap;
        }
    }
    if (pb) {
        r->pb = pb;
        r->pdev = d;
        r->buf = pb->buf;
        r->mr = pb->mr;
        return 0;
    }
    vx->rndv.fallbacks++;
    RRPCI_LOG(vx->ctx, LOG_DEBUG,
              "verbs: rendezvous pool full (%zu bytes held, RRPC_VERBS_RNDV_POOL_BYTES=%zu): "
              "registering a %zu-byte receive buffer for one message",
              d->pool_bytes, vx->rndv_pool_max, len);
    return vb_rndv_reg(d, len, &r->buf, &r->mr, why);
}

void vb_rndv_pool_clear(struct vb_dev *d)
{
    while (d->pfree) {
        struct vb_pbuf *pb = d->pfree;
        d->pfree = pb->next;
        vb_pbuf_drop(d, pb);
    }
}

int vb_rndv_counts(rrpc_ctx *ctx, struct vb_rndv_counts *ret)
{
    struct vb_ctx *vx = vb_vx(ctx);
    if (!vx || !vx->open)
        return -ENOENT;
    *ret = vx->rndv;
    return 0;
}

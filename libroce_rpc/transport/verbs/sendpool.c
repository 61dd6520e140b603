/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport: the send buffer pool.  A frame too large to go
 * inline is copied into a registered send buffer until its SEND completes.
 * Each device of a context lends such buffers out of slabs of VB_SLAB_BUFS
 * (one registration each), made when every slab is lent out and given back
 * when a connection goes idle or away (vb_spool_trim keeps one slab that
 * lends nothing).  So an idle connection holds no send buffer, and a
 * context's registered send memory follows the frames in flight, not the
 * number of connections.  A class's queue pair holds at most VB_NSEND of
 * them, the bound each class had when every connection had its own: one
 * busy class cannot take what the others need, and the frames it has in
 * flight wake it (their completions give the buffers back).
 */
#include "transport/verbs/verbs_int.h"

static void vb_slab_link_free(struct vb_dev *d, struct vb_slab *s)
{
    s->fprev = NULL;
    s->fnext = d->sfree;
    if (d->sfree)
        d->sfree->fprev = s;
    d->sfree = s;
    s->on_free = true;
}

static void vb_slab_unlink_free(struct vb_dev *d, struct vb_slab *s)
{
    if (s->fprev)
        s->fprev->fnext = s->fnext;
    else
        d->sfree = s->fnext;
    if (s->fnext)
        s->fnext->fprev = s->fprev;
    s->fnext = s->fprev = NULL;
    s->on_free = false;
}

static int vb_slab_new(struct vb_dev *d, const char **why)
{
    size_t bsz = vb_bsz(d->vx), len = (size_t)VB_SLAB_BUFS * bsz;
    struct vb_slab *s = calloc(1, sizeof(*s));
    bool mapped = false;
    int rc = s ? vb_pages_reg(d->pd, len, &s->mr, &mapped) : -ENOMEM;
    if (rc) {
        free(s);
        *why = mapped ? "cannot register send buffers (locked-memory limit, ulimit -l?)"
                      : "out of memory for send buffers";
        return rc;
    }
    s->dev = d;
    s->mem = s->mr->addr;
    for (unsigned k = 0; k < VB_SLAB_BUFS; k++) {
        struct vb_sbuf *sb = &s->sb[k];
        sb->wr.kind = VB_K_SEND;
        sb->slab = s;
        sb->buf = s->mem + (size_t)k * bsz;
        sb->next = s->free;
        s->free = sb;
    }
    s->next = d->slabs;
    d->slabs = s;
    d->nslabs++;
    vb_slab_link_free(d, s);
    return 0;
}

/* Frees @s, already off the device's list of slabs. */
static void vb_slab_free(struct vb_dev *d, struct vb_slab *s)
{
    if (s->on_free)
        vb_slab_unlink_free(d, s);
    d->nslabs--;
    vb_pages_dereg(s->mr);
    free(s);
}

bool vb_sbuf_room(const struct vb_qp *q)
{
    return q->sb_out < VB_NSEND;
}

struct vb_sbuf *vb_sbuf_get(struct vb_qp *q, int *rc)
{
    struct vb_conn *vc = q->vc;
    struct vb_dev *d = vc->dev;
    if (!vb_sbuf_room(q)) {
        *rc = -EAGAIN; /* its own SENDs in flight give buffers back */
        return NULL;
    }
    if (!d->sfree) {
        const char *why = "";
        int err = vb_slab_new(d, &why);
        if (err) {
            /* With SENDs of its own in flight the class waits for them;
             * with none, nothing would wake it: the connection fails. */
            if (q->sb_out) {
                RRPCI_LOG(vc->ctx, LOG_WARNING, "verbs: %s class %d: %s: %s", vc->peer, q->cls,
                          why, rrpc_strerror(err));
                *rc = -EAGAIN;
            } else {
                vb_fail(vc, err, "peer %s, class %d: %s: %s", vc->peer, q->cls, why,
                        rrpc_strerror(err));
                *rc = err;
            }
            return NULL;
        }
    }
    struct vb_slab *s = d->sfree;
    struct vb_sbuf *sb = s->free;
    s->free = sb->next;
    if (!s->free)
        vb_slab_unlink_free(d, s);
    s->out++;
    sb->wr.cls = q->cls;
    sb->q = q;
    sb->hprev = NULL;
    sb->next = q->sheld;
    if (q->sheld)
        q->sheld->hprev = sb;
    q->sheld = sb;
    q->sb_out++;
    return sb;
}

void vb_sbuf_put(struct vb_sbuf *sb)
{
    struct vb_qp *q = sb->q;
    if (sb->hprev)
        sb->hprev->next = sb->next;
    else
        q->sheld = sb->next;
    if (sb->next)
        sb->next->hprev = sb->hprev;
    q->sb_out--;
    sb->q = NULL;
    struct vb_slab *s = sb->slab;
    sb->next = s->free;
    s->free = sb;
    s->out--;
    if (!s->on_free)
        vb_slab_link_free(s->dev, s);
}

void vb_sbuf_put_all(struct vb_qp *q)
{
    while (q->sheld)
        vb_sbuf_put(q->sheld);
}

void vb_spool_trim(struct vb_dev *d)
{
    bool kept = false;
    for (struct vb_slab **pp = &d->slabs; *pp;) {
        struct vb_slab *s = *pp;
        if (s->out || !kept) {
            kept = kept || !s->out;
            pp = &s->next;
            continue;
        }
        *pp = s->next;
        vb_slab_free(d, s);
    }
}

void vb_spool_clear(struct vb_dev *d)
{
    while (d->slabs) {
        struct vb_slab *s = d->slabs;
        d->slabs = s->next;
        vb_slab_free(d, s);
    }
}

int vb_spool_counts(rrpc_ctx *ctx, struct vb_spool_counts *ret)
{
    struct vb_ctx *vx = vb_vx(ctx);
    if (!vx || !vx->open)
        return -ENOENT;
    memset(ret, 0, sizeof(*ret));
    for (const struct vb_dev *d = vx->devs; d; d = d->next)
        for (const struct vb_slab *s = d->slabs; s; s = s->next) {
            ret->slabs++;
            ret->lent += s->out;
        }
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Grants on verbs (core/grant.c): a type 2 memory window over the region's
 * MR, bound by a BIND_MW work request on the connection's queue pair of the
 * grant's class.  The window's rkey is the grant's key; the NIC then
 * refuses any other queue pair, range or right.  A device that checks an
 * access through a window only against the window's MR (Soft-RoCE:
 * d->mw_range_unchecked) gets an MR of exactly the grant's range under
 * the window, so the promise holds there too, at the price of a
 * registration per grant.  Ending a grant deallocates
 * its window, which invalidates it in the NIC before ibv_dealloc_mw
 * returns; a window whose bind is still in flight (the connection went down
 * meanwhile) is deallocated when that completion comes.
 */
#include "transport/verbs/verbs_int.h"

/* The window first: it is bound over the MR. */
static void vb_grant_free(struct vb_grant *vg)
{
    ibv_dealloc_mw(vg->mw);
    if (vg->mr)
        ibv_dereg_mr(vg->mr);
    free(vg);
}

/* Posts @vg's BIND_MW on @q. */
static int vb_grant_post(struct vb_qp *q, struct vb_grant *vg)
{
    struct ibv_send_wr wr = {
        .wr_id = (uintptr_t)&vg->wr,
        .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {.mw = vg->mw,
                    .rkey = vg->rkey,
                    .bind_info = {.mr = vg->bind_mr,
                                  .addr = vg->addr,
                                  .length = vg->len,
                                  .mw_access_flags = vg->access}},
    };
    int rc = vb_post_send(q, &wr);
    if (!rc)
        vg->bind_out = true;
    return rc;
}

int vb_grant_bind(rrpc_conn *c, rrpc_grant *g)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc || !vb_wired(vc))
        return rrpci_set_error(rrpci_conn_ctx(c), RRPC_E_CLOSED,
                               "rrpc_region_grant: the connection is not up");
    struct vb_dev *d = vc->dev;
    if (!d->mw2)
        return rrpci_set_error(vc->ctx, -ENOTSUP,
                               "rrpc_region_grant: device %s has no type 2 memory windows, so it "
                               "cannot bind a grant to one peer; rrpc_region_token gives the "
                               "connection the whole region instead",
                               ibv_get_device_name(d->verbs->device));
    struct rrpci_grant_info gi;
    rrpci_grant_get(g, &gi);
    struct vb_qp *q = &vc->q[gi.cls];
    bool now = q->state == VB_QP_ESTABLISHED;
    if (q->err || (now && !vb_sq_room(q, 0)))
        return rrpci_set_error(vc->ctx, -EAGAIN,
                               "rrpc_region_grant: the send queue of class %s is full; try again",
                               rrpci_class_name(gi.cls));
    struct vb_mr *m = NULL;
    int rc = d->mw_range_unchecked ? 0 : vb_mr_get(d, gi.region, &m);
    if (rc)
        return rc;
    struct vb_grant *vg = calloc(1, sizeof(*vg));
    if (!vg)
        return -ENOMEM;
    if (!m) {
        vg->mr =
            ibv_reg_mr(d->pd, (void *)(uintptr_t)gi.addr, gi.len,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | (int)vb_remote_access(gi.access));
        if (!vg->mr) {
            rc = vb_errno();
            free(vg);
            return rrpci_set_error(vc->ctx, rc,
                                   "rrpc_region_grant: ibv_reg_mr of the grant's %llu "
                                   "bytes on %s: %s",
                                   (unsigned long long)gi.len,
                                   ibv_get_device_name(d->verbs->device), rrpc_strerror(rc));
        }
    }
    vg->wr.kind = VB_K_BIND;
    vg->wr.cls = (uint8_t)gi.cls;
    vg->g = g;
    vg->mw = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
    if (!vg->mw) {
        rc = vb_errno();
        if (vg->mr)
            ibv_dereg_mr(vg->mr);
        free(vg);
        return rrpci_set_error(vc->ctx, rc, "rrpc_region_grant: ibv_alloc_mw on %s: %s",
                               ibv_get_device_name(d->verbs->device), rrpc_strerror(rc));
    }
    vg->rkey = ibv_inc_rkey(vg->mw->rkey);
    vg->bind_mr = m ? m->mr : vg->mr;
    vg->addr = gi.addr;
    vg->len = gi.len;
    vg->access = vb_remote_access(gi.access);
    if (!now) {
        /* The class's QP is connected first; the bind follows
         * (vb_grant_post_waiting), and the core waits for it. */
        if ((rc = vb_want(q))) {
            vb_grant_free(vg);
            return rc;
        }
        vg->waiting = true;
        vg->pnext = q->binds;
        q->binds = vg;
    } else if ((rc = vb_grant_post(q, vg))) {
        vb_grant_free(vg);
        return rrpci_set_error(vc->ctx, rc, "rrpc_region_grant: posting the window's bind: %s",
                               rrpc_strerror(rc));
    }
    rrpci_grant_set_key(g, vg->rkey);
    rrpci_grant_set_tpriv(g, vg);
    return 0;
}

void vb_grant_post_waiting(struct vb_qp *q)
{
    while (q->binds) {
        struct vb_grant *vg = q->binds;
        q->binds = vg->pnext;
        vg->waiting = false;
        if (!vg->g) {
            vb_grant_free(vg); /* ended meanwhile */
            continue;
        }
        int rc = vb_grant_post(q, vg);
        if (rc)
            rrpci_grant_bound(vg->g, RRPC_E_CONN_LOST,
                              "rrpc_region_grant: posting the window's bind failed");
    }
}

void vb_grant_drop_waiting(struct vb_qp *q)
{
    while (q->binds) {
        struct vb_grant *vg = q->binds;
        q->binds = vg->pnext;
        vg->waiting = false;
        if (!vg->g)
            vb_grant_free(vg); /* else the core's grant_end frees it */
    }
}

void vb_grant_end(rrpc_conn *c, rrpc_grant *g)
{
    (void)c;
    struct vb_grant *vg = rrpci_grant_tpriv(g);
    if (!vg)
        return;
    rrpci_grant_set_tpriv(g, NULL);
    vg->g = NULL;
    if (vg->bind_out || vg->waiting)
        return; /* its completion, or its QP's list, deallocates it */
    vb_grant_free(vg);
}

void vb_grant_bind_done(struct vb_grant *vg, const struct ibv_wc *wc)
{
    vg->bind_out = false;
    if (!vg->g) {
        vb_grant_free(vg);
        return;
    }
    if (wc->status == IBV_WC_SUCCESS)
        rrpci_grant_bound(vg->g, 0, NULL);
    else
        rrpci_grant_bound(vg->g, RRPC_E_CONN_LOST,
                          wc->status == IBV_WC_WR_FLUSH_ERR
                              ? "rrpc_region_grant: the connection went down"
                              : "rrpc_region_grant: the NIC refused to bind the window");
}

/* SPDX-License-Identifier: MIT */
/* The verbs transport: endpoints (listen, connect, close) and the transport's ops table. */
#include "transport/verbs/verbs_int.h"

/* ---- endpoints ---------------------------------------------------------- */

static int vb_getaddr(rrpc_ctx *ctx, const char *host, int port, bool passive,
                      struct sockaddr_storage *ss)
{
    struct addrinfo hints, *res, *ai;
    char ps[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    snprintf(ps, sizeof(ps), "%d", port);
    const char *h = host && host[0] && strcmp(host, "*") ? host : NULL;
    int rc = getaddrinfo(h, ps, &hints, &res);
    if (rc)
        return rrpci_set_error(ctx, rrpci_resolve_code(rc, errno), "cannot resolve \"%s\": %s",
                               h ? h : "*", rrpci_resolve_why(rc));
    for (ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET)
            break;
    if (!ai)
        ai = res;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static int vb_ctx_init(rrpc_ctx *ctx)
{
    struct vb_ctx *vx;
    return vb_ctx_open(ctx, &vx);
}

static void vb_ctx_fini(rrpc_ctx *ctx)
{
    struct vb_ctx *vx = vb_vx(ctx);
    if (!vx || !vx->open)
        return;
    struct rrpci_evloop *loop = rrpci_ctx_loop(ctx);
    while (vx->vcs)
        vb_teardown(vx->vcs);
    while (vx->devs) {
        struct vb_dev *d = vx->devs;
        vx->devs = d->next;
        for (int b = 0; b < VB_CACHE_BUCKETS; b++)
            while (d->cache[b]) {
                struct vb_mr *m = d->cache[b];
                d->cache[b] = m->hnext;
                rrpci_region_set_tpriv(m->r, NULL);
                ibv_dereg_mr(m->mr);
                free(m);
            }
        vb_rndv_pool_clear(d);
        vb_spool_clear(d);
        rrpci_io_stop(loop, &d->w);
        ibv_destroy_comp_channel(d->ch);
        ibv_dealloc_pd(d->pd);
        free(d);
    }
    rrpci_io_stop(loop, &vx->ech_w);
    vb_reaper_stop(vx);
    vx->ech = NULL;
    vx->open = false;
}

static int vb_listen(rrpc_listener *l, const struct rrpci_uri *uri)
{
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    struct vb_listener *vl = rrpci_listener_priv(l);
    struct vb_ctx *vx;
    struct sockaddr_storage ss;
    int rc = vb_ctx_open(ctx, &vx);
    if (rc)
        return rc;
    if ((rc = vb_getaddr(ctx, uri->host, uri->port, true, &ss)))
        return rc;
    vl->kind = VB_K_LISTENER;
    vl->l = l;
    vl->vx = vx;
    if (rdma_create_id(vx->ech, &vl->id, vl, RDMA_PS_TCP)) {
        rc = vb_errno();
        vl->id = NULL;
        return rrpci_set_error(ctx, rc, "rdma_create_id: %s", rrpc_strerror(rc));
    }
    if (rdma_bind_addr(vl->id, (struct sockaddr *)&ss)) {
        rc = vb_errno();
        rdma_destroy_id(vl->id);
        vl->id = NULL;
        char what[2 * RRPCI_URI_HOST_MAX + 64];
        snprintf(what, sizeof(what), "rdma://%s:%d", uri->host, uri->port);
        if (rc == -ENODEV) {
            snprintf(what, sizeof(what), "rdma://%s:%d: no RDMA device serves %s", uri->host,
                     uri->port, uri->host);
            return vb_no_device(ctx, what);
        }
        return rrpci_set_error(ctx, rc, "%s: rdma_bind_addr: %s%s", what, rrpc_strerror(rc),
                               rc == -EADDRNOTAVAIL ? " (not a local address)" : "");
    }
    if (rdma_listen(vl->id, VB_BACKLOG)) {
        rc = vb_errno();
        rdma_destroy_id(vl->id);
        vl->id = NULL;
        return rrpci_set_error(ctx, rc, "rdma://%s:%d: rdma_listen: %s", uri->host, uri->port,
                               rrpc_strerror(rc));
    }
    return 0;
}

static void vb_listener_close(rrpc_listener *l)
{
    struct vb_listener *vl = rrpci_listener_priv(l);
    if (!vl->id)
        return;
    for (struct vb_conn *vc = vl->vx->vcs; vc; vc = vc->next)
        if (vc->listen_id == vl->id)
            vc->listen_id = NULL; /* its missing classes can no longer arrive */
    /* At once, not through the reaper: the port is free for the next listen.
     * A listening id sends no DREQ, and its events were all acknowledged. */
    rdma_destroy_id(vl->id);
    vl->id = NULL;
}

static int vb_listener_port(rrpc_listener *l)
{
    struct vb_listener *vl = rrpci_listener_priv(l);
    if (!vl->id)
        return RRPC_E_CLOSED;
    return ntohs(rdma_get_src_port(vl->id));
}

static int vb_connect(rrpc_conn *c, const struct rrpci_uri *uri)
{
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    struct vb_ctx *vx;
    struct sockaddr_storage dst, src;
    int rc = vb_ctx_open(ctx, &vx);
    if (rc)
        return rc;
    if ((rc = vb_getaddr(ctx, uri->host, uri->port, false, &dst)))
        return rc;
    if (uri->src[0] && (rc = vb_getaddr(ctx, uri->src, 0, false, &src)))
        return rc;
    struct vb_conn *vc = vb_conn_new(vx, c);
    if (!vc)
        return -ENOMEM;
    vb_sa_str((struct sockaddr *)&dst, vc->peer, sizeof(vc->peer));
    if (getrandom(&vc->cookie, sizeof(vc->cookie), 0) != sizeof(vc->cookie))
        vc->cookie = (uint64_t)vb_now_us() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)vc;
    /* The first QP now; each other class's when it is first used
     * (vb_want), to the same addresses. */
    vc->dst = dst;
    vc->has_src = uri->src[0] != 0;
    if (vc->has_src)
        vc->src = src;
    rc = vb_attach(vc, VB_FIRST);
    if (!rc)
        return 0;
    char err[sizeof(vc->err)];
    snprintf(err, sizeof(err), "%s", vc->err);
    vb_teardown(vc);
    if (rc == -ENODEV) {
        char what[2 * RRPCI_URI_HOST_MAX + 64];
        snprintf(what, sizeof(what), "rdma://%s:%d: no RDMA device serves %s", uri->host,
                 uri->port, uri->src[0] ? uri->src : "the route to it");
        return vb_no_device(ctx, what);
    }
    return rrpci_set_error(ctx, rc, "rdma://%s:%d: %s", uri->host, uri->port, err);
}

static void vb_conn_close(rrpc_conn *c)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return;
    struct vb_conn_priv *p = rrpci_conn_priv(c);
    p->vc = NULL;
    vc->conn = NULL; /* closed: torn down on the way out (vb_leave) */
    vc->listen_id = NULL;
    if (vc->busy == 0) {
        vc->busy++;
        vb_leave(vc);
    }
}

static int vb_class_dscp(rrpc_conn *c, int cls, int *ret_dscp)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (cls < 0 || cls >= VB_NCLS)
        return RRPC_E_BAD_CLASS;
    struct vb_qp *q = &vc->q[cls];
    if (q->state != VB_QP_ESTABLISHED) {
        /* Not used yet: its QP will carry the class's DSCP once connected. */
        *ret_dscp = rrpci_ctx_class_dscp(vc->ctx, cls);
        return 0;
    }
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    int rc = vb_ret(ibv_query_qp(q->id->qp, &a, IBV_QP_AV, &ia));
    if (rc)
        return rc;
    *ret_dscp = a.ah_attr.grh.traffic_class >> 2;
    return 0;
}

static int vb_peer_name(rrpc_conn *c, char *buf, size_t len)
{
    struct vb_conn *vc = vb_vc(c);
    if (!vc)
        return RRPC_E_CLOSED;
    if (vc->q[VB_FIRST].id)
        vb_sa_str(rdma_get_peer_addr(vc->q[VB_FIRST].id), buf, len);
    else
        snprintf(buf, len, "%s", vc->peer);
    return 0;
}

/* ops->trim: @c has been idle for a keepalive interval: the send slabs of
 * its device that lend nothing are given back, but one. */
static void vb_trim(rrpc_conn *c)
{
    struct vb_conn *vc = vb_vc(c);
    if (vc && vc->dev)
        vb_spool_trim(vc->dev);
}

const struct rrpci_transport_ops rrpci_verbs_ops = {
    .version = RRPCI_TRANSPORT_OPS_VERSION,
    .name = "verbs",
    .scheme = "rdma",
    .ctx_priv_size = sizeof(struct vb_ctx),
    .conn_priv_size = sizeof(struct vb_conn_priv),
    .listener_priv_size = sizeof(struct vb_listener),
    .listen = vb_listen,
    .listener_close = vb_listener_close,
    .connect = vb_connect,
    .send = vb_send,
    .conn_close = vb_conn_close,
    .ctx_init = vb_ctx_init,
    .ctx_fini = vb_ctx_fini,
    .class_dscp = vb_class_dscp,
    .peer_name = vb_peer_name,
    .listener_port = vb_listener_port,
    .region_key = vb_region_key,
    .region_release = vb_region_release,
    .rdma = vb_rdma,
    .grant_bind = vb_grant_bind,
    .grant_end = vb_grant_end,
    .busy_poll = vb_busy_poll,
    .trim = vb_trim,
    .rx_grow = vb_rx_grow,
};

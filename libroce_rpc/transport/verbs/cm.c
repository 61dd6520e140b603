/* SPDX-License-Identifier: MIT */
/* The verbs transport: connection management events from the rdma_cm event channel. */
#include "transport/verbs/verbs_int.h"

/* ---- connection management events --------------------------------------- */

static void vb_established(struct vb_conn *vc)
{
    vc->listen_id = NULL;
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    rrpci_conn_established(c);
    rrpci_conn_unref(c);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_rndv_admit_held(&vc->q[i]);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_drain(&vc->q[i]);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_wake(&vc->q[i]);
}

static void vb_on_route(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    int rc = vb_conn_setup(vc, q->id->verbs);
    if (!rc)
        rc = vb_qp_create(q);
    if (rc) {
        vb_fail(vc, rc, "connecting to %s: %s", vc->peer, vc->err[0] ? vc->err : rrpc_strerror(rc));
        return;
    }
    uint8_t pd[VB_PD_SIZE];
    struct rdma_conn_param p;
    vb_pd_encode(vc, q->cls, pd);
    vb_conn_param(vc, &p, pd, vc->dev->max_rd_atom, vc->dev->max_init_rd_atom);
    if (rdma_connect(q->id, &p)) {
        rc = vb_errno();
        vb_fail(vc, rc, "rdma_connect to %s (class %d): %s", vc->peer, q->cls, rrpc_strerror(rc));
    }
}

static void vb_on_established(struct vb_qp *q, const uint8_t *pd, size_t pdlen)
{
    struct vb_conn *vc = q->vc;
    if (!rrpci_conn_passive(vc->conn)) {
        struct vb_pd p;
        const char *why = NULL;
        int rc = vb_pd_decode(pd, pdlen, &p, &why);
        if (!rc && (p.cls != q->cls || p.cookie != vc->cookie)) {
            why = "the accept does not match the request (class or cookie)";
            rc = RRPC_E_PROTO;
        }
        if (rc) {
            vb_fail(vc, rc, "handshake with %s: %s", vc->peer, why);
            return;
        }
        if (vc->phase == VB_GATHERING && (rc = vb_hello_peer(vc, &p.hello))) {
            vb_fail(vc, rc, "handshake with %s refused", vc->peer);
            return;
        }
        q->ncredits = q->ncredits_max = p.ncredits;
    }
    if (q->state == VB_QP_ESTABLISHED)
        return;
    q->state = VB_QP_ESTABLISHED;
    RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d established", vc->peer, q->cls);
    if (++vc->nestab == VB_NCLS && vb_live(vc))
        vb_established(vc);
}

static int vb_status_reason(int status, int dflt)
{
    if (status == -ENODEV)
        return RRPC_E_NO_DEVICE;
    if (status < 0 && status > -4096)
        return status;
    return dflt;
}

static void vb_on_qp_event(struct vb_qp *q, const struct rdma_cm_event *e, const uint8_t *pd,
                           size_t pdlen)
{
    struct vb_conn *vc = q->vc;
    int rc;
    vb_enter(vc);
    if (!vb_live(vc)) {
        if (e->event == RDMA_CM_EVENT_DISCONNECTED || e->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
            vb_advance(vc, VB_FINAL); /* the peer is gone */
        vb_leave(vc);
        return;
    }
    switch (e->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(q->id, VB_RESOLVE_MS)) {
            rc = vb_errno();
            if (rc == -ENODEV)
                vb_fail(vc, RRPC_E_NO_DEVICE,
                        "no RDMA device serves the route to %s (for Soft-RoCE: rdma link add "
                        "rxe0 type rxe netdev <if>; ?src=ADDR picks the local address)",
                        vc->peer);
            else
                vb_fail(vc, rc, "rdma_resolve_route to %s: %s", vc->peer, rrpc_strerror(rc));
        }
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        vb_on_route(q);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        vb_on_established(q, pd, pdlen);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        rc = vb_status_reason(e->status, -EHOSTUNREACH);
        if (rc == RRPC_E_NO_DEVICE)
            vb_fail(vc, rc,
                    "no RDMA device serves the route to %s: the verbs transport needs one on the "
                    "outgoing interface (for Soft-RoCE: rdma link add rxe0 type rxe netdev <if>; "
                    "?src=ADDR picks the local address)",
                    vc->peer);
        else
            vb_fail(vc, rc, "resolving the address %s: %s", vc->peer, rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        rc = vb_status_reason(e->status, -EHOSTUNREACH);
        vb_fail(vc, rc, "resolving the route to %s: %s", vc->peer, rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        rc = vb_status_reason(e->status, -ETIMEDOUT);
        vb_fail(vc, rc, "%s is unreachable (class %d): %s", vc->peer, q->cls, rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        rc = vb_status_reason(e->status, RRPC_E_CONN_LOST);
        vb_fail(vc, rc, "connection error with %s (class %d): %s", vc->peer, q->cls,
                rrpc_strerror(rc));
        break;
    case RDMA_CM_EVENT_REJECTED: {
        rc = -ECONNREFUSED;
        if (pdlen >= VB_REJ_SIZE && rrpci_get32(pd) == VB_REJ_MAGIC) {
            int32_t r = (int32_t)rrpci_get32(pd + 4);
            if (r < 0)
                rc = r;
            vb_fail(vc, rc, "%s rejected the connection: %s", vc->peer, rrpc_strerror(rc));
        } else {
            vb_fail(vc, rc, "%s refused the connection (class %d, reject reason %d%s)", vc->peer,
                    q->cls, e->status,
                    e->status == 8 ? ": nothing listens on that port" : "");
        }
        break;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
        vb_advance(vc, VB_FINAL); /* the peer is gone */
        /* What already arrived goes first, all of it (the connection is torn
         * down right after): an ERROR frame explains the close. */
        if (vc->cq)
            vb_poll(vc, VB_DRAIN_BUDGET);
        vb_fail(vc, RRPC_E_CONN_LOST, "%s disconnected", vc->peer);
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        vb_advance(vc, VB_FINAL); /* the peer is gone */
        vb_fail(vc, RRPC_E_CONN_LOST, "the RDMA device was removed");
        break;
    default:
        RRPCI_LOG(vc->ctx, LOG_DEBUG, "verbs: %s class %d: ignoring %s", vc->peer, q->cls,
                  rdma_event_str(e->event));
        break;
    }
    vb_leave(vc);
}

static struct vb_conn *vb_find_pending(struct vb_ctx *vx, struct rdma_cm_id *lid, uint64_t cookie)
{
    for (struct vb_conn *vc = vx->vcs; vc; vc = vc->next)
        if (vc->conn && rrpci_conn_passive(vc->conn) && !rrpci_conn_is_wired(vc->conn) &&
            vc->listen_id == lid && vc->cookie == cookie)
            return vc;
    return NULL;
}

static void vb_on_conn_req(struct vb_ctx *vx, struct vb_listener *vl, struct rdma_cm_event *e,
                           const uint8_t *pd, size_t pdlen)
{
    struct rdma_cm_id *id = e->id;
    struct vb_pd p;
    const char *why = NULL;
    char peer[INET6_ADDRSTRLEN + 8];
    vb_sa_str(rdma_get_peer_addr(id), peer, sizeof(peer));
    id->context = NULL;
    int rc = vb_pd_decode(pd, pdlen, &p, &why);
    if (rc) {
        RRPCI_LOG(vx->ctx, LOG_WARNING, "verbs: refusing a connection from %s: %s", peer, why);
        vb_reject(id, rc);
        vb_destroy_id(vx, id, false);
        return;
    }
    struct vb_conn *vc = vb_find_pending(vx, e->listen_id, p.cookie);
    if (!vc) {
        rrpc_conn *c = NULL;
        char lwhy[200];
        rc = rrpci_listener_accept(vl->l, rdma_get_peer_addr(id), &c, lwhy, sizeof(lwhy));
        if (rc) {
            RRPCI_LOG(vx->ctx, LOG_NOTICE, "verbs: refusing a connection from %s: %s", peer, lwhy);
            vb_reject(id, rc);
            vb_destroy_id(vx, id, false);
            return;
        }
        vc = vb_conn_new(vx, c);
        if (!vc) {
            vb_reject(id, -ENOMEM);
            vb_destroy_id(vx, id, false);
            rrpci_conn_down(c, -ENOMEM, "out of memory for a verbs connection");
            return;
        }
        vc->cookie = p.cookie;
        vc->listen_id = e->listen_id;
        snprintf(vc->peer, sizeof(vc->peer), "%s", peer);
        vb_enter(vc);
        if ((rc = vb_hello_peer(vc, &p.hello))) {
            vb_reject(id, rc);
            vb_destroy_id(vx, id, false);
            vb_fail(vc, rc, "handshake with %s refused", peer);
            vb_leave(vc);
            return;
        }
    } else {
        vb_enter(vc);
        if (vc->q[p.cls].id) {
            vb_reject(id, RRPC_E_PROTO);
            vb_destroy_id(vx, id, false);
            vb_fail(vc, RRPC_E_PROTO, "%s connected class %d twice", peer, p.cls);
            vb_leave(vc);
            return;
        }
    }
    struct vb_qp *q = &vc->q[p.cls];
    q->id = id;
    id->context = q;
    q->ncredits = q->ncredits_max = p.ncredits;
    rc = vb_conn_setup(vc, id->verbs);
    if (!rc)
        rc = vb_qp_create(q);
    if (!rc) {
        uint8_t mine[VB_PD_SIZE];
        struct rdma_conn_param cp;
        vb_pd_encode(vc, p.cls, mine);
        int resp = e->param.conn.initiator_depth;
        int init = e->param.conn.responder_resources;
        vb_conn_param(vc, &cp, mine, resp < vc->dev->max_rd_atom ? resp : vc->dev->max_rd_atom,
                      init < vc->dev->max_init_rd_atom ? init : vc->dev->max_init_rd_atom);
        if (rdma_accept(id, &cp)) {
            rc = vb_errno();
            snprintf(vc->err, sizeof(vc->err), "rdma_accept: %s", rrpc_strerror(rc));
        }
    }
    if (rc) {
        vb_reject(id, rc);
        vb_fail(vc, rc, "accepting %s (class %d): %s", peer, p.cls,
                vc->err[0] ? vc->err : rrpc_strerror(rc));
    }
    vb_leave(vc);
}

static void vb_cm_event(struct vb_ctx *vx, struct rdma_cm_event *e, const uint8_t *pd,
                        size_t pdlen)
{
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        struct vb_listener *vl = e->listen_id ? e->listen_id->context : NULL;
        if (!vl || vl->kind != VB_K_LISTENER || !vl->id) {
            rdma_reject(e->id, NULL, 0);
            vb_destroy_id(vx, e->id, false);
            return;
        }
        vb_on_conn_req(vx, vl, e, pd, pdlen);
        return;
    }
    uint8_t *kind = e->id ? e->id->context : NULL;
    if (!kind)
        return;
    if (*kind == VB_K_QP)
        vb_on_qp_event((struct vb_qp *)(void *)kind, e, pd, pdlen);
    else
        RRPCI_LOG(vx->ctx, LOG_DEBUG, "verbs: listener: %s", rdma_event_str(e->event));
}

void vb_cm_cb(struct rrpci_io *w, unsigned revents)
{
    struct vb_ctx *vx = w->data;
    struct rdma_cm_event *ev;
    while (vx->ech && rdma_get_cm_event(vx->ech, &ev) == 0) {
        /* Checked before the acknowledgement, which lets the reaper free it. */
        struct rdma_cm_id *cid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->listen_id : ev->id;
        if (cid && cid->context == &vb_reaped_kind) {
            struct rdma_cm_id *nid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;
            rdma_ack_cm_event(ev);
            if (nid) {
                rdma_reject(nid, NULL, 0);
                vb_destroy_id(vx, nid, false);
            }
            continue;
        }
        struct rdma_cm_event e = *ev;
        RRPCI_LOG(vx->ctx, LOG_DEBUG, "verbs: cm event %s (status %d) on cm_id %p",
                  rdma_event_str(ev->event), ev->status, (void *)ev->id);
        uint8_t pd[256];
        size_t pdlen = 0;
        if ((e.event == RDMA_CM_EVENT_CONNECT_REQUEST || e.event == RDMA_CM_EVENT_ESTABLISHED ||
             e.event == RDMA_CM_EVENT_REJECTED) &&
            ev->param.conn.private_data) {
            pdlen = ev->param.conn.private_data_len;
            if (pdlen > sizeof(pd))
                pdlen = sizeof(pd);
            memcpy(pd, ev->param.conn.private_data, pdlen);
        }
        rdma_ack_cm_event(ev);
        e.param.conn.private_data = NULL;
        vb_cm_event(vx, &e, pd, pdlen);
    }
}

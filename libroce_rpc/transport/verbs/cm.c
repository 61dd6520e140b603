/* SPDX-License-Identifier: MIT */
/* The verbs transport: connection management events from the rdma_cm event channel. */
#include "transport/verbs/verbs_int.h"

/* ---- connection management events --------------------------------------- */

/* The first QP is established: the connection is up.  Other classes may
 * have been established before it on the passive side; what they hold
 * waited for this. */
static void vb_established(struct vb_conn *vc)
{
    rrpc_conn *c = vc->conn;
    rrpci_conn_ref(c);
    rrpci_conn_established(c);
    rrpci_conn_unref(c);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_rndv_admit_held(&vc->q[i]);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_drain(&vc->q[i]);
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        if (vc->q[i].state == VB_QP_ESTABLISHED)
            vb_grant_post_waiting(&vc->q[i]);
        else if (vc->q[i].blocked && vb_want(&vc->q[i]))
            return; /* a class whose frames came before the connection was up */
    for (int i = 0; i < VB_NCLS && vb_live(vc); i++)
        vb_wake(&vc->q[i]);
}

/* A later class's QP is established, the connection being up: what waited
 * for it goes (frames the core held, one-sided operations, binds). */
static void vb_class_up(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    vb_rndv_admit_held(q);
    if (vb_live(vc))
        vb_drain(q);
    if (vb_live(vc))
        vb_grant_post_waiting(q);
    int rc = vb_live(vc) ? vb_kick(q) : 0;
    if (rc) {
        vb_fail(vc, RRPC_E_CONN_LOST, "peer %s, class %d: ibv_post_send: %s", vc->peer, q->cls,
                rrpc_strerror(rc));
        return;
    }
    if (vb_live(vc))
        vb_wake(q);
}

static uint64_t vb_attach_us(struct vb_conn *vc)
{
    struct rrpci_accept_limits lim;
    rrpci_ctx_accept_limits(vc->ctx, &lim);
    return (uint64_t)lim.auth_timeout_ms * 1000u;
}

/* The attach timer: a wanted class's QP that is not established
 * RRPC_AUTH_TIMEOUT_MS after it was first wanted takes the connection
 * down; otherwise the timer is set for the next such deadline. */
static void vb_attach_arm(struct vb_conn *vc)
{
    uint64_t tmo = vb_attach_us(vc), now = vb_now_us(), next = 0;
    for (int i = 0; i < VB_NCLS; i++) {
        const struct vb_qp *q = &vc->q[i];
        if (!q->attach_at || q->state == VB_QP_ESTABLISHED)
            continue;
        if (now - q->attach_at >= tmo) {
            vb_fail(vc, -ETIMEDOUT,
                    "peer %s: the %s class's queue pair was not established within "
                    "RRPC_AUTH_TIMEOUT_MS (%llu ms) of its first use",
                    vc->peer, rrpci_class_name(q->cls), (unsigned long long)(tmo / 1000));
            return;
        }
        uint64_t left = q->attach_at + tmo - now;
        if (!next || left < next)
            next = left;
    }
    rrpci_timer_stop(&vc->attach);
    if (next) {
        rrpci_timer_init(vc->ctx, &vc->attach, vb_attach_cb, (double)next / 1e6 + 0.001, 0);
        vc->attach.data = vc;
        rrpci_timer_start(&vc->attach);
    }
}

void vb_attach_cb(struct rrpci_timer *w)
{
    struct vb_conn *vc = w->data;
    vb_enter(vc);
    if (vb_live(vc))
        vb_attach_arm(vc);
    vb_leave(vc);
}

int vb_attach(struct vb_conn *vc, int cls)
{
    struct vb_qp *q = &vc->q[cls];
    const char *step = "rdma_create_id";
    if (rdma_create_id(vc->vx->ech, &q->id, q, RDMA_PS_TCP)) {
        q->id = NULL;
        goto fail;
    }
    /* Right after creating the id: later settings do not reach the wire. */
    uint8_t tos = (uint8_t)(rrpci_ctx_class_dscp(vc->ctx, cls) << 2);
    step = "rdma_set_option(TOS)";
    if (rdma_set_option(q->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)))
        goto fail;
    step = "rdma_resolve_addr";
    if (rdma_resolve_addr(q->id, vc->has_src ? (struct sockaddr *)&vc->src : NULL,
                          (struct sockaddr *)&vc->dst, VB_RESOLVE_MS))
        goto fail;
    return 0;
fail:;
    int rc = vb_errno();
    snprintf(vc->err, sizeof(vc->err), "%s (class %s): %s", step, rrpci_class_name(cls),
             rrpc_strerror(rc));
    return rc;
}

int vb_want(struct vb_qp *q)
{
    struct vb_conn *vc = q->vc;
    if (q->state == VB_QP_ESTABLISHED || q->attach_at)
        return 0;
    q->attach_at = vb_now_us();
    int rc = 0;
    if (!rrpci_conn_passive(vc->conn)) {
        if (!q->id && (rc = vb_attach(vc, q->cls)))
            vb_fail(vc, rc, "connecting the %s class to %s: %s", rrpci_class_name(q->cls),
                    vc->peer, vc->err);
    } else if (!q->id) {
        struct vb_qp *first = &vc->q[VB_FIRST];
        if ((rc = vb_post_ctl(first, VB_ENV_OPEN, (uint32_t)q->cls)))
            vb_fail(vc, RRPC_E_CONN_LOST, "peer %s: asking for the %s class: ibv_post_send: %s",
                    vc->peer, rrpci_class_name(q->cls), rrpc_strerror(rc));
    }
    if (!rc)
        vb_attach_arm(vc);
    return rc ? (vb_live(vc) ? rc : RRPC_E_CONN_LOST) : 0;
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
    if (q->attach_at)
        vb_attach_arm(vc);
    if (!vb_live(vc))
        return;
    if (q->cls == VB_FIRST)
        vb_established(vc);
    else if (vb_wired(vc))
        vb_class_up(q);
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

/* The passive connection a later class's REQ attaches to: made by a first
 * QP's REQ on the same listener with the same cookie, and not down. */
static struct vb_conn *vb_find_conn(struct vb_ctx *vx, struct rdma_cm_id *lid, uint64_t cookie)
{
    for (struct vb_conn *vc = vx->vcs; vc; vc = vc->next)
        if (vb_live(vc) && rrpci_conn_passive(vc->conn) && vc->listen_id == lid &&
            vc->cookie == cookie)
            return vc;
    return NULL;
}

/* Whether @a and @b name the same host (ports aside). */
static bool vb_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    if (!a || !b || a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return false;
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
    struct vb_conn *vc = vb_find_conn(vx, e->listen_id, p.cookie);
    if (!vc && p.cls != VB_FIRST) {
        /* A later class, for no connection of ours: unknown cookie, or
         * the connection is gone; nothing to attach it to. */
        RRPCI_LOG(vx->ctx, LOG_NOTICE,
                  "verbs: refusing a connection from %s: the %s class's queue pair names no "
                  "connection that is up (a connection starts with its %s queue pair)",
                  peer, rrpci_class_name(p.cls), rrpci_class_name(VB_FIRST));
        vb_reject(id, RRPC_E_PROTO);
        vb_destroy_id(vx, id, false);
        return;
    }
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
        struct rdma_cm_id *first = vc->q[VB_FIRST].id;
        if (!first || !vb_same_host(rdma_get_peer_addr(id), rdma_get_peer_addr(first))) {
            /* Only the peer that made the connection attaches to it. */
            RRPCI_LOG(vx->ctx, LOG_NOTICE,
                      "verbs: refusing a connection from %s: the %s class's queue pair names "
                      "a connection of another peer (%s)",
                      peer, rrpci_class_name(p.cls), vc->peer);
            vb_reject(id, RRPC_E_PROTO);
            vb_destroy_id(vx, id, false);
            vb_leave(vc);
            return;
        }
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

/* At most VB_CM_BUDGET events per visit: while connections are made by
 * the hundred the channel never runs dry, and the CQs (keepalive answers,
 * calls) must get their turn; the fd stays readable for the rest. */
void vb_cm_cb(struct rrpci_io *w, unsigned revents)
{
    struct vb_ctx *vx = w->data;
    struct rdma_cm_event *ev;
    for (unsigned n = 0; n < VB_CM_BUDGET && vx->ech && rdma_get_cm_event(vx->ech, &ev) == 0;
         n++) {
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

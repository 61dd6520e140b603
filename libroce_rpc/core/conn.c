/* SPDX-License-Identifier: MIT */
/* Endpoints and connections: lifecycle, handshake checks, the send path
 * (credits + weighted scheduler) and the receive dispatch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"

struct rrpci_msg *rrpci_msg_new(size_t len)
{
    struct rrpci_msg *m = malloc(sizeof(*m) + len);
    if (!m)
        return NULL;
    memset(m, 0, sizeof(*m));
    m->len = len;
    return m;
}

void rrpci_msg_free(struct rrpci_msg *m)
{
    free(m);
}

void *rrpci_conn_priv(rrpc_conn *c)
{
    return c->priv;
}
void *rrpci_listener_priv(rrpc_listener *l)
{
    return l->priv;
}
rrpc_ctx *rrpci_conn_ctx(rrpc_conn *c)
{
    return c->ctx;
}
rrpc_ctx *rrpci_listener_ctx(rrpc_listener *l)
{
    return l->ctx;
}
bool rrpci_conn_passive(rrpc_conn *c)
{
    return c->passive;
}
bool rrpci_conn_is_down(rrpc_conn *c)
{
    return c->state == RRPCI_DOWN;
}
bool rrpci_conn_is_wired(rrpc_conn *c)
{
    return rrpci_conn_wire_open(c);
}

void rrpci_conn_ref(rrpc_conn *c)
{
    c->refs++;
}

void rrpci_conn_unref(rrpc_conn *c)
{
    if (--c->refs > 0)
        return;
    free(c->ticket);
    free(c->priv);
    free(c);
}

uint64_t rrpci_conn_new_id(rrpc_conn *c)
{
    return c->next_id++;
}

/* ---- lifecycle --------------------------------------------------------- */

static void setup_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    rrpc_conn *c = w->data;
    if (c->state == RRPCI_AUTHENTICATING)
        rrpci_conn_down(c, RRPC_E_TICKET,
                        c->passive ? "no connection ticket within RRPC_AUTH_TIMEOUT_MS"
                                   : "no answer to our connection ticket in time");
    else if (c->passive)
        rrpci_conn_down(c, -ETIMEDOUT, "the handshake did not finish within RRPC_AUTH_TIMEOUT_MS");
    else
        rrpci_conn_down(c, -ETIMEDOUT, "the connection did not come up in time");
}

static void close_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    rrpc_conn *c = w->data;
    if (c->state == RRPCI_REFUSING)
        rrpci_conn_down(c, RRPC_E_TICKET, "the connection's ticket was refused");
    else
        rrpci_conn_down(c, RRPC_E_CLOSED, "closed by the application");
}

static void ka_start(rrpc_conn *c);

/*
 * The one place a connection changes state (core/connsm.c has the table):
 * false, and nothing done, when @ev does not apply now.  Starts and stops
 * the timers of the states left and entered; what else a state needs (the
 * UP callback, the transport's release) its callers do.
 */
static bool conn_enter(rrpc_conn *c, enum rrpci_conn_event ev)
{
    int next = rrpci_conn_next(c->state, ev);
    if (next < 0)
        return false;
    RRPCI_LOG(c->ctx, LOG_DEBUG, "%s connection: %s -> %s", c->ops->name,
              rrpci_conn_state_name(c->state), rrpci_conn_state_name((enum rrpci_conn_state)next));
    c->state = (enum rrpci_conn_state)next;
    switch (c->state) {
    case RRPCI_AUTHENTICATING: /* the setup deadline goes on */
    case RRPCI_CONNECTING:
        break;
    case RRPCI_UP:
        rrpci_timer_stop(&c->setup_timer);
        c->announced = true;
        ka_start(c);
        break;
    case RRPCI_REFUSING: /* the ERROR frame has 50 ms to leave */
    case RRPCI_CLOSING:  /* the DOWN callback comes from the loop, not the caller */
        rrpci_timer_stop(&c->setup_timer);
        rrpci_timer_stop(&c->ka_timer);
        rrpci_timer_set(&c->close_timer, c->state == RRPCI_REFUSING ? 0.05 : 0, 0);
        rrpci_timer_start(&c->close_timer);
        break;
    case RRPCI_DOWN:
    case RRPCI_NSTATES_:
        rrpci_timer_stop(&c->setup_timer);
        rrpci_timer_stop(&c->close_timer);
        rrpci_timer_stop(&c->ka_timer);
        break;
    }
    return true;
}

/* ---- keepalive ---------------------------------------------------------- */

static int send_exempt(rrpc_conn *c, uint8_t type, int32_t code, const void *p, size_t len);

/* Re-arms the keepalive timer to fire at loop time @at.  The timer is never
 * touched on the receive path (that only stores @last_rx): it wakes at most
 * once per interval and works out what happened since. */
static void ka_arm(rrpc_conn *c, ev_tstamp at)
{
    ev_tstamp d = at - ev_now(c->ctx->loop);
    c->ka_timer.w.repeat = d > 0.001 ? d : 0.001;
    rrpci_timer_again(&c->ka_timer);
}

static void ka_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    rrpc_conn *c = w->data;
    const struct rrpci_config *cfg = &c->ctx->cfg;
    ev_tstamp now = ev_now(loop);
    ev_tstamp ival = cfg->keepalive_ms / 1000.0, tmo = cfg->keepalive_timeout_ms / 1000.0;
    if (c->ka_probe_out && c->last_rx >= c->ka_sent)
        c->ka_probe_out = false; /* anything after the probe answers it */
    if (now - c->last_rx >= tmo) {
        char why[128];
        snprintf(why, sizeof(why), "no keepalive from the peer in %d ms (RRPC_KEEPALIVE_TIMEOUT_MS)",
                 cfg->keepalive_timeout_ms);
        rrpci_set_error(c->ctx, RRPC_E_CONN_LOST, "%s", why);
        rrpci_conn_down(c, RRPC_E_CONN_LOST, why);
        return;
    }
    if (!c->ka_probe_out && now - c->last_rx >= ival) {
        if (c->ops->trim) /* idle: give back buffers sized for past traffic */
            c->ops->trim(c);
        /* One probe at a time: the transports are reliable, and it bounds
         * the exempt frames a peer must have receive buffers for. */
        int r = send_exempt(c, RRPCI_T_KEEPALIVE, 0, NULL, 0);
        if (r < 0 || !rrpci_conn_wire_open(c)) {
            if (c->state != RRPCI_DOWN)
                rrpci_conn_down(c, r, "cannot send a keepalive");
            return;
        }
        c->ka_probe_out = true;
        c->ka_sent = now;
    }
    ka_arm(c, c->last_rx + (c->ka_probe_out ? tmo : ival));
}

static void ka_start(rrpc_conn *c)
{
    if (c->ctx->cfg.keepalive_ms <= 0 || c->state != RRPCI_UP)
        return;
    c->last_rx = ev_now(c->ctx->loop);
    c->ka_probe_out = false;
    ka_arm(c, c->last_rx + c->ctx->cfg.keepalive_ms / 1000.0);
}

static rrpc_conn *conn_alloc(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops,
                             rrpc_conn_event_fn fn, void *user, int timeout_ms)
{
    rrpc_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (ops->conn_priv_size && !(c->priv = calloc(1, ops->conn_priv_size))) {
        free(c);
        return NULL;
    }
    c->ctx = ctx;
    c->ops = ops;
    c->refs = 1; /* the context's list */
    c->state = RRPCI_CONNECTING;
    c->fn = fn;
    c->user = user;
    c->next_id = 1;
    uint32_t w[RRPCI_MAX_CLASSES];
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        w[i] = ctx->cls[i].weight;
    rrpci_sched_init(&c->sched, RRPCI_MAX_CLASSES, w);
    rrpci_timer_init(ctx, &c->setup_timer, setup_timer_cb, timeout_ms / 1000.0, 0);
    c->setup_timer.w.data = c;
    rrpci_timer_start(&c->setup_timer);
    rrpci_timer_init(ctx, &c->close_timer, close_timer_cb, 0, 0);
    c->close_timer.w.data = c;
    rrpci_timer_init(ctx, &c->ka_timer, ka_timer_cb, 0, 0);
    c->ka_timer.w.data = c;
    rrpci_list_add(&ctx->conns, &c->link);
    rrpci_list_init(&c->dirty_link);
    rrpci_list_init(&c->owned_link);
    return c;
}

/* The peer's address as 16 bytes (IPv4 mapped into IPv6); false if none. */
static bool addr_key(const struct sockaddr *sa, uint8_t key[16], char *text, size_t n)
{
    snprintf(text, n, "?");
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in->sin_addr, 4);
        inet_ntop(AF_INET, &in->sin_addr, text, (socklen_t)n);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(key, &in6->sin6_addr, 16);
        inet_ntop(AF_INET6, &in6->sin6_addr, text, (socklen_t)n);
        return true;
    }
    return false;
}

/* Passive connections held now, those from @key, and the oldest one that
 * has not authenticated (nor come up, on a server without tickets). */
static void count_passive(rrpc_ctx *ctx, const uint8_t *key, int *total, int *same,
                          rrpc_conn **oldest_unauth)
{
    *total = *same = 0;
    *oldest_unauth = NULL;
    for (struct rrpci_list *n = ctx->conns.next; n != &ctx->conns; n = n->next) {
        rrpc_conn *c = rrpci_container_of(n, rrpc_conn, link);
        if (!c->passive || c->state == RRPCI_DOWN)
            continue;
        (*total)++;
        if (key && c->has_src && memcmp(c->src, key, 16) == 0)
            (*same)++;
        if (!c->announced && !*oldest_unauth)
            *oldest_unauth = c; /* the list is in order of arrival */
    }
}

int rrpci_listener_accept(rrpc_listener *l, const struct sockaddr *peer, rrpc_conn **ret,
                          char *why, size_t whylen)
{
    rrpc_ctx *ctx = l->ctx;
    uint8_t key[16];
    char text[INET6_ADDRSTRLEN];
    bool has = addr_key(peer, key, text, sizeof(text));
    int total, same;
    rrpc_conn *unauth;
    count_passive(ctx, has ? key : NULL, &total, &same, &unauth);
    if (has && same >= ctx->cfg.max_conns_per_source) {
        snprintf(why, whylen, "too many connections from %s: the server holds at most %d per "
                 "address (RRPC_MAX_CONNS_PER_SOURCE)", text, ctx->cfg.max_conns_per_source);
        RRPCI_LOG(ctx, LOG_NOTICE, "refused a connection: %s", why);
        return RRPC_E_LIMIT;
    }
    if (total >= ctx->cfg.max_conns) {
        if (!unauth) {
            snprintf(why, whylen, "the server holds its maximum of %d connections "
                     "(RRPC_MAX_CONNS), all of them authenticated", ctx->cfg.max_conns);
            RRPCI_LOG(ctx, LOG_WARNING, "refused a connection from %s: %s", text, why);
            return RRPC_E_LIMIT;
        }
        RRPCI_LOG(ctx, LOG_NOTICE, "at RRPC_MAX_CONNS=%d: closing the oldest connection that "
                  "has not authenticated, for one from %s", ctx->cfg.max_conns, text);
        rrpci_conn_down(unauth, RRPC_E_LIMIT, "closed to make room: the server is at "
                        "RRPC_MAX_CONNS and this connection had not authenticated");
    }
    rrpc_conn *c = conn_alloc(ctx, l->ops, l->fn, l->user, ctx->cfg.auth_timeout_ms);
    if (!c) {
        snprintf(why, whylen, "server out of memory");
        return -ENOMEM;
    }
    c->passive = true;
    c->has_src = has;
    if (has)
        memcpy(c->src, key, 16);
    *ret = c;
    return 0;
}

void rrpci_conn_hello_local(rrpc_conn *c, struct rrpci_hello *h)
{
    memset(h, 0, sizeof(*h));
    h->version = RRPCI_PROTO_VERSION;
    h->nclasses = RRPCI_MAX_CLASSES;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        h->credits[i] = (uint16_t)c->ctx->cls[i].credits;
    h->max_msg = c->ctx->cfg.max_msg;
}

int rrpci_conn_hello_peer(rrpc_conn *c, const struct rrpci_hello *p)
{
    if (p->version != RRPCI_PROTO_VERSION)
        return rrpci_set_error(c->ctx, RRPC_E_VERSION,
                               "the peer speaks protocol version %u, this library %u: "
                               "run the same roce-rpc release on both sides",
                               p->version, RRPCI_PROTO_VERSION);
    if (p->nclasses != RRPCI_MAX_CLASSES)
        return rrpci_set_error(c->ctx, RRPC_E_PROTO, "the peer has %u QoS classes, expected %d",
                               p->nclasses, RRPCI_MAX_CLASSES);
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        if (p->credits[i] == 0)
            return rrpci_set_error(c->ctx, RRPC_E_PROTO,
                                   "the peer granted no credit for class %s", rrpci_class_name(i));
    if (p->max_msg < 4096)
        return rrpci_set_error(c->ctx, RRPC_E_PROTO,
                               "the peer's maximum message size %u is below 4096", p->max_msg);
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        rrpci_credit_init(&c->cls[i].credit, c->ctx->cls[i].credits, p->credits[i]);
    c->peer_max_msg = p->max_msg;
    return 0;
}

static void conn_flush(rrpc_conn *c);

static int send_exempt(rrpc_conn *c, uint8_t type, int32_t code, const void *p, size_t len)
{
    struct rrpci_msg *m = rrpci_msg_new(len);
    if (!m)
        return -ENOMEM;
    m->h.type = type;
    m->h.arg = (uint32_t)code;
    if (len)
        memcpy(m->data, p, len);
    return rrpci_conn_submit(c, RRPCI_CLS_CONTROL, m);
}

static void announce(rrpc_conn *c, enum rrpci_conn_event ev);

void rrpci_conn_established(rrpc_conn *c)
{
    if (c->wire_up)
        return;
    c->wire_up = true;
    bool ticket = c->passive ? c->ctx->ticket_fn != NULL : c->ticket != NULL;
    if (!ticket) {
        announce(c, RRPCI_EV_WIRE_UP);
        return;
    }
    if (!conn_enter(c, RRPCI_EV_WIRE_UP_TICKET) || c->passive)
        return; /* closing already; or wait for the peer's ticket */
    int r = send_exempt(c, RRPCI_T_TICKET, 0, c->ticket, c->ticket_len);
    if (r < 0)
        rrpci_conn_down(c, r, "cannot send the connection ticket");
}

/* UP: the application hears of the connection, and what waited is sent. */
static void announce(rrpc_conn *c, enum rrpci_conn_event ev)
{
    if (!conn_enter(c, ev))
        return;
    RRPCI_LOG(c->ctx, LOG_DEBUG, "%s connection up", c->ops->name);
    rrpci_conn_ref(c);
    if (c->fn)
        c->fn(c, RRPC_CONN_UP, 0, c->user);
    if (rrpci_conn_wire_open(c))
        conn_flush(c);
    rrpci_conn_unref(c);
}

void rrpci_conn_down(rrpc_conn *c, int reason, const char *why)
{
    if (!conn_enter(c, RRPCI_EV_DOWN))
        return; /* down already */
    c->down_reason = reason;
    snprintf(c->down_why, sizeof(c->down_why), "%s", why ? why : rrpc_strerror(reason));
    rrpci_list_del(&c->dirty_link);
    rrpci_conn_ref(c);
    RRPCI_LOG(c->ctx, reason == RRPC_E_CLOSED ? LOG_DEBUG : LOG_NOTICE,
              "%s connection down: %s (%s)", c->ops->name, why ? why : "", rrpc_err_name(reason));
    c->ops->conn_close(c);
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++) {
        struct rrpci_msg *m = c->cls[i].head;
        while (m) {
            struct rrpci_msg *next = m->next;
            rrpci_msg_free(m);
            m = next;
        }
        c->cls[i].head = c->cls[i].tail = NULL;
    }
    c->answer_bytes = 0;
    int status = reason == RRPC_E_CLOSED ? RRPC_E_CLOSED : RRPC_E_CONN_LOST;
    struct rrpci_idnode *n;
    while ((n = rrpci_idmap_pop(&c->pending)))
        rrpci_pending_fail(rrpci_container_of(n, struct rrpci_pending, node), status,
                           why ? why : rrpc_strerror(reason));
    rrpci_idmap_fini(&c->pending);
    /* A passive connection that never came up was never the application's;
     * an active one is hers from rrpc_connect on. */
    if (c->fn && (c->announced || c->user_owned)) {
        /* The callback may read why with rrpc_ctx_last_error. */
        rrpci_set_error(c->ctx, reason, "%s connection down: %s", c->ops->name, c->down_why);
        c->fn(c, RRPC_CONN_DOWN, reason, c->user);
    }
    rrpci_list_del(&c->link);
    c->refs--; /* the context's list; ours, taken above, is still held */
    rrpci_conn_unref(c);
}

/* ---- endpoints --------------------------------------------------------- */

static int resolve(rrpc_ctx *ctx, const char *uri, struct rrpci_uri *u,
                   const struct rrpci_transport_ops **ret_ops)
{
    const char *why = NULL;
    int r = rrpci_uri_parse(uri, u, &why);
    if (r < 0)
        return rrpci_set_error(ctx, r, "bad endpoint \"%s\": %s", uri ? uri : "(null)", why);
    const struct rrpci_transport_ops *ops = rrpci_transport_by_scheme(u->scheme);
    if (!ops) {
        if (strcmp(u->scheme, "rdma") == 0)
            return rrpci_set_error(ctx, RRPC_E_TRANSPORT,
                                   "\"%s\": this build of libroce_rpc has no verbs transport; "
                                   "install libibverbs-dev and librdmacm-dev and rebuild "
                                   "(meson setup -Dverbs=enabled), or use tcp://",
                                   uri);
        return rrpci_set_error(ctx, RRPC_E_URI, "\"%s\": unknown scheme \"%s\" (use tcp://, rdma:// or inproc://)",
                               uri, u->scheme);
    }
    r = rrpci_transport_use(ctx, ops);
    if (r < 0)
        return r;
    *ret_ops = ops;
    ctx->endpoints_made = true;
    return 0;
}

RRPC_API int rrpc_listen(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                         rrpc_listener **ret_listener)
{
    if (!ctx || !ret_listener)
        return -EINVAL;
    rrpci_lock(ctx);
    struct rrpci_uri u;
    const struct rrpci_transport_ops *ops;
    rrpc_listener *l = NULL;
    int r = resolve(ctx, uri, &u, &ops);
    if (r < 0)
        goto out;
    r = -ENOMEM;
    l = calloc(1, sizeof(*l));
    if (!l || (ops->listener_priv_size && !(l->priv = calloc(1, ops->listener_priv_size))))
        goto out;
    l->ctx = ctx;
    l->ops = ops;
    l->fn = fn;
    l->user = user;
    r = ops->listen(l, &u);
    if (r < 0)
        goto out;
    rrpci_list_add(&ctx->listeners, &l->link);
    *ret_listener = l;
    l = NULL;
out:
    if (l) {
        free(l->priv);
        free(l);
    }
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_listener_port(rrpc_listener *l)
{
    if (!l->ops->listener_port)
        return -EOPNOTSUPP;
    rrpci_lock(l->ctx);
    int r = l->ops->listener_port(l);
    rrpci_unlock(l->ctx);
    return r;
}

RRPC_API void rrpc_listener_close(rrpc_listener *l)
{
    if (!l)
        return;
    rrpc_ctx *ctx = l->ctx;
    rrpci_lock(ctx);
    l->ops->listener_close(l);
    rrpci_list_del(&l->link);
    free(l->priv);
    free(l);
    rrpci_unlock(ctx);
}

static int connect_locked(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                          int timeout_ms, const void *ticket, size_t ticket_len,
                          rrpc_conn **ret_conn)
{
    struct rrpci_uri u;
    const struct rrpci_transport_ops *ops;
    int r = resolve(ctx, uri, &u, &ops);
    if (r < 0)
        return r;
    rrpc_conn *c = conn_alloc(ctx, ops, fn, user, timeout_ms);
    if (!c)
        return -ENOMEM;
    c->user_owned = true;
    rrpci_conn_ref(c); /* the application's, until rrpc_conn_close */
    rrpci_list_add(&ctx->owned, &c->owned_link);
    if (ticket_len) {
        c->ticket = malloc(ticket_len);
        if (!c->ticket) {
            c->fn = NULL;
            rrpci_conn_down(c, -ENOMEM, "out of memory");
            rrpci_conn_release_user(c);
            return -ENOMEM;
        }
        memcpy(c->ticket, ticket, ticket_len);
        c->ticket_len = ticket_len;
    }
    r = ops->connect(c, &u);
    if (r < 0) {
        /* Nothing was announced: release silently. */
        c->fn = NULL;
        rrpci_conn_down(c, r, "connect failed");
        rrpci_conn_release_user(c);
        return r;
    }
    *ret_conn = c;
    return 0;
}

RRPC_API int rrpc_connect(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                          rrpc_conn **ret_conn)
{
    if (!ctx || !ret_conn)
        return -EINVAL;
    rrpci_lock(ctx);
    int r = connect_locked(ctx, uri, fn, user, ctx->cfg.connect_timeout_ms, NULL, 0, ret_conn);
    rrpci_unlock(ctx);
    return r;
}

struct sync_connect {
    struct rrpci_sync s;
    const char *uri;
    rrpc_conn_event_fn fn;
    void *user;
};

static void sync_connect_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    struct sync_connect *sc = user;
    if (ev == RRPC_CONN_UP) {
        c->fn = sc->fn;
        c->user = sc->user;
        rrpci_sync_done(&sc->s, 0, NULL);
    } else {
        rrpci_sync_done(&sc->s, reason, "cannot connect to %s: %s (%s)", sc->uri, c->down_why,
                        rrpc_err_name(reason));
    }
}

static int connect_wait(rrpc_ctx *ctx, const char *uri, int timeout_ms, const void *ticket,
                        size_t ticket_len, rrpc_conn_event_fn fn, void *user,
                        rrpc_conn **ret_conn);

RRPC_API int rrpc_connect_sync(rrpc_ctx *ctx, const char *uri, int timeout_ms,
                               rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn)
{
    return connect_wait(ctx, uri, timeout_ms, NULL, 0, fn, user, ret_conn);
}

RRPC_API int rrpc_connect_ticket(rrpc_ctx *ctx, const char *uri, const void *ticket, size_t len,
                                 int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                 rrpc_conn **ret_conn)
{
    if (!ticket || len == 0 || len > RRPCI_CTL_MAX_LEN)
        return rrpci_set_error(ctx, -EINVAL, "a connection ticket has 1..%u bytes",
                               RRPCI_CTL_MAX_LEN);
    return connect_wait(ctx, uri, timeout_ms, ticket, len, fn, user, ret_conn);
}

/* Checks @o (NULL: defaults); the URI to dial goes to *ret_uri (@buf when
 * @o->src is added to it), the timeout to *ret_timeout. */
static int connect_opts(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *o, char *buf,
                        size_t buflen, const char **ret_uri, int *ret_timeout)
{
    *ret_uri = uri;
    *ret_timeout = ctx->cfg.connect_timeout_ms;
    int r = RRPCI_OPTS_CHECK(ctx, o, "rrpc_connect_opts");
    if (r < 0 || !o)
        return r;
    if (!o->ticket != !o->ticket_len || o->ticket_len > RRPCI_CTL_MAX_LEN)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_connect_opts: a ticket needs its length, 1..%u bytes",
                               RRPCI_CTL_MAX_LEN);
    if (o->timeout_ms < 0)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_connect_opts.timeout_ms is %d; 0 means the default",
                               o->timeout_ms);
    if (o->timeout_ms)
        *ret_timeout = o->timeout_ms;
    if (o->src) {
        if (!uri || strchr(uri, '?'))
            return rrpci_set_error(ctx, -EINVAL,
                                   "give the source address once: in rrpc_connect_opts.src or "
                                   "as ?src= in the URI");
        int n = snprintf(buf, buflen, "%s?src=%s", uri, o->src);
        if (n < 0 || (size_t)n >= buflen)
            return rrpci_set_error(ctx, -EINVAL, "the URI with its source address is too long");
        *ret_uri = buf;
    }
    return 0;
}

static int connect_with(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                        rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn, bool wait)
{
    if (!ctx || !ret_conn)
        return -EINVAL;
    char buf[512];
    const char *u;
    int timeout;
    int r = connect_opts(ctx, uri, opts, buf, sizeof(buf), &u, &timeout);
    if (r < 0)
        return r;
    const void *ticket = opts ? opts->ticket : NULL;
    size_t ticket_len = opts ? opts->ticket_len : 0;
    if (wait)
        return connect_wait(ctx, u, timeout, ticket, ticket_len, fn, user, ret_conn);
    rrpci_lock(ctx);
    r = connect_locked(ctx, u, fn, user, timeout, ticket, ticket_len, ret_conn);
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_connect_with(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                               rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn)
{
    return connect_with(ctx, uri, opts, fn, user, ret_conn, false);
}

RRPC_API int rrpc_connect_with_sync(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                                    rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn)
{
    return connect_with(ctx, uri, opts, fn, user, ret_conn, true);
}

RRPC_API int rrpc_ctx_require_ticket(rrpc_ctx *ctx, rrpc_ticket_verify_fn fn, void *user)
{
    if (!ctx || !fn)
        return -EINVAL;
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->endpoints_made)
        r = rrpci_set_error(ctx, -EBUSY, "require tickets before the first rrpc_listen");
    else {
        ctx->ticket_fn = fn;
        ctx->ticket_user = user;
    }
    rrpci_unlock(ctx);
    return r;
}

static int connect_wait(rrpc_ctx *ctx, const char *uri, int timeout_ms, const void *ticket,
                        size_t ticket_len, rrpc_conn_event_fn fn, void *user,
                        rrpc_conn **ret_conn)
{
    if (!ctx || !ret_conn || timeout_ms <= 0)
        return -EINVAL;
    struct sync_connect sc = {.uri = uri, .fn = fn, .user = user};
    int r = rrpci_sync_begin(&sc.s, ctx, "rrpc_connect_sync from a callback; use rrpc_connect");
    if (r)
        return r;
    rrpc_conn *c = NULL;
    r = connect_locked(ctx, uri, sync_connect_event, &sc, timeout_ms, ticket, ticket_len, &c);
    if (r == 0) {
        r = rrpci_sync_end(&sc.s, 0);
        if (r == 0) {
            *ret_conn = c;
        } else {
            /* Never handed out; the application's reference keeps @c. */
            rrpci_lock(ctx);
            rrpci_conn_release_user(c);
            rrpci_unlock(ctx);
        }
        return r;
    }
    return rrpci_sync_end(&sc.s, r);
}

void rrpci_conn_release_user(rrpc_conn *c)
{
    if (!c->user_owned || rrpci_list_empty(&c->owned_link))
        return;
    rrpci_list_del(&c->owned_link);
    rrpci_conn_unref(c);
}

RRPC_API void rrpc_conn_close(rrpc_conn *c)
{
    if (!c)
        return;
    rrpc_ctx *ctx = c->ctx;
    rrpci_lock(ctx);
    conn_enter(c, RRPCI_EV_APP_CLOSE); /* DOWN follows from the loop */
    rrpci_conn_release_user(c);
    rrpci_unlock(ctx);
}

RRPC_API const char *rrpc_conn_transport(rrpc_conn *c)
{
    return c->ops->name;
}

RRPC_API int rrpc_conn_class_dscp(rrpc_conn *c, int api_cls, int *ret_dscp)
{
    int cls = rrpci_cls_index(api_cls);
    if (cls < 0)
        return RRPC_E_BAD_CLASS;
    if (!c->ops->class_dscp)
        return -EOPNOTSUPP;
    rrpci_lock(c->ctx);
    int r = c->state == RRPCI_DOWN ? RRPC_E_CLOSED : c->ops->class_dscp(c, cls, ret_dscp);
    rrpci_unlock(c->ctx);
    return r;
}

RRPC_API void *rrpc_conn_user(rrpc_conn *c)
{
    return c->user;
}

RRPC_API void rrpc_conn_set_user(rrpc_conn *c, void *user)
{
    c->user = user;
}

RRPC_API int rrpc_conn_peer(rrpc_conn *c, char *buf, size_t len)
{
    if (!c->ops->peer_name)
        return -EOPNOTSUPP;
    rrpci_lock(c->ctx);
    int r = c->ops->peer_name(c, buf, len);
    rrpci_unlock(c->ctx);
    return r;
}

/* ---- send path --------------------------------------------------------- */

static size_t head_size(rrpc_conn *c, int cls)
{
    struct rrpci_class_state *s = &c->cls[cls];
    struct rrpci_msg *m = s->head;
    if (!m || s->blocked)
        return 0;
    if (!rrpci_type_is_exempt(m->h.type) && (s->credit.tx_avail == 0 || !c->announced))
        return 0;
    return RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
}

/* Answers count against RRPC_MAX_ANSWER_BACKLOG while they wait here. */
static size_t answer_size(uint8_t type, uint32_t len)
{
    return type == RRPCI_T_RESPONSE || type == RRPCI_T_OS_ACK ? RRPCI_HDR_SIZE + (size_t)len : 0;
}

bool rrpci_conn_backlogged(const rrpc_conn *c)
{
    return c->answer_bytes > (size_t)c->ctx->cfg.max_answer_backlog;
}

static void conn_consumed(rrpc_conn *c, int cls);

/* The backlog drained: the requests whose credit was held back count as
 * consumed now, and their credit goes back the usual way. */
static void release_held(rrpc_conn *c)
{
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        for (; c->cls[i].held; c->cls[i].held--)
            conn_consumed(c, i);
}

static void conn_flush(rrpc_conn *c)
{
    if (!rrpci_conn_wire_open(c) || c->in_flush)
        return;
    c->in_flush = true;
    rrpci_conn_ref(c);
    while (rrpci_conn_wire_open(c)) {
        size_t heads[RRPCI_MAX_CLASSES];
        for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
            heads[i] = head_size(c, i);
        int cls = rrpci_sched_next(&c->sched, heads);
        if (cls < 0)
            break;
        struct rrpci_class_state *s = &c->cls[cls];
        struct rrpci_msg *m = s->head;
        bool exempt = rrpci_type_is_exempt(m->h.type);
        s->head = m->next;
        if (!s->head)
            s->tail = NULL;
        m->next = NULL;
        if (!exempt)
            rrpci_credit_take(&s->credit);
        m->h.credits = rrpci_credit_harvest(&s->credit);
        rrpci_hdr_encode(&m->h, m->hdr);
        size_t answer = answer_size(m->h.type, m->h.len);
        int r = c->ops->send(c, cls, m);
        if (r == -EAGAIN) {
            /* Put everything back as it was; wait for rrpci_conn_writable. */
            rrpci_credit_unsend(&s->credit, !exempt, m->h.credits);
            m->next = s->head;
            s->head = m;
            if (!s->tail)
                s->tail = m;
            s->blocked = true;
            continue;
        }
        if (r < 0) {
            rrpci_msg_free(m);
            rrpci_conn_down(c, r, "the transport failed to send");
            break;
        }
        c->answer_bytes -= answer; /* taken: the transport owns @m now */
    }
    c->in_flush = false;
    if (rrpci_conn_wire_open(c) && !rrpci_conn_backlogged(c))
        release_held(c);
    rrpci_conn_unref(c);
}

int rrpci_conn_submit(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    if (!rrpci_conn_takes_frames(c)) {
        rrpci_msg_free(m);
        return RRPC_E_CLOSED;
    }
    struct rrpci_class_state *s = &c->cls[cls];
    m->h.version = RRPCI_PROTO_VERSION;
    m->h.cls = (uint8_t)cls;
    m->h.len = (uint32_t)rrpci_msg_payload_len(m);
    m->next = NULL;
    c->answer_bytes += answer_size(m->h.type, m->h.len);
    if (rrpci_type_is_exempt(m->h.type)) {
        m->next = s->head; /* control frames jump the queue */
        s->head = m;
        if (!s->tail)
            s->tail = m;
    } else if (s->tail) {
        s->tail->next = m;
        s->tail = m;
    } else {
        s->head = s->tail = m;
    }
    conn_flush(c);
    return 0;
}

void rrpci_conn_writable(rrpc_conn *c, int cls)
{
    c->cls[cls].blocked = false;
    conn_flush(c);
}

/* A consumed frame's credit goes back on the next frame of its class; what
 * is still owed when the loop is about to sleep, and is at least half the
 * grant, goes in a CREDIT frame.  Batching to the end of the loop iteration
 * means one CREDIT frame per burst, not per message. */
static void conn_consumed(rrpc_conn *c, int cls)
{
    struct rrpci_class_state *s = &c->cls[cls];
    rrpci_credit_consumed(&s->credit);
    if (rrpci_credit_should_return(&s->credit) && c->dirty_link.next == &c->dirty_link)
        rrpci_list_add(&c->ctx->credit_dirty, &c->dirty_link);
}

void rrpci_credit_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    rrpc_ctx *ctx = w->data;
    while (!rrpci_list_empty(&ctx->credit_dirty)) {
        rrpc_conn *c = rrpci_container_of(ctx->credit_dirty.next, rrpc_conn, dirty_link);
        rrpci_list_del(&c->dirty_link);
        for (int i = 0; i < RRPCI_MAX_CLASSES && rrpci_conn_wire_open(c); i++) {
            if (!rrpci_credit_should_return(&c->cls[i].credit))
                continue; /* piggybacked meanwhile */
            struct rrpci_msg *m = rrpci_msg_new(0);
            if (!m) {
                rrpci_conn_down(c, -ENOMEM, "out of memory for a credit frame");
                break;
            }
            m->h.type = RRPCI_T_CREDIT;
            rrpci_conn_submit(c, i, m);
        }
    }
}

/* ---- receive dispatch -------------------------------------------------- */

static void protocol_error(rrpc_conn *c, int code, const char *why)
{
    char peer[80] = "?";
    if (c->ops->peer_name)
        c->ops->peer_name(c, peer, sizeof(peer));
    rrpci_set_error(c->ctx, code, "peer %s broke the protocol: %s; connection closed", peer, why);
    RRPCI_LOG(c->ctx, LOG_WARNING, "peer %s broke the protocol: %s", peer, why);
    rrpci_conn_down(c, code, why);
}

/* The passive side refuses: the reason goes to the peer in an ERROR frame,
 * and the connection closes shortly after, once the frame has gone out. */
static void refuse(rrpc_conn *c, const char *why)
{
    RRPCI_LOG(c->ctx, LOG_NOTICE, "connection refused: %s", why);
    rrpci_set_error(c->ctx, RRPC_E_TICKET, "connection refused: %s", why);
    send_exempt(c, RRPCI_T_ERROR, RRPC_E_TICKET, why, strlen(why));
    conn_enter(c, RRPCI_EV_TICKET_REFUSED);
}

/* Frames while the ticket is being checked: nothing but the ticket exchange. */
static void auth_frame(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p)
{
    if (c->state != RRPCI_AUTHENTICATING)
        return; /* refusing or closing: on its way out */
    if (c->passive && h->type == RRPCI_T_TICKET && cls == RRPCI_CLS_CONTROL) {
        char why[256] = "";
        int r = c->ctx->ticket_fn(c->ctx->ticket_user, p, h->len, why, sizeof(why));
        if (r == 0) {
            if (send_exempt(c, RRPCI_T_TICKET_ACK, 0, NULL, 0) == 0)
                announce(c, RRPCI_EV_TICKET_OK);
            return;
        }
        if (!why[0])
            snprintf(why, sizeof(why), "%s", rrpc_strerror(RRPC_E_TICKET));
        refuse(c, why);
        return;
    }
    if (!c->passive && h->type == RRPCI_T_TICKET_ACK) {
        announce(c, RRPCI_EV_TICKET_OK);
        return;
    }
    if (!c->passive && h->type == RRPCI_T_ERROR) {
        char msg[256];
        int code = (int32_t)(uint32_t)h->arg;
        snprintf(msg, sizeof(msg), "the server refused the connection: %.*s",
                 (int)(h->len < 200 ? h->len : 200), (const char *)p);
        rrpci_set_error(c->ctx, code < 0 ? code : RRPC_E_TICKET, "%s", msg);
        rrpci_conn_down(c, code < 0 ? code : RRPC_E_TICKET, msg);
        return;
    }
    if (c->passive) {
        refuse(c, "this server requires a connection ticket as the first message; "
                  "connect through the broker (rrpc_connect_service)");
    } else {
        rrpci_conn_down(c, RRPC_E_PROTO, "unexpected frame while the ticket was checked");
    }
}

int rrpci_conn_rx_admit(rrpc_conn *c, int cls, const struct rrpci_hdr *h)
{
    if (rrpci_type_is_exempt(h->type))
        return 0; /* bounded by rrpci_hdr_decode; checked in full by rrpci_conn_recv */
    if (c->state == RRPCI_DOWN)
        return RRPC_E_CLOSED;
    if (!rrpci_conn_authenticated(c)) {
        /* Before the handshake and the ticket only their own (small,
         * exempt) frames may come: nothing a peer sends is buffered on
         * credit it has not earned yet. */
        static const char need[] = "this server requires a connection ticket as the first "
                                   "message";
        if (c->passive && c->state == RRPCI_AUTHENTICATING)
            send_exempt(c, RRPCI_T_ERROR, RRPC_E_TICKET, need, sizeof(need) - 1);
        protocol_error(c, RRPC_E_PROTO, "a data frame before the connection was authenticated");
        return RRPC_E_PROTO;
    }
    if (h->cls != cls) {
        protocol_error(c, RRPC_E_PROTO, "frame class differs from its channel's class");
        return RRPC_E_PROTO;
    }
    if (!rrpci_credit_rx_room(&c->cls[cls].credit)) {
        protocol_error(c, RRPC_E_CREDIT, "peer sent a message without credit");
        return RRPC_E_CREDIT;
    }
    return 0;
}

void rrpci_conn_recv(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p)
{
    if (!rrpci_conn_wire_open(c))
        return;
    c->last_rx = ev_now(c->ctx->loop);
    rrpci_ctx_activity(c->ctx);
    if (h->type == RRPCI_T_KEEPALIVE && !c->announced)
        return; /* the peer is already up; this side starts probing once it is */
    if (!c->announced) {
        auth_frame(c, cls, h, p);
        return;
    }
    if (h->cls != cls) {
        protocol_error(c, RRPC_E_PROTO, "frame class differs from its channel's class");
        return;
    }
    struct rrpci_class_state *s = &c->cls[cls];
    if (h->credits) {
        if (rrpci_credit_returned(&s->credit, h->credits) < 0) {
            protocol_error(c, RRPC_E_CREDIT, "peer returned more credit than it owed");
            return;
        }
    }
    bool exempt = rrpci_type_is_exempt(h->type);
    if (!exempt && rrpci_credit_rx(&s->credit) < 0) {
        protocol_error(c, RRPC_E_CREDIT, "peer sent a message without credit");
        return;
    }
    rrpci_conn_ref(c);
    switch (h->type) {
    case RRPCI_T_REQUEST:
        rrpci_rpc_on_request(c, cls, h, p);
        break;
    case RRPCI_T_RESPONSE:
        rrpci_rpc_on_response(c, h, p);
        break;
    case RRPCI_T_OS_WRITE:
    case RRPCI_T_OS_READ:
        rrpci_os_on_frame(c, cls, h, p);
        break;
    case RRPCI_T_OS_ACK:
        rrpci_os_on_ack(c, h, p);
        break;
    case RRPCI_T_CREDIT:
        break;
    case RRPCI_T_KEEPALIVE:
        if (cls != RRPCI_CLS_CONTROL || h->arg > 1) /* no payload: rrpci_hdr_decode */
            protocol_error(c, RRPC_E_PROTO, "malformed keepalive frame");
        else if (h->arg == 0)
            send_exempt(c, RRPCI_T_KEEPALIVE, 1, NULL, 0); /* the answer */
        break;
    case RRPCI_T_TICKET:
        /* A server without tickets acknowledges the first one, so the
         * client goes on; a ticket is verified once, before anything else,
         * so any other is refused (it would be acknowledged unverified). */
        if (c->passive && cls == RRPCI_CLS_CONTROL && !c->ctx->ticket_fn && !c->ticket_acked) {
            RRPCI_LOG(c->ctx, LOG_INFO, "ticket ignored: this server requires none");
            c->ticket_acked = true;
            send_exempt(c, RRPCI_T_TICKET_ACK, 0, NULL, 0);
        } else {
            protocol_error(c, RRPC_E_PROTO, "a connection ticket after the connection was "
                           "accepted (a ticket is shown once, as the first message)");
        }
        break;
    case RRPCI_T_ERROR: {
        char msg[256];
        snprintf(msg, sizeof(msg), "the peer closed the connection: %.*s",
                 (int)(h->len < 200 ? h->len : 200), (const char *)p);
        int code = (int32_t)(uint32_t)h->arg;
        rrpci_conn_down(c, code < 0 ? code : RRPC_E_CONN_LOST, msg);
        break;
    }
    default:
        protocol_error(c, RRPC_E_PROTO, "handshake frame on an established connection");
        break;
    }
    if (rrpci_conn_wire_open(c)) {
        bool request = h->type == RRPCI_T_REQUEST || h->type == RRPCI_T_OS_READ ||
                       h->type == RRPCI_T_OS_WRITE;
        if (!exempt && request && rrpci_conn_backlogged(c))
            c->cls[cls].held++; /* it does not take its answers: no new requests */
        else if (!exempt)
            conn_consumed(c, cls);
        if (h->credits)
            conn_flush(c);
    }
    rrpci_conn_unref(c);
}

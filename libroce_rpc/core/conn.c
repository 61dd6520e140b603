/* SPDX-License-Identifier: MIT */
/* Connections: objects, the lifecycle (the one transition function,
 * rrpci_conn_enter), the handshake checks, establishment and going down. */
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
    if (!m)
        return;
    if (m->lender)
        *m->lender = NULL; /* the caller's buffer is no longer read */
    if (m->ext_owned)
        free((void *)(uintptr_t)m->ext);
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
    free(c->principal);
    free(c->priv);
    free(c);
}

uint64_t rrpci_conn_new_id(rrpc_conn *c)
{
    return c->next_id++;
}

/* ---- lifecycle --------------------------------------------------------- */

static void setup_timer_cb(struct rrpci_timer *t)
{
    rrpc_conn *c = t->data;
    if (c->state == RRPCI_AUTHENTICATING)
        rrpci_conn_down(c, RRPC_E_TICKET,
                        c->passive ? "no connection ticket within RRPC_AUTH_TIMEOUT_MS"
                                   : "no answer to our connection ticket in time");
    else if (c->passive)
        rrpci_conn_down(c, -ETIMEDOUT, "the handshake did not finish within RRPC_AUTH_TIMEOUT_MS");
    else
        rrpci_conn_down(c, -ETIMEDOUT, "the connection did not come up in time");
}

static void close_timer_cb(struct rrpci_timer *t)
{
    rrpc_conn *c = t->data;
    if (c->state == RRPCI_REFUSING)
        rrpci_conn_down(c, RRPC_E_TICKET, "the connection's ticket was refused");
    else
        rrpci_conn_down(c, RRPC_E_CLOSED, "closed by the application");
}

/*
 * The one place a connection changes state (core/connsm.c has the table):
 * false, and nothing done, when @ev does not apply now.  Starts and stops
 * the timers of the states left and entered; what else a state needs (the
 * UP callback, the transport's release) its callers do.
 */
bool rrpci_conn_enter(rrpc_conn *c, enum rrpci_conn_event ev)
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
        rrpci_stats_conn_up(c);
        rrpci_ka_start(c);
        break;
    case RRPCI_REFUSING: /* the ERROR frame has 50 ms to leave */
    case RRPCI_CLOSING:  /* the DOWN callback comes from the loop, not the caller */
        rrpci_timer_stop(&c->setup_timer);
        rrpci_timer_stop(&c->ka_timer);
        rrpci_timer_stop(&c->lend_timer);
        rrpci_timer_set(&c->close_timer, c->state == RRPCI_REFUSING ? 0.05 : 0, 0);
        rrpci_timer_start(&c->close_timer);
        break;
    case RRPCI_DOWN:
    case RRPCI_NSTATES_:
        rrpci_timer_stop(&c->setup_timer);
        rrpci_timer_stop(&c->close_timer);
        rrpci_timer_stop(&c->ka_timer);
        rrpci_timer_stop(&c->lend_timer);
        break;
    }
    return true;
}

rrpc_conn *rrpci_conn_alloc(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops,
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
    c->last_data = rrpci_ctx_now(ctx);
    uint32_t w[RRPCI_MAX_CLASSES];
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        w[i] = ctx->cls[i].weight;
    rrpci_sched_init(&c->sched, RRPCI_MAX_CLASSES, w);
    rrpci_timer_init(ctx, &c->setup_timer, setup_timer_cb, timeout_ms / 1000.0, 0);
    c->setup_timer.data = c;
    rrpci_timer_start(&c->setup_timer);
    rrpci_timer_init(ctx, &c->close_timer, close_timer_cb, 0, 0);
    c->close_timer.data = c;
    rrpci_timer_init(ctx, &c->ka_timer, rrpci_ka_timer_cb, 0, 0);
    c->ka_timer.data = c;
    rrpci_lend_conn_init(c);
    rrpci_list_add(&ctx->conns, &c->link);
    rrpci_list_init(&c->dirty_link);
    rrpci_list_init(&c->owned_link);
    rrpci_list_init(&c->grants);
    return c;
}

/* The HELLO this side sends: protocol version, classes, its grants. */
void rrpci_conn_hello_local(rrpc_conn *c, struct rrpci_hello *h)
{
    memset(h, 0, sizeof(*h));
    h->version = RRPCI_PROTO_VERSION;
    h->nclasses = RRPCI_MAX_CLASSES;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        h->credits[i] = (uint16_t)rrpci_lend_first_grant(c->ctx, i);
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
        rrpci_credit_init(&c->cls[i].credit, rrpci_lend_first_grant(c->ctx, i), p->credits[i]);
    c->peer_max_msg = p->max_msg;
    return 0;
}

int rrpci_send_exempt(rrpc_conn *c, uint8_t type, int32_t code, const void *p, size_t len)
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

void rrpci_conn_established(rrpc_conn *c)
{
    if (c->wire_up)
        return;
    c->wire_up = true;
    bool ticket = c->passive ? c->ctx->ticket_fn != NULL : c->ticket != NULL;
    if (!ticket) {
        rrpci_conn_announce(c, RRPCI_EV_WIRE_UP);
        return;
    }
    if (!rrpci_conn_enter(c, RRPCI_EV_WIRE_UP_TICKET) || c->passive)
        return; /* closing already; or wait for the peer's ticket */
    int r = rrpci_send_exempt(c, RRPCI_T_TICKET, 0, c->ticket, c->ticket_len);
    if (r < 0)
        rrpci_conn_down(c, r, "cannot send the connection ticket");
}

/* UP: the application hears of the connection, and what waited is sent. */
void rrpci_conn_announce(rrpc_conn *c, enum rrpci_conn_event ev)
{
    if (!rrpci_conn_enter(c, ev))
        return;
    RRPCI_LOG(c->ctx, LOG_DEBUG, "%s connection up", c->ops->name);
    rrpci_conn_ref(c);
    if (c->fn)
        c->fn(c, RRPC_CONN_UP, 0, c->user);
    if (rrpci_conn_wire_open(c))
        rrpci_conn_flush(c);
    rrpci_conn_unref(c);
}

void rrpci_conn_down(rrpc_conn *c, int reason, const char *why)
{
    if (!rrpci_conn_enter(c, RRPCI_EV_DOWN))
        return; /* down already */
    if (c->announced)
        c->ctx->stats.conns_down++;
    c->down_reason = reason;
    snprintf(c->down_why, sizeof(c->down_why), "%s", why ? why : rrpc_strerror(reason));
    rrpci_list_del(&c->dirty_link);
    rrpci_conn_ref(c);
    RRPCI_LOG(c->ctx, reason == RRPC_E_CLOSED ? LOG_DEBUG : LOG_NOTICE,
              "%s connection down: %s (%s)", c->ops->name, why ? why : "", rrpc_err_name(reason));
    c->ops->conn_close(c);
    rrpci_grants_conn_down(c);
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++) {
        struct rrpci_msg *m = c->cls[i].head;
        while (m) {
            struct rrpci_msg *next = m->next;
            rrpci_msg_free(m);
            m = next;
        }
        c->cls[i].head = c->cls[i].tail = NULL;
    }
    rrpci_conn_answers_drop(c);
    rrpci_lend_conn_down(c);
    int status = reason == RRPC_E_CLOSED ? RRPC_E_CLOSED : RRPC_E_CONN_LOST;
    struct rrpci_idnode *n;
    while ((n = rrpci_idmap_pop(&c->pending)))
        rrpci_pending_fail(rrpci_container_of(n, struct rrpci_pending, node), status,
                           why ? why : rrpc_strerror(reason));
    rrpci_idmap_fini(&c->pending);
    rrpci_rpc_serving_drop(c);
    /* A passive connection that never came up was never the application's;
     * an active one is hers from rrpc_connect on. */
    if (c->fn && (c->announced || c->user_owned)) {
        /* The callback may read why with rrpc_ctx_last_error. */
        rrpci_set_error(c->ctx, reason, "%s connection down: %s", c->ops->name, c->down_why);
        c->fn(c, RRPC_CONN_DOWN, reason, c->user);
    }
    rrpci_stats_conn_gone(c);
    rrpci_list_del(&c->link);
    c->refs--; /* the context's list; ours, taken above, is still held */
    rrpci_conn_unref(c);
}

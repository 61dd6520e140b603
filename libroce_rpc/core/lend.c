/* SPDX-License-Identifier: MIT */
/*
 * Credit lending (docs/protocol.md §7, "Lent credit"): with
 * RRPC_CREDIT_LENDING a connection's peer starts with RRPC_CREDIT_BASE
 * credits per class instead of the class's whole credit count.  A peer
 * that sends a frame with its last credit of a class (RRPCI_F_LAST: only the
 * sender knows; credit this side returned may still be on its way) is lent
 * as much again (up to
 * the class's credits) out of the context's budget for the class
 * (RRPC_CREDIT_BUDGET, over all connections); a connection that carried no
 * request or answer for RRPC_CREDIT_IDLE_MS gives its lent credit back:
 * this side takes it back with a LEND of minus that much, which the peer
 * acknowledges.  So what all peers together can have in flight towards
 * this side is bounded by the connections times the base plus the budget,
 * not by the connections times the class's credits, and a peer that keeps
 * its lent credit without using it holds at most the class's credits.
 *
 * The changes are announced in one LEND frame per class at a time, which
 * reads the amount when it is handed to the transport (send.c), so lends
 * made while it waits add up.
 */
#include <errno.h>

#include "core/core.h"

uint32_t rrpci_lend_first_grant(const rrpc_ctx *ctx, int cls)
{
    uint32_t all = ctx->cls[cls].credits, base = (uint32_t)ctx->cfg.credit_base;
    return ctx->cfg.credit_lending && base < all ? base : all;
}

uint32_t rrpci_ctx_class_credits(rrpc_ctx *ctx, int cls)
{
    return ctx->cls[cls].credits;
}

uint32_t rrpci_ctx_class_first_grant(rrpc_ctx *ctx, int cls)
{
    return rrpci_lend_first_grant(ctx, cls);
}

/* A LEND frame for what the peer has not been told, unless one waits. */
static void announce(rrpc_conn *c, int cls)
{
    struct rrpci_class_state *s = &c->cls[cls];
    if (s->lend_queued || s->credit.rx_announce == 0 || !rrpci_conn_wire_open(c))
        return;
    struct rrpci_msg *m = rrpci_msg_new(0);
    if (!m) {
        rrpci_conn_down(c, -ENOMEM, "out of memory for a credit frame");
        return;
    }
    m->h.type = RRPCI_T_LEND;
    s->lend_queued = true;
    rrpci_conn_submit(c, cls, m);
}

static void idle_arm(rrpc_conn *c, double at)
{
    double d = at - rrpci_ctx_now(c->ctx);
    c->lend_timer.repeat = d > 0.001 ? d : 0.001;
    rrpci_timer_again(&c->lend_timer);
}

void rrpci_lend_on_rx(rrpc_conn *c, int cls)
{
    rrpc_ctx *ctx = c->ctx;
    struct rrpci_class_state *s = &c->cls[cls];
    struct rrpci_credit *cr = &s->credit;
    uint32_t all = ctx->cls[cls].credits;
    if (!ctx->cfg.credit_lending || cr->rx_grant >= all ||
        cr->rx_taking || cr->rx_announce < 0 || rrpci_conn_backlogged(c))
        return; /* (a peer that does not take its answers is lent nothing) */
    uint32_t want = cr->rx_grant < all - cr->rx_grant ? cr->rx_grant : all - cr->rx_grant;
    uint32_t budget = (uint32_t)ctx->cfg.credit_budget;
    uint32_t room = ctx->lent[cls] < budget ? budget - ctx->lent[cls] : 0;
    if (want > room)
        want = room;
    rrpc_class_stats *st = &ctx->stats.cls[rrpci_cls_public(cls)];
    if (want && c->ops->rx_grow && c->ops->rx_grow(c, cls, cr->rx_grant + want) < 0)
        want = 0; /* the transport said why in its log */
    if (!want) {
        st->credit_lend_refused++;
        return;
    }
    bool had = false;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        had |= c->cls[i].lent > 0;
    rrpci_credit_lend(cr, want);
    s->lent += want;
    ctx->lent[cls] += want;
    st->credit_lends++;
    if (!had)
        idle_arm(c, c->last_data + ctx->cfg.credit_idle_ms / 1000.0);
    announce(c, cls);
}

/* Idle for RRPC_CREDIT_IDLE_MS: the lent credit of every class is taken
 * back (a class whose take-back or lend is still under way is tried again
 * at the next interval). */
static void idle_cb(struct rrpci_timer *t)
{
    rrpc_conn *c = t->data;
    rrpc_ctx *ctx = c->ctx;
    double idle = ctx->cfg.credit_idle_ms / 1000.0, now = rrpci_ctx_now(ctx);
    if (!rrpci_conn_wire_open(c))
        return;
    if (now - c->last_data < idle) {
        idle_arm(c, c->last_data + idle);
        return;
    }
    bool left = false;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++) {
        struct rrpci_class_state *s = &c->cls[i];
        if (!s->lent || s->credit.rx_taking)
            continue;
        if (rrpci_credit_take_back(&s->credit, s->lent))
            announce(c, i);
        else
            left = true;
        if (!rrpci_conn_wire_open(c))
            return;
    }
    if (left)
        idle_arm(c, now + idle);
}

void rrpci_lend_conn_init(rrpc_conn *c)
{
    rrpci_timer_init(c->ctx, &c->lend_timer, idle_cb, 0, 0);
    c->lend_timer.data = c;
}

int rrpci_lend_on_frame(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const char **why)
{
    struct rrpci_class_state *s = &c->cls[cls];
    int32_t delta = (int32_t)(uint32_t)h->arg;
    if (h->type == RRPCI_T_LEND_ACK) {
        uint32_t n = (uint32_t)h->arg;
        if (rrpci_credit_take_acked(&s->credit, n) < 0) {
            *why = "a LEND_ACK for credit this side did not take back";
            return RRPC_E_PROTO;
        }
        s->lent -= n;
        c->ctx->lent[cls] -= n;
        c->ctx->stats.cls[rrpci_cls_public(cls)].credit_taken_back += n;
        return 0;
    }
    int r = rrpci_credit_granted(&s->credit, delta);
    if (r < 0) {
        *why = delta == 0 ? "a LEND of 0 credits"
                          : "a LEND that leaves a grant below 1 or above 65535 credits";
        return r;
    }
    if (delta > 0) {
        rrpci_conn_flush(c); /* frames that waited for credit */
        return 0;
    }
    struct rrpci_msg *m = rrpci_msg_new(0);
    if (!m) {
        *why = "out of memory for a credit frame";
        return -ENOMEM;
    }
    m->h.type = RRPCI_T_LEND_ACK;
    m->h.arg = (uint32_t)-delta;
    rrpci_conn_submit(c, cls, m);
    return 0;
}

void rrpci_lend_conn_down(rrpc_conn *c)
{
    rrpci_timer_stop(&c->lend_timer);
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++) {
        c->ctx->lent[i] -= c->cls[i].lent;
        c->cls[i].lent = 0;
    }
}

uint32_t rrpci_lend_total(const rrpc_ctx *ctx, int cls)
{
    return ctx->lent[cls];
}

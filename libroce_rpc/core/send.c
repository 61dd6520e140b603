/* SPDX-License-Identifier: MIT */
/* The send path: credits, the answer backlog, the weighted scheduler and
 * explicit CREDIT frames. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"

/* ---- send path --------------------------------------------------------- */

static size_t head_size(rrpc_conn *c, int cls)
{
    struct rrpci_class_state *s = &c->cls[cls];
    struct rrpci_msg *m = s->head;
    if (!m || s->blocked)
        return 0;
    if (!rrpci_type_is_exempt(m->h.type) &&
        (!rrpci_credit_can_send(&s->credit) || !rrpci_conn_reached_up(c)))
        return 0;
    return RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
}

/* Answers count against RRPC_MAX_ANSWER_BACKLOG while they wait here. */
static size_t answer_size(uint8_t type, uint32_t len)
{
    return type == RRPCI_T_RESPONSE || type == RRPCI_T_OS_ACK ? RRPCI_HDR_SIZE + (size_t)len : 0;
}

/* Adds @delta (may be negative) to @c's queued answer bytes and the
 * context's, which counts the connections holding some. */
static void answers_add(rrpc_conn *c, ptrdiff_t delta)
{
    struct rrpci_guard *g = &c->ctx->guard;
    if (!delta)
        return;
    bool had = c->answer_bytes > 0;
    c->answer_bytes = (size_t)((ptrdiff_t)c->answer_bytes + delta);
    g->answer_bytes = (size_t)((ptrdiff_t)g->answer_bytes + delta);
    g->answer_holders += (c->answer_bytes > 0) - had;
}

void rrpci_conn_answers_drop(rrpc_conn *c)
{
    answers_add(c, -(ptrdiff_t)c->answer_bytes);
}

/* Held back: more than RRPC_MAX_ANSWER_BACKLOG for this peer; or, while all
 * peers together hold more than RRPC_MAX_ANSWER_BYTES, its share of that
 * budget (the budget over the peers holding answers, at most 1/256 of it, so
 * the peers that came late cannot double it).  A peer holding none is never
 * held back: one that takes its answers goes on.  So the context holds at
 * most the budget plus, per peer, 1/256 of it and one answer. */
bool rrpci_conn_backlogged(const rrpc_conn *c)
{
    const rrpc_ctx *ctx = c->ctx;
    if (c->answer_bytes > (size_t)ctx->cfg.max_answer_backlog)
        return true;
    size_t budget = (size_t)ctx->cfg.max_answer_bytes;
    if (ctx->guard.answer_bytes <= budget || !ctx->guard.answer_holders || !c->answer_bytes)
        return false;
    size_t share = budget / ctx->guard.answer_holders;
    return c->answer_bytes >= (share < budget / 256 ? share : budget / 256);
}

bool rrpci_conn_over_answer_share(const rrpc_conn *c)
{
    return c->answer_bytes <= (size_t)c->ctx->cfg.max_answer_backlog &&
           rrpci_conn_backlogged(c);
}

/* The backlog drained: the requests whose credit was held back count as
 * consumed now, and their credit goes back the usual way. */
static void release_held(rrpc_conn *c)
{
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        for (; c->cls[i].held; c->cls[i].held--)
            rrpci_conn_consumed(c, i);
}

void rrpci_conn_flush(rrpc_conn *c)
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
        if (m->h.type == RRPCI_T_LEND) {
            /* What was lent or taken back while it waited (lend.c). */
            s->lend_queued = false;
            m->h.arg = (uint32_t)s->credit.rx_announce;
            s->credit.rx_announce = 0;
            if (!m->h.arg) {
                rrpci_msg_free(m);
                continue;
            }
        }
        if (!exempt) {
            rrpci_credit_take(&s->credit);
            /* The last credit: the peer may lend more (lend.c). */
            m->h.flags = (uint8_t)((m->h.flags & ~RRPCI_F_LAST) |
                                   (rrpci_credit_can_send(&s->credit) ? 0 : RRPCI_F_LAST));
        }
        /* LEND and LEND_ACK return no credit: what a peer holds changes by
         * their amount alone. */
        bool lend = m->h.type == RRPCI_T_LEND || m->h.type == RRPCI_T_LEND_ACK;
        m->h.credits = lend ? 0 : rrpci_credit_harvest(&s->credit);
        if (m->due > 0) /* the time left now, not when the call was made */
            m->h.ttl = rrpci_ttl_encode(m->due - rrpci_stats_now());
        rrpci_hdr_encode(&m->h, m->hdr);
        size_t answer = answer_size(m->h.type, m->h.len), len = m->h.len;
        int r = c->ops->send(c, cls, m);
        if (r == -EAGAIN) {
            /* Put everything back as it was; wait for rrpci_conn_writable. */
            rrpci_credit_unsend(&s->credit, !exempt, m->h.credits);
            if (m->h.type == RRPCI_T_LEND) {
                s->credit.rx_announce += (int32_t)(uint32_t)m->h.arg;
                s->lend_queued = true;
            }
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
        answers_add(c, -(ptrdiff_t)answer); /* taken: the transport owns @m now */
        rrpci_stats_frame_out(c, len);
        if (!exempt && s->stall_t0 != 0)
            rrpci_stats_credit_sent(c->ctx, cls, s);
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
    answers_add(c, (ptrdiff_t)answer_size(m->h.type, m->h.len));
    if (rrpci_type_is_exempt(m->h.type)) {
        m->next = s->head; /* control frames jump the queue */
        s->head = m;
        if (!s->tail)
            s->tail = m;
    } else {
        if (!rrpci_credit_can_send(&s->credit) && rrpci_conn_reached_up(c))
            rrpci_stats_credit_stall(c->ctx, cls, s);
        if (s->tail) {
            s->tail->next = m;
            s->tail = m;
        } else {
            s->head = s->tail = m;
        }
    }
    rrpci_conn_flush(c);
    return 0;
}

void rrpci_conn_writable(rrpc_conn *c, int cls)
{
    c->cls[cls].blocked = false;
    rrpci_conn_flush(c);
}

/* A consumed frame's credit goes back on the next frame of its class; what
 * is still owed when the loop is about to sleep, and is at least half the
 * grant, goes in a CREDIT frame.  Batching to the end of the loop iteration
 * means one CREDIT frame per burst, not per message. */
void rrpci_conn_consumed(rrpc_conn *c, int cls)
{
    struct rrpci_class_state *s = &c->cls[cls];
    rrpci_credit_consumed(&s->credit);
    if (rrpci_credit_should_return(&s->credit) && c->dirty_link.next == &c->dirty_link)
        rrpci_list_add(&c->ctx->credit_dirty, &c->dirty_link);
}

void rrpci_credit_return(rrpc_ctx *ctx)
{
    while (!rrpci_list_empty(&ctx->credit_dirty)) {
        rrpc_conn *c = rrpci_container_of(ctx->credit_dirty.next, rrpc_conn, dirty_link);
        rrpci_list_del(&c->dirty_link);
        /* A send may take the connection down and free it (its last
         * reference was the flush's): held until the loop is done with it. */
        rrpci_conn_ref(c);
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
        rrpci_conn_unref(c);
    }
}

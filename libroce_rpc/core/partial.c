/* SPDX-License-Identifier: MIT */
/*
 * The context's budget of large frames being received (transport.h,
 * rrpci_partial_*; RRPC_MAX_PARTIAL_BYTES).  A frame whose header announced
 * a large payload holds a buffer of that length until its last byte came;
 * with one such frame per class and connection, peers that send most of a
 * frame and stop could make the process hold RRPC_MAX_MSG per socket.  Here
 * those buffers are counted together, and a socket whose next frame would
 * pass the budget waits, unread, until another frame completes.
 */
#include "core/core.h"

static void wake_cb(struct rrpci_timer *t)
{
    rrpc_ctx *ctx = t->data;
    /* The waiters of now, each once, from the front: one that finds no room
     * queues itself again at the tail, behind those that came after it.
     * (No list head on the stack: an earlier splice through one let GCC 12
     * at -O2 compile this loop into one that never ended.) */
    size_t n = 0;
    for (struct rrpci_list *l = ctx->partial_waiters.next; l != &ctx->partial_waiters;
         l = l->next)
        n++;
    while (n-- && !rrpci_list_empty(&ctx->partial_waiters)) {
        if (ctx->guard.partial_bytes >= (size_t)ctx->cfg.max_partial_bytes)
            break; /* no room: the rest wait for the next release */
        struct rrpci_list *l = ctx->partial_waiters.next;
        rrpci_list_del(l);
        struct rrpci_partial_wait *w = rrpci_container_of(l, struct rrpci_partial_wait, link);
        w->cb(w); /* may queue @w again, or free it */
    }
}

static void ensure_init(rrpc_ctx *ctx)
{
    if (!ctx->partial_waiters.next) {
        rrpci_list_init(&ctx->partial_waiters);
        rrpci_timer_init(ctx, &ctx->partial_wake, wake_cb, 0, 0);
        ctx->partial_wake.data = ctx;
    }
}

bool rrpci_partial_reserve(rrpc_ctx *ctx, size_t len, struct rrpci_partial_wait *w)
{
    ensure_init(ctx);
    size_t held = ctx->guard.partial_bytes, cap = (size_t)ctx->cfg.max_partial_bytes;
    if (held == 0 || (len <= cap && held <= cap - len)) {
        ctx->guard.partial_bytes += len;
        return true;
    }
    if (!w->link.next || rrpci_list_empty(&w->link)) {
        rrpci_list_add(&ctx->partial_waiters, &w->link); /* at the tail */
        ctx->guard.partial_waits++;
    }
    return false;
}

void rrpci_partial_release(rrpc_ctx *ctx, size_t len)
{
    ensure_init(ctx);
    ctx->guard.partial_bytes = len < ctx->guard.partial_bytes ? ctx->guard.partial_bytes - len : 0;
    if (!rrpci_list_empty(&ctx->partial_waiters) && !ctx->partial_wake.heap_slot)
        rrpci_timer_start(&ctx->partial_wake);
}

void rrpci_partial_cancel(struct rrpci_partial_wait *w)
{
    if (w->link.next && !rrpci_list_empty(&w->link)) {
        rrpci_list_del(&w->link);
        rrpci_list_init(&w->link);
    }
}

void rrpci_partial_fini(rrpc_ctx *ctx)
{
    if (ctx->partial_waiters.next)
        rrpci_timer_stop(&ctx->partial_wake);
}

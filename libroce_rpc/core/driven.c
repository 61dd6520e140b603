/* SPDX-License-Identifier: MIT */
/* Driven mode: the application runs the loop from its own (poll, epoll,
 * asyncio...) through rrpc_ctx_fd, rrpc_ctx_timeout and rrpc_ctx_progress.
 * The fd is the loop's own epoll fd, which holds every fd the library
 * watches, its wake-up eventfd and, once asked for, a timer fd armed to the
 * next timer; the timeout is the loop's own next timer. */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/timerfd.h>

#include "core/core.h"

static void timer_fd_cb(struct rrpci_io *w, unsigned revents)
{
    rrpc_ctx *ctx = w->data;
    uint64_t n;
    while (read(ctx->timer_fd, &n, sizeof(n)) > 0) /* consumed: the loop runs now */
        ;
    ctx->timer_armed = false;
}

void rrpci_driven_rearm(rrpc_ctx *ctx)
{
    if (ctx->timer_fd < 0)
        return;
    /* Few system calls: set only when the next due time comes before the
     * armed one (a timer that fires early costs one spare pass, which arms
     * it again). */
    double now = rrpci_evloop_now(ctx->ev);
    if (ctx->timer_armed && ctx->timer_due <= now)
        ctx->timer_armed = false; /* fired, or about to: its read re-arms */
    int ms = rrpci_loop_fd_timeout(ctx);
    if (ms < 0)
        return; /* no timer runs: an armed one only makes a spare wake-up */
    double due = now + ms / 1000.0;
    if (ctx->timer_armed && ctx->timer_due <= due)
        return;
    struct itimerspec its = {0};
    if (ms == 0)
        its.it_value.tv_nsec = 1; /* at once */
    else {
        its.it_value.tv_sec = ms / 1000;
        its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    }
    if (timerfd_settime(ctx->timer_fd, 0, &its, NULL) == 0) {
        ctx->timer_armed = true;
        ctx->timer_due = due;
    }
}

void rrpci_driven_fini(rrpc_ctx *ctx)
{
    if (ctx->timer_fd < 0)
        return;
    rrpci_io_stop(ctx->ev, &ctx->timer_w);
    close(ctx->timer_fd);
    ctx->timer_fd = -1;
}

RRPC_API int rrpc_ctx_fd(rrpc_ctx *ctx)
{
    if (__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED))
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread; no fd to poll");
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->timer_fd < 0) {
        int tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (tf >= 0) {
            ctx->timer_fd = tf;
            rrpci_io_init(&ctx->timer_w, timer_fd_cb, tf, RRPCI_IO_READ);
            ctx->timer_w.data = ctx;
            r = rrpci_io_start(ctx->ev, &ctx->timer_w);
            if (r < 0) {
                close(tf);
                ctx->timer_fd = -1;
            }
        } else {
            r = -errno;
        }
        if (r < 0)
            r = rrpci_set_error(ctx, r, "cannot make the context's timer fd: %s", strerror(-r));
        else
            rrpci_driven_rearm(ctx);
    }
    if (r == 0)
        r = rrpci_evloop_fd(ctx->ev);
    pthread_mutex_unlock(&ctx->lock); /* not rrpci_unlock: nothing to wake */
    return r;
}

RRPC_API int rrpc_ctx_timeout(rrpc_ctx *ctx, int *ret_ms)
{
    if (!ctx || !ret_ms)
        return -EINVAL;
    if (__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED))
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread");
    rrpci_lock(ctx);
    *ret_ms = rrpci_loop_timeout(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

RRPC_API int rrpc_ctx_progress(rrpc_ctx *ctx, int timeout_ms)
{
    if (rrpci_in_callback(ctx))
        return rrpci_set_error(ctx, RRPC_E_DEADLOCK,
                               "rrpc_ctx_progress called from inside a callback");
    if (__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED))
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread");
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->in_run)
        r = rrpci_set_error(ctx, -EBUSY, "another thread is driving this context's loop");
    else
        rrpci_loop_pass(ctx, timeout_ms);
    if (r == 0)
        rrpci_driven_rearm(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return r;
}

/* SPDX-License-Identifier: MIT */
/* Blocking operations: the one way a thread waits for the loop, on a flag
 * the loop sets (struct rrpci_sync's done, rrpc_ctx_wait_until's flag). */
#include <dirent.h>
#include <sched.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/syscall.h>
#include <linux/futex.h>

#include "core/core.h"
#include "util/reserved.h"

int rrpci_sync_begin(struct rrpci_sync *s, rrpc_ctx *ctx, const char *why_not_here)
{
    if (!ctx)
        return -EINVAL;
    if (rrpci_in_callback(ctx) || rrpci_relief_handler == ctx) /* relieved or not */
        return rrpci_set_error(ctx, RRPC_E_DEADLOCK, "%s", why_not_here);
    s->done = 0;
    s->ctx = ctx;
    s->status = 0;
    s->detail[0] = 0;
    rrpci_lock(ctx);
    /* A sleeping loop thread is taken over before the operation starts, as
     * in rrpc_ctx_wait_until: an answer that comes at once then cannot
     * wake it for nothing. */
    s->taken = rrpci_loop_take(ctx);
    rrpci_sync_starting = ctx;
    return 0;
}

void rrpci_sync_done(struct rrpci_sync *s, int status, const char *fmt, ...)
{
    s->status = status;
    if (status != 0) {
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(s->detail, sizeof(s->detail), fmt, ap);
            va_end(ap);
        } else {
            snprintf(s->detail, sizeof(s->detail), "%s", rrpc_strerror(status));
        }
    }
    __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
    /* A waiter asleep goes at once, not after the rest of this pass. */
    rrpci_flag_waiters_wake(s->ctx);
}

void rrpci_sync_op_cb(int status, void *user)
{
    struct rrpci_sync *s = user;
    const char *why = rrpc_ctx_last_error(s->ctx);
    rrpci_sync_done(s, status, "%s", why[0] ? why : rrpc_strerror(status));
}

/* ---- the wait: run the loop, or sleep until a runner sees the flag -------- */

/* A thread of rrpc_ctx_wait_until asleep while another thread runs the
 * loop: linked in ctx->flag_waiters under the lock.  The runner that finds
 * *flag set unlinks it and moves @word from 0 to 1, wakes it, then to 2:
 * past that the runner no longer touches the record, which may go. */
struct rrpci_flag_wait {
    const int *flag;
    int word;
    struct rrpci_flag_wait *next;
};

static bool flag_is_set(const int *flag)
{
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

void rrpci_flag_waiters_wake(rrpc_ctx *ctx)
{
    struct rrpci_flag_wait **pp = &ctx->flag_waiters;
    while (*pp) {
        struct rrpci_flag_wait *w = *pp;
        if (!flag_is_set(w->flag)) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        __atomic_store_n(&w->word, 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &w->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        __atomic_store_n(&w->word, 2, __ATOMIC_RELEASE);
    }
}

static bool flag_woken(void *w)
{
    return __atomic_load_n(&((struct rrpci_flag_wait *)w)->word, __ATOMIC_ACQUIRE) != 0;
}

/* Milliseconds left until @end (rounded up), -1 without one (NULL). */
static int ms_left(const struct timespec *end)
{
    if (!end)
        return -1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns = (long long)(end->tv_sec - t.tv_sec) * 1000000000LL + (end->tv_nsec - t.tv_nsec);
    if (ns <= 0)
        return 0;
    long long ms = (ns + 999999) / 1000000;
    return ms > 86400000 ? 86400000 : (int)ms;
}

/* Sleeps, the lock let go, until a runner sees *@flag set or about @ms
 * (at most 20: a flag set outside the loop's passes, and who runs the loop,
 * are looked at again then).  Whether the flag was seen set; if not, the
 * lock is held again on return. */
static bool flag_sleep(rrpc_ctx *ctx, const int *flag, int ms, bool *woke)
{
    struct rrpci_flag_wait w = {.flag = flag, .word = 0, .next = ctx->flag_waiters};
    ctx->flag_waiters = &w;
    if (*woke && ctx->thread_mode) {
        pthread_mutex_unlock(&ctx->lock);
    } else {
        rrpci_unlock(ctx); /* the first time: the loop must see what was started */
        *woke = true;
    }
    if (!rrpci_spin(flag_woken, &w, ctx->cfg.sync_spin_us)) {
        int slice = ms < 0 || ms > 20 ? 20 : ms;
        struct timespec ts = {0, (long)slice * 1000000L};
        if (!__atomic_load_n(&w.word, __ATOMIC_ACQUIRE))
            syscall(SYS_futex, &w.word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    }
    if (__atomic_load_n(&w.word, __ATOMIC_ACQUIRE)) {
        while (__atomic_load_n(&w.word, __ATOMIC_ACQUIRE) != 2)
            sched_yield(); /* the runner is between its wake-up and letting go */
        return true;
    }
    rrpci_lock(ctx);
    if (!__atomic_load_n(&w.word, __ATOMIC_ACQUIRE)) { /* nobody unlinked it */
        struct rrpci_flag_wait **pp = &ctx->flag_waiters;
        while (*pp != &w)
            pp = &(*pp)->next;
        *pp = w.next;
    }
    return false;
}

/* Runs or waits for the loop until *@flag is set or @end passes, the lock
 * held on entry (@taken: the loop already taken over); *@locked: whether
 * it still is on return.  The thread that runs the loop for its answer
 * starts the governor's window of polling (RRPC_BUSY_POLL_US) as after a
 * frame received: the operation is traffic that waits for its answer, and
 * a quick answer is then found without the caller going to sleep. */
static int flag_wait(rrpc_ctx *ctx, const int *flag, const struct timespec *end, bool taken,
                     bool *woke, bool *locked)
{
    int ms;
    while (!flag_is_set(flag) || taken) {
        if (!taken) {
            if ((ms = ms_left(end)) == 0)
                return rrpci_set_error(ctx, -ETIMEDOUT, "rrpc_ctx_wait_until: the flag was not "
                                                        "set within the timeout");
            if (!ctx->thread_mode && !ctx->in_run) {
                rrpci_ctx_activity_fresh(ctx);
                rrpci_loop_pass(ctx, ms);
                rrpci_driven_rearm(ctx);
                continue;
            }
            taken = rrpci_loop_take(ctx);
        }
        if (taken) {
            rrpci_ctx_activity_fresh(ctx);
            while (!flag_is_set(flag) && (ms = ms_left(end)) != 0)
                rrpci_loop_pass(ctx, ms);
            rrpci_loop_give_back(ctx);
            taken = false;
            *woke = true; /* the loop thread has seen it all */
            continue;
        }
        if (flag_sleep(ctx, flag, ms, woke)) {
            *locked = false;
            return 0;
        }
    }
    return 0;
}

/* Unlocks after a wait: once the loop was woken for what the operation
 * started (@woke), only results were read, so a thread-mode loop has
 * nothing to see, and waking it would cost it a pass for nothing after
 * every call.  Nothing to do when the wait returned without the lock. */
static void wait_unlock(rrpc_ctx *ctx, bool woke, bool locked)
{
    if (!locked)
        return;
    if (woke && ctx->thread_mode)
        pthread_mutex_unlock(&ctx->lock);
    else
        rrpci_unlock(ctx);
}

int rrpci_sync_end(struct rrpci_sync *s, int started)
{
    rrpc_ctx *ctx = s->ctx;
    rrpci_sync_starting = NULL;
    if (started != 0) {
        if (s->taken)
            rrpci_loop_give_back(ctx);
        rrpci_unlock(ctx);
        return started;
    }
    bool woke = false, locked = true;
    (void)flag_wait(ctx, &s->done, NULL, s->taken, &woke, &locked);
    int r = s->status;
    if (r != 0)
        rrpci_set_error(ctx, r, "%s", s->detail);
    wait_unlock(ctx, woke, locked);
    return r;
}

RRPC_API int rrpc_ctx_wait_until(rrpc_ctx *ctx, int (*start)(void *arg), void *arg,
                                 const int *flag, int timeout_ms)
{
    if (!ctx || !flag)
        return -EINVAL;
    if (rrpci_in_callback(ctx) || rrpci_relief_handler == ctx) /* relieved or not */
        return rrpci_set_error(ctx, RRPC_E_DEADLOCK,
                               "rrpc_ctx_wait_until from a callback would wait for itself; "
                               "return from the callback and act on the flag later");
    struct timespec end;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &end);
        end.tv_sec += timeout_ms / 1000;
        end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (end.tv_nsec >= 1000000000L) {
            end.tv_sec++;
            end.tv_nsec -= 1000000000L;
        }
    }
    rrpci_lock(ctx);
    /* A sleeping loop thread is taken over before the operation starts:
     * an answer that comes at once then cannot wake it for nothing. */
    bool taken = false;
    if (start) {
        taken = timeout_ms != 0 && rrpci_loop_take(ctx);
        rrpci_sync_starting = ctx; /* the loop is not woken for it: see flag_sleep */
        int r = start(arg);
        rrpci_sync_starting = NULL;
        if (r) {
            if (taken)
                rrpci_loop_give_back(ctx);
            rrpci_unlock(ctx);
            return r;
        }
    }
    /* Without an operation started here, the loop has nothing new to see. */
    bool woke = start == NULL, locked = true;
    int r = flag_wait(ctx, flag, timeout_ms >= 0 ? &end : NULL, taken, &woke, &locked);
    wait_unlock(ctx, woke, locked);
    return r;
}

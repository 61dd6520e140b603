/* SPDX-License-Identifier: MIT */
/* Blocking operations: the one rendezvous of a blocking call with the loop
 * (struct rrpci_sync). */
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
    if (rrpci_in_callback(ctx))
        return rrpci_set_error(ctx, RRPC_E_DEADLOCK, "%s", why_not_here);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->done = false;
    s->ctx = ctx;
    s->status = 0;
    s->detail[0] = 0;
    rrpci_lock(ctx);
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
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->done, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void rrpci_sync_op_cb(int status, void *user)
{
    struct rrpci_sync *s = user;
    const char *why = rrpc_ctx_last_error(s->ctx);
    rrpci_sync_done(s, status, "%s", why[0] ? why : rrpc_strerror(status));
}

static bool sync_done(struct rrpci_sync *s)
{
    pthread_mutex_lock(&s->mu);
    bool d = s->done;
    pthread_mutex_unlock(&s->mu);
    return d;
}

/* Whether the loop has recorded the completion of @s (for rrpci_spin). */
static bool seen_done(void *s)
{
    return __atomic_load_n(&((struct rrpci_sync *)s)->done, __ATOMIC_ACQUIRE);
}

/* After seeing s->done without s->mu: waits until the loop has left
 * rrpci_sync_done (it sets done under s->mu), so @s may be released. */
static void sync_settled(struct rrpci_sync *s)
{
    pthread_mutex_lock(&s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Runs the loop on the calling thread until @s is done (the lock held,
 * this thread the runner or allowed to become it).  The operation is
 * traffic that waits for its answer: the governor's window of polling
 * (RRPC_BUSY_POLL_US) starts with it, as after a frame received, so a quick
 * answer is found without the caller going to sleep. */
static void sync_run(rrpc_ctx *ctx, struct rrpci_sync *s)
{
    rrpci_ctx_activity(ctx);
    while (!sync_done(s))
        rrpci_loop_pass(ctx, -1);
}

/* Waits for @s.  Returns whether the context lock is still held: a thread
 * whose answer came while it let go of the context returns without taking
 * it again, since the loop thread, which just ran the completion, still
 * holds it for the rest of its pass (waiting for it cost the caller a
 * second sleep and wake-up per call).  *@woke: whether the loop was woken
 * after the operation began.
 *
 * Where nobody runs the loop (driven mode between two progress calls), or
 * the loop thread sleeps in its wait, the caller runs it itself: its
 * answer then wakes it directly, with no second thread to go through. */
static bool sync_wait(rrpc_ctx *ctx, struct rrpci_sync *s, bool *woke)
{
    while (!sync_done(s)) {
        if (!ctx->thread_mode && !ctx->in_run) {
            sync_run(ctx, s);
            rrpci_driven_rearm(ctx);
            continue;
        }
        if (rrpci_loop_take(ctx)) {
            sync_run(ctx, s);
            rrpci_loop_give_back(ctx);
            *woke = true; /* the loop thread has seen it all: nothing to wake it for */
            continue;
        }
        /* Another thread runs the loop.  Let go of the context (waking
         * the loop, the first time: it must see what this thread started)
         * and sleep on the sync.  A later pass changed nothing, so it lets
         * go quietly.  The timeout re-checks who runs the loop. */
        if (*woke && ctx->thread_mode) {
            pthread_mutex_unlock(&ctx->lock);
        } else {
            rrpci_unlock(ctx);
            *woke = true;
        }
        /* An answer that comes within the spin costs no wake-up of this thread. */
        if (rrpci_spin(seen_done, s, ctx->cfg.sync_spin_us)) {
            sync_settled(s);
            return false;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&s->mu);
        if (!s->done)
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        bool done = s->done;
        pthread_mutex_unlock(&s->mu);
        if (done)
            return false;
        rrpci_lock(ctx);
    }
    return true;
}

int rrpci_sync_end(struct rrpci_sync *s, int started)
{
    rrpc_ctx *ctx = s->ctx;
    int r = started;
    bool woke = false, locked = true;
    rrpci_sync_starting = NULL;
    if (r == 0) {
        locked = sync_wait(ctx, s, &woke);
        r = s->status;
        if (r != 0)
            rrpci_set_error(ctx, r, "%s", s->detail);
    }
    /* Once the loop was woken for what the operation started, only results
     * were read: a thread-mode loop has nothing to see, and waking it would
     * cost it a pass for nothing after every call. */
    if (!locked)
        ;
    else if (woke && ctx->thread_mode)
        pthread_mutex_unlock(&ctx->lock);
    else
        rrpci_unlock(ctx);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    return r;
}

/* ---- rrpc_ctx_wait_until -------------------------------------------------- */

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
 * held on entry; *@locked: whether it still is on return. */
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
                rrpci_ctx_activity(ctx); /* as sync_run: a quick answer is polled for */
                rrpci_loop_pass(ctx, ms);
                rrpci_driven_rearm(ctx);
                continue;
            }
            taken = rrpci_loop_take(ctx);
        }
        if (taken) {
            rrpci_ctx_activity(ctx);
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

RRPC_API int rrpc_ctx_wait_until(rrpc_ctx *ctx, int (*start)(void *arg), void *arg,
                                 const int *flag, int timeout_ms)
{
    if (!ctx || !flag)
        return -EINVAL;
    if (rrpci_in_callback(ctx))
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
    if (!locked)
        ;
    else if (woke && ctx->thread_mode)
        pthread_mutex_unlock(&ctx->lock);
    else
        rrpci_unlock(ctx);
    return r;
}

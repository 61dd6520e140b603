/* SPDX-License-Identifier: MIT */
/* The loop: its lock, the timers it keeps account of, adaptive (busy)
 * polling, the wake-up from other threads and the loop thread. */
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

#include "core/core.h"
#include "util/reserved.h"

/* ---- the loop and its lock --------------------------------------------- */

/* Tries for the lock for about @us without sleeping: a thread-mode loop
 * holds it for the few microseconds left of its pass after a callback, and
 * a thread calling in right then (the next blocking call, most often)
 * would otherwise sleep and be woken for it. */
#define RRPCI_LOCK_SPIN_US 20

bool rrpci_spin(bool (*ready)(void *arg), void *arg, int us)
{
    if (us <= 0)
        return false;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return true;
        if ((i & 15) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 >= us)
                return false;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static bool lock_taken(void *ctx)
{
    return pthread_mutex_trylock(&((rrpc_ctx *)ctx)->lock) == 0;
}

void rrpci_lock(rrpc_ctx *ctx)
{
    atomic_fetch_add(&ctx->lock_waiters, 1);
    if (!(__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED) &&
          rrpci_spin(lock_taken, ctx, RRPCI_LOCK_SPIN_US)))
        pthread_mutex_lock(&ctx->lock);
    atomic_fetch_sub(&ctx->lock_waiters, 1);
}

static void timer_unlink(struct rrpci_timer *t)
{
    if (!t->pprev)
        return;
    *t->pprev = t->next;
    if (t->next)
        t->next->pprev = t->pprev;
    t->next = NULL;
    t->pprev = NULL;
}

static void timer_link(struct rrpci_timer *t)
{
    if (t->pprev)
        return;
    rrpc_ctx *ctx = t->ctx;
    t->next = ctx->timers;
    if (t->next)
        t->next->pprev = &t->next;
    ctx->timers = t;
    t->pprev = &ctx->timers;
}

static void timer_fired(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct rrpci_timer *t = rrpci_container_of(w, struct rrpci_timer, w);
    if (!ev_is_active(w))
        timer_unlink(t); /* a one-shot timer: libev stopped it */
    t->cb(loop, w, revents); /* which may free @t */
}

void rrpci_timer_init(rrpc_ctx *ctx, struct rrpci_timer *t,
                      void (*cb)(struct ev_loop *loop, ev_timer *w, int revents), double after,
                      double repeat)
{
    ev_timer_init(&t->w, timer_fired, after, repeat);
    t->ctx = ctx;
    t->cb = cb;
    t->next = NULL;
    t->pprev = NULL;
}

void rrpci_timer_set(struct rrpci_timer *t, double after, double repeat)
{
    ev_timer_set(&t->w, after, repeat);
}

void rrpci_timer_start(struct rrpci_timer *t)
{
    if (!rrpci_in_callback(t->ctx))
        ev_now_update(t->ctx->loop);
    ev_timer_start(t->ctx->loop, &t->w);
    timer_link(t);
}

void rrpci_timer_stop(struct rrpci_timer *t)
{
    ev_timer_stop(t->ctx->loop, &t->w);
    timer_unlink(t);
}

void rrpci_timer_again(struct rrpci_timer *t)
{
    ev_timer_again(t->ctx->loop, &t->w);
    if (ev_is_active(&t->w))
        timer_link(t);
    else
        timer_unlink(t);
}

bool rrpci_timer_active(const struct rrpci_timer *t)
{
    return ev_is_active(&t->w);
}

/* in_run, owner and thread_mode change under the lock but are read without
 * it too (rrpci_in_callback, rrpci_lock, the driven-mode checks): atomic
 * stores, so those reads are not data races. */
static void run_enter(rrpc_ctx *ctx)
{
    __atomic_store_n(&ctx->owner, pthread_self(), __ATOMIC_RELAXED);
    __atomic_store_n(&ctx->in_run, ctx->in_run + 1, __ATOMIC_RELAXED);
}

static void run_leave(rrpc_ctx *ctx)
{
    __atomic_store_n(&ctx->in_run, ctx->in_run - 1, __ATOMIC_RELAXED);
}

static void no_release(struct ev_loop *loop)
{
}

/* Driven, between two progress calls: libev hands the watchers this thread
 * started to epoll only when the loop runs.  One pass that waits for
 * nothing does that now; it invokes no callback (callbacks run in
 * rrpc_ctx_progress only): what it finds stays pending, and the context's
 * fd says so.  Before, the fd said "run me" after every call, which cost
 * the application a spare pass of its loop per call.  The lock is kept
 * through the pass (it may be held more than once here). */
static void driven_reify(rrpc_ctx *ctx)
{
    ctx->defer_invoke = true;
    run_enter(ctx);
    ev_set_loop_release_cb(ctx->loop, no_release, no_release);
    ev_run(ctx->loop, EVRUN_NOWAIT);
    ev_set_loop_release_cb(ctx->loop, rrpci_loop_release, rrpci_loop_acquire);
    run_leave(ctx);
    ctx->defer_invoke = false;
    rrpci_driven_rearm(ctx);
}

void rrpci_unlock(rrpc_ctx *ctx)
{
    bool other = !(ctx->in_run && pthread_equal(ctx->owner, pthread_self()));
    bool idle_driven = other && !ctx->in_run && !ctx->thread_mode;
    if (idle_driven && !ctx->ran_callbacks && ctx->drive_fd >= 0)
        driven_reify(ctx);
    else if (idle_driven && !ctx->ran_callbacks) {
        /* No fd handed out yet: the next progress call runs the loop. */
        ctx->ran_callbacks = true;
    }
    pthread_mutex_unlock(&ctx->lock);
    /* Another thread changed watchers or queued work while the loop runs or
     * sleeps in it: make the loop look.  (No thread in the loop of a driven
     * context: its next run sees the work, and its fd already says so.) */
    if (other && !idle_driven)
        rrpci_ctx_wake(ctx, &ctx->wake);
}

void rrpci_ctx_wake(rrpc_ctx *ctx, ev_async *w)
{
    ev_async_send(ctx->loop, w);
    /* A driven loop that another thread left (or never entered) would not
     * see the async until something else woke its application. */
    int fd = atomic_load(&ctx->kick_to);
    if (fd >= 0) {
        uint64_t one = 1;
        (void)!write(fd, &one, sizeof(one));
        atomic_store(&ctx->kicked, true);
    }
}

bool rrpci_in_callback(rrpc_ctx *ctx)
{
    /* Read without the lock: only this thread can make it true for itself. */
    return __atomic_load_n(&ctx->in_run, __ATOMIC_RELAXED) &&
           pthread_equal(__atomic_load_n(&ctx->owner, __ATOMIC_RELAXED), pthread_self());
}

void rrpci_loop_release(struct ev_loop *loop)
{
    rrpc_ctx *ctx = ev_userdata(loop);
    pthread_mutex_unlock(&ctx->lock);
}

void rrpci_loop_acquire(struct ev_loop *loop)
{
    rrpc_ctx *ctx = ev_userdata(loop);
    /* A busy loop would re-take the (unfair) mutex at once and starve the
     * threads calling in: let them through first. */
    while (atomic_load(&ctx->lock_waiters) > 0)
        sched_yield();
    pthread_mutex_lock(&ctx->lock);
}

/*
 * Adaptive polling: while the idle watcher is active libev polls its fds
 * with a zero timeout instead of sleeping, so an answer that follows traffic
 * closely is picked up without a wake-up, and the check watcher lets each
 * transport look for completions that wake no fd (ops->busy_poll: a verbs
 * CQ that is not armed).  Both stop once the window (RRPC_BUSY_POLL_US, or a
 * transport's own) has passed without traffic and no transport wants more:
 * an idle context sleeps, and the CPU it spends is bounded by that window
 * after each burst.
 *
 * Under steady traffic the window never passes, so polling is also held to
 * a CPU budget (RRPC_BUSY_POLL_BUDGET_PCT): the loop thread's CPU clock is
 * read on every polling iteration and what it spent while polling is
 * counted over a sliding RRPCI_BUSY_WINDOW (the current window plus the
 * previous one's share that still overlaps).  Past the budget polling stops
 * (the transports, asked again through rrpci_ctx_busy, arm their fds) until
 * the share falls below it; the loop sleeps meanwhile.
 *
 * A polling thread yields its CPU on every iteration (rrpci_busy_yield):
 * the work it waits for often needs that CPU, the peer process on the same
 * host, or the kernel's own workers (Soft-RoCE's, the network stack's),
 * and without the yield they waited for the scheduler to preempt the
 * poller.  Measured with tcp loopback and one CPU-bound process beside it
 * on 2 vCPUs: 64 B round trip with polling p50 69 us, p75 3,938 us without
 * the yield; p50 31 us, p99 106 us with it (polling off: 23 us).  With
 * nothing else runnable sched_yield returns at once.
 */
#define RRPCI_BUSY_WINDOW 0.1    /* s */
#define RRPCI_BUSY_HOLD_MIN 0.001 /* s */
/* Contention: over at least RRPCI_CONTEND_MIN_WALL of polling (sliding, as
 * the budget), the thread ran less than RRPC_BUSY_POLL_MIN_SHARE_PCT of the
 * time. */
#define RRPCI_CONTEND_MIN_WALL 0.02 /* s */
#define RRPCI_CONTEND_HOLD_MAX 1.6 /* s */

/* Whether @cpu seconds of running over @wall seconds spent polling are
 * below the share a poller must get (RRPC_BUSY_POLL_MIN_SHARE_PCT). */
static bool ran_short(const rrpc_ctx *ctx, double cpu, double wall)
{
    return cpu < ctx->cfg.busy_poll_min_share_pct / 100.0 * wall;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Moves the window on to @now; the sliding estimates of the CPU spent
 * polling (*@cpu) and of the wall time spent polling (*@wall) over the last
 * RRPCI_BUSY_WINDOW, in seconds. */
static void busy_slide(rrpc_ctx *ctx, ev_tstamp now, double *cpu, double *wall)
{
    double since = now - ctx->busy_win_start;
    if (since >= 2 * RRPCI_BUSY_WINDOW || since < 0) {
        ctx->busy_cpu_prev = ctx->busy_cpu_cur = 0;
        ctx->busy_wall_prev = ctx->busy_wall_cur = 0;
        ctx->busy_win_start = now;
        since = 0;
    } else if (since >= RRPCI_BUSY_WINDOW) {
        /* A window in which the thread polled and had its CPU: contention,
         * if it comes back, is met with the shortest hold again. */
        if (ctx->busy_wall_cur >= RRPCI_CONTEND_MIN_WALL &&
            !ran_short(ctx, ctx->busy_cpu_cur, ctx->busy_wall_cur))
            ctx->busy_contend_hold = 0;
        ctx->busy_cpu_prev = ctx->busy_cpu_cur;
        ctx->busy_wall_prev = ctx->busy_wall_cur;
        ctx->busy_cpu_cur = ctx->busy_wall_cur = 0;
        ctx->busy_win_start += RRPCI_BUSY_WINDOW;
        since -= RRPCI_BUSY_WINDOW;
    }
    double f = 1 - since / RRPCI_BUSY_WINDOW;
    *cpu = ctx->busy_cpu_cur + ctx->busy_cpu_prev * f;
    *wall = ctx->busy_wall_cur + ctx->busy_wall_prev * f;
}

/* Charges the thread CPU and the wall time since the last charge; true if
 * polling must stop (it is refused until busy_held_until): the budget is
 * spent, or the thread is not getting its CPU.  A poller that others
 * preempt is the worst of both: it burns what CPU it gets, and an answer
 * waits until the scheduler gives it back, where a sleeping thread would
 * be woken at once (measured with rrpc-bench --tests contended).  Then
 * polling stops for 0.1 s, doubled on each repeat up to 1.6 s. */
static bool busy_charge(rrpc_ctx *ctx, ev_tstamp now)
{
    double cpu_now = thread_cpu_s();
    pthread_t self = pthread_self();
    if (ctx->busy_mark_ok && pthread_equal(ctx->busy_mark_thread, self) &&
        cpu_now >= ctx->busy_mark && now >= ctx->busy_wall_mark) {
        ctx->busy_cpu_cur += cpu_now - ctx->busy_mark;
        ctx->busy_wall_cur += now - ctx->busy_wall_mark;
    }
    ctx->busy_mark = cpu_now;
    ctx->busy_wall_mark = now;
    ctx->busy_mark_thread = self;
    ctx->busy_mark_ok = true;
    double cpu, wall;
    busy_slide(ctx, now, &cpu, &wall);
    if (wall >= RRPCI_CONTEND_MIN_WALL && ran_short(ctx, cpu, wall)) {
        double hold = ctx->busy_contend_hold > 0 ? 2 * ctx->busy_contend_hold
                                                 : RRPCI_BUSY_WINDOW;
        ctx->busy_contend_hold = hold < RRPCI_CONTEND_HOLD_MAX ? hold : RRPCI_CONTEND_HOLD_MAX;
        ctx->busy_held_until = now + ctx->busy_contend_hold;
        /* the next polling is measured afresh */
        ctx->busy_cpu_prev = ctx->busy_cpu_cur = ctx->busy_wall_prev = ctx->busy_wall_cur = 0;
        ctx->stats.busy_poll_contended_stops++;
        return true;
    }
    if (ctx->cfg.busy_poll_budget_pct >= 100)
        return false;
    double budget = ctx->cfg.busy_poll_budget_pct / 100.0 * RRPCI_BUSY_WINDOW;
    if (cpu <= budget)
        return false;
    /* The share falls below the budget at the latest when the window has
     * moved on by the excess; ask again a window later at most, and a
     * millisecond later at least: ev_now counts seconds since 1970, where a
     * double cannot add a few nanoseconds. */
    double wait = cpu - budget;
    if (wait < RRPCI_BUSY_HOLD_MIN)
        wait = RRPCI_BUSY_HOLD_MIN;
    ctx->busy_held_until = now + (wait < RRPCI_BUSY_WINDOW ? wait : RRPCI_BUSY_WINDOW);
    ctx->stats.busy_poll_budget_stops++;
    return true;
}

static bool busy_held(rrpc_ctx *ctx)
{
    return ev_now(ctx->loop) < ctx->busy_held_until;
}

void rrpci_busy_idle_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    /* Its being active is the point: the loop does not sleep. */
}

void rrpci_busy_check_cb(struct ev_loop *loop, ev_check *w, int revents)
{
    rrpc_ctx *ctx = w->data;
    bool held = busy_charge(ctx, ev_now(loop)) && busy_held(ctx);
    bool more = false;
    /* Held: each transport's busy_poll sees rrpci_ctx_busy refuse and arms
     * what it polled, and says it wants no more.  Polling never stops while
     * a transport does: what it left unarmed would wake nothing. */
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (ctx->tops[i] && ctx->tops[i]->busy_poll && ctx->tops[i]->busy_poll(ctx))
            more = true;
    if (!more && (held || ev_now(loop) >= ctx->busy_until)) {
        ev_idle_stop(loop, &ctx->busy_idle);
        ev_check_stop(loop, w);
        ctx->busy_mark_ok = false;
    } else {
        rrpci_busy_yield();
    }
}

void rrpci_busy_yield(void)
{
    sched_yield();
}

bool rrpci_ctx_busy(rrpc_ctx *ctx, unsigned us)
{
    if (busy_held(ctx))
        return false;
    ev_tstamp until = ev_now(ctx->loop) + us * 1e-6;
    if (until > ctx->busy_until)
        ctx->busy_until = until;
    if (!ev_is_active(&ctx->busy_idle)) {
        ev_idle_start(ctx->loop, &ctx->busy_idle);
        ev_check_start(ctx->loop, &ctx->busy_check);
        ctx->busy_mark = thread_cpu_s();
        ctx->busy_wall_mark = ev_now(ctx->loop);
        ctx->busy_mark_thread = pthread_self();
        ctx->busy_mark_ok = true;
    }
    return true;
}

bool rrpci_ctx_may_busy(rrpc_ctx *ctx)
{
    return !busy_held(ctx);
}

void rrpci_ctx_activity(rrpc_ctx *ctx)
{
    if (ctx->cfg.busy_poll_us > 0)
        (void)rrpci_ctx_busy(ctx, (unsigned)ctx->cfg.busy_poll_us);
}

void rrpci_wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    rrpc_ctx *ctx = w->data;
    if (ctx->stopping)
        ev_break(loop, EVBREAK_ALL);
}

/* libev hands a watcher started in a callback to epoll only when the loop
 * runs again, so a driven context whose callbacks ran must be run again
 * before it may sleep on its fd (timeout_locked says 0).  The credit
 * prepare watcher does not count: it runs every iteration, before libev
 * updates epoll in that same iteration. */
void rrpci_invoke_pending(struct ev_loop *loop)
{
    rrpc_ctx *ctx = ev_userdata(loop);
    if (ctx->defer_invoke)
        return; /* driven_reify: they stay pending for the next run */
    if (ev_pending_count(loop) > (ev_is_pending(&ctx->credit_prep) ? 1u : 0u))
        ctx->ran_callbacks = true;
    ev_invoke_pending(loop);
}

/* Runs the loop with the lock held once by the caller. */
void rrpci_run_locked(rrpc_ctx *ctx, int flags)
{
    run_enter(ctx);
    ctx->ran_callbacks = false;
    ev_run(ctx->loop, flags);
    run_leave(ctx);
}

void *rrpci_loop_thread(void *arg)
{
    rrpc_ctx *ctx = arg;
    rrpci_lock(ctx);
    while (!ctx->stopping)
        rrpci_run_locked(ctx, 0);
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

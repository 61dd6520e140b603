/* SPDX-License-Identifier: MIT */
/*
 * The context's loop: its lock, one pass of it (rrpci_loop_pass), who runs
 * it, the wake-up from other threads, polling under the governor, and the
 * loop thread.
 *
 * Who runs the loop.  Exactly one thread at a time is its runner (in_run,
 * owner): it waits on the loop's fd without the context lock and invokes
 * callbacks with it.  In driven mode the runner is the application inside
 * rrpc_ctx_progress, or a thread in a blocking call while no one else runs
 * it.  In thread mode it is the loop thread, which sleeps on an epoll set
 * of its own (thread_fd) holding the loop's fd; a thread making a blocking
 * call while the loop thread sleeps takes the loop over (rrpci_loop_take):
 * it removes the loop's fd from thread_fd, so the loop thread sleeps on
 * through the traffic, and waits on the loop's fd itself, so its answer
 * wakes it directly, as in driven mode, instead of waking the loop thread
 * that would then wake it.  It hands the loop back when its operation is
 * done (rrpci_loop_give_back).  A loop thread that polls instead of
 * sleeping (after traffic, under the governor) lets go of the lock between
 * two passes whenever a thread waits for it; a blocking call can take the
 * loop over then too, and polls for its own answer.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "core/core.h"

/* ---- the lock ------------------------------------------------------------ */

/* Tries for the lock for about @us without sleeping: a thread-mode loop
 * holds it for the few microseconds left of its pass after a callback, and
 * a thread calling in right then (the next blocking call, most often)
 * would otherwise sleep and be woken for it. */
#define RRPCI_LOCK_SPIN_US 20
/* Ready watchers invoked per pass at most: rrpc_ctx_progress does a
 * bounded amount of work, and the loop gets back to timers and sleep. */
#define RRPCI_PASS_MAX_CALLBACKS 256

bool rrpci_spin(bool (*ready)(void *arg), void *arg, int us)
{
    if (us <= 0)
        return false;
    /* Most often ready at once (a lock nobody holds): no clock read then. */
    if (ready(arg))
        return true;
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

/* The runner lets go of the lock (held once) while it waits, and takes it
 * again after; a polling runner would re-take the (unfair) mutex at once
 * and starve the threads calling in: it lets them through first. */
void rrpci_runner_release(rrpc_ctx *ctx)
{
    pthread_mutex_unlock(&ctx->lock);
}

void rrpci_runner_acquire(rrpc_ctx *ctx)
{
    while (atomic_load(&ctx->lock_waiters) > 0)
        sched_yield();
    pthread_mutex_lock(&ctx->lock);
}

bool rrpci_in_callback(rrpc_ctx *ctx)
{
    /* Read without the lock: only this thread can make it true for itself. */
    return __atomic_load_n(&ctx->in_run, __ATOMIC_RELAXED) &&
           pthread_equal(__atomic_load_n(&ctx->owner, __ATOMIC_RELAXED), pthread_self());
}

/* in_run, owner and thread_mode change under the lock but are read without
 * it too (rrpci_in_callback, rrpci_lock): atomic stores, so those reads are
 * not data races. */
static void run_enter(rrpc_ctx *ctx)
{
    __atomic_store_n(&ctx->owner, pthread_self(), __ATOMIC_RELAXED);
    __atomic_store_n(&ctx->in_run, ctx->in_run + 1, __ATOMIC_RELAXED);
}

static void run_leave(rrpc_ctx *ctx)
{
    __atomic_store_n(&ctx->in_run, ctx->in_run - 1, __ATOMIC_RELAXED);
}

void rrpci_loop_inherit(rrpc_ctx *ctx)
{
    /* The relieved thread's pass is this thread's now, and over. */
    __atomic_store_n(&ctx->owner, pthread_self(), __ATOMIC_RELAXED);
    ctx->defer_handlers = false;
    run_leave(ctx);
}

/* Work the next pass must do without waiting: ready watchers, due timers,
 * sent asyncs, credit owed, or polling after traffic.  For a driven
 * context's fd (@for_fd) polling counts only where a transport left work
 * that wakes no fd (an unarmed CQ): polling for what the fd shows anyway
 * would make an application that waits on the fd alone (asyncio) spin its
 * own loop through the window; one that asks rrpc_ctx_timeout is told 0
 * and polls. */
static bool work_pending(rrpc_ctx *ctx, bool for_fd)
{
    return (ctx->gov.polling && (!for_fd || ctx->gov.unarmed)) ||
           !rrpci_list_empty(&ctx->credit_dirty) || rrpci_evloop_has_pending(ctx->ev) ||
           rrpci_relief_queued(ctx); /* a relieved pass's rest: the next pass runs it */
}

static int timeout_ms(rrpc_ctx *ctx, bool pending)
{
    if (pending)
        return 0;
    double t = rrpci_evloop_next_timer(ctx->ev);
    if (t < 0)
        return -1;
    double ms = t * 1000.0;
    return ms <= 0 ? 0 : ms >= 86400000.0 ? 86400000 : (int)ms + (ms > (int)ms);
}

int rrpci_loop_timeout(rrpc_ctx *ctx)
{
    return timeout_ms(ctx, work_pending(ctx, false));
}

int rrpci_loop_fd_timeout(rrpc_ctx *ctx)
{
    return timeout_ms(ctx, work_pending(ctx, true));
}

_Thread_local rrpc_ctx *rrpci_sync_starting;

void rrpci_unlock(rrpc_ctx *ctx)
{
    /* A blocking call starting its operation wakes nobody: rrpci_sync_end
     * runs the loop itself, or wakes it before it sleeps (a wake-up here
     * would get the loop thread up just to find the loop taken over). */
    bool other = !rrpci_in_callback(ctx) && rrpci_sync_starting != ctx;
    /* Driven and nobody in the loop: its next run sees the work; the
     * application's fd is made to say so only when the work cannot wait
     * for the next timer (the timer fd is re-armed to that). */
    bool idle_driven = other && !ctx->in_run && !ctx->thread_mode;
    bool wake = other && (!idle_driven || work_pending(ctx, true));
    if (idle_driven)
        rrpci_driven_rearm(ctx);
    rrpci_flag_waiters_wake(ctx);
    pthread_mutex_unlock(&ctx->lock);
    /* Another thread changed what the runner waits for (a timer, work,
     * a completion it waits for): make it look. */
    if (wake)
        rrpci_async_send(ctx->ev, &ctx->wake);
}

void rrpci_ctx_wake(rrpc_ctx *ctx, struct rrpci_async *a)
{
    rrpci_async_send(ctx->ev, a);
}

static void wake_cb(struct rrpci_async *a)
{
    /* Its running is the point: the runner is out of its wait. */
}

/* ---- polling under the governor ------------------------------------------ */

static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t thread_id(void)
{
    return (uint64_t)pthread_self();
}

static double now_s(rrpc_ctx *ctx)
{
    return rrpci_evloop_now(ctx->ev);
}

/* The thread's CPU clock where the governor reads it: a system call, made
 * once per stretch of polling, not on every frame that extends it. */
static double cpu_for_request(rrpc_ctx *ctx)
{
    return rrpci_gov_wants_cpu(&ctx->gov) ? thread_cpu_s() : 0;
}

bool rrpci_ctx_busy(rrpc_ctx *ctx, unsigned us)
{
    return rrpci_gov_request(&ctx->gov, now_s(ctx), us, cpu_for_request(ctx), thread_id(), true);
}

void rrpci_ctx_activity(rrpc_ctx *ctx)
{
    if (ctx->gov.window_us > 0)
        rrpci_gov_activity(&ctx->gov, now_s(ctx), cpu_for_request(ctx), thread_id());
}

void rrpci_ctx_activity_fresh(rrpc_ctx *ctx)
{
    if (ctx->gov.window_us > 0)
        rrpci_evloop_now_update(ctx->ev);
    rrpci_ctx_activity(ctx);
}

/*
 * A polling thread yields its CPU on every iteration: the work it waits for
 * often needs that CPU, the peer process on the same host, or the kernel's
 * own workers (Soft-RoCE's, the network stack's), and without the yield they
 * waited for the scheduler to preempt the poller.  Measured with tcp
 * loopback and one CPU-bound process beside it on 2 vCPUs: 64 B round trip
 * with polling p50 69 us, p75 3,938 us without the yield; p50 31 us, p99
 * 106 us with it (polling off: 23 us).  With nothing else runnable
 * sched_yield returns at once.
 */
static void rrpci_busy_yield(void)
{
    sched_yield();
}

bool rrpci_ctx_polling(rrpc_ctx *ctx)
{
    return ctx->gov.polling && !rrpci_gov_held(&ctx->gov, now_s(ctx));
}

/* Each transport's busy_poll once: the completions handled, or -1 when no
 * transport has anything left unarmed. */
static int transports_poll(rrpc_ctx *ctx, bool arm)
{
    int found = -1;
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++) {
        if (!ctx->tops[i] || !ctx->tops[i]->busy_poll)
            continue;
        int n = ctx->tops[i]->busy_poll(ctx, arm);
        if (n >= 0)
            found = (found < 0 ? 0 : found) + n;
    }
    return found;
}

/* The loop's time, taken afresh (polling measures its own slices). */
static double fresh_now(rrpc_ctx *ctx)
{
    rrpci_evloop_now_update(ctx->ev);
    return now_s(ctx);
}

/* Polling ends: the transports arm what they left unarmed. */
static void polling_end(rrpc_ctx *ctx)
{
    rrpci_gov_stop(&ctx->gov);
    (void)transports_poll(ctx, true);
}

/* After a pass while polling: charges it, and either ends polling (the
 * transports arm what they polled) or, after a pass that found nothing,
 * looks at their completions for up to a slice (RRPCI_GOV_SLICE) before the
 * next pass.  After a pass that found work (it dispatched something, or
 * the slice before it found a completion) it looks once, no slice: what was
 * found may be the answer a blocking call waits for (read from an armed
 * CQ's event, say), and the slice would keep that call polling for nothing,
 * 50 us after its answer; the one look keeps the unarmed CQs served while
 * fd events keep every pass busy. */
static void poll_step(rrpc_ctx *ctx)
{
    bool found = ctx->gov.found; /* since the last charge, which clears it */
    double now = fresh_now(ctx);
    bool held = rrpci_gov_charge(&ctx->gov, now, thread_cpu_s(), thread_id());
    if (!rrpci_gov_continue(&ctx->gov, now, held)) {
        polling_end(ctx);
        return;
    }
    if (found) {
        if (transports_poll(ctx, false) > 0)
            rrpci_gov_found(&ctx->gov);
        return;
    }
    double end = now + RRPCI_GOV_SLICE;
    int n;
    while ((n = transports_poll(ctx, false)) == 0 && rrpci_ctx_polling(ctx) &&
           fresh_now(ctx) < end)
        rrpci_busy_yield();
    if (n > 0)
        rrpci_gov_found(&ctx->gov);
    rrpci_busy_yield();
}

/* ---- one pass ------------------------------------------------------------ */

/* After each callback of the loop thread's pass: the handlers it queued
 * run (relief.c), before the next watcher, so the order in which the loop
 * serves the classes holds for them too.  False once this thread was
 * relieved meanwhile: it no longer runs the loop, and touches it no more. */
static bool after_callback(void *arg)
{
    rrpc_ctx *ctx = arg;
    return !rrpci_relief_queued(ctx) || rrpci_relief_run(ctx);
}

/* Collects what is ready without waiting and invokes it (the runner, the
 * lock held, in_run set).  False when this thread was relieved of the loop
 * in a handler (the loop thread's pass only): the pass is no longer its. */
static bool pass_dispatch(rrpc_ctx *ctx, bool collect)
{
    if (collect)
        (void)rrpci_evloop_wait(ctx->ev, 0);
    bool defer = ctx->defer_handlers;
    unsigned n = rrpci_evloop_dispatch(ctx->ev, RRPCI_PASS_MAX_CALLBACKS,
                                       defer ? after_callback : NULL, ctx);
    if (defer && !rrpci_relief_runs_loop(ctx))
        return false;
    rrpci_flag_waiters_wake(ctx);
    if (ctx->gov.polling) {
        if (n > 0)
            rrpci_gov_found(&ctx->gov);
        poll_step(ctx);
        if (defer && !after_callback(ctx)) /* requests the polled completions held */
            return false;
    }
    return true;
}

/* Before a runner waits: credit owed goes out, and how long it may wait,
 * at most @max_ms (-1: no limit). */
static int pass_prepare(rrpc_ctx *ctx, int max_ms)
{
    rrpci_credit_return(ctx);
    int ms = rrpci_loop_timeout(ctx);
    if (max_ms >= 0 && (ms < 0 || ms > max_ms))
        ms = max_ms;
    return ms;
}

/* A runner that does not wait (polling, or work ready) lets the threads
 * waiting for the lock through between two passes: without it a polling
 * runner would hold the lock for as long as it polls.  The loop thread
 * (@loop_thread) says meanwhile that it yielded: a blocking call may take
 * the loop over. */
static bool let_waiters_through(rrpc_ctx *ctx, bool loop_thread)
{
    if (atomic_load(&ctx->lock_waiters) == 0)
        return false;
    if (loop_thread)
        atomic_store_explicit(&ctx->loop_yielded, true, memory_order_relaxed);
    rrpci_runner_release(ctx);
    rrpci_runner_acquire(ctx);
    if (loop_thread)
        atomic_store_explicit(&ctx->loop_yielded, false, memory_order_relaxed);
    return true;
}

void rrpci_loop_pass(rrpc_ctx *ctx, int max_ms)
{
    run_enter(ctx);
    /* A blocking call that took the loop over from a relieved pass runs
     * what that pass queued first, in place (it runs handlers so). */
    if (rrpci_relief_queued(ctx))
        rrpci_relief_flush(ctx);
    int ms = pass_prepare(ctx, max_ms);
    if (ms != 0) {
        /* in_run stays set: nobody else runs the loop while this waits */
        rrpci_runner_release(ctx);
        (void)rrpci_evloop_wait(ctx->ev, ms);
        rrpci_runner_acquire(ctx);
    } else {
        (void)let_waiters_through(ctx, false); /* in_run stays set here too */
    }
    (void)pass_dispatch(ctx, ms == 0); /* no relief here: always true */
    run_leave(ctx);
}

/* ---- the loop thread and blocking calls that take the loop over ---------- */

/* A wait's timeout is whole milliseconds, rounded up: the loop thread may
 * wake up to this late for a timer (s). */
#define RRPCI_WAIT_SLACK 0.001

/* The loop thread's wait on thread_fd, at most @ms, the lock let go. */
static void thread_wait(rrpc_ctx *ctx, int ms)
{
    ctx->sleep_until = ms < 0 ? -1 : rrpci_evloop_now(ctx->ev) + ms / 1000.0;
    atomic_store_explicit(&ctx->loop_sleeping, true, memory_order_relaxed);
    rrpci_runner_release(ctx);
    struct epoll_event e[2];
    (void)epoll_wait(ctx->thread_fd, e, 2, ms);
    rrpci_runner_acquire(ctx);
    ctx->thread_wakeups++;
    atomic_store_explicit(&ctx->loop_sleeping, false, memory_order_relaxed);
    uint64_t v;
    (void)!read(ctx->thread_ctl_fd, &v, sizeof(v));
}

/* One pass of the loop thread.  While it waits, or lets the threads
 * waiting for the lock through, a blocking call may take the loop over:
 * then it collects nothing. */
static void thread_pass(rrpc_ctx *ctx)
{
    run_enter(ctx);
    int ms = pass_prepare(ctx, -1);
    run_leave(ctx);
    if (ms != 0) {
        thread_wait(ctx, ms);
        if (ctx->taken || ctx->stopping)
            return;
    } else if (let_waiters_through(ctx, true) && (ctx->taken || ctx->stopping)) {
        return;
    }
    run_enter(ctx);
    /* Handlers queue up to run after each callback, off the receive path
     * (relief.c), where the loop can move to another thread should one run
     * long. */
    ctx->defer_handlers = ctx->relief != NULL;
    if (!pass_dispatch(ctx, true))
        return; /* relieved: the thread that took the loop over ended the pass */
    ctx->defer_handlers = false;
    run_leave(ctx);
}

/* While a blocking call runs the loop: sleep until it gives it back (or the
 * context stops), or until the next timer, which only bounds a missed
 * wake-up (the caller runs the timers). */
static void thread_stand_by(rrpc_ctx *ctx)
{
    double t = rrpci_evloop_next_timer(ctx->ev);
    thread_wait(ctx, t < 0 ? -1 : (int)(t * 1000.0) + 1);
}

void rrpci_loop_thread_body(rrpc_ctx *ctx)
{
    while (!ctx->stopping) {
        if (!rrpci_relief_runs_loop(ctx)) {
            rrpci_relief_watch(ctx); /* until it runs the loop, or the context stops */
            continue;
        }
        if (ctx->taken) {
            thread_stand_by(ctx);
            continue;
        }
        thread_pass(ctx);
    }
}

void *rrpci_loop_thread(void *arg)
{
    rrpc_ctx *ctx = arg;
    rrpci_lock(ctx);
    rrpci_loop_thread_body(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

int rrpci_loop_thread_init(rrpc_ctx *ctx)
{
    ctx->thread_fd = epoll_create1(EPOLL_CLOEXEC);
    ctx->thread_ctl_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event e1 = {.events = EPOLLIN, .data.u32 = 0};
    struct epoll_event e2 = {.events = EPOLLIN, .data.u32 = 1};
    if (ctx->thread_fd < 0 || ctx->thread_ctl_fd < 0 ||
        epoll_ctl(ctx->thread_fd, EPOLL_CTL_ADD, rrpci_evloop_fd(ctx->ev), &e1) < 0 ||
        epoll_ctl(ctx->thread_fd, EPOLL_CTL_ADD, ctx->thread_ctl_fd, &e2) < 0)
        return -errno;
    return 0;
}

void rrpci_loop_thread_fini(rrpc_ctx *ctx)
{
    if (ctx->thread_fd >= 0)
        close(ctx->thread_fd);
    if (ctx->thread_ctl_fd >= 0)
        close(ctx->thread_ctl_fd);
    ctx->thread_fd = ctx->thread_ctl_fd = -1;
}

static void thread_ctl_kick(rrpc_ctx *ctx)
{
    uint64_t one = 1;
    (void)!write(ctx->thread_ctl_fd, &one, sizeof(one));
}

void rrpci_loop_thread_stop(rrpc_ctx *ctx)
{
    thread_ctl_kick(ctx);
    rrpci_async_send(ctx->ev, &ctx->wake);
}

bool rrpci_loop_take(rrpc_ctx *ctx)
{
    /* Only from a thread-mode loop asleep in its wait or between two
     * passes (it let this thread through), never from a callback (the
     * caller's own pass would nest). */
    if (!ctx->thread_mode || ctx->taken || ctx->stopping ||
        !(atomic_load_explicit(&ctx->loop_sleeping, memory_order_relaxed) ||
          atomic_load_explicit(&ctx->loop_yielded, memory_order_relaxed)) ||
        rrpci_in_callback(ctx))
        return false;
    if (epoll_ctl(ctx->thread_fd, EPOLL_CTL_DEL, rrpci_evloop_fd(ctx->ev), NULL) < 0)
        return false;
    ctx->taken = true;
    ctx->takeovers++;
    return true;
}

void rrpci_loop_give_back(rrpc_ctx *ctx)
{
    struct epoll_event e1 = {.events = EPOLLIN, .data.u32 = 0};
    ctx->taken = false;
    /* Polling served the caller, who waited for its answer: the loop
     * thread sleeps on armed fds instead of polling on beside the caller's
     * next call. */
    if (ctx->gov.polling)
        polling_end(ctx);
    /* Back in the loop thread's set: it wakes if the loop's fd has
     * something.  A timer due before the loop thread's wait ends, or work
     * that does not show in the fd, needs a kick.  Not a timer due within
     * the wait's own rounding (RRPCI_WAIT_SLACK): a timer restarted at every
     * call (a deadline, an idle timer) moves by microseconds, and kicking
     * for that woke the loop thread after a third of all calls. */
    bool kick = epoll_ctl(ctx->thread_fd, EPOLL_CTL_ADD, rrpci_evloop_fd(ctx->ev), &e1) < 0 ||
                work_pending(ctx, false);
    double t = rrpci_evloop_next_timer(ctx->ev);
    if (t >= 0 && (ctx->sleep_until < 0 ||
                   rrpci_evloop_now(ctx->ev) + t + RRPCI_WAIT_SLACK < ctx->sleep_until))
        kick = true;
    if (kick)
        thread_ctl_kick(ctx);
}

/* ---- timers for the core and the transports ------------------------------ */

void rrpci_timer_init(rrpc_ctx *ctx, struct rrpci_timer *t, void (*cb)(struct rrpci_timer *t),
                      double after, double repeat)
{
    rrpci_timer_init_loop(ctx->ev, t, cb, after, repeat);
}

double rrpci_ctx_now(rrpc_ctx *ctx)
{
    return rrpci_evloop_now(ctx->ev);
}

int rrpci_loop_init(rrpc_ctx *ctx)
{
    ctx->thread_fd = ctx->thread_ctl_fd = ctx->timer_fd = -1;
    int r = rrpci_evloop_init(&ctx->ev);
    if (r < 0)
        return r;
    rrpci_async_init(&ctx->wake, wake_cb);
    ctx->wake.data = ctx;
    rrpci_async_start(ctx->ev, &ctx->wake);
    rrpci_gov_init(&ctx->gov, ctx->cfg.busy_poll_us, ctx->cfg.busy_poll_budget_pct,
                   ctx->cfg.busy_poll_min_share_pct);
    return 0;
}

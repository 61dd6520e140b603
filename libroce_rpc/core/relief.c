/* SPDX-License-Identifier: MIT */
/*
 * Relief for a long handler on the loop thread (thread mode).
 *
 * A handler registered without RRPC_HANDLER_ON_WORKER runs on the thread
 * that runs the loop; one that works long (a sleep, a computation, a
 * blocking read of its own) used to hold every connection's reads and
 * answers until it returned.  In thread mode the loop thread runs such a
 * handler after the callback that read its request instead, from a queue,
 * with a copy of the
 * request's payload and with the context lock let go: no transport's
 * receive path is on its stack then, so the loop can move to another
 * thread.  A watcher thread looks at each handler that runs; one that has
 * run for RRPC_HANDLER_RELIEF_MS is relieved: the watcher takes the loop
 * over and runs it from then on, so other calls (another method, a method
 * that does not exist, a refusal) are read and answered meanwhile.  When
 * the long handler returns, its thread ends its job (the request's credit
 * goes back) and becomes a watcher.  The threads are the loop thread, one
 * watcher started with it, and up to RRPCI_RELIEF_THREADS more, started
 * when a relief leaves no watcher; a handler that starts while none is
 * free holds the loop as before.
 *
 * Callbacks run one at a time, as in docs/architecture.md, except beside a
 * relieved handler: that one runs on while the loop's next callbacks run
 * on the thread that took the loop over.
 *
 * Not in driven mode (no thread of the library's own may run the
 * application's loop), not for a blocking call's pass (rrpci_loop_pass:
 * the caller runs the handler as before), not for a payload over
 * RRPCI_RELIEF_COPY_MAX (run in place, not copied), not for
 * RRPC_HANDLER_CREDIT_ON_ANSWER methods (they answer later anyway).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include <pthread.h>

#include "core/core.h"

/* A watcher that saw no handler start for this many RRPC_HANDLER_RELIEF_MS
 * sleeps until the next one starts (the runner wakes it then). */
#define RRPCI_RELIEF_IDLE_AFTER 100

struct rrpci_relief {
    /* Taken after the context lock, never before. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t runner; /* the thread that runs the loop (also under the context lock) */
    /* The handler the runner runs now: seq numbers them, start is when it
     * started (rrpci_stats_now), relieved the last one relieved. */
    uint64_t seq, relieved;
    bool running;
    double start;
    unsigned idle;     /* watchers waiting for a handler to start */
    unsigned watchers; /* threads watching (idle or timing one) */
    bool stopping;
    /* The handlers queued by the runner's pass; under the context lock. */
    struct rrpci_job *head, *tail;
    unsigned nthreads; /* started watchers, in threads[] */
    pthread_t threads[RRPCI_RELIEF_THREADS + 1];
};

_Thread_local rrpc_ctx *rrpci_relief_handler;

static void *watcher_main(void *arg)
{
    rrpc_ctx *ctx = arg;
    rrpci_lock(ctx);
    rrpci_loop_thread_body(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

/* One more watcher (the context lock held). */
static void spawn(rrpc_ctx *ctx)
{
    struct rrpci_relief *r = ctx->relief;
    if (r->nthreads > RRPCI_RELIEF_THREADS)
        return;
    int e = pthread_create(&r->threads[r->nthreads], NULL, watcher_main, ctx);
    if (e) {
        RRPCI_LOG(ctx, LOG_WARNING, "cannot start a loop relief thread: %s", strerror(e));
        return;
    }
    r->nthreads++;
}

int rrpci_relief_start(rrpc_ctx *ctx)
{
    if (ctx->cfg.handler_relief_ms <= 0)
        return 0;
    struct rrpci_relief *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->runner = ctx->thread;
    ctx->relief = r;
    spawn(ctx);
    return 0;
}

void rrpci_relief_stop(rrpc_ctx *ctx)
{
    struct rrpci_relief *r = ctx->relief;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void rrpci_relief_join(rrpc_ctx *ctx)
{
    struct rrpci_relief *r = ctx->relief;
    if (!r)
        return;
    for (unsigned i = 0; i < r->nthreads; i++)
        pthread_join(r->threads[i], NULL);
    /* A job queued by the last pass and never run is answered E_CLOSED;
     * under the lock, as a blocking call may still run the loop and read
     * ctx->relief there. */
    rrpci_lock(ctx);
    struct rrpci_job *left = r->head;
    r->head = r->tail = NULL;
    ctx->relief = NULL;
    rrpci_jobs_drop(ctx, left);
    pthread_mutex_unlock(&ctx->lock);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

bool rrpci_relief_runs_loop(rrpc_ctx *ctx)
{
    struct rrpci_relief *r = ctx->relief;
    return !r || pthread_equal(r->runner, pthread_self());
}

bool rrpci_relief_defer(rrpc_ctx *ctx, rrpc_request *req, rrpc_conn *c, int cls,
                        rrpc_handler_fn fn, void *user, const uint8_t *p, size_t len,
                        const char *method, uint64_t method_id)
{
    struct rrpci_relief *r = ctx->relief;
    struct rrpci_job *j = rrpci_job_new(req, c, cls, fn, user, p, len, method);
    if (!j) {
        static const char why[] = "server out of memory";
        rrpci_respond_now(req, -ENOMEM, why, sizeof(why) - 1);
        return false;
    }
    j->method_id = method_id;
    if (r->tail)
        r->tail->next = j;
    else
        r->head = j;
    r->tail = j;
    return true;
}

bool rrpci_relief_queued(rrpc_ctx *ctx)
{
    return ctx->relief && ctx->relief->head;
}

/* Runs the queued handlers; @may_move: with the lock let go, watched, so
 * the loop may move to a watcher meanwhile (false: in place, as a handler
 * on the receive path runs).  False when this thread was relieved. */
static bool run_queued(rrpc_ctx *ctx, bool may_move)
{
    struct rrpci_relief *r = ctx->relief;
    struct rrpci_job *j;
    while ((j = r->head)) {
        r->head = j->next;
        if (!r->head)
            r->tail = NULL;
        bool lost = false;
        if (rrpci_request_should_run(j->req, j->method)) {
            double t0 = rrpci_stats_now();
            if (!may_move) {
                j->fn(j->req, j->data, j->len, j->user);
                rrpci_handler_took(ctx, j->method_id, rrpci_stats_now() - t0, false);
                rrpci_job_end(ctx, j);
                continue;
            }
            pthread_mutex_lock(&r->mu);
            uint64_t seq = ++r->seq;
            r->running = true;
            r->start = t0;
            if (r->idle)
                pthread_cond_signal(&r->cv);
            pthread_mutex_unlock(&r->mu);
            rrpci_runner_release(ctx);
            rrpci_relief_handler = ctx; /* a blocking call from it is refused, relieved or not */
            j->fn(j->req, j->data, j->len, j->user);
            rrpci_relief_handler = NULL;
            rrpci_runner_acquire(ctx);
            pthread_mutex_lock(&r->mu);
            if (r->seq == seq)
                r->running = false; /* not another runner's handler, after a relief */
            pthread_mutex_unlock(&r->mu);
            /* relieved by any relief since (not only the last one) */
            lost = !pthread_equal(r->runner, pthread_self());
            rrpci_handler_took(ctx, j->method_id, rrpci_stats_now() - t0, lost);
        }
        rrpci_job_end(ctx, j);
        if (lost)
            return false; /* the pass is the new runner's: it ended it */
    }
    return true;
}

bool rrpci_relief_run(rrpc_ctx *ctx)
{
    return run_queued(ctx, true);
}

void rrpci_relief_flush(rrpc_ctx *ctx)
{
    (void)run_queued(ctx, false);
}

/* Waits on the condition for at most @s seconds (mu held). */
static void wait_for(struct rrpci_relief *r, double s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns = (long long)t.tv_nsec + (long long)(s * 1e9) + 1;
    t.tv_sec += (time_t)(ns / 1000000000LL);
    t.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(&r->cv, &r->mu, &t);
}

/* The watcher takes the loop over from the handler @seq (the context lock
 * and mu held, the handler still running): it runs the loop from now on. */
static void relieve(rrpc_ctx *ctx, struct rrpci_relief *r, uint64_t seq)
{
    r->relieved = seq;
    r->runner = pthread_self();
    r->watchers--;
    bool none_left = r->watchers == 0;
    pthread_mutex_unlock(&r->mu);
    ctx->guard.reliefs++;
    rrpci_loop_inherit(ctx);
    if (none_left)
        spawn(ctx); /* so the next long handler is relieved too */
}

void rrpci_relief_watch(rrpc_ctx *ctx)
{
    struct rrpci_relief *r = ctx->relief;
    double after = ctx->cfg.handler_relief_ms / 1e3;
    pthread_mutex_lock(&r->mu);
    r->watchers++;
    pthread_mutex_unlock(&ctx->lock);
    while (!r->stopping) {
        double now = rrpci_stats_now();
        if (!r->running || r->relieved == r->seq) {
            /* While handlers keep starting, a look every RRPC_HANDLER_RELIEF_MS
             * (the runner wakes no watcher for each); idle, a wake-up when
             * the next one starts. */
            if (now - r->start < RRPCI_RELIEF_IDLE_AFTER * after) {
                wait_for(r, after);
                continue;
            }
            r->idle++;
            pthread_cond_wait(&r->cv, &r->mu);
            r->idle--;
            continue;
        }
        uint64_t seq = r->seq;
        double left = r->start + after - now;
        if (left > 0) {
            wait_for(r, left);
            continue; /* looked at again: it may have ended, or another began */
        }
        pthread_mutex_unlock(&r->mu);
        rrpci_lock(ctx);
        pthread_mutex_lock(&r->mu);
        if (!r->stopping && !ctx->stopping && r->running && r->seq == seq &&
            r->relieved != seq) {
            relieve(ctx, r, seq);
            return; /* the runner now, the context lock held */
        }
        pthread_mutex_unlock(&ctx->lock);
    }
    r->watchers--;
    pthread_mutex_unlock(&r->mu);
    rrpci_lock(ctx);
}

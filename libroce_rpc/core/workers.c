/* SPDX-License-Identifier: MIT */
/* Handler workers: the threads that run the handlers registered with
 * RRPC_HANDLER_ON_WORKER, so a handler's work on one class never holds the
 * loop, and with it every other class's reads and answers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <pthread.h>

#include "core/core.h"

struct rrpci_workers {
    rrpc_ctx *ctx;
    pthread_mutex_t mu; /* the queues; taken after the context lock, never before */
    pthread_cond_t cv;
    struct rrpci_job *head[RRPCI_MAX_CLASSES], *tail[RRPCI_MAX_CLASSES];
    size_t bytes; /* payload bytes queued or being served */
    bool stopping;
    unsigned n;
    pthread_t threads[];
};

/* The next job: the first class in the scheduler's priority order that has
 * one (control, then low_latency, ...), so a queue of bulk work never
 * delays a low-latency handler that waits for a worker. */
static struct rrpci_job *take(struct rrpci_workers *w)
{
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++) {
        struct rrpci_job *j = w->head[i];
        if (j) {
            w->head[i] = j->next;
            if (!w->head[i])
                w->tail[i] = NULL;
            return j;
        }
    }
    return NULL;
}

struct rrpci_job *rrpci_job_new(rrpc_request *req, rrpc_conn *c, int cls, rrpc_handler_fn fn,
                               void *user, const uint8_t *p, size_t len, const char *method)
{
    size_t mlen = strlen(method) + 1;
    struct rrpci_job *j = malloc(sizeof(*j) + len + mlen);
    if (!j)
        return NULL;
    *j = (struct rrpci_job){.req = req, .conn = c, .cls = cls, .fn = fn, .user = user, .len = len};
    if (len)
        memcpy(j->data, p, len);
    memcpy(j->data + len, method, mlen);
    j->method = (const char *)j->data + len;
    rrpci_conn_ref(c);
    return j;
}

/* The job is over (served, or dropped): the request's credit goes back now,
 * which is what bounds the jobs a peer can queue to its credit window. */
void rrpci_job_end(rrpc_ctx *ctx, struct rrpci_job *j)
{
    rrpci_lock(ctx);
    rrpc_conn *c = j->conn;
    if (rrpci_conn_wire_open(c)) {
        if (rrpci_conn_backlogged(c))
            c->cls[j->cls].held++;
        else
            rrpci_conn_consumed(c, j->cls);
    }
    rrpci_conn_unref(c);
    rrpci_unlock(ctx); /* wakes the loop: the credit goes out from there */
    free(j);
}

void rrpci_jobs_drop(rrpc_ctx *ctx, struct rrpci_job *list)
{
    while (list) {
        struct rrpci_job *j = list;
        list = j->next;
        static const char why[] = "the server's context is being destroyed";
        rrpci_respond_now(j->req, RRPC_E_CLOSED, why, sizeof(why) - 1);
        rrpci_job_end(ctx, j);
    }
}

static void *worker_main(void *arg)
{
    struct rrpci_workers *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        struct rrpci_job *j = take(w);
        if (!j) {
            if (w->stopping)
                break;
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        if (rrpci_request_should_run(j->req, j->method))
            j->fn(j->req, j->data, j->len, j->user);
        pthread_mutex_lock(&w->mu); /* the payload is no longer read */
        w->bytes -= j->len;
        pthread_mutex_unlock(&w->mu);
        rrpci_job_end(w->ctx, j);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int rrpci_workers_start(rrpc_ctx *ctx)
{
    if (ctx->workers)
        return 0;
    unsigned n = (unsigned)ctx->cfg.handler_threads;
    struct rrpci_workers *w = calloc(1, sizeof(*w) + n * sizeof(pthread_t));
    if (!w)
        return -ENOMEM;
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (w->n = 0; w->n < n; w->n++) {
        int r = -pthread_create(&w->threads[w->n], NULL, worker_main, w);
        if (r) {
            ctx->workers = w; /* for the stop below */
            rrpci_workers_stop(ctx);
            return rrpci_set_error(ctx, r, "cannot start a handler worker thread: %s",
                                   rrpc_strerror(r));
        }
    }
    ctx->workers = w;
    RRPCI_LOG(ctx, LOG_INFO, "%u handler worker threads started", n);
    return 0;
}

bool rrpci_workers_submit(rrpc_ctx *ctx, rrpc_request *req, rrpc_conn *c, int cls,
                          rrpc_handler_fn fn, void *user, const uint8_t *p, size_t len,
                          const char *method)
{
    struct rrpci_workers *w = ctx->workers;
    size_t cap = (size_t)ctx->cfg.handler_queue_bytes;
    pthread_mutex_lock(&w->mu);
    size_t held = w->bytes;
    pthread_mutex_unlock(&w->mu);
    /* One request is always taken, whatever its size (RRPC_MAX_MSG bounds it). */
    bool full = held > 0 && held + len > cap;
    struct rrpci_job *j = full ? NULL : rrpci_job_new(req, c, cls, fn, user, p, len, method);
    if (!j) {
        char msg[240];
        int n = full ? snprintf(msg, sizeof(msg),
                                "call \"%s\": the server's handler workers hold %zu bytes of "
                                "requests and this one has %zu (RRPC_HANDLER_QUEUE_BYTES=%zu "
                                "there): try again later",
                                method, held, len, cap)
                     : snprintf(msg, sizeof(msg),
                                "call \"%s\": server out of memory for a %zu-byte request",
                                method, len);
        rrpci_respond_now(req, full ? RRPC_E_LIMIT : -ENOMEM, msg, (size_t)n);
        return false;
    }
    pthread_mutex_lock(&w->mu);
    w->bytes += len;
    if (w->tail[cls])
        w->tail[cls]->next = j;
    else
        w->head[cls] = j;
    w->tail[cls] = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return true;
}

void rrpci_workers_stop(rrpc_ctx *ctx)
{
    struct rrpci_workers *w = ctx->workers;
    if (!w)
        return;
    /* Jobs not begun are dropped: their callers fail with the connection,
     * which the context closes next. */
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    struct rrpci_job *drop = NULL;
    for (struct rrpci_job *j; (j = take(w));) {
        j->next = drop;
        drop = j;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (unsigned i = 0; i < w->n; i++)
        pthread_join(w->threads[i], NULL);
    rrpci_jobs_drop(ctx, drop);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    ctx->workers = NULL;
}

/* SPDX-License-Identifier: MIT */
/* Contexts: creation and destruction, the loop thread's start, and the
 * transports a context uses.  Driven mode is in driven.c. */
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
#include "transport/module.h"
#include "util/reserved.h"

RRPC_API int rrpc_ctx_create(rrpc_ctx **ret_ctx)
{
    return rrpc_ctx_create_with(NULL, ret_ctx);
}

RRPC_API int rrpc_ctx_create_with(const rrpc_config *cfg, rrpc_ctx **ret_ctx)
{
    if (!ret_ctx)
        return -EINVAL;
    struct rrpci_config conf = {0};
    int r = rrpci_config_resolve(cfg, &conf);
    if (r < 0)
        return r;
    rrpc_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    ctx->cfg = conf;
    memcpy(ctx->cls, rrpci_class_defaults, sizeof(ctx->cls));
    ctx->log_max = ctx->cfg.log_level;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &a);
    pthread_mutexattr_destroy(&a);
    rrpci_list_init(&ctx->conns);
    rrpci_list_init(&ctx->grant_list);
    rrpci_list_init(&ctx->listeners);
    rrpci_list_init(&ctx->credit_dirty);
    rrpci_list_init(&ctx->owned);

    if ((r = rrpci_loop_init(ctx)) < 0) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return r;
    }
    if ((r = rrpci_serve_start(ctx)) < 0) {
        rrpc_ctx_destroy(ctx);
        return r;
    }
    *ret_ctx = ctx;
    return 0;
}

RRPC_API const char *rrpc_version(void)
{
    return RRPC_VERSION_STRING;
}

RRPC_API int rrpc_ctx_start_thread(rrpc_ctx *ctx)
{
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->thread_mode) {
        r = rrpci_set_error(ctx, -EBUSY, "the context's loop thread is already running");
    } else if (ctx->in_run) {
        /* One runner at a time. */
        r = rrpci_set_error(ctx, -EBUSY,
                            "a thread is running this context's loop (rrpc_ctx_progress, a "
                            "callback, or a blocking call driving it): start the loop thread "
                            "between two progress calls");
    } else if ((r = rrpci_loop_thread_init(ctx)) < 0) {
        rrpci_loop_thread_fini(ctx);
        rrpci_set_error(ctx, r, "cannot make the loop thread's wait set: %s", rrpc_strerror(r));
    } else {
        __atomic_store_n(&ctx->thread_mode, true, __ATOMIC_RELAXED);
        r = -pthread_create(&ctx->thread, NULL, rrpci_loop_thread, ctx);
        if (r) {
            __atomic_store_n(&ctx->thread_mode, false, __ATOMIC_RELAXED);
            rrpci_loop_thread_fini(ctx);
            rrpci_set_error(ctx, r, "cannot start the loop thread: %s", rrpc_strerror(r));
        } else if (rrpci_relief_start(ctx) < 0) {
            RRPCI_LOG(ctx, LOG_WARNING, "no memory for the relief of long handlers: a handler "
                      "on the loop thread holds the loop until it returns");
        }
    }
    rrpci_unlock(ctx);
    return r;
}

static void transports_fini(rrpc_ctx *ctx)
{
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++) {
        if (ctx->tops[i] && ctx->tops[i]->ctx_fini)
            ctx->tops[i]->ctx_fini(ctx);
        free(ctx->tpriv[i]);
    }
}

RRPC_API void rrpc_ctx_destroy(rrpc_ctx *ctx)
{
    if (!ctx)
        return;
    rrpci_serve_stop(ctx); /* first: a scrape reads the whole context */
    if (ctx->thread_mode) {
        rrpci_lock(ctx);
        ctx->stopping = true;
        pthread_mutex_unlock(&ctx->lock);
        rrpci_loop_thread_stop(ctx);
        rrpci_relief_stop(ctx);
        pthread_join(ctx->thread, NULL);
        rrpci_relief_join(ctx);
        /* A worker's blocking call now drives the loop itself. */
        __atomic_store_n(&ctx->thread_mode, false, __ATOMIC_RELAXED);
    }
    rrpci_workers_stop(ctx); /* running handlers may still answer: the connections are up */
    rrpci_lock(ctx);
    ctx->stopping = true;
    while (!rrpci_list_empty(&ctx->listeners)) {
        rrpc_listener *l = rrpci_container_of(ctx->listeners.next, rrpc_listener, link);
        rrpc_listener_close(l);
    }
    while (!rrpci_list_empty(&ctx->conns)) {
        rrpc_conn *c = rrpci_container_of(ctx->conns.next, rrpc_conn, link);
        rrpci_conn_ref(c);
        rrpci_conn_down(c, RRPC_E_CLOSED, "the context is being destroyed");
        rrpci_conn_unref(c);
    }
    /* Handles the application did not close are released with the context. */
    while (!rrpci_list_empty(&ctx->owned))
        rrpci_conn_release_user(rrpci_container_of(ctx->owned.next, rrpc_conn, owned_link));
    /* A blocking call still running the loop on another thread was failed
     * above and woken: it hands the loop back before the loop goes. */
    while (ctx->taken) {
        pthread_mutex_unlock(&ctx->lock);
        rrpci_async_send(ctx->ev, &ctx->wake);
        sched_yield();
        rrpci_lock(ctx);
    }
    rrpci_methods_fini(ctx);
    rrpci_regions_fini(ctx);
    rrpci_grants_fini(ctx);
    rrpci_partial_fini(ctx);
    rrpci_gov_stop(&ctx->gov); /* before the transports' state goes */
    transports_fini(ctx);
    rrpci_async_stop(ctx->ev, &ctx->wake);
    rrpci_driven_fini(ctx);
    pthread_mutex_unlock(&ctx->lock);
    rrpci_loop_thread_fini(ctx);
    rrpci_evloop_fini(ctx->ev);
    pthread_mutex_destroy(&ctx->lock);
    rrpci_error_forget(ctx);
    free(ctx);
}

/* ---- transports -------------------------------------------------------- */

/* The transports by index.  Slot 1, verbs, is filled when the verbs module
 * is loaded (transport/module.c): the table does not name its ops, so a
 * program that never uses rdma:// never maps libibverbs or librdmacm. */
#define VERBS_SLOT 1
static const struct rrpci_transport_ops *const static_transports[RRPCI_NTRANSPORTS] = {
    &rrpci_tcp_ops,
    NULL,
    &rrpci_inproc_ops,
};

const struct rrpci_transport_ops *rrpci_transport_nth(int i)
{
    if (i == VERBS_SLOT)
        return rrpci_verbs_transport_if_loaded();
    return i >= 0 && i < RRPCI_NTRANSPORTS ? static_transports[i] : NULL;
}

const struct rrpci_transport_ops *rrpci_transport_by_scheme(const char *scheme, char *why,
                                                            size_t whylen)
{
    if (strcmp(scheme, "rdma") == 0)
        return rrpci_verbs_transport(why, whylen);
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (static_transports[i] && strcmp(static_transports[i]->scheme, scheme) == 0)
            return static_transports[i];
    snprintf(why, whylen, "unknown scheme \"%s\" (use tcp://, rdma:// or inproc://)", scheme);
    return NULL;
}

static int transport_index(const struct rrpci_transport_ops *ops)
{
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (i != VERBS_SLOT && static_transports[i] == ops)
            return i;
    return ops && ops == rrpci_verbs_transport_if_loaded() ? VERBS_SLOT : -1;
}

int rrpci_transport_use(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops)
{
    int i = transport_index(ops);
    if (ctx->tops[i])
        return 0;
    if (ops->version != RRPCI_TRANSPORT_OPS_VERSION || !ops->listen || !ops->listener_close ||
        !ops->connect || !ops->send || !ops->conn_close)
        return rrpci_set_error(ctx, RRPC_E_TRANSPORT,
                               "transport %s was built for ops version %u, the core speaks %u "
                               "(or lacks a mandatory op): rebuild it with this core",
                               ops->name, ops->version, RRPCI_TRANSPORT_OPS_VERSION);
    if (ops->ctx_priv_size) {
        ctx->tpriv[i] = calloc(1, ops->ctx_priv_size);
        if (!ctx->tpriv[i])
            return -ENOMEM;
    }
    ctx->tops[i] = ops;
    if (ops->ctx_init) {
        int r = ops->ctx_init(ctx);
        if (r < 0) {
            ctx->tops[i] = NULL;
            free(ctx->tpriv[i]);
            ctx->tpriv[i] = NULL;
            return r;
        }
    }
    return 0;
}

void *rrpci_ctx_tpriv(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops)
{
    return ctx->tpriv[transport_index(ops)];
}

struct rrpci_evloop *rrpci_ctx_loop(rrpc_ctx *ctx)
{
    return ctx->ev;
}

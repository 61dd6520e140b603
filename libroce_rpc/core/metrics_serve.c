/* SPDX-License-Identifier: MIT */
/* A context serving its own metrics: metrics_listen = HOST:PORT makes it answer
 * GET /metrics with rrpc_ctx_stats_text (util/metrics_http.c, libmicrohttpd),
 * from rrpc_ctx_create_with until rrpc_ctx_destroy.  The server is the
 * loadable module roce_rpc-metrics_http-X.Y.so (transport/module.h),
 * loaded the first time a configuration sets metrics_listen. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <pthread.h>

#include "core/core.h"

#ifdef RRPC_HAVE_MHD
#include "transport/module.h"
#include "util/metrics_http.h"

#define STR2(x) #x
#define STR(x) STR2(x)
#define MHTTP_MODULE "roce_rpc-metrics_http-" STR(RRPC_SOVERSION) ".so"

static const struct rrpci_mhttp_module *mhttp_loaded;

const struct rrpci_mhttp_module *rrpci_mhttp_module_load(char *why, size_t whylen)
{
    const struct rrpci_mhttp_module *m = __atomic_load_n(&mhttp_loaded, __ATOMIC_ACQUIRE);
    if (m)
        return m;
    void *sym = rrpci_module_entry("GET /metrics", MHTTP_MODULE, RRPCI_MHTTP_ENTRY_NAME,
                                   "libmicrohttpd12", why, whylen);
    if (!sym)
        return NULL;
    rrpci_mhttp_entry_fn entry;
    memcpy(&entry, &sym, sizeof(entry)); /* dlsym's object pointer is the function's */
    m = entry();
    if (!m || m->abi != RRPCI_MHTTP_ABI) {
        snprintf(why, whylen, "GET /metrics: the module %s is of interface %u, this library "
                 "speaks %u: install the module that came with this library",
                 MHTTP_MODULE, m ? m->abi : 0, RRPCI_MHTTP_ABI);
        return NULL;
    }
    __atomic_store_n(&mhttp_loaded, m, __ATOMIC_RELEASE);
    return m;
}

/* One scrape, on the server's thread: rrpc_ctx_stats_text takes the
 * context's lock for its snapshot. */
static int ctx_text(void *user, char **ret_text, size_t *ret_len)
{
    rrpc_ctx *ctx = user;
    /* One rendering into a buffer that usually fits; when the text did not
     * (many peers), once more at the size it said, plus room for one that
     * appeared meanwhile. */
    size_t cap = 64 * 1024, need = 0;
    int r = -ENOBUFS;
    for (int tries = 0; tries < 4 && r == -ENOBUFS; tries++) {
        char *buf = malloc(cap);
        if (!buf)
            return -ENOMEM;
        r = rrpc_ctx_stats_text(ctx, buf, cap, &need);
        if (r == 0) {
            *ret_text = buf;
            *ret_len = need;
            return 0;
        }
        free(buf);
        cap = need + 4096;
    }
    return r;
}

static void ctx_http_log(void *user, const char *msg)
{
    rrpc_ctx *ctx = user;
    rrpci_lock(ctx); /* the log callback is set under it */
    RRPCI_LOG(ctx, LOG_DEBUG, "metrics HTTP server: %s", msg);
    pthread_mutex_unlock(&ctx->lock);
}
#endif

int rrpci_serve_start(rrpc_ctx *ctx)
{
    if (!ctx->cfg.metrics_listen[0])
        return 0;
#ifdef RRPC_HAVE_MHD
    struct rrpci_mhttp_opts o = {
        .listen = ctx->cfg.metrics_listen,
        .max_conns = (unsigned)ctx->cfg.metrics_max_conns,
        .timeout_s = (unsigned)ctx->cfg.metrics_timeout_s,
        .header_timeout_s = (unsigned)ctx->cfg.metrics_header_timeout_s,
        .text = ctx_text,
        .log = ctx_http_log,
        .user = ctx,
    };
    char why[512];
    const struct rrpci_mhttp_module *m = rrpci_mhttp_module_load(why, sizeof(why));
    if (!m)
        return rrpci_set_error(NULL, -EOPNOTSUPP, "metrics_listen=%s: %s", ctx->cfg.metrics_listen, why);
    int r = m->start(&o, &ctx->metrics_http, why, sizeof(why));
    if (r < 0)
        return rrpci_set_error(NULL, r, "metrics_listen=%s: %s", ctx->cfg.metrics_listen, why);
    RRPCI_LOG(ctx, LOG_INFO, "serving GET /metrics on %s (port %d)", ctx->cfg.metrics_listen,
              m->port(ctx->metrics_http));
    return 0;
#else
    return rrpci_set_error(NULL, -EOPNOTSUPP,
                           "metrics_listen=%s: this libroce_rpc was built without libmicrohttpd, "
                           "so it cannot serve /metrics (install libmicrohttpd-dev and build "
                           "with meson -Dmetrics_http=enabled; or serve rrpc_ctx_stats_text "
                           "from the application's own HTTP server)",
                           ctx->cfg.metrics_listen);
#endif
}

void rrpci_serve_stop(rrpc_ctx *ctx)
{
#ifdef RRPC_HAVE_MHD
    /* Loaded when it was started (a context without it has nothing to stop). */
    if (ctx->metrics_http)
        mhttp_loaded->stop(ctx->metrics_http); /* joins its thread: no scrape runs after this */
#endif
    ctx->metrics_http = NULL;
}

RRPC_API int rrpc_ctx_metrics_port(rrpc_ctx *ctx)
{
    if (!ctx)
        return -EINVAL;
#ifdef RRPC_HAVE_MHD
    if (ctx->metrics_http)
        return mhttp_loaded->port(ctx->metrics_http);
#endif
    return -ENOENT;
}

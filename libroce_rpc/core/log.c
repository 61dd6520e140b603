/* SPDX-License-Identifier: MIT */
/* Errors and logs: the per-thread last error and the log callback. */
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
#include "util/log.h"
#include "util/reserved.h"

/* ---- errors and logs --------------------------------------------------- */

static _Thread_local rrpc_ctx *err_ctx;
static _Thread_local char err_buf[RRPCI_ERRMSG_MAX];

int rrpci_set_error(rrpc_ctx *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
    err_ctx = ctx;
    if (ctx)
        RRPCI_LOG(ctx, LOG_INFO, "%s: %s", rrpc_err_name(code), err_buf);
    return code;
}

void rrpci_error_forget(rrpc_ctx *ctx)
{
    if (err_ctx == ctx)
        err_ctx = NULL;
}

RRPC_API const char *rrpc_ctx_last_error(rrpc_ctx *ctx)
{
    return err_ctx == ctx ? err_buf : "";
}

bool rrpci_log_enabled(rrpc_ctx *ctx, int level)
{
    return level <= ctx->log_max;
}

void rrpci_log(rrpc_ctx *ctx, int level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    rrpci_log_emit(ctx->log_fn, ctx->log_user, level, buf);
}

RRPC_API void rrpc_ctx_set_log(rrpc_ctx *ctx, int max_level, rrpc_log_fn fn, void *user)
{
    rrpci_lock(ctx);
    ctx->log_fn = fn;
    ctx->log_user = user;
    ctx->log_max = max_level;
    rrpci_unlock(ctx);
}

/* SPDX-License-Identifier: MIT */
/* QoS classes: names, defaults, per-context settings, and the class and
 * reserved-words checks of options structs. */
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

/* ---- classes ----------------------------------------------------------- */

static const char *const class_names[RRPCI_MAX_CLASSES] = {"control", "low_latency", "bulk",
                                                           "background"};
const struct rrpci_class_cfg rrpci_class_defaults[RRPCI_MAX_CLASSES] = {
    {48, 4, 16}, {46, 8, 64}, {10, 2, 16}, {8, 1, 8}};

RRPC_API int rrpc_class_from_name(const char *name)
{
    for (int i = 0; name && i < RRPCI_MAX_CLASSES; i++)
        if (strcmp(name, class_names[i]) == 0)
            return rrpci_cls_public(i);
    return RRPC_E_BAD_CLASS;
}

RRPC_API const char *rrpc_class_name(int cls)
{
    int i = rrpci_cls_index(cls);
    return i >= 0 ? class_names[i] : NULL;
}

const char *rrpci_class_name(int idx)
{
    return idx >= 0 && idx < RRPCI_MAX_CLASSES ? class_names[idx] : "?";
}

int rrpci_class_arg(rrpc_ctx *ctx, int cls, int dflt, int *ret_idx)
{
    if (cls == RRPC_CLASS_DEFAULT) {
        *ret_idx = dflt;
        return 0;
    }
    int i = rrpci_cls_index(cls);
    if (i < 0)
        return rrpci_set_error(ctx, RRPC_E_BAD_CLASS,
                               "QoS class %d does not exist (RRPC_CLASS_CONTROL=%d .. "
                               "RRPC_CLASS_BACKGROUND=%d, or 0 for the default)",
                               cls, RRPC_CLASS_FIRST, RRPC_CLASS_LAST);
    *ret_idx = i;
    return 0;
}

int rrpci_reserved_check(rrpc_ctx *ctx, const uint64_t *r, size_t n, const char *what)
{
    int bad = r ? rrpci_reserved_bad(r, n) : -1;
    return bad < 0 ? 0 : rrpci_set_error(ctx, -EINVAL, RRPCI_RESERVED_WHY, what, bad);
}

RRPC_API int rrpc_class_set(rrpc_ctx *ctx, int api_cls, int dscp, int weight, int credits)
{
    int cls = rrpci_cls_index(api_cls);
    if (cls < 0)
        return rrpci_set_error(ctx, RRPC_E_BAD_CLASS, "class %d does not exist (%d..%d)", api_cls,
                               RRPC_CLASS_FIRST, RRPC_CLASS_LAST);
    if (dscp < 0 || dscp > 63 || weight < 1 || weight > 1000 || credits < 1 || credits > 4096)
        return rrpci_set_error(ctx, -EINVAL,
                               "class %s: dscp must be 0..63, weight 1..1000, credits 1..4096",
                               class_names[cls]);
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->endpoints_made) {
        r = rrpci_set_error(ctx, -EBUSY,
                            "configure classes before the first rrpc_listen/rrpc_connect");
    } else {
        ctx->cls[cls] = (struct rrpci_class_cfg){dscp, (uint32_t)weight, (uint32_t)credits};
    }
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_class_get(rrpc_ctx *ctx, int api_cls, int *ret_dscp, int *ret_weight,
                            int *ret_credits)
{
    int cls = rrpci_cls_index(api_cls);
    if (cls < 0)
        return RRPC_E_BAD_CLASS;
    if (ret_dscp)
        *ret_dscp = ctx->cls[cls].dscp;
    if (ret_weight)
        *ret_weight = (int)ctx->cls[cls].weight;
    if (ret_credits)
        *ret_credits = (int)ctx->cls[cls].credits;
    return 0;
}

int rrpci_ctx_class_dscp(rrpc_ctx *ctx, int cls)
{
    return ctx->cls[cls].dscp;
}

unsigned rrpci_ctx_class_weight(rrpc_ctx *ctx, int cls)
{
    return ctx->cls[cls].weight;
}

void rrpci_ctx_qos(rrpc_ctx *ctx, const struct rrpci_qos_knobs *knobs, struct rrpci_qos *ret)
{
    uint32_t w[RRPCI_MAX_CLASSES];
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        w[i] = ctx->cls[i].weight;
    rrpci_qos_init(ret, RRPCI_MAX_CLASSES, w, knobs);
}

int rrpci_rx_prio(rrpc_ctx *ctx, int cls)
{
    static const struct rrpci_qos_knobs none;
    struct rrpci_qos q;
    rrpci_ctx_qos(ctx, &none, &q);
    /* Rank 0 gets RRPCI_PRIO_MAX, rank 1 RRPCI_PRIO_MAX - 1, ... */
    int pri = RRPCI_PRIO_MAX - (int)rrpci_qos_rank(&q, cls);
    return pri < RRPCI_PRIO_MIN ? RRPCI_PRIO_MIN : pri;
}

uint32_t rrpci_ctx_max_msg(rrpc_ctx *ctx)
{
    return ctx->cfg.max_msg;
}

/* SPDX-License-Identifier: MIT */
/*
 * Built into a transport module (transport/module.h): the core functions
 * the transport calls, each a call through the table the core hands the
 * module's entry, and the entry itself, which returns RRPCI_MODULE_OPS (the
 * module's ops, named by the build: -DRRPCI_MODULE_OPS=rrpci_verbs_ops).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "transport/module.h"

#ifndef RRPCI_MODULE_OPS
#error "build with -DRRPCI_MODULE_OPS=<the transport's ops>"
#endif

extern const struct rrpci_transport_ops RRPCI_MODULE_OPS;

/* Set once by the entry, before the core can call any op. */
static const struct rrpci_core_services *core;

#define SHIM(ret, name, params, args) \
    ret name params                   \
    {                                 \
        return core->name args;       \
    }
#define SHIM_V(name, params, args) \
    void name params               \
    {                              \
        core->name args;           \
    }
RRPCI_CORE_SERVICES(SHIM, SHIM_V)
#undef SHIM
#undef SHIM_V

void rrpci_log(rrpc_ctx *ctx, int level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    core->rrpci_log_text(ctx, level, buf);
}

int rrpci_set_error(rrpc_ctx *ctx, int code, const char *fmt, ...)
{
    char buf[512]; /* the core keeps as much (RRPCI_ERRMSG_MAX) */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return core->rrpci_set_error_text(ctx, code, buf);
}

__attribute__((visibility("default"))) const struct rrpci_transport_ops *
RRPCI_TRANSPORT_ENTRY(const struct rrpci_core_services *c, char *why, size_t whylen);

__attribute__((visibility("default"))) const struct rrpci_transport_ops *
RRPCI_TRANSPORT_ENTRY(const struct rrpci_core_services *c, char *why, size_t whylen)
{
    if (!c || c->abi != RRPCI_MODULE_ABI || c->size != sizeof(*c)) {
        snprintf(why, whylen, "the core's services are version %u (%u bytes), this module's %u "
                 "(%zu bytes): install the module that came with this library",
                 c ? c->abi : 0, c ? c->size : 0, RRPCI_MODULE_ABI, sizeof(*c));
        return NULL;
    }
    core = c;
    return &RRPCI_MODULE_OPS;
}

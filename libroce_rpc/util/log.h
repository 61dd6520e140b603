/* SPDX-License-Identifier: MIT */
/*
 * The library's one log sink, for the core (core/log.c) and the broker client
 * (broker/client.c) alike: the application's callback when it set one, else
 * a line on stderr.  Inline, so each shared library carries it without
 * exporting it.  Callers test the level before formatting @msg.
 */
#ifndef RRPCI_UTIL_LOG_H
#define RRPCI_UTIL_LOG_H

#include <stdio.h>

#include <roce_rpc/rrpc.h>

static inline void rrpci_log_emit(rrpc_log_fn fn, void *user, int level, const char *msg)
{
    if (fn)
        fn(level, msg, user);
    else
        fprintf(stderr, "roce-rpc[%d]: %s\n", level, msg);
}

#endif

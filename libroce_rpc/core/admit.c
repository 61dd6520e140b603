/* SPDX-License-Identifier: MIT */
/* Admission of passive connections: the per-source and total caps. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"

static bool addr_key(const struct sockaddr *sa, uint8_t key[16], char *text, size_t n)
{
    snprintf(text, n, "?");
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memset(key, 0, 10);
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in->sin_addr, 4);
        inet_ntop(AF_INET, &in->sin_addr, text, (socklen_t)n);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(key, &in6->sin6_addr, 16);
        inet_ntop(AF_INET6, &in6->sin6_addr, text, (socklen_t)n);
        return true;
    }
    return false;
}

/* Passive connections held now, those from @key, and the oldest one that
 * has not authenticated (nor come up, on a server without tickets). */
static void count_passive(rrpc_ctx *ctx, const uint8_t *key, int *total, int *same,
                          rrpc_conn **oldest_unauth)
{
    *total = *same = 0;
    *oldest_unauth = NULL;
    for (struct rrpci_list *n = ctx->conns.next; n != &ctx->conns; n = n->next) {
        rrpc_conn *c = rrpci_container_of(n, rrpc_conn, link);
        if (!c->passive || rrpci_conn_is_down(c))
            continue;
        (*total)++;
        if (key && c->has_src && memcmp(c->src, key, 16) == 0)
            (*same)++;
        if (!rrpci_conn_reached_up(c) && !*oldest_unauth)
            *oldest_unauth = c; /* the list is in order of arrival */
    }
}

int rrpci_listener_accept(rrpc_listener *l, const struct sockaddr *peer, rrpc_conn **ret,
                          char *why, size_t whylen)
{
    rrpc_ctx *ctx = l->ctx;
    uint8_t key[16];
    char text[INET6_ADDRSTRLEN];
    bool has = addr_key(peer, key, text, sizeof(text));
    int total, same;
    rrpc_conn *unauth;
    count_passive(ctx, has ? key : NULL, &total, &same, &unauth);
    if (has && same >= ctx->cfg.max_conns_per_source) {
        snprintf(why, whylen, "too many connections from %s: the server holds at most %d per "
                 "address (RRPC_MAX_CONNS_PER_SOURCE)", text, ctx->cfg.max_conns_per_source);
        RRPCI_LOG(ctx, LOG_NOTICE, "refused a connection: %s", why);
        return RRPC_E_LIMIT;
    }
    if (total >= ctx->cfg.max_conns) {
        if (!unauth) {
            snprintf(why, whylen, "the server holds its maximum of %d connections "
                     "(RRPC_MAX_CONNS), all of them authenticated", ctx->cfg.max_conns);
            RRPCI_LOG(ctx, LOG_WARNING, "refused a connection from %s: %s", text, why);
            return RRPC_E_LIMIT;
        }
        RRPCI_LOG(ctx, LOG_NOTICE, "at RRPC_MAX_CONNS=%d: closing the oldest connection that "
                  "has not authenticated, for one from %s", ctx->cfg.max_conns, text);
        rrpci_conn_down(unauth, RRPC_E_LIMIT, "closed to make room: the server is at "
                        "RRPC_MAX_CONNS and this connection had not authenticated");
    }
    rrpc_conn *c = rrpci_conn_alloc(ctx, l->ops, l->fn, l->user, ctx->cfg.auth_timeout_ms);
    if (!c) {
        snprintf(why, whylen, "server out of memory");
        return -ENOMEM;
    }
    c->passive = true;
    c->has_src = has;
    if (has)
        memcpy(c->src, key, 16);
    *ret = c;
    return 0;
}

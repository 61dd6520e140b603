/* SPDX-License-Identifier: MIT */
/* Admission of passive connections: the per-source and total caps, shared
 * fairly between addresses (docs/protocol.md §6.5). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

/* Admission's log: at most one line per ADMIT_LOG_INTERVAL_S, with the
 * counts since the last one, so a peer that churns connections cannot make
 * the server log once per connection. */
#define ADMIT_LOG_INTERVAL_S 10.0

static void admit_log(rrpc_ctx *ctx, bool evicted, const char *latest)
{
    struct rrpci_guard *g = &ctx->guard;
    if (evicted)
        g->log_evicted++;
    else
        g->log_refused++;
    double now = rrpci_ctx_now(ctx);
    if (g->log_t0 != 0 && now - g->log_t0 < ADMIT_LOG_INTERVAL_S)
        return;
    RRPCI_LOG(ctx, LOG_NOTICE,
              "admission: %u connection(s) closed to make room and %u refused since the last "
              "such line (at most one each %.0f s); latest: %s",
              g->log_evicted, g->log_refused, ADMIT_LOG_INTERVAL_S, latest);
    g->log_t0 = now;
    g->log_evicted = g->log_refused = 0;
}

/* Whether @c may be closed to admit another: it has not authenticated (nor
 * come up, without tickets); or, on a server without tickets (where no
 * connection is anyone's in particular), nothing was asked or answered on it
 * for RRPC_IDLE_EVICT_MS and nothing waits on it. */
static bool unauthenticated(const rrpc_conn *c)
{
    return !rrpci_conn_reached_up(c);
}

static bool idle(const rrpc_conn *c, double now)
{
    const rrpc_ctx *ctx = c->ctx;
    return !ctx->ticket_fn && ctx->cfg.idle_evict_ms > 0 && rrpci_conn_is_up(c) &&
           now - c->last_data >= ctx->cfg.idle_evict_ms / 1000.0 && c->answer_bytes == 0 &&
           c->pending.count == 0;
}

static bool same_src(const rrpc_conn *c, const uint8_t *key)
{
    return key && c->has_src && memcmp(c->src, key, 16) == 0;
}

#define PASSIVE_EACH(ctx, c)                                                                     \
    for (struct rrpci_list *n_ = (ctx)->conns.next; n_ != &(ctx)->conns; n_ = n_->next)         \
        for (rrpc_conn *c = rrpci_container_of(n_, rrpc_conn, link); c; c = NULL)               \
            if (c->passive && !rrpci_conn_is_down(c))

/* Connections from @key held now (all when @key is NULL).  For an address,
 * those authenticated as a named principal count against that principal's
 * cap instead (rrpci_admit_principal), so one principal cannot lock out the
 * other clients of its address. */
static int count_from(rrpc_ctx *ctx, const uint8_t *key)
{
    int n = 0;
    PASSIVE_EACH(ctx, c)
    if (!key || (same_src(c, key) && !(c->principal && rrpci_conn_reached_up(c))))
        n++;
    return n;
}

int rrpci_admit_principal(rrpc_conn *c, char *why, size_t whylen)
{
    rrpc_ctx *ctx = c->ctx;
    if (!c->principal)
        return 0;
    int n = 0;
    PASSIVE_EACH(ctx, o)
    if (o != c && o->principal && rrpci_conn_reached_up(o) && strcmp(o->principal, c->principal) == 0)
        n++;
    if (n < ctx->cfg.max_conns_per_principal)
        return 0;
    snprintf(why, whylen, "principal \"%.64s\" holds its maximum of %d connections "
             "(RRPC_MAX_CONNS_PER_PRINCIPAL); close one first", c->principal,
             ctx->cfg.max_conns_per_principal);
    ctx->guard.refused_principal++;
    admit_log(ctx, false, why);
    return RRPC_E_LIMIT;
}

/* The connection to close for a new one, or NULL: among those from @key
 * (all when NULL), the oldest unauthenticated one; else, without tickets,
 * an idle one of the address that holds the most (the longest idle of it),
 * so the peer holding many gives way before one holding few. */
static rrpc_conn *victim(rrpc_ctx *ctx, const uint8_t *key, bool *ret_idle)
{
    double now = rrpci_ctx_now(ctx);
    PASSIVE_EACH(ctx, c)
    if ((!key || same_src(c, key)) && unauthenticated(c)) {
        *ret_idle = false;
        return c; /* the list is in order of arrival */
    }
    rrpc_conn *best = NULL;
    int best_n = 0;
    PASSIVE_EACH(ctx, c)
    {
        if ((key && !same_src(c, key)) || !idle(c, now))
            continue;
        int n = key || !c->has_src ? 1 : count_from(ctx, c->src);
        if (!best || n > best_n || (n == best_n && c->last_data < best->last_data)) {
            best = c;
            best_n = n;
        }
    }
    *ret_idle = true;
    return best;
}

/* The oldest connection that has not authenticated, from any address: it
 * makes room for any new one (a connection that authenticated never does). */
static rrpc_conn *oldest_unauthenticated(rrpc_ctx *ctx)
{
    PASSIVE_EACH(ctx, c)
    if (unauthenticated(c))
        return c;
    return NULL;
}

/* Closes @v to admit a connection from @text, counting and logging it. */
static void evict(rrpc_ctx *ctx, rrpc_conn *v, bool was_idle, const char *text, const char *cap)
{
    char why[200];
    snprintf(why, sizeof(why), "closed to make room for a connection from %s at %s: this "
             "connection %s", text, cap,
             was_idle ? "was idle (RRPC_IDLE_EVICT_MS)" : "had not authenticated");
    if (was_idle)
        ctx->guard.evicted_idle++;
    else
        ctx->guard.evicted_unauth++;
    admit_log(ctx, true, why);
    rrpci_conn_down(v, RRPC_E_LIMIT, why);
}

static int refuse(rrpc_ctx *ctx, uint64_t *counter, char *why, const char *text)
{
    (*counter)++;
    char line[400];
    snprintf(line, sizeof(line), "refused a connection from %s: %s", text, why);
    admit_log(ctx, false, line);
    return RRPC_E_LIMIT;
}

/*
 * Fair admission (docs/protocol.md §6.5): at most RRPC_MAX_CONNS_PER_SOURCE
 * from one address; the last RRPC_CONNS_RESERVE_PCT of RRPC_MAX_CONNS only
 * for addresses that hold none; at either cap a connection that has not
 * authenticated (then, without tickets, an idle one) makes room before the
 * new one is refused.
 */
static int admit(rrpc_ctx *ctx, const uint8_t *key, const char *text, char *why, size_t whylen)
{
    const struct rrpci_config *cfg = &ctx->cfg;
    int total = count_from(ctx, NULL), same = key ? count_from(ctx, key) : 0;
    int reserve = (int)((long long)cfg->max_conns * cfg->conns_reserve_pct / 100);
    bool was_idle;
    rrpc_conn *v;
    if (key && same >= cfg->max_conns_per_source) {
        if ((v = victim(ctx, key, &was_idle))) {
            evict(ctx, v, was_idle, text, "RRPC_MAX_CONNS_PER_SOURCE");
            return 0;
        }
        snprintf(why, whylen, "too many connections from %s: the server holds at most %d per "
                 "address (RRPC_MAX_CONNS_PER_SOURCE), all of them in use", text,
                 cfg->max_conns_per_source);
        return refuse(ctx, &ctx->guard.refused_source, why, text);
    }
    if (same > 0 && total >= cfg->max_conns - reserve) {
        /* The reserve is for addresses that hold nothing yet: this one
         * gets a place only by giving one of its own. */
        v = victim(ctx, key, &was_idle);
        if (!v && (v = oldest_unauthenticated(ctx)))
            was_idle = false;
        if (v) {
            evict(ctx, v, was_idle, text, "RRPC_CONNS_RESERVE_PCT");
            return 0;
        }
        snprintf(why, whylen, "%s already holds %d connection(s) and the server's last %d of "
                 "RRPC_MAX_CONNS=%d places are kept for addresses that hold none "
                 "(RRPC_CONNS_RESERVE_PCT)", text, same, reserve, cfg->max_conns);
        return refuse(ctx, &ctx->guard.refused_full, why, text);
    }
    if (total >= cfg->max_conns) {
        if ((v = victim(ctx, NULL, &was_idle))) {
            evict(ctx, v, was_idle, text, "RRPC_MAX_CONNS");
            return 0;
        }
        snprintf(why, whylen, "the server holds its maximum of %d connections (RRPC_MAX_CONNS), "
                 "all of them authenticated or in use", cfg->max_conns);
        return refuse(ctx, &ctx->guard.refused_full, why, text);
    }
    return 0;
}

/* ---- RRPC_REQUIRE_ESP: only peers this host has an ESP pair with --------------- */

#define ESP_ASK_MS 200   /* the local agent answers at once; a stuck one costs this */
#define ESP_CACHE_S 2.0  /* a "yes" is believed this long */

static bool is_loopback(const uint8_t key[16])
{
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t v6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return (!memcmp(key, v4, 12) && key[12] == 127) || !memcmp(key, v6, 16);
}

/* Asks the agent at @path whether this host has an ESP pair with @text:
 * 0 yes, -EACCES no (its reason in @why), other: the agent did not answer. */
static int esp_ask(const char *path, const char *text, char *why, size_t whylen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path); /* checked when the context was made (config.c) */
    if (plen >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, plen + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    char req[80], rep[160];
    int n = snprintf(req, sizeof(req), "PAIR? %s", text), r = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t got = -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        r = -errno;
    else if (poll(&p, 1, ESP_ASK_MS) <= 0 || (got = recv(fd, rep, sizeof(rep) - 1, 0)) <= 0)
        r = -ETIMEDOUT;
    close(fd);
    if (r)
        return r;
    rep[got] = 0;
    if (!strncmp(rep, "yes", 3))
        return 0;
    snprintf(why, whylen, "%s", !strncmp(rep, "no ", 3) ? rep + 3 : "the agent's answer is not "
                                                                    "understood");
    return -EACCES;
}

/* With RRPC_REQUIRE_ESP set, a peer on another host is accepted only when
 * this host's rrpc-agent says it has an ESP pair with it (so the peer's
 * packets are encrypted, and the kernel drops its clear-text ones); loopback
 * peers and inproc stay on the host and pass. */
static int esp_gate(rrpc_ctx *ctx, const uint8_t key[16], const char *text, char *why,
                    size_t whylen)
{
    const char *path = ctx->cfg.require_esp;
    if (!*path || is_loopback(key))
        return 0;
    double now = rrpci_stats_now();
    for (int i = 0; i < RRPCI_ESP_CACHE; i++)
        if (ctx->esp_yes[i].until > now && !memcmp(ctx->esp_yes[i].key, key, 16))
            return 0;
    char reason[160] = "";
    int r = esp_ask(path, text, reason, sizeof(reason));
    if (r == 0) {
        int slot = 0; /* the entry that expires first */
        for (int i = 1; i < RRPCI_ESP_CACHE; i++)
            if (ctx->esp_yes[i].until < ctx->esp_yes[slot].until)
                slot = i;
        memcpy(ctx->esp_yes[slot].key, key, 16);
        ctx->esp_yes[slot].until = now + ESP_CACHE_S;
        return 0;
    }
    if (r == -EACCES)
        snprintf(why, whylen, "this server requires ESP with the client's host (RRPC_REQUIRE_ESP): "
                 "%s; run rrpc-agent on both hosts (docs/deployment.md, \"Encrypted RoCE\")",
                 reason);
    else
        snprintf(why, whylen, "this server requires ESP (RRPC_REQUIRE_ESP) and cannot ask its "
                 "rrpc-agent at %s: %s", path, strerror(-r));
    RRPCI_LOG(ctx, LOG_NOTICE, "refusing %s: %s", text, why);
    return -EACCES;
}

RRPC_API int rrpc_ctx_require_esp(rrpc_ctx *ctx)
{
    return ctx ? ctx->cfg.require_esp[0] != 0 : -EINVAL;
}

int rrpci_listener_accept(rrpc_listener *l, const struct sockaddr *peer, rrpc_conn **ret,
                          char *why, size_t whylen)
{
    rrpc_ctx *ctx = l->ctx;
    uint8_t key[16];
    char text[INET6_ADDRSTRLEN];
    bool has = addr_key(peer, key, text, sizeof(text));
    int r = has ? esp_gate(ctx, key, text, why, whylen) : 0;
    if (r < 0)
        return r;
    r = admit(ctx, has ? key : NULL, text, why, whylen);
    if (r < 0)
        return r;
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

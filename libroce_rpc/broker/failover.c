/* SPDX-License-Identifier: MIT */
/*
 * The list of brokers (client_int.h): parsing rrpc_broker_open's list, the
 * current broker, and the round trip that makes the session again down the
 * list when it cannot be made or dies (include/roce_rpc/broker.h says what
 * the application sees).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/client_int.h"

#define STR_(x) #x
#define STR(x) STR_(x)

void rrpci_select_addr(struct rrpc_broker *b, int i)
{
    memcpy(b->host, b->addrs[i].host, sizeof(b->host));
    memcpy(b->port, b->addrs[i].port, sizeof(b->port));
    if (!b->own_server_name)
        memcpy(b->server_name, b->host, sizeof(b->server_name));
    pthread_mutex_lock(&b->lock);
    b->cur = i; /* written under both @io and @lock: either suffices to read it */
    snprintf(b->cur_addr, sizeof(b->cur_addr), strchr(b->host, ':') ? "[%s]:%s" : "%s:%s",
             b->host, b->port);
    pthread_mutex_unlock(&b->lock);
}

RRPC_API int rrpc_broker_current(rrpc_broker *b, char *buf, size_t len)
{
    if (!b || !buf || !len)
        return -EINVAL;
    pthread_mutex_lock(&b->lock);
    int n = snprintf(buf, len, "%s", b->cur_addr);
    int index = b->cur;
    pthread_mutex_unlock(&b->lock);
    return (size_t)n >= len ? -ENOSPC : index;
}

/*
 * Makes a session with the first broker of the list that answers, beginning
 * with the current one and going round the list once (at most timeout_ms
 * each).  @why is the reason the previous session ended, or NULL.  Every
 * broker that fails and every move to another one is logged.  When all
 * fail, the error names each broker and its reason, and the code is the
 * last one's.
 */
int rrpci_connect_any(struct rrpc_broker *b, const char *why)
{
    if (b->n_addrs == 1)
        return rrpci_session_connect(b);
    int first = b->cur, r = 0;
    char all[ERR_MAX] = "";
    size_t used = 0;
    for (int k = 0; k < b->n_addrs; k++) {
        int i = (first + k) % b->n_addrs;
        rrpci_select_addr(b, i);
        r = rrpci_session_connect(b);
        if (!r) {
            if (k > 0)
                BLOG(b, LOG_WARNING, "failed over from rrpcd %s:%s to rrpcd %s:%s (broker %d of "
                     "%d)%s%.*s", b->addrs[first].host, b->addrs[first].port, b->host, b->port,
                     i + 1, b->n_addrs, why ? " after " : "", WHY_MAX, why ? why : "");
            else if (why)
                BLOG(b, LOG_NOTICE, "reconnected to rrpcd %s:%s after %.*s", b->host, b->port,
                     WHY_MAX, why);
            return 0;
        }
        char one[ERR_MAX];
        rrpci_broker_err_copy(b, one, sizeof(one));
        int n = snprintf(all + used, sizeof(all) - used, "%s%.*s", k ? "; " : "", WHY_MAX, one);
        if (n > 0)
            used = used + (size_t)n < sizeof(all) ? used + (size_t)n : sizeof(all) - 1;
        BLOG(b, LOG_WARNING, "broker %d of %d failed: %.*s%s", i + 1, b->n_addrs, WHY_MAX, one,
             k + 1 < b->n_addrs ? "; trying the next one" : "");
    }
    rrpci_select_addr(b, first);
    return rrpci_broker_fail(b, r,
                             "none of the %d brokers answered (each tried for up to %d ms): %s",
                             b->n_addrs, b->timeout_ms, all);
}

/*
 * One round trip with @io held: (re)connects when needed, going down the
 * list of brokers; a request that failed on a session made earlier is sent
 * once more on a new one (with the next broker when this one is gone).
 */
int rrpci_roundtrip(struct rrpc_broker *b, struct req *q, struct reply *u)
{
    char why[ERR_MAX] = "";
    for (int attempt = 0;; attempt++) {
        bool fresh = false;
        if (!b->ssl) {
            int r = rrpci_connect_any(b, why[0] ? why : NULL);
            if (r)
                return r;
            fresh = true;
        }
        bool refused;
        rrpci_reply_destroy(u);
        rrpci_reply_init(u);
        int r = rrpci_session_exchange(b, q, u, &refused, rrpci_mono_ms() + b->timeout_ms);
        if (!r || refused)
            return r;
        rrpci_session_close(b);
        if (fresh || attempt > 0)
            return r;
        char err[ERR_MAX];
        rrpci_broker_err_copy(b, err, sizeof(err));
        snprintf(why, sizeof(why), "the session with rrpcd %s:%s ended: %.*s", b->host, b->port,
                 WHY_MAX, err);
    }
}

/* ---- the list ---------------------------------------------------------------- */

int rrpci_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
    if (!strncmp(addr, "tls://", 6))
        addr += 6;
    const char *colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':')
            return -EINVAL;
        if ((size_t)(rb - addr - 1) >= hostlen)
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || colon == addr || (size_t)(colon - addr) >= hostlen)
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return -EINVAL;
    snprintf(port, portlen, "%ld", p);
    return 0;
}

/*
 * Splits @list ("HOST:PORT[,HOST:PORT...]", blanks around an entry allowed)
 * into @b->addrs; every entry is checked, and a bad one is named.
 */
int rrpci_parse_addrs(struct rrpc_broker *b, const char *list)
{
    static const char how[] = "give HOST:PORT, [IPv6]:PORT or tls://HOST:PORT, several "
                              "separated by commas (at most " STR(RRPC_BROKER_MAX_ADDRS) ")";
    if (strlen(list) > RRPC_BROKER_MAX_ADDRS * (HOST_MAX + 16))
        return rrpci_broker_open_fail(-EINVAL, "broker address list is too long: %s", how);
    b->n_addrs = 0;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        int n = b->n_addrs + 1;
        char entry[HOST_MAX + 16];
        if (!len)
            return rrpci_broker_open_fail(-EINVAL, "broker address '%s': entry %d is empty; %s",
                                          list, n, how);
        if (n > RRPC_BROKER_MAX_ADDRS)
            return rrpci_broker_open_fail(-EINVAL, "broker address '%s' lists more than %d brokers",
                                          list, RRPC_BROKER_MAX_ADDRS);
        if (len >= sizeof(entry))
            return rrpci_broker_open_fail(-EINVAL, "broker address '%s': entry %d is too long; %s",
                                          list, n, how);
        memcpy(entry, p, len);
        entry[len] = 0;
        struct baddr *a = &b->addrs[b->n_addrs];
        if (rrpci_split_addr(entry, a->host, sizeof(a->host), a->port, sizeof(a->port)) ||
            !a->host[0])
            return rrpci_broker_open_fail(-EINVAL,
                                          "broker address '%s': entry %d '%s' is not HOST:PORT "
                                          "with a port 1..65535; %s",
                                          list, n, entry, how);
        for (int k = 0; k < b->n_addrs; k++)
            if (!strcmp(b->addrs[k].host, a->host) && !strcmp(b->addrs[k].port, a->port))
                return rrpci_broker_open_fail(-EINVAL,
                                              "broker address '%s': entries %d and %d are both "
                                              "'%s'; list each broker once",
                                              list, k + 1, n, entry);
        b->n_addrs = n;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * The ESP pairs rrpc-agents report (server_int.h, docs/deployment.md): one
 * report per reporting host address, replaced by the next one from it, gone
 * REPORT_TTL_MS after it came or when the session that sent it ends.  A pair
 * between two hosts counts only while both hosts' reports name each other,
 * unexpired.  Everything runs on the loop thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "server_int.h"

#define PAIRS_BUCKETS 1024

struct report {
    struct report *next;
    struct host_addr local;
    uint64_t serial;    /* the session that sent it */
    int64_t expires_ms; /* monotonic: the report itself */
    size_t n;
    struct pair_entry pairs[];
};

struct pairs {
    struct report *buckets[PAIRS_BUCKETS];
    size_t n;
};

static unsigned addr_hash(const struct host_addr *a)
{
    uint32_t h = 2166136261u ^ (uint32_t)a->family; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ a->addr[i]) * 16777619u;
    return h % PAIRS_BUCKETS;
}

static bool addr_eq(const struct host_addr *a, const struct host_addr *b)
{
    return a->family == b->family && !memcmp(a->addr, b->addr, 16);
}

void host_addr_normalize(struct host_addr *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (a->family == AF_INET6 && !memcmp(a->addr, mapped, 12)) {
        uint8_t v4[4];
        memcpy(v4, a->addr + 12, 4);
        memset(a->addr, 0, 16);
        memcpy(a->addr, v4, 4);
        a->family = AF_INET;
    }
}

bool host_addr_parse(const char *s, int family, struct host_addr *out)
{
    memset(out, 0, sizeof(*out));
    if ((family == 0 || family == AF_INET) && inet_pton(AF_INET, s, out->addr) == 1) {
        out->family = AF_INET;
        return true;
    }
    memset(out, 0, sizeof(*out));
    if ((family == 0 || family == AF_INET6) && inet_pton(AF_INET6, s, out->addr) == 1) {
        out->family = AF_INET6;
        host_addr_normalize(out);
        /* A v4-mapped literal names an IPv4 host: not of an IPv6 session's family. */
        return family == 0 || out->family == family;
    }
    return false;
}

const char *host_addr_text(const struct host_addr *a, char *buf, size_t len)
{
    if (!inet_ntop(a->family, a->addr, buf, (socklen_t)len))
        snprintf(buf, len, "?");
    return buf;
}

struct pairs *pairs_new(void)
{
    return calloc(1, sizeof(struct pairs));
}

void pairs_free(struct pairs *p)
{
    if (!p)
        return;
    for (size_t b = 0; b < PAIRS_BUCKETS; b++)
        while (p->buckets[b]) {
            struct report *r = p->buckets[b];
            p->buckets[b] = r->next;
            free(r);
        }
    free(p);
}

static struct report **find(struct pairs *p, const struct host_addr *local)
{
    struct report **pp = &p->buckets[addr_hash(local)];
    while (*pp && !addr_eq(&(*pp)->local, local))
        pp = &(*pp)->next;
    return pp;
}

int pairs_report(struct pairs *p, const struct host_addr *local, const struct pair_entry *e,
                 size_t n, uint64_t serial, int64_t now, size_t max_agents)
{
    struct report **pp = find(p, local);
    if (!*pp && p->n >= max_agents)
        return -ENOSPC;
    struct report *r = malloc(sizeof(*r) + n * sizeof(*e));
    if (!r)
        return -ENOMEM;
    r->local = *local;
    r->serial = serial;
    r->expires_ms = now + PAIRS_REPORT_TTL_MS;
    r->n = n;
    if (n)
        memcpy(r->pairs, e, n * sizeof(*e));
    if (*pp) {
        struct report *old = *pp;
        r->next = old->next;
        free(old);
    } else {
        r->next = NULL;
        p->n++;
    }
    *pp = r;
    metrics_agents(p->n);
    return 0;
}

void pairs_session_gone(struct pairs *p, const struct host_addr *local, uint64_t serial)
{
    struct report **pp = find(p, local);
    if (*pp && (*pp)->serial == serial) { /* not one a newer session sent since */
        struct report *r = *pp;
        *pp = r->next;
        free(r);
        p->n--;
        metrics_agents(p->n);
    }
}

void pairs_sweep(struct pairs *p, int64_t now)
{
    for (size_t b = 0; b < PAIRS_BUCKETS; b++)
        for (struct report **pp = &p->buckets[b]; *pp;) {
            if ((*pp)->expires_ms <= now) {
                struct report *r = *pp;
                *pp = r->next;
                free(r);
                p->n--;
            } else {
                pp = &(*pp)->next;
            }
        }
    metrics_agents(p->n);
}

/* Whether the unexpired report of @a names @b with a pair not expired at @now. */
static bool reports(struct pairs *p, const struct host_addr *a, const struct host_addr *b,
                    int64_t now)
{
    const struct report *r = *find(p, a);
    if (!r || r->expires_ms <= now)
        return false;
    for (size_t i = 0; i < r->n; i++)
        if (addr_eq(&r->pairs[i].peer, b) && r->pairs[i].until_ms > now)
            return true;
    return false;
}

bool pairs_agreed(struct pairs *p, const struct host_addr *a, const struct host_addr *b,
                  int64_t now)
{
    return reports(p, a, b, now) && reports(p, b, a, now);
}

size_t pairs_count(const struct pairs *p)
{
    return p->n;
}

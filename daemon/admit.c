/* SPDX-License-Identifier: MIT */
/*
 * Who gets in (server_int.h): the count of sessions per source address
 * (max_connections_per_source), and the log of refusals, at most one line a
 * second.  max_connections is the listener's (server.c: it closes the oldest
 * anonymous session to make room).
 */
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <netinet/in.h>

#include "server_int.h"

static unsigned source_hash(int family, const uint8_t *a)
{
    uint32_t h = 2166136261u ^ (uint32_t)family; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 16777619u;
    return h % SOURCE_BUCKETS;
}

struct source *admit_source_get(struct server *srv, const struct sockaddr_storage *ss,
                                bool *ret_full)
{
    uint8_t a[16] = { 0 };
    int family = ss->ss_family;
    if (family == AF_INET)
        memcpy(a, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    else if (family == AF_INET6)
        memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    unsigned b = source_hash(family, a);
    struct source *s;
    *ret_full = false;
    for (s = srv->sources[b]; s; s = s->next)
        if (s->family == family && !memcmp(s->addr, a, 16))
            break;
    if (s && s->n >= srv->cfg->max_connections_per_source) {
        *ret_full = true;
        return NULL;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        s->family = family;
        memcpy(s->addr, a, 16);
        s->next = srv->sources[b];
        srv->sources[b] = s;
    }
    s->n++;
    return s;
}

void admit_source_put(struct server *srv, struct source *s)
{
    if (!s || --s->n > 0)
        return;
    unsigned b = source_hash(s->family, s->addr);
    for (struct source **pp = &srv->sources[b]; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    free(s);
}

/* A flood of refusals must not become a flood of log lines. */
void admit_log_refusal(struct server *srv, const char *peer, const char *why)
{
    int64_t now = mono_ms();
    if (srv->refusal_logged_ms && now - srv->refusal_logged_ms < 1000) {
        srv->refusals_quiet++;
        return;
    }
    LOG(LOG_WARNING, "%s: refused: %s (%u more refusals not logged)", peer, why,
        srv->refusals_quiet);
    srv->refusal_logged_ms = now;
    srv->refusals_quiet = 0;
}

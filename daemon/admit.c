/* SPDX-License-Identifier: MIT */
/*
 * Who gets in (server_int.h): the count of sessions per source address
 * (max_connections_per_source), and the log of refusals, at most one line a
 * second.  max_connections is the listener's (server.c: it closes the oldest
 * anonymous session to make room).
 */
#include <stdio.h>
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

/* ---- who to evict at the cap ----------------------------------------------------- */

struct conn *admit_pick_victim(struct server *srv, const struct source *src)
{
    struct conn *best = NULL;
    for (struct conn *c = srv->conns; c; c = c->next) {
        if (c->authed || c->draining || (c->src != src && c->src->n < src->n))
            continue;
        if (!best || c->src->n > best->src->n ||
            (c->src->n == best->src->n &&
             (best->handshaken > c->handshaken ||
              (best->handshaken == c->handshaken && c->last_rx_ms < best->last_rx_ms))))
            best = c;
    }
    return best;
}

void admit_evict(struct server *srv, struct conn *victim, const char *peer)
{
    metrics_evicted();
    int64_t now = mono_ms();
    srv->evictions_quiet++;
    if (!srv->evict_logged_ms || now - srv->evict_logged_ms >= EVICT_LOG_EVERY_MS) {
        LOG(LOG_NOTICE, "max_connections reached: evicted %u session(s) that had not "
            "authenticated in the last %d s, the latest %s for %s", srv->evictions_quiet,
            EVICT_LOG_EVERY_MS / 1000, victim->peer, peer);
        srv->evict_logged_ms = now;
        srv->evictions_quiet = 0;
    }
    session_close(victim, NULL);
}

/* ---- principals ------------------------------------------------------------------- */

static unsigned principal_hash(const char *name)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % PRINCIPAL_BUCKETS;
}

/* Brings @pr's bucket up to date: max_registers_per_s a second, twice that at most. */
static void refill(struct server *srv, struct principal *pr, int64_t now)
{
    double rate = srv->cfg->max_registers_per_s, burst = 2.0 * rate;
    pr->reg_tokens += (double)(now - pr->reg_ms) * rate / 1000.0;
    if (pr->reg_tokens > burst)
        pr->reg_tokens = burst;
    pr->reg_ms = now;
}

struct principal *admit_principal_get(struct server *srv, const char *name, char *why,
                                      size_t whylen)
{
    unsigned b = principal_hash(name);
    struct principal *pr;
    for (pr = srv->principals[b]; pr; pr = pr->next)
        if (!strcmp(pr->name, name))
            break;
    if (pr && pr->sessions >= srv->cfg->max_sessions_per_principal) {
        snprintf(why, whylen, "principal '%s' already holds %d sessions "
                 "(max_sessions_per_principal); close some first", name, pr->sessions);
        return NULL;
    }
    if (!pr) {
        pr = calloc(1, sizeof(*pr));
        if (!pr) {
            snprintf(why, whylen, "out of memory");
            return NULL;
        }
        snprintf(pr->name, sizeof(pr->name), "%s", name);
        pr->reg_tokens = 2.0 * srv->cfg->max_registers_per_s;
        pr->reg_ms = mono_ms();
        pr->next = srv->principals[b];
        srv->principals[b] = pr;
    }
    pr->sessions++;
    return pr;
}

void admit_principal_put(struct server *srv, struct principal *pr)
{
    (void)srv;
    if (pr)
        pr->sessions--; /* freed by the sweep once its bucket is full again */
}

void admit_principals_sweep(struct server *srv)
{
    int64_t now = mono_ms();
    for (size_t b = 0; b < PRINCIPAL_BUCKETS; b++)
        for (struct principal **pp = &srv->principals[b]; *pp;) {
            struct principal *pr = *pp;
            refill(srv, pr, now);
            if (!pr->sessions && !pr->held &&
                pr->reg_tokens >= 2.0 * srv->cfg->max_registers_per_s) {
                *pp = pr->next;
                free(pr);
            } else {
                pp = &pr->next;
            }
        }
    srv->principals_swept_ms = now;
}

bool admit_register_rate(struct server *srv, struct principal *pr)
{
    if (!pr)
        return true; /* authenticated sessions have one; nothing to count against */
    refill(srv, pr, mono_ms());
    if (pr->reg_tokens < 1.0)
        return false;
    pr->reg_tokens -= 1.0;
    return true;
}

/* ---- what sessions make rrpcd hold ---------------------------------------------------- */

bool admit_hold_ok(struct conn *c, size_t more, char *why, size_t whylen)
{
    const struct config *cfg = c->srv->cfg;
    if (c->pr && c->pr->held + more > (size_t)cfg->max_held_per_principal) {
        snprintf(why, whylen, "principal '%s' would hold %zu bytes in partly received requests "
                 "and unsent answers (max_held_per_principal %lld): read the answers, and "
                 "send each request whole", c->pr->name, c->pr->held + more,
                 (long long)cfg->max_held_per_principal);
        return false;
    }
    if (c->srv->held + more > (size_t)cfg->max_held_total) {
        snprintf(why, whylen, "rrpcd would hold %zu bytes in partly received requests and "
                 "unsent answers of all sessions (max_held_total %lld)", c->srv->held + more,
                 (long long)cfg->max_held_total);
        return false;
    }
    return true;
}

void admit_held(struct conn *c, size_t held)
{
    c->srv->held = c->srv->held - c->held + held;
    if (c->pr)
        c->pr->held = c->pr->held - c->held + held;
    c->held = held;
    metrics_held(c->srv->held);
}

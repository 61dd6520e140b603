/* SPDX-License-Identifier: MIT */
/*
 * Watches of a service (docs/broker.md, "Watching a service"): a session
 * subscribes to a service with "watch"; whenever the service's set of live
 * registrations may have changed (registry_add, a registration freed, an etcd
 * write that made one live), its subscriptions are marked dirty, and a timer
 * soon after sends each dirty one the service's whole live set.  Changes
 * that come together are sent once; a session with more than WATCH_BACKLOG
 * bytes waiting to go out gets its push later (the subscription stays
 * dirty), so a slow reader makes rrpcd hold at most one pending set per
 * subscription, built when it is sent.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <ev.h>
#include <msgpack.h>

#include "rrpcd.h"

#define FLUSH_S 0.02   /* changes in this long are sent together */
#define RETRY_S 0.1    /* a session that had no room is tried again this often */
#define BUCKETS 256

struct sub {
    struct sub *next; /* in its bucket */
    struct conn *c;
    uint64_t id;
    bool dirty;
    char service[256];
};

static struct ev_loop *loop;
static ev_timer flush_w;
static struct sub *buckets[BUCKETS];
static size_t n_subs;
static uint64_t next_id;

static unsigned bucket_of(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h % BUCKETS;
}

static void arm(double after)
{
    if (!loop || ev_is_active(&flush_w))
        return;
    ev_timer_set(&flush_w, after, 0);
    ev_timer_start(loop, &flush_w);
}

/* The push of the live set of @s->service: {v, id 0, ok, push "watch", watch,
 * service, instances [{instance?, endpoints}]}. */
static void pack_set(msgpack_packer *pk, const struct sub *s)
{
    const struct service *svc = registry_service(s->service);
    size_t live = svc ? svc->n_regs - svc->n_pending : 0;
    msgpack_pack_map(pk, 7);
    pk_str(pk, "v");
    msgpack_pack_uint32(pk, CTL_VERSION);
    pk_str(pk, "id");
    msgpack_pack_uint64(pk, 0);
    pk_str(pk, "ok");
    msgpack_pack_true(pk);
    pk_str(pk, "push");
    pk_str(pk, "watch");
    pk_str(pk, "watch");
    msgpack_pack_uint64(pk, s->id);
    pk_str(pk, "service");
    pk_str(pk, s->service);
    pk_str(pk, "instances");
    msgpack_pack_array(pk, (uint32_t)live);
    for (const struct registration *r = svc ? svc->regs : NULL; r; r = r->next) {
        if (r->etcd_pending)
            continue;
        msgpack_pack_map(pk, r->has_instance ? 2 : 1);
        if (r->has_instance) {
            pk_str(pk, "instance");
            msgpack_pack_bin(pk, sizeof(r->instance));
            msgpack_pack_bin_body(pk, r->instance, sizeof(r->instance));
        }
        pk_str(pk, "endpoints");
        msgpack_pack_array(pk, (uint32_t)r->n_eps);
        for (size_t i = 0; i < r->n_eps; i++)
            rrpci_pk_endpoint(pk, &r->eps[i], true, r->classes);
    }
}

static void flush_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)w, (void)revents;
    bool again = false;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub *s = buckets[b]; s; s = s->next) {
            if (!s->dirty)
                continue;
            msgpack_sbuffer sb;
            msgpack_packer pk;
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            pack_set(&pk, s);
            int r = server_push(s->c, sb.data, sb.size);
            msgpack_sbuffer_destroy(&sb);
            if (r == -EAGAIN) {
                again = true; /* no room now: later */
                continue;
            }
            if (r == -E2BIG) /* register keeps lookup answers, which are larger, in a frame */
                LOG(LOG_ERR, "the set of '%s' is above the frame limit; not pushed", s->service);
            s->dirty = false;
        }
    if (again)
        arm(RETRY_S);
}

void watch_start(struct ev_loop *l)
{
    loop = l;
    ev_timer_init(&flush_w, flush_cb, FLUSH_S, 0);
}

void watch_stop(void)
{
    if (loop)
        ev_timer_stop(loop, &flush_w);
    for (unsigned b = 0; b < BUCKETS; b++)
        while (buckets[b]) {
            struct sub *s = buckets[b];
            buckets[b] = s->next;
            free(s);
        }
    n_subs = 0;
    loop = NULL;
}

int watch_add(struct conn *c, const char *service, uint64_t *ret_id)
{
    size_t mine = 0;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub *s = buckets[b]; s; s = s->next)
            mine += s->c == c;
    if (mine >= WATCH_MAX_PER_SESSION || n_subs >= WATCH_MAX_TOTAL)
        return -ENOSPC;
    struct sub *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->c = c;
    s->id = ++next_id;
    s->dirty = true; /* the first push is the set as it is now */
    snprintf(s->service, sizeof(s->service), "%s", service);
    unsigned b = bucket_of(service);
    s->next = buckets[b];
    buckets[b] = s;
    n_subs++;
    *ret_id = s->id;
    arm(0);
    return 0;
}

int watch_del(struct conn *c, uint64_t id)
{
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub **pp = &buckets[b]; *pp; pp = &(*pp)->next)
            if ((*pp)->c == c && (*pp)->id == id) {
                struct sub *s = *pp;
                *pp = s->next;
                free(s);
                n_subs--;
                return 0;
            }
    return -ENOENT;
}

bool watch_any(const struct conn *c)
{
    if (!n_subs)
        return false;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub *s = buckets[b]; s; s = s->next)
            if (s->c == c)
                return true;
    return false;
}

void watch_conn_gone(struct conn *c)
{
    if (!n_subs)
        return;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub **pp = &buckets[b]; *pp;) {
            struct sub *s = *pp;
            if (s->c == c) {
                *pp = s->next;
                free(s);
                n_subs--;
            } else {
                pp = &s->next;
            }
        }
}

void watch_changed(const char *service)
{
    if (!n_subs)
        return;
    bool any = false;
    for (struct sub *s = buckets[bucket_of(service)]; s; s = s->next)
        if (!strcmp(s->service, service)) {
            s->dirty = true;
            any = true;
        }
    if (any)
        arm(FLUSH_S);
}

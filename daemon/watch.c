/* SPDX-License-Identifier: MIT */
/*
 * Watches of a service (docs/broker.md, "Watching a service"): a session
 * subscribes to a service with "watch"; whenever the service's set of live
 * registrations may have changed (the registry tells watch_changed: a
 * registration added, freed, or made live by an etcd write), its
 * subscriptions are marked dirty, and a timer
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

struct watch {
    struct ev_loop *loop; /* NULL: no timer, nothing is pushed */
    struct registry *reg;
    watch_push_fn *push;
    ev_timer flush_w;
    struct sub *buckets[BUCKETS];
    size_t n_subs;
    uint64_t next_id;
};

static unsigned bucket_of(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h % BUCKETS;
}

static void arm(struct watch *w, double after)
{
    if (!w->loop || ev_is_active(&w->flush_w))
        return;
    ev_timer_set(&w->flush_w, after, 0);
    ev_timer_start(w->loop, &w->flush_w);
}

/* The push of the live set of @s->service: {v, id 0, ok, push "watch", watch,
 * service, instances [{instance?, endpoints}]}. */
static void pack_set(struct watch *w, msgpack_packer *pk, const struct sub *s)
{
    const struct service *svc = registry_service(w->reg, s->service);
    size_t live = svc ? svc->n_regs - svc->n_pending : 0;
    msgpack_pack_map(pk, 7);
    pk_str(pk, CTL_K_V);
    msgpack_pack_uint32(pk, CTL_VERSION);
    pk_str(pk, CTL_K_ID);
    msgpack_pack_uint64(pk, 0);
    pk_str(pk, CTL_K_OK);
    msgpack_pack_true(pk);
    pk_str(pk, CTL_K_PUSH);
    pk_str(pk, CTL_PUSH_WATCH);
    pk_str(pk, CTL_K_WATCH);
    msgpack_pack_uint64(pk, s->id);
    pk_str(pk, CTL_K_SERVICE);
    pk_str(pk, s->service);
    pk_str(pk, CTL_K_INSTANCES);
    msgpack_pack_array(pk, (uint32_t)live);
    for (const struct registration *r = svc ? svc->regs : NULL; r; r = r->next) {
        if (r->etcd_pending)
            continue;
        msgpack_pack_map(pk, r->has_instance ? 2 : 1);
        if (r->has_instance) {
            pk_str(pk, CTL_K_INSTANCE);
            msgpack_pack_bin(pk, sizeof(r->instance));
            msgpack_pack_bin_body(pk, r->instance, sizeof(r->instance));
        }
        pk_str(pk, CTL_K_ENDPOINTS);
        answer_pack_endpoints(pk, r);
    }
}

static void flush_cb(struct ev_loop *l, ev_timer *t, int revents)
{
    (void)l, (void)revents;
    struct watch *w = t->data;
    bool again = false;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub *s = w->buckets[b]; s; s = s->next) {
            if (!s->dirty)
                continue;
            msgpack_sbuffer sb;
            msgpack_packer pk;
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            pack_set(w, &pk, s);
            int r = w->push(s->c, sb.data, sb.size);
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
        arm(w, RETRY_S);
}

struct watch *watch_new(struct ev_loop *loop, struct registry *reg, watch_push_fn *push)
{
    struct watch *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->loop = loop;
    w->reg = reg;
    w->push = push;
    ev_timer_init(&w->flush_w, flush_cb, FLUSH_S, 0);
    w->flush_w.data = w;
    return w;
}

void watch_free(struct watch *w)
{
    if (!w)
        return;
    if (w->loop)
        ev_timer_stop(w->loop, &w->flush_w);
    for (unsigned b = 0; b < BUCKETS; b++)
        while (w->buckets[b]) {
            struct sub *s = w->buckets[b];
            w->buckets[b] = s->next;
            free(s);
        }
    free(w);
}

int watch_add(struct watch *w, struct conn *c, const char *service, uint64_t *ret_id)
{
    size_t mine = 0;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub *s = w->buckets[b]; s; s = s->next)
            mine += s->c == c;
    if (mine >= WATCH_MAX_PER_SESSION || w->n_subs >= WATCH_MAX_TOTAL)
        return -ENOSPC;
    struct sub *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->c = c;
    s->id = ++w->next_id;
    s->dirty = true; /* the first push is the set as it is now */
    snprintf(s->service, sizeof(s->service), "%s", service);
    unsigned b = bucket_of(service);
    s->next = w->buckets[b];
    w->buckets[b] = s;
    w->n_subs++;
    *ret_id = s->id;
    arm(w, 0);
    return 0;
}

int watch_del(struct watch *w, struct conn *c, uint64_t id)
{
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub **pp = &w->buckets[b]; *pp; pp = &(*pp)->next)
            if ((*pp)->c == c && (*pp)->id == id) {
                struct sub *s = *pp;
                *pp = s->next;
                free(s);
                w->n_subs--;
                return 0;
            }
    return -ENOENT;
}

bool watch_any(const struct watch *w, const struct conn *c)
{
    if (!w->n_subs)
        return false;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub *s = w->buckets[b]; s; s = s->next)
            if (s->c == c)
                return true;
    return false;
}

void watch_conn_gone(struct watch *w, struct conn *c)
{
    if (!w->n_subs)
        return;
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct sub **pp = &w->buckets[b]; *pp;) {
            struct sub *s = *pp;
            if (s->c == c) {
                *pp = s->next;
                free(s);
                w->n_subs--;
            } else {
                pp = &s->next;
            }
        }
}

void watch_changed(void *arg, const char *service)
{
    struct watch *w = arg;
    if (!w->n_subs)
        return;
    bool any = false;
    for (struct sub *s = w->buckets[bucket_of(service)]; s; s = s->next)
        if (!strcmp(s->service, service)) {
            s->dirty = true;
            any = true;
        }
    if (any)
        arm(w, FLUSH_S);
}

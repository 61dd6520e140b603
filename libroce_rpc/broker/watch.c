/* SPDX-License-Identifier: MIT */
/*
 * Watching a service (rrpc_broker_watch_*): a session of its own, and a
 * thread that subscribes, reads rrpcd's pushes of the live set, and queues
 * what left and what came for rrpc_broker_watch_next; the session is made
 * again (down the list of brokers) when it ends.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/client_int.h"

#define WATCH_QUEUE_MAX 4096 /* events not taken yet; beyond, the thread stops reading */

struct winst { /* one instance of the set last pushed */
    char *key;  /* instance id and endpoints: an instance whose endpoints change is
                   removed and added */
    uint8_t id[RRPC_TICKET_INSTANCE_LEN];
    size_t n;
    rrpc_service_endpoint *eps;
};

struct wev {
    struct wev *next;
    int type;
    struct winst in; /* owns key and eps */
};

struct rrpc_broker_watch {
    struct rrpc_broker *s; /* a session of its own, with the parent's list and credentials */
    char service[256];
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; /* the queue, stop, err */
    pthread_cond_t cond; /* CLOCK_MONOTONIC: an event queued or taken, or stop */
    bool stop;
    struct wev *head, *tail;
    size_t qlen;
    int err; /* a failure to report once through rrpc_broker_watch_next */
    struct winst *set;
    size_t n_set;
};

static void winst_free(struct winst *in)
{
    free(in->key);
    free(in->eps);
}

/* Reads the instances of a push (or of nothing: an empty set) into @ret (n in @ret_n). */
static int parse_set(struct rrpc_broker *b, const char *service, const msgpack_object *ins,
                     struct winst **ret, size_t *ret_n)
{
    if (!ins || ins->type != MSGPACK_OBJECT_ARRAY || ins->via.array.size > 65536)
        return rrpci_broker_fail(b, -EPROTO, "rrpcd's watch push for '%s' is malformed", service);
    size_t n = ins->via.array.size;
    struct winst *set = calloc(n ? n : 1, sizeof(*set));
    if (!set)
        return -ENOMEM;
    int r = 0;
    for (size_t k = 0; k < n && !r; k++) {
        const msgpack_object *in = &ins->via.array.ptr[k];
        const msgpack_object *id = rrpci_mp_get(in, CTL_K_INSTANCE);
        const msgpack_object *eps = rrpci_mp_get(in, CTL_K_ENDPOINTS);
        if (!rrpci_endpoints_ok(eps) || (id && (id->type != MSGPACK_OBJECT_BIN ||
                                          id->via.bin.size != RRPC_TICKET_INSTANCE_LEN))) {
            r = rrpci_broker_fail(
                b, -EPROTO, "rrpcd's watch push for '%s': instance %zu is malformed", service, k);
            break;
        }
        if (id)
            memcpy(set[k].id, id->via.bin.ptr, RRPC_TICKET_INSTANCE_LEN);
        rrpc_service_info tmp = { .endpoints = calloc(eps->via.array.size,
                                                      sizeof(rrpc_service_endpoint)) };
        size_t keylen = 2 * RRPC_TICKET_INSTANCE_LEN + 2 + eps->via.array.size * 310;
        set[k].key = malloc(keylen);
        if (!tmp.endpoints || !set[k].key) {
            free(tmp.endpoints);
            r = -ENOMEM;
            break;
        }
        r = rrpci_add_endpoints(b, service, eps, 0, &tmp);
        set[k].eps = tmp.endpoints;
        set[k].n = tmp.n_endpoints;
        size_t off = 0;
        for (size_t i = 0; i < RRPC_TICKET_INSTANCE_LEN; i++)
            off += (size_t)snprintf(set[k].key + off, keylen - off, "%02x", set[k].id[i]);
        for (size_t i = 0; i < set[k].n && !r; i++)
            off += (size_t)snprintf(set[k].key + off, keylen - off, "|%s", set[k].eps[i].uri);
    }
    if (r) {
        for (size_t k = 0; k < n; k++)
            winst_free(&set[k]);
        free(set);
        return r;
    }
    *ret = set;
    *ret_n = n;
    return 0;
}

static bool in_set(const struct winst *set, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(set[i].key, key))
            return true;
    return false;
}

/* Queues one event (a copy of @in); waits while the queue is full.  @mu held. */
static int queue_event(struct rrpc_broker_watch *w, int type, const struct winst *in)
{
    RRPCI_WAIT_FOR(&w->cond, &w->mu, INT64_MAX, w->qlen < WATCH_QUEUE_MAX || w->stop);
    if (w->stop)
        return -ECANCELED;
    struct wev *e = calloc(1, sizeof(*e));
    if (!e || !(e->in.key = strdup(in->key)) ||
        !(e->in.eps = malloc((in->n ? in->n : 1) * sizeof(*in->eps)))) {
        if (e)
            free(e->in.key);
        free(e);
        return -ENOMEM;
    }
    e->type = type;
    memcpy(e->in.id, in->id, sizeof(in->id));
    e->in.n = in->n;
    memcpy(e->in.eps, in->eps, in->n * sizeof(*in->eps));
    if (w->tail)
        w->tail->next = e;
    else
        w->head = e;
    w->tail = e;
    w->qlen++;
    pthread_cond_broadcast(&w->cond);
    return 0;
}

/* The set is now @set: queues what left and what came, and keeps @set. */
static void apply_set(struct rrpc_broker_watch *w, struct winst *set, size_t n)
{
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n_set; i++)
        if (!in_set(set, n, w->set[i].key))
            queue_event(w, RRPC_WATCH_REMOVED, &w->set[i]);
    for (size_t i = 0; i < n; i++)
        if (!in_set(w->set, w->n_set, set[i].key))
            queue_event(w, RRPC_WATCH_ADDED, &set[i]);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < w->n_set; i++)
        winst_free(&w->set[i]);
    free(w->set);
    w->set = set;
    w->n_set = n;
}

/* Sends "watch" on a session (made, or failed over, by roundtrip). */
static int subscribe(struct rrpc_broker_watch *w)
{
    struct req q;
    struct reply u;
    rrpci_reply_init(&u);
    pthread_mutex_lock(&w->s->io);
    rrpci_req_start(w->s, &q, CTL_OP_WATCH, 1);
    pk_str(&q.pk, CTL_K_SERVICE);
    pk_str(&q.pk, w->service);
    int r = rrpci_roundtrip(w->s, &q, &u);
    uint64_t id;
    if (!r && !rrpci_mp_uint(rrpci_mp_get(&u.u.data, CTL_K_WATCH), &id))
        r = rrpci_broker_fail(w->s, -EPROTO, "rrpcd's answer to watch '%s' is malformed",
                              w->service);
    pthread_mutex_unlock(&w->s->io);
    rrpci_req_free(&q);
    rrpci_reply_destroy(&u);
    return r;
}


static void *watch_thread(void *arg)
{
    struct rrpc_broker_watch *w = arg;
    struct rrpc_broker *s = w->s;
    int backoff = 0;
    char why[ERR_MAX] = "";
    struct reply u;
    rrpci_reply_init(&u);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        if (backoff)
            RRPCI_WAIT_FOR(&w->cond, &w->mu, rrpci_mono_ms() + backoff, w->stop);
        bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
        if (!s->ssl) {
            BLOG(s, LOG_NOTICE, "watch of '%s': subscribing again (%s)", w->service, why);
            int r = subscribe(w);
            if (r) {
                BLOG(s, LOG_WARNING, "watch of '%s': %s", w->service, rrpc_broker_last_error(s));
                pthread_mutex_lock(&w->mu);
                if (!w->err)
                    w->err = r; /* said once by rrpc_broker_watch_next */
                pthread_cond_broadcast(&w->cond);
                pthread_mutex_unlock(&w->mu);
                backoff = backoff ? (backoff * 2 > 2000 ? 2000 : backoff * 2) : 100;
                continue;
            }
            backoff = 0;
        }
        int r = rrpci_session_read(s, &u, 200);
        if (r == -EAGAIN)
            continue;
        if (r) {
            snprintf(why, sizeof(why), "the session ended: %.*s", WHY_MAX,
                     rrpc_broker_last_error(s));
            continue; /* the session is closed: subscribe again (the next broker if need be) */
        }
        const msgpack_object *m = &u.u.data;
        char push[16] = "";
        if (!rrpci_mp_str(rrpci_mp_get(m, CTL_K_PUSH), push, sizeof(push)) ||
            strcmp(push, CTL_PUSH_WATCH))
            continue; /* not a push: nothing we asked for */
        struct winst *set = NULL;
        size_t n = 0;
        r = parse_set(s, w->service, rrpci_mp_get(m, CTL_K_INSTANCES), &set, &n);
        if (r) {
            BLOG(s, LOG_WARNING, "watch of '%s': %s; subscribing again", w->service,
                 rrpc_broker_last_error(s));
            pthread_mutex_lock(&s->io);
            rrpci_session_close(s);
            pthread_mutex_unlock(&s->io);
            snprintf(why, sizeof(why), "a bad push");
            continue;
        }
        apply_set(w, set, n);
    }
    rrpci_reply_destroy(&u);
    return NULL;
}

RRPC_API void rrpc_broker_watch_close(rrpc_broker_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    if (w->thread_started)
        pthread_join(w->thread, NULL);
    while (w->head) {
        struct wev *e = w->head;
        w->head = e->next;
        winst_free(&e->in);
        free(e);
    }
    for (size_t i = 0; i < w->n_set; i++)
        winst_free(&w->set[i]);
    free(w->set);
    rrpc_broker_close(w->s);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

RRPC_API int rrpc_broker_watch_open(rrpc_broker *b, const char *service,
                                    rrpc_broker_watch **ret_w)
{
    if (!b || !service || !*service || strlen(service) > 255 || !ret_w)
        return -EINVAL;
    struct rrpc_broker_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    snprintf(w->service, sizeof(w->service), "%s", service);
    pthread_mutex_init(&w->mu, NULL);
    rrpci_cond_init(&w->cond);
    w->s = rrpci_broker_clone(b);
    int r = w->s ? subscribe(w) : -ENOMEM;
    if (!r) {
        r = -pthread_create(&w->thread, NULL, watch_thread, w);
        w->thread_started = r == 0;
    }
    if (r) {
        if (w->s)
            rrpci_broker_fail(b, r, "%s", rrpc_broker_last_error(w->s));
        rrpc_broker_watch_close(w);
        return r;
    }
    *ret_w = w;
    return 0;
}

RRPC_API int rrpc_broker_watch_next(rrpc_broker_watch *w, int timeout_ms, rrpc_watch_event *ev)
{
    if (!w || !ev || timeout_ms < 0)
        return -EINVAL;
    int64_t until = rrpci_mono_ms() + timeout_ms;
    pthread_mutex_lock(&w->mu);
    RRPCI_WAIT_FOR(&w->cond, &w->mu, until, w->head || w->err || w->stop);
    struct wev *e = w->head;
    int r = 0;
    if (e) {
        w->head = e->next;
        if (!w->head)
            w->tail = NULL;
        w->qlen--;
        pthread_cond_broadcast(&w->cond);
    } else if (w->err) {
        r = w->err;
        w->err = 0;
    } else {
        r = -ETIMEDOUT;
    }
    pthread_mutex_unlock(&w->mu);
    if (!e)
        return r;
    memset(ev, 0, sizeof(*ev));
    ev->type = e->type;
    memcpy(ev->instance, e->in.id, sizeof(ev->instance));
    ev->n_endpoints = e->in.n < RRPC_WATCH_MAX_ENDPOINTS ? e->in.n : RRPC_WATCH_MAX_ENDPOINTS;
    memcpy(ev->endpoints, e->in.eps, ev->n_endpoints * sizeof(*ev->endpoints));
    winst_free(&e->in);
    free(e);
    return 0;
}

RRPC_API const char *rrpc_broker_watch_last_error(rrpc_broker_watch *w)
{
    return w ? rrpc_broker_last_error(w->s) : "";
}

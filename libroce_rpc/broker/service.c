/* SPDX-License-Identifier: MIT */
/*
 * The reconnecting service handle (include/roce_rpc/broker.h, rrpc_service):
 * one connection to a service found by name, made again by a fresh lookup
 * when it went down, with an exponential backoff with jitter between failed
 * attempts.  The public API of libroce_rpc and the broker client, and the
 * client's wait (client_int.h).
 *
 * Every connection is a "link".  A link has two owners: the handle (until it
 * closes the connection) and the connection's DOWN event, which the core
 * delivers exactly once to a connection handed out by rrpc_connect*, also
 * after rrpc_conn_close (from the loop, later).  The event callback runs on
 * the loop thread with the context's lock held; it touches nothing but the
 * link's atomics, so the handle's mutex is never taken under the context's
 * lock, and the handle never calls into the context with its mutex held.
 *
 * Borrowers: rrpc_service_conn hands out the current link's connection and
 * counts it; a link that went down is detached from the handle ("retired")
 * and closed when its last borrower gives it back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker/client_int.h"
#include "util/reserved.h"

#define SVC_ERR_MAX 512

struct link {
    struct link *next;  /* on svc->retired */
    rrpc_conn *conn;
    int borrows;        /* svc->mu */
    atomic_int refs;    /* the handle's + the pending DOWN event's */
    atomic_bool down;   /* the DOWN event came, or a call saw the connection lost */
    atomic_int reason;  /* the DOWN reason */
};

struct rrpc_service {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; an attempt ended, or closing */
    rrpc_ctx *ctx;
    rrpc_broker *b;
    char name[256];
    int backoff_min_ms, backoff_max_ms, connect_timeout_ms, wait_ms;

    struct link *cur;     /* the current connection, or NULL */
    struct link *retired; /* went down, still borrowed */
    bool connecting;      /* a thread is making an attempt (without mu) */
    bool closing;
    int64_t next_attempt_ms; /* monotonic: no attempt before */
    int backoff_ms;          /* the delay last used; 0 after a success */
    uint64_t rng;
    rrpc_service_stat st;
    char err[SVC_ERR_MAX];
};

static _Thread_local char err_copy[SVC_ERR_MAX];

static uint64_t next_rand(struct rrpc_service *s)
{
    /* xorshift64*: jitter only, nothing secret */
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545F4914F6CDD1DULL;
}

/* The delay before the attempt after a failure: the previous one doubled
 * (the minimum first), capped, then drawn from its upper half, never below
 * the minimum.  Jitter keeps many clients of one restarted service from
 * coming back in step. */
static int next_backoff(struct rrpc_service *s)
{
    int64_t base = s->backoff_ms ? (int64_t)s->backoff_ms * 2 : s->backoff_min_ms;
    if (base > s->backoff_max_ms)
        base = s->backoff_max_ms;
    int64_t half = base / 2;
    int64_t d = base - (half > 0 ? (int64_t)(next_rand(s) % (uint64_t)(half + 1)) : 0);
    if (d < s->backoff_min_ms)
        d = s->backoff_min_ms;
    s->backoff_ms = (int)base;
    return (int)d;
}

static void set_err(struct rrpc_service *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof(s->err), fmt, ap);
    va_end(ap);
}

/* ---- links ----------------------------------------------------------------- */

static void link_unref(struct link *l)
{
    if (atomic_fetch_sub(&l->refs, 1) == 1)
        free(l);
}

/* Runs on the loop thread with the context's lock held: atomics only. */
static void on_event(rrpc_conn *conn, rrpc_conn_event ev, int reason, void *user)
{
    (void)conn;
    struct link *l = user;
    if (ev != RRPC_CONN_DOWN)
        return;
    atomic_store(&l->reason, reason);
    atomic_store(&l->down, true);
    link_unref(l); /* the event's reference: it comes exactly once */
}

/* Closes the connection of every link on @list (outside svc->mu). */
static void close_links(struct link *list)
{
    while (list) {
        struct link *l = list;
        list = l->next;
        rrpc_conn_close(l->conn);
        link_unref(l);
    }
}

/*
 * With mu held: when the current link went down, detaches it, onto
 * s->retired when borrowed, else onto *@dead for the caller to close once it
 * let go of mu.
 */
static void retire_if_down(struct rrpc_service *s, struct link **dead)
{
    struct link *l = s->cur;
    if (!l || !atomic_load(&l->down))
        return;
    s->cur = NULL;
    s->st.drops++;
    int reason = atomic_load(&l->reason);
    if (reason)
        set_err(s, "the connection to '%s' went down: %s", s->name, rrpc_strerror(reason));
    if (l->borrows) {
        l->next = s->retired;
        s->retired = l;
    } else {
        l->next = *dead;
        *dead = l;
    }
}

/* ---- open / close ---------------------------------------------------------- */

RRPC_API int rrpc_service_open(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                               const rrpc_service_opts *opts, rrpc_service **ret_svc)
{
    if (!ctx || !b || !service || !*service || strlen(service) > 255 || !ret_svc)
        return -EINVAL;
    rrpc_service_opts o = { 0 };
    if (opts)
        o = *opts;
    if (RRPCI_RESERVED_BAD(&o) >= 0)
        return -EINVAL; /* a field this library does not know */
    if (o.backoff_min_ms < 0 || o.backoff_max_ms < 0 || o.connect_timeout_ms < 0 ||
        o.wait_ms < 0)
        return -EINVAL;
    if (!o.backoff_min_ms)
        o.backoff_min_ms = 100;
    if (!o.backoff_max_ms)
        o.backoff_max_ms = o.backoff_min_ms > 5000 ? o.backoff_min_ms : 5000;
    if (o.backoff_max_ms < o.backoff_min_ms)
        return -EINVAL;
    if (!o.connect_timeout_ms)
        o.connect_timeout_ms = 3000;

    struct rrpc_service *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    rrpci_cond_init(&s->cond);
    s->ctx = ctx;
    s->b = b;
    snprintf(s->name, sizeof(s->name), "%s", service);
    s->backoff_min_ms = o.backoff_min_ms;
    s->backoff_max_ms = o.backoff_max_ms;
    s->connect_timeout_ms = o.connect_timeout_ms;
    s->wait_ms = o.wait_ms;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid() ^
             (uint64_t)(uintptr_t)s;
    if (!s->rng)
        s->rng = 1;
    *ret_svc = s;
    return 0;
}

RRPC_API void rrpc_service_close(rrpc_service *svc)
{
    if (!svc)
        return;
    struct rrpc_service *s = svc;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    pthread_cond_broadcast(&s->cond);
    RRPCI_WAIT_FOR(&s->cond, &s->mu, INT64_MAX, !s->connecting);
    struct link *list = s->retired;
    s->retired = NULL;
    if (s->cur) {
        s->cur->next = list;
        list = s->cur;
        s->cur = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    close_links(list);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- borrowing ------------------------------------------------------------- */

RRPC_API int rrpc_service_conn(rrpc_service *svc, int wait_ms, rrpc_conn **ret_conn)
{
    if (!svc || !ret_conn || wait_ms < 0)
        return -EINVAL;
    struct rrpc_service *s = svc;
    struct link *dead = NULL;
    int64_t deadline = rrpci_mono_ms() + wait_ms;
    int r;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->closing) {
            r = RRPC_E_CLOSED;
            break;
        }
        retire_if_down(s, &dead);
        if (s->cur) {
            s->cur->borrows++;
            *ret_conn = s->cur->conn;
            r = 0;
            break;
        }
        if (s->connecting) { /* join that attempt; it is bounded */
            RRPCI_WAIT_FOR(&s->cond, &s->mu, INT64_MAX, !s->connecting || s->closing);
            continue;
        }
        int64_t now = rrpci_mono_ms();
        if (now < s->next_attempt_ms) {
            if (s->next_attempt_ms > deadline) {
                r = s->st.last_error ? s->st.last_error : -EAGAIN;
                break;
            }
            /* Until then, or until another thread makes an attempt or it closes. */
            RRPCI_WAIT_FOR(&s->cond, &s->mu, s->next_attempt_ms,
                           s->closing || s->connecting || s->cur);
            continue;
        }

        /* An attempt: a fresh lookup (and ticket), then the endpoints. */
        s->connecting = true;
        s->st.attempts++;
        pthread_mutex_unlock(&s->mu);
        close_links(dead);
        dead = NULL;
        struct link *l = calloc(1, sizeof(*l));
        rrpc_conn *conn = NULL;
        char why[SVC_ERR_MAX] = "";
        if (!l) {
            r = -ENOMEM;
        } else {
            atomic_init(&l->refs, 2);
            atomic_init(&l->down, false);
            atomic_init(&l->reason, 0);
            r = rrpc_connect_service(s->ctx, s->b, s->name, s->connect_timeout_ms, on_event, l,
                                     &conn);
            if (r) {
                snprintf(why, sizeof(why), "%s", rrpc_broker_last_error(s->b));
                free(l); /* the DOWN event of a connection never handed out does not come */
                l = NULL;
            } else {
                l->conn = conn;
            }
        }
        pthread_mutex_lock(&s->mu);
        s->connecting = false;
        pthread_cond_broadcast(&s->cond);
        if (!r) {
            s->cur = l;
            s->st.connects++;
            s->st.last_error = 0;
            s->backoff_ms = 0;
            s->next_attempt_ms = 0;
            continue; /* borrow it above (or close it when closing) */
        }
        s->st.failures++;
        s->st.last_error = r;
        int d = next_backoff(s);
        s->next_attempt_ms = rrpci_mono_ms() + d;
        set_err(s, "connecting to service '%s' failed: %s (%s); next attempt in %d ms",
                s->name, rrpc_strerror(r), why[0] ? why : rrpc_err_name(r), d);
    }
    pthread_mutex_unlock(&s->mu);
    close_links(dead);
    return r;
}

RRPC_API void rrpc_service_conn_release(rrpc_service *svc, rrpc_conn *conn)
{
    if (!svc || !conn)
        return;
    struct rrpc_service *s = svc;
    struct link *dead = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->cur && s->cur->conn == conn) {
        if (s->cur->borrows > 0)
            s->cur->borrows--;
        retire_if_down(s, &dead);
    } else {
        for (struct link **pp = &s->retired; *pp; pp = &(*pp)->next) {
            struct link *l = *pp;
            if (l->conn != conn)
                continue;
            if (--l->borrows == 0) {
                *pp = l->next;
                l->next = NULL;
                dead = l;
            }
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    close_links(dead);
}

/* Marks @conn down when a call on it saw the connection lost: the DOWN event
 * may come a moment later, and the next caller must not get it. */
static void mark_down(struct rrpc_service *s, rrpc_conn *conn, int reason)
{
    pthread_mutex_lock(&s->mu);
    struct link *l = s->cur && s->cur->conn == conn ? s->cur : NULL;
    for (struct link *o = s->retired; !l && o; o = o->next)
        if (o->conn == conn)
            l = o;
    if (l && !atomic_load(&l->down)) {
        int zero = 0;
        atomic_compare_exchange_strong(&l->reason, &zero, reason);
        atomic_store(&l->down, true);
    }
    pthread_mutex_unlock(&s->mu);
}

RRPC_API int rrpc_service_call_sync(rrpc_service *svc, const char *method, const void *req,
                                    size_t len, const rrpc_call_opts *opts, void **ret_data,
                                    size_t *ret_len)
{
    if (!svc || !method || !ret_data || !ret_len)
        return -EINVAL;
    struct rrpc_service *s = svc;
    rrpc_conn *conn;
    int r = rrpc_service_conn(s, s->wait_ms, &conn);
    if (r)
        return r;
    r = rrpc_call_sync(conn, method, req, len, opts, ret_data, ret_len);
    if (r == RRPC_E_CONN_LOST || r == RRPC_E_CLOSED)
        mark_down(s, conn, r);
    rrpc_service_conn_release(s, conn);
    return r;
}

/* ---- observing ------------------------------------------------------------- */

RRPC_API int rrpc_service_stats(rrpc_service *svc, rrpc_service_stat *ret)
{
    if (!svc || !ret)
        return -EINVAL;
    struct rrpc_service *s = svc;
    pthread_mutex_lock(&s->mu);
    *ret = s->st; /* up and backoff_ms are derived here, not kept */
    ret->up = s->cur && !atomic_load(&s->cur->down);
    int64_t left = s->next_attempt_ms - rrpci_mono_ms();
    ret->backoff_ms = s->cur || left <= 0 ? 0 : (int)left;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

RRPC_API const char *rrpc_service_last_error(rrpc_service *svc)
{
    if (!svc) {
        err_copy[0] = 0;
        return err_copy;
    }
    struct rrpc_service *s = svc;
    pthread_mutex_lock(&s->mu);
    memcpy(err_copy, s->err, sizeof(err_copy));
    pthread_mutex_unlock(&s->mu);
    return err_copy;
}

/* SPDX-License-Identifier: MIT */
/*
 * The registry on etcd (registry = etcd://...; issue #16).  Each registration
 * is the key PREFIX "reg/" ID (16 hex digits); its value, JSON, says what a
 * lookup needs.  Every key an rrpcd wrote is bound to that rrpcd's one etcd
 * lease (SESSION_TTL_S, kept alive by it), so etcd's load does not grow with
 * the registrations: the rrpcd a registration's server renews through owns
 * it, keeps its lease_ms locally and deletes the key when it expires or is
 * unregistered; a renewal through another rrpcd moves the key to that one's
 * lease (the previous owner lets go when it sees the change); the keys of an
 * rrpcd that died go with its lease.  Writes are made by a writer thread,
 * never on the loop: a register is answered when etcd took it (tried again
 * for up to PUT_BUDGET_MS while the cluster does not answer, as during a
 * leader election).  Lookups read the local registry, which a watch thread keeps in
 * step with etcd: a range of the prefix, then a watch from the range's
 * revision on, again after every failure.  Both threads' results reach the
 * loop through one bounded queue and an ev_async.  rrpcd is degraded when a
 * write failed, or when the watch stayed down for DOWN_GRACE_MS: lookups
 * answer from what it holds, registrations are refused at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include <ev.h>
#include <json-c/json.h>
#include <openssl/crypto.h>

#include "etcd.h"
#include "rrpcd.h"

#define QUEUE_MAX 65536       /* events between the threads and the loop */
#define JOBS_MAX 16384        /* writes waiting for the writer thread */
#define OP_TIMEOUT_MS 2000    /* each request to one etcd endpoint */
#define PUT_BUDGET_MS 8000    /* a register is answered within this long of its arrival */
#define DOWN_GRACE_MS 5000    /* a watch down for longer makes rrpcd degraded */
#define RETRY_MS 1000         /* between two attempts of the watch thread */
#define SESSION_TTL_S 10      /* this rrpcd's lease; kept alive every third of it */
#define VALUE_MAX (64 * 1024) /* the largest registration value taken from etcd */

enum ev_type {
    EV_PUT,
    EV_DELETE,
    EV_RESYNC,
    EV_SYNCED,
    EV_DOWN,
    EV_PUT_DONE,   /* a JOB_PUT's result */
    EV_LEASE,      /* the writer holds a new lease (@lease; @replaced: another was lost) */
    EV_LEASE_DONE, /* a keep-alive of the lease or a delete: @err */
    EV_SPACE_OK,   /* after NOSPACE: the writer compacted, defragmented and disarmed */
};

struct event {
    struct event *next;
    enum ev_type type;
    char *key;
    unsigned char *val;
    size_t len;
    char why[300];
    /* EV_PUT_DONE, EV_LEASE, EV_LEASE_DONE: the writer's result */
    int err;
    uint64_t reg_id, serial, req_id; /* serial 0: nobody waits for the answer */
    int64_t lease;
    bool replaced;
    bool nospace; /* EV_PUT_DONE: etcd refused it for want of space (its NOSPACE alarm) */
};

enum job_type { JOB_PUT, JOB_DELETE };

struct job {
    struct job *next;
    enum job_type type;
    uint64_t reg_id, serial, req_id;
    int64_t deadline_ms; /* JOB_PUT: monotonic; etcd took it by then, or it failed */
    char key[300];
    json_object *val; /* JOB_PUT: the value, "lease" added by the writer */
};

static const struct config *cfg;
static struct ev_loop *loop;
static struct registry *registry; /* the cache kept in step with etcd */
static struct store etcd_store;   /* the one etcd store of this process */
static struct etcd *ops, *watcher;
static pthread_t thread, writer;
static bool thread_running, writer_running;
static pthread_cond_t jobs_cv = PTHREAD_COND_INITIALIZER;
static struct job *j_head, *j_tail;
static size_t j_len;
static volatile int stop_flag;
static ev_async wake;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t room = PTHREAD_COND_INITIALIZER;
static struct event *q_head, *q_tail;
static size_t q_len;
static bool degraded = true; /* until the first sync */
static bool write_down;      /* the last write failed (cleared by one that works, or a sync) */
static int64_t cur_lease;    /* the loop's view of this rrpcd's lease (0: none yet) */
static int64_t w_lease, w_ka_due, w_ka_ok; /* the writer's: its lease, next keep-alive, last one
                                            * that worked (mono ms) */
static int64_t logged_ms;    /* when being degraded was last logged */
static unsigned down_quiet;  /* failures since, not logged */
#define LOG_EVERY_MS 30000   /* while degraded, the reason is logged again this often */
static char degraded_why[300] = "not synchronized with etcd yet";
/* etcd out of space: degraded until the writer freed space and disarmed the alarm
 * (a working keep-alive does not end it: keep-alives need no space). */
static bool nospace;
#define RECOVER_EVERY_MS 5000 /* the writer tries to free space this often */
/* The writer's: compactions (etcd_compact_interval_s) and NOSPACE recovery. */
static int64_t w_compact_due, w_compact_rev, w_compacted, w_recover_due;
static bool w_nospace;

static const char *etcd_store_degraded(struct store *st)
{
    (void)st;
    return degraded ? degraded_why : NULL;
}

/* Tells the server (store.done) how the register @serial/@req_id ended. */
static bool register_done(uint64_t serial, uint64_t req_id, struct registration *r, int err,
                          const char *why)
{
    return etcd_store.done &&
           etcd_store.done(etcd_store.done_arg, serial, req_id, r, err, why);
}

/* ---- the watch thread ------------------------------------------------------------ */

static void push_event(struct event *e)
{
    pthread_mutex_lock(&mu);
    while (q_len >= QUEUE_MAX && !stop_flag)
        pthread_cond_wait(&room, &mu);
    if (q_tail)
        q_tail->next = e;
    else
        q_head = e;
    q_tail = e;
    q_len++;
    pthread_mutex_unlock(&mu);
    ev_async_send(loop, &wake);
}

static int push(enum ev_type type, const char *key, const void *val, size_t len, const char *why)
{
    struct event *e = calloc(1, sizeof(*e));
    /* The value is kept NUL-terminated: apply_put parses it as text. */
    if (!e || (key && !(e->key = strdup(key))) || (val && !(e->val = malloc(len + 1)))) {
        if (e) {
            free(e->key);
            free(e);
        }
        return -ENOMEM;
    }
    e->type = type;
    if (val) {
        memcpy(e->val, val, len);
        e->val[len] = 0;
    }
    e->len = len;
    if (why)
        snprintf(e->why, sizeof(e->why), "%s", why);
    push_event(e);
    return 0;
}

static int on_kv(void *arg, const char *key, const void *val, size_t len)
{
    (void)arg;
    return push(EV_PUT, key, val, len, NULL);
}

static int on_change(void *arg, enum etcd_event ev, const char *key, const void *val, size_t len,
                     int64_t rev)
{
    (void)arg, (void)rev;
    return push(ev == ETCD_PUT ? EV_PUT : EV_DELETE, key, val, len, NULL);
}

static void *watch_main(void *arg)
{
    (void)arg;
    bool synced = false;
    int64_t down_since = 0; /* when the watch last went down; 0: it is up */
    unsigned fails = 0;     /* attempts failed since the last synchronization */
    while (!stop_flag) {
        int64_t rev = 0;
        int r = push(EV_RESYNC, NULL, NULL, 0, NULL);
        if (!r)
            r = etcd_range_prefix(watcher, cfg->etcd_prefix, 0, on_kv, NULL, &rev);
        if (!r)
            r = push(EV_SYNCED, NULL, NULL, fails, NULL); /* the loop says it is back */
        if (!r) {
            synced = true;
            down_since = 0;
            fails = 0;
            r = etcd_watch_prefix(watcher, cfg->etcd_prefix, rev + 1, on_change, NULL, &stop_flag);
        }
        if (stop_flag)
            break;
        /* A member going away (or a leader election) costs the watch a few
         * seconds: rrpcd is degraded only when it stays down longer, or has
         * never been synchronized. */
        metrics_etcd_error(ETCD_ERROR_WATCH);
        if (!down_since)
            down_since = mono_ms();
        char why[300];
        snprintf(why, sizeof(why), "%s", r == -ENOMEM ? "out of memory" : etcd_error(watcher));
        /* The first failure is logged; the loop logs being degraded (EV_DOWN) at most
         * every LOG_EVERY_MS with the repeats it did not log, and the return. */
        if (!synced || mono_ms() - down_since >= DOWN_GRACE_MS)
            push(EV_DOWN, NULL, NULL, 0, why);
        else if (fails == 0)
            LOG(LOG_WARNING, "etcd: the watch broke (%s); trying again every %d ms (degraded "
                "after %d s)", why, RETRY_MS, DOWN_GRACE_MS / 1000);
        fails++;
        for (int i = 0; i < RETRY_MS / 100 && !stop_flag; i++)
            usleep(100 * 1000);
    }
    return NULL;
}

/* ---- values ------------------------------------------------------------------------ */

static void hex(char *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

static bool unhex(const char *s, uint8_t *out, size_t n)
{
    if (!s || strlen(s) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

static void key_of(char *out, size_t n, uint64_t id)
{
    snprintf(out, n, "%sreg/%016" PRIx64, cfg->etcd_prefix, id);
}

/* The value of @r: what another rrpcd needs to answer lookups of it and to renew it
 * (the writer adds "lease"). */
static json_object *encode(const struct registration *r)
{
    char inst[2 * RRPC_TICKET_INSTANCE_LEN + 1];
    json_object *o = json_object_new_object(), *eps = json_object_new_array();
    if (!o || !eps) {
        json_object_put(o);
        json_object_put(eps);
        return NULL;
    }
    json_object_object_add(o, "service", json_object_new_string(r->svc->name));
    json_object_object_add(o, "principal", json_object_new_string(r->principal));
    json_object_object_add(o, "classes", json_object_new_int64(r->classes));
    json_object_object_add(o, "lease_ms", json_object_new_int64(r->lease_ms));
    if (r->has_instance) {
        hex(inst, r->instance, sizeof(r->instance));
        json_object_object_add(o, "instance", json_object_new_string(inst));
    }
    if (r->require_esp) /* every rrpcd answering its lookups must refuse unpaired hosts */
        json_object_object_add(o, "require_esp", json_object_new_boolean(1));
    for (size_t i = 0; i < r->n_eps; i++) {
        json_object *ep = json_object_new_object();
        json_object_object_add(ep, "transport", json_object_new_string(r->eps[i].transport));
        json_object_object_add(ep, "host", json_object_new_string(r->eps[i].host));
        json_object_object_add(ep, "port", json_object_new_int(r->eps[i].port));
        json_object_array_add(eps, ep);
    }
    json_object_object_add(o, "endpoints", eps);
    return o; /* "lease" is added by the writer once etcd granted it */
}

static const char *str_of(json_object *o, const char *name, size_t max)
{
    json_object *v;
    if (!json_object_object_get_ex(o, name, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    const char *s = json_object_get_string(v);
    return strlen(s) < max ? s : NULL;
}

static bool int_of(json_object *o, const char *name, int64_t min, int64_t max, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, name, &v) || !json_object_is_type(v, json_type_int))
        return false;
    *out = json_object_get_int64(v);
    return *out >= min && *out <= max;
}

/* A registration another rrpcd (or this one) put: checked as if it came from the wire. */
static void apply_put(const char *key, const unsigned char *val, size_t len)
{
    char want[300];
    uint64_t id;
    size_t pl = strlen(cfg->etcd_prefix);
    if (strncmp(key + pl, "reg/", 4) || sscanf(key + pl + 4, "%16" SCNx64, &id) != 1 || !id) {
        LOG(LOG_WARNING, "etcd: ignoring the key %s: not PREFIXreg/ID", key);
        return;
    }
    key_of(want, sizeof(want), id);
    if (strcmp(want, key)) {
        LOG(LOG_WARNING, "etcd: ignoring the key %s: not PREFIXreg/ID", key);
        return;
    }
    struct registration *old = registry_find(registry, id);
    if (old) {
        old->etcd_stale = false;
        json_object *o = len <= VALUE_MAX ? json_tokener_parse((const char *)val) : NULL;
        int64_t lease;
        if (o && int_of(o, "lease", 1, INT64_MAX, &lease)) {
            old->etcd_lease = lease;
            /* Another rrpcd's lease now: its server renews through that one. */
            if (old->expires_ms != INT64_MAX && !old->etcd_pending && lease != cur_lease) {
                LOG(LOG_INFO, "etcd: '%s' %016" PRIx64 " is renewed through another rrpcd now",
                    old->svc->name, id);
                old->expires_ms = INT64_MAX;
            }
        }
        json_object_put(o);
        return;
    }
    json_object *o = len <= VALUE_MAX ? json_tokener_parse((const char *)val) : NULL, *eps;
    struct registration tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    const char *service = o ? str_of(o, "service", 256) : NULL;
    const char *principal = o ? str_of(o, "principal", 256) : NULL;
    const char *inst = o ? str_of(o, "instance", 64) : NULL;
    int64_t classes, lease_ms, lease;
    struct rrpci_endpoint *ep = NULL;
    size_t n = 0;
    json_object *esp_o = NULL;
    bool esp = o && json_object_object_get_ex(o, "require_esp", &esp_o);
    bool ok = (!esp || json_object_is_type(esp_o, json_type_boolean)) && service && service[0] && principal &&
              int_of(o, "classes", 1, RRPC_CLASS_MASK_ALL, &classes) &&
              int_of(o, "lease_ms", 100, 3600000, &lease_ms) &&
              int_of(o, "lease", 1, INT64_MAX, &lease) &&
              (!inst || unhex(inst, tmpl.instance, sizeof(tmpl.instance))) &&
              json_object_object_get_ex(o, "endpoints", &eps) &&
              json_object_is_type(eps, json_type_array) &&
              (n = json_object_array_length(eps)) >= 1 && n <= CTL_MAX_ENDPOINTS &&
              (ep = calloc(n, sizeof(*ep)));
    for (size_t i = 0; ok && i < n; i++) {
        json_object *e = json_object_array_get_idx(eps, i);
        const char *t = str_of(e, "transport", sizeof(ep->transport));
        const char *h = str_of(e, "host", sizeof(ep->host));
        int64_t port;
        ok = t && h && h[0] && (!strcmp(t, CTL_TRANSPORT_TCP) || !strcmp(t, CTL_TRANSPORT_RDMA)) &&
             int_of(e, "port", 1, 65535, &port);
        if (ok) {
            strcpy(ep[i].transport, t);
            strcpy(ep[i].host, h);
            ep[i].port = (uint16_t)port;
        }
    }
    esp = esp && json_object_get_boolean(esp_o);
    if (!ok) {
        LOG(LOG_WARNING, "etcd: ignoring the registration %s: its value is not one rrpcd wrote",
            key);
        free(ep);
        json_object_put(o);
        return;
    }
    tmpl.id = id;
    tmpl.classes = (uint32_t)classes;
    tmpl.lease_ms = (uint32_t)lease_ms;
    tmpl.etcd_lease = lease;
    tmpl.has_instance = inst != NULL;
    tmpl.require_esp = esp;
    tmpl.eps = ep;
    tmpl.n_eps = n;
    tmpl.expires_ms = INT64_MAX; /* etcd's lease decides */
    tmpl.answer_bytes = answer_bytes(&tmpl);
    struct registration *r;
    int e = registry_add(registry, service, principal, ep, n, &tmpl, &r);
    if (e) {
        LOG(LOG_ERR, "etcd: cannot hold the registration %s: %s", key, strerror(-e));
        free(ep);
    } else {
        LOG(LOG_INFO, "etcd: '%s' registered '%s' (%zu endpoints) through another rrpcd",
            principal, service, n);
    }
    json_object_put(o);
}

static void apply_delete(const char *key)
{
    uint64_t id;
    size_t pl = strlen(cfg->etcd_prefix);
    if (strncmp(key + pl, "reg/", 4) || sscanf(key + pl + 4, "%16" SCNx64, &id) != 1)
        return;
    struct registration *r = registry_find(registry, id);
    if (r) {
        LOG(LOG_INFO, "etcd: the registration of '%s' %016" PRIx64 " is gone (unregistered or "
            "its lease expired)", r->svc->name, id);
        registry_remove(registry, r);
    }
}

/* Drops what a resync did not see again; ours stay (their renewals find out), and so
 * do those whose write is under way. */
static void drop_stale(void)
{
    struct service *s;
    bool again = true;
    while (again) {
        again = false;
        for (s = registry_services(registry); s && !again; s = s->next)
            for (struct registration *r = s->regs; r; r = r->next)
                if (r->etcd_stale && r->expires_ms == INT64_MAX && !r->etcd_pending) {
                    registry_remove(registry, r); /* may free s: start over */
                    again = true;
                    break;
                }
    }
}

static void put_done(const struct event *e);
static void etcd_store_remove(struct store *st, struct registration *r);
static void lease_done(const struct event *e);
static void lease_new(const struct event *e);
static void reput_owned(bool stale_only);
static void write_ok(void);

static void wake_cb(struct ev_loop *l, ev_async *w, int revents)
{
    (void)l, (void)w, (void)revents;
    pthread_mutex_lock(&mu);
    struct event *e = q_head;
    q_head = q_tail = NULL;
    q_len = 0;
    pthread_cond_broadcast(&room);
    pthread_mutex_unlock(&mu);
    while (e) {
        struct event *next = e->next;
        switch (e->type) {
        case EV_PUT:
            apply_put(e->key, e->val, e->len);
            break;
        case EV_DELETE:
            apply_delete(e->key);
            break;
        case EV_RESYNC:
            for (struct service *s = registry_services(registry); s; s = s->next)
                for (struct registration *r = s->regs; r; r = r->next)
                    r->etcd_stale = true;
            break;
        case EV_SYNCED:
            reput_owned(true); /* ours that etcd lost (our lease lapsed meanwhile) */
            drop_stale();
            if (degraded)
                LOG(LOG_NOTICE, "etcd: synchronized (%zu registrations)%s; not degraded",
                    registry_count(registry), e->len ? " after the failures above" : "");
            else if (e->len)
                LOG(LOG_NOTICE, "etcd: reachable again, the watch resumed after %zu failed "
                    "attempt(s); synchronized (%zu registrations)", e->len,
                    registry_count(registry));
            down_quiet = 0;
            degraded = false;
            metrics_etcd_degraded(false);
            write_down = false;
            break;
        case EV_PUT_DONE:
            put_done(e);
            break;
        case EV_LEASE:
            lease_new(e);
            break;
        case EV_LEASE_DONE:
            lease_done(e);
            break;
        case EV_SPACE_OK:
            nospace = false;
            write_ok();
            reput_owned(false); /* what failed to go in meanwhile */
            break;
        case EV_DOWN:
            /* At most one line per LOG_EVERY_MS, also across a brief return
             * (the watch and the reader may see etcd come and go in turn). */
            if (logged_ms == 0 || mono_ms() - logged_ms >= LOG_EVERY_MS) {
                char quiet[96] = "";
                if (down_quiet)
                    snprintf(quiet, sizeof(quiet), " (%u failed attempts in the last %d s not "
                             "logged)", down_quiet, LOG_EVERY_MS / 1000);
                logged_ms = mono_ms();
                down_quiet = 0;
                LOG(LOG_ERR, "etcd: unreachable (%s): DEGRADED: lookups answer from this "
                    "rrpcd's cache, registrations are refused; retrying every %d ms%s", e->why,
                    RETRY_MS, quiet);
            } else {
                down_quiet++;
            }
            snprintf(degraded_why, sizeof(degraded_why), "%s", e->why);
            degraded = true;
            metrics_etcd_degraded(true);
            break;
        }
        free(e->key);
        free(e->val);
        free(e);
        e = next;
    }
}

/* ---- writes: the writer thread ------------------------------------------------------- */

static void job_free(struct job *j)
{
    json_object_put(j->val); /* accepts NULL; the value holds no secret */
    free(j);
}

/* Queues @j for the writer (the loop's side); -EAGAIN when JOBS_MAX wait already. */
static int submit(struct job *j)
{
    pthread_mutex_lock(&mu);
    if (j_len >= JOBS_MAX || stop_flag) {
        pthread_mutex_unlock(&mu);
        job_free(j);
        return -EAGAIN;
    }
    if (j_tail)
        j_tail->next = j;
    else
        j_head = j;
    j_tail = j;
    j_len++;
    pthread_cond_signal(&jobs_cv);
    pthread_mutex_unlock(&mu);
    return 0;
}

static struct event *event_new(enum ev_type type)
{
    struct event *ev = calloc(1, sizeof(*ev));
    if (ev)
        ev->type = type;
    return ev;
}

/* Whether @e's last failure is one a cluster choosing a leader gives (a timeout),
 * not one of an etcd that is not there (refused) or refuses (an error answer). */
static bool worth_again(int e)
{
    return e == -EHOSTUNREACH && etcd_timed_out(ops);
}

/* The writer's lease: granted when it has none (the loop hears of it). */
static int ensure_lease(void)
{
    if (w_lease)
        return 0;
    int64_t id;
    int e = etcd_lease_grant(ops, SESSION_TTL_S, &id);
    if (e)
        return e;
    struct event *ev = event_new(EV_LEASE);
    if (!ev) {
        etcd_lease_revoke(ops, id);
        return -ENOMEM;
    }
    ev->lease = id;
    ev->replaced = w_ka_ok != 0; /* we held one before: what was bound to it is gone */
    w_lease = id;
    w_ka_ok = mono_ms();
    w_ka_due = w_ka_ok + SESSION_TTL_S * 1000 / 3;
    push_event(ev);
    return 0;
}

/* A put under the writer's lease; tried again while etcd times out, until the
 * job's deadline (PUT_BUDGET_MS from the register's arrival: the time it waited
 * for the writer counts), and with a new lease when etcd no longer knows ours. */
static void do_put(struct job *j, struct event *ev)
{
    int e;
    bool said = false;
    etcd_set_deadline(ops, j->deadline_ms);
    for (;;) {
        e = ensure_lease();
        if (!e) {
            json_object_object_add(j->val, "lease", json_object_new_int64(w_lease));
            const char *v = json_object_to_json_string_ext(j->val, JSON_C_TO_STRING_PLAIN);
            e = v ? etcd_put(ops, j->key, v, strlen(v), w_lease) : -ENOMEM;
            if (!e) {
                ev->lease = w_lease;
                break;
            }
            if (e == -EPROTO && strstr(etcd_error(ops), "lease not found")) {
                w_lease = 0; /* expired while etcd was away: a new one, and again */
                continue;
            }
        }
        if (!worth_again(e) || stop_flag || mono_ms() >= j->deadline_ms)
            break;
        if (!said) /* once per write: its outcome is logged (went_down) or answered */
            LOG(LOG_WARNING, "etcd: %s; trying the write again until its deadline",
                etcd_error(ops));
        said = true;
    }
    etcd_set_deadline(ops, 0);
    ev->err = e;
    if (e && etcd_nospace(ops)) {
        ev->nospace = true;
        if (!w_nospace)
            w_recover_due = mono_ms(); /* at once */
        w_nospace = true;
    }
}

static int range_nothing(void *arg, const char *key, const void *val, size_t len)
{
    (void)arg, (void)key, (void)val, (void)len;
    return 0;
}

/* etcd's revision now (a range of the prefix, one key at most). */
static int current_rev(int64_t *ret)
{
    return etcd_range_prefix(ops, cfg->etcd_prefix, 1, range_nothing, NULL, ret);
}

/*
 * Every etcd_compact_interval_s: compacts etcd's history up to the revision
 * seen one interval before (so watchers have an interval to catch up; this
 * rrpcd's watch, should it fall behind, ranges again).  Registrations churned
 * by register/unregister leave nothing behind for longer than two intervals.
 */
static void compact_history(void)
{
    int64_t rev;
    int e = current_rev(&rev);
    if (!e && w_compact_rev > w_compacted) {
        e = etcd_compact(ops, w_compact_rev);
        if (!e || e == -EALREADY)
            w_compacted = w_compact_rev;
        if (!e) {
            metrics_etcd_compaction();
            LOG(LOG_INFO, "etcd: compacted the history up to revision %" PRId64, w_compact_rev);
        } else if (e == -EALREADY) {
            e = 0; /* compacted further already (another rrpcd, or etcd's own) */
        }
    }
    /* An etcd that cannot be reached is reported once by the watch, and as
     * the degradation after its grace: a compaction that fails for that says
     * nothing new, and at warning it made a third line for one outage. */
    if (e)
        LOG(e == -EHOSTUNREACH ? LOG_INFO : LOG_WARNING,
            "etcd: cannot compact its history (%s); again in %d s", etcd_error(ops),
            cfg->etcd_compact_interval_s);
    else
        w_compact_rev = rev;
    w_compact_due = mono_ms() + (int64_t)cfg->etcd_compact_interval_s * 1000;
}

/*
 * etcd refused a write for want of space: compacts its history to now,
 * defragments it and disarms the NOSPACE alarm, as a person would; the loop
 * hears when that worked.  When the space is taken by live keys, compaction
 * frees nothing, the next write fails again, and this runs again.
 */
static void recover_space(void)
{
    int64_t rev;
    int n = 0;
    int e = current_rev(&rev);
    if (!e && (e = etcd_compact(ops, rev)) == -EALREADY)
        e = 0;
    if (!e)
        e = etcd_defragment(ops);
    if (!e)
        e = etcd_disarm_nospace(ops, &n);
    w_recover_due = mono_ms() + RECOVER_EVERY_MS;
    if (e) {
        LOG(LOG_WARNING, "etcd: out of space, and freeing it failed (%s); again in %d s",
            etcd_error(ops), RECOVER_EVERY_MS / 1000);
        return;
    }
    LOG(LOG_NOTICE, "etcd: out of space: compacted the history up to revision %" PRId64
        ", defragmented, disarmed %d NOSPACE alarm(s)", rev, n);
    w_nospace = false;
    struct event *ev = event_new(EV_SPACE_OK);
    if (ev)
        push_event(ev);
}

/* Keeps the writer's lease alive; a lease etcd lost is replaced at once.  A failure
 * reaches the loop only when no keep-alive worked for half the lease's time. */
static void keepalive(void)
{
    int64_t ttl;
    int e = etcd_lease_keepalive(ops, w_lease, &ttl);
    if (e == -ENOENT) {
        LOG(LOG_WARNING, "etcd: this rrpcd's lease %" PRId64 " is gone; taking a new one and "
            "writing its registrations again", w_lease);
        w_lease = 0;
        e = ensure_lease();
    } else if (!e) {
        w_ka_ok = mono_ms();
    }
    w_ka_due = mono_ms() + (e ? RETRY_MS : SESSION_TTL_S * 1000 / 3);
    if (e && mono_ms() - w_ka_ok < SESSION_TTL_S * 1000 / 2)
        return;
    struct event *ev = event_new(EV_LEASE_DONE);
    if (!ev)
        return;
    ev->err = e;
    if (e)
        snprintf(ev->why, sizeof(ev->why), "%s", etcd_error(ops));
    push_event(ev);
}

static void *writer_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!j_head && !stop_flag && !(w_lease && mono_ms() >= w_ka_due) &&
               !(w_compact_due && mono_ms() >= w_compact_due) &&
               !(w_nospace && mono_ms() >= w_recover_due)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1; /* the keep-alive's time is looked at every second */
            pthread_cond_timedwait(&jobs_cv, &mu, &ts);
        }
        if (stop_flag) {
            pthread_mutex_unlock(&mu);
            break;
        }
        struct job *j = j_head;
        if (j) {
            j_head = j->next;
            if (!j_head)
                j_tail = NULL;
            j_len--;
        }
        pthread_mutex_unlock(&mu);
        /* A register waits for this keep-alive: it counts against its deadline. */
        if (j && j->type == JOB_PUT)
            etcd_set_deadline(ops, j->deadline_ms);
        if (w_lease && mono_ms() >= w_ka_due)
            keepalive();
        etcd_set_deadline(ops, 0);
        /* Upkeep only while no register waits: it has no deadline of its own. */
        if (!j && w_nospace && mono_ms() >= w_recover_due)
            recover_space();
        if (!j && w_compact_due && mono_ms() >= w_compact_due)
            compact_history();
        if (!j)
            continue;
        struct event *ev = event_new(j->type == JOB_PUT ? EV_PUT_DONE : EV_LEASE_DONE);
        if (!ev) {
            job_free(j);
            continue;
        }
        ev->reg_id = j->reg_id;
        ev->serial = j->serial;
        ev->req_id = j->req_id;
        if (j->type == JOB_PUT) {
            do_put(j, ev);
        } else if ((ev->err = etcd_delete(ops, j->key))) {
            LOG(LOG_WARNING, "etcd: cannot delete %s (%s); it goes with this rrpcd's lease",
                j->key, etcd_error(ops));
        }
        if (ev->err)
            snprintf(ev->why, sizeof(ev->why), "%s",
                     ev->err == -ENOMEM ? "out of memory" : etcd_error(ops));
        job_free(j);
        push_event(ev);
    }
    return NULL;
}

/* ---- writes: the loop's side -------------------------------------------------------- */

static void went_down(const char *why)
{
    if (logged_ms == 0 || mono_ms() - logged_ms >= LOG_EVERY_MS) {
        logged_ms = mono_ms();
        LOG(LOG_ERR, "etcd: %s: DEGRADED: lookups answer from this rrpcd's cache, "
            "registrations are refused", why);
    }
    snprintf(degraded_why, sizeof(degraded_why), "%s", why);
    metrics_etcd_error(ETCD_ERROR_WRITE);
    metrics_etcd_degraded(true);
    degraded = true;
    write_down = true;
}

/* A write went through: a degradation that a failed write caused is over (one the
 * watch caused ends with its next synchronization). */
static void write_ok(void)
{
    if (write_down) {
        write_down = false;
        LOG(LOG_NOTICE, "etcd: a write went through again; not degraded");
        degraded = false;
        metrics_etcd_degraded(false);
    }
}

/* Queues the put of @r, bound to this rrpcd's lease; @serial/@req_id: the register
 * to answer (0: none). */
static int queue_put(struct registration *r, uint64_t serial, uint64_t req_id)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j || !(j->val = encode(r))) {
        free(j);
        return -ENOMEM;
    }
    j->type = JOB_PUT;
    /* The keep-alive the writer may be in counts too: leave it its time. */
    j->deadline_ms = mono_ms() + PUT_BUDGET_MS;
    j->reg_id = r->id;
    j->serial = serial;
    j->req_id = req_id;
    key_of(j->key, sizeof(j->key), r->id);
    return submit(j);
}

/* Writes again the registrations this rrpcd owns (all of them, or those a resync
 * did not find on etcd). */
static void reput_owned(bool stale_only)
{
    size_t n = 0;
    for (struct service *s = registry_services(registry); s; s = s->next)
        for (struct registration *r = s->regs; r; r = r->next)
            if (r->expires_ms != INT64_MAX && !r->etcd_pending &&
                (!stale_only || r->etcd_stale) && queue_put(r, 0, 0) == 0)
                n++;
    if (n)
        LOG(LOG_NOTICE, "etcd: writing %zu registrations of this rrpcd again", n);
}

static void lease_new(const struct event *e)
{
    cur_lease = e->lease;
    LOG(LOG_INFO, "etcd: this rrpcd's lease is %" PRId64 " (%d s, kept alive)", e->lease,
        SESSION_TTL_S);
    if (e->replaced)
        reput_owned(false);
}

static void lease_done(const struct event *e)
{
    if (e->err)
        went_down(e->why);
    else if (!nospace)
        write_ok();
}

static void put_done(const struct event *e)
{
    struct registration *r = registry_find(registry, e->reg_id);
    if (!e->err) {
        write_ok();
        if (r)
            r->etcd_lease = e->lease;
        if (!e->serial) /* written again, or taken over: nobody waits */
            return;
        if (r && r->etcd_pending) {
            registry_set_live(registry, r);
            r->expires_ms = mono_ms() + r->lease_ms;
            if (register_done(e->serial, e->req_id, r, 0, NULL))
                return;
            LOG(LOG_NOTICE, "'%s' %016" PRIx64 ": its server left before etcd took the "
                "registration; withdrawn", r->svc->name, r->id);
            etcd_store_remove(&etcd_store, r);
            registry_remove(registry, r);
        } else {
            register_done(e->serial, e->req_id, NULL, -ENOENT,
                                 "the registration went away while etcd took it; register "
                                 "again");
        }
        return;
    }
    if (e->nospace) {
        char why[sizeof(((struct event *)0)->why)];
        snprintf(why, sizeof(why), "etcd is out of space (its NOSPACE alarm: the backend "
                 "quota is full); rrpcd compacts and defragments it and disarms the alarm by "
                 "itself; if that frees nothing, raise etcd's --quota-backend-bytes");
        nospace = true;
        went_down(why);
    } else {
        went_down(e->why);
    }
    if (!e->serial)
        return; /* ours stays; the next resync or lease writes it again */
    if (r && r->etcd_pending)
        registry_remove(registry, r);
    char msg[600];
    snprintf(msg, sizeof(msg), "the registry on etcd did not take it (%s); this rrpcd is "
             "degraded: try again later", e->why);
    register_done(e->serial, e->req_id, NULL, e->err, msg);
}

static int etcd_store_put(struct store *st, struct registration *r, uint64_t serial,
                          uint64_t req_id)
{
    (void)st;
    if (degraded)
        return -EAGAIN;
    int e = queue_put(r, serial, req_id);
    if (!e) {
        r->etcd_pending = true;
        r->svc->n_pending++;
        r->expires_ms = INT64_MAX; /* its lease starts when etcd took it */
    }
    return e;
}

static int etcd_store_renew(struct store *st, struct registration *r)
{
    (void)st;
    if (r->expires_ms != INT64_MAX)
        return 0; /* ours: its lease is kept here, etcd's is this rrpcd's */
    if (degraded)
        return -EAGAIN;
    /* Registered through another rrpcd, renewed through this one: ours from now on. */
    LOG(LOG_INFO, "etcd: '%s' %016" PRIx64 " is renewed through this rrpcd now; moving it to "
        "this rrpcd's lease", r->svc->name, r->id);
    r->expires_ms = mono_ms() + r->lease_ms;
    return queue_put(r, 0, 0);
}

static void etcd_store_remove(struct store *st, struct registration *r)
{
    (void)st;
    struct job *j = calloc(1, sizeof(*j));
    if (j) {
        j->type = JOB_DELETE;
        key_of(j->key, sizeof(j->key), r->id);
    }
    if (!j || submit(j))
        LOG(LOG_WARNING, "etcd: cannot delete the key of '%s' %016" PRIx64 " (%s); it goes "
            "with this rrpcd's lease", r->svc->name, r->id,
            j ? "too many writes waiting" : "out of memory");
}

static const char *etcd_store_error(struct store *st)
{
    (void)st;
    return degraded_why;
}

static void etcd_store_stop(struct store *st);

static const struct store_ops etcd_ops = {
    .name = CTL_REGISTRY_ETCD,
    .degraded = etcd_store_degraded,
    .error = etcd_store_error,
    .put = etcd_store_put,
    .renew = etcd_store_renew,
    .remove = etcd_store_remove,
    .stop = etcd_store_stop,
};

int etcdreg_start(struct ev_loop *l, const struct config *c, struct registry *reg,
                  struct store **ret)
{
    if (ops)
        return -EBUSY; /* one etcd store per process */
    cfg = c;
    loop = l;
    registry = reg;
    etcd_store = (struct store){ .ops = &etcd_ops };
    *ret = &etcd_store;
    const char *hosts[ETCD_MAX_ENDPOINTS];
    for (size_t i = 0; i < c->n_etcd; i++)
        hosts[i] = c->etcd_hosts[i];
    char password[512] = "";
    int r = c->etcd_user[0] ? config_etcd_password(c, password, sizeof(password)) : 0;
    if (r) {
        LOG(LOG_ERR, "etcd: etcd_password_file = %s: cannot read the password: %s",
            c->etcd_password_file, strerror(-r));
        return r;
    }
    struct etcd_opts o = { .hosts = hosts, .n_hosts = c->n_etcd, .cert = c->etcd_cert,
                           .key = c->etcd_key, .ca = c->etcd_ca, .user = c->etcd_user,
                           .password = password, .timeout_ms = OP_TIMEOUT_MS };
    r = etcd_open(&ops, &o);
    if (!r)
        r = etcd_open(&watcher, &o);
    OPENSSL_cleanse(password, sizeof(password));
    if (r) {
        LOG(LOG_ERR, "etcd: cannot make a client: %s", strerror(-r));
        return r;
    }
    ev_async_init(&wake, wake_cb);
    ev_async_start(loop, &wake);
    stop_flag = 0;
    if ((r = pthread_create(&thread, NULL, watch_main, NULL))) {
        LOG(LOG_ERR, "etcd: cannot start the watch thread: %s", strerror(r));
        return -r;
    }
    thread_running = true;
    if (cfg->etcd_compact_interval_s > 0)
        w_compact_due = mono_ms() + 1000; /* the first notes the revision to compact to */
    if ((r = pthread_create(&writer, NULL, writer_main, NULL))) {
        LOG(LOG_ERR, "etcd: cannot start the writer thread: %s", strerror(r));
        return -r;
    }
    writer_running = true;
    LOG(LOG_NOTICE, "registry on etcd: %s%s, prefix %s, %s%s%s", c->etcd_hosts[0],
        c->n_etcd > 1 ? " (and more)" : "", c->etcd_prefix,
        c->etcd_ca[0] || c->etcd_cert[0] ? "https" : "http",
        c->etcd_user[0] ? ", as etcd user " : "", c->etcd_user);
    return 0;
}

static void etcd_store_stop(struct store *st)
{
    (void)st;
    if (thread_running) {
        pthread_mutex_lock(&mu);
        stop_flag = 1;
        pthread_cond_broadcast(&room);
        pthread_cond_broadcast(&jobs_cv);
        pthread_mutex_unlock(&mu);
        pthread_join(thread, NULL);
        thread_running = false;
    }
    if (writer_running) {
        pthread_mutex_lock(&mu);
        stop_flag = 1;
        pthread_cond_broadcast(&jobs_cv);
        pthread_cond_broadcast(&room);
        pthread_mutex_unlock(&mu);
        pthread_join(writer, NULL);
        writer_running = false;
    }
    for (struct job *j = j_head, *n; j; j = n) {
        n = j->next;
        job_free(j);
    }
    j_head = j_tail = NULL;
    j_len = 0;
    if (ops) {
        ev_async_stop(loop, &wake);
        for (struct event *e = q_head, *n; e; e = n) {
            n = e->next;
            free(e->key);
            free(e->val);
            free(e);
        }
        q_head = q_tail = NULL;
        q_len = 0;
    }
    etcd_close(ops);
    etcd_close(watcher);
    ops = watcher = NULL;
}

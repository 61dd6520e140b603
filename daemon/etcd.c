/* SPDX-License-Identifier: MIT */
/* rrpcd's client of etcd's v3 JSON gateway: see etcd.h. */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "etcd.h"
#include "rrpcd.h"

struct etcd {
    CURL *curl;
    char (*members)[300];
    size_t n_members, current; /* the member that answered last */
    long timeout_ms;
    char *buf; /* the answer being read */
    size_t len, cap;
    bool too_big;
};

int etcd_b64_encode(const void *in, size_t n, char *out, size_t cap)
{
    if (n > ETCD_MAX_VALUE || cap < 4 * ((n + 2) / 3) + 1)
        return -ENOSPC;
    EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    return 0;
}

int etcd_b64_decode(const char *in, size_t n, uint8_t *out, size_t cap, size_t *len)
{
    if (n % 4 || n / 4 * 3 > cap || n > 4 * ((ETCD_MAX_VALUE + 2) / 3))
        return -EINVAL;
    if (n == 0) {
        *len = 0;
        return 0;
    }
    int r = EVP_DecodeBlock(out, (const unsigned char *)in, (int)n);
    size_t pad = (in[n - 1] == '=') + (in[n - 2] == '=');
    if (r < 0 || (size_t)r < pad)
        return -EINVAL;
    *len = (size_t)r - pad;
    return 0;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
    struct etcd *e = arg;
    size_t n = size * nmemb;
    if (n > ETCD_MAX_ANSWER - e->len) {
        e->too_big = true;
        return 0; /* curl stops with CURLE_WRITE_ERROR */
    }
    if (e->len + n + 1 > e->cap) {
        size_t cap = e->cap ? e->cap : 4096;
        while (cap < e->len + n + 1)
            cap *= 2;
        char *b = realloc(e->buf, cap);
        if (!b)
            return 0;
        e->buf = b;
        e->cap = cap;
    }
    memcpy(e->buf + e->len, p, n);
    e->len += n;
    e->buf[e->len] = 0;
    return n;
}

int etcd_open(struct etcd **ret, const char (*members)[300], size_t n, long timeout_ms)
{
    static bool global_done;
    if (!n || timeout_ms <= 0)
        return -EINVAL;
    if (!global_done) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT))
            return -ENOMEM;
        global_done = true;
    }
    struct etcd *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->members = calloc(n, sizeof(*e->members));
    e->curl = curl_easy_init();
    if (!e->members || !e->curl) {
        etcd_close(e);
        return -ENOMEM;
    }
    memcpy(e->members, members, n * sizeof(*members));
    e->n_members = n;
    e->timeout_ms = timeout_ms;
    *ret = e;
    return 0;
}

void etcd_close(struct etcd *e)
{
    if (!e)
        return;
    if (e->curl)
        curl_easy_cleanup(e->curl);
    free(e->members);
    free(e->buf);
    free(e);
}

/* POSTs @req to @path on the members, from the current one on; parses the answer into
 * @ans.  The gateway's errors (HTTP status not 200) become -EPROTO, or -ENOENT when etcd
 * says a lease was not found. */
static int call(struct etcd *e, const char *path, json_object *req, json_object **ans)
{
    const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    int r = -ECONNREFUSED;
    for (size_t i = 0; i < e->n_members; i++) {
        size_t m = (e->current + i) % e->n_members;
        char url[400];
        const char *member = e->members[m];
        /* An IPv6 member is already written [ADDR]:PORT, which is what a URL wants. */
        snprintf(url, sizeof(url), "http://%s%s", member, path);
        CURL *c = e->curl;
        curl_easy_reset(c);
        e->len = 0;
        e->too_big = false;
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, e->timeout_ms);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, e->timeout_ms);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
        CURLcode cr = curl_easy_perform(c);
        if (cr != CURLE_OK) {
            if (e->too_big) {
                LOG(LOG_ERR, "etcd %s%s: an answer over %u bytes; refused", member, path,
                    ETCD_MAX_ANSWER);
                return -EPROTO;
            }
            LOG(LOG_DEBUG, "etcd %s%s: %s", member, path, curl_easy_strerror(cr));
            continue; /* the next member */
        }
        e->current = m;
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        json_tokener *tok = json_tokener_new();
        if (!tok)
            return -ENOMEM;
        json_object *o = e->len ? json_tokener_parse_ex(tok, e->buf, (int)e->len) : NULL;
        bool complete = json_tokener_get_error(tok) == json_tokener_success;
        json_tokener_free(tok);
        if (!o || !complete || !json_object_is_type(o, json_type_object)) {
            LOG(LOG_ERR, "etcd %s%s: HTTP %ld and an answer that is not a JSON object", member,
                path, status);
            json_object_put(o);
            return -EPROTO;
        }
        if (status != 200) {
            json_object *msg = NULL;
            json_object_object_get_ex(o, "message", &msg);
            const char *s = msg ? json_object_get_string(msg) : "";
            r = strstr(s, "lease not found") ? -ENOENT : -EPROTO;
            if (r == -EPROTO)
                LOG(LOG_ERR, "etcd %s%s: HTTP %ld: %s", member, path, status, s);
            json_object_put(o);
            return r;
        }
        *ans = o;
        return 0;
    }
    return r;
}

static json_object *int64_string(int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    return json_object_new_string(s);
}

/* Adds @name: base64 of @p[0..n) to @o. */
static int add_b64(json_object *o, const char *name, const void *p, size_t n)
{
    size_t cap = 4 * ((n + 2) / 3) + 1;
    char *s = malloc(cap);
    if (!s)
        return -ENOMEM;
    int r = etcd_b64_encode(p, n, s, cap);
    if (!r)
        r = json_object_object_add(o, name, json_object_new_string(s)) ? -ENOMEM : 0;
    free(s);
    return r;
}

/* The int64 member @name of @o (the gateway writes them as strings; a missing one is 0,
 * as protobuf's JSON leaves out zero values). */
static int get_int64(json_object *o, const char *name, int64_t *v)
{
    json_object *m;
    *v = 0;
    if (!json_object_object_get_ex(o, name, &m))
        return 0;
    if (!json_object_is_type(m, json_type_string) && !json_object_is_type(m, json_type_int))
        return -EPROTO;
    errno = 0;
    *v = json_object_get_int64(m);
    return errno ? -EPROTO : 0;
}

int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id)
{
    if (ttl_s <= 0)
        return -EINVAL;
    json_object *req = json_object_new_object(), *ans = NULL;
    if (!req)
        return -ENOMEM;
    json_object_object_add(req, "TTL", int64_string(ttl_s));
    int r = call(e, "/v3/lease/grant", req, &ans);
    json_object_put(req);
    if (r)
        return r;
    r = get_int64(ans, "ID", id);
    if (!r && *id == 0)
        r = -EPROTO;
    json_object_put(ans);
    return r;
}

int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s)
{
    json_object *req = json_object_new_object(), *ans = NULL, *res;
    if (!req)
        return -ENOMEM;
    json_object_object_add(req, "ID", int64_string(id));
    int r = call(e, "/v3/lease/keepalive", req, &ans);
    json_object_put(req);
    if (r)
        return r;
    int64_t ttl = 0;
    /* A stream of one answer: {"result": {"ID": ..., "TTL": ...}}; no TTL: the lease is gone. */
    if (!json_object_object_get_ex(ans, "result", &res) ||
        !json_object_is_type(res, json_type_object))
        r = -EPROTO;
    else
        r = get_int64(res, "TTL", &ttl);
    json_object_put(ans);
    if (!r && ttl <= 0)
        r = -ENOENT;
    if (!r && ttl_s)
        *ttl_s = ttl;
    return r;
}

int etcd_lease_revoke(struct etcd *e, int64_t id)
{
    json_object *req = json_object_new_object(), *ans = NULL;
    if (!req)
        return -ENOMEM;
    json_object_object_add(req, "ID", int64_string(id));
    int r = call(e, "/v3/lease/revoke", req, &ans);
    json_object_put(req);
    json_object_put(ans);
    return r == -ENOENT ? 0 : r;
}

static int check_key(const char *key)
{
    size_t n = strlen(key);
    return n && n <= ETCD_MAX_KEY ? 0 : -EINVAL;
}

int etcd_put(struct etcd *e, const char *key, const void *val, size_t len, int64_t lease)
{
    if (check_key(key) || len > ETCD_MAX_VALUE)
        return -EINVAL;
    json_object *req = json_object_new_object(), *ans = NULL;
    if (!req)
        return -ENOMEM;
    int r = add_b64(req, "key", key, strlen(key));
    if (!r)
        r = add_b64(req, "value", val, len);
    if (!r && lease)
        json_object_object_add(req, "lease", int64_string(lease));
    if (!r)
        r = call(e, "/v3/kv/put", req, &ans);
    json_object_put(req);
    json_object_put(ans);
    return r;
}

int etcd_delete(struct etcd *e, const char *key, int64_t *deleted)
{
    if (check_key(key))
        return -EINVAL;
    json_object *req = json_object_new_object(), *ans = NULL;
    if (!req)
        return -ENOMEM;
    int r = add_b64(req, "key", key, strlen(key));
    if (!r)
        r = call(e, "/v3/kv/deleterange", req, &ans);
    json_object_put(req);
    int64_t n = 0;
    if (!r)
        r = get_int64(ans, "deleted", &n);
    json_object_put(ans);
    if (!r && deleted)
        *deleted = n;
    return r;
}

/* Decodes the base64 member @name of @o into a fresh buffer of at most @max bytes (plus a
 * NUL, so a key can be used as a string). */
static int get_b64(json_object *o, const char *name, size_t max, uint8_t **p, size_t *n)
{
    json_object *m;
    *p = NULL;
    *n = 0;
    if (!json_object_object_get_ex(o, name, &m)) {
        *p = calloc(1, 1); /* protobuf's JSON leaves out an empty value */
        return *p ? 0 : -ENOMEM;
    }
    if (!json_object_is_type(m, json_type_string))
        return -EPROTO;
    size_t sl = (size_t)json_object_get_string_len(m);
    if (sl % 4 || sl / 4 * 3 > max + 2)
        return -EPROTO;
    *p = malloc(sl / 4 * 3 + 1);
    if (!*p)
        return -ENOMEM;
    if (etcd_b64_decode(json_object_get_string(m), sl, *p, sl / 4 * 3, n) || *n > max) {
        free(*p);
        *p = NULL;
        return -EPROTO;
    }
    (*p)[*n] = 0;
    return 0;
}

int etcd_range_prefix(struct etcd *e, const char *prefix, etcd_kv_fn fn, void *arg,
                      int64_t *revision)
{
    size_t pl = strlen(prefix);
    if (check_key(prefix) || (uint8_t)prefix[pl - 1] == 0xff)
        return -EINVAL;
    char end[ETCD_MAX_KEY + 1];
    memcpy(end, prefix, pl);
    end[pl - 1]++; /* every key that begins with the prefix sorts below this one */
    json_object *req = json_object_new_object(), *ans = NULL, *kvs;
    if (!req)
        return -ENOMEM;
    int r = add_b64(req, "key", prefix, pl);
    if (!r)
        r = add_b64(req, "range_end", end, pl);
    if (!r)
        r = call(e, "/v3/kv/range", req, &ans);
    json_object_put(req);
    if (r)
        return r;
    json_object *hdr;
    int64_t rev = 0;
    if (!json_object_object_get_ex(ans, "header", &hdr) || get_int64(hdr, "revision", &rev))
        r = -EPROTO;
    if (!r && json_object_object_get_ex(ans, "kvs", &kvs)) {
        if (!json_object_is_type(kvs, json_type_array))
            r = -EPROTO;
        for (size_t i = 0; !r && i < json_object_array_length(kvs); i++) {
            json_object *kv = json_object_array_get_idx(kvs, i);
            uint8_t *k = NULL, *v = NULL;
            size_t kl, vl;
            int64_t lease = 0;
            if (!json_object_is_type(kv, json_type_object))
                r = -EPROTO;
            if (!r)
                r = get_b64(kv, "key", ETCD_MAX_KEY, &k, &kl);
            if (!r)
                r = get_b64(kv, "value", ETCD_MAX_VALUE, &v, &vl);
            if (!r)
                r = get_int64(kv, "lease", &lease);
            if (!r && fn)
                r = fn(arg, (const char *)k, kl, v, vl, lease);
            free(k);
            free(v);
        }
    }
    json_object_put(ans);
    if (!r && revision)
        *revision = rev;
    return r;
}

/* ---- the watch ----------------------------------------------------------------------- */

struct etcd_watch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the queue has room, or stop */
    char (*members)[300];
    size_t n_members;
    char prefix[ETCD_MAX_KEY + 1];
    int64_t next_rev; /* the revision to watch from after a reconnect */
    void (*wake)(void *);
    void *arg;
    struct etcd_event *q; /* ring of ETCD_WATCH_QUEUE */
    size_t head, count, bytes; /* bytes: of the keys and values queued */
    bool stop, connected, stale;
    char *line; /* the stream's unfinished line */
    size_t len;
};

void etcd_event_free(struct etcd_event *ev)
{
    free(ev->key);
    free(ev->val);
    memset(ev, 0, sizeof(*ev));
}

/* Queues @ev (taking its buffers), waiting for room; false when stopping. */
static bool enqueue(struct etcd_watch *w, struct etcd_event *ev)
{
    pthread_mutex_lock(&w->mu);
    size_t size = ev->klen + ev->vlen;
    while (!w->stop && (w->count == ETCD_WATCH_QUEUE ||
                        (w->count && w->bytes + size > ETCD_WATCH_QUEUE_BYTES)))
        pthread_cond_wait(&w->cv, &w->mu);
    bool ok = !w->stop;
    if (ok) {
        w->q[(w->head + w->count) % ETCD_WATCH_QUEUE] = *ev;
        w->count++;
        w->bytes += size;
        if (ev->revision >= w->next_rev)
            w->next_rev = ev->revision + 1;
    } else {
        etcd_event_free(ev);
    }
    pthread_mutex_unlock(&w->mu);
    if (ok)
        w->wake(w->arg);
    return ok;
}

static void set_state(struct etcd_watch *w, bool connected, bool stale)
{
    pthread_mutex_lock(&w->mu);
    bool changed = w->connected != connected || (stale && !w->stale);
    w->connected = connected;
    w->stale |= stale;
    pthread_mutex_unlock(&w->mu);
    if (changed)
        w->wake(w->arg);
}

/* One line of the stream: {"result": {"header": ..., "events": [...], "canceled": ...}}.
 * Returns false to end the stream (a bad line, a cancel, or stop). */
static bool on_line(struct etcd_watch *w, const char *s, size_t n)
{
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return false;
    json_object *o = json_tokener_parse_ex(tok, s, (int)n), *res, *evs, *hdr, *x;
    bool ok = o && json_tokener_get_error(tok) == json_tokener_success &&
              json_object_object_get_ex(o, "result", &res) &&
              json_object_is_type(res, json_type_object);
    json_tokener_free(tok);
    if (!ok) {
        LOG(LOG_ERR, "etcd watch: a line that is not {\"result\": {...}}; reconnecting");
        json_object_put(o);
        return false;
    }
    int64_t compact = 0, rev = 0;
    if (json_object_object_get_ex(res, "canceled", &x) && json_object_get_boolean(x)) {
        get_int64(res, "compact_revision", &compact);
        LOG(LOG_WARNING, "etcd watch canceled by etcd%s", compact ? " (revisions compacted)"
                                                                   : "");
        if (compact)
            set_state(w, false, true);
        json_object_put(o);
        return false;
    }
    if (json_object_object_get_ex(res, "header", &hdr))
        get_int64(hdr, "revision", &rev);
    ok = true;
    if (json_object_object_get_ex(res, "events", &evs)) {
        if (!json_object_is_type(evs, json_type_array))
            ok = false;
        for (size_t i = 0; ok && i < json_object_array_length(evs); i++) {
            json_object *e = json_object_array_get_idx(evs, i), *kv, *type;
            struct etcd_event ev = { 0 };
            uint8_t *k = NULL;
            ok = json_object_is_type(e, json_type_object) &&
                 json_object_object_get_ex(e, "kv", &kv) &&
                 json_object_is_type(kv, json_type_object);
            /* protobuf's JSON leaves out PUT, the zero value of the event type */
            ev.put = !json_object_object_get_ex(e, "type", &type) ||
                     strcmp(json_object_get_string(type), "DELETE");
            ok = ok && get_b64(kv, "key", ETCD_MAX_KEY, &k, &ev.klen) == 0;
            ev.key = (char *)k;
            if (ok && ev.put)
                ok = get_b64(kv, "value", ETCD_MAX_VALUE, &ev.val, &ev.vlen) == 0 &&
                     get_int64(kv, "lease", &ev.lease) == 0;
            if (ok)
                ok = get_int64(kv, "mod_revision", &ev.revision) == 0;
            if (ok && !ev.revision)
                ev.revision = rev;
            if (!ok) {
                LOG(LOG_ERR, "etcd watch: an event that is not what etcd sends; reconnecting");
                etcd_event_free(&ev);
            } else if (!enqueue(w, &ev)) {
                ok = false;
            }
        }
    }
    json_object_put(o);
    return ok;
}

static size_t on_stream(char *p, size_t size, size_t nmemb, void *arg)
{
    struct etcd_watch *w = arg;
    size_t n = size * nmemb;
    set_state(w, true, false);
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            bool ok = on_line(w, w->line, w->len);
            w->len = 0;
            if (!ok)
                return 0;
            continue;
        }
        if (w->len == ETCD_MAX_ANSWER) {
            LOG(LOG_ERR, "etcd watch: a line over %u bytes; reconnecting", ETCD_MAX_ANSWER);
            w->len = 0;
            return 0;
        }
        w->line[w->len++] = p[i];
    }
    return n;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct etcd_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    bool stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    return stop;
}

static void *watch_thread(void *arg)
{
    struct etcd_watch *w = arg;
    CURL *c = curl_easy_init();
    size_t m = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        bool stop = w->stop || w->stale;
        int64_t from = w->next_rev;
        pthread_mutex_unlock(&w->mu);
        if (stop || !c)
            break;
        char pfx[4 * ((ETCD_MAX_KEY + 2) / 3) + 1], end[sizeof(pfx)], url[400];
        char endraw[ETCD_MAX_KEY + 1];
        size_t pl = strlen(w->prefix);
        memcpy(endraw, w->prefix, pl);
        endraw[pl - 1]++;
        etcd_b64_encode(w->prefix, pl, pfx, sizeof(pfx));
        etcd_b64_encode(endraw, pl, end, sizeof(end));
        json_object *req = json_object_new_object(), *cr = json_object_new_object();
        if (!req || !cr) {
            json_object_put(req);
            json_object_put(cr);
            break;
        }
        json_object_object_add(cr, "key", json_object_new_string(pfx));
        json_object_object_add(cr, "range_end", json_object_new_string(end));
        json_object_object_add(cr, "start_revision", int64_string(from));
        json_object_object_add(req, "create_request", cr);
        snprintf(url, sizeof(url), "http://%s/v3/watch", w->members[m]);
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_COPYPOSTFIELDS,
                         json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
        json_object_put(req);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
        /* A dead peer: no byte for 10 s (etcd sends progress only on changes) is not an
         * error by itself, so only TCP keep-alive finds a peer that went away silently. */
        curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
        curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_stream);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
        w->len = 0;
        CURLcode r = curl_easy_perform(c);
        set_state(w, false, false);
        pthread_mutex_lock(&w->mu);
        stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
        LOG(LOG_DEBUG, "etcd watch on %s ended: %s", w->members[m], curl_easy_strerror(r));
        m = (m + 1) % w->n_members;
        /* Wait half a second before the next member (or until stopped). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 500000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&w->mu);
        while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0)
            ;
        pthread_mutex_unlock(&w->mu);
    }
    if (c)
        curl_easy_cleanup(c);
    return NULL;
}

int etcd_watch_start(struct etcd_watch **ret, const char (*members)[300], size_t n,
                     const char *prefix, int64_t start_rev, void (*wake)(void *), void *arg)
{
    size_t pl = strlen(prefix);
    if (!n || check_key(prefix) || (uint8_t)prefix[pl - 1] == 0xff || start_rev < 0 || !wake)
        return -EINVAL;
    struct etcd_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->members = calloc(n, sizeof(*w->members));
    w->q = calloc(ETCD_WATCH_QUEUE, sizeof(*w->q));
    w->line = malloc(ETCD_MAX_ANSWER);
    if (!w->members || !w->q || !w->line) {
        free(w->members);
        free(w->q);
        free(w->line);
        free(w);
        return -ENOMEM;
    }
    memcpy(w->members, members, n * sizeof(*members));
    w->n_members = n;
    memcpy(w->prefix, prefix, pl + 1);
    w->next_rev = start_rev;
    w->wake = wake;
    w->arg = arg;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, watch_thread, w)) {
        w->stop = true;
        etcd_watch_stop(w);
        return -ENOMEM;
    }
    *ret = w;
    return 0;
}

int etcd_watch_next(struct etcd_watch *w, struct etcd_event *ev)
{
    int r = -EAGAIN;
    pthread_mutex_lock(&w->mu);
    if (w->count) {
        *ev = w->q[w->head];
        w->bytes -= ev->klen + ev->vlen;
        w->head = (w->head + 1) % ETCD_WATCH_QUEUE;
        w->count--;
        pthread_cond_signal(&w->cv);
        r = 0;
    } else if (w->stale) {
        r = -ESTALE;
    }
    pthread_mutex_unlock(&w->mu);
    return r;
}

bool etcd_watch_connected(struct etcd_watch *w)
{
    pthread_mutex_lock(&w->mu);
    bool c = w->connected;
    pthread_mutex_unlock(&w->mu);
    return c;
}

void etcd_watch_stop(struct etcd_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    bool started = !w->stop;
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (started)
        pthread_join(w->thread, NULL);
    for (size_t i = 0; i < w->count; i++)
        etcd_event_free(&w->q[(w->head + i) % ETCD_WATCH_QUEUE]);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->members);
    free(w->q);
    free(w->line);
    free(w);
}

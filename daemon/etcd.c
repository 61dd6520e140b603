/* SPDX-License-Identifier: MIT */
/* etcd's v3 JSON gateway over libcurl and json-c (etcd.h).  Keys and values
 * travel base64-encoded; 64-bit numbers come back as JSON strings. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <time.h>

#include "etcd.h"

struct etcd {
    CURL *curl;
    char **urls; /* "http(s)://HOST:PORT" */
    size_t n_urls, cur;
    char err[512];
    char *buf; /* the answer being received */
    size_t len, cap;
    bool too_big;
    long timeout_ms;
    int64_t deadline_ms;   /* CLOCK_MONOTONIC ms no request may run past; 0: none */
    char *user, *password; /* etcd's own authentication, or NULL */
    char *token;           /* what /v3/auth/authenticate gave; NULL: none yet */
    long status;           /* the HTTP status of the last answer */
    bool timed_out;        /* an endpoint of the last call did not answer in time */
};

#define AUTH_PATH "/v3/auth/authenticate"

static void set_err(struct etcd *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct etcd *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, sizeof(e->err), fmt, ap);
    va_end(ap);
}

const char *etcd_error(const struct etcd *e)
{
    return e->err;
}

bool etcd_timed_out(const struct etcd *e)
{
    return e->timed_out;
}

static int64_t mono_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void etcd_set_deadline(struct etcd *e, int64_t mono_ms)
{
    e->deadline_ms = mono_ms;
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct etcd *e = arg;
    size_t len = size * n;
    if (e->len + len + 1 > ETCD_MAX_ANSWER) {
        e->too_big = true;
        return 0; /* aborts the transfer */
    }
    if (e->len + len + 1 > e->cap) {
        size_t cap = e->cap ? e->cap : 4096;
        while (cap < e->len + len + 1)
            cap *= 2;
        char *b = realloc(e->buf, cap);
        if (!b)
            return 0;
        e->buf = b;
        e->cap = cap;
    }
    memcpy(e->buf + e->len, p, len);
    e->len += len;
    e->buf[e->len] = 0;
    return len;
}

int etcd_open(struct etcd **ret, const struct etcd_opts *o)
{
    if (!o->n_hosts)
        return -EINVAL;
    static bool global;
    if (!global) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT))
            return -ENOMEM;
        global = true;
    }
    struct etcd *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->urls = calloc(o->n_hosts, sizeof(*e->urls));
    e->curl = curl_easy_init();
    if (!e->urls || !e->curl)
        goto nomem;
    bool tls = (o->ca && o->ca[0]) || (o->cert && o->cert[0]);
    for (size_t i = 0; i < o->n_hosts; i++) {
        size_t n = strlen(o->hosts[i]) + 16;
        if (!(e->urls[i] = malloc(n)))
            goto nomem;
        snprintf(e->urls[i], n, "%s://%s", tls ? "https" : "http", o->hosts[i]);
        e->n_urls++;
    }
    e->timeout_ms = o->timeout_ms;
    if (o->user && o->user[0] &&
        (!(e->user = strdup(o->user)) || !(e->password = strdup(o->password ? o->password : ""))))
        goto nomem;
    CURL *c = e->curl;
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, o->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, o->timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (o->ca && o->ca[0])
        curl_easy_setopt(c, CURLOPT_CAINFO, o->ca);
    if (o->cert && o->cert[0]) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, o->cert);
        curl_easy_setopt(c, CURLOPT_SSLKEY, o->key && o->key[0] ? o->key : o->cert);
    }
    *ret = e;
    return 0;
nomem:
    etcd_close(e);
    return -ENOMEM;
}

void etcd_close(struct etcd *e)
{
    if (!e)
        return;
    if (e->curl)
        curl_easy_cleanup(e->curl);
    if (e->password)
        OPENSSL_cleanse(e->password, strlen(e->password));
    if (e->token)
        OPENSSL_cleanse(e->token, strlen(e->token));
    free(e->user);
    free(e->password);
    free(e->token);
    for (size_t i = 0; i < e->n_urls; i++)
        free(e->urls[i]);
    free(e->urls);
    free(e->buf);
    free(e);
}

static bool add(json_object *o, const char *name, json_object *v);

/* The request headers: JSON, and the token once authenticated (not on @path
 * AUTH_PATH itself).  NULL when out of memory. */
static struct curl_slist *headers(struct etcd *e, const char *path)
{
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (h && e->token && strcmp(path, AUTH_PATH)) {
        size_t n = strlen(e->token) + 32;
        char *line = malloc(n);
        struct curl_slist *h2 = NULL;
        if (line) {
            snprintf(line, n, "Authorization: %s", e->token);
            h2 = curl_slist_append(h, line);
            OPENSSL_cleanse(line, strlen(line));
            free(line);
        }
        if (!h2) {
            curl_slist_free_all(h);
            return NULL;
        }
    }
    return h;
}

/* POSTs @req to @path on the current endpoint, moving on to the next ones
 * when one does not answer; parses the answer into *@ret. */
static int call_at(struct etcd *e, const char *path, json_object *req, json_object **ret)
{
    const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    struct curl_slist *hdr = headers(e, path);
    e->status = 0;
    e->timed_out = false;
    if (!body || !hdr) {
        curl_slist_free_all(hdr);
        return -ENOMEM;
    }
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
    int r = -EHOSTUNREACH;
    for (size_t tries = 0; tries < e->n_urls; tries++) {
        char url[600];
        snprintf(url, sizeof(url), "%s%s", e->urls[e->cur], path);
        curl_easy_setopt(e->curl, CURLOPT_URL, url);
        long t = e->timeout_ms;
        if (e->deadline_ms) {
            int64_t left = e->deadline_ms - mono_now_ms();
            if (left <= 0) {
                set_err(e, "%s: no answer within the time the request had", url);
                e->timed_out = true;
                break;
            }
            if (left < t)
                t = (long)left;
        }
        curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, t);
        curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, t);
        e->len = 0;
        e->too_big = false;
        CURLcode cc = curl_easy_perform(e->curl);
        if (e->too_big) {
            set_err(e, "%s: the answer is larger than %u bytes", url, ETCD_MAX_ANSWER);
            r = -EMSGSIZE;
            break;
        }
        if (cc != CURLE_OK) {
            set_err(e, "%s: %s", url, curl_easy_strerror(cc));
            if (cc == CURLE_OPERATION_TIMEDOUT)
                e->timed_out = true;
            e->cur = (e->cur + 1) % e->n_urls;
            continue;
        }
        long status = 0;
        curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
        e->status = status;
        json_object *ans = e->len ? json_tokener_parse(e->buf) : NULL;
        if (!ans || !json_object_is_type(ans, json_type_object)) {
            set_err(e, "%s: HTTP %ld, an answer that is not a JSON object", url, status);
            json_object_put(ans);
            r = -EPROTO;
            break;
        }
        if (status != 200) {
            json_object *m;
            const char *msg = json_object_object_get_ex(ans, "error", &m) ||
                                      json_object_object_get_ex(ans, "message", &m)
                                  ? json_object_get_string(m)
                                  : "(no message)";
            set_err(e, "%s: HTTP %ld: %s", url, status, msg);
            json_object_put(ans);
            r = -EPROTO;
            break;
        }
        e->err[0] = 0;
        *ret = ans;
        r = 0;
        break;
    }
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdr);
    return r;
}

/* Asks etcd for a token for the configured user (etcd's own authentication). */
static int authenticate(struct etcd *e)
{
    free(e->token);
    e->token = NULL;
    json_object *req = json_object_new_object(), *ans = NULL, *t;
    int r = -ENOMEM;
    if (req && add(req, "name", json_object_new_string(e->user)) &&
        add(req, "password", json_object_new_string(e->password)))
        r = call_at(e, AUTH_PATH, req, &ans);
    if (req) { /* the password was in it */
        const char *b = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
        if (b)
            OPENSSL_cleanse((char *)b, strlen(b));
    }
    json_object_put(req);
    if (r == -EPROTO && e->status >= 400 && e->status < 500) {
        char why[sizeof(e->err)];
        snprintf(why, sizeof(why), "%s", e->err);
        set_err(e, "etcd refused the user '%s' (etcd_user, etcd_password_file): %s", e->user,
                why);
        r = -EACCES;
    }
    if (r)
        return r;
    if (!json_object_object_get_ex(ans, "token", &t) || !json_object_is_type(t, json_type_string) ||
        !json_object_get_string_len(t) || json_object_get_string_len(t) > 4096) {
        set_err(e, "%s: the answer has no token", AUTH_PATH);
        r = -EPROTO;
    } else if (!(e->token = strdup(json_object_get_string(t)))) {
        r = -ENOMEM;
    }
    json_object_put(ans);
    return r;
}

/* call_at with the token etcd's authentication needs: asked for first, and once
 * again when etcd no longer knows it (simple tokens expire, and go when
 * authentication is turned off and on). */
static int call(struct etcd *e, const char *path, json_object *req, json_object **ret)
{
    int r;
    if (e->user && !e->token && (r = authenticate(e)))
        return r;
    r = call_at(e, path, req, ret);
    if (r == -EPROTO && e->user && e->status == 401) {
        if ((r = authenticate(e)))
            return r;
        r = call_at(e, path, req, ret);
    }
    return r;
}

/* A 64-bit number of an answer: a JSON string of digits (or a number). */
static bool get_i64(json_object *o, const char *name, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(o, name, &v))
        return false;
    if (json_object_is_type(v, json_type_int)) {
        *out = json_object_get_int64(v);
        return true;
    }
    if (!json_object_is_type(v, json_type_string))
        return false;
    const char *s = json_object_get_string(v);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = x;
    return true;
}

static json_object *b64(const void *p, size_t len)
{
    if (len > (1u << 26))
        return NULL;
    size_t n = 4 * ((len + 2) / 3) + 1;
    unsigned char *out = malloc(n);
    if (!out)
        return NULL;
    EVP_EncodeBlock(out, p, (int)len);
    json_object *s = json_object_new_string((char *)out);
    free(out);
    return s;
}

/* Decodes @s into a new buffer (NUL-terminated past its length). */
static int unb64(const char *s, unsigned char **ret, size_t *ret_len)
{
    size_t n = strlen(s);
    if (n % 4 || n > ETCD_MAX_ANSWER)
        return -EPROTO;
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        return -ENOMEM;
    int len = n ? EVP_DecodeBlock(out, (const unsigned char *)s, (int)n) : 0;
    if (len < 0) {
        free(out);
        return -EPROTO;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes. */
    for (size_t i = n; i > 0 && s[i - 1] == '='; i--)
        len--;
    out[len] = 0;
    *ret = out;
    *ret_len = (size_t)len;
    return 0;
}

/* Adds @name: @v to @o; false (and @v freed) when out of memory. */
static bool add(json_object *o, const char *name, json_object *v)
{
    if (!v)
        return false;
    if (json_object_object_add(o, name, v)) {
        json_object_put(v);
        return false;
    }
    return true;
}

static json_object *i64str(int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    return json_object_new_string(s);
}

/* Sends @req (consumed) and drops the answer or hands it to *@ret. */
static int send_req(struct etcd *e, const char *path, json_object *req, bool ok,
                    json_object **ret)
{
    int r = -ENOMEM;
    json_object *ans = NULL;
    if (req && ok)
        r = call(e, path, req, &ans);
    json_object_put(req);
    if (!r && ret)
        *ret = ans;
    else
        json_object_put(ans);
    return r;
}

int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *ret_id)
{
    json_object *req = json_object_new_object(), *ans;
    int r = send_req(e, "/v3/lease/grant", req, req && add(req, "TTL", i64str(ttl_s)), &ans);
    if (r)
        return r;
    if (!get_i64(ans, "ID", ret_id)) {
        set_err(e, "lease grant: the answer has no ID");
        r = -EPROTO;
    }
    json_object_put(ans);
    return r;
}

int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ret_ttl_s)
{
    json_object *req = json_object_new_object(), *ans, *res;
    int r = send_req(e, "/v3/lease/keepalive", req, req && add(req, "ID", i64str(id)), &ans);
    if (r)
        return r;
    /* The gateway streams: one object {"result": {...}}; a gone lease has no TTL (or 0). */
    int64_t ttl = 0;
    if (!json_object_object_get_ex(ans, "result", &res) || !get_i64(res, "TTL", &ttl) ||
        ttl <= 0) {
        set_err(e, "lease %" PRId64 " is gone (expired or revoked)", id);
        r = -ENOENT;
    } else {
        *ret_ttl_s = ttl;
    }
    json_object_put(ans);
    return r;
}

int etcd_lease_revoke(struct etcd *e, int64_t id)
{
    json_object *req = json_object_new_object();
    return send_req(e, "/v3/lease/revoke", req, req && add(req, "ID", i64str(id)), NULL);
}

int etcd_put(struct etcd *e, const char *key, const void *val, size_t len, int64_t lease)
{
    json_object *req = json_object_new_object();
    bool ok = req && add(req, "key", b64(key, strlen(key))) && add(req, "value", b64(val, len)) &&
              (!lease || add(req, "lease", i64str(lease)));
    return send_req(e, "/v3/kv/put", req, ok, NULL);
}

int etcd_delete(struct etcd *e, const char *key)
{
    json_object *req = json_object_new_object();
    return send_req(e, "/v3/kv/deleterange", req, req && add(req, "key", b64(key, strlen(key))),
                    NULL);
}

/* The range [prefix, end) is every key under prefix: *@ret_end gets end. */
static int prefix_end(const char *prefix, char **ret_end)
{
    size_t n = strlen(prefix);
    if (!n || (unsigned char)prefix[n - 1] == 0xff)
        return -EINVAL;
    char *end = strdup(prefix);
    if (!end)
        return -ENOMEM;
    end[n - 1]++;
    *ret_end = end;
    return 0;
}

/* The revision in an answer's header. */
static bool header_rev(json_object *ans, int64_t *rev)
{
    json_object *h;
    return json_object_object_get_ex(ans, "header", &h) && get_i64(h, "revision", rev);
}

/* Decodes one {"key", "value"} object of an answer. */
static int decode_kv(struct etcd *e, json_object *kv, unsigned char **key, unsigned char **val,
                     size_t *vlen)
{
    json_object *k, *v;
    size_t klen;
    *key = *val = NULL;
    if (!json_object_is_type(kv, json_type_object) || !json_object_object_get_ex(kv, "key", &k) ||
        unb64(json_object_get_string(k), key, &klen)) {
        set_err(e, "an entry without a base64 key");
        return -EPROTO;
    }
    if (strlen((char *)*key) != klen) {
        set_err(e, "a key with a NUL byte");
        free(*key);
        *key = NULL;
        return -EPROTO;
    }
    /* The gateway omits empty values (and a DELETE's). */
    if (json_object_object_get_ex(kv, "value", &v) ? unb64(json_object_get_string(v), val, vlen)
                                                   : unb64("", val, vlen)) {
        set_err(e, "an entry whose value is not base64");
        free(*key);
        *key = NULL;
        return -EPROTO;
    }
    return 0;
}

int etcd_range_prefix(struct etcd *e, const char *prefix, int64_t limit, etcd_kv_fn fn, void *arg,
                      int64_t *ret_rev)
{
    size_t n = strlen(prefix);
    char *end;
    int r = prefix_end(prefix, &end);
    if (r)
        return r;
    json_object *req = json_object_new_object(), *ans, *kvs;
    bool ok = req && add(req, "key", b64(prefix, n)) && add(req, "range_end", b64(end, n)) &&
              (!limit || add(req, "limit", i64str(limit)));
    free(end);
    r = send_req(e, "/v3/kv/range", req, ok, &ans);
    if (r)
        return r;
    int64_t rev = 0;
    if (!header_rev(ans, &rev)) {
        set_err(e, "range: the answer has no header revision");
        json_object_put(ans);
        return -EPROTO;
    }
    if (ret_rev)
        *ret_rev = rev;
    if (!json_object_object_get_ex(ans, "kvs", &kvs)) {
        json_object_put(ans); /* no key: the gateway leaves "kvs" out */
        return 0;
    }
    if (!json_object_is_type(kvs, json_type_array)) {
        set_err(e, "range: kvs is not an array");
        json_object_put(ans);
        return -EPROTO;
    }
    for (size_t i = 0; !r && i < json_object_array_length(kvs); i++) {
        unsigned char *key, *val;
        size_t vlen;
        r = decode_kv(e, json_object_array_get_idx(kvs, i), &key, &val, &vlen);
        if (!r)
            r = fn(arg, (char *)key, val, vlen);
        free(key);
        free(val);
    }
    json_object_put(ans);
    return r;
}

struct watch {
    struct etcd *e;
    json_tokener *tok;
    size_t since; /* bytes of the message being parsed */
    etcd_watch_fn fn;
    void *arg;
    const volatile int *stop;
    int r; /* why the transfer was aborted */
};

/* One message of the stream: {"result": {"header", "created"?, "events"?}} or {"error"}. */
static int watch_message(struct watch *w, json_object *msg)
{
    struct etcd *e = w->e;
    json_object *res, *evs, *x;
    if (!json_object_is_type(msg, json_type_object) ||
        !json_object_object_get_ex(msg, "result", &res)) {
        set_err(e, "watch: %s", json_object_object_get_ex(msg, "error", &x)
                                    ? json_object_to_json_string(x)
                                    : "a message without result");
        return -EPROTO;
    }
    if (json_object_object_get_ex(res, "canceled", &x) && json_object_get_boolean(x)) {
        set_err(e, "watch: etcd canceled it (%s)",
                json_object_object_get_ex(res, "cancel_reason", &x) ? json_object_get_string(x)
                                                                    : "no reason given");
        return -EPROTO;
    }
    if (!json_object_object_get_ex(res, "events", &evs))
        return 0; /* "created", or progress */
    if (!json_object_is_type(evs, json_type_array)) {
        set_err(e, "watch: events is not an array");
        return -EPROTO;
    }
    int r = 0;
    for (size_t i = 0; !r && i < json_object_array_length(evs); i++) {
        json_object *ev = json_object_array_get_idx(evs, i), *kv, *t;
        enum etcd_event type = ETCD_PUT; /* the gateway omits the default, PUT */
        if (json_object_object_get_ex(ev, "type", &t)) {
            const char *ts = json_object_get_string(t);
            if (!strcmp(ts, "DELETE"))
                type = ETCD_DELETE;
            else if (strcmp(ts, "PUT")) {
                set_err(e, "watch: an event of type %s", ts);
                return -EPROTO;
            }
        }
        unsigned char *key, *val;
        size_t vlen;
        int64_t rev = 0;
        if (!json_object_object_get_ex(ev, "kv", &kv)) {
            set_err(e, "watch: an event without kv");
            return -EPROTO;
        }
        get_i64(kv, "mod_revision", &rev);
        r = decode_kv(e, kv, &key, &val, &vlen);
        if (!r)
            r = w->fn(w->arg, type, (char *)key, val, vlen, rev);
        free(key);
        free(val);
    }
    return r;
}

static size_t on_watch_data(char *p, size_t size, size_t n, void *arg)
{
    struct watch *w = arg;
    size_t len = size * n, off = 0;
    while (off < len) {
        json_object *msg = json_tokener_parse_ex(w->tok, p + off, (int)(len - off));
        enum json_tokener_error err = json_tokener_get_error(w->tok);
        size_t used = json_tokener_get_parse_end(w->tok);
        if (err == json_tokener_continue) {
            w->since += len - off;
            if (w->since > ETCD_MAX_ANSWER) {
                set_err(w->e, "watch: a message larger than %u bytes", ETCD_MAX_ANSWER);
                w->r = -EMSGSIZE;
                return 0;
            }
            return len;
        }
        if (!msg) {
            set_err(w->e, "watch: not JSON: %s", json_tokener_error_desc(err));
            w->r = -EPROTO;
            return 0;
        }
        int r = watch_message(w, msg);
        json_object_put(msg);
        json_tokener_reset(w->tok);
        w->since = 0;
        if (r) {
            w->r = r;
            return 0;
        }
        off += used ? used : len - off;
        while (off < len && (p[off] == '\n' || p[off] == '\r' || p[off] == ' '))
            off++;
    }
    return len;
}

static int on_watch_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    struct watch *w = arg;
    if (w->stop && *w->stop) {
        w->r = -ECANCELED;
        return 1;
    }
    return 0;
}

int etcd_watch_prefix(struct etcd *e, const char *prefix, int64_t start_rev, etcd_watch_fn fn,
                      void *arg, const volatile int *stop)
{
    char *end;
    int r = prefix_end(prefix, &end);
    if (r)
        return r;
    size_t n = strlen(prefix);
    json_object *req = json_object_new_object(), *cr = json_object_new_object();
    bool ok = req && cr && add(cr, "key", b64(prefix, n)) && add(cr, "range_end", b64(end, n)) &&
              (!start_rev || add(cr, "start_revision", i64str(start_rev)));
    free(end);
    if (ok)
        ok = add(req, "create_request", cr);
    else
        json_object_put(cr);
    const char *body = ok ? json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN) : NULL;
    if (body && e->user && !e->token && (r = authenticate(e))) {
        json_object_put(req);
        return r;
    }
    struct curl_slist *hdr = body ? headers(e, "/v3/watch") : NULL;
    struct watch w = { .e = e, .tok = json_tokener_new_ex(64), .fn = fn, .arg = arg, .stop = stop };
    if (!body || !hdr || !w.tok) {
        r = -ENOMEM;
        goto out;
    }
    CURL *c = e->curl;
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_watch_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &w);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 0L);
    r = -EHOSTUNREACH;
    for (size_t tries = 0; tries < e->n_urls; tries++) {
        char url[600];
        snprintf(url, sizeof(url), "%s/v3/watch", e->urls[e->cur]);
        curl_easy_setopt(c, CURLOPT_URL, url);
        w.r = 0;
        CURLcode cc = curl_easy_perform(c);
        if (w.r) {
            r = w.r;
            break;
        }
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (status == 401 && e->user) {
            free(e->token); /* the next watch asks for a new one */
            e->token = NULL;
        }
        if (cc == CURLE_OK) {
            set_err(e, "%s: the watch stream ended (HTTP %ld)", url, status);
            r = -ECONNRESET;
            break;
        }
        set_err(e, "%s: %s", url, curl_easy_strerror(cc));
        if (status) { /* it answered, then failed: no other endpoint is tried */
            r = -ECONNRESET;
            break;
        }
        e->cur = (e->cur + 1) % e->n_urls;
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, e->timeout_ms);
out:
    curl_slist_free_all(hdr);
    if (w.tok)
        json_tokener_free(w.tok);
    json_object_put(req);
    return r;
}

int etcd_compact(struct etcd *e, int64_t rev)
{
    json_object *req = json_object_new_object();
    int r = send_req(e, "/v3/kv/compaction", req, req && add(req, "revision", i64str(rev)), NULL);
    if (r == -EPROTO && strstr(e->err, "required revision has been compacted"))
        return -EALREADY;
    return r;
}

int etcd_defragment(struct etcd *e)
{
    json_object *req = json_object_new_object();
    return send_req(e, "/v3/maintenance/defragment", req, req != NULL, NULL);
}

int etcd_disarm_nospace(struct etcd *e, int *ret_n)
{
    json_object *req = json_object_new_object(), *ans, *alarms;
    *ret_n = 0;
    int r = send_req(e, "/v3/maintenance/alarm", req,
                     req && add(req, "action", json_object_new_string("GET")), &ans);
    if (r)
        return r;
    if (!json_object_object_get_ex(ans, "alarms", &alarms) ||
        !json_object_is_type(alarms, json_type_array)) {
        json_object_put(ans); /* none: the gateway leaves "alarms" out */
        return 0;
    }
    for (size_t i = 0; !r && i < json_object_array_length(alarms); i++) {
        json_object *a = json_object_array_get_idx(alarms, i), *kind, *member;
        if (!json_object_object_get_ex(a, "alarm", &kind) ||
            strcmp(json_object_get_string(kind), "NOSPACE") ||
            !json_object_object_get_ex(a, "memberID", &member))
            continue;
        json_object *d = json_object_new_object();
        r = send_req(e, "/v3/maintenance/alarm", d,
                     d && add(d, "action", json_object_new_string("DEACTIVATE")) &&
                         add(d, "memberID", json_object_get(member)) &&
                         add(d, "alarm", json_object_new_string("NOSPACE")),
                     NULL);
        if (!r)
            (*ret_n)++;
    }
    json_object_put(ans);
    return r;
}

bool etcd_nospace(const struct etcd *e)
{
    return strstr(e->err, "database space exceeded") != NULL;
}

/* SPDX-License-Identifier: MIT */
/* rrpcd's client of etcd's v3 JSON gateway: see etcd.h. */
#include <errno.h>
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

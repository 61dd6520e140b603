/* SPDX-License-Identifier: MIT */
/* Connection tickets: HMAC-SHA256 under a per-service secret, bound to a
 * server instance (version 2), a replay cache. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/error.h>

#define TICKET_MAGIC "RTKT"
#define TICKET_V1 1 /* no instance */
#define TICKET_V2 2 /* bound to a server instance */
#define TICKET_HDR 32
#define TICKET_HDR_V2 (TICKET_HDR + RRPC_TICKET_INSTANCE_LEN)
#define MAC_LEN 32
/* A nonce is remembered until its ticket's expiry + skew; at most this many. */
#define REPLAY_MAX 65536
#define REPLAY_BUCKETS 4096

struct nonce_ent {
    struct nonce_ent *next;
    int64_t until_ms;
    uint8_t nonce[RRPC_TICKET_NONCE_LEN];
};

struct rrpc_ticket_verifier {
    pthread_mutex_t lock;
    char service[256];
    size_t service_len;
    uint8_t secret[RRPC_TICKET_SECRET_LEN];
    uint8_t prev_secret[RRPC_TICKET_SECRET_LEN];
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN];
    bool have_secret, have_prev, have_instance;
    int skew_ms;
    size_t n_nonces;
    int64_t next_prune_ms;
    struct nonce_ent *bucket[REPLAY_BUCKETS];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int name_ok(const char *s, size_t *ret_len)
{
    if (!s)
        return -EINVAL;
    size_t n = strnlen(s, 256);
    if (n == 0 || n > 255)
        return -EINVAL;
    *ret_len = n;
    return 0;
}

static int mac(const uint8_t key[RRPC_TICKET_SECRET_LEN], const uint8_t *data, size_t len,
               uint8_t out[MAC_LEN])
{
    unsigned int outlen = MAC_LEN;
    if (!HMAC(EVP_sha256(), key, RRPC_TICKET_SECRET_LEN, data, len, out, &outlen) ||
        outlen != MAC_LEN)
        return -EIO;
    return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x |= p[i];
    return x == 0;
}

/* A version 1 ticket when @instance is NULL, else version 2. */
static int issue(const uint8_t *secret, const char *principal, const char *service,
                 const uint8_t *instance, int64_t expiry_ms, const uint8_t *nonce, void *buf,
                 size_t buflen, size_t *ret_len)
{
    size_t pl, sl;
    if (!secret || !buf || !ret_len || name_ok(principal, &pl) || name_ok(service, &sl))
        return -EINVAL;
    size_t hdr = instance ? TICKET_HDR_V2 : TICKET_HDR;
    size_t total = hdr + pl + sl + MAC_LEN;
    if (buflen < total)
        return -ENOSPC;
    uint8_t *p = buf;
    memcpy(p, TICKET_MAGIC, 4);
    p[4] = instance ? TICKET_V2 : TICKET_V1;
    p[5] = (uint8_t)pl;
    p[6] = (uint8_t)sl;
    p[7] = 0;
    put_le64(p + 8, (uint64_t)expiry_ms);
    if (nonce)
        memcpy(p + 16, nonce, RRPC_TICKET_NONCE_LEN);
    else if (RAND_bytes(p + 16, RRPC_TICKET_NONCE_LEN) != 1)
        return -EIO;
    if (instance)
        memcpy(p + TICKET_HDR, instance, RRPC_TICKET_INSTANCE_LEN);
    memcpy(p + hdr, principal, pl);
    memcpy(p + hdr + pl, service, sl);
    int r = mac(secret, p, hdr + pl + sl, p + hdr + pl + sl);
    if (r)
        return r;
    *ret_len = total;
    return 0;
}

RRPC_API int rrpc_ticket_issue(const uint8_t secret[RRPC_TICKET_SECRET_LEN],
                               const char *principal, const char *service, int64_t expiry_ms,
                               const uint8_t *nonce, void *buf, size_t buflen, size_t *ret_len)
{
    return issue(secret, principal, service, NULL, expiry_ms, nonce, buf, buflen, ret_len);
}

RRPC_API int rrpc_ticket_issue_instance(const uint8_t secret[RRPC_TICKET_SECRET_LEN],
                                        const char *principal, const char *service,
                                        const uint8_t instance[RRPC_TICKET_INSTANCE_LEN],
                                        int64_t expiry_ms, const uint8_t *nonce, void *buf,
                                        size_t buflen, size_t *ret_len)
{
    if (!instance || all_zero(instance, RRPC_TICKET_INSTANCE_LEN))
        return -EINVAL;
    return issue(secret, principal, service, instance, expiry_ms, nonce, buf, buflen, ret_len);
}

/* Checks the layout; returns the header, principal and service lengths. */
static int parse(const uint8_t *p, size_t len, size_t *ret_hdr, size_t *ret_pl, size_t *ret_sl)
{
    if (!p || len < TICKET_HDR + 2 + MAC_LEN || memcmp(p, TICKET_MAGIC, 4) != 0 ||
        (p[4] != TICKET_V1 && p[4] != TICKET_V2) || p[5] == 0 || p[6] == 0 || p[7] != 0)
        return RRPC_E_PROTO;
    size_t hdr = p[4] == TICKET_V2 ? TICKET_HDR_V2 : TICKET_HDR;
    size_t pl = p[5], sl = p[6];
    if (len != hdr + pl + sl + MAC_LEN)
        return RRPC_E_PROTO;
    if (memchr(p + hdr, 0, pl + sl))
        return RRPC_E_PROTO;
    if (hdr == TICKET_HDR_V2 && all_zero(p + TICKET_HDR, RRPC_TICKET_INSTANCE_LEN))
        return RRPC_E_PROTO;
    *ret_hdr = hdr;
    *ret_pl = pl;
    *ret_sl = sl;
    return 0;
}

RRPC_API int rrpc_ticket_peek(const void *ticket, size_t len, char *principal, char *service,
                              int64_t *ret_expiry_ms)
{
    const uint8_t *p = ticket;
    size_t hdr, pl, sl;
    int r = parse(p, len, &hdr, &pl, &sl);
    if (r)
        return r;
    if (principal) {
        memcpy(principal, p + hdr, pl);
        principal[pl] = 0;
    }
    if (service) {
        memcpy(service, p + hdr + pl, sl);
        service[sl] = 0;
    }
    if (ret_expiry_ms)
        *ret_expiry_ms = (int64_t)get_le64(p + 8);
    return 0;
}

RRPC_API int rrpc_ticket_peek_instance(const void *ticket, size_t len,
                                       uint8_t instance[RRPC_TICKET_INSTANCE_LEN])
{
    const uint8_t *p = ticket;
    size_t hdr, pl, sl;
    int r = parse(p, len, &hdr, &pl, &sl);
    if (r)
        return r;
    if (hdr != TICKET_HDR_V2)
        return -ENOENT;
    if (instance)
        memcpy(instance, p + TICKET_HDR, RRPC_TICKET_INSTANCE_LEN);
    return 0;
}

RRPC_API int rrpc_ticket_verifier_create(const char *service,
                                         const uint8_t secret[RRPC_TICKET_SECRET_LEN],
                                         int skew_ms, rrpc_ticket_verifier **ret_v)
{
    size_t sl;
    if (!ret_v || skew_ms < 0 || name_ok(service, &sl))
        return -EINVAL;
    rrpc_ticket_verifier *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    pthread_mutex_init(&v->lock, NULL);
    memcpy(v->service, service, sl);
    v->service_len = sl;
    if (secret) {
        memcpy(v->secret, secret, RRPC_TICKET_SECRET_LEN);
        v->have_secret = true;
    }
    v->skew_ms = skew_ms;
    *ret_v = v;
    return 0;
}

RRPC_API void rrpc_ticket_verifier_set_secret(rrpc_ticket_verifier *v,
                                              const uint8_t secret[RRPC_TICKET_SECRET_LEN])
{
    if (!v || !secret)
        return;
    pthread_mutex_lock(&v->lock);
    if (!v->have_secret) {
        memcpy(v->secret, secret, RRPC_TICKET_SECRET_LEN);
        v->have_secret = true;
    } else if (CRYPTO_memcmp(v->secret, secret, RRPC_TICKET_SECRET_LEN) != 0) {
        memcpy(v->prev_secret, v->secret, RRPC_TICKET_SECRET_LEN);
        v->have_prev = true;
        memcpy(v->secret, secret, RRPC_TICKET_SECRET_LEN);
    }
    pthread_mutex_unlock(&v->lock);
}

RRPC_API int rrpc_ticket_verifier_set_instance(rrpc_ticket_verifier *v,
                                               const uint8_t instance[RRPC_TICKET_INSTANCE_LEN])
{
    if (!v || !instance || all_zero(instance, RRPC_TICKET_INSTANCE_LEN))
        return -EINVAL;
    pthread_mutex_lock(&v->lock);
    memcpy(v->instance, instance, RRPC_TICKET_INSTANCE_LEN);
    v->have_instance = true;
    pthread_mutex_unlock(&v->lock);
    return 0;
}

static unsigned bucket_of(const uint8_t *nonce)
{
    /* Nonces are random (and HMAC-covered), so their bytes are a fine hash. */
    return ((unsigned)nonce[0] | (unsigned)nonce[1] << 8) % REPLAY_BUCKETS;
}

static void prune(rrpc_ticket_verifier *v, int64_t now)
{
    for (unsigned i = 0; i < REPLAY_BUCKETS; i++) {
        struct nonce_ent **pp = &v->bucket[i];
        while (*pp) {
            struct nonce_ent *e = *pp;
            if (e->until_ms < now) {
                *pp = e->next;
                free(e);
                v->n_nonces--;
            } else {
                pp = &e->next;
            }
        }
    }
    v->next_prune_ms = now + 1000;
}

static int refuse(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return RRPC_E_TICKET;
}

RRPC_API int rrpc_ticket_verify(rrpc_ticket_verifier *v, const void *ticket, size_t len,
                                int64_t now, char *principal, char *why, size_t whylen)
{
    if (why && whylen)
        why[0] = 0;
    if (!v)
        return -EINVAL;
    if (!ticket || len == 0)
        return refuse(why, whylen, "no ticket");
    const uint8_t *p = ticket;
    size_t hdr, pl, sl;
    if (parse(p, len, &hdr, &pl, &sl))
        return refuse(why, whylen, "malformed ticket (%zu bytes)", len);
    if (now == 0)
        now = now_ms();

    size_t body = hdr + pl + sl;
    uint8_t want[MAC_LEN];
    int r = 0;
    pthread_mutex_lock(&v->lock);
    if (!v->have_secret) {
        r = refuse(why, whylen, "service '%s' is not registered with the broker yet", v->service);
        goto out;
    }
    bool good = mac(v->secret, p, body, want) == 0 &&
                CRYPTO_memcmp(want, p + body, MAC_LEN) == 0;
    if (!good && v->have_prev)
        good = mac(v->prev_secret, p, body, want) == 0 &&
               CRYPTO_memcmp(want, p + body, MAC_LEN) == 0;
    /* Only a signed ticket's fields mean anything, so the signature comes first. */
    if (!good) {
        r = refuse(why, whylen, "bad ticket signature (forged, or signed for another service)");
        goto out;
    }
    if (sl != v->service_len || memcmp(p + hdr + pl, v->service, sl) != 0) {
        r = refuse(why, whylen, "ticket is for service '%.*s', this is '%s'", (int)sl,
                   (const char *)p + hdr + pl, v->service);
        goto out;
    }
    /* The instances of a service share its secret, and a restarted server
     * has an empty replay cache: only the instance id in the ticket keeps it
     * from being used once per instance, or once per run. */
    bool bound = hdr == TICKET_HDR_V2;
    if (bound != v->have_instance ||
        (bound && CRYPTO_memcmp(p + TICKET_HDR, v->instance, RRPC_TICKET_INSTANCE_LEN) != 0)) {
        r = refuse(why, whylen, bound ? (v->have_instance
                                             ? "ticket is for another instance of service '%s' "
                                               "(another server, or this one before a restart); "
                                               "look the service up again for a fresh ticket"
                                             : "ticket is bound to a server instance, and this "
                                               "verifier of '%s' has none")
                                      : "ticket is bound to no server instance, and this "
                                        "server of '%s' accepts only its own (a broker too "
                                        "old, or a ticket not from rrpcd)",
                   v->service);
        goto out;
    }
    int64_t expiry = (int64_t)get_le64(p + 8);
    /* expiry comes from a signed ticket: keep the sum from overflowing */
    int64_t until = expiry > INT64_MAX - v->skew_ms ? INT64_MAX : expiry + v->skew_ms;
    if (expiry < 0) { /* signed, yet nonsense: no "expired N ms ago" arithmetic on it */
        r = refuse(why, whylen, "ticket has a negative expiry time");
        goto out;
    }
    if (now > until) {
        r = refuse(why, whylen, "ticket expired %lld ms ago", (long long)(now - expiry));
        goto out;
    }
    const uint8_t *nonce = p + 16;
    if (now >= v->next_prune_ms)
        prune(v, now);
    unsigned b = bucket_of(nonce);
    for (struct nonce_ent *e = v->bucket[b]; e; e = e->next) {
        if (memcmp(e->nonce, nonce, RRPC_TICKET_NONCE_LEN) == 0) {
            r = refuse(why, whylen, "ticket replayed (its nonce was used before)");
            goto out;
        }
    }
    if (v->n_nonces >= REPLAY_MAX) {
        prune(v, now);
        if (v->n_nonces >= REPLAY_MAX) {
            r = refuse(why, whylen, "replay cache full (%d live tickets); try again", REPLAY_MAX);
            goto out;
        }
    }
    struct nonce_ent *e = malloc(sizeof(*e));
    if (!e) {
        r = refuse(why, whylen, "out of memory for the replay cache");
        goto out;
    }
    memcpy(e->nonce, nonce, RRPC_TICKET_NONCE_LEN);
    e->until_ms = until;
    e->next = v->bucket[b];
    v->bucket[b] = e;
    v->n_nonces++;
    if (principal) {
        memcpy(principal, p + hdr, pl);
        principal[pl] = 0;
    }
out:
    pthread_mutex_unlock(&v->lock);
    return r;
}

RRPC_API int rrpc_ticket_verify_cb(void *user, const void *ticket, size_t len, char *why,
                                   size_t whylen)
{
    return rrpc_ticket_verify(user, ticket, len, 0, NULL, why, whylen);
}

RRPC_API void rrpc_ticket_verifier_destroy(rrpc_ticket_verifier *v)
{
    if (!v)
        return;
    for (unsigned i = 0; i < REPLAY_BUCKETS; i++) {
        struct nonce_ent *e = v->bucket[i];
        while (e) {
            struct nonce_ent *n = e->next;
            free(e);
            e = n;
        }
    }
    pthread_mutex_destroy(&v->lock);
    OPENSSL_cleanse(v->secret, sizeof(v->secret));
    OPENSSL_cleanse(v->prev_secret, sizeof(v->prev_secret));
    free(v);
}

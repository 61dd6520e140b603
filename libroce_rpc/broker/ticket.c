/* SPDX-License-Identifier: MIT */
/* Connection tickets: version 3, signed with Ed25519 by a key only brokers
 * hold, bound to a server instance and to the client identity presented
 * with them; a verifier with a set of public keys and a replay cache. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/error.h>

#include "broker/client_int.h"

#define TICKET_MAGIC "RTKT"
#define TICKET_V3 3
#define OFF_NONCE 16
#define OFF_INSTANCE 32
#define OFF_KEY_ID 48
#define TICKET_HDR 56
#define SIG_LEN 64
/*
 * A nonce is remembered until its ticket's expiry + skew.  Each client
 * identity (the principal a ticket was issued to) has a share of the cache:
 * rate tickets a second (REPLAY_RATE unless set: RRPC_TICKET_RATE through
 * rrpc_broker_gate) over the longest a ticket is remembered
 * (ticket lifetime + skew, as seen in the tickets verified), at least
 * REPLAY_SHARE_MIN, at most REPLAY_SHARE_MAX.  A client whose share is full is refused; others are not.
 * All identities together hold at most REPLAY_MAX: when that is reached, an
 * identity below its fair part (REPLAY_MAX / identities) takes the place of
 * the oldest nonce of the identity holding the most, whose tickets expiring
 * before that nonce's are refused from then on (its floor), so no replay
 * gets through.
 */
#define REPLAY_MAX 65536
#define REPLAY_BUCKETS 4096
#define REPLAY_RATE 256 /* tickets a second one identity may use, sustained (default) */
#define REPLAY_SHARE_MIN 16
#define REPLAY_SHARE_MAX 16384
#define IDENT_BUCKETS 256

struct rrpc_ticket_key {
    EVP_PKEY *pkey;
    uint8_t pub[RRPC_TICKET_KEY_LEN];
    uint8_t id[RRPC_TICKET_KEY_ID_LEN];
};

struct ident;

struct nonce_ent {
    struct nonce_ent *next;              /* in its bucket */
    struct nonce_ent *iprev, *inext;     /* its identity's, oldest first */
    struct ident *id;
    int64_t until_ms;
    uint8_t nonce[RRPC_TICKET_NONCE_LEN];
};

/* A client identity's part of the replay cache. */
struct ident {
    struct ident *next;
    struct nonce_ent *head, *tail; /* its nonces, oldest first */
    size_t n;
    int64_t floor_ms; /* its tickets remembered until no later than this are refused */
    size_t len;
    char name[256];
};

struct vkey {
    EVP_PKEY *pkey;
    uint8_t id[RRPC_TICKET_KEY_ID_LEN];
};

struct rrpc_ticket_verifier {
    pthread_mutex_t lock;
    char service[256];
    size_t service_len;
    struct vkey keys[RRPC_TICKET_MAX_KEYS];
    size_t n_keys;
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN];
    bool have_instance;
    int skew_ms;
    size_t n_nonces;
    int64_t next_prune_ms;
    struct nonce_ent *bucket[REPLAY_BUCKETS];
    struct ident *idents[IDENT_BUCKETS];
    size_t n_idents;
    struct ident *in_use; /* the identity a verify is working on: prune keeps it */
    int64_t window_ms;  /* the longest a nonce was remembered for: lifetime + skew */
    int rate;           /* tickets a second one identity may use: its share */
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

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x |= p[i];
    return x == 0;
}

static void say(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
}

/* ---- keys -------------------------------------------------------------------- */

RRPC_API void rrpc_ticket_key_id(const uint8_t pub[RRPC_TICKET_KEY_LEN],
                                 uint8_t id[RRPC_TICKET_KEY_ID_LEN])
{
    uint8_t md[32];
    unsigned int mdlen = sizeof(md);
    if (EVP_Digest(pub, RRPC_TICKET_KEY_LEN, md, &mdlen, EVP_sha256(), NULL) != 1)
        memset(md, 0, sizeof(md)); /* SHA-256 of 32 bytes does not fail */
    memcpy(id, md, RRPC_TICKET_KEY_ID_LEN);
}

static int raw_public(EVP_PKEY *pk, uint8_t pub[RRPC_TICKET_KEY_LEN])
{
    size_t n = RRPC_TICKET_KEY_LEN;
    if (EVP_PKEY_get_raw_public_key(pk, pub, &n) != 1 || n != RRPC_TICKET_KEY_LEN)
        return -EINVAL;
    return 0;
}

static int wrap_key(EVP_PKEY *pk, rrpc_ticket_key **ret_k)
{
    rrpc_ticket_key *k = calloc(1, sizeof(*k));
    if (!k) {
        EVP_PKEY_free(pk);
        return -ENOMEM;
    }
    k->pkey = pk;
    if (raw_public(pk, k->pub)) {
        rrpc_ticket_key_free(k);
        return -EINVAL;
    }
    rrpc_ticket_key_id(k->pub, k->id);
    *ret_k = k;
    return 0;
}

/* Reads the PEM key in @path: a private key, or (@public_ok) a public key. */
static int read_pem(const char *path, bool public_ok, EVP_PKEY **ret, char *why, size_t whylen)
{
    if (!path || !*path) {
        say(why, whylen, "no key file named");
        return -EINVAL;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        say(why, whylen, "cannot read the ticket key %s: %s", path, strerror(e));
        return e == ENOENT ? -ENOENT : -EACCES;
    }
    EVP_PKEY *pk = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    if (!pk && public_ok) {
        rewind(f);
        pk = PEM_read_PUBKEY(f, NULL, NULL, NULL);
    }
    fclose(f);
    ERR_clear_error();
    if (!pk) {
        say(why, whylen, "%s holds no PEM %s key (make one with: openssl genpkey -algorithm "
            "ed25519 -out KEY.pem%s)", path, public_ok ? "public or private" : "private",
            public_ok ? "; its public half: openssl pkey -in KEY.pem -pubout" : "");
        return -EINVAL;
    }
    if (EVP_PKEY_get_id(pk) != EVP_PKEY_ED25519) {
        const char *type = EVP_PKEY_get0_type_name(pk);
        say(why, whylen, "%s holds a key of type %s; ticket keys are Ed25519 (make one with: "
            "openssl genpkey -algorithm ed25519 -out KEY.pem)", path, type ? type : "?");
        EVP_PKEY_free(pk);
        return -EPROTONOSUPPORT;
    }
    *ret = pk;
    return 0;
}

RRPC_API int rrpc_ticket_key_load(const char *path, rrpc_ticket_key **ret_k, char *why,
                                  size_t whylen)
{
    if (!ret_k)
        return -EINVAL;
    EVP_PKEY *pk;
    int r = read_pem(path, false, &pk, why, whylen);
    if (!r)
        r = wrap_key(pk, ret_k);
    return r;
}

RRPC_API int rrpc_ticket_key_new(const uint8_t *seed, rrpc_ticket_key **ret_k)
{
    if (!ret_k)
        return -EINVAL;
    uint8_t s[32];
    if (seed)
        memcpy(s, seed, sizeof(s));
    else if (RAND_bytes(s, sizeof(s)) != 1)
        return -EIO;
    EVP_PKEY *pk = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, s, sizeof(s));
    OPENSSL_cleanse(s, sizeof(s));
    if (!pk)
        return -ENOMEM;
    return wrap_key(pk, ret_k);
}

RRPC_API void rrpc_ticket_key_public(const rrpc_ticket_key *k, uint8_t pub[RRPC_TICKET_KEY_LEN])
{
    if (k && pub)
        memcpy(pub, k->pub, RRPC_TICKET_KEY_LEN);
}

RRPC_API void rrpc_ticket_key_free(rrpc_ticket_key *k)
{
    if (!k)
        return;
    EVP_PKEY_free(k->pkey); /* OpenSSL cleanses the private key it frees */
    free(k);
}

RRPC_API int rrpc_ticket_public_key_load(const char *path, uint8_t pub[RRPC_TICKET_KEY_LEN],
                                         char *why, size_t whylen)
{
    if (!pub)
        return -EINVAL;
    EVP_PKEY *pk;
    int r = read_pem(path, true, &pk, why, whylen);
    if (r)
        return r;
    r = raw_public(pk, pub);
    EVP_PKEY_free(pk);
    if (r)
        say(why, whylen, "cannot read the raw public key of %s", path);
    return r;
}

/* ---- issuing and parsing --------------------------------------------------------- */

RRPC_API int rrpc_ticket_issue(const rrpc_ticket_key *k, const char *principal,
                               const char *service, const uint8_t *instance, int64_t expiry_ms,
                               const uint8_t *nonce, void *buf, size_t buflen, size_t *ret_len)
{
    size_t pl, sl;
    if (!k || !buf || !ret_len || name_ok(principal, &pl) || name_ok(service, &sl))
        return -EINVAL;
    size_t body = TICKET_HDR + pl + sl, total = body + SIG_LEN;
    if (buflen < total)
        return -ENOSPC;
    uint8_t *p = buf;
    memcpy(p, TICKET_MAGIC, 4);
    p[4] = TICKET_V3;
    p[5] = (uint8_t)pl;
    p[6] = (uint8_t)sl;
    p[7] = 0;
    put_le64(p + 8, (uint64_t)expiry_ms);
    if (nonce)
        memcpy(p + OFF_NONCE, nonce, RRPC_TICKET_NONCE_LEN);
    else if (RAND_bytes(p + OFF_NONCE, RRPC_TICKET_NONCE_LEN) != 1)
        return -EIO;
    if (instance)
        memcpy(p + OFF_INSTANCE, instance, RRPC_TICKET_INSTANCE_LEN);
    else
        memset(p + OFF_INSTANCE, 0, RRPC_TICKET_INSTANCE_LEN);
    memcpy(p + OFF_KEY_ID, k->id, RRPC_TICKET_KEY_ID_LEN);
    memcpy(p + TICKET_HDR, principal, pl);
    memcpy(p + TICKET_HDR + pl, service, sl);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    size_t siglen = SIG_LEN;
    int ok = md && EVP_DigestSignInit(md, NULL, NULL, NULL, k->pkey) == 1 &&
             EVP_DigestSign(md, p + body, &siglen, p, body) == 1 && siglen == SIG_LEN;
    EVP_MD_CTX_free(md);
    if (!ok) {
        ERR_clear_error();
        return -EIO;
    }
    *ret_len = total;
    return 0;
}

/* The layout of a ticket: its signed part and what follows it. */
struct parsed {
    size_t pl, sl;     /* principal and service lengths */
    size_t signed_len; /* through the signature */
    const uint8_t *ident;
    size_t ident_len; /* 0: none presented */
};

/* Checks the layout of @p: one signed ticket, then (when @presented) an
 * identity.  0, RRPC_E_VERSION (not version 3), RRPC_E_PROTO. */
static int parse(const uint8_t *p, size_t len, bool presented, struct parsed *t)
{
    if (!p || len < 8 || memcmp(p, TICKET_MAGIC, 4) != 0)
        return RRPC_E_PROTO;
    if (p[4] != TICKET_V3)
        return RRPC_E_VERSION;
    if (len < TICKET_HDR + 2 + SIG_LEN || p[5] == 0 || p[6] == 0 || p[7] != 0)
        return RRPC_E_PROTO;
    t->pl = p[5];
    t->sl = p[6];
    t->signed_len = TICKET_HDR + t->pl + t->sl + SIG_LEN;
    if (len < t->signed_len || memchr(p + TICKET_HDR, 0, t->pl + t->sl))
        return RRPC_E_PROTO;
    t->ident = NULL;
    t->ident_len = 0;
    if (len == t->signed_len)
        return 0;
    if (!presented)
        return RRPC_E_PROTO;
    const uint8_t *q = p + t->signed_len;
    size_t n = q[0];
    if (n == 0 || len != t->signed_len + 1 + n || memchr(q + 1, 0, n))
        return RRPC_E_PROTO;
    t->ident = q + 1;
    t->ident_len = n;
    return 0;
}

RRPC_API int rrpc_ticket_present(const void *ticket, size_t len, const char *identity, void *buf,
                                 size_t buflen, size_t *ret_len)
{
    struct parsed t;
    size_t il;
    if (!buf || !ret_len || name_ok(identity, &il) || parse(ticket, len, false, &t))
        return -EINVAL;
    if (buflen < len + 1 + il)
        return -ENOSPC;
    uint8_t *p = buf;
    memmove(p, ticket, len);
    p[len] = (uint8_t)il;
    memcpy(p + len + 1, identity, il);
    *ret_len = len + 1 + il;
    return 0;
}

RRPC_API int rrpc_ticket_peek(const void *ticket, size_t len, char *principal, char *service,
                              int64_t *ret_expiry_ms)
{
    const uint8_t *p = ticket;
    struct parsed t;
    if (parse(p, len, true, &t))
        return RRPC_E_PROTO;
    if (principal) {
        memcpy(principal, p + TICKET_HDR, t.pl);
        principal[t.pl] = 0;
    }
    if (service) {
        memcpy(service, p + TICKET_HDR + t.pl, t.sl);
        service[t.sl] = 0;
    }
    if (ret_expiry_ms)
        *ret_expiry_ms = (int64_t)get_le64(p + 8);
    return 0;
}

RRPC_API int rrpc_ticket_peek_instance(const void *ticket, size_t len,
                                       uint8_t instance[RRPC_TICKET_INSTANCE_LEN])
{
    const uint8_t *p = ticket;
    struct parsed t;
    if (parse(p, len, true, &t))
        return RRPC_E_PROTO;
    if (all_zero(p + OFF_INSTANCE, RRPC_TICKET_INSTANCE_LEN))
        return -ENOENT;
    if (instance)
        memcpy(instance, p + OFF_INSTANCE, RRPC_TICKET_INSTANCE_LEN);
    return 0;
}

/* ---- the verifier ---------------------------------------------------------------- */

RRPC_API int rrpc_ticket_verifier_create(const char *service, int skew_ms,
                                         rrpc_ticket_verifier **ret_v)
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
    v->skew_ms = skew_ms;
    v->rate = REPLAY_RATE;
    *ret_v = v;
    return 0;
}

RRPC_API int rrpc_ticket_verifier_set_keys(rrpc_ticket_verifier *v, const uint8_t *keys,
                                           size_t n)
{
    if (!v || n > RRPC_TICKET_MAX_KEYS || (n && !keys))
        return -EINVAL;
    struct vkey nk[RRPC_TICKET_MAX_KEYS];
    int r = 0;
    size_t i;
    for (i = 0; i < n && !r; i++) {
        const uint8_t *pub = keys + i * RRPC_TICKET_KEY_LEN;
        nk[i].pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub,
                                                 RRPC_TICKET_KEY_LEN);
        if (!nk[i].pkey)
            r = -EINVAL;
        else
            rrpc_ticket_key_id(pub, nk[i].id);
    }
    if (r) {
        ERR_clear_error();
        for (size_t j = 0; j + 1 < i; j++)
            EVP_PKEY_free(nk[j].pkey);
        return r;
    }
    pthread_mutex_lock(&v->lock);
    for (size_t j = 0; j < v->n_keys; j++)
        EVP_PKEY_free(v->keys[j].pkey);
    memcpy(v->keys, nk, n * sizeof(nk[0]));
    v->n_keys = n;
    pthread_mutex_unlock(&v->lock);
    return 0;
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
    /* Nonces are random (and signed), so their bytes are a fine hash. */
    return ((unsigned)nonce[0] | (unsigned)nonce[1] << 8) % REPLAY_BUCKETS;
}

static unsigned ident_hash(const uint8_t *name, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ name[i]) * 16777619u;
    return h % IDENT_BUCKETS;
}

/* The identity @name (@len bytes); made when @make.  NULL without memory. */
static struct ident *ident_get(rrpc_ticket_verifier *v, const uint8_t *name, size_t len,
                               bool make)
{
    unsigned b = ident_hash(name, len);
    for (struct ident *d = v->idents[b]; d; d = d->next)
        if (d->len == len && !memcmp(d->name, name, len))
            return d;
    if (!make)
        return NULL;
    struct ident *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    memcpy(d->name, name, len);
    d->len = len;
    d->next = v->idents[b];
    v->idents[b] = d;
    v->n_idents++;
    return d;
}

static void ident_drop_if_empty(rrpc_ticket_verifier *v, struct ident *d, int64_t now)
{
    if (d->n || d->floor_ms >= now || d == v->in_use)
        return;
    for (struct ident **pp = &v->idents[ident_hash((const uint8_t *)d->name, d->len)]; *pp;
         pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    v->n_idents--;
    free(d);
}

/* Unlinks @e from its identity's list (not from its bucket) and frees it. */
static void nonce_free(rrpc_ticket_verifier *v, struct nonce_ent *e)
{
    struct ident *d = e->id;
    if (e->iprev)
        e->iprev->inext = e->inext;
    else
        d->head = e->inext;
    if (e->inext)
        e->inext->iprev = e->iprev;
    else
        d->tail = e->iprev;
    d->n--;
    v->n_nonces--;
    free(e);
}

static void prune(rrpc_ticket_verifier *v, int64_t now)
{
    for (unsigned i = 0; i < REPLAY_BUCKETS; i++) {
        struct nonce_ent **pp = &v->bucket[i];
        while (*pp) {
            struct nonce_ent *e = *pp;
            if (e->until_ms < now) {
                *pp = e->next;
                nonce_free(v, e);
            } else {
                pp = &e->next;
            }
        }
    }
    for (unsigned i = 0; i < IDENT_BUCKETS; i++)
        for (struct ident *d = v->idents[i], *n; d; d = n) {
            n = d->next;
            ident_drop_if_empty(v, d, now);
        }
    v->next_prune_ms = now + 1000;
}

/* Removes the oldest nonce of the identity holding the most (of those, the one with
 * the oldest nonce), raising its floor. */
static void evict_from_largest(rrpc_ticket_verifier *v)
{
    struct ident *big = NULL;
    for (unsigned i = 0; i < IDENT_BUCKETS; i++)
        for (struct ident *d = v->idents[i]; d; d = d->next)
            if (d->head && (!big || d->n > big->n ||
                            (d->n == big->n && d->head->until_ms < big->head->until_ms)))
                big = d;
    if (!big)
        return;
    struct nonce_ent *e = big->head;
    if (e->until_ms > big->floor_ms)
        big->floor_ms = e->until_ms;
    for (struct nonce_ent **pp = &v->bucket[bucket_of(e->nonce)]; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    nonce_free(v, e);
}

/* The share of one identity: rate a second over the window, within the bounds. */
static size_t share_of(const rrpc_ticket_verifier *v)
{
    int64_t s = (int64_t)v->rate * (v->window_ms / 1000 + 1);
    if (s < REPLAY_SHARE_MIN)
        s = REPLAY_SHARE_MIN;
    if (s > REPLAY_SHARE_MAX)
        s = REPLAY_SHARE_MAX;
    return (size_t)s;
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

static void hex8(char out[17], const uint8_t *id)
{
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

void rrpci_ticket_verifier_set_rate(rrpc_ticket_verifier *v, int per_s)
{
    pthread_mutex_lock(&v->lock);
    v->rate = per_s < 1 ? 1 : per_s > REPLAY_SHARE_MAX ? REPLAY_SHARE_MAX : per_s;
    pthread_mutex_unlock(&v->lock);
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
    struct parsed t;
    int pr = parse(p, len, true, &t);
    if (pr == RRPC_E_VERSION)
        return refuse(why, whylen, "ticket version %u: this server accepts only version %u "
                      "(tickets signed with the brokers' key); the broker that issued it "
                      "is older than this server: upgrade it", p[4], TICKET_V3);
    if (pr)
        return refuse(why, whylen, "malformed ticket (%zu bytes)", len);
    if (!t.ident)
        return refuse(why, whylen, "the ticket comes without the client identity it is "
                      "presented for (rrpc_ticket_present)");
    if (now == 0)
        now = now_ms();

    size_t body = TICKET_HDR + t.pl + t.sl;
    const uint8_t *tp = p + TICKET_HDR, *ts = tp + t.pl;
    char kid[17];
    int r = 0;
    pthread_mutex_lock(&v->lock);
    if (!v->n_keys) {
        r = refuse(why, whylen, "service '%s' is not registered with the broker yet (no "
                   "ticket keys)", v->service);
        goto out;
    }
    const struct vkey *k = NULL;
    for (size_t i = 0; i < v->n_keys && !k; i++)
        if (!memcmp(v->keys[i].id, p + OFF_KEY_ID, RRPC_TICKET_KEY_ID_LEN))
            k = &v->keys[i];
    if (!k) {
        hex8(kid, p + OFF_KEY_ID);
        r = refuse(why, whylen, "ticket signed with key %s, which this server does not accept "
                   "(rotated out of the brokers' ticket_key_previous, or from a broker with "
                   "another ticket_key)", kid);
        goto out;
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool good = md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, k->pkey) == 1 &&
                EVP_DigestVerify(md, p + body, SIG_LEN, p, body) == 1;
    EVP_MD_CTX_free(md);
    ERR_clear_error();
    /* Only a signed ticket's fields mean anything, so the signature comes first. */
    if (!good) {
        r = refuse(why, whylen, "bad ticket signature (forged, or altered)");
        goto out;
    }
    if (t.sl != v->service_len || memcmp(ts, v->service, t.sl) != 0) {
        r = refuse(why, whylen, "ticket is for service '%.*s', this is '%s'", (int)t.sl,
                   (const char *)ts, v->service);
        goto out;
    }
    /* A restarted server has an empty replay cache: only the instance id in
     * the ticket keeps it from being used once per instance, or once per run. */
    bool bound = !all_zero(p + OFF_INSTANCE, RRPC_TICKET_INSTANCE_LEN);
    if (bound != v->have_instance ||
        (bound && CRYPTO_memcmp(p + OFF_INSTANCE, v->instance, RRPC_TICKET_INSTANCE_LEN) != 0)) {
        r = refuse(why, whylen, bound ? (v->have_instance
                                             ? "ticket is for another instance of service '%s' "
                                               "(another server, or this one before a restart); "
                                               "look the service up again for a fresh ticket"
                                             : "ticket is bound to a server instance, and this "
                                               "verifier of '%s' has none")
                                      : "ticket is bound to no server instance, and this "
                                        "server of '%s' accepts only its own",
                   v->service);
        goto out;
    }
    if (t.ident_len != t.pl || memcmp(t.ident, tp, t.pl) != 0) {
        r = refuse(why, whylen, "ticket was issued to '%.*s', and this connection presents "
                   "'%.*s': a ticket is good only for the client that looked the service up",
                   (int)t.pl, (const char *)tp, (int)t.ident_len, (const char *)t.ident);
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
    const uint8_t *nonce = p + OFF_NONCE;
    if (now >= v->next_prune_ms)
        prune(v, now);
    unsigned b = bucket_of(nonce);
    for (struct nonce_ent *e = v->bucket[b]; e; e = e->next) {
        if (memcmp(e->nonce, nonce, RRPC_TICKET_NONCE_LEN) == 0) {
            r = refuse(why, whylen, "ticket replayed (its nonce was used before)");
            goto out;
        }
    }
    struct ident *d = ident_get(v, tp, t.pl, true);
    v->in_use = d; /* a new one is empty: the prunes below must not free it */
    if (!d) {
        r = refuse(why, whylen, "out of memory for the replay cache");
        goto out;
    }
    if (until <= d->floor_ms) {
        r = refuse(why, whylen, "ticket of '%.*s' issued before the replay cache had to forget "
                   "some of its nonces (the cache was full); look the service up again for a "
                   "fresh ticket", (int)t.pl, (const char *)tp);
        goto out;
    }
    if (until - now > v->window_ms)
        v->window_ms = until - now;
    size_t share = share_of(v);
    if (d->n >= share) {
        prune(v, now);
        if (d->n >= share) {
            r = refuse(why, whylen, "replay cache share of client '%.*s' full (%zu live "
                       "tickets: %d a second over a ticket's lifetime + skew); this client "
                       "connects too often: try again when its tickets expire",
                       (int)t.pl, (const char *)tp, d->n, v->rate);
            goto out;
        }
    }
    if (v->n_nonces >= REPLAY_MAX) {
        prune(v, now);
        if (v->n_nonces >= REPLAY_MAX) {
            if (d->n >= REPLAY_MAX / (v->n_idents ? v->n_idents : 1)) {
                r = refuse(why, whylen, "replay cache full (%d live tickets) and client "
                           "'%.*s' holds its fair part (%zu); try again when its tickets "
                           "expire", REPLAY_MAX, (int)t.pl, (const char *)tp, d->n);
                goto out;
            }
            evict_from_largest(v);
        }
    }
    struct nonce_ent *e = calloc(1, sizeof(*e));
    if (!e) {
        r = refuse(why, whylen, "out of memory for the replay cache");
        goto out;
    }
    memcpy(e->nonce, nonce, RRPC_TICKET_NONCE_LEN);
    e->until_ms = until;
    e->next = v->bucket[b];
    v->bucket[b] = e;
    e->id = d;
    e->iprev = d->tail;
    if (d->tail)
        d->tail->inext = e;
    else
        d->head = e;
    d->tail = e;
    d->n++;
    v->n_nonces++;
    if (principal) {
        memcpy(principal, tp, t.pl);
        principal[t.pl] = 0;
    }
out:
    v->in_use = NULL;
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
    for (unsigned i = 0; i < IDENT_BUCKETS; i++)
        while (v->idents[i]) {
            struct ident *d = v->idents[i];
            v->idents[i] = d->next;
            free(d);
        }
    for (size_t j = 0; j < v->n_keys; j++)
        EVP_PKEY_free(v->keys[j].pkey);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ticket: connection-ticket verification (libroce_rpc/broker/ticket.c:
 * rrpc_ticket_verify, rrpc_ticket_peek, rrpc_ticket_issue,
 * rrpc_ticket_present) against a verifier of service "fuzz-svc", instance
 * INST, with known Ed25519 keys, judged by a model of the format (version 3)
 * written here from docs/broker.md and <roce_rpc/broker.h>; the model checks
 * signatures with OpenSSL's Ed25519 directly.
 *
 * A fuzzed ticket almost never carries a valid signature, so two modes
 * reach the checks behind it:
 *  - issue: the harness issues a ticket (rrpc_ticket_issue) from fuzzed
 *    fields, presents it with the principal or another identity, then
 *    flips fuzzer-chosen bytes of it;
 *  - raw: the input bytes are the presented ticket; with "re-sign" the
 *    harness writes the signing key's id and signs a well-formed body, so
 *    mutated fields arrive signed (expiry, service, nonce, instance, lengths,
 *    the identity after the signature).
 * Each ticket is verified twice.  Checks:
 *  - accepted exactly when the model accepts: keys are set, the layout is
 *    valid, the key id names an accepted key (A; with rotation B and A) and
 *    the signature verifies under it, the service is fuzz-svc, the instance
 *    is INST, the presented identity is the principal, expiry >= 0 and
 *    now <= expiry + skew; and the second use is refused as a replay;
 *  - an accepted ticket is canonical: it equals what rrpc_ticket_issue and
 *    rrpc_ticket_present make from its fields and nonce; the principal comes
 *    back NUL-terminated and equal;
 *  - peek succeeds exactly for a valid layout and returns its fields;
 *  - the reason fits the given buffer (exact-size: ASan), NUL-terminated,
 *    and is never empty for a refusal;
 *  - issue refuses bad names and a short buffer.
 *
 * Input: byte 0: bit 0 issue (else raw), bit 1 raw: re-sign, bit 2 sign
 * with key A (else B), bit 3 the verifier accepts B and A (a rotation's
 * overlap; else only A), bit 4 the verifier has no keys yet, bits 5-7 the
 * reason buffer: 0, 1, 2, 16, 64, 128, 256, 512 bytes.
 * Bytes 1-4: now, int32 LE seconds around T0 = 1.7e12 ms.
 * raw: then the presented ticket.  issue: byte 5 principal length (bits 0-6
 * mod 40; bit 7: presented as "mallory"), byte 6 bit 0 another service,
 * bytes 7-10 expiry, int32 LE seconds around T0, 11-26 nonce, then the name
 * bytes (principal, then service: byte 6 >> 1 mod 16 + 1 long), then (u16
 * LE position, xor byte) flips.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/error.h>

#include "fuzz.h"

#define SERVICE "fuzz-svc"
#define SKEW_MS 1000
#define T0 1700000000000ll
#define HDR 56
#define SIG 64

static const uint8_t seed_a[32] = {
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20,
    0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30};
static const uint8_t seed_b[32] = {
    0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0,
    0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0};
static const uint8_t INST[RRPC_TICKET_INSTANCE_LEN] = {0x5a, 1, 2, 3, 4, 5, 6, 7,
                                                       8, 9, 10, 11, 12, 13, 14, 15};

/* The harness's own copies of the keys (OpenSSL objects) and library handles. */
struct key {
    EVP_PKEY *priv, *pub;
    uint8_t raw[32], id[8];
    rrpc_ticket_key *k;
};
static struct key keys[2]; /* A, B */

static void key_init(struct key *k, const uint8_t seed[32])
{
    size_t n = 32;
    uint8_t md[32];
    unsigned int mdl = 32;
    k->priv = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
    if (!k->priv || EVP_PKEY_get_raw_public_key(k->priv, k->raw, &n) != 1 || n != 32)
        abort();
    k->pub = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, k->raw, 32);
    if (!k->pub || EVP_Digest(k->raw, 32, md, &mdl, EVP_sha256(), NULL) != 1)
        abort();
    memcpy(k->id, md, 8);
    if (rrpc_ticket_key_new(seed, &k->k))
        abort();
}

static int32_t get_i32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static int64_t get_i64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return (int64_t)v;
}

/* The model's layout check (docs/broker.md, "Ticket format"): the signed
 * ticket, then the presented identity. */
static bool model_layout(const uint8_t *t, size_t len, size_t *pl, size_t *sl, size_t *il)
{
    if (len < HDR || memcmp(t, "RTKT", 4) != 0 || t[4] != 3 || t[7] != 0)
        return false;
    *pl = t[5];
    *sl = t[6];
    size_t body = HDR + *pl + *sl;
    if (*pl == 0 || *sl == 0 || len < body + SIG + 2)
        return false;
    *il = t[body + SIG];
    if (*il == 0 || len != body + SIG + 1 + *il)
        return false;
    return memchr(t + HDR, 0, *pl + *sl) == NULL && memchr(t + body + SIG + 1, 0, *il) == NULL;
}

static bool sig_ok(const struct key *k, const uint8_t *t, size_t body)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, k->pub) == 1 &&
              EVP_DigestVerify(md, t + body, SIG, t, body) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

static void sign(const struct key *k, uint8_t *t, size_t body)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    size_t sl = SIG;
    memcpy(t + 48, k->id, 8);
    if (!md || EVP_DigestSignInit(md, NULL, NULL, NULL, k->priv) != 1 ||
        EVP_DigestSign(md, t + body, &sl, t, body) != 1 || sl != SIG)
        abort();
    EVP_MD_CTX_free(md);
}

static int verify(rrpc_ticket_verifier *v, const uint8_t *t, size_t len, int64_t now,
                  size_t whylen, char principal[256])
{
    char *why = whylen ? malloc(whylen) : NULL;
    if (whylen && !why)
        abort();
    if (why)
        memset(why, 'x', whylen);
    memset(principal, 'y', 256);
    int r = rrpc_ticket_verify(v, t, len, now, principal, why, whylen);
    FUZZ_CHECK(r == 0 || r == RRPC_E_TICKET);
    if (why) {
        FUZZ_CHECK(memchr(why, 0, whylen) != NULL);
        if (r)
            FUZZ_CHECK(whylen == 1 || why[0] != 0);
    }
    free(why);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static const size_t whylens[8] = {0, 1, 2, 16, 64, 128, 256, 512};
    if (!keys[0].k) {
        key_init(&keys[0], seed_a);
        key_init(&keys[1], seed_b);
    }
    if (n < 5)
        return 0;
    uint8_t mode = d[0];
    int64_t now = T0 + (int64_t)get_i32(d + 1) * 1000;
    if (now == 0)
        now = 1; /* 0 asks rrpc_ticket_verify for the clock */
    size_t whylen = whylens[mode >> 5];
    bool rotated = mode & 8, no_keys = mode & 16;
    const struct key *sk = (mode & 4) ? &keys[0] : &keys[1];
    d += 5;
    n -= 5;

    uint8_t *t; /* the presented ticket, in a buffer of its exact size */
    size_t len;
    if (mode & 1) {
        if (n < 22)
            return 0;
        size_t pl = (d[0] & 0x7f) % 40, sl = ((d[1] >> 1) % 16) + 1;
        bool other = d[1] & 1, mallory = d[0] & 0x80;
        int64_t expiry = T0 + (int64_t)get_i32(d + 2) * 1000;
        const uint8_t *nonce = d + 6;
        const uint8_t *names = d + 22;
        size_t avail = n - 22;
        char principal[64], service[32];
        pl = pl < avail ? pl : avail;
        memcpy(principal, names, pl);
        principal[pl] = 0;
        avail -= pl;
        if (other) {
            sl = sl < avail ? sl : avail;
            memcpy(service, names + pl, sl);
            service[sl] = 0;
        } else {
            sl = 0;
            strcpy(service, SERVICE);
        }
        const uint8_t *flips = names + pl + (other ? sl : 0);
        size_t nflips = (size_t)(d + n - flips) / 3;
        uint8_t raw[RRPC_TICKET_SIGNED_MAX_LEN], buf[RRPC_TICKET_MAX_LEN];
        size_t got = 0;
        bool names_ok = strlen(principal) > 0 && strlen(service) > 0;
        int r = rrpc_ticket_issue(sk->k, principal, service, INST, expiry, nonce, raw,
                                  sizeof(raw), &got);
        FUZZ_CHECK(names_ok ? r == 0 : r == -EINVAL);
        if (r)
            return 0;
        size_t need = HDR + strlen(principal) + strlen(service) + SIG;
        FUZZ_CHECK(got == need);
        size_t small = 0;
        FUZZ_CHECK(rrpc_ticket_issue(sk->k, principal, service, INST, expiry, nonce, raw,
                                     need - 1, &small) == -ENOSPC);
        FUZZ_CHECK(rrpc_ticket_present(raw, got, mallory ? "mallory" : principal, buf,
                                       sizeof(buf), &got) == 0);
        for (size_t i = 0; i < nflips; i++) {
            size_t pos = (size_t)(flips[3 * i] | flips[3 * i + 1] << 8) % got;
            buf[pos] ^= flips[3 * i + 2];
        }
        len = got;
        t = malloc(len);
        if (!t)
            abort();
        memcpy(t, buf, len);
    } else {
        len = n;
        t = malloc(len ? len : 1);
        if (!t)
            abort();
        memcpy(t, d, len);
        size_t pl, sl, il;
        if ((mode & 2) && model_layout(t, len, &pl, &sl, &il))
            sign(sk, t, HDR + pl + sl);
    }

    /* The model. */
    size_t pl = 0, sl = 0, il = 0;
    bool layout = model_layout(t, len, &pl, &sl, &il);
    bool good_sig = false, service_ok = false, fresh = false, inst_ok = false, ident_ok = false;
    int64_t expiry = 0;
    const struct key *used = NULL;
    if (layout) {
        size_t body = HDR + pl + sl;
        if (!no_keys) {
            for (int i = rotated ? 1 : 0; i >= 0 && !used; i--)
                if (!memcmp(t + 48, keys[i].id, 8))
                    used = &keys[i];
        }
        good_sig = used && sig_ok(used, t, body);
        service_ok = sl == strlen(SERVICE) && memcmp(t + HDR + pl, SERVICE, sl) == 0;
        inst_ok = memcmp(t + 32, INST, sizeof(INST)) == 0;
        ident_ok = il == pl && memcmp(t + body + SIG + 1, t + HDR, pl) == 0;
        expiry = get_i64(t + 8);
        fresh = expiry >= 0 && (expiry > INT64_MAX - SKEW_MS || now <= expiry + SKEW_MS);
    }
    bool accept = layout && good_sig && service_ok && inst_ok && ident_ok && fresh;

    char pname[256], sname[256];
    int64_t pexp = 0;
    int pr = rrpc_ticket_peek(t, len, pname, sname, &pexp);
    FUZZ_CHECK(layout ? pr == 0 : (pr == RRPC_E_PROTO || len == HDR + pl + sl + SIG));
    if (pr == 0 && layout) {
        FUZZ_CHECK(strlen(pname) == pl && memcmp(pname, t + HDR, pl) == 0);
        FUZZ_CHECK(strlen(sname) == sl && memcmp(sname, t + HDR + pl, sl) == 0);
        FUZZ_CHECK(pexp == expiry);
    }

    rrpc_ticket_verifier *v;
    FUZZ_CHECK(rrpc_ticket_verifier_create(SERVICE, SKEW_MS, &v) == 0);
    FUZZ_CHECK(rrpc_ticket_verifier_set_instance(v, INST) == 0);
    if (!no_keys) {
        uint8_t pubs[64];
        memcpy(pubs, rotated ? keys[1].raw : keys[0].raw, 32);
        memcpy(pubs + 32, keys[0].raw, 32);
        FUZZ_CHECK(rrpc_ticket_verifier_set_keys(v, pubs, rotated ? 2 : 1) == 0);
    }
    char principal[256];
    int r = verify(v, t, len, now, whylen, principal);
    FUZZ_CHECK((r == 0) == accept);
    if (r == 0) {
        FUZZ_CHECK(strlen(principal) == pl && memcmp(principal, t + HDR, pl) == 0);
        /* Canonical: what the issuer makes from these fields, presented. */
        uint8_t raw[RRPC_TICKET_SIGNED_MAX_LEN], again[RRPC_TICKET_MAX_LEN];
        size_t raw_len = 0, again_len = 0;
        char svc[256];
        memcpy(svc, t + HDR + pl, sl);
        svc[sl] = 0;
        FUZZ_CHECK(rrpc_ticket_issue(used->k, principal, svc, INST, expiry, t + 16, raw,
                                     sizeof(raw), &raw_len) == 0);
        FUZZ_CHECK(rrpc_ticket_present(raw, raw_len, principal, again, sizeof(again),
                                       &again_len) == 0);
        FUZZ_CHECK(again_len == len && memcmp(again, t, len) == 0);
    }
    /* Single use. */
    r = verify(v, t, len, now, whylen, principal);
    FUZZ_CHECK(r == RRPC_E_TICKET);
    rrpc_ticket_verifier_destroy(v);
    free(t);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ticket: connection-ticket verification (libroce_rpc/broker/ticket.c:
 * rrpc_ticket_verify, rrpc_ticket_peek, rrpc_ticket_issue) against a
 * verifier of service "fuzz-svc" with known secrets, judged by a model of
 * the format written here from docs/broker.md and <roce_rpc/broker.h>.
 *
 * A fuzzed ticket almost never carries a valid HMAC, so two modes reach the
 * checks behind the signature:
 *  - issue: the harness issues a ticket (rrpc_ticket_issue) from fuzzed
 *    fields, then flips fuzzer-chosen bytes of it;
 *  - raw: the input bytes are the ticket; with "re-sign" the harness
 *    recomputes the HMAC of a well-formed body, so mutated fields arrive
 *    signed (expiry, service, nonce, name lengths).
 * Each ticket is verified twice.  Checks:
 *  - accepted exactly when the model accepts: a secret is set, the layout
 *    is valid, the HMAC matches the current or the previous secret, the
 *    service is fuzz-svc, expiry >= 0 and now <= expiry + skew; and the
 *    second use is refused as a replay;
 *  - an accepted ticket is canonical: it equals what rrpc_ticket_issue
 *    makes from its fields and nonce; the principal comes back
 *    NUL-terminated and equal;
 *  - peek succeeds exactly for a valid layout and returns its fields;
 *  - the reason fits the given buffer (exact-size: ASan), NUL-terminated,
 *    and is never empty for a refusal;
 *  - issue refuses bad names and a short buffer, and its tickets verify.
 *
 * Input: byte 0: bit 0 issue (else raw), bit 1 raw: re-sign, bit 2 sign
 * with secret A (else B), bit 3 the verifier knows A then B (B current, A
 * previous; else only A), bit 4 the verifier has no secret yet, bits 5-7
 * the reason buffer: 0, 1, 2, 16, 64, 128, 256, 512 bytes.
 * Bytes 1-4: now, int32 LE seconds around T0 = 1.7e12 ms.
 * raw: then the ticket.  issue: byte 5 principal length (mod 40), byte 6
 * bit 0 another service, bytes 7-10 expiry, int32 LE seconds around T0,
 * 11-26 nonce, then the name bytes (principal, then service: byte 6 >> 1
 * mod 16 + 1 long), then (u16 LE position, xor byte) flips.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/error.h>

#include "fuzz.h"

#define SERVICE "fuzz-svc"
#define SKEW_MS 1000
#define T0 1700000000000ll
#define HDR 32
#define MAC 32

static const uint8_t secret_a[RRPC_TICKET_SECRET_LEN] = {
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20,
    0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30};
static const uint8_t secret_b[RRPC_TICKET_SECRET_LEN] = {
    0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0xc0,
    0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0};

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

/* The model's layout check (docs/broker.md, "Tickets"). */
static bool model_layout(const uint8_t *t, size_t len, size_t *pl, size_t *sl)
{
    if (len < HDR || memcmp(t, "RTKT", 4) != 0 || t[4] != 1 || t[7] != 0)
        return false;
    *pl = t[5];
    *sl = t[6];
    if (*pl == 0 || *sl == 0 || len != HDR + *pl + *sl + MAC)
        return false;
    return memchr(t + HDR, 0, *pl + *sl) == NULL;
}

static void hmac(const uint8_t *key, const uint8_t *d, size_t n, uint8_t out[MAC])
{
    unsigned int ol = MAC;
    if (!HMAC(EVP_sha256(), key, RRPC_TICKET_SECRET_LEN, d, n, out, &ol) || ol != MAC)
        abort();
}

static bool signed_by(const uint8_t *key, const uint8_t *t, size_t body)
{
    uint8_t m[MAC];
    hmac(key, t, body, m);
    return memcmp(m, t + body, MAC) == 0;
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
    if (n < 5)
        return 0;
    uint8_t mode = d[0];
    int64_t now = T0 + (int64_t)get_i32(d + 1) * 1000;
    if (now == 0)
        now = 1; /* 0 asks rrpc_ticket_verify for the clock */
    size_t whylen = whylens[mode >> 5];
    bool rotated = mode & 8, no_secret = mode & 16;
    const uint8_t *sign_key = (mode & 4) ? secret_a : secret_b;
    d += 5;
    n -= 5;

    uint8_t *t; /* the ticket, in a buffer of its exact size */
    size_t len;
    if (mode & 1) {
        if (n < 22)
            return 0;
        size_t pl = d[0] % 40, sl = ((d[1] >> 1) % 16) + 1;
        bool other = d[1] & 1;
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
        uint8_t buf[RRPC_TICKET_MAX_LEN];
        size_t got = 0;
        bool names_ok = strlen(principal) > 0 && strlen(service) > 0;
        int r = rrpc_ticket_issue(sign_key, principal, service, expiry, nonce, buf, sizeof(buf),
                                  &got);
        FUZZ_CHECK(names_ok ? r == 0 : r == -EINVAL);
        if (r)
            return 0;
        size_t need = HDR + strlen(principal) + strlen(service) + MAC;
        FUZZ_CHECK(got == need);
        size_t small = 0;
        FUZZ_CHECK(rrpc_ticket_issue(sign_key, principal, service, expiry, nonce, buf, need - 1,
                                     &small) == -ENOSPC);
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
        size_t pl, sl;
        if ((mode & 2) && model_layout(t, len, &pl, &sl))
            hmac(sign_key, t, len - MAC, t + len - MAC);
    }

    /* The model. */
    size_t pl = 0, sl = 0;
    bool layout = model_layout(t, len, &pl, &sl);
    bool good_mac = false, service_ok = false, fresh = false;
    int64_t expiry = 0;
    const uint8_t *used_key = NULL;
    if (layout) {
        size_t body = len - MAC;
        if (!no_secret) {
            if (signed_by(rotated ? secret_b : secret_a, t, body))
                used_key = rotated ? secret_b : secret_a;
            else if (rotated && signed_by(secret_a, t, body))
                used_key = secret_a;
        }
        good_mac = used_key != NULL;
        service_ok = sl == strlen(SERVICE) && memcmp(t + HDR + pl, SERVICE, sl) == 0;
        expiry = get_i64(t + 8);
        fresh = expiry >= 0 && (expiry > INT64_MAX - SKEW_MS || now <= expiry + SKEW_MS);
    }
    bool accept = layout && good_mac && service_ok && fresh;

    char pname[256], sname[256];
    int64_t pexp = 0;
    int pr = rrpc_ticket_peek(t, len, pname, sname, &pexp);
    FUZZ_CHECK(layout ? pr == 0 : pr == RRPC_E_PROTO);
    if (pr == 0) {
        FUZZ_CHECK(strlen(pname) == pl && memcmp(pname, t + HDR, pl) == 0);
        FUZZ_CHECK(strlen(sname) == sl && memcmp(sname, t + HDR + pl, sl) == 0);
        FUZZ_CHECK(pexp == expiry);
    }

    rrpc_ticket_verifier *v;
    FUZZ_CHECK(rrpc_ticket_verifier_create(SERVICE, no_secret ? NULL : secret_a, SKEW_MS, &v) ==
               0);
    if (rotated && !no_secret)
        rrpc_ticket_verifier_set_secret(v, secret_b);
    char principal[256];
    int r = verify(v, t, len, now, whylen, principal);
    FUZZ_CHECK((r == 0) == accept);
    if (r == 0) {
        FUZZ_CHECK(strlen(principal) == pl && memcmp(principal, t + HDR, pl) == 0);
        /* Canonical: what the issuer makes from these fields. */
        uint8_t again[RRPC_TICKET_MAX_LEN];
        size_t again_len = 0;
        char svc[256];
        memcpy(svc, t + HDR + pl, sl);
        svc[sl] = 0;
        FUZZ_CHECK(rrpc_ticket_issue(used_key, principal, svc, expiry, t + 16, again,
                                     sizeof(again), &again_len) == 0);
        FUZZ_CHECK(again_len == len && memcmp(again, t, len) == 0);
    }
    /* Single use. */
    r = verify(v, t, len, now, whylen, principal);
    FUZZ_CHECK(r == RRPC_E_TICKET);
    rrpc_ticket_verifier_destroy(v);
    free(t);
    return 0;
}

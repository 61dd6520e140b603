/* SPDX-License-Identifier: MIT */
/* Connection tickets (Ed25519-signed, version 3), their keys, and the
 * msgpack pre-check, without a broker. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker/proto.h"

static const uint8_t seed_a[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
static const uint8_t seed_b[32] = { 42 };
static const uint8_t inst_a[RRPC_TICKET_INSTANCE_LEN] = { 0xa1, 0xa2, 0xa3 };
static const uint8_t inst_b[RRPC_TICKET_INSTANCE_LEN] = { 0xb1, 0xb2, 0xb3 };
#define NOW 1700000000000LL

static rrpc_ticket_key *key_of(const uint8_t *seed)
{
    rrpc_ticket_key *k = NULL;
    assert_int_equal(rrpc_ticket_key_new(seed, &k), 0);
    return k;
}

/* A ticket for @principal, signed with the key of @seed, presented as @ident. */
static size_t make_full(uint8_t *buf, const uint8_t *seed, const char *principal,
                        const char *svc, const uint8_t *instance, int64_t expiry,
                        const char *ident)
{
    rrpc_ticket_key *k = key_of(seed);
    uint8_t raw[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t rl = 0, len = 0;
    assert_int_equal(rrpc_ticket_issue(k, principal, svc, instance, expiry, NULL, raw,
                                       sizeof(raw), &rl),
                     0);
    rrpc_ticket_key_free(k);
    assert_int_equal(rrpc_ticket_present(raw, rl, ident, buf, RRPC_TICKET_MAX_LEN, &len), 0);
    return len;
}

static size_t make(uint8_t *buf, const uint8_t *seed, const char *svc, int64_t expiry)
{
    return make_full(buf, seed, "alice", svc, inst_a, expiry, "alice");
}

static void set_keys(rrpc_ticket_verifier *v, const uint8_t *s1, const uint8_t *s2)
{
    uint8_t pubs[2 * RRPC_TICKET_KEY_LEN];
    size_t n = 0;
    for (const uint8_t *s = s1; s && n < 2; s = n == 1 ? s2 : NULL) {
        rrpc_ticket_key *k = key_of(s);
        rrpc_ticket_key_public(k, pubs + n++ * RRPC_TICKET_KEY_LEN);
        rrpc_ticket_key_free(k);
    }
    assert_int_equal(rrpc_ticket_verifier_set_keys(v, pubs, n), 0);
}

static rrpc_ticket_verifier *verifier_of(const uint8_t *instance)
{
    rrpc_ticket_verifier *v = NULL;
    assert_int_equal(rrpc_ticket_verifier_create("kv-store", 5000, &v), 0);
    set_keys(v, seed_a, NULL);
    if (instance)
        assert_int_equal(rrpc_ticket_verifier_set_instance(v, instance), 0);
    return v;
}

static rrpc_ticket_verifier *verifier(void)
{
    return verifier_of(inst_a);
}

static void test_valid_ticket_is_accepted_once_and_names_its_principal(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_a, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    char principal[256], why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, principal, why, sizeof(why)), 0);
    assert_string_equal(principal, "alice");
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW + 1, NULL, why, sizeof(why)),
                     RRPC_E_TICKET);
    assert_non_null(strstr(why, "replayed"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_every_flipped_byte_makes_a_ticket_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_a, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    for (size_t i = 0; i < len; i++) {
        uint8_t f[RRPC_TICKET_MAX_LEN];
        memcpy(f, t, len);
        f[i] ^= 0x01;
        char why[256];
        assert_int_equal(rrpc_ticket_verify(v, f, len, NOW, NULL, why, sizeof(why)),
                         RRPC_E_TICKET);
        assert_true(why[0] != 0);
    }
    /* None of the forgeries consumed the nonce. */
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, NULL, 0), 0);
    rrpc_ticket_verifier_destroy(v);
}

static void test_ticket_signed_with_a_key_the_verifier_does_not_accept_is_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_b, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "does not accept"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_forged_signature_under_an_accepted_key_id_is_refused(void **state)
{
    /* Signed by key B but carrying key A's id: what a forger can make. */
    uint8_t t[RRPC_TICKET_MAX_LEN], good[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_b, "kv-store", NOW + 30000);
    make(good, seed_a, "kv-store", NOW + 30000);
    memcpy(t + 48, good + 48, RRPC_TICKET_KEY_ID_LEN);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "bad ticket signature"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_ticket_presented_by_another_identity_is_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make_full(t, seed_a, "alice", "kv-store", inst_a, NOW + 30000, "mallory");
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "issued to 'alice'"));
    assert_non_null(strstr(why, "'mallory'"));
    /* A prefix of the principal is another identity too. */
    len = make_full(t, seed_a, "alice", "kv-store", inst_a, NOW + 30000, "alic");
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    /* The refused attempts did not use the ticket up for its owner. */
    len = make_full(t, seed_a, "alice", "kv-store", inst_a, NOW + 30000, "alice");
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    rrpc_ticket_verifier_destroy(v);
}

static void test_ticket_without_a_presented_identity_is_refused(void **state)
{
    rrpc_ticket_key *k = key_of(seed_a);
    uint8_t raw[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t rl;
    assert_int_equal(rrpc_ticket_issue(k, "alice", "kv-store", inst_a, NOW + 30000, NULL, raw,
                                       sizeof(raw), &rl),
                     0);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, raw, rl, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "without the client identity"));
    rrpc_ticket_verifier_destroy(v);
    rrpc_ticket_key_free(k);
}

static void test_old_hmac_ticket_versions_are_refused_with_the_reason(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_a, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    for (uint8_t ver = 1; ver <= 2; ver++) {
        t[4] = ver;
        assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)),
                         RRPC_E_TICKET);
        assert_non_null(strstr(why, "accepts only version 3"));
        assert_int_equal(rrpc_ticket_peek(t, len, NULL, NULL, NULL), RRPC_E_PROTO);
    }
    rrpc_ticket_verifier_destroy(v);
}

static void test_expired_ticket_is_refused_past_the_skew_allowance(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    size_t len = make(t, seed_a, "kv-store", NOW - 4000); /* inside the 5 s skew */
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    len = make(t, seed_a, "kv-store", NOW - 6000);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "expired"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_ticket_for_another_service_is_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_a, "kv-stor", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "for service"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_malformed_tickets_are_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN + 1];
    size_t len = make(t, seed_a, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    assert_int_equal(rrpc_ticket_verify(v, t, 0, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    assert_int_equal(rrpc_ticket_verify(v, NULL, 10, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    assert_int_equal(rrpc_ticket_verify(v, t, len - 1, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    t[len] = 0;
    assert_int_equal(rrpc_ticket_verify(v, t, len + 1, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    uint8_t zeros[200] = { 0 };
    assert_int_equal(rrpc_ticket_verify(v, zeros, sizeof(zeros), NOW, NULL, NULL, 0),
                     RRPC_E_TICKET);
    assert_int_equal(rrpc_ticket_peek(zeros, sizeof(zeros), NULL, NULL, NULL), RRPC_E_PROTO);
    rrpc_ticket_verifier_destroy(v);
}

static void test_issue_and_present_check_their_arguments(void **state)
{
    rrpc_ticket_key *k = key_of(seed_a);
    uint8_t t[RRPC_TICKET_MAX_LEN], p2[RRPC_TICKET_MAX_LEN];
    size_t len;
    char long_name[300];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = 0;
    assert_int_equal(rrpc_ticket_issue(k, "", "s", NULL, NOW, NULL, t, sizeof(t), &len), -EINVAL);
    assert_int_equal(rrpc_ticket_issue(k, "a", long_name, NULL, NOW, NULL, t, sizeof(t), &len),
                     -EINVAL);
    assert_int_equal(rrpc_ticket_issue(NULL, "a", "s", NULL, NOW, NULL, t, sizeof(t), &len),
                     -EINVAL);
    assert_int_equal(rrpc_ticket_issue(k, "a", "s", NULL, NOW, NULL, t, 10, &len), -ENOSPC);
    char p[256], s[256];
    int64_t exp;
    assert_int_equal(rrpc_ticket_issue(k, "bob", "svc", NULL, NOW, NULL, t, sizeof(t), &len), 0);
    assert_int_equal(rrpc_ticket_peek(t, len, p, s, &exp), 0);
    assert_string_equal(p, "bob");
    assert_string_equal(s, "svc");
    assert_int_equal(exp, NOW);
    assert_int_equal(rrpc_ticket_peek_instance(t, len, NULL), -ENOENT);
    size_t pl;
    assert_int_equal(rrpc_ticket_present(t, len, "", p2, sizeof(p2), &pl), -EINVAL);
    assert_int_equal(rrpc_ticket_present(t, len, long_name, p2, sizeof(p2), &pl), -EINVAL);
    assert_int_equal(rrpc_ticket_present(t, len - 1, "bob", p2, sizeof(p2), &pl), -EINVAL);
    assert_int_equal(rrpc_ticket_present(t, len, "bob", p2, len + 3, &pl), -ENOSPC);
    assert_int_equal(rrpc_ticket_present(t, len, "bob", p2, sizeof(p2), &pl), 0);
    assert_int_equal(pl, len + 4);
    /* presenting a presented ticket again is refused (one identity) */
    assert_int_equal(rrpc_ticket_present(p2, pl, "bob", t, sizeof(t), &len), -EINVAL);
    /* The longest presented ticket fits RRPC_TICKET_MAX_LEN. */
    char name[256];
    memset(name, 'n', 255);
    name[255] = 0;
    assert_int_equal(rrpc_ticket_issue(k, name, name, inst_a, NOW, NULL, t, sizeof(t), &len), 0);
    assert_int_equal(len, RRPC_TICKET_SIGNED_MAX_LEN);
    assert_int_equal(rrpc_ticket_present(t, len, name, p2, sizeof(p2), &pl), 0);
    assert_int_equal(pl, RRPC_TICKET_MAX_LEN);
    rrpc_ticket_key_free(k);
}

static void test_verifier_without_keys_refuses_until_it_gets_them(void **state)
{
    rrpc_ticket_verifier *v = NULL;
    assert_int_equal(rrpc_ticket_verifier_create("kv-store", 0, &v), 0);
    assert_int_equal(rrpc_ticket_verifier_set_instance(v, inst_a), 0);
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_a, "kv-store", NOW + 30000);
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "not registered"));
    set_keys(v, seed_a, NULL);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    /* too many keys, or a non-point, leave the set unchanged */
    uint8_t many[(RRPC_TICKET_MAX_KEYS + 1) * RRPC_TICKET_KEY_LEN] = { 0 };
    assert_int_equal(rrpc_ticket_verifier_set_keys(v, many, RRPC_TICKET_MAX_KEYS + 1), -EINVAL);
    len = make(t, seed_a, "kv-store", NOW + 30000);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    rrpc_ticket_verifier_destroy(v);
}

static void test_rotation_accepts_old_and_new_keys_until_the_old_one_is_dropped(void **state)
{
    rrpc_ticket_verifier *v = verifier(); /* knows key A */
    uint8_t a1[RRPC_TICKET_MAX_LEN], a2[RRPC_TICKET_MAX_LEN], b1[RRPC_TICKET_MAX_LEN];
    size_t la1 = make(a1, seed_a, "kv-store", NOW + 30000);
    size_t la2 = make(a2, seed_a, "kv-store", NOW + 30000);
    size_t lb1 = make(b1, seed_b, "kv-store", NOW + 30000);
    char why[256];
    set_keys(v, seed_b, seed_a); /* the overlap: B current, A previous */
    assert_int_equal(rrpc_ticket_verify(v, a1, la1, NOW, NULL, why, sizeof(why)), 0);
    assert_int_equal(rrpc_ticket_verify(v, b1, lb1, NOW, NULL, why, sizeof(why)), 0);
    set_keys(v, seed_b, NULL); /* after the overlap */
    assert_int_equal(rrpc_ticket_verify(v, a2, la2, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "does not accept"));
    rrpc_ticket_verifier_destroy(v);
}

/* Signs and presents a ticket of @who expiring at @expiry with @k into @t. */
static size_t issue_as(rrpc_ticket_key *k, const char *who, int64_t expiry, uint8_t *t)
{
    uint8_t raw[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t rl, len;
    assert_int_equal(rrpc_ticket_issue(k, who, "kv-store", inst_a, expiry, NULL, raw,
                                       sizeof(raw), &rl),
                     0);
    assert_int_equal(rrpc_ticket_present(raw, rl, who, t, RRPC_TICKET_MAX_LEN, &len), 0);
    return len;
}

/*
 * A client identity's share is 256 tickets a second (RRPC_TICKET_RATE's
 * default) over lifetime + skew: with 1 s tickets and 5 s of skew, 256 x 7 =
 * 1792.  Past it that client is
 * refused, another is not; later the old nonces have expired and the first
 * gets in again.
 */
static void test_many_tickets_fill_a_clients_share_and_drain(void **state)
{
    rrpc_ticket_verifier *v = verifier();
    rrpc_ticket_key *k = key_of(seed_a);
    uint8_t t[RRPC_TICKET_MAX_LEN];
    char why[256];
    int ok = 0;
    size_t len;
    for (int i = 0; i < 3000; i++) {
        len = issue_as(k, "alice", NOW + 1000, t);
        if (rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)))
            break;
        ok++;
    }
    assert_int_equal(ok, 1792);
    assert_non_null(strstr(why, "replay cache share of client 'alice' full"));
    len = issue_as(k, "bob", NOW + 1000, t);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    len = issue_as(k, "alice", NOW + 100000, t);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW + 60000, NULL, NULL, 0), 0);
    rrpc_ticket_key_free(k);
    rrpc_ticket_verifier_destroy(v);
}

/*
 * The whole cache full (four clients of hour-long tickets, 16384 each): a
 * fifth client still gets in, in place of the oldest nonce of the largest
 * holder, whose tickets expiring no later than that one are refused from
 * then on: the forgotten nonce cannot be replayed.  (c0's nonces are the
 * oldest of the four.)
 */
static void test_a_full_cache_still_admits_a_client_below_its_fair_part(void **state)
{
    rrpc_ticket_verifier *v = verifier();
    rrpc_ticket_key *k = key_of(seed_a);
    uint8_t t[RRPC_TICKET_MAX_LEN], first[RRPC_TICKET_MAX_LEN];
    char why[256], who[8];
    size_t len, first_len = 0;
    for (int c = 0; c < 4; c++) {
        snprintf(who, sizeof(who), "c%d", c);
        for (int i = 0; i < 16384; i++) {
            len = issue_as(k, who, NOW + 3600000 + c * 100000 + i, t);
            if (c == 0 && i == 0) {
                memcpy(first, t, len);
                first_len = len;
            }
            assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
        }
    }
    len = issue_as(k, "c0", NOW + 3700000, t);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "share of client 'c0' full"));
    len = issue_as(k, "late", NOW + 3600000, t);
    if (rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)))
        fail_msg("late: %s", why);
    /* c0's first nonce was forgotten: its ticket is refused all the same. */
    assert_int_equal(rrpc_ticket_verify(v, first, first_len, NOW, NULL, why, sizeof(why)),
                     RRPC_E_TICKET);
    assert_non_null(strstr(why, "had to forget"));
    rrpc_ticket_key_free(k);
    rrpc_ticket_verifier_destroy(v);
}

static void test_ticket_for_an_instance_is_accepted_once_by_that_instance_only(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, seed_a, "kv-store", NOW + 30000);
    uint8_t got[RRPC_TICKET_INSTANCE_LEN];
    assert_int_equal(rrpc_ticket_peek_instance(t, len, got), 0);
    assert_memory_equal(got, inst_a, sizeof(got));
    char principal[256], service[256], why[256];
    assert_int_equal(rrpc_ticket_peek(t, len, principal, service, NULL), 0);
    assert_string_equal(principal, "alice");
    assert_string_equal(service, "kv-store");

    rrpc_ticket_verifier *b = verifier_of(inst_b);
    assert_int_equal(rrpc_ticket_verify(b, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "another instance"));
    rrpc_ticket_verifier *none = verifier_of(NULL);
    assert_int_equal(rrpc_ticket_verify(none, t, len, NOW, NULL, why, sizeof(why)),
                     RRPC_E_TICKET);
    assert_non_null(strstr(why, "bound to a server instance"));
    rrpc_ticket_verifier *a = verifier_of(inst_a);
    assert_int_equal(rrpc_ticket_verify(a, t, len, NOW, principal, why, sizeof(why)), 0);
    assert_int_equal(rrpc_ticket_verify(a, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "replayed"));
    rrpc_ticket_verifier_destroy(a);
    rrpc_ticket_verifier_destroy(b);
    rrpc_ticket_verifier_destroy(none);
}

static void test_instance_verifier_refuses_tickets_bound_to_no_instance(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make_full(t, seed_a, "alice", "kv-store", NULL, NOW + 30000, "alice");
    rrpc_ticket_verifier *a = verifier_of(inst_a);
    char why[256];
    assert_int_equal(rrpc_ticket_verify(a, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "bound to no server instance"));
    rrpc_ticket_verifier *none = verifier_of(NULL);
    assert_int_equal(rrpc_ticket_verify(none, t, len, NOW, NULL, why, sizeof(why)), 0);
    assert_int_equal(rrpc_ticket_verifier_set_instance(none, (const uint8_t[16]){ 0 }), -EINVAL);
    rrpc_ticket_verifier_destroy(a);
    rrpc_ticket_verifier_destroy(none);
}

/* ---- key files --------------------------------------------------------------- */

static char dir[64];

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

/* Writes @pk to @name: its private key, or (@pub) only its public half. */
static void write_pem(const char *name, EVP_PKEY *pk, int pub)
{
    char p[128];
    path_in(p, sizeof(p), name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(pub ? PEM_write_PUBKEY(f, pk)
                         : PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL),
                     1);
    fclose(f);
}

static int setup_dir(void **state)
{
    snprintf(dir, sizeof(dir), "/tmp/rrpc-ticket-keys-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    const char *names[] = { "ed.pem", "ed.pub", "ec.pem", "junk.pem" };
    char p[128];
    for (size_t i = 0; i < 4; i++) {
        path_in(p, sizeof(p), names[i]);
        unlink(p);
    }
    return rmdir(dir);
}

static void test_key_files_load_and_other_key_types_are_refused(void **state)
{
    EVP_PKEY *ed = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed_a, 32);
    assert_non_null(ed);
    write_pem("ed.pem", ed, 0);
    write_pem("ed.pub", ed, 1);
    EVP_PKEY_free(ed);
    EVP_PKEY *ec = EVP_EC_gen("P-256");
    assert_non_null(ec);
    write_pem("ec.pem", ec, 0);
    EVP_PKEY_free(ec);
    char p[128], why[600];
    path_in(p, sizeof(p), "junk.pem");
    FILE *f = fopen(p, "w");
    fputs("not a key\n", f);
    fclose(f);

    rrpc_ticket_key *k = NULL, *want = key_of(seed_a);
    uint8_t pub[RRPC_TICKET_KEY_LEN], pub2[RRPC_TICKET_KEY_LEN], wantpub[RRPC_TICKET_KEY_LEN];
    rrpc_ticket_key_public(want, wantpub);
    path_in(p, sizeof(p), "ed.pem");
    assert_int_equal(rrpc_ticket_key_load(p, &k, why, sizeof(why)), 0);
    rrpc_ticket_key_public(k, pub);
    assert_memory_equal(pub, wantpub, sizeof(pub));
    assert_int_equal(rrpc_ticket_public_key_load(p, pub2, why, sizeof(why)), 0);
    assert_memory_equal(pub2, wantpub, sizeof(pub2));
    path_in(p, sizeof(p), "ed.pub");
    memset(pub2, 0, sizeof(pub2));
    assert_int_equal(rrpc_ticket_public_key_load(p, pub2, why, sizeof(why)), 0);
    assert_memory_equal(pub2, wantpub, sizeof(pub2));
    /* a public key is no signing key */
    assert_int_equal(rrpc_ticket_key_load(p, &k, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "no PEM private key"));
    path_in(p, sizeof(p), "ec.pem");
    assert_int_equal(rrpc_ticket_key_load(p, &k, why, sizeof(why)), -EPROTONOSUPPORT);
    assert_non_null(strstr(why, "Ed25519"));
    assert_int_equal(rrpc_ticket_public_key_load(p, pub2, why, sizeof(why)), -EPROTONOSUPPORT);
    path_in(p, sizeof(p), "junk.pem");
    assert_int_equal(rrpc_ticket_key_load(p, &k, why, sizeof(why)), -EINVAL);
    path_in(p, sizeof(p), "missing.pem");
    assert_int_equal(rrpc_ticket_key_load(p, &k, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "missing.pem"));

    /* The key id is the first 8 bytes of SHA-256 of the raw public key, and is in
     * the ticket at offset 48. */
    uint8_t id[RRPC_TICKET_KEY_ID_LEN], md[32];
    unsigned mdlen;
    rrpc_ticket_key_id(wantpub, id);
    assert_int_equal(EVP_Digest(wantpub, 32, md, &mdlen, EVP_sha256(), NULL), 1);
    assert_memory_equal(id, md, sizeof(id));
    uint8_t t[RRPC_TICKET_MAX_LEN];
    make(t, seed_a, "kv-store", NOW);
    assert_memory_equal(t + 48, id, sizeof(id));
    rrpc_ticket_key_free(k);
    rrpc_ticket_key_free(want);
}

static void test_msgpack_precheck_refuses_lying_containers(void **state)
{
    /* {"a": 1} */
    static const uint8_t ok[] = { 0x81, 0xa1, 'a', 0x01 };
    assert_int_equal(rrpci_mp_check(ok, sizeof(ok), 8), 0);
    assert_int_equal(rrpci_mp_check(ok, sizeof(ok) - 1, 8), -1);
    static const uint8_t trailing[] = { 0x81, 0xa1, 'a', 0x01, 0x00 };
    assert_int_equal(rrpci_mp_check(trailing, sizeof(trailing), 8), -1);
    /* array32 claiming 4 billion elements in 5 bytes */
    static const uint8_t huge_array[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0x01 };
    assert_int_equal(rrpci_mp_check(huge_array, sizeof(huge_array), 8), -1);
    static const uint8_t huge_map[] = { 0xdf, 0x7f, 0xff, 0xff, 0xff };
    assert_int_equal(rrpci_mp_check(huge_map, sizeof(huge_map), 8), -1);
    static const uint8_t huge_str[] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 'x' };
    assert_int_equal(rrpci_mp_check(huge_str, sizeof(huge_str), 8), -1);
    uint8_t deep[64];
    memset(deep, 0x91, sizeof(deep)); /* [[[[...]]]] */
    deep[63] = 0x00;
    assert_int_equal(rrpci_mp_check(deep, sizeof(deep), 8), -1);
    static const uint8_t reserved[] = { 0xc1 };
    assert_int_equal(rrpci_mp_check(reserved, sizeof(reserved), 8), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_ticket_is_accepted_once_and_names_its_principal),
        cmocka_unit_test(test_every_flipped_byte_makes_a_ticket_refused),
        cmocka_unit_test(test_ticket_signed_with_a_key_the_verifier_does_not_accept_is_refused),
        cmocka_unit_test(test_forged_signature_under_an_accepted_key_id_is_refused),
        cmocka_unit_test(test_ticket_presented_by_another_identity_is_refused),
        cmocka_unit_test(test_ticket_without_a_presented_identity_is_refused),
        cmocka_unit_test(test_old_hmac_ticket_versions_are_refused_with_the_reason),
        cmocka_unit_test(test_expired_ticket_is_refused_past_the_skew_allowance),
        cmocka_unit_test(test_ticket_for_another_service_is_refused),
        cmocka_unit_test(test_malformed_tickets_are_refused),
        cmocka_unit_test(test_issue_and_present_check_their_arguments),
        cmocka_unit_test(test_verifier_without_keys_refuses_until_it_gets_them),
        cmocka_unit_test(test_rotation_accepts_old_and_new_keys_until_the_old_one_is_dropped),
        cmocka_unit_test(test_many_tickets_fill_a_clients_share_and_drain),
        cmocka_unit_test(test_a_full_cache_still_admits_a_client_below_its_fair_part),
        cmocka_unit_test(test_ticket_for_an_instance_is_accepted_once_by_that_instance_only),
        cmocka_unit_test(test_instance_verifier_refuses_tickets_bound_to_no_instance),
        cmocka_unit_test(test_msgpack_precheck_refuses_lying_containers),
        cmocka_unit_test_setup_teardown(test_key_files_load_and_other_key_types_are_refused,
                                        setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

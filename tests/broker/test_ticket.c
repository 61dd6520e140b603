/* SPDX-License-Identifier: MIT */
/* Connection tickets and the msgpack pre-check, without a broker. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker/mpcheck.h"

static const uint8_t secret[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
static const uint8_t other_secret[32] = { 42 };
#define NOW 1700000000000LL

static size_t make(uint8_t *buf, const uint8_t *key, const char *svc, int64_t expiry)
{
    size_t len = 0;
    assert_int_equal(rrpc_ticket_issue(key, "alice", svc, expiry, NULL, buf, RRPC_TICKET_MAX_LEN,
                                       &len),
                     0);
    return len;
}

static rrpc_ticket_verifier *verifier(void)
{
    rrpc_ticket_verifier *v = NULL;
    assert_int_equal(rrpc_ticket_verifier_create("kv-store", secret, 5000, &v), 0);
    return v;
}

static void test_valid_ticket_is_accepted_once_and_names_its_principal(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, secret, "kv-store", NOW + 30000);
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
    size_t len = make(t, secret, "kv-store", NOW + 30000);
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

static void test_ticket_signed_with_another_secret_is_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, other_secret, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "signature"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_expired_ticket_is_refused_past_the_skew_allowance(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    size_t len = make(t, secret, "kv-store", NOW - 4000); /* inside the 5 s skew */
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    len = make(t, secret, "kv-store", NOW - 6000);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "expired"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_ticket_for_another_service_is_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, secret, "kv-stor", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "for service"));
    rrpc_ticket_verifier_destroy(v);
}

static void test_malformed_tickets_are_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN + 1];
    size_t len = make(t, secret, "kv-store", NOW + 30000);
    rrpc_ticket_verifier *v = verifier();
    assert_int_equal(rrpc_ticket_verify(v, t, 0, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    assert_int_equal(rrpc_ticket_verify(v, NULL, 10, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    assert_int_equal(rrpc_ticket_verify(v, t, len - 1, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    t[len] = 0;
    assert_int_equal(rrpc_ticket_verify(v, t, len + 1, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    uint8_t zeros[100] = { 0 };
    assert_int_equal(rrpc_ticket_verify(v, zeros, sizeof(zeros), NOW, NULL, NULL, 0),
                     RRPC_E_TICKET);
    assert_int_equal(rrpc_ticket_peek(zeros, sizeof(zeros), NULL, NULL, NULL), RRPC_E_PROTO);
    rrpc_ticket_verifier_destroy(v);
}

static void test_issue_checks_its_arguments(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len;
    char long_name[300];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = 0;
    assert_int_equal(rrpc_ticket_issue(secret, "", "s", NOW, NULL, t, sizeof(t), &len), -EINVAL);
    assert_int_equal(rrpc_ticket_issue(secret, "a", long_name, NOW, NULL, t, sizeof(t), &len),
                     -EINVAL);
    assert_int_equal(rrpc_ticket_issue(secret, "a", "s", NOW, NULL, t, 10, &len), -ENOSPC);
    char p[256], s[256];
    int64_t exp;
    assert_int_equal(rrpc_ticket_issue(secret, "bob", "svc", NOW, NULL, t, sizeof(t), &len), 0);
    assert_int_equal(rrpc_ticket_peek(t, len, p, s, &exp), 0);
    assert_string_equal(p, "bob");
    assert_string_equal(s, "svc");
    assert_int_equal(exp, NOW);
}

static void test_verifier_without_secret_refuses_until_it_gets_one(void **state)
{
    rrpc_ticket_verifier *v = NULL;
    assert_int_equal(rrpc_ticket_verifier_create("kv-store", NULL, 0, &v), 0);
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, secret, "kv-store", NOW + 30000);
    char why[256];
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "not registered"));
    rrpc_ticket_verifier_set_secret(v, secret);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, why, sizeof(why)), 0);
    rrpc_ticket_verifier_destroy(v);
}

static void test_previous_secret_stays_valid_after_a_new_one(void **state)
{
    rrpc_ticket_verifier *v = verifier();
    uint8_t a[RRPC_TICKET_MAX_LEN], b[RRPC_TICKET_MAX_LEN], c[RRPC_TICKET_MAX_LEN];
    static const uint8_t third[32] = { 99 };
    size_t la = make(a, secret, "kv-store", NOW + 30000);
    size_t lb = make(b, other_secret, "kv-store", NOW + 30000);
    size_t lc = make(c, secret, "kv-store", NOW + 30000);
    rrpc_ticket_verifier_set_secret(v, other_secret);
    assert_int_equal(rrpc_ticket_verify(v, a, la, NOW, NULL, NULL, 0), 0);
    assert_int_equal(rrpc_ticket_verify(v, b, lb, NOW, NULL, NULL, 0), 0);
    rrpc_ticket_verifier_set_secret(v, third); /* the first secret is gone now */
    assert_int_equal(rrpc_ticket_verify(v, c, lc, NOW, NULL, NULL, 0), RRPC_E_TICKET);
    rrpc_ticket_verifier_destroy(v);
}

static void test_many_tickets_fill_and_drain_the_replay_cache(void **state)
{
    rrpc_ticket_verifier *v = verifier();
    uint8_t t[RRPC_TICKET_MAX_LEN];
    for (int i = 0; i < 3000; i++) {
        size_t len = make(t, secret, "kv-store", NOW + 1000);
        assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, NULL, 0), 0);
    }
    /* Later, the old nonces have expired and are pruned; new tickets pass. */
    size_t len = make(t, secret, "kv-store", NOW + 100000);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW + 60000, NULL, NULL, 0), 0);
    rrpc_ticket_verifier_destroy(v);
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

static const uint8_t inst_a[RRPC_TICKET_INSTANCE_LEN] = { 0xa1, 0xa2, 0xa3 };
static const uint8_t inst_b[RRPC_TICKET_INSTANCE_LEN] = { 0xb1, 0xb2, 0xb3 };

static size_t make_for(uint8_t *buf, const uint8_t *instance)
{
    size_t len = 0;
    assert_int_equal(rrpc_ticket_issue_instance(secret, "alice", "kv-store", instance, NOW + 30000,
                                                NULL, buf, RRPC_TICKET_MAX_LEN, &len),
                     0);
    return len;
}

static rrpc_ticket_verifier *verifier_of(const uint8_t *instance)
{
    rrpc_ticket_verifier *v = verifier();
    assert_int_equal(rrpc_ticket_verifier_set_instance(v, instance), 0);
    return v;
}

static void test_ticket_for_an_instance_is_accepted_once_by_that_instance_only(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make_for(t, inst_a);
    uint8_t got[RRPC_TICKET_INSTANCE_LEN];
    assert_int_equal(rrpc_ticket_peek_instance(t, len, got), 0);
    assert_memory_equal(got, inst_a, sizeof(got));
    char principal[256], service[256], why[256];
    assert_int_equal(rrpc_ticket_peek(t, len, principal, service, NULL), 0);
    assert_string_equal(principal, "alice");
    assert_string_equal(service, "kv-store");

    /* Another instance of the service (same secret, its own replay cache). */
    rrpc_ticket_verifier *b = verifier_of(inst_b);
    assert_int_equal(rrpc_ticket_verify(b, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "another instance"));
    /* A verifier bound to no instance (one that knows nothing of them). */
    rrpc_ticket_verifier *none = verifier();
    assert_int_equal(rrpc_ticket_verify(none, t, len, NOW, NULL, why, sizeof(why)),
                     RRPC_E_TICKET);
    assert_non_null(strstr(why, "bound to a server instance"));
    /* Its own instance: once. */
    rrpc_ticket_verifier *a = verifier_of(inst_a);
    assert_int_equal(rrpc_ticket_verify(a, t, len, NOW, principal, why, sizeof(why)), 0);
    assert_string_equal(principal, "alice");
    assert_int_equal(rrpc_ticket_verify(a, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "replayed"));
    rrpc_ticket_verifier_destroy(a);
    rrpc_ticket_verifier_destroy(b);
    rrpc_ticket_verifier_destroy(none);
}

static void test_instance_verifier_refuses_tickets_bound_to_no_instance(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make(t, secret, "kv-store", NOW + 30000);
    assert_int_equal(rrpc_ticket_peek_instance(t, len, NULL), -ENOENT);
    rrpc_ticket_verifier *a = verifier_of(inst_a);
    char why[256];
    assert_int_equal(rrpc_ticket_verify(a, t, len, NOW, NULL, why, sizeof(why)), RRPC_E_TICKET);
    assert_non_null(strstr(why, "bound to no server instance"));
    rrpc_ticket_verifier_destroy(a);
}

static void test_every_flipped_byte_of_an_instance_ticket_makes_it_refused(void **state)
{
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len = make_for(t, inst_a);
    rrpc_ticket_verifier *v = verifier_of(inst_a);
    for (size_t i = 0; i < len; i++) {
        uint8_t f[RRPC_TICKET_MAX_LEN];
        memcpy(f, t, len);
        f[i] ^= 0x01;
        char why[256];
        assert_int_equal(rrpc_ticket_verify(v, f, len, NOW, NULL, why, sizeof(why)),
                         RRPC_E_TICKET);
        assert_true(why[0] != 0);
    }
    /* The version byte says 1 but the instance is there: malformed. */
    uint8_t f[RRPC_TICKET_MAX_LEN];
    memcpy(f, t, len);
    f[4] = 1;
    assert_int_equal(rrpc_ticket_peek(f, len, NULL, NULL, NULL), RRPC_E_PROTO);
    assert_int_equal(rrpc_ticket_verify(v, t, len, NOW, NULL, NULL, 0), 0);
    rrpc_ticket_verifier_destroy(v);
}

static void test_instance_ids_must_not_be_all_zero(void **state)
{
    static const uint8_t zero[RRPC_TICKET_INSTANCE_LEN];
    uint8_t t[RRPC_TICKET_MAX_LEN];
    size_t len;
    assert_int_equal(rrpc_ticket_issue_instance(secret, "alice", "kv-store", zero, NOW, NULL, t,
                                                sizeof(t), &len),
                     -EINVAL);
    assert_int_equal(rrpc_ticket_issue_instance(secret, "alice", "kv-store", NULL, NOW, NULL, t,
                                                sizeof(t), &len),
                     -EINVAL);
    rrpc_ticket_verifier *v = verifier();
    assert_int_equal(rrpc_ticket_verifier_set_instance(v, zero), -EINVAL);
    rrpc_ticket_verifier_destroy(v);
    /* The longest ticket fits RRPC_TICKET_MAX_LEN. */
    char name[256];
    memset(name, 'n', 255);
    name[255] = 0;
    assert_int_equal(rrpc_ticket_issue_instance(secret, name, name, inst_a, NOW, NULL, t,
                                                sizeof(t), &len),
                     0);
    assert_int_equal(len, RRPC_TICKET_MAX_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_ticket_is_accepted_once_and_names_its_principal),
        cmocka_unit_test(test_every_flipped_byte_makes_a_ticket_refused),
        cmocka_unit_test(test_ticket_signed_with_another_secret_is_refused),
        cmocka_unit_test(test_expired_ticket_is_refused_past_the_skew_allowance),
        cmocka_unit_test(test_ticket_for_another_service_is_refused),
        cmocka_unit_test(test_malformed_tickets_are_refused),
        cmocka_unit_test(test_issue_checks_its_arguments),
        cmocka_unit_test(test_verifier_without_secret_refuses_until_it_gets_one),
        cmocka_unit_test(test_previous_secret_stays_valid_after_a_new_one),
        cmocka_unit_test(test_many_tickets_fill_and_drain_the_replay_cache),
        cmocka_unit_test(test_msgpack_precheck_refuses_lying_containers),
        cmocka_unit_test(test_ticket_for_an_instance_is_accepted_once_by_that_instance_only),
        cmocka_unit_test(test_instance_verifier_refuses_tickets_bound_to_no_instance),
        cmocka_unit_test(test_every_flipped_byte_of_an_instance_ticket_makes_it_refused),
        cmocka_unit_test(test_instance_ids_must_not_be_all_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

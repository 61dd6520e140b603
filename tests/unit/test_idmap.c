/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/util/idmap.c: 64-bit id -> intrusive node. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "util/idmap.h"

struct item {
    int payload;
    struct rrpci_idnode node;
    int tail;
};

static void test_empty_map_finds_nothing(void **state)
{
    (void)state;
    struct rrpci_idmap m = {0};
    assert_null(rrpci_idmap_get(&m, 0));
    assert_null(rrpci_idmap_get(&m, 42));
    assert_null(rrpci_idmap_del(&m, 42));
    assert_null(rrpci_idmap_pop(&m));
    rrpci_idmap_fini(&m);
    assert_null(m.buckets);
}

static void test_put_then_get_returns_the_same_node(void **state)
{
    (void)state;
    struct rrpci_idmap m = {0};
    struct item a = {.payload = 1}, b = {.payload = 2};
    assert_int_equal(rrpci_idmap_put(&m, 7, &a.node), 0);
    assert_int_equal(rrpci_idmap_put(&m, 8, &b.node), 0);
    assert_int_equal(m.count, 2);
    assert_ptr_equal(rrpci_idmap_get(&m, 7), &a.node);
    assert_ptr_equal(rrpci_idmap_get(&m, 8), &b.node);
    assert_int_equal(a.node.key, 7);
    struct item *it = rrpci_container_of(rrpci_idmap_get(&m, 8), struct item, node);
    assert_ptr_equal(it, &b);
    assert_int_equal(it->payload, 2);
    assert_null(rrpci_idmap_get(&m, 9));
    rrpci_idmap_fini(&m);
}

static void test_duplicate_key_is_refused_with_eexist(void **state)
{
    (void)state;
    struct rrpci_idmap m = {0};
    struct item a, b;
    assert_int_equal(rrpci_idmap_put(&m, 5, &a.node), 0);
    assert_int_equal(rrpci_idmap_put(&m, 5, &b.node), -EEXIST);
    assert_int_equal(m.count, 1);
    assert_ptr_equal(rrpci_idmap_get(&m, 5), &a.node);
    rrpci_idmap_fini(&m);
}

static void test_extreme_keys_are_distinct(void **state)
{
    (void)state;
    struct rrpci_idmap m = {0};
    static const uint64_t keys[] = {0, 1, UINT64_MAX, UINT64_MAX - 1, 1ull << 63, 1ull << 32,
                                    0xFFFFFFFFull};
    struct item it[sizeof(keys) / sizeof(keys[0])];
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_int_equal(rrpci_idmap_put(&m, keys[i], &it[i].node), 0);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_ptr_equal(rrpci_idmap_get(&m, keys[i]), &it[i].node);
    rrpci_idmap_fini(&m);
}

static void test_del_removes_only_that_key(void **state)
{
    (void)state;
    struct rrpci_idmap m = {0};
    struct item a, b, c;
    assert_int_equal(rrpci_idmap_put(&m, 1, &a.node), 0);
    assert_int_equal(rrpci_idmap_put(&m, 2, &b.node), 0);
    assert_int_equal(rrpci_idmap_put(&m, 3, &c.node), 0);
    assert_ptr_equal(rrpci_idmap_del(&m, 2), &b.node);
    assert_int_equal(m.count, 2);
    assert_null(rrpci_idmap_get(&m, 2));
    assert_null(rrpci_idmap_del(&m, 2));
    assert_int_equal(m.count, 2);
    assert_ptr_equal(rrpci_idmap_get(&m, 1), &a.node);
    assert_ptr_equal(rrpci_idmap_get(&m, 3), &c.node);
    /* The key may be reused after removal. */
    assert_int_equal(rrpci_idmap_put(&m, 2, &b.node), 0);
    assert_ptr_equal(rrpci_idmap_get(&m, 2), &b.node);
    rrpci_idmap_fini(&m);
}

static void test_many_sequential_ids_survive_growth(void **state)
{
    (void)state;
    enum { N = 10000 };
    struct rrpci_idmap m = {0};
    struct item *items = calloc(N, sizeof(*items));
    assert_non_null(items);
    for (int i = 0; i < N; i++) {
        items[i].payload = i;
        assert_int_equal(rrpci_idmap_put(&m, (uint64_t)i + 1, &items[i].node), 0);
    }
    assert_int_equal(m.count, N);
    assert_true(m.nbuckets >= N);
    assert_int_equal(m.nbuckets & (m.nbuckets - 1), 0); /* a power of two */
    for (int i = 0; i < N; i++) {
        struct rrpci_idnode *n = rrpci_idmap_get(&m, (uint64_t)i + 1);
        assert_non_null(n);
        assert_int_equal(rrpci_container_of(n, struct item, node)->payload, i);
    }
    assert_null(rrpci_idmap_get(&m, 0));
    assert_null(rrpci_idmap_get(&m, N + 1));
    rrpci_idmap_fini(&m);
    free(items);
}

static void test_keys_differing_only_in_high_bits_are_kept_apart(void **state)
{
    (void)state;
    /* Region keys are random 64-bit values; ids that differ only above bit
     * 32 must not collide into one chain that loses entries. */
    enum { N = 2000 };
    struct rrpci_idmap m = {0};
    struct item *items = calloc(N, sizeof(*items));
    assert_non_null(items);
    for (int i = 0; i < N; i++)
        assert_int_equal(rrpci_idmap_put(&m, (uint64_t)i << 40, &items[i].node), 0);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(rrpci_idmap_get(&m, (uint64_t)i << 40), &items[i].node);
    assert_int_equal(m.count, N);
    rrpci_idmap_fini(&m);
    free(items);
}

static uint64_t rnd64(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_random_put_and_del_match_a_reference_model(void **state)
{
    (void)state;
    enum { N = 512 };
    struct rrpci_idmap m = {0};
    struct item items[N];
    uint64_t keys[N];
    int present[N] = {0};
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N; i++)
        keys[i] = rnd64(&seed);
    size_t count = 0;
    for (int step = 0; step < 50000; step++) {
        int i = (int)(rnd64(&seed) % N);
        if (present[i]) {
            assert_ptr_equal(rrpci_idmap_del(&m, keys[i]), &items[i].node);
            present[i] = 0;
            count--;
        } else {
            assert_int_equal(rrpci_idmap_put(&m, keys[i], &items[i].node), 0);
            present[i] = 1;
            count++;
        }
        assert_int_equal(m.count, count);
        int j = (int)(rnd64(&seed) % N);
        if (present[j])
            assert_ptr_equal(rrpci_idmap_get(&m, keys[j]), &items[j].node);
        else
            assert_null(rrpci_idmap_get(&m, keys[j]));
    }
    rrpci_idmap_fini(&m);
}

static void test_pop_drains_every_node_exactly_once(void **state)
{
    (void)state;
    enum { N = 300 };
    struct rrpci_idmap m = {0};
    struct item items[N];
    for (int i = 0; i < N; i++) {
        items[i].payload = 0;
        assert_int_equal(rrpci_idmap_put(&m, (uint64_t)i * 977 + 3, &items[i].node), 0);
    }
    struct rrpci_idnode *n;
    int popped = 0;
    while ((n = rrpci_idmap_pop(&m))) {
        struct item *it = rrpci_container_of(n, struct item, node);
        assert_int_equal(it->payload, 0);
        it->payload = 1;
        popped++;
        assert_int_equal(m.count, (size_t)(N - popped));
        assert_null(rrpci_idmap_get(&m, n->key));
    }
    assert_int_equal(popped, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(items[i].payload, 1);
    rrpci_idmap_fini(&m);
}

static void test_fini_resets_the_map_for_reuse(void **state)
{
    (void)state;
    struct rrpci_idmap m = {0};
    struct item a;
    assert_int_equal(rrpci_idmap_put(&m, 1, &a.node), 0);
    rrpci_idmap_fini(&m);
    assert_null(m.buckets);
    assert_int_equal(m.nbuckets, 0);
    assert_int_equal(m.count, 0);
    assert_null(rrpci_idmap_get(&m, 1));
    assert_int_equal(rrpci_idmap_put(&m, 1, &a.node), 0);
    assert_ptr_equal(rrpci_idmap_get(&m, 1), &a.node);
    rrpci_idmap_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_map_finds_nothing),
        cmocka_unit_test(test_put_then_get_returns_the_same_node),
        cmocka_unit_test(test_duplicate_key_is_refused_with_eexist),
        cmocka_unit_test(test_extreme_keys_are_distinct),
        cmocka_unit_test(test_del_removes_only_that_key),
        cmocka_unit_test(test_many_sequential_ids_survive_growth),
        cmocka_unit_test(test_keys_differing_only_in_high_bits_are_kept_apart),
        cmocka_unit_test(test_random_put_and_del_match_a_reference_model),
        cmocka_unit_test(test_pop_drains_every_node_exactly_once),
        cmocka_unit_test(test_fini_resets_the_map_for_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

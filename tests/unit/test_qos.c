/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/qos.c: the receive-side QoS policy. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/qos.h"

/* The default weights (include/roce_rpc/context.h). */
enum { CONTROL, LOW_LATENCY, BULK, BACKGROUND };
static const uint32_t default_weights[RRPCI_QOS_MAX] = {4, 8, 2, 1};

#define KIB 1024u
#define MIB (1024u * 1024u)

/* tcp's defaults: time turns, adaptive pieces. */
static const struct rrpci_qos_knobs tcp_knobs = {
    .turn_ns = 20000, .piece_alone = MIB, .piece_shared = 64 * KIB, .busy_ns = 100000000};
/* inproc's: byte turns, no pieces. */
static const struct rrpci_qos_knobs inproc_knobs = {.turn_bytes = 64 * KIB};

static void test_heavier_classes_are_served_first(void **state)
{
    (void)state;
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &tcp_knobs);
    assert_int_equal(rrpci_qos_rank(&q, LOW_LATENCY), 0);
    assert_int_equal(rrpci_qos_rank(&q, CONTROL), 1);
    assert_int_equal(rrpci_qos_rank(&q, BULK), 2);
    assert_int_equal(rrpci_qos_rank(&q, BACKGROUND), 3);
    int order[4];
    rrpci_qos_order(&q, order);
    assert_int_equal(order[0], LOW_LATENCY);
    assert_int_equal(order[1], CONTROL);
    assert_int_equal(order[2], BULK);
    assert_int_equal(order[3], BACKGROUND);
}

static void test_equal_weights_share_a_rank_and_are_served_by_index(void **state)
{
    (void)state;
    const uint32_t w[4] = {3, 5, 3, 0}; /* 0 counts as 1 */
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, w, &tcp_knobs);
    assert_int_equal(rrpci_qos_rank(&q, 1), 0);
    assert_int_equal(rrpci_qos_rank(&q, 0), 1);
    assert_int_equal(rrpci_qos_rank(&q, 2), 1);
    assert_int_equal(rrpci_qos_rank(&q, 3), 3);
    int order[4];
    rrpci_qos_order(&q, order);
    const int want[4] = {1, 0, 2, 3};
    assert_memory_equal(order, want, sizeof(want));
}

static void test_a_class_out_of_range_is_served_last(void **state)
{
    (void)state;
    struct rrpci_qos q;
    rrpci_qos_init(&q, 2, default_weights, &tcp_knobs);
    assert_int_equal(rrpci_qos_rank(&q, 2), 2);
    assert_int_equal(rrpci_qos_rank(&q, -1), 2);
}

static void test_a_timed_turn_lasts_weight_times_the_unit(void **state)
{
    (void)state;
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &tcp_knobs);
    struct rrpci_qos_turn t;
    rrpci_qos_turn_begin(&q, BULK, 1000000, &t); /* weight 2: 40 us */
    assert_true(rrpci_qos_turn_charge(&t, MIB, 1000000 + 39999));
    assert_true(rrpci_qos_turn_charge(&t, MIB, 1000000 + 39999)); /* bytes do not count */
    assert_false(rrpci_qos_turn_charge(&t, 1, 1000000 + 40000));
    rrpci_qos_turn_begin(&q, LOW_LATENCY, 0, &t); /* weight 8: 160 us */
    assert_true(rrpci_qos_turn_charge(&t, 1, 159999));
    assert_false(rrpci_qos_turn_charge(&t, 1, 160000));
}

static void test_a_counted_turn_moves_weight_times_the_unit_in_bytes(void **state)
{
    (void)state;
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &inproc_knobs);
    struct rrpci_qos_turn t;
    rrpci_qos_turn_begin(&q, BULK, 0, &t); /* weight 2: 128 KiB */
    assert_true(rrpci_qos_turn_charge(&t, 64 * KIB, 1u << 30)); /* time does not count */
    assert_true(rrpci_qos_turn_charge(&t, 64 * KIB - 1, 1u << 31));
    assert_false(rrpci_qos_turn_charge(&t, 1, 0));
    rrpci_qos_turn_begin(&q, BACKGROUND, 0, &t); /* a piece larger than the turn ends it */
    assert_false(rrpci_qos_turn_charge(&t, MIB, 0));
}

static void test_a_turn_ends_at_whichever_bound_comes_first(void **state)
{
    (void)state;
    struct rrpci_qos_knobs k = {.turn_ns = 1000, .turn_bytes = 100};
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &k);
    struct rrpci_qos_turn t;
    rrpci_qos_turn_begin(&q, BACKGROUND, 0, &t);
    assert_false(rrpci_qos_turn_charge(&t, 100, 1)); /* bytes first */
    rrpci_qos_turn_begin(&q, BACKGROUND, 0, &t);
    assert_false(rrpci_qos_turn_charge(&t, 1, 1000)); /* time first */
}

static void test_a_turn_without_bounds_never_ends(void **state)
{
    (void)state;
    const struct rrpci_qos_knobs none = {0};
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &none);
    struct rrpci_qos_turn t;
    rrpci_qos_turn_begin(&q, BULK, 0, &t);
    for (int i = 0; i < 1000; i++)
        assert_true(rrpci_qos_turn_charge(&t, MIB, (uint64_t)i << 40));
    assert_int_equal(rrpci_qos_piece(&q, true), SIZE_MAX);
    assert_int_equal(rrpci_qos_piece(&q, false), SIZE_MAX);
}

static void test_pieces_are_small_while_another_class_is_busy(void **state)
{
    (void)state;
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &tcp_knobs);
    assert_int_equal(rrpci_qos_piece(&q, true), 64 * KIB);
    assert_int_equal(rrpci_qos_piece(&q, false), MIB);
}

static void test_a_class_is_busy_for_busy_ns_after_its_last_piece(void **state)
{
    (void)state;
    const struct rrpci_qos_knobs k = {.busy_ns = 100};
    struct rrpci_qos q;
    rrpci_qos_init(&q, 4, default_weights, &k);
    assert_false(rrpci_qos_busy(&q, 0, 50)); /* never moved a piece */
    assert_true(rrpci_qos_busy(&q, 1000, 1000));
    assert_true(rrpci_qos_busy(&q, 1000, 1099));
    assert_false(rrpci_qos_busy(&q, 1000, 1100));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heavier_classes_are_served_first),
        cmocka_unit_test(test_equal_weights_share_a_rank_and_are_served_by_index),
        cmocka_unit_test(test_a_class_out_of_range_is_served_last),
        cmocka_unit_test(test_a_timed_turn_lasts_weight_times_the_unit),
        cmocka_unit_test(test_a_counted_turn_moves_weight_times_the_unit_in_bytes),
        cmocka_unit_test(test_a_turn_ends_at_whichever_bound_comes_first),
        cmocka_unit_test(test_a_turn_without_bounds_never_ends),
        cmocka_unit_test(test_pieces_are_small_while_another_class_is_busy),
        cmocka_unit_test(test_a_class_is_busy_for_busy_ns_after_its_last_piece),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

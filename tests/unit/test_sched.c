/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/sched.c: deficit round robin across classes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/sched.h"

/* The default weights (include/roce_rpc/context.h). */
enum { CONTROL, LOW_LATENCY, BULK, BACKGROUND };
static const uint32_t default_weights[RRPCI_SCHED_MAX] = {4, 8, 2, 1};

#define MIB (1u << 20)

/* Runs @rounds picks with fixed heads; counts picks per class. */
static void run(struct rrpci_sched *s, const size_t *head, int picks, long counts[4])
{
    memset(counts, 0, 4 * sizeof(counts[0]));
    for (int i = 0; i < picks; i++) {
        int c = rrpci_sched_next(s, head);
        assert_in_range(c, 0, RRPCI_SCHED_MAX - 1);
        assert_true(head[c] != 0);
        counts[c]++;
    }
}

static void test_no_eligible_class_returns_minus_one(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 0, 0, 0};
    assert_int_equal(rrpci_sched_next(&s, head), -1);
    assert_int_equal(rrpci_sched_next(&s, head), -1);
}

static void test_zero_classes_never_pick(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 0, default_weights);
    size_t head[4] = {100, 100, 100, 100};
    assert_int_equal(rrpci_sched_next(&s, head), -1);
}

static void test_single_eligible_class_is_picked_every_time(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 0, MIB, 0};
    for (int i = 0; i < 1000; i++)
        assert_int_equal(rrpci_sched_next(&s, head), BULK);
}

static void test_classes_beyond_n_are_never_picked(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 2, default_weights);
    size_t head[4] = {0, 0, 64, 64};
    assert_int_equal(rrpci_sched_next(&s, head), -1);
    head[1] = 64;
    for (int i = 0; i < 100; i++)
        assert_int_equal(rrpci_sched_next(&s, head), 1);
}

static void test_n_above_max_is_clamped(void **state)
{
    (void)state;
    uint32_t w[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    struct rrpci_sched s;
    rrpci_sched_init(&s, 8, w);
    assert_int_equal(s.n, RRPCI_SCHED_MAX);
}

static void test_weights_8_vs_2_give_low_latency_exactly_80_percent_with_quantum_frames(
    void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, RRPCI_SCHED_QUANTUM, RRPCI_SCHED_QUANTUM, 0};
    long n[4];
    run(&s, head, 10000, n);
    assert_int_equal(n[LOW_LATENCY], 8000);
    assert_int_equal(n[BULK], 2000);
}

static void test_weights_8_vs_2_give_low_latency_about_80_percent_with_odd_frames(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 1000, 1000, 0};
    long n[4];
    run(&s, head, 100000, n);
    assert_in_range(n[LOW_LATENCY], 79500, 80500);
    assert_int_equal(n[LOW_LATENCY] + n[BULK], 100000);
}

static void test_every_short_window_respects_the_weights(void **state)
{
    (void)state;
    /* Not only on average: each round of 10 picks is 8 + 2. */
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 512, 512, 0};
    for (int w = 0; w < 200; w++) {
        long n[4];
        run(&s, head, 80, n); /* one round: 8*4096/512 = 64 + 2*4096/512 = 16 */
        assert_int_equal(n[LOW_LATENCY], 64);
        assert_int_equal(n[BULK], 16);
    }
}

static void test_four_classes_share_bytes_by_weight(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {300, 700, 1500, 9000};
    double bytes[4] = {0}, total = 0;
    for (int i = 0; i < 300000; i++) {
        int c = rrpci_sched_next(&s, head);
        assert_in_range(c, 0, 3);
        bytes[c] += (double)head[c];
        total += (double)head[c];
    }
    for (int c = 0; c < 4; c++) {
        double share = bytes[c] / total, want = default_weights[c] / 15.0;
        assert_true(share > want - 0.01 && share < want + 0.01);
    }
}

static void test_low_latency_frame_is_picked_within_one_round_behind_bulk(void **state)
{
    (void)state;
    /* Both always eligible: between two low-latency picks there is at most
     * one 1 MiB bulk frame (bulk earns 8 KiB a round). */
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 64, MIB, 0};
    int bulk_run = 0, bulk_total = 0;
    for (int i = 0; i < 1000000; i++) {
        int c = rrpci_sched_next(&s, head);
        if (c == BULK) {
            bulk_run++;
            bulk_total++;
            assert_true(bulk_run <= 1);
        } else {
            assert_int_equal(c, LOW_LATENCY);
            bulk_run = 0;
        }
    }
    assert_true(bulk_total > 0); /* and bulk is not starved */
}

static void test_low_latency_arriving_during_bulk_goes_next(void **state)
{
    (void)state;
    /* Bulk sends alone; a low-latency frame arrives every k picks: it goes out
     * at once or after at most one bulk frame. */
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 0, MIB, 0};
    int bulk_picks = 0;
    for (int i = 0; i < 20000; i++) {
        if (i % 7 == 0)
            head[LOW_LATENCY] = 64;
        int waited = 0;
        int c;
        while ((c = rrpci_sched_next(&s, head)) == BULK && head[LOW_LATENCY]) {
            waited++;
            bulk_picks++;
        }
        if (c == LOW_LATENCY) {
            assert_true(waited <= 1);
            head[LOW_LATENCY] = 0;
        } else {
            assert_int_equal(c, BULK);
            bulk_picks++;
        }
    }
    assert_true(bulk_picks > 10000);
}

static void test_bulk_gets_its_byte_share_against_small_low_latency_frames(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    size_t head[4] = {0, 64, MIB, 0};
    double ll = 0, bulk = 0;
    /* One bulk frame every 128 rounds of 512 low-latency frames: ~65600 picks each. */
    for (int i = 0; i < 20 * 65600; i++) {
        int c = rrpci_sched_next(&s, head);
        if (c == BULK)
            bulk += MIB;
        else
            ll += 64;
    }
    double share = bulk / (bulk + ll);
    assert_true(share > 0.18 && share < 0.22);
}

static void test_large_frames_of_equal_weight_alternate(void **state)
{
    (void)state;
    uint32_t w[2] = {1, 1};
    struct rrpci_sched s;
    rrpci_sched_init(&s, 2, w);
    size_t head[2] = {MIB, MIB};
    int prev = rrpci_sched_next(&s, head);
    for (int i = 0; i < 100; i++) {
        int c = rrpci_sched_next(&s, head);
        assert_int_equal(c, 1 - prev);
        prev = c;
    }
}

static void test_frame_one_byte_larger_than_the_deficit_waits_for_the_next_round(void **state)
{
    (void)state;
    uint32_t w[2] = {1, 1};
    struct rrpci_sched s;
    rrpci_sched_init(&s, 2, w);
    size_t head[2] = {RRPCI_SCHED_QUANTUM + 1, RRPCI_SCHED_QUANTUM};
    /* Round 1: class 0 earns one quantum, one byte short; class 1 sends. */
    assert_int_equal(rrpci_sched_next(&s, head), 1);
    /* Round 2: class 0 has two quanta and sends, keeping QUANTUM - 1. */
    assert_int_equal(rrpci_sched_next(&s, head), 0);
    assert_int_equal(s.deficit[0], RRPCI_SCHED_QUANTUM - 1);
    assert_int_equal(rrpci_sched_next(&s, head), 1);
}

static void test_weight_zero_is_treated_as_one(void **state)
{
    (void)state;
    uint32_t w[2] = {0, 1};
    struct rrpci_sched s;
    rrpci_sched_init(&s, 2, w);
    assert_int_equal(s.weight[0], 1);
    size_t head[4] = {RRPCI_SCHED_QUANTUM, RRPCI_SCHED_QUANTUM, 0, 0};
    long n[4];
    run(&s, head, 1000, n);
    assert_int_equal(n[0], 500);
    assert_int_equal(n[1], 500);
}

static void test_idle_class_does_not_bank_credit(void **state)
{
    (void)state;
    uint32_t w[2] = {1, 1};
    struct rrpci_sched s;
    rrpci_sched_init(&s, 2, w);
    /* Class 0 waits on a 4-quantum frame while class 1 sends, accumulating deficit. */
    size_t head[2] = {4 * RRPCI_SCHED_QUANTUM, RRPCI_SCHED_QUANTUM};
    for (int i = 0; i < 3; i++)
        assert_int_equal(rrpci_sched_next(&s, head), 1);
    /* Class 0 goes idle (say its frame was dropped), then has small frames. */
    head[0] = 0;
    assert_int_equal(rrpci_sched_next(&s, head), 1);
    head[0] = RRPCI_SCHED_QUANTUM;
    long n[4];
    run(&s, head, 4, n);
    /* Fair from now on: no burst of banked bytes for class 0. */
    assert_int_equal(n[0], 2);
    assert_int_equal(n[1], 2);
}

static uint32_t rnd(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static void test_pick_is_always_an_eligible_class_under_random_load(void **state)
{
    (void)state;
    struct rrpci_sched s;
    rrpci_sched_init(&s, 4, default_weights);
    uint32_t seed = 0xC0FFEE;
    for (int i = 0; i < 200000; i++) {
        size_t head[4];
        int any = 0;
        for (int c = 0; c < 4; c++) {
            uint32_t r = rnd(&seed);
            head[c] = r % 3 == 0 ? 0 : 1 + (r >> 8) % (256 * 1024);
            any |= head[c] != 0;
        }
        int c = rrpci_sched_next(&s, head);
        if (!any) {
            assert_int_equal(c, -1);
        } else {
            assert_in_range(c, 0, 3);
            assert_true(head[c] != 0);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_eligible_class_returns_minus_one),
        cmocka_unit_test(test_zero_classes_never_pick),
        cmocka_unit_test(test_single_eligible_class_is_picked_every_time),
        cmocka_unit_test(test_classes_beyond_n_are_never_picked),
        cmocka_unit_test(test_n_above_max_is_clamped),
        cmocka_unit_test(test_weights_8_vs_2_give_low_latency_exactly_80_percent_with_quantum_frames),
        cmocka_unit_test(test_weights_8_vs_2_give_low_latency_about_80_percent_with_odd_frames),
        cmocka_unit_test(test_every_short_window_respects_the_weights),
        cmocka_unit_test(test_four_classes_share_bytes_by_weight),
        cmocka_unit_test(test_low_latency_frame_is_picked_within_one_round_behind_bulk),
        cmocka_unit_test(test_low_latency_arriving_during_bulk_goes_next),
        cmocka_unit_test(test_bulk_gets_its_byte_share_against_small_low_latency_frames),
        cmocka_unit_test(test_large_frames_of_equal_weight_alternate),
        cmocka_unit_test(test_frame_one_byte_larger_than_the_deficit_waits_for_the_next_round),
        cmocka_unit_test(test_weight_zero_is_treated_as_one),
        cmocka_unit_test(test_idle_class_does_not_bank_credit),
        cmocka_unit_test(test_pick_is_always_an_eligible_class_under_random_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

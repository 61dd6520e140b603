/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/credit.c: per-class credit accounting. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <roce_rpc/error.h>

#include "core/credit.h"

static void test_init_makes_the_whole_grant_available(void **state)
{
    (void)state;
    struct rrpci_credit c = {.rx_inflight = 99, .rx_owed = 99, .tx_avail = 99};
    rrpci_credit_init(&c, 16, 64);
    assert_int_equal(c.rx_grant, 16);
    assert_int_equal(c.tx_grant, 64);
    assert_int_equal(c.tx_avail, 64);
    assert_int_equal(c.rx_inflight, 0);
    assert_int_equal(c.rx_owed, 0);
}

/* ---- transmit ------------------------------------------------------------ */

static void test_credits_block_sender_when_exhausted(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 3);
    assert_true(rrpci_credit_take(&c));
    assert_true(rrpci_credit_take(&c));
    assert_true(rrpci_credit_take(&c));
    assert_int_equal(c.tx_avail, 0);
    assert_false(rrpci_credit_take(&c));
    assert_false(rrpci_credit_take(&c));
    assert_int_equal(c.tx_avail, 0); /* a refused take does not wrap */
}

static void test_zero_grant_blocks_sender_from_the_start(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 0);
    assert_false(rrpci_credit_take(&c));
    assert_int_equal(c.tx_avail, 0);
}

static void test_returned_credits_unblock_sender(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 3);
    for (int i = 0; i < 3; i++)
        assert_true(rrpci_credit_take(&c));
    assert_int_equal(rrpci_credit_returned(&c, 2), 0);
    assert_int_equal(c.tx_avail, 2);
    assert_true(rrpci_credit_take(&c));
    assert_true(rrpci_credit_take(&c));
    assert_false(rrpci_credit_take(&c));
}

static void test_returning_zero_credits_is_accepted(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 3);
    assert_int_equal(rrpci_credit_returned(&c, 0), 0);
    assert_int_equal(c.tx_avail, 3);
}

static void test_returning_more_than_owed_is_a_credit_error(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 4);
    assert_true(rrpci_credit_take(&c));
    assert_int_equal(rrpci_credit_returned(&c, 2), RRPC_E_CREDIT);
    assert_int_equal(c.tx_avail, 3); /* unchanged by the refused return */
    assert_int_equal(rrpci_credit_returned(&c, 1), 0);
    assert_int_equal(c.tx_avail, 4);
    /* Nothing is outstanding now: even one more is a violation. */
    assert_int_equal(rrpci_credit_returned(&c, 1), RRPC_E_CREDIT);
    assert_int_equal(c.tx_avail, 4);
}

static void test_returning_a_huge_count_does_not_wrap(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 4);
    for (int i = 0; i < 4; i++)
        assert_true(rrpci_credit_take(&c));
    assert_int_equal(rrpci_credit_returned(&c, UINT32_MAX), RRPC_E_CREDIT);
    assert_int_equal(rrpci_credit_returned(&c, 5), RRPC_E_CREDIT);
    assert_int_equal(c.tx_avail, 0);
    assert_int_equal(rrpci_credit_returned(&c, 4), 0);
    assert_int_equal(c.tx_avail, 4);
}

/* ---- receive --------------------------------------------------------------- */

static void test_rx_within_grant_is_accepted(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 2, 8);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(c.rx_inflight, 2);
}

static void test_rx_beyond_grant_is_a_credit_error(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 2, 8);
    assert_true(rrpci_credit_rx_room(&c));
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_true(rrpci_credit_rx_room(&c));
    assert_int_equal(rrpci_credit_rx(&c), 0);
    /* The header-time check says what the full-frame check will. */
    assert_false(rrpci_credit_rx_room(&c));
    assert_int_equal(rrpci_credit_rx(&c), RRPC_E_CREDIT);
    assert_int_equal(c.rx_inflight, 2);
    /* Consumed but not yet returned: the peer still has no credit. */
    rrpci_credit_consumed(&c);
    assert_false(rrpci_credit_rx_room(&c));
    assert_int_equal(rrpci_credit_rx(&c), RRPC_E_CREDIT);
    /* Returned: room again. */
    rrpci_credit_harvest(&c);
    assert_true(rrpci_credit_rx_room(&c));
}

static void test_zero_rx_grant_rejects_the_first_frame(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 0, 8);
    assert_int_equal(rrpci_credit_rx(&c), RRPC_E_CREDIT);
    assert_int_equal(c.rx_inflight, 0);
}

static void test_harvest_returns_consumed_credits_and_lets_peer_send_again(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 2, 8);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    rrpci_credit_consumed(&c);
    rrpci_credit_consumed(&c);
    assert_int_equal(rrpci_credit_harvest(&c), 2);
    assert_int_equal(c.rx_owed, 0);
    assert_int_equal(c.rx_inflight, 0);
    assert_int_equal(rrpci_credit_harvest(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), RRPC_E_CREDIT);
}

static void test_unconsumed_frames_are_not_harvested(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 4, 8);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rrpci_credit_rx(&c), 0);
    rrpci_credit_consumed(&c);
    assert_int_equal(rrpci_credit_harvest(&c), 1);
    assert_int_equal(c.rx_inflight, 2);
    /* One slot free again plus the one never used. */
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_int_equal(rrpci_credit_rx(&c), RRPC_E_CREDIT);
}

static void test_harvest_caps_at_65535_and_keeps_the_rest(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 70000, 8);
    for (int i = 0; i < 70000; i++) {
        assert_int_equal(rrpci_credit_rx(&c), 0);
        rrpci_credit_consumed(&c);
    }
    assert_int_equal(rrpci_credit_harvest(&c), 65535);
    assert_int_equal(c.rx_owed, 70000 - 65535);
    assert_int_equal(c.rx_inflight, 70000 - 65535);
    assert_int_equal(rrpci_credit_harvest(&c), 70000 - 65535);
    assert_int_equal(rrpci_credit_harvest(&c), 0);
    assert_int_equal(c.rx_inflight, 0);
}

/* ---- when to send an explicit CREDIT frame ---------------------------------- */

static void consume(struct rrpci_credit *c, int n)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(rrpci_credit_rx(c), 0);
        rrpci_credit_consumed(c);
    }
}

static void test_should_return_once_half_the_grant_is_owed(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 16, 8);
    assert_false(rrpci_credit_should_return(&c));
    consume(&c, 7);
    assert_false(rrpci_credit_should_return(&c));
    consume(&c, 1);
    assert_true(rrpci_credit_should_return(&c));
    consume(&c, 8);
    assert_true(rrpci_credit_should_return(&c));
}

static void test_should_return_rounds_half_of_an_odd_grant_down(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 5, 8);
    consume(&c, 1);
    assert_false(rrpci_credit_should_return(&c));
    consume(&c, 1);
    assert_true(rrpci_credit_should_return(&c));
}

static void test_should_return_with_grant_of_one_after_one_frame(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 1, 8);
    assert_false(rrpci_credit_should_return(&c));
    consume(&c, 1);
    assert_true(rrpci_credit_should_return(&c));
}

static void test_should_return_is_false_after_harvest(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 16, 8);
    consume(&c, 10);
    assert_true(rrpci_credit_should_return(&c));
    assert_int_equal(rrpci_credit_harvest(&c), 10);
    assert_false(rrpci_credit_should_return(&c));
}

static void test_received_but_unconsumed_frames_do_not_trigger_a_return(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 16, 8);
    for (int i = 0; i < 16; i++)
        assert_int_equal(rrpci_credit_rx(&c), 0);
    assert_false(rrpci_credit_should_return(&c));
}

/* ---- two endpoints ----------------------------------------------------------- */

static uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void test_honest_sender_and_receiver_never_see_a_credit_error(void **state)
{
    (void)state;
    /* A sends to B; B consumes at random and returns credit piggybacked
     * (at random) or explicitly (when should_return says so). */
    struct rrpci_credit a, b;
    rrpci_credit_init(&a, 32, 10); /* A's tx_grant = B's rx_grant */
    rrpci_credit_init(&b, 10, 32);
    uint32_t seed = 12345, queued = 0, sent = 0, returned_total = 0;
    for (int step = 0; step < 100000; step++) {
        if (rnd(&seed) % 2 && rrpci_credit_take(&a)) {
            assert_int_equal(rrpci_credit_rx(&b), 0);
            queued++;
            sent++;
        }
        if (queued && rnd(&seed) % 3 == 0) {
            rrpci_credit_consumed(&b);
            queued--;
        }
        if (rrpci_credit_should_return(&b) || rnd(&seed) % 7 == 0) {
            uint16_t n = rrpci_credit_harvest(&b);
            assert_int_equal(rrpci_credit_returned(&a, n), 0);
            returned_total += n;
        }
        assert_true(a.tx_avail <= (int32_t)a.tx_grant);
        assert_true(b.rx_inflight <= b.rx_grant);
        /* Conservation: what A may send plus what B holds equals the grant. */
        assert_int_equal(a.tx_avail + b.rx_inflight, 10);
    }
    assert_true(sent > 1000); /* the exchange did not stall */
    assert_true(returned_total + b.rx_inflight == sent);
}

static void test_unsend_restores_the_state_before_take_and_harvest(void **state)
{
    (void)state;
    struct rrpci_credit c, before;
    rrpci_credit_init(&c, 8, 4);
    assert_int_equal(rrpci_credit_rx(&c), 0);
    rrpci_credit_consumed(&c);
    before = c;
    assert_true(rrpci_credit_take(&c));
    uint16_t h = rrpci_credit_harvest(&c);
    assert_int_equal(h, 1);
    rrpci_credit_unsend(&c, true, h);
    assert_memory_equal(&c, &before, sizeof(c));
    /* an exempt frame took no credit: only the harvest is undone */
    h = rrpci_credit_harvest(&c);
    rrpci_credit_unsend(&c, false, h);
    assert_memory_equal(&c, &before, sizeof(c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_makes_the_whole_grant_available),
        cmocka_unit_test(test_unsend_restores_the_state_before_take_and_harvest),
        cmocka_unit_test(test_credits_block_sender_when_exhausted),
        cmocka_unit_test(test_zero_grant_blocks_sender_from_the_start),
        cmocka_unit_test(test_returned_credits_unblock_sender),
        cmocka_unit_test(test_returning_zero_credits_is_accepted),
        cmocka_unit_test(test_returning_more_than_owed_is_a_credit_error),
        cmocka_unit_test(test_returning_a_huge_count_does_not_wrap),
        cmocka_unit_test(test_rx_within_grant_is_accepted),
        cmocka_unit_test(test_rx_beyond_grant_is_a_credit_error),
        cmocka_unit_test(test_zero_rx_grant_rejects_the_first_frame),
        cmocka_unit_test(test_harvest_returns_consumed_credits_and_lets_peer_send_again),
        cmocka_unit_test(test_unconsumed_frames_are_not_harvested),
        cmocka_unit_test(test_harvest_caps_at_65535_and_keeps_the_rest),
        cmocka_unit_test(test_should_return_once_half_the_grant_is_owed),
        cmocka_unit_test(test_should_return_rounds_half_of_an_odd_grant_down),
        cmocka_unit_test(test_should_return_with_grant_of_one_after_one_frame),
        cmocka_unit_test(test_should_return_is_false_after_harvest),
        cmocka_unit_test(test_received_but_unconsumed_frames_do_not_trigger_a_return),
        cmocka_unit_test(test_honest_sender_and_receiver_never_see_a_credit_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

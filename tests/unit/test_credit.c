/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/credit.c: per-class credit accounting. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
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

/* What the CANCEL window reads (core/rpc.c): frames sent and credit
 * returned, ever, through a take-back's debt and an undone send. */
static void test_frames_sent_and_credit_returned_are_counted_for_good(void **state)
{
    (void)state;
    struct rrpci_credit c;
    rrpci_credit_init(&c, 8, 4);
    for (int i = 0; i < 4; i++)
        assert_true(rrpci_credit_take(&c));
    assert_int_equal(rrpci_credit_granted(&c, 4), 0); /* lent 4 more */
    assert_true(rrpci_credit_take(&c));
    assert_true(rrpci_credit_take(&c));
    rrpci_credit_unsend(&c, true, 0); /* the transport did not take the last */
    assert_int_equal(c.tx_sent, 5);
    assert_int_equal(rrpci_credit_granted(&c, -4), 0); /* taken back: a debt of 1 */
    assert_int_equal(c.tx_avail, -1);
    assert_int_equal(rrpci_credit_returned(&c, 3), 0);
    assert_int_equal(rrpci_credit_returned(&c, 2), 0);
    assert_int_equal(c.tx_returned, 5);
    assert_int_equal(c.tx_sent, 5);
    assert_int_equal(rrpci_credit_returned(&c, 1), RRPC_E_CREDIT); /* nothing more in flight */
    assert_int_equal(c.tx_returned, 5);
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

/* ---- lent credit: LEND and LEND_ACK ------------------------------------- */

static void test_a_lend_raises_the_grant_and_what_may_be_sent(void **state)
{
    (void)state;
    struct rrpci_credit a, b;
    rrpci_credit_init(&a, 4, 4);
    rrpci_credit_init(&b, 4, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(rrpci_credit_take(&a));
        assert_int_equal(rrpci_credit_rx(&b), 0);
    }
    assert_false(rrpci_credit_take(&a));
    assert_false(rrpci_credit_rx_room(&b));
    rrpci_credit_lend(&b, 4);
    assert_int_equal(b.rx_announce, 4);
    assert_true(rrpci_credit_rx_room(&b));
    assert_int_equal(rrpci_credit_granted(&a, 4), 0);
    assert_int_equal(a.tx_grant, 8);
    assert_int_equal(a.tx_avail, 4);
    assert_true(rrpci_credit_take(&a));
}

static void test_a_take_back_while_frames_are_in_flight_leaves_a_debt_returns_pay(void **state)
{
    (void)state;
    struct rrpci_credit a;
    rrpci_credit_init(&a, 4, 8);
    for (int i = 0; i < 6; i++)
        assert_true(rrpci_credit_take(&a));
    assert_int_equal(rrpci_credit_granted(&a, -4), 0); /* 6 in flight, grant now 4 */
    assert_int_equal(a.tx_grant, 4);
    assert_int_equal(a.tx_avail, -2);
    assert_false(rrpci_credit_can_send(&a));
    assert_int_equal(rrpci_credit_returned(&a, 2), 0); /* pays the debt */
    assert_false(rrpci_credit_can_send(&a));
    assert_int_equal(rrpci_credit_returned(&a, 1), 0);
    assert_true(rrpci_credit_take(&a));
    /* more back than is in flight (4 now) is still refused */
    assert_int_equal(rrpci_credit_returned(&a, 5), RRPC_E_CREDIT);
}

static void test_a_lend_of_zero_or_to_a_grant_below_one_or_above_65535_is_refused(void **state)
{
    (void)state;
    struct rrpci_credit a;
    rrpci_credit_init(&a, 4, 4);
    assert_int_equal(rrpci_credit_granted(&a, 0), RRPC_E_PROTO);
    assert_int_equal(rrpci_credit_granted(&a, -4), RRPC_E_CREDIT);
    assert_int_equal(rrpci_credit_granted(&a, 65532), RRPC_E_CREDIT);
    assert_int_equal(rrpci_credit_granted(&a, INT32_MIN), RRPC_E_CREDIT);
    assert_int_equal(a.tx_grant, 4); /* nothing changed */
    assert_int_equal(a.tx_avail, 4);
    assert_int_equal(rrpci_credit_granted(&a, 65531), 0);
    assert_int_equal(a.tx_grant, 65535);
}

static void test_a_take_back_counts_until_acknowledged_and_only_one_at_a_time(void **state)
{
    (void)state;
    struct rrpci_credit b;
    rrpci_credit_init(&b, 4, 4);
    rrpci_credit_lend(&b, 12);
    b.rx_announce = 0; /* told */
    assert_false(rrpci_credit_take_back(&b, 16)); /* would leave none */
    assert_false(rrpci_credit_take_back(&b, 0));
    assert_true(rrpci_credit_take_back(&b, 12));
    assert_int_equal(b.rx_announce, -12);
    assert_false(rrpci_credit_take_back(&b, 1)); /* one at a time */
    /* an acknowledgement before the LEND went is a peer's invention */
    assert_int_equal(rrpci_credit_take_acked(&b, 12), RRPC_E_PROTO);
    b.rx_announce = 0;
    /* frames sent before the peer saw it are still covered */
    for (int i = 0; i < 16; i++)
        assert_int_equal(rrpci_credit_rx(&b), 0);
    assert_int_equal(rrpci_credit_take_acked(&b, 11), RRPC_E_PROTO);
    assert_int_equal(rrpci_credit_take_acked(&b, 12), 0);
    assert_int_equal(b.rx_grant, 4);
    assert_int_equal(rrpci_credit_take_acked(&b, 12), RRPC_E_PROTO); /* a second one */
    assert_false(rrpci_credit_rx_room(&b)); /* 16 in flight, grant 4 */
}

/* What travels between a sender A and a receiver B, in order per
 * direction: B -> A returned credit and LENDs, A -> B frames and LEND_ACKs. */
enum { Q_RET, Q_LEND, Q_FRAME, Q_ACK };
struct qent {
    int kind;
    int32_t n;
};
struct fifo {
    struct qent e[4096];
    unsigned head, tail;
};
static void push(struct fifo *f, int kind, int32_t n)
{
    assert_true(f->tail - f->head < 4096);
    f->e[f->tail++ % 4096] = (struct qent){kind, n};
}

static void test_lending_and_taking_back_at_random_never_overruns_the_receiver(void **state)
{
    (void)state;
    static struct fifo ab, ba;
    memset(&ab, 0, sizeof(ab));
    memset(&ba, 0, sizeof(ba));
    struct rrpci_credit a, b;
    rrpci_credit_init(&a, 4, 4);
    rrpci_credit_init(&b, 4, 4);
    uint32_t seed = 777, queued = 0, sent = 0, lends = 0, takes = 0, debts = 0;
    for (int step = 0; step < 200000; step++) {
        unsigned r = rnd(&seed) % 8;
        if (r < 3 && rrpci_credit_take(&a)) {
            push(&ab, Q_FRAME, 0);
            sent++;
        } else if (r == 3 && queued) {
            rrpci_credit_consumed(&b);
            queued--;
        } else if (r == 4 && (rrpci_credit_should_return(&b) || rnd(&seed) % 4 == 0)) {
            uint16_t n = rrpci_credit_harvest(&b);
            if (n)
                push(&ba, Q_RET, n);
        } else if (r == 5) {
            /* B lends (not while a take-back is on its way) or takes back */
            if (rnd(&seed) % 2 && !b.rx_taking && b.rx_announce >= 0 && b.rx_grant < 64) {
                rrpci_credit_lend(&b, 1 + rnd(&seed) % 8);
                lends++;
            } else if (b.rx_grant > 1 &&
                       rrpci_credit_take_back(&b, 1 + rnd(&seed) % (b.rx_grant - 1))) {
                takes++;
            }
            if (b.rx_announce) { /* the LEND leaves */
                push(&ba, Q_LEND, b.rx_announce);
                b.rx_announce = 0;
            }
        } else if (r == 6 && ba.head != ba.tail) { /* A reads */
            struct qent e = ba.e[ba.head++ % 4096];
            if (e.kind == Q_RET) {
                assert_int_equal(rrpci_credit_returned(&a, (uint32_t)e.n), 0);
            } else {
                assert_int_equal(rrpci_credit_granted(&a, e.n), 0);
                debts += a.tx_avail < 0;
                if (e.n < 0)
                    push(&ab, Q_ACK, -e.n);
            }
        } else if (r == 7 && ab.head != ab.tail) { /* B reads */
            struct qent e = ab.e[ab.head++ % 4096];
            if (e.kind == Q_FRAME) {
                assert_int_equal(rrpci_credit_rx(&b), 0);
                queued++;
            } else {
                assert_int_equal(rrpci_credit_take_acked(&b, (uint32_t)e.n), 0);
            }
        }
    }
    assert_true(sent > 10000 && lends > 1000 && takes > 1000);
    assert_true(debts > 0); /* some take-back found frames in flight */
    /* Quiet now: everything read, consumed and returned, both sides agree. */
    for (int round = 0; round < 4; round++) {
        while (ab.head != ab.tail) {
            struct qent e = ab.e[ab.head++ % 4096];
            if (e.kind == Q_FRAME)
                assert_int_equal(rrpci_credit_rx(&b), 0), queued++;
            else
                assert_int_equal(rrpci_credit_take_acked(&b, (uint32_t)e.n), 0);
        }
        for (; queued; queued--)
            rrpci_credit_consumed(&b);
        uint16_t n = rrpci_credit_harvest(&b);
        if (n)
            push(&ba, Q_RET, n);
        if (b.rx_announce) {
            push(&ba, Q_LEND, b.rx_announce);
            b.rx_announce = 0;
        }
        while (ba.head != ba.tail) {
            struct qent e = ba.e[ba.head++ % 4096];
            if (e.kind == Q_RET)
                assert_int_equal(rrpci_credit_returned(&a, (uint32_t)e.n), 0);
            else if (assert_int_equal(rrpci_credit_granted(&a, e.n), 0), e.n < 0)
                push(&ab, Q_ACK, -e.n);
        }
    }
    assert_int_equal(b.rx_taking, 0);
    assert_int_equal(b.rx_inflight, 0);
    assert_int_equal(a.tx_grant, b.rx_grant);
    assert_int_equal(a.tx_avail, (int32_t)a.tx_grant);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_makes_the_whole_grant_available),
        cmocka_unit_test(test_frames_sent_and_credit_returned_are_counted_for_good),
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
        cmocka_unit_test(test_a_lend_raises_the_grant_and_what_may_be_sent),
        cmocka_unit_test(test_a_take_back_while_frames_are_in_flight_leaves_a_debt_returns_pay),
        cmocka_unit_test(test_a_lend_of_zero_or_to_a_grant_below_one_or_above_65535_is_refused),
        cmocka_unit_test(test_a_take_back_counts_until_acknowledged_and_only_one_at_a_time),
        cmocka_unit_test(test_lending_and_taking_back_at_random_never_overruns_the_receiver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

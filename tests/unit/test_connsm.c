/* SPDX-License-Identifier: MIT */
/* The connection state machine (core/connsm.c): every (state, event) pair,
 * against the lifecycle docs/architecture.md draws, written out here on its
 * own; then the walks a connection really takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/connsm.h"

enum { C = RRPCI_CONNECTING, A = RRPCI_AUTHENTICATING, U = RRPCI_UP, R = RRPCI_REFUSING,
       L = RRPCI_CLOSING, D = RRPCI_DOWN, N = -1 };

/* The expected successor of every state under every event. */
static const int want[RRPCI_NSTATES_][RRPCI_NEVENTS_] = {
    /*      WIRE_UP  WIRE_UP_TICKET  TICKET_OK  TICKET_REFUSED  APP_CLOSE  DOWN */
    [C] = {U, A, N, N, L, D},
    [A] = {N, N, U, R, L, D},
    [U] = {N, N, N, N, L, D},
    [R] = {N, N, N, N, N, D},
    [L] = {N, N, N, N, N, D},
    [D] = {N, N, N, N, N, N},
};

static void test_every_state_and_event_has_the_documented_successor(void **state)
{
    int walked = 0;
    for (int s = 0; s < RRPCI_NSTATES_; s++)
        for (int e = 0; e < RRPCI_NEVENTS_; e++, walked++)
            if (rrpci_conn_next(s, e) != want[s][e])
                fail_msg("%s + event %d: got %d, want %d", rrpci_conn_state_name(s), e,
                         rrpci_conn_next(s, e), want[s][e]);
    assert_int_equal(walked, 6 * 6);
}

static void test_down_is_reached_from_every_state_and_left_by_none(void **state)
{
    for (int s = 0; s < RRPCI_DOWN; s++)
        assert_int_equal(rrpci_conn_next(s, RRPCI_EV_DOWN), RRPCI_DOWN);
    for (int e = 0; e < RRPCI_NEVENTS_; e++)
        assert_int_equal(rrpci_conn_next(RRPCI_DOWN, e), -1);
}

static void test_only_an_accepted_ticket_or_no_ticket_reaches_up(void **state)
{
    for (int s = 0; s < RRPCI_NSTATES_; s++)
        for (int e = 0; e < RRPCI_NEVENTS_; e++)
            if (rrpci_conn_next(s, e) == RRPCI_UP)
                assert_true((s == RRPCI_CONNECTING && e == RRPCI_EV_WIRE_UP) ||
                            (s == RRPCI_AUTHENTICATING && e == RRPCI_EV_TICKET_OK));
}

/* The walks of real connections. */
static int walk(const int *events, int n)
{
    int s = RRPCI_CONNECTING;
    for (int i = 0; i < n && s >= 0; i++)
        s = rrpci_conn_next(s, events[i]);
    return s;
}

static void test_the_paths_connections_take(void **state)
{
    int open_close[] = {RRPCI_EV_WIRE_UP, RRPCI_EV_APP_CLOSE, RRPCI_EV_DOWN};
    assert_int_equal(walk(open_close, 3), RRPCI_DOWN);
    int ticket_ok[] = {RRPCI_EV_WIRE_UP_TICKET, RRPCI_EV_TICKET_OK};
    assert_int_equal(walk(ticket_ok, 2), RRPCI_UP);
    int refused[] = {RRPCI_EV_WIRE_UP_TICKET, RRPCI_EV_TICKET_REFUSED};
    assert_int_equal(walk(refused, 2), RRPCI_REFUSING);
    int refused_then_closed[] = {RRPCI_EV_WIRE_UP_TICKET, RRPCI_EV_TICKET_REFUSED,
                                 RRPCI_EV_APP_CLOSE};
    assert_int_equal(walk(refused_then_closed, 3), -1); /* already on its way out */
    int closed_before_up[] = {RRPCI_EV_APP_CLOSE, RRPCI_EV_WIRE_UP};
    assert_int_equal(walk(closed_before_up, 2), -1); /* a late "up" is ignored */
    int timed_out[] = {RRPCI_EV_WIRE_UP_TICKET, RRPCI_EV_DOWN};
    assert_int_equal(walk(timed_out, 2), RRPCI_DOWN);
}

static void test_out_of_range_input_is_refused(void **state)
{
    assert_int_equal(rrpci_conn_next(RRPCI_NSTATES_, RRPCI_EV_DOWN), -1);
    assert_int_equal(rrpci_conn_next(RRPCI_UP, RRPCI_NEVENTS_), -1);
    assert_string_equal(rrpci_conn_state_name(RRPCI_NSTATES_), "?");
    assert_string_equal(rrpci_conn_state_name(RRPCI_AUTHENTICATING), "authenticating");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_state_and_event_has_the_documented_successor),
        cmocka_unit_test(test_down_is_reached_from_every_state_and_left_by_none),
        cmocka_unit_test(test_only_an_accepted_ticket_or_no_ticket_reaches_up),
        cmocka_unit_test(test_the_paths_connections_take),
        cmocka_unit_test(test_out_of_range_input_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/governor.c: the polling governor, driven
 * with made-up clocks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/governor.h"

/* Polls from @t for @secs in 10 us steps, the thread getting @share of
 * the time; returns when a stop came (its time) or -1. */
static double poll_for(struct rrpci_governor *g, double t, double secs, double share, double *cpu)
{
    for (double end = t + secs; t < end; t += 10e-6) {
        *cpu += 10e-6 * share;
        if (rrpci_gov_charge(g, t, *cpu, 1))
            return t;
    }
    return -1;
}

static void test_polling_ends_when_the_window_passes_without_traffic(void **state)
{
    (void)state;
    struct rrpci_governor g;
    rrpci_gov_init(&g, 1000, 100, 0);
    double cpu = 0;
    rrpci_gov_activity(&g, 10.0, cpu, 1);
    assert_true(g.polling);
    assert_true(rrpci_gov_continue(&g, 10.0009, false));
    assert_false(rrpci_gov_continue(&g, 10.0011, false));
    assert_false(g.unarmed);
    /* a transport's longer window extends it, and what it left unarmed is
     * kept until polling stops */
    assert_true(rrpci_gov_request(&g, 10.0005, 5000, cpu, 1, true));
    assert_true(g.unarmed);
    assert_true(rrpci_gov_continue(&g, 10.005, false));
    rrpci_gov_stop(&g);
    assert_false(g.polling);
    assert_false(g.unarmed);
    /* a zero window asks for nothing */
    struct rrpci_governor off;
    rrpci_gov_init(&off, 0, 50, 50);
    rrpci_gov_activity(&off, 1.0, 0, 1);
    assert_false(off.polling);
}

static void test_a_spent_budget_stops_polling_and_refuses_it_for_a_while(void **state)
{
    (void)state;
    struct rrpci_governor g;
    rrpci_gov_init(&g, 100000, 50, 0);
    double cpu = 0;
    assert_true(rrpci_gov_request(&g, 5.0, 100000, cpu, 1, false));
    /* running all the time it polls and finding nothing: when the 100 ms
     * window passes, all of it was wasted, past 50 % of 100 ms */
    double t = poll_for(&g, 5.0, 0.2, 1.0, &cpu);
    assert_true(t >= 5.0 + 0.1 && t < 5.0 + 0.10002);
    assert_int_equal(g.budget_stops, 1);
    assert_true(rrpci_gov_held(&g, t));
    assert_false(rrpci_gov_continue(&g, t, true));
    /* a refused request leaves nothing unarmed: the transport arms it */
    assert_false(rrpci_gov_request(&g, t + 0.0001, 1000, cpu, 1, true));
    assert_false(g.unarmed);
    assert_false(rrpci_gov_held(&g, t + 0.2));
}

/* Polls from @t for @secs in 10 us steps with all the CPU, work found
 * every @every seconds, each time asking for @window_us more; returns when
 * a stop came (its time) or -1. */
static double poll_with_traffic(struct rrpci_governor *g, double t, double secs, double every,
                                unsigned window_us, double *cpu)
{
    double next = t + every;
    for (double end = t + secs; t < end; t += 10e-6) {
        *cpu += 10e-6;
        if (t >= next) {
            next += every;
            rrpci_gov_found(g);
            if (!rrpci_gov_request(g, t, window_us, *cpu, 1, false))
                return t;
        }
        if (rrpci_gov_charge(g, t, *cpu, 1))
            return t;
        if (!rrpci_gov_continue(g, t, false)) {
            rrpci_gov_stop(g);
            /* sleeps until the next traffic */
            t = next - 10e-6;
        }
    }
    return -1;
}

static void test_polling_that_finds_work_costs_no_budget(void **state)
{
    (void)state;
    /* a steady ping-pong: an answer every 120 us, all of the CPU spent
     * polling for it, for a whole second: no stop */
    struct rrpci_governor g;
    rrpci_gov_init(&g, 1000, 50, 0);
    double cpu = 0;
    assert_true(rrpci_gov_request(&g, 1.0, 1000, cpu, 1, false));
    assert_true(poll_with_traffic(&g, 1.0, 1.0, 120e-6, 1000, &cpu) < 0);
    assert_int_equal(g.budget_stops, 0);
    /* nor a slow one (Soft-RoCE under emulation: 400-600 us between
     * requests) within the window: how long polling took to find work
     * costs nothing */
    struct rrpci_governor s;
    rrpci_gov_init(&s, 1000, 50, 0);
    cpu = 0;
    assert_true(rrpci_gov_request(&s, 1.0, 1000, cpu, 1, false));
    assert_true(poll_with_traffic(&s, 1.0, 1.0, 600e-6, 1000, &cpu) < 0);
    assert_int_equal(s.budget_stops, 0);
    /* traffic a little slower than the window: each 1 ms of polling after
     * it is wasted, 1 ms in 1.1 ms, past the 50 % budget */
    struct rrpci_governor h;
    rrpci_gov_init(&h, 1000, 50, 0);
    cpu = 0;
    assert_true(rrpci_gov_request(&h, 1.0, 1000, cpu, 1, false));
    double t = poll_with_traffic(&h, 1.0, 1.0, 1.1e-3, 1000, &cpu);
    assert_true(t > 1.0 + 0.04 && t < 1.0 + 0.07);
    assert_int_equal(h.budget_stops, 1);
    /* traffic every 3 ms under a 100 ms window: polling finds it, but
     * late: all but RRPCI_GOV_PAYOFF of each 3 ms is charged */
    struct rrpci_governor k;
    rrpci_gov_init(&k, 100000, 50, 0);
    cpu = 0;
    assert_true(rrpci_gov_request(&k, 1.0, 100000, cpu, 1, false));
    t = poll_with_traffic(&k, 1.0, 1.0, 3e-3, 100000, &cpu);
    assert_true(t > 1.0 + 0.07 && t < 1.0 + 0.09);
    assert_int_equal(k.budget_stops, 1);
}

static void test_a_poller_that_does_not_get_its_cpu_stops_with_a_growing_hold(void **state)
{
    (void)state;
    struct rrpci_governor g;
    rrpci_gov_init(&g, 1000000, 100, 50);
    double cpu = 0;
    assert_true(rrpci_gov_request(&g, 1.0, 1000000, cpu, 1, false));
    /* a third of the time: after 20 ms of polling it is contention */
    double t = poll_for(&g, 1.0, 0.1, 1.0 / 3, &cpu);
    assert_true(t >= 1.0 + 0.02 && t < 1.0 + 0.021);
    assert_int_equal(g.contended_stops, 1);
    assert_true(rrpci_gov_held(&g, t + 0.099));
    assert_false(rrpci_gov_held(&g, t + 0.101));
    /* again at once: the hold doubles */
    assert_true(rrpci_gov_request(&g, t + 0.101, 1000000, cpu, 1, false));
    double t2 = poll_for(&g, t + 0.101, 0.1, 1.0 / 3, &cpu);
    assert_true(t2 > 0);
    assert_true(rrpci_gov_held(&g, t2 + 0.199));
    assert_false(rrpci_gov_held(&g, t2 + 0.201));
    /* the thread that gets all its CPU polls on with no stop */
    struct rrpci_governor h;
    rrpci_gov_init(&h, 1000000, 100, 50);
    double c2 = 0;
    assert_true(rrpci_gov_request(&h, 1.0, 1000000, c2, 1, false));
    assert_true(poll_for(&h, 1.0, 0.3, 1.0, &c2) < 0);
}

static void test_a_charge_from_another_thread_starts_afresh(void **state)
{
    (void)state;
    struct rrpci_governor g;
    rrpci_gov_init(&g, 1000000, 100, 50);
    assert_true(rrpci_gov_request(&g, 1.0, 1000000, 100.0, 1, false));
    /* another thread's CPU clock says nothing about this stretch */
    assert_false(rrpci_gov_charge(&g, 1.05, 0.0, 2));
    assert_true(g.wall_cur == 0 && g.cpu_cur == 0);
}

/* The loop reads its thread's CPU clock (a system call) only where
 * rrpci_gov_wants_cpu says the governor reads it, and passes 0 else: a
 * request or activity during a stretch must leave the stretch's CPU mark
 * alone, or the next charge would count the CPU since 0. */
static void test_a_request_while_polling_does_not_read_the_cpu(void **state)
{
    (void)state;
    struct rrpci_governor g;
    rrpci_gov_init(&g, 1000, 100, 0);
    assert_true(rrpci_gov_wants_cpu(&g));
    assert_true(rrpci_gov_request(&g, 5.0, 1000, 2.0, 1, true));
    assert_false(rrpci_gov_wants_cpu(&g));
    /* what the loop passes when the governor does not want it */
    assert_true(rrpci_gov_request(&g, 5.0002, 1000, 0, 1, true));
    rrpci_gov_activity(&g, 5.0004, 0, 1);
    assert_false(rrpci_gov_charge(&g, 5.0006, 2.0005, 1));
    /* the stretch so far: 0.5 ms of CPU since the first request's mark */
    assert_true(g.stretch_cpu > 0.00049 && g.stretch_cpu < 0.00051);
    assert_true(g.mark_cpu == 2.0005);
    /* once it stops, the next stretch starts from a fresh reading */
    rrpci_gov_stop(&g);
    assert_true(rrpci_gov_wants_cpu(&g));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_polling_ends_when_the_window_passes_without_traffic),
        cmocka_unit_test(test_a_spent_budget_stops_polling_and_refuses_it_for_a_while),
        cmocka_unit_test(test_a_poller_that_does_not_get_its_cpu_stops_with_a_growing_hold),
        cmocka_unit_test(test_a_charge_from_another_thread_starts_afresh),
        cmocka_unit_test(test_polling_that_finds_work_costs_no_budget),
        cmocka_unit_test(test_a_request_while_polling_does_not_read_the_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/stats.c: the round-trip buckets and the
 * Prometheus text of a snapshot (rrpci_stats_render). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"

/* ---- buckets ------------------------------------------------------------- */

static void test_bucket_upper_bounds_are_inclusive_as_prometheus_le(void **state)
{
    (void)state;
    assert_int_equal(rrpci_stats_bucket(0), 0);
    assert_int_equal(rrpci_stats_bucket(0.5), 0);
    assert_int_equal(rrpci_stats_bucket(1.0), 0);   /* le="1e-06" holds 1 us */
    assert_int_equal(rrpci_stats_bucket(1.001), 1);
    assert_int_equal(rrpci_stats_bucket(2.0), 1);
    assert_int_equal(rrpci_stats_bucket(2.5), 2);
    assert_int_equal(rrpci_stats_bucket(4.0), 2);
    assert_int_equal(rrpci_stats_bucket(1000.0), 10); /* (512, 1024] us */
    assert_int_equal(rrpci_stats_bucket(1024.0), 10);
    assert_int_equal(rrpci_stats_bucket(1025.0), 11);
}

static void test_bucket_past_the_last_edge_is_the_last(void **state)
{
    (void)state;
    double last_edge = (double)(1u << (RRPC_STATS_RTT_BUCKETS - 2)); /* us */
    assert_int_equal(rrpci_stats_bucket(last_edge), RRPC_STATS_RTT_BUCKETS - 2);
    assert_int_equal(rrpci_stats_bucket(last_edge + 1), RRPC_STATS_RTT_BUCKETS - 1);
    assert_int_equal(rrpci_stats_bucket(1e12), RRPC_STATS_RTT_BUCKETS - 1);
}

/* ---- text ---------------------------------------------------------------- */

static rrpc_stats sample(void)
{
    rrpc_stats st;
    memset(&st, 0, sizeof(st));
    rrpc_class_stats *ll = &st.cls[RRPC_CLASS_LOW_LATENCY];
    ll->calls = 7;
    ll->calls_ok = 5;
    ll->calls_failed = 2;
    ll->rtt_buckets[0] = 1;
    ll->rtt_buckets[3] = 4;
    ll->rtt_buckets[RRPC_STATS_RTT_BUCKETS - 1] = 2;
    ll->rtt_us_sum = 1500000; /* 1.5 s */
    st.cls[RRPC_CLASS_BULK].onesided_bytes = 123456789012ull;
    st.keepalive_losses = 3;
    st.busy_poll_budget_stops = 4;
    st.busy_poll_contended_stops = 5;
    ll->call_errors[rrpc_stats_error_slot(RRPC_E_DEADLINE)] = 1;
    ll->call_errors[rrpc_stats_error_slot(42)] = 1;
    st.cls[RRPC_CLASS_BULK].onesided_buckets[2] = 3;
    st.cls[RRPC_CLASS_BULK].onesided_us_sum = 9;
    st.cls[RRPC_CLASS_BULK].credit_wait_ns = 1500000000ull;
    st.cls[RRPC_CLASS_BULK].queued_frames = 11;
    return st;
}

static rrpc_peer_stats g_peers[3] = {
    {.peer = "10.0.0.2", .conns = 2, .s = {.calls = 5, .bytes_out = 640, .onesided_bytes = 77}},
    {.peer = "fe80::1%a\"b\\c", .conns = 0, .s = {.calls_failed = 1}},
    {.peer = "other", .conns = 1, .s = {.requests = 9}},
};

static char g_text[64 * 1024];

static void render(const rrpc_stats *st)
{
    size_t need = 0;
    assert_int_equal(rrpci_stats_render(st, g_peers, 3, g_text, sizeof(g_text), &need), 0);
    assert_int_equal(need, strlen(g_text));
}

static void assert_line(const char *line)
{
    char want[512];
    snprintf(want, sizeof(want), "\n%s\n", line);
    if (!strstr(g_text, want))
        fail_msg("line \"%s\" missing from:\n%s", line, g_text);
}

static void test_text_has_help_type_and_a_value_per_class(void **state)
{
    (void)state;
    rrpc_stats st = sample();
    render(&st);
    assert_true(strncmp(g_text, "# HELP rrpc_calls_total ", 24) == 0);
    assert_line("# TYPE rrpc_calls_total counter");
    assert_line("rrpc_calls_total{class=\"control\"} 0");
    assert_line("rrpc_calls_total{class=\"low_latency\"} 7");
    assert_line("rrpc_calls_total{class=\"bulk\"} 0");
    assert_line("rrpc_calls_total{class=\"background\"} 0");
    assert_line("rrpc_calls_failed_total{class=\"low_latency\"} 2");
    assert_line("rrpc_onesided_bytes_total{class=\"bulk\"} 123456789012");
    assert_line("# TYPE rrpc_keepalive_losses_total counter");
    assert_line("rrpc_keepalive_losses_total 3");
    assert_line("# TYPE rrpc_busy_poll_budget_stops_total counter");
    assert_line("rrpc_busy_poll_budget_stops_total 4");
    assert_line("# TYPE rrpc_busy_poll_contended_stops_total counter");
    assert_line("rrpc_busy_poll_contended_stops_total 5");
    /* the internal class 0 is not a class: no label for it */
    assert_null(strstr(g_text, "class=\"\""));
    assert_null(strstr(g_text, "(null)"));
}

static void test_histogram_buckets_are_cumulative_with_sum_and_count(void **state)
{
    (void)state;
    rrpc_stats st = sample();
    render(&st);
    const char *h = "rrpc_call_duration_seconds";
    char l[256];
    snprintf(l, sizeof(l), "# TYPE %s histogram", h);
    assert_line(l);
    const char *edges[] = {"1e-06", "2e-06", "4e-06", "8e-06", "1.6e-05"};
    const int cum[] = {1, 1, 1, 5, 5};
    for (int i = 0; i < 5; i++) {
        snprintf(l, sizeof(l), "%s_bucket{class=\"low_latency\",le=\"%s\"} %d", h, edges[i], cum[i]);
        assert_line(l);
    }
    snprintf(l, sizeof(l), "%s_bucket{class=\"low_latency\",le=\"4.194304\"} 5", h);
    assert_line(l); /* the last finite edge, 2^22 us */
    snprintf(l, sizeof(l), "%s_bucket{class=\"low_latency\",le=\"+Inf\"} 7", h);
    assert_line(l);
    snprintf(l, sizeof(l), "%s_sum{class=\"low_latency\"} 1.500000", h);
    assert_line(l);
    snprintf(l, sizeof(l), "%s_count{class=\"low_latency\"} 7", h);
    assert_line(l);
    snprintf(l, sizeof(l), "%s_bucket{class=\"bulk\",le=\"+Inf\"} 0", h);
    assert_line(l);
    /* one _bucket line per finite edge and +Inf, per class */
    int n = 0;
    for (const char *p = g_text; (p = strstr(p, "rrpc_call_duration_seconds_bucket{")); p++)
        n++;
    assert_int_equal(n, RRPC_CLASS_COUNT * RRPC_STATS_RTT_BUCKETS);
}

static void test_text_is_sized_with_len_0_and_cut_with_enobufs(void **state)
{
    (void)state;
    rrpc_stats st = sample();
    size_t need = 0;
    assert_int_equal(rrpci_stats_render(&st, g_peers, 3, NULL, 0, &need), -ENOBUFS);
    assert_true(need > 1000);
    render(&st);
    assert_int_equal(need, strlen(g_text));

    char small[64];
    memset(small, 'x', sizeof(small));
    size_t need2 = 0;
    assert_int_equal(rrpci_stats_render(&st, g_peers, 3, small, sizeof(small), &need2), -ENOBUFS);
    assert_int_equal(need2, need);
    assert_int_equal(small[sizeof(small) - 1], 0);
    assert_memory_equal(small, g_text, sizeof(small) - 1);

    /* exactly the text and its NUL fits */
    static char exact[64 * 1024];
    assert_int_equal(rrpci_stats_render(&st, g_peers, 3, exact, need + 1, &need2), 0);
    assert_string_equal(exact, g_text);
    assert_int_equal(rrpci_stats_render(&st, g_peers, 3, exact, need, &need2), -ENOBUFS);
}

static void test_failed_calls_count_under_a_fixed_set_of_codes(void **state)
{
    (void)state;
    assert_int_equal(rrpc_stats_error_slot(0), -1);
    assert_string_equal(rrpc_stats_error_label(rrpc_stats_error_slot(RRPC_E_DEADLINE)),
                        "RRPC_E_DEADLINE");
    assert_string_equal(rrpc_stats_error_label(rrpc_stats_error_slot(RRPC_E_CONN_LOST)),
                        "RRPC_E_CONN_LOST");
    assert_string_equal(rrpc_stats_error_label(rrpc_stats_error_slot(7)), "application");
    assert_string_equal(rrpc_stats_error_label(rrpc_stats_error_slot(-ENOMEM)), "other");
    assert_string_equal(rrpc_stats_error_label(rrpc_stats_error_slot(RRPC_E_PROTO)), "other");
    assert_null(rrpc_stats_error_label(-1));
    assert_null(rrpc_stats_error_label(RRPC_STATS_ERRORS));
    for (int i = 0; i < RRPC_STATS_ERRORS; i++) /* each slot has its own label */
        for (int j = 0; j < i; j++)
            assert_string_not_equal(rrpc_stats_error_label(i), rrpc_stats_error_label(j));

    rrpc_stats st = sample();
    render(&st);
    assert_line("# TYPE rrpc_call_errors_total counter");
    assert_line("rrpc_call_errors_total{class=\"low_latency\",code=\"RRPC_E_DEADLINE\"} 1");
    assert_line("rrpc_call_errors_total{class=\"low_latency\",code=\"application\"} 1");
    assert_line("rrpc_call_errors_total{class=\"low_latency\",code=\"other\"} 0");
    int n = 0;
    for (const char *p = g_text; (p = strstr(p, "\nrrpc_call_errors_total{")); p++)
        n++;
    assert_int_equal(n, RRPC_CLASS_COUNT * RRPC_STATS_ERRORS);
}

static void test_credit_wait_queue_depth_and_onesided_durations_are_rendered(void **state)
{
    (void)state;
    rrpc_stats st = sample();
    render(&st);
    assert_line("# TYPE rrpc_credit_wait_seconds_total counter");
    assert_line("rrpc_credit_wait_seconds_total{class=\"bulk\"} 1.500000000");
    assert_line("# TYPE rrpc_send_queue_frames gauge");
    assert_line("rrpc_send_queue_frames{class=\"bulk\"} 11");
    assert_line("rrpc_send_queue_frames{class=\"low_latency\"} 0");
    assert_line("# TYPE rrpc_onesided_duration_seconds histogram");
    assert_line("rrpc_onesided_duration_seconds_bucket{class=\"bulk\",le=\"2e-06\"} 0");
    assert_line("rrpc_onesided_duration_seconds_bucket{class=\"bulk\",le=\"4e-06\"} 3");
    assert_line("rrpc_onesided_duration_seconds_count{class=\"bulk\"} 3");
    assert_line("rrpc_onesided_duration_seconds_sum{class=\"bulk\"} 0.000009");
}

static void test_peers_are_labelled_by_address_with_values_escaped(void **state)
{
    (void)state;
    rrpc_stats st = sample();
    render(&st);
    assert_line("# TYPE rrpc_peer_connections gauge");
    assert_line("rrpc_peer_connections{peer=\"10.0.0.2\"} 2");
    assert_line("rrpc_peer_calls_total{peer=\"10.0.0.2\"} 5");
    assert_line("rrpc_peer_sent_bytes_total{peer=\"10.0.0.2\"} 640");
    assert_line("rrpc_peer_onesided_bytes_total{peer=\"10.0.0.2\"} 77");
    assert_line("rrpc_peer_calls_failed_total{peer=\"fe80::1%a\\\"b\\\\c\"} 1");
    assert_line("rrpc_peer_requests_total{peer=\"other\"} 9");
    /* no peers: no peer families at all (a family without samples is noise) */
    size_t need = 0;
    assert_int_equal(rrpci_stats_render(&st, NULL, 0, g_text, sizeof(g_text), &need), 0);
    assert_null(strstr(g_text, "rrpc_peer_"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_upper_bounds_are_inclusive_as_prometheus_le),
        cmocka_unit_test(test_bucket_past_the_last_edge_is_the_last),
        cmocka_unit_test(test_text_has_help_type_and_a_value_per_class),
        cmocka_unit_test(test_histogram_buckets_are_cumulative_with_sum_and_count),
        cmocka_unit_test(test_text_is_sized_with_len_0_and_cut_with_enobufs),
        cmocka_unit_test(test_failed_calls_count_under_a_fixed_set_of_codes),
        cmocka_unit_test(test_credit_wait_queue_depth_and_onesided_durations_are_rendered),
        cmocka_unit_test(test_peers_are_labelled_by_address_with_values_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

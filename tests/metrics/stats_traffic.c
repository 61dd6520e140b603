/* SPDX-License-Identifier: MIT */
/*
 * The metrics (rrpc_ctx_stats, rrpc_ctx_stats_text) over a real tcp
 * connection on loopback, with traffic in two classes.
 *
 *   stats_traffic          cmocka tests of the counters and the text
 *   stats_traffic --dump   the traffic, then the client's text on stdout and
 *                          the server's after a line "# server" (for the
 *                          Prometheus tools in check-prometheus.sh)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

static rrpc_conn *_Atomic g_accepted; /* set on the server's loop thread */
static uint8_t g_target[1 << 16];

static void echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static void on_conn(rrpc_conn *conn, rrpc_conn_event ev, int reason, void *user)
{
    (void)reason;
    (void)user;
    if (ev == RRPC_CONN_UP)
        g_accepted = conn;
}

struct pair {
    rrpc_ctx *srv, *cli;
    rrpc_listener *l;
    rrpc_conn *c;
    rrpc_region *treg, *sreg;
    uint8_t src[4096];
};

/* 10 echo calls of 64 B on low_latency, 5 of 1000 B on bulk, one call of a
 * method nobody registered (low_latency), one WRITE of 4096 B on bulk. */
static int traffic(struct pair *p)
{
    int r;
    if ((r = rrpc_ctx_create(&p->srv)) || (r = rrpc_ctx_create(&p->cli)))
        return r;
    if ((r = rrpc_register(p->srv, "echo", echo, NULL)) ||
        (r = rrpc_mem_reg(p->srv, g_target, sizeof(g_target), RRPC_ACCESS_REMOTE_WRITE, &p->treg)) ||
        (r = rrpc_listen(p->srv, "tcp://127.0.0.1:0", on_conn, NULL, &p->l)) ||
        (r = rrpc_ctx_start_thread(p->srv)) || (r = rrpc_ctx_start_thread(p->cli)))
        return r;
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(p->l));
    if ((r = rrpc_connect_sync(p->cli, uri, 5000, NULL, NULL, &p->c)))
        return r;
    char buf[1000] = {0};
    void *out;
    size_t n;
    for (int i = 0; i < 10; i++) {
        rrpc_call_opts o = {.qos_class = RRPC_CLASS_LOW_LATENCY};
        if ((r = rrpc_call_sync(p->c, "echo", buf, 64, &o, &out, &n)))
            return r;
        free(out);
    }
    for (int i = 0; i < 5; i++) {
        rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK};
        if ((r = rrpc_call_sync(p->c, "echo", buf, sizeof(buf), &o, &out, &n)))
            return r;
        free(out);
    }
    if (rrpc_call_sync(p->c, "nobody", "x", 1, NULL, &out, &n) != RRPC_E_NO_METHOD)
        return -EPROTO;
    rrpc_token tok; /* the server's UP callback ran before it served the calls above */
    if (!g_accepted || (r = rrpc_region_token(p->treg, g_accepted, &tok)) ||
        (r = rrpc_mem_reg(p->cli, p->src, sizeof(p->src), 0, &p->sreg)))
        return r ? r : -ENOTCONN;
    rrpc_op_opts oo = {.qos_class = RRPC_CLASS_BULK};
    return rrpc_write_sync(p->c, p->sreg, 0, &tok, 0, sizeof(p->src), &oo);
}

static void pair_free(struct pair *p)
{
    if (p->c)
        rrpc_conn_close(p->c);
    rrpc_ctx_destroy(p->cli);
    rrpc_ctx_destroy(p->srv);
}

static char *text_of(rrpc_ctx *ctx)
{
    size_t need = 0;
    assert_int_equal(rrpc_ctx_stats_text(ctx, NULL, 0, &need), -ENOBUFS);
    assert_true(need > 1000);
    char *t = malloc(need + 1);
    size_t got = 0;
    assert_int_equal(rrpc_ctx_stats_text(ctx, t, need, &got), -ENOBUFS); /* no room for NUL */
    assert_int_equal(rrpc_ctx_stats_text(ctx, t, need + 1, &got), 0);
    assert_int_equal(got, need);
    assert_int_equal(strlen(t), need);
    return t;
}

static void test_counters_move_in_the_class_of_the_traffic(void **state)
{
    (void)state;
    struct pair p = {0};
    int r = traffic(&p);
    if (r)
        fail_msg("traffic: %s: %s", rrpc_err_name(r), rrpc_ctx_last_error(p.cli));
    rrpc_stats c, s;
    assert_int_equal(rrpc_ctx_stats(p.cli, &c), 0);
    assert_int_equal(rrpc_ctx_stats(p.srv, &s), 0);
    const rrpc_class_stats *ll = &c.cls[RRPC_CLASS_LOW_LATENCY], *bk = &c.cls[RRPC_CLASS_BULK];
    assert_int_equal(ll->calls, 11);
    assert_int_equal(ll->calls_ok, 10);
    assert_int_equal(ll->calls_failed, 1);
    assert_int_equal(ll->call_bytes_out, 10 * 64 + 1);
    assert_int_equal(ll->call_bytes_in, 10 * 64);
    assert_int_equal(bk->calls, 5);
    assert_int_equal(bk->calls_ok, 5);
    assert_int_equal(bk->call_bytes_out, 5000);
    assert_int_equal(bk->onesided_ops, 1);
    assert_int_equal(bk->onesided_bytes, 4096);
    assert_int_equal(bk->onesided_failed, 0);
    /* the unknown method is the one failure, under its code */
    assert_int_equal(ll->call_errors[rrpc_stats_error_slot(RRPC_E_NO_METHOD)], 1);
    uint64_t errs = 0, os_done = 0;
    for (int i = 0; i < RRPC_STATS_ERRORS; i++)
        errs += ll->call_errors[i] + bk->call_errors[i];
    assert_int_equal(errs, 1);
    for (int i = 0; i < RRPC_STATS_RTT_BUCKETS; i++)
        os_done += bk->onesided_buckets[i] + ll->onesided_buckets[i];
    assert_int_equal(os_done, 1); /* the WRITE, completed */
    assert_true(bk->onesided_us_sum > 0);
    assert_int_equal(bk->queued_frames, 0);
    uint64_t answered = 0, sum_ll = 0;
    for (int i = 0; i < RRPC_STATS_RTT_BUCKETS; i++)
        sum_ll += ll->rtt_buckets[i];
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++)
        for (int i = 0; i < RRPC_STATS_RTT_BUCKETS; i++)
            answered += c.cls[k].rtt_buckets[i];
    assert_int_equal(sum_ll, 11);
    assert_int_equal(answered, 16);
    assert_true(ll->rtt_us_sum > 0);
    assert_int_equal(c.cls[RRPC_CLASS_BACKGROUND].calls, 0);
    assert_int_equal(s.cls[RRPC_CLASS_LOW_LATENCY].requests, 11);
    assert_int_equal(s.cls[RRPC_CLASS_BULK].requests, 5);
    assert_int_equal(c.conns_up, 1);
    assert_int_equal(s.conns_up, 1);
    char *t = text_of(p.cli);
    assert_non_null(strstr(t, "# TYPE rrpc_calls_total counter\n"));
    assert_non_null(strstr(t, "rrpc_calls_total{class=\"low_latency\"} 11\n"));
    assert_non_null(strstr(t, "rrpc_calls_total{class=\"bulk\"} 5\n"));
    assert_non_null(strstr(t, "rrpc_calls_failed_total{class=\"low_latency\"} 1\n"));
    assert_non_null(strstr(t, "rrpc_onesided_bytes_total{class=\"bulk\"} 4096\n"));
    assert_non_null(strstr(t, "rrpc_call_duration_seconds_bucket{class=\"low_latency\",le=\"+Inf\"} 11\n"));
    assert_non_null(strstr(t, "rrpc_call_duration_seconds_count{class=\"bulk\"} 5\n"));
    assert_non_null(strstr(t, "rrpc_connections_up_total 1\n"));
    assert_non_null(strstr(
        t, "rrpc_call_errors_total{class=\"low_latency\",code=\"RRPC_E_NO_METHOD\"} 1\n"));
    assert_non_null(strstr(t, "rrpc_onesided_duration_seconds_count{class=\"bulk\"} 1\n"));
    assert_non_null(strstr(t, "rrpc_peer_calls_total{peer=\"127.0.0.1\"} 16\n"));
    assert_non_null(strstr(t, "rrpc_peer_onesided_bytes_total{peer=\"127.0.0.1\"} 4096\n"));
    free(t);
    pair_free(&p);
}

/* Per peer: both sides see one peer, 127.0.0.1, with what the connection
 * carried; when it goes down its counters stay and the gauge drops. */
static void test_peer_counters_outlive_their_connections(void **state)
{
    (void)state;
    struct pair p = {0};
    int r = traffic(&p);
    if (r)
        fail_msg("traffic: %s: %s", rrpc_err_name(r), rrpc_ctx_last_error(p.cli));
    rrpc_peer_stats ps[RRPC_STATS_PEERS + 1];
    size_t n = 0;
    assert_int_equal(rrpc_ctx_peer_stats(p.cli, ps, RRPC_STATS_PEERS + 1, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ps[0].peer, "127.0.0.1");
    assert_int_equal(ps[0].conns, 1);
    assert_int_equal(ps[0].s.calls, 16);
    assert_int_equal(ps[0].s.calls_failed, 1);
    assert_int_equal(ps[0].s.onesided_ops, 1);
    assert_int_equal(ps[0].s.onesided_bytes, 4096);
    rrpc_conn_stat cs;
    assert_int_equal(rrpc_conn_stats(p.c, &cs), 0);
    assert_int_equal(ps[0].s.bytes_out, cs.bytes_out);
    assert_int_equal(rrpc_ctx_peer_stats(p.srv, ps, 1, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ps[0].peer, "127.0.0.1");
    assert_int_equal(ps[0].s.requests, 16);
    /* too small a buffer: told how many there are */
    assert_int_equal(rrpc_ctx_peer_stats(p.cli, NULL, 0, &n), -ENOBUFS);
    assert_int_equal(n, 1);
    assert_int_equal(rrpc_ctx_peer_stats(p.cli, NULL, 1, &n), -EINVAL);
    assert_int_equal(rrpc_ctx_peer_stats(NULL, ps, 1, &n), -EINVAL);

    rrpc_conn_close(p.c);
    p.c = NULL;
    for (int i = 0; i < 3000; i++) { /* the close reaches the loop: at most about 30 s */
        assert_int_equal(rrpc_ctx_peer_stats(p.cli, ps, 1, &n), 0);
        if (ps[0].conns == 0)
            break;
        usleep(10000);
    }
    assert_int_equal(ps[0].conns, 0);
    assert_int_equal(ps[0].s.calls, 16);
    assert_int_equal(ps[0].s.onesided_bytes, 4096);
    char *t = text_of(p.cli);
    assert_non_null(strstr(t, "rrpc_peer_connections{peer=\"127.0.0.1\"} 0\n"));
    assert_non_null(strstr(t, "rrpc_peer_calls_total{peer=\"127.0.0.1\"} 16\n"));
    free(t);
    pair_free(&p);
}

static void count_done(const rrpc_result *res, void *user)
{
    int *done = user;
    if (res->status == 0)
        (*done)++;
}

/* The server grants bulk one credit; the client runs in driven mode and does
 * not run its loop while it makes 20 calls, so no credit can come back in
 * between: the first call leaves, the 19 others wait in the queue for
 * credit, and the time they wait is counted once they leave. */
static void test_calls_without_credit_count_stalls_queue_and_the_time_they_waited(void **state)
{
    (void)state;
    rrpc_ctx *srv, *cli;
    rrpc_listener *l;
    rrpc_conn *c;
    assert_int_equal(rrpc_ctx_create(&srv), 0);
    assert_int_equal(rrpc_ctx_create(&cli), 0);
    int dscp, weight;
    assert_int_equal(rrpc_class_get(srv, RRPC_CLASS_BULK, &dscp, &weight, NULL), 0);
    assert_int_equal(rrpc_class_set(srv, RRPC_CLASS_BULK, dscp, weight, 1), 0);
    assert_int_equal(rrpc_register(srv, "echo", echo, NULL), 0);
    assert_int_equal(rrpc_listen(srv, "tcp://127.0.0.1:0", on_conn, NULL, &l), 0);
    assert_int_equal(rrpc_ctx_start_thread(srv), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(l));
    assert_int_equal(rrpc_connect_sync(cli, uri, 5000, NULL, NULL, &c), 0);
    int done = 0;
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK};
    for (int i = 0; i < 20; i++)
        assert_int_equal(rrpc_call(c, "echo", "abcd", 4, &o, count_done, &done), 0);
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(cli, &st), 0);
    assert_int_equal(st.cls[RRPC_CLASS_BULK].credit_stalls, 19);
    assert_int_equal(st.cls[RRPC_CLASS_BULK].queued_frames, 19);
    assert_int_equal(st.cls[RRPC_CLASS_BULK].credit_wait_ns, 0); /* none has left yet */
    for (int i = 0; i < 3000 && done < 20; i++) /* at most about 30 s */
        assert_true(rrpc_ctx_progress(cli, 10) >= 0);
    assert_int_equal(done, 20);
    assert_int_equal(rrpc_ctx_stats(cli, &st), 0);
    assert_int_equal(st.cls[RRPC_CLASS_BULK].credit_stalls, 19);
    assert_int_equal(st.cls[RRPC_CLASS_BULK].queued_frames, 0);
    /* 19 waits of a loopback round trip each: not 0 ns on any clock */
    assert_true(st.cls[RRPC_CLASS_BULK].credit_wait_ns > 0);
    assert_int_equal(st.cls[RRPC_CLASS_LOW_LATENCY].credit_wait_ns, 0);
    char *t = text_of(cli);
    assert_non_null(strstr(t, "rrpc_credit_wait_seconds_total{class=\"low_latency\"} 0.000000000\n"));
    assert_null(strstr(t, "rrpc_credit_wait_seconds_total{class=\"bulk\"} 0.000000000\n"));
    assert_non_null(strstr(t, "rrpc_send_queue_frames{class=\"bulk\"} 0\n"));
    free(t);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
}

/* Per connection, all classes together: the client's connection made the
 * calls, the server's received them; bytes at least the payloads (more:
 * the WRITE's emulation over tcp, credits). */
static void test_connection_counters_move_on_both_sides(void **state)
{
    (void)state;
    struct pair p = {0};
    int r = traffic(&p);
    if (r)
        fail_msg("traffic: %s: %s", rrpc_err_name(r), rrpc_ctx_last_error(p.cli));
    rrpc_conn_stat c, s;
    assert_int_equal(rrpc_conn_stats(p.c, &c), 0);
    assert_int_equal(rrpc_conn_stats(g_accepted, &s), 0);
    assert_int_equal(c.calls, 16);
    assert_int_equal(c.calls_ok, 15);
    assert_int_equal(c.calls_failed, 1);
    assert_int_equal(c.requests, 0);
    assert_int_equal(s.calls, 0);
    assert_int_equal(s.requests, 16);
    const uint64_t sent = 10 * 64 + 5 * 1000 + 1 + 4096, answered = 10 * 64 + 5 * 1000;
    assert_true(c.frames_out >= 17);
    assert_true(c.bytes_out >= sent);
    assert_true(s.frames_in >= 17);
    assert_true(s.bytes_in >= sent);
    assert_true(s.frames_out >= 17);
    assert_true(s.bytes_out >= answered);
    assert_true(c.frames_in >= 17);
    assert_true(c.bytes_in >= answered);
    assert_int_equal(rrpc_conn_stats(NULL, &c), -EINVAL);
    assert_int_equal(rrpc_conn_stats(p.c, NULL), -EINVAL);
    pair_free(&p);
}

static void test_bad_arguments_are_refused(void **state)
{
    (void)state;
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    rrpc_stats s;
    size_t n;
    char b[8];
    assert_int_equal(rrpc_ctx_stats(NULL, &s), -EINVAL);
    assert_int_equal(rrpc_ctx_stats(ctx, NULL), -EINVAL);
    assert_int_equal(rrpc_ctx_stats_text(ctx, NULL, 8, &n), -EINVAL);
    assert_int_equal(rrpc_ctx_stats_text(ctx, b, sizeof(b), NULL), -EINVAL);
    assert_int_equal(rrpc_ctx_stats_text(ctx, b, sizeof(b), &n), -ENOBUFS);
    assert_int_equal(strlen(b), sizeof(b) - 1); /* cut, and NUL-terminated */
    assert_int_equal(rrpc_ctx_stats(ctx, &s), 0);
    assert_int_equal(s.cls[RRPC_CLASS_BULK].calls, 0);
    rrpc_ctx_destroy(ctx);
}

static void dump(rrpc_ctx *ctx)
{
    size_t need = 0;
    rrpc_ctx_stats_text(ctx, NULL, 0, &need);
    char *t = malloc(need + 1);
    if (t && rrpc_ctx_stats_text(ctx, t, need + 1, &need) == 0)
        fputs(t, stdout);
    free(t);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--dump") == 0) {
        struct pair p = {0};
        int r = traffic(&p);
        if (r) {
            fprintf(stderr, "stats_traffic: %s: %s\n", rrpc_err_name(r), rrpc_ctx_last_error(p.cli));
            return 1;
        }
        dump(p.cli);
        printf("# server\n");
        dump(p.srv);
        pair_free(&p);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters_move_in_the_class_of_the_traffic),
        cmocka_unit_test(test_connection_counters_move_on_both_sides),
        cmocka_unit_test(test_peer_counters_outlive_their_connections),
        cmocka_unit_test(test_calls_without_credit_count_stalls_queue_and_the_time_they_waited),
        cmocka_unit_test(test_bad_arguments_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's pieces (transport/tcp/chan.c, tx.c), through the
 * public API over loopback: a class writes pieces of up to
 * RRPC_TCP_PIECE_ALONE, and of RRPC_TCP_PIECE_SHARED while another class
 * of the connection moved a frame within RRPC_TCP_BUSY_MS; the
 * connection's own frames (its handshake, keepalives) make no class busy.
 * Seen through rrpc_stats.qos_pieces_cut.  RRPC_TCP_BUSY_MS is a minute
 * here, so that no timing of the machine decides what a test sees.
 * And a turn of bulk ends after a piece when low-latency input waits
 * (RRPC_TCP_PREEMPT), seen through rrpc_stats.qos_turns_preempted.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#define BULK_BYTES (8u << 20)

struct pair {
    rrpc_ctx *srv, *cli;
    rrpc_conn *conn;
    uint8_t *buf;
};

static void sink(rrpc_request *req, const void *payload, size_t len, void *user)
{
    (void)payload;
    (void)len;
    (void)user;
    rrpc_respond(req, "", 0);
}

/* @kv: NULL, or name, value, ..., NULL: settings beside RRPC_TCP_BUSY_MS */
static rrpc_ctx *make_ctx(const char *const *kv)
{
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_TCP_BUSY_MS", "60000"), 0);
    /* the pieces of the tests below: 64 KiB while another class is busy */
    assert_int_equal(rrpc_config_set(cfg, "RRPC_TCP_PIECE_SHARED", "65536"), 0);
    for (; kv && kv[0]; kv += 2)
        assert_int_equal(rrpc_config_set(cfg, kv[0], kv[1]), 0);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    rrpc_config_destroy(cfg);
    return ctx;
}

static int pair_up(void **state, const char *const *kv)
{
    struct pair *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->srv = make_ctx(kv);
    p->cli = make_ctx(kv);
    assert_int_equal(rrpc_register(p->srv, "sink", sink, NULL), 0);
    rrpc_listener *l;
    assert_int_equal(rrpc_listen(p->srv, "tcp://127.0.0.1:0", NULL, NULL, &l), 0);
    assert_int_equal(rrpc_ctx_start_thread(p->srv), 0);
    assert_int_equal(rrpc_ctx_start_thread(p->cli), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(l));
    assert_int_equal(rrpc_connect_sync(p->cli, uri, 10000, NULL, NULL, &p->conn), 0);
    p->buf = calloc(1, BULK_BYTES);
    assert_non_null(p->buf);
    *state = p;
    return 0;
}

static int setup(void **state)
{
    return pair_up(state, NULL);
}

static int setup_keepalive(void **state)
{
    static const char *const kv[] = {"RRPC_KEEPALIVE_MS", "20", NULL};
    return pair_up(state, kv);
}

static int setup_no_preempt(void **state)
{
    static const char *const kv[] = {"RRPC_TCP_PREEMPT", "0", NULL};
    return pair_up(state, kv);
}

static int teardown(void **state)
{
    struct pair *p = *state;
    rrpc_conn_close(p->conn);
    rrpc_ctx_destroy(p->cli);
    rrpc_ctx_destroy(p->srv);
    free(p->buf);
    free(p);
    return 0;
}

static void call(struct pair *p, int cls, size_t len)
{
    rrpc_call_opts o = {.qos_class = cls};
    void *data = NULL;
    size_t n = 0;
    int r = rrpc_call_sync(p->conn, "sink", p->buf, len, &o, &data, &n);
    if (r)
        fail_msg("call of %zu bytes in %s: %s (%s)", len, rrpc_class_name(cls), rrpc_strerror(r),
                 rrpc_ctx_last_error(p->cli));
    free(data);
}

static uint64_t cut(rrpc_ctx *ctx)
{
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(ctx, &st), 0);
    return st.qos_pieces_cut;
}

static uint64_t preempted(const struct pair *p)
{
    rrpc_stats s, c;
    assert_int_equal(rrpc_ctx_stats(p->srv, &s), 0);
    assert_int_equal(rrpc_ctx_stats(p->cli, &c), 0);
    return s.qos_turns_preempted + c.qos_turns_preempted;
}

/* A second application thread: 64 B low-latency calls until told to stop. */
struct prober {
    struct pair *p;
    pthread_t th;
    pthread_mutex_t mu;
    bool stop;
    unsigned calls;
    int err;
};

static void *probe_main(void *arg)
{
    struct prober *pr = arg;
    uint8_t b[64] = {0};
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_LOW_LATENCY};
    for (;;) {
        pthread_mutex_lock(&pr->mu);
        bool stop = pr->stop;
        pthread_mutex_unlock(&pr->mu);
        if (stop)
            return NULL;
        void *data = NULL;
        size_t n = 0;
        int r = rrpc_call_sync(pr->p->conn, "sink", b, sizeof(b), &o, &data, &n);
        free(data);
        pthread_mutex_lock(&pr->mu);
        pr->calls++;
        if (r && !pr->err)
            pr->err = r;
        pthread_mutex_unlock(&pr->mu);
    }
}

static void probe_start(struct prober *pr, struct pair *p)
{
    *pr = (struct prober){.p = p};
    pthread_mutex_init(&pr->mu, NULL);
    assert_int_equal(pthread_create(&pr->th, NULL, probe_main, pr), 0);
}

/* Stops the prober; how many calls it made (all of them succeeded). */
static unsigned probe_stop(struct prober *pr)
{
    pthread_mutex_lock(&pr->mu);
    pr->stop = true;
    pthread_mutex_unlock(&pr->mu);
    assert_int_equal(pthread_join(pr->th, NULL), 0);
    pthread_mutex_destroy(&pr->mu);
    if (pr->err)
        fail_msg("a low-latency call failed: %s", rrpc_strerror(pr->err));
    return pr->calls;
}

/* The handshake on the first socket, just before, leaves bulk its large
 * pieces (it used to make the connection "busy" for RRPC_TCP_BUSY_MS after
 * it came up: on a new connection the first 100 ms of bulk moved in 64 KiB
 * pieces, about 0.75x of what followed). */
static void test_a_new_connection_writes_bulk_in_large_pieces(void **state)
{
    struct pair *p = *state;
    call(p, RRPC_CLASS_BULK, BULK_BYTES);
    assert_int_equal(cut(p->cli), 0);
    assert_int_equal(cut(p->srv), 0);
}

/* A low-latency call just before: the bulk request is cut to 64 KiB
 * pieces (so the test above can fail, and isolation still holds). */
static void test_bulk_after_a_low_latency_call_is_written_in_small_pieces(void **state)
{
    struct pair *p = *state;
    call(p, RRPC_CLASS_LOW_LATENCY, 64);
    call(p, RRPC_CLASS_BULK, BULK_BYTES);
    /* at least one cut per 64 KiB but the last (a short write cuts again) */
    uint64_t n = cut(p->cli);
    if (n < BULK_BYTES / (64u << 10) - 1)
        fail_msg("%llu writes cut, expected at least %u", (unsigned long long)n,
                 BULK_BYTES / (64u << 10) - 1);
}

/* Keepalives every 20 ms on the first socket make no class busy either. */
static void test_keepalives_leave_bulk_its_large_pieces(void **state)
{
    struct pair *p = *state;
    rrpc_conn_stat s0, s1;
    assert_int_equal(rrpc_conn_stats(p->conn, &s0), 0);
    /* until a few probes and answers went both ways (5 s at most) */
    for (int i = 0; i < 500; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        assert_int_equal(rrpc_conn_stats(p->conn, &s1), 0);
        if (s1.frames_in >= s0.frames_in + 3 && s1.frames_out >= s0.frames_out + 3)
            break;
    }
    if (s1.frames_in < s0.frames_in + 3)
        fail_msg("no keepalives seen in 5 s (frames in %llu -> %llu)",
                 (unsigned long long)s0.frames_in, (unsigned long long)s1.frames_in);
    call(p, RRPC_CLASS_BULK, BULK_BYTES);
    assert_int_equal(cut(p->cli), 0);
}

/* Low-latency calls from another thread while bulk moves 8 MiB calls: some
 * turn of bulk (a read on the server, a write on the client) ends after a
 * piece because the first socket had input waiting.  No timing decides
 * the outcome, only how long it takes: up to 50 bulk calls. */
static void test_low_latency_input_ends_a_turn_of_bulk(void **state)
{
    struct pair *p = *state;
    call(p, RRPC_CLASS_LOW_LATENCY, 64);
    struct prober pr;
    probe_start(&pr, p);
    int i = 0;
    while (i < 50 && preempted(p) == 0) {
        call(p, RRPC_CLASS_BULK, BULK_BYTES);
        i++;
    }
    unsigned calls = probe_stop(&pr);
    uint64_t n = preempted(p);
    printf("# %llu turns preempted in %d bulk calls, %u low-latency calls\n",
           (unsigned long long)n, i, calls);
    if (n == 0)
        fail_msg("no turn of bulk preempted in %d calls of 8 MiB, with %u low-latency calls "
                 "beside them",
                 i, calls);
}

/* The same with RRPC_TCP_PREEMPT=0: turns end by time only. */
static void test_without_preempt_turns_end_by_time_only(void **state)
{
    struct pair *p = *state;
    call(p, RRPC_CLASS_LOW_LATENCY, 64);
    struct prober pr;
    probe_start(&pr, p);
    for (int i = 0; i < 8; i++)
        call(p, RRPC_CLASS_BULK, BULK_BYTES);
    unsigned calls = probe_stop(&pr);
    assert_true(calls > 0);
    assert_int_equal(preempted(p), 0);
    /* and isolation by piece size still holds */
    assert_true(cut(p->cli) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_new_connection_writes_bulk_in_large_pieces, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_bulk_after_a_low_latency_call_is_written_in_small_pieces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keepalives_leave_bulk_its_large_pieces,
                                        setup_keepalive, teardown),
        cmocka_unit_test_setup_teardown(test_low_latency_input_ends_a_turn_of_bulk, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_without_preempt_turns_end_by_time_only,
                                        setup_no_preempt, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

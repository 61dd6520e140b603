/* SPDX-License-Identifier: MIT */
/*
 * The core's state machine, credits and RPC engine driven over inproc://:
 * driven-mode contexts in this thread, no sockets and no sleeps.  Each
 * context runs only when the test calls rrpc_ctx_progress, so what one side
 * sent before the other ran is exactly countable.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <roce_rpc/rrpc.h>

/* What the server side and the callbacks saw. */
struct seen {
    int handled;
    rrpc_request *held[64];
    int nheld;
    int answers, answers_ok, last_status;
    int ups, downs, last_down_reason;
    rrpc_conn *server_conn;
};
static struct seen S;

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    S.handled++;
    assert_int_equal(rrpc_respond(req, p, len), 0);
}

static void h_hold(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    S.handled++;
    assert_true(S.nheld < 64);
    S.held[S.nheld++] = req;
}

static void answer_cb(const rrpc_result *res, void *user)
{
    (void)user;
    S.answers++;
    S.answers_ok += res->status == 0;
    S.last_status = res->status;
}

static void server_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)user;
    if (ev == RRPC_CONN_UP) {
        S.ups++;
        S.server_conn = c;
    } else {
        S.downs++;
        S.last_down_reason = reason;
        if (S.server_conn == c)
            S.server_conn = NULL;
    }
}

static int client_downs, client_down_reason, client_ups;
static void client_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)c, (void)user;
    if (ev == RRPC_CONN_UP) {
        client_ups++;
    } else {
        client_downs++;
        client_down_reason = reason;
    }
}

/* Runs @ctx's loop @n times without waiting. */
static void run(rrpc_ctx *ctx, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(rrpc_ctx_progress(ctx, 0), 0);
}

static void run_both(rrpc_ctx *a, rrpc_ctx *b, int n)
{
    for (int i = 0; i < n; i++) {
        run(a, 1);
        if (b != a)
            run(b, 1);
    }
}

/* A server context on inproc://@name and a client connected to it from
 * @cctx (which may be the same context); both driven. */
static rrpc_conn *setup(rrpc_ctx *sctx, rrpc_ctx *cctx, const char *name, rrpc_listener **ret_l)
{
    memset(&S, 0, sizeof(S));
    client_downs = client_ups = client_down_reason = 0;
    assert_int_equal(rrpc_register(sctx, "echo", h_echo, NULL), 0);
    assert_int_equal(rrpc_register(sctx, "hold", h_hold, NULL), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "inproc://%s", name);
    assert_int_equal(rrpc_listen(sctx, uri, server_event, NULL, ret_l), 0);
    rrpc_conn *c = NULL;
    assert_int_equal(rrpc_connect(cctx, uri, client_event, NULL, &c), 0);
    for (int i = 0; i < 100 && !(client_ups && S.ups); i++)
        run_both(cctx, sctx, 1);
    assert_int_equal(client_ups, 1);
    assert_int_equal(S.ups, 1);
    assert_string_equal(rrpc_conn_transport(c), "inproc");
    return c;
}

static void test_credits_block_a_sender_when_exhausted_and_resume_when_returned(void **state)
{
    (void)state;
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    /* The server grants the client 3 low_latency messages at a time. */
    int dscp, weight;
    assert_int_equal(rrpc_class_get(s, RRPC_CLASS_LOW_LATENCY, &dscp, &weight, NULL), 0);
    assert_int_equal(rrpc_class_set(s, RRPC_CLASS_LOW_LATENCY, dscp, weight, 3), 0);
    rrpc_listener *l;
    rrpc_conn *c = setup(s, cl, "credits", &l);

    for (int i = 0; i < 10; i++)
        assert_int_equal(rrpc_call(c, "echo", "x", 1, NULL, answer_cb, NULL), 0);
    run(cl, 20);   /* the client sends what its credit allows, then waits */
    run(s, 20);    /* the server serves what arrived; its credit goes back */
    assert_int_equal(S.handled, 3);
    run(s, 20);
    assert_int_equal(S.handled, 3); /* nothing more was sent */
    run(cl, 20);   /* the returned credit lets three more go */
    run(s, 20);
    assert_int_equal(S.handled, 6);
    run_both(cl, s, 50);
    assert_int_equal(S.handled, 10);
    assert_int_equal(S.answers_ok, 10);

    rrpc_conn_close(c);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

static void test_a_calls_deadline_fires_while_the_handler_holds_it(void **state)
{
    (void)state;
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    rrpc_listener *l;
    rrpc_conn *c = setup(ctx, ctx, "deadline", &l);
    rrpc_call_opts o = {.deadline_ms = 20};
    assert_int_equal(rrpc_call(c, "hold", NULL, 0, &o, answer_cb, NULL), 0);
    /* Wait on the context's fd with its own timeout: the deadline is a
     * timer of the context, so the fd wakes us when it is due. */
    int fd = rrpc_ctx_fd(ctx);
    assert_true(fd >= 0);
    int wakeups = 0;
    while (S.answers == 0 && wakeups < 1000) {
        int ms = -1;
        assert_int_equal(rrpc_ctx_timeout(ctx, &ms), 0);
        assert_true(ms >= 0); /* a deadline is running: there is a timer */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, ms);
        run(ctx, 1);
        wakeups++;
    }
    assert_int_equal(S.handled, 1);
    assert_int_equal(S.answers, 1);
    assert_int_equal(S.last_status, RRPC_E_DEADLINE);
    /* The late answer is dropped, not delivered twice. */
    assert_int_equal(rrpc_respond(S.held[0], "late", 4), 0);
    run(ctx, 10);
    assert_int_equal(S.answers, 1);

    rrpc_conn_close(c);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(ctx);
}

static void test_a_close_by_the_client_is_seen_by_the_server(void **state)
{
    (void)state;
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    rrpc_listener *l;
    rrpc_conn *c = setup(s, cl, "close-client", &l);
    rrpc_conn_close(c);
    run_both(cl, s, 20);
    assert_int_equal(S.downs, 1);
    assert_int_equal(S.last_down_reason, RRPC_E_CONN_LOST);
    assert_null(S.server_conn);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

static void test_a_close_by_the_server_fails_the_clients_pending_call(void **state)
{
    (void)state;
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    rrpc_listener *l;
    rrpc_conn *c = setup(s, cl, "close-server", &l);
    assert_int_equal(rrpc_call(c, "echo", "x", 1, NULL, answer_cb, NULL), 0);
    run(cl, 20); /* the request waits in the server's queue */
    rrpc_listener_close(l);
    rrpc_ctx_destroy(s); /* closes the server's end without serving it */
    run(cl, 20);
    assert_int_equal(S.handled, 0);
    assert_int_equal(client_downs, 1);
    assert_int_equal(client_down_reason, RRPC_E_CONN_LOST);
    assert_int_equal(S.answers, 1);
    assert_int_equal(S.last_status, RRPC_E_CONN_LOST);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cl);
}

static void test_a_connect_to_a_name_nobody_listens_on_is_refused_and_says_so(void **state)
{
    (void)state;
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    rrpc_conn *c = NULL;
    assert_int_equal(rrpc_connect(ctx, "inproc://nobody-here", NULL, NULL, &c), -ECONNREFUSED);
    assert_null(c);
    assert_non_null(strstr(rrpc_ctx_last_error(ctx), "no inproc listener named \"nobody-here\""));
    rrpc_ctx_destroy(ctx);
}

static void test_a_second_listener_on_a_name_in_use_is_refused(void **state)
{
    (void)state;
    rrpc_ctx *a, *b;
    assert_int_equal(rrpc_ctx_create(&a), 0);
    assert_int_equal(rrpc_ctx_create(&b), 0);
    rrpc_listener *l1 = NULL, *l2 = NULL;
    assert_int_equal(rrpc_listen(a, "inproc://taken", NULL, NULL, &l1), 0);
    assert_int_equal(rrpc_listen(b, "inproc://taken", NULL, NULL, &l2), -EADDRINUSE);
    assert_non_null(strstr(rrpc_ctx_last_error(b), "already exists"));
    /* Once closed, the name is free again. */
    rrpc_listener_close(l1);
    assert_int_equal(rrpc_listen(b, "inproc://taken", NULL, NULL, &l2), 0);
    rrpc_listener_close(l2);
    rrpc_ctx_destroy(b);
    rrpc_ctx_destroy(a);
}

static void test_a_connect_waiting_for_accept_is_refused_when_the_listener_closes(void **state)
{
    (void)state;
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    client_downs = client_down_reason = 0;
    rrpc_listener *l = NULL;
    assert_int_equal(rrpc_listen(s, "inproc://closing", NULL, NULL, &l), 0);
    rrpc_conn *c = NULL;
    assert_int_equal(rrpc_connect(cl, "inproc://closing", client_event, NULL, &c), 0);
    rrpc_listener_close(l); /* the server never ran: the connect is in its backlog */
    run(cl, 10);
    assert_int_equal(client_downs, 1);
    assert_int_equal(client_down_reason, -ECONNREFUSED);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

/* ---- a one-sided operation that fails locally still says what failed ---- */

static rrpc_ctx *os_ctx; /* whose last error the callbacks read */
static int os_done, os_status;
static char os_why[512], os_down_why[512];

static void os_cb(int status, void *user)
{
    (void)user;
    os_done++;
    os_status = status;
    snprintf(os_why, sizeof(os_why), "%s", rrpc_ctx_last_error(os_ctx));
}

static void os_client_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    client_event(c, ev, reason, user);
    if (ev == RRPC_CONN_DOWN)
        snprintf(os_down_why, sizeof(os_down_why), "%s", rrpc_ctx_last_error(os_ctx));
}

/* A client of @s from @cl with a WRITE of 100 bytes at offset 64 of a
 * server region started and its frames sent; the server has not run since.
 * *@ret_addr: the remote address the WRITE goes to. */
static rrpc_conn *os_start_write(rrpc_ctx *s, rrpc_ctx *cl, const char *name, rrpc_listener **l,
                                 rrpc_region **sr, rrpc_region **lr, uint64_t *ret_addr)
{
    static uint8_t smem[4096], lmem[4096];
    memset(&S, 0, sizeof(S));
    client_downs = client_ups = client_down_reason = 0;
    os_ctx = cl;
    os_done = os_status = 0;
    os_why[0] = os_down_why[0] = 0;
    char uri[64];
    snprintf(uri, sizeof(uri), "inproc://%s", name);
    assert_int_equal(rrpc_listen(s, uri, server_event, NULL, l), 0);
    rrpc_conn *c = NULL;
    assert_int_equal(rrpc_connect(cl, uri, os_client_event, NULL, &c), 0);
    for (int i = 0; i < 100 && !(client_ups && S.ups); i++)
        run_both(cl, s, 1);
    assert_int_equal(client_ups, 1);
    assert_int_equal(rrpc_mem_reg(s, smem, sizeof(smem), RRPC_ACCESS_REMOTE_WRITE, sr), 0);
    assert_int_equal(rrpc_mem_reg(cl, lmem, sizeof(lmem), 0, lr), 0);
    rrpc_token t;
    assert_int_equal(rrpc_region_token(*sr, S.server_conn, &t), 0);
    assert_int_equal(rrpc_write(c, *lr, 0, &t, 64, 100, NULL, os_cb, NULL), 0);
    run(cl, 5);
    assert_int_equal(os_done, 0);
    *ret_addr = t.addr + 64;
    return c;
}

static void test_a_one_sided_op_lost_with_its_connection_says_what_and_why(void **state)
{
    (void)state;
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    rrpc_listener *l;
    rrpc_region *sr, *lr;
    uint64_t addr;
    rrpc_conn *c = os_start_write(s, cl, "os-lost", &l, &sr, &lr, &addr);
    rrpc_mem_dereg(sr);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(s); /* the server's end goes without answering */
    run(cl, 20);
    assert_int_equal(os_done, 1);
    assert_int_equal(os_status, RRPC_E_CONN_LOST);
    char want[96];
    snprintf(want, sizeof(want), "WRITE of 100 bytes at remote 0x%llx failed",
             (unsigned long long)addr);
    printf("# the WRITE's detail: %s\n# the DOWN's detail: %s\n", os_why, os_down_why);
    assert_non_null(strstr(os_why, want));
    assert_int_equal(client_downs, 1);
    assert_non_null(strstr(os_down_why, "connection down"));
    rrpc_conn_close(c);
    rrpc_mem_dereg(lr);
    rrpc_ctx_destroy(cl);
}

static void test_a_one_sided_op_past_its_deadline_says_what_and_why(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_DEADLINE_MS", "20"), 0);
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &cl), 0);
    rrpc_config_destroy(cfg);
    rrpc_listener *l;
    rrpc_region *sr, *lr;
    uint64_t addr;
    rrpc_conn *c = os_start_write(s, cl, "os-deadline", &l, &sr, &lr, &addr);
    /* The server never runs: only the client's deadline can end it. */
    int fd = rrpc_ctx_fd(cl);
    assert_true(fd >= 0);
    for (int i = 0; i < 1000 && !os_done; i++) {
        int ms = -1;
        assert_int_equal(rrpc_ctx_timeout(cl, &ms), 0);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, ms);
        run(cl, 1);
    }
    assert_int_equal(os_done, 1);
    assert_int_equal(os_status, RRPC_E_DEADLINE);
    char want[96];
    snprintf(want, sizeof(want), "WRITE of 100 bytes at remote 0x%llx failed",
             (unsigned long long)addr);
    printf("# the WRITE's detail: %s\n", os_why);
    assert_non_null(strstr(os_why, want));
    assert_non_null(strstr(os_why, "deadline of 20 ms"));
    rrpc_conn_close(c);
    rrpc_mem_dereg(lr);
    rrpc_mem_dereg(sr);
    rrpc_listener_close(l);
    run_both(cl, s, 20);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_credits_block_a_sender_when_exhausted_and_resume_when_returned),
        cmocka_unit_test(test_a_calls_deadline_fires_while_the_handler_holds_it),
        cmocka_unit_test(test_a_close_by_the_client_is_seen_by_the_server),
        cmocka_unit_test(test_a_close_by_the_server_fails_the_clients_pending_call),
        cmocka_unit_test(test_a_connect_to_a_name_nobody_listens_on_is_refused_and_says_so),
        cmocka_unit_test(test_a_second_listener_on_a_name_in_use_is_refused),
        cmocka_unit_test(test_a_connect_waiting_for_accept_is_refused_when_the_listener_closes),
        cmocka_unit_test(test_a_one_sided_op_lost_with_its_connection_says_what_and_why),
        cmocka_unit_test(test_a_one_sided_op_past_its_deadline_says_what_and_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

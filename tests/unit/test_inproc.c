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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

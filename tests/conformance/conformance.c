/* SPDX-License-Identifier: MIT */
/*
 * The conformance suite: written once against the public API, run once per
 * transport.  The transport and addresses come from the environment
 * (tests/common/test_uri.h):
 *   RRPC_TEST_TRANSPORT   tcp (default) | verbs | inproc
 *   RRPC_TEST_SERVER      the server's address (default 127.0.0.1)
 *   RRPC_TEST_CLIENT_SRC  the client's source address (optional; in the
 *                         Soft-RoCE VM 10.77.0.1 so traffic crosses the veth)
 *   RRPC_TEST_MODE        thread (default) | driven
 * Server and client are two contexts in this process, so the server's
 * memory can be checked directly.  Each runs on its own loop thread, or,
 * driven, on a thread of the suite's that sleeps in poll() on the context's
 * fd for no longer than rrpc_ctx_timeout says and calls rrpc_ctx_progress,
 * as an application's own event loop would.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <dirent.h>
#include <unistd.h>

#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "../common/test_uri.h"
#include "../common/test_sync.h"
#include "raw_peer.h"

static struct {
    const char *transport;
    const char *server_addr;
    char uri[256];
    rrpc_ctx *sctx, *cctx;
    rrpc_listener *lis;
    int port;
    /* server side bookkeeping */
    rrpc_conn *last_server_conn;
    int server_ups, server_downs, last_down_reason;
    rrpc_request *held;
    uint32_t last_imm;
    int notifies;
    int notify_disorder; /* a run of 0x1000 + i notifies out of order */
    int call_back_on_up; /* the server calls the client from its UP callback */
    int called_back;
    rrpc_region *sregion;
    uint8_t *smem;
    int blocking, release;    /* h_hold_loop */
    int check_good, check_bad; /* h_check */
    int late_started, late_done; /* h_async's threads, waited for before the teardown */
} T;

#define SMEM_LEN (4u << 20)

/* ---- server handlers ------------------------------------------------------ */

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    assert_int_equal(rrpc_respond(req, p, len), 0);
}

/* An echo that takes 2 ms: a pipelining caller has all its credit in
 * flight however fast the transport answers, so the lending tests do not
 * depend on the machine's speed. */
static void h_echo_2ms(rrpc_request *req, const void *p, size_t len, void *user)
{
    usleep(2000);
    assert_int_equal(rrpc_respond(req, p, len), 0);
}

static void h_fail(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond_error(req, 42, "the handler refuses politely");
}

static void h_hold(rrpc_request *req, const void *p, size_t len, void *user)
{
    lock();
    T.held = req;
    unlock();
}

static void *late_reply(void *arg)
{
    usleep(10000);
    rrpc_request *req = arg;
    uint8_t buf[8];
    memcpy(buf, "threaded", 8);
    rrpc_respond(req, buf, sizeof(buf));
    lock();
    T.late_done++; /* out of the library: the context may go */
    unlock();
    return NULL;
}

static void h_slow(rrpc_request *req, const void *p, size_t len, void *user)
{
    usleep(50000);
    rrpc_respond(req, "ok", 2);
}

static void h_async(rrpc_request *req, const void *p, size_t len, void *user)
{
    pthread_t t;
    lock();
    T.late_started++;
    unlock();
    assert_int_equal(pthread_create(&t, NULL, late_reply, req), 0);
    pthread_detach(t);
}

static void h_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_token t;
    uint8_t buf[RRPC_TOKEN_SIZE];
    assert_int_equal(rrpc_region_token(T.sregion, rrpc_request_conn(req), &t), 0);
    rrpc_token_encode(&t, buf);
    rrpc_respond(req, buf, sizeof(buf));
}

static void h_class(rrpc_request *req, const void *p, size_t len, void *user)
{
    int32_t cls = rrpc_request_class(req);
    rrpc_respond(req, &cls, sizeof(cls));
}

static void called_back_cb(const rrpc_result *res, void *user)
{
    lock();
    if (res->status == 0 && res->len == 2 && memcmp(res->data, "hi", 2) == 0)
        T.called_back++;
    else
        T.called_back = -1000;
    unlock();
}

/* A blocking call from inside a handler must refuse, not hang. */
static void h_reenter(rrpc_request *req, const void *p, size_t len, void *user)
{
    void *out = NULL;
    size_t n = 0;
    int r = rrpc_call_sync(rrpc_request_conn(req), "echo", "x", 1, NULL, &out, &n);
    int32_t code = r;
    rrpc_respond(req, &code, sizeof(code));
}

/* Holds the server's loop thread until the test sets T.release: nothing is
 * read on any connection of the server meanwhile.  Registered with
 * RRPC_HANDLER_CREDIT_ON_ANSWER: such a handler runs in place, where no
 * other thread can take the loop over from it (core/relief.c), so it holds
 * the loop however long it runs. */
static void h_hold_loop(rrpc_request *req, const void *p, size_t len, void *user)
{
    lock();
    T.blocking++;
    unlock();
    while (wait_for(&T.release, 1, 100) < 1)
        ;
    rrpc_respond(req, "go", 2);
}

/* Counts requests whose payload is fill(len, len) and those that are not. */
static void h_check(rrpc_request *req, const void *p, size_t len, void *user)
{
    uint8_t *want = malloc(len ? len : 1);
    assert_non_null(want);
    fill(want, len, (uint32_t)len);
    bool good = memcmp(p, want, len) == 0;
    free(want);
    lock();
    if (good)
        T.check_good++;
    else
        T.check_bad++;
    unlock();
    rrpc_respond(req, NULL, 0);
}

static void server_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    lock();
    if (ev == RRPC_CONN_UP) {
        T.server_ups++;
        T.last_server_conn = c;
        if (T.call_back_on_up)
            rrpc_call(c, "echo", "hi", 2, NULL, called_back_cb, NULL);
    } else {
        T.server_downs++;
        T.last_down_reason = reason;
        if (T.last_server_conn == c)
            T.last_server_conn = NULL;
    }
    unlock();
}

static void server_notify(rrpc_conn *c, uint32_t imm, void *user)
{
    lock();
    if (imm > 0x1000 && imm < 0x2000 && imm != T.last_imm + 1)
        T.notify_disorder++;
    T.last_imm = imm;
    T.notifies++;
    unlock();
}

/* ---- driven mode: the suite's own loop per context ---------------------- */

static struct driver {
    rrpc_ctx *ctx;
    pthread_t th;
    volatile bool stop;
    int busy; /* progress said -EBUSY: a blocking call ran the loop itself */
} drivers[2];

static void *drive(void *arg)
{
    struct driver *d = arg;
    int fd = rrpc_ctx_fd(d->ctx);
    if (fd < 0) {
        fprintf(stderr, "rrpc_ctx_fd: %s\n", rrpc_ctx_last_error(d->ctx));
        abort();
    }
    while (!d->stop) {
        int ms = -1;
        if (rrpc_ctx_timeout(d->ctx, &ms) != 0)
            abort();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, ms < 0 || ms > 50 ? 50 : ms); /* 50: to see d->stop */
        int r = rrpc_ctx_progress(d->ctx, 0);
        if (r == -EBUSY) {
            d->busy++;
            sched_yield();
        } else if (r != 0) {
            fprintf(stderr, "rrpc_ctx_progress: %s\n", rrpc_ctx_last_error(d->ctx));
            abort();
        }
    }
    return NULL;
}

static bool driven_mode(void)
{
    const char *m = getenv("RRPC_TEST_MODE");
    return m && !strcmp(m, "driven");
}

/* Runs @a and @b: on their loop threads, or driven by threads of ours. */
static int run_contexts(rrpc_ctx *a, rrpc_ctx *b)
{
    if (!driven_mode())
        return rrpc_ctx_start_thread(a) || rrpc_ctx_start_thread(b) ? -1 : 0;
    drivers[0] = (struct driver){.ctx = a};
    drivers[1] = (struct driver){.ctx = b};
    for (int i = 0; i < 2; i++)
        if (pthread_create(&drivers[i].th, NULL, drive, &drivers[i]))
            return -1;
    return 0;
}

static void stop_drivers(void)
{
    if (!driven_mode())
        return;
    for (int i = 0; i < 2; i++) {
        drivers[i].stop = true;
        pthread_join(drivers[i].th, NULL);
    }
    printf("# driven: progress found another thread in the loop %d and %d times\n",
           drivers[0].busy, drivers[1].busy);
}

static int group_setup(void **state)
{
    T.transport = test_transport();
    T.server_addr = test_server_addr();
    if (rrpc_ctx_create(&T.sctx) || rrpc_ctx_create(&T.cctx))
        return -1;
    static const char *const methods[] = {"echo",  "fail",  "hold",    "async",
                                          "token", "class", "reenter", "slow"};
    rrpc_handler_fn fns[] = {h_echo, h_fail,  h_hold,    h_async,
                             h_token, h_class, h_reenter, h_slow};
    for (int i = 0; i < 8; i++)
        if (rrpc_register(T.sctx, methods[i], fns[i], NULL))
            return -1;
    rrpc_ctx_set_notify(T.sctx, server_notify, NULL);
    rrpc_register_opts in_place = {.flags = RRPC_HANDLER_CREDIT_ON_ANSWER};
    if (rrpc_register_with(T.sctx, "hold_loop", h_hold_loop, NULL, &in_place) ||
        rrpc_register(T.sctx, "check", h_check, NULL))
        return -1;
    if (rrpc_register(T.cctx, "echo", h_echo, NULL)) /* clients serve too */
        return -1;
    T.smem = calloc(1, SMEM_LEN);
    if (rrpc_mem_reg(T.sctx, T.smem, SMEM_LEN, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE,
                     &T.sregion))
        return -1;
    char luri[256];
    test_listen_uri(luri, sizeof(luri));
    int r = rrpc_listen(T.sctx, luri, server_event, NULL, &T.lis);
    if (r) {
        fprintf(stderr, "listen %s: %s: %s\n", luri, rrpc_err_name(r),
                rrpc_ctx_last_error(T.sctx));
        return -1;
    }
    T.port = rrpc_listener_port(T.lis);
    test_connect_uri(T.uri, sizeof(T.uri), T.port);
    if (run_contexts(T.sctx, T.cctx))
        return -1;
    printf("# conformance: transport %s, server %s, %s mode\n", T.transport, T.uri,
           driven_mode() ? "driven" : "thread");
    return 0;
}

static int group_teardown(void **state)
{
    lock();
    int late = T.late_started;
    unlock();
    wait_for(&T.late_done, late, 20000); /* a late answer's thread may still be in rrpc_respond */
    stop_drivers();
    rrpc_ctx_destroy(T.cctx);
    rrpc_ctx_destroy(T.sctx);
    free(T.smem);
    return 0;
}

static rrpc_conn *connect_client(rrpc_ctx *ctx)
{
    rrpc_conn *c = NULL;
    int r = rrpc_connect_sync(ctx, T.uri, 10000, NULL, NULL, &c);
    if (r)
        fprintf(stderr, "connect %s: %s: %s\n", T.uri, rrpc_err_name(r), rrpc_ctx_last_error(ctx));
    assert_int_equal(r, 0);
    assert_string_equal(rrpc_conn_transport(c), T.transport);
    return c;
}

/* Listens on a free port of the test server address with @s; *@curi gets
 * the URI a client uses (with the source address, when one is set). */
static rrpc_listener *listen_any(rrpc_ctx *s, char *curi, size_t n)
{
    char luri[256];
    test_listen_uri(luri, sizeof(luri));
    rrpc_listener *l = NULL;
    assert_int_equal(rrpc_listen(s, luri, NULL, NULL, &l), 0);
    test_connect_uri(curi, n, rrpc_listener_port(l));
    return l;
}

static void echo_ok(rrpc_conn *c, size_t n, int cls)
{
    uint8_t *buf = malloc(n ? n : 1);
    fill(buf, n, (uint32_t)n);
    void *out = NULL;
    size_t outlen = 0;
    rrpc_call_opts o = {.qos_class = cls};
    int r = rrpc_call_sync(c, "echo", buf, n, &o, &out, &outlen);
    if (r)
        fprintf(stderr, "echo %zu: %s: %s\n", n, rrpc_err_name(r), rrpc_ctx_last_error(T.cctx));
    assert_int_equal(r, 0);
    assert_int_equal(outlen, n);
    assert_memory_equal(out, buf, n);
    free(out);
    free(buf);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_echo_returns_every_size_from_0_to_4_MiB(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    static const size_t sizes[] = {0, 1, 63, 64, 4095, 4096, 8193, 65536, 1u << 20, 4u << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        echo_ok(c, sizes[i], i % 2 ? RRPC_CLASS_BULK : RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c);
}

struct pipe_state {
    int done, bad;
    size_t expect_len;
};

static void pipe_cb(const rrpc_result *res, void *user)
{
    struct pipe_state *ps = user;
    lock();
    if (res->status != 0 || res->len != ps->expect_len) {
        if (ps->bad < 3) /* what went wrong, for a failure that is hard to reproduce */
            printf("# pipelined call failed: %s (%d), %zu bytes of %zu: %s\n",
                   rrpc_err_name(res->status), res->status, res->len, ps->expect_len,
                   res->message ? res->message : "-");
        ps->bad++;
    }
    ps->done++;
    unlock();
}

struct idx_ctx {
    struct pipe_state *ps;
    uint64_t want;
};

static void pipe_check_cb(const rrpc_result *res, void *user)
{
    struct idx_ctx *ic = user;
    uint64_t got = 0;
    if (res->status == 0 && res->len == 8)
        memcpy(&got, res->data, 8);
    lock();
    if (res->status != 0 || got != ic->want)
        ic->ps->bad++;
    ic->ps->done++;
    unlock();
}

static void test_the_server_may_call_the_client_the_moment_it_is_up(void **state)
{
    /* The passive side is up after the last JOIN, possibly before the active
     * side has every JOIN_ACK: its first frames must not be lost or refused. */
    for (int i = 0; i < 20; i++) {
        lock();
        T.call_back_on_up = 1;
        int before = T.called_back;
        unlock();
        rrpc_conn *c = connect_client(T.cctx);
        assert_int_equal(wait_for(&T.called_back, before + 1, 10000), before + 1);
        echo_ok(c, 10, RRPC_CLASS_CONTROL);
        rrpc_conn_close(c);
    }
    lock();
    T.call_back_on_up = 0;
    unlock();
}

static void test_a_driven_mode_server_serves_when_its_fd_is_polled(void **state)
{
    rrpc_ctx *s;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_register(s, "echo", h_echo, NULL), 0);
    char curi[300];
    listen_any(s, curi, sizeof(curi)); /* closed with its context */
    int fd = rrpc_ctx_fd(s);
    assert_true(fd >= 0);
    /* The client side (thread mode) connects and calls asynchronously; this
     * thread runs the server only when its fd says there is work. */
    rrpc_conn *c = NULL;
    struct pipe_state ps = {.expect_len = 8};
    int sent = 0;
    assert_int_equal(rrpc_connect(T.cctx, curi, NULL, NULL, &c), 0);
    for (int i = 0; i < 2000 && wait_for(&ps.done, 100, 0) < 100; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 10);
        assert_int_equal(rrpc_ctx_progress(s, 0), 0);
        /* one call at a time, each after the previous answer (counted on
         * the client's loop thread: read under the tests' lock) */
        if (wait_for(&ps.done, sent, 0) == sent && sent < 100 &&
            rrpc_call(c, "echo", "12345678", 8, NULL, pipe_cb, &ps) == 0)
            sent++;
    }
    assert_int_equal(ps.done, 100);
    assert_int_equal(ps.bad, 0);
    assert_int_equal(rrpc_ctx_start_thread(s), 0); /* a driven context may switch to thread mode */
    assert_int_equal(rrpc_ctx_fd(s), -EBUSY);
    assert_int_equal(rrpc_ctx_progress(s, 0), -EBUSY);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

static int driven_served, driven_ups;
static void h_driven_count(rrpc_request *req, const void *p, size_t len, void *user)
{
    lock();
    driven_served++;
    unlock();
    rrpc_respond(req, p, len);
}

static void driven_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    lock();
    if (ev == RRPC_CONN_UP)
        driven_ups++;
    unlock();
}

/* Waits on @fd alone and progresses @s until *@counter reaches @want: 0, or
 * -1 when the fd stayed silent for a generous 10 s while work waited for @s
 * (a wake-up was lost: no timer of its own runs to make up for it). */
static int drive_until(rrpc_ctx *s, int fd, int *counter, int want)
{
    for (int i = 0; i < 100000; i++) {
        lock();
        int v = *counter;
        unlock();
        if (v >= want)
            return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) == 0)
            return -1;
        assert_int_equal(rrpc_ctx_progress(s, 0), 0);
    }
    return -1;
}

/* After @s served a call: runs it while its fd says it has work (the answer
 * may take more passes to leave), then waits for the caller's callback. */
static int drive_then_wait(rrpc_ctx *s, int fd, int *counter, int want)
{
    for (int i = 0; i < 100000; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 0)
            break;
        assert_int_equal(rrpc_ctx_progress(s, 0), 0);
    }
    return wait_for(counter, want, 10000) >= want ? 0 : -1;
}

/* A context without keepalives (so no timer wakes it but its work). */
static rrpc_ctx *ctx_without_timers(void)
{
    rrpc_config *cfg;
    rrpc_ctx *x = NULL;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_KEEPALIVE_MS", "0"), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &x), 0);
    rrpc_config_destroy(cfg);
    return x;
}

/* A driven server that waits on its fd alone, with no timeout of its own,
 * serves a thread-mode client: the fd must become readable for the
 * connection and for each call, whether the peer's frames come through a
 * socket or (inproc) are handed over by the peer's thread. */
static void test_a_driven_mode_servers_fd_wakes_for_each_call_from_another_thread(void **state)
{
    rrpc_ctx *s = ctx_without_timers(), *cl = ctx_without_timers();
    assert_int_equal(rrpc_ctx_start_thread(cl), 0);
    assert_int_equal(rrpc_register(s, "count", h_driven_count, NULL), 0);
    char luri[256], curi[300];
    test_listen_uri(luri, sizeof(luri));
    rrpc_listener *l = NULL;
    assert_int_equal(rrpc_listen(s, luri, driven_event, NULL, &l), 0);
    test_connect_uri(curi, sizeof(curi), rrpc_listener_port(l));
    int fd = rrpc_ctx_fd(s);
    assert_true(fd >= 0);
    lock();
    driven_served = driven_ups = 0;
    unlock();
    rrpc_conn *c = NULL;
    assert_int_equal(rrpc_connect(cl, curi, NULL, NULL, &c), 0);
    assert_int_equal(drive_until(s, fd, &driven_ups, 1), 0);
    struct pipe_state ps = {.expect_len = 8};
    for (int i = 0; i < 200; i++) {
        assert_int_equal(rrpc_call(c, "count", "12345678", 8, NULL, pipe_cb, &ps), 0);
        assert_int_equal(drive_until(s, fd, &driven_served, i + 1), 0);
        assert_int_equal(drive_then_wait(s, fd, &ps.done, i + 1), 0);
    }
    assert_int_equal(ps.bad, 0);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

static int drover_done;
static void *drive_once(void *arg)
{
    int r = rrpc_ctx_progress(arg, -1); /* waits in the loop for one event */
    lock();
    drover_done = r == 0 ? 1 : -1;
    unlock();
    return NULL;
}

/* One loop, one thread in it: while another thread waits inside the loop
 * (rrpc_ctx_progress, or a blocking call driving it), a loop thread must not
 * start on it; the switch is made between two progress calls. */
static void test_thread_mode_is_refused_while_another_thread_drives_the_loop(void **state)
{
    /* The other thread may not get in (this thread was inside: its
     * progress says -EBUSY) or leave early (a wake-up this thread's own
     * progress calls left pending ends its wait): then the switch is
     * legitimately allowed, and the attempt is made again on a new context.
     * A switch allowed while it is inside makes libev abort the test. */
    int refused = 0;
    for (int attempt = 0; attempt < 50 && !refused; attempt++) {
        rrpc_ctx *s;
        assert_int_equal(rrpc_ctx_create(&s), 0);
        lock();
        drover_done = 0;
        unlock();
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, drive_once, s), 0);
        int r = 0, out = 0;
        for (int i = 0; i < 1000000 && r != -EBUSY && !out; i++) {
            r = rrpc_ctx_progress(s, 0); /* -EBUSY once the other thread is in */
            if (r != -EBUSY)
                sched_yield();
            lock();
            out = drover_done;
            unlock();
        }
        int started = r == -EBUSY ? rrpc_ctx_start_thread(s) : 1;
        /* Let the other thread out: a change from this thread wakes the loop. */
        for (int i = 0; i < 1000 && wait_for(&drover_done, 1, 10) == 0; i++)
            rrpc_ctx_set_log(s, -1, NULL, NULL);
        pthread_join(t, NULL);
        if (started == -EBUSY) {
            assert_int_equal(drover_done, 1); /* it was inside, and came out well */
            refused++;
            /* Between progress calls the switch is allowed. */
            assert_int_equal(rrpc_ctx_start_thread(s), 0);
        }
        rrpc_ctx_destroy(s);
    }
    assert_int_equal(refused, 1);
}

static int answered_then_counted;
static void h_answer_then_count(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond(req, p, len); /* on its way to the caller when counted */
    lock();
    answered_then_counted++;
    unlock();
}

struct guard {
    rrpc_ctx *ctx;
    int returned, stuck;
};

/* Waits a generous 10 s for the guarded rrpc_ctx_progress to return; if it
 * has not, counts it stuck and lets it out (a change from this thread
 * wakes the loop). */
static void *progress_guard(void *arg)
{
    struct guard *g = arg;
    if (wait_for(&g->returned, 1, 10000) >= 1)
        return NULL;
    lock();
    g->stuck = 1;
    unlock();
    while (wait_for(&g->returned, 1, 10) < 1)
        rrpc_ctx_set_log(g->ctx, -1, NULL, NULL);
    return NULL;
}

/* rrpc_ctx_progress(ctx, -1) with the guard: whether it returned by itself. */
static bool progress_returns(rrpc_ctx *ctx)
{
    struct guard g = {.ctx = ctx};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, progress_guard, &g), 0);
    assert_int_equal(rrpc_ctx_progress(ctx, -1), 0);
    lock();
    g.returned = 1;
    unlock();
    pthread_join(t, NULL);
    return !g.stuck;
}

/* "Waits for one event": an answer that had already arrived when the
 * application made another call between two progress calls (the call's own
 * libev pass finds it and leaves it pending) is that event; progress runs its
 * callback and returns, rather than run it and then sleep for another. */
static void test_driven_progress_returns_after_an_answer_found_between_two_calls(void **state)
{
    rrpc_ctx *cl = ctx_without_timers();
    assert_int_equal(rrpc_register(T.sctx, "answer_then_count", h_answer_then_count, NULL), 0);
    lock();
    answered_then_counted = 0;
    unlock();
    int fd = rrpc_ctx_fd(cl);
    assert_true(fd >= 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(cl, T.uri, 10000, NULL, NULL, &c), 0);
    struct pipe_state ps = {.expect_len = 8};
    rrpc_call_opts nodeadline = {.deadline_ms = -1};
    int stuck = 0;
    for (int i = 0; i < 20 && !stuck; i++) {
        assert_int_equal(rrpc_call(c, "answer_then_count", "12345678", 8, &nodeadline, pipe_cb,
                                   &ps), 0);
        assert_int_equal(wait_for(&answered_then_counted, i + 1, 10000), i + 1);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 10000), 1); /* the answer is here */
        rrpc_ctx_set_log(cl, -1, NULL, NULL); /* any call between two progress calls */
        while (wait_for(&ps.done, i + 1, 0) < i + 1 && !stuck)
            stuck = !progress_returns(cl);
    }
    assert_int_equal(stuck, 0);
    assert_int_equal(ps.bad, 0);
    assert_int_equal(rrpc_unregister(T.sctx, "answer_then_count"), 0);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cl);
}

static void test_a_driven_mode_client_sync_call_drives_its_own_loop(void **state)
{
    rrpc_ctx *cl;
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(cl, T.uri, 10000, NULL, NULL, &c), 0);
    for (int i = 0; i < 50; i++) {
        void *out = NULL;
        size_t n = 0;
        assert_int_equal(rrpc_call_sync(c, "echo", &i, sizeof(i), NULL, &out, &n), 0);
        assert_int_equal(n, sizeof(i));
        assert_memory_equal(out, &i, sizeof(i));
        free(out);
    }
    rrpc_ctx_destroy(cl);
}

static void test_a_blocking_call_from_a_handler_is_refused_not_hung(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "reenter", NULL, 0, NULL, &out, &n), 0);
    int32_t code;
    assert_int_equal(n, sizeof(code));
    memcpy(&code, out, sizeof(code));
    assert_int_equal(code, RRPC_E_DEADLOCK);
    free(out);
    rrpc_conn_close(c);
}

static int handler_runs;
static void h_count(rrpc_request *req, const void *p, size_t len, void *user)
{
    lock();
    handler_runs++;
    unlock();
    rrpc_respond(req, p, len);
}

static int verify_ticket(void *user, const void *t, size_t len, char *why, size_t whylen)
{
    if (len == 4 && memcmp(t, "good", 4) == 0)
        return 0;
    snprintf(why, whylen, "ticket \"%.*s\" is not valid here", (int)len, (const char *)t);
    return RRPC_E_TICKET;
}

/* A server context whose connections need the ticket "good", serving
 * "count" on its own thread; its URI in @curi.  Destroy it when done. */
static rrpc_ctx *ticket_server(char *curi, size_t len)
{
    rrpc_ctx *s;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_register(s, "count", h_count, NULL), 0);
    assert_int_equal(rrpc_ctx_require_ticket(s, verify_ticket, NULL), 0);
    listen_any(s, curi, len); /* closed with its context */
    assert_int_equal(rrpc_ctx_require_ticket(s, verify_ticket, NULL), -EBUSY);
    assert_int_equal(rrpc_ctx_start_thread(s), 0);
    handler_runs = 0;
    return s;
}

static void test_a_server_requiring_tickets_runs_no_handler_without_a_good_one(void **state)
{
    char curi[300];
    rrpc_ctx *s = ticket_server(curi, sizeof(curi));
    void *out = NULL;
    size_t n = 0;
    rrpc_conn *c;
    /* a good ticket: up, and calls work */
    assert_int_equal(rrpc_connect_ticket(T.cctx, curi, "good", 4, 10000, NULL, NULL, &c), 0);
    assert_int_equal(rrpc_call_sync(c, "count", "a", 1, NULL, &out, &n), 0);
    free(out);
    rrpc_conn_close(c);
    assert_int_equal(handler_runs, 1);
    /* a bad one: refused, with the server's reason */
    assert_int_equal(rrpc_connect_ticket(T.cctx, curi, "evil", 4, 10000, NULL, NULL, &c),
                     RRPC_E_TICKET);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "\"evil\" is not valid here"));
    /* none at all: the first call ends the connection, the handler never runs */
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    assert_true(rrpc_call_sync(c, "count", "b", 1, NULL, &out, &n) < 0);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "requires a connection ticket"));
    assert_int_equal(handler_runs, 1);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

/* What one asynchronous connect saw, under test_mu: UP, or DOWN's reason. */
struct async_ev {
    int up, down_reason, events;
};

static void async_connect_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)c;
    struct async_ev *e = user;
    lock();
    if (ev == RRPC_CONN_UP)
        e->up = 1;
    else if (!e->up)
        e->down_reason = reason;
    e->events++;
    unlock();
}

static void test_connect_with_options_presents_its_ticket_asynchronously(void **state)
{
    char curi[300];
    rrpc_ctx *s = ticket_server(curi, sizeof(curi));

    /* A good ticket, asynchronously: UP, then calls run. */
    rrpc_connect_opts o = {.ticket = "good", .ticket_len = 4, .timeout_ms = 10000};
    rrpc_conn *c = NULL;
    /* Static: the DOWN that follows rrpc_conn_close may come after this returns. */
    static struct async_ev good, evil;
    lock();
    good = (struct async_ev){0};
    evil = (struct async_ev){0};
    unlock();
    assert_int_equal(rrpc_connect_with(T.cctx, curi, &o, async_connect_event, &good, &c), 0);
    assert_true(wait_for(&good.events, 1, 10000) >= 1);
    assert_int_equal(good.up, 1);
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "count", "a", 1, NULL, &out, &n), 0);
    free(out);
    rrpc_conn_close(c);
    assert_int_equal(handler_runs, 1);

    /* A bad one, asynchronously: DOWN with RRPC_E_TICKET, no handler ran. */
    o.ticket = "evil";
    assert_int_equal(rrpc_connect_with(T.cctx, curi, &o, async_connect_event, &evil, &c), 0);
    assert_true(wait_for(&evil.events, 1, 10000) >= 1);
    assert_int_equal(evil.up, 0);
    assert_int_equal(evil.down_reason, RRPC_E_TICKET);
    rrpc_conn_close(c);
    assert_int_equal(handler_runs, 1);

    /* The blocking form with the same options. */
    o.ticket = "good";
    assert_int_equal(rrpc_connect_with_sync(T.cctx, curi, &o, NULL, NULL, &c), 0);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

static void test_connect_options_out_of_their_rules_are_refused_before_the_wire(void **state)
{
    rrpc_conn *c = NULL;
    rrpc_connect_opts o = {.reserved = {0, 0, 7, 0}};
    assert_int_equal(rrpc_connect_with(T.cctx, T.uri, &o, NULL, NULL, &c), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "reserved[2]"));
    rrpc_connect_opts t = {.ticket = "good"}; /* no length */
    assert_int_equal(rrpc_connect_with_sync(T.cctx, T.uri, &t, NULL, NULL, &c), -EINVAL);
    rrpc_connect_opts neg = {.timeout_ms = -5};
    assert_int_equal(rrpc_connect_with_sync(T.cctx, T.uri, &neg, NULL, NULL, &c), -EINVAL);
    rrpc_connect_opts src = {.src = "127.0.0.1"};
    assert_int_equal(rrpc_connect_with(T.cctx, "tcp://127.0.0.1:9?src=127.0.0.1", &src, NULL, NULL,
                                       &c),
                     -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "source address once"));
    assert_null(c);
    /* A zeroed struct is every default: the same as rrpc_connect_sync. */
    rrpc_connect_opts zero = {0};
    assert_int_equal(rrpc_connect_with_sync(T.cctx, T.uri, &zero, NULL, NULL, &c), 0);
    echo_ok(c, 16, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c);
}

static void test_a_ticket_sent_to_a_server_that_needs_none_is_acknowledged(void **state)
{
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_ticket(T.cctx, T.uri, "anything", 8, 10000, NULL, NULL, &c), 0);
    echo_ok(c, 32, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c);
}

static void test_a_deadline_counts_from_the_call_even_after_the_loop_slept(void **state)
{
    /* The client's loop sleeps for a second; then a call with a 300 ms
     * deadline, whose handler takes 50 ms, must succeed: the deadline counts
     * from the call, not from the loop's last wake-up. */
    rrpc_conn *c = connect_client(T.cctx);
    for (int i = 0; i < 3; i++) {
        usleep(1000 * 1000);
        void *out = NULL;
        size_t n = 0;
        rrpc_call_opts o = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = 300};
        assert_int_equal(rrpc_call_sync(c, "slow", NULL, 0, &o, &out, &n), 0);
        free(out);
    }
    rrpc_conn_close(c);
}

static void test_10000_pipelined_calls_all_answered_in_order_of_ids(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    enum { N = 10000 };
    struct pipe_state ps = {0};
    struct idx_ctx *ic = calloc(N, sizeof(*ic));
    for (uint64_t i = 0; i < N; i++) {
        ic[i].ps = &ps;
        ic[i].want = i;
        assert_int_equal(rrpc_call(c, "echo", &i, sizeof(i), NULL, pipe_check_cb, &ic[i]), 0);
    }
    assert_int_equal(wait_for(&ps.done, N, 60000), N);
    assert_int_equal(ps.bad, 0);
    free(ic);
    rrpc_conn_close(c);
}

static void test_deadline_expires_when_the_handler_never_answers(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = 200};
    assert_int_equal(rrpc_call_sync(c, "hold", "x", 1, &o, &out, &n), RRPC_E_DEADLINE);
    /* The late answer is dropped by the client; the connection still works. */
    lock();
    rrpc_request *req = T.held;
    T.held = NULL;
    unlock();
    assert_non_null(req);
    assert_int_equal(rrpc_respond(req, "late", 4), 0);
    echo_ok(c, 16, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c);
}

static void test_handler_error_reaches_the_caller_with_code_and_message(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "fail", NULL, 0, NULL, &out, &n), 42);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "the handler refuses politely"));
    assert_int_equal(rrpc_call_sync(c, "no-such-method", NULL, 0, NULL, &out, &n),
                     RRPC_E_NO_METHOD);
    rrpc_call_opts bad = {.qos_class = 7};
    assert_int_equal(rrpc_call_sync(c, "echo", NULL, 0, &bad, &out, &n), RRPC_E_BAD_CLASS);
    rrpc_conn_close(c);
}

static void test_a_method_name_outside_1_to_255_bytes_is_refused_before_the_wire(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    char name[300];
    assert_int_equal(rrpc_call_sync(c, "", NULL, 0, NULL, &out, &n), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "1..255 bytes"));
    memset(name, 'm', 256);
    name[256] = 0;
    assert_int_equal(rrpc_call_sync(c, name, NULL, 0, NULL, &out, &n), -EINVAL);
    name[255] = 0; /* the longest name rrpc_register takes goes on the wire */
    assert_int_equal(rrpc_call_sync(c, name, NULL, 0, NULL, &out, &n), RRPC_E_NO_METHOD);
    echo_ok(c, 8, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c);
}

static void test_the_loaded_library_reports_the_version_of_its_headers(void **state)
{
    assert_string_equal(rrpc_version(), RRPC_VERSION_STRING);
}

static void test_async_reply_from_another_thread_completes_the_call(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "async", NULL, 0, NULL, &out, &n), 0);
    assert_int_equal(n, 8);
    assert_memory_equal(out, "threaded", 8);
    free(out);
    rrpc_conn_close(c);
}

struct thr_arg {
    rrpc_conn *c;
    int id;
    int failures;
};

static void *caller_thread(void *p)
{
    struct thr_arg *a = p;
    for (int i = 0; i < 300; i++) {
        uint64_t v = ((uint64_t)a->id << 32) | (uint64_t)i;
        void *out = NULL;
        size_t n = 0;
        int r = rrpc_call_sync(a->c, "echo", &v, sizeof(v), NULL, &out, &n);
        if (r || n != 8 || memcmp(out, &v, 8) != 0)
            a->failures++;
        free(out);
    }
    return NULL;
}

static void test_calls_from_four_threads_on_one_connection(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    pthread_t t[4];
    struct thr_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct thr_arg){c, i, 0};
        pthread_create(&t[i], NULL, caller_thread, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].failures, 0);
    }
    rrpc_conn_close(c);
}

/* @s serves echo on a listener of the transport under test (closed with
 * @s, its URI in @curi), both loops run on threads, and @cl connects. */
static rrpc_conn *echo_pair(rrpc_ctx *s, rrpc_ctx *cl, char curi[300])
{
    assert_int_equal(rrpc_register(s, "echo", h_echo, NULL), 0);
    assert_int_equal(rrpc_register(s, "echo_2ms", h_echo_2ms, NULL), 0);
    listen_any(s, curi, 300);
    assert_int_equal(rrpc_ctx_start_thread(s), 0);
    assert_int_equal(rrpc_ctx_start_thread(cl), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(cl, curi, 10000, NULL, NULL, &c), 0);
    return c;
}

/* A context with @n settings NAME=VALUE over the environment's. */
static rrpc_ctx *ctx_with(const char *const *set, int n)
{
    rrpc_config *cfg;
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), "%s", set[i]);
        char *eq = strchr(name, '=');
        *eq = 0;
        if (rrpc_config_set(cfg, name, eq + 1))
            fail_msg("%s: %s", set[i], rrpc_ctx_last_error(NULL));
    }
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    rrpc_config_destroy(cfg);
    return ctx;
}

static rrpc_class_stats lend_stats(rrpc_ctx *ctx, int cls)
{
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(ctx, &st), 0);
    return st.cls[cls];
}

/* Waits (at most @ms) until @ctx has lent nothing on @cls: the gauge then. */
static uint64_t lent_drains(rrpc_ctx *ctx, int cls, int ms)
{
    uint64_t lent = 0;
    for (int i = 0; i < ms / 10; i++) {
        if ((lent = lend_stats(ctx, cls).credit_lent) == 0)
            break;
        usleep(10000);
    }
    return lent;
}

/* Lent credit (docs/protocol.md section 7): both sides start at the base
 * (4), a side whose peer has all of it in flight lends as much again up to
 * the class's credits (bulk: 16, so 4 + 4 + 8), and takes it all back once
 * the connection was idle for RRPC_CREDIT_IDLE_MS; lent again after that.
 * Every call is answered. */
static void test_a_pipelining_peer_is_lent_credit_and_gives_it_back_once_idle(void **state)
{
    (void)state;
    static const char *const set[] = {"RRPC_CREDIT_IDLE_MS=300"};
    rrpc_ctx *s = ctx_with(set, 1), *cl = ctx_with(set, 1);
    int credits;
    assert_int_equal(rrpc_class_get(s, RRPC_CLASS_BULK, NULL, NULL, &credits), 0);
    assert_int_equal(credits, 16);
    char curi[300];
    rrpc_conn *c = echo_pair(s, cl, curi);
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK};
    for (int round = 1; round <= 2; round++) {
        struct pipe_state ps = {.expect_len = 8};
        for (uint64_t i = 0; i < 300; i++)
            assert_int_equal(rrpc_call(c, "echo_2ms", &i, 8, &o, pipe_cb, &ps), 0);
        assert_int_equal(wait_for(&ps.done, 300, 60000), 300);
        assert_int_equal(ps.bad, 0);
        rrpc_class_stats ss = lend_stats(s, RRPC_CLASS_BULK);
        printf("# round %d: server lent %" PRIu64 " times, %" PRIu64 " lent now, %" PRIu64
               " taken back\n", round, ss.credit_lends, ss.credit_lent, ss.credit_taken_back);
        /* 4 -> 8 -> 16, in each round (the first grant is kept) */
        assert_int_equal(ss.credit_lends, 2 * (uint64_t)round);
        assert_int_equal(ss.credit_lent + ss.credit_taken_back, 12 * (uint64_t)round);
        assert_int_equal(ss.credit_lend_refused, 0);
        assert_int_equal(lent_drains(s, RRPC_CLASS_BULK, 5000), 0);
        assert_int_equal(lend_stats(s, RRPC_CLASS_BULK).credit_taken_back, 12 * (uint64_t)round);
        /* the client lent the server credit for its answers, the same way */
        assert_true(lend_stats(cl, RRPC_CLASS_BULK).credit_lends >= (uint64_t)round);
        assert_int_equal(lent_drains(cl, RRPC_CLASS_BULK, 5000), 0);
        /* no other class was lent anything */
        assert_int_equal(lend_stats(s, RRPC_CLASS_LOW_LATENCY).credit_lends, 0);
    }
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

/* The budget bounds what all peers are lent at once: with
 * RRPC_CREDIT_BUDGET=4, two connections pipelining on bulk share 4 lent
 * credits; the rest are refused (counted), and every call is answered on
 * the credit each connection has. */
static void test_the_credit_budget_bounds_what_all_peers_are_lent(void **state)
{
    (void)state;
    static const char *const set[] = {"RRPC_CREDIT_BUDGET=4"};
    rrpc_ctx *s = ctx_with(set, 1);
    rrpc_ctx *cl;
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    char curi[300];
    rrpc_conn *c[2] = {echo_pair(s, cl, curi), NULL};
    assert_int_equal(rrpc_connect_sync(cl, curi, 10000, NULL, NULL, &c[1]), 0);
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK};
    struct pipe_state ps = {.expect_len = 8};
    uint64_t most = 0;
    for (uint64_t i = 0; i < 400; i++) {
        assert_int_equal(rrpc_call(c[i % 2], "echo_2ms", &i, 8, &o, pipe_cb, &ps), 0);
        uint64_t now = lend_stats(s, RRPC_CLASS_BULK).credit_lent;
        most = now > most ? now : most;
    }
    assert_int_equal(wait_for(&ps.done, 400, 60000), 400);
    assert_int_equal(ps.bad, 0);
    rrpc_class_stats ss = lend_stats(s, RRPC_CLASS_BULK);
    printf("# lent at most %" PRIu64 " (sampled), %" PRIu64 " lends, %" PRIu64 " refused\n",
           most, ss.credit_lends, ss.credit_lend_refused);
    assert_true(most <= 4 && ss.credit_lent <= 4);
    assert_true(ss.credit_lends >= 1);
    assert_true(ss.credit_lend_refused >= 1);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

static void test_one_credit_per_class_still_completes_500_pipelined_calls(void **state)
{
    /* Both sides grant a single credit: every call waits for the previous
     * one's credit to come back, and the receiver would close the connection
     * with RRPC_E_CREDIT if the sender ever overran it. */
    rrpc_ctx *s, *cl;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
        int dscp;
        rrpc_class_get(s, k, &dscp, NULL, NULL);
        assert_int_equal(rrpc_class_set(s, k, dscp, 1, 1), 0);
        assert_int_equal(rrpc_class_set(cl, k, dscp, 1, 1), 0);
    }
    char curi[300];
    rrpc_conn *c = echo_pair(s, cl, curi);
    struct pipe_state ps = {.expect_len = 8};
    for (uint64_t i = 0; i < 500; i++)
        assert_int_equal(rrpc_call(c, "echo", &i, 8, NULL, pipe_cb, &ps), 0);
    assert_int_equal(wait_for(&ps.done, 500, 60000), 500);
    assert_int_equal(ps.bad, 0);
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* verbs: the active side is up, and sends, as soon as its own classes are
 * established; the passive side may see a rendezvous (a payload above
 * RRPC_VERBS_EAGER) on one class before its last class is established. */
static void test_a_large_call_right_after_connect_is_served(void **state)
{
    (void)state;
    enum { ROUNDS = 40, SIZE = 64 << 10 };
    uint8_t *buf = malloc(SIZE);
    fill(buf, SIZE, 7);
    int ok = 0;
    for (int i = 0; i < ROUNDS; i++) {
        rrpc_conn *c = connect_client(T.cctx);
        void *out = NULL;
        size_t n = 0;
        rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK};
        int r = rrpc_call_sync(c, "echo", buf, SIZE, &o, &out, &n);
        if (r == 0 && n == SIZE && memcmp(out, buf, SIZE) == 0)
            ok++;
        else if (ok == i) /* the first failure */
            printf("# round %d: %s: %s\n", i, rrpc_err_name(r), rrpc_ctx_last_error(T.cctx));
        free(out);
        rrpc_conn_close(c);
    }
    free(buf);
    printf("# %d of %d first calls answered\n", ok, ROUNDS);
    assert_int_equal(ok, ROUNDS);
}

/* A low_latency call's answer, and how many bulk calls had completed when
 * it came: read on the loop thread that completes both, so the count does
 * not depend on when the test's thread is scheduled again. */
static struct {
    int done, status, bulk_at_answer;
    int32_t cls;
} ll;

static void ll_cb(const rrpc_result *res, void *user)
{
    struct pipe_state *bulk = user;
    lock();
    ll.bulk_at_answer = bulk->done;
    ll.status = res->status;
    ll.cls = -1;
    if (res->status == 0 && res->len == sizeof(ll.cls))
        memcpy(&ll.cls, res->data, sizeof(ll.cls));
    ll.done++;
    unlock();
}

static void test_low_latency_calls_complete_while_bulk_saturates(void **state)
{
    /* A backlog of 1 MiB bulk echoes is kept topped up while low_latency calls
     * run, and each low_latency call counts the bulk calls that completed
     * while it was in flight (from its submission to its answer's callback).
     * Behind the bulk queue it would wait for about the whole backlog; with
     * the classes apart it waits for a few.  Counts, not times: it holds on
     * a slow machine and under sanitizers alike. */
    rrpc_conn *c = connect_client(T.cctx);
    enum { BACKLOG = 48, BULK_SIZE = 1 << 20, LL = 20 };
    uint8_t *big = calloc(1, BULK_SIZE);
    static struct pipe_state bulk; /* outlives a failed assertion's jump */
    memset(&bulk, 0, sizeof(bulk));
    memset(&ll, 0, sizeof(ll));
    bulk.expect_len = BULK_SIZE;
    int submitted = 0, during[LL], ll_ok = 0;
    rrpc_call_opts bo = {.qos_class = RRPC_CLASS_BULK, .deadline_ms = 300000};
    rrpc_call_opts lo = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = 300000};
    for (int i = 0; i < LL; i++) {
        lock();
        int outstanding = submitted - bulk.done;
        unlock();
        for (; outstanding < BACKLOG; outstanding++, submitted++)
            if (rrpc_call(c, "echo", big, BULK_SIZE, &bo, pipe_cb, &bulk) != 0)
                break;
        lock();
        int before = bulk.done, want = ll.done + 1;
        unlock();
        if (rrpc_call(c, "class", NULL, 0, &lo, ll_cb, &bulk) != 0) {
            during[i] = BACKLOG;
            continue;
        }
        wait_for(&ll.done, want, 300000);
        lock();
        during[i] = ll.bulk_at_answer - before;
        ll_ok += ll.done == want && ll.status == 0 && ll.cls == RRPC_CLASS_LOW_LATENCY;
        unlock();
    }
    int all = wait_for(&bulk.done, submitted, 300000);
    qsort(during, LL, sizeof(during[0]), cmp_int);
    printf("# bulk calls completed during a low_latency call: median %d, max %d "
           "(backlog %d x 1 MiB)\n",
           during[LL / 2], during[LL - 1], BACKLOG);
    free(big);
    rrpc_conn_close(c);
    assert_int_equal(all, submitted);
    assert_int_equal(bulk.bad, 0);
    assert_int_equal(ll_ok, LL);
    assert_true(during[LL / 2] < BACKLOG / 4);
}

/* ---- tcp: a connection's sockets (tcp only: counts this process's fds) ---- */

static int downs_now(void);

static bool tcp_only(void)
{
    if (strcmp(T.transport, "tcp") != 0) {
        printf("# skipped on %s: counts tcp sockets\n", T.transport);
        skip();
    }
    return false;
}

/* This process's open descriptors, as a bit per descriptor number below
 * @max in @set (may be NULL); returns how many. */
static int open_fds(uint64_t *ino, int max)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0, self = dirfd(d);
    if (ino)
        memset(ino, 0, (size_t)max * sizeof(*ino));
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == self)
            continue;
        int fd = atoi(e->d_name);
        struct stat st;
        if (ino && fd < max && fstat(fd, &st) == 0)
            ino[fd] = (uint64_t)st.st_ino;
        n++;
    }
    closedir(d);
    return n;
}

/* Whether descriptor @fd of snapshot @now was opened after snapshot @was
 * (by inode, so a number that an earlier file let go of and a new one took
 * counts as new). */
static bool fd_is_new(const uint64_t *was, const uint64_t *now, int fd)
{
    return now[fd] && now[fd] != was[fd];
}

/* The descriptors opened between snapshots @was and @now.  Not the
 * difference of the counts: connections earlier tests closed let go of
 * their sockets asynchronously, some during the next tests (seen: 15 fewer
 * descriptors within one test, and a count 1 and 4 short in two runs). */
static int new_fds(const uint64_t *was, const uint64_t *now, int max)
{
    int n = 0;
    for (int fd = 0; fd < max; fd++)
        n += fd_is_new(was, now, fd);
    return n;
}

/* Waits (at most 5 s) until this process holds @want descriptors; their count. */
static int fds_settle(int want)
{
    int n = open_fds(NULL, 0);
    for (int i = 0; i < 500 && n != want; i++) {
        usleep(10000);
        n = open_fds(NULL, 0);
    }
    return n;
}

/* Client and server are both in this process: an RPC-only connection
 * (calls on low_latency, the default class) holds one socket on each side. */
static void test_an_rpc_only_tcp_connection_holds_one_socket_per_side(void **state)
{
    if (tcp_only())
        return;
    downs_now();
    rrpc_conn *warm = connect_client(T.cctx); /* whatever a context makes once */
    echo_ok(warm, 1, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(warm);
    downs_now();
    usleep(50000);
    int before = open_fds(NULL, 0);
    enum { N = 8 };
    rrpc_conn *c[N];
    for (int i = 0; i < N; i++) {
        c[i] = connect_client(T.cctx);
        echo_ok(c[i], 64, RRPC_CLASS_LOW_LATENCY);
        echo_ok(c[i], 64, RRPC_CLASS_DEFAULT);
    }
    assert_int_equal(fds_settle(before + 2 * N) - before, 2 * N);
    for (int i = 0; i < N; i++)
        rrpc_conn_close(c[i]);
}

/* The first call on bulk opens bulk's own socket, on each side, marked with
 * bulk's DSCP (read from the kernel, not from the library); later calls
 * reuse it; background and control (whose DSCP differs from low_latency's)
 * get theirs the same way. */
static void test_a_class_first_used_opens_its_socket_with_its_dscp(void **state)
{
    if (tcp_only())
        return;
    rrpc_conn *c = connect_client(T.cctx);
    echo_ok(c, 1, RRPC_CLASS_LOW_LATENCY);
    const int classes[] = {RRPC_CLASS_BULK, RRPC_CLASS_BACKGROUND, RRPC_CLASS_CONTROL};
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
        int k = classes[i], want = -1, got = -1;
        assert_int_equal(rrpc_class_get(T.cctx, k, &want, NULL, NULL), 0);
        enum { MAXFD = 1 << 16 };
        static uint64_t was[MAXFD], now[MAXFD], later[MAXFD];
        open_fds(was, MAXFD);
        echo_ok(c, 1000, k);
        open_fds(now, MAXFD);
        assert_int_equal(new_fds(was, now, MAXFD), 2); /* the client's and the server's end */
        int marked = 0;
        for (int fd = 0; fd < MAXFD; fd++) {
            if (!fd_is_new(was, now, fd))
                continue;
            int tos = -1;
            socklen_t tl = sizeof(tos);
            assert_int_equal(getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &tl), 0);
            assert_int_equal(tos, want << 2);
            marked++;
        }
        assert_int_equal(marked, 2);
        assert_int_equal(rrpc_conn_class_dscp(c, k, &got), 0);
        assert_int_equal(got, want);
        echo_ok(c, 1000, k);
        open_fds(later, MAXFD);
        assert_int_equal(new_fds(now, later, MAXFD), 0); /* the same socket again */
    }
    rrpc_conn_close(c);
}

/* The sharing rule (docs/protocol.md §6.1): control travels on the first
 * socket when its sender's control DSCP is its low_latency DSCP, and each
 * side routes by its own DSCPs.  Both sides with control at low_latency's
 * DSCP: a control call opens no socket.  Only the client so: its request
 * goes on the first socket, the server's answer on control's own socket,
 * which the server asks for; each end of it carries its side's control
 * DSCP (the kernel's IP_TOS), so every packet still has its class's mark. */
static void test_control_shares_the_first_socket_only_on_the_side_whose_dscps_match(void **state)
{
    if (tcp_only())
        return;
    for (int srv_shares = 1; srv_shares >= 0; srv_shares--) {
        rrpc_ctx *s, *cl;
        assert_int_equal(rrpc_ctx_create(&s), 0);
        assert_int_equal(rrpc_ctx_create(&cl), 0);
        int lat, ctl, w, cr;
        assert_int_equal(rrpc_class_get(cl, RRPC_CLASS_LOW_LATENCY, &lat, NULL, NULL), 0);
        assert_int_equal(rrpc_class_get(cl, RRPC_CLASS_CONTROL, &ctl, &w, &cr), 0);
        assert_int_not_equal(lat, ctl); /* the defaults differ: control has its own socket */
        assert_int_equal(rrpc_class_set(cl, RRPC_CLASS_CONTROL, lat, w, cr), 0);
        if (srv_shares)
            assert_int_equal(rrpc_class_set(s, RRPC_CLASS_CONTROL, lat, w, cr), 0);
        assert_int_equal(rrpc_register(s, "echo", h_echo, NULL), 0);
        char curi[300];
        listen_any(s, curi, sizeof(curi)); /* closed with its context */
        assert_int_equal(rrpc_ctx_start_thread(s), 0);
        assert_int_equal(rrpc_ctx_start_thread(cl), 0);
        rrpc_conn *c;
        assert_int_equal(rrpc_connect_sync(cl, curi, 10000, NULL, NULL, &c), 0);
        echo_ok(c, 1, RRPC_CLASS_LOW_LATENCY); /* the server's side is up */
        enum { MAXFD = 1 << 16 };
        static uint64_t was[MAXFD], now[MAXFD];
        open_fds(was, MAXFD);
        echo_ok(c, 100, RRPC_CLASS_CONTROL);
        echo_ok(c, 100, RRPC_CLASS_CONTROL);
        open_fds(now, MAXFD);
        assert_int_equal(new_fds(was, now, MAXFD), srv_shares ? 0 : 2);
        int tos_sum = 0;
        for (int fd = 0; fd < MAXFD; fd++) {
            if (!fd_is_new(was, now, fd))
                continue;
            int tos = -1;
            socklen_t tl = sizeof(tos);
            assert_int_equal(getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &tl), 0);
            assert_true(tos == lat << 2 || tos == ctl << 2);
            tos_sum += tos;
        }
        if (!srv_shares) /* the client's end at its control DSCP, the server's at its own */
            assert_int_equal(tos_sum, (lat << 2) + (ctl << 2));
        int got = -1;
        assert_int_equal(rrpc_conn_class_dscp(c, RRPC_CLASS_CONTROL, &got), 0);
        assert_int_equal(got, lat);
        rrpc_conn_close(c);
        rrpc_ctx_destroy(cl);
        rrpc_ctx_destroy(s);
    }
}

static void fetch_token(rrpc_conn *c, rrpc_token *t);

/* The class the server saw for a call "class" with @o. */
static int32_t class_seen(rrpc_conn *c, const rrpc_call_opts *o)
{
    void *out = NULL;
    size_t n = 0;
    int32_t cls = -1;
    int r = rrpc_call_sync(c, "class", NULL, 0, o, &out, &n);
    if (r == 0 && n == sizeof(cls))
        memcpy(&cls, out, sizeof(cls));
    free(out);
    return r ? r : cls;
}

static void test_a_zeroed_options_struct_means_the_default_class_not_control(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    rrpc_call_opts only_deadline = {.deadline_ms = 5000};
    assert_int_equal(class_seen(c, &only_deadline), RRPC_CLASS_LOW_LATENCY);
    assert_int_equal(class_seen(c, NULL), RRPC_CLASS_LOW_LATENCY);
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
        rrpc_call_opts o = {.qos_class = k};
        assert_int_equal(class_seen(c, &o), k);
    }
    rrpc_call_opts bad = {.qos_class = RRPC_CLASS_LAST + 1};
    assert_int_equal(class_seen(c, &bad), RRPC_E_BAD_CLASS);
    bad.qos_class = -1;
    assert_int_equal(class_seen(c, &bad), RRPC_E_BAD_CLASS);
    /* Reserved words must be zero: a newer caller is refused, never half-read. */
    rrpc_call_opts newer = {.reserved = {1}};
    assert_int_equal(class_seen(c, &newer), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "rrpc_call_opts.reserved[0]"));
    rrpc_op_opts onewer = {.reserved = {5}};
    rrpc_region *lr;
    uint8_t local[8] = {0};
    rrpc_token t;
    fetch_token(c, &t);
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &lr), 0);
    assert_int_equal(rrpc_write_sync(c, lr, 0, &t, 0, sizeof(local), &onewer), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "rrpc_op_opts.reserved[0]"));
    rrpc_mem_dereg(lr);
    assert_null(rrpc_class_name(RRPC_CLASS_DEFAULT));
    assert_string_equal(rrpc_class_name(RRPC_CLASS_CONTROL), "control");
    assert_int_equal(rrpc_class_from_name("bulk"), RRPC_CLASS_BULK);
    rrpc_conn_close(c);
}

static void test_each_class_carries_its_dscp_on_both_ends(void **state)
{
    if (test_is_inproc()) {
        printf("# skipped on inproc: no packet leaves the process, so no DSCP is carried\n");
        skip();
    }
    rrpc_conn *c = connect_client(T.cctx);
    /* Every class used once: on tcp that opens the sockets of the classes
     * that do not share the first one, and the DSCP is read from them. */
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++)
        echo_ok(c, 1, k); /* the server's UP has surely run */
    lock();
    rrpc_conn *sc = T.last_server_conn;
    unlock();
    assert_non_null(sc);
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
        int want, got = -1, sgot = -1;
        rrpc_class_get(T.cctx, k, &want, NULL, NULL);
        assert_int_equal(rrpc_conn_class_dscp(c, k, &got), 0);
        assert_int_equal(got, want);
        assert_int_equal(rrpc_conn_class_dscp(sc, k, &sgot), 0);
        assert_int_equal(sgot, want);
    }
    rrpc_conn_close(c);
}

static void fetch_token(rrpc_conn *c, rrpc_token *t)
{
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "token", NULL, 0, NULL, &out, &n), 0);
    assert_int_equal(rrpc_token_decode(out, n, t), 0);
    free(out);
}

/* Counts a completed one-sided operation in *@user (any thread); a failed one
 * is counted as -1000, which no wait reaches. */
static void op_counted(int status, void *user)
{
    lock();
    *(int *)user += status ? -1000 : 1;
    unlock();
}

static void test_one_sided_write_and_read_move_the_exact_bytes(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    rrpc_token t;
    fetch_token(c, &t);
    assert_int_equal(t.len, SMEM_LEN);
    size_t n = 3u << 20; /* more than one emulation chunk */
    uint8_t *local = calloc(1, 2 * n);
    fill(local, n, 7);
    rrpc_region *lr;
    assert_int_equal(rrpc_mem_reg(T.cctx, local, 2 * n, 0, &lr), 0);
    assert_int_equal(rrpc_write_sync(c, lr, 0, &t, 4096, n, NULL), 0);
    assert_memory_equal(T.smem + 4096, local, n);
    assert_int_equal(rrpc_read_sync(c, lr, n, &t, 4096, n, NULL), 0);
    assert_memory_equal(local + n, local, n);
    /* write with notify: the target hears the value after the data landed */
    lock();
    int before = T.notifies;
    unlock();
    rrpc_op_opts o = {.qos_class = RRPC_CLASS_BULK, .notify = 1, .imm = 0xC0FFEE};
    assert_int_equal(rrpc_write_sync(c, lr, 0, &t, 0, 128, &o), 0);
    assert_int_equal(wait_for(&T.notifies, before + 1, 5000), before + 1);
    assert_int_equal(T.last_imm, 0xC0FFEE);
    assert_memory_equal(T.smem, local, 128);
    /* More writes with notify in flight than a peer holds notify credit for
     * (16 on verbs, granted on its first ask): every one lands, in order. */
    enum { NW = 40 };
    lock();
    before = T.notifies;
    T.notify_disorder = 0;
    unlock();
    int wdone = 0;
    for (int i = 0; i < NW; i++) {
        rrpc_op_opts oi = {.qos_class = RRPC_CLASS_BULK, .notify = 1, .imm = 0x1000u + (uint32_t)i};
        assert_int_equal(rrpc_write(c, lr, 0, &t, 0, 64, &oi, op_counted, &wdone), 0);
    }
    assert_int_equal(wait_for(&T.notifies, before + NW, 10000), before + NW);
    assert_int_equal(wait_for(&wdone, NW, 5000), NW);
    lock();
    assert_int_equal(T.notify_disorder, 0);
    assert_int_equal(T.last_imm, 0x1000u + NW - 1);
    unlock();
    rrpc_mem_dereg(lr);
    free(local);
    rrpc_conn_close(c);
}

/* A completion callback that issues the next operation keeps the completion
 * queue busy for as long as it likes; one rrpc_ctx_progress() call must still
 * return after a bounded amount of work, or a driven-mode application (and, in
 * thread mode, every timer of the context) starves.  Counted, not timed. */
struct chain {
    rrpc_conn *c;
    rrpc_region *lr;
    rrpc_token t;
    int done, bad, out;
    bool stop;
};

#define CHAIN_CAP 20000

static void chain_cb(int status, void *user)
{
    struct chain *ch = user;
    ch->done++;
    ch->out--;
    if (status)
        ch->bad++;
    if (ch->stop || ch->done >= CHAIN_CAP)
        return;
    if (rrpc_write(ch->c, ch->lr, 0, &ch->t, 0, 64, NULL, chain_cb, ch) == 0)
        ch->out++;
    else
        ch->bad++;
}

static void test_a_chain_of_writes_from_callbacks_lets_progress_return(void **state)
{
    rrpc_ctx *cl;
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    struct chain ch = {0};
    assert_int_equal(rrpc_connect_sync(cl, T.uri, 10000, NULL, NULL, &ch.c), 0);
    fetch_token(ch.c, &ch.t);
    uint8_t local[64];
    fill(local, sizeof(local), 11);
    assert_int_equal(rrpc_mem_reg(cl, local, sizeof(local), 0, &ch.lr), 0);
    assert_int_equal(rrpc_write(ch.c, ch.lr, 0, &ch.t, 0, 64, NULL, chain_cb, &ch), 0);
    ch.out = 1;
    int most = 0, calls = 0;
    while (ch.done < 2000 && ch.done < CHAIN_CAP && !ch.bad && calls < 200000) {
        int before = ch.done;
        assert_int_equal(rrpc_ctx_progress(cl, 100), 0);
        calls++;
        if (ch.done - before > most)
            most = ch.done - before;
    }
    ch.stop = true;
    for (int i = 0; i < 1000 && ch.out > 0; i++)
        assert_int_equal(rrpc_ctx_progress(cl, 100), 0);
    assert_int_equal(ch.bad, 0);
    assert_int_equal(ch.out, 0);
    assert_true(ch.done >= 2000);
    /* The library's budget is far below this; without one, the first call
     * runs the whole chain to CHAIN_CAP. */
    if (most > 1000)
        fail_msg("one rrpc_ctx_progress() call ran %d chained completions", most);
    assert_memory_equal(T.smem, local, sizeof(local));
    rrpc_mem_dereg(ch.lr);
    rrpc_ctx_destroy(cl);
}

static void test_one_sided_outside_the_token_fails_at_once_and_writes_nothing(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    rrpc_token t;
    fetch_token(c, &t);
    uint8_t local[256];
    memset(local, 0xAB, sizeof(local));
    rrpc_region *lr;
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &lr), 0);
    memset(T.smem + SMEM_LEN - 256, 0, 256);
    assert_int_equal(rrpc_write_sync(c, lr, 0, &t, SMEM_LEN - 100, 200, NULL), RRPC_E_ACCESS);
    assert_int_equal(rrpc_write_sync(c, lr, 0, &t, UINT64_MAX - 10, 200, NULL), RRPC_E_ACCESS);
    assert_int_equal(rrpc_write_sync(c, lr, 100, &t, 0, 200, NULL), RRPC_E_REGION);
    rrpc_token ro = t;
    ro.access = RRPC_ACCESS_REMOTE_READ;
    assert_int_equal(rrpc_write_sync(c, lr, 0, &ro, 0, 16, NULL), RRPC_E_ACCESS);
    for (int i = 0; i < 256; i++)
        assert_int_equal(T.smem[SMEM_LEN - 256 + i], 0);
    rrpc_mem_dereg(lr);
    rrpc_conn_close(c);
}

static void test_one_sided_with_a_forged_key_fails_and_writes_nothing(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    rrpc_token t;
    fetch_token(c, &t);
    t.key ^= 0x5a5a;
    uint8_t local[64];
    memset(local, 0xEE, sizeof(local));
    memset(T.smem, 0, 64);
    rrpc_region *lr;
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &lr), 0);
    /* An unrelated failure first: the WRITE's own detail must replace it. */
    void *out = NULL;
    size_t outn = 0;
    assert_int_equal(rrpc_call_sync(c, "no-such-method", NULL, 0, NULL, &out, &outn),
                     RRPC_E_NO_METHOD);
    int r = rrpc_write_sync(c, lr, 0, &t, 0, 64, NULL);
    /* tcp: the target refuses it (RRPC_E_ACCESS); verbs: the NIC's remote
     * access error, which also breaks the queue pair (RRPC_E_ACCESS, and the
     * connection goes down). */
    assert_int_equal(r, RRPC_E_ACCESS);
    const char *why = rrpc_ctx_last_error(T.cctx);
    printf("# last error: %s\n", why);
    assert_non_null(strstr(why, "WRITE"));
    assert_null(strstr(why, "no-such-method"));
    for (int i = 0; i < 64; i++)
        assert_int_equal(T.smem[i], 0);
    rrpc_mem_dereg(lr);
    rrpc_conn_close(c);
    /* the server still serves others */
    rrpc_conn *c2 = connect_client(T.cctx);
    echo_ok(c2, 100, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c2);
}

/* ---- concurrent blocking one-sided failures each keep their own detail ---- */

#define OS_DETAIL_THREADS 8
#define OS_DETAIL_OPS 250 /* per thread; verbs: 1 (a forged key breaks the queue pair) */

struct os_detail_job {
    int t;
    rrpc_conn *conn;
    rrpc_token forged;
    int ops, access, wrong;
    char first_wrong[600];
};

/* Forged-key READs and WRITEs, each of a length and at a remote address no
 * other operation in the test has; the detail this thread sees must name
 * both. */
static void *os_detail_thread(void *arg)
{
    struct os_detail_job *j = arg;
    static uint8_t mem[OS_DETAIL_THREADS][OS_DETAIL_THREADS * OS_DETAIL_OPS + 1];
    rrpc_region *lr = NULL;
    if (rrpc_mem_reg(T.cctx, mem[j->t], sizeof(mem[j->t]), 0, &lr) != 0) {
        snprintf(j->first_wrong, sizeof(j->first_wrong), "rrpc_mem_reg failed");
        j->wrong = -1;
        return NULL;
    }
    for (int i = 0; i < j->ops; i++) {
        bool rd = i & 1;
        size_t len = 1 + (size_t)j->t * OS_DETAIL_OPS + (size_t)i;
        uint64_t off = (uint64_t)j->t * 65536 + (uint64_t)i * 8;
        int r = rd ? rrpc_read_sync(j->conn, lr, 0, &j->forged, off, len, NULL)
                   : rrpc_write_sync(j->conn, lr, 0, &j->forged, off, len, NULL);
        const char *why = rrpc_ctx_last_error(T.cctx);
        char want[96];
        snprintf(want, sizeof(want), "%s of %zu bytes at remote 0x%llx ", rd ? "READ" : "WRITE",
                 len, (unsigned long long)(j->forged.addr + off));
        if (r == RRPC_E_ACCESS)
            j->access++;
        if (r == 0 || !strstr(why, want)) {
            if (j->wrong++ == 0)
                snprintf(j->first_wrong, sizeof(j->first_wrong), "%s: %s: got \"%s\"", want,
                         rrpc_err_name(r), why);
        }
    }
    rrpc_mem_dereg(lr);
    return NULL;
}

static void test_concurrent_blocking_one_sided_failures_each_report_their_own_detail(void **state)
{
    (void)state;
    bool verbs = strcmp(T.transport, "verbs") == 0;
    struct os_detail_job jobs[OS_DETAIL_THREADS];
    pthread_t th[OS_DETAIL_THREADS];
    for (int t = 0; t < OS_DETAIL_THREADS; t++) {
        memset(&jobs[t], 0, sizeof(jobs[t]));
        jobs[t].t = t;
        jobs[t].ops = verbs ? 1 : OS_DETAIL_OPS;
        jobs[t].conn = connect_client(T.cctx);
        fetch_token(jobs[t].conn, &jobs[t].forged);
        jobs[t].forged.key ^= 0x5a5a;
    }
    for (int t = 0; t < OS_DETAIL_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, os_detail_thread, &jobs[t]), 0);
    int ops = 0, access = 0, wrong = 0;
    for (int t = 0; t < OS_DETAIL_THREADS; t++) {
        pthread_join(th[t], NULL);
        ops += jobs[t].ops;
        access += jobs[t].access;
        wrong += jobs[t].wrong;
        if (jobs[t].wrong)
            printf("# thread %d: %d of %d with another detail; first: %s\n", t, jobs[t].wrong,
                   jobs[t].ops, jobs[t].first_wrong);
        rrpc_conn_close(jobs[t].conn);
    }
    printf("# %d forged operations on %d threads: %d RRPC_E_ACCESS, %d with another's detail\n",
           ops, OS_DETAIL_THREADS, access, wrong);
    assert_int_equal(wrong, 0);
    /* each thread's first operation meets the target's refusal */
    assert_true(access >= OS_DETAIL_THREADS);
}

/* ---- grants (rrpc_region_grant): one peer, one range, revocable ----------- */

static bool is_verbs(void)
{
    return strcmp(T.transport, "verbs") == 0;
}

/* This process's resident memory, KiB (/proc/self/statm). */
static long test_rss_kib(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* A client connection and the server's side of it (the newest one up). */
static rrpc_conn *connect_pair(rrpc_conn **server_side)
{
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "echo", "up", 2, NULL, &out, &n), 0);
    free(out);
    lock();
    *server_side = T.last_server_conn;
    unlock();
    assert_non_null(*server_side);
    return c;
}

/* An access the target must refuse: RRPC_E_GRANT, nothing written.  On
 * verbs the NIC's refusal also breaks the connection (RC semantics):
 * *@c is then replaced by a fresh one, and *@sc by its server side. */
static void refused(rrpc_conn **c, rrpc_conn **sc, rrpc_region *lr, const rrpc_token *t,
                    uint64_t off, size_t len, bool is_read, const char *what)
{
    int r = is_read ? rrpc_read_sync(*c, lr, 0, t, off, len, NULL)
                    : rrpc_write_sync(*c, lr, 0, t, off, len, NULL);
    if (r != RRPC_E_GRANT)
        fail_msg("%s: %s (%s), want RRPC_E_GRANT", what, rrpc_err_name(r),
                 rrpc_ctx_last_error(T.cctx));
    if (is_verbs()) {
        rrpc_conn_close(*c);
        *c = connect_pair(sc);
    }
}

static void test_a_grant_serves_its_peer_in_its_range_and_refuses_the_rest(void **state)
{
    rrpc_conn *sa, *sb;
    rrpc_conn *a = connect_pair(&sa);
    rrpc_conn *b = connect_pair(&sb);
    uint8_t local[8192];
    fill(local, sizeof(local), 21);
    rrpc_region *la, *lb;
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &la), 0);
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &lb), 0);
    memset(T.smem, 0, 3 * 4096);
    rrpc_grant *g;
    rrpc_token t;
    /* A may read and write [4096, 8192) of the server's region */
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 4096, 4096,
                                       RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, NULL,
                                       &g, &t),
                     0);
    assert_int_equal(t.len, 4096);
    assert_int_equal(t.addr, (uintptr_t)T.smem + 4096);
    assert_int_equal(RRPC_TOKEN_CLASS(t.access), RRPC_CLASS_BULK);
    assert_int_equal(rrpc_write_sync(a, la, 0, &t, 0, 4096, NULL), 0);
    assert_memory_equal(T.smem + 4096, local, 4096);
    assert_int_equal(rrpc_read_sync(a, la, 4096, &t, 100, 200, NULL), 0);
    assert_memory_equal(local + 4096, local + 100, 200);
    /* the initiator refuses what the token itself rules out */
    assert_int_equal(rrpc_write_sync(a, la, 0, &t, 4000, 200, NULL), RRPC_E_ACCESS);
    rrpc_op_opts low = {.qos_class = RRPC_CLASS_LOW_LATENCY};
    assert_int_equal(rrpc_write_sync(a, la, 0, &t, 0, 16, &low), RRPC_E_GRANT);
    /* B presents A's grant: the target refuses (on verbs the NIC: the
     * window is bound to A's queue pair) */
    refused(&b, &sb, lb, &t, 0, 64, false, "B writing through A's grant");
    /* a token widened by hand past the grant: refused by the target */
    rrpc_token wide = t;
    wide.addr -= 4096;
    wide.len += 8192;
    refused(&a, &sa, la, &wide, 0, 64, false, "A writing below the grant");
    assert_int_equal(rrpc_grant_revoke(g), 0);
    for (int i = 0; i < 4096; i++)
        if (T.smem[i] || T.smem[8192 + i])
            fail_msg("byte %d outside the grant was written", i < 4096 ? i : 8192 + i);
    rrpc_mem_dereg(la);
    rrpc_mem_dereg(lb);
    rrpc_conn_close(a);
    rrpc_conn_close(b);
}

static void test_a_grant_refuses_what_it_does_not_allow_and_ends_when_revoked(void **state)
{
    rrpc_conn *sa;
    rrpc_conn *a = connect_pair(&sa);
    uint8_t local[256];
    fill(local, sizeof(local), 5);
    rrpc_region *la;
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &la), 0);
    memset(T.smem, 0, 256);
    rrpc_grant *g;
    rrpc_token t;
    /* READ only */
    assert_int_equal(
        rrpc_region_grant(T.sregion, sa, 0, 256, RRPC_ACCESS_REMOTE_READ, NULL, &g, &t), 0);
    assert_int_equal(rrpc_write_sync(a, la, 0, &t, 0, 16, NULL), RRPC_E_ACCESS); /* by the token */
    rrpc_token rw = t;
    rw.access |= RRPC_ACCESS_REMOTE_WRITE;
    refused(&a, &sa, la, &rw, 0, 16, false, "writing through a READ-only grant");
    assert_int_equal(rrpc_grant_revoke(g), 0);
    /* a grant for bulk presented on another class: the target refuses */
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 256,
                                       RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, NULL,
                                       &g, &t),
                     0);
    rrpc_token other = t;
    other.access = (other.access & 0xffu) | (unsigned)RRPC_CLASS_BACKGROUND
                                                 << RRPC_TOKEN_CLASS_SHIFT;
    refused(&a, &sa, la, &other, 0, 16, false, "a bulk grant used on background");
    assert_int_equal(rrpc_grant_revoke(g), 0);
    /* in force, then revoked: the next access fails */
    rrpc_grant_opts lo = {.qos_class = RRPC_CLASS_LOW_LATENCY};
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 256,
                                       RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &lo,
                                       &g, &t),
                     0);
    assert_int_equal(rrpc_write_sync(a, la, 0, &t, 0, 256, NULL), 0); /* the grant's class */
    assert_memory_equal(T.smem, local, 256);
    assert_int_equal(rrpc_grant_revoke(g), 0);
    memset(T.smem, 0, 256);
    refused(&a, &sa, la, &t, 0, 16, false, "writing after the revoke");
    assert_int_equal(T.smem[0], 0);
    /* arguments out of their rules */
    assert_int_equal(rrpc_region_grant(T.sregion, sa, SMEM_LEN - 8, 16, RRPC_ACCESS_REMOTE_READ,
                                       NULL, &g, &t),
                     RRPC_E_REGION);
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 0, RRPC_ACCESS_REMOTE_READ, NULL, &g, &t),
                     -EINVAL);
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 16, 0x80, NULL, &g, &t), -EINVAL);
    rrpc_grant_opts bad = {.reserved = {1}};
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 16, RRPC_ACCESS_REMOTE_READ, &bad, &g,
                                       &t),
                     -EINVAL);
    rrpc_region *ro;
    assert_int_equal(rrpc_mem_reg(T.sctx, T.smem, 4096, RRPC_ACCESS_REMOTE_READ, &ro), 0);
    assert_int_equal(
        rrpc_region_grant(ro, sa, 0, 16, RRPC_ACCESS_REMOTE_WRITE, NULL, &g, &t), RRPC_E_ACCESS);
    rrpc_mem_dereg(ro);
    rrpc_mem_dereg(la);
    rrpc_conn_close(a);
}

static void test_a_grant_ends_at_its_expiry_and_with_its_connection(void **state)
{
    rrpc_conn *sa;
    rrpc_conn *a = connect_pair(&sa);
    uint8_t local[64];
    fill(local, sizeof(local), 9);
    rrpc_region *la;
    assert_int_equal(rrpc_mem_reg(T.cctx, local, sizeof(local), 0, &la), 0);
    rrpc_grant *g;
    rrpc_token t;
    rrpc_grant_opts o = {.expires_ms = 300};
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 64,
                                       RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &o, &g,
                                       &t),
                     0);
    assert_int_equal(rrpc_read_sync(a, la, 0, &t, 0, 64, NULL), 0);
    usleep(600 * 1000);
    refused(&a, &sa, la, &t, 0, 64, true, "reading after the expiry");
    if (!is_verbs()) /* the target's words come through (a NIC has none) */
        assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "expired"));
    assert_int_equal(rrpc_grant_revoke(g), 0);
    /* the connection closes: its grant ends; the grant object stays valid
     * until it is revoked, and the connection's memory with it */
    assert_int_equal(rrpc_region_grant(T.sregion, sa, 0, 64, RRPC_ACCESS_REMOTE_READ, NULL, &g,
                                       &t),
                     0);
    rrpc_conn_close(a);
    for (int i = 0; i < 200; i++) {
        lock();
        bool gone = T.last_server_conn != sa;
        unlock();
        if (gone)
            break;
        usleep(10 * 1000);
    }
    assert_int_equal(rrpc_grant_revoke(g), 0);
    rrpc_mem_dereg(la);
}

/* Grant and revoke, many times over: nothing grows.  RRPC_TEST_GRANT_CYCLES
 * (default 100000; 10000 on verbs, where each bind waits for the NIC, in the
 * Soft-RoCE VM an emulated one). */
static void test_grant_and_revoke_cycles_hold_no_memory(void **state)
{
    rrpc_conn *sa;
    rrpc_conn *a = connect_pair(&sa);
    const char *e = getenv("RRPC_TEST_GRANT_CYCLES");
    long cycles = e ? atol(e) : is_verbs() ? 10000 : 100000;
    rrpc_grant *g;
    rrpc_token t;
    long rss0 = 0;
    /* Counted in pages, not in transparent huge pages: with THP "always"
     * (Debian's kernel) one fault where the heap crosses a 2 MiB boundary
     * added 2 MiB at once and failed this check in a full run in the VM,
     * while three runs of the test alone stayed within the 1 MiB allowed. */
    int thp_off = prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    for (long i = 0; i < cycles; i++) {
        int r = rrpc_region_grant(T.sregion, sa, (uint64_t)(i % 1024) * 64, 64,
                                  RRPC_ACCESS_REMOTE_READ, NULL, &g, &t);
        if (r)
            fail_msg("cycle %ld: %s: %s", i, rrpc_err_name(r), rrpc_ctx_last_error(T.sctx));
        assert_int_equal(rrpc_grant_revoke(g), 0);
        if (i == cycles / 10)
            rss0 = test_rss_kib();
    }
    long grown = test_rss_kib() - rss0;
    if (thp_off == 0)
        prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer keeps freed memory in quarantine: RSS says nothing
     * here; LeakSanitizer checks what is never freed at exit. */
    (void)grown;
#else
    if (grown > 1024)
        fail_msg("RSS grew by %ld KiB over %ld grant/revoke cycles", grown, cycles - cycles / 10);
#endif
    rrpc_conn_close(a);
}

static void test_an_unresolvable_host_fails_with_unknown_host_and_says_so(void **state)
{
    (void)state;
    if (test_is_inproc()) {
        printf("# skipped on inproc: a name is looked up in the process, not resolved; "
               "an unknown name is ECONNREFUSED (unit_inproc)\n");
        skip();
    }
    char uri[128];
    snprintf(uri, sizeof(uri), "%.*s://nosuchhost.invalid:7",
             (int)(strstr(T.uri, "://") ? strstr(T.uri, "://") - T.uri : 3), T.uri);
    rrpc_conn *c = NULL;
    int r = rrpc_connect_sync(T.cctx, uri, 5000, NULL, NULL, &c);
    const char *why = rrpc_ctx_last_error(T.cctx);
    printf("# %s: %s: %s\n", uri, rrpc_err_name(r), why);
    if (r == -EAGAIN) {
        printf("# skipped: this host's resolver did not answer for .invalid names\n");
        skip();
    }
    assert_int_equal(r, RRPC_E_UNKNOWN_HOST);
    assert_null(c);
    assert_non_null(strstr(why, "unknown host"));
    assert_non_null(strstr(why, "nosuchhost.invalid"));
}

/* ---- borrowed request buffers (RRPC_CALL_BORROW) ------------------------------ */

struct borrow_call {
    uint8_t *buf, *want;
    size_t len;
    int status, overwritten;
    bool same;
};

/* @n calls of @sizes, each buffer filled from @seed + its index, and the
 * bytes it must come back as. */
static void borrow_calls_init(struct borrow_call *bc, const size_t *sizes, int n, uint32_t seed)
{
    memset(bc, 0, sizeof(*bc) * (size_t)n);
    for (int i = 0; i < n; i++) {
        bc[i].len = sizes[i];
        bc[i].buf = malloc(sizes[i]);
        bc[i].want = malloc(sizes[i]);
        assert_non_null(bc[i].buf);
        assert_non_null(bc[i].want);
        fill(bc[i].buf, sizes[i], seed + (uint32_t)i);
        memcpy(bc[i].want, bc[i].buf, sizes[i]);
    }
}

static void borrow_echo_cb(const rrpc_result *res, void *user)
{
    struct borrow_call *bc = user;
    lock();
    bc->status = res->status;
    bc->same = res->status == 0 && res->len == bc->len && memcmp(res->data, bc->want, bc->len) == 0;
    bc->overwritten++;
    unlock();
}

static void test_a_borrowed_buffer_arrives_bit_exact_around_the_piece_boundaries(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    /* tcp writes and reads in pieces of RRPC_TCP_PIECE_SHARED (256 KiB; it
     * was 64 KiB) while another class is busy (the next test covers its
     * pieces of up to 1 MiB) */
    static const size_t sizes[] = {1, 65535, 65536, 65537, 262143, 262144, 262145,
                                   (1u << 20) + 3, 1, (1u << 20) + 3};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    struct borrow_call bc[N];
    borrow_calls_init(bc, sizes, N, 1000u);
    /* All in flight at once on one class, then one at a time on another. */
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK, .flags = RRPC_CALL_BORROW};
    int done = 0;
    for (int i = 0; i < N; i++)
        assert_int_equal(rrpc_call(c, "echo", bc[i].buf, bc[i].len, &o, borrow_echo_cb, &bc[i]),
                         0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(wait_for(&bc[i].overwritten, 1, 30000), 1);
        lock();
        done += bc[i].status == 0 && bc[i].same;
        if (!bc[i].same)
            printf("# pipelined borrowed echo of %zu bytes: %s, %s\n", bc[i].len,
                   rrpc_err_name(bc[i].status), bc[i].status ? "failed" : "bytes differ");
        unlock();
    }
    assert_int_equal(done, N);
    o.qos_class = RRPC_CLASS_LOW_LATENCY;
    for (int i = 0; i < N; i++) {
        void *out = NULL;
        size_t n = 0;
        assert_int_equal(rrpc_call_sync(c, "echo", bc[i].buf, bc[i].len, &o, &out, &n), 0);
        assert_int_equal(n, bc[i].len);
        assert_memory_equal(out, bc[i].want, n);
        free(out);
    }
    /* An unknown flag is refused before anything goes on the wire. */
    rrpc_call_opts bad = {.flags = 2};
    assert_int_equal(rrpc_call(c, "echo", "x", 1, &bad, borrow_echo_cb, &bc[0]), -EINVAL);
    for (int i = 0; i < N; i++) {
        free(bc[i].buf);
        free(bc[i].want);
    }
    rrpc_conn_close(c);
}

/* tcp writes and reads a class in pieces of up to 1 MiB while no other class
 * of the connection has moved a frame for 100 ms, of 256 KiB while one
 * has, a turn of bulk ending early when low-latency input waits
 * (RRPC_TCP_PREEMPT): sizes around the 1 MiB piece boundaries (a frame's first piece holds
 * its 32-byte header), first with the connection idle beforehand (large
 * pieces from the start), then while low-latency calls keep going (the piece
 * size changes in the middle of frames, on both ends). */
static void test_a_borrowed_buffer_arrives_bit_exact_whether_pieces_are_large_or_small(void **state)
{
    rrpc_conn *c = connect_client(T.cctx);
    static const size_t sizes[] = {(1u << 20) - 33, (1u << 20) - 32, (1u << 20) - 31, 1u << 20,
                                   (2u << 20) - 32, (2u << 20) + 1, (3u << 20) + 5};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    struct borrow_call bc[N];
    borrow_calls_init(bc, sizes, N, 2000u);
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK, .flags = RRPC_CALL_BORROW};
    for (int round = 0; round < 2; round++) {
        if (round == 0)
            usleep(250000); /* nothing moves on any class: large pieces */
        for (int i = 0; i < N; i++) {
            bc[i].overwritten = 0;
            bc[i].same = false;
            assert_int_equal(
                rrpc_call(c, "echo", bc[i].buf, bc[i].len, &o, borrow_echo_cb, &bc[i]), 0);
        }
        int pending = N, probes = 0;
        while (round == 1 && pending) { /* another class busy: small pieces, switching */
            echo_ok(c, 64, RRPC_CLASS_LOW_LATENCY);
            probes++;
            lock();
            pending = 0;
            for (int i = 0; i < N; i++)
                pending += bc[i].overwritten == 0;
            unlock();
        }
        for (int i = 0; i < N; i++)
            assert_int_equal(wait_for(&bc[i].overwritten, 1, 30000), 1);
        for (int i = 0; i < N; i++) {
            lock();
            bool ok = bc[i].status == 0 && bc[i].same;
            if (!ok)
                printf("# round %d: borrowed echo of %zu bytes: %s, %s\n", round, bc[i].len,
                       rrpc_err_name(bc[i].status), bc[i].status ? "failed" : "bytes differ");
            unlock();
            assert_true(ok);
        }
        if (round == 1)
            printf("# %d low-latency calls beside the large ones\n", probes);
    }
    for (int i = 0; i < N; i++) {
        free(bc[i].buf);
        free(bc[i].want);
    }
    rrpc_conn_close(c);
}

static void borrow_overwrite_cb(const rrpc_result *res, void *user)
{
    struct borrow_call *bc = user;
    memset(bc->buf, 0xEE, bc->len); /* the buffer is the caller's again */
    lock();
    bc->status = res->status;
    bc->overwritten++;
    unlock();
}

/* Large borrowed calls whose deadline passes while the server reads nothing
 * (its loop is held): their callbacks run with part of a request unwritten,
 * and overwrite the buffer.  Whatever of them reaches the server later must
 * still be the original bytes. */
/* ---- a region deregistered while a WRITE into it arrives ---- */

static void h_region_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_token t;
    uint8_t buf[RRPC_TOKEN_SIZE];
    assert_int_equal(rrpc_region_token(user, rrpc_request_conn(req), &t), 0);
    rrpc_token_encode(&t, buf);
    rrpc_respond(req, buf, sizeof(buf));
}

struct dereg_state {
    int token_done, token_status, write_done, write_status;
    rrpc_token t;
};

static void dereg_token_cb(const rrpc_result *res, void *user)
{
    struct dereg_state *d = user;
    d->token_status = res->status ? res->status : rrpc_token_decode(res->data, res->len, &d->t);
    d->token_done++;
}

static void dereg_write_cb(int status, void *user)
{
    struct dereg_state *d = user;
    d->write_status = status;
    d->write_done++;
}

/* The target runs driven from this thread, so the order is exact: the
 * first bytes of a 32 MiB WRITE land, the region is deregistered and its
 * memory unmapped, and the rest must go nowhere (a store there would crash
 * the test) while the writer learns that its WRITE failed.  tcp reads a
 * large WRITE straight into its region, checking the region before each
 * read; this is what keeps that safe.  (verbs: the NIC may have put all of
 * it in place before the deregistration, then the WRITE succeeds.) */
static void test_a_region_deregistered_while_a_write_arrives_gets_no_more_of_it(void **state)
{
    enum { LEN = 32 << 20 };
    bool verbs = strcmp(T.transport, "verbs") == 0;
    rrpc_ctx *s;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    uint8_t *mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    rrpc_region *r;
    assert_int_equal(rrpc_mem_reg(s, mem, LEN, RRPC_ACCESS_REMOTE_WRITE, &r), 0);
    assert_int_equal(rrpc_register(s, "token", h_region_token, r), 0);
    assert_int_equal(rrpc_register(s, "echo", h_echo, NULL), 0);
    char curi[300];
    listen_any(s, curi, sizeof(curi)); /* closed with its context */
    rrpc_conn *c = NULL;
    assert_int_equal(rrpc_connect(T.cctx, curi, NULL, NULL, &c), 0);
    struct dereg_state d = {0};
    bool asked = false; /* until the connection is up a call may be refused */
    for (int i = 0; i < 20000 && !d.token_done; i++) {
        if (!asked)
            asked = rrpc_call(c, "token", NULL, 0, NULL, dereg_token_cb, &d) == 0;
        assert_int_equal(rrpc_ctx_progress(s, 1), 0);
    }
    assert_int_equal(d.token_done, 1);
    assert_int_equal(d.token_status, 0);
    uint8_t *src = malloc(LEN);
    assert_non_null(src);
    memset(src, 0xA5, LEN);
    rrpc_region *lr;
    assert_int_equal(rrpc_mem_reg(T.cctx, src, LEN, 0, &lr), 0);
    assert_int_equal(rrpc_write(c, lr, 0, &d.t, 0, LEN, NULL, dereg_write_cb, &d), 0);
    for (int i = 0; i < 100000 && mem[0] != 0xA5 && !d.write_done; i++)
        assert_int_equal(rrpc_ctx_progress(s, 1), 0);
    assert_int_equal(mem[0], 0xA5);
    rrpc_mem_dereg(r);
    assert_int_equal(munmap(mem, LEN), 0);
    for (int i = 0; i < 100000 && !d.write_done; i++)
        assert_int_equal(rrpc_ctx_progress(s, 1), 0);
    assert_int_equal(d.write_done, 1);
    printf("# WRITE into a region deregistered on the way: %s\n", rrpc_strerror(d.write_status));
    if (verbs)
        assert_true(d.write_status == 0 || d.write_status == RRPC_E_ACCESS);
    else
        assert_int_equal(d.write_status, RRPC_E_ACCESS);
    rrpc_conn_close(c);
    rrpc_mem_dereg(lr);
    free(src);
    rrpc_ctx_destroy(s);
}

static uint64_t stat_line(rrpc_ctx *ctx, const char *series);
#define NOT_RUN_CANCELLED "rrpc_requests_not_run_total{reason=\"cancelled\"} "

static void test_a_borrowed_buffer_is_not_read_after_its_completion_ran(void **state)
{
    enum { N = 4 };
    rrpc_conn *c = connect_client(T.cctx);
    /* bulk used once first: on verbs that connects its queue pair, which
     * the held loop below could not accept, so the requests go out. */
    echo_ok(c, 1, RRPC_CLASS_BULK);
    uint64_t not_run_before = stat_line(T.sctx, NOT_RUN_CANCELLED);
    lock();
    T.blocking = T.release = T.check_good = T.check_bad = 0;
    unlock();
    struct pipe_state blk = {.expect_len = 2};
    rrpc_call_opts bo = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = -1};
    assert_int_equal(rrpc_call(c, "hold_loop", NULL, 0, &bo, pipe_cb, &blk), 0);
    assert_int_equal(wait_for(&T.blocking, 1, 10000), 1);
    /* 16 MiB each: more than the sockets' buffers hold on loopback. */
    struct borrow_call bc[N];
    memset(bc, 0, sizeof(bc));
    /* Ended by the caller while under way: cancelled (a call past its
     * deadline ends the same way at the caller, but the server would not
     * run it, and this test reads what the server got). */
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK, .deadline_ms = -1,
                        .flags = RRPC_CALL_BORROW};
    for (int i = 0; i < N; i++) {
        bc[i].len = (16u << 20) + (size_t)i;
        bc[i].buf = malloc(bc[i].len);
        assert_non_null(bc[i].buf);
        fill(bc[i].buf, bc[i].len, (uint32_t)bc[i].len);
        assert_int_equal(rrpc_call(c, "check", bc[i].buf, bc[i].len, &o, borrow_overwrite_cb,
                                   &bc[i]),
                         0);
    }
    usleep(300 * 1000);
    for (int i = 0; i < N; i++)
        assert_int_equal(rrpc_call_cancel(c, borrow_overwrite_cb, &bc[i]), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(wait_for(&bc[i].overwritten, 1, 30000), 1);
        assert_int_equal(bc[i].status, RRPC_E_CANCELLED);
    }
    lock();
    T.release = 1;
    unlock();
    assert_int_equal(wait_for(&blk.done, 1, 30000), 1);
    assert_int_equal(blk.bad, 0);
    /* Behind whatever of the requests was on its way: the stream is intact. */
    echo_ok(c, 1000, RRPC_CLASS_BULK);
    lock();
    int good = T.check_good, bad = T.check_bad;
    unlock();
    /* A request the server reads with its CANCEL right behind it is
     * answered without running (verbs reads all of them so, in one batch
     * after the held loop): it reached the server too. */
    int not_run = (int)(stat_line(T.sctx, NOT_RUN_CANCELLED) - not_run_before);
    printf("# %d of %d cancelled borrowed requests reached the server, %d altered, %d more not "
           "run (their CANCEL read behind them)\n",
           good + bad, N, bad, not_run);
    assert_int_equal(bad, 0);
    assert_true(good + not_run >= 1); /* one was under way when it was cancelled */
    for (int i = 0; i < N; i++)
        free(bc[i].buf);
    rrpc_conn_close(c);
}

/* ---- bad input from a raw peer (tcp only: the frames are written by hand) ---- */

/* Reported to cmocka as skipped (not passed) on other transports. */
static bool raw_skip(void)
{
    if (strcmp(T.transport, "tcp") != 0) {
        printf("# skipped on %s: raw frames are injected over tcp sockets\n", T.transport);
        skip();
    }
    return false;
}

static void still_serving(void)
{
    rrpc_conn *c = connect_client(T.cctx);
    echo_ok(c, 1000, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(c);
}

/* Waits until every server-side connection of earlier tests is down (their
 * DOWN events arrive asynchronously), then returns the count of downs. */
static int downs_now(void)
{
    for (int i = 0; i < 500; i++) {
        lock();
        int ups = T.server_ups, d = T.server_downs;
        unlock();
        if (d >= ups)
            return d;
        usleep(10000);
    }
    fail_msg("server connections of earlier tests did not go down");
    return -1;
}

/* Opens a raw connection, writes @n bytes on the socket of class @cls, and
 * expects the server to close that connection with @reason (without the
 * raw peer sending anything more) and to go on serving everyone else. */
static void raw_expect_down(int cls, const void *bytes, size_t n, int reason)
{
    struct raw_conn rc;
    int d0 = downs_now();
    assert_int_equal(raw_handshake(&rc, T.server_addr, T.port), 0);
    assert_true(write(rc.fd[cls], bytes, n) == (ssize_t)n);
    assert_int_equal(wait_for(&T.server_downs, d0 + 1, 5000), d0 + 1);
    assert_int_equal(T.last_down_reason, reason);
    raw_close(&rc);
    still_serving();
}

static void test_garbage_bytes_are_refused_and_the_server_keeps_serving(void **state)
{
    if (raw_skip())
        return;
    int fd = raw_connect(T.server_addr, T.port);
    assert_true(fd >= 0);
    const char junk[64] = "GET / HTTP/1.1\r\nHost: roce-rpc\r\n\r\n";
    assert_true(write(fd, junk, sizeof(junk)) == sizeof(junk));
    int code = 0;
    assert_int_equal(raw_read_refusal(fd, &code), 0);
    assert_int_equal(code, RRPC_E_PROTO);
    close(fd);
    still_serving();
}

static void test_wrong_version_is_refused_with_a_version_error(void **state)
{
    if (raw_skip())
        return;
    int fd = raw_connect(T.server_addr, T.port);
    assert_true(fd >= 0);
    uint8_t hdr[32];
    raw_header(hdr, 1 /*HELLO*/, 0, 0, 0, 0, 32, 0);
    hdr[4] = 99; /* version */
    uint8_t hello[32] = {99, 4};
    assert_true(write(fd, hdr, 32) == 32 && write(fd, hello, 32) == 32);
    int code = 0;
    assert_int_equal(raw_read_refusal(fd, &code), 0);
    assert_int_equal(code, RRPC_E_VERSION);
    close(fd);
    still_serving();
}

/* A peer of protocol version @v says HELLO: it is refused in its own
 * version's header, so that it can read why. */
static void older_peer_told_why(int v)
{
    int fd = raw_connect(T.server_addr, T.port);
    assert_true(fd >= 0);
    uint8_t hdr[32], msg[512] = {0};
    raw_header(hdr, 1 /*HELLO*/, 0, 0, 0, 0, 32, 0);
    hdr[4] = (uint8_t)v;
    uint8_t hello[32] = {(uint8_t)v, 4, 16, 0, 64, 0, 16, 0, 8, 0};
    raw_le(hello + 12, 1u << 20, 4);
    assert_true(write(fd, hdr, 32) == 32 && write(fd, hello, 32) == 32);
    assert_int_equal(raw_read_frame(fd, hdr, msg, sizeof(msg) - 1), 0);
    assert_int_equal(hdr[4], v);
    assert_int_equal(hdr[5], 11 /* ERROR */);
    assert_int_equal((int32_t)(uint32_t)raw_get(hdr + 16, 4), RRPC_E_VERSION);
    assert_non_null(strstr((char *)msg, "protocol version 5"));
    char client[32];
    snprintf(client, sizeof(client), "client version %d", v);
    assert_non_null(strstr((char *)msg, client));
    close(fd);
    still_serving();
}

/* Version 1: four sockets, before sockets on demand. */
static void test_a_version_1_peer_is_told_why_in_its_own_version(void **state)
{
    if (raw_skip())
        return;
    older_peer_told_why(1);
}

/* Version 3, the last without metadata, is refused too, never served
 * without the new fields (docs/protocol.md section 5). */
static void test_a_version_3_peer_without_metadata_is_refused_and_told_why(void **state)
{
    if (raw_skip())
        return;
    older_peer_told_why(3);
}

/* Version 4, the last without lent credit (LEND), is refused too: its
 * peer would take a LEND for an unknown frame type. */
static void test_a_version_4_peer_without_lending_is_refused_and_told_why(void **state)
{
    if (raw_skip())
        return;
    older_peer_told_why(4);
}

static void test_a_4_GiB_length_closes_the_connection_before_any_allocation(void **state)
{
    if (raw_skip())
        return;
    uint8_t hdr[32];
    raw_header(hdr, 5 /*REQUEST*/, 1, 0, 1, 0, 0xFFFFFFFFu, 0);
    raw_expect_down(1, hdr, sizeof(hdr), RRPC_E_TOO_BIG);
}

/* After a large payload the server reads the next header alone (to read the
 * next large payload straight into its buffer): a header that announces
 * 4 GiB there is still refused at the header, before any allocation. */
static void test_a_4_GiB_length_after_a_large_frame_is_refused_at_its_header(void **state)
{
    if (raw_skip())
        return;
    enum { LARGE = 200 * 1000 };
    uint8_t *bytes = calloc(1, 32 + LARGE + 32);
    assert_non_null(bytes);
    raw_header(bytes, 5 /*REQUEST*/, 1, 0, 1, 0 /* no such method */, LARGE, 0);
    raw_header(bytes + 32 + LARGE, 5 /*REQUEST*/, 1, 0, 2, 0, 0xFFFFFFFFu, 0);
    raw_expect_down(1, bytes, 32 + LARGE + 32, RRPC_E_TOO_BIG);
    free(bytes);
}

static void test_a_peer_vanishing_mid_message_is_detected(void **state)
{
    if (raw_skip())
        return;
    struct raw_conn rc;
    int d0 = downs_now();
    assert_int_equal(raw_handshake(&rc, T.server_addr, T.port), 0);
    uint8_t hdr[32];
    raw_header(hdr, 5 /*REQUEST*/, 1, 0, 7, 0, 1000, 0);
    assert_true(write(rc.fd[1], hdr, 32) == 32);
    assert_true(write(rc.fd[1], "only part of it", 15) == 15);
    raw_close(&rc);
    assert_int_equal(wait_for(&T.server_downs, d0 + 1, 5000), d0 + 1);
    assert_int_equal(T.last_down_reason, RRPC_E_CONN_LOST);
    still_serving();
}

static void test_a_malformed_header_closes_only_that_connection(void **state)
{
    if (raw_skip())
        return;
    int d0 = downs_now();
    rrpc_conn *bystander = connect_client(T.cctx);
    struct raw_conn rc;
    assert_int_equal(raw_handshake(&rc, T.server_addr, T.port), 0);
    uint8_t hdr[32];
    raw_header(hdr, 5, 1, 0, 1, 0, 0, 0);
    hdr[6] = 9; /* class 9 on the low_latency socket */
    assert_true(write(rc.fd[1], hdr, 32) == 32);
    assert_int_equal(wait_for(&T.server_downs, d0 + 1, 5000), d0 + 1);
    assert_int_equal(T.last_down_reason, RRPC_E_BAD_CLASS);
    raw_close(&rc);
    echo_ok(bystander, 64, RRPC_CLASS_LOW_LATENCY);
    rrpc_conn_close(bystander);
}

static void test_a_sender_overrunning_its_credits_is_cut_off(void **state)
{
    if (raw_skip())
        return;
    /* background grants 8 credits by default.  Nine frames that draw no
     * answer (acks of operations the server never started), in one burst:
     * the server returns no credit before the ninth, so the ninth overruns. */
    uint8_t burst[9 * 32];
    for (int i = 0; i < 9; i++)
        raw_header(burst + 32 * i, 10 /*OS_ACK*/, 3, 0, 900000 + (uint64_t)i, 0, 0, 0);
    raw_expect_down(3, burst, sizeof(burst), RRPC_E_CREDIT);
}

/* As above, but the ninth frame claims 32 MiB and none of it is ever sent:
 * the server must refuse it from its header, not wait to buffer a payload
 * the peer had no credit for. */
static void test_a_frame_without_credit_is_refused_at_its_header(void **state)
{
    if (raw_skip())
        return;
    uint8_t burst[9 * 32];
    for (int i = 0; i < 8; i++)
        raw_header(burst + 32 * i, 10 /*OS_ACK*/, 3, 0, 910000 + (uint64_t)i, 0, 0, 0);
    raw_header(burst + 32 * 8, 5 /*REQUEST*/, 3, 0, 910008, 0, 32u << 20, 0);
    raw_expect_down(3, burst, sizeof(burst), RRPC_E_CREDIT);
}

/* No credit bounds a control frame: its type does.  A KEEPALIVE header that
 * claims 16 MiB is refused at once. */
static void test_a_control_frame_claiming_a_large_payload_is_refused_at_its_header(void **state)
{
    if (raw_skip())
        return;
    uint8_t hdr[32];
    raw_header(hdr, 14 /*KEEPALIVE*/, 0, 0, 0, 0, 16u << 20, 0);
    raw_expect_down(0, hdr, sizeof(hdr), RRPC_E_PROTO);
}

static void test_a_raw_write_outside_the_region_is_refused_by_the_target(void **state)
{
    if (raw_skip())
        return;
    rrpc_conn *c = connect_client(T.cctx);
    rrpc_token t;
    fetch_token(c, &t);
    rrpc_conn_close(c);
    struct raw_conn rc;
    assert_int_equal(raw_handshake(&rc, T.server_addr, T.port), 0);
    uint8_t before[16];
    memcpy(before, T.smem + SMEM_LEN - 8, 8);
    int status = 0;
    /* 16 bytes starting 8 bytes before the end: straddles the end */
    assert_int_equal(raw_os_write(&rc, t.addr + SMEM_LEN - 8, t.key, "0123456789abcdef", 16,
                                  &status),
                     0);
    assert_int_equal(status, RRPC_E_ACCESS);
    assert_memory_equal(T.smem + SMEM_LEN - 8, before, 8);
    /* a forged key */
    assert_int_equal(raw_os_write(&rc, t.addr, t.key + 1, "x", 1, &status), 0);
    assert_int_equal(status, RRPC_E_ACCESS);
    /* and the right one works, through the same connection */
    assert_int_equal(raw_os_write(&rc, t.addr + 100, t.key, "roce", 4, &status), 0);
    assert_int_equal(status, 0);
    assert_memory_equal(T.smem + 100, "roce", 4);
    raw_close(&rc);
}

/* ---- handler workers (RRPC_HANDLER_ON_WORKER) ------------------------------- */

/* A worker handler that holds its request until the test lets it go. */
static struct {
    int started, released, answered, refused, bad;
    char refusal[256];
} W;

static void h_block(rrpc_request *req, const void *p, size_t len, void *user)
{
    lock();
    W.started++;
    unlock();
    struct timespec ts = test_deadline(30000);
    pthread_mutex_lock(&test_mu);
    while (!W.released)
        if (pthread_cond_timedwait(&test_cv, &test_mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&test_mu);
    uint32_t n = (uint32_t)len;
    rrpc_respond(req, &n, sizeof(n));
}

static void block_done(const rrpc_result *res, void *user)
{
    lock();
    if (res->status == 0 && res->len == 4) {
        W.answered++;
    } else if (res->status == RRPC_E_LIMIT) {
        W.refused++;
        snprintf(W.refusal, sizeof(W.refusal), "%s", res->message);
    } else {
        W.bad++;
    }
    unlock();
}

static void release_blocked(void)
{
    lock();
    W.released = 1;
    unlock();
}

/* A server context in thread mode with "block" on its workers and "echo" on
 * the loop; @cfg may be NULL.  *@curi: where to connect. */
static rrpc_ctx *worker_server(rrpc_config *cfg, int bulk_credits, char *curi, size_t n)
{
    memset(&W, 0, sizeof(W));
    rrpc_ctx *s;
    assert_int_equal(cfg ? rrpc_ctx_create_with(cfg, &s) : rrpc_ctx_create(&s), 0);
    if (bulk_credits) {
        int dscp;
        rrpc_class_get(s, RRPC_CLASS_BULK, &dscp, NULL, NULL);
        assert_int_equal(rrpc_class_set(s, RRPC_CLASS_BULK, dscp, 1, bulk_credits), 0);
    }
    rrpc_register_opts ro = {.flags = RRPC_HANDLER_ON_WORKER};
    assert_int_equal(rrpc_register_with(s, "block", h_block, NULL, &ro), 0);
    assert_int_equal(rrpc_register(s, "echo", h_echo, NULL), 0);
    listen_any(s, curi, n);
    assert_int_equal(rrpc_ctx_start_thread(s), 0);
    return s;
}

static void test_a_worker_handler_that_holds_its_request_holds_no_other_call(void **state)
{
    (void)state;
    char curi[300];
    rrpc_ctx *s = worker_server(NULL, 0, curi, sizeof(curi));
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    rrpc_call_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    assert_int_equal(rrpc_call(c, "block", "x", 1, &bulk, block_done, NULL), 0);
    assert_int_equal(wait_for(&W.started, 1, 20000), 1);
    /* The handler still holds its request: the loop serves the others, in
     * another class and in the same one.  On the loop thread these would
     * wait for it and miss their deadlines. */
    void *out = NULL;
    size_t outlen = 0;
    rrpc_call_opts quick = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = 10000};
    int r = rrpc_call_sync(c, "echo", "ping", 4, &quick, &out, &outlen);
    if (r)
        fprintf(stderr, "echo while a worker holds a request: %s: %s\n", rrpc_err_name(r),
                rrpc_ctx_last_error(T.cctx));
    assert_int_equal(r, 0);
    assert_int_equal(outlen, 4);
    free(out);
    bulk.deadline_ms = 10000;
    assert_int_equal(rrpc_call_sync(c, "echo", "bulk", 4, &bulk, &out, &outlen), 0);
    free(out);
    lock();
    int answered = W.answered;
    unlock();
    assert_int_equal(answered, 0);
    release_blocked();
    assert_int_equal(wait_for(&W.answered, 1, 20000), 1);
    assert_int_equal(W.bad, 0);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

/* ---- deadlines and cancels that reach the server ------------------------------ */

static struct {
    int counted, dl_count_done, count_status, watching, saw_cancel, dl_watch_done, watch_status;
    int64_t remaining_us;
    rrpc_request *held[4];
    int nheld;
} DL;

/* A worker handler that counts the requests it runs, and what time they had. */
static void h_dl_count(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    int64_t left = rrpc_request_remaining_us(req);
    lock();
    DL.counted++;
    DL.remaining_us = left;
    unlock();
    rrpc_respond(req, "n", 1);
}

static void dl_count_done(const rrpc_result *res, void *user)
{
    (void)user;
    lock();
    DL.count_status = res->status;
    DL.dl_count_done++;
    unlock();
}

/* A worker handler that runs until its caller gives up (or 10 s). */
static void h_dl_watch(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    lock();
    DL.watching++;
    unlock();
    for (int i = 0; i < 1000 && !rrpc_request_cancelled(req); i++)
        usleep(10 * 1000);
    lock();
    DL.saw_cancel = rrpc_request_cancelled(req);
    unlock();
    rrpc_respond(req, "late", 4);
}

static void dl_watch_done(const rrpc_result *res, void *user)
{
    (void)user;
    lock();
    DL.watch_status = res->status;
    DL.dl_watch_done++;
    unlock();
}

/* A loop handler that keeps its request (and its credit) unanswered. */
static void h_dl_hold(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    lock();
    if (DL.nheld < 4)
        DL.held[DL.nheld++] = req;
    else
        rrpc_respond(req, "", 0);
    unlock();
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t stat_line(rrpc_ctx *ctx, const char *series)
{
    static char text[1 << 18];
    size_t n = 0;
    assert_int_equal(rrpc_ctx_stats_text(ctx, text, sizeof(text), &n), 0);
    char line[200];
    snprintf(line, sizeof(line), "\n%s", series); /* the sample, not its HELP line */
    const char *at = strstr(text, line);
    assert_non_null(at);
    return strtoull(at + strlen(line), NULL, 10);
}

/*
 * The caller's deadline travels with the request.  One handler worker is
 * busy; a second request waits for it with 200 ms to live.  Meanwhile the
 * loop answers other methods and an unknown one.  The caller gives up at
 * 200 ms and says so; when the worker is free the request is answered
 * without running.  Before requests carried their deadline and callers
 * sent a cancel, it ran after its caller had gone.
 */
static void test_a_request_its_caller_gave_up_on_is_never_run_and_others_are_answered(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_THREADS", "1"), 0);
    char curi[300];
    rrpc_ctx *s = worker_server(cfg, 0, curi, sizeof(curi));
    rrpc_config_destroy(cfg);
    memset(&DL, 0, sizeof(DL));
    rrpc_register_opts ro = {.flags = RRPC_HANDLER_ON_WORKER};
    assert_int_equal(rrpc_register_with(s, "count", h_dl_count, NULL, &ro), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    assert_int_equal(rrpc_call(c, "block", "x", 1, NULL, block_done, NULL), 0);
    assert_int_equal(wait_for(&W.started, 1, 20000), 1);
    rrpc_call_opts short_ = {.deadline_ms = 200};
    assert_int_equal(rrpc_call(c, "count", "q", 1, &short_, dl_count_done, NULL), 0);
    /* the loop is free: other methods, and a method that does not exist */
    void *out = NULL;
    size_t outlen = 0;
    rrpc_call_opts quick = {.deadline_ms = 5000};
    assert_int_equal(rrpc_call_sync(c, "echo", "ping", 4, &quick, &out, &outlen), 0);
    free(out);
    assert_int_equal(rrpc_call_sync(c, "no-such-method", "", 0, &quick, &out, &outlen),
                     RRPC_E_NO_METHOD);
    assert_int_equal(wait_for(&DL.dl_count_done, 1, 10000), 1);
    assert_int_equal(DL.count_status, RRPC_E_DEADLINE);
    usleep(100 * 1000); /* the cancel is on its way, behind the request */
    release_blocked();
    assert_int_equal(wait_for(&W.answered, 1, 20000), 1);
    /* the next request runs; the given-up one never did */
    assert_int_equal(rrpc_call_sync(c, "count", "r", 1, &quick, &out, &outlen), 0);
    free(out);
    lock();
    int counted = DL.counted;
    int64_t left = DL.remaining_us;
    unlock();
    if (counted != 1)
        fail_msg("the handler ran %d times: the request whose caller gave up ran too", counted);
    /* the handler saw the time its caller gave it (5 s), less what has passed */
    assert_true(left > 4000000 && left <= 5000000);
    uint64_t not_run =
        stat_line(s, "rrpc_requests_not_run_total{reason=\"cancelled\"} ") +
        stat_line(s, "rrpc_requests_not_run_total{reason=\"deadline\"} ");
    assert_int_equal(not_run, 1);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

/* A handler that holds the loop thread for 300 ms (the default placement). */
static void h_dl_nap(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    lock();
    DL.watching++;
    unlock();
    usleep(300 * 1000);
    rrpc_respond(req, "z", 1);
}

static struct {
    int n, echo_status, nomethod_status;
} NAP;

static void nap_echo_done(const rrpc_result *res, void *user)
{
    (void)user;
    lock();
    NAP.echo_status = res->status;
    NAP.n++;
    unlock();
}

static void nap_nomethod_done(const rrpc_result *res, void *user)
{
    (void)user;
    lock();
    NAP.nomethod_status = res->status;
    NAP.n++;
    unlock();
}

/*
 * The case of the issue, where nothing relieves the loop
 * (RRPC_HANDLER_RELIEF_MS=0): a handler sleeps 300 ms on the loop thread.  A
 * call made meanwhile with 100 ms to live fails at its caller; the server
 * reads it only after the nap, sees from when it arrived that its caller
 * has given up, and answers without running it.  Calls with time to spare
 * (another method, a method that does not exist) are answered after the
 * nap.  The slow handler is counted (and logged once).  Before requests
 * carried their deadline, the expired call ran after the nap.  verbs has
 * no receive time: there the caller's CANCEL, read in the same batch of
 * completions behind the request, keeps it from running.
 */
static void test_a_loop_handler_that_naps_300_ms_delays_others_but_expired_work_never_runs(
    void **state)
{
    (void)state;
    char curi[300];
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_RELIEF_MS", "0"), 0);
    rrpc_ctx *s = worker_server(cfg, 0, curi, sizeof(curi));
    rrpc_config_destroy(cfg);
    memset(&DL, 0, sizeof(DL));
    memset(&NAP, 0, sizeof(NAP));
    assert_int_equal(rrpc_register(s, "nap", h_dl_nap, NULL), 0);
    assert_int_equal(rrpc_register(s, "count", h_dl_count, NULL), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    rrpc_call_opts roomy = {.deadline_ms = 5000};
    assert_int_equal(rrpc_call(c, "nap", "", 0, &roomy, dl_watch_done, NULL), 0);
    assert_int_equal(wait_for(&DL.watching, 1, 10000), 1);
    rrpc_call_opts short_ = {.deadline_ms = 100};
    assert_int_equal(rrpc_call(c, "count", "q", 1, &short_, dl_count_done, NULL), 0);
    assert_int_equal(rrpc_call(c, "echo", "e", 1, &roomy, nap_echo_done, NULL), 0);
    assert_int_equal(rrpc_call(c, "no-such-method", "", 0, &roomy, nap_nomethod_done, NULL), 0);
    assert_int_equal(wait_for(&DL.dl_count_done, 1, 10000), 1);
    assert_int_equal(DL.count_status, RRPC_E_DEADLINE);
    assert_int_equal(wait_for(&DL.dl_watch_done, 1, 10000), 1);
    assert_int_equal(DL.watch_status, 0);
    assert_int_equal(wait_for(&NAP.n, 2, 10000), 2);
    assert_int_equal(NAP.echo_status, 0);
    assert_int_equal(NAP.nomethod_status, RRPC_E_NO_METHOD);
    void *out = NULL;
    size_t outlen = 0;
    assert_int_equal(rrpc_call_sync(c, "count", "r", 1, &roomy, &out, &outlen), 0);
    free(out);
    lock();
    int counted = DL.counted;
    unlock();
    if (counted != 1)
        fail_msg("count ran %d times: the call whose caller gave up ran after the nap", counted);
    assert_true(stat_line(s, "rrpc_requests_not_run_total{reason=\"deadline\"} ") +
                    stat_line(s, "rrpc_requests_not_run_total{reason=\"cancelled\"} ") ==
                1);
    assert_int_equal(stat_line(s, "rrpc_slow_handlers_total "), 1);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

/* A handler on the loop thread that runs until the test lets it go
 * (HOLD.go), at most 20 s. */
static struct {
    int started, go;
} HOLD;

static void h_hold_until_go(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    lock();
    HOLD.started++;
    unlock();
    (void)wait_for(&HOLD.go, 1, 20000);
    rrpc_respond(req, "z", 1);
}

/*
 * The same case with the defaults: a handler that runs long on the loop
 * thread no longer holds the loop.  Once it has run RRPC_HANDLER_RELIEF_MS
 * (10 ms) another thread takes the loop over, and while the handler still
 * runs (it returns only when the test lets it go) the server answers a call
 * with 100 ms to live, another method and a method that does not exist on
 * the same connection, and a call on a second connection.  The thread of
 * the long handler watches afterwards: a second long handler is relieved
 * too.  Counted in rrpc_handler_reliefs_total.
 */
static void test_a_loop_handler_that_runs_long_no_longer_holds_the_loop(void **state)
{
    (void)state;
    char curi[300];
    rrpc_ctx *s = worker_server(NULL, 0, curi, sizeof(curi));
    memset(&DL, 0, sizeof(DL));
    memset(&NAP, 0, sizeof(NAP));
    memset(&HOLD, 0, sizeof(HOLD));
    assert_int_equal(rrpc_register(s, "hold", h_hold_until_go, NULL), 0);
    assert_int_equal(rrpc_register(s, "count", h_dl_count, NULL), 0);
    rrpc_conn *c, *c2;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c2), 0);
    rrpc_call_opts roomy = {.deadline_ms = 30000};
    for (int round = 1; round <= 2; round++) {
        lock();
        DL.dl_watch_done = 0;
        unlock();
        assert_int_equal(rrpc_call(c, "hold", "", 0, &roomy, dl_watch_done, NULL), 0);
        assert_int_equal(wait_for(&HOLD.started, round, 10000), round);
        if (round == 1) {
            rrpc_call_opts short_ = {.deadline_ms = 100};
            assert_int_equal(rrpc_call(c, "count", "q", 1, &short_, dl_count_done, NULL), 0);
            assert_int_equal(rrpc_call(c, "echo", "e", 1, &roomy, nap_echo_done, NULL), 0);
            assert_int_equal(
                rrpc_call(c, "no-such-method", "", 0, &roomy, nap_nomethod_done, NULL), 0);
            assert_int_equal(wait_for(&DL.dl_count_done, 1, 10000), 1);
            if (DL.count_status != 0)
                fail_msg("a call with 100 ms to live beside the long handler: %s",
                         rrpc_err_name(DL.count_status));
            assert_int_equal(wait_for(&NAP.n, 2, 10000), 2);
            assert_int_equal(NAP.echo_status, 0);
            assert_int_equal(NAP.nomethod_status, RRPC_E_NO_METHOD);
        }
        void *out = NULL;
        size_t outlen = 0;
        assert_int_equal(rrpc_call_sync(c2, "echo", "second", 6, &roomy, &out, &outlen), 0);
        assert_int_equal(outlen, 6);
        free(out);
        lock();
        int held_on = DL.dl_watch_done == 0 && HOLD.go == 0;
        unlock();
        if (!held_on)
            fail_msg("round %d: the long handler returned before the others were answered",
                     round);
        assert_int_equal(stat_line(s, "rrpc_handler_reliefs_total "), (uint64_t)round);
        lock();
        HOLD.go = 1;
        unlock();
        assert_int_equal(wait_for(&DL.dl_watch_done, 1, 30000), 1);
        assert_int_equal(DL.watch_status, 0);
        lock();
        HOLD.go = 0;
        unlock();
    }
    lock();
    int counted = DL.counted;
    unlock();
    assert_int_equal(counted, 1);
    rrpc_conn_close(c);
    rrpc_conn_close(c2);
    rrpc_ctx_destroy(s);
}

/* rrpc_call_cancel reaches a handler that is running: it sees
 * rrpc_request_cancelled and stops, long before its own 10 s. */
static void test_a_cancelled_call_reaches_its_running_handler(void **state)
{
    (void)state;
    char curi[300];
    rrpc_ctx *s = worker_server(NULL, 0, curi, sizeof(curi));
    memset(&DL, 0, sizeof(DL));
    rrpc_register_opts ro = {.flags = RRPC_HANDLER_ON_WORKER};
    assert_int_equal(rrpc_register_with(s, "watch", h_dl_watch, NULL, &ro), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    static int token;
    assert_int_equal(rrpc_call(c, "watch", "w", 1, NULL, dl_watch_done, &token), 0);
    assert_int_equal(wait_for(&DL.watching, 1, 20000), 1);
    double t0 = now_ms();
    assert_int_equal(rrpc_call_cancel(c, dl_watch_done, &token), 0);
    assert_int_equal(DL.dl_watch_done, 1);
    assert_int_equal(DL.watch_status, RRPC_E_CANCELLED);
    assert_int_equal(wait_for(&DL.saw_cancel, 1, 5000), 1);
    assert_true(now_ms() - t0 < 5000);
    assert_int_equal(stat_line(s, "rrpc_request_cancels_total "), 1);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

/* A request that keeps its credit until answered (RRPC_HANDLER_CREDIT_ON_
 * ANSWER) gives it back when its caller cancels: with 2 bulk credits both
 * held, a third bulk call is answered once the two are cancelled. */
static void test_cancelling_calls_that_hold_credit_gives_the_credit_back(void **state)
{
    (void)state;
    char curi[300];
    rrpc_ctx *s = worker_server(NULL, 2, curi, sizeof(curi));
    memset(&DL, 0, sizeof(DL));
    rrpc_register_opts ro = {.flags = RRPC_HANDLER_CREDIT_ON_ANSWER};
    assert_int_equal(rrpc_register_with(s, "hold", h_dl_hold, NULL, &ro), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    rrpc_call_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    static int tok[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(rrpc_call(c, "hold", "h", 1, &bulk, dl_watch_done, &tok[i]), 0);
    assert_int_equal(wait_for(&DL.nheld, 2, 10000), 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rrpc_call_cancel(c, dl_watch_done, &tok[i]), 0);
    void *out = NULL;
    size_t outlen = 0;
    rrpc_call_opts third = {.qos_class = RRPC_CLASS_BULK, .deadline_ms = 3000};
    int r = rrpc_call_sync(c, "echo", "third", 5, &third, &out, &outlen);
    if (r)
        fail_msg("the third bulk call: %s (the cancelled calls kept their credit)",
                 rrpc_err_name(r));
    free(out);
    lock();
    rrpc_request *held[4];
    int nheld = DL.nheld;
    memcpy(held, DL.held, sizeof(held));
    DL.nheld = 0;
    unlock();
    for (int i = 0; i < nheld; i++)
        rrpc_respond(held[i], "", 0); /* answered after all: no credit twice */
    assert_int_equal(rrpc_call_sync(c, "echo", "fourth", 6, &third, &out, &outlen), 0);
    free(out);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

static void test_worker_requests_beyond_the_queue_bound_are_refused_with_the_reason(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_QUEUE_BYTES", "1000"), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_THREADS", "1"), 0);
    char curi[300];
    rrpc_ctx *s = worker_server(cfg, 0, curi, sizeof(curi));
    rrpc_config_destroy(cfg);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    static uint8_t buf[800];
    assert_int_equal(rrpc_call(c, "block", buf, sizeof(buf), NULL, block_done, NULL), 0);
    assert_int_equal(wait_for(&W.started, 1, 20000), 1);
    /* 800 held + 800 > 1000: refused, with the setting named. */
    assert_int_equal(rrpc_call(c, "block", buf, sizeof(buf), NULL, block_done, NULL), 0);
    assert_int_equal(wait_for(&W.refused, 1, 20000), 1);
    lock();
    char why[256];
    snprintf(why, sizeof(why), "%s", W.refusal);
    unlock();
    assert_non_null(strstr(why, "RRPC_HANDLER_QUEUE_BYTES"));
    assert_non_null(strstr(why, "\"block\""));
    release_blocked();
    assert_int_equal(wait_for(&W.answered, 1, 20000), 1);
    /* Served and gone: the bound counts what is held, so the next fits.  The
     * worker lets go of the bytes once its handler has returned, which may
     * be just after the answer reached us: a refusal until then is right. */
    int refused = 1;
    for (int tries = 0; tries < 200; tries++) {
        assert_int_equal(rrpc_call(c, "block", buf, sizeof(buf), NULL, block_done, NULL), 0);
        lock();
        struct timespec ts = test_deadline(20000);
        while (W.answered < 2 && W.refused == refused && W.bad == 0)
            if (pthread_cond_timedwait(&test_cv, &test_mu, &ts) == ETIMEDOUT)
                break;
        bool again = W.answered < 2 && W.refused > refused;
        refused = W.refused;
        unlock();
        if (!again)
            break;
        usleep(10000);
    }
    assert_int_equal(W.answered, 2);
    assert_int_equal(W.bad, 0);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

static uint64_t server_requests(rrpc_ctx *s)
{
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(s, &st), 0);
    return st.cls[RRPC_CLASS_BULK].requests;
}

static void test_worker_jobs_hold_their_credit_so_a_caller_queues_at_most_its_window(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_THREADS", "1"), 0);
    char curi[300];
    rrpc_ctx *s = worker_server(cfg, 2, curi, sizeof(curi)); /* 2 bulk credits */
    rrpc_config_destroy(cfg);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    rrpc_call_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    for (int i = 0; i < 5; i++)
        assert_int_equal(rrpc_call(c, "block", "x", 1, &bulk, block_done, NULL), 0);
    assert_int_equal(wait_for(&W.started, 1, 20000), 1);
    /* Two requests reach the server (one running, one queued); the other
     * three wait at the caller for credit, which the jobs hold. */
    for (int i = 0; i < 200 && server_requests(s) < 2; i++)
        usleep(10000);
    assert_int_equal(server_requests(s), 2);
    usleep(200000); /* long enough for the rest to arrive, were credit returned */
    assert_int_equal(server_requests(s), 2);
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(T.cctx, &st), 0);
    assert_true(st.cls[RRPC_CLASS_BULK].queued_frames >= 3);
    release_blocked();
    assert_int_equal(wait_for(&W.answered, 5, 20000), 5);
    assert_int_equal(server_requests(s), 5);
    assert_int_equal(W.bad, 0);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

/* RRPC_HANDLER_CREDIT_ON_ANSWER: a handler that keeps its requests to
 * answer later holds their credit until it does (issue #28: an asyncio
 * handler gave it back at once, so a caller could pile up any number). */
static struct {
    rrpc_request *held[8];
    int n;
} D;

static void h_keep(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    lock();
    if (D.n < 8)
        D.held[D.n++] = req;
    else
        rrpc_respond_error(req, 9, "more requests than the credit window");
    unlock();
}

/* Answers what h_keep holds: the first with RRPC_E_LIMIT, the others with 4 bytes. */
static int answer_kept(int refuse_first)
{
    lock();
    int n = D.n;
    for (int i = 0; i < n; i++) {
        uint32_t v = 0;
        if (refuse_first && i == 0)
            assert_int_equal(rrpc_respond_error(D.held[i], RRPC_E_LIMIT, "too busy: later"), 0);
        else
            assert_int_equal(rrpc_respond(D.held[i], &v, sizeof(v)), 0);
    }
    D.n = 0;
    unlock();
    return n;
}

static void test_a_handler_answering_later_holds_its_credit_until_it_answers(void **state)
{
    (void)state;
    char curi[300];
    rrpc_ctx *s = worker_server(NULL, 2, curi, sizeof(curi)); /* 2 bulk credits */
    memset(&D, 0, sizeof(D));
    rrpc_register_opts ro = {.flags = RRPC_HANDLER_CREDIT_ON_ANSWER};
    assert_int_equal(rrpc_register_with(s, "keep", h_keep, NULL, &ro), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(T.cctx, curi, 10000, NULL, NULL, &c), 0);
    rrpc_call_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    for (int i = 0; i < 5; i++)
        assert_int_equal(rrpc_call(c, "keep", "x", 1, &bulk, block_done, NULL), 0);
    for (int i = 0; i < 200 && server_requests(s) < 2; i++)
        usleep(10000);
    usleep(200000); /* long enough for the rest to arrive, were credit returned */
    assert_int_equal(server_requests(s), 2);
    int answered = answer_kept(1); /* one refused with RRPC_E_LIMIT, one answered */
    while (answered < 5) {
        for (int i = 0; i < 500 && server_requests(s) < (uint64_t)answered + 1; i++)
            usleep(10000);
        usleep(50000);
        answered += answer_kept(0);
    }
    assert_int_equal(wait_for(&W.answered, 4, 20000), 4);
    assert_int_equal(W.refused, 1);
    assert_string_equal(W.refusal, "too busy: later");
    assert_int_equal(W.bad, 0);
    assert_int_equal(server_requests(s), 5);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(s);
}

static void test_register_with_refuses_unknown_flags_and_reserved_words(void **state)
{
    (void)state;
    rrpc_ctx *s;
    assert_int_equal(rrpc_ctx_create(&s), 0);
    rrpc_register_opts o = {.flags = 0x4};
    assert_int_equal(rrpc_register_with(s, "m", h_echo, NULL, &o), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(s), "unknown bits"));
    o = (rrpc_register_opts){.flags = RRPC_HANDLER_ON_WORKER | RRPC_HANDLER_CREDIT_ON_ANSWER};
    assert_int_equal(rrpc_register_with(s, "m", h_echo, NULL, &o), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(s), "do not go together"));
    o = (rrpc_register_opts){.reserved = {0, 1}};
    assert_int_equal(rrpc_register_with(s, "m", h_echo, NULL, &o), -EINVAL);
    o = (rrpc_register_opts){.flags = RRPC_HANDLER_ON_WORKER};
    assert_int_equal(rrpc_register_with(s, "m", h_echo, NULL, &o), 0);
    assert_int_equal(rrpc_register_with(s, "m", h_echo, NULL, &o), -EEXIST);
    rrpc_ctx_destroy(s);
}

/* ---- cancelling a call (rrpc_call_cancel) ----------------------------------- */

static struct {
    int runs, last_status;
} X;

static void cancel_cb(const rrpc_result *res, void *user)
{
    lock();
    X.runs++;
    X.last_status = res->status;
    unlock();
}

static void test_a_cancelled_call_completes_once_and_its_late_answer_is_dropped(void **state)
{
    (void)state;
    memset(&X, 0, sizeof(X));
    lock();
    T.held = NULL;
    unlock();
    rrpc_conn *c = connect_client(T.cctx);
    int mine;
    assert_int_equal(rrpc_call(c, "hold", "x", 1, NULL, cancel_cb, &mine), 0);
    rrpc_request *held = NULL;
    for (int i = 0; i < 2000 && !held; i++) {
        lock();
        held = T.held;
        T.held = NULL;
        unlock();
        if (!held)
            usleep(5000);
    }
    assert_non_null(held); /* the server has the request: it went out */
    assert_int_equal(rrpc_call_cancel(c, cancel_cb, &mine), 0);
    lock();
    int runs = X.runs, status = X.last_status;
    unlock();
    assert_int_equal(runs, 1); /* before rrpc_call_cancel returned */
    assert_int_equal(status, RRPC_E_CANCELLED);
    assert_int_equal(rrpc_call_cancel(c, cancel_cb, &mine), -ENOENT);
    /* The server answers after all: the answer is dropped, the callback
     * does not run again.  An echo on the same class comes back after it. */
    assert_int_equal(rrpc_respond(held, "late", 4), 0);
    echo_ok(c, 16, RRPC_CLASS_LOW_LATENCY);
    lock();
    runs = X.runs;
    unlock();
    assert_int_equal(runs, 1);
    /* Its credit came back: more calls than the window go through. */
    struct pipe_state ps = {.expect_len = 8};
    for (uint64_t i = 0; i < 200; i++)
        assert_int_equal(rrpc_call(c, "echo", &i, 8, NULL, pipe_cb, &ps), 0);
    assert_int_equal(wait_for(&ps.done, 200, 60000), 200);
    assert_int_equal(ps.bad, 0);
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(T.cctx, &st), 0);
    int slot = rrpc_stats_error_slot(RRPC_E_CANCELLED);
    assert_true(st.cls[RRPC_CLASS_LOW_LATENCY].call_errors[slot] >= 1);
    assert_int_equal(rrpc_call_cancel(NULL, cancel_cb, &mine), -EINVAL);
    rrpc_conn_close(c);
}

/* ---- per-call metadata ----------------------------------------------------- */

/* Answers with the payload, and with the request's metadata as the
 * response's, plus "served-by": its name, and "had": how many it got. */
static void h_meta_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    const rrpc_meta *in;
    size_t n;
    assert_int_equal(rrpc_request_meta(req, &in, &n), 0);
    rrpc_meta out[RRPC_META_MAX_ENTRIES];
    size_t k = 0;
    for (size_t i = 0; i < n && i < RRPC_META_MAX_ENTRIES; i++)
        out[k++] = in[i];
    char had[16];
    snprintf(had, sizeof(had), "%zu", n);
    if (n + 2 <= RRPC_META_MAX_ENTRIES) { /* else: the full block, sent back as it came */
        out[k++] = (rrpc_meta){.key = "served-by", .value = user, .len = strlen(user)};
        out[k++] = (rrpc_meta){.key = "had", .value = had, .len = strlen(had)};
    }
    assert_int_equal(rrpc_request_set_response_meta(req, out, k), 0); /* copied */
    assert_int_equal(rrpc_respond(req, p, len), 0);
}

/* Reads "traceparent" with rrpc_request_meta_get; refuses a bad response
 * block itself, then answers with the value, and no metadata. */
static void h_meta_get(rrpc_request *req, const void *p, size_t len, void *user)
{
    const void *v;
    size_t vlen;
    int r = rrpc_request_meta_get(req, "traceparent", &v, &vlen);
    if (r) {
        rrpc_respond_error(req, 7, "no traceparent");
        return;
    }
    assert_int_equal(((const char *)v)[vlen], 0);
    assert_int_equal(rrpc_request_meta_get(req, "absent", &v, &vlen), -ENOENT);
    rrpc_meta bad = {.key = "Upper", .value = "x", .len = 1};
    assert_int_equal(rrpc_request_set_response_meta(req, &bad, 1), RRPC_E_METADATA);
    assert_int_equal(rrpc_request_meta_get(req, "traceparent", &v, &vlen), 0);
    rrpc_respond(req, v, vlen);
}

static struct {
    int done, status;
    size_t nmeta, len;
    char keys[RRPC_META_MAX_ENTRIES][RRPC_META_MAX_KEY + 1];
    char vals[RRPC_META_MAX_ENTRIES][RRPC_META_MAX_VALUE + 1];
    size_t vlens[RRPC_META_MAX_ENTRIES];
} MT;

static void meta_done(const rrpc_result *res, void *user)
{
    (void)user;
    lock();
    MT.status = res->status;
    MT.len = res->len;
    MT.nmeta = res->nmeta;
    for (size_t i = 0; i < res->nmeta && i < RRPC_META_MAX_ENTRIES; i++) {
        snprintf(MT.keys[i], sizeof(MT.keys[i]), "%s", res->meta[i].key);
        memcpy(MT.vals[i], res->meta[i].value, res->meta[i].len);
        MT.vals[i][res->meta[i].len] = 0;
        MT.vlens[i] = res->meta[i].len;
    }
    MT.done++;
    unlock();
}

static const char TRACEPARENT[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/* Request metadata reaches the handler (on the loop thread and on a
 * worker), response metadata comes back to the callback and to
 * rrpc_call_sync_meta, and the largest block the bounds allow goes both
 * ways. */
static void test_metadata_travels_to_the_handler_and_back(void **state)
{
    (void)state;
    rrpc_register_opts ro = {.flags = RRPC_HANDLER_ON_WORKER};
    assert_int_equal(rrpc_register(T.sctx, "meta_echo", h_meta_echo, "loop"), 0);
    assert_int_equal(rrpc_register_with(T.sctx, "meta_echo_w", h_meta_echo, "worker", &ro), 0);
    assert_int_equal(rrpc_register(T.sctx, "meta_get", h_meta_get, NULL), 0);
    rrpc_conn *c = connect_client(T.cctx);
    const rrpc_meta two[] = {
        {.key = "traceparent", .value = TRACEPARENT, .len = strlen(TRACEPARENT)},
        {.key = "bin", .value = "\0\xff", .len = 2},
    };
    const char *methods[] = {"meta_echo", "meta_echo_w"};
    for (int m = 0; m < 2; m++) {
        memset(&MT, 0, sizeof(MT));
        rrpc_call_opts o = {.meta = two, .nmeta = 2, .qos_class = m ? RRPC_CLASS_BULK : 0};
        assert_int_equal(rrpc_call(c, methods[m], "data", 4, &o, meta_done, NULL), 0);
        assert_int_equal(wait_for(&MT.done, 1, 10000), 1);
        assert_int_equal(MT.status, 0);
        assert_int_equal(MT.len, 4);
        assert_int_equal(MT.nmeta, 4);
        assert_string_equal(MT.keys[0], "traceparent");
        assert_string_equal(MT.vals[0], TRACEPARENT);
        assert_string_equal(MT.keys[1], "bin");
        assert_int_equal(MT.vlens[1], 2);
        assert_memory_equal(MT.vals[1], "\0\xff", 2);
        assert_string_equal(MT.keys[2], "served-by");
        assert_string_equal(MT.vals[2], m ? "worker" : "loop");
        assert_string_equal(MT.vals[3], "2");
    }
    /* no metadata: none arrives, none comes back but the handler's */
    void *out = NULL;
    size_t outlen = 0;
    rrpc_meta *rm = NULL;
    size_t nrm = 0;
    assert_int_equal(rrpc_call_sync_meta(c, "meta_echo", "x", 1, NULL, &out, &outlen, &rm, &nrm),
                     0);
    free(out);
    assert_int_equal(nrm, 2);
    const rrpc_meta *had = rrpc_meta_find(rm, nrm, "had");
    assert_non_null(had);
    assert_string_equal(had->value, "0");
    free(rm);
    /* the largest block: 16 keys of 64 bytes, 4096 bytes of keys and values */
    static char keys[RRPC_META_MAX_ENTRIES][RRPC_META_MAX_KEY + 1];
    static char val[RRPC_META_MAX_VALUE];
    memset(val, 'v', sizeof(val));
    rrpc_meta full[RRPC_META_MAX_ENTRIES];
    for (int i = 0; i < RRPC_META_MAX_ENTRIES; i++) {
        memset(keys[i], 'k', RRPC_META_MAX_KEY);
        keys[i][0] = (char)('a' + i);
        full[i] = (rrpc_meta){.key = keys[i], .value = val, .len = 192};
    }
    rrpc_call_opts fo = {.meta = full, .nmeta = RRPC_META_MAX_ENTRIES};
    assert_int_equal(rrpc_call_sync_meta(c, "meta_echo", "y", 1, &fo, &out, &outlen, &rm, &nrm),
                     0);
    free(out);
    assert_int_equal(nrm, RRPC_META_MAX_ENTRIES);
    for (int i = 0; i < RRPC_META_MAX_ENTRIES; i++) {
        assert_string_equal(rm[i].key, keys[i]);
        assert_int_equal(rm[i].len, 192);
    }
    free(rm);
    /* rrpc_request_meta_get, and a handler's own bad block refused locally */
    assert_int_equal(rrpc_call_sync_meta(c, "meta_get", "", 0, &(rrpc_call_opts){.meta = two,
                     .nmeta = 2}, &out, &outlen, &rm, &nrm), 0);
    assert_int_equal(outlen, strlen(TRACEPARENT));
    assert_memory_equal(out, TRACEPARENT, outlen);
    assert_null(rm);
    assert_int_equal(nrm, 0);
    free(out);
    rrpc_conn_close(c);
    rrpc_unregister(T.sctx, "meta_echo");
    rrpc_unregister(T.sctx, "meta_echo_w");
    rrpc_unregister(T.sctx, "meta_get");
}

/* Each bound is enforced before anything goes on the wire: the call fails
 * with RRPC_E_METADATA and a detail that names it, and the connection keeps
 * serving the next call. */
static void test_metadata_beyond_its_bounds_is_refused_and_the_connection_serves_on(
    void **state)
{
    (void)state;
    rrpc_conn *c = connect_client(T.cctx);
    static char big[RRPC_META_MAX_VALUE + 1], longkey[RRPC_META_MAX_KEY + 2];
    memset(longkey, 'k', RRPC_META_MAX_KEY + 1);
    static char names[RRPC_META_MAX_ENTRIES + 1][8];
    rrpc_meta many[RRPC_META_MAX_ENTRIES + 1];
    for (int i = 0; i <= RRPC_META_MAX_ENTRIES; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        many[i] = (rrpc_meta){.key = names[i], .value = "v", .len = 1};
    }
    rrpc_meta fat[5];
    for (int i = 0; i < 5; i++)
        fat[i] = (rrpc_meta){.key = names[i], .value = big, .len = 1000};
    struct {
        const rrpc_meta *m;
        size_t n;
        const char *says;
    } cases[] = {
        {many, RRPC_META_MAX_ENTRIES + 1, "17 metadata entries"},
        {&(rrpc_meta){.key = longkey, .value = "v", .len = 1}, 1, "65 bytes"},
        {&(rrpc_meta){.key = "k", .value = big, .len = sizeof(big)}, 1, "1025 bytes"},
        {&(rrpc_meta){.key = "Trace", .value = "v", .len = 1}, 1, "lowercase"},
        {&(rrpc_meta){.key = "a:b", .value = "v", .len = 1}, 1, "0x3a"},
        {fat, 5, "5010 bytes"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rrpc_call_opts o = {.meta = cases[i].m, .nmeta = cases[i].n};
        void *out = NULL;
        size_t outlen = 0;
        assert_int_equal(rrpc_call(c, "echo", "x", 1, &o, meta_done, NULL), RRPC_E_METADATA);
        const char *why = rrpc_ctx_last_error(T.cctx);
        if (!strstr(why, cases[i].says))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, why, cases[i].says);
        assert_int_equal(rrpc_call_sync(c, "echo", "x", 1, &o, &out, &outlen), RRPC_E_METADATA);
        echo_ok(c, 100, RRPC_CLASS_LOW_LATENCY);
    }
    rrpc_conn_close(c);
}

static uint64_t meta_refused(rrpc_ctx *ctx, const char *frame)
{
    char series[96];
    snprintf(series, sizeof(series), "rrpc_metadata_refused_total{frame=\"%s\"} ", frame);
    return stat_line(ctx, series);
}

/* A peer that sends malformed blocks (too many entries, an oversized key
 * or value, a bad key character, a truncated block) gets each request
 * answered RRPC_E_METADATA without running, counted, while its other calls
 * on the same connection are served. */
static void test_malformed_metadata_from_a_peer_is_answered_with_the_metadata_error(
    void **state)
{
    if (raw_skip())
        return;
    struct raw_conn rc;
    assert_int_equal(raw_handshake(&rc, T.server_addr, T.port), 0);
    uint64_t before = meta_refused(T.sctx, "request");
    static char longkey[66], bigval[1026];
    memset(longkey, 'k', 65);
    memset(bigval, 'v', 1025);
    static const char *seventeen[17] = {"a", "b", "c", "d", "e", "f", "g", "h", "i",
                                        "j", "k", "l", "m", "n", "o", "p", "q"};
    static const char *vals[17] = {"", "", "", "", "", "", "", "", "", "",
                                   "", "", "", "", "", "", ""};
    static uint8_t block[4096];
    struct {
        size_t n;
        const char *const *k;
        const char *const *v;
        int cut; /* bytes of the block left out of the frame */
        const char *says;
    } cases[] = {
        {17, seventeen, vals, 0, "17 entries"},
        {1, (const char *const[]){longkey}, vals, 0, "65 bytes"},
        {1, (const char *const[]){"k"}, (const char *const[]){bigval}, 0, "1025 bytes"},
        {1, (const char *const[]){"Trace"}, (const char *const[]){"v"}, 0, "lowercase"},
        {1, (const char *const[]){"traceparent"}, (const char *const[]){TRACEPARENT}, 9,
         "truncated"},
    };
    uint64_t id = 100;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t blen = raw_meta_block(block, cases[i].n, cases[i].k, cases[i].v);
        /* a truncated block: the frame ends before the block does */
        assert_int_equal(raw_request_meta(rc.fd[1], 1, ++id, "echo", block,
                                          blen - (size_t)cases[i].cut, NULL, 0),
                         0);
        int32_t status = 0;
        char msg[1200];
        assert_int_equal(raw_response(rc.fd[1], id, &status, msg, sizeof(msg)), 0);
        assert_int_equal(status, RRPC_E_METADATA);
        if (!strstr(msg, cases[i].says) || !strstr(msg, "\"echo\""))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, msg, cases[i].says);
        /* the same connection serves the next call */
        assert_int_equal(raw_echo(rc.fd[1], 1, ++id, NULL), 0);
    }
    /* a well-formed block from a raw peer is served */
    const char *k1[] = {"traceparent"}, *v1[] = {TRACEPARENT};
    size_t blen = raw_meta_block(block, 1, k1, v1);
    assert_int_equal(raw_request_meta(rc.fd[1], 1, ++id, "echo", block, blen, "ping", 4), 0);
    int32_t status = -1;
    char msg[1200];
    assert_int_equal(raw_response(rc.fd[1], id, &status, msg, sizeof(msg)), 0);
    assert_int_equal(status, 0);
    assert_memory_equal(msg, "ping", 4);
    raw_close(&rc);
    assert_int_equal(meta_refused(T.sctx, "request") - before, 5);
    still_serving();
}

static struct {
    int done, status;
    char message[512];
} RM;

static void raw_meta_reply_done(const rrpc_result *res, void *user)
{
    (void)user;
    lock();
    RM.status = res->status;
    snprintf(RM.message, sizeof(RM.message), "%s", res->message);
    RM.done++;
    unlock();
}

/* A peer that answers a call with a malformed response block (a key with
 * an upper-case letter): the call fails RRPC_E_METADATA, counted, and the
 * connection stays up. */
static void test_a_response_with_malformed_metadata_fails_its_call(void **state)
{
    if (raw_skip())
        return;
    int ups = downs_now();
    (void)ups;
    struct raw_conn rc;
    lock();
    T.last_server_conn = NULL;
    unlock();
    assert_int_equal(raw_handshake(&rc, T.server_addr, T.port), 0);
    rrpc_conn *sc = NULL;
    for (int i = 0; i < 500 && !sc; i++) {
        lock();
        sc = T.last_server_conn;
        unlock();
        if (!sc)
            usleep(10000);
    }
    assert_non_null(sc);
    uint64_t before = meta_refused(T.sctx, "response");
    memset(&RM, 0, sizeof(RM));
    rrpc_call_opts o = {.deadline_ms = 5000};
    assert_int_equal(rrpc_call(sc, "anything", "q", 1, &o, raw_meta_reply_done, NULL), 0);
    uint8_t hdr[32], req[64];
    do
        assert_int_equal(raw_read_frame(rc.fd[1], hdr, req, sizeof(req)), 0);
    while (hdr[5] != 5);
    uint64_t id = raw_get(hdr + 8, 8);
    uint8_t block[64];
    const char *k[] = {"Bad"}, *v[] = {"1"};
    size_t blen = raw_meta_block(block, 1, k, v);
    raw_header(hdr, 6 /*RESPONSE*/, 1, 0x02, id, 0, (uint32_t)blen + 2, 1);
    assert_true(write(rc.fd[1], hdr, 32) == 32 && write(rc.fd[1], block, blen) == (ssize_t)blen &&
                write(rc.fd[1], "ok", 2) == 2);
    assert_int_equal(wait_for(&RM.done, 1, 10000), 1);
    assert_int_equal(RM.status, RRPC_E_METADATA);
    assert_non_null(strstr(RM.message, "lowercase"));
    assert_int_equal(meta_refused(T.sctx, "response") - before, 1);
    /* the connection is up: the raw peer's call is answered */
    assert_int_equal(raw_echo(rc.fd[1], 1, 5000, NULL), 0);
    raw_close(&rc);
}

/* ---- rrpc_ctx_wait_until ---------------------------------------------------- */

/* One call waited for with rrpc_ctx_wait_until: its completion sets done. */
struct wu_call {
    rrpc_conn *conn;
    const char *method;
    int value;
    int done;
    int status;
    int answer;
};

static void wu_call_done(const rrpc_result *res, void *user)
{
    struct wu_call *w = user;
    w->status = res->status;
    if (res->status == 0 && res->len == sizeof(w->answer))
        memcpy(&w->answer, res->data, sizeof(w->answer));
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
}

static int wu_start(void *arg)
{
    struct wu_call *w = arg;
    return rrpc_call(w->conn, w->method, &w->value, sizeof(w->value), NULL, wu_call_done, w);
}

static double wu_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Calls echo 200 times through the wait, then waits without a start for a
 * batch of calls whose last completion sets the flag. */
static void wait_until_echoes(rrpc_ctx *ctx, rrpc_conn *c)
{
    for (int i = 0; i < 200; i++) {
        struct wu_call w = {.conn = c, .method = "echo", .value = i, .answer = -1};
        assert_int_equal(rrpc_ctx_wait_until(ctx, wu_start, &w, &w.done, 5000), 0);
        assert_int_equal(w.done, 1);
        assert_int_equal(w.status, 0);
        assert_int_equal(w.answer, i);
    }
    struct wu_call batch[8];
    for (int i = 0; i < 8; i++) {
        batch[i] = (struct wu_call){.conn = c, .method = "echo", .value = 1000 + i, .answer = -1};
        assert_int_equal(wu_start(&batch[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        assert_int_equal(rrpc_ctx_wait_until(ctx, NULL, NULL, &batch[i].done, 5000), 0);
        assert_int_equal(batch[i].answer, 1000 + i);
    }
}

static void test_wait_until_returns_once_a_completion_sets_the_flag(void **state)
{
    /* the suite's client: its loop thread, or driven by a thread of ours */
    rrpc_conn *c = connect_client(T.cctx);
    wait_until_echoes(T.cctx, c);
    rrpc_conn_close(c);
    /* a driven context nobody drives: the wait runs its loop */
    rrpc_ctx *cl;
    assert_int_equal(rrpc_ctx_create(&cl), 0);
    assert_int_equal(rrpc_connect_sync(cl, T.uri, 10000, NULL, NULL, &c), 0);
    wait_until_echoes(cl, c);
    rrpc_ctx_destroy(cl);
}

static void test_wait_until_times_out_and_the_operation_goes_on(void **state)
{
    lock();
    T.held = NULL;
    unlock();
    rrpc_conn *c = connect_client(T.cctx);
    struct wu_call w = {.conn = c, .method = "hold", .answer = -1};
    double t0 = wu_now_ms();
    assert_int_equal(rrpc_ctx_wait_until(T.cctx, wu_start, &w, &w.done, 100), -ETIMEDOUT);
    double took = wu_now_ms() - t0;
    assert_true(took >= 99.0);
    assert_true(took < 2000.0);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "timeout"));
    assert_int_equal(rrpc_ctx_wait_until(T.cctx, NULL, NULL, &w.done, 0), -ETIMEDOUT);
    assert_int_equal(w.done, 0);
    /* the call is still pending: answered now, a later wait sees it */
    rrpc_request *req = NULL;
    for (int i = 0; i < 1000 && !req; i++) {
        lock();
        req = T.held;
        T.held = NULL;
        unlock();
        if (!req)
            usleep(5000);
    }
    assert_non_null(req);
    int v = 77;
    assert_int_equal(rrpc_respond(req, &v, sizeof(v)), 0);
    assert_int_equal(rrpc_ctx_wait_until(T.cctx, NULL, NULL, &w.done, 5000), 0);
    assert_int_equal(w.status, 0);
    assert_int_equal(w.answer, 77);
    rrpc_conn_close(c);
}

/* A handler that waits on its own context: refused. */
static void h_wait_in_callback(rrpc_request *req, const void *p, size_t len, void *user)
{
    int flag = 0;
    int32_t code = rrpc_ctx_wait_until(user, NULL, NULL, &flag, 1000);
    rrpc_respond(req, &code, sizeof(code));
}

static int wu_refused_start(void *arg)
{
    (*(int *)arg)++;
    return -E2BIG;
}

static void test_wait_until_refuses_misuse_without_waiting(void **state)
{
    int flag = 0, starts = 0;
    assert_int_equal(rrpc_ctx_wait_until(NULL, NULL, NULL, &flag, 10), -EINVAL);
    assert_int_equal(rrpc_ctx_wait_until(T.cctx, NULL, NULL, NULL, 10), -EINVAL);
    /* a start that fails: its code, at once, with no wait */
    double t0 = wu_now_ms();
    assert_int_equal(rrpc_ctx_wait_until(T.cctx, wu_refused_start, &starts, &flag, 5000), -E2BIG);
    assert_true(wu_now_ms() - t0 < 1000.0);
    assert_int_equal(starts, 1);
    /* a flag already set: 0 at once */
    flag = 1;
    assert_int_equal(rrpc_ctx_wait_until(T.cctx, NULL, NULL, &flag, 0), 0);
    /* from a callback of the context: RRPC_E_DEADLOCK, not a hang */
    assert_int_equal(rrpc_register(T.sctx, "wait_in_callback", h_wait_in_callback, T.sctx), 0);
    rrpc_conn *c = connect_client(T.cctx);
    void *out = NULL;
    size_t n = 0;
    assert_int_equal(rrpc_call_sync(c, "wait_in_callback", NULL, 0, NULL, &out, &n), 0);
    int32_t code;
    assert_int_equal(n, sizeof(code));
    memcpy(&code, out, sizeof(code));
    assert_int_equal(code, RRPC_E_DEADLOCK);
    free(out);
    rrpc_conn_close(c);
}

/* Whether @name is one of the comma-separated names of @list. */
static bool name_listed(const char *list, const char *name)
{
    size_t k = strlen(name);
    for (const char *p = list; p && (p = strstr(p, name)); p += k)
        if ((p == list || p[-1] == ',') && (p[k] == ',' || p[k] == 0))
            return true;
    return false;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_returns_every_size_from_0_to_4_MiB),
        cmocka_unit_test(test_the_server_may_call_the_client_the_moment_it_is_up),
        cmocka_unit_test(test_a_driven_mode_server_serves_when_its_fd_is_polled),
        cmocka_unit_test(test_a_driven_mode_client_sync_call_drives_its_own_loop),
        cmocka_unit_test(test_a_driven_mode_servers_fd_wakes_for_each_call_from_another_thread),
        cmocka_unit_test(test_thread_mode_is_refused_while_another_thread_drives_the_loop),
        cmocka_unit_test(test_driven_progress_returns_after_an_answer_found_between_two_calls),
        cmocka_unit_test(test_a_blocking_call_from_a_handler_is_refused_not_hung),
        cmocka_unit_test(test_wait_until_returns_once_a_completion_sets_the_flag),
        cmocka_unit_test(test_wait_until_times_out_and_the_operation_goes_on),
        cmocka_unit_test(test_wait_until_refuses_misuse_without_waiting),
        cmocka_unit_test(test_a_server_requiring_tickets_runs_no_handler_without_a_good_one),
        cmocka_unit_test(test_a_ticket_sent_to_a_server_that_needs_none_is_acknowledged),
        cmocka_unit_test(test_connect_with_options_presents_its_ticket_asynchronously),
        cmocka_unit_test(test_connect_options_out_of_their_rules_are_refused_before_the_wire),
        cmocka_unit_test(test_a_deadline_counts_from_the_call_even_after_the_loop_slept),
        cmocka_unit_test(test_10000_pipelined_calls_all_answered_in_order_of_ids),
        cmocka_unit_test(test_deadline_expires_when_the_handler_never_answers),
        cmocka_unit_test(test_handler_error_reaches_the_caller_with_code_and_message),
        cmocka_unit_test(test_a_method_name_outside_1_to_255_bytes_is_refused_before_the_wire),
        cmocka_unit_test(test_the_loaded_library_reports_the_version_of_its_headers),
        cmocka_unit_test(test_async_reply_from_another_thread_completes_the_call),
        cmocka_unit_test(test_calls_from_four_threads_on_one_connection),
        cmocka_unit_test(test_one_credit_per_class_still_completes_500_pipelined_calls),
        cmocka_unit_test(test_a_pipelining_peer_is_lent_credit_and_gives_it_back_once_idle),
        cmocka_unit_test(test_the_credit_budget_bounds_what_all_peers_are_lent),
        cmocka_unit_test(test_a_large_call_right_after_connect_is_served),
        cmocka_unit_test(test_low_latency_calls_complete_while_bulk_saturates),
        cmocka_unit_test(test_a_worker_handler_that_holds_its_request_holds_no_other_call),
        cmocka_unit_test(test_worker_requests_beyond_the_queue_bound_are_refused_with_the_reason),
        cmocka_unit_test(test_worker_jobs_hold_their_credit_so_a_caller_queues_at_most_its_window),
        cmocka_unit_test(test_a_request_its_caller_gave_up_on_is_never_run_and_others_are_answered),
        cmocka_unit_test(test_a_cancelled_call_reaches_its_running_handler),
        cmocka_unit_test(
            test_a_loop_handler_that_naps_300_ms_delays_others_but_expired_work_never_runs),
        cmocka_unit_test(test_a_loop_handler_that_runs_long_no_longer_holds_the_loop),
        cmocka_unit_test(test_cancelling_calls_that_hold_credit_gives_the_credit_back),
        cmocka_unit_test(test_a_handler_answering_later_holds_its_credit_until_it_answers),
        cmocka_unit_test(test_register_with_refuses_unknown_flags_and_reserved_words),
        cmocka_unit_test(test_a_cancelled_call_completes_once_and_its_late_answer_is_dropped),
        cmocka_unit_test(test_a_zeroed_options_struct_means_the_default_class_not_control),
        cmocka_unit_test(test_each_class_carries_its_dscp_on_both_ends),
        cmocka_unit_test(test_an_rpc_only_tcp_connection_holds_one_socket_per_side),
        cmocka_unit_test(test_a_class_first_used_opens_its_socket_with_its_dscp),
        cmocka_unit_test(test_control_shares_the_first_socket_only_on_the_side_whose_dscps_match),
        cmocka_unit_test(test_one_sided_write_and_read_move_the_exact_bytes),
        cmocka_unit_test(test_a_chain_of_writes_from_callbacks_lets_progress_return),
        cmocka_unit_test(test_one_sided_outside_the_token_fails_at_once_and_writes_nothing),
        cmocka_unit_test(test_one_sided_with_a_forged_key_fails_and_writes_nothing),
        cmocka_unit_test(test_concurrent_blocking_one_sided_failures_each_report_their_own_detail),
        cmocka_unit_test(test_a_grant_serves_its_peer_in_its_range_and_refuses_the_rest),
        cmocka_unit_test(test_a_grant_refuses_what_it_does_not_allow_and_ends_when_revoked),
        cmocka_unit_test(test_a_grant_ends_at_its_expiry_and_with_its_connection),
        cmocka_unit_test(test_grant_and_revoke_cycles_hold_no_memory),
        cmocka_unit_test(test_an_unresolvable_host_fails_with_unknown_host_and_says_so),
        cmocka_unit_test(test_a_borrowed_buffer_arrives_bit_exact_around_the_piece_boundaries),
        cmocka_unit_test(test_a_borrowed_buffer_arrives_bit_exact_whether_pieces_are_large_or_small),
        cmocka_unit_test(test_a_borrowed_buffer_is_not_read_after_its_completion_ran),
        cmocka_unit_test(test_a_region_deregistered_while_a_write_arrives_gets_no_more_of_it),
        cmocka_unit_test(test_garbage_bytes_are_refused_and_the_server_keeps_serving),
        cmocka_unit_test(test_wrong_version_is_refused_with_a_version_error),
        cmocka_unit_test(test_a_version_1_peer_is_told_why_in_its_own_version),
        cmocka_unit_test(test_a_version_3_peer_without_metadata_is_refused_and_told_why),
        cmocka_unit_test(test_a_version_4_peer_without_lending_is_refused_and_told_why),
        cmocka_unit_test(test_metadata_travels_to_the_handler_and_back),
        cmocka_unit_test(test_metadata_beyond_its_bounds_is_refused_and_the_connection_serves_on),
        cmocka_unit_test(test_malformed_metadata_from_a_peer_is_answered_with_the_metadata_error),
        cmocka_unit_test(test_a_response_with_malformed_metadata_fails_its_call),
        cmocka_unit_test(test_a_4_GiB_length_closes_the_connection_before_any_allocation),
        cmocka_unit_test(test_a_4_GiB_length_after_a_large_frame_is_refused_at_its_header),
        cmocka_unit_test(test_a_peer_vanishing_mid_message_is_detected),
        cmocka_unit_test(test_a_malformed_header_closes_only_that_connection),
        cmocka_unit_test(test_a_sender_overrunning_its_credits_is_cut_off),
        cmocka_unit_test(test_a_frame_without_credit_is_refused_at_its_header),
        cmocka_unit_test(test_a_control_frame_claiming_a_large_payload_is_refused_at_its_header),
        cmocka_unit_test(test_a_raw_write_outside_the_region_is_refused_by_the_target),
    };
    /* RRPC_TEST_SKIP=NAME,NAME...: tests left out of this run, each named
     * (tests/softroce/ipsec.sh: the two that need more throughput than ESP
     * in software under TCG gives within their deadlines).
     * RRPC_TEST_ONLY=NAME,NAME...: only these (to run one alone). */
    enum { NT = sizeof(tests) / sizeof(tests[0]) };
    static struct CMUnitTest run[NT];
    size_t n = 0;
    const char *skip_list = getenv("RRPC_TEST_SKIP"), *only = getenv("RRPC_TEST_ONLY");
    for (size_t i = 0; i < NT; i++) {
        if (name_listed(skip_list, tests[i].name)) {
            printf("# left out by RRPC_TEST_SKIP: %s\n", tests[i].name);
            continue;
        }
        if (only && *only && !name_listed(only, tests[i].name))
            continue;
        run[n++] = tests[i];
    }
    return _cmocka_run_group_tests(test_transport(), run, n, group_setup, group_teardown);
}

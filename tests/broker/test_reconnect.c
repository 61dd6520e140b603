/* SPDX-License-Identifier: MIT */
/*
 * The reconnecting service handle (rrpc_service, broker.h) end to end: the
 * real rrpcd on 127.0.0.1 with certificates from scripts/make-dev-certs.sh,
 * and servers in their own processes (this program run as "serve") that
 * register with it and are killed with SIGKILL, as a crash would.
 *
 * Environment (set by meson): RRPCD = the daemon, MAKE_CERTS = the script.
 * No assertion depends on timing but loose upper bounds on work done in a
 * window (attempts within a second of backoff).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"

static char dir[256];
static pid_t daemon_pid = -1;
static char addr[64];

static int open_as(const char *who, const char *broker_addr, rrpc_broker **ret)
{
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/%s.crt", dir, who);
    snprintf(key, sizeof(key), "%s/%s.key", dir, who);
    rrpc_broker_opts o = {
        .ca_file = ca, .cert_file = cert, .key_file = key, .timeout_ms = 3000,
    };
    return rrpc_broker_open(broker_addr, &o, ret);
}

/* ---- the server process ("serve DIR BROKER SERVICE") ---------------------------- */

static int slow_calls;

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond(req, p, len);
}

/* Never answers: the call stays in flight until the process dies. */
static void h_slow(rrpc_request *req, const void *p, size_t len, void *user)
{
    slow_calls++;
    printf("slow\n");
    fflush(stdout);
}

static void h_count(rrpc_request *req, const void *p, size_t len, void *user)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%d", slow_calls);
    rrpc_respond(req, buf, (size_t)n);
}

static int serve(const char *d, const char *broker_addr, const char *service)
{
    snprintf(dir, sizeof(dir), "%s", d);
    rrpc_broker *b;
    rrpc_ctx *ctx;
    rrpc_listener *l;
    if (open_as("kv-server", broker_addr, &b)) {
        fprintf(stderr, "serve: broker: %s\n", rrpc_broker_last_error(NULL));
        return 1;
    }
    if (rrpc_ctx_create(&ctx) || rrpc_register(ctx, "echo", h_echo, NULL) ||
        rrpc_register(ctx, "slow", h_slow, NULL) || rrpc_register(ctx, "count", h_count, NULL) ||
        rrpc_broker_gate(b, ctx, service) || rrpc_ctx_start_thread(ctx) ||
        rrpc_listen(ctx, "tcp://127.0.0.1:0", NULL, NULL, &l))
        return 1;
    int port = rrpc_listener_port(l);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", port);
    const char *uris[] = { uri };
    if (rrpc_broker_register(b, ctx, service, uris, 1, 0)) {
        fprintf(stderr, "serve: register: %s\n", rrpc_broker_last_error(b));
        return 1;
    }
    printf("port %d\n", port);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) /* until the test closes our stdin (or kills us) */
        ;
    rrpc_listener_close(l);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    return 0;
}

struct child {
    pid_t pid;
    FILE *out; /* its stdout */
    int in;    /* its stdin */
    int port;
};

static void spawn_server(struct child *c, const char *service)
{
    int out[2], in[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execl("/proc/self/exe", "test_reconnect", "serve", dir, addr, service, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    c->pid = pid;
    c->in = in[1];
    c->out = fdopen(out[0], "r");
    char line[64];
    if (!fgets(line, sizeof(line), c->out) || sscanf(line, "port %d", &c->port) != 1)
        fail_msg("the server process did not start (see stderr)");
}

/* Waits for the line @want from the server. */
static void expect_line(struct child *c, const char *want)
{
    char line[64];
    assert_non_null(fgets(line, sizeof(line), c->out));
    line[strcspn(line, "\n")] = 0;
    assert_string_equal(line, want);
}

static void kill_server(struct child *c)
{
    int st;
    kill(c->pid, SIGKILL);
    assert_int_equal(waitpid(c->pid, &st, 0), c->pid);
    fclose(c->out);
    close(c->in);
}

/* Closes its stdin: it unregisters and exits 0. */
static void stop_server(struct child *c)
{
    int st;
    close(c->in);
    assert_int_equal(waitpid(c->pid, &st, 0), c->pid);
    fclose(c->out);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the daemon ----------------------------------------------------------------- */

static int group_setup(void **state)
{
    signal(SIGPIPE, SIG_DFL); /* as a host process has it: the library must not raise it */
    char p[300], portfile[300], log[300];
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-reconnect-test-XXXXXX",
                       "kv-server kv-client"))
        return -1;
    snprintf(p, sizeof(p), "%s/rrpcd.conf", dir);
    snprintf(portfile, sizeof(portfile), "%s/port", dir);
    snprintf(log, sizeof(log), "%s/rrpcd.log", dir);
    if (rrpcd_test_conf(dir,
                        "port_file = %s\nlisten = 127.0.0.1:0\n"
                        "lease_ms = 1500\nticket_lifetime_ms = 2000\nlog_level = info\n"
                        "allow = register * kv-server\nallow = lookup * kv-client\n",
                        portfile))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(fd, 2);
        execl(getenv("RRPCD"), "rrpcd", "-c", p, (char *)NULL);
        _exit(127);
    }
    daemon_pid = pid;
    for (int i = 0; i < 1000; i++) {
        int port;
        FILE *pf = fopen(portfile, "r");
        if (pf) {
            int ok = fscanf(pf, "%d", &port) == 1;
            fclose(pf);
            if (ok) {
                snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
                return 0;
            }
        }
        sleep_ms(10);
    }
    fprintf(stderr, "rrpcd did not start; see %s\n", log);
    return -1;
}

static int group_teardown(void **state)
{
    if (daemon_pid > 0) {
        int st;
        kill(daemon_pid, SIGTERM);
        waitpid(daemon_pid, &st, 0);
    }
    rrpcd_test_dir_remove(dir);
    return 0;
}

/* ---- the client ------------------------------------------------------------------- */

struct client {
    rrpc_broker *b;
    rrpc_ctx *ctx;
    rrpc_service *svc;
};

static void client_start(struct client *c, const char *service, const rrpc_service_opts *o)
{
    assert_int_equal(open_as("kv-client", addr, &c->b), 0);
    assert_int_equal(rrpc_ctx_create(&c->ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(c->ctx), 0);
    assert_int_equal(rrpc_service_open(c->ctx, c->b, service, o, &c->svc), 0);
}

static void client_stop(struct client *c)
{
    rrpc_service_close(c->svc); /* before the context and the broker */
    rrpc_ctx_destroy(c->ctx);
    rrpc_broker_close(c->b);
}

static int call(rrpc_service *svc, const char *method, char *out, size_t outlen)
{
    void *resp = NULL;
    size_t len = 0;
    rrpc_call_opts o = { .qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = 10000 };
    int r = rrpc_service_call_sync(svc, method, "ping", 4, &o, &resp, &len);
    if (r == 0 && out) {
        snprintf(out, outlen, "%.*s", (int)len, (const char *)resp);
    }
    free(resp);
    return r;
}

static void assert_echo(rrpc_service *svc)
{
    char out[16];
    int r = call(svc, "echo", out, sizeof(out));
    if (r)
        fail_msg("echo: %s: %s", rrpc_err_name(r), rrpc_service_last_error(svc));
    assert_string_equal(out, "ping");
}

static rrpc_service_stat stats(rrpc_service *svc)
{
    rrpc_service_stat st;
    assert_int_equal(rrpc_service_stats(svc, &st), 0);
    return st;
}

struct slow_call {
    pthread_t th;
    rrpc_service *svc;
    int r;
};

static void *slow_thread(void *arg)
{
    struct slow_call *s = arg;
    s->r = call(s->svc, "slow", NULL, 0);
    return NULL;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_open_checks_its_arguments(void **state)
{
    struct client c;
    client_start(&c, "recon-args", NULL);
    rrpc_service *svc = NULL;
    rrpc_service_opts bad = { .backoff_min_ms = 500, .backoff_max_ms = 100 };
    assert_int_equal(rrpc_service_open(c.ctx, c.b, "x", &bad, &svc), -EINVAL);
    rrpc_service_opts neg = { .wait_ms = -1 };
    assert_int_equal(rrpc_service_open(c.ctx, c.b, "x", &neg, &svc), -EINVAL);
    assert_int_equal(rrpc_service_open(c.ctx, c.b, "", NULL, &svc), -EINVAL);
    assert_int_equal(rrpc_service_open(NULL, c.b, "x", NULL, &svc), -EINVAL);
    assert_null(svc);
    rrpc_conn *conn;
    assert_int_equal(rrpc_service_conn(c.svc, -1, &conn), -EINVAL);
    /* Opening does not connect: nothing was attempted yet. */
    rrpc_service_stat st = stats(c.svc);
    assert_int_equal(st.attempts, 0);
    assert_int_equal(st.up, 0);
    assert_string_equal(rrpc_service_last_error(c.svc), "");
    rrpc_service_close(NULL);
    rrpc_service_conn_release(c.svc, NULL);
    client_stop(&c);
}

/*
 * (1) calls succeed; (2) the server dies: the call in flight fails with
 * RRPC_E_CONN_LOST, once, and new calls fail at once; (3) a new server
 * instance registers (another port): once the backoff allows an attempt, the
 * next call succeeds through a fresh lookup, and the call that failed was not
 * sent again.
 */
static void test_calls_survive_a_server_crash_and_restart(void **state)
{
    struct child a, b;
    spawn_server(&a, "recon-kv");
    struct client c;
    rrpc_service_opts o = { .backoff_min_ms = 100, .backoff_max_ms = 400,
                            .connect_timeout_ms = 1000 };
    client_start(&c, "recon-kv", &o);

    /* (1) */
    for (int i = 0; i < 3; i++)
        assert_echo(c.svc);
    rrpc_service_stat st = stats(c.svc);
    assert_int_equal(st.attempts, 1);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.up, 1);
    rrpc_conn *old; /* borrowed across the crash: must stay a valid handle */
    assert_int_equal(rrpc_service_conn(c.svc, 0, &old), 0);

    /* (2) a call in flight, then the crash */
    struct slow_call sc = { .svc = c.svc, .r = 1 };
    assert_int_equal(pthread_create(&sc.th, NULL, slow_thread, &sc), 0);
    expect_line(&a, "slow"); /* the server runs it now */
    kill_server(&a);
    assert_int_equal(pthread_join(sc.th, NULL), 0);
    if (sc.r != RRPC_E_CONN_LOST && sc.r != RRPC_E_CLOSED)
        fail_msg("the call in flight ended with %s", rrpc_err_name(sc.r));

    void *resp = NULL;
    size_t len;
    assert_int_equal(rrpc_call_sync(old, "echo", "x", 1, NULL, &resp, &len), RRPC_E_CLOSED);
    rrpc_service_conn_release(c.svc, old); /* the last borrower: closed now */

    /* New calls fail: the first attempt finds the dead endpoint (refused) or
     * no registration; the others fail at once while the backoff runs. */
    int64_t t0 = now_ms();
    for (int i = 0; i < 20; i++) {
        int r = call(c.svc, "echo", NULL, 0);
        if (r != -ECONNREFUSED && r != -ENOENT)
            fail_msg("a call while the service is down: %s (%s)", rrpc_err_name(r),
                     rrpc_service_last_error(c.svc));
    }
    int64_t took = now_ms() - t0;
    print_message("20 calls while down: %lld ms, last: %s\n", (long long)took,
                  rrpc_service_last_error(c.svc));
    if (took > 5000) /* at most a few refused attempts: a hang, not a slow host */
        fail_msg("20 calls to a dead service took %lld ms", (long long)took);
    st = stats(c.svc);
    assert_int_equal(st.up, 0);
    assert_true(st.drops >= 1);
    assert_true(st.failures >= 1);
    assert_true(st.failures <= 2 + (uint64_t)took / 100); /* >= 100 ms apart */
    assert_non_null(strstr(rrpc_service_last_error(c.svc), "recon-kv"));

    /* (3) after a while (longer than the connect timeout, with the client's
     * loop idle), a new instance on another port. */
    sleep_ms(1300);
    spawn_server(&b, "recon-kv");
    int64_t deadline = now_ms() + 3000;
    while (stats(c.svc).backoff_ms > 0 && now_ms() < deadline)
        sleep_ms(10);
    uint64_t attempts_before = stats(c.svc).attempts;
    assert_echo(c.svc); /* the next call */
    st = stats(c.svc);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.attempts, attempts_before + 1); /* one fresh lookup */
    assert_int_equal(st.attempts, st.connects + st.failures);
    assert_int_equal(st.last_error, 0);
    assert_int_equal(st.up, 1);
    char out[16];
    assert_int_equal(call(c.svc, "count", out, sizeof(out)), 0);
    assert_string_equal(out, "0"); /* the failed call was not sent again */
    assert_echo(c.svc);

    client_stop(&c);
    stop_server(&b);
}

/*
 * (4) the backoff: with the service absent and calls that do not wait, a
 * second of calls in a tight loop makes few attempts.  With 200 ms at the
 * least between attempts, at most 1 + 1000 / 200 = 6; every other call fails
 * at once with the last attempt's error.
 */
static void test_attempts_are_spaced_by_the_backoff(void **state)
{
    struct client c;
    rrpc_service_opts o = { .backoff_min_ms = 200, .backoff_max_ms = 2000 };
    client_start(&c, "recon-absent", &o);
    int calls = 0;
    int64_t end = now_ms() + 1000;
    while (now_ms() < end) {
        assert_int_equal(call(c.svc, "echo", NULL, 0), -ENOENT);
        calls++;
        sleep_ms(5);
    }
    rrpc_service_stat st = stats(c.svc);
    print_message("%d calls, %llu attempts in 1 s\n", calls, (unsigned long long)st.attempts);
    if (st.attempts < 2 || st.attempts > 6)
        fail_msg("%llu attempts in 1 s with a backoff of at least 200 ms",
                 (unsigned long long)st.attempts);
    assert_int_equal(st.failures, st.attempts);
    assert_int_equal(st.connects, 0);
    assert_int_equal(st.last_error, -ENOENT);
    assert_true(calls > 3 * (int)st.attempts);
    assert_non_null(strstr(rrpc_service_last_error(c.svc), "next attempt in"));

    /* Waiting longer than the backoff makes one more attempt. */
    rrpc_conn *conn;
    uint64_t before = st.attempts;
    assert_int_equal(rrpc_service_conn(c.svc, 2500, &conn), -ENOENT);
    assert_true(stats(c.svc).attempts > before);
    client_stop(&c);
}

#define THREADS 8
#define CALLS 25

static int concurrent_ok;

static void *echo_thread(void *arg)
{
    rrpc_service *svc = arg;
    for (int i = 0; i < CALLS; i++) {
        char out[16];
        if (call(svc, "echo", out, sizeof(out)) == 0 && !strcmp(out, "ping"))
            __atomic_add_fetch(&concurrent_ok, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* Threads that all need the first connection at once: one attempt, one
 * connection, every call succeeds. */
static void test_concurrent_first_calls_share_one_connection(void **state)
{
    struct child s;
    spawn_server(&s, "recon-mt");
    struct client c;
    client_start(&c, "recon-mt", NULL);
    pthread_t th[THREADS];
    concurrent_ok = 0;
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, echo_thread, c.svc), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(concurrent_ok, THREADS * CALLS);
    rrpc_service_stat st = stats(c.svc);
    assert_int_equal(st.attempts, 1);
    assert_int_equal(st.connects, 1);
    client_stop(&c);
    stop_server(&s);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "serve"))
        return serve(argv[2], argv[3], argv[4]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_checks_its_arguments),
        cmocka_unit_test(test_calls_survive_a_server_crash_and_restart),
        cmocka_unit_test(test_attempts_are_spaced_by_the_backoff),
        cmocka_unit_test(test_concurrent_first_calls_share_one_connection),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

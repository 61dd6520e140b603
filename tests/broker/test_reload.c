/* SPDX-License-Identifier: MIT */
/*
 * rrpcd and its supervisor (issue #32 point 1): SIGHUP reloads the
 * configuration while sessions and registrations stay, a bad configuration
 * is refused and the old one kept, and systemd's notification protocol
 * (READY=1, RELOADING=1, STOPPING=1) reaches a real AF_UNIX datagram socket
 * named by NOTIFY_SOCKET.  The real rrpcd on 127.0.0.1 over real TLS.
 *
 * Then (issue #32 point 8): while etcd is down rrpcd logs the first failure
 * and then at most one line per interval, and one line when it is back.
 *
 * Environment (set by meson): RRPCD = the daemon, MAKE_CERTS = the script,
 * RRPCD_NOTIFY = 1 when rrpcd was built with libsystemd.
 * Signals keep their default dispositions.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "etcd_test.h"
#include "rrpcd_test.h"

static char dir[64], conf[128], addr[64];
static pid_t daemon_pid;

/* The configuration file: the certificates of make-dev-certs, then @extra. */
static void write_conf(const char *extra)
{
    assert_int_equal(
        rrpcd_test_conf(dir, "listen = 127.0.0.1:0\nallow = register * kv-server\n%s", extra), 0);
}

static void start_daemon(void)
{
    char log[128];
    snprintf(log, sizeof(log), "%s/rrpcd-reload.log", dir);
    unlink(log);
    int port = rrpcd_spawn(dir, "reload", conf, NULL, &daemon_pid);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
}

/* SIGTERM, and rrpcd's exit status: 0 when it shut down cleanly. */
static int stop_daemon(void)
{
    int st = -1;
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, &st, 0);
    daemon_pid = 0;
    return st;
}

static bool daemon_alive(void)
{
    int st;
    return waitpid(daemon_pid, &st, WNOHANG) == 0;
}

/* The number of lines of rrpcd's log that contain @what. */
static int log_count(const char *what)
{
    char p[128], line[4096];
    snprintf(p, sizeof(p), "%s/rrpcd-reload.log", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* Waits (5 s at most) for a line with @what in rrpcd's log. */
static bool log_wait(const char *what)
{
    for (int i = 0; i < 500; i++) {
        if (log_count(what))
            return true;
        sleep_ms(10);
    }
    return false;
}

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static void lookup_expect(rrpc_broker *b, const char *service, int want)
{
    rrpc_service_info *info = NULL;
    int r = rrpc_broker_lookup(b, service, &info);
    if (r != want)
        fail_msg("lookup of '%s': %d (%s), wanted %d; see %s/rrpcd-reload.log", service, r,
                 strerror(-r), want, dir);
    rrpc_service_info_free(info);
}

/* A server registered before the reload, a client whose session was opened before it. */
struct world {
    rrpc_broker *srv_b, *cli_b;
    rrpc_ctx *ctx;
    rrpc_listener *l;
};

static void world_open(struct world *w)
{
    assert_int_equal(broker_open_as(dir, addr, "kv-server", 5000, &w->srv_b), 0);
    assert_int_equal(test_server_register(w->srv_b, "kv-store", h_echo, NULL, false, &w->ctx,
                                          &w->l),
                     0);
    assert_int_equal(broker_open_as(dir, addr, "kv-client", 5000, &w->cli_b), 0);
    lookup_expect(w->cli_b, "kv-store", 0);
    lookup_expect(w->cli_b, "not-registered", -ENOENT);
}

static void world_close(struct world *w)
{
    rrpc_listener_close(w->l);
    rrpc_ctx_destroy(w->ctx);
    rrpc_broker_close(w->srv_b);
    rrpc_broker_close(w->cli_b);
}

/* SIGHUP with a new log level and a narrower ACL: both apply at once, to the sessions
 * already open too; the registration made before is still found. */
static void test_reload_applies(void **state)
{
    (void)state;
    write_conf("log_level = notice\nallow = lookup * kv-client\n");
    start_daemon();
    struct world w;
    world_open(&w);
    assert_int_equal(log_count(" debug: "), 0);

    write_conf("log_level = debug\nallow = lookup kv-* kv-client\n");
    kill(daemon_pid, SIGHUP);
    if (!log_wait("reloaded "))
        fail_msg("no 'reloaded' line after SIGHUP (rrpcd alive: %d); see %s/rrpcd-reload.log",
                 daemon_alive(), dir);
    assert_true(daemon_alive());
    assert_int_equal(log_count("reload refused"), 0);

    /* The client's session from before: the registration from before is found; the new
     * ACL refuses what the old one allowed. */
    lookup_expect(w.cli_b, "kv-store", 0);
    lookup_expect(w.cli_b, "not-registered", -EPERM);
    /* ... on that same session: no connection was accepted since the reload (rrpcd
     * logs each at debug level, which is on now). */
    assert_int_equal(log_count(": accepted"), 0);
    /* A new session (the new TLS context) at the new log level. */
    rrpc_broker *b2;
    assert_int_equal(broker_open_as(dir, addr, "kv-client", 5000, &b2), 0);
    lookup_expect(b2, "kv-store", 0);
    rrpc_broker_close(b2);
    assert_true(log_wait(": accepted"));
    /* The server's session renews and unregisters as before. */
    world_close(&w);
    assert_int_equal(stop_daemon(), 0);
}

/* A broken file at SIGHUP: refused with the reason, rrpcd serves on with the old one. */
static void test_reload_refuses_bad(void **state)
{
    (void)state;
    write_conf("log_level = notice\nallow = lookup * kv-client\n");
    start_daemon();
    struct world w;
    world_open(&w);

    write_conf("log_level = debug\nallow = lookup kv-* kv-client\nthis line is not a setting\n");
    kill(daemon_pid, SIGHUP);
    if (!log_wait("reload refused: "))
        fail_msg("no 'reload refused' line after SIGHUP (rrpcd alive: %d); see "
                 "%s/rrpcd-reload.log", daemon_alive(), dir);
    assert_true(log_count("expected \"name = value\"") >= 1);
    assert_true(daemon_alive());
    /* The old ACL and log level stay. */
    lookup_expect(w.cli_b, "kv-store", 0);
    lookup_expect(w.cli_b, "not-registered", -ENOENT);
    /* A certificate that cannot be loaded is refused too, and new sessions still work. */
    write_conf("cert = /nonexistent/rrpcd.crt\n");
    kill(daemon_pid, SIGHUP);
    for (int i = 0; i < 500 && log_count("reload refused: ") < 2; i++)
        sleep_ms(10);
    assert_true(log_count("cannot open it") >= 1);
    rrpc_broker *b2;
    assert_int_equal(broker_open_as(dir, addr, "kv-client", 5000, &b2), 0);
    lookup_expect(b2, "kv-store", 0);
    rrpc_broker_close(b2);
    assert_int_equal(log_count(" debug: "), 0);
    world_close(&w);
    assert_int_equal(stop_daemon(), 0);
}

/* The next datagram on @fd (5 s at most) into @buf; false on timeout. */
static bool notify_recv(int fd, char *buf, size_t len)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 5000) != 1)
        return false;
    ssize_t n = recv(fd, buf, len - 1, 0);
    if (n < 0)
        return false;
    buf[n] = 0;
    return true;
}

/* Waits for a datagram containing @want; the ones before it go to @seen. */
static void notify_expect(int fd, const char *want, char *seen, size_t seenlen)
{
    char buf[4096];
    while (notify_recv(fd, buf, sizeof(buf))) {
        size_t o = strlen(seen);
        snprintf(seen + o, seenlen - o, "[%s]", buf);
        if (strstr(buf, want))
            return;
    }
    fail_msg("no notification with '%s' (got: %s); see %s/rrpcd-reload.log", want, seen, dir);
}

/* Type=notify: READY=1 once listening, RELOADING=1 then READY=1 around SIGHUP,
 * STOPPING=1 at SIGTERM, on a real socket named by NOTIFY_SOCKET. */
static void test_notify(void **state)
{
    (void)state;
    const char *built = getenv("RRPCD_NOTIFY");
    if (!built || strcmp(built, "1")) {
        print_message("rrpcd was built without libsystemd: it does not notify\n");
        skip();
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", dir);
    unlink(sa.sun_path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    write_conf("allow = lookup * kv-client\n");
    setenv("NOTIFY_SOCKET", sa.sun_path, 1);
    start_daemon();
    unsetenv("NOTIFY_SOCKET");
    char seen[8192] = "";
    notify_expect(fd, "READY=1", seen, sizeof(seen));
    assert_null(strstr(seen, "RELOADING=1"));

    seen[0] = 0;
    kill(daemon_pid, SIGHUP);
    notify_expect(fd, "RELOADING=1", seen, sizeof(seen));
    assert_non_null(strstr(seen, "MONOTONIC_USEC="));
    notify_expect(fd, "READY=1", seen, sizeof(seen));
    assert_true(daemon_alive());

    seen[0] = 0;
    kill(daemon_pid, SIGTERM);
    notify_expect(fd, "STOPPING=1", seen, sizeof(seen));
    int st = -1;
    waitpid(daemon_pid, &st, 0);
    daemon_pid = 0;
    assert_int_equal(st, 0);
    close(fd);
}

/* The lines of rrpcd's log at warning or error that name etcd. */
static int etcd_complaints(void)
{
    char p[128], line[4096];
    snprintf(p, sizeof(p), "%s/rrpcd-reload.log", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, " warning: etcd") || strstr(line, " error: etcd");
    fclose(f);
    return n;
}

/* etcd killed under a synchronized rrpcd: over 8 s (the grace before "degraded",
 * then some), the first failure and the degradation are logged, not a line a
 * second; etcd back: one line says so. */
static void test_etcd_down_quiet(void **state)
{
    (void)state;
    struct etcd_member m;
    char edir[128], extra[512];
    snprintf(edir, sizeof(edir), "%s/etcd", dir);
    assert_int_equal(mkdir(edir, 0700), 0);
    assert_int_equal(etcd_cluster_init(&m, 1, edir), 0);
    assert_int_equal(etcd_member_start(&m), 0);
    snprintf(extra, sizeof(extra),
             "allow = lookup * kv-client\nregistry = etcd://127.0.0.1:%d\nticket_key = %s/"
             "ticket.pem\n", m.client_port, dir);
    write_conf(extra);
    start_daemon();
    for (int i = 0; i < 300 && !log_count("etcd: synchronized"); i++)
        sleep_ms(100);
    assert_true(log_count("etcd: synchronized") >= 1);
    int before = etcd_complaints();

    etcd_member_stop(&m, SIGKILL);
    sleep_ms(8000);
    int down = etcd_complaints() - before;
    if (down < 1 || down > 2)
        fail_msg("%d warning/error lines about etcd in 8 s of etcd down (want the first "
                 "failure and the degradation: 1..2); see %s/rrpcd-reload.log", down, dir);

    int back_before = log_count("not degraded") + log_count("reachable again");
    assert_int_equal(etcd_member_start(&m), 0);
    bool back = false;
    for (int i = 0; i < 300 && !back; i++) {
        back = log_count("not degraded") + log_count("reachable again") > back_before;
        sleep_ms(100);
    }
    assert_true(back);
    assert_true(daemon_alive());
    assert_int_equal(stop_daemon(), 0);
    etcd_member_stop(&m, SIGTERM);
}

static int group_setup(void **state)
{
    (void)state;
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-reload-test-XXXXXX", "kv-server kv-client"))
        return -1;
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (daemon_pid > 0)
        stop_daemon();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rrpcd_test_dir_remove(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_reload_applies, teardown),
        cmocka_unit_test_teardown(test_reload_refuses_bad, teardown),
        cmocka_unit_test_teardown(test_notify, teardown),
        cmocka_unit_test_teardown(test_etcd_down_quiet, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

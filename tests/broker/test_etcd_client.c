/* SPDX-License-Identifier: MIT */
/*
 * rrpcd's etcd client (daemon/etcd.c, issue #16) against a real etcd started
 * here on free loopback ports in a temporary directory: leases, keys under a
 * prefix, keep-alives of a lease that is gone, a member list whose first
 * member does not answer, a watch on a prefix, and etcd stopped and started again.  Skips (77) when the etcd binary is missing.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <syslog.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "broker_test.h"
#include "etcd.h"
#include "rrpcd.h"

/* etcd.c logs through rrpcd's log_msg. */
int log_level = LOG_DEBUG;
void log_msg(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "log %d: ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static char dir[] = "/tmp/rrpc-etcd-XXXXXX";
static pid_t etcd_pid;
static int client_port;
static char member[300];

/* A loopback port nobody listens on now (the kernel's pick for port 0). */
static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t l = sizeof(a);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(s, (struct sockaddr *)&a, &l))
        abort();
    close(s);
    return ntohs(a.sin_port);
}

static int peer_port;

/* Starts etcd on the ports and data directory of this run and waits (30 s at most) until a
 * range answers. */
static int spawn_etcd(void)
{
    etcd_pid = fork();
    if (etcd_pid == 0) {
        char data[300], curl[320], purl[100], logf[300];
        snprintf(data, sizeof(data), "%s/data", dir);
        snprintf(logf, sizeof(logf), "%s/etcd.log", dir);
        snprintf(curl, sizeof(curl), "http://%s", member);
        snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", peer_port);
        if (!freopen(logf, "a", stderr))
            _exit(127);
        execlp("etcd", "etcd", "--data-dir", data, "--listen-client-urls", curl,
               "--advertise-client-urls", curl, "--listen-peer-urls", purl, (char *)NULL);
        _exit(127);
    }
    struct etcd *e;
    char m[1][300];
    snprintf(m[0], sizeof(m[0]), "%s", member);
    if (etcd_open(&e, (const char (*)[300])m, 1, 500))
        return -1;
    int r = -1;
    for (int i = 0; i < 300 && r; i++) {
        int st;
        if (waitpid(etcd_pid, &st, WNOHANG) == etcd_pid) {
            fprintf(stderr, "etcd exited at start; see %s/etcd.log\n", dir);
            etcd_pid = 0;
            break;
        }
        r = etcd_range_prefix(e, "/", NULL, NULL, NULL) == 0 ? 0 : -1;
        if (r)
            sleep_ms(100);
    }
    etcd_close(e);
    return r;
}

static void kill_etcd(void)
{
    if (etcd_pid > 0) {
        kill(etcd_pid, SIGTERM);
        waitpid(etcd_pid, NULL, 0);
    }
    etcd_pid = 0;
}

static int start_etcd(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    client_port = free_port();
    peer_port = free_port();
    snprintf(member, sizeof(member), "127.0.0.1:%d", client_port);
    return spawn_etcd();
}

static int stop_etcd(void **state)
{
    (void)state;
    kill_etcd();
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct etcd *open_one(void)
{
    char m[1][300];
    snprintf(m[0], sizeof(m[0]), "%s", member);
    struct etcd *e = NULL;
    assert_int_equal(etcd_open(&e, (const char (*)[300])m, 1, 2000), 0);
    return e;
}

struct seen {
    int n;
    char key[8][64];
    char val[8][64];
    int64_t lease[8];
};

static int collect(void *arg, const char *key, size_t kl, const uint8_t *val, size_t vl,
                   int64_t lease)
{
    struct seen *s = arg;
    if (s->n == 8 || kl >= 64 || vl >= 64)
        return -ENOSPC;
    memcpy(s->key[s->n], key, kl);
    s->key[s->n][kl] = 0;
    memcpy(s->val[s->n], val, vl);
    s->val[s->n][vl] = 0;
    s->lease[s->n++] = lease;
    return 0;
}

static void base64_round_trips_and_refuses_what_is_not_base64(void **state)
{
    (void)state;
    char enc[16];
    uint8_t dec[16];
    size_t n;
    assert_int_equal(etcd_b64_encode("ab", 2, enc, sizeof(enc)), 0);
    assert_string_equal(enc, "YWI=");
    assert_int_equal(etcd_b64_decode(enc, strlen(enc), dec, sizeof(dec), &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(dec, "ab", 2);
    assert_int_equal(etcd_b64_encode("abc", 3, enc, 4), -ENOSPC);
    assert_int_equal(etcd_b64_decode("YWI", 3, dec, sizeof(dec), &n), -EINVAL);
    assert_int_equal(etcd_b64_decode("Y*I=", 4, dec, sizeof(dec), &n), -EINVAL);
    assert_int_equal(etcd_b64_decode("YWJjYWJj", 8, dec, 3, &n), -EINVAL);
}

static void a_key_on_a_lease_is_listed_under_its_prefix_and_goes_with_the_lease(void **state)
{
    (void)state;
    struct etcd *e = open_one();
    int64_t lease, ttl = 0, rev = 0;
    assert_int_equal(etcd_lease_grant(e, 30, &lease), 0);
    assert_int_equal(etcd_put(e, "/t1/svc/a", "va", 2, lease), 0);
    assert_int_equal(etcd_put(e, "/t1/svc/b", "", 0, 0), 0);
    assert_int_equal(etcd_put(e, "/t10/other", "x", 1, 0), 0); /* not under /t1/ */
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/t1/", collect, &s, &rev), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.key[0], "/t1/svc/a");
    assert_string_equal(s.val[0], "va");
    assert_int_equal(s.lease[0], lease);
    assert_string_equal(s.key[1], "/t1/svc/b");
    assert_string_equal(s.val[1], "");
    assert_int_equal(s.lease[1], 0);
    assert_true(rev > 0);

    assert_int_equal(etcd_lease_keepalive(e, lease, &ttl), 0);
    assert_in_range(ttl, 1, 30);
    assert_int_equal(etcd_lease_revoke(e, lease), 0);
    assert_int_equal(etcd_lease_keepalive(e, lease, &ttl), -ENOENT);
    assert_int_equal(etcd_lease_revoke(e, lease), 0); /* gone already: not an error */
    memset(&s, 0, sizeof(s));
    assert_int_equal(etcd_range_prefix(e, "/t1/", collect, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.key[0], "/t1/svc/b");

    int64_t deleted = -1;
    assert_int_equal(etcd_delete(e, "/t1/svc/b", &deleted), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(etcd_delete(e, "/t1/svc/b", &deleted), 0);
    assert_int_equal(deleted, 0);
    /* A put on a lease that does not exist is refused, and says so. */
    assert_int_equal(etcd_put(e, "/t1/svc/c", "v", 1, lease), -ENOENT);
    etcd_close(e);
}

static void a_member_that_does_not_answer_is_skipped_for_the_next(void **state)
{
    (void)state;
    char m[2][300];
    snprintf(m[0], sizeof(m[0]), "127.0.0.1:%d", free_port()); /* nobody listens */
    snprintf(m[1], sizeof(m[1]), "%s", member);
    struct etcd *e;
    assert_int_equal(etcd_open(&e, (const char (*)[300])m, 2, 2000), 0);
    int64_t lease;
    assert_int_equal(etcd_lease_grant(e, 10, &lease), 0);
    assert_int_equal(etcd_lease_revoke(e, lease), 0);
    etcd_close(e);

    /* No member answers: -ECONNREFUSED, the caller's "etcd is unreachable". */
    assert_int_equal(etcd_open(&e, (const char (*)[300])m, 1, 2000), 0);
    assert_int_equal(etcd_lease_grant(e, 10, &lease), -ECONNREFUSED);
    etcd_close(e);
}

static int wakes;
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static void on_wake(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wake_mu);
    wakes++;
    pthread_mutex_unlock(&wake_mu);
}

/* The next event of @w, waiting for it 10 s at most. */
static void next_event(struct etcd_watch *w, struct etcd_event *ev)
{
    for (int i = 0; i < 1000; i++) {
        int r = etcd_watch_next(w, ev);
        if (r == 0)
            return;
        assert_int_equal(r, -EAGAIN);
        sleep_ms(10);
    }
    fail_msg("no watch event within 10 s");
}

static void a_watch_sees_a_put_and_the_delete_when_its_lease_is_revoked(void **state)
{
    (void)state;
    struct etcd *e = open_one();
    int64_t rev, lease;
    assert_int_equal(etcd_put(e, "/w/before", "old", 3, 0), 0);
    assert_int_equal(etcd_range_prefix(e, "/w/", NULL, NULL, &rev), 0);
    char m[1][300];
    snprintf(m[0], sizeof(m[0]), "%s", member);
    struct etcd_watch *w;
    assert_int_equal(etcd_watch_start(&w, (const char (*)[300])m, 1, "/w/", rev + 1, on_wake,
                                      NULL), 0);
    assert_int_equal(etcd_lease_grant(e, 30, &lease), 0);
    assert_int_equal(etcd_put(e, "/w/svc/1", "endpoints", 9, lease), 0);
    assert_int_equal(etcd_put(e, "/wx/not-under", "x", 1, 0), 0);
    struct etcd_event ev;
    next_event(w, &ev);
    assert_true(ev.put);
    assert_string_equal(ev.key, "/w/svc/1");
    assert_int_equal(ev.vlen, 9);
    assert_memory_equal(ev.val, "endpoints", 9);
    assert_int_equal(ev.lease, lease);
    assert_true(ev.revision > rev);
    etcd_event_free(&ev);
    assert_true(etcd_watch_connected(w));
    assert_int_equal(etcd_lease_revoke(e, lease), 0);
    next_event(w, &ev);
    assert_false(ev.put);
    assert_string_equal(ev.key, "/w/svc/1");
    etcd_event_free(&ev);
    assert_int_equal(etcd_watch_next(w, &ev), -EAGAIN); /* nothing from /wx/, nor "before" */
    pthread_mutex_lock(&wake_mu);
    assert_true(wakes >= 2);
    pthread_mutex_unlock(&wake_mu);
    etcd_watch_stop(w);
    etcd_close(e);
}

/* Waits (10 s at most) until the watch's connected state is @want. */
static void wait_connected(struct etcd_watch *w, bool want)
{
    for (int i = 0; i < 1000 && etcd_watch_connected(w) != want; i++)
        sleep_ms(10);
    assert_true(etcd_watch_connected(w) == want);
}

static void with_etcd_stopped_calls_say_unreachable_and_the_watch_resumes_when_it_is_back(
    void **state)
{
    (void)state;
    struct etcd *e = open_one();
    int64_t rev, lease;
    assert_int_equal(etcd_range_prefix(e, "/r/", NULL, NULL, &rev), 0);
    char m[1][300];
    snprintf(m[0], sizeof(m[0]), "%s", member);
    struct etcd_watch *w;
    assert_int_equal(etcd_watch_start(&w, (const char (*)[300])m, 1, "/r/", rev + 1, on_wake,
                                      NULL), 0);
    assert_int_equal(etcd_put(e, "/r/a", "1", 1, 0), 0);
    struct etcd_event ev;
    next_event(w, &ev);
    assert_string_equal(ev.key, "/r/a");
    etcd_event_free(&ev);

    kill_etcd();
    wait_connected(w, false);
    assert_int_equal(etcd_lease_grant(e, 10, &lease), -ECONNREFUSED);
    assert_int_equal(etcd_put(e, "/r/b", "2", 1, 0), -ECONNREFUSED);
    assert_int_equal(etcd_watch_next(w, &ev), -EAGAIN);

    assert_int_equal(spawn_etcd(), 0);
    assert_int_equal(etcd_put(e, "/r/b", "2", 1, 0), 0);
    next_event(w, &ev); /* the watch came back by itself, from where it was */
    assert_true(ev.put);
    assert_string_equal(ev.key, "/r/b");
    etcd_event_free(&ev);
    assert_true(etcd_watch_connected(w));
    assert_int_equal(etcd_watch_next(w, &ev), -EAGAIN);
    etcd_watch_stop(w);
    etcd_close(e);
}

int main(void)
{
    if (system("command -v etcd > /dev/null 2>&1") != 0) {
        printf("skipped: the etcd binary is missing (apt-get install etcd-server)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(base64_round_trips_and_refuses_what_is_not_base64),
        cmocka_unit_test(a_key_on_a_lease_is_listed_under_its_prefix_and_goes_with_the_lease),
        cmocka_unit_test(a_member_that_does_not_answer_is_skipped_for_the_next),
        cmocka_unit_test(a_watch_sees_a_put_and_the_delete_when_its_lease_is_revoked),
        cmocka_unit_test(
            with_etcd_stopped_calls_say_unreachable_and_the_watch_resumes_when_it_is_back),
    };
    return cmocka_run_group_tests(tests, start_etcd, stop_etcd);
}

/* SPDX-License-Identifier: MIT */
/*
 * rrpcd's etcd client (daemon/etcd.h) against the real etcd: this program
 * starts etcd on free loopback ports in a temporary directory, talks to its
 * v3 JSON gateway, and stops it.  Skips (77) when the etcd binary is missing.
 *
 * Environment: ETCD = the etcd binary (default: etcd on PATH).
 * No assertion depends on timing: a lease's expiry is waited for with a
 * generous bound.
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
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "etcd.h"
#include "etcd_test.h"

static char dir[] = "/tmp/rrpc-etcd-XXXXXX";
static char host[64];
static struct etcd_member member = { .pid = -1 };

static struct etcd *client_of(const char *const *hosts, size_t n)
{
    struct etcd_opts o = { .hosts = hosts, .n_hosts = n, .timeout_ms = 3000 };
    struct etcd *e;
    assert_int_equal(etcd_open(&e, &o), 0);
    return e;
}

static struct etcd *client(void)
{
    const char *hosts[] = { host };
    return client_of(hosts, 1);
}

static int setup(void **state)
{
    (void)state;
    etcd_bin_or_skip();
    if (!mkdtemp(dir))
        return -1;
    snprintf(member.dir, sizeof(member.dir), "%s", dir);
    if (etcd_member_start(&member))
        return -1;
    snprintf(host, sizeof(host), "127.0.0.1:%d", member.client_port);
    /* Ready when it answers; a generous bound. */
    struct etcd *e = client();
    int r = -1;
    for (int i = 0; i < 300 && r; i++) {
        int64_t id;
        r = etcd_lease_grant(e, 5, &id);
        if (r)
            usleep(100 * 1000);
    }
    if (r)
        fprintf(stderr, "etcd did not come up: %s (log: %s/etcd.log)\n", etcd_error(e), dir);
    etcd_close(e);
    return r ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    etcd_member_stop(&member, SIGTERM);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

struct seen {
    int n;
    char keys[8][128];
    unsigned char vals[8][64];
    size_t lens[8];
};

static int collect(void *arg, const char *key, const void *val, size_t len)
{
    struct seen *s = arg;
    if (s->n == 8 || strlen(key) >= 128 || len > 64)
        return -E2BIG;
    snprintf(s->keys[s->n], 128, "%s", key);
    memcpy(s->vals[s->n], val, len);
    s->lens[s->n++] = len;
    return 0;
}

static void put_keys_are_found_by_prefix_with_their_values_byte_for_byte(void **state)
{
    (void)state;
    struct etcd *e = client();
    const unsigned char bin[] = { 0, 1, 2, 0xff, 0xfe, '=', 0 };
    assert_int_equal(etcd_put(e, "/p1/a", bin, sizeof(bin), 0), 0);
    assert_int_equal(etcd_put(e, "/p1/b", "", 0, 0), 0);
    assert_int_equal(etcd_put(e, "/p10", "outside", 7, 0), 0);
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/p1/", 0, collect, &s, NULL), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.keys[0], "/p1/a");
    assert_int_equal(s.lens[0], sizeof(bin));
    assert_memory_equal(s.vals[0], bin, sizeof(bin));
    assert_string_equal(s.keys[1], "/p1/b");
    assert_int_equal(s.lens[1], 0);
    assert_int_equal(etcd_delete(e, "/p1/a"), 0);
    memset(&s, 0, sizeof(s));
    assert_int_equal(etcd_range_prefix(e, "/p1/", 0, collect, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.keys[0], "/p1/b");
    etcd_close(e);
}

static void a_key_bound_to_a_lease_goes_when_the_lease_expires(void **state)
{
    (void)state;
    struct etcd *e = client();
    int64_t id;
    assert_int_equal(etcd_lease_grant(e, 1, &id), 0);
    assert_int_equal(etcd_put(e, "/lease/x", "v", 1, id), 0);
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/lease/", 0, collect, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    /* Gone within a generous bound (TTL 1 s; etcd checks leases every 500 ms). */
    for (int i = 0; i < 300 && s.n; i++) {
        usleep(100 * 1000);
        memset(&s, 0, sizeof(s));
        assert_int_equal(etcd_range_prefix(e, "/lease/", 0, collect, &s, NULL), 0);
    }
    assert_int_equal(s.n, 0);
    int64_t ttl;
    assert_int_equal(etcd_lease_keepalive(e, id, &ttl), -ENOENT);
    assert_non_null(strstr(etcd_error(e), "is gone"));
    etcd_close(e);
}

static void a_kept_alive_lease_answers_its_ttl_and_a_revoked_one_takes_its_keys(void **state)
{
    (void)state;
    struct etcd *e = client();
    int64_t id, ttl = 0;
    assert_int_equal(etcd_lease_grant(e, 30, &id), 0);
    assert_int_equal(etcd_put(e, "/rev/x", "v", 1, id), 0);
    assert_int_equal(etcd_lease_keepalive(e, id, &ttl), 0);
    assert_int_equal(ttl, 30);
    assert_int_equal(etcd_lease_revoke(e, id), 0);
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/rev/", 0, collect, &s, NULL), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(etcd_lease_keepalive(e, id, &ttl), -ENOENT);
    /* A put bound to a lease that is gone: etcd refuses it, and says why. */
    assert_int_equal(etcd_put(e, "/rev/y", "v", 1, id), -EPROTO);
    assert_non_null(strstr(etcd_error(e), "lease not found"));
    etcd_close(e);
}

static void an_endpoint_that_does_not_answer_is_skipped_and_none_answering_is_an_error(void **state)
{
    (void)state;
    char dead[64];
    snprintf(dead, sizeof(dead), "127.0.0.1:%d", etcd_free_port());
    const char *both[] = { dead, host };
    struct etcd *e = client_of(both, 2);
    assert_int_equal(etcd_put(e, "/fo/x", "v", 1, 0), 0);
    etcd_close(e);
    const char *none[] = { dead };
    e = client_of(none, 1);
    assert_int_equal(etcd_put(e, "/fo/y", "v", 1, 0), -EHOSTUNREACH);
    assert_non_null(strstr(etcd_error(e), dead));
    etcd_close(e);
}

/* ---- watch ----------------------------------------------------------------- */

struct watched {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    enum etcd_event ev[16];
    char keys[16][64];
    char vals[16][16];
    volatile int stop;
    int result;
    struct etcd *e;
    int64_t start;
};

static int on_event(void *arg, enum etcd_event ev, const char *key, const void *val, size_t len,
                    int64_t rev)
{
    (void)rev;
    struct watched *w = arg;
    pthread_mutex_lock(&w->mu);
    if (w->n < 16) {
        w->ev[w->n] = ev;
        snprintf(w->keys[w->n], 64, "%s", key);
        snprintf(w->vals[w->n], 16, "%.*s", (int)(len < 15 ? len : 15), (const char *)val);
        w->n++;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static void *watcher(void *arg)
{
    struct watched *w = arg;
    w->result = etcd_watch_prefix(w->e, "/w/", w->start, on_event, w, &w->stop);
    return NULL;
}

/* Waits (bounded: 30 s) until @n events were seen. */
static int wait_events(struct watched *w, int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&w->mu);
    while (w->n < n && pthread_cond_timedwait(&w->cv, &w->mu, &until) == 0)
        ;
    int got = w->n;
    pthread_mutex_unlock(&w->mu);
    return got;
}

static void a_watch_from_the_range_revision_sees_every_put_delete_and_expiry_in_order(void **state)
{
    (void)state;
    struct etcd *e = client();
    int64_t rev, lease;
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/w/", 0, collect, &s, &rev), 0);
    assert_true(rev > 0);
    /* Made after the range and before the watch starts: still seen. */
    assert_int_equal(etcd_put(e, "/w/before", "b", 1, 0), 0);
    struct watched w = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
                         .e = client(), .start = rev + 1 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, watcher, &w), 0);
    assert_int_equal(wait_events(&w, 1), 1);
    assert_int_equal(etcd_put(e, "/w/a", "va", 2, 0), 0);
    assert_int_equal(etcd_put(e, "/outside", "x", 1, 0), 0);
    assert_int_equal(etcd_delete(e, "/w/a"), 0);
    assert_int_equal(etcd_lease_grant(e, 1, &lease), 0);
    assert_int_equal(etcd_put(e, "/w/leased", "l", 1, lease), 0);
    assert_int_equal(wait_events(&w, 5), 5); /* the lease's expiry is the fifth */
    w.stop = 1;
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(w.result, -ECANCELED);
    assert_int_equal(w.n, 5);
    const enum etcd_event ev[] = { ETCD_PUT, ETCD_PUT, ETCD_DELETE, ETCD_PUT, ETCD_DELETE };
    const char *keys[] = { "/w/before", "/w/a", "/w/a", "/w/leased", "/w/leased" };
    const char *vals[] = { "b", "va", "", "l", "" };
    for (int i = 0; i < 5; i++) {
        assert_int_equal(w.ev[i], ev[i]);
        assert_string_equal(w.keys[i], keys[i]);
        assert_string_equal(w.vals[i], vals[i]);
    }
    etcd_close(w.e);
    etcd_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(put_keys_are_found_by_prefix_with_their_values_byte_for_byte),
        cmocka_unit_test(a_key_bound_to_a_lease_goes_when_the_lease_expires),
        cmocka_unit_test(a_kept_alive_lease_answers_its_ttl_and_a_revoked_one_takes_its_keys),
        cmocka_unit_test(an_endpoint_that_does_not_answer_is_skipped_and_none_answering_is_an_error),
        cmocka_unit_test(a_watch_from_the_range_revision_sees_every_put_delete_and_expiry_in_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

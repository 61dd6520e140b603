/* SPDX-License-Identifier: MIT */
/*
 * Several brokers (issue #16): two rrpcd on one real etcd, over real TLS with
 * certificates from scripts/make-dev-certs.sh; a server and a client both
 * configured with the list "A,B".  rrpcd A is killed with SIGKILL while the
 * client loops over lookups, connects and calls.
 *
 * No assertion depends on timing.  Failures are placed by event order: a
 * sequence counter is bumped at the kill, at the client's failover (its log
 * callback) and at the start and end of every round of the loop; a failed
 * round must have ended after the kill and begun before the failover, which
 * is the documented window.  Every wait is bounded generously (30 s).
 *
 * Environment (set by meson): RRPCD, MAKE_CERTS; ETCD (optional).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"
#include "etcd_test.h"

#define WAIT_MS 30000
#define LEASE_MS 2000
#define MAX_FAILS 64

static char dir[256];
static struct etcd_member member = { .pid = -1 };

struct broker {
    const char *name;
    pid_t pid;
    char addr[64];
};
static struct broker A = { "a", -1, "" }, B = { "b", -1, "" };
/* Two rrpcd with registries of their own (registry = memory). */
static struct broker M1 = { "m1", -1, "" }, M2 = { "m2", -1, "" };

static void start_rrpcd(struct broker *k)
{
    char conf[300], reg[80], prefix[80] = "etcd_prefix=/test/failover/";
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    if (k == &M1 || k == &M2) {
        snprintf(reg, sizeof(reg), "registry=memory");
        snprintf(prefix, sizeof(prefix), "log_level=info");
    } else
        snprintf(reg, sizeof(reg), "registry=etcd://127.0.0.1:%d", member.client_port);
    const char *set[] = { reg, prefix, NULL };
    snprintf(k->addr, sizeof(k->addr), "127.0.0.1:%d", rrpcd_spawn(dir, k->name, conf, set, &k->pid));
}

static void stop_rrpcd(struct broker *k, int sig)
{
    if (k->pid <= 0)
        return;
    int st;
    kill(k->pid, sig);
    kill(k->pid, SIGCONT); /* one a test stopped */
    assert_int_equal(waitpid(k->pid, &st, 0), k->pid);
    k->pid = -1;
    if (sig == SIGTERM && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
        fail_msg("rrpcd %s did not exit cleanly on SIGTERM (0x%x); see %s", k->name, st, dir);
}

/* ---- events, in one order ---------------------------------------------------- */

static atomic_long seq;

/* What a broker handle's log said: failovers, with the sequence number of the first. */
struct watchlog {
    const char *who;
    atomic_int failovers;
    atomic_long first_failover_seq;
    atomic_llong first_failover_ms; /* monotonic; printed, never asserted */
    atomic_int reregistered;
};

static void on_log(int level, const char *msg, void *user)
{
    struct watchlog *w = user;
    if (strstr(msg, "failed over")) {
        long s = ++seq;
        long zero = 0;
        if (atomic_compare_exchange_strong(&w->first_failover_seq, &zero, s))
            atomic_store(&w->first_failover_ms, now_ms());
        atomic_fetch_add(&w->failovers, 1);
    }
    if (strstr(msg, "registered again"))
        atomic_fetch_add(&w->reregistered, 1);
    if (level <= LOG_NOTICE)
        printf("[%s log %d] %s\n", w->who, level, msg);
}

static int open_list(const char *list, const char *who, struct watchlog *w, rrpc_broker **ret)
{
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/%s.crt", dir, who);
    snprintf(key, sizeof(key), "%s/%s.key", dir, who);
    rrpc_broker_opts o = { .ca_file = ca, .cert_file = cert, .key_file = key,
                           .timeout_ms = 3000, .log = w ? on_log : NULL, .log_user = w,
                           .log_level = LOG_DEBUG };
    return rrpc_broker_open(list, &o, ret);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_DFL);
    etcd_bin_or_skip();
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-etcd-failover-XXXXXX",
                       "kv-server kv-client") ||
        rrpcd_test_conf(dir,
                        "ticket_key = %s/ticket.pem\n" /* the brokers' one signing key */
                        "listen = 127.0.0.1:0\nlease_ms = %d\nlog_level = info\n"
                        "allow = register * kv-server\nallow = lookup * kv-client\n",
                        dir, LEASE_MS))
        return -1;
    snprintf(member.dir, sizeof(member.dir), "%s", dir);
    if (etcd_member_start(&member))
        return -1;
    start_rrpcd(&A);
    start_rrpcd(&B);
    start_rrpcd(&M1);
    start_rrpcd(&M2);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    stop_rrpcd(&A, SIGTERM);
    stop_rrpcd(&B, SIGTERM);
    stop_rrpcd(&M1, SIGTERM);
    stop_rrpcd(&M2, SIGTERM);
    etcd_member_stop(&member, SIGTERM);
    rrpcd_test_dir_remove(dir);
    return 0;
}

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static int echo(rrpc_conn *c)
{
    void *resp = NULL;
    size_t len = 0;
    rrpc_call_opts o = { .qos_class = RRPC_CLASS_CONTROL, .deadline_ms = 3000 };
    int r = rrpc_call_sync(c, "echo", "ping", 4, &o, &resp, &len);
    free(resp);
    return r ? r : len == 4 ? 0 : -EPROTO;
}

/* ---- the client's loop ------------------------------------------------------- */

struct failure {
    long begin, end; /* sequence numbers of the round */
    const char *step;
    int code;
    char why[200];
};

struct loop {
    rrpc_ctx *ctx;
    rrpc_broker *b;
    rrpc_conn *pre; /* opened before the kill */
    atomic_bool stop;
    atomic_long rounds, pre_ok, pre_failed;
    atomic_long rounds_after_failover; /* rounds begun after the client's first failover */
    struct watchlog *w;
    int n_fails;
    struct failure fails[MAX_FAILS];
};

static void record(struct loop *l, long begin, const char *step, int code)
{
    if (l->n_fails < MAX_FAILS) {
        struct failure *f = &l->fails[l->n_fails];
        f->begin = begin;
        f->end = ++seq;
        f->step = step;
        f->code = code;
        snprintf(f->why, sizeof(f->why), "%s", rrpc_broker_last_error(l->b));
    }
    l->n_fails++;
}

static void *client_loop(void *arg)
{
    struct loop *l = arg;
    while (!atomic_load(&l->stop)) {
        long begin = ++seq;
        long fo = atomic_load(&l->w->first_failover_seq);
        rrpc_service_info *info = NULL;
        int r = rrpc_broker_lookup(l->b, "kv-fo", &info);
        rrpc_service_info_free(info);
        if (r) {
            record(l, begin, "lookup", r);
        } else {
            rrpc_conn *c = NULL;
            r = rrpc_connect_service(l->ctx, l->b, "kv-fo", 3000, NULL, NULL, &c);
            if (r)
                record(l, begin, "connect", r);
            else if ((r = echo(c)))
                record(l, begin, "call", r);
            rrpc_conn_close(c);
        }
        if (!r)
            ++seq;
        if (echo(l->pre))
            atomic_fetch_add(&l->pre_failed, 1);
        else
            atomic_fetch_add(&l->pre_ok, 1);
        atomic_fetch_add(&l->rounds, 1);
        if (fo && fo < begin)
            atomic_fetch_add(&l->rounds_after_failover, 1);
        /* Paced: every round presents a fresh ticket to the server's gate, whose replay
         * cache holds RRPC_TICKET_RATE (256) a second per client over a ticket's lifetime;
         * an unpaced loop (1,500 rounds a second on a fast host) filled this client's share
         * before the run ended, and the refusals looked like failover failures. */
        sleep_ms(2);
    }
    return NULL;
}

static bool wait_until(atomic_long *v, long want)
{
    int64_t t0 = now_ms();
    while (atomic_load(v) < want && now_ms() - t0 < WAIT_MS)
        sleep_ms(10);
    return atomic_load(v) >= want;
}

static bool wait_int(atomic_int *v, int want)
{
    int64_t t0 = now_ms();
    while (atomic_load(v) < want && now_ms() - t0 < WAIT_MS)
        sleep_ms(10);
    return atomic_load(v) >= want;
}

static void a_killed_broker_is_failed_over_within_the_window_and_open_connections_serve_on(
    void **state)
{
    (void)state;
    char list[160];
    snprintf(list, sizeof(list), "%s,%s", A.addr, B.addr);

    /* The server, registered through A (the first of its list). */
    static struct watchlog sw = { .who = "server" }, cw = { .who = "client" };
    rrpc_broker *sb;
    assert_int_equal(open_list(list, "kv-server", &sw, &sb), 0);
    char cur[80];
    assert_int_equal(rrpc_broker_current(sb, cur, sizeof(cur)), 0);
    assert_string_equal(cur, A.addr);
    rrpc_ctx *sctx;
    rrpc_listener *lis;
    /* waits while rrpcd is not synchronized with etcd yet */
    int r = test_server_register(sb, "kv-fo", h_echo, NULL, true, &sctx, &lis);
    if (r)
        fail_msg("register: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(sb));

    /* The client, on A too; its connection made before the kill. */
    struct loop *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->w = &cw;
    assert_int_equal(open_list(list, "kv-client", &cw, &l->b), 0);
    assert_int_equal(rrpc_broker_current(l->b, cur, sizeof(cur)), 0);
    assert_string_equal(cur, A.addr);
    assert_int_equal(rrpc_ctx_create(&l->ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(l->ctx), 0);
    rrpc_service_info *info = NULL;
    int64_t t0 = now_ms();
    while ((r = rrpc_broker_lookup(l->b, "kv-fo", &info)) == -ENOENT && now_ms() - t0 < WAIT_MS)
        sleep_ms(20);
    assert_int_equal(r, 0);
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN];
    memcpy(instance, info->instances[0].id, sizeof(instance));
    rrpc_service_info_free(info);
    assert_int_equal(rrpc_connect_service(l->ctx, l->b, "kv-fo", 3000, NULL, NULL, &l->pre), 0);
    /* Steady state first: B has synchronized with etcd and knows the registration (an
     * rrpcd that has not synchronized yet answers lookups from an empty cache). */
    rrpc_broker *onlyb;
    assert_int_equal(open_list(B.addr, "kv-client", NULL, &onlyb), 0);
    t0 = now_ms();
    while ((r = rrpc_broker_lookup(onlyb, "kv-fo", &info)) == -ENOENT && now_ms() - t0 < WAIT_MS)
        sleep_ms(20);
    assert_int_equal(r, 0);
    rrpc_service_info_free(info);

    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, client_loop, l), 0);
    assert_true(wait_until(&l->rounds, 20));
    long pre_ok_before = atomic_load(&l->pre_ok);

    long seq_kill = ++seq;
    int64_t kill_ms = now_ms();
    stop_rrpcd(&A, SIGKILL);

    /* The client moves to B and goes on; the server moves too. */
    bool client_moved = wait_int(&cw.failovers, 1) && wait_until(&l->rounds_after_failover, 20);
    bool server_moved = wait_int(&sw.failovers, 1);
    /* Past A's lease (etcd's TTL: the lease rounded up to whole seconds), with the loop on. */
    while (now_ms() - kill_ms < 3 * LEASE_MS)
        sleep_ms(50);
    atomic_store(&l->stop, true);
    pthread_join(th, NULL);

    long seq_fo = atomic_load(&cw.first_failover_seq);
    printf("rounds %ld (%ld after the failover), failures %d; calls on the connection made "
           "before the kill: %ld ok after it, %ld failed; server: %d failover(s), registered "
           "again %d time(s)\n",
           atomic_load(&l->rounds), atomic_load(&l->rounds_after_failover), l->n_fails,
           atomic_load(&l->pre_ok) - pre_ok_before, atomic_load(&l->pre_failed),
           atomic_load(&sw.failovers), atomic_load(&sw.reregistered));
    printf("failed over %lld ms (client) and %lld ms (server, at its next renewal) after the "
           "kill\n", (long long)(atomic_load(&cw.first_failover_ms) - kill_ms),
           (long long)(atomic_load(&sw.first_failover_ms) - kill_ms));
    for (int i = 0; i < l->n_fails && i < MAX_FAILS; i++)
        printf("failure %d: %s %s (round seq %ld..%ld; kill %ld, failover %ld): %s\n", i,
               l->fails[i].step, rrpc_strerror(l->fails[i].code), l->fails[i].begin,
               l->fails[i].end, seq_kill, seq_fo, l->fails[i].why);
    assert_true(client_moved);
    assert_true(server_moved);
    assert_int_equal(rrpc_broker_current(l->b, cur, sizeof(cur)), 1);
    assert_string_equal(cur, B.addr);
    assert_int_equal(rrpc_broker_current(sb, cur, sizeof(cur)), 1);
    /* Failures only in the window: rounds that ended after the kill and began before the
     * failover (the library sends a round trip that failed on the dead session once more). */
    assert_true(l->n_fails <= MAX_FAILS);
    for (int i = 0; i < l->n_fails; i++) {
        if (l->fails[i].end < seq_kill || l->fails[i].begin > seq_fo)
            fail_msg("failure %d is outside the failover window", i);
    }
    /* The connection made before the kill never noticed. */
    assert_int_equal(atomic_load(&l->pre_failed), 0);
    assert_true(atomic_load(&l->pre_ok) - pre_ok_before >= 20);

    /* Through B alone, past A's lease: the same instance, reachable. */
    assert_int_equal(rrpc_broker_lookup(onlyb, "kv-fo", &info), 0);
    assert_int_equal(info->n_instances, 1);
    assert_memory_equal(info->instances[0].id, instance, sizeof(instance));
    rrpc_service_info_free(info);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_service(l->ctx, onlyb, "kv-fo", 3000, NULL, NULL, &c), 0);
    assert_int_equal(echo(c), 0);
    rrpc_conn_close(c);
    rrpc_broker_close(onlyb);

    /* Every broker gone: the error names each one and why. */
    char dead[160];
    snprintf(dead, sizeof(dead), "%s,127.0.0.1:%d", A.addr, etcd_free_port());
    rrpc_broker *none = NULL;
    r = open_list(dead, "kv-client", NULL, &none);
    const char *why = rrpc_broker_last_error(NULL);
    printf("every broker down: %s: %s\n", rrpc_strerror(r), why);
    assert_int_equal(r, -ECONNREFUSED);
    assert_null(none);
    assert_non_null(strstr(why, A.addr));
    assert_non_null(strstr(why, dead + strlen(A.addr) + 1));
    assert_non_null(strstr(why, "none of the 2 brokers"));

    rrpc_conn_close(l->pre);
    rrpc_ctx_destroy(l->ctx);
    rrpc_broker_close(l->b);
    free(l);
    rrpc_listener_close(lis);
    rrpc_ctx_destroy(sctx);
    rrpc_broker_close(sb);
}

/* A broker that does not know the registration (its own registry in memory): the
 * server registers again through it, with the same instance id. */
static void a_server_registers_again_with_the_same_instance_through_the_next_broker(
    void **state)
{
    (void)state;
    char list[160];
    snprintf(list, sizeof(list), "%s, %s", M1.addr, M2.addr);
    static struct watchlog sw = { .who = "server" };
    rrpc_broker *sb;
    assert_int_equal(open_list(list, "kv-server", &sw, &sb), 0);
    rrpc_ctx *sctx;
    rrpc_listener *lis;
    assert_int_equal(rrpc_ctx_create(&sctx), 0);
    assert_int_equal(rrpc_register(sctx, "echo", h_echo, NULL), 0);
    assert_int_equal(rrpc_broker_gate(sb, sctx, "kv-mem"), 0);
    assert_int_equal(rrpc_ctx_start_thread(sctx), 0);
    assert_int_equal(rrpc_listen(sctx, "tcp://127.0.0.1:0", NULL, NULL, &lis), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(lis));
    const char *uris[] = { uri };
    assert_int_equal(rrpc_broker_register(sb, sctx, "kv-mem", uris, 1, 0), 0);
    rrpc_broker *c1, *c2;
    assert_int_equal(open_list(M1.addr, "kv-client", NULL, &c1), 0);
    assert_int_equal(open_list(M2.addr, "kv-client", NULL, &c2), 0);
    rrpc_service_info *info = NULL;
    assert_int_equal(rrpc_broker_lookup(c1, "kv-mem", &info), 0);
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN];
    memcpy(instance, info->instances[0].id, sizeof(instance));
    rrpc_service_info_free(info);
    assert_int_equal(rrpc_broker_lookup(c2, "kv-mem", &info), -ENOENT); /* M2 knows nothing */
    rrpc_broker_close(c1);

    stop_rrpcd(&M1, SIGKILL);
    assert_true(wait_int(&sw.failovers, 1));
    assert_true(wait_int(&sw.reregistered, 1));
    int r = rrpc_broker_lookup(c2, "kv-mem", &info);
    if (r)
        fail_msg("lookup through M2: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(c2));
    assert_int_equal(info->n_instances, 1);
    assert_memory_equal(info->instances[0].id, instance, sizeof(instance));
    rrpc_service_info_free(info);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(ctx), 0);
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_service(ctx, c2, "kv-mem", 3000, NULL, NULL, &c), 0);
    assert_int_equal(echo(c), 0); /* M2's ticket, accepted by the gate of the same instance */
    rrpc_conn_close(c);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(c2);
    rrpc_listener_close(lis);
    rrpc_ctx_destroy(sctx);
    rrpc_broker_close(sb);
}

/* A broker that hangs (SIGSTOP) rather than dies: it accepts TCP but never answers, so
 * the handle leaves it only when timeout_ms runs out, on the session and on the
 * reconnect; the lookup in flight is answered by B all the same. */
static void a_hung_broker_is_left_after_its_timeout_and_the_lookup_is_answered_by_the_next(
    void **state)
{
    (void)state;
    start_rrpcd(&A);
    char list[160];
    snprintf(list, sizeof(list), "%s,%s", A.addr, B.addr);
    rrpc_broker *sb, *cb;
    static struct watchlog cw = { .who = "client" };
    assert_int_equal(open_list(B.addr, "kv-server", NULL, &sb), 0);
    rrpc_ctx *sctx;
    rrpc_listener *lis;
    assert_int_equal(rrpc_ctx_create(&sctx), 0);
    assert_int_equal(rrpc_register(sctx, "echo", h_echo, NULL), 0);
    assert_int_equal(rrpc_broker_gate(sb, sctx, "kv-hang"), 0);
    assert_int_equal(rrpc_ctx_start_thread(sctx), 0);
    assert_int_equal(rrpc_listen(sctx, "tcp://127.0.0.1:0", NULL, NULL, &lis), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(lis));
    const char *uris[] = { uri };
    assert_int_equal(rrpc_broker_register(sb, sctx, "kv-hang", uris, 1, 0), 0);
    assert_int_equal(open_list(list, "kv-client", &cw, &cb), 0);
    rrpc_service_info *info = NULL;
    int r;
    int64_t t0 = now_ms();
    while ((r = rrpc_broker_lookup(cb, "kv-hang", &info)) == -ENOENT && now_ms() - t0 < WAIT_MS)
        sleep_ms(20); /* A synchronizes with etcd */
    assert_int_equal(r, 0);
    rrpc_service_info_free(info);
    char cur[80];
    assert_int_equal(rrpc_broker_current(cb, cur, sizeof(cur)), 0);

    kill(A.pid, SIGSTOP);
    t0 = now_ms();
    r = rrpc_broker_lookup(cb, "kv-hang", &info);
    printf("the lookup in flight when A hung was answered after %lld ms (timeout_ms 3000, "
           "2 brokers: at most %d ms)\n", (long long)(now_ms() - t0), (2 + 2) * 3000);
    if (r)
        fail_msg("lookup with A hung: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(cb));
    rrpc_service_info_free(info);
    assert_int_equal(atomic_load(&cw.failovers), 1);
    assert_int_equal(rrpc_broker_current(cb, cur, sizeof(cur)), 1);
    kill(A.pid, SIGCONT);

    rrpc_broker_close(cb);
    rrpc_listener_close(lis);
    rrpc_ctx_destroy(sctx);
    rrpc_broker_close(sb);
}

/* ---- watching a service ------------------------------------------------------ */

struct wserver {
    rrpc_broker *b;
    rrpc_ctx *ctx;
    rrpc_listener *l;
    char uri[64];
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN];
    int64_t registered_ms; /* when its register returned */
};

/* A server of @service registered through @k; its instance id from a lookup through @look. */
static void wserver_start(struct wserver *s, const struct broker *k, const char *service,
                          rrpc_broker *look)
{
    assert_int_equal(open_list(k->addr, "kv-server", NULL, &s->b), 0);
    assert_int_equal(rrpc_ctx_create(&s->ctx), 0);
    assert_int_equal(rrpc_broker_gate(s->b, s->ctx, service), 0);
    assert_int_equal(rrpc_ctx_start_thread(s->ctx), 0);
    assert_int_equal(rrpc_listen(s->ctx, "tcp://127.0.0.1:0", NULL, NULL, &s->l), 0);
    snprintf(s->uri, sizeof(s->uri), "tcp://127.0.0.1:%d", rrpc_listener_port(s->l));
    const char *uris[] = { s->uri };
    int r;
    int64_t t0 = now_ms();
    while ((r = rrpc_broker_register(s->b, s->ctx, service, uris, 1, 0)) == -EAGAIN &&
           now_ms() - t0 < WAIT_MS)
        sleep_ms(50);
    assert_int_equal(r, 0);
    s->registered_ms = now_ms();
    /* Its instance: the lookup's instance whose endpoint is ours. */
    t0 = now_ms();
    for (bool found = false; !found && now_ms() - t0 < WAIT_MS; sleep_ms(found ? 0 : 20)) {
        rrpc_service_info *info = NULL;
        if (rrpc_broker_lookup(look, service, &info) == 0)
            for (size_t i = 0; i < info->n_endpoints; i++)
                if (!strcmp(info->endpoints[i].uri, s->uri)) {
                    memcpy(s->instance, info->instances[info->endpoints[i].instance].id,
                           sizeof(s->instance));
                    found = true;
                }
        rrpc_service_info_free(info);
    }
}

static void wserver_stop(struct wserver *s)
{
    rrpc_listener_close(s->l);
    rrpc_ctx_destroy(s->ctx);
    rrpc_broker_close(s->b); /* unregisters */
}

/* The next event of @w must be @type for @s; prints how long it took after @t0. */
static void expect_event(rrpc_broker_watch *w, const char *who, int type, const struct wserver *s,
                         int64_t t0)
{
    rrpc_watch_event ev;
    int r = rrpc_broker_watch_next(w, WAIT_MS, &ev);
    if (r)
        fail_msg("%s: no event: %s: %s", who, rrpc_strerror(r), rrpc_broker_watch_last_error(w));
    printf("%s: %s %s %lld ms after the change returned\n", who,
           ev.type == RRPC_WATCH_ADDED ? "added" : "removed", ev.endpoints[0].uri,
           (long long)(now_ms() - t0));
    assert_int_equal(ev.type, type);
    assert_memory_equal(ev.instance, s->instance, sizeof(s->instance));
    assert_int_equal(ev.n_endpoints, 1);
    assert_string_equal(ev.endpoints[0].uri, s->uri);
}

static void no_more_events(rrpc_broker_watch *w, const char *who)
{
    rrpc_watch_event ev;
    int r = rrpc_broker_watch_next(w, 300, &ev);
    if (r != -ETIMEDOUT)
        fail_msg("%s: an event too many (%d, type %d, %s)", who, r, ev.type, ev.endpoints[0].uri);
}

static void a_watch_sees_instances_added_and_removed_through_either_broker_and_fails_over(
    void **state)
{
    (void)state;
    if (A.pid <= 0)
        start_rrpcd(&A);
    char list[160];
    snprintf(list, sizeof(list), "%s,%s", A.addr, B.addr);
    rrpc_broker *onb, *ona;
    static struct watchlog ww = { .who = "watch" };
    assert_int_equal(open_list(B.addr, "kv-client", NULL, &onb), 0);
    assert_int_equal(open_list(list, "kv-client", &ww, &ona), 0);
    rrpc_broker_watch *wb, *wa;
    assert_int_equal(rrpc_broker_watch_open(onb, "kv-watch", &wb), 0); /* through B */
    assert_int_equal(rrpc_broker_watch_open(ona, "kv-watch", &wa), 0); /* through A, then B */
    no_more_events(wb, "B");

    struct wserver s1, s2, s3;
    wserver_start(&s1, &A, "kv-watch", onb);
    int64_t t0 = s1.registered_ms;
    expect_event(wb, "B", RRPC_WATCH_ADDED, &s1, t0);
    expect_event(wa, "A", RRPC_WATCH_ADDED, &s1, t0);
    wserver_start(&s2, &A, "kv-watch", onb);
    t0 = s2.registered_ms;
    expect_event(wb, "B", RRPC_WATCH_ADDED, &s2, t0);
    expect_event(wa, "A", RRPC_WATCH_ADDED, &s2, t0);
    assert_int_equal(rrpc_broker_unregister(s1.b, "kv-watch"), 0);
    t0 = now_ms();
    expect_event(wb, "B", RRPC_WATCH_REMOVED, &s1, t0);
    expect_event(wa, "A", RRPC_WATCH_REMOVED, &s1, t0);
    no_more_events(wb, "B");
    no_more_events(wa, "A");

    /* A dies: the watch through A subscribes again through B and reports only changes. */
    stop_rrpcd(&A, SIGKILL);
    wserver_start(&s3, &B, "kv-watch", onb);
    t0 = s3.registered_ms;
    expect_event(wb, "B", RRPC_WATCH_ADDED, &s3, t0);
    expect_event(wa, "A then B", RRPC_WATCH_ADDED, &s3, t0);
    assert_true(atomic_load(&ww.failovers) >= 1);
    wserver_stop(&s3);
    t0 = now_ms();
    expect_event(wb, "B", RRPC_WATCH_REMOVED, &s3, t0);
    expect_event(wa, "A then B", RRPC_WATCH_REMOVED, &s3, t0);
    no_more_events(wb, "B");
    no_more_events(wa, "A then B");

    rrpc_broker_watch_close(wb);
    rrpc_broker_watch_close(wa);
    wserver_stop(&s1);
    wserver_stop(&s2);
    rrpc_broker_close(onb);
    rrpc_broker_close(ona);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            a_killed_broker_is_failed_over_within_the_window_and_open_connections_serve_on),
        cmocka_unit_test(
            a_server_registers_again_with_the_same_instance_through_the_next_broker),
        cmocka_unit_test(
            a_hung_broker_is_left_after_its_timeout_and_the_lookup_is_answered_by_the_next),
        cmocka_unit_test(
            a_watch_sees_instances_added_and_removed_through_either_broker_and_fails_over),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

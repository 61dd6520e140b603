/* SPDX-License-Identifier: MIT */
/*
 * rrpcd refusing tickets to hosts without an ESP pair (issue #30,
 * docs/deployment.md): rrpc-agents report their pairs (op "pairs") over
 * their own TLS sessions, a service registered by a context with
 * RRPC_REQUIRE_ESP is looked up only from hosts whose pair with the
 * server's host both agents report.  The real rrpcd, one per test, on
 * 127.0.0.1 over real TLS; "hosts" are source addresses on 127/8 (client
 * and agent A 127.0.0.2, server and agent B 127.0.0.3, an unpaired server
 * 127.0.0.4), so no kernel ESP is needed: what is tested is rrpcd's logic.
 *
 * Environment (set by meson): RRPCD = the daemon, MAKE_CERTS = the script.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "etcd_test.h"
#include "raw_client.h"
#include "rrpcd_test.h"

#define HOST_A "127.0.0.2" /* the client's host */
#define HOST_B "127.0.0.3" /* the server's host */
#define HOST_C "127.0.0.4" /* a server's host nobody pairs with */

static char dir[256];
static pid_t daemon_pid = -1;
static int daemon_port; /* the rrpcd the raw sessions and the server broker talk to */

static void start_daemon(const char *extra)
{
    const char *set[] = { extra, NULL };
    char conf[300];
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    daemon_port = rrpcd_spawn(dir, "esp", conf, set, &daemon_pid);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_DFL);
    /* agent-a/b/c: agents of hosts A, B and C; agent-x names A in its certificate
     * but is not in agents; kv-client has no IP SAN at all. */
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-esp-pairs-XXXXXX",
                       "kv-server kv-client agent-a:" HOST_A " agent-b:" HOST_B
                       " agent-c:" HOST_C " agent-x:" HOST_A))
        return -1;
    return rrpcd_test_conf(dir, "listen = 127.0.0.1:0\nlog_level = debug\n"
                                "allow = register * kv-server\nallow = lookup * kv-client\n"
                                "agents = agent-a, agent-b,agent-c kv-client\n");
}

static int group_teardown(void **state)
{
    (void)state;
    rrpcd_test_dir_remove(dir);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    start_daemon(NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (daemon_pid > 0)
        rrpcd_stop(&daemon_pid, dir);
    return 0;
}

/* ---- the parts: agents, servers, clients --------------------------------------- */

/* An authenticated session as @who from @src. */
static void open_as(struct raw *t, const char *who, const char *src)
{
    assert_int_equal(raw_open(t, dir, daemon_port, who, src), 0);
    assert_int_equal(raw_hello(t), 0);
}

/* Whether the answer @u is ok; if not, its err and msg into @err and @msg. */
static bool ok_or_refusal(const msgpack_unpacked *u, char *err, size_t errlen, char *msg,
                          size_t msglen)
{
    if (raw_answer_ok(u))
        return true;
    raw_text(u, "err", err, errlen);
    raw_text(u, "msg", msg, msglen);
    return false;
}

/* pairs {local, pairs: @n of @peers with @expires_s}; the answer in @err ("" when ok) and
 * @msg.  -1 when the session ended without an answer. */
static int report(struct raw *t, const char *local, const char *const *peers,
                  const uint64_t *expires_s, size_t n, char *err, char *msg)
{
    struct raw_req q;
    raw_req_begin(&q, "pairs", 7, 2);
    raw_pk_str(&q.pk, "local");
    raw_pk_str(&q.pk, local);
    raw_pk_str(&q.pk, "pairs");
    msgpack_pack_array(&q.pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_map(&q.pk, 2);
        raw_pk_str(&q.pk, "peer");
        raw_pk_str(&q.pk, peers[i]);
        raw_pk_str(&q.pk, "expires_s");
        msgpack_pack_uint64(&q.pk, expires_s[i]);
    }
    int r = raw_rpc(t, &q.sb, &q.u, NULL);
    err[0] = msg[0] = 0;
    if (!r)
        ok_or_refusal(&q.u, err, 64, msg, 512);
    raw_req_end(&q);
    return r;
}

static const uint64_t hour[] = { 3600 };

/* A report on @t that rrpcd takes. */
static void assert_taken(struct raw *t, const char *local, const char *const *peers,
                         const uint64_t *expires_s, size_t n)
{
    char err[64], msg[512];
    assert_int_equal(report(t, local, peers, expires_s, n, err, msg), 0);
    if (err[0])
        fail_msg("the report of %s was refused: %s: %s", local, err, msg);
}

/* A report on @t that rrpcd refuses with @want_err, its message saying @want_msg
 * (NULL: not checked). */
static void assert_refused(struct raw *t, const char *local, const char *const *peers,
                           const uint64_t *expires_s, size_t n, const char *want_err,
                           const char *want_msg)
{
    char err[64], msg[512];
    assert_int_equal(report(t, local, peers, expires_s, n, err, msg), 0);
    assert_string_equal(err, want_err);
    if (want_msg && !strstr(msg, want_msg))
        fail_msg("the refusal does not say '%s': %s", want_msg, msg);
}

/* An agent of @local (certificate @who) that reports the one pair @peer (NULL:
 * none), 3600 s. */
static void agent_pairs(struct raw *t, const char *who, const char *local, const char *peer)
{
    const char *peers[] = { peer };
    open_as(t, who, local);
    assert_taken(t, local, peers, hour, peer ? 1 : 0);
}

/* The agents of hosts A and B, each reporting its pair with the other. */
static void agents_pair_a_and_b(struct raw *a, struct raw *b)
{
    agent_pairs(a, "agent-a", HOST_A, HOST_B);
    agent_pairs(b, "agent-b", HOST_B, HOST_A);
}

/* The registration of @service at tcp://@host:7001 through @b by a context with
 * RRPC_REQUIRE_ESP (@esp) or without. */
static rrpc_ctx *register_at(rrpc_broker *b, const char *service, const char *host, bool esp)
{
    rrpc_config *cfg;
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    if (esp) /* the path of an agent's query socket; nothing connects here */
        assert_int_equal(rrpc_config_set(cfg, "RRPC_REQUIRE_ESP", "/run/rrpc-agent.sock"), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    rrpc_config_destroy(cfg);
    assert_int_equal(rrpc_ctx_require_esp(ctx), esp ? 1 : 0);
    char uri[80];
    snprintf(uri, sizeof(uri), "tcp://%s:7001", host);
    const char *uris[] = { uri };
    int r = rrpc_broker_register(b, ctx, service, uris, 1, 0);
    if (r)
        fail_msg("register %s: %s", service, rrpc_broker_last_error(b));
    return ctx;
}

struct found {
    char err[64], msg[512];
    size_t n;          /* instances answered */
    char hosts[4][64]; /* the first endpoint's host of each */
    bool ticket;       /* the answer has a ticket */
};

/* lookup @service as kv-client from @src. */
static void lookup_from(const char *src, const char *service, struct found *f)
{
    struct raw t;
    memset(f, 0, sizeof(*f));
    open_as(&t, "kv-client", src);
    struct raw_req q;
    raw_req_begin(&q, "lookup", 2, 1);
    raw_pk_str(&q.pk, "service");
    raw_pk_str(&q.pk, service);
    assert_int_equal(raw_rpc(&t, &q.sb, &q.u, NULL), 0);
    if (ok_or_refusal(&q.u, f->err, sizeof(f->err), f->msg, sizeof(f->msg))) {
        const msgpack_object *tk = raw_get(&q.u.data, "ticket");
        f->ticket = tk && tk->type == MSGPACK_OBJECT_BIN && tk->via.bin.size > 0;
        const msgpack_object *in = raw_get(&q.u.data, "instances");
        assert_non_null(in);
        assert_int_equal(in->type, MSGPACK_OBJECT_ARRAY);
        f->n = in->via.array.size;
        for (size_t i = 0; i < f->n && i < 4; i++) {
            const msgpack_object *eps = raw_get(&in->via.array.ptr[i], "endpoints");
            assert_non_null(eps);
            const msgpack_object *h = raw_get(&eps->via.array.ptr[0], "host");
            assert_non_null(h);
            snprintf(f->hosts[i], sizeof(f->hosts[i]), "%.*s", (int)h->via.str.size,
                     h->via.str.ptr);
        }
    }
    raw_req_end(&q);
    raw_close(&t);
}

static rrpc_broker *server_broker(void)
{
    char a[64];
    rrpc_broker *b;
    snprintf(a, sizeof(a), "127.0.0.1:%d", daemon_port);
    assert_int_equal(broker_open_as(dir, a, "kv-server", 5000, &b), 0);
    return b;
}

static void assert_denied_for_no_pair(const struct found *f, const char *server_host)
{
    char want[200];
    assert_string_equal(f->err, "denied");
    snprintf(want, sizeof(want), "the client's host (" HOST_A " as rrpcd sees it) and the "
             "server's host (%s): no rrpc-agent reported an agreed pair", server_host);
    if (!strstr(f->msg, want))
        fail_msg("the refusal does not say '%s': %s", want, f->msg);
    assert_non_null(strstr(f->msg, "start rrpc-agent on both hosts with --broker"));
}

/* lookup kv-esp from host A: denied, no pair with host B. */
static void assert_lookup_denied(void)
{
    struct found f;
    lookup_from(HOST_A, "kv-esp", &f);
    assert_denied_for_no_pair(&f, HOST_B);
}

/* lookup @service from @src: answered, with one instance. */
static void lookup_one(const char *src, const char *service, struct found *f)
{
    lookup_from(src, service, f);
    assert_string_equal(f->err, "");
    assert_int_equal(f->n, 1);
}

/* lookup kv-esp from host A: one instance, on host B, and a ticket. */
static void assert_ticket_for_b(void)
{
    struct found f;
    lookup_one(HOST_A, "kv-esp", &f);
    assert_string_equal(f.hosts[0], HOST_B);
    assert_true(f.ticket);
}

/* kv-esp registered at host B with require_esp, through a handle of its own. */
struct esp_service {
    rrpc_broker *b;
    rrpc_ctx *ctx;
};

static void esp_service_start(struct esp_service *svc)
{
    svc->b = server_broker();
    svc->ctx = register_at(svc->b, "kv-esp", HOST_B, true);
}

static void esp_service_stop(struct esp_service *svc)
{
    rrpc_broker_close(svc->b);
    rrpc_ctx_destroy(svc->ctx);
}

/* ---- the tests ------------------------------------------------------------------- */

static void test_pair_reported_by_both_hosts_gets_the_client_a_ticket(void **state)
{
    (void)state;
    struct esp_service svc;
    esp_service_start(&svc);
    struct raw a, bb;
    agents_pair_a_and_b(&a, &bb);
    assert_ticket_for_b();
    raw_close(&a);
    raw_close(&bb);
    esp_service_stop(&svc);
}

static void test_pair_reported_by_one_host_only_is_denied_naming_both(void **state)
{
    (void)state;
    struct esp_service svc;
    esp_service_start(&svc);
    struct raw a, bb;
    /* The client's host claims the pair; the server's host reports none. */
    agent_pairs(&a, "agent-a", HOST_A, HOST_B);
    agent_pairs(&bb, "agent-b", HOST_B, NULL);
    assert_lookup_denied();
    /* Nor the other way round. */
    raw_close(&a);
    raw_close(&bb);
    agent_pairs(&a, "agent-a", HOST_A, NULL);
    agent_pairs(&bb, "agent-b", HOST_B, HOST_A);
    assert_lookup_denied();
    /* With no agent at all. */
    raw_close(&a);
    raw_close(&bb);
    assert_lookup_denied();
    esp_service_stop(&svc);
}

static void test_expired_pair_and_ended_report_are_denied(void **state)
{
    (void)state;
    struct esp_service svc;
    esp_service_start(&svc);
    struct raw a, bb;
    agent_pairs(&a, "agent-a", HOST_A, HOST_B);
    open_as(&bb, "agent-b", HOST_B);
    const char *peers[] = { HOST_A };
    const uint64_t gone[] = { 0 };
    assert_taken(&bb, HOST_B, peers, gone, 1);
    assert_lookup_denied();
    /* The next report replaces it: the pair holds again. */
    assert_taken(&bb, HOST_B, peers, hour, 1);
    struct found f;
    lookup_one(HOST_A, "kv-esp", &f);
    /* The end of B's session takes its report with it. */
    raw_close(&bb);
    assert_lookup_denied();
    raw_close(&a);
    esp_service_stop(&svc);
}

static void test_report_for_an_address_the_certificate_does_not_name_is_refused(void **state)
{
    (void)state;
    struct esp_service svc;
    esp_service_start(&svc);
    struct raw a, bb, lie;
    agent_pairs(&a, "agent-a", HOST_A, HOST_B);
    /* Agent A speaks for B: refused, and the session closed. */
    open_as(&lie, "agent-a", HOST_A);
    const char *peers[] = { HOST_A };
    assert_refused(&lie, HOST_B, peers, hour, 1, "denied",
                   "local " HOST_B " is not an IP SAN of this session's certificate");
    assert_true(raw_ended(&lie));
    raw_close(&lie);
    /* A principal of agents whose certificate has no IP SAN at all. */
    open_as(&lie, "kv-client", HOST_B);
    assert_refused(&lie, HOST_B, peers, hour, 1, "denied", NULL);
    assert_true(raw_ended(&lie));
    raw_close(&lie);
    assert_lookup_denied();
    /* Not that B's own report would not count. */
    agent_pairs(&bb, "agent-b", HOST_B, HOST_A);
    struct found f;
    lookup_one(HOST_A, "kv-esp", &f);
    raw_close(&bb);
    raw_close(&a);
    esp_service_stop(&svc);
}

static void test_report_of_a_principal_not_in_agents_is_refused(void **state)
{
    (void)state;
    struct raw x;
    open_as(&x, "agent-x", HOST_A); /* its certificate does name A */
    const char *peers[] = { HOST_B };
    assert_refused(&x, HOST_A, peers, hour, 1, "denied",
                   "principal 'agent-x' is not in this rrpcd's agents list");
    assert_true(raw_ended(&x));
    raw_close(&x);
}

/* One malformed report on a fresh agent-a session: bad_request, and the session closed. */
static void bad_report(const char *local, const char *const *peers, const uint64_t *ex,
                       size_t n, const char *want)
{
    struct raw t;
    open_as(&t, "agent-a", HOST_A);
    assert_refused(&t, local, peers, ex, n, "bad_request", want);
    assert_true(raw_ended(&t));
    raw_close(&t);
}

/* One report on a fresh agent-a session, taken. */
static void good_report(const char *const *peers, const uint64_t *ex, size_t n)
{
    struct raw t;
    open_as(&t, "agent-a", HOST_A);
    assert_taken(&t, HOST_A, peers, ex, n);
    raw_close(&t);
}

static void test_reports_beyond_the_bounds_are_bad_requests_that_close_the_session(void **state)
{
    (void)state;
    static const char *peers[257];
    static uint64_t ex[257];
    static char names[257][20];
    for (int i = 0; i < 257; i++) {
        snprintf(names[i], sizeof(names[i]), "10.9.%d.%d", i / 256, i % 256);
        peers[i] = names[i];
        ex[i] = 60;
    }
    bad_report(HOST_A, peers, ex, 257, "an array of at most 256");
    const char *one[] = { HOST_B };
    const uint64_t week1[] = { 604801 };
    bad_report(HOST_A, one, week1, 1, "expires_s (0..604800)");
    bad_report("::1", one, ex, 1, "an IPv4 literal (the session's family)");
    bad_report("agent-a.example", one, ex, 1, "pairs needs local");
    const char *v6[] = { "fe80::1" }, *name[] = { "host-b.example" },
               *mapped[] = { "::ffff:127.0.0.3" };
    bad_report(HOST_A, v6, ex, 1, "pair 0: needs peer (an IP literal of the session's family)");
    bad_report(HOST_A, name, ex, 1, "pair 0: needs peer");
    bad_report(HOST_A, mapped, ex, 1, "pair 0: needs peer");
    /* 256 pairs are taken; the same with long peer strings above 64 KiB is not. */
    good_report(peers, ex, 256);
    static char pad[257][300];
    for (int i = 0; i < 256; i++) {
        snprintf(pad[i], sizeof(pad[i]), "%0290d", i); /* no address: the size is checked first */
        peers[i] = pad[i];
    }
    bad_report(HOST_A, peers, ex, 256, "a pairs report has at most 65536 bytes");
    /* A week is the longest lifetime taken. */
    const uint64_t week[] = { 604800 };
    good_report(one, week, 1);
}

static void test_max_agents_refuses_one_more_host_but_not_a_new_report_of_one_held(void **state)
{
    (void)state;
    rrpcd_stop(&daemon_pid, dir);
    start_daemon("max_agents=2");
    struct raw a, bb, c;
    agents_pair_a_and_b(&a, &bb);
    open_as(&c, "agent-c", HOST_C);
    const char *peers[] = { HOST_A };
    assert_refused(&c, HOST_C, peers, hour, 1, "limit", "max_agents");
    assert_taken(&a, HOST_A, peers, hour, 0); /* a held one: taken */
    raw_close(&c);
    raw_close(&bb);
    raw_close(&a);
}

static void test_lookup_answers_the_paired_instance_and_withholds_the_unpaired_one(void **state)
{
    (void)state;
    rrpc_broker *b = server_broker();
    rrpc_ctx *on_b = register_at(b, "kv-esp", HOST_B, true);
    rrpc_broker *b2 = server_broker(); /* one registration per service and handle */
    rrpc_ctx *on_c = register_at(b2, "kv-esp", HOST_C, true);
    rrpc_ctx *plain = register_at(b, "kv-plain", HOST_C, false);
    struct raw a, bb, c;
    agents_pair_a_and_b(&a, &bb);
    agent_pairs(&c, "agent-c", HOST_C, NULL); /* C's agent runs, but pairs with nobody */
    for (int i = 0; i < 4; i++) /* whatever instance the rotation puts first */
        assert_ticket_for_b();
    struct found f;
    /* From a host neither B nor C has a pair with: none is left. */
    lookup_from("127.0.0.5", "kv-esp", &f);
    assert_string_equal(f.err, "denied");
    /* From C itself: its own instance (the same host: nothing crosses a wire). */
    lookup_one(HOST_C, "kv-esp", &f);
    assert_string_equal(f.hosts[0], HOST_C);
    /* A service without require_esp is answered to any host. */
    lookup_one(HOST_C, "kv-plain", &f);
    raw_close(&c);
    raw_close(&bb);
    raw_close(&a);
    rrpc_broker_close(b2);
    rrpc_broker_close(b);
    rrpc_ctx_destroy(plain);
    rrpc_ctx_destroy(on_c);
    rrpc_ctx_destroy(on_b);
}

static void test_require_esp_travels_through_etcd_to_another_rrpcd(void **state)
{
    (void)state;
    const char *e = getenv("ETCD");
    if (access(e && e[0] ? e : "/usr/bin/etcd", X_OK))
        skip(); /* no etcd-server */
    rrpcd_stop(&daemon_pid, dir);
    struct etcd_member em;
    char edir[300];
    snprintf(edir, sizeof(edir), "%s/etcd", dir);
    assert_int_equal(mkdir(edir, 0700), 0);
    assert_int_equal(etcd_cluster_init(&em, 1, edir), 0);
    em.name[0] = 0;
    em.cluster[0] = 0;
    assert_int_equal(etcd_member_start(&em), 0);
    char conf[300], reg[100], tk[320];
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    snprintf(reg, sizeof(reg), "registry=etcd://127.0.0.1:%d", em.client_port);
    snprintf(tk, sizeof(tk), "ticket_key=%s/ticket.pem", dir);
    const char *set[] = { reg, tk, "etcd_prefix=/esp-test/", NULL };
    pid_t pa, pb;
    int port_a = rrpcd_spawn(dir, "etcd-a", conf, set, &pa),
        port_b = rrpcd_spawn(dir, "etcd-b", conf, set, &pb);
    /* Registered through A (once A has synchronized with etcd)... */
    daemon_port = port_a;
    rrpc_broker *b = server_broker();
    rrpc_config *cfg;
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_REQUIRE_ESP", "/run/rrpc-agent.sock"), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    rrpc_config_destroy(cfg);
    const char *uris[] = { "tcp://" HOST_B ":7001" };
    int r;
    int64_t t0 = now_ms();
    while ((r = rrpc_broker_register(b, ctx, "kv-esp", uris, 1, 0)) == -EAGAIN &&
           now_ms() - t0 < 30000)
        sleep_ms(50);
    if (r)
        fail_msg("register through A: %s", rrpc_broker_last_error(b));
    /* ...looked up through B, which learnt it from etcd: refused without a pair. */
    daemon_port = port_b;
    struct found f;
    t0 = now_ms();
    do
        lookup_from(HOST_A, "kv-esp", &f);
    while (!strcmp(f.err, "not_found") && now_ms() - t0 < 30000 && (sleep_ms(50), 1));
    assert_denied_for_no_pair(&f, HOST_B);
    struct raw a, bb;
    agents_pair_a_and_b(&a, &bb);
    lookup_one(HOST_A, "kv-esp", &f);
    raw_close(&bb);
    raw_close(&a);
    rrpc_broker_close(b);
    rrpc_ctx_destroy(ctx);
    int st;
    kill(pb, SIGTERM);
    assert_int_equal(waitpid(pb, &st, 0), pb);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    kill(pa, SIGTERM);
    assert_int_equal(waitpid(pa, &st, 0), pa);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    etcd_member_stop(&em, SIGTERM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_pair_reported_by_both_hosts_gets_the_client_a_ticket, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_pair_reported_by_one_host_only_is_denied_naming_both, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_pair_and_ended_report_are_denied, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_report_for_an_address_the_certificate_does_not_name_is_refused, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_report_of_a_principal_not_in_agents_is_refused,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_reports_beyond_the_bounds_are_bad_requests_that_close_the_session, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_max_agents_refuses_one_more_host_but_not_a_new_report_of_one_held, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_lookup_answers_the_paired_instance_and_withholds_the_unpaired_one, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_require_esp_travels_through_etcd_to_another_rrpcd,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

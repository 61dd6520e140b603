/* SPDX-License-Identifier: MIT */
/*
 * rrpcd on a real etcd under a hostile principal or a sick etcd (issue #28,
 * points 4 and 10): a register sent while etcd hangs is answered within the
 * documented 8 s; a principal churning register/unregister is refused past
 * its rate; rrpcd compacts etcd's history; a full etcd (NOSPACE) makes rrpcd
 * degraded with the reason, and it recovers by itself once space is there.
 *
 * Environment (set by meson): RRPCD, MAKE_CERTS; ETCD (optional: skipped when
 * etcd-server is missing).  Signals keep their default dispositions.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <curl/curl.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"
#include "etcd_test.h"

#define WAIT_MS 30000

static char dir[256];
static struct etcd_member member = { .pid = -1 };
static pid_t daemon_pid = -1;
static char addr[64];

/* Starts rrpcd on the etcd of @member with the settings @set (NULL-terminated, at most 6). */
static void start_rrpcd(const char *const *set)
{
    char conf[300], reg[80];
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    snprintf(reg, sizeof(reg), "registry=etcd://127.0.0.1:%d", member.client_port);
    const char *all[8] = { reg };
    for (int i = 0; set && set[i] && i < 6; i++)
        all[i + 1] = set[i];
    int port = rrpcd_spawn(dir, "h", conf, all, &daemon_pid);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
}

static void stop_rrpcd(void)
{
    if (daemon_pid > 0)
        rrpcd_stop(&daemon_pid, dir);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_DFL);
    etcd_bin_or_skip();
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-etcd-history-XXXXXX", "kv-server kv-client"))
        return -1;
    sh("openssl genpkey -algorithm ed25519 -out %s/ticket.pem 2>/dev/null && chmod 600 "
       "%s/ticket.pem", dir, dir);
    return rrpcd_test_conf(dir,
                           "ticket_key = %s/ticket.pem\n"
                           "listen = 127.0.0.1:0\nlease_ms = 2000\nlog_level = info\n"
                           "etcd_prefix = /test/rrpc/\n"
                           "allow = register * kv-server\nallow = lookup * kv-client\n",
                           dir);
}

static int group_teardown(void **state)
{
    (void)state;
    rrpcd_test_dir_remove(dir);
    return 0;
}

/* Each test: a fresh etcd (its own data directory), then rrpcd. */
static void start_etcd(const char *quota)
{
    static int n;
    memset(&member, 0, sizeof(member));
    member.pid = -1;
    snprintf(member.dir, sizeof(member.dir), "%s/e%d", dir, n++);
    mkdir(member.dir, 0700);
    member.quota = quota;
    assert_int_equal(etcd_member_start(&member), 0);
}

static int teardown(void **state)
{
    (void)state;
    if (member.pid > 0)
        kill(member.pid, SIGCONT);
    stop_rrpcd();
    etcd_member_stop(&member, SIGTERM);
    return 0;
}

/* A register through @b of @service (endpoint tcp://127.0.0.1:9): its result. */
static int register_once(rrpc_broker *b, rrpc_ctx *ctx, const char *service)
{
    const char *uris[] = { "tcp://127.0.0.1:9" };
    return rrpc_broker_register(b, ctx, service, uris, 1, 0);
}

/* Registers (waiting for rrpcd to synchronize with etcd first): 0 or the last error. */
static int register_when_synced(rrpc_broker *b, rrpc_ctx *ctx, const char *service)
{
    int r;
    int64_t t0 = now_ms();
    while ((r = register_once(b, ctx, service)) == -EAGAIN && now_ms() - t0 < WAIT_MS)
        sleep_ms(100);
    return r;
}

/* ---- a hung etcd ---------------------------------------------------------------- */

struct hung_register {
    rrpc_broker *b;
    rrpc_ctx *ctx;
    const char *service;
    int r;
    int64_t took;
    char why[512];
};

static void *hung_register_main(void *arg)
{
    struct hung_register *h = arg;
    int64_t t0 = now_ms();
    h->r = register_once(h->b, h->ctx, h->service);
    h->took = now_ms() - t0;
    snprintf(h->why, sizeof(h->why), "%s", rrpc_broker_last_error(h->b));
    return NULL;
}

static rrpc_broker *open_server(int timeout_ms)
{
    rrpc_broker *b;
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/kv-server.crt", dir);
    snprintf(key, sizeof(key), "%s/kv-server.key", dir);
    rrpc_broker_opts o = { .ca_file = ca, .cert_file = cert, .key_file = key,
                           .timeout_ms = timeout_ms };
    assert_int_equal(rrpc_broker_open(addr, &o, &b), 0);
    return b;
}

/*
 * etcd stopped (SIGSTOP: its sockets accept, nothing answers) and two
 * servers register at once: each is refused within the 8 s docs/broker.md
 * promises, with -EAGAIN and the reason.  (The second waited for the first's
 * 8 s and then had 8 s of its own: 16 s.)
 */
static void test_a_register_while_etcd_hangs_is_refused_within_8_s(void **state)
{
    (void)state;
    start_etcd(NULL);
    start_rrpcd(NULL);
    struct hung_register h[2] = { { .service = "during-a" }, { .service = "during-b" } };
    for (int i = 0; i < 2; i++) {
        h[i].b = open_server(30000);
        assert_int_equal(rrpc_ctx_create(&h[i].ctx), 0);
    }
    rrpc_ctx *ctx0;
    assert_int_equal(rrpc_ctx_create(&ctx0), 0);
    assert_int_equal(register_when_synced(h[0].b, ctx0, "before"), 0);

    kill(member.pid, SIGSTOP);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hung_register_main, &h[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    kill(member.pid, SIGCONT);
    for (int i = 0; i < 2; i++) {
        print_message("a register with etcd hung was answered %d after %lld ms: %s\n", h[i].r,
                      (long long)h[i].took, h[i].why);
        assert_int_equal(h[i].r, -EAGAIN);
        if (h[i].took > 8500)
            fail_msg("a register was answered after %lld ms; docs/broker.md says 8 s",
                     (long long)h[i].took);
    }
    for (int i = 0; i < 2; i++) {
        rrpc_ctx_destroy(h[i].ctx);
        rrpc_broker_close(h[i].b);
    }
    rrpc_ctx_destroy(ctx0);
}

/* ---- etcd's own gateway, as another user of the cluster ------------------------ */

struct body {
    char *buf;
    size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t k = size * n;
    char *nb = realloc(b->buf, b->len + k + 1);
    if (!nb)
        return 0;
    b->buf = nb;
    memcpy(b->buf + b->len, p, k);
    b->len += k;
    b->buf[b->len] = 0;
    return k;
}

/* POSTs @json to etcd's @path; the answer in *@out (the caller frees it). */
static long gw(const char *path, const char *json, char **out)
{
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", member.client_port, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    struct body b = { calloc(1, 1), 0 };
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out)
        *out = b.buf;
    else
        free(b.buf);
    return status;
}

/* ---- one principal churning registrations ----------------------------------------- */

/*
 * A principal allowed to register one service churns register/unregister
 * as fast as it can (it reached 21 cycles a second, each adding ~20 KB to
 * etcd's history): past max_registers_per_s (20 a second, bursts of 40)
 * its registers are refused with -EAGAIN naming the setting.
 */
static void test_register_churn_of_one_principal_is_rate_limited(void **state)
{
    (void)state;
    start_etcd(NULL);
    start_rrpcd(NULL);
    rrpc_broker *b = open_server(5000);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(register_when_synced(b, ctx, "churn"), 0);
    assert_int_equal(rrpc_broker_unregister(b, "churn"), 0);
    int ok = 1, r = 0;
    int64_t t0 = now_ms();
    while (ok < 200 && (r = register_once(b, ctx, "churn")) == 0) {
        ok++;
        assert_int_equal(rrpc_broker_unregister(b, "churn"), 0);
    }
    print_message("%d register/unregister cycles in %lld ms, then %d: %s\n", ok,
                  (long long)(now_ms() - t0), r, r ? rrpc_broker_last_error(b) : "");
    if (!r)
        fail_msg("one principal registered %d times without a refusal", ok);
    assert_int_equal(r, -EAGAIN);
    assert_non_null(strstr(rrpc_broker_last_error(b), "max_registers_per_s"));
    assert_true(ok >= 30);
    /* The bucket refills: a register a second later goes through. */
    sleep_ms(1000);
    assert_int_equal(register_once(b, ctx, "churn"), 0);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
}

/*
 * With etcd_compact_interval_s = 1, the history of register/unregister churn
 * is compacted: a range at an early revision is refused by etcd as
 * compacted (it was answered: nothing compacted etcd's history).
 */
static void test_rrpcd_compacts_etcds_history(void **state)
{
    (void)state;
    start_etcd(NULL);
    const char *set[] = { "etcd_compact_interval_s=1", "max_registers_per_s=1000", NULL };
    start_rrpcd(set);
    rrpc_broker *b = open_server(5000);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(register_when_synced(b, ctx, "churn"), 0);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(rrpc_broker_unregister(b, "churn"), 0);
        assert_int_equal(register_once(b, ctx, "churn"), 0);
    }
    /* "/test/rrpc/" and its end "/test/rrpc0", base64 */
    const char *early = "{\"key\":\"L3Rlc3QvcnJwYy8=\",\"range_end\":\"L3Rlc3QvcnJwYzA=\","
                        "\"revision\":\"3\"}";
    char *ans = NULL;
    bool compacted = false;
    int64_t t0 = now_ms();
    while (!compacted && now_ms() - t0 < 10000) {
        free(ans);
        gw("/v3/kv/range", early, &ans);
        compacted = strstr(ans, "compacted") != NULL;
        if (!compacted)
            sleep_ms(200);
    }
    print_message("a range at revision 3 after %lld ms: %.200s\n", (long long)(now_ms() - t0),
                  ans);
    free(ans);
    if (!compacted)
        fail_msg("etcd's history was not compacted within 10 s (etcd_compact_interval_s=1)");
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
}

/*
 * etcd with a 4 MiB backend quota, filled by another user's writes (one key
 * written again and again: history) until its NOSPACE alarm: a register
 * through rrpcd is refused with -EAGAIN, rrpcd says it is degraded because
 * etcd is out of space, and it recovers by itself (compaction,
 * defragmentation, the alarm disarmed): a register goes through again
 * without anyone doing anything.  (It stayed refused until a person
 * compacted, defragmented and disarmed.)
 */
static void test_nospace_is_reported_and_recovered_from_without_a_person(void **state)
{
    (void)state;
    start_etcd("4194304");
    const char *set[] = { "etcd_compact_interval_s=0", NULL }; /* recovery alone */
    start_rrpcd(set);
    rrpc_broker *b = open_server(15000);
    rrpc_ctx *ctx1, *ctx2;
    assert_int_equal(rrpc_ctx_create(&ctx1), 0);
    assert_int_equal(rrpc_ctx_create(&ctx2), 0);
    assert_int_equal(register_when_synced(b, ctx1, "before"), 0);

    /* Fill etcd: 256 KiB values (less one byte, for base64) on one key. */
    size_t n3 = 87381;
    char *json = malloc(n3 * 4 + 64);
    int off = sprintf(json, "{\"key\":\"L2p1bms=\",\"value\":\"");
    for (size_t i = 0; i < n3; i++)
        memcpy(json + off + 4 * i, "QUFB", 4);
    strcpy(json + off + 4 * n3, "\"}");
    int puts = 0;
    char *ans = NULL;
    for (; puts < 200; puts++) {
        free(ans);
        long st = gw("/v3/kv/put", json, &ans);
        if (st != 200 || strstr(ans, "space exceeded"))
            break;
    }
    print_message("etcd refused the %dth put of 256 KiB: %.160s\n", puts + 1, ans);
    assert_non_null(strstr(ans, "space exceeded"));
    free(ans);
    free(json);

    int r = register_once(b, ctx2, "during");
    print_message("a register with etcd full: %d %s\n", r, rrpc_broker_last_error(b));
    assert_int_equal(r, -EAGAIN);
    rrpc_broker_state st;
    assert_int_equal(rrpc_broker_status(b, &st), 0);
    print_message("status: degraded %d: %s\n", st.degraded, st.why);
    /* Either still degraded for want of space, or already recovered. */
    if (st.degraded)
        assert_non_null(strstr(st.why, "out of space"));

    int64_t t0 = now_ms();
    while ((r = register_once(b, ctx2, "during")) == -EAGAIN && now_ms() - t0 < WAIT_MS)
        sleep_ms(500);
    print_message("a register went through again %lld ms later: %d %s\n",
                  (long long)(now_ms() - t0), r, r ? rrpc_broker_last_error(b) : "");
    assert_int_equal(r, 0);
    assert_int_equal(rrpc_broker_status(b, &st), 0);
    assert_int_equal(st.degraded, 0);
    char *alarms = NULL;
    gw("/v3/maintenance/alarm", "{\"action\":\"GET\"}", &alarms);
    assert_null(strstr(alarms, "NOSPACE"));
    free(alarms);
    rrpc_ctx_destroy(ctx1);
    rrpc_ctx_destroy(ctx2);
    rrpc_broker_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_a_register_while_etcd_hangs_is_refused_within_8_s,
                                  teardown),
        cmocka_unit_test_teardown(test_register_churn_of_one_principal_is_rate_limited,
                                  teardown),
        cmocka_unit_test_teardown(test_rrpcd_compacts_etcds_history, teardown),
        cmocka_unit_test_teardown(
            test_nospace_is_reported_and_recovered_from_without_a_person, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

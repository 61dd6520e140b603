/* SPDX-License-Identifier: MIT */
/*
 * rrpcd on a three-member etcd cluster (registry = etcd://m0,m1,m2; issue
 * #16): killing one member with SIGKILL, the cluster's leader (the worst
 * case: writes wait for an election), changes nothing a user sees: lookups
 * answer, calls go through, a new registration is accepted at its first
 * attempt, and the registrations made before keep their leases.  Real TLS to rrpcd (certificates from
 * scripts/make-dev-certs.sh) and the real etcd this program starts on free
 * loopback ports (skipped when etcd-server is missing).
 *
 * Environment (set by meson): RRPCD, MAKE_CERTS; ETCD (optional).
 * No assertion depends on timing: waits are bounded generously and the
 * time taken is printed.
 */
#include <errno.h>
#include <fcntl.h>
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

#include <cmocka.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"
#include "etcd_test.h"

#define WAIT_MS 30000
#define LEASE_MS 2000

static char dir[256];
static struct etcd_member m[3];
static pid_t rrpcd = -1;
static char rrpcd_addr[64];

static void start_rrpcd(void)
{
    char conf[300], reg[200];
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    snprintf(reg, sizeof(reg), "registry=etcd://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             m[0].client_port, m[1].client_port, m[2].client_port);
    const char *set[] = { reg, NULL };
    snprintf(rrpcd_addr, sizeof(rrpcd_addr), "127.0.0.1:%d", rrpcd_spawn(dir, "ha", conf, set, &rrpcd));
}

/* The index of the member that leads the cluster now, asked of each member's
 * status through etcd's JSON gateway (Python's urllib: no HTTP client here). */
static int leader_index(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 -c 'import json,sys,urllib.request as u\n"
             "for i,p in enumerate(sys.argv[1:]):\n"
             "  try:\n"
             "    r=json.load(u.urlopen(u.Request(\"http://127.0.0.1:%%s/v3/maintenance/status\"%%p,"
             "b\"{}\"),timeout=5))\n"
             "  except Exception: continue\n"
             "  if r.get(\"leader\") and r[\"leader\"]==r[\"header\"][\"member_id\"]: print(i)' "
             "%d %d %d",
             m[0].client_port, m[1].client_port, m[2].client_port);
    FILE *f = popen(cmd, "r");
    int i = -1;
    if (f) {
        if (fscanf(f, "%d", &i) != 1)
            i = -1;
        pclose(f);
    }
    return i;
}

static int open_as(const char *who, rrpc_broker **ret)
{
    /* A register waits for etcd's election (rrpcd tries its write again for up to
     * 8 s): the client waits longer. */
    return broker_open_as(dir, rrpcd_addr, who, 15000, ret);
}

static int group_setup(void **state)
{
    (void)state;
    etcd_bin_or_skip();
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-etcd-ha-XXXXXX", "kv-server kv-client") ||
        rrpcd_test_conf(dir,
                        "ticket_key = %s/ticket.pem\n"
                        "listen = 127.0.0.1:0\nlease_ms = %d\nlog_level = info\n"
                        "etcd_prefix = /test/ha/\n"
                        "allow = register * kv-server\nallow = lookup * kv-client\n",
                        dir, LEASE_MS))
        return -1;
    if (etcd_cluster_init(m, 3, dir))
        return -1;
    for (int i = 0; i < 3; i++)
        if (etcd_member_start(&m[i]))
            return -1;
    start_rrpcd(); /* it waits for etcd itself: its first sync retries */
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (rrpcd > 0) {
        kill(rrpcd, SIGTERM);
        waitpid(rrpcd, NULL, 0);
    }
    for (int i = 0; i < 3; i++)
        etcd_member_stop(&m[i], SIGTERM);
    rrpcd_test_dir_remove(dir);
    return 0;
}

struct server {
    rrpc_ctx *ctx;
    rrpc_listener *l;
    rrpc_broker *b;
};

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

/* A server of @service registered through rrpcd.  @retry_until_synced: a
 * fresh rrpcd may not have its first view of etcd yet (-EAGAIN); only the
 * setup waits for that, the test proper wants the first answer. */
static int server_start(struct server *s, const char *service, bool retry_until_synced)
{
    memset(s, 0, sizeof(*s));
    assert_int_equal(open_as("kv-server", &s->b), 0);
    return test_server_register(s->b, service, h_echo, s, retry_until_synced, &s->ctx, &s->l);
}

static void server_stop(struct server *s)
{
    rrpc_listener_close(s->l);
    rrpc_ctx_destroy(s->ctx);
    rrpc_broker_close(s->b);
}

/* One lookup and one call through a fresh connection: both must work. */
static void lookup_and_call(rrpc_ctx *ctx, rrpc_broker *b, const char *service, const char *when)
{
    rrpc_service_info *info = NULL;
    int r = rrpc_broker_lookup(b, service, &info);
    if (r)
        fail_msg("lookup of %s %s: %s: %s", service, when, rrpc_strerror(r),
                 rrpc_broker_last_error(b));
    rrpc_service_info_free(info);
    rrpc_conn *c;
    r = rrpc_connect_service(ctx, b, service, 5000, NULL, NULL, &c);
    if (r)
        fail_msg("connect to %s %s: %s: %s", service, when, rrpc_strerror(r),
                 rrpc_broker_last_error(b));
    void *resp = NULL;
    size_t len = 0;
    rrpc_call_opts o = { .qos_class = RRPC_CLASS_CONTROL, .deadline_ms = 5000 };
    r = rrpc_call_sync(c, "echo", "ping", 4, &o, &resp, &len);
    if (r)
        fail_msg("call to %s %s: %s", service, when, rrpc_strerror(r));
    assert_int_equal(len, 4);
    free(resp);
    rrpc_conn_close(c);
}

static void killing_one_member_of_three_changes_nothing_a_user_sees(void **state)
{
    (void)state;
    struct server s1, s2;
    int r = server_start(&s1, "kv-before", true);
    if (r)
        fail_msg("register before the kill: %s: %s", rrpc_strerror(r),
                 rrpc_broker_last_error(s1.b));
    rrpc_broker *b;
    assert_int_equal(open_as("kv-client", &b), 0);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(ctx), 0);
    lookup_and_call(ctx, b, "kv-before", "before the kill");

    int lead = -1;
    for (int64_t t = now_ms(); lead < 0 && now_ms() - t < WAIT_MS; sleep_ms(100))
        lead = leader_index();
    if (lead < 0)
        fail_msg("no member of the etcd cluster says it leads; see %s", dir);
    printf("killing m%d, the leader\n", lead);
    etcd_member_stop(&m[lead], SIGKILL);
    int64_t t0 = now_ms();
    r = server_start(&s2, "kv-after", false);
    if (r)
        fail_msg("register right after the leader was killed: %s: %s", rrpc_strerror(r),
                 rrpc_broker_last_error(s2.b));
    printf("first registration after the kill answered in %lld ms\n",
           (long long)(now_ms() - t0));
    /* Past two lease lengths: the renewals of kv-before went on through
     * another member, and lookups never failed meanwhile. */
    int n = 0;
    for (int64_t t1 = now_ms(); now_ms() - t1 < 2 * LEASE_MS + 500; n++) {
        lookup_and_call(ctx, b, "kv-before", "after the kill");
        lookup_and_call(ctx, b, "kv-after", "after the kill");
        sleep_ms(100);
    }
    printf("%d rounds of lookups and calls after the kill, none failed\n", n);

    /* The member comes back and rejoins; nothing changes either. */
    assert_int_equal(etcd_member_start(&m[lead]), 0);
    lookup_and_call(ctx, b, "kv-before", "after m0 came back");
    assert_int_equal(rrpc_broker_unregister(s2.b, "kv-after"), 0);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    server_stop(&s2);
    server_stop(&s1);
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(killing_one_member_of_three_changes_nothing_a_user_sees),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* SPDX-License-Identifier: MIT */
/*
 * Two rrpcd on one etcd (registry = etcd://...; issue #16), over real TLS with
 * certificates from scripts/make-dev-certs.sh, and the real etcd this program
 * starts on free loopback ports (skipped when etcd-server is missing).
 *
 * Environment (set by meson): RRPCD, MAKE_CERTS; ETCD (optional).
 * No assertion depends on timing: every wait is bounded generously (30 s)
 * and the time taken is printed.
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
#include <sys/stat.h>

#include <cmocka.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"
#include "etcd_test.h"

#define WAIT_MS 30000

static char dir[256];
static struct etcd_member member = { .pid = -1 };

struct broker {
    const char *name;
    pid_t pid;
    char addr[64];
    int port;           /* once started: restarts listen on it again */
    const char *set[2]; /* more settings (-s), or NULL */
};
static struct broker A = { .name = "a", .pid = -1 }, B = { .name = "b", .pid = -1 };

static void start_rrpcd(struct broker *k)
{
    char conf[300], reg[80], listen[64];
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    snprintf(reg, sizeof(reg), "registry=etcd://127.0.0.1:%d", member.client_port);
    snprintf(listen, sizeof(listen), "listen=127.0.0.1:%d", k->port);
    const char *set[] = { reg, listen, k->set[0], k->set[1], NULL };
    k->port = rrpcd_spawn(dir, k->name, conf, set, &k->pid);
    snprintf(k->addr, sizeof(k->addr), "127.0.0.1:%d", k->port);
}

static void stop_rrpcd(struct broker *k, int sig)
{
    if (k->pid <= 0)
        return;
    int st;
    kill(k->pid, sig);
    assert_int_equal(waitpid(k->pid, &st, 0), k->pid);
    k->pid = -1;
    if (sig == SIGTERM && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
        fail_msg("rrpcd %s did not exit cleanly on SIGTERM (0x%x); see %s", k->name, st, dir);
}

static int open_as(const struct broker *k, const char *who, rrpc_broker **ret)
{
    return broker_open_as(dir, k->addr, who, 3000, ret);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_DFL);
    etcd_bin_or_skip();
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-etcd-cluster-XXXXXX", "kv-server kv-client") ||
        rrpcd_test_conf(dir,
                        "ticket_key = %s/ticket.pem\n"
                        "listen = 127.0.0.1:0\nlease_ms = 2000\nlog_level = info\n"
                        "etcd_prefix = /test/rrpc/\n"
                        "allow = register * kv-server\nallow = lookup * kv-client\n",
                        dir))
        return -1;
    snprintf(member.dir, sizeof(member.dir), "%s", dir);
    if (etcd_member_start(&member))
        return -1;
    start_rrpcd(&A);
    start_rrpcd(&B);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    stop_rrpcd(&A, SIGTERM);
    stop_rrpcd(&B, SIGTERM);
    etcd_member_stop(&member, SIGTERM);
    rrpcd_test_dir_remove(dir);
    return 0;
}

struct server {
    rrpc_ctx *ctx;
    rrpc_listener *l;
    rrpc_broker *b;
    int calls;
};

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    struct server *s = user;
    __atomic_add_fetch(&s->calls, 1, __ATOMIC_SEQ_CST);
    rrpc_respond(req, p, len);
}

/* A server registered through @k; returns the register's result, waiting (bounded) for an
 * rrpcd that is not synchronized with etcd yet when @wait. */
static int server_start(struct server *s, const struct broker *k, const char *service,
                        bool wait)
{
    memset(s, 0, sizeof(*s));
    assert_int_equal(open_as(k, "kv-server", &s->b), 0);
    return test_server_register(s->b, service, h_echo, s, wait, &s->ctx, &s->l);
}

static void server_stop(struct server *s)
{
    rrpc_listener_close(s->l);
    rrpc_ctx_destroy(s->ctx);
    rrpc_broker_close(s->b);
}

/* Asks @b's broker its status until its degraded flag is @want; the ms it took. */
static int64_t status_until(rrpc_broker *b, int want, rrpc_broker_state *st)
{
    int64_t t0 = now_ms();
    int r;
    while ((r = rrpc_broker_status(b, st)) == 0 && st->degraded != want &&
           now_ms() - t0 < WAIT_MS)
        sleep_ms(100);
    if (r)
        fail_msg("status: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(b));
    if (st->degraded != want)
        fail_msg("status: degraded %d, wanted %d (%s)", st->degraded, want, st->why);
    return now_ms() - t0;
}

/* Looks @service up through @b until the answer is @want (0 or -ENOENT); the ms it took. */
static int64_t lookup_until(rrpc_broker *b, const char *service, int want)
{
    int64_t t0 = now_ms();
    int r;
    do {
        rrpc_service_info *info = NULL;
        r = rrpc_broker_lookup(b, service, &info);
        rrpc_service_info_free(info);
        if (r != want)
            sleep_ms(20);
    } while (r != want && now_ms() - t0 < WAIT_MS);
    if (r != want)
        fail_msg("lookup of %s: %d (%s), wanted %d", service, r, rrpc_broker_last_error(b), want);
    return now_ms() - t0;
}

static void call_echo(rrpc_ctx *ctx, rrpc_broker *b, const char *service)
{
    rrpc_conn *c;
    int r = rrpc_connect_service(ctx, b, service, 3000, NULL, NULL, &c);
    if (r)
        fail_msg("connect_service: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(b));
    void *resp = NULL;
    size_t len = 0;
    rrpc_call_opts o = { .qos_class = RRPC_CLASS_CONTROL, .deadline_ms = 3000 };
    assert_int_equal(rrpc_call_sync(c, "echo", "ping", 4, &o, &resp, &len), 0);
    assert_int_equal(len, 4);
    free(resp);
    rrpc_conn_close(c);
}

static void a_service_registered_through_a_is_looked_up_and_called_through_b(void **state)
{
    (void)state;
    struct server s;
    int r = server_start(&s, &A, "kv-one", true);
    if (r)
        fail_msg("register through A: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(s.b));
    rrpc_broker *b;
    assert_int_equal(open_as(&B, "kv-client", &b), 0);
    printf("visible through B %lld ms after the register through A returned\n",
           (long long)lookup_until(b, "kv-one", 0));
    /* B's ticket, for a server that registered through A. */
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(ctx), 0);
    call_echo(ctx, b, "kv-one");
    assert_int_equal(s.calls, 1);
    /* Unregistered through A: gone through B. */
    assert_int_equal(rrpc_broker_unregister(s.b, "kv-one"), 0);
    printf("gone through B %lld ms after the unregister through A\n",
           (long long)lookup_until(b, "kv-one", -ENOENT));
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    server_stop(&s);
}

static void the_registrations_of_a_killed_broker_expire_with_their_etcd_lease(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, &A, "kv-orphan", true), 0);
    rrpc_broker *b;
    assert_int_equal(open_as(&B, "kv-client", &b), 0);
    lookup_until(b, "kv-orphan", 0);
    /* A dies: nobody keeps the lease alive (the server's renewals find no broker). */
    stop_rrpcd(&A, SIGKILL);
    printf("gone through B %lld ms after A was killed (lease_ms 2000)\n",
           (long long)lookup_until(b, "kv-orphan", -ENOENT));
    rrpc_broker_close(b);
    server_stop(&s);
    start_rrpcd(&A);
}

static void without_etcd_lookups_answer_from_cache_registrations_fail_and_all_recovers(
    void **state)
{
    (void)state;
    struct server s1, s2, s3;
    assert_int_equal(server_start(&s1, &A, "kv-cached", true), 0);
    rrpc_broker *b;
    assert_int_equal(open_as(&B, "kv-client", &b), 0);
    lookup_until(b, "kv-cached", 0);

    etcd_member_stop(&member, SIGKILL);
    /* Lookups from B's cache go on, also past the lease's length. */
    for (int i = 0; i < 40; i++) {
        rrpc_service_info *info = NULL;
        int r = rrpc_broker_lookup(b, "kv-cached", &info);
        if (r)
            fail_msg("lookup %d with etcd down: %s: %s", i, rrpc_strerror(r),
                     rrpc_broker_last_error(b));
        rrpc_service_info_free(info);
        sleep_ms(100);
    }
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(ctx), 0);
    call_echo(ctx, b, "kv-cached");
    /* A registration is refused, and says why. */
    int r = server_start(&s2, &A, "kv-refused", false);
    assert_int_equal(r, -EAGAIN);
    const char *why = rrpc_broker_last_error(s2.b);
    printf("register with etcd down: %s\n", why);
    assert_non_null(strstr(why, "degraded"));
    assert_non_null(strstr(why, "etcd"));
    server_stop(&s2);
    /* B says so when asked (its watch is down for longer than the grace). */
    rrpc_broker_state st;
    printf("B degraded %lld ms into the check\n", (long long)status_until(b, 1, &st));
    assert_string_equal(st.registry, "etcd");
    assert_true(st.why[0] != 0);
    printf("status of B with etcd down: %s\n", st.why);
    assert_true(st.registrations >= 1); /* its cache */

    /* etcd returns (same data): registrations work again, and B sees them. */
    assert_int_equal(etcd_member_start(&member), 0);
    int64_t t0 = now_ms();
    r = server_start(&s3, &A, "kv-after", true);
    if (r)
        fail_msg("register after etcd returned: %s: %s", rrpc_strerror(r),
                 rrpc_broker_last_error(s3.b));
    printf("registration accepted %lld ms after etcd was started again\n",
           (long long)(now_ms() - t0));
    lookup_until(b, "kv-after", 0);
    call_echo(ctx, b, "kv-after");
    status_until(b, 0, &st);
    assert_string_equal(st.why, "");
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    server_stop(&s3);
    server_stop(&s1);
}

/* Restarts @k on its port with the settings @a and @b (may be NULL). */
static void restart_rrpcd_with(struct broker *k, const char *a, const char *b)
{
    stop_rrpcd(k, SIGTERM);
    k->set[0] = a;
    k->set[1] = b;
    start_rrpcd(k);
}

/* Connects to @service through @b's lookup once; the result. */
static int connect_once(rrpc_ctx *ctx, rrpc_broker *b, const char *service)
{
    rrpc_conn *c;
    int r = rrpc_connect_service(ctx, b, service, 3000, NULL, NULL, &c);
    if (!r)
        rrpc_conn_close(c);
    return r;
}

/* A ticket for kv-client to reach the first instance of @service, signed
 * with the key in @pem as a broker holding it would, presented. */
static size_t sign_with(rrpc_broker *b, const char *service, const char *pem, uint8_t *out)
{
    rrpc_service_info *info;
    assert_int_equal(rrpc_broker_lookup(b, service, &info), 0);
    char p[300], why[600];
    snprintf(p, sizeof(p), "%s/%s", dir, pem);
    rrpc_ticket_key *k;
    if (rrpc_ticket_key_load(p, &k, why, sizeof(why)))
        fail_msg("%s", why);
    uint8_t raw[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t rl, len;
    assert_int_equal(rrpc_ticket_issue(k, "kv-client", service, info->instances[0].id,
                                       info->ticket_expiry_ms + 60000, NULL, raw, sizeof(raw),
                                       &rl),
                     0);
    rrpc_ticket_key_free(k);
    assert_int_equal(rrpc_ticket_present(raw, rl, "kv-client", out, RRPC_TICKET_MAX_LEN, &len), 0);
    rrpc_service_info_free(info);
    return len;
}

/*
 * The signing key rotated across two brokers without a restart of the
 * server, which registered through A and learns the accepted keys from A's
 * answers to its renewals: (1) A also accepts the new key; (2) B signs with
 * it: B's tickets reach the server; (3) A drops the old key: a ticket of the
 * old key is refused by the server, with the reason at the client.
 */
static void a_key_rotation_reaches_a_running_server_through_its_renewals(void **state)
{
    (void)state;
    sh("openssl genpkey -algorithm ed25519 -out %s/ticket2.pem 2>/dev/null && "
       "openssl pkey -in %s/ticket2.pem -pubout -out %s/ticket2.pub && chmod 600 %s/ticket2.pem",
       dir, dir, dir, dir);
    char k1[300], k2[300], p1[300], p2[300];
    snprintf(k1, sizeof(k1), "ticket_key=%s/ticket.pem", dir);
    snprintf(k2, sizeof(k2), "ticket_key=%s/ticket2.pem", dir);
    snprintf(p1, sizeof(p1), "ticket_key_previous=%s/ticket.pub", dir);
    snprintf(p2, sizeof(p2), "ticket_key_previous=%s/ticket2.pub", dir);
    struct server s;
    int r = server_start(&s, &A, "kv-rotate", true);
    if (r)
        fail_msg("register through A: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(s.b));
    rrpc_broker *b;
    assert_int_equal(open_as(&B, "kv-client", &b), 0);
    lookup_until(b, "kv-rotate", 0);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    assert_int_equal(rrpc_ctx_start_thread(ctx), 0);
    uint8_t old[RRPC_TICKET_MAX_LEN];
    size_t old_len;

    /* (1) and (2): a ticket of B, signed with the new key, is accepted once the
     * server renewed with A (every third of lease_ms = 2000). */
    restart_rrpcd_with(&A, k1, p2);
    restart_rrpcd_with(&B, k2, p1);
    rrpc_broker_close(b);
    assert_int_equal(open_as(&B, "kv-client", &b), 0);
    int64_t t0 = now_ms();
    while ((r = connect_once(ctx, b, "kv-rotate")) != 0 && now_ms() - t0 < WAIT_MS)
        sleep_ms(50);
    if (r)
        fail_msg("a ticket of B's new key: %s: %s", rrpc_strerror(r), rrpc_broker_last_error(b));
    printf("a ticket of the new key accepted %lld ms after the brokers restarted\n",
           (long long)(now_ms() - t0));
    /* the old key is still accepted during the overlap */
    old_len = sign_with(b, "kv-rotate", "ticket.pem", old);
    rrpc_service_info *info;
    assert_int_equal(rrpc_broker_lookup(b, "kv-rotate", &info), 0);
    rrpc_conn *c;
    r = rrpc_connect_ticket(ctx, info->endpoints[0].uri, old, old_len, 3000, NULL, NULL, &c);
    if (r)
        fail_msg("a ticket of the old key in the overlap: %s", rrpc_ctx_last_error(ctx));
    rrpc_conn_close(c);

    /* (3) A drops the old key: at the server's next renewal its tickets are refused. */
    restart_rrpcd_with(&A, k2, NULL);
    t0 = now_ms();
    do {
        old_len = sign_with(b, "kv-rotate", "ticket.pem", old);
        r = rrpc_connect_ticket(ctx, info->endpoints[0].uri, old, old_len, 3000, NULL, NULL, &c);
        if (!r) {
            rrpc_conn_close(c);
            sleep_ms(50);
        }
    } while (r == 0 && now_ms() - t0 < WAIT_MS);
    assert_int_equal(r, RRPC_E_TICKET);
    printf("the old key refused %lld ms after A dropped it: %s\n", (long long)(now_ms() - t0),
           rrpc_ctx_last_error(ctx));
    assert_non_null(strstr(rrpc_ctx_last_error(ctx), "does not accept"));
    assert_int_equal(s.calls, 0);
    rrpc_service_info_free(info);

    /* Both back to the first key for the tests after. */
    restart_rrpcd_with(&A, NULL, NULL);
    restart_rrpcd_with(&B, NULL, NULL);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_service_registered_through_a_is_looked_up_and_called_through_b),
        cmocka_unit_test(a_key_rotation_reaches_a_running_server_through_its_renewals),
        cmocka_unit_test(the_registrations_of_a_killed_broker_expire_with_their_etcd_lease),
        cmocka_unit_test(
            without_etcd_lookups_answer_from_cache_registrations_fail_and_all_recovers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

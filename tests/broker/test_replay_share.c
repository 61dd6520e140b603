/* SPDX-License-Identifier: MIT */
/*
 * The replay cache of a data-plane server is shared out per client identity
 * (issue #28, point 3): one authorized client that connects as fast as it
 * can fills its own share and is refused, while another client still
 * connects.  The real rrpcd over TLS issues the tickets; the server (a
 * context with the broker's gate) and the clients run here, over tcp.
 *
 * Environment (set by meson): RRPCD = the daemon, MAKE_CERTS = the script.
 * Signals keep their default dispositions.
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

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"

static char dir[256];
static pid_t daemon_pid = -1;
static char addr[64];

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_DFL);
    if (rrpcd_test_dir(dir, sizeof(dir), "/tmp/rrpc-replay-test-XXXXXX",
                       "kv-server kv-client kv-other"))
        return -1;
    /* Tickets of 5 s: with a 1 ms skew and RRPC_TICKET_RATE=32 (meson.build) a
     * client's share is 32 x 6 = 192. */
    return rrpcd_test_conf(dir, "listen = 127.0.0.1:0\nticket_lifetime_ms = 5000\n"
                                "log_level = notice\n"
                                "allow = register * kv-server\nallow = lookup * kv-client\n"
                                "allow = lookup * kv-other\n");
}

static int group_teardown(void **state)
{
    (void)state;
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        waitpid(daemon_pid, NULL, 0);
    }
    rrpcd_test_dir_remove(dir);
    return 0;
}

static rrpc_broker *open_as(const char *who)
{
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/%s.crt", dir, who);
    snprintf(key, sizeof(key), "%s/%s.key", dir, who);
    rrpc_broker_opts o = { .ca_file = ca, .cert_file = cert, .key_file = key,
                           .timeout_ms = 5000, .skew_ms = 1 };
    rrpc_broker *b = NULL;
    int r = rrpc_broker_open(addr, &o, &b);
    if (r)
        fail_msg("broker open as %s: %s", who, rrpc_broker_last_error(NULL));
    return b;
}

/* One connect by name, closed at once: 0 or the error. */
static int connect_once(rrpc_ctx *ctx, rrpc_broker *b, char *why, size_t whylen)
{
    rrpc_conn *c = NULL;
    int r = rrpc_connect_service(ctx, b, "svc", 3000, NULL, NULL, &c);
    if (r) {
        snprintf(why, whylen, "%s | %s", rrpc_broker_last_error(b), rrpc_ctx_last_error(ctx));
        return r;
    }
    rrpc_conn_close(c);
    return 0;
}

static void test_a_client_filling_its_replay_share_does_not_lock_out_another(void **state)
{
    (void)state;
    char conf[300];
    snprintf(conf, sizeof(conf), "%s/rrpcd.conf", dir);
    int port = rrpcd_spawn(dir, "r", conf, NULL, &daemon_pid);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);

    rrpc_broker *sb = open_as("kv-server");
    rrpc_ctx *sctx;
    rrpc_listener *l;
    assert_int_equal(test_server_register(sb, "svc", h_echo, NULL, false, &sctx, &l), 0);

    rrpc_broker *attacker = open_as("kv-client"), *other = open_as("kv-other");
    rrpc_ctx *actx, *octx;
    assert_int_equal(rrpc_ctx_create(&actx), 0);
    assert_int_equal(rrpc_ctx_start_thread(actx), 0);
    assert_int_equal(rrpc_ctx_create(&octx), 0);
    assert_int_equal(rrpc_ctx_start_thread(octx), 0);

    /* The attacker connects as fast as it can: it must be refused, by its share. */
    char why[1024] = "";
    int ok = 0, r = 0;
    int64_t t0 = now_ms();
    while (ok < 2000 && (r = connect_once(actx, attacker, why, sizeof(why))) == 0)
        ok++;
    print_message("the attacker connected %d times in %lld ms, then: %d %s\n", ok,
                  (long long)(now_ms() - t0), r, why);
    if (r == 0)
        fail_msg("one client connected %d times within one ticket lifetime and was never "
                 "refused: its part of the replay cache is not bounded", ok);
    assert_int_equal(r, RRPC_E_TICKET);
    assert_non_null(strstr(why, "replay cache share of client 'kv-client' full"));
    assert_true(ok >= 100); /* its share (192) less what expired while it filled it */

    /* Another client still connects, every time, while the attacker is refused. */
    for (int i = 0; i < 20; i++) {
        r = connect_once(octx, other, why, sizeof(why));
        if (r)
            fail_msg("another client was refused after %d connects: %d %s", i, r, why);
    }
    assert_int_equal(connect_once(actx, attacker, why, sizeof(why)), RRPC_E_TICKET);

    /* Once its tickets expire (5 s + skew), the attacker gets in again. */
    sleep_ms(6500);
    r = connect_once(actx, attacker, why, sizeof(why));
    if (r)
        fail_msg("the attacker's share did not free once its tickets expired: %d %s", r, why);

    rrpc_ctx_destroy(actx);
    rrpc_ctx_destroy(octx);
    rrpc_broker_close(attacker);
    rrpc_broker_close(other);
    rrpc_broker_close(sb);
    rrpc_ctx_destroy(sctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_client_filling_its_replay_share_does_not_lock_out_another),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

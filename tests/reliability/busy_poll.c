/* SPDX-License-Identifier: MIT */
/*
 * Adaptive polling (RRPC_BUSY_POLL_US): after traffic a context polls instead
 * of sleeping, and once the window has passed without traffic it sleeps
 * again.  A server context (its own loop thread) and a client context
 * (driven from this thread), both polling for 20 ms after traffic, exchange
 * calls; then both go idle and the process's CPU time over an idle stretch
 * is measured.  CPU time, not wall time: a context that kept polling spends
 * about a core for each spinning loop.
 *
 * With RRPC_TEST_TRANSPORT=verbs (in the Soft-RoCE VM:
 * tests/softroce/run-suite.sh BUILD tests/reliability/busy_poll) the contexts
 * keep verbs' default polling (RRPC_VERBS_BUSY_POLL_US) instead, without the
 * CPU budget, which could end the polling before the check right after the
 * traffic: the default must leave an idle context asleep too.
 *
 * The contention stop is off (RRPC_BUSY_POLL_MIN_SHARE_PCT=0): on a loaded
 * host the client's thread may not get its CPU, and that stop then rightly
 * ends the polling before the check (busy_poll_contended tests it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <roce_rpc/rrpc.h>

#include "busy_poll.h"

#define POLL_US "20000"
#define IDLE_MS 400

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    rrpc_config *cfg;
    CHECK(rrpc_config_create(&cfg) == 0, "config");
    bool verbs = strcmp(test_transport(), "verbs") == 0;
    CHECK(rrpc_config_set(cfg, verbs ? "RRPC_BUSY_POLL_BUDGET_PCT" : "RRPC_BUSY_POLL_US",
                          verbs ? "100" : POLL_US) == 0,
          "set: %s", rrpc_ctx_last_error(NULL));
    CHECK(rrpc_config_set(cfg, "RRPC_KEEPALIVE_MS", "0") == 0 &&
              rrpc_config_set(cfg, "RRPC_BUSY_POLL_MIN_SHARE_PCT", "0") == 0,
          "keepalive and the contention stop off");
    rrpc_ctx *srv, *cli;
    CHECK(rrpc_ctx_create_with(cfg, &srv) == 0 && rrpc_ctx_create_with(cfg, &cli) == 0,
          "contexts");
    rrpc_config_destroy(cfg);
    rrpc_conn *c;
    if (echo_pair(srv, cli, &c))
        return 1;

    /* Traffic: the client's loop must have been polling right after it. */
    for (int i = 0; i < 200; i++) {
        void *out;
        size_t n;
        CHECK(rrpc_call_sync(c, "echo", "ping", 4, NULL, &out, &n) == 0, "call %d: %s", i,
              rrpc_ctx_last_error(cli));
        free(out);
    }
    int ms = -1;
    CHECK(rrpc_ctx_timeout(cli, &ms) == 0 && ms == 0,
          "right after traffic the client must be told to poll at once (timeout %d ms)", ms);

    /* Idle: both contexts must go back to sleeping. */
    drive_for(cli, 100); /* past the 20 ms window */
    double c0 = cpu_ms(), w0 = wall_ms();
    drive_for(cli, IDLE_MS);
    double used = cpu_ms() - c0, wall = wall_ms() - w0;
    printf("idle: %.1f ms CPU over %.0f ms (%.1f%% of a core)\n", used, wall,
           100.0 * used / wall);
    CHECK(rrpc_ctx_timeout(cli, &ms) == 0 && ms != 0,
          "an idle client must not be told to poll (timeout %d ms)", ms);
    CHECK(used < wall * 0.10,
          "an idle process with two polling contexts spent %.1f ms CPU in %.0f ms: "
          "a context kept polling after its window",
          used, wall);

    rrpc_conn_close(c);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
    printf("ok\n");
    return 0;
}

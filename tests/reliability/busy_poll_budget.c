/* SPDX-License-Identifier: MIT */
/*
 * The polling CPU budget (RRPC_BUSY_POLL_BUDGET_PCT): under steady traffic a
 * polling window never passes, so without the budget the loop would spin
 * for good.  A server context (its own loop thread) polls for 100 ms after
 * every frame, with a budget of 5 % of a core; a client driven from this
 * thread, not polling, sends it a call every few ms for a second.  The
 * process's CPU time over that second must stay well below the core a
 * spinning loop takes: the CPU time of the process less that of this
 * (client) thread.  CPU time, not wall time; the bound is generous (the
 * budget plus the calls' own work, 30 % of a core in all).
 *
 * With RRPC_TEST_TRANSPORT=verbs (in the Soft-RoCE VM:
 * tests/softroce/run-suite.sh BUILD tests/reliability/busy_poll_budget) the
 * server's window is verbs' own (RRPC_VERBS_BUSY_POLL_US, which leaves the
 * CQ unarmed while it polls): every call must still be answered when the
 * budget stops the polling, and the CPU bound is the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <roce_rpc/rrpc.h>

#include "busy_poll.h"

/* CPU time of the calling thread (the client's), ms. */
static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

#define BUDGET_PCT "5"
#define TRAFFIC_MS 1000

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    rrpc_config *scfg, *ccfg;
    CHECK(rrpc_config_create(&scfg) == 0 && rrpc_config_create(&ccfg) == 0, "config");
    bool verbs = strcmp(test_transport(), "verbs") == 0;
    CHECK(rrpc_config_set(scfg, verbs ? "RRPC_VERBS_BUSY_POLL_US" : "RRPC_BUSY_POLL_US",
                          "100000") == 0,
          "set: %s", rrpc_ctx_last_error(NULL));
    CHECK(rrpc_config_set(scfg, "RRPC_BUSY_POLL_BUDGET_PCT", BUDGET_PCT) == 0, "set: %s",
          rrpc_ctx_last_error(NULL));
    CHECK(rrpc_config_set(scfg, "RRPC_BUSY_POLL_BUDGET_PCT", "0") != 0,
          "a budget of 0 %% must be refused");
    CHECK(rrpc_config_set(scfg, "RRPC_KEEPALIVE_MS", "0") == 0 &&
              rrpc_config_set(ccfg, "RRPC_KEEPALIVE_MS", "0") == 0,
          "keepalive off");
    /* The client does not poll: the CPU measured is the server's polling. */
    CHECK(!verbs || rrpc_config_set(ccfg, "RRPC_VERBS_BUSY_POLL_US", "0") == 0, "set: %s",
          rrpc_ctx_last_error(NULL));
    rrpc_ctx *srv, *cli;
    CHECK(rrpc_ctx_create_with(scfg, &srv) == 0 && rrpc_ctx_create_with(ccfg, &cli) == 0,
          "contexts");
    rrpc_config_destroy(scfg);
    rrpc_config_destroy(ccfg);
    rrpc_conn *c;
    if (echo_pair(srv, cli, &c))
        return 1;

    double c0 = cpu_ms(), t0 = thread_cpu_ms(), w0 = wall_ms();
    int calls = 0;
    while (wall_ms() - w0 < TRAFFIC_MS) {
        void *out;
        size_t n;
        CHECK(rrpc_call_sync(c, "echo", "ping", 4, NULL, &out, &n) == 0, "call %d: %s", calls,
              rrpc_ctx_last_error(cli));
        free(out);
        calls++;
        drive_for(cli, 3);
    }
    double used = cpu_ms() - c0, client = thread_cpu_ms() - t0, wall = wall_ms() - w0;
    /* The server's threads: the process less this (client) thread. */
    double server = used - client;
    printf("steady traffic: %d calls, server %.1f ms CPU (client %.1f) over %.0f ms "
           "(server %.1f%% of a core, budget %s%%)\n",
           calls, server, client, wall, 100.0 * server / wall, BUDGET_PCT);
    CHECK(server < wall * 0.30,
          "a server polling under steady traffic spent %.1f ms CPU in %.0f ms: "
          "its polling budget of %s%% of a core was not kept",
          server, wall, BUDGET_PCT);

    rrpc_conn_close(c);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
    printf("ok\n");
    return 0;
}

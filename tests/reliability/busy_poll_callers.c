/* SPDX-License-Identifier: MIT */
/*
 * A thread-mode loop thread that polls after traffic lets the application's
 * threads in: between two passes it lets go of the context's lock for a
 * thread waiting for it, and a blocking call takes the loop over from it
 * (as from a sleeping loop thread) to poll for its own answer.
 *
 * The client polls for 100 ms after every frame (the largest window
 * RRPC_BUSY_POLL_US takes), with no budget and no contention stop.  20
 * times: an asynchronous call, whose answer the loop thread reads (and
 * polls after), then, once its callback ran, a blocking call.  A loop
 * thread that kept the lock while it polled made each blocking call wait
 * for the window to pass: 20 rounds took 2 s or more.  With the lock let go
 * they take a few round trips each; the check allows 1 s for all 20, half
 * of what the old behaviour could not go below, so a loaded host does not
 * fail it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>

#include <roce_rpc/rrpc.h>

#include "busy_poll.h"

#define CALLS 20

static void answered(const rrpc_result *res, void *user)
{
    __atomic_store_n((int *)user, res->status == 0 ? 1 : -1, __ATOMIC_RELEASE);
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    if (strcmp(test_transport(), "verbs") == 0) {
        printf("SKIP: the window is RRPC_BUSY_POLL_US; verbs polls its CQs under its own\n");
        return 77;
    }
    rrpc_config *cfg;
    CHECK(rrpc_config_create(&cfg) == 0, "config");
    CHECK(rrpc_config_set(cfg, "RRPC_BUSY_POLL_US", "100000") == 0 &&
              rrpc_config_set(cfg, "RRPC_BUSY_POLL_BUDGET_PCT", "100") == 0 &&
              rrpc_config_set(cfg, "RRPC_BUSY_POLL_MIN_SHARE_PCT", "0") == 0 &&
              rrpc_config_set(cfg, "RRPC_KEEPALIVE_MS", "0") == 0,
          "set: %s", rrpc_ctx_last_error(NULL));
    rrpc_ctx *srv, *cli;
    CHECK(rrpc_ctx_create_with(cfg, &srv) == 0 && rrpc_ctx_create_with(cfg, &cli) == 0,
          "contexts");
    rrpc_config_destroy(cfg);
    rrpc_conn *c;
    if (echo_pair_thread(srv, cli, &c))
        return 1;

    void *out;
    size_t n;
    double t0 = wall_ms();
    for (int i = 0; i < CALLS; i++) {
        int done = 0;
        CHECK(rrpc_call(c, "echo", "async", 5, NULL, answered, &done) == 0, "call %d: %s", i,
              rrpc_ctx_last_error(cli));
        while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) == 0)
            ;
        CHECK(done == 1, "asynchronous call %d failed", i);
        CHECK(rrpc_call_sync(c, "echo", "ping", 4, NULL, &out, &n) == 0 && n == 4 &&
                  memcmp(out, "ping", 4) == 0,
              "call %d: %s", i, rrpc_ctx_last_error(cli));
        free(out);
    }
    double took = wall_ms() - t0;
    printf("%d rounds of an asynchronous and a blocking call, the loop thread polling for "
           "100 ms after each frame: %.1f ms\n",
           CALLS, took);
    CHECK(took < 1000,
          "%d rounds took %.0f ms: the polling loop thread kept the context's lock until "
          "its window passed after each answer it read",
          CALLS, took);

    rrpc_conn_close(c);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
    printf("ok\n");
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Blocking calls made back to back on a thread-mode context whose loop
 * thread has nothing else to do run the loop themselves: each takes the
 * sleeping loop thread over before it sends (rrpc_stats.loop_takeovers
 * grows by one per call), so its answer wakes only the caller, and giving
 * the loop back does not wake the loop thread either (loop_thread_wakeups
 * barely moves).  Two wake-ups per call, the answer waking the loop thread
 * which then woke the caller, is what a blocking call cost before; a kick
 * at every give-back for a timer restarted by the call cost one.
 *
 * Then blocking calls 25 ms apart: no contention stop (see below).
 *
 * Counts, not times: the bound on wake-ups (a tenth of the calls) leaves
 * room for the wake-ups a loaded host or the context's own timers cause,
 * and fails a loop thread woken once per call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>

#include <roce_rpc/rrpc.h>

#include "busy_poll.h"

#define CALLS 400
#define PAUSED 20

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    rrpc_ctx *srv, *cli;
    CHECK(rrpc_ctx_create(&srv) == 0 && rrpc_ctx_create(&cli) == 0, "contexts: %s",
          rrpc_ctx_last_error(NULL));
    rrpc_conn *c;
    if (echo_pair_thread(srv, cli, &c))
        return 1;

    void *out;
    size_t n;
    rrpc_stats s0, s1;
    CHECK(rrpc_ctx_stats(cli, &s0) == 0, "stats");
    for (int i = 0; i < CALLS; i++) {
        CHECK(rrpc_call_sync(c, "echo", "ping", 4, NULL, &out, &n) == 0 && n == 4 &&
                  memcmp(out, "ping", 4) == 0,
              "call %d: %s", i, rrpc_ctx_last_error(cli));
        free(out);
    }
    CHECK(rrpc_ctx_stats(cli, &s1) == 0, "stats");
    unsigned long long took = s1.loop_takeovers - s0.loop_takeovers;
    unsigned long long woke = s1.loop_thread_wakeups - s0.loop_thread_wakeups;
    printf("%d blocking calls back to back: %llu ran the loop themselves, the loop thread "
           "woke %llu times\n",
           CALLS, took, woke);
    CHECK(took >= CALLS * 9 / 10,
          "only %llu of %d blocking calls took the sleeping loop thread over: the others "
          "waited for the loop thread to read their answer",
          took, CALLS);
    CHECK(woke <= CALLS / 10,
          "the loop thread woke %llu times for %d blocking calls that each ran the loop "
          "themselves: something wakes it after a call (a give-back kick, the answer)",
          woke, CALLS);

    /* Calls after pauses: each starts the polling window for its answer.
     * Charged from the loop's clock as it was when a runner last waited
     * (the previous call), a window counted the pause as polling with no
     * CPU: a contention stop after the first pause, polling held back for
     * 0.1-1.6 s.  Charged from the call's own time, the calls poll a few
     * hundred microseconds in all, too little for the governor to judge
     * contention (20 ms), loaded host or not. */
    CHECK(rrpc_ctx_stats(cli, &s0) == 0, "stats");
    for (int i = 0; i < PAUSED; i++) {
        struct timespec pause = {0, 25 * 1000 * 1000};
        nanosleep(&pause, NULL);
        CHECK(rrpc_call_sync(c, "echo", "ping", 4, NULL, &out, &n) == 0, "paused call %d: %s", i,
              rrpc_ctx_last_error(cli));
        free(out);
    }
    CHECK(rrpc_ctx_stats(cli, &s1) == 0, "stats");
    unsigned long long stops = s1.busy_poll_contended_stops - s0.busy_poll_contended_stops;
    printf("%d blocking calls 25 ms apart: %llu contention stops\n", PAUSED, stops);
    CHECK(stops == 0,
          "%llu contention stops in %d blocking calls 25 ms apart: the pauses were charged "
          "to polling",
          stops, PAUSED);

    rrpc_conn_close(c);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
    printf("ok\n");
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * Polling stops when the polling thread does not get its CPU.  The whole
 * process is pinned to one CPU, where a server context (its own loop
 * thread) polls for 100 ms after every frame with no CPU budget, a thread
 * spins, and this thread calls the server without pause.  The server's
 * loop then runs about a third of the time it polls: it must notice
 * (rrpc_stats.busy_poll_contended_stops), stop polling and sleep until
 * woken, and every call must still be answered.  Counts, not times.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roce_rpc/rrpc.h>

#include "busy_poll.h"

static volatile bool stop;

static void *spin(void *arg)
{
    (void)arg;
    while (!stop)
        ;
    return NULL;
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    CHECK(sched_setaffinity(0, sizeof(one), &one) == 0, "pin to one CPU");
    rrpc_config *scfg;
    CHECK(rrpc_config_create(&scfg) == 0, "config");
    CHECK(rrpc_config_set(scfg, "RRPC_BUSY_POLL_US", "100000") == 0 &&
              rrpc_config_set(scfg, "RRPC_BUSY_POLL_BUDGET_PCT", "100") == 0 &&
              rrpc_config_set(scfg, "RRPC_KEEPALIVE_MS", "0") == 0,
          "set: %s", rrpc_ctx_last_error(NULL));
    rrpc_ctx *srv, *cli;
    CHECK(rrpc_ctx_create_with(scfg, &srv) == 0 && rrpc_ctx_create(&cli) == 0, "contexts");
    rrpc_config_destroy(scfg);
    rrpc_conn *c;
    if (echo_pair(srv, cli, &c))
        return 1; /* the threads the library starts inherit the pinning */
    pthread_t hog;
    CHECK(pthread_create(&hog, NULL, spin, NULL) == 0, "spinning thread");
    rrpc_stats st;
    int calls = 0;
    double w0 = wall_ms();
    do {
        void *out;
        size_t n;
        CHECK(rrpc_call_sync(c, "echo", "ping", 4, NULL, &out, &n) == 0 && n == 4, "call %d: %s",
              calls, rrpc_ctx_last_error(cli));
        free(out);
        calls++;
        CHECK(rrpc_ctx_stats(srv, &st) == 0, "stats");
        /* generous: contention shows after 20 ms of polling */
    } while (st.busy_poll_contended_stops == 0 && wall_ms() - w0 < 20000);
    stop = true;
    pthread_join(hog, NULL);
    printf("%d calls in %.0f ms; the server stopped polling %llu times for contention, "
           "%llu for its budget\n",
           calls, wall_ms() - w0, (unsigned long long)st.busy_poll_contended_stops,
           (unsigned long long)st.busy_poll_budget_stops);
    CHECK(st.busy_poll_contended_stops > 0,
          "a server polling on a CPU shared with two busy threads never stopped polling");
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
    printf("ok\n");
    return 0;
}

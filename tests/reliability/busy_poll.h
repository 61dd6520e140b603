/* SPDX-License-Identifier: MIT */
/* What the busy-polling tests (busy_poll.c, busy_poll_budget.c) share: an
 * echo handler, the process's CPU time and the wall clock in ms, a driven
 * context run for a while, and a CHECK that fails main with a message. */
#ifndef RRPC_TEST_BUSY_POLL_H
#define RRPC_TEST_BUSY_POLL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <roce_rpc/rrpc.h>

#include "../common/test_uri.h"

static inline void echo(rrpc_request *req, const void *p, size_t n, void *user)
{
    (void)user;
    rrpc_respond(req, p, n);
}

/* CPU time of the whole process, ms. */
static inline double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000.0 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000.0;
}

static inline double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* Runs driven context @ctx for @ms of wall time. */
static inline void drive_for(rrpc_ctx *ctx, double ms)
{
    double end = wall_ms() + ms;
    while (wall_ms() < end)
        rrpc_ctx_progress(ctx, 10);
}

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fprintf(stderr, "\n");                                                                \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/* @srv serves "echo" on its own loop thread; *@ret_conn: @cli connected
 * to it.  0, or 1 with the reason printed. */
static inline int echo_pair(rrpc_ctx *srv, rrpc_ctx *cli, rrpc_conn **ret_conn)
{
    CHECK(rrpc_register(srv, "echo", echo, NULL) == 0, "register");
    rrpc_listener *l;
    char uri[128];
    test_listen_uri(uri, sizeof(uri));
    CHECK(rrpc_listen(srv, uri, NULL, NULL, &l) == 0, "listen: %s", rrpc_ctx_last_error(srv));
    CHECK(rrpc_ctx_start_thread(srv) == 0, "server thread");
    test_connect_uri(uri, sizeof(uri), rrpc_listener_port(l));
    CHECK(rrpc_connect_sync(cli, uri, 5000, NULL, NULL, ret_conn) == 0, "connect: %s",
          rrpc_ctx_last_error(cli));
    return 0;
}

/* echo_pair with @cli in thread mode, and one blocking call made on the
 * connection (the warm-up): 0, or 1 with the reason printed. */
static inline int echo_pair_thread(rrpc_ctx *srv, rrpc_ctx *cli, rrpc_conn **ret_conn)
{
    CHECK(rrpc_ctx_start_thread(cli) == 0, "client thread");
    if (echo_pair(srv, cli, ret_conn))
        return 1;
    void *out;
    size_t n;
    CHECK(rrpc_call_sync(*ret_conn, "echo", "warm", 4, NULL, &out, &n) == 0, "warm-up: %s",
          rrpc_ctx_last_error(cli));
    free(out);
    return 0;
}

#endif

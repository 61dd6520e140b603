/* SPDX-License-Identifier: MIT */
/*
 * A small roce-rpc process for the fault tests, killed and stopped by them.
 *   rel_server                 listens on tcp://127.0.0.1:0 (or where the
 *                              RRPC_TEST_* variables of tests/common/test_uri.h say), prints "port N",
 *                              serves echo, hold (never answers) and stats
 *                              ("conns rss_kib") until killed
 *   rel_server --client URI N  opens N connections to URI, keeps 8 echo calls
 *                              in flight on each, prints "ready" once every
 *                              connection answered, and runs until killed
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#include "../common/test_uri.h"

static atomic_int conns;
static atomic_int answered;

static void on_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)c, (void)reason, (void)user;
    atomic_fetch_add(&conns, ev == RRPC_CONN_UP ? 1 : -1);
}

static long rss_kib(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static void h_hold(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)req, (void)p, (void)len, (void)user; /* answered never; freed when the conn goes */
}

static void h_stats(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%d %ld", atomic_load(&conns), rss_kib());
    rrpc_respond(req, buf, (size_t)n);
}

static void client_cb(const rrpc_result *res, void *user)
{
    rrpc_conn *c = user;
    if (res->status != 0)
        return;
    atomic_fetch_add(&answered, 1);
    rrpc_call(c, "echo", "0123456789abcdef", 16, NULL, client_cb, c);
}

static int client(const char *uri, int n)
{
    rrpc_ctx *ctx;
    if (rrpc_ctx_create(&ctx) || rrpc_ctx_start_thread(ctx))
        return 1;
    for (int i = 0; i < n; i++) {
        rrpc_conn *c;
        if (rrpc_connect_sync(ctx, uri, 10000, NULL, NULL, &c)) {
            fprintf(stderr, "rel_server --client: %s\n", rrpc_ctx_last_error(ctx));
            return 1;
        }
        for (int k = 0; k < 8; k++)
            rrpc_call(c, "echo", "0123456789abcdef", 16, NULL, client_cb, c);
    }
    while (atomic_load(&answered) < 8 * n)
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* default dispositions: the library must not raise SIGPIPE */
    if (argc == 4 && strcmp(argv[1], "--client") == 0)
        return client(argv[2], atoi(argv[3]));
    rrpc_ctx *ctx;
    rrpc_listener *l;
    char luri[128];
    test_listen_uri(luri, sizeof(luri));
    if (rrpc_ctx_create(&ctx) || rrpc_register(ctx, "echo", h_echo, NULL) ||
        rrpc_register(ctx, "hold", h_hold, NULL) || rrpc_register(ctx, "stats", h_stats, NULL) ||
        rrpc_listen(ctx, luri, on_event, NULL, &l) || rrpc_ctx_start_thread(ctx)) {
        fprintf(stderr, "rel_server: %s\n", rrpc_ctx_last_error(ctx));
        return 1;
    }
    printf("port %d\n", rrpc_listener_port(l));
    fflush(stdout);
    for (;;)
        pause();
}

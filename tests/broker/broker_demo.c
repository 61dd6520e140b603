/* SPDX-License-Identifier: MIT */
/*
 * broker-demo: a server that registers "demo-kv" with rrpcd, and a client
 * that finds it by name and calls it (run-broker-demo.sh runs all three).
 *
 *   broker-demo server BROKER CERTDIR [HOST]   serve "add"; tcp://HOST:<any port>
 *   broker-demo client BROKER CERTDIR          connect to "demo-kv" by name, call "add"
 *
 * CERTDIR is what scripts/make-dev-certs.sh made, with the principals
 * demo-server and demo-client.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

static void h_add(rrpc_request *req, const void *p, size_t len, void *user)
{
    int64_t a, b;
    char err[128];
    if (rrpc_unpack(p, len, err, sizeof(err), "ii", &a, &b) != 0) {
        rrpc_respond_error(req, 1, err);
        return;
    }
    void *out;
    size_t n;
    if (rrpc_pack(&out, &n, "i", a + b) != 0) {
        rrpc_respond_error(req, 2, "out of memory");
        return;
    }
    rrpc_respond(req, out, n);
    free(out);
}

static volatile sig_atomic_t stop;
static void on_signal(int s)
{
    stop = 1;
}

static void log_fn(int level, const char *msg, void *user)
{
    fprintf(stderr, "%s: %s\n", (const char *)user, msg);
}

static int open_broker(const char *addr, const char *dir, const char *who, rrpc_broker **b)
{
    char ca[512], cert[512], key[512];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/%s.crt", dir, who);
    snprintf(key, sizeof(key), "%s/%s.key", dir, who);
    rrpc_broker_opts o = { .ca_file = ca, .cert_file = cert, .key_file = key,
                           .log = log_fn, .log_user = (void *)who };
    int r = rrpc_broker_open(addr, &o, b);
    if (r)
        fprintf(stderr, "%s: cannot reach rrpcd at %s: %s (%s)\n", who, addr, rrpc_strerror(r),
                rrpc_broker_last_error(NULL));
    return r;
}

static int server(const char *addr, const char *dir, const char *host)
{
    rrpc_broker *b;
    rrpc_ctx *ctx;
    rrpc_listener *l;
    if (open_broker(addr, dir, "demo-server", &b))
        return 1;
    char uri[300];
    snprintf(uri, sizeof(uri), "tcp://%s:0", host);
    int r = rrpc_ctx_create(&ctx);
    if (!r)
        r = rrpc_register(ctx, "add", h_add, NULL);
    if (!r)
        r = rrpc_broker_gate(b, ctx, "demo-kv");
    if (!r)
        r = rrpc_ctx_start_thread(ctx);
    if (!r)
        r = rrpc_listen(ctx, uri, NULL, NULL, &l);
    if (!r) {
        snprintf(uri, sizeof(uri), "tcp://%s:%d", host, rrpc_listener_port(l));
        const char *uris[] = { uri };
        r = rrpc_broker_register(b, ctx, "demo-kv", uris, 1, 0);
    }
    if (r) {
        fprintf(stderr, "demo-server: %s: %s %s\n", rrpc_strerror(r), rrpc_broker_last_error(b),
                ctx ? rrpc_ctx_last_error(ctx) : "");
        rrpc_ctx_destroy(ctx);
        rrpc_broker_close(b);
        return 1;
    }
    printf("demo-server: serving 'demo-kv' at %s, registered with rrpcd %s as '%s'; "
           "every connection needs a ticket\n", uri, addr, rrpc_broker_principal(b));
    fflush(stdout);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (!stop)
        pause();
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    return 0;
}

static int client(const char *addr, const char *dir)
{
    rrpc_broker *b;
    rrpc_ctx *ctx;
    rrpc_conn *c;
    if (open_broker(addr, dir, "demo-client", &b))
        return 1;
    int r = rrpc_ctx_create(&ctx);
    if (!r)
        r = rrpc_ctx_start_thread(ctx);
    if (!r)
        r = rrpc_connect_service(ctx, b, "demo-kv", 5000, NULL, NULL, &c);
    if (r) {
        fprintf(stderr, "demo-client: cannot connect to 'demo-kv': %s: %s\n", rrpc_strerror(r),
                rrpc_broker_last_error(b));
        rrpc_ctx_destroy(ctx);
        rrpc_broker_close(b);
        return 1;
    }
    void *req, *resp;
    size_t len, rlen;
    int64_t sum = 0;
    char err[128];
    rrpc_pack(&req, &len, "ii", (int64_t)40, (int64_t)2);
    r = rrpc_call_sync(c, "add", req, len, NULL, &resp, &rlen);
    free(req);
    if (r == 0) {
        r = rrpc_unpack(resp, rlen, err, sizeof(err), "i", &sum);
        free(resp);
    }
    if (r == 0)
        printf("demo-client: found 'demo-kv' through rrpcd, connected with a ticket over %s; "
               "add(40, 2) = %lld\n", rrpc_conn_transport(c), (long long)sum);
    else
        fprintf(stderr, "demo-client: add failed: %s: %s\n", rrpc_strerror(r),
                rrpc_ctx_last_error(ctx));
    rrpc_conn_close(c);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    return r == 0 && sum == 42 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "server"))
        return server(argv[2], argv[3], argc > 4 ? argv[4] : "127.0.0.1");
    if (argc == 4 && !strcmp(argv[1], "client"))
        return client(argv[2], argv[3]);
    fprintf(stderr, "usage: %s server BROKER CERTDIR [HOST] | client BROKER CERTDIR\n", argv[0]);
    return 2;
}

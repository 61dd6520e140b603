/* SPDX-License-Identifier: MIT */
/*
 * rrpc-demo: an RPC server and a client of roce-rpc.
 *
 *   rrpc-demo server URI          serve "add" and "checksum", and a 16 MiB
 *                                 region clients may WRITE into
 *   rrpc-demo client URI          call "add" (msgpack arguments), WRITE a
 *                                 16 MiB float32 buffer into the server's
 *                                 region, and have the server verify it
 *
 * URI is tcp://HOST:PORT or rdma://HOST:PORT (see docs/).  The client says
 * which transport carried the calls.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#define TENSOR_FLOATS (4u << 20) /* 16 MiB of float32 */

static rrpc_region *server_region;
static float *server_mem;

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

static void h_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_token t;
    uint8_t buf[RRPC_TOKEN_SIZE];
    if (rrpc_region_token(server_region, rrpc_request_conn(req), &t) != 0) {
        rrpc_respond_error(req, 3, "cannot make a token for this connection");
        return;
    }
    rrpc_token_encode(&t, buf);
    rrpc_respond(req, buf, sizeof(buf));
}

/* Checks the buffer the client wrote: element i must equal i * 0.5f. */
static void h_check(rrpc_request *req, const void *p, size_t len, void *user)
{
    uint64_t bad = 0;
    for (uint32_t i = 0; i < TENSOR_FLOATS; i++)
        if (server_mem[i] != (float)i * 0.5f)
            bad++;
    void *out;
    size_t n;
    rrpc_pack(&out, &n, "u", bad);
    rrpc_respond(req, out, n);
    free(out);
}

static volatile sig_atomic_t stop;
static void on_signal(int s)
{
    stop = 1;
}

static int die(rrpc_ctx *ctx, int r, const char *what)
{
    fprintf(stderr, "rrpc-demo: %s: %s (%s)\n  %s\n", what, rrpc_strerror(r), rrpc_err_name(r),
            ctx ? rrpc_ctx_last_error(ctx) : "");
    return 1;
}

static int serve(const char *uri)
{
    rrpc_ctx *ctx;
    int r = rrpc_ctx_create(&ctx);
    if (r)
        return die(NULL, r, "context");
    server_mem = calloc(TENSOR_FLOATS, sizeof(float));
    if ((r = rrpc_mem_reg(ctx, server_mem, TENSOR_FLOATS * sizeof(float),
                          RRPC_ACCESS_REMOTE_WRITE | RRPC_ACCESS_REMOTE_READ, &server_region)))
        return die(ctx, r, "register memory");
    rrpc_register(ctx, "add", h_add, NULL);
    rrpc_register(ctx, "tensor_token", h_token, NULL);
    rrpc_register(ctx, "tensor_check", h_check, NULL);
    rrpc_listener *l;
    if ((r = rrpc_listen(ctx, uri, NULL, NULL, &l)))
        return die(ctx, r, "listen");
    printf("rrpc-demo server: listening on %s\n", uri);
    fflush(stdout);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    /* Driven mode: this thread runs the loop. */
    while (!stop)
        rrpc_ctx_progress(ctx, 200);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(ctx);
    free(server_mem);
    return 0;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int client(const char *uri)
{
    rrpc_ctx *ctx;
    int r = rrpc_ctx_create(&ctx);
    if (r)
        return die(NULL, r, "context");
    rrpc_ctx_start_thread(ctx);
    rrpc_conn *c = NULL;
    for (int i = 0; i < 50; i++) { /* the server may still be starting */
        r = rrpc_connect_sync(ctx, uri, 5000, NULL, NULL, &c);
        if (r != -ECONNREFUSED)
            break;
        usleep(100000);
    }
    if (r)
        return die(ctx, r, "connect");
    printf("rrpc-demo client: connected to %s over the %s transport\n", uri,
           rrpc_conn_transport(c));

    void *req, *resp;
    size_t reqlen, resplen;
    rrpc_pack(&req, &reqlen, "ii", (int64_t)40, (int64_t)2);
    double t0 = now_ms();
    r = rrpc_call_sync(c, "add", req, reqlen, NULL, &resp, &resplen);
    double t1 = now_ms();
    free(req);
    if (r)
        return die(ctx, r, "call add");
    int64_t sum = 0;
    rrpc_unpack(resp, resplen, NULL, 0, "i", &sum);
    free(resp);
    printf("rrpc-demo client: add(40, 2) = %lld  (%.3f ms round trip)\n", (long long)sum, t1 - t0);
    if (sum != 42)
        return 1;

    /* A 16 MiB float32 buffer, written one-sided into the server's memory. */
    size_t bytes = TENSOR_FLOATS * sizeof(float);
    float *t = malloc(bytes);
    for (uint32_t i = 0; i < TENSOR_FLOATS; i++)
        t[i] = (float)i * 0.5f;
    rrpc_region *lr;
    if ((r = rrpc_mem_reg(ctx, t, bytes, 0, &lr)))
        return die(ctx, r, "register memory");
    if ((r = rrpc_call_sync(c, "tensor_token", NULL, 0, NULL, &resp, &resplen)))
        return die(ctx, r, "get the server's token");
    rrpc_token tok;
    rrpc_token_decode(resp, resplen, &tok);
    free(resp);
    t0 = now_ms();
    if ((r = rrpc_write_sync(c, lr, 0, &tok, 0, bytes, NULL)))
        return die(ctx, r, "one-sided WRITE");
    t1 = now_ms();
    if ((r = rrpc_call_sync(c, "tensor_check", NULL, 0, NULL, &resp, &resplen)))
        return die(ctx, r, "call tensor_check");
    uint64_t bad = 1;
    rrpc_unpack(resp, resplen, NULL, 0, "u", &bad);
    free(resp);
    printf("rrpc-demo client: wrote a %zu MiB float32 buffer one-sided in %.1f ms (%.0f MB/s); "
           "server verified it: %s\n",
           bytes >> 20, t1 - t0, bytes / 1e3 / (t1 - t0), bad == 0 ? "all elements match" : "MISMATCH");
    rrpc_mem_dereg(lr);
    free(t);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(ctx);
    return bad == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: rrpc-demo server|client tcp://HOST:PORT | rdma://HOST:PORT\n");
        return 2;
    }
    return strcmp(argv[1], "server") == 0 ? serve(argv[2]) : client(argv[2]);
}

/* SPDX-License-Identifier: MIT */
/*
 * rrpc-demo: the main job of roce-rpc in two processes and a broker.
 *
 *   rrpc-demo server URI BROKER CERTDIR   listen on URI (tcp://HOST:0 or
 *       rdma://HOST:0), register the service "demo" with rrpcd at BROKER, and
 *       serve "add" and tensors; only clients with a ticket from rrpcd get in
 *   rrpc-demo client BROKER CERTDIR       find "demo" through rrpcd, call
 *       add(40, 2), send a 16 MiB float32 tensor that lands in place in the
 *       server's memory, and have the server confirm every element
 *
 * CERTDIR holds what scripts/make-dev-certs.sh makes for the principals
 * demo-server and demo-client.  examples/run-demo.sh runs all of it.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#define ROWS 2048
#define COLS 2048 /* 16 MiB of float32 */

static float expected(uint64_t i)
{
    return (float)(i % 1000003) * 0.5f;
}

/* ---- server ------------------------------------------------------------- */

static rrpc_region *landing; /* where tensors land: the server's own memory */
static float *landing_mem;
static volatile int64_t mismatches = -1; /* of the last tensor, once landed */

static void h_add(rrpc_request *req, const void *p, size_t len, void *user)
{
    int64_t a, b;
    char err[128];
    void *out;
    size_t n;
    if (rrpc_unpack(p, len, err, sizeof(err), "ii", &a, &b) != 0) {
        rrpc_respond_error(req, 1, err);
        return;
    }
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum)) { /* numbers from the network: check */
        rrpc_respond_error(req, 3, "a + b does not fit in a 64-bit signed integer");
        return;
    }
    if (rrpc_pack(&out, &n, "i", sum) != 0) {
        rrpc_respond_error(req, 2, "out of memory");
        return;
    }
    rrpc_respond(req, out, n);
    free(out);
}

/* The sender offers a tensor: it lands at the start of our region. */
static int tensor_alloc(rrpc_conn *conn, const char *name, const rrpc_tensor *in,
                        rrpc_tensor *dest, void *user)
{
    if (in->dtype != RRPC_DTYPE_F32 || rrpc_tensor_nbytes(in) > rrpc_region_len(landing))
        return 22; /* an application code: "does not fit" */
    dest->region = landing;
    dest->offset = 0;
    return 0;
}

static void tensor_done(rrpc_conn *conn, const char *name, const rrpc_tensor *t, int status,
                        void *user)
{
    if (status != 0) {
        printf("demo-server: tensor '%s' failed: %s\n", name, rrpc_strerror(status));
        return;
    }
    uint64_t n = rrpc_tensor_numel(t), bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += landing_mem[i] != expected(i);
    mismatches = (int64_t)bad;
    printf("demo-server: tensor '%s' %s (%lld, %lld) landed in place at %p over %s: %s\n", name,
           rrpc_dtype_name(t->dtype), (long long)t->shape[0], (long long)t->shape[1],
           (void *)landing_mem, rrpc_conn_transport(conn),
           bad ? "MISMATCH" : "every element matches");
    fflush(stdout);
}

static void h_tensor_check(rrpc_request *req, const void *p, size_t len, void *user)
{
    void *out;
    size_t n;
    rrpc_pack(&out, &n, "i", (int64_t)mismatches);
    rrpc_respond(req, out, n);
    free(out);
}

static volatile sig_atomic_t stop;
static void on_signal(int s)
{
    stop = 1;
}

static int open_broker(const char *addr, const char *dir, const char *who, rrpc_broker **b)
{
    char ca[512], cert[512], key[512];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/%s.crt", dir, who);
    snprintf(key, sizeof(key), "%s/%s.key", dir, who);
    rrpc_broker_opts o = {.ca_file = ca, .cert_file = cert, .key_file = key};
    int r = rrpc_broker_open(addr, &o, b);
    if (r)
        fprintf(stderr, "%s: cannot reach rrpcd at %s: %s (%s)\n", who, addr, rrpc_strerror(r),
                rrpc_broker_last_error(NULL));
    return r;
}

static int fail(const char *who, int r, rrpc_ctx *ctx, rrpc_broker *b)
{
    fprintf(stderr, "%s: %s (%s)\n  %s%s%s\n", who, rrpc_strerror(r), rrpc_err_name(r),
            ctx ? rrpc_ctx_last_error(ctx) : "", b ? " " : "", b ? rrpc_broker_last_error(b) : "");
    return 1;
}

static int server(const char *uri, const char *broker, const char *certs)
{
    rrpc_broker *b = NULL;
    rrpc_ctx *ctx = NULL;
    rrpc_listener *l = NULL;
    rrpc_tensor_server *ts = NULL;
    if (open_broker(broker, certs, "demo-server", &b))
        return 1;
    int r = rrpc_ctx_create(&ctx);
    if (r)
        return fail("demo-server", r, NULL, b);
    landing_mem = calloc((size_t)ROWS * COLS, sizeof(float));
    if ((r = rrpc_mem_reg(ctx, landing_mem, (size_t)ROWS * COLS * sizeof(float),
                          RRPC_ACCESS_REMOTE_WRITE, &landing)) ||
        (r = rrpc_register(ctx, "add", h_add, NULL)) ||
        (r = rrpc_register(ctx, "tensor_check", h_tensor_check, NULL)) ||
        (r = rrpc_tensor_serve(ctx, tensor_alloc, tensor_done, NULL, &ts)) ||
        (r = rrpc_broker_gate(b, ctx, "demo")) || (r = rrpc_ctx_start_thread(ctx)) ||
        (r = rrpc_listen(ctx, uri, NULL, NULL, &l)))
        return fail("demo-server", r, ctx, b);
    /* Register the endpoint with the port the listener got. */
    char ep[300];
    snprintf(ep, sizeof(ep), "%.*s:%d", (int)(strrchr(uri, ':') - uri), uri,
             rrpc_listener_port(l));
    const char *eps[] = {ep};
    if ((r = rrpc_broker_register(b, ctx, "demo", eps, 1, 0)))
        return fail("demo-server", r, ctx, b);
    printf("demo-server: serving 'demo' at %s, registered with rrpcd at %s as '%s'; "
           "every connection needs a ticket from rrpcd\n",
           ep, broker, rrpc_broker_principal(b));
    fflush(stdout);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (!stop)
        pause();
    rrpc_tensor_server_close(ts);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    free(landing_mem);
    return 0;
}

/* ---- client ------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int client(const char *broker, const char *certs)
{
    rrpc_broker *b = NULL;
    rrpc_ctx *ctx = NULL;
    rrpc_conn *c = NULL;
    if (open_broker(broker, certs, "demo-client", &b))
        return 1;
    int r = rrpc_ctx_create(&ctx);
    if (r || (r = rrpc_ctx_start_thread(ctx)))
        return fail("demo-client", r, ctx, b);
    double t0 = now_ms();
    if ((r = rrpc_connect_service(ctx, b, "demo", 10000, NULL, NULL, &c)))
        return fail("demo-client: connect to 'demo'", r, ctx, b);
    char peer[80] = "?";
    rrpc_conn_peer(c, peer, sizeof(peer));
    printf("demo-client: found 'demo' through rrpcd and connected with a ticket to %s over the "
           "%s transport (%.1f ms)\n",
           peer, rrpc_conn_transport(c), now_ms() - t0);

    void *req, *resp;
    size_t len, rlen;
    int64_t sum = 0;
    rrpc_pack(&req, &len, "ii", (int64_t)40, (int64_t)2);
    t0 = now_ms();
    r = rrpc_call_sync(c, "add", req, len, NULL, &resp, &rlen);
    double t1 = now_ms();
    free(req);
    if (r)
        return fail("demo-client: add", r, ctx, b);
    rrpc_unpack(resp, rlen, NULL, 0, "i", &sum);
    free(resp);
    printf("demo-client: add(40, 2) = %lld (%.3f ms round trip)\n", (long long)sum, t1 - t0);

    size_t bytes = (size_t)ROWS * COLS * sizeof(float);
    float *w = malloc(bytes);
    for (uint64_t i = 0; i < (uint64_t)ROWS * COLS; i++)
        w[i] = expected(i);
    rrpc_region *src;
    rrpc_tensor t;
    int64_t shape[2] = {ROWS, COLS};
    if ((r = rrpc_mem_reg(ctx, w, bytes, 0, &src)) ||
        (r = rrpc_tensor_init(&t, RRPC_DTYPE_F32, 2, shape, src, 0)))
        return fail("demo-client: tensor", r, ctx, b);
    rrpc_tensor_send_opts so = {.qos_class = RRPC_CLASS_BULK};
    t0 = now_ms();
    r = rrpc_tensor_send_with_sync(c, "weights", &t, &so);
    t1 = now_ms();
    if (r)
        return fail("demo-client: send tensor", r, ctx, b);
    int64_t bad = -1;
    if ((r = rrpc_call_sync(c, "tensor_check", NULL, 0, NULL, &resp, &rlen)))
        return fail("demo-client: tensor_check", r, ctx, b);
    rrpc_unpack(resp, rlen, NULL, 0, "i", &bad);
    free(resp);
    printf("demo-client: sent tensor 'weights' float32 (%d, %d), %zu MiB, in %.1f ms "
           "(%.0f MB/s); the server says: %s\n",
           ROWS, COLS, bytes >> 20, t1 - t0, bytes / 1e3 / (t1 - t0),
           bad == 0 ? "every element matches" : "MISMATCH");
    rrpc_mem_dereg(src);
    free(w);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    return sum == 42 && bad == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "server") == 0)
        return server(argv[2], argv[3], argv[4]);
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3]);
    fprintf(stderr, "usage: rrpc-demo server tcp://HOST:0|rdma://HOST:0 BROKER CERTDIR\n"
                    "       rrpc-demo client BROKER CERTDIR\n"
                    "(examples/run-demo.sh starts rrpcd, a server and a client)\n");
    return 2;
}

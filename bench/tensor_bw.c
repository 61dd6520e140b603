/* SPDX-License-Identifier: MIT */
/*
 * rrpc-tensor-bw URI BYTES COUNT: the C reference for tensor throughput.
 * One process, two thread-mode contexts (a receiver listening on URI,
 * port 0, and a sender): COUNT sends of a float32 tensor of BYTES from a
 * registered buffer into a registered destination, each timed from the
 * send to its completion (the receiver's done callback has run).  Prints
 * one line per send: "send K: BYTES bytes in S s = MiB/s", then
 * "cpu_s: U S" (user and system seconds of the process).  Used by
 * bench/python-bench.py beside the Python bindings' figures.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <roce_rpc/rrpc.h>
#include <roce_rpc/tensor.h>

static rrpc_region *g_dst;

static int on_alloc(rrpc_conn *c, const char *name, const rrpc_tensor *in, rrpc_tensor *d,
                    void *user)
{
    (void)c;
    (void)name;
    (void)in;
    (void)user;
    d->region = g_dst; /* C-contiguous, as pre-filled */
    d->offset = 0;
    return 0;
}

static void on_done(rrpc_conn *c, const char *name, const rrpc_tensor *d, int status, void *user)
{
    (void)c;
    (void)name;
    (void)d;
    (void)status;
    (void)user;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, int r, rrpc_ctx *ctx)
{
    fprintf(stderr, "rrpc-tensor-bw: %s: %s (%s)\n", what, rrpc_strerror(r),
            ctx ? rrpc_ctx_last_error(ctx) : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: rrpc-tensor-bw URI BYTES COUNT  (URI: tcp://127.0.0.1:0)\n");
        return 2;
    }
    char *end;
    unsigned long long bytes = strtoull(argv[2], &end, 0);
    long count = strtol(argv[3], NULL, 0);
    if (*end || bytes < 4 || bytes % 4 || bytes > (1ull << 34) || count < 1 || count > 1000) {
        fprintf(stderr, "rrpc-tensor-bw: BYTES must be a multiple of 4 up to 16 GiB, COUNT "
                        "1..1000\n");
        return 2;
    }
    rrpc_ctx *srv, *cli;
    int r = rrpc_ctx_create(&srv);
    if (r || (r = rrpc_ctx_create(&cli)))
        return fail("rrpc_ctx_create", r, NULL);
    void *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst)
        return fail("malloc", -ENOMEM, NULL);
    /* Both touched once, as a long-lived buffer would be.  Not with zeros:
     * the compiler turns malloc + memset(0) into calloc, which leaves fresh
     * pages untouched, and the first receive paid for faulting them in. */
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    rrpc_region *sreg;
    if ((r = rrpc_mem_reg(cli, src, bytes, 0, &sreg)))
        return fail("register the source", r, cli);
    if ((r = rrpc_mem_reg(srv, dst, bytes, RRPC_ACCESS_REMOTE_WRITE, &g_dst)))
        return fail("register the destination", r, srv);
    rrpc_tensor_server *ts;
    rrpc_tensor_server_opts o = {.max_bytes = bytes};
    if ((r = rrpc_tensor_serve_with(srv, on_alloc, on_done, NULL, &o, &ts)))
        return fail("rrpc_tensor_serve_with", r, srv);
    rrpc_listener *l;
    if ((r = rrpc_listen(srv, argv[1], NULL, NULL, &l)))
        return fail("listen", r, srv);
    if ((r = rrpc_ctx_start_thread(srv)) || (r = rrpc_ctx_start_thread(cli)))
        return fail("start_thread", r, NULL);
    char uri[300];
    const char *colon = strrchr(argv[1], ':');
    snprintf(uri, sizeof(uri), "%.*s:%d", (int)(colon ? colon - argv[1] : 0), argv[1],
             rrpc_listener_port(l));
    rrpc_conn *conn;
    if ((r = rrpc_connect_sync(cli, uri, 10000, NULL, NULL, &conn)))
        return fail("connect", r, cli);
    rrpc_tensor t;
    int64_t n = (int64_t)(bytes / 4);
    if ((r = rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, &n, sreg, 0)))
        return fail("rrpc_tensor_init", r, cli);
    for (long k = 0; k < count; k++) {
        double t0 = now_s();
        if ((r = rrpc_tensor_send_with_sync(conn, "t", &t, NULL)))
            return fail("send", r, cli);
        double dt = now_s() - t0;
        printf("send %ld: %llu bytes in %.6f s = %.1f MiB/s\n", k, bytes, dt,
               (double)bytes / dt / (1024.0 * 1024.0));
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("cpu_s: %.3f %.3f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    rrpc_conn_close(conn);
    rrpc_ctx_destroy(cli);
    rrpc_tensor_server_close(ts);
    rrpc_ctx_destroy(srv);
    free(src);
    free(dst);
    return 0;
}

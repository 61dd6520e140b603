/* SPDX-License-Identifier: MIT */
/*
 * tensor_transfer: a float32 tensor lands in place in the receiver's memory,
 * sender and receiver in one process.
 *
 *   tensor_transfer [LISTEN_URI [CLIENT_SRC]]    (default tcp://127.0.0.1:0)
 *
 * The receiver serves tensors: its alloc callback places an incoming
 * tensor at the start of its registered region, its done callback runs when
 * every byte has landed.  The sender sends a 512 x 1024 float32 tensor from
 * the middle of its own registered buffer, then a transposed (strided) view
 * of a small one, and the receiver checks every element of both.  Exits 0
 * when everything matched, 1 otherwise.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roce_rpc/rrpc.h>

#define ROWS 512
#define COLS 1024

static float *landing_mem;
static rrpc_region *landing;
static _Atomic long bad = -1; /* mismatches in the last tensor, once it landed */

static float value(int64_t r, int64_t c)
{
    return (float)(r * 1000 + c);
}

/* Where an offered tensor lands: the start of our region, row-major. */
static int on_alloc(rrpc_conn *conn, const char *name, const rrpc_tensor *in, rrpc_tensor *dest,
                    void *user)
{
    if (in->dtype != RRPC_DTYPE_F32 || in->ndim != 2 ||
        rrpc_tensor_nbytes(in) > rrpc_region_len(landing))
        return 22; /* an application code: the sender's completion gets it */
    dest->region = landing;
    dest->offset = 0;
    return 0;
}

/* Every byte is in landing_mem: check it.  dest->shape is [rows, cols]. */
static void on_done(rrpc_conn *conn, const char *name, const rrpc_tensor *dest, int status,
                    void *user)
{
    long n = 0;
    int transposed = strcmp(name, "transposed") == 0;
    for (int64_t r = 0; status == 0 && r < dest->shape[0]; r++)
        for (int64_t c = 0; c < dest->shape[1]; c++)
            n += landing_mem[r * dest->shape[1] + c] != (transposed ? value(c, r) : value(r, c));
    atomic_store(&bad, status == 0 ? n : -2);
}

static int check(rrpc_ctx *ctx, const char *what, int r)
{
    if (r != 0)
        fprintf(stderr, "tensor_transfer: %s: %s (%s): %s\n", what, rrpc_strerror(r),
                rrpc_err_name(r), ctx ? rrpc_ctx_last_error(ctx) : "");
    return r != 0;
}

int main(int argc, char **argv)
{
    const char *listen_uri = argc > 1 ? argv[1] : "tcp://127.0.0.1:0";
    const char *src = argc > 2 ? argv[2] : NULL;
    rrpc_ctx *srv = NULL, *cli = NULL;
    rrpc_listener *l = NULL;
    rrpc_conn *conn = NULL;
    rrpc_tensor_server *ts = NULL;
    rrpc_region *send_r = NULL;
    size_t bytes = (size_t)ROWS * COLS * sizeof(float), head = 4096;
    float *send_mem = malloc(head + bytes);
    int failed = 1;

    landing_mem = calloc(1, bytes);
    if (!landing_mem || !send_mem ||
        check(NULL, "server context", rrpc_ctx_create(&srv)) ||
        check(srv, "mem_reg", rrpc_mem_reg(srv, landing_mem, bytes, RRPC_ACCESS_REMOTE_WRITE,
                                           &landing)) ||
        check(srv, "tensor_serve", rrpc_tensor_serve(srv, on_alloc, on_done, NULL, &ts)) ||
        check(srv, "server thread", rrpc_ctx_start_thread(srv)) ||
        check(srv, listen_uri, rrpc_listen(srv, listen_uri, NULL, NULL, &l)))
        goto out;

    char uri[300];
    snprintf(uri, sizeof(uri), "%.*s:%d%s%s", (int)(strrchr(listen_uri, ':') - listen_uri),
             listen_uri, rrpc_listener_port(l), src ? "?src=" : "", src ? src : "");
    if (check(NULL, "client context", rrpc_ctx_create(&cli)) ||
        check(cli, "client thread", rrpc_ctx_start_thread(cli)) ||
        check(cli, uri, rrpc_connect_sync(cli, uri, 5000, NULL, NULL, &conn)) ||
        check(cli, "mem_reg", rrpc_mem_reg(cli, send_mem, head + bytes, 0, &send_r)))
        goto out;

    /* A contiguous tensor that starts @head bytes into the sender's region. */
    float *m = (float *)((char *)send_mem + head);
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < COLS; c++)
            m[r * COLS + c] = value(r, c);
    rrpc_tensor t;
    int64_t shape[2] = {ROWS, COLS};
    rrpc_tensor_send_opts so = {.qos_class = RRPC_CLASS_BULK}; /* zeroed: every default */
    if (check(cli, "tensor_init", rrpc_tensor_init(&t, RRPC_DTYPE_F32, 2, shape, send_r, head)) ||
        check(cli, "send", rrpc_tensor_send_with_sync(conn, "activations", &t, &so)))
        goto out;
    if (atomic_load(&bad) != 0) { /* the done callback ran before the send completed */
        fprintf(stderr, "tensor_transfer: %ld elements differ\n", atomic_load(&bad));
        goto out;
    }

    /* A transposed view of the top-left 64 x 32 block: strides swapped, so it
     * goes one element per WRITE (correct but slow; see rrpc_tensor_send_with). */
    atomic_store(&bad, -1);
    t.shape[0] = 32, t.shape[1] = 64;
    t.strides[0] = sizeof(float), t.strides[1] = COLS * sizeof(float);
    if (check(cli, "validate", rrpc_tensor_validate(&t)) ||
        check(cli, "send transposed", rrpc_tensor_send_with_sync(conn, "transposed", &t, NULL)))
        goto out;
    if (atomic_load(&bad) != 0) {
        fprintf(stderr, "tensor_transfer: transposed: %ld elements differ\n", atomic_load(&bad));
        goto out;
    }
    printf("tensor_transfer: %dx%d float32 (%zu KiB) and a 32x64 transposed view landed in "
           "place over %s\n", ROWS, COLS, bytes >> 10, rrpc_conn_transport(conn));
    failed = 0;
out:
    rrpc_conn_close(conn);
    rrpc_mem_dereg(send_r);
    rrpc_ctx_destroy(cli);
    rrpc_tensor_server_close(ts);
    rrpc_listener_close(l);
    rrpc_mem_dereg(landing);
    rrpc_ctx_destroy(srv);
    free(landing_mem);
    free(send_mem);
    return failed;
}

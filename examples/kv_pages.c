/* SPDX-License-Identifier: MIT */
/*
 * kv_pages: a batch of KV-cache pages copied into a peer's page pool,
 * prefill side and decode side in one process.
 *
 *   kv_pages [LISTEN_URI [CLIENT_SRC]]     (default tcp://127.0.0.1:0)
 *
 * The decode side (the server) owns a pool of 64 pages of 16 KiB and hands
 * its KV token to the prefill side through an RPC ("kv.token").  The prefill
 * side copies 10 of its 32 pages into chosen destination pages with one call:
 * runs consecutive on both sides become one WRITE each, and the decode side's
 * notify callback receives the batch id once every page has landed.  Then a
 * bad batch (the same destination twice) is refused before anything moves.
 * Exits 0 when every page matched, 1 otherwise.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <roce_rpc/rrpc.h>

#define PAGE (16u << 10)
#define SRC_PAGES 32
#define DST_PAGES 64
#define BATCH_ID 7u

static rrpc_kv_pool *dst_pool;
static _Atomic uint32_t batch_done;

static void h_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_kv_token tok;
    uint8_t wire[RRPC_KV_TOKEN_SIZE];
    int r = rrpc_kv_pool_token(dst_pool, rrpc_request_conn(req), &tok);
    if (r != 0) {
        rrpc_respond_error(req, 1, rrpc_strerror(r));
        return;
    }
    rrpc_kv_token_encode(&tok, wire);
    rrpc_respond(req, wire, sizeof(wire));
}

static void on_notify(rrpc_conn *conn, uint32_t imm, void *user)
{
    atomic_store(&batch_done, imm);
}

static int check(rrpc_ctx *ctx, const char *what, int r)
{
    if (r != 0)
        fprintf(stderr, "kv_pages: %s: %s (%s): %s\n", what, rrpc_strerror(r), rrpc_err_name(r),
                ctx ? rrpc_ctx_last_error(ctx) : "");
    return r != 0;
}

int main(int argc, char **argv)
{
    const char *listen_uri = argc > 1 ? argv[1] : "tcp://127.0.0.1:0";
    const char *src = argc > 2 ? argv[2] : NULL;
    rrpc_ctx *srv = NULL, *cli = NULL;
    rrpc_listener *l = NULL;
    rrpc_conn *conn = NULL;
    rrpc_kv_pool *src_pool = NULL;
    uint8_t *src_mem = malloc((size_t)SRC_PAGES * PAGE);
    uint8_t *dst_mem = calloc(DST_PAGES, PAGE);
    int failed = 1;

    for (size_t i = 0; src_mem && i < (size_t)SRC_PAGES * PAGE; i++)
        src_mem[i] = (uint8_t)(i / PAGE + 1); /* page k is full of k + 1 */
    if (!src_mem || !dst_mem || check(NULL, "server context", rrpc_ctx_create(&srv)) ||
        check(srv, "pool", rrpc_kv_pool_reg(srv, dst_mem, PAGE, DST_PAGES, &dst_pool)) ||
        check(srv, "register", rrpc_register(srv, "kv.token", h_token, NULL)))
        goto out;
    rrpc_ctx_set_notify(srv, on_notify, NULL);
    if (check(srv, "server thread", rrpc_ctx_start_thread(srv)) ||
        check(srv, listen_uri, rrpc_listen(srv, listen_uri, NULL, NULL, &l)))
        goto out;

    char uri[300];
    snprintf(uri, sizeof(uri), "%.*s:%d%s%s", (int)(strrchr(listen_uri, ':') - listen_uri),
             listen_uri, rrpc_listener_port(l), src ? "?src=" : "", src ? src : "");
    if (check(NULL, "client context", rrpc_ctx_create(&cli)) ||
        check(cli, "client thread", rrpc_ctx_start_thread(cli)) ||
        check(cli, uri, rrpc_connect_sync(cli, uri, 5000, NULL, NULL, &conn)) ||
        check(cli, "pool", rrpc_kv_pool_reg(cli, src_mem, PAGE, SRC_PAGES, &src_pool)))
        goto out;

    void *wire = NULL;
    size_t wire_len = 0;
    rrpc_kv_token tok;
    if (check(cli, "kv.token", rrpc_call_sync(conn, "kv.token", NULL, 0, NULL, &wire, &wire_len)))
        goto out;
    int r = rrpc_kv_token_decode(wire, wire_len, &tok);
    free(wire);
    if (check(cli, "kv_token_decode", r))
        goto out;

    /* 10 pages: 3..8 -> 40..45 are consecutive on both sides and go as one
     * WRITE, the other four as one each: 5 WRITEs. */
    const rrpc_kv_pair pairs[] = {{3, 40}, {4, 41}, {5, 42}, {6, 43}, {7, 44},
                                  {8, 45}, {0, 10}, {1, 12}, {31, 63}, {20, 0}};
    size_t n = sizeof(pairs) / sizeof(pairs[0]), writes = 0;
    rrpc_op_opts o = {.qos_class = RRPC_CLASS_BULK, .notify = 1, .imm = BATCH_ID};
    if (check(cli, "kv_transfer", rrpc_kv_transfer_sync(conn, src_pool, &tok, pairs, n, &o,
                                                        &writes)))
        goto out;
    for (int i = 0; i < 5000 && atomic_load(&batch_done) == 0; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (atomic_load(&batch_done) != BATCH_ID || writes != 5) {
        fprintf(stderr, "kv_pages: notification %u, %zu WRITEs (expected %u, 5)\n",
                (unsigned)atomic_load(&batch_done), writes, BATCH_ID);
        goto out;
    }
    for (size_t p = 0; p < DST_PAGES; p++) { /* untouched pages must stay 0 */
        uint8_t want = 0;
        for (size_t i = 0; i < n; i++)
            if (pairs[i].dst == p)
                want = (uint8_t)(pairs[i].src + 1);
        const uint8_t *pg = rrpc_kv_pool_page(dst_pool, p);
        for (size_t b = 0; b < PAGE; b++)
            if (pg[b] != want) {
                fprintf(stderr, "kv_pages: page %zu byte %zu is %u, expected %u\n", p, b, pg[b],
                        want);
                goto out;
            }
    }

    /* The same destination twice: refused at once, nothing written. */
    const rrpc_kv_pair dup[] = {{0, 1}, {2, 1}};
    r = rrpc_kv_transfer_sync(conn, src_pool, &tok, dup, 2, NULL, NULL);
    if (r != -EEXIST || ((uint8_t *)rrpc_kv_pool_page(dst_pool, 1))[0] != 0) {
        fprintf(stderr, "kv_pages: duplicate batch returned %s\n", rrpc_err_name(r));
        goto out;
    }
    printf("kv_pages: %zu pages (%zu KiB) in %zu WRITEs over %s, notification %u; a duplicate "
           "destination was refused (%s)\n", n, n * PAGE >> 10, writes,
           rrpc_conn_transport(conn), BATCH_ID, rrpc_err_name(r));
    failed = 0;
out:
    rrpc_conn_close(conn);
    rrpc_kv_pool_dereg(src_pool);
    rrpc_ctx_destroy(cli);
    rrpc_listener_close(l);
    rrpc_kv_pool_dereg(dst_pool);
    rrpc_ctx_destroy(srv);
    free(src_mem);
    free(dst_mem);
    return failed;
}

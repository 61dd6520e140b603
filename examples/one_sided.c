/* SPDX-License-Identifier: MIT */
/*
 * one_sided: registered memory, a token, and remote WRITE/READ with a
 * notification, server and client in one process.
 *
 *   one_sided [LISTEN_URI [CLIENT_SRC]]      (default tcp://127.0.0.1:0)
 *
 * The server registers a 1 MiB buffer with remote read and write rights and
 * hands its token to the client through an RPC ("buf.token").  The client
 * WRITEs 256 KiB into it with a notification (the server's notify callback
 * receives the value once the bytes have landed), READs the same range back
 * into another region, and compares.  No server handler runs for the WRITE or
 * the READ.  Exits 0 when everything matched, 1 otherwise.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <roce_rpc/rrpc.h>

#define SRV_LEN (1u << 20)
#define XFER (256u << 10)
#define OFFSET 4096u
#define MAGIC 0xC0FFEEu

static rrpc_region *srv_region;
static _Atomic uint32_t notified; /* the notification value, 0 until it came */

/* Hands the peer the token of our buffer, for this connection. */
static void h_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_token tok;
    uint8_t wire[RRPC_TOKEN_SIZE];
    int r = rrpc_region_token(srv_region, rrpc_request_conn(req), &tok);
    if (r != 0) {
        rrpc_respond_error(req, 1, rrpc_strerror(r));
        return;
    }
    rrpc_token_encode(&tok, wire);
    rrpc_respond(req, wire, sizeof(wire));
}

static void on_notify(rrpc_conn *conn, uint32_t imm, void *user)
{
    atomic_store(&notified, imm); /* runs on the server's loop thread */
}

static int check(rrpc_ctx *ctx, const char *what, int r)
{
    if (r != 0)
        fprintf(stderr, "one_sided: %s: %s (%s): %s\n", what, rrpc_strerror(r), rrpc_err_name(r),
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
    rrpc_region *out_r = NULL, *in_r = NULL;
    uint8_t *srv_mem = calloc(1, SRV_LEN), *out = malloc(XFER), *in = calloc(1, XFER);
    int failed = 1;

    for (uint32_t i = 0; i < XFER; i++)
        out[i] = (uint8_t)(i * 7 + 3);
    if (!srv_mem || !out || !in ||
        check(NULL, "server context", rrpc_ctx_create(&srv)) ||
        check(srv, "mem_reg", rrpc_mem_reg(srv, srv_mem, SRV_LEN,
                                           RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE,
                                           &srv_region)) ||
        check(srv, "register", rrpc_register(srv, "buf.token", h_token, NULL)))
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
        check(cli, "mem_reg out", rrpc_mem_reg(cli, out, XFER, 0, &out_r)) ||
        check(cli, "mem_reg in", rrpc_mem_reg(cli, in, XFER, 0, &in_r)))
        goto out;

    /* The token travels as 32 bytes, like any other payload. */
    void *wire = NULL;
    size_t wire_len = 0;
    rrpc_token tok;
    if (check(cli, "buf.token", rrpc_call_sync(conn, "buf.token", NULL, 0, NULL, &wire,
                                               &wire_len)))
        goto out;
    int r = rrpc_token_decode(wire, wire_len, &tok);
    free(wire);
    if (check(cli, "token_decode", r))
        goto out;

    /* WRITE with a notification, then READ it back. */
    rrpc_op_opts wo = {.qos_class = RRPC_CLASS_BULK, .notify = 1, .imm = MAGIC};
    if (check(cli, "write", rrpc_write_sync(conn, out_r, 0, &tok, OFFSET, XFER, &wo)) ||
        check(cli, "read", rrpc_read_sync(conn, in_r, 0, &tok, OFFSET, XFER, NULL)))
        goto out;
    /* A WRITE past the end of the token is refused before anything is sent. */
    r = rrpc_write_sync(conn, out_r, 0, &tok, SRV_LEN - 16, XFER, NULL);
    if (r != RRPC_E_ACCESS) {
        fprintf(stderr, "one_sided: out-of-bounds write returned %s\n", rrpc_err_name(r));
        goto out;
    }
    /* The notification comes on the server's loop, after the data landed. */
    for (int i = 0; i < 5000 && atomic_load(&notified) == 0; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (atomic_load(&notified) != MAGIC) {
        fprintf(stderr, "one_sided: notification 0x%x, expected 0x%x\n",
                (unsigned)atomic_load(&notified), MAGIC);
        goto out;
    }
    if (memcmp(in, out, XFER) != 0 || memcmp(srv_mem + OFFSET, out, XFER) != 0) {
        fprintf(stderr, "one_sided: data mismatch\n");
        goto out;
    }
    printf("one_sided: wrote and read back %u KiB over %s, notification 0x%x\n", XFER >> 10,
           rrpc_conn_transport(conn), MAGIC);
    failed = 0;
out:
    rrpc_conn_close(conn);
    rrpc_mem_dereg(out_r);
    rrpc_mem_dereg(in_r);
    rrpc_ctx_destroy(cli);
    rrpc_listener_close(l);
    rrpc_mem_dereg(srv_region);
    rrpc_ctx_destroy(srv);
    free(srv_mem);
    free(out);
    free(in);
    return failed;
}

/* SPDX-License-Identifier: MIT */
/*
 * minimal_rpc: the smallest RPC service, server and client in one process.
 *
 *   minimal_rpc [LISTEN_URI [CLIENT_SRC]]
 *
 * LISTEN_URI defaults to tcp://127.0.0.1:0 (port 0: any free port); give
 * rdma://ADDR:0 to run over verbs, and CLIENT_SRC (an address of another
 * RDMA device) to make the client bind there (?src=, docs/running-on-roce.md).
 * The server registers "add" (msgpack [a, b] -> [a + b], status 3 when the
 * sum overflows) and "fail" (always answers application error 42); the
 * client calls both and checks the answers.  Exits 0 when everything matched, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roce_rpc/rrpc.h>

static void h_add(rrpc_request *req, const void *p, size_t len, void *user)
{
    int64_t a, b;
    char err[128];
    void *out;
    size_t n;
    if (rrpc_unpack(p, len, err, sizeof(err), "ii", &a, &b) != 0) {
        rrpc_respond_error(req, 1, err); /* the caller sees status 1 and this text */
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
    rrpc_respond(req, out, n); /* copies: we keep out */
    free(out);
}

static void h_fail(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond_error(req, 42, "refused on purpose");
}

static int check(rrpc_ctx *ctx, const char *what, int r)
{
    if (r != 0)
        fprintf(stderr, "minimal_rpc: %s: %s (%s): %s\n", what, rrpc_strerror(r),
                rrpc_err_name(r), ctx ? rrpc_ctx_last_error(ctx) : "");
    return r != 0;
}

/* "scheme://host:0?query" + port -> "scheme://host:PORT[?src=SRC]" */
static void client_uri(char *buf, size_t len, const char *listen, int port, const char *src)
{
    size_t hostlen = (size_t)(strrchr(listen, ':') - listen);
    snprintf(buf, len, "%.*s:%d%s%s", (int)hostlen, listen, port, src ? "?src=" : "",
             src ? src : "");
}

int main(int argc, char **argv)
{
    const char *listen_uri = argc > 1 ? argv[1] : "tcp://127.0.0.1:0";
    const char *src = argc > 2 ? argv[2] : NULL;
    rrpc_ctx *srv = NULL, *cli = NULL;
    rrpc_listener *l = NULL;
    rrpc_conn *conn = NULL;
    int failed = 1;

    /* The server: a context, two handlers, a loop thread, a listener. */
    if (check(NULL, "server context", rrpc_ctx_create(&srv)) ||
        check(srv, "register add", rrpc_register(srv, "add", h_add, NULL)) ||
        check(srv, "register fail", rrpc_register(srv, "fail", h_fail, NULL)) ||
        check(srv, "server thread", rrpc_ctx_start_thread(srv)) ||
        check(srv, listen_uri, rrpc_listen(srv, listen_uri, NULL, NULL, &l)))
        goto out;

    /* The client: its own context, as if it were another process. */
    char uri[300];
    client_uri(uri, sizeof(uri), listen_uri, rrpc_listener_port(l), src);
    if (check(NULL, "client context", rrpc_ctx_create(&cli)) ||
        check(cli, "client thread", rrpc_ctx_start_thread(cli)) ||
        check(cli, uri, rrpc_connect_sync(cli, uri, 5000, NULL, NULL, &conn)))
        goto out;

    /* add(40, 2) on the low-latency class with a 2 s deadline, and a W3C
     * trace context as metadata (a handler reads it with
     * rrpc_request_meta_get). */
    void *req, *resp = NULL;
    size_t req_len, resp_len;
    int64_t sum = 0;
    static const char trace[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const rrpc_meta meta = {.key = "traceparent", .value = trace, .len = sizeof(trace) - 1};
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = 2000,
                        .meta = &meta, .nmeta = 1};
    if (check(cli, "pack", rrpc_pack(&req, &req_len, "ii", (int64_t)40, (int64_t)2)))
        goto out;
    int r = rrpc_call_sync(conn, "add", req, req_len, &o, &resp, &resp_len);
    free(req);
    if (check(cli, "call add", r))
        goto out;
    r = rrpc_unpack(resp, resp_len, NULL, 0, "i", &sum);
    free(resp); /* the response is ours */
    if (check(cli, "unpack", r))
        goto out;
    if (sum != 42) {
        fprintf(stderr, "minimal_rpc: add(40, 2) returned %lld\n", (long long)sum);
        goto out;
    }

    /* Arguments from the network are checked: an overflow is refused. */
    if (check(cli, "pack", rrpc_pack(&req, &req_len, "ii", INT64_MAX, (int64_t)1)))
        goto out;
    r = rrpc_call_sync(conn, "add", req, req_len, &o, &resp, &resp_len);
    free(req);
    if (r != 3 || !strstr(rrpc_ctx_last_error(cli), "does not fit")) {
        fprintf(stderr, "minimal_rpc: add(INT64_MAX, 1) returned %d (%s)\n", r,
                rrpc_ctx_last_error(cli));
        goto out;
    }

    /* An application error comes back as a positive status with a message. */
    r = rrpc_call_sync(conn, "fail", NULL, 0, NULL, &resp, &resp_len);
    if (r != 42 || !strstr(rrpc_ctx_last_error(cli), "refused on purpose")) {
        fprintf(stderr, "minimal_rpc: fail returned %d (%s)\n", r, rrpc_ctx_last_error(cli));
        goto out;
    }
    /* An unknown method is a library error. */
    r = rrpc_call_sync(conn, "nope", NULL, 0, NULL, &resp, &resp_len);
    if (r != RRPC_E_NO_METHOD) {
        fprintf(stderr, "minimal_rpc: nope returned %s\n", rrpc_err_name(r));
        goto out;
    }
    printf("minimal_rpc: add(40, 2) = %lld over %s; errors 42 and %s as expected\n",
           (long long)sum, rrpc_conn_transport(conn), rrpc_err_name(RRPC_E_NO_METHOD));
    failed = 0;
out:
    rrpc_conn_close(conn);
    rrpc_ctx_destroy(cli);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(srv);
    return failed;
}

/* SPDX-License-Identifier: MIT */
/*
 * dscp_traffic: the traffic half of tests/softroce/dscp-capture.sh.
 *
 *   dscp_traffic [-s SERVER_ADDR] [-c CLIENT_SRC] [-p PORT] [-l LL_DSCP] [-b BULK_DSCP]
 *                [-n CALLS] [-k KIB] [-t rdma|tcp] [-m METRICS_FILE]
 *
 * One process, two contexts (public API only): a server context listening on
 * rdma://SERVER_ADDR:PORT (default 10.77.0.2, port 0 = any) and a client
 * context connecting to it with ?src=CLIENT_SRC (default 10.77.0.1), so that
 * in the Soft-RoCE VM every packet crosses the veth.  Both contexts give the
 * low_latency class LL_DSCP (default 46) and the bulk class BULK_DSCP
 * (default 10) with rrpc_class_set; control and background keep their
 * defaults.  Then:
 *   - CALLS (default 20) small "echo" RPCs on low_latency: SENDs both ways;
 *   - one "token" RPC on low_latency (the server region's token);
 *   - a one-sided WRITE of KIB KiB (default 64) on bulk, then a READ of the
 *     same range on bulk into another buffer, compared with what was written:
 *     WRITE packets and READ requests go client->server, ACKs and READ
 *     responses server->client.
 * With -m, the client context's metrics text (rrpc_ctx_stats_text, which
 * carries the kernel counters of the RDMA port it used) is written to
 * METRICS_FILE after the traffic.
 * Payloads stay far below the verbs transport's eager limit, so no RPC uses
 * the RDMA READ rendezvous: every RDMA WRITE/READ packet on the wire belongs
 * to the bulk class.
 *
 * stdout: "dscp control=.. low_latency=.. bulk=.. background=.." (the
 * configured DSCPs, for the capture check), what the transport reports for
 * each class (rrpc_conn_class_dscp), and one line per step.  Exit 0 when
 * every step worked, 1 otherwise (the error and rrpc_ctx_last_error on
 * stderr), 2 on bad arguments.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

static rrpc_region *server_region;
static uint8_t *server_mem;
static size_t region_len;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static rrpc_conn *server_conn; /* the accepted connection, for its DSCP read-back */

static _Atomic int echoes_handled; /* the server's count (ipsec.sh checks it against the client's) */

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    echoes_handled++;
    rrpc_respond(req, p, len);
}

static void h_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    rrpc_token t;
    uint8_t buf[RRPC_TOKEN_SIZE];
    int r = rrpc_region_token(server_region, rrpc_request_conn(req), &t);
    if (r) {
        rrpc_respond_error(req, 1, rrpc_strerror(r));
        return;
    }
    rrpc_token_encode(&t, buf);
    rrpc_respond(req, buf, sizeof(buf));
}

static void on_server_conn(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)reason, (void)user;
    pthread_mutex_lock(&mu);
    if (ev == RRPC_CONN_UP && !server_conn)
        server_conn = c;
    else if (ev == RRPC_CONN_DOWN && server_conn == c)
        server_conn = NULL;
    pthread_mutex_unlock(&mu);
}

static int fail(rrpc_ctx *ctx, int r, const char *what)
{
    fprintf(stderr, "dscp_traffic: %s: %s (%s)\n", what, rrpc_strerror(r), rrpc_err_name(r));
    if (ctx && *rrpc_ctx_last_error(ctx))
        fprintf(stderr, "  %s\n", rrpc_ctx_last_error(ctx));
    return 1;
}

static int set_dscp(rrpc_ctx *ctx, int cls, int dscp)
{
    int w, cr, r = rrpc_class_get(ctx, cls, NULL, &w, &cr);
    return r ? r : rrpc_class_set(ctx, cls, dscp, w, cr);
}

/* "control=48 low_latency=46 ..." as the transport reports it for @c. */
static void print_readback(const char *who, rrpc_conn *c)
{
    printf("%s transport DSCP read-back:", who);
    for (int i = RRPC_CLASS_FIRST; i <= RRPC_CLASS_LAST; i++) {
        int d = -1, r = rrpc_conn_class_dscp(c, i, &d);
        if (r)
            printf(" %s=(%s)", rrpc_class_name(i), rrpc_err_name(r));
        else
            printf(" %s=%d", rrpc_class_name(i), d);
    }
    printf("\n");
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *saddr = "10.77.0.2", *csrc = "10.77.0.1", *scheme = "rdma", *metrics = NULL;
    int port = 0, ll = 46, bulk = 10, calls = 20, kib = 64, opt, r;

    setvbuf(stdout, NULL, _IOLBF, 0); /* keeps stdout and stderr in order in one file */
    while ((opt = getopt(argc, argv, "s:c:p:l:b:n:k:t:m:")) != -1) {
        int bad = 0;
        switch (opt) {
        case 's': saddr = optarg; break;
        case 'c': csrc = optarg; break;
        case 'p': bad = parse_int(optarg, 0, 65535, &port); break;
        case 'l': bad = parse_int(optarg, 0, 63, &ll); break;
        case 'b': bad = parse_int(optarg, 0, 63, &bulk); break;
        case 'n': bad = parse_int(optarg, 1, 100000, &calls); break;
        case 'k': bad = parse_int(optarg, 1, 1 << 20, &kib); break;
        case 'm': metrics = optarg; break;
        case 't': scheme = optarg; bad = strcmp(scheme, "rdma") && strcmp(scheme, "tcp"); break;
        default: bad = 1;
        }
        if (bad) {
            fprintf(stderr, "usage: dscp_traffic [-s SERVER_ADDR] [-c CLIENT_SRC] [-p PORT] "
                            "[-l LL_DSCP] [-b BULK_DSCP] [-n CALLS] [-k KIB] [-t rdma|tcp] "
                            "[-m METRICS_FILE]\n");
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "dscp_traffic: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    region_len = (size_t)kib << 10;

    rrpc_ctx *sctx = NULL, *cctx = NULL;
    if ((r = rrpc_ctx_create(&sctx)) || (r = rrpc_ctx_create(&cctx)))
        return fail(NULL, r, "create a context");

    /* Same classes on both sides; the four DSCPs must be distinct so that
     * the capture can tell the classes apart. */
    rrpc_ctx *both[2] = {sctx, cctx};
    for (int i = 0; i < 2; i++) {
        if ((r = set_dscp(both[i], RRPC_CLASS_LOW_LATENCY, ll)) ||
            (r = set_dscp(both[i], RRPC_CLASS_BULK, bulk)))
            return fail(both[i], r, "rrpc_class_set");
    }
    int dscp[RRPC_CLASS_LAST + 1]; /* by class value; [0] unused */
    printf("dscp");
    for (int i = RRPC_CLASS_FIRST; i <= RRPC_CLASS_LAST; i++) {
        rrpc_class_get(cctx, i, &dscp[i], NULL, NULL);
        printf(" %s=%d", rrpc_class_name(i), dscp[i]);
    }
    printf("\n");
    for (int i = RRPC_CLASS_FIRST; i <= RRPC_CLASS_LAST; i++)
        for (int j = i + 1; j <= RRPC_CLASS_LAST; j++)
            if (dscp[i] == dscp[j]) {
                fprintf(stderr, "dscp_traffic: classes %s and %s share DSCP %d; pick distinct ones\n",
                        rrpc_class_name(i), rrpc_class_name(j), dscp[i]);
                return 2;
            }

    /* Server. */
    server_mem = calloc(1, region_len);
    if (!server_mem)
        return fail(NULL, -ENOMEM, "allocate the server region");
    if ((r = rrpc_mem_reg(sctx, server_mem, region_len,
                          RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &server_region)))
        return fail(sctx, r, "register the server region");
    if ((r = rrpc_register(sctx, "echo", h_echo, NULL)) ||
        (r = rrpc_register(sctx, "token", h_token, NULL)))
        return fail(sctx, r, "register the handlers");
    char uri[300];
    snprintf(uri, sizeof(uri), "%s://%s:%d", scheme, saddr, port);
    rrpc_listener *lis;
    if ((r = rrpc_listen(sctx, uri, on_server_conn, NULL, &lis)))
        return fail(sctx, r, "listen");
    if ((r = rrpc_ctx_start_thread(sctx)) || (r = rrpc_ctx_start_thread(cctx)))
        return fail(NULL, r, "start the loop threads");
    port = rrpc_listener_port(lis);
    if (port <= 0)
        return fail(sctx, port, "listener port");

    /* Client. */
    snprintf(uri, sizeof(uri), "%s://%s:%d?src=%s", scheme, saddr, port, csrc);
    rrpc_conn *c;
    if ((r = rrpc_connect_sync(cctx, uri, 30000, NULL, NULL, &c)))
        return fail(cctx, r, "connect");
    printf("connected: %s over %s\n", uri, rrpc_conn_transport(c));
    print_readback("client", c);

    /* RPCs on low_latency. */
    rrpc_call_opts co = {.qos_class = RRPC_CLASS_LOW_LATENCY};
    for (int i = 0; i < calls; i++) {
        char req[64];
        int n = snprintf(req, sizeof(req), "dscp-capture echo %d", i);
        void *resp;
        size_t rlen;
        if ((r = rrpc_call_sync(c, "echo", req, (size_t)n, &co, &resp, &rlen)))
            return fail(cctx, r, "echo call on low_latency");
        int same = rlen == (size_t)n && memcmp(resp, req, rlen) == 0;
        free(resp);
        if (!same) {
            fprintf(stderr, "dscp_traffic: echo %d came back different\n", i);
            return 1;
        }
    }
    printf("rpc: %d echo calls on low_latency ok\n", calls);

    /* Not under mu: the library call takes the server context's lock, which
     * its loop may hold while on_server_conn waits for mu. */
    pthread_mutex_lock(&mu);
    rrpc_conn *sc = server_conn;
    pthread_mutex_unlock(&mu);
    if (sc)
        print_readback("server", sc);

    void *resp;
    size_t rlen;
    if ((r = rrpc_call_sync(c, "token", NULL, 0, &co, &resp, &rlen)))
        return fail(cctx, r, "token call on low_latency");
    rrpc_token tok;
    r = rrpc_token_decode(resp, rlen, &tok);
    free(resp);
    if (r)
        return fail(cctx, r, "decode the token");

    /* One-sided WRITE then READ on bulk: local[0, len) -> remote -> local[len, 2 len). */
    uint8_t *local = malloc(2 * region_len);
    if (!local)
        return fail(NULL, -ENOMEM, "allocate the client buffer");
    for (size_t i = 0; i < region_len; i++)
        local[i] = (uint8_t)(i * 7 + 3);
    memset(local + region_len, 0, region_len);
    rrpc_region *lr;
    if ((r = rrpc_mem_reg(cctx, local, 2 * region_len, 0, &lr)))
        return fail(cctx, r, "register the client buffer");
    rrpc_op_opts oo = {.qos_class = RRPC_CLASS_BULK};
    if ((r = rrpc_write_sync(c, lr, 0, &tok, 0, region_len, &oo)))
        return fail(cctx, r, "one-sided WRITE on bulk");
    if ((r = rrpc_read_sync(c, lr, region_len, &tok, 0, region_len, &oo)))
        return fail(cctx, r, "one-sided READ on bulk");
    if (memcmp(local, local + region_len, region_len) || memcmp(local, server_mem, region_len)) {
        fprintf(stderr, "dscp_traffic: the data read back differs from the data written\n");
        return 1;
    }
    printf("one-sided: WRITE + READ of %d KiB on bulk ok\n", kib);
    printf("server: %d echo calls handled, the WRITE's %d KiB found in its region\n",
           (int)echoes_handled, kib);
    if (metrics) {
        size_t need = 0, cap = 1 << 20;
        char *text = malloc(cap);
        FILE *f = fopen(metrics, "w");
        if (!text || !f)
            return fail(NULL, -errno, "open the metrics file");
        if ((r = rrpc_ctx_stats_text(cctx, text, cap, &need)))
            return fail(cctx, r, "the client context's metrics text");
        if (fputs(text, f) < 0 || fclose(f))
            return fail(NULL, -EIO, "write the metrics file");
        free(text);
        printf("metrics: %zu bytes written to %s\n", need, metrics);
    }

    rrpc_conn_close(c);
    rrpc_mem_dereg(lr);
    rrpc_ctx_destroy(cctx);
    rrpc_listener_close(lis);
    rrpc_mem_dereg(server_region);
    rrpc_ctx_destroy(sctx);
    free(local);
    free(server_mem);
    printf("done\n");
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * idle_mem_verbs: what an idle verbs connection costs (the verbs counterpart
 * of tests/reliability/idle_mem, which is tcp-only); run in the Soft-RoCE VM
 * by tests/softroce/idle-mem-in-vm.sh.  Not a pass/fail test:
 * docs/performance.md quotes its output.
 *
 *   idle_mem_verbs [-n N] [-b BYTES] [-w IDLE_MS] [-s SERVER_ADDR] [-c CLIENT_SRC] [-x rdma|tcp]
 *
 * Forks a server process (before either side touches the library) that
 * listens on rdma://SERVER_ADDR:0 (default 10.77.0.2) and serves "echo" and
 * "stats" (its RSS and pinned memory).  The client process opens one control
 * connection (?src=CLIENT_SRC, default 10.77.0.1), takes a baseline on both
 * sides, opens N more connections (default 50), makes one call of BYTES (4)
 * on each class of each, waits IDLE_MS (default 1500; with
 * RRPC_KEEPALIVE_MS shorter than that the core has called the transport's
 * idle trim by then) and prints the growth per connection on both sides:
 * RSS (/proc/self/statm) and VmPin (/proc/self/status: memory pinned by
 * memory registration).  It also prints what the transport's per-connection
 * receive buffers should be, from the class credits and RRPC_VERBS_EAGER
 * (see libroce_rpc/transport/verbs/qp.c: per class credits + 12, each 32 +
 * eager bytes rounded up to 64; send buffers come from a pool of the
 * device, verbs/sendpool.c, and an idle connection holds none).
 * Exit 0 when every connection and call worked, 1 otherwise.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

static void mem_kib(long *rss, long *pin)
{
    long pages = 0, r = 0;
    *rss = *pin = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &r) == 2)
            *rss = r * (sysconf(_SC_PAGESIZE) / 1024);
        fclose(f);
    }
    char line[256];
    f = fopen("/proc/self/status", "r");
    if (f) {
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "VmPin: %ld", pin) == 1)
                break;
        fclose(f);
    }
}

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static void h_stats(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)p, (void)len, (void)user;
    long rss, pin;
    mem_kib(&rss, &pin);
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%ld %ld", rss, pin);
    rrpc_respond(req, buf, (size_t)n);
}

static int server(const char *scheme, const char *addr, int wfd)
{
    rrpc_ctx *ctx;
    rrpc_listener *l;
    char uri[300];
    snprintf(uri, sizeof(uri), "%s://%s:0", scheme, addr);
    if (rrpc_ctx_create(&ctx) || rrpc_register(ctx, "echo", h_echo, NULL) ||
        rrpc_register(ctx, "stats", h_stats, NULL) || rrpc_listen(ctx, uri, NULL, NULL, &l) ||
        rrpc_ctx_start_thread(ctx)) {
        fprintf(stderr, "idle_mem_verbs server: %s\n", ctx ? rrpc_ctx_last_error(ctx) : "no context");
        return 1;
    }
    dprintf(wfd, "port %d\n", rrpc_listener_port(l));
    close(wfd);
    for (;;)
        pause();
}

static int server_mem(rrpc_conn *c, long *rss, long *pin)
{
    void *out;
    size_t n;
    *rss = *pin = 0;
    int r = rrpc_call_sync(c, "stats", NULL, 0, NULL, &out, &n);
    if (r == 0) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%.*s", (int)n, (char *)out);
        free(out);
        if (sscanf(buf, "%ld %ld", rss, pin) != 2)
            r = -1;
    }
    return r;
}

int main(int argc, char **argv)
{
    const char *saddr = "10.77.0.2", *csrc = "10.77.0.1", *scheme = "rdma";
    int n = 50, idle_ms = 1500, opt;
    bool rpc_only = false;
    size_t bytes = 4;
    while ((opt = getopt(argc, argv, "n:b:w:s:c:x:r")) != -1) {
        switch (opt) {
        case 'n': n = atoi(optarg); break;
        case 'b': bytes = (size_t)atol(optarg); break;
        case 'w': idle_ms = atoi(optarg); break;
        case 's': saddr = optarg; break;
        case 'c': csrc = optarg; break;
        case 'x': scheme = optarg; break;
        case 'r': rpc_only = true; break;
        default:
            fprintf(stderr, "usage: idle_mem_verbs [-n N] [-b BYTES] [-w IDLE_MS] [-s SERVER_ADDR] "
                            "[-c CLIENT_SRC] [-x rdma|tcp] [-r]\n"
                            "  -r: one call on low_latency only (an RPC-only client), not one "
                            "per class\n");
            return 2;
        }
    }
    if (n < 1 || idle_ms < 0) {
        fprintf(stderr, "idle_mem_verbs: bad -n or -w\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_DFL); /* default dispositions: the library must not raise SIGPIPE */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);

    int fds[2];
    if (pipe(fds))
        return 1;
    pid_t pid = fork(); /* before either side touches the library or libibverbs */
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(fds[0]);
        _exit(server(scheme, saddr, fds[1]));
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    int port = 0;
    if (!f || fscanf(f, "port %d", &port) != 1) {
        fprintf(stderr, "idle_mem_verbs: the server did not start\n");
        kill(pid, SIGKILL);
        return 1;
    }
    char uri[300];
    snprintf(uri, sizeof(uri), "%s://%s:%d?src=%s", scheme, saddr, port, csrc);

    int rc = 1;
    rrpc_ctx *ctx = NULL;
    rrpc_conn *ctl = NULL, **c = calloc((size_t)n, sizeof(*c));
    char *payload = calloc(1, bytes ? bytes : 1);
    if (!c || !payload || rrpc_ctx_create(&ctx) || rrpc_ctx_start_thread(ctx))
        goto out;
    if (rrpc_connect_sync(ctx, uri, 30000, NULL, NULL, &ctl)) {
        fprintf(stderr, "idle_mem_verbs: control connection: %s\n", rrpc_ctx_last_error(ctx));
        goto out;
    }
    long s_rss0, s_pin0, c_rss0, c_pin0, s_rss1, s_pin1, c_rss1, c_pin1;
    if (server_mem(ctl, &s_rss0, &s_pin0))
        goto out;
    mem_kib(&c_rss0, &c_pin0);
    int failed = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        if (rrpc_connect_sync(ctx, uri, 30000, NULL, NULL, &c[i])) {
            fprintf(stderr, "idle_mem_verbs: connect %d: %s\n", i, rrpc_ctx_last_error(ctx));
            n = i; /* measure what we have */
            failed = 1;
            break;
        }
        for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
            if (rpc_only && k != RRPC_CLASS_LOW_LATENCY)
                continue;
            rrpc_call_opts o = {.qos_class = k};
            void *out;
            size_t len;
            if (rrpc_call_sync(c[i], "echo", payload, bytes, &o, &out, &len) == 0)
                free(out);
            else
                failed = 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct timespec w = {idle_ms / 1000, (long)(idle_ms % 1000) * 1000000L};
    nanosleep(&w, NULL);
    if (server_mem(ctl, &s_rss1, &s_pin1))
        failed = 1;
    mem_kib(&c_rss1, &c_pin1);
    const char *ka = getenv("RRPC_KEEPALIVE_MS");
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%s, %d idle connections (one call of %zu bytes %s on each, then %d ms idle, "
           "RRPC_KEEPALIVE_MS=%s; %d connects in %.1f s):\n",
           n && c[0] ? rrpc_conn_transport(c[0]) : scheme, n, bytes,
           rpc_only ? "on low_latency" : "per class", idle_ms, ka ? ka : "(default 5000)", n, secs);
    if (n > 0) {
        printf("  client RSS %+ld KiB = %.1f KiB/conn, VmPin %+ld KiB = %.1f KiB/conn\n",
               c_rss1 - c_rss0, (double)(c_rss1 - c_rss0) / n, c_pin1 - c_pin0,
               (double)(c_pin1 - c_pin0) / n);
        printf("  server RSS %+ld KiB = %.1f KiB/conn, VmPin %+ld KiB = %.1f KiB/conn\n",
               s_rss1 - s_rss0, (double)(s_rss1 - s_rss0) / n, s_pin1 - s_pin0,
               (double)(s_pin1 - s_pin0) / n);
    }
    /* The verbs receive buffers per connection and side, as verbs/qp.c sizes
     * them: each class used has a QP with its first grant (RRPC_CREDIT_BASE,
     * 4, with lending on; one call at a time is lent nothing) + 12 (+ 6 on
     * the first, low_latency's): 8 for exempt frames, 1 for the peer's ask
     * for notify credits, 2 for their returns, 1 spare.  The buffers for
     * rendezvous answers and for notifies come with the first of them. */
    long eager = 8192;
    const char *e = getenv("RRPC_VERBS_EAGER");
    if (e)
        eager = atol(e);
    long bsz = (32 + eager + 63) & ~63L, nbuf = 0, cred = 0;
    int ncls = 0;
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
        if (rpc_only && k != RRPC_CLASS_LOW_LATENCY)
            continue;
        int cr = 0;
        rrpc_class_get(ctx, k, NULL, NULL, &cr);
        const char *base = getenv("RRPC_CREDIT_BASE"), *lend = getenv("RRPC_CREDIT_LENDING");
        long b = base ? atol(base) : 4;
        if (!(lend && atoi(lend) == 0) && b < cr)
            cr = (int)b;
        cred += cr;
        nbuf += cr + 8 + 1 + 2 + 1 + (k == RRPC_CLASS_LOW_LATENCY ? 6 : 0);
        ncls++;
    }
    printf("  expected verbs receive buffers per connection and side: %ld (first grants %ld + %d x 12 "
           "+ 6) x %ld bytes = %.1f KiB; send buffers: the device's pool, none per connection\n",
           nbuf, cred, ncls, bsz, nbuf * bsz / 1024.0);
    rc = failed;
out:
    if (rc && ctx)
        fprintf(stderr, "idle_mem_verbs: failed: %s\n", rrpc_ctx_last_error(ctx));
    if (c)
        for (int i = 0; i < n; i++)
            rrpc_conn_close(c[i]);
    rrpc_conn_close(ctl);
    rrpc_ctx_destroy(ctx);
    free(c);
    free(payload);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * Many tcp connections between two addresses: this process opens N
 * (default 10,000) connections from 127.0.0.1 to a rel_server listening on
 * 127.0.0.2, makes one call on low_latency (the default class) on each, and
 * checks that every one came up and answered (no EADDRNOTAVAIL: one
 * ephemeral port per connection) and that each side holds at most 1.2 file
 * descriptors per connection (issue #27's target; one socket per side).  It
 * prints the RSS growth per connection on both sides too, which it does not
 * check (the figure depends on the allocator; tests/reliability/idle_mem
 * measures it).
 *   many_conns [N]   (rel_server from RRPC_REL_SERVER)
 * The soft RLIMIT_NOFILE is raised to the hard one, in this process and in
 * the server; a hard limit below N + 64 skips the test (exit 77) and says so.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

static int count_fds(pid_t pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/fd");
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static long rss_kib(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The server's "conns rss_kib". */
static int server_stats(rrpc_conn *c, int *conns, long *rss)
{
    void *out;
    size_t n;
    int r = rrpc_call_sync(c, "stats", NULL, 0, NULL, &out, &n);
    if (r)
        fprintf(stderr, "many_conns: the server's stats call: %s\n", rrpc_err_name(r));
    if (r == 0) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%.*s", (int)n, (char *)out);
        free(out);
        if (sscanf(buf, "%d %ld", conns, rss) != 2)
            r = -1;
    }
    return r;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* default dispositions: the library must not raise SIGPIPE */
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    const char *exe = getenv("RRPC_REL_SERVER");
    if (n < 1 || !exe) {
        fprintf(stderr, "usage: RRPC_REL_SERVER=path/rel_server many_conns [N >= 1]\n");
        return 2;
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)n + 64) {
        printf("SKIP: %d connections need %d file descriptors per process, the hard "
               "RLIMIT_NOFILE is %llu (raise it: ulimit -Hn, LimitNOFILE=)\n",
               n, n + 64, (unsigned long long)rl.rlim_max);
        return 77;
    }
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    /* The server: on 127.0.0.2, taking every connection from one address. */
    char cap[32];
    snprintf(cap, sizeof(cap), "%d", n + 16);
    setenv("RRPC_TEST_SERVER", "127.0.0.2", 1);
    setenv("RRPC_MAX_CONNS", cap, 1);
    setenv("RRPC_MAX_CONNS_PER_SOURCE", cap, 1);
    /* One client address on purpose: no share kept for others, and no idle
     * connection (each made one call) closed to make room for the next. */
    setenv("RRPC_CONNS_RESERVE_PCT", "0", 1);
    setenv("RRPC_IDLE_EVICT_MS", "0", 1);
    int fds[2];
    if (pipe(fds))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        execl(exe, exe, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    unsetenv("RRPC_MAX_CONNS");
    unsetenv("RRPC_MAX_CONNS_PER_SOURCE");
    unsetenv("RRPC_CONNS_RESERVE_PCT");
    unsetenv("RRPC_IDLE_EVICT_MS");
    FILE *f = fdopen(fds[0], "r");
    int port = 0;
    if (!f || fscanf(f, "port %d", &port) != 1) {
        fprintf(stderr, "many_conns: the server did not start\n");
        return 1;
    }
    char uri[96];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.2:%d?src=127.0.0.1", port);
    rrpc_ctx *ctx;
    if (rrpc_ctx_create(&ctx) || rrpc_ctx_start_thread(ctx))
        return 1;
    rrpc_conn **c = calloc((size_t)n + 1, sizeof(*c));
    int fail = 1;
    if (rrpc_connect_sync(ctx, uri, 10000, NULL, NULL, &c[n])) {
        fprintf(stderr, "many_conns: control connection: %s\n", rrpc_ctx_last_error(ctx));
        goto out;
    }
    int conns = 0;
    long s0 = 0, s1 = 0;
    if (server_stats(c[n], &conns, &s0))
        goto out;
    int sf0 = count_fds(pid), cf0 = count_fds(0);
    long c0 = rss_kib();
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        void *out = NULL;
        size_t len = 0;
        int r = rrpc_connect_sync(ctx, uri, 10000, NULL, NULL, &c[i]);
        if (r == 0)
            r = rrpc_call_sync(c[i], "echo", "ping", 4, NULL, &out, &len);
        free(out);
        if (r) {
            fprintf(stderr, "many_conns: connection %d of %d: %s: %s\n", i + 1, n,
                    rrpc_err_name(r), rrpc_ctx_last_error(ctx));
            goto out;
        }
    }
    double t1 = now_s();
    if (server_stats(c[n], &conns, &s1))
        goto out;
    int sf1 = count_fds(pid), cf1 = count_fds(0);
    long c1 = rss_kib();
    double cfd = (double)(cf1 - cf0) / n, sfd = (double)(sf1 - sf0) / n;
    printf("%d tcp connections 127.0.0.1 -> 127.0.0.2 in %.1f s (%.0f/s), one call each: "
           "client %.2f fds/conn, %.1f KiB/conn; server %.2f fds/conn, %.1f KiB/conn; %d up "
           "at the server\n",
           n, t1 - t0, n / (t1 - t0), cfd, (double)(c1 - c0) / n, sfd, (double)(s1 - s0) / n,
           conns);
    fail = 0;
    if (conns != n + 1) {
        fprintf(stderr, "many_conns: the server holds %d connections, not %d\n", conns, n + 1);
        fail = 1;
    }
    if (cfd > 1.2 || sfd > 1.2) {
        fprintf(stderr, "many_conns: more than 1.2 fds per connection (client %.2f, server "
                "%.2f)\n", cfd, sfd);
        fail = 1;
    }
out:
    for (int i = 0; i <= n; i++)
        if (c[i])
            rrpc_conn_close(c[i]);
    rrpc_ctx_destroy(ctx);
    free(c);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return fail;
}

/* SPDX-License-Identifier: MIT */
/*
 * What an idle connection costs: opens N connections (default 500) from
 * this process to a rel_server process, makes one call on each class named
 * in CLASSES of each, lets them go idle, and prints the RSS growth and the
 * file descriptors per connection on both sides.  Not a pass/fail test:
 * docs/performance.md quotes its output.
 *   idle_mem [N [BYTES [CLASSES]]]   (N connections, calls of BYTES (4);
 *                          CLASSES: "all" (default) or class names joined
 *                          by commas, e.g. "low_latency" for an RPC-only
 *                          client; rel_server from RRPC_REL_SERVER)
 */
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

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

/* Open file descriptors of process @pid (0: this one). */
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

static long server_rss(rrpc_conn *c, int *conns)
{
    void *out;
    size_t n;
    long rss = 0;
    if (rrpc_call_sync(c, "stats", NULL, 0, NULL, &out, &n) == 0) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%.*s", (int)n, (char *)out);
        free(out);
        sscanf(buf, "%d %ld", conns, &rss);
    }
    return rss;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* default dispositions: the library must not raise SIGPIPE */
    int n = argc > 1 ? atoi(argv[1]) : 500;
    size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 4;
    const char *classes = argc > 3 ? argv[3] : "all";
    bool use[RRPC_CLASS_LAST + 1] = {false};
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++)
        use[k] = strcmp(classes, "all") == 0;
    if (strcmp(classes, "all") != 0) {
        char list[128];
        snprintf(list, sizeof(list), "%s", classes);
        for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
             t = strtok_r(NULL, ",", &save)) {
            int k = rrpc_class_from_name(t);
            if (k < 0) {
                fprintf(stderr, "idle_mem: no class \"%s\" (control, low_latency, bulk, "
                        "background or all)\n", t);
                return 2;
            }
            use[k] = true;
        }
    }
    char *payload = calloc(1, bytes ? bytes : 1);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    const char *exe = getenv("RRPC_REL_SERVER");
    if (!exe) {
        fprintf(stderr, "idle_mem: set RRPC_REL_SERVER to the rel_server binary\n");
        return 2;
    }
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
    FILE *f = fdopen(fds[0], "r");
    int port = 0;
    if (fscanf(f, "port %d", &port) != 1)
        return 1;
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", port);
    rrpc_ctx *ctx;
    if (rrpc_ctx_create(&ctx) || rrpc_ctx_start_thread(ctx))
        return 1;
    rrpc_conn **c = calloc((size_t)n + 1, sizeof(*c));
    if (rrpc_connect_sync(ctx, uri, 10000, NULL, NULL, &c[n]))
        return 1;
    int conns = 0;
    long s0 = server_rss(c[n], &conns), c0 = rss_kib();
    int sf0 = count_fds(pid), cf0 = count_fds(0);
    for (int i = 0; i < n; i++) {
        if (rrpc_connect_sync(ctx, uri, 10000, NULL, NULL, &c[i])) {
            fprintf(stderr, "idle_mem: connect %d: %s\n", i, rrpc_ctx_last_error(ctx));
            return 1;
        }
        for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
            if (!use[k])
                continue;
            rrpc_call_opts o = {.qos_class = k};
            void *out;
            size_t len;
            if (rrpc_call_sync(c[i], "echo", payload, bytes, &o, &out, &len) == 0)
                free(out);
        }
    }
    sleep(1);
    long s1 = server_rss(c[n], &conns), c1 = rss_kib();
    int sf1 = count_fds(pid), cf1 = count_fds(0);
    printf("tcp, %d idle connections (one call of %zu bytes on each of class %s): client %+ld "
           "KiB = %.1f KiB/conn, %.2f fds/conn; server %+ld KiB = %.1f KiB/conn, %.2f "
           "fds/conn (%d up)\n",
           n, bytes, classes, c1 - c0, (double)(c1 - c0) / n, (double)(cf1 - cf0) / n, s1 - s0,
           (double)(s1 - s0) / n, (double)(sf1 - sf0) / n, conns);
    for (int i = 0; i <= n; i++)
        rrpc_conn_close(c[i]);
    rrpc_ctx_destroy(ctx);
    free(c);
    free(payload);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
}

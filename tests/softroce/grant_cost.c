/* SPDX-License-Identifier: MIT */
/*
 * grant_cost: what a grant costs against registering memory for the same
 * range, the reason memory windows exist; run in the Soft-RoCE VM by
 * tests/softroce/grant-cost-in-vm.sh.  A measurement, not a pass/fail test
 * (docs/performance.md quotes it); exit 1 only when an operation failed.
 *
 *   grant_cost [-x rdma|tcp] [-s SERVER_ADDR] [-c CLIENT_SRC] [-n N] [-k CYCLES]
 *
 * One process, a server and a client context (the grant is made on the
 * server's side of the connection, as a server would for its client).
 * For each range size (4 KiB, 1 MiB, 64 MiB) it times N rounds of
 *   grant:    rrpc_region_grant + rrpc_grant_revoke on a registered region;
 *   register: rrpc_mem_reg of the range + rrpc_region_token on the
 *             connection (on verbs that registers it with the device) +
 *             rrpc_mem_dereg,
 * and prints p50 and mean per round, with the CPU time per round.  Then it
 * runs CYCLES (default 100000) grant/revoke rounds on one 4 KiB range and
 * prints the growth of RSS, VmPin and open fds across them (the device's
 * own objects: the script runs `rdma resource` before and after).
 */
#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static rrpc_conn *server_side;

static void server_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)reason;
    (void)user;
    pthread_mutex_lock(&mu);
    if (ev == RRPC_CONN_UP)
        server_side = c;
    else if (server_side == c)
        server_side = NULL;
    pthread_mutex_unlock(&mu);
}

static double now_us(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void mem(long *rss, long *pin, long *fds)
{
    long pages = 0, r = 0;
    *rss = *pin = *fds = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &r) == 2)
            *rss = r * (sysconf(_SC_PAGESIZE) / 1024);
        fclose(f);
    }
    char line[256];
    if ((f = fopen("/proc/self/status", "r"))) {
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "VmPin: %ld", pin) == 1)
                break;
        fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        while (readdir(d))
            (*fds)++;
        closedir(d);
    }
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "grant_cost: " __VA_ARGS__);                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

int main(int argc, char **argv)
{
    const char *scheme = "rdma", *srv = "10.77.0.2", *src = "10.77.0.1";
    int n = 2000;
    long cycles = 100000;
    int opt;
    while ((opt = getopt(argc, argv, "x:s:c:n:k:")) != -1) {
        switch (opt) {
        case 'x': scheme = optarg; break;
        case 's': srv = optarg; break;
        case 'c': src = optarg; break;
        case 'n': n = atoi(optarg); break;
        case 'k': cycles = atol(optarg); break;
        default:
            fprintf(stderr, "usage: grant_cost [-x rdma|tcp] [-s SERVER] [-c SRC] [-n N] [-k CYCLES]\n");
            return 2;
        }
    }
    rrpc_ctx *sctx, *cctx;
    if (rrpc_ctx_create(&sctx) || rrpc_ctx_create(&cctx) || rrpc_ctx_start_thread(sctx) ||
        rrpc_ctx_start_thread(cctx))
        FAIL("contexts: %s", rrpc_ctx_last_error(NULL));
    char uri[256];
    snprintf(uri, sizeof(uri), "%s://%s:0", scheme, srv);
    rrpc_listener *lis;
    if (rrpc_listen(sctx, uri, server_event, NULL, &lis))
        FAIL("listen %s: %s", uri, rrpc_ctx_last_error(sctx));
    snprintf(uri, sizeof(uri), "%s://%s:%d?src=%s", scheme, srv, rrpc_listener_port(lis), src);
    rrpc_conn *c;
    if (rrpc_connect_sync(cctx, uri, 10000, NULL, NULL, &c))
        FAIL("connect %s: %s", uri, rrpc_ctx_last_error(cctx));
    rrpc_conn *sc = NULL;
    for (int i = 0; i < 1000 && !sc; i++) {
        pthread_mutex_lock(&mu);
        sc = server_side;
        pthread_mutex_unlock(&mu);
        if (!sc)
            usleep(1000);
    }
    if (!sc)
        FAIL("the server side never came up");
    size_t big = 64u << 20;
    uint8_t *mem_ = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem_ == MAP_FAILED)
        FAIL("mmap: %s", strerror(errno));
    memset(mem_, 1, big);
    rrpc_region *whole;
    if (rrpc_mem_reg(sctx, mem_, big, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &whole))
        FAIL("mem_reg: %s", rrpc_ctx_last_error(sctx));
    rrpc_token t;
    if (rrpc_region_token(whole, sc, &t)) /* the region's own registration, made once */
        FAIL("token: %s", rrpc_ctx_last_error(sctx));
    double *lat = calloc((size_t)n, sizeof(double));
    size_t sizes[] = {4096, 1u << 20, 64u << 20};
    printf("# %s, %d rounds per row; us per round (grant: rrpc_region_grant + rrpc_grant_revoke; "
           "register: rrpc_mem_reg + rrpc_region_token + rrpc_mem_dereg)\n",
           scheme, n);
    printf("%-9s %10s %10s %10s %12s\n", "what", "bytes", "p50", "mean", "cpu/round");
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (int kind = 0; kind < 2; kind++) {
            double c0 = now_us(CLOCK_PROCESS_CPUTIME_ID), sum = 0;
            for (int i = 0; i < n; i++) {
                double t0 = now_us(CLOCK_MONOTONIC);
                if (kind == 0) {
                    rrpc_grant *g;
                    if (rrpc_region_grant(whole, sc, 0, sizes[s], RRPC_ACCESS_REMOTE_WRITE, NULL,
                                          &g, &t))
                        FAIL("grant: %s", rrpc_ctx_last_error(sctx));
                    rrpc_grant_revoke(g);
                } else {
                    rrpc_region *r;
                    if (rrpc_mem_reg(sctx, mem_, sizes[s], RRPC_ACCESS_REMOTE_WRITE, &r) ||
                        rrpc_region_token(r, sc, &t))
                        FAIL("register: %s", rrpc_ctx_last_error(sctx));
                    rrpc_mem_dereg(r);
                }
                lat[i] = now_us(CLOCK_MONOTONIC) - t0;
                sum += lat[i];
            }
            double cpu = now_us(CLOCK_PROCESS_CPUTIME_ID) - c0;
            qsort(lat, (size_t)n, sizeof(double), cmp_d);
            printf("%-9s %10zu %10.1f %10.1f %12.1f\n", kind ? "register" : "grant", sizes[s],
                   lat[n / 2], sum / n, cpu / n);
        }
    }
    long r0, p0, f0, r1, p1, f1;
    rrpc_grant *g;
    for (long i = 0; i < cycles; i++) {
        if (i == cycles / 10)
            mem(&r0, &p0, &f0);
        if (rrpc_region_grant(whole, sc, (uint64_t)(i % 1024) * 4096, 4096,
                              RRPC_ACCESS_REMOTE_READ, NULL, &g, &t))
            FAIL("cycle %ld: %s", i, rrpc_ctx_last_error(sctx));
        rrpc_grant_revoke(g);
        if (i && i % 20000 == 0)
            fprintf(stderr, "grant_cost: %ld of %ld cycles\n", i, cycles);
    }
    mem(&r1, &p1, &f1);
    printf("# %ld grant/revoke cycles, growth over the last %ld: RSS %+ld KiB, VmPin %+ld KiB, "
           "fds %+ld\n",
           cycles, cycles - cycles / 10, r1 - r0, p1 - p0, f1 - f0);
    rrpc_mem_dereg(whole);
    rrpc_conn_close(c);
    rrpc_ctx_destroy(cctx);
    rrpc_ctx_destroy(sctx);
    free(lat);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * rrpc-broker-bench: what rrpcd costs as a registry (issue #16's targets).
 *
 *   rrpc-broker-bench --brokers A[,B] --certs DIR [--services N] [--procs P]
 *                     [--threads T] [--duration S] [--visibility K]
 *
 * 1. Registration: P processes register N services in all ("bench-<i>",
 *    one context each: a gate is one service per context) through the first
 *    broker, timing each register; they keep them (their lease threads
 *    renew) until the end.
 * 2. Lookups: T threads, each with its own session, look random services up
 *    for S seconds, first all through the first broker, then (with two or
 *    more brokers) spread over all of them: lookups/s and latency.
 * 3. Visibility (two or more brokers): K times, a service registered through
 *    the first broker is looked up through the second until it is there, then
 *    unregistered and looked up until it is gone; a watch of it through the
 *    second broker times the same two events.
 *
 * DIR holds the certificates of scripts/make-dev-certs.sh (ca.crt, and
 * kv-server / kv-client certificates the brokers' ACL lets register and
 * look up).  bench/broker-bench.sh starts etcd and the brokers and runs it.
 * A user of the public API only.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#define MAX_BROKERS 8

static char brokers[MAX_BROKERS][128];
static int n_brokers;
static const char *certs;
static int services = 1000, procs = 4, threads = 2, visibility = 20;
static double duration = 3.0;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rrpc-broker-bench: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static rrpc_broker *open_as(int k, const char *who)
{
    char ca[512], cert[512], key[512];
    snprintf(ca, sizeof(ca), "%s/ca.crt", certs);
    snprintf(cert, sizeof(cert), "%s/%s.crt", certs, who);
    snprintf(key, sizeof(key), "%s/%s.key", certs, who);
    rrpc_broker_opts o = { .ca_file = ca, .cert_file = cert, .key_file = key,
                           .timeout_ms = 20000 };
    rrpc_broker *b;
    if (rrpc_broker_open(brokers[k], &o, &b))
        die("cannot open a session with %s: %s", brokers[k], rrpc_broker_last_error(NULL));
    return b;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* p50 and p99 of @n samples (sorted here), in ms. */
static void pct(int64_t *v, size_t n, double *p50, double *p99)
{
    qsort(v, n, sizeof(*v), cmp_i64);
    *p50 = n ? v[n / 2] / 1000.0 : 0;
    *p99 = n ? v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1000.0 : 0;
}

/* ---- 1. registration ------------------------------------------------------------ */

/* A child: registers services [from, to) and writes each register's time (us) to @fd,
 * then holds them until it is told to stop (SIGTERM). */
static void registrar(int from, int to, int fd)
{
    rrpc_broker *b = open_as(0, "kv-server");
    int n = to - from;
    rrpc_ctx **ctx = calloc((size_t)n, sizeof(*ctx));
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof(name), "bench-%d", from + i);
        const char *uri[] = { "tcp://127.0.0.1:9" }; /* never dialled: lookups only */
        if (rrpc_ctx_create(&ctx[i]))
            die("cannot make a context");
        int64_t t0 = now_us();
        int r = rrpc_broker_register(b, ctx[i], name, uri, 1, 0);
        int64_t us = r ? -1 : now_us() - t0;
        if (r)
            fprintf(stderr, "register %s: %s\n", name, rrpc_broker_last_error(b));
        if (write(fd, &us, sizeof(us)) != sizeof(us))
            _exit(1);
    }
    close(fd);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    int sig;
    sigwait(&s, &sig);
    for (int i = 0; i < n; i++)
        rrpc_ctx_destroy(ctx[i]);
    rrpc_broker_close(b);
    _exit(0);
}

static pid_t kids[256];

/* Waits (30 s at most) until the first broker takes registrations: one on etcd
 * refuses them (-EAGAIN) until its first view of etcd.  The ms it took. */
static int64_t wait_ready(void)
{
    rrpc_broker *b = open_as(0, "kv-server");
    rrpc_ctx *ctx;
    if (rrpc_ctx_create(&ctx))
        die("cannot make a context");
    const char *uri[] = { "tcp://127.0.0.1:9" };
    int64_t t0 = now_us();
    int r;
    while ((r = rrpc_broker_register(b, ctx, "bench-probe", uri, 1, 0)) == -EAGAIN &&
           now_us() - t0 < 30 * 1000000LL)
        usleep(50 * 1000);
    if (r)
        die("the first broker does not take registrations: %s", rrpc_broker_last_error(b));
    rrpc_broker_unregister(b, "bench-probe");
    rrpc_ctx_destroy(ctx); /* before the handle, as rrpc_broker_close asks */
    rrpc_broker_close(b);
    return (now_us() - t0) / 1000;
}

static void register_all(void)
{
    int fds[2];
    if (pipe(fds))
        die("pipe: %s", strerror(errno));
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &s, NULL); /* the children wait for it with sigwait */
    int64_t t0 = now_us();
    for (int p = 0; p < procs; p++) {
        int from = services * p / procs, to = services * (p + 1) / procs;
        if ((kids[p] = fork()) == 0) {
            close(fds[0]);
            registrar(from, to, fds[1]);
        }
    }
    close(fds[1]);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    int64_t *lat = calloc((size_t)services, sizeof(*lat));
    size_t n = 0, failed = 0;
    int64_t us;
    while (read(fds[0], &us, sizeof(us)) == sizeof(us)) {
        if (us < 0)
            failed++;
        else
            lat[n++] = us;
    }
    close(fds[0]);
    double secs = (double)(now_us() - t0) / 1e6, p50, p99;
    pct(lat, n, &p50, &p99);
    printf("%-44s %10.0f/s   p50 %8.3f ms   p99 %8.3f ms   (%zu ok, %zu failed, %d processes)\n",
           "register, through the first broker", (double)n / secs, p50, p99, n, failed, procs);
    free(lat);
    if (failed)
        printf("  (registrations failed: see the lines above)\n");
}

static void release_all(void)
{
    for (int p = 0; p < procs; p++)
        if (kids[p] > 0) {
            kill(kids[p], SIGTERM);
            waitpid(kids[p], NULL, 0);
        }
}

/* ---- 2. lookups -------------------------------------------------------------------- */

struct looker {
    pthread_t t;
    int broker;
    atomic_bool *stop;
    int64_t *lat;
    size_t n, cap, failed;
    unsigned seed;
};

static void *look(void *arg)
{
    struct looker *l = arg;
    rrpc_broker *b = open_as(l->broker, "kv-client");
    while (!atomic_load(l->stop)) {
        char name[64];
        snprintf(name, sizeof(name), "bench-%d", (int)(rand_r(&l->seed) % (unsigned)services));
        rrpc_service_info *info = NULL;
        int64_t t0 = now_us();
        int r = rrpc_broker_lookup(b, name, &info);
        int64_t us = now_us() - t0;
        rrpc_service_info_free(info);
        if (r) {
            if (!l->failed++)
                fprintf(stderr, "lookup %s: %s\n", name, rrpc_broker_last_error(b));
            continue;
        }
        if (l->n == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 4096;
            l->lat = realloc(l->lat, l->cap * sizeof(*l->lat));
        }
        l->lat[l->n++] = us;
    }
    rrpc_broker_close(b);
    return NULL;
}

static void lookups(int spread)
{
    atomic_bool stop = false;
    struct looker *l = calloc((size_t)threads, sizeof(*l));
    for (int i = 0; i < threads; i++) {
        l[i].broker = i % spread;
        l[i].stop = &stop;
        l[i].seed = (unsigned)i * 7919u + 1;
        pthread_create(&l[i].t, NULL, look, &l[i]);
    }
    int64_t t0 = now_us();
    usleep((useconds_t)(duration * 1e6));
    atomic_store(&stop, true);
    size_t total = 0, failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(l[i].t, NULL);
        total += l[i].n;
        failed += l[i].failed;
    }
    double secs = (double)(now_us() - t0) / 1e6;
    int64_t *all = malloc((total ? total : 1) * sizeof(*all));
    size_t k = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(all + k, l[i].lat, l[i].n * sizeof(*all));
        k += l[i].n;
        free(l[i].lat);
    }
    double p50, p99;
    pct(all, total, &p50, &p99);
    char what[96];
    snprintf(what, sizeof(what), "lookup, %d threads over %d broker%s", threads, spread,
             spread > 1 ? "s" : "");
    printf("%-44s %10.0f/s   p50 %8.3f ms   p99 %8.3f ms   (%zu failed)\n", what,
           (double)total / secs, p50, p99, failed);
    free(all);
    free(l);
}

/* ---- 3. visibility ------------------------------------------------------------------ */

static int64_t until(rrpc_broker *b, const char *name, int want)
{
    int64_t t0 = now_us();
    for (;;) {
        rrpc_service_info *info = NULL;
        int r = rrpc_broker_lookup(b, name, &info);
        rrpc_service_info_free(info);
        if (r == want)
            return now_us() - t0;
        if (now_us() - t0 > 30 * 1000000LL)
            return -1;
        usleep(1000);
    }
}

static void visible(void)
{
    rrpc_broker *a = open_as(0, "kv-server"), *b = open_as(1, "kv-client");
    /* Contexts live until @a is closed: the handle remembers each gated one. */
    rrpc_ctx **ctxs = calloc((size_t)visibility, sizeof(*ctxs));
    int64_t *add = calloc((size_t)visibility, sizeof(*add)),
            *del = calloc((size_t)visibility, sizeof(*del)),
            *wadd = calloc((size_t)visibility, sizeof(*wadd)),
            *wdel = calloc((size_t)visibility, sizeof(*wdel));
    size_t na = 0, nd = 0, nwa = 0, nwd = 0, lost = 0, wlost = 0;
    for (int i = 0; i < visibility; i++) {
        char name[64];
        snprintf(name, sizeof(name), "bench-vis-%d", i);
        if (rrpc_ctx_create(&ctxs[i]))
            die("cannot make a context");
        const char *uri[] = { "tcp://127.0.0.1:9" };
        rrpc_broker_watch *w = NULL;
        if (rrpc_broker_watch_open(b, name, &w))
            fprintf(stderr, "watch %s: %s\n", name, rrpc_broker_last_error(b));
        if (rrpc_broker_register(a, ctxs[i], name, uri, 1, 0)) {
            fprintf(stderr, "register %s: %s\n", name, rrpc_broker_last_error(a));
            lost++;
            rrpc_broker_watch_close(w);
            continue;
        }
        int64_t t_reg = now_us();
        rrpc_watch_event ev;
        if (w && rrpc_broker_watch_next(w, 30000, &ev) == 0 && ev.type == RRPC_WATCH_ADDED)
            wadd[nwa++] = now_us() - t_reg;
        else
            wlost++;
        int64_t us = until(b, name, 0);
        if (us >= 0)
            add[na++] = us;
        else
            lost++;
        rrpc_broker_unregister(a, name);
        int64_t t_unreg = now_us();
        us = until(b, name, -ENOENT);
        if (us >= 0)
            del[nd++] = us;
        else
            lost++;
        if (w && rrpc_broker_watch_next(w, 30000, &ev) == 0 && ev.type == RRPC_WATCH_REMOVED)
            wdel[nwd++] = now_us() - t_unreg;
        else
            wlost++;
        rrpc_broker_watch_close(w);
    }
    double p50, p99;
    pct(add, na, &p50, &p99);
    printf("%-44s %10s     p50 %8.3f ms   p99 %8.3f ms   (%zu samples)\n",
           "registered via A, seen via B", "", p50, p99, na);
    pct(del, nd, &p50, &p99);
    printf("%-44s %10s     p50 %8.3f ms   p99 %8.3f ms   (%zu samples, %zu never seen)\n",
           "unregistered via A, gone via B", "", p50, p99, nd, lost);
    pct(wadd, nwa, &p50, &p99);
    printf("%-44s %10s     p50 %8.3f ms   p99 %8.3f ms   (%zu samples)\n",
           "registered via A, a watch via B told", "", p50, p99, nwa);
    pct(wdel, nwd, &p50, &p99);
    printf("%-44s %10s     p50 %8.3f ms   p99 %8.3f ms   (%zu samples, %zu not told)\n",
           "unregistered via A, a watch via B told", "", p50, p99, nwd, wlost);
    free(add);
    free(del);
    free(wadd);
    free(wdel);
    for (int i = 0; i < visibility; i++)
        rrpc_ctx_destroy(ctxs[i]); /* before the handles, as rrpc_broker_close asks */
    free(ctxs);
    rrpc_broker_close(b);
    rrpc_broker_close(a);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: rrpc-broker-bench --brokers HOST:PORT[,HOST:PORT...] --certs DIR\n"
               "         [--services N] [--procs P] [--threads T] [--duration S] "
               "[--visibility K]\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        if (!strcmp(argv[i], "--brokers")) {
            char tmp[1024];
            snprintf(tmp, sizeof(tmp), "%s", v);
            for (char *s, *t = strtok_r(tmp, ",", &s); t && n_brokers < MAX_BROKERS;
                 t = strtok_r(NULL, ",", &s))
                snprintf(brokers[n_brokers++], sizeof(brokers[0]), "%s", t);
        } else if (!strcmp(argv[i], "--certs")) {
            certs = v;
        } else if (!strcmp(argv[i], "--services")) {
            services = atoi(v);
        } else if (!strcmp(argv[i], "--procs")) {
            procs = atoi(v);
        } else if (!strcmp(argv[i], "--threads")) {
            threads = atoi(v);
        } else if (!strcmp(argv[i], "--duration")) {
            duration = atof(v);
        } else if (!strcmp(argv[i], "--visibility")) {
            visibility = atoi(v);
        } else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!n_brokers || !certs || services < 1 || procs < 1 || procs > 256 || procs > services ||
        threads < 1 || threads > 256 || duration <= 0 || visibility < 0) {
        usage(stderr);
        fprintf(stderr, "(--brokers and --certs are required; 1 <= P <= min(N, 256), "
                        "1 <= T <= 256)\n");
        return 2;
    }
    /* A context holds two descriptors: a registrar of N/P services needs room. */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_DFL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("rrpc-broker-bench: %d services, %d broker%s (%s%s), %d lookup threads, %.1f s\n",
           services, n_brokers, n_brokers > 1 ? "s" : "", brokers[0],
           n_brokers > 1 ? ", ..." : "", threads, duration);
    printf("%-44s %10lld ms\n", "first broker ready for registrations after",
           (long long)wait_ready());
    register_all();
    lookups(1);
    if (n_brokers > 1)
        lookups(n_brokers);
    if (n_brokers > 1 && visibility)
        visible();
    release_all();
    return 0;
}

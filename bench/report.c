/* SPDX-License-Identifier: MIT */
/* rrpc-bench: samples, results, the table / JSON / CSV output, the targets
 * and progress on stderr. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#include "bench.h"
#include "bench_commit.h"

/* ---- samples ---------------------------------------------------------------- */

void samples_add(struct samples *s, uint64_t ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        uint64_t *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return; /* out of memory: this sample is lost, the run goes on */
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ns;
}

void samples_free(struct samples *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted @v, in microseconds. */
static double pct(const uint64_t *v, size_t n, double p)
{
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)v[rank - 1] / 1e3;
}

/* ---- results ------------------------------------------------------------------ */

static struct result **results;
static size_t nresults, results_cap;

struct result *result_add(const char *transport, const char *test, size_t size, int depth,
                          const char *variant)
{
    if (nresults == results_cap) {
        size_t cap = results_cap ? results_cap * 2 : 64;
        struct result **r = realloc(results, cap * sizeof(*r));
        if (!r) {
            fprintf(stderr, "rrpc-bench: out of memory\n");
            exit(1);
        }
        results = r;
        results_cap = cap;
    }
    struct result *r = calloc(1, sizeof(*r));
    if (!r) {
        fprintf(stderr, "rrpc-bench: out of memory\n");
        exit(1);
    }
    snprintf(r->transport, sizeof(r->transport), "%s", transport);
    snprintf(r->test, sizeof(r->test), "%s", test);
    snprintf(r->variant, sizeof(r->variant), "%s", variant ? variant : "");
    r->size = size;
    r->depth = depth;
    results[nresults++] = r;
    return r;
}

/* The quantiles (in %) kept of each latency distribution for the CDF plot. */
const double cdf_q[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 12, 14, 16, 18, 20, 22, 24,
                        26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60,
                        62, 64, 66, 68, 70, 72, 74, 76, 78, 80, 82, 84, 86, 88, 90, 91, 92, 93,
                        94, 95, 96, 97, 98, 99, 99.5, 99.9, 99.95, 99.99, 100};
const int cdf_nq = (int)(sizeof(cdf_q) / sizeof(cdf_q[0]));

void result_cpu(struct result *r, const struct cpu_mark *a, const struct cpu_mark *b,
                const struct outcome *o)
{
    double wall = (double)(b->t_ns - a->t_ns);
    for (int k = 0; k < 2; k++) {
        r->polls_cli[k] = (long long)(b->polls_cli[k] - a->polls_cli[k]);
        r->loop_cli[k] = (long long)(b->loop_cli[k] - a->loop_cli[k]);
        r->polls_srv[k] =
            a->polls_srv_ok && b->polls_srv_ok ? (long long)(b->polls_srv[k] - a->polls_srv[k]) : -1;
    }
    r->cli_core_pct = r->srv_core_pct = -1;
    r->cpu_cli_us = r->cpu_srv_us = -1;
    if (wall <= 0)
        return;
    double cli = (double)(b->self_ns - a->self_ns);
    double srv = b->srv_ok && a->srv_ok ? (double)(b->srv_ns - a->srv_ns) : -1;
    r->cli_core_pct = cli / wall * 100;
    if (srv >= 0)
        r->srv_core_pct = srv / wall * 100;
    /* The marks bracket warm-up and drain too: the CPU of the measured window
     * is taken as its share of the wall time. */
    double share = o->seconds * 1e9 / wall;
    if (o->ops == 0)
        return;
    r->has_cpu = true;
    r->cpu_cli_us = cli * share / (double)o->ops / 1e3;
    if (srv >= 0)
        r->cpu_srv_us = srv * share / (double)o->ops / 1e3;
}

void result_fill(struct result *r, const struct outcome *o, bool lat)
{
    r->ops = o->ops;
    r->seconds = o->seconds;
    if (o->status) {
        snprintf(r->error, sizeof(r->error), "%s", o->err[0] ? o->err : rrpc_strerror(o->status));
        return;
    }
    if (o->seconds > 0) {
        r->ops_per_s = (double)o->ops / o->seconds;
        r->mib_per_s = (double)o->bytes / o->seconds / BENCH_MIB;
    }
    if (lat && o->lat.n) {
        uint64_t *v = o->lat.v;
        size_t n = o->lat.n;
        qsort(v, n, sizeof(*v), cmp_u64);
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += (double)v[i];
        r->has_lat = true;
        r->samples = n;
        r->lat_min = (double)v[0] / 1e3;
        r->p50 = pct(v, n, 50);
        r->p90 = pct(v, n, 90);
        r->p99 = pct(v, n, 99);
        r->p999 = pct(v, n, 99.9);
        r->lat_max = (double)v[n - 1] / 1e3;
        r->mean = sum / (double)n / 1e3;
        for (int i = 0; i < cdf_nq; i++)
            r->cdf[i] = pct(v, n, cdf_q[i] > 0 ? cdf_q[i] : 1e-9);
        r->ncdf = cdf_nq;
    }
}

size_t results_count(void)
{
    return nresults;
}

struct result *result_at(size_t i)
{
    return i < nresults ? results[i] : NULL;
}

struct result *result_find(const char *transport, const char *test, size_t size)
{
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (strcmp(r->transport, transport) == 0 && strcmp(r->test, test) == 0 &&
            r->size == size && !r->error[0] && !r->skipped)
            return r;
    }
    return NULL;
}

/* ---- run description --------------------------------------------------------- */

struct run_meta g_meta;

void meta_collect(int argc, char **argv)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(g_meta.date, sizeof(g_meta.date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(g_meta.host, sizeof(g_meta.host), "%s", u.nodename);
        snprintf(g_meta.kernel, sizeof(g_meta.kernel), "%s %s %s", u.sysname, u.release,
                 u.machine);
    }
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            char *p = colon + 1;
            while (*p == ' ')
                p++;
            p[strcspn(p, "\n")] = 0;
            snprintf(g_meta.cpu, sizeof(g_meta.cpu), "%s", p);
            break;
        }
    }
    if (f)
        fclose(f);
    g_meta.ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t off = 0;
    for (int i = 0; i < argc && off < sizeof(g_meta.cmdline); i++) {
        int n = snprintf(g_meta.cmdline + off, sizeof(g_meta.cmdline) - off, "%s%s",
                         i ? " " : "", argv[i]);
        if (n < 0)
            break;
        off += (size_t)n;
    }
}

/* ---- formatting -------------------------------------------------------------- */

void fmt_size(char *buf, size_t len, size_t b)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, len, "%zu KiB", b >> 10);
    else
        snprintf(buf, len, "%zu B", b);
}

static void fmt_num(char *buf, size_t len, double v, bool have)
{
    if (!have)
        snprintf(buf, len, "-");
    else if (v >= 100000)
        snprintf(buf, len, "%.0f", v);
    else if (v >= 100)
        snprintf(buf, len, "%.1f", v);
    else
        snprintf(buf, len, "%.2f", v);
}

static bool is_sweep(const struct result *r)
{
    return strncmp(r->test, "sweep_", 6) == 0;
}

static bool is_scale(const struct result *r)
{
    return strcmp(r->test, "scale") == 0;
}

/* "12.3" or "-" (unknown) */
static void fmt_side(char *buf, size_t len, const struct scale_side *sd, double v)
{
    if (sd->known)
        snprintf(buf, len, "%.1f", v);
    else
        snprintf(buf, len, "-");
}

static bool any_rows(bool scale)
{
    for (size_t i = 0; i < nresults; i++)
        if (is_scale(results[i]) == scale)
            return true;
    return false;
}

/* The scale test: one row per transport and connection count. */
static void report_scale(FILE *f)
{
    bool first = true;
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (!is_scale(r))
            continue;
        if (first) {
            fprintf(f, "\nScale (idle figures per connection after %ld ms idle, growth over the "
                       "baseline / connections; calls: 64 B echo, one in flight on each):\n",
                    g_opts.scale_idle_ms);
            fprintf(f, "%-8s %7s %7s %9s %9s | %9s %9s %7s | %9s %9s %7s | %10s\n", "transp.",
                    "conns", "asked", "conn. s", "conn/s", "cli KiB", "cli pin", "cli fd",
                    "srv KiB", "srv pin", "srv fd", "calls/s");
            first = false;
        }
        const struct scale_point *p = r->scale;
        if (r->skipped || !p || (r->error[0] && p->conns == 0)) {
            fprintf(f, "%-8s %7s %7d  %s: %s\n", r->transport, "-", r->depth,
                    r->skipped ? "skipped" : "FAILED", r->error);
            continue;
        }
        char v[6][24];
        fmt_side(v[0], sizeof(v[0]), &p->cli, p->cli.rss_kib);
        fmt_side(v[1], sizeof(v[1]), &p->cli, p->cli.pin_kib);
        fmt_side(v[2], sizeof(v[2]), &p->cli, p->cli.fds);
        fmt_side(v[3], sizeof(v[3]), &p->srv, p->srv.rss_kib);
        fmt_side(v[4], sizeof(v[4]), &p->srv, p->srv.pin_kib);
        fmt_side(v[5], sizeof(v[5]), &p->srv, p->srv.fds);
        if (p->one_process)
            snprintf(v[3], sizeof(v[3]), "(one");
        if (p->one_process)
            snprintf(v[4], sizeof(v[4]), "process)");
        char calls[24];
        fmt_num(calls, sizeof(calls), p->calls_per_s, p->calls_per_s > 0);
        fprintf(f, "%-8s %7ld %7ld %9.3f %9.0f | %9s %9s %7s | %9s %9s %7s | %10s\n",
                r->transport, p->conns, p->asked, p->connect_s, p->connects_per_s, v[0], v[1],
                v[2], v[3], v[4], v[5], calls);
        if (p->stopped[0])
            fprintf(f, "         %s\n", p->stopped);
        if (r->error[0])
            fprintf(f, "         FAILED: %s\n", r->error);
        if (p->srv.known && p->srv.conns_seen != p->conns)
            fprintf(f, "         (the server counted %ld new connections)\n", p->srv.conns_seen);
    }
    if (!first) {
        const char *lim = "";
        for (size_t i = 0; i < nresults && !lim[0]; i++)
            if (is_scale(results[i]) && results[i]->scale)
                lim = results[i]->scale->limits;
        fprintf(f, "(conn. s: wall time of the step's new connections, %s; KiB: RSS, which holds "
                   "the pinned pages too; pin: VmPin.\n inproc: both sides in one process, the "
                   "client columns hold both.)\n",
                lim[0] ? lim : "limits unknown");
    }
}

static const char *const legend =
    "Latencies are ROUND TRIPS in microseconds, measured at the client with CLOCK_MONOTONIC:\n"
    "from issuing the call/operation to its completion (RPC: the response arrived; WRITE/READ:\n"
    "the completion, i.e. the data is in the peer's / our memory).  No one-way latency is\n"
    "measured; one-way is estimated as RTT/2 where printed (perftest's *_lat tools report that).\n"
    "MiB/s = payload bytes in one direction per second, 2^20 bytes (perftest's \"MB/sec\").\n";

static bool polls_stopped(const struct result *r)
{
    return r->polls_cli[0] > 0 || r->polls_cli[1] > 0 || r->polls_srv[0] > 0 ||
           r->polls_srv[1] > 0;
}

/* "client 2 budget + 5 contended, server ..." into @buf: how often polling stopped ("" never). */
static void fmt_polls(char *buf, size_t len, const struct result *r)
{
    buf[0] = 0;
    if (!polls_stopped(r))
        return;
    char srv[64] = "unknown";
    if (r->polls_srv[0] >= 0)
        snprintf(srv, sizeof(srv), "%lld budget + %lld contended", r->polls_srv[0],
                 r->polls_srv[1]);
    snprintf(buf, len, "client %lld budget + %lld contended, server %s",
             r->polls_cli[0], r->polls_cli[1], srv);
}

/* Thread-mode clients: how often the loop thread woke, and how many blocking
 * calls ran the loop themselves (each taken over costs no wake-up of the loop
 * thread; a wake-up per call is the two-wake-up path). */
static void report_loop(FILE *f)
{
    bool first = true;
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (r->loop_cli[0] <= 0 && r->loop_cli[1] <= 0)
            continue;
        if (first)
            fprintf(f, "\nThread-mode client's loop thread (rrpc_stats loop_takeovers / "
                       "loop_thread_wakeups; per operation):\n");
        first = false;
        char sz[16];
        fmt_size(sz, sizeof(sz), r->size);
        double ops = (double)(r->ops > 0 ? r->ops : 1);
        fprintf(f, "  %-8s %-15s %8s  %lld calls ran the loop themselves (%.2f/op), the loop "
                   "thread woke %lld times (%.2f/op)\n",
                r->transport, r->test, sz, r->loop_cli[1], (double)r->loop_cli[1] / ops,
                r->loop_cli[0], (double)r->loop_cli[0] / ops);
    }
}

/* The tests during which a context stopped polling: over its CPU budget, or
 * while its thread did not get the CPU (RRPC_BUSY_POLL_MIN_SHARE_PCT); each
 * contended stop means 0.1-1.6 s of sleeping on the fd instead. */
static void report_polls(FILE *f)
{
    bool first = true;
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (!polls_stopped(r))
            continue;
        if (first)
            fprintf(f, "\nPolling stopped during (rrpc_stats busy_poll_budget_stops / "
                       "busy_poll_contended_stops; a contended stop sleeps 0.1-1.6 s):\n");
        first = false;
        char sz[16], why[160];
        fmt_size(sz, sizeof(sz), r->size);
        fmt_polls(why, sizeof(why), r);
        fprintf(f, "  %-8s %-15s %8s  %s\n", r->transport, r->test, sz, why);
    }
}

void report_table(FILE *f)
{
    fprintf(f, "rrpc-bench %s (libroce_rpc %s, commit %s) on %s: %s, %s, %ld CPUs\n",
            RRPC_VERSION_STRING, RRPC_VERSION_STRING, BENCH_COMMIT, g_meta.host, g_meta.kernel,
            g_meta.cpu, g_meta.ncpu);
    fprintf(f, "date %s; %s; %.2f s per test, %.2f s per sweep point, warm-up <= %ld ops / %.2f s; "
               "client %s mode\n\n",
            g_meta.date, g_opts.quick ? "QUICK run (indicative only)" : "full run",
            g_opts.duration, g_opts.sweep_duration, g_opts.warmup_ops, g_opts.warmup_max_s,
            g_opts.client_thread_mode ? "thread" : "driven");
    if (!any_rows(false)) { /* the scale test alone */
        report_scale(f);
        return;
    }
    fputs(legend, f);
    fputc('\n', f);
    fprintf(f, "%-8s %-15s %8s %5s %8s | %8s %8s %8s %8s %9s | %10s %9s | %7s %7s  %s\n",
            "transp.", "test", "size", "depth", "samples", "p50", "p90", "p99", "p99.9", "max",
            "ops/s", "MiB/s", "cli CPU", "srv CPU", "notes");
    fprintf(f, "%-8s %-15s %8s %5s %8s | %8s %8s %8s %8s %9s | %10s %9s | %7s %7s\n", "", "", "",
            "", "", "RTT us", "RTT us", "RTT us", "RTT us", "RTT us", "", "", "us/op", "us/op");
    char last_test[24] = "";
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (is_sweep(r) || is_scale(r))
            continue;
        if (last_test[0] && strcmp(last_test, r->test) != 0)
            fputc('\n', f);
        snprintf(last_test, sizeof(last_test), "%s", r->test);
        char sz[16];
        fmt_size(sz, sizeof(sz), r->size);
        if (strcmp(r->test, "connect") == 0) {
            fprintf(f, "%-8s %-15s %s: %s\n", r->transport, r->test,
                    r->skipped ? "skipped" : "FAILED", r->error);
            continue;
        }
        if (r->skipped || r->error[0]) {
            fprintf(f, "%-8s %-15s %8s %5d  %s: %s\n", r->transport, r->test, sz, r->depth,
                    r->skipped ? "skipped" : "FAILED", r->error);
            continue;
        }
        if (strcmp(r->test, "idle_cpu") == 0) {
            char sp[24];
            fmt_num(sp, sizeof(sp), r->srv_core_pct, r->srv_core_pct >= 0);
            fprintf(f, "%-8s %-15s %8s %5s %8s | client %.2f%% of a core, server %s%%  %s\n",
                    r->transport, r->test, "-", "-", "-", r->cli_core_pct, sp, r->variant);
            continue;
        }
        char a[7][24];
        fmt_num(a[0], sizeof(a[0]), r->p50, r->has_lat);
        fmt_num(a[1], sizeof(a[1]), r->p90, r->has_lat && r->p90 > 0);
        fmt_num(a[2], sizeof(a[2]), r->p99, r->has_lat && r->p99 > 0);
        fmt_num(a[3], sizeof(a[3]), r->p999, r->has_lat && r->p999 > 0);
        fmt_num(a[4], sizeof(a[4]), r->lat_max, r->has_lat && r->lat_max > 0);
        fmt_num(a[5], sizeof(a[5]), r->ops_per_s, r->ops_per_s > 0);
        bool qos = strncmp(r->test, "qos_", 4) == 0;
        fmt_num(a[6], sizeof(a[6]), qos ? r->load_mib_per_s : r->mib_per_s, true);
        char samples[24];
        snprintf(samples, sizeof(samples), "%llu",
                 (unsigned long long)(r->has_lat ? r->samples : r->ops));
        char cc[24], cs[24];
        fmt_num(cc, sizeof(cc), r->cpu_cli_us, r->has_cpu && r->cpu_cli_us >= 0);
        fmt_num(cs, sizeof(cs), r->cpu_srv_us, r->has_cpu && r->cpu_srv_us >= 0);
        fprintf(f, "%-8s %-15s %8s %5d %8s | %8s %8s %8s %8s %9s | %10s %9s | %7s %7s  %s\n",
                r->transport, r->test, sz, r->depth, samples, a[0], a[1], a[2], a[3], a[4], a[5],
                a[6], cc, cs, r->variant);
    }
    fprintf(f, "\n(qos rows: latency and ops/s are the probe's, MiB/s is the bulk load's, CPU per "
               "operation of probe and load together.\n CPU us/op: CPU time of the whole client / "
               "server process per operation; peers: of the tool's processes, start-up and\n "
               "warm-up included.  Peer rows that report RTT/2 are doubled: every latency here is "
               "a round trip.)\n");
    report_polls(f);
    report_loop(f);
    report_scale(f);
    bool first = true;
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (strcmp(r->test, "rpc_rtt") || !r->has_lat)
            continue;
        char sz[16];
        fmt_size(sz, sizeof(sz), r->size);
        fprintf(f, "%s %s %s %.2f us", first ? "ONE-WAY estimate (rpc_rtt p50 / 2, not measured):" : ",",
                r->transport, sz, r->p50 / 2);
        first = false;
    }
    if (!first)
        fputc('\n', f);

    /* The sweep, one row per size, transports side by side. */
    const char *tr[3] = {"tcp", "verbs", "raw-tcp"};
    bool have[3] = {false, false, false};
    bool any = false;
    for (size_t i = 0; i < nresults; i++)
        for (int t = 0; t < 3; t++)
            if (is_sweep(results[i]) && strcmp(results[i]->transport, tr[t]) == 0)
                have[t] = any = true;
    if (!any)
        return;
    fprintf(f, "\nMessage-size sweep (RPC echo round trip p50 in us, 1 in flight; RPC sink and "
               "one-sided WRITE bandwidth in MiB/s, %d in flight):\n",
            g_opts.bw_depth);
    fprintf(f, "%8s", "size");
    for (int t = 0; t < 3; t++)
        if (have[t])
            fprintf(f, " | %-7s %9s %9s %9s", tr[t], "RTT p50", "RPC MiB/s",
                    t == 2 ? "" : "WRITE");
    if (have[0] && have[2])
        fprintf(f, " | %-17s", "tcp/raw RTT, bw");
    fputc('\n', f);
    size_t sizes[64];
    int nsizes = 0;
    for (size_t i = 0; i < nresults && nsizes < 64; i++) {
        if (!is_sweep(results[i]))
            continue;
        bool seen = false;
        for (int k = 0; k < nsizes; k++)
            seen |= sizes[k] == results[i]->size;
        if (!seen)
            sizes[nsizes++] = results[i]->size;
    }
    for (int k = 0; k < nsizes; k++) {
        char sz[16];
        fmt_size(sz, sizeof(sz), sizes[k]);
        fprintf(f, "%8s", sz);
        struct result *rt[3], *bw[3];
        for (int t = 0; t < 3; t++) {
            rt[t] = result_find(tr[t], "sweep_rtt", sizes[k]);
            bw[t] = result_find(tr[t], "sweep_bw", sizes[k]);
            if (!have[t])
                continue;
            struct result *wr = result_find(tr[t], "sweep_write_bw", sizes[k]);
            char x[3][24];
            fmt_num(x[0], sizeof(x[0]), rt[t] ? rt[t]->p50 : 0, rt[t] && rt[t]->has_lat);
            fmt_num(x[1], sizeof(x[1]), bw[t] ? bw[t]->mib_per_s : 0, bw[t] != NULL);
            fmt_num(x[2], sizeof(x[2]), wr ? wr->mib_per_s : 0, wr != NULL);
            fprintf(f, " | %-7s %9s %9s %9s", "", x[0], x[1], t == 2 ? "" : x[2]);
        }
        if (have[0] && have[2]) {
            char a[24] = "-", b[24] = "-";
            if (rt[0] && rt[2] && rt[0]->has_lat && rt[2]->has_lat && rt[2]->p50 > 0)
                snprintf(a, sizeof(a), "%.2fx", rt[0]->p50 / rt[2]->p50);
            if (bw[0] && bw[2] && bw[2]->mib_per_s > 0)
                snprintf(b, sizeof(b), "%.2fx", bw[0]->mib_per_s / bw[2]->mib_per_s);
            fprintf(f, " | %7s %9s", a, b);
        }
        fputc('\n', f);
    }
}

/* ---- targets ------------------------------------------------------------------ */

struct target {
    const char *name;
    bool evaluated;
    bool met;
    double ratio;
    char detail[256];
};

/* The small-RPC round trip of @transport at 64 B: the rtt test, else the sweep point. */
static struct result *rtt64(const char *transport)
{
    struct result *r = result_find(transport, "rpc_rtt", 64);
    if (!r || !r->has_lat)
        r = result_find(transport, "sweep_rtt", 64);
    return r && r->has_lat ? r : NULL;
}

static struct result *lat_row(const char *transport, const char *test)
{
    if (strcmp(test, "rpc_rtt") == 0)
        return rtt64(transport);
    struct result *r = result_find(transport, test, 64);
    return r && r->has_lat ? r : NULL;
}

static struct result *bw_row(const char *transport, const char *test)
{
    struct result *r = result_find(transport, test, 1u << 20);
    if (!r && strcmp(test, "rpc_large_bw") == 0)
        r = result_find(transport, "sweep_bw", 1u << 20);
    if (!r && strcmp(test, "write_bw") == 0)
        r = result_find(transport, "sweep_write_bw", 1u << 20);
    return r && r->mib_per_s > 0 ? r : NULL;
}

/* Why a row is missing: its error (a peer "not installed") or "not run". */
static const char *why_missing(const char *transport, const char *test, size_t size)
{
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (strcmp(r->transport, transport) == 0 && strcmp(r->test, test) == 0 &&
            r->size == size && r->error[0])
            return r->error;
    }
    return "not run (see --tests and --transport)";
}

/* Appends to @t's detail how often polling stopped during @r, if it did. */
static void add_polls(struct target *t, const struct result *r)
{
    char why[160];
    fmt_polls(why, sizeof(why), r);
    size_t n = strlen(t->detail);
    if (why[0])
        snprintf(t->detail + n, sizeof(t->detail) - n, "; polling stopped: %s", why);
}

/* A latency comparison: a's p50 <= limit x b's p50 (limit 0: no target). */
static void t_lat(struct target *t, const char *name, const char *at, const char *atest,
                  const char *bt, const char *btest, double limit)
{
    *t = (struct target){.name = name};
    struct result *a = lat_row(at, atest), *b = lat_row(bt, btest);
    if (a && b && b->p50 > 0) {
        t->evaluated = true;
        t->ratio = a->p50 / b->p50;
        t->met = t->ratio <= limit;
        snprintf(t->detail, sizeof(t->detail), "RTT p50 %.2f us vs %.2f us = %.2fx (limit %.2fx)",
                 a->p50, b->p50, t->ratio, limit);
        add_polls(t, a);
    } else {
        snprintf(t->detail, sizeof(t->detail), "%s %s: %s", a ? bt : at, a ? btest : atest,
                 a ? why_missing(bt, btest, 64) : why_missing(at, atest, 64));
    }
}

static void t_bw(struct target *t, const char *name, const char *at, const char *atest,
                 const char *bt, const char *btest, double limit)
{
    *t = (struct target){.name = name};
    struct result *a = bw_row(at, atest), *b = bw_row(bt, btest);
    if (a && b) {
        t->evaluated = true;
        t->ratio = a->mib_per_s / b->mib_per_s;
        t->met = t->ratio >= limit;
        snprintf(t->detail, sizeof(t->detail), "%.0f MiB/s vs %.0f MiB/s = %.2fx (limit %.2fx)",
                 a->mib_per_s, b->mib_per_s, t->ratio, limit);
        add_polls(t, a);
    } else {
        snprintf(t->detail, sizeof(t->detail), "%s %s: %s", a ? bt : at, a ? btest : atest,
                 a ? why_missing(bt, btest, 1u << 20) : why_missing(at, atest, 1u << 20));
    }
}

/* Isolation: the low-latency probe under the bulk load against itself unloaded,
 * and the load against the same bulk stream alone. */
static void t_iso(struct target *t, const char *name, const char *tr)
{
    *t = (struct target){.name = name};
    struct result *q = result_find(tr, "qos_separated", 64), *u = rtt64(tr);
    struct result *bw = bw_row(tr, "rpc_large_bw");
    if (q && q->has_lat && u && bw && u->p50 > 0 && u->p99 > 0) {
        double r50 = q->p50 / u->p50, r99 = q->p99 / u->p99, rbw = q->load_mib_per_s / bw->mib_per_s;
        t->evaluated = true;
        t->ratio = r50;
        t->met = r50 <= 3 && r99 <= 10 && rbw >= 0.8;
        snprintf(t->detail, sizeof(t->detail),
                 "probe p50 %.1f/%.1f us = %.2fx (<= 3x), p99 %.1f/%.1f us = %.2fx (<= 10x); bulk "
                 "%.0f/%.0f MiB/s = %.2fx (>= 0.8x)",
                 q->p50, u->p50, r50, q->p99, u->p99, r99, q->load_mib_per_s, bw->mib_per_s, rbw);
        add_polls(t, q);
    } else {
        snprintf(t->detail, sizeof(t->detail),
                 "needs rtt, large and qos on %s (--tests rtt,large,qos)", tr);
    }
}

static int targets(struct target *t)
{
    int n = 0;
    t_iso(&t[n++], "isolation tcp: probe under bulk p50<=3x p99<=10x, bulk>=0.8x", "tcp");
    t_iso(&t[n++], "isolation verbs: probe under bulk p50<=3x p99<=10x, bulk>=0.8x", "verbs");
    t_lat(&t[n++], "tcp 64 B RTT (defaults) <= 1.5x UCX tcp tag_lat", "tcp", "rpc_rtt", "ucx-tcp",
          "tag_lat", 1.5);
    t_lat(&t[n++], "tcp 64 B RTT, polling on <= UCX tcp tag_lat", "tcp", "rtt_poll_on", "ucx-tcp",
          "tag_lat", 1.0);
    t_lat(&t[n++], "tcp 64 B RTT, polling off <= 1.2x raw-tcp blocking", "tcp", "rtt_poll_off",
          "raw-tcp", "rpc_rtt", 1.2);
    if (g_opts.client_thread_mode)
        t_lat(&t[n++], "tcp rrpc_call_sync thread mode <= 1.3x driven", "tcp", "rpc_rtt", "tcp",
              "rtt_driven", 1.3);
    else
        t_lat(&t[n++], "tcp rrpc_call_sync thread mode <= 1.3x driven", "tcp", "rtt_thread_sync",
              "tcp", "rpc_rtt", 1.3);
    t_bw(&t[n++], "tcp 1 MiB RPC sink >= 0.95x iperf3", "tcp", "rpc_large_bw", "iperf3", "bulk",
         0.95);
    t_bw(&t[n++], "tcp 1 MiB one-sided WRITE >= 0.95x iperf3", "tcp", "write_bw", "iperf3", "bulk",
         0.95);
    /* perftest's rows already hold 2 x ib_send_lat (the round trip) */
    t_lat(&t[n++], "verbs 64 B RTT (defaults) <= 1.5x 2 x ib_send_lat", "verbs", "rpc_rtt",
          "perftest", "ib_send_lat", 1.5);
    t_bw(&t[n++], "verbs 1 MiB WRITE (defaults) >= 0.95x ib_write_bw", "verbs", "write_bw",
         "perftest", "ib_write_bw", 0.95);

    t[n] = (struct target){.name = "idle tcp context (defaults): < 5% of a core"};
    struct result *r = result_find("tcp", "idle_cpu", 0);
    if (r && r->cli_core_pct >= 0) {
        double worst = r->srv_core_pct > r->cli_core_pct ? r->srv_core_pct : r->cli_core_pct;
        t[n].evaluated = true;
        t[n].ratio = worst / 100;
        t[n].met = worst < 5;
        if (r->srv_core_pct >= 0)
            snprintf(t[n].detail, sizeof(t[n].detail),
                     "client %.2f%%, server %.2f%% of a core over 1 s after 100 ms idle",
                     r->cli_core_pct, r->srv_core_pct);
        else
            snprintf(t[n].detail, sizeof(t[n].detail),
                     "client %.2f%% of a core (server: unknown) over 1 s after 100 ms idle",
                     r->cli_core_pct);
    } else {
        snprintf(t[n].detail, sizeof(t[n].detail), "tcp idle_cpu: %s",
                 why_missing("tcp", "idle_cpu", 0));
    }
    n++;
    return n;
}

/* ---- the scale targets (issue #27) ----------------------------------------------- */

/* The scale row of @tr with the most connections up (NULL: none). */
static struct result *scale_top(const char *tr)
{
    struct result *best = NULL;
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (is_scale(r) && strcmp(r->transport, tr) == 0 && r->scale && r->scale->conns > 0 &&
            (!best || r->scale->conns > best->scale->conns))
            best = r;
    }
    return best;
}

/* The largest count asked of @tr's scale test, and why it has no figures. */
static long scale_asked(const char *tr, const char **why)
{
    long asked = 0;
    *why = strcmp(tr, "verbs") == 0 ? "not run (--tests scale --transport verbs, on a host with "
                                      "an RDMA device)"
                                    : "not run (--tests scale)";
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (!is_scale(r) || strcmp(r->transport, tr))
            continue;
        if (r->error[0])
            *why = r->error;
        if (r->scale && r->scale->asked > asked)
            asked = r->scale->asked;
    }
    return asked;
}

static double worse(double a, double b)
{
    return a > b ? a : b;
}

/* Idle cost per connection on each side at the largest count reached (and
 * at least @need connections when @need > 0). */
static void t_idle(struct target *t, const char *name, const char *tr, double kib, double fds,
                   long need)
{
    *t = (struct target){.name = name};
    struct result *r = scale_top(tr);
    const char *why;
    scale_asked(tr, &why);
    if (!r) {
        snprintf(t->detail, sizeof(t->detail), "%s scale: %.200s", tr, why);
        return;
    }
    const struct scale_point *p = r->scale;
    if (!p->cli.known || (!p->srv.known && !p->one_process)) {
        snprintf(t->detail, sizeof(t->detail), "%s scale at %ld connections: the %s's memory is "
                 "unknown", tr, p->conns, p->cli.known ? "server" : "client");
        return;
    }
    double k = worse(p->cli.rss_kib, p->srv.rss_kib), fd = worse(p->cli.fds, p->srv.fds);
    t->evaluated = true;
    t->ratio = k / kib;
    t->met = k <= kib && (fds <= 0 || fd <= fds) && p->conns >= need;
    int n = snprintf(t->detail, sizeof(t->detail),
                     "at %ld connections: client %.1f KiB (VmPin %.1f), %.2f fds; server %.1f KiB "
                     "(VmPin %.1f), %.2f fds",
                     p->conns, p->cli.rss_kib, p->cli.pin_kib, p->cli.fds, p->srv.rss_kib,
                     p->srv.pin_kib, p->srv.fds);
    if (need > 0 && p->conns < need && n > 0 && (size_t)n < sizeof(t->detail))
        snprintf(t->detail + n, sizeof(t->detail) - (size_t)n, "; %ld needed: %.150s", need,
                 p->stopped[0] ? p->stopped : "not asked (--scale-n)");
}

static void t_conns(struct target *t, const char *name, const char *tr, long need)
{
    *t = (struct target){.name = name};
    const char *why;
    long asked = scale_asked(tr, &why);
    struct result *r = scale_top(tr);
    if (asked < need) {
        snprintf(t->detail, sizeof(t->detail), "%s scale: %.200s", tr,
                 asked ? "a smaller count was asked (--scale-n)" : why);
        return;
    }
    t->evaluated = true;
    long got = r ? r->scale->conns : 0;
    t->ratio = (double)got / (double)need;
    t->met = got >= need && !r->error[0];
    if (r && r->scale->stopped[0])
        snprintf(t->detail, sizeof(t->detail), "%.250s", r->scale->stopped);
    else if (r)
        snprintf(t->detail, sizeof(t->detail), "%ld connections up in %s, calls on all: %.150s", got,
                 r->scale->one_process ? "one process" : "one client process",
                 r->error[0] ? r->error : "worked");
    else
        snprintf(t->detail, sizeof(t->detail), "no connection: %.200s", why);
}

static int scale_targets(struct target *t)
{
    int n = 0;
    t_idle(&t[n++], "tcp idle connection <= 4 KiB and <= 1.2 fds per side", "tcp", 4, 1.2, 0);
    t_conns(&t[n++], "tcp 10,000 connections in one process between two addresses", "tcp", 10000);
    t_idle(&t[n++], "verbs idle connection <= 64 KiB per side (RSS with pinned) at 1,000",
           "verbs", 64, 0, 1000);
    return n;
}


/* ---- the peers side by side ------------------------------------------------------- */

struct cmp {
    const char *what;
    const char *at, *atest, *bt, *btest;
    bool bw;
};
static const struct cmp cmps[] = {
    {"tcp RPC 64 B (defaults) / UCX tag_lat", "tcp", "rpc_rtt", "ucx-tcp", "tag_lat", false},
    {"tcp RPC 64 B polling on / UCX tag_lat", "tcp", "rtt_poll_on", "ucx-tcp", "tag_lat", false},
    {"tcp RPC 64 B polling off / raw-tcp", "tcp", "rtt_poll_off", "raw-tcp", "rpc_rtt", false},
    {"tcp RPC 64 B polling off / sockperf", "tcp", "rtt_poll_off", "sockperf", "pingpong", false},
    {"tcp RPC 64 B polling off / qperf", "tcp", "rtt_poll_off", "qperf", "pingpong", false},
    {"tcp 64 B polling on, CPU-bound thread beside / off", "tcp", "rtt_poll_on_hog", "tcp",
     "rtt_poll_off_hog", false},
    {"raw-tcp 64 B / sockperf (the baseline)", "raw-tcp", "rpc_rtt", "sockperf", "pingpong", false},
    {"tcp call_sync thread / driven", "tcp", "rtt_thread_sync", "tcp", "rpc_rtt", false},
    {"tcp driven / call_sync thread", "tcp", "rtt_driven", "tcp", "rpc_rtt", false},
    {"tcp RPC 1 MiB sink / iperf3", "tcp", "rpc_large_bw", "iperf3", "bulk", true},
    {"tcp 1 MiB WRITE / iperf3", "tcp", "write_bw", "iperf3", "bulk", true},
    {"tcp RPC 1 MiB sink / UCX tag_bw", "tcp", "rpc_large_bw", "ucx-tcp", "tag_bw", true},
    {"raw-tcp 1 MiB sink / iperf3", "raw-tcp", "rpc_large_bw", "iperf3", "bulk", true},
    {"verbs RPC 64 B / 2 x ib_send_lat", "verbs", "rpc_rtt", "perftest", "ib_send_lat", false},
    {"verbs call_sync thread / driven", "verbs", "rtt_thread_sync", "verbs", "rpc_rtt", false},
    {"verbs 1 MiB WRITE / ib_write_bw", "verbs", "write_bw", "perftest", "ib_write_bw", true},
};

static bool row_exists(const char *tr, const char *test)
{
    for (size_t i = 0; i < nresults; i++)
        if (strcmp(results[i]->transport, tr) == 0 && strcmp(results[i]->test, test) == 0)
            return true;
    return false;
}

static void fmt_cpu(char *buf, size_t len, const struct result *r)
{
    if (!r || !r->has_cpu)
        snprintf(buf, len, "-");
    else if (r->cpu_srv_us >= 0)
        snprintf(buf, len, "%.1f+%.1f", r->cpu_cli_us, r->cpu_srv_us);
    else
        snprintf(buf, len, "%.1f+?", r->cpu_cli_us);
}

void report_peers(FILE *f)
{
    bool any = false;
    for (size_t i = 0; i < sizeof(cmps) / sizeof(cmps[0]); i++)
        any |= row_exists(cmps[i].at, cmps[i].atest);
    if (!any)
        return;
    fprintf(f, "\nSide by side, this run (RTT p50 in us or MiB/s; ratio = left / right; CPU = client+server "
               "us per operation):\n");
    fprintf(f, "%-40s %10s %10s %8s %13s %13s\n", "comparison", "left", "right", "ratio",
            "left CPU", "right CPU");
    for (size_t i = 0; i < sizeof(cmps) / sizeof(cmps[0]); i++) {
        const struct cmp *c = &cmps[i];
        if (!row_exists(c->at, c->atest))
            continue;
        /* qperf only stands in where sockperf is missing */
        if (strcmp(c->bt, "qperf") == 0 && !row_exists("qperf", "pingpong"))
            continue;
        if (strcmp(c->bt, "sockperf") == 0 && row_exists("qperf", "pingpong") &&
            !row_exists("sockperf", "pingpong"))
            continue;
        struct result *a = c->bw ? bw_row(c->at, c->atest) : lat_row(c->at, c->atest);
        struct result *b = c->bw ? bw_row(c->bt, c->btest) : lat_row(c->bt, c->btest);
        if (!a) {
            fprintf(f, "%-40s %s\n", c->what, why_missing(c->at, c->atest, c->bw ? 1u << 20 : 64));
            continue;
        }
        double av = c->bw ? a->mib_per_s : a->p50;
        char ca[32], cb[32];
        fmt_cpu(ca, sizeof(ca), a);
        if (!b) {
            fprintf(f, "%-40s %10.2f %10s %8s %13s %13s  %s: %s\n", c->what, av, "-", "-", ca, "-",
                    c->bt, why_missing(c->bt, c->btest, c->bw ? 1u << 20 : 64));
            continue;
        }
        double bv = c->bw ? b->mib_per_s : b->p50;
        fmt_cpu(cb, sizeof(cb), b);
        fprintf(f, "%-40s %10.2f %10.2f %7.2fx %13s %13s\n", c->what, av, bv, bv > 0 ? av / bv : 0,
                ca, cb);
    }
}

static void print_targets(FILE *f, const struct target *t, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(f, "target %-64s %-13s %s\n", t[i].name,
                !t[i].evaluated ? "not evaluated" : t[i].met ? "met" : "NOT MET", t[i].detail);
}

void report_targets(FILE *f)
{
    struct target t[16];
    if (any_rows(false) || !any_rows(true)) {
        fprintf(f, "\nTargets of issue #14 (ratios from this run; reported, never asserted):\n");
        print_targets(f, t, targets(t));
    }
    if (any_rows(true)) {
        fprintf(f, "\nTargets of issue #27, scale (from this run; reported, never asserted):\n");
        print_targets(f, t, scale_targets(t));
    }
}

/* ---- JSON and CSV ---------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v)
{
    fprintf(f, "%.3f", v);
}

static void json_side(FILE *f, const struct scale_side *sd)
{
    if (!sd->known) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"rss_kib_per_conn\": ");
    json_num(f, sd->rss_kib);
    fprintf(f, ", \"vmpin_kib_per_conn\": ");
    json_num(f, sd->pin_kib);
    fprintf(f, ", \"fds_per_conn\": ");
    json_num(f, sd->fds);
    fprintf(f, ", \"rss_kib\": %ld, \"vmpin_kib\": %ld, \"fds\": %ld}", sd->rss_total_kib,
            sd->pin_total_kib, sd->fds_total);
}

static void json_scale(FILE *f, const struct scale_point *p)
{
    fprintf(f, ", \"scale\": {\"connections\": %ld, \"asked\": %ld, \"connects\": %ld, "
               "\"connect_s\": %.6f", p->conns, p->asked, p->connects, p->connect_s);
    fprintf(f, ", \"connects_per_s\": ");
    json_num(f, p->connects_per_s);
    fprintf(f, ", \"calls_per_s\": ");
    json_num(f, p->calls_per_s);
    fprintf(f, ", \"one_process\": %s, \"idle_ms\": %ld, \"client\": ",
            p->one_process ? "true" : "false", g_opts.scale_idle_ms);
    json_side(f, &p->cli);
    fprintf(f, ", \"server\": ");
    json_side(f, &p->srv);
    if (p->srv.known)
        fprintf(f, ", \"server_conns_seen\": %ld", p->srv.conns_seen);
    fprintf(f, ", \"limits\": ");
    json_str(f, p->limits);
    if (p->stopped[0]) {
        fprintf(f, ", \"stopped\": ");
        json_str(f, p->stopped);
    }
    fputc('}', f);
}

void report_json(FILE *f)
{
    fprintf(f, "{\n  \"tool\": \"rrpc-bench\",\n  \"version\": ");
    json_str(f, RRPC_VERSION_STRING);
    fprintf(f, ",\n  \"commit\": ");
    json_str(f, BENCH_COMMIT);
    fprintf(f, ",\n  \"date\": ");
    json_str(f, g_meta.date);
    fprintf(f, ",\n  \"host\": ");
    json_str(f, g_meta.host);
    fprintf(f, ",\n  \"kernel\": ");
    json_str(f, g_meta.kernel);
    fprintf(f, ",\n  \"cpu\": ");
    json_str(f, g_meta.cpu);
    fprintf(f, ",\n  \"ncpu\": %ld,\n  \"command\": ", g_meta.ncpu);
    json_str(f, g_meta.cmdline);
    fprintf(f, ",\n  \"mode\": ");
    json_str(f, g_meta.mode);
    fprintf(f,
            ",\n  \"quick\": %s,\n  \"duration_s\": %.3f,\n  \"sweep_duration_s\": %.3f,\n"
            "  \"warmup_ops\": %ld,\n  \"warmup_max_s\": %.3f,\n  \"client_mode\": \"%s\",\n"
            "  \"latency\": \"round trip, microseconds, client side, CLOCK_MONOTONIC\",\n"
            "  \"bandwidth\": \"payload MiB/s (2^20 bytes), one direction\",\n",
            g_opts.quick ? "true" : "false", g_opts.duration, g_opts.sweep_duration,
            g_opts.warmup_ops, g_opts.warmup_max_s, g_opts.client_thread_mode ? "thread" : "driven");
    fprintf(f, "  \"results\": [");
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        fprintf(f, "%s\n    {\"transport\": ", i ? "," : "");
        json_str(f, r->transport);
        fprintf(f, ", \"test\": ");
        json_str(f, r->test);
        fprintf(f, ", \"variant\": ");
        json_str(f, r->variant);
        fprintf(f, ", \"size\": %zu, \"depth\": %d", r->size, r->depth);
        if (r->skipped || r->error[0]) {
            fprintf(f, ", \"%s\": ", r->skipped ? "skipped" : "error");
            json_str(f, r->error);
            if (r->scale && r->scale->conns > 0)
                json_scale(f, r->scale);
            fputc('}', f);
            continue;
        }
        fprintf(f, ", \"ops\": %llu, \"seconds\": ", (unsigned long long)r->ops);
        json_num(f, r->seconds);
        fprintf(f, ", \"ops_per_s\": ");
        json_num(f, r->ops_per_s);
        fprintf(f, ", \"mib_per_s\": ");
        json_num(f, r->mib_per_s);
        if (strncmp(r->test, "qos_", 4) == 0) {
            fprintf(f, ", \"load_mib_per_s\": ");
            json_num(f, r->load_mib_per_s);
        }
        if (r->has_cpu) {
            fprintf(f, ", \"cpu_us_per_op\": {\"client\": ");
            json_num(f, r->cpu_cli_us);
            fprintf(f, ", \"server\": ");
            if (r->cpu_srv_us >= 0)
                json_num(f, r->cpu_srv_us);
            else
                fputs("null", f);
            fputc('}', f);
        }
        if (r->cli_core_pct > 0 || r->srv_core_pct > 0 || strcmp(r->test, "idle_cpu") == 0) {
            fprintf(f, ", \"cpu_core_pct\": {\"client\": ");
            json_num(f, r->cli_core_pct);
            fprintf(f, ", \"server\": ");
            if (r->srv_core_pct >= 0)
                json_num(f, r->srv_core_pct);
            else
                fputs("null", f);
            fputc('}', f);
        }
        if (polls_stopped(r)) {
            fprintf(f, ", \"busy_poll_stops\": {\"client\": [%lld, %lld], \"server\": ",
                    r->polls_cli[0], r->polls_cli[1]);
            if (r->polls_srv[0] >= 0)
                fprintf(f, "[%lld, %lld]}", r->polls_srv[0], r->polls_srv[1]);
            else
                fputs("null}", f);
        }
        if (r->loop_cli[0] > 0 || r->loop_cli[1] > 0)
            fprintf(f, ", \"loop_thread\": {\"takeovers\": %lld, \"wakeups\": %lld}",
                    r->loop_cli[1], r->loop_cli[0]);
        if (r->scale)
            json_scale(f, r->scale);
        if (r->ncdf) {
            fprintf(f, ", \"rtt_cdf_us\": [");
            for (int k = 0; k < r->ncdf; k++)
                fprintf(f, "%s[%g, %.3f]", k ? ", " : "", cdf_q[k], r->cdf[k]);
            fputc(']', f);
        }
        if (r->has_lat) {
            fprintf(f, ", \"samples\": %llu, \"rtt_us\": {\"min\": ", (unsigned long long)r->samples);
            json_num(f, r->lat_min);
            fprintf(f, ", \"p50\": ");
            json_num(f, r->p50);
            fprintf(f, ", \"p90\": ");
            json_num(f, r->p90);
            fprintf(f, ", \"p99\": ");
            json_num(f, r->p99);
            fprintf(f, ", \"p99.9\": ");
            json_num(f, r->p999);
            fprintf(f, ", \"max\": ");
            json_num(f, r->lat_max);
            fprintf(f, ", \"mean\": ");
            json_num(f, r->mean);
            fprintf(f, "}, \"one_way_est_us\": ");
            json_num(f, r->p50 / 2);
        }
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"targets\": [");
    struct target t[32];
    int n = 0, n14 = 0;
    if (any_rows(false) || !any_rows(true))
        n = n14 = targets(t);
    if (any_rows(true))
        n += scale_targets(t + n);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n    {\"issue\": %d, \"name\": ", i ? "," : "", i < n14 ? 14 : 27);
        json_str(f, t[i].name);
        fprintf(f, ", \"evaluated\": %s", t[i].evaluated ? "true" : "false");
        if (t[i].evaluated) {
            fprintf(f, ", \"met\": %s, \"ratio\": ", t[i].met ? "true" : "false");
            json_num(f, t[i].ratio);
        }
        fprintf(f, ", \"detail\": ");
        json_str(f, t[i].detail);
        fputc('}', f);
    }
    fprintf(f, "\n  ]\n}\n");
}

/* The scale columns (empty for other rows); the reason a step stopped quoted. */
static void csv_scale(FILE *f, const struct scale_point *p)
{
    if (!p) {
        fputs(",,,,,,,,,,\n", f);
        return;
    }
    fprintf(f, ",%ld,%.6f,%.3f", p->conns, p->connect_s, p->connects_per_s);
    for (int k = 0; k < 2; k++) {
        const struct scale_side *sd = k ? &p->srv : &p->cli;
        if (sd->known)
            fprintf(f, ",%.3f,%.3f,%.3f", sd->rss_kib, sd->pin_kib, sd->fds);
        else
            fputs(",,,", f);
    }
    fputs(",\"", f);
    for (const char *c = p->stopped; *c; c++)
        fputs(*c == '"' ? "\"\"" : (char[2]){*c, 0}, f);
    fputs("\"\n", f);
}

void report_csv(FILE *f)
{
    fprintf(f, "transport,test,variant,size,depth,status,ops,seconds,ops_per_s,mib_per_s,"
               "load_mib_per_s,samples,rtt_min_us,rtt_p50_us,rtt_p90_us,rtt_p99_us,rtt_p999_us,"
               "rtt_max_us,rtt_mean_us,cpu_client_us_per_op,cpu_server_us_per_op,"
               "cpu_client_core_pct,cpu_server_core_pct,scale_connections,scale_connect_s,"
               "scale_connects_per_s,scale_client_rss_kib_per_conn,scale_client_vmpin_kib_per_conn,"
               "scale_client_fds_per_conn,scale_server_rss_kib_per_conn,"
               "scale_server_vmpin_kib_per_conn,scale_server_fds_per_conn,scale_stopped\n");
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        const char *st = r->skipped ? "skipped" : r->error[0] ? "error" : "ok";
        fprintf(f, "%s,%s,\"%s\",%zu,%d,%s,%llu,%.6f,%.3f,%.3f,%.3f", r->transport, r->test,
                r->variant, r->size, r->depth, st, (unsigned long long)r->ops, r->seconds,
                r->ops_per_s, r->mib_per_s, r->load_mib_per_s);
        if (r->has_lat)
            fprintf(f, ",%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f", (unsigned long long)r->samples,
                    r->lat_min, r->p50, r->p90, r->p99, r->p999, r->lat_max, r->mean);
        else
            fprintf(f, ",0,,,,,,,");
        if (r->has_cpu && r->cpu_cli_us >= 0)
            fprintf(f, ",%.3f", r->cpu_cli_us);
        else
            fputc(',', f);
        if (r->has_cpu && r->cpu_srv_us >= 0)
            fprintf(f, ",%.3f", r->cpu_srv_us);
        else
            fputc(',', f);
        if (r->cli_core_pct > 0 || strcmp(r->test, "idle_cpu") == 0)
            fprintf(f, ",%.3f", r->cli_core_pct);
        else
            fputc(',', f);
        if (r->srv_core_pct >= 0 && (r->srv_core_pct > 0 || strcmp(r->test, "idle_cpu") == 0))
            fprintf(f, ",%.3f", r->srv_core_pct);
        else
            fputc(',', f);
        csv_scale(f, r->scale);
    }
}

/* ---- progress (stderr) -------------------------------------------------------------- */

static bool prog_tty, prog_open;
static uint64_t prog_t0, prog_last;
static char prog_label[160];

void progress_begin(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prog_label, sizeof(prog_label), fmt, ap);
    va_end(ap);
    nic_mark_begin();
    if (!g_opts.progress)
        return;
    prog_tty = isatty(2);
    prog_t0 = prog_last = now_ns();
    prog_open = true;
    fprintf(stderr, "rrpc-bench: %s ...", prog_label);
    fflush(stderr);
}

void progress_tick(double frac)
{
    if (!prog_open || !prog_tty)
        return;
    uint64_t t = now_ns();
    if (t - prog_last < 250000000u)
        return;
    prog_last = t;
    if (frac > 1)
        frac = 1;
    fprintf(stderr, "\rrrpc-bench: %s ... %3.0f%%", prog_label, frac * 100);
    fflush(stderr);
}

void progress_end(const char *status)
{
    if (prog_open) {
        prog_open = false;
        double s = (double)(now_ns() - prog_t0) / 1e9;
        if (prog_tty)
            fprintf(stderr, "\rrrpc-bench: %s ... %s (%.1f s)\n", prog_label, status, s);
        else
            fprintf(stderr, " %s (%.1f s)\n", status, s);
    }
    nic_mark_end(prog_label);
}

void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rrpc-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

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

static const char *const legend =
    "Latencies are ROUND TRIPS in microseconds, measured at the client with CLOCK_MONOTONIC:\n"
    "from issuing the call/operation to its completion (RPC: the response arrived; WRITE/READ:\n"
    "the completion, i.e. the data is in the peer's / our memory).  No one-way latency is\n"
    "measured; one-way is estimated as RTT/2 where printed (perftest's *_lat tools report that).\n"
    "MiB/s = payload bytes in one direction per second, 2^20 bytes (perftest's \"MB/sec\").\n";

void report_table(FILE *f)
{
    fprintf(f, "rrpc-bench %s (libroce_rpc %s) on %s: %s, %s, %ld CPUs\n", RRPC_VERSION_STRING,
            RRPC_VERSION_STRING, g_meta.host, g_meta.kernel, g_meta.cpu, g_meta.ncpu);
    fprintf(f, "date %s; %s; %.2f s per test, %.2f s per sweep point, warm-up <= %ld ops / %.2f s; "
               "client %s mode\n\n",
            g_meta.date, g_opts.quick ? "QUICK run (indicative only)" : "full run",
            g_opts.duration, g_opts.sweep_duration, g_opts.warmup_ops, g_opts.warmup_max_s,
            g_opts.client_thread_mode ? "thread" : "driven");
    fputs(legend, f);
    fputc('\n', f);
    fprintf(f, "%-8s %-14s %8s %5s %8s | %8s %8s %8s %8s %9s | %10s %9s  %s\n", "transp.", "test",
            "size", "depth", "samples", "p50", "p90", "p99", "p99.9", "max", "ops/s", "MiB/s",
            "notes");
    fprintf(f, "%-8s %-14s %8s %5s %8s | %8s %8s %8s %8s %9s | %10s %9s\n", "", "", "", "", "",
            "RTT us", "RTT us", "RTT us", "RTT us", "RTT us", "", "");
    char last_test[24] = "";
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        if (is_sweep(r))
            continue;
        if (last_test[0] && strcmp(last_test, r->test) != 0)
            fputc('\n', f);
        snprintf(last_test, sizeof(last_test), "%s", r->test);
        char sz[16];
        fmt_size(sz, sizeof(sz), r->size);
        if (strcmp(r->test, "connect") == 0) {
            fprintf(f, "%-8s %-14s %s: %s\n", r->transport, r->test,
                    r->skipped ? "skipped" : "FAILED", r->error);
            continue;
        }
        if (r->skipped || r->error[0]) {
            fprintf(f, "%-8s %-14s %8s %5d  %s: %s\n", r->transport, r->test, sz, r->depth,
                    r->skipped ? "skipped" : "FAILED", r->error);
            continue;
        }
        char a[7][24];
        fmt_num(a[0], sizeof(a[0]), r->p50, r->has_lat);
        fmt_num(a[1], sizeof(a[1]), r->p90, r->has_lat);
        fmt_num(a[2], sizeof(a[2]), r->p99, r->has_lat);
        fmt_num(a[3], sizeof(a[3]), r->p999, r->has_lat);
        fmt_num(a[4], sizeof(a[4]), r->lat_max, r->has_lat);
        fmt_num(a[5], sizeof(a[5]), r->ops_per_s, true);
        bool qos = strncmp(r->test, "qos_", 4) == 0;
        fmt_num(a[6], sizeof(a[6]), qos ? r->load_mib_per_s : r->mib_per_s, true);
        char samples[24];
        snprintf(samples, sizeof(samples), "%llu",
                 (unsigned long long)(r->has_lat ? r->samples : r->ops));
        fprintf(f, "%-8s %-14s %8s %5d %8s | %8s %8s %8s %8s %9s | %10s %9s  %s\n", r->transport,
                r->test, sz, r->depth, samples, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                r->variant);
    }
    fprintf(f, "\n(qos rows: latency and ops/s are the probe's, MiB/s is the bulk load's.)\n");
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

static struct result *bw1m(const char *transport)
{
    struct result *r = result_find(transport, "rpc_large_bw", 1u << 20);
    if (!r)
        r = result_find(transport, "sweep_bw", 1u << 20);
    return r;
}

static int targets(struct target *t)
{
    int n = 0;
    struct result *a, *b;

    t[n] = (struct target){.name = "tcp 64 B RPC round trip <= 1.2x raw-tcp"};
    a = rtt64("tcp");
    b = rtt64("raw-tcp");
    if (a && b && b->p50 > 0) {
        t[n].evaluated = true;
        t[n].ratio = a->p50 / b->p50;
        t[n].met = t[n].ratio <= 1.2;
        snprintf(t[n].detail, sizeof(t[n].detail),
                 "RTT p50 %.2f us vs %.2f us = %.2fx (p99 %.2f vs %.2f us = %.2fx)", a->p50, b->p50,
                 t[n].ratio, a->p99, b->p99, b->p99 > 0 ? a->p99 / b->p99 : 0.0);
    } else {
        snprintf(t[n].detail, sizeof(t[n].detail), "needs 64 B rtt (or sweep) on tcp and raw-tcp");
    }
    n++;

    t[n] = (struct target){.name = "tcp 1 MiB RPC bandwidth >= 0.8x raw-tcp"};
    a = bw1m("tcp");
    b = bw1m("raw-tcp");
    if (a && b && b->mib_per_s > 0) {
        t[n].evaluated = true;
        t[n].ratio = a->mib_per_s / b->mib_per_s;
        t[n].met = t[n].ratio >= 0.8;
        snprintf(t[n].detail, sizeof(t[n].detail), "%.0f MiB/s vs %.0f MiB/s = %.2fx",
                 a->mib_per_s, b->mib_per_s, t[n].ratio);
    } else {
        snprintf(t[n].detail, sizeof(t[n].detail),
                 "needs the 1 MiB large test (or sweep) on tcp and raw-tcp");
    }
    n++;

    t[n] = (struct target){.name = "verbs 64 B RPC round trip <= 1.5x perftest ib_send_lat"};
    a = rtt64("verbs");
    if (a && g_opts.ref_send_lat_us > 0) {
        /* ib_send_lat reports half the ping-pong time: compare like with like. */
        double ow = a->p50 / 2;
        t[n].evaluated = true;
        t[n].ratio = ow / g_opts.ref_send_lat_us;
        t[n].met = t[n].ratio <= 1.5;
        snprintf(t[n].detail, sizeof(t[n].detail),
                 "RTT/2 %.2f us (RTT p50 %.2f us) vs ib_send_lat t_typical %.2f us (also RTT/2) "
                 "= %.2fx",
                 ow, a->p50, g_opts.ref_send_lat_us, t[n].ratio);
    } else {
        snprintf(t[n].detail, sizeof(t[n].detail), "%s",
                 a ? "needs --ref-send-lat US (perftest ib_send_lat -s 64, t_typical)"
                   : "needs a verbs run (rdma:// and an RDMA device)");
    }
    n++;

    t[n] = (struct target){.name = "verbs 1 MiB WRITE bandwidth >= 0.8x perftest ib_write_bw"};
    a = result_find("verbs", "write_bw", 1u << 20);
    if (!a)
        a = result_find("verbs", "sweep_write_bw", 1u << 20);
    if (a && g_opts.ref_write_bw_mibs > 0) {
        t[n].evaluated = true;
        t[n].ratio = a->mib_per_s / g_opts.ref_write_bw_mibs;
        t[n].met = t[n].ratio >= 0.8;
        snprintf(t[n].detail, sizeof(t[n].detail), "%.0f MiB/s vs ib_write_bw %.0f MiB/s = %.2fx",
                 a->mib_per_s, g_opts.ref_write_bw_mibs, t[n].ratio);
    } else {
        snprintf(t[n].detail, sizeof(t[n].detail), "%s",
                 a ? "needs --ref-write-bw MIBS (perftest ib_write_bw -s 1048576, BW average)"
                   : "needs a verbs run (rdma:// and an RDMA device)");
    }
    n++;
    return n;
}

void report_targets(FILE *f)
{
    struct target t[8];
    int n = targets(t);
    fprintf(f, "\nTargets (ratios from this run; informative, never asserted):\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "target %-56s %-13s %s\n", t[i].name,
                !t[i].evaluated ? "not evaluated" : t[i].met ? "met" : "NOT MET", t[i].detail);
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

void report_json(FILE *f)
{
    fprintf(f, "{\n  \"tool\": \"rrpc-bench\",\n  \"version\": ");
    json_str(f, RRPC_VERSION_STRING);
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
    struct target t[8];
    int n = targets(t);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
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

void report_csv(FILE *f)
{
    fprintf(f, "transport,test,variant,size,depth,status,ops,seconds,ops_per_s,mib_per_s,"
               "load_mib_per_s,samples,rtt_min_us,rtt_p50_us,rtt_p90_us,rtt_p99_us,rtt_p999_us,"
               "rtt_max_us,rtt_mean_us\n");
    for (size_t i = 0; i < nresults; i++) {
        struct result *r = results[i];
        const char *st = r->skipped ? "skipped" : r->error[0] ? "error" : "ok";
        fprintf(f, "%s,%s,\"%s\",%zu,%d,%s,%llu,%.6f,%.3f,%.3f,%.3f", r->transport, r->test,
                r->variant, r->size, r->depth, st, (unsigned long long)r->ops, r->seconds,
                r->ops_per_s, r->mib_per_s, r->load_mib_per_s);
        if (r->has_lat)
            fprintf(f, ",%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
                    (unsigned long long)r->samples, r->lat_min, r->p50, r->p90, r->p99, r->p999,
                    r->lat_max, r->mean);
        else
            fprintf(f, ",0,,,,,,,\n");
    }
}

/* ---- progress (stderr) -------------------------------------------------------------- */

static bool prog_tty, prog_open;
static uint64_t prog_t0, prog_last;
static char prog_label[160];

void progress_begin(const char *fmt, ...)
{
    if (!g_opts.progress)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prog_label, sizeof(prog_label), fmt, ap);
    va_end(ap);
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
    if (!prog_open)
        return;
    prog_open = false;
    double s = (double)(now_ns() - prog_t0) / 1e9;
    if (prog_tty)
        fprintf(stderr, "\rrrpc-bench: %s ... %s (%.1f s)\n", prog_label, status, s);
    else
        fprintf(stderr, " %s (%.1f s)\n", status, s);
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

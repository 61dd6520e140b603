/* SPDX-License-Identifier: MIT */
/*
 * rrpc-bench: the benchmark tool of roce-rpc (see docs/performance.md).
 *
 *   rrpc-bench local  [options]           server process + client on this host
 *   rrpc-bench server [--host A] [--port P]
 *   rrpc-bench client --host SERVER [--port P] [options]
 *
 * It measures the library over tcp:// and rdma:// and, in the same run, a
 * raw-tcp baseline (the same exchanges over a plain socket, no library).
 */
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#include "bench.h"

#define DEFAULT_PORT 17500 /* tcp; rdma is +1, raw-tcp +2 */

struct bench_opts g_opts;

static const char usage_text[] =
    "usage: rrpc-bench --version                        print the versions and exit\n"
    "       rrpc-bench local  [options]                 start a server process and run the "
    "client against it\n"
    "       rrpc-bench server [--host ADDR] [--port P]   serve tcp://ADDR:P, rdma://ADDR:P+1, "
    "raw-tcp ADDR:P+2,\n"
    "                      polling on/off tcp P+3/P+4, the scale test tcp P+5 and rdma P+6\n"
    "                      (ADDR defaults to 127.0.0.1: the server is unauthenticated and lets\n"
    "                      any client write to a 4 MiB region; give --host only on a trusted net)\n"
    "       rrpc-bench client --host SERVER [--port P] [options]\n"
    "\n"
    "options of local and client:\n"
    "  --transport LIST    tcp,verbs,raw-tcp,inproc | all | auto (default auto: tcp,raw-tcp, and\n"
    "                      verbs when this host has an RDMA device; inproc, never in all or auto:\n"
    "                      the scale test only)\n"
    "  --tests LIST        rtt,rate,large,write,read,sweep,qos,idle,contended,scale | all (default\n"
    "                      all: every test but scale)\n"
    "  --scale-n LIST      the scale test's connection counts (default 1,10,100,1000,10000; verbs\n"
    "                      up to 1000)\n"
    "  --scale-idle-ms MS  how long the scale test's connections idle before their memory is\n"
    "                      read (default 2500; the keepalive interval is 1000)\n"
    "  --peer-wait S       a peer tool's server must listen within S s (default 10)\n"
    "  --no-peers          run no peer tool (iperf3, sockperf, qperf, UCX, perftest): for\n"
    "                      comparisons between rrpc runs; targets that need a peer say so\n"
    "  --quick             short run (0.2 s per test, 0.05 s per sweep point): meson benchmark\n"
    "  --duration S        seconds measured per test (default 2; a sweep point gets S/4)\n"
    "  --warmup N          warm-up operations per test (default 200; at most 20% of S, <= 1 s)\n"
    "  --size N            payload of the small RPC and one-sided latency tests (default 64)\n"
    "  --large N           payload of the large and bandwidth tests (default 1M)\n"
    "  --depth N           calls in flight in the rate test (default 16)\n"
    "  --bw-depth N        messages/operations in flight in bandwidth tests (default 8)\n"
    "  --large-class NAME  QoS class of large and bandwidth tests (default bulk)\n"
    "  --client-mode M     driven (default: the bench thread runs the loop) or thread (loop\n"
    "                      thread + rrpc_call_sync for depth-1 tests)\n"
    "  --src ADDR          bind the client's connections to ADDR\n"
    "  --rdma-host ADDR    local mode: the address for rdma:// (default: the IPv4 address of\n"
    "                      the first RDMA device's netdev)\n"
    "  --json FILE|-       also write the results as JSON (- : stdout instead of the table)\n"
    "  --csv FILE|-        also write the results as CSV (- : stdout instead of the table)\n"
    "  --ref-send-lat US   perftest ib_send_lat -s 64 t_typical, for the verbs latency target\n"
    "  --ref-write-bw MIBS perftest ib_write_bw -s 1048576 BW average, for the verbs bandwidth "
    "target\n"
    "  --pin S,C           local mode: pin the server process to CPU S and the client to CPU C\n"
    "                      (the peers' servers and clients get the same placement)\n"
    "  --poll-us N         the \"polling on\" variant's " BENCH_TCP_POLL_ENV " (default 1000)\n"
    "  --poll-budget PCT   and its RRPC_BUSY_POLL_BUDGET_PCT (default 100: no budget, as the\n"
    "                      peers that spin)\n"
    "  --perftest SDEV:SGID,CDEV:CGID\n"
    "                      run perftest between these RDMA devices (GID indexes) as the verbs\n"
    "                      peer (default in local mode: the first device on both ends, -R)\n"
    "  --plot DIR          write DIR/rrpc-bench.json, .csv and the PNG plots (python3-matplotlib)\n"
    "  --no-progress       no progress lines on stderr\n"
    "  --stats             print each library client context's metrics (Prometheus text, as\n"
    "                      rrpc_ctx_stats_text renders them) on stderr when it closes\n"
    "Sizes take K and M suffixes (KiB, MiB).  Latencies are round trips; see docs/performance.md.\n";

static void usage(FILE *f)
{
    fputs(usage_text, f);
}

/* ---- small parsers ------------------------------------------------------------- */

static bool parse_size(const char *s, size_t *ret)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    if (*end == 'K' || *end == 'k') {
        v <<= 10;
        end++;
    } else if (*end == 'M' || *end == 'm') {
        v <<= 20;
        end++;
    }
    if (strcmp(end, "") && strcmp(end, "B") && strcmp(end, "iB"))
        return false;
    *ret = (size_t)v;
    return true;
}

static bool parse_int(const char *s, long lo, long hi, long *ret)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *ret)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

static bool parse_tests(const char *s, unsigned *ret)
{
    static const struct {
        const char *n;
        unsigned bit;
    } names[] = {{"rtt", T_RTT},     {"rate", T_RATE},   {"large", T_LARGE}, {"write", T_WRITE},
                 {"read", T_READ},   {"sweep", T_SWEEP}, {"qos", T_QOS},     {"idle", T_IDLE},
                 {"contended", T_CONTENDED}, {"scale", T_SCALE}, {"all", T_ALL}};
    unsigned bits = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(tok, names[i].n) == 0) {
                bits |= names[i].bit;
                found = true;
            }
        if (!found)
            return false;
    }
    *ret = bits;
    return bits != 0;
}

/* --scale-n: ascending counts, 1..1,000,000. */
static bool parse_scale_n(const char *s)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (n == BENCH_SCALE_MAX_STEPS || !parse_int(tok, 1, 1000000, &v) ||
            (n && v <= g_opts.scale_n[n - 1]))
            return false;
        g_opts.scale_n[n++] = v;
    }
    g_opts.scale_nn = n;
    return n > 0;
}

enum { TR_TCP = 1, TR_VERBS = 2, TR_RAW = 4, TR_INPROC = 8 };

static bool have_rdma_device(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    if (!d)
        return false;
    struct dirent *e;
    bool any = false;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            any = true;
    closedir(d);
    return any;
}

static bool parse_transports(const char *s, unsigned *ret)
{
    unsigned bits = 0;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "tcp") == 0)
            bits |= TR_TCP;
        else if (strcmp(tok, "verbs") == 0 || strcmp(tok, "rdma") == 0)
            bits |= TR_VERBS;
        else if (strcmp(tok, "raw-tcp") == 0 || strcmp(tok, "raw") == 0)
            bits |= TR_RAW;
        else if (strcmp(tok, "inproc") == 0)
            bits |= TR_INPROC;
        else if (strcmp(tok, "all") == 0)
            bits |= TR_TCP | TR_VERBS | TR_RAW; /* inproc only when named: it has the scale test only */
        else if (strcmp(tok, "auto") == 0)
            bits |= TR_TCP | TR_RAW | (have_rdma_device() ? TR_VERBS : 0);
        else
            return false;
    }
    *ret = bits;
    return bits != 0;
}

/* The IPv4 address of the netdev under the first RDMA device (Soft-RoCE: the
 * interface rxe0 was added on). */
static char rdma_dev[64]; /* the device rdma_netdev_addr found */

static int rdma_netdev_addr(char *out, size_t len, char *why, size_t wlen)
{
    DIR *d = opendir("/sys/class/infiniband");
    if (!d) {
        snprintf(why, wlen, "no RDMA device on this host (/sys/class/infiniband is missing)");
        return -1;
    }
    char ndev[64] = "", dev[256] = "";
    struct dirent *e;
    while (!ndev[0] && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/gid_attrs/ndevs/0",
                 e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(ndev, sizeof(ndev), f))
                ndev[strcspn(ndev, "\n")] = 0;
            fclose(f);
            snprintf(dev, sizeof(dev), "%s", e->d_name);
        }
    }
    closedir(d);
    if (!ndev[0]) {
        snprintf(why, wlen, "no RDMA device with a network interface found");
        return -1;
    }
    struct ifaddrs *ifa = NULL, *i;
    int rc = -1;
    if (getifaddrs(&ifa) == 0) {
        for (i = ifa; i; i = i->ifa_next) {
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, ndev) == 0) {
                inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, out,
                          (socklen_t)len);
                rc = 0;
                break;
            }
        }
        freeifaddrs(ifa);
    }
    if (rc)
        snprintf(why, wlen, "RDMA device %s sits on %s, which has no IPv4 address", dev, ndev);
    else
        snprintf(rdma_dev, sizeof(rdma_dev), "%s", dev);
    return rc;
}

static bool is_local_addr(const char *host)
{
    if (strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0)
        return true;
    struct ifaddrs *ifa = NULL;
    bool found = false;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next) {
            char a[INET6_ADDRSTRLEN] = "";
            if (!i->ifa_addr)
                continue;
            if (i->ifa_addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, a,
                          sizeof(a));
            else if (i->ifa_addr->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, a,
                          sizeof(a));
            found = strcmp(a, host) == 0;
        }
        freeifaddrs(ifa);
    }
    return found;
}

static void make_uri(char *buf, size_t len, const char *scheme, const char *host, int port,
                     const char *src)
{
    bool v6 = strchr(host, ':') != NULL;
    snprintf(buf, len, "%s://%s%s%s:%d%s%s", scheme, v6 ? "[" : "", host, v6 ? "]" : "", port,
             src ? "?src=" : "", src ? src : "");
}

/* ---- the tests ---------------------------------------------------------------- */

static struct driver drivers[3];
static int ndrivers;

static struct phase mk_phase(double dur)
{
    double w = g_opts.warmup_max_s;
    if (w > dur)
        w = dur;
    return (struct phase){.warm_max_s = w, .warm_ops = g_opts.warmup_ops, .dur_s = dur};
}

static const char *cls_name(int cls)
{
    const char *n = rrpc_class_name(cls);
    return n ? n : "?";
}

static void run_single_note(struct driver *d, const char *test, struct spec sp, double dur,
                            const char *extra)
{
    char sz[16], variant[160];
    fmt_size(sz, sizeof(sz), sp.size);
    const char *what = sp.kind == OP_WRITE ? "WRITE" : sp.kind == OP_READ ? "READ"
                                                                   : spec_method(sp.kind);
    if (d->qos)
        snprintf(variant, sizeof(variant), "%s, class %s", what, cls_name(sp.cls));
    else
        snprintf(variant, sizeof(variant), "%s, plain socket", what);
    if (extra)
        snprintf(variant + strlen(variant), sizeof(variant) - strlen(variant), ", %s", extra);
    else if (g_opts.client_thread_mode && d->qos && sp.depth == 1)
        snprintf(variant + strlen(variant), sizeof(variant) - strlen(variant), ", *_sync");
    progress_begin("%-7s %-14s %7s depth %d", d->name, test, sz, sp.depth);
    struct outcome o;
    memset(&o, 0, sizeof(o));
    struct phase ph = mk_phase(dur);
    struct cpu_mark c0, c1;
    cpu_mark(&c0, false);
    d->run(d, &sp, 1, &ph, &o);
    cpu_mark(&c1, true);
    struct result *r = result_add(d->name, test, sp.size, sp.depth, variant);
    result_fill(r, &o, sp.lat);
    result_cpu(r, &c0, &c1, &o);
    samples_free(&o.lat);
    progress_end(o.status ? "FAILED" : "done");
    if (o.status)
        note("%s %s: %s", d->name, test, r->error);
}

static void run_single(struct driver *d, const char *test, struct spec sp, double dur)
{
    run_single_note(d, test, sp, dur, NULL);
}

enum qos_load {
    QOS_SEPARATED,   /* probe in low_latency, sink load in bulk */
    QOS_ONE_CLASS,   /* probe and sink load in bulk */
    QOS_WORK_LOOP,   /* probe in low_latency, "work" load (1 ms handlers) in bulk, on the loop */
    QOS_WORK_WORKER, /* the same with the handlers on workers (RRPC_HANDLER_ON_WORKER) */
};

/* A 64 B probe (one in flight) while a 1 MiB bulk load saturates the link,
 * or keeps the server's handlers busy. */
static void run_qos(struct driver *d, enum qos_load load)
{
    static const char *const tests[] = {"qos_separated", "qos_one_class", "qos_work_loop",
                                        "qos_work_worker"};
    static const enum op_kind loads[] = {OP_SINK, OP_SINK, OP_WORK, OP_WORK_WORKER};
    const char *test = tests[load];
    struct spec sp[2] = {
        {.kind = OP_ECHO, .size = g_opts.size, .depth = 1,
         .cls = load == QOS_ONE_CLASS ? RRPC_CLASS_BULK : RRPC_CLASS_LOW_LATENCY, .lat = true},
        {.kind = loads[load], .size = g_opts.large_size, .depth = g_opts.bw_depth,
         .cls = RRPC_CLASS_BULK, .lat = false},
    };
    char variant[128];
    char lsz[16];
    fmt_size(lsz, sizeof(lsz), g_opts.large_size);
    if (loads[load] == OP_SINK)
        snprintf(variant, sizeof(variant), "probe echo in %s; load %s sink x%d in %s",
                 cls_name(sp[0].cls), lsz, g_opts.bw_depth, cls_name(sp[1].cls));
    else
        snprintf(variant, sizeof(variant),
                 "probe echo in %s; load %s work (%d us handler) x%d in %s, handler %s",
                 cls_name(sp[0].cls), lsz, BENCH_WORK_US, g_opts.bw_depth, cls_name(sp[1].cls),
                 load == QOS_WORK_WORKER ? "on a worker" : "on the loop");
    progress_begin("%-7s %-14s probe %zu B + %s load", d->name, test, g_opts.size, lsz);
    struct outcome o[2];
    memset(o, 0, sizeof(o));
    struct phase ph = mk_phase(g_opts.duration);
    struct cpu_mark c0, c1;
    cpu_mark(&c0, false);
    d->run(d, sp, 2, &ph, o);
    cpu_mark(&c1, true);
    struct result *r = result_add(d->name, test, g_opts.size, 1, variant);
    result_fill(r, &o[0], true);
    /* CPU per operation of the whole mix: probe and bulk operations */
    struct outcome mix = o[0];
    mix.ops += o[1].ops;
    result_cpu(r, &c0, &c1, &mix);
    if (!r->error[0] && o[1].status)
        snprintf(r->error, sizeof(r->error), "bulk load: %s", o[1].err);
    if (o[1].seconds > 0)
        r->load_mib_per_s = (double)o[1].bytes / o[1].seconds / BENCH_MIB;
    samples_free(&o[0].lat);
    samples_free(&o[1].lat);
    progress_end(r->error[0] ? "FAILED" : "done");
    if (r->error[0])
        note("%s %s: %s", d->name, test, r->error);
}

static struct driver *find_driver(const char *name)
{
    for (int i = 0; i < ndrivers; i++)
        if (strcmp(drivers[i].name, name) == 0)
            return &drivers[i];
    return NULL;
}

/* ---- variants of a transport: polling on / off, the other client mode ---------------- */

struct endpoints {
    const char *host;      /* tcp and raw-tcp */
    const char *rdma_host; /* NULL: verbs unavailable, see rdma_why */
    int tcp_port, rdma_port, raw_port;
    int tcp_poll_port, tcp_nopoll_port; /* servers with polling on / off (tcp) */
    int scale_tcp_port, scale_rdma_port; /* the scale test's server (<= 0: none) */
    const char *src;
    char rdma_why[512];
};
static struct endpoints *g_ep;

enum variant_kind { V_POLL_ON, V_POLL_OFF, V_MODE };

/* A CPU-bound thread in the client process while a contended variant runs:
 * with client and server polling, three threads want the CPUs of a 2-vCPU
 * machine, as on a host whose cores are all busy. */
static volatile bool g_hog_stop;

static void *hog_main(void *arg)
{
    (void)arg;
    while (!g_hog_stop)
        ;
    return NULL;
}

/* The settings of the "polling on" variant: @poll_env (the transport's
 * polling time) = --poll-us, and RRPC_BUSY_POLL_BUDGET_PCT = --poll-budget.
 * The default budget (50 % of a core) stops a 64 B ping-pong's polling
 * hundreds of times a second, since each end polls about half the time it
 * waits for the other; a peer that spins (ucx_perftest) has no budget, so
 * the variant that is compared with it has none either (100) by default. */
static void poll_on_env(char *buf, size_t len, const char *poll_env)
{
    snprintf(buf, len, "%s=%ld RRPC_BUSY_POLL_BUDGET_PCT=%ld", poll_env, g_opts.poll_us,
             g_opts.poll_budget);
}

/* Runs the 64 B round trip on a second connection of @transport configured
 * as @kind, server and client alike (polling) or client only (mode); with
 * @hog, while a CPU-bound thread runs in this process. */
static void run_variant_hog(const char *transport, enum variant_kind kind, bool hog)
{
    bool verbs = strcmp(transport, "verbs") == 0;
    bool thread = kind == V_MODE ? !g_opts.client_thread_mode : g_opts.client_thread_mode;
    const char *test = kind == V_POLL_ON    ? (hog ? "rtt_poll_on_hog" : "rtt_poll_on")
                       : kind == V_POLL_OFF ? (hog ? "rtt_poll_off_hog" : "rtt_poll_off")
                       : thread            ? "rtt_thread_sync"
                                           : "rtt_driven";
    char env[160] = "", note_[200], uri[300], err[400] = "";
    const char *pe = verbs ? BENCH_VERBS_POLL_ENV : BENCH_TCP_POLL_ENV;
    if (kind == V_POLL_ON)
        poll_on_env(env, sizeof(env), pe);
    else if (kind == V_POLL_OFF)
        snprintf(env, sizeof(env), "%s=0", pe);
    if (kind == V_MODE)
        snprintf(note_, sizeof(note_), "%s", thread ? "thread mode, rrpc_call_sync" : "driven mode");
    else
        snprintf(note_, sizeof(note_), "%s both ends%s", env,
                 hog ? ", a CPU-bound thread in the client" : "");
    int port = verbs ? g_ep->rdma_port
               : kind == V_POLL_ON  ? g_ep->tcp_poll_port
               : kind == V_POLL_OFF ? g_ep->tcp_nopoll_port
                                    : g_ep->tcp_port;
    struct driver d;
    memset(&d, 0, sizeof(d));
    progress_begin("connecting %s (%s)", transport, note_);
    int r = -EINVAL;
    if (port > 0) {
        make_uri(uri, sizeof(uri), verbs ? "rdma" : "tcp", verbs ? g_ep->rdma_host : g_ep->host,
                 port, g_ep->src);
        r = lib_driver_open(&d, transport, uri, thread, env[0] ? env : NULL, err, sizeof(err));
    } else {
        snprintf(err, sizeof(err), "the server has no listener for this variant");
    }
    progress_end(r ? "FAILED" : "up");
    if (r) {
        struct result *res = result_add(transport, test, g_opts.size, 1, note_);
        snprintf(res->error, sizeof(res->error), "%s", err);
        note("%s %s: %s", transport, test, err);
        return;
    }
    bool saved = g_opts.client_thread_mode;
    g_opts.client_thread_mode = thread;
    pthread_t hog_thread;
    g_hog_stop = false;
    bool hogging = hog && pthread_create(&hog_thread, NULL, hog_main, NULL) == 0;
    if (hog && !hogging)
        note("%s %s: could not start the CPU-bound thread; measured without it", transport, test);
    run_single_note(&d, test, (struct spec){OP_ECHO, g_opts.size, 1, RRPC_CLASS_LOW_LATENCY, true},
                    g_opts.duration, note_);
    g_hog_stop = true;
    if (hogging)
        pthread_join(hog_thread, NULL);
    g_opts.client_thread_mode = saved;
    d.close(&d);
}

static void run_variant(const char *transport, enum variant_kind kind)
{
    run_variant_hog(transport, kind, false);
}

/* An idle context with the defaults (polling on since the default
 * RRPC_BUSY_POLL_US is not 0): after some traffic and 100 ms of quiet, the
 * CPU both processes use over the next second (thread mode, so the client's
 * loop thread is there to poll). */
static void run_idle(void)
{
    char uri[300], err[400] = "";
    const char *what = "tcp, defaults both ends, thread mode";
    struct driver d;
    memset(&d, 0, sizeof(d));
    int r = -EINVAL;
    if (g_ep->tcp_port > 0) {
        make_uri(uri, sizeof(uri), "tcp", g_ep->host, g_ep->tcp_port, g_ep->src);
        r = lib_driver_open(&d, "tcp", uri, true, "", err, sizeof(err));
    } else {
        snprintf(err, sizeof(err), "the server has no tcp listener");
    }
    struct result *res = result_add("tcp", "idle_cpu", 0, 0, NULL);
    long poll_us = -1;
    rrpc_config *cfg;
    if (rrpc_config_create(&cfg) == 0) {
        if (rrpc_config_get(cfg, BENCH_TCP_POLL_ENV, &poll_us))
            poll_us = -1;
        rrpc_config_destroy(cfg);
    }
    snprintf(res->variant, sizeof(res->variant),
             "defaults (" BENCH_TCP_POLL_ENV " %ld); CPU over 1 s after 100 ms idle", poll_us);
    if (r) {
        snprintf(res->error, sizeof(res->error), "%s", err);
        return;
    }
    progress_begin("tcp     idle_cpu       %s", what);
    struct spec sp = {OP_ECHO, g_opts.size, 1, RRPC_CLASS_LOW_LATENCY, false};
    struct phase ph = {.warm_max_s = 0, .warm_ops = 0, .dur_s = 0.2};
    struct outcome o;
    memset(&o, 0, sizeof(o));
    bool saved = g_opts.client_thread_mode;
    g_opts.client_thread_mode = true;
    d.run(&d, &sp, 1, &ph, &o);
    g_opts.client_thread_mode = saved;
    samples_free(&o.lat);
    usleep(100000);
    struct cpu_mark c0, c1;
    cpu_mark(&c0, false);
    usleep(1000000);
    cpu_mark(&c1, true);
    d.close(&d);
    if (o.status) {
        snprintf(res->error, sizeof(res->error), "traffic before the idle second failed: %s", o.err);
    } else {
        struct outcome none = {.seconds = 1};
        result_cpu(res, &c0, &c1, &none);
        res->seconds = (double)(c1.t_ns - c0.t_ns) / 1e9;
    }
    progress_end(res->error[0] ? "FAILED" : "done");
}

static void run_tests(void)
{
    const int ll = RRPC_CLASS_LOW_LATENCY, bulk = g_opts.large_class;
    const double dur = g_opts.duration;
    struct driver *tcp = find_driver("tcp"), *verbs = find_driver("verbs");
    bool tcpish = tcp || find_driver("raw-tcp");
    if (g_opts.tests & T_RTT) {
        for (int i = 0; i < ndrivers; i++)
            run_single(&drivers[i], "rpc_rtt",
                       (struct spec){OP_ECHO, g_opts.size, 1, ll, true}, dur);
        if (tcp) {
            run_variant("tcp", V_POLL_ON);
            run_variant("tcp", V_POLL_OFF);
            run_variant("tcp", V_MODE);
        }
        if (verbs)
            run_variant("verbs", V_MODE);
        if (tcpish)
            peers_run(PEER_TCP_LAT);
        if (verbs)
            peers_run(PEER_VERBS_LAT);
    }
    if (g_opts.tests & T_RATE)
        for (int i = 0; i < ndrivers; i++)
            run_single(&drivers[i], "rpc_rate",
                       (struct spec){OP_ECHO, g_opts.size, g_opts.depth, ll, true}, dur);
    if (g_opts.tests & T_LARGE) {
        for (int i = 0; i < ndrivers; i++)
            run_single(&drivers[i], "rpc_large_rtt",
                       (struct spec){OP_ECHO, g_opts.large_size, 1, bulk, true}, dur);
        for (int i = 0; i < ndrivers; i++)
            run_single(&drivers[i], "rpc_large_bw",
                       (struct spec){OP_SINK, g_opts.large_size, g_opts.bw_depth, bulk, true},
                       dur);
        if (tcpish)
            peers_run(PEER_TCP_BW);
    }
    for (int w = 0; w < 2; w++) {
        unsigned bit = w == 0 ? T_WRITE : T_READ;
        enum op_kind k = w == 0 ? OP_WRITE : OP_READ;
        if (!(g_opts.tests & bit))
            continue;
        for (int i = 0; i < ndrivers; i++)
            if (drivers[i].onesided)
                run_single(&drivers[i], w == 0 ? "write_lat" : "read_lat",
                           (struct spec){k, g_opts.size, 1, ll, true}, dur);
        for (int i = 0; i < ndrivers; i++)
            if (drivers[i].onesided)
                run_single(&drivers[i], w == 0 ? "write_bw" : "read_bw",
                           (struct spec){k, g_opts.large_size, g_opts.bw_depth, bulk, true}, dur);
        if (w == 0 && tcp)
            peers_run(PEER_TCP_BW);
        if (w == 0 && verbs)
            peers_run(PEER_VERBS_BW);
    }
    if (g_opts.tests & T_QOS)
        for (int load = QOS_SEPARATED; load <= QOS_WORK_WORKER; load++)
            for (int i = 0; i < ndrivers; i++)
                if (drivers[i].qos)
                    run_qos(&drivers[i], (enum qos_load)load);
    if ((g_opts.tests & T_IDLE) && tcp)
        run_idle();
    if ((g_opts.tests & T_CONTENDED) && tcp) {
        run_variant_hog("tcp", V_POLL_ON, true);
        run_variant_hog("tcp", V_POLL_OFF, true);
    }
    if (g_opts.tests & T_SWEEP) {
        static const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            for (int i = 0; i < ndrivers; i++)
                run_single(&drivers[i], "sweep_rtt", (struct spec){OP_ECHO, sizes[s], 1, ll, true},
                           g_opts.sweep_duration);
            for (int i = 0; i < ndrivers; i++)
                run_single(&drivers[i], "sweep_bw",
                           (struct spec){OP_SINK, sizes[s], g_opts.bw_depth, bulk, false},
                           g_opts.sweep_duration);
            for (int i = 0; i < ndrivers; i++)
                if (drivers[i].onesided)
                    run_single(&drivers[i], "sweep_write_bw",
                               (struct spec){OP_WRITE, sizes[s], g_opts.bw_depth, bulk, false},
                               g_opts.sweep_duration);
        }
    }
}

/* ---- client side: connect, run, report ------------------------------------------ */

static const char *json_path, *csv_path, *plot_dir;

static int write_machine(const char *path, void (*fn)(FILE *))
{
    if (!path)
        return 0;
    if (strcmp(path, "-") == 0) {
        fn(stdout);
        return 0;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        note("cannot write %s: %s", path, strerror(errno));
        return 1;
    }
    fn(f);
    fclose(f);
    note("wrote %s", path);
    return 0;
}

#ifndef BENCH_PLOT_SCRIPT
#define BENCH_PLOT_SCRIPT "bench/plot.py"
#endif
#ifndef BENCH_PLOT_INSTALLED
#define BENCH_PLOT_INSTALLED "/usr/share/roce-rpc/plot.py"
#endif

/* --plot DIR: the JSON and CSV into DIR (unless named elsewhere), then the
 * PNGs drawn by plot.py with Debian's matplotlib. */
static int plot(const char *dir)
{
    char json[1024], csv[1024];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        note("cannot make the plot directory %s: %s", dir, strerror(errno));
        return 1;
    }
    snprintf(json, sizeof(json), "%s/rrpc-bench.json", dir);
    snprintf(csv, sizeof(csv), "%s/rrpc-bench.csv", dir);
    if (!json_path || strcmp(json_path, "-") == 0)
        if (write_machine(json, report_json))
            return 1;
    if (!csv_path || strcmp(csv_path, "-") == 0)
        write_machine(csv, report_csv);
    const char *script = getenv("RRPC_BENCH_PLOT");
    if (!script || !*script)
        script = access(BENCH_PLOT_SCRIPT, R_OK) == 0 ? BENCH_PLOT_SCRIPT : BENCH_PLOT_INSTALLED;
    const char *src = json_path && strcmp(json_path, "-") ? json_path : json;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/usr/bin/python3", "python3", script, src, dir, (char *)NULL);
        fprintf(stderr, "rrpc-bench: cannot run /usr/bin/python3 %s: %s\n", script, strerror(errno));
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        note("plotting failed (%s %s; needs python3-matplotlib)", script, src);
        return 1;
    }
    return 0;
}

/* The scale test on each transport asked for; returns how many transports
 * were skipped for want of a device (when no other test ran on them). */
static int run_scale(unsigned transports, const struct endpoints *ep, bool others)
{
    char uri[300];
    int skipped = 0;
    if (transports & TR_TCP) {
        make_uri(uri, sizeof(uri), "tcp", ep->host, ep->scale_tcp_port, ep->src);
        scale_run("tcp", ep->scale_tcp_port > 0 ? uri : NULL);
    }
    if (transports & TR_VERBS) {
        if (!ep->rdma_host) {
            struct result *res = result_add("verbs", "scale", 64, 0, NULL);
            res->skipped = true;
            snprintf(res->error, sizeof(res->error), "%s", ep->rdma_why);
            if (!others) {
                note("verbs skipped: %s", ep->rdma_why);
                skipped++;
            }
        } else {
            make_uri(uri, sizeof(uri), "rdma", ep->rdma_host, ep->scale_rdma_port, ep->src);
            scale_run("verbs", ep->scale_rdma_port > 0 ? uri : NULL);
        }
    }
    if (transports & TR_INPROC)
        scale_run("inproc", NULL);
    return skipped;
}

static int run_client(unsigned transports, struct endpoints *ep)
{
    char err[400], uri[300];
    int skipped = 0, wanted = 0, failed = 0;
    char tl[64] = "";
    bool others = (g_opts.tests & ~(unsigned)T_SCALE) != 0;
    for (int t = 0; t < 3; t++) {
        unsigned bit = t == 0 ? TR_TCP : t == 1 ? TR_VERBS : TR_RAW;
        const char *name = t == 0 ? "tcp" : t == 1 ? "verbs" : "raw-tcp";
        if (!(transports & bit))
            continue;
        wanted++;
        snprintf(tl + strlen(tl), sizeof(tl) - strlen(tl), "%s%s", tl[0] ? "," : "", name);
        if (!others) /* the scale test opens its own connections */
            continue;
        struct driver *d = &drivers[ndrivers];
        memset(d, 0, sizeof(*d));
        int r;
        err[0] = 0;
        progress_begin("connecting %s", name);
        if (t == 0) {
            make_uri(uri, sizeof(uri), "tcp", ep->host, ep->tcp_port, ep->src);
            r = lib_driver_open(d, "tcp", uri, g_opts.client_thread_mode, NULL, err, sizeof(err));
        } else if (t == 1) {
            if (!ep->rdma_host) {
                progress_end("skipped");
                note("verbs skipped: %s", ep->rdma_why);
                struct result *res = result_add("verbs", "connect", 0, 0, NULL);
                res->skipped = true;
                snprintf(res->error, sizeof(res->error), "%s", ep->rdma_why);
                skipped++;
                continue;
            }
            make_uri(uri, sizeof(uri), "rdma", ep->rdma_host, ep->rdma_port, ep->src);
            r = lib_driver_open(d, "verbs", uri, g_opts.client_thread_mode, NULL, err, sizeof(err));
        } else {
            r = raw_driver_open(d, ep->host, ep->raw_port, ep->src, err, sizeof(err));
        }
        progress_end(r ? "FAILED" : "up");
        if (r) {
            note("%s: %s", name, err);
            struct result *res = result_add(name, "connect", 0, 0, NULL);
            snprintf(res->error, sizeof(res->error), "%s", err);
            failed++;
            continue;
        }
        cpu_server_query_by(d); /* (local mode reads the server's /proc entry instead) */
        ndrivers++;
    }
    g_ep = ep;
    if (transports & TR_INPROC) {
        wanted++;
        snprintf(tl + strlen(tl), sizeof(tl) - strlen(tl), "%sinproc", tl[0] ? "," : "");
        if (others)
            note("inproc: only the scale test runs on inproc");
    }
    snprintf(g_meta.transports, sizeof(g_meta.transports), "%s", tl);
    if (ndrivers)
        run_tests();
    if ((g_opts.tests & T_SCALE) && (transports & TR_RAW))
        note("raw-tcp: the scale test measures the library's transports only");
    if (g_opts.tests & T_SCALE)
        skipped += run_scale(transports, ep, others);
    for (int i = 0; i < ndrivers; i++)
        drivers[i].close(&drivers[i]);

    bool table = !(json_path && strcmp(json_path, "-") == 0) &&
                 !(csv_path && strcmp(csv_path, "-") == 0);
    if (table) {
        report_table(stdout);
        report_peers(stdout);
        report_targets(stdout);
        report_nic(stdout);
    } else {
        report_targets(stderr);
    }
    fflush(stdout);
    int rc = write_machine(json_path, report_json) | write_machine(csv_path, report_csv);
    if (plot_dir)
        rc |= plot(plot_dir);
    if (wanted && skipped == wanted)
        return 77; /* everything asked for is unavailable here: a skip for meson */
    return rc || failed ? 1 : 0;
}

/* ---- server side ----------------------------------------------------------------- */

static void block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

/* The tcp servers of the polling variants: @port_on with polling on, @port_off
 * with it off (0: any port). */
static int start_poll_servers(const char *host, int port_on, int port_off, int *ret_on,
                              int *ret_off, char *err, size_t elen)
{
    char uri[300], env[160];
    make_uri(uri, sizeof(uri), "tcp", host, port_on, NULL);
    poll_on_env(env, sizeof(env), BENCH_TCP_POLL_ENV);
    if (lib_server_start(uri, NULL, env, ret_on, NULL, NULL, 0, err, elen))
        return -1;
    make_uri(uri, sizeof(uri), "tcp", host, port_off, NULL);
    snprintf(env, sizeof(env), "%s=0", BENCH_TCP_POLL_ENV);
    return lib_server_start(uri, NULL, env, ret_off, NULL, NULL, 0, err, elen) ? -1 : 0;
}

/* The scale test's server: its own context (connection caps lifted,
 * keepalives on, so idle connections are trimmed) on @tcp_host:@tcp_port and, when
 * @rdma_host is given, rdma on @rdma_port (0: any port).  The file limits are
 * raised to the hard ones first. */
static int start_scale_server(const char *tcp_host, const char *rdma_host, int tcp_port, int rdma_port, int *ret_tcp,
                              int *ret_rdma, char *rdma_err, size_t rlen, char *err, size_t elen)
{
    long soft, hard;
    bench_raise_limit(RLIMIT_NOFILE, &soft, &hard);
    bench_raise_limit(RLIMIT_MEMLOCK, &soft, &hard);
    char tcp_uri[300], rdma_uri[300];
    make_uri(tcp_uri, sizeof(tcp_uri), "tcp", tcp_host, tcp_port, NULL);
    if (rdma_host && *rdma_host)
        make_uri(rdma_uri, sizeof(rdma_uri), "rdma", rdma_host, rdma_port, NULL);
    return lib_server_start(tcp_uri, rdma_host && *rdma_host ? rdma_uri : NULL,
                            BENCH_SCALE_SERVER_ENV, ret_tcp, ret_rdma, rdma_err, rlen, err, elen);
}

static int cmd_server(const char *host, int port)
{
    sigset_t set;
    block_signals(&set);
    signal(SIGPIPE, SIG_IGN);
    char tcp_uri[300], rdma_uri[300], rdma_err[512] = "", err[400] = "";
    make_uri(tcp_uri, sizeof(tcp_uri), "tcp", host, port, NULL);
    make_uri(rdma_uri, sizeof(rdma_uri), "rdma", host, port + 1, NULL);
    int tp, rp, xp, pon, poff;
    if (lib_server_start(tcp_uri, rdma_uri, NULL, &tp, &rp, rdma_err, sizeof(rdma_err), err,
                         sizeof(err)) ||
        start_poll_servers(host, port + 3, port + 4, &pon, &poff, err, sizeof(err))) {
        fprintf(stderr, "rrpc-bench server: %s\n", err);
        return 1;
    }
    if (raw_server_start(host, port + 2, &xp, err, sizeof(err))) {
        fprintf(stderr, "rrpc-bench server: %s\n", err);
        return 1;
    }
    int stp = -1, srp = -1;
    char srdma_err[512] = "";
    if (start_scale_server(host, host, port + 5, port + 6, &stp, &srp, srdma_err, sizeof(srdma_err), err,
                           sizeof(err))) {
        fprintf(stderr, "rrpc-bench server: %s\n", err);
        return 1;
    }
    if (strcmp(host, "127.0.0.1") && strcmp(host, "::1") && strcmp(host, "localhost"))
        fprintf(stderr, "rrpc-bench server: WARNING: listening on %s without authentication; any "
                        "host that reaches it may write to the bench's memory region\n", host);
    printf("rrpc-bench server: tcp://%s:%d\n", host, tp);
    if (rp > 0)
        printf("rrpc-bench server: rdma://%s:%d\n", host, rp);
    else
        printf("rrpc-bench server: no rdma:// (%s)\n", rdma_err);
    printf("rrpc-bench server: raw-tcp %s:%d\n", host, xp);
    char pon_env[160];
    poll_on_env(pon_env, sizeof(pon_env), BENCH_TCP_POLL_ENV);
    printf("rrpc-bench server: tcp://%s:%d with polling on (%s), tcp://%s:%d with it off\n", host,
           pon, pon_env, host, poff);
    printf("rrpc-bench server: scale test: tcp://%s:%d%s\n", host, stp,
           srp > 0 ? "" : " (no rdma://)");
    if (srp > 0)
        printf("rrpc-bench server: scale test: rdma://%s:%d\n", host, srp);
    printf("rrpc-bench server: running; Ctrl-C stops\n");
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    lib_server_stop();
    return 0;
}

static int pin_cpus[2] = {-1, -1};

void bench_pin(int cpu, bool quiet)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0 && !quiet)
        note("cannot pin to CPU %d: %s", cpu, strerror(errno));
}

/* Local mode: a server in a child process on the loopback (and on the RDMA
 * device's address for verbs), the client here. */
static int cmd_local(unsigned transports, const char *rdma_host_opt, const char *src)
{
    struct endpoints ep = {.host = "127.0.0.1", .src = src};
    char rdma_host[64] = "";
    if (transports & TR_VERBS) {
        if (rdma_host_opt)
            snprintf(rdma_host, sizeof(rdma_host), "%s", rdma_host_opt);
        else
            rdma_netdev_addr(rdma_host, sizeof(rdma_host), ep.rdma_why, sizeof(ep.rdma_why));
    }
    int p[2];
    if (pipe(p) < 0) {
        perror("rrpc-bench: pipe");
        return 1;
    }
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("rrpc-bench: fork");
        return 1;
    }
    if (pid == 0) {
        close(p[0]);
        sigset_t set;
        block_signals(&set);
        signal(SIGPIPE, SIG_IGN);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        bench_pin(pin_cpus[0], false);
        char rdma_uri[300], rdma_err[512] = "", err[400] = "";
        if (rdma_host[0])
            make_uri(rdma_uri, sizeof(rdma_uri), "rdma", rdma_host, 0, NULL);
        int tp = -1, rp = -1, xp = -1, pon = -1, poff = -1;
        FILE *w = fdopen(p[1], "w");
        if (lib_server_start((transports & TR_TCP) ? "tcp://127.0.0.1:0" : NULL,
                             rdma_host[0] ? rdma_uri : NULL, NULL, &tp, &rp, rdma_err,
                             sizeof(rdma_err), err, sizeof(err)) ||
            ((transports & TR_TCP) &&
             start_poll_servers("127.0.0.1", 0, 0, &pon, &poff, err, sizeof(err))) ||
            raw_server_start("127.0.0.1", 0, &xp, err, sizeof(err))) {
            fprintf(w, "ERR %s\n", err);
            fclose(w);
            _exit(1);
        }
        int stp = -1, srp = -1;
        if ((g_opts.tests & T_SCALE) && (transports & (TR_TCP | TR_VERBS))) {
            char srdma_err[512] = "";
            if (start_scale_server("127.0.0.1", rdma_host[0] ? rdma_host : NULL, 0, 0, &stp, &srp,
                                   srdma_err, sizeof(srdma_err), err, sizeof(err))) {
                fprintf(w, "ERR %s\n", err);
                fclose(w);
                _exit(1);
            }
        }
        fprintf(w, "OK %d %d %d %d %d %d %d\n%s\n", tp, rp, xp, pon, poff, stp, srp, rdma_err);
        fclose(w);
        int sig;
        sigwait(&set, &sig);
        lib_server_stop();
        _exit(0);
    }
    close(p[1]);
    bench_pin(pin_cpus[1], false);
    char line[1024] = "", why[512] = "";
    FILE *rd = fdopen(p[0], "r");
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    int ok = poll(&pf, 1, 30000) > 0 && fgets(line, sizeof(line), rd);
    if (ok && fgets(why, sizeof(why), rd))
        why[strcspn(why, "\n")] = 0;
    fclose(rd);
    int rc;
    if (!ok || sscanf(line, "OK %d %d %d %d %d %d %d", &ep.tcp_port, &ep.rdma_port, &ep.raw_port,
                      &ep.tcp_poll_port, &ep.tcp_nopoll_port, &ep.scale_tcp_port,
                      &ep.scale_rdma_port) != 7) {
        line[strcspn(line, "\n")] = 0;
        note("the local server did not start: %s", line[0] ? line : "no answer");
        rc = 1;
    } else {
        if (ep.rdma_port > 0) {
            ep.rdma_host = rdma_host;
        } else if (rdma_host[0]) {
            snprintf(ep.rdma_why, sizeof(ep.rdma_why), "%s", why);
        }
        cpu_server_is_local(pid);
        g_peer.host = "127.0.0.1";
        g_peer.cpu_srv = pin_cpus[0];
        g_peer.cpu_cli = pin_cpus[1];
        if (!g_peer.pt_srv_dev[0] && ep.rdma_host) {
            snprintf(g_peer.pt_srv_dev, sizeof(g_peer.pt_srv_dev), "%s", rdma_dev);
            snprintf(g_peer.pt_cli_dev, sizeof(g_peer.pt_cli_dev), "%s", rdma_dev);
        }
        g_peer.pt_host = ep.rdma_host;
        rc = run_client(transports, &ep);
    }
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    return rc;
}

/* ---- main ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0)) {
        printf("rrpc-bench %s, libroce_rpc %s (wire protocol %d)\n", RRPC_VERSION_STRING,
               rrpc_version(), RRPC_PROTOCOL_VERSION);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "local") && strcmp(cmd, "server") && strcmp(cmd, "client")) {
        fprintf(stderr, "rrpc-bench: unknown command \"%s\"\n", cmd);
        usage(stderr);
        return 2;
    }
    g_opts = (struct bench_opts){.size = 64, .large_size = 1u << 20, .depth = 16, .bw_depth = 8,
                                 .large_class = RRPC_CLASS_BULK, .tests = T_ALL, .progress = true,
                                 .poll_us = 1000,
                                 .poll_budget = 100, .scale_idle_ms = 2500, .peer_wait_s = 10};
    double duration = -1;
    long warmup = -1;
    unsigned transports = 0;
    const char *host = NULL, *src = NULL, *rdma_host = NULL;
    long port = DEFAULT_PORT;
    static const char valued[] =
        " --transport --tests --duration --warmup --size --large --depth --bw-depth --large-class"
        " --client-mode --host --port --src --rdma-host --pin --json --csv --ref-send-lat --ref-write-bw"
        " --poll-us --poll-budget --perftest --plot --scale-n --scale-idle-ms --peer-wait ";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        long n = 0;
        size_t z = 0;
        if (strcmp(a, "--quick") == 0) {
            g_opts.quick = true;
            takes = false;
        } else if (strcmp(a, "--no-progress") == 0) {
            g_opts.progress = false;
            takes = false;
        } else if (strcmp(a, "--no-peers") == 0) {
            g_opts.no_peers = true;
            takes = false;
        } else if (strcmp(a, "--stats") == 0) {
            g_opts.print_stats = true;
            takes = false;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (!v) {
            char key[64];
            snprintf(key, sizeof(key), " %s ", a);
            if (strstr(valued, key)) {
                fprintf(stderr, "rrpc-bench: %s needs a value\n", a);
                return 2;
            }
            fprintf(stderr, "rrpc-bench: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (strcmp(a, "--transport") == 0) {
            ok = parse_transports(v, &transports);
        } else if (strcmp(a, "--tests") == 0) {
            ok = parse_tests(v, &g_opts.tests);
        } else if (strcmp(a, "--duration") == 0) {
            ok = parse_double(v, 0.01, 3600, &duration);
        } else if (strcmp(a, "--warmup") == 0) {
            ok = parse_int(v, 0, 100000000, &warmup);
        } else if (strcmp(a, "--size") == 0) {
            ok = parse_size(v, &z) && z >= 1 && z <= BENCH_MAX_SIZE;
            g_opts.size = z;
        } else if (strcmp(a, "--large") == 0) {
            ok = parse_size(v, &z) && z >= 1 && z <= BENCH_MAX_SIZE;
            g_opts.large_size = z;
        } else if (strcmp(a, "--depth") == 0) {
            ok = parse_int(v, 1, 4096, &n);
            g_opts.depth = (int)n;
        } else if (strcmp(a, "--bw-depth") == 0) {
            ok = parse_int(v, 1, 4096, &n);
            g_opts.bw_depth = (int)n;
        } else if (strcmp(a, "--large-class") == 0) {
            int c = rrpc_class_from_name(v);
            ok = c >= 0;
            g_opts.large_class = c;
        } else if (strcmp(a, "--client-mode") == 0) {
            ok = strcmp(v, "thread") == 0 || strcmp(v, "driven") == 0;
            g_opts.client_thread_mode = strcmp(v, "thread") == 0;
        } else if (strcmp(a, "--host") == 0) {
            host = v;
        } else if (strcmp(a, "--port") == 0) {
            ok = parse_int(v, 1, 65529, &port);
        } else if (strcmp(a, "--src") == 0) {
            src = v;
        } else if (strcmp(a, "--rdma-host") == 0) {
            rdma_host = v;
        } else if (strcmp(a, "--pin") == 0) {
            ok = sscanf(v, "%d,%d", &pin_cpus[0], &pin_cpus[1]) == 2 && pin_cpus[0] >= 0 &&
                 pin_cpus[1] >= 0;
        } else if (strcmp(a, "--poll-us") == 0) {
            ok = parse_int(v, 0, 100000000, &g_opts.poll_us);
        } else if (strcmp(a, "--poll-budget") == 0) {
            ok = parse_int(v, 1, 100, &g_opts.poll_budget);
        } else if (strcmp(a, "--perftest") == 0) {
            ok = sscanf(v, "%63[^:,]:%15[0-9],%63[^:,]:%15[0-9]", g_peer.pt_srv_dev,
                        g_peer.pt_srv_gid, g_peer.pt_cli_dev, g_peer.pt_cli_gid) == 4;
        } else if (strcmp(a, "--scale-n") == 0) {
            ok = parse_scale_n(v);
        } else if (strcmp(a, "--scale-idle-ms") == 0) {
            ok = parse_int(v, 0, 3600000, &g_opts.scale_idle_ms);
        } else if (strcmp(a, "--peer-wait") == 0) {
            ok = parse_double(v, 0.1, 3600, &g_opts.peer_wait_s);
        } else if (strcmp(a, "--plot") == 0) {
            plot_dir = v;
        } else if (strcmp(a, "--json") == 0) {
            json_path = v;
        } else if (strcmp(a, "--csv") == 0) {
            csv_path = v;
        } else if (strcmp(a, "--ref-send-lat") == 0) {
            ok = parse_double(v, 0.001, 1e6, &g_opts.ref_send_lat_us);
        } else if (strcmp(a, "--ref-write-bw") == 0) {
            ok = parse_double(v, 0.001, 1e9, &g_opts.ref_write_bw_mibs);
        } else {
            fprintf(stderr, "rrpc-bench: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "rrpc-bench: bad or missing value for %s%s%s\n", a, v ? ": " : "",
                    v ? v : "");
            return 2;
        }
        if (takes)
            i++;
    }
    if (g_opts.quick) {
        g_opts.duration = duration > 0 ? duration : 0.2;
        g_opts.sweep_duration = duration > 0 ? duration / 4 : 0.05;
        g_opts.warmup_ops = warmup >= 0 ? warmup : 20;
        g_opts.warmup_max_s = 0.05;
    } else {
        g_opts.duration = duration > 0 ? duration : 2.0;
        g_opts.sweep_duration = g_opts.duration / 4;
        g_opts.warmup_ops = warmup >= 0 ? warmup : 200;
        double w = g_opts.duration * 0.2;
        g_opts.warmup_max_s = w < 0.05 ? 0.05 : w > 1.0 ? 1.0 : w;
    }
    if (!transports)
        parse_transports("auto", &transports);
    g_peer.cpu_srv = g_peer.cpu_cli = -1;
    /* the peers' servers: below the ephemeral ports (32768 up by default), where
     * no client socket of this host lands; peers.c skips a port in use */
    g_peer.port = 20000 + (int)(getpid() % 2400) * 5;
    snprintf(g_peer.why_not_pt, sizeof(g_peer.why_not_pt), "no RDMA device for perftest");
    meta_collect(argc, argv);
    snprintf(g_meta.mode, sizeof(g_meta.mode), "%s", cmd);

    if (strcmp(cmd, "server") == 0)
        return cmd_server(host ? host : "127.0.0.1", (int)port);
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(cmd, "local") == 0)
        return cmd_local(transports, rdma_host, src);
    if (!host) {
        fprintf(stderr, "rrpc-bench client: --host SERVER is required\n");
        return 2;
    }
    struct endpoints ep = {.host = host, .rdma_host = rdma_host ? rdma_host : host,
                           .tcp_port = (int)port, .rdma_port = (int)port + 1,
                           .raw_port = (int)port + 2, .tcp_poll_port = (int)port + 3,
                           .tcp_nopoll_port = (int)port + 4, .scale_tcp_port = (int)port + 5,
                           .scale_rdma_port = (int)port + 6, .src = src};
    /* The peers' servers run here: beside a remote bench server they would
     * measure something else, so they run only when SERVER is this host. */
    g_peer.host = host;
    if (!is_local_addr(host))
        snprintf(g_peer.why_not, sizeof(g_peer.why_not),
                 "%s is not an address of this host (the peers run both ends here)", host);
    g_peer.pt_host = ep.rdma_host;
    if (!g_peer.pt_srv_dev[0])
        snprintf(g_peer.why_not_pt, sizeof(g_peer.why_not_pt),
                 "client mode: give --perftest SDEV:SGID,CDEV:CGID (or --ref-send-lat/--ref-write-bw)");
    return run_client(transports, &ep);
}

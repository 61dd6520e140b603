/* SPDX-License-Identifier: MIT */
/* rrpc-bench: shared declarations of the bench tool (not a library API). */
#ifndef RRPC_BENCH_H
#define RRPC_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define BENCH_MAX_SIZE ((size_t)4 << 20) /* the largest payload of any test */
#define BENCH_MIB (1024.0 * 1024.0)

#if defined(__GNUC__)
#define BENCH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BENCH_PRINTF(a, b)
#endif

/* ---- options ------------------------------------------------------------ */

enum {
    T_RTT = 1 << 0,
    T_RATE = 1 << 1,
    T_LARGE = 1 << 2,
    T_WRITE = 1 << 3,
    T_READ = 1 << 4,
    T_SWEEP = 1 << 5,
    T_QOS = 1 << 6,
    T_IDLE = 1 << 7,
    T_CONTENDED = 1 << 8,
    T_ALL = (1 << 9) - 1, /* "all": every test above; not scale, which opens thousands of connections */
    T_SCALE = 1 << 9,
};

/* The scale test (scale.c): the connection counts it steps through, the
 * keepalive interval of its contexts (the core trims an idle connection's
 * buffers after one interval) and how long it lets the connections idle
 * before it reads the memory. */
#define BENCH_SCALE_MAX_STEPS 16
#define BENCH_SCALE_KEEPALIVE_MS 1000
#define BENCH_SCALE_VERBS_MAX 1000 /* verbs' default list stops here (pinned memory) */

/* The library's adaptive-polling tunables, set in the environment of the
 * contexts of the "polling on" / "polling off" variants (server and client).
 * One place to follow the library if it renames them. */
#define BENCH_TCP_POLL_ENV "RRPC_BUSY_POLL_US"
#define BENCH_VERBS_POLL_ENV "RRPC_VERBS_BUSY_POLL_US"

struct bench_opts {
    double duration;       /* seconds measured per test */
    double sweep_duration; /* seconds measured per sweep point */
    double warmup_max_s;   /* warm-up stops after this long ... */
    long warmup_ops;       /* ... or once every flow completed this many operations */
    size_t size;           /* payload of the small RPC tests */
    size_t large_size;     /* payload of the large tests */
    int depth;             /* pipeline depth of the rate test */
    int bw_depth;          /* messages / operations in flight in bandwidth tests */
    int large_class;       /* QoS class of the large and bandwidth tests */
    unsigned tests;        /* T_* bits */
    bool quick;
    bool progress;
    bool client_thread_mode; /* library client: thread mode + *_sync calls for depth 1 */
    double ref_send_lat_us;  /* perftest ib_send_lat t_typical (one-way), 0 = not given */
    double ref_write_bw_mibs; /* perftest ib_write_bw BW average (MiB/s), 0 = not given */
    long poll_us;             /* the "polling on" variant's value of BENCH_*_POLL_ENV */
    long poll_budget;         /* and its RRPC_BUSY_POLL_BUDGET_PCT */
    bool print_stats;         /* --stats: the client contexts' metrics on stderr at the end */
    long scale_n[BENCH_SCALE_MAX_STEPS]; /* --scale-n: connection counts, ascending */
    int scale_nn;                        /* 0: the default list per transport */
    long scale_idle_ms;                  /* --scale-idle-ms */
    bool no_peers;                       /* --no-peers: no peer tool runs */
    double peer_wait_s;                  /* --peer-wait: a peer's server must listen within this */
};
extern struct bench_opts g_opts;

/* ---- time and samples ----------------------------------------------------- */

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

struct samples {
    uint64_t *v; /* nanoseconds */
    size_t n, cap;
};
void samples_add(struct samples *s, uint64_t ns);
void samples_free(struct samples *s);

/* ---- what a transport driver runs ------------------------------------------ */

enum op_kind {
    OP_ECHO,  /* RPC "echo": the response carries the request's bytes back */
    OP_SINK,  /* RPC "sink": the response is empty (one-way data + an ack) */
    OP_WRITE, /* one-sided WRITE into the server's region */
    OP_READ,  /* one-sided READ from the server's region */
    OP_WORK,  /* RPC "work": the handler spends BENCH_WORK_US of CPU, then answers empty */
    OP_WORK_WORKER, /* RPC "work_worker": the same handler, on a worker (RRPC_HANDLER_ON_WORKER) */
};

/* CPU time the "work" handlers spend per request, us. */
#define BENCH_WORK_US 1000

/* The method an RPC spec calls. */
static inline const char *spec_method(enum op_kind kind)
{
    return kind == OP_ECHO ? "echo" : kind == OP_SINK ? "sink" : kind == OP_WORK ? "work"
                                                                             : "work_worker";
}

/* One stream of operations: @depth of them kept in flight. */
struct spec {
    enum op_kind kind;
    size_t size;
    int depth;
    int cls;  /* QoS class (ignored by raw-tcp) */
    bool lat; /* record each operation's round trip */
};

struct phase {
    double warm_max_s;
    long warm_ops;
    double dur_s;
};

struct outcome {
    struct samples lat; /* round trips of the operations issued and completed in the window */
    uint64_t ops;       /* operations completed in the window */
    uint64_t bytes;     /* payload bytes they carried (one direction) */
    double seconds;     /* the measured window */
    int status;         /* 0, or why the run failed */
    char err[256];
};

/* ---- CPU time: cpu.c ------------------------------------------------------------- */

/* A snapshot of the CPU time used so far by this process (all threads) and by
 * the bench server (a child's /proc entry in local mode, else its "cpu" RPC). */
struct cpu_mark {
    uint64_t t_ns, self_ns, srv_ns;
    bool srv_ok;
    /* Polling stops so far (rrpc_stats' busy_poll_budget_stops, _contended_stops) of
     * this process's library contexts and of the server's; polls_srv_ok: known. */
    uint64_t polls_cli[2], polls_srv[2];
    bool polls_srv_ok;
};
struct driver;
void cpu_server_is_local(int pid);
void cpu_server_query_by(struct driver *d);
/* Where cpu_mark asks for the server's polling stops (local mode too). */
void cpu_server_polls_by(struct driver *d);
/* @end: the mark that ends an interval (the server is asked after the clocks
 * are read, not before). */
void cpu_mark(struct cpu_mark *m, bool end);

struct driver {
    const char *name; /* "tcp", "verbs", "raw-tcp" */
    bool onesided;    /* WRITE / READ */
    bool qos;         /* classes */
    void *priv;
    /* Runs @n concurrent flows for the phases in @ph; fills @out[0..n). */
    int (*run)(struct driver *d, const struct spec *sp, int n, const struct phase *ph,
               struct outcome *out);
    void (*close)(struct driver *d);
    /* The bench server process's CPU time so far, and how often its contexts
     * stopped polling (polls[0]: over the CPU budget, polls[1]: contended;
     * UINT64_MAX each when an older server cannot tell).  NULL: cannot tell. */
    int (*server_cpu)(struct driver *d, uint64_t *ret_ns, uint64_t polls[2]);
};

/* Library transports (tcp://, rdma://): lib.c */
/* @env, when not NULL, is "NAME=VALUE" (several: separated by spaces) set on the context's
 * configuration. */
int lib_driver_open(struct driver *d, const char *name, const char *uri, bool thread_mode,
                    const char *env, char *err, size_t errlen);
/* Polling stops of every library client context open now, summed (see cpu_mark). */
void lib_client_polls(uint64_t polls[2]);
/* The library server: listens on @tcp_uri and/or @rdma_uri (NULL: not that one).
 * *ret_tcp_port / *ret_rdma_port get the bound ports (or a negative code, with
 * the reason in @rdma_err for rdma). */
int lib_server_start(const char *tcp_uri, const char *rdma_uri, const char *env,
                     int *ret_tcp_port, int *ret_rdma_port, char *rdma_err, size_t errlen,
                     char *err, size_t elen);
void lib_server_stop(void);
/* A context with the tunables of @env ("NAME=VALUE ...", NULL: none); keepalives off
 * unless @env or the environment sets RRPC_KEEPALIVE_MS. */
struct rrpc_ctx;
int lib_ctx_create(const char *env, struct rrpc_ctx **ret);
/* The tunables of the scale test's server context (also on its client). */
#define BENCH_SCALE_SERVER_ENV                                                                     \
    "RRPC_MAX_CONNS=1000000 RRPC_MAX_CONNS_PER_SOURCE=1000000 RRPC_KEEPALIVE_MS=1000"

/* This process's resident memory and pinned memory (VmPin) in KiB, and its
 * open file descriptors (-1 each: unknown). */
void bench_self_mem(long *ret_rss_kib, long *ret_pin_kib, long *ret_fds);
/* Raises the soft limit of @resource (RLIMIT_NOFILE, RLIMIT_MEMLOCK) to the
 * hard one; the limits after it in *ret_soft, *ret_hard (RLIM_INFINITY: -1). */
void bench_raise_limit(int resource, long *ret_soft, long *ret_hard);

/* Plain sockets: raw.c */
int raw_driver_open(struct driver *d, const char *host, int port, const char *src, char *err,
                    size_t errlen);
int raw_server_start(const char *host, int port, int *ret_port, char *err, size_t errlen);

/* ---- results and output: report.c -------------------------------------------- */

struct result {
    char transport[16];
    char test[24];
    char variant[160];
    size_t size;
    int depth;
    uint64_t samples;
    uint64_t ops;
    double seconds;
    bool has_lat; /* round-trip latency, microseconds */
    double lat_min, p50, p90, p99, p999, lat_max, mean;
    double ops_per_s;
    double mib_per_s;      /* payload bandwidth, 2^20 bytes/s (as perftest's "MB/sec") */
    double load_mib_per_s; /* qos: the bandwidth of the bulk load */
    bool has_cpu;          /* CPU time per operation, microseconds (< 0: unknown) */
    double cpu_cli_us, cpu_srv_us;
    double cli_core_pct, srv_core_pct; /* CPU use in % of one core (< 0: unknown) */
    /* Times polling stopped during the test (budget, contended), client and server; the
     * server's < 0: unknown.  Where a polling figure misses, these say whether polling ran. */
    long long polls_cli[2], polls_srv[2];
    int ncdf;                          /* latency at the quantiles cdf_q[0..ncdf) */
    double cdf[112];
    bool skipped;
    char error[600];
    struct scale_point *scale; /* test "scale": its figures (owned) */
};

/* One step of the scale test: @asked connections wanted, @conns up. */
struct scale_side {
    bool known;                       /* false: the server could not tell (older server) */
    double rss_kib, pin_kib, fds;     /* per connection: growth over the baseline / conns */
    long rss_total_kib, pin_total_kib, fds_total, conns_seen;
};
struct scale_point {
    long asked, conns;
    long connects;       /* connections opened in this step */
    double connect_s;    /* their wall time */
    double connects_per_s;
    double calls_per_s;  /* 64 B echo, one in flight on every connection */
    double calls_s;      /* the measured window */
    struct scale_side cli, srv;
    bool one_process;    /* inproc: both sides in this process (cli holds both) */
    char limits[160];    /* the limits in force: ulimit -n, -l of each side */
    char stopped[400];   /* non-empty: fewer than @asked connections, why */
};

struct result *result_add(const char *transport, const char *test, size_t size, int depth,
                          const char *variant);
void result_fill(struct result *r, const struct outcome *o, bool lat);
size_t results_count(void);
struct result *result_at(size_t i);
struct result *result_find(const char *transport, const char *test, size_t size);

struct run_meta {
    char date[40];
    char host[128];
    char kernel[256];
    char cpu[128];
    long ncpu;
    char cmdline[512];
    char mode[32];
    char transports[64];
};
extern struct run_meta g_meta;
void meta_collect(int argc, char **argv);

void report_table(FILE *f);
void report_json(FILE *f);
void report_csv(FILE *f);
void report_targets(FILE *f);
void report_peers(FILE *f);

void progress_begin(const char *fmt, ...) BENCH_PRINTF(1, 2);
void progress_tick(double frac);
void progress_end(const char *status);
/* nic.c: the RDMA ports' kernel counters over each test (called by
 * progress_begin / progress_end), and the report's section on them. */
void nic_mark_begin(void);
void nic_mark_end(const char *label);
void report_nic(FILE *f);
void note(const char *fmt, ...) BENCH_PRINTF(1, 2);
/* Pins the calling process to @cpu (< 0: nothing); @quiet: no note on failure. */
void bench_pin(int cpu, bool quiet);
/* User + system time of @ru, nanoseconds. */
struct rusage;
uint64_t rusage_ns(const struct rusage *ru);

void fmt_size(char *buf, size_t len, size_t bytes);
extern const double cdf_q[];
extern const int cdf_nq;
/* The CPU fields of @r from two marks around a run whose measured window was
 * @o->seconds long. */
void result_cpu(struct result *r, const struct cpu_mark *a, const struct cpu_mark *b,
                const struct outcome *o);

/* ---- the scale test: scale.c --------------------------------------------------------- */

/* Steps through the connection counts on @transport ("tcp", "verbs", "inproc") towards @uri
 * (the server's scale listener; inproc: NULL, the server runs in this process). */
void scale_run(const char *transport, const char *uri);

/* ---- the peers: peers.c -------------------------------------------------------------- */

enum peer_kind { PEER_TCP_LAT, PEER_TCP_BW, PEER_VERBS_LAT, PEER_VERBS_BW };
struct peer_env {
    const char *host;   /* where the tcp peers' servers listen (this host) */
    char why_not[200];  /* non-empty: the tcp peers cannot run, why */
    int port;           /* next port to try for a peer's server (20000..32000) */
    int cpu_srv, cpu_cli;
    char pt_srv_dev[64], pt_cli_dev[64], pt_srv_gid[16], pt_cli_gid[16];
    const char *pt_host; /* perftest's server address */
    char why_not_pt[200];
    unsigned done;       /* 1 << peer_kind: already run */
};
extern struct peer_env g_peer;
void peers_run(enum peer_kind k);

#endif

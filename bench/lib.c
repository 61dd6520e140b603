/* SPDX-License-Identifier: MIT */
/*
 * rrpc-bench: the library's side (tcp:// and rdma:// alike, through the
 * public API only).
 *
 * Client: one context per transport.  By default it runs in driven mode: the
 * bench thread issues calls with rrpc_call / rrpc_write / rrpc_read and runs
 * the loop with rrpc_ctx_progress, and each completion callback issues the
 * flow's next operation at once, so no thread hand-off is measured.  With
 * --client-mode thread the context runs its own loop thread, depth-1 tests
 * use the blocking rrpc_call_sync / rrpc_write_sync / rrpc_read_sync from the
 * bench thread (the README's usage) and deeper tests resubmit from the
 * callbacks on the loop thread.
 *
 * Server: a context in thread mode per configuration with "echo", "sink",
 * "token", "cpu", "mem" (the process's memory, fds and connections, for the
 * scale test), "work" and "work_worker" (the same 1 ms handler on a handler
 * worker) methods and a 4 MiB region open to remote READ and WRITE.
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#include "bench.h"

/* ---- server ---------------------------------------------------------------- */

/* One server context per configuration (defaults, polling on, polling off):
 * each its own listeners, region and loop thread. */
struct lib_srv {
    rrpc_ctx *ctx;
    rrpc_region *region;
    void *mem;
    rrpc_listener *tcp, *rdma;
    bool running; /* h_cpu may read ctx; under srv_mu */
};

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond(req, p, len);
}

static void h_sink(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond(req, NULL, 0);
}

/* Spends BENCH_WORK_US of this thread's CPU, then answers empty: a handler
 * that does work on what it received (decoding, checksumming, copying). */
static void h_work(rrpc_request *req, const void *p, size_t len, void *user)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < BENCH_WORK_US);
    rrpc_respond(req, NULL, 0);
}

static void h_token(rrpc_request *req, const void *p, size_t len, void *user)
{
    struct lib_srv *s = user;
    rrpc_token t;
    uint8_t buf[RRPC_TOKEN_SIZE];
    int r = rrpc_region_token(s->region, rrpc_request_conn(req), &t);
    if (r) {
        rrpc_respond_error(req, 1, rrpc_strerror(r));
        return;
    }
    rrpc_token_encode(&t, buf);
    rrpc_respond(req, buf, sizeof(buf));
}

static struct lib_srv srvs[6];
static int nsrvs;

/* Connections up on all server contexts of this process (the "mem" method
 * reports it): the scale test checks the server saw what it opened. */
static long srv_conns;
static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;

static void srv_conn_event(rrpc_conn *conn, rrpc_conn_event ev, int reason, void *user)
{
    (void)conn, (void)reason, (void)user;
    pthread_mutex_lock(&conns_mu);
    srv_conns += ev == RRPC_CONN_UP ? 1 : ev == RRPC_CONN_DOWN ? -1 : 0;
    pthread_mutex_unlock(&conns_mu);
}

/* The "mem" method: "RSS_KIB VMPIN_KIB FDS CONNS NOFILE_SOFT" of this process
 * (text; -1: unknown).  On a handler worker: counting 10,000 fds takes a while. */
static void h_mem(rrpc_request *req, const void *p, size_t len, void *user)
{
    long rss, pin, fds, soft, hard;
    bench_self_mem(&rss, &pin, &fds);
    bench_raise_limit(-1, &soft, &hard); /* -1: reads RLIMIT_NOFILE only */
    pthread_mutex_lock(&conns_mu);
    long conns = srv_conns;
    pthread_mutex_unlock(&conns_mu);
    char buf[128];
    int n = snprintf(buf, sizeof(buf), "%ld %ld %ld %ld %ld", rss, pin, fds, conns, soft);
    rrpc_respond(req, buf, (size_t)n);
}

/* The cpu method's fields are little-endian on the wire. */
static void put_le64(uint8_t *b, uint64_t v)
{
    v = htole64(v);
    memcpy(b, &v, sizeof v);
}

static uint64_t get_le64(const uint8_t *b)
{
    uint64_t v;
    memcpy(&v, b, sizeof v);
    return le64toh(v);
}

/* Adds @ctx's polling stops (over the CPU budget, contended) to @polls and,
 * where @loop, its loop thread's wake-ups and the loop takeovers to @loop. */
static void add_poll_stops(rrpc_ctx *ctx, uint64_t polls[2], uint64_t loop[2])
{
    rrpc_stats st;
    if (rrpc_ctx_stats(ctx, &st) == 0) {
        polls[0] += st.busy_poll_budget_stops;
        polls[1] += st.busy_poll_contended_stops;
        if (loop) {
            loop[0] += st.loop_thread_wakeups;
            loop[1] += st.loop_takeovers;
        }
    }
}

/* The "cpu" method: the server process's CPU time (all threads, ns), what a
 * remote client reports as the server's CPU cost, then the polling stops of
 * all the server's contexts, summed: over the CPU budget, contended (24
 * bytes in all, little-endian).  It runs on a handler worker, where
 * it holds no context's lock, so it may take each context's in turn (on the
 * loop two such calls on two contexts could wait for each other); srv_mu
 * keeps a context from going (lib_server_stop) or being half made
 * (lib_server_start) while it is read. */
static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER;

static void h_cpu(rrpc_request *req, const void *p, size_t len, void *user)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t polls[2] = {0, 0};
    pthread_mutex_lock(&srv_mu);
    for (int i = 0; i < nsrvs; i++)
        if (srvs[i].running)
            add_poll_stops(srvs[i].ctx, polls, NULL);
    pthread_mutex_unlock(&srv_mu);
    uint8_t b[24];
    put_le64(b, rusage_ns(&ru));
    put_le64(b + 8, polls[0]);
    put_le64(b + 16, polls[1]);
    rrpc_respond(req, b, sizeof(b));
}

/* Creates a context with the tunables "NAME=VALUE ..." of @env set through the
 * library's config object (NULL: none).  Keepalives are off unless the
 * environment sets RRPC_KEEPALIVE_MS: a driven client does not run its loop
 * while the peer tools run (sockperf, ucx_perftest, iperf3 take longer than
 * the 15 s keepalive timeout together), and the server would declare its
 * idle connections lost before the next test ("write to the peer failed"). */
int lib_ctx_create(const char *env, rrpc_ctx **ret)
{
    rrpc_config *cfg = NULL;
    int r = rrpc_config_create(&cfg);
    if (r == 0 && !getenv("RRPC_KEEPALIVE_MS"))
        r = rrpc_config_set(cfg, "RRPC_KEEPALIVE_MS", "0");
    /* @env: "NAME=VALUE", or several separated by spaces */
    for (const char *p = env; r == 0 && p && *p;) {
        size_t n = strcspn(p, " ");
        char item[160], *eq;
        snprintf(item, sizeof(item), "%.*s", (int)n, p);
        if ((eq = strchr(item, '=')))
            *eq = 0;
        r = rrpc_config_set(cfg, item, eq ? eq + 1 : "");
        p += n + strspn(p + n, " ");
    }
    if (r == 0)
        r = rrpc_ctx_create_with(cfg, ret);
    rrpc_config_destroy(cfg);
    return r;
}

int lib_server_start(const char *tcp_uri, const char *rdma_uri, const char *env,
                     int *ret_tcp_port, int *ret_rdma_port, char *rdma_err, size_t errlen,
                     char *err, size_t elen)
{
    if (nsrvs == (int)(sizeof(srvs) / sizeof(srvs[0]))) {
        snprintf(err, elen, "too many server contexts");
        return -ENOSPC;
    }
    pthread_mutex_lock(&srv_mu);
    struct lib_srv *s = &srvs[nsrvs++];
    *s = (struct lib_srv){0};
    pthread_mutex_unlock(&srv_mu);
    int r = lib_ctx_create(env, &s->ctx);
    if (r) {
        snprintf(err, elen, "rrpc_ctx_create%s%s: %s", env ? " with " : "", env ? env : "",
                 rrpc_strerror(r));
        return r;
    }
    s->mem = aligned_alloc(4096, BENCH_MAX_SIZE);
    if (!s->mem) {
        snprintf(err, elen, "out of memory");
        return -ENOMEM;
    }
    memset(s->mem, 0x5a, BENCH_MAX_SIZE);
    r = rrpc_mem_reg(s->ctx, s->mem, BENCH_MAX_SIZE,
                     RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &s->region);
    if (r) {
        snprintf(err, elen, "rrpc_mem_reg: %s: %s", rrpc_strerror(r), rrpc_ctx_last_error(s->ctx));
        return r;
    }
    if ((r = rrpc_register(s->ctx, "echo", h_echo, NULL)) ||
        (r = rrpc_register(s->ctx, "sink", h_sink, NULL)) ||
        (r = rrpc_register(s->ctx, "token", h_token, s)) ||
        (r = rrpc_register_with(s->ctx, "cpu", h_cpu, NULL,
                                &(rrpc_register_opts){.flags = RRPC_HANDLER_ON_WORKER})) ||
        (r = rrpc_register_with(s->ctx, "mem", h_mem, NULL,
                                &(rrpc_register_opts){.flags = RRPC_HANDLER_ON_WORKER})) ||
        (r = rrpc_register(s->ctx, "work", h_work, NULL)) ||
        (r = rrpc_register_with(s->ctx, "work_worker", h_work, NULL,
                                &(rrpc_register_opts){.flags = RRPC_HANDLER_ON_WORKER}))) {
        snprintf(err, elen, "rrpc_register: %s", rrpc_strerror(r));
        return r;
    }
    *ret_tcp_port = -1;
    if (ret_rdma_port)
        *ret_rdma_port = -1;
    if (tcp_uri) {
        r = rrpc_listen(s->ctx, tcp_uri, srv_conn_event, NULL, &s->tcp);
        if (r) {
            snprintf(err, elen, "listen %s: %s: %s", tcp_uri, rrpc_strerror(r),
                     rrpc_ctx_last_error(s->ctx));
            return r;
        }
        *ret_tcp_port = rrpc_listener_port(s->tcp);
    }
    if (rdma_uri) {
        r = rrpc_listen(s->ctx, rdma_uri, srv_conn_event, NULL, &s->rdma);
        if (r) {
            snprintf(rdma_err, errlen, "listen %s: %s (%s) %s", rdma_uri, rrpc_strerror(r),
                     rrpc_err_name(r), rrpc_ctx_last_error(s->ctx));
            *ret_rdma_port = r < 0 ? r : -1;
        } else {
            *ret_rdma_port = rrpc_listener_port(s->rdma);
        }
    }
    r = rrpc_ctx_start_thread(s->ctx);
    if (r) {
        snprintf(err, elen, "rrpc_ctx_start_thread: %s", rrpc_strerror(r));
        return r;
    }
    pthread_mutex_lock(&srv_mu);
    s->running = true; /* h_cpu reads it from now on */
    pthread_mutex_unlock(&srv_mu);
    return 0;
}

void lib_server_stop(void)
{
    pthread_mutex_lock(&srv_mu); /* no h_cpu reads a context from now on */
    for (int i = 0; i < nsrvs; i++)
        srvs[i].running = false;
    pthread_mutex_unlock(&srv_mu);
    for (int i = 0; i < nsrvs; i++) {
        rrpc_listener_close(srvs[i].tcp);
        rrpc_listener_close(srvs[i].rdma);
        rrpc_ctx_destroy(srvs[i].ctx); /* frees the region too */
        free(srvs[i].mem);
    }
    pthread_mutex_lock(&srv_mu);
    nsrvs = 0;
    pthread_mutex_unlock(&srv_mu);
}

/* ---- client ------------------------------------------------------------------ */

struct lib_drv {
    rrpc_ctx *ctx;
    rrpc_conn *conn;
    bool thread_mode;
    pthread_mutex_t mu; /* flow state: callbacks (loop thread) vs the bench thread */
    pthread_cond_t cv;
    uint8_t *buf;
    rrpc_region *region;
    rrpc_token tok;
};

struct flow;
struct slot {
    struct flow *f;
    uint64_t t0;
};

struct flow {
    struct lib_drv *d;
    struct spec sp;
    struct outcome *out;
    struct slot *slots;
    int outstanding;
    bool stop, measuring;
    uint64_t rec_start; /* 0 during the warm-up */
    uint64_t warm_done;
};

static void finish(struct slot *s, int status, const char *msg);

static void call_cb(const rrpc_result *res, void *user)
{
    finish(user, res->status, res->message);
}

static void op_cb(int status, void *user)
{
    finish(user, status, NULL);
}

/* Calls of 64 KiB and more lend d->buf instead of having it copied: it is
 * never written while calls are in flight (RRPC_CALL_BORROW). */
static uint64_t call_flags(size_t size)
{
    return size >= 64 * 1024 ? RRPC_CALL_BORROW : 0;
}

static int submit(struct slot *s)
{
    struct flow *f = s->f;
    struct lib_drv *d = f->d;
    s->t0 = now_ns();
    switch (f->sp.kind) {
    case OP_ECHO:
    case OP_SINK:
    case OP_WORK:
    case OP_WORK_WORKER: {
        rrpc_call_opts o = {.qos_class = f->sp.cls, .deadline_ms = 60000,
                            .flags = call_flags(f->sp.size)};
        return rrpc_call(d->conn, spec_method(f->sp.kind), d->buf, f->sp.size,
                         &o, call_cb, s);
    }
    case OP_WRITE: {
        rrpc_op_opts o = {.qos_class = f->sp.cls};
        return rrpc_write(d->conn, d->region, 0, &d->tok, 0, f->sp.size, &o, op_cb, s);
    }
    case OP_READ: {
        rrpc_op_opts o = {.qos_class = f->sp.cls};
        return rrpc_read(d->conn, d->region, 0, &d->tok, 0, f->sp.size, &o, op_cb, s);
    }
    }
    return -EINVAL;
}

static void flow_fail(struct flow *f, int status, const char *msg)
{
    if (!f->out->status) {
        f->out->status = status;
        snprintf(f->out->err, sizeof(f->out->err), "%s (%s)%s%s", rrpc_strerror(status),
                 rrpc_err_name(status), msg && *msg ? ": " : "", msg ? msg : "");
    }
    f->stop = true;
}

static void finish(struct slot *s, int status, const char *msg)
{
    uint64_t t = now_ns();
    struct flow *f = s->f;
    struct lib_drv *d = f->d;
    pthread_mutex_lock(&d->mu);
    if (status != 0) {
        flow_fail(f, status, msg);
    } else if (f->measuring) {
        f->out->ops++;
        f->out->bytes += f->sp.size;
        if (f->sp.lat && s->t0 >= f->rec_start)
            samples_add(&f->out->lat, t - s->t0);
    } else if (!f->rec_start) {
        f->warm_done++;
    }
    bool again = !f->stop;
    if (!again)
        f->outstanding--;
    pthread_mutex_unlock(&d->mu);
    if (again) {
        int r = submit(s);
        if (r) {
            pthread_mutex_lock(&d->mu);
            flow_fail(f, r, rrpc_ctx_last_error(d->ctx));
            f->outstanding--;
            pthread_mutex_unlock(&d->mu);
        }
    }
    if (d->thread_mode)
        pthread_cond_broadcast(&d->cv);
}

/* Lets completions happen: driven mode runs the loop, thread mode waits. */
static void pump(struct lib_drv *d, bool busy)
{
    if (!d->thread_mode) {
        rrpc_ctx_progress(d->ctx, busy ? -1 : 5);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 5 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->mu);
    pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    pthread_mutex_unlock(&d->mu);
}

/* Depth 1 in thread mode: the blocking calls, from this thread. */
static int sync_once(struct lib_drv *d, const struct spec *sp, char *err, size_t errlen)
{
    int r;
    if (sp->kind != OP_WRITE && sp->kind != OP_READ) {
        rrpc_call_opts o = {.qos_class = sp->cls, .deadline_ms = 60000,
                            .flags = call_flags(sp->size)};
        void *resp = NULL;
        size_t len = 0;
        r = rrpc_call_sync(d->conn, spec_method(sp->kind), d->buf, sp->size, &o,
                           &resp, &len);
        free(resp);
    } else {
        rrpc_op_opts o = {.qos_class = sp->cls};
        r = sp->kind == OP_WRITE ? rrpc_write_sync(d->conn, d->region, 0, &d->tok, 0, sp->size, &o)
                                 : rrpc_read_sync(d->conn, d->region, 0, &d->tok, 0, sp->size, &o);
    }
    if (r)
        snprintf(err, errlen, "%s (%s): %s", rrpc_strerror(r), rrpc_err_name(r),
                 rrpc_ctx_last_error(d->ctx));
    return r;
}

static int run_sync(struct lib_drv *d, const struct spec *sp, const struct phase *ph,
                    struct outcome *out)
{
    double total = ph->warm_max_s + ph->dur_s;
    uint64_t t_start = now_ns();
    long warm = 0;
    int r = 0;
    while (warm < ph->warm_ops && (double)(now_ns() - t_start) / 1e9 < ph->warm_max_s) {
        if ((r = sync_once(d, sp, out->err, sizeof(out->err))))
            goto fail;
        warm++;
    }
    uint64_t t_rec = now_ns();
    uint64_t t_end = t_rec + (uint64_t)(ph->dur_s * 1e9);
    uint64_t t;
    do {
        uint64_t t0 = now_ns();
        if ((r = sync_once(d, sp, out->err, sizeof(out->err))))
            goto fail;
        t = now_ns();
        out->ops++;
        out->bytes += sp->size;
        if (sp->lat)
            samples_add(&out->lat, t - t0);
        progress_tick((double)(t - t_start) / 1e9 / total);
    } while (t < t_end);
    out->seconds = (double)(t - t_rec) / 1e9;
    return 0;
fail:
    out->status = r;
    return r;
}

static int lib_run(struct driver *drv, const struct spec *sp, int n, const struct phase *ph,
                   struct outcome *out)
{
    struct lib_drv *d = drv->priv;
    if (d->thread_mode && n == 1 && sp[0].depth == 1)
        return run_sync(d, &sp[0], ph, &out[0]);

    struct flow *flows = calloc((size_t)n, sizeof(*flows));
    if (!flows)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        flows[i] = (struct flow){.d = d, .sp = sp[i], .out = &out[i]};
        flows[i].slots = calloc((size_t)sp[i].depth, sizeof(struct slot));
        if (!flows[i].slots) {
            out[i].status = -ENOMEM;
            for (int k = 0; k <= i; k++)
                free(flows[k].slots);
            free(flows);
            return -ENOMEM;
        }
    }
    double total = ph->warm_max_s + ph->dur_s;
    uint64_t t_start = now_ns();
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < sp[i].depth; k++) {
            struct slot *s = &flows[i].slots[k];
            s->f = &flows[i];
            pthread_mutex_lock(&d->mu);
            bool stop = flows[i].stop;
            if (!stop)
                flows[i].outstanding++;
            pthread_mutex_unlock(&d->mu);
            if (stop)
                break;
            int r = submit(s);
            if (r) {
                pthread_mutex_lock(&d->mu);
                flow_fail(&flows[i], r, rrpc_ctx_last_error(d->ctx));
                flows[i].outstanding--;
                pthread_mutex_unlock(&d->mu);
            }
        }
    }

    /* Warm-up: until every flow did warm_ops operations, or warm_max_s. */
    for (;;) {
        bool failed = false, warm = true, busy = false;
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < n; i++) {
            failed |= flows[i].out->status != 0;
            warm &= (long)flows[i].warm_done >= ph->warm_ops;
            busy |= flows[i].outstanding > 0;
        }
        pthread_mutex_unlock(&d->mu);
        if (failed || warm || (double)(now_ns() - t_start) / 1e9 >= ph->warm_max_s)
            break;
        pump(d, busy);
    }
    pthread_mutex_lock(&d->mu);
    uint64_t t_rec = now_ns();
    for (int i = 0; i < n; i++) {
        flows[i].measuring = true;
        flows[i].rec_start = t_rec;
    }
    pthread_mutex_unlock(&d->mu);

    uint64_t t_end = t_rec + (uint64_t)(ph->dur_s * 1e9);
    for (;;) {
        bool failed = false, busy = false;
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < n; i++) {
            failed |= flows[i].out->status != 0;
            busy |= flows[i].outstanding > 0;
        }
        pthread_mutex_unlock(&d->mu);
        uint64_t t = now_ns();
        if (failed || t >= t_end)
            break;
        progress_tick((double)(t - t_start) / 1e9 / total);
        pump(d, busy);
    }
    pthread_mutex_lock(&d->mu);
    uint64_t t_stop = now_ns();
    for (int i = 0; i < n; i++) {
        flows[i].measuring = false;
        flows[i].stop = true;
        flows[i].out->seconds = (double)(t_stop - t_rec) / 1e9;
    }
    pthread_mutex_unlock(&d->mu);

    /* Drain what is still in flight (its results are not counted). */
    uint64_t give_up = now_ns() + 60ull * 1000000000u;
    bool drained = false;
    while (!drained && now_ns() < give_up) {
        drained = true;
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < n; i++)
            drained &= flows[i].outstanding == 0;
        pthread_mutex_unlock(&d->mu);
        if (!drained)
            pump(d, true);
    }
    int rc = 0;
    for (int i = 0; i < n; i++)
        if (out[i].status)
            rc = out[i].status;
    if (!drained) {
        /* Operations still refer to the slots: leak them rather than crash. */
        for (int i = 0; i < n; i++)
            if (!out[i].status) {
                out[i].status = -ETIMEDOUT;
                snprintf(out[i].err, sizeof(out[i].err),
                         "operations still in flight 60 s after the end of the test");
            }
        return -ETIMEDOUT;
    }
    for (int i = 0; i < n; i++)
        free(flows[i].slots);
    free(flows);
    return rc;
}

/* The client contexts open now (the main one per transport, a variant's while it runs). */
static rrpc_ctx *clients[8];

static void client_track(rrpc_ctx *ctx, bool open)
{
    for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]); i++)
        if (clients[i] == (open ? NULL : ctx)) {
            clients[i] = open ? ctx : NULL;
            return;
        }
}

void lib_client_polls(uint64_t polls[2], uint64_t loop[2])
{
    polls[0] = polls[1] = loop[0] = loop[1] = 0;
    for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]); i++)
        if (clients[i])
            add_poll_stops(clients[i], polls, loop);
}

/* --stats: the context's metrics, as a scrape would see them. */
static void print_stats(const struct driver *drv, rrpc_ctx *ctx)
{
    size_t need = 0;
    rrpc_ctx_stats_text(ctx, NULL, 0, &need); /* sizes it: -ENOBUFS */
    char *text = malloc(need + 1);
    int r = text ? rrpc_ctx_stats_text(ctx, text, need + 1, &need) : -ENOMEM;
    if (r)
        fprintf(stderr, "rrpc-bench: %s client metrics: %s\n", drv->name, rrpc_strerror(r));
    else
        fprintf(stderr, "# rrpc-bench: metrics of the %s client context\n%s", drv->name, text);
    free(text);
}

static void lib_close(struct driver *drv)
{
    struct lib_drv *d = drv->priv;
    if (!d)
        return;
    if (g_opts.print_stats)
        print_stats(drv, d->ctx);
    client_track(d->ctx, false);
    rrpc_conn_close(d->conn);
    rrpc_ctx_destroy(d->ctx); /* frees the region */
    free(d->buf);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
    drv->priv = NULL;
}

static int lib_server_cpu(struct driver *drv, uint64_t *ret_ns, uint64_t polls[2])
{
    struct lib_drv *d = drv->priv;
    void *resp = NULL;
    size_t len = 0;
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_CONTROL, .deadline_ms = 5000};
    int r = rrpc_call_sync(d->conn, "cpu", NULL, 0, &o, &resp, &len);
    polls[0] = polls[1] = UINT64_MAX;
    if (r == 0 && (len == 8 || len == 24)) { /* 8: an older server, CPU time only */
        *ret_ns = get_le64(resp);
        if (len == 24) {
            polls[0] = get_le64((const uint8_t *)resp + 8);
            polls[1] = get_le64((const uint8_t *)resp + 16);
        }
    } else if (r == 0) {
        r = -EPROTO; /* an older bench server without "cpu" */
    }
    free(resp);
    return r;
}

int lib_driver_open(struct driver *drv, const char *name, const char *uri, bool thread_mode,
                    const char *env, char *err, size_t errlen)
{
    struct lib_drv *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->thread_mode = thread_mode;
    int r = lib_ctx_create(env, &d->ctx);
    if (r) {
        snprintf(err, errlen, "rrpc_ctx_create: %s", rrpc_strerror(r));
        free(d);
        return r;
    }
    drv->priv = d;
    client_track(d->ctx, true);
    if (thread_mode && (r = rrpc_ctx_start_thread(d->ctx))) {
        snprintf(err, errlen, "rrpc_ctx_start_thread: %s", rrpc_strerror(r));
        goto fail;
    }
    for (int i = 0; i < 50; i++) { /* the server may still be starting */
        r = rrpc_connect_sync(d->ctx, uri, 10000, NULL, NULL, &d->conn);
        if (r != -ECONNREFUSED)
            break;
        usleep(100000);
    }
    if (r) {
        snprintf(err, errlen, "connect %s: %s (%s): %s", uri, rrpc_strerror(r), rrpc_err_name(r),
                 rrpc_ctx_last_error(d->ctx));
        d->conn = NULL;
        goto fail;
    }
    d->buf = aligned_alloc(4096, BENCH_MAX_SIZE);
    if (!d->buf) {
        r = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < BENCH_MAX_SIZE; i++)
        d->buf[i] = (uint8_t)(i * 7);
    r = rrpc_mem_reg(d->ctx, d->buf, BENCH_MAX_SIZE, 0, &d->region);
    if (r) {
        snprintf(err, errlen, "rrpc_mem_reg: %s: %s", rrpc_strerror(r), rrpc_ctx_last_error(d->ctx));
        goto fail;
    }
    void *resp = NULL;
    size_t len = 0;
    r = rrpc_call_sync(d->conn, "token", NULL, 0, NULL, &resp, &len);
    if (r == 0)
        r = rrpc_token_decode(resp, len, &d->tok);
    free(resp);
    if (r) {
        snprintf(err, errlen, "getting the server's region token: %s: %s", rrpc_strerror(r),
                 rrpc_ctx_last_error(d->ctx));
        goto fail;
    }
    drv->name = name;
    drv->onesided = true;
    drv->qos = true;
    drv->run = lib_run;
    drv->close = lib_close;
    drv->server_cpu = lib_server_cpu;
    return 0;
fail:
    lib_close(drv);
    return r;
}

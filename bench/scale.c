/* SPDX-License-Identifier: MIT */
/*
 * rrpc-bench --tests scale: what a connection costs when there are thousands
 * (issue #27).  For each connection count N (1, 10, 100, 1,000, 10,000; verbs
 * up to 1,000) one client context in this process grows its connections to
 * the server's scale listener up to N, then:
 *
 *   connect   the new connections of the step, 32 in flight: wall time and
 *             connections per second;
 *   idle      one 64 B echo on each new connection (the default class, as an
 *             RPC-only client), then the connections idle for --scale-idle-ms
 *             (the contexts' keepalive interval is 1 s: the core trims an idle
 *             connection's buffers after it); then the growth over the
 *             baseline of RSS, VmPin and open fds, per connection, here and in
 *             the server process (its "mem" method);
 *   calls     64 B echo calls, one in flight on every connection, for the
 *             test duration: calls per second with all N active.
 *
 * The connections stay up from one step to the next (no port is spent
 * twice).  When a limit stops it (ulimit -n, ulimit -l, ephemeral ports, the
 * server's limits) the step measures what it reached and says where it
 * stopped and why; larger steps are not tried.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#include "bench.h"

#define SCALE_WINDOW 32         /* connects in flight */
#define SCALE_CONNECT_MS 30000  /* per connection */
#define SCALE_PAYLOAD 64

/* ---- this process ---------------------------------------------------------------- */

void bench_self_mem(long *ret_rss_kib, long *ret_pin_kib, long *ret_fds)
{
    long pages = 0, rss = -1, pin = -1, fds = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) == 2)
            rss *= sysconf(_SC_PAGESIZE) / 1024;
        else
            rss = -1;
        fclose(f);
    }
    char line[256];
    f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmPin: %ld", &pin) == 1)
            break;
    if (f)
        fclose(f);
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            fds += e->d_name[0] != '.';
        fds--; /* the directory's own fd */
        closedir(d);
    }
    *ret_rss_kib = rss;
    *ret_pin_kib = pin;
    *ret_fds = fds;
}

static long lim(rlim_t v)
{
    return v == RLIM_INFINITY ? -1 : (long)v;
}

void bench_raise_limit(int resource, long *ret_soft, long *ret_hard)
{
    struct rlimit rl;
    int res = resource < 0 ? RLIMIT_NOFILE : resource;
    *ret_soft = *ret_hard = -2;
    if (getrlimit(res, &rl) < 0)
        return;
    if (resource >= 0 && rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(res, &rl);
        getrlimit(res, &rl);
    }
    *ret_soft = lim(rl.rlim_cur);
    *ret_hard = lim(rl.rlim_max);
}

static void fmt_lim(char *buf, size_t len, long v, bool kib)
{
    if (v == -1)
        snprintf(buf, len, "unlimited");
    else if (kib)
        snprintf(buf, len, "%ld KiB", v / 1024);
    else
        snprintf(buf, len, "%ld", v);
}

/* ---- the client's connections and calls ----------------------------------------------- */

enum { SC_PENDING, SC_UP, SC_DOWN };

struct scale;
struct sconn {
    rrpc_conn *c;
    struct scale *s;
    int state; /* under s->mu */
};

struct scale {
    rrpc_ctx *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;     /* connects in flight */
    uint64_t last_up; /* when the last connection came up */
    long failed;     /* connects that failed */
    long lost;       /* connections that went down after UP */
    char why[300];   /* the first failure, in words */
    int why_code;
    long inflight;   /* calls in flight */
    long call_errs;
    char call_why[300];
    atomic_bool stop, measuring;
    atomic_ulong ops;
    uint8_t payload[SCALE_PAYLOAD];
};

static void sc_fail(struct scale *s, char *buf, size_t len, int code, const char *what)
{
    if (buf[0])
        return;
    s->why_code = code;
    snprintf(buf, len, "%s: %s (%s): %s", what, rrpc_strerror(code), rrpc_err_name(code),
             rrpc_ctx_last_error(s->ctx));
}

static void conn_event(rrpc_conn *conn, rrpc_conn_event ev, int reason, void *user)
{
    (void)conn;
    struct sconn *sc = user;
    struct scale *s = sc->s;
    pthread_mutex_lock(&s->mu);
    if (ev == RRPC_CONN_UP && sc->state == SC_PENDING) {
        sc->state = SC_UP;
        s->pending--;
        s->last_up = now_ns();
    } else if (ev == RRPC_CONN_DOWN && sc->state != SC_DOWN) {
        if (sc->state == SC_PENDING) {
            s->pending--;
            s->failed++;
            sc_fail(s, s->why, sizeof(s->why), reason, "connect");
        } else {
            s->lost++;
            sc_fail(s, s->why, sizeof(s->why), reason, "an idle connection went down");
        }
        sc->state = SC_DOWN;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void call_done(const rrpc_result *res, void *user)
{
    struct sconn *sc = user;
    struct scale *s = sc->s;
    int st = res->status;
    if (st == 0 && atomic_load(&s->measuring))
        atomic_fetch_add(&s->ops, 1);
    if (st == 0 && !atomic_load(&s->stop)) {
        st = rrpc_call(sc->c, "echo", s->payload, sizeof(s->payload), NULL, call_done, sc);
        if (st == 0)
            return;
    }
    pthread_mutex_lock(&s->mu);
    if (st) {
        s->call_errs++;
        if (!s->call_why[0])
            snprintf(s->call_why, sizeof(s->call_why), "echo: %s (%s): %s", rrpc_strerror(st),
                     rrpc_err_name(st), res->message && *res->message ? res->message
                                                                     : rrpc_ctx_last_error(s->ctx));
    }
    s->inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

enum wait_for { W_WINDOW, W_CONNECTED, W_DRAINED };

static bool wait_holds(const struct scale *s, enum wait_for w)
{
    switch (w) {
    case W_WINDOW:
        return s->pending < SCALE_WINDOW || s->failed;
    case W_CONNECTED:
        return s->pending == 0;
    case W_DRAINED:
        return s->inflight == 0;
    }
    return true;
}

/* Waits (holding s->mu) until @w holds or @secs passed; false: timed out. */
static bool wait_until(struct scale *s, enum wait_for w, double secs)
{
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
    while (!wait_holds(s, w)) {
        if (now_ns() >= end)
            return false;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    return true;
}

/* Calls on the connections [0, n) that are up: each one call in flight until
 * s->stop; with @dur > 0 the calls go on for @dur s and *ret_ops / *ret_s get
 * what completed in that window (after a warm-up of up to 0.2 s). */
static int calls(struct scale *s, struct sconn *cs, long n, double dur, uint64_t *ret_ops,
                 double *ret_s)
{
    atomic_store(&s->stop, dur <= 0);
    atomic_store(&s->measuring, false);
    atomic_store(&s->ops, 0);
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&s->mu);
        bool up = cs[i].state == SC_UP;
        if (up)
            s->inflight++;
        pthread_mutex_unlock(&s->mu);
        if (!up)
            continue;
        int r = rrpc_call(cs[i].c, "echo", s->payload, sizeof(s->payload), NULL, call_done, &cs[i]);
        if (r) {
            pthread_mutex_lock(&s->mu);
            s->inflight--;
            s->call_errs++;
            sc_fail(s, s->call_why, sizeof(s->call_why), r, "echo");
            pthread_mutex_unlock(&s->mu);
        }
    }
    if (dur > 0) {
        double warm = dur < 0.2 ? dur : 0.2;
        usleep((useconds_t)(warm * 1e6));
        atomic_store(&s->measuring, true);
        uint64_t t0 = now_ns();
        usleep((useconds_t)(dur * 1e6));
        *ret_ops = atomic_load(&s->ops);
        *ret_s = (double)(now_ns() - t0) / 1e9;
        atomic_store(&s->measuring, false);
        atomic_store(&s->stop, true);
    }
    pthread_mutex_lock(&s->mu);
    bool drained = wait_until(s, W_DRAINED, 60);
    long errs = s->call_errs;
    pthread_mutex_unlock(&s->mu);
    if (!drained) {
        pthread_mutex_lock(&s->mu);
        if (!s->call_why[0])
            snprintf(s->call_why, sizeof(s->call_why), "%ld calls still in flight after 60 s",
                     s->inflight);
        pthread_mutex_unlock(&s->mu);
        return -ETIMEDOUT;
    }
    return errs ? -EIO : 0;
}

/* ---- one transport --------------------------------------------------------------------- */

struct side_mem {
    bool ok;
    long rss, pin, fds, conns, nofile;
};

static void server_mem(rrpc_conn *ctl, struct side_mem *m)
{
    memset(m, 0, sizeof(*m));
    void *out = NULL;
    size_t n = 0;
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_CONTROL, .deadline_ms = 30000};
    if (ctl && rrpc_call_sync(ctl, "mem", NULL, 0, &o, &out, &n) == 0) {
        char buf[160];
        snprintf(buf, sizeof(buf), "%.*s", (int)n, (const char *)out);
        m->ok = sscanf(buf, "%ld %ld %ld %ld %ld", &m->rss, &m->pin, &m->fds, &m->conns,
                       &m->nofile) == 5;
    }
    free(out);
}

/* Spare fds, given back while this process reads its own /proc entries: at
 * the fd limit, where a step stops, it could not open them otherwise. */
static int spare_fds[3] = {-1, -1, -1};

static void spares(bool hold)
{
    for (size_t i = 0; i < sizeof(spare_fds) / sizeof(spare_fds[0]); i++) {
        if (hold && spare_fds[i] < 0)
            spare_fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        else if (!hold && spare_fds[i] >= 0) {
            close(spare_fds[i]);
            spare_fds[i] = -1;
        }
    }
}

static void self_mem(struct side_mem *m)
{
    spares(false);
    bench_self_mem(&m->rss, &m->pin, &m->fds);
    spares(true);
    m->ok = m->rss >= 0 && m->fds >= 0;
}

static void side_fill(struct scale_side *d, const struct side_mem *a, const struct side_mem *b,
                      long conns)
{
    memset(d, 0, sizeof(*d));
    d->known = a->ok && b->ok && conns > 0;
    if (!d->known)
        return;
    d->rss_total_kib = b->rss - a->rss;
    d->pin_total_kib = b->pin >= 0 && a->pin >= 0 ? b->pin - a->pin : 0;
    d->fds_total = b->fds - a->fds;
    d->conns_seen = b->conns - a->conns;
    d->rss_kib = (double)d->rss_total_kib / (double)conns;
    d->pin_kib = (double)d->pin_total_kib / (double)conns;
    d->fds = (double)d->fds_total / (double)conns;
}

/* What limit a connect failure with @code most likely met, in words. */
static void hint(char *buf, size_t len, int code, const struct side_mem *srv, bool verbs)
{
    long soft, hard;
    size_t n = strlen(buf);
    if (code == -EMFILE || code == -ENFILE) {
        bench_raise_limit(-1, &soft, &hard);
        snprintf(buf + n, len - n, " [client ulimit -n %ld (hard %ld): raise the hard limit]", soft,
                 hard);
    } else if (code == -EADDRNOTAVAIL) {
        char range[64] = "?";
        FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
        if (f) {
            if (!fgets(range, sizeof(range), f))
                snprintf(range, sizeof(range), "?");
            range[strcspn(range, "\n")] = 0;
            fclose(f);
        }
        snprintf(buf + n, len - n, " [out of ephemeral ports: net.ipv4.ip_local_port_range %s; "
                                    "sockets in TIME_WAIT from earlier runs count]", range);
    } else if (code == -ENOMEM || verbs) {
        struct rlimit rl;
        getrlimit(RLIMIT_MEMLOCK, &rl);
        char l[32];
        fmt_lim(l, sizeof(l), lim(rl.rlim_cur), true);
        long rss, pin, fds;
        bench_self_mem(&rss, &pin, &fds);
        snprintf(buf + n, len - n, " [client locked-memory limit (ulimit -l) %s, VmPin %ld KiB; "
                                    "RSS %ld KiB]", l, pin, rss);
    } else if (srv && srv->ok && srv->nofile > 0 && srv->fds >= srv->nofile - 16) {
        snprintf(buf + n, len - n, " [the server holds %ld fds of its ulimit -n %ld]", srv->fds,
                 srv->nofile);
    }
}

static void default_steps(const char *transport, long *ns, int *nn)
{
    static const long def[] = {1, 10, 100, 1000, 10000};
    *nn = 0;
    if (g_opts.scale_nn) {
        memcpy(ns, g_opts.scale_n, sizeof(long) * (size_t)g_opts.scale_nn);
        *nn = g_opts.scale_nn;
        return;
    }
    for (size_t i = 0; i < sizeof(def) / sizeof(def[0]); i++)
        if (strcmp(transport, "verbs") || def[i] <= BENCH_SCALE_VERBS_MAX)
            ns[(*nn)++] = def[i];
}

static struct result *scale_row(const char *transport, long asked)
{
    struct result *r = result_add(transport, "scale", SCALE_PAYLOAD, (int)asked, NULL);
    r->scale = calloc(1, sizeof(*r->scale));
    if (!r->scale) {
        snprintf(r->error, sizeof(r->error), "out of memory");
        return r;
    }
    r->scale->asked = asked;
    return r;
}

void scale_run(const char *transport, const char *uri)
{
    bool inproc = strcmp(transport, "inproc") == 0;
    long ns[BENCH_SCALE_MAX_STEPS];
    int nn;
    default_steps(transport, ns, &nn);
    long maxn = ns[nn - 1];

    long fsoft, fhard, lsoft, lhard;
    bench_raise_limit(RLIMIT_NOFILE, &fsoft, &fhard);
    spares(true);
    bench_raise_limit(RLIMIT_MEMLOCK, &lsoft, &lhard);
    char l_n[32], l_l[32], limits[160];
    fmt_lim(l_n, sizeof(l_n), fsoft, false);
    fmt_lim(l_l, sizeof(l_l), lsoft, true);
    snprintf(limits, sizeof(limits), "client ulimit -n %s, -l %s", l_n, l_l);

    struct scale *s = calloc(1, sizeof(*s));
    struct sconn *cs = calloc((size_t)maxn, sizeof(*cs));
    char err[400] = "", uri_buf[300];
    rrpc_conn *ctl = NULL;
    bool own_server = false;
    if (!s || !cs) {
        snprintf(err, sizeof(err), "out of memory for %ld connections", maxn);
        goto setup_failed;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    memset(s->payload, 0x3c, sizeof(s->payload));
    if (inproc) {
        /* The server context in this process: both sides' figures are one process's. */
        int tp;
        snprintf(uri_buf, sizeof(uri_buf), "inproc://rrpc-bench-scale-%d", (int)getpid());
        if (lib_server_start(uri_buf, NULL, BENCH_SCALE_SERVER_ENV, &tp, NULL, NULL, 0, err,
                             sizeof(err)))
            goto setup_failed;
        own_server = true;
        uri = uri_buf;
    }
    if (!uri) {
        snprintf(err, sizeof(err), "the server has no scale listener for %s (an older rrpc-bench "
                                   "server?)", transport);
        goto setup_failed;
    }
    int r = lib_ctx_create(BENCH_SCALE_SERVER_ENV, &s->ctx);
    if (r == 0)
        r = rrpc_ctx_start_thread(s->ctx);
    if (r) {
        snprintf(err, sizeof(err), "client context: %s", rrpc_strerror(r));
        goto setup_failed;
    }
    progress_begin("%-7s scale          control connection to %s", transport, uri);
    r = rrpc_connect_sync(s->ctx, uri, SCALE_CONNECT_MS, NULL, NULL, &ctl);
    progress_end(r ? "FAILED" : "up");
    if (r) {
        snprintf(err, sizeof(err), "connect %s: %s (%s): %s", uri, rrpc_strerror(r),
                 rrpc_err_name(r), rrpc_ctx_last_error(s->ctx));
        ctl = NULL;
        goto setup_failed;
    }

    struct side_mem c0 = {0}, s0 = {0}, c1 = {0}, s1 = {0};
    self_mem(&c0);
    if (!inproc)
        server_mem(ctl, &s0);
    if (!inproc && !s0.ok)
        note("%s scale: the server does not answer \"mem\" (an older rrpc-bench server?): its "
             "figures are unknown", transport);
    if (s0.ok) {
        char sn[32];
        fmt_lim(sn, sizeof(sn), s0.nofile, false);
        snprintf(limits + strlen(limits), sizeof(limits) - strlen(limits), "; server ulimit -n %s",
                 sn);
    }
    long have = 0;
    bool stopped = false;
    for (int step = 0; step < nn && !stopped; step++) {
        long n = ns[step];
        struct result *res = scale_row(transport, n);
        struct scale_point *pt = res->scale;
        if (!pt)
            break;
        snprintf(pt->limits, sizeof(pt->limits), "%s", limits);
        pt->one_process = inproc;
        char variant[160];
        snprintf(variant, sizeof(variant), "%ld connections, echo %d B, %s", n, SCALE_PAYLOAD,
                 inproc ? "server in this process" : "server in its own process");
        snprintf(res->variant, sizeof(res->variant), "%s", variant);

        /* connect: up to n, SCALE_WINDOW in flight */
        progress_begin("%-7s scale %6ld    connecting %ld more", transport, n, n - have);
        uint64_t t0 = now_ns();
        long issued = have;
        pthread_mutex_lock(&s->mu);
        s->failed = s->lost = 0;
        s->why[0] = 0;
        while (issued < n && !s->failed && !s->lost) {
            if (s->pending >= SCALE_WINDOW) {
                wait_until(s, W_WINDOW, 1);
                continue;
            }
            struct sconn *sc = &cs[issued];
            sc->s = s;
            sc->state = SC_PENDING;
            s->pending++;
            pthread_mutex_unlock(&s->mu);
            r = rrpc_connect(s->ctx, uri, conn_event, sc, &sc->c);
            pthread_mutex_lock(&s->mu);
            if (r) {
                s->pending--;
                s->failed++;
                sc->state = SC_DOWN;
                sc->c = NULL;
                sc_fail(s, s->why, sizeof(s->why), r, "connect");
            }
            issued++;
            if (!r)
                progress_tick((double)(issued - have) / (double)(n - have));
        }
        bool settled = wait_until(s, W_CONNECTED, SCALE_CONNECT_MS / 1000.0 + 5);
        uint64_t t1 = now_ns();
        long up = 0;
        for (long i = 0; i < issued; i++)
            up += cs[i].state == SC_UP;
        if (!settled && !s->why[0])
            snprintf(s->why, sizeof(s->why), "%d connects still pending after %d s", s->pending,
                     SCALE_CONNECT_MS / 1000 + 5);
        char why[300];
        snprintf(why, sizeof(why), "%s", s->why);
        int why_code = s->why_code;
        uint64_t last_up = s->last_up;
        pthread_mutex_unlock(&s->mu);
        pt->connects = issued - have;
        /* to the last connection up: connects a limit stopped may hang until their timeout */
        if (up > have && last_up > t0)
            t1 = last_up;
        pt->connect_s = (double)(t1 - t0) / 1e9;
        pt->connects_per_s = pt->connect_s > 0 ? (double)(up - have) / pt->connect_s : 0;
        pt->conns = up;
        progress_end(up == n ? "up" : "STOPPED");
        if (up < n || why[0]) {
            stopped = true;
            struct side_mem sm;
            server_mem(ctl, &sm);
            snprintf(pt->stopped, sizeof(pt->stopped), "stopped at %ld of %ld connections: %s", up,
                     n, why[0] ? why : "no reason given");
            hint(pt->stopped, sizeof(pt->stopped), why_code, &sm, strcmp(transport, "verbs") == 0);
            note("%s scale: %s", transport, pt->stopped);
        }
        if (up == 0) {
            snprintf(res->error, sizeof(res->error), "%s", pt->stopped);
            break;
        }

        /* idle: one call on each new connection, then quiet */
        progress_begin("%-7s scale %6ld    one call each, %ld ms idle", transport, up,
                       g_opts.scale_idle_ms);
        uint64_t ops = 0;
        double secs = 0;
        int cr = calls(s, cs + have, issued - have, 0, NULL, NULL);
        usleep((useconds_t)g_opts.scale_idle_ms * 1000);
        self_mem(&c1);
        if (!inproc)
            server_mem(ctl, &s1);
        side_fill(&pt->cli, &c0, &c1, up);
        if (!inproc)
            side_fill(&pt->srv, &s0, &s1, up);
        progress_end(cr ? "FAILED" : "done");

        /* calls with all of them active */
        if (cr == 0) {
            progress_begin("%-7s scale %6ld    echo on every connection, %.1f s", transport, up,
                           g_opts.duration);
            cr = calls(s, cs, issued, g_opts.duration, &ops, &secs);
            progress_end(cr ? "FAILED" : "done");
            pt->calls_s = secs;
            pt->calls_per_s = secs > 0 ? (double)ops / secs : 0;
            res->ops = ops;
            res->seconds = secs;
            res->ops_per_s = pt->calls_per_s;
        }
        if (cr) {
            pthread_mutex_lock(&s->mu);
            snprintf(res->error, sizeof(res->error), "%ld connections up, calls failed: %s", up,
                     s->call_why[0] ? s->call_why : rrpc_strerror(cr));
            pthread_mutex_unlock(&s->mu);
            note("%s scale %ld: %s", transport, n, res->error);
            stopped = true;
        }
        have = issued;
    }
    progress_begin("%-7s scale          closing %ld connections", transport, have);
    for (long i = 0; i < have; i++)
        rrpc_conn_close(cs[i].c);
    rrpc_conn_close(ctl);
    rrpc_ctx_destroy(s->ctx);
    progress_end("done");
    goto done;

setup_failed: {
    struct result *res = scale_row(transport, ns[0]);
    snprintf(res->error, sizeof(res->error), "%s", err);
    note("%s scale: %s", transport, err);
    rrpc_conn_close(ctl);
    if (s && s->ctx)
        rrpc_ctx_destroy(s->ctx);
}
done:
    spares(false);
    if (own_server)
        lib_server_stop();
    if (s) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
    }
    free(s);
    free(cs);
}

/* SPDX-License-Identifier: MIT */
/*
 * link_flap: the program half of tests/softroce/link-flap.sh (public API only).
 *
 *   link_flap -d DOWN_CMD -u UP_CMD [-s SERVER_ADDR] [-c CLIENT_SRC] [-o OUTAGE_MS]
 *             [-t CALL_DEADLINE_MS] [-r RECONNECT_S] [-x rdma|tcp]
 *
 * One process, two contexts, as dscp_traffic: a server on
 * rdma://SERVER_ADDR:0 (default 10.77.0.2) and a client connected to it with
 * ?src=CLIENT_SRC (default 10.77.0.1), so that in the Soft-RoCE VM every
 * packet crosses the veth.  Keepalives come from the environment
 * (RRPC_KEEPALIVE_MS; the script sets 200).  Then:
 *   1. 20 echo calls on the connection: all must succeed;
 *   2. system(DOWN_CMD) (the script: ip link set va down), then echo calls
 *      in a loop, each with a CALL_DEADLINE_MS (300) deadline, for
 *      OUTAGE_MS / 2; every call must end with a clean error
 *      (RRPC_E_CONN_LOST, RRPC_E_DEADLINE or, once the connection is down,
 *      RRPC_E_CLOSED) within its deadline plus 1 s of slack;
 *   2b. right after the down, a second client context (with a live connection
 *      made before the outage) is destroyed: rrpc_ctx_destroy must return in
 *      bounded time (the verbs reaper waits 2 s for the cm_ids, whose DREQ
 *      waits for the port, then leaves them to a background thread and says
 *      so in a warning, which over rdma must come);
 *   3. a new connect during the outage (timeout 800 ms): must fail, in bounded time;
 *   4. at OUTAGE_MS after the down, system(UP_CMD), which returns once the
 *      link is up (the script's DOWN_CMD schedules `ip link set va up` from
 *      outside this process, so that a stalled library cannot keep it down);
 *   5. new connections are tried (timeout 3 s each) until one comes up, for at
 *      most RECONNECT_S (30) seconds; 20 echo calls on it must succeed;
 *   6. the old connection: it must have gone DOWN (keepalive timeout or QP
 *      error) or, if it survived, calls on it must still end within bounds;
 *   7. everything is closed and both contexts destroyed.
 * A watchdog thread prints "# STALL: ..." with the kernel stack of every
 * thread of the process when the main thread makes no progress for 3 s.
 * stdout: "ok - ..." / "not ok - ..." per check and "# ..." observations
 * (errors seen, timings); the script counts them.  Exit 0 when every check
 * passed, 1 otherwise, 2 on bad arguments.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

static int npass, nfail;

static void check(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", cond ? "ok" : "not ok");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (cond)
        npass++;
    else
        nfail++;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double t_down; /* when DOWN_CMD ran */

/* Watchdog: the main thread stamps its progress; when a step takes more than
 * STALL_MS the watchdog prints what every thread of the process is blocked
 * in (kernel stack, readable as root in the VM), once per stall. */
#define STALL_MS 3000.0
static _Atomic double stamp;
static const char *_Atomic step = "start";
static atomic_int done;

static void progress(const char *what)
{
    atomic_store(&step, what);
    atomic_store(&stamp, now_ms());
}

static void dump_threads(void)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd),
             "for t in /proc/%d/task/*; do echo \"#   thread ${t##*/} ($(cat $t/comm)): "
             "$(tr '\\n' ' ' < $t/stack 2>/dev/null)\"; done",
             (int)getpid());
    fflush(stdout);
    if (system(cmd) != 0)
        printf("#   (could not read the threads' stacks)\n");
}

static void *watchdog(void *arg)
{
    (void)arg;
    double reported = -1;
    while (!atomic_load(&done)) {
        usleep(250000);
        double s0 = atomic_load(&stamp), t = now_ms();
        if (t - s0 > STALL_MS && s0 != reported) {
            reported = s0;
            printf("# STALL: the main thread has been in '%s' for %.0f ms (t=%.0f ms); "
                   "kernel stacks:\n", atomic_load(&step), t - s0, t_down > 0 ? t - t_down : 0.0);
            dump_threads();
        }
    }
    return NULL;
}

/* Client-side events of the first connection. */
static atomic_int reaper_warned; /* the second client context's warning came */

static void c2_log(int level, const char *msg, void *user)
{
    (void)level, (void)user;
    printf("# second client context: %s\n", msg);
    if (strstr(msg, "still being destroyed"))
        atomic_store(&reaper_warned, 1);
}

static atomic_int old_down;       /* 1 once DOWN came */
static atomic_int old_reason;
static _Atomic double old_down_at; /* ms after t_down */

/* Server-side events. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int srv_up, srv_down;
static char srv_reasons[512];

static void on_server_conn(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)c, (void)user;
    pthread_mutex_lock(&mu);
    if (ev == RRPC_CONN_UP) {
        srv_up++;
    } else {
        srv_down++;
        size_t l = strlen(srv_reasons);
        if (l < sizeof(srv_reasons) - 64)
            snprintf(srv_reasons + l, sizeof(srv_reasons) - l, " %s@%.0fms", rrpc_err_name(reason),
                     t_down > 0 ? now_ms() - t_down : 0.0);
    }
    pthread_mutex_unlock(&mu);
}

static void on_old_conn(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)c, (void)user;
    if (ev == RRPC_CONN_DOWN && !atomic_load(&old_down)) {
        atomic_store(&old_reason, reason);
        atomic_store(&old_down_at, t_down > 0 ? now_ms() - t_down : -1.0);
        atomic_store(&old_down, 1);
    }
}

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

/* @n echo calls on @c; returns how many succeeded, the worst latency in *worst. */
static int echo_burst(rrpc_conn *c, int n, int deadline_ms, double *worst, int *last_err)
{
    int okc = 0;
    *worst = 0;
    *last_err = 0;
    for (int i = 0; i < n; i++) {
        char req[48];
        int len = snprintf(req, sizeof(req), "link-flap %d", i);
        rrpc_call_opts co = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = deadline_ms};
        void *resp = NULL;
        size_t rlen = 0;
        double t0 = now_ms();
        int r = rrpc_call_sync(c, "echo", req, (size_t)len, &co, &resp, &rlen);
        double dt = now_ms() - t0;
        if (dt > *worst)
            *worst = dt;
        if (r == 0 && rlen == (size_t)len && memcmp(resp, req, rlen) == 0)
            okc++;
        else if (r)
            *last_err = r;
        free(resp);
    }
    return okc;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static void sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    const char *saddr = "10.77.0.2", *csrc = "10.77.0.1", *scheme = "rdma";
    const char *down_cmd = NULL, *up_cmd = NULL;
    int outage = 4000, dl = 300, reconnect_s = 30, opt, r;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while ((opt = getopt(argc, argv, "d:u:s:c:o:t:r:x:")) != -1) {
        int bad = 0;
        switch (opt) {
        case 'd': down_cmd = optarg; break;
        case 'u': up_cmd = optarg; break;
        case 's': saddr = optarg; break;
        case 'c': csrc = optarg; break;
        case 'o': bad = parse_int(optarg, 200, 600000, &outage); break;
        case 't': bad = parse_int(optarg, 10, 60000, &dl); break;
        case 'r': bad = parse_int(optarg, 1, 3600, &reconnect_s); break;
        case 'x': scheme = optarg; bad = strcmp(scheme, "rdma") && strcmp(scheme, "tcp"); break;
        default: bad = 1;
        }
        if (bad) {
            fprintf(stderr, "usage: link_flap -d DOWN_CMD -u UP_CMD [-s SERVER_ADDR] [-c CLIENT_SRC] "
                            "[-o OUTAGE_MS] [-t CALL_DEADLINE_MS] [-r RECONNECT_S] [-x rdma|tcp]\n");
            return 2;
        }
    }
    if (!down_cmd || !up_cmd || optind != argc) {
        fprintf(stderr, "link_flap: -d DOWN_CMD and -u UP_CMD are required\n");
        return 2;
    }

    pthread_t wd;
    progress("setup");
    pthread_create(&wd, NULL, watchdog, NULL);
    rrpc_ctx *sctx = NULL, *cctx = NULL;
    if ((r = rrpc_ctx_create(&sctx)) || (r = rrpc_ctx_create(&cctx))) {
        printf("not ok - create contexts: %s\n", rrpc_err_name(r));
        return 1;
    }
    rrpc_listener *lis = NULL;
    char uri[300];
    snprintf(uri, sizeof(uri), "%s://%s:0", scheme, saddr);
    if ((r = rrpc_register(sctx, "echo", h_echo, NULL)) ||
        (r = rrpc_listen(sctx, uri, on_server_conn, NULL, &lis)) ||
        (r = rrpc_ctx_start_thread(sctx)) || (r = rrpc_ctx_start_thread(cctx))) {
        printf("not ok - server on %s: %s (%s)\n", uri, rrpc_err_name(r), rrpc_ctx_last_error(sctx));
        return 1;
    }
    int port = rrpc_listener_port(lis);
    snprintf(uri, sizeof(uri), "%s://%s:%d?src=%s", scheme, saddr, port, csrc);
    printf("# server %s://%s:%d, client %s, keepalive RRPC_KEEPALIVE_MS=%s, call deadline %d ms, "
           "outage %d ms\n", scheme, saddr, port, uri, getenv("RRPC_KEEPALIVE_MS") ?
           getenv("RRPC_KEEPALIVE_MS") : "(default)", dl, outage);

    /* 1. Before the outage. */
    rrpc_conn *old = NULL;
    double t0 = now_ms();
    r = rrpc_connect_sync(cctx, uri, 30000, on_old_conn, NULL, &old);
    check(r == 0, "connect before the outage (%.0f ms)%s%s", now_ms() - t0, r ? ": " : "",
          r ? rrpc_ctx_last_error(cctx) : "");
    if (r)
        return 1;
    printf("# transport %s\n", rrpc_conn_transport(old));
    double worst;
    int err;
    progress("calls before the outage");
    int n = echo_burst(old, 20, 5000, &worst, &err);
    check(n == 20, "20 echo calls before the outage: %d succeeded (slowest %.1f ms)%s%s", n, worst,
          err ? ", error " : "", err ? rrpc_err_name(err) : "");

    rrpc_ctx *c2ctx = NULL;
    rrpc_conn *c2 = NULL;
    if ((r = rrpc_ctx_create(&c2ctx)) || (r = rrpc_ctx_start_thread(c2ctx)) ||
        (rrpc_ctx_set_log(c2ctx, 4 /* LOG_WARNING */, c2_log, NULL),
         r = rrpc_connect_sync(c2ctx, uri, 30000, NULL, NULL, &c2))) {
        printf("not ok - a second client context: %s\n", rrpc_err_name(r));
        return 1;
    }
    n = echo_burst(c2, 1, 5000, &worst, &err);
    check(n == 1, "a second client context's connection answers before the outage");

    /* 2. Link down; calls during the outage. */
    progress("link down command");
    t_down = now_ms();
    int src = system(down_cmd);

    /* 2b. A context destroyed while the link is down. */
    progress("destroying a context during the outage");
    t0 = now_ms();
    rrpc_ctx_destroy(c2ctx);
    double dt2 = now_ms() - t0;
    check(dt2 <= 2000 + 1500.0,
          "a context destroyed while the link is down returns in bounded time (%.0f ms, "
          "bound 2 s + 1.5 s)", dt2);
    if (strcmp(scheme, "rdma") == 0)
        check(atomic_load(&reaper_warned),
              "its cm_ids were left to the background reaper, with a warning");
    progress("calls during the outage");
    printf("# t=0: '%s' -> %d\n", down_cmd, src);
    int calls = 0, succ = 0, lost = 0, dead = 0, closed = 0, other = 0, other_code = 0;
    double worst_call = 0, first_err_at = -1;
    int first_err = 0;
    /* At least 3 calls: under TCG the down command alone can take a second. */
    while ((calls < 3 || now_ms() - t_down < outage / 2.0) && now_ms() - t_down < 2.0 * outage) {
        char req[32];
        int len = snprintf(req, sizeof(req), "outage %d", calls);
        rrpc_call_opts co = {.qos_class = RRPC_CLASS_LOW_LATENCY, .deadline_ms = dl};
        void *resp = NULL;
        size_t rlen;
        double c0 = now_ms();
        r = rrpc_call_sync(old, "echo", req, (size_t)len, &co, &resp, &rlen);
        double dt = now_ms() - c0;
        progress("calls during the outage");
        free(resp);
        calls++;
        if (dt > dl + 1000.0)
            printf("# call %d took %.0f ms (t=%.0f..%.0f ms), ended with %s\n", calls, dt,
                   c0 - t_down, c0 + dt - t_down, rrpc_err_name(r));
        if (dt > worst_call)
            worst_call = dt;
        if (r && first_err_at < 0) {
            first_err_at = now_ms() - t_down;
            first_err = r;
        }
        if (r == 0)
            succ++;
        else if (r == RRPC_E_CONN_LOST)
            lost++;
        else if (r == RRPC_E_DEADLINE)
            dead++;
        else if (r == RRPC_E_CLOSED)
            closed++;
        else
            other++, other_code = r;
        if (r)
            sleep_ms(20); /* a dead connection fails at once: do not spin */
    }
    printf("# outage calls: %d made by t=%.0f ms: %d succeeded, %d RRPC_E_DEADLINE, %d RRPC_E_CONN_LOST, "
           "%d RRPC_E_CLOSED, %d other%s%s; slowest %.0f ms\n", calls, now_ms() - t_down, succ, dead, lost,
           closed, other, other ? " e.g. " : "", other ? rrpc_err_name(other_code) : "", worst_call);
    if (first_err_at >= 0)
        printf("# first failed call ended at t=%.0f ms with %s\n", first_err_at, rrpc_err_name(first_err));
    check(calls > 0 && succ < calls, "calls fail while the link is down (%d of %d failed)",
          calls - succ, calls);
    check(other == 0, "every failed call ended with RRPC_E_DEADLINE, RRPC_E_CONN_LOST or RRPC_E_CLOSED%s%s",
          other ? "; also " : "", other ? rrpc_err_name(other_code) : "");
    check(worst_call <= dl + 1000.0, "no call hung: slowest %.0f ms (deadline %d ms + 1 s slack)",
          worst_call, dl);

    /* 3. A connect during the outage fails in bounded time. */
    rrpc_conn *during = NULL;
    progress("connect during the outage");
    t0 = now_ms();
    r = rrpc_connect_sync(cctx, uri, 800, NULL, NULL, &during);
    double ct = now_ms() - t0;
    printf("# connect during the outage (t=%.0f ms): %s after %.0f ms%s%s\n", t0 - t_down,
           r ? rrpc_err_name(r) : "success", ct, r ? ": " : "", r ? rrpc_ctx_last_error(cctx) : "");
    check(r != 0 && ct <= 800 + 2500.0,
          "a connect during the outage fails within its timeout + 2.5 s (%s, %.0f ms)",
          r ? rrpc_err_name(r) : "it succeeded", ct);
    if (!r)
        rrpc_conn_close(during);

    /* 4. Link up: UP_CMD returns once the link is up (the script brings it up
     * OUTAGE_MS after the down, from outside this process, so that a stalled
     * library cannot keep it down). */
    sleep_ms(outage - (now_ms() - t_down));
    progress("link up command");
    src = system(up_cmd);
    double t_up = now_ms();
    printf("# t=%.0f ms: '%s' -> %d\n", t_up - t_down, up_cmd, src);
    progress("reconnect");

    /* 5. A new connection. */
    rrpc_conn *fresh = NULL;
    int tries = 0;
    r = -1;
    while (now_ms() - t_up < reconnect_s * 1000.0) {
        tries++;
        progress("reconnect");
        t0 = now_ms();
        r = rrpc_connect_sync(cctx, uri, 3000, NULL, NULL, &fresh);
        if (r == 0)
            break;
        printf("# reconnect try %d at t_up+%.0f ms: %s after %.0f ms: %s\n", tries, t0 - t_up,
               rrpc_err_name(r), now_ms() - t0, rrpc_ctx_last_error(cctx));
        sleep_ms(200);
    }
    check(r == 0, "a new connection comes up after the link is back (try %d, %.0f ms after up)", tries,
          now_ms() - t_up);
    if (r == 0) {
        progress("calls on the new connection");
        n = echo_burst(fresh, 20, 5000, &worst, &err);
        check(n == 20, "20 echo calls on the new connection: %d succeeded (slowest %.1f ms)%s%s", n,
              worst, err ? ", error " : "", err ? rrpc_err_name(err) : "");
    }

    /* 6. The old connection. */
    progress("the old connection");
    if (atomic_load(&old_down)) {
        int why = atomic_load(&old_reason);
        printf("# old connection DOWN at t=%.0f ms: %s (%s)\n", atomic_load(&old_down_at),
               rrpc_err_name(why), rrpc_strerror(why));
        check(why == RRPC_E_CONN_LOST || why < 0,
              "the old connection went down with a reason (%s)", rrpc_err_name(why));
        t0 = now_ms();
        void *resp = NULL;
        size_t rlen;
        rrpc_call_opts co = {.deadline_ms = dl};
        r = rrpc_call_sync(old, "echo", "x", 1, &co, &resp, &rlen);
        free(resp);
        check(r == RRPC_E_CLOSED && now_ms() - t0 < 100,
              "a call on the dead old connection fails at once with RRPC_E_CLOSED (%s, %.1f ms)",
              rrpc_err_name(r), now_ms() - t0);
    } else {
        n = echo_burst(old, 5, dl, &worst, &err);
        printf("# the old connection survived the outage: %d of 5 calls succeeded%s%s\n", n,
               err ? ", error " : "", err ? rrpc_err_name(err) : "");
        check(worst <= dl + 1000.0, "calls on the surviving old connection end in bounded time "
              "(slowest %.0f ms)", worst);
    }
    pthread_mutex_lock(&mu);
    printf("# server side: %d connections up, %d down:%s\n", srv_up, srv_down,
           srv_down ? srv_reasons : " (none)");
    pthread_mutex_unlock(&mu);

    /* 7. Teardown. */
    progress("teardown");
    t0 = now_ms();
    rrpc_conn_close(fresh);
    rrpc_conn_close(old);
    rrpc_ctx_destroy(cctx);
    rrpc_listener_close(lis);
    rrpc_ctx_destroy(sctx);
    double dt = now_ms() - t0;
    check(dt <= 2000 + 1500.0, "closed and destroyed both contexts (%.0f ms, bound 2 s + 1.5 s)",
          dt);
    atomic_store(&done, 1);
    pthread_join(wd, NULL);
    printf("# link_flap: %d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}

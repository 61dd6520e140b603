/* SPDX-License-Identifier: MIT */
/*
 * Soak: many connections, every QoS class, calls kept in flight for a bounded
 * time.  Checks that every call is answered exactly once with its own
 * payload, that the server ran each request exactly once, and that memory
 * stays flat: the heap in use with nothing in flight (glibc's mallinfo2) is
 * measured twice, after warm-up and at the end, each time once every call in
 * flight has its answer, and may grow by at most HEAP_SLACK_KIB; the RSS gets
 * only a coarse bound, as freed memory stays in glibc's per-thread arenas
 * (measured in one 90 s run: RSS moved between 21 and 40 MiB while the heap
 * in use stayed between 7 and 16 MiB with calls in flight).
 *
 *   RRPC_SOAK_SECONDS  run time (default 90; CI)      RRPC_SOAK_CONNS  (default 32)
 * A longer run:  RRPC_SOAK_SECONDS=3600 meson test -C build --suite soak -t 0
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

#define DEPTH 16 /* calls in flight per connection */
/* A leak of one byte per call is about 3 MiB over the default run. */
#define HEAP_SLACK_KIB 1024

/* by class index (class value - RRPC_CLASS_FIRST) */
static const size_t class_len[RRPC_CLASS_COUNT] = {32, 256, 64 << 10, 4 << 10};

struct slot {
    struct sconn *sc;
    uint64_t seq;
    bool busy;
};

struct sconn {
    rrpc_conn *c;
    uint32_t idx;
    atomic_uint_fast64_t next_seq;
    struct slot slot[DEPTH];
};

static atomic_bool stop;
static atomic_long issued, answered, handled, bad, dups, failed;

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

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    atomic_fetch_add(&handled, 1);
    rrpc_respond(req, p, len);
}

static void issue(struct slot *s);

static void call_cb(const rrpc_result *res, void *user)
{
    struct slot *s = user;
    if (!s->busy) {
        atomic_fetch_add(&dups, 1);
        return;
    }
    s->busy = false;
    if (res->status != 0) {
        fprintf(stderr, "soak: call %llu on conn %u failed: %s: %s\n",
                (unsigned long long)s->seq, s->sc->idx, rrpc_err_name(res->status),
                res->message);
        atomic_fetch_add(&failed, 1);
        return;
    }
    atomic_fetch_add(&answered, 1);
    uint64_t seq;
    uint32_t idx;
    int ci = (int)(s->seq % RRPC_CLASS_COUNT);
    if (res->len != class_len[ci] || (memcpy(&seq, res->data, 8), seq != s->seq) ||
        (memcpy(&idx, (const uint8_t *)res->data + 8, 4), idx != s->sc->idx))
        atomic_fetch_add(&bad, 1);
    if (!atomic_load(&stop))
        issue(s);
}

static void issue(struct slot *s)
{
    /* The first calls come from the main thread, the rest from the client's
     * loop: each slot is touched by one at a time, the buffer is copied. */
    static _Thread_local uint8_t buf[64 << 10];
    struct sconn *sc = s->sc;
    s->seq = atomic_fetch_add(&sc->next_seq, 1);
    int ci = (int)(s->seq % RRPC_CLASS_COUNT), cls = RRPC_CLASS_FIRST + ci;
    memcpy(buf, &s->seq, 8);
    memcpy(buf + 8, &sc->idx, 4);
    rrpc_call_opts o = {.qos_class = cls, .deadline_ms = 60000};
    s->busy = true;
    int r = rrpc_call(sc->c, "echo", buf, class_len[ci], &o, call_cb, s);
    if (r != 0) {
        s->busy = false;
        atomic_fetch_add(&failed, 1);
        fprintf(stderr, "soak: rrpc_call: %s\n", rrpc_err_name(r));
        return;
    }
    atomic_fetch_add(&issued, 1);
}

static int env_int(const char *name, int def)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Stops issuing, waits (at most 60 s) until every call issued has its answer
 * or its failure, lets the last frames go, and returns the heap in use: the
 * chunks allocated in every arena and the mmapped ones, in KiB. */
static long quiesce_kib(void)
{
    atomic_store(&stop, true);
    /* A callback that read stop before it was set issues once more: done
     * when every call has its outcome and none came for 100 ms. */
    for (double t1 = now_s(); now_s() - t1 < 60;) {
        long seen = atomic_load(&issued);
        if (atomic_load(&answered) + atomic_load(&failed) < seen) {
            usleep(10000);
            continue;
        }
        usleep(100 * 1000);
        if (atomic_load(&issued) == seen)
            break;
    }
    struct mallinfo2 mi = mallinfo2();
    return (long)((mi.uordblks + mi.hblkhd) / 1024);
}

int main(void)
{
    signal(SIGPIPE, SIG_DFL); /* default dispositions: the library must not raise SIGPIPE */
    int secs = env_int("RRPC_SOAK_SECONDS", 90), nconn = env_int("RRPC_SOAK_CONNS", 32);
    if (secs < 10 || nconn < 1) {
        fprintf(stderr, "soak: RRPC_SOAK_SECONDS >= 10 and RRPC_SOAK_CONNS >= 1\n");
        return 2;
    }
    rrpc_ctx *s, *cl;
    rrpc_listener *l;
    if (rrpc_ctx_create(&s) || rrpc_ctx_create(&cl) || rrpc_register(s, "echo", h_echo, NULL) ||
        rrpc_listen(s, "tcp://127.0.0.1:0", NULL, NULL, &l) || rrpc_ctx_start_thread(s) ||
        rrpc_ctx_start_thread(cl)) {
        fprintf(stderr, "soak: setup failed\n");
        return 1;
    }
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(l));
    struct sconn *sc = calloc((size_t)nconn, sizeof(*sc));
    for (int i = 0; i < nconn; i++) {
        sc[i].idx = (uint32_t)i;
        if (rrpc_connect_sync(cl, uri, 10000, NULL, NULL, &sc[i].c)) {
            fprintf(stderr, "soak: connect: %s\n", rrpc_ctx_last_error(cl));
            return 1;
        }
        for (int k = 0; k < DEPTH; k++)
            sc[i].slot[k].sc = &sc[i];
    }
    /* Calls are issued and re-issued on the client's loop. */
    for (int i = 0; i < nconn; i++)
        for (int k = 0; k < DEPTH; k++)
            issue(&sc[i].slot[k]);

    double t0 = now_s(), warm = secs / 4.0 < 30 ? secs / 4.0 : 30;
    while (now_s() - t0 < warm)
        sleep(1);
    long rss_warm = rss_kib(), heap_warm = quiesce_kib();
    printf("# after %.0f s warm-up: RSS %ld KiB, heap in use with nothing in flight %ld KiB, "
           "%ld calls answered\n",
           warm, rss_warm, heap_warm, atomic_load(&answered));
    atomic_store(&stop, false);
    for (int i = 0; i < nconn; i++)
        for (int k = 0; k < DEPTH; k++)
            if (!sc[i].slot[k].busy) /* all of them, unless a call outlived the wait */
                issue(&sc[i].slot[k]);
    while (now_s() - t0 < secs)
        sleep(1);
    long rss_end = rss_kib(), heap_end = quiesce_kib();
    long is = atomic_load(&issued), an = atomic_load(&answered), ha = atomic_load(&handled);
    printf("# %d s, %d connections x %d in flight, 4 classes: %ld issued, %ld answered, %ld "
           "handled by the server, %ld bad, %ld duplicated, %ld failed\n",
           secs, nconn, DEPTH, is, an, ha, atomic_load(&bad), atomic_load(&dups),
           atomic_load(&failed));
    long rss_slack = rss_warm > 32768 ? rss_warm : 32768;
    printf("# heap in use with nothing in flight: %ld KiB after warm-up, %ld KiB at the end "
           "(allowed +%d)\n",
           heap_warm, heap_end, HEAP_SLACK_KIB);
    printf("# RSS: %ld KiB after warm-up, %ld KiB at the end (allowed +%ld)\n", rss_warm,
           rss_end, rss_slack);
    int rc = 0;
    if (is != an || ha != is || atomic_load(&bad) || atomic_load(&dups) || atomic_load(&failed)) {
        fprintf(stderr, "soak: FAIL: not every request was answered exactly once\n");
        rc = 1;
    }
    if (heap_end > heap_warm + HEAP_SLACK_KIB) {
        fprintf(stderr, "soak: FAIL: the heap in use with nothing in flight grew from %ld to %ld KiB\n",
                heap_warm, heap_end);
        rc = 1;
    }
    if (rss_end > rss_warm + rss_slack) {
        fprintf(stderr, "soak: FAIL: RSS grew from %ld to %ld KiB\n", rss_warm, rss_end);
        rc = 1;
    }
    for (int i = 0; i < nconn; i++) {
        rrpc_conn_close(sc[i].c);
    }
    rrpc_ctx_destroy(cl);
    rrpc_ctx_destroy(s);
    free(sc);
    return rc;
}

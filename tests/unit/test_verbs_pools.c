/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport's pools.  The rendezvous receive pool
 * (transport/verbs/rndvpool.c): many large calls in a row are received into
 * buffers registered once, and come back bit-exact; a pool too small for a
 * payload registers it for itself and counts it.  The send buffer pool
 * (transport/verbs/sendpool.c): connections share their device's buffers,
 * an idle or closed connection holds none, and calls from several threads
 * over several connections come back bit-exact through it.  Over rdma://
 * only: run inside the Soft-RoCE VM with
 *   tests/softroce/run-suite.sh BUILD tests/unit/test_verbs_pools
 * elsewhere it skips (exit 77).  The counts are the verbs transport's own
 * (vb_rndv_counts, vb_spool_counts), read under the context's lock.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>
#include <pthread.h>

#include <roce_rpc/rrpc.h>

#include "../common/test_uri.h"
#include "core/core.h"
#include "transport/verbs/verbs_int.h"

#define CALLS 40
#define SIZE (1u << 20)

static void echo(rrpc_request *req, const void *p, size_t n, void *user)
{
    (void)user;
    rrpc_respond(req, p, n);
}

/* An echo of @len bytes at @buf, its answer compared byte for byte. */
static void echo_exact(rrpc_ctx *cli, rrpc_conn *c, const uint8_t *buf, size_t len, unsigned seq)
{
    void *out = NULL;
    size_t n = 0;
    int rc = rrpc_call_sync(c, "echo", buf, len, NULL, &out, &n);
    if (rc)
        fail_msg("call %u: %s", seq, rrpc_ctx_last_error(cli));
    assert_int_equal(n, len);
    if (memcmp(out, buf, len) != 0)
        fail_msg("call %u: the answer differs from the request", seq);
    free(out);
}

static struct vb_rndv_counts counts(rrpc_ctx *ctx)
{
    struct vb_rndv_counts c = {0};
    rrpci_lock(ctx);
    int rc = vb_rndv_counts(ctx, &c);
    rrpci_unlock(ctx);
    assert_int_equal(rc, 0);
    return c;
}

/* @calls echo calls of SIZE bytes, each with its own pattern, each answer
 * compared byte for byte; the server's counts after them in *@srv_ret. */
static void run(const char *pool_bytes, int calls, struct vb_rndv_counts *srv_ret,
                struct vb_rndv_counts *cli_ret)
{
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_VERBS_RNDV_POOL_BYTES", pool_bytes), 0);
    rrpc_ctx *srv, *cli;
    assert_int_equal(rrpc_ctx_create_with(cfg, &srv), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &cli), 0);
    rrpc_config_destroy(cfg);
    assert_int_equal(rrpc_register(srv, "echo", echo, NULL), 0);
    char uri[128];
    test_listen_uri(uri, sizeof(uri));
    rrpc_listener *l;
    assert_int_equal(rrpc_listen(srv, uri, NULL, NULL, &l), 0);
    assert_int_equal(rrpc_ctx_start_thread(srv), 0);
    assert_int_equal(rrpc_ctx_start_thread(cli), 0);
    test_connect_uri(uri, sizeof(uri), rrpc_listener_port(l));
    rrpc_conn *c;
    assert_int_equal(rrpc_connect_sync(cli, uri, 10000, NULL, NULL, &c), 0);
    uint8_t *buf = malloc(SIZE);
    assert_non_null(buf);
    for (int i = 0; i < calls; i++) {
        for (uint32_t k = 0; k < SIZE; k++)
            buf[k] = (uint8_t)(k * 31u + (uint32_t)i * 7u + (k >> 12));
        echo_exact(cli, c, buf, SIZE, (unsigned)i);
    }
    free(buf);
    *srv_ret = counts(srv);
    *cli_ret = counts(cli);
    rrpc_conn_close(c);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
}

static void test_many_large_calls_reuse_the_registered_receive_buffers(void **state)
{
    (void)state;
    struct vb_rndv_counts s, c;
    run("33554432", CALLS, &s, &c);
    printf("# server: %llu registrations, %llu reuses, %llu fallbacks; "
           "client: %llu, %llu, %llu\n",
           (unsigned long long)s.regs, (unsigned long long)s.reuses,
           (unsigned long long)s.fallbacks, (unsigned long long)c.regs,
           (unsigned long long)c.reuses, (unsigned long long)c.fallbacks);
    /* One call at a time: one buffer each side would do; allow a few. */
    assert_true(s.regs <= 4);
    assert_true(c.regs <= 4);
    assert_true(s.reuses >= CALLS - 4);
    assert_true(c.reuses >= CALLS - 4);
    assert_int_equal(s.fallbacks, 0);
    assert_int_equal(c.fallbacks, 0);
}

static void test_a_payload_the_pool_cannot_hold_is_registered_for_itself_and_counted(void **state)
{
    (void)state;
    struct vb_rndv_counts s, c;
    run("65536", 5, &s, &c); /* 64 KiB pool, 1 MiB payloads */
    assert_int_equal(s.fallbacks, 5);
    assert_int_equal(s.regs, 5);
    assert_int_equal(s.reuses, 0);
    assert_int_equal(c.fallbacks, 5);
}

/* ---- the send buffer pool ---- */

#define NCONN 16
#define NTHREAD 4
#define TCALLS 100
#define TSIZE 4000 /* above the inline limit, below RRPC_VERBS_EAGER: a send buffer */

static struct vb_spool_counts spool(rrpc_ctx *ctx)
{
    struct vb_spool_counts c = {0};
    rrpci_lock(ctx);
    int rc = vb_spool_counts(ctx, &c);
    rrpci_unlock(ctx);
    assert_int_equal(rc, 0);
    return c;
}

struct pair {
    rrpc_ctx *srv, *cli;
    rrpc_listener *l;
    rrpc_conn *c[NCONN];
};

/* @driven: the client context is driven (rrpc_ctx_progress), so that
 * nothing of it runs between the test's steps. */
static void pair_open(struct pair *p, const char *keepalive_ms, bool driven)
{
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_KEEPALIVE_MS", keepalive_ms), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &p->srv), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &p->cli), 0);
    rrpc_config_destroy(cfg);
    assert_int_equal(rrpc_register(p->srv, "echo", echo, NULL), 0);
    char uri[128];
    test_listen_uri(uri, sizeof(uri));
    assert_int_equal(rrpc_listen(p->srv, uri, NULL, NULL, &p->l), 0);
    assert_int_equal(rrpc_ctx_start_thread(p->srv), 0);
    if (!driven)
        assert_int_equal(rrpc_ctx_start_thread(p->cli), 0);
    test_connect_uri(uri, sizeof(uri), rrpc_listener_port(p->l));
    for (int i = 0; i < NCONN; i++) {
        int rc = rrpc_connect_sync(p->cli, uri, 10000, NULL, NULL, &p->c[i]);
        if (rc)
            fail_msg("connection %d: %s", i, rrpc_ctx_last_error(p->cli));
    }
}

static void pair_close(struct pair *p)
{
    rrpc_listener_close(p->l);
    rrpc_ctx_destroy(p->cli);
    rrpc_ctx_destroy(p->srv);
}

/* One echo of TSIZE bytes with its own pattern, compared byte for byte. */
static void echo_once(rrpc_ctx *cli, rrpc_conn *c, unsigned seed)
{
    uint8_t buf[TSIZE];
    for (unsigned k = 0; k < TSIZE; k++)
        buf[k] = (uint8_t)(k * 13u + seed * 101u + (k >> 7));
    echo_exact(cli, c, buf, TSIZE, seed);
}

struct worker {
    struct pair *p;
    int first; /* connections first, first + NTHREAD, ... */
};

static void *calls_thread(void *arg)
{
    struct worker *w = arg;
    for (unsigned i = 0; i < TCALLS; i++)
        for (int k = w->first; k < NCONN; k += NTHREAD)
            echo_once(w->p->cli, w->p->c[k], i * NCONN + (unsigned)k);
    return NULL;
}

static void test_connections_share_their_device_send_buffers(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, "0", false); /* no idle trim: what the calls leave is what shows */
    pthread_t th[NTHREAD];
    struct worker w[NTHREAD];
    for (int i = 0; i < NTHREAD; i++) {
        w[i] = (struct worker){&p, i};
        assert_int_equal(pthread_create(&th[i], NULL, calls_thread, &w[i]), 0);
    }
    for (int i = 0; i < NTHREAD; i++)
        pthread_join(th[i], NULL);
    /* A SEND completes at its sender after the peer has the frame (the ACK
     * comes back, then the completion is polled): the last answers' buffers
     * may still be lent a moment after their calls returned. */
    struct vb_spool_counts s = spool(p.srv), c = spool(p.cli);
    for (int i = 0; i < 200 && (s.lent || c.lent); i++) {
        usleep(10000);
        s = spool(p.srv);
        c = spool(p.cli);
    }
    printf("# after %d calls on %d connections from %d threads: server %u slabs (%u lent), "
           "client %u slabs (%u lent)\n",
           NTHREAD * TCALLS * (NCONN / NTHREAD), NCONN, NTHREAD, s.slabs, s.lent, c.slabs,
           c.lent);
    /* At most NTHREAD calls in flight: one slab of VB_SLAB_BUFS serves
     * them; buffers of their own per connection would be NCONN x 4 x
     * VB_NSEND. */
    assert_true(c.slabs >= 1 && c.slabs <= 2);
    assert_true(s.slabs >= 1 && s.slabs <= 2);
    assert_int_equal(c.lent, 0);
    assert_int_equal(s.lent, 0);
    for (int i = 0; i < NCONN; i++)
        rrpc_conn_close(p.c[i]);
    pair_close(&p);
}

struct burst {
    int want, done, bad;
};

static void burst_done(const rrpc_result *res, void *user)
{
    struct burst *b = user;
    uint8_t want[TSIZE];
    memset(want, 0x5a, sizeof(want));
    if (res->status != 0 || res->len != TSIZE || memcmp(res->data, want, TSIZE) != 0)
        __atomic_add_fetch(&b->bad, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&b->done, 1, __ATOMIC_RELEASE);
}

static void test_idle_and_closed_connections_give_their_send_slabs_back(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, "200", true);
    /* NCONN x 8 calls posted at once, the driven client not looking at its
     * completions meanwhile: more than one slab's worth lent. */
    static uint8_t buf[TSIZE];
    memset(buf, 0x5a, sizeof(buf));
    struct burst b = {.want = NCONN * 8};
    for (int i = 0; i < b.want; i++)
        assert_int_equal(rrpc_call(p.c[i % NCONN], "echo", buf, TSIZE, NULL, burst_done, &b), 0);
    struct vb_spool_counts busy = spool(p.cli);
    for (int t = 0; t < 10000 && b.done < b.want; t++)
        assert_int_equal(rrpc_ctx_progress(p.cli, 10), 0);
    assert_int_equal(b.done, b.want);
    assert_int_equal(b.bad, 0);
    /* Idle for more than a keepalive interval (200 ms) on both sides: the
     * core trims.  By the clock: a pass of the driven client may return at
     * once (polling, the LENDs that take lent credit back). */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        assert_int_equal(rrpc_ctx_progress(p.cli, 10), 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
    } while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 1500);
    struct vb_spool_counts idle = spool(p.cli), sidle = spool(p.srv);
    for (int i = 0; i < NCONN; i++)
        rrpc_conn_close(p.c[i]);
    for (int t = 0; t < 30; t++)
        assert_int_equal(rrpc_ctx_progress(p.cli, 10), 0);
    struct vb_spool_counts closed = spool(p.cli);
    printf("# client slabs: %u (%u buffers lent) after the burst was posted, %u idle, %u "
           "closed; server idle %u\n",
           busy.slabs, busy.lent, idle.slabs, closed.slabs, sidle.slabs);
    assert_true(busy.slabs >= 2);
    assert_true(idle.slabs <= 1);
    assert_true(sidle.slabs <= 1);
    assert_true(closed.slabs <= 1);
    assert_int_equal(closed.lent, 0);
    pair_close(&p);
}

int main(void)
{
    if (strcmp(test_transport(), "verbs") != 0) {
        printf("skipped: the pools are verbs only: run it with "
               "tests/softroce/run-suite.sh BUILD tests/unit/test_verbs_pools\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_large_calls_reuse_the_registered_receive_buffers),
        cmocka_unit_test(test_a_payload_the_pool_cannot_hold_is_registered_for_itself_and_counted),
        cmocka_unit_test(test_connections_share_their_device_send_buffers),
        cmocka_unit_test(test_idle_and_closed_connections_give_their_send_slabs_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

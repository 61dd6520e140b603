/* SPDX-License-Identifier: MIT */
/*
 * The verbs rendezvous receive pool (transport/verbs/rndvpool.c): many large
 * calls in a row are received into buffers registered once, and come back
 * bit-exact; a pool too small for a payload registers it for itself and
 * counts it.  Over rdma:// only: run inside the Soft-RoCE VM with
 *   tests/softroce/run-suite.sh BUILD tests/unit/test_verbs_rndv_pool
 * elsewhere it skips (exit 77).  The counts are the verbs transport's own
 * (vb_rndv_counts), read under the context's lock.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

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
        void *out = NULL;
        size_t n = 0;
        int rc = rrpc_call_sync(c, "echo", buf, SIZE, NULL, &out, &n);
        if (rc)
            fail_msg("call %d: %s", i, rrpc_ctx_last_error(cli));
        assert_int_equal(n, SIZE);
        if (memcmp(out, buf, SIZE) != 0)
            fail_msg("call %d: the answer differs from the request", i);
        free(out);
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

int main(void)
{
    if (strcmp(test_transport(), "verbs") != 0) {
        printf("skipped: the rendezvous pool is verbs only: run it with "
               "tests/softroce/run-suite.sh BUILD tests/unit/test_verbs_rndv_pool\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_large_calls_reuse_the_registered_receive_buffers),
        cmocka_unit_test(test_a_payload_the_pool_cannot_hold_is_registered_for_itself_and_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

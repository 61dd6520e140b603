/* SPDX-License-Identifier: MIT */
/*
 * The loadable modules (issue #32): a program that uses tcp only maps
 * neither libibverbs, librdmacm nor libmicrohttpd; with RRPC_MODULE_DIR at
 * an empty directory, rdma:// and metrics_listen fail with the path and
 * what to do (no fallback to tcp) while tcp still works; found where the
 * build puts them (beside the library, no RRPC_MODULE_DIR), each module
 * loads on first use.  Links libroce_rpc.so as an application does.  The
 * tests run in this order: each later one loads more.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <roce_rpc/rrpc.h>

/* Whether a file whose name contains @name is mapped in this process. */
static bool mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    bool found = false;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, name))
            found = true;
    fclose(f);
    return found;
}

static void echo(rrpc_request *req, const void *p, size_t n, void *user)
{
    (void)user;
    rrpc_respond(req, p, n);
}

/* One echo over tcp between two contexts of this process. */
static void tcp_echo(void)
{
    rrpc_ctx *srv, *cli;
    rrpc_listener *l;
    rrpc_conn *conn;
    assert_int_equal(rrpc_ctx_create(&srv), 0);
    assert_int_equal(rrpc_register(srv, "echo", echo, NULL), 0);
    assert_int_equal(rrpc_ctx_start_thread(srv), 0);
    assert_int_equal(rrpc_listen(srv, "tcp://127.0.0.1:0", NULL, NULL, &l), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(l));
    assert_int_equal(rrpc_ctx_create(&cli), 0);
    assert_int_equal(rrpc_ctx_start_thread(cli), 0);
    assert_int_equal(rrpc_connect_sync(cli, uri, 5000, NULL, NULL, &conn), 0);
    void *resp = NULL;
    size_t len = 0;
    assert_int_equal(rrpc_call_sync(conn, "echo", "hello", 5, NULL, &resp, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(resp, "hello", 5);
    free(resp);
    rrpc_conn_close(conn);
    rrpc_ctx_destroy(cli);
    rrpc_ctx_destroy(srv);
}

static const char *const heavy[] = {"libibverbs", "librdmacm", "libmicrohttpd", "roce_rpc-verbs",
                                    "roce_rpc-metrics_http"};

static void tcp_only_maps_no_verbs_or_http_library(void **state)
{
    (void)state;
    tcp_echo();
    for (size_t i = 0; i < sizeof(heavy) / sizeof(heavy[0]); i++)
        if (mapped(heavy[i]))
            fail_msg("a tcp-only program has %s mapped", heavy[i]);
}

static void missing_modules_are_errors_that_say_what_to_do(void **state)
{
    (void)state;
    char dir[] = "/tmp/rrpc-no-modules.XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(setenv("RRPC_MODULE_DIR", dir, 1), 0);

    /* A build without the verbs transport (or libmicrohttpd) says so instead. */
    bool verbs = getenv("RRPC_TEST_HAVE_VERBS"), mhd = getenv("RRPC_TEST_HAVE_MHD");
    rrpc_ctx *ctx;
    rrpc_listener *l;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    int r = rrpc_listen(ctx, "rdma://127.0.0.1:0", NULL, NULL, &l);
    const char *why = rrpc_ctx_last_error(ctx);
    print_message("rdma:// without the module: %s: %s\n", rrpc_err_name(r), why);
    assert_int_equal(r, RRPC_E_TRANSPORT);
    if (verbs) {
        assert_non_null(strstr(why, "rdma:// needs the module"));
        assert_non_null(strstr(why, dir));
        assert_non_null(strstr(why, "roce_rpc-verbs-"));
        assert_non_null(strstr(why, "RRPC_MODULE_DIR"));
    } else {
        assert_non_null(strstr(why, "no verbs transport"));
    }
    rrpc_ctx_destroy(ctx);

    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    r = rrpc_config_set(cfg, "metrics_listen", "127.0.0.1:0");
    why = rrpc_ctx_last_error(NULL);
    print_message("metrics_listen without the module: %s: %s\n", rrpc_err_name(r), why);
    assert_int_equal(r, -EOPNOTSUPP);
    if (mhd) {
        assert_non_null(strstr(why, "needs the module"));
        assert_non_null(strstr(why, "roce_rpc-metrics_http-"));
    } else {
        assert_non_null(strstr(why, "without libmicrohttpd"));
    }
    rrpc_config_destroy(cfg);

    /* The module is there but its libraries are not (a host without
     * librdmacm1): the loader's reason and the packages to install. */
    const char *broken = getenv("RRPC_TEST_BROKEN_MODULE_DIR");
    if (broken) {
        assert_int_equal(setenv("RRPC_MODULE_DIR", broken, 1), 0);
        assert_int_equal(rrpc_ctx_create(&ctx), 0);
        r = rrpc_listen(ctx, "rdma://127.0.0.1:0", NULL, NULL, &l);
        why = rrpc_ctx_last_error(ctx);
        print_message("rdma:// with a library missing: %s: %s\n", rrpc_err_name(r), why);
        assert_int_equal(r, RRPC_E_TRANSPORT);
        assert_non_null(strstr(why, "rdma:// needs the module"));
        assert_non_null(strstr(why, broken));
        assert_non_null(strstr(why, "librrpc-test-not-installed.so.1"));
        assert_non_null(strstr(why, "install librdmacm1 and libibverbs1"));
        rrpc_ctx_destroy(ctx);
        assert_int_equal(setenv("RRPC_MODULE_DIR", dir, 1), 0);
    }

    /* Nothing fell back to tcp, nothing was loaded, and tcp still works. */
    tcp_echo();
    for (size_t i = 0; i < sizeof(heavy) / sizeof(heavy[0]); i++)
        if (mapped(heavy[i]))
            fail_msg("%s mapped after failed loads", heavy[i]);
    assert_int_equal(unsetenv("RRPC_MODULE_DIR"), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* Found beside the library (BUILD/libroce_rpc/roce_rpc/, no
 * RRPC_MODULE_DIR): rdma:// loads the verbs module, whatever this host's
 * devices then say; metrics_listen loads the HTTP one. */
static void modules_load_on_first_use(void **state)
{
    (void)state;
    if (!getenv("RRPC_TEST_HAVE_VERBS"))
        skip();
    rrpc_ctx *ctx;
    rrpc_listener *l = NULL;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    int r = rrpc_listen(ctx, "rdma://127.0.0.1:0", NULL, NULL, &l);
    print_message("rdma:// with the module: %s: %s\n", rrpc_err_name(r),
                  r ? rrpc_ctx_last_error(ctx) : "listening");
    if (r == RRPC_E_TRANSPORT)
        fail_msg("the verbs module did not load: %s", rrpc_ctx_last_error(ctx));
    if (r == 0)
        rrpc_listener_close(l);
    rrpc_ctx_destroy(ctx);
    assert_true(mapped("roce_rpc-verbs-"));
    assert_true(mapped("libibverbs"));
    assert_true(mapped("librdmacm"));

    if (getenv("RRPC_TEST_HAVE_MHD")) {
        rrpc_config *cfg;
        assert_int_equal(rrpc_config_create(&cfg), 0);
        r = rrpc_config_set(cfg, "metrics_listen", "127.0.0.1:0");
        if (r)
            fail_msg("metrics_listen: %s", rrpc_ctx_last_error(NULL));
        assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
        assert_true(rrpc_ctx_metrics_port(ctx) > 0);
        rrpc_ctx_destroy(ctx);
        rrpc_config_destroy(cfg);
        assert_true(mapped("libmicrohttpd"));
    }
}

int main(void)
{
    /* Order matters: each test loads more than the one before. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tcp_only_maps_no_verbs_or_http_library),
        cmocka_unit_test(missing_modules_are_errors_that_say_what_to_do),
        cmocka_unit_test(modules_load_on_first_use),
    };
    unsetenv("RRPC_MODULE_DIR");
    return cmocka_run_group_tests(tests, NULL, NULL);
}

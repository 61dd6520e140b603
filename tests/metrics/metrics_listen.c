/* SPDX-License-Identifier: MIT */
/*
 * metrics_listen from C (issue #17): the option is checked, the context
 * serves GET /metrics over a real loopback socket until rrpc_ctx_destroy,
 * and a bind failure fails rrpc_ctx_create_with with the address.  Also runs
 * under ASan/UBSan (the Python scrapes, test_metrics_http.py, do not).
 * Skipped (77) in a libroce_rpc built without libmicrohttpd.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

/* A context serving its metrics on 127.0.0.1 (port 0), or NULL with *ret_err. */
static rrpc_ctx *serving(const char *listen, int *ret_err)
{
    rrpc_config *cfg;
    rrpc_ctx *ctx = NULL;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    int r = rrpc_config_set(cfg, "metrics_listen", listen);
    if (r == 0)
        r = rrpc_ctx_create_with(cfg, &ctx);
    rrpc_config_destroy(cfg);
    *ret_err = r;
    return r ? NULL : ctx;
}

/* One HTTP/1.0 request to 127.0.0.1:@port; the whole answer in @buf. */
static size_t http(int port, const char *request, char *buf, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    buf[n] = 0;
    close(fd);
    return n;
}

static void test_a_context_serves_get_metrics_until_destroyed(void **state)
{
    (void)state;
    int err;
    rrpc_ctx *ctx = serving("127.0.0.1:0", &err);
    assert_int_equal(err, 0);
    int port = rrpc_ctx_metrics_port(ctx);
    assert_true(port > 0);
    static char buf[1 << 20];
    http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, " 200 OK\r\n"));
    assert_non_null(strstr(buf, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
    assert_non_null(strstr(buf, "rrpc_calls_total{class=\"low_latency\"} 0"));
    http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", buf, sizeof(buf));
    assert_non_null(strstr(buf, " 405 "));
    assert_non_null(strstr(buf, "Allow: GET, HEAD"));
    http(port, "GET /other HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_non_null(strstr(buf, " 404 "));
    rrpc_ctx_destroy(ctx);
    /* Nothing listens there any more: the server was stopped with the context. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), -1);
    assert_int_equal(errno, ECONNREFUSED);
    close(fd);
}

static void test_an_address_in_use_fails_creation_naming_it(void **state)
{
    (void)state;
    int err;
    rrpc_ctx *first = serving("127.0.0.1:0", &err);
    assert_int_equal(err, 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", rrpc_ctx_metrics_port(first));
    assert_null(serving(addr, &err));
    assert_int_equal(err, -EADDRINUSE);
    const char *why = rrpc_ctx_last_error(NULL);
    assert_non_null(strstr(why, addr));
    assert_non_null(strstr(why, "address in use"));
    rrpc_ctx_destroy(first);
}

static void test_a_malformed_address_is_refused_by_rrpc_config_set(void **state)
{
    (void)state;
    static const char *const bad[] = { ":9464", "127.0.0.1", "127.0.0.1:65536", "::1:9464",
                                       "127.0.0.1:+80", "127.0.0.1:" };
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(rrpc_config_set(cfg, "metrics_listen", bad[i]), -EINVAL);
        assert_non_null(strstr(rrpc_ctx_last_error(NULL), "metrics_listen"));
    }
    long v;
    assert_int_equal(rrpc_config_get(cfg, "metrics_listen", &v), -EINVAL);
    assert_int_equal(rrpc_config_set(cfg, "METRICS_LISTEN", "[::1]:0"), 0); /* any case */
    assert_int_equal(rrpc_config_set(cfg, "metrics_listen", ""), 0);        /* off again */
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    assert_int_equal(rrpc_ctx_metrics_port(ctx), -ENOENT);
    rrpc_ctx_destroy(ctx);
    rrpc_config_destroy(cfg);
}

int main(void)
{
    rrpc_config *cfg;
    if (rrpc_config_create(&cfg))
        return 1;
    int r = rrpc_config_set(cfg, "metrics_listen", "127.0.0.1:0");
    rrpc_config_destroy(cfg);
    if (r == -EOPNOTSUPP) {
        printf("SKIPPED: this libroce_rpc was built without libmicrohttpd (-Dmetrics_http)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_context_serves_get_metrics_until_destroyed),
        cmocka_unit_test(test_an_address_in_use_fails_creation_naming_it),
        cmocka_unit_test(test_a_malformed_address_is_refused_by_rrpc_config_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

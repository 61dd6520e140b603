/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/util/nic_counters.c: an RDMA port's kernel
 * counters read from a sysfs tree and rendered as Prometheus families, and
 * the same families in a context's metrics text.  The tree is written by the
 * test under a temporary root with the file names Soft-RoCE (kernel 6.1)
 * shows in the project's VM (hw_counters) and the IB port counters' names
 * (counters/); the live tree is read in the VM (tests/softroce/nic-counters.sh). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "core/core.h"
#include "util/nic_counters.h"

static char root[64];

static void mkdirs(const char *path)
{
    char p[512];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

static void put_file(const char *dev, unsigned port, const char *dir, const char *name,
                     const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/class/infiniband/%s/ports/%u/%s", root, dev, port, dir);
    mkdirs(p);
    snprintf(p, sizeof(p), "%s/class/infiniband/%s/ports/%u/%s/%s", root, dev, port, dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/rrpc-nic-XXXXXX");
    assert_non_null(mkdtemp(root));
    rrpci_nic_sysfs_root = root;
    put_file("rxe0", 1, "hw_counters", "sent_pkts", "42\n");
    put_file("rxe0", 1, "hw_counters", "rcvd_rnr_err", "0\n");
    put_file("rxe0", 1, "hw_counters", "rcvd_seq_err", "7\n");
    put_file("rxe0", 1, "hw_counters", "lifespan", "10\n");        /* a setting: left out */
    put_file("rxe0", 1, "hw_counters", "garbage", "n/a\n");        /* not a number: left out */
    put_file("rxe0", 1, "hw_counters", "empty", "");               /* left out */
    put_file("rxe0", 1, "hw_counters", "two_lines", "1\n2\n");     /* left out */
    put_file("rxe0", 1, "hw_counters", "bad-name", "3\n");         /* read, not a metric name */
    put_file("rxe0", 1, "counters", "VL15_dropped", "5\n");
    put_file("rxe1", 1, "hw_counters", "sent_pkts", "18446744073709551615\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    rrpci_nic_sysfs_root = "/sys";
    return 0;
}

struct seen {
    char text[2048];
    int n;
};

static void seen_cb(void *arg, const char *dir, const char *name, uint64_t v)
{
    struct seen *s = arg;
    size_t k = strlen(s->text);
    snprintf(s->text + k, sizeof(s->text) - k, "%s/%s=%llu;", dir, name, (unsigned long long)v);
    s->n++;
}

static void test_counters_of_a_port_are_read_and_junk_is_left_out(void **state)
{
    (void)state;
    struct seen s = {0};
    assert_int_equal(rrpci_nic_counters("rxe0", 1, seen_cb, &s), 5);
    assert_int_equal(s.n, 5);
    assert_non_null(strstr(s.text, "hw_counters/sent_pkts=42;"));
    assert_non_null(strstr(s.text, "hw_counters/rcvd_rnr_err=0;"));
    assert_non_null(strstr(s.text, "hw_counters/rcvd_seq_err=7;"));
    assert_non_null(strstr(s.text, "hw_counters/bad-name=3;"));
    assert_non_null(strstr(s.text, "counters/VL15_dropped=5;"));
    assert_null(strstr(s.text, "lifespan"));
    assert_null(strstr(s.text, "garbage"));
    assert_null(strstr(s.text, "two_lines"));
}

static void test_a_missing_port_or_a_path_in_the_name_is_an_error(void **state)
{
    (void)state;
    struct seen s = {0};
    assert_int_equal(rrpci_nic_counters("rxe0", 2, seen_cb, &s), -ENOENT);
    assert_int_equal(rrpci_nic_counters("mlx5_9", 1, seen_cb, &s), -ENOENT);
    assert_int_equal(rrpci_nic_counters("../rxe0", 1, seen_cb, &s), -EINVAL);
    assert_int_equal(rrpci_nic_counters("a/b", 1, seen_cb, &s), -EINVAL);
    assert_int_equal(s.n, 0);
}

static void test_metric_names_are_lowercase_and_checked(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(rrpci_nic_metric_name("VL15_dropped", out, sizeof(out)), 0);
    assert_string_equal(out, "rrpc_nic_vl15_dropped_total");
    assert_int_equal(rrpci_nic_metric_name("bad-name", out, sizeof(out)), -EINVAL);
    assert_int_equal(rrpci_nic_metric_name("", out, sizeof(out)), -EINVAL);
    assert_int_equal(rrpci_nic_metric_name("sent_pkts", out, 20), -EINVAL); /* does not fit */
}

static const char *count_of(const char *text, const char *needle, int *n)
{
    *n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        (*n)++;
    return text;
}

static void test_render_groups_each_counter_over_devices(void **state)
{
    (void)state;
    struct rrpci_nic_dev devs[] = {{.name = "rxe1", .ports = 1}, {.name = "rxe0", .ports = 2}};
    char buf[8192];
    size_t need = rrpci_nic_render(devs, 2, buf, sizeof(buf), 0);
    assert_true(need < sizeof(buf));
    int n;
    count_of(buf, "# TYPE rrpc_nic_sent_pkts_total counter\n", &n);
    assert_int_equal(n, 1);
    const char *a = strstr(buf, "rrpc_nic_sent_pkts_total{device=\"rxe0\",port=\"1\"} 42\n");
    const char *b = strstr(buf,
        "rrpc_nic_sent_pkts_total{device=\"rxe1\",port=\"1\"} 18446744073709551615\n");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a < b); /* sorted by device within the family */
    assert_non_null(strstr(buf, "rrpc_nic_vl15_dropped_total{device=\"rxe0\",port=\"1\"} 5\n"));
    assert_non_null(strstr(buf, "rrpc_nic_rcvd_rnr_err_total{device=\"rxe0\",port=\"1\"} 0\n"));
    assert_null(strstr(buf, "bad"));
    assert_null(strstr(buf, "port=\"2\""));
    /* sized like snprintf: a short buffer gets the length the text needs */
    char small[16];
    assert_int_equal(rrpci_nic_render(devs, 2, small, sizeof(small), 0), need);
    /* promtool, where installed, takes it */
    if (access("/usr/bin/promtool", X_OK) == 0) {
        FILE *p = popen("/usr/bin/promtool check metrics >/dev/null 2>&1", "w");
        assert_non_null(p);
        fputs(buf, p);
        assert_int_equal(pclose(p), 0);
    }
}

static void test_a_context_metrics_text_carries_its_devices_counters(void **state)
{
    (void)state;
    rrpc_ctx *ctx = NULL;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    size_t len = 0;
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    assert_int_equal(rrpc_ctx_stats_text(ctx, buf, 1 << 20, &len), 0);
    assert_null(strstr(buf, "rrpc_nic_")); /* no device used: no family */
    rrpci_lock(ctx);
    rrpci_ctx_nic_used(ctx, "rxe0", 1);
    rrpci_ctx_nic_used(ctx, "rxe0", 1); /* once */
    rrpci_unlock(ctx);
    assert_int_equal(rrpc_ctx_stats_text(ctx, buf, 1 << 20, &len), 0);
    int n;
    count_of(buf, "rrpc_nic_sent_pkts_total{device=\"rxe0\",port=\"1\"} 42\n", &n);
    assert_int_equal(n, 1);
    assert_int_equal(strlen(buf), len);
    free(buf);
    rrpc_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters_of_a_port_are_read_and_junk_is_left_out),
        cmocka_unit_test(test_a_missing_port_or_a_path_in_the_name_is_an_error),
        cmocka_unit_test(test_metric_names_are_lowercase_and_checked),
        cmocka_unit_test(test_render_groups_each_counter_over_devices),
        cmocka_unit_test(test_a_context_metrics_text_carries_its_devices_counters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

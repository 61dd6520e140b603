/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/config.c: the table of tunables, made of the
 * core's and those each transport compiled in declares. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "core/core.h"

/* rrpc_config_print's output. */
static char *printed(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    rrpc_config_print(f);
    fclose(f);
    return buf;
}

static void test_each_transports_declared_tunables_are_listed_set_and_read(void **state)
{
    (void)state;
    char *out = printed();
    int declared = 0;
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++) {
        const struct rrpci_transport_ops *ops = rrpci_transport_nth(i);
        for (const struct rrpci_tunable *t = ops ? ops->tunables : NULL; t && t->env; t++) {
            declared++;
            if (!strstr(out, t->env))
                fail_msg("%s (declared by %s) is not in rrpc_config_print", t->env, ops->name);
            rrpc_config *cfg;
            assert_int_equal(rrpc_config_create(&cfg), 0);
            long v = -1;
            assert_int_equal(rrpc_config_get(cfg, t->env, &v), 0);
            assert_int_equal(v, t->def);
            char s[32];
            snprintf(s, sizeof(s), "%ld", t->min);
            assert_int_equal(rrpc_config_set(cfg, t->env + 5, s), 0); /* the short form */
            assert_int_equal(rrpc_config_get(cfg, t->env, &v), 0);
            assert_int_equal(v, t->min);
            snprintf(s, sizeof(s), "%ld", t->max + 1);
            assert_int_equal(rrpc_config_set(cfg, t->env, s), -EINVAL); /* out of range */
            rrpc_ctx *ctx;
            assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
            assert_int_equal(rrpci_ctx_tunable(ctx, t->env), t->min); /* what it reads */
            rrpc_ctx_destroy(ctx);
            rrpc_config_destroy(cfg);
        }
    }
#ifdef RRPC_HAVE_VERBS
    assert_true(declared >= 4); /* the verbs transport's */
#endif
    assert_non_null(strstr(out, "RRPC_MAX_CONNS")); /* and the core's */
    free(out);
}

static void test_a_tunable_of_no_transport_compiled_in_is_unknown(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_NO_SUCH_TUNABLE", "1"), -ENOENT);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL), "rrpc_config_print"));
#ifndef RRPC_HAVE_VERBS
    assert_int_equal(rrpc_config_set(cfg, "RRPC_VERBS_EAGER", "4096"), -ENOENT);
#endif
    rrpc_config_destroy(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_transports_declared_tunables_are_listed_set_and_read),
        cmocka_unit_test(test_a_tunable_of_no_transport_compiled_in_is_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/config.c: the context's tunables, made of
 * the core's table and each transport's (transport/tunables.h). */
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

/* Each transport's table built in, by slot. */
static const struct {
    enum rrpci_conf_slot slot;
    const struct rrpci_conf_table *t;
} transports[] = {
#ifdef RRPC_HAVE_VERBS
    {RRPCI_CONF_SLOT_VERBS, &rrpci_verbs_conf},
#endif
    {RRPCI_CONF_SLOT_TCP, &rrpci_tcp_conf},
};

static void test_each_transports_tunables_are_listed_set_and_read_typed_by_it(void **state)
{
    (void)state;
    char *out = printed();
    for (size_t k = 0; k < sizeof(transports) / sizeof(transports[0]); k++) {
        const struct rrpci_conf_table *t = transports[k].t;
        assert_true(t->nfields >= 4);
        for (size_t i = 0; i < t->nfields; i++) {
            const struct rrpci_conf_field *f = &t->fields[i];
            if (!strstr(out, f->name))
                fail_msg("%s (of the %s transport) is not in rrpc_config_print", f->name,
                         t->name);
            rrpc_config *cfg;
            assert_int_equal(rrpc_config_create(&cfg), 0);
            long v = -1;
            assert_int_equal(rrpc_config_get(cfg, f->name, &v), 0);
            assert_int_equal(v, f->def);
            char s[32];
            snprintf(s, sizeof(s), "%lld", f->min + 1);
            assert_int_equal(rrpc_config_set(cfg, f->name + 5, s), 0); /* the short form */
            assert_int_equal(rrpc_config_get(cfg, f->name, &v), 0);
            assert_int_equal(v, f->min + 1);
            snprintf(s, sizeof(s), "%lld", f->max + 1);
            assert_int_equal(rrpc_config_set(cfg, f->name, s), -EINVAL); /* out of range */
            rrpc_ctx *ctx;
            assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
            /* What the transport reads: its own struct, through its slot. */
            const void *vt = rrpci_ctx_conf(ctx, transports[k].slot);
            assert_int_equal(rrpci_conf_number(f, vt), f->min + 1);
            rrpc_ctx_destroy(ctx);
            rrpc_config_destroy(cfg);
        }
    }
    free(out);
}

static void test_core_tunables_land_in_their_typed_members(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_MAX_MSG", "0x10000"), 0);
    assert_int_equal(rrpc_config_set(cfg, "max_answer_backlog", "1099511627776"), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_TENSOR_MAX_BYTES", "4096"), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_MAX_CONNS", "10"), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_AUTH_TIMEOUT_MS", "1234"), 0);
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    assert_int_equal(ctx->cfg.max_msg, 65536);
    assert_true(ctx->cfg.max_answer_backlog == 1L << 40);
    assert_int_equal(ctx->cfg.tensor_max_bytes, 4096);
    struct rrpci_accept_limits lim;
    rrpci_ctx_accept_limits(ctx, &lim);
    assert_int_equal(lim.max_pending, 10);
    assert_int_equal(lim.per_source, 64);
    assert_int_equal(lim.auth_timeout_ms, 1234);
    rrpc_ctx_destroy(ctx);
    rrpc_config_destroy(cfg);
}

static void test_code_overrides_the_environment_which_overrides_the_default(void **state)
{
    (void)state;
    setenv("RRPC_DEADLINE_MS", "1234", 1);
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    long v;
    assert_int_equal(rrpc_config_get(cfg, "RRPC_DEADLINE_MS", &v), 0);
    assert_int_equal(v, 1234); /* the environment's */
    assert_int_equal(rrpc_config_get(cfg, "RRPC_CONNECT_TIMEOUT_MS", &v), 0);
    assert_int_equal(v, 10000); /* the default */
    assert_int_equal(rrpc_config_set(cfg, "deadline_ms", "99"), 0);
    rrpc_ctx *coded, *env;
    assert_int_equal(rrpc_ctx_create_with(cfg, &coded), 0);
    assert_int_equal(rrpc_ctx_create(&env), 0);
    assert_int_equal(coded->cfg.deadline_ms, 99);
    assert_int_equal(env->cfg.deadline_ms, 1234);
    rrpc_ctx_destroy(coded);
    rrpc_ctx_destroy(env);
    rrpc_config_destroy(cfg);
    /* A malformed variable: no config, and the detail names it and its range. */
    setenv("RRPC_DEADLINE_MS", "soon", 1);
    assert_int_equal(rrpc_config_create(&cfg), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL),
                           "RRPC_DEADLINE_MS=\"soon\": not a number from -1 to 86400000"));
    unsetenv("RRPC_DEADLINE_MS");
}

static void test_a_value_out_of_range_names_the_range_and_changes_nothing(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_MAX_MSG", "4095"), -EINVAL);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL),
                           "RRPC_MAX_MSG=\"4095\": not a number from 4096 to 2147483647"));
    long v;
    assert_int_equal(rrpc_config_get(cfg, "RRPC_MAX_MSG", &v), 0);
    assert_int_equal(v, 64L << 20);
    rrpc_config_destroy(cfg);
}

static void test_an_unknown_name_says_did_you_mean(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_MAX_CON", "1"), -ENOENT);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL), "did you mean RRPC_MAX_CONNS?"));
    assert_int_equal(rrpc_config_set(cfg, "keepalive_timout_ms", "1"), -ENOENT);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL), "did you mean RRPC_KEEPALIVE_TIMEOUT_MS?"));
    long v;
    assert_int_equal(rrpc_config_get(cfg, "metrics_listn", &v), -ENOENT);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL), "did you mean metrics_listen?"));
    assert_int_equal(rrpc_config_set(cfg, "RRPC_NO_SUCH_TUNABLE", "1"), -ENOENT);
    assert_non_null(strstr(rrpc_ctx_last_error(NULL), "rrpc_config_print"));
    assert_null(strstr(rrpc_ctx_last_error(NULL), "did you mean"));
    rrpc_config_destroy(cfg);
}

static void test_a_text_tunable_is_never_read_from_the_environment(void **state)
{
    (void)state;
    setenv("metrics_listen", "127.0.0.1:0", 1);
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    long v;
    assert_int_equal(rrpc_config_get(cfg, "metrics_listen", &v), -EINVAL); /* text */
    rrpc_ctx *ctx;
    assert_int_equal(rrpc_ctx_create_with(cfg, &ctx), 0);
    assert_string_equal(ctx->cfg.metrics_listen, "");
    rrpc_ctx_destroy(ctx);
    rrpc_config_destroy(cfg);
    unsetenv("metrics_listen");
}

static void test_a_tunable_of_no_transport_compiled_in_is_unknown(void **state)
{
    (void)state;
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
#ifndef RRPC_HAVE_VERBS
    assert_int_equal(rrpc_config_set(cfg, "RRPC_VERBS_EAGER", "4096"), -ENOENT);
#else
    assert_int_equal(rrpc_config_set(cfg, "RRPC_VERBS_EAGER", "4096"), 0);
#endif
    rrpc_config_destroy(cfg);
}

static void test_every_table_has_defaults_within_its_ranges(void **state)
{
    (void)state;
    /* The printed list with every table, as the man page has it: each
     * field's default is in its range (a table typo fails here). */
    const struct rrpci_conf_table *tables[] = {&rrpci_core_conf, &rrpci_verbs_conf,
                                               &rrpci_tcp_conf};
    char why[300];
    for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++)
        if (rrpci_conf_check_table(tables[k], why, sizeof(why)))
            fail_msg("the %s table: %s", tables[k]->name, why);
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    rrpci_config_print_as(fp, RRPCI_CONF_SCDOC, true);
    fclose(fp);
    assert_non_null(strstr(buf, "*RRPC\\_VERBS\\_EAGER* (default: 8192; 256..1048576)"));
    assert_non_null(strstr(buf, "*RRPC\\_KEEPALIVE\\_TIMEOUT\\_MS* (default: 0; 0..86400000)"));
    free(buf);
}

int main(void)
{
    unsetenv("RRPC_LOG_LEVEL");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_transports_tunables_are_listed_set_and_read_typed_by_it),
        cmocka_unit_test(test_core_tunables_land_in_their_typed_members),
        cmocka_unit_test(test_code_overrides_the_environment_which_overrides_the_default),
        cmocka_unit_test(test_a_value_out_of_range_names_the_range_and_changes_nothing),
        cmocka_unit_test(test_an_unknown_name_says_did_you_mean),
        cmocka_unit_test(test_a_text_tunable_is_never_read_from_the_environment),
        cmocka_unit_test(test_a_tunable_of_no_transport_compiled_in_is_unknown),
        cmocka_unit_test(test_every_table_has_defaults_within_its_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

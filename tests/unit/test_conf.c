/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/util/conf.c: typed configuration tables (the
 * library's tunables and rrpcd's settings are both made of them). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "util/conf.h"

struct demo {
    int ms;
    long big;
    uint32_t count;
    size_t bytes;
    bool on;
    int level;
    bool to_syslog;
    char path[16];
    char words[64]; /* CUSTOM: each line appended */
};

static int check_abs(const char *v, char *why, size_t whylen)
{
    if (v[0] && v[0] != '/') {
        snprintf(why, whylen, "an absolute path begins with /");
        return -EINVAL;
    }
    return 0;
}

static int add_word(void *obj, const char *v, char *why, size_t whylen)
{
    struct demo *d = obj;
    if (strchr(v, ' ')) {
        snprintf(why, whylen, "one word");
        return -EINVAL;
    }
    size_t n = strlen(d->words);
    snprintf(d->words + n, sizeof(d->words) - n, "%s%s", n ? "," : "", v);
    return 0;
}

static const char *const level_names[] = {"err", "info", "debug", NULL};
static const int level_values[] = {3, 6, 7};
static const char *const log_names[] = {"stderr", "syslog", NULL};

#define D struct demo
static const struct rrpci_conf_field demo_fields[] = {
    {.name = "DEMO_MS", RRPCI_CONF_INT(D, ms), .def = 5000, .min = -1, .max = 3600000,
     .doc = "a time, ms"},
    {.name = "DEMO_BIG", RRPCI_CONF_INT(D, big), .def = 1LL << 40, .min = 0, .max = 1LL << 50,
     .doc = "a large one"},
    {.name = "DEMO_COUNT", RRPCI_CONF_UINT(D, count), .def = 7, .min = 1, .max = 64,
     .doc = "how many"},
    {.name = "DEMO_BYTES", RRPCI_CONF_UINT(D, bytes), .def = 4096, .min = 0,
     .max = 0x7fffffffffffffffLL, .doc = "bytes"},
    {.name = "DEMO_ON", RRPCI_CONF_BOOL(D, on), .def = 1, .doc = "switch"},
    {.name = "DEMO_LEVEL", RRPCI_CONF_ENUM(D, level), .def = 6, .names = level_names,
     .values = level_values, .doc = "how much"},
    {.name = "DEMO_LOG", RRPCI_CONF_ENUM(D, to_syslog), .def = 0, .names = log_names,
     .doc = "where"},
    {.name = "DEMO_PATH", RRPCI_CONF_TEXT(D, path), .def_text = "/tmp", .check = check_abs,
     .doc = "a path_with *stars*"},
    {.name = "DEMO_WORDS", RRPCI_CONF_CUSTOM, .parse = add_word, .def_text = "first",
     .flags = RRPCI_CONF_REPEAT | RRPCI_CONF_NO_ENV, .doc = "words"},
};
#undef D
static const struct rrpci_conf_table demo = {
    .name = "demo",
    .prefix = "DEMO_",
    .fields = demo_fields,
    .nfields = RRPCI_CONF_NFIELDS(demo_fields),
    .size = sizeof(struct demo),
};

static struct demo defaults(void)
{
    struct demo d;
    memset(&d, 0x5a, sizeof(d));
    memset(d.words, 0, sizeof(d.words));
    assert_int_equal(rrpci_conf_defaults(&demo, &d), 0);
    return d;
}

static void test_each_type_stores_its_default_in_its_member(void **state)
{
    (void)state;
    struct demo d = defaults();
    assert_int_equal(d.ms, 5000);
    assert_true(d.big == 1L << 40);
    assert_int_equal(d.count, 7);
    assert_int_equal(d.bytes, 4096);
    assert_true(d.on);
    assert_int_equal(d.level, 6);
    assert_false(d.to_syslog);
    assert_string_equal(d.path, "/tmp");
    assert_string_equal(d.words, "first");
}

static void test_values_of_each_type_are_parsed_into_their_members(void **state)
{
    (void)state;
    struct demo d = defaults();
    char why[200];
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_MS", "-1", why, sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_BIG", "0x4000000000000", why, sizeof(why)),
                     0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_COUNT", "64", why, sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_BYTES", "9223372036854775807", why,
                                    sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_ON", "off", why, sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_LEVEL", "debug", why, sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_LOG", "syslog", why, sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_PATH", "/var/x", why, sizeof(why)), 0);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_WORDS", "second", why, sizeof(why)), 0);
    assert_int_equal(d.ms, -1);
    assert_true(d.big == 1LL << 50);
    assert_int_equal(d.count, 64);
    assert_true(d.bytes == 0x7fffffffffffffffULL);
    assert_false(d.on);
    assert_int_equal(d.level, 7);
    assert_true(d.to_syslog);
    assert_string_equal(d.path, "/var/x");
    assert_string_equal(d.words, "first,second");
    const struct rrpci_conf_field *f = rrpci_conf_find(&demo, "DEMO_LEVEL");
    assert_int_equal(rrpci_conf_number(f, &d), 7);
}

static void test_a_value_out_of_range_is_refused_naming_the_range_and_changes_nothing(void **s)
{
    (void)s;
    struct demo d = defaults(), before = d;
    char why[200];
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_COUNT", "65", why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "not a number from 1 to 64");
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_MS", "-2", why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "not a number from -1 to 3600000");
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_BIG", "99999999999999999999", why,
                                    sizeof(why)), -EINVAL);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_LEVEL", "warning", why, sizeof(why)),
                     -EINVAL);
    assert_string_equal(why, "not one of err, info, debug");
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_ON", "maybe", why, sizeof(why)), -EINVAL);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_PATH", "relative", why, sizeof(why)),
                     -EINVAL);
    assert_string_equal(why, "an absolute path begins with /");
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_PATH", "/a/path/too/long/for/it", why,
                                    sizeof(why)), -EINVAL);
    assert_string_equal(why, "longer than 15 bytes");
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_WORDS", "two words", why, sizeof(why)),
                     -EINVAL);
    assert_memory_equal(&d, &before, sizeof(d));
}

static void test_numbers_are_decimal_or_hex_never_octal_nor_partial(void **state)
{
    (void)state;
    struct demo d = defaults();
    char why[200];
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_COUNT", "010", why, sizeof(why)), 0);
    assert_int_equal(d.count, 10);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_COUNT", "0x20", why, sizeof(why)), 0);
    assert_int_equal(d.count, 32);
    static const char *const bad[] = {"", " 5", "5 ", "5k", "0x", "1e3", "-0x", "+"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_COUNT", bad[i], why, sizeof(why)),
                         -EINVAL);
    /* An unsigned member takes no sign, even where 0 is in range. */
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_BYTES", "-0", why, sizeof(why)), -EINVAL);
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_BYTES", "-1", why, sizeof(why)), -EINVAL);
}

static void test_a_name_is_found_in_any_case_and_without_its_prefix(void **state)
{
    (void)state;
    assert_ptr_equal(rrpci_conf_find(&demo, "demo_count"), &demo_fields[2]);
    assert_ptr_equal(rrpci_conf_find(&demo, "count"), &demo_fields[2]);
    assert_ptr_equal(rrpci_conf_find(&demo, "Count"), &demo_fields[2]);
    assert_null(rrpci_conf_find(&demo, "coun"));
    assert_null(rrpci_conf_find(&demo, NULL));
}

static void test_an_unknown_name_says_did_you_mean_the_closest(void **state)
{
    (void)state;
    struct demo d = defaults();
    char why[200];
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_CUONT", "3", why, sizeof(why)), -ENOENT);
    assert_string_equal(why, "did you mean DEMO_COUNT?"); /* a transposition is one edit */
    assert_int_equal(rrpci_conf_set(&demo, &d, "bytse", "3", why, sizeof(why)), -ENOENT);
    assert_string_equal(why, "did you mean DEMO_BYTES?");
    assert_int_equal(rrpci_conf_set(&demo, &d, "DEMO_LEVL", "info", why, sizeof(why)), -ENOENT);
    assert_string_equal(why, "did you mean DEMO_LEVEL?");
    assert_int_equal(rrpci_conf_set(&demo, &d, "something_else", "1", why, sizeof(why)),
                     -ENOENT);
    assert_string_equal(why, "no such name"); /* nothing close: no guess */
    assert_int_equal(rrpci_conf_distance("abc", "ABC"), 0);
    assert_int_equal(rrpci_conf_distance("ab", "ba"), 1);
    assert_int_equal(rrpci_conf_distance("kitten", "sitting"), 3);
    assert_int_equal(rrpci_conf_distance("", "abc"), 3);
}

static void test_the_environment_sets_values_and_a_bad_one_is_named(void **state)
{
    (void)state;
    struct demo d = defaults();
    char why[200];
    setenv("DEMO_COUNT", "12", 1);
    setenv("DEMO_LEVEL", "err", 1);
    setenv("DEMO_WORDS", "never", 1); /* RRPCI_CONF_NO_ENV */
    setenv("DEMO_MS", "", 1);         /* empty: the default stays */
    assert_int_equal(rrpci_conf_from_env(&demo, &d, why, sizeof(why)), 0);
    assert_int_equal(d.count, 12);
    assert_int_equal(d.level, 3);
    assert_string_equal(d.words, "first");
    assert_int_equal(d.ms, 5000);
    setenv("DEMO_COUNT", "100", 1);
    assert_int_equal(rrpci_conf_from_env(&demo, &d, why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "DEMO_COUNT=\"100\": not a number from 1 to 64");
    unsetenv("DEMO_COUNT");
    unsetenv("DEMO_LEVEL");
    unsetenv("DEMO_WORDS");
    unsetenv("DEMO_MS");
}

static char *print(enum rrpci_conf_style style)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    rrpci_conf_print(&demo, f, style);
    fclose(f);
    return buf;
}

static void test_the_printed_table_has_every_field_default_and_range(void **state)
{
    (void)state;
    char *plain = print(RRPCI_CONF_PLAIN), *scd = print(RRPCI_CONF_SCDOC);
    for (size_t i = 0; i < demo.nfields; i++)
        assert_non_null(strstr(plain, demo_fields[i].name));
    assert_non_null(strstr(plain, " default: 7; 1..64\n    how many\n"));
    assert_non_null(strstr(plain, " default: first; repeatable\n    words (set from code only"));
    /* scdoc: names bold, formatting characters of the text escaped. */
    assert_non_null(strstr(scd, "*DEMO\\_COUNT* (default: 7; 1..64)\n\thow many\n"));
    assert_non_null(strstr(scd, "*DEMO\\_LEVEL* (default: info; err, info or debug)\n"));
    assert_non_null(strstr(scd, "*DEMO\\_ON* (default: yes; yes or no)\n"));
    assert_non_null(strstr(scd, "a path\\_with \\*stars\\*"));
    free(plain);
    free(scd);
}

static void test_a_table_with_a_default_it_refuses_or_a_name_twice_fails_its_check(void **s)
{
    (void)s;
    char why[200];
    assert_int_equal(rrpci_conf_check_table(&demo, why, sizeof(why)), 0);
    struct rrpci_conf_field bad[3] = {demo_fields[0], demo_fields[5], demo_fields[7]};
    struct rrpci_conf_table t = demo;
    t.fields = bad;
    t.nfields = 3;
    assert_int_equal(rrpci_conf_check_table(&t, why, sizeof(why)), 0);
    bad[0].def = 3600001; /* above its max */
    assert_int_equal(rrpci_conf_check_table(&t, why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "DEMO_MS: its default is not a value it takes");
    bad[0] = demo_fields[0];
    bad[1].def = 4; /* no word stores 4 */
    assert_int_equal(rrpci_conf_check_table(&t, why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "DEMO_LEVEL: its default is not a value it takes");
    bad[1] = demo_fields[5];
    bad[2].def_text = "/a/default/too/long";
    assert_int_equal(rrpci_conf_check_table(&t, why, sizeof(why)), -EINVAL);
    bad[2] = demo_fields[7];
    bad[2].name = "ms"; /* DEMO_MS's short form */
    assert_int_equal(rrpci_conf_check_table(&t, why, sizeof(why)), -EINVAL);
    assert_string_equal(why, "ms: another field has its name");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_type_stores_its_default_in_its_member),
        cmocka_unit_test(test_values_of_each_type_are_parsed_into_their_members),
        cmocka_unit_test(test_a_value_out_of_range_is_refused_naming_the_range_and_changes_nothing),
        cmocka_unit_test(test_numbers_are_decimal_or_hex_never_octal_nor_partial),
        cmocka_unit_test(test_a_name_is_found_in_any_case_and_without_its_prefix),
        cmocka_unit_test(test_an_unknown_name_says_did_you_mean_the_closest),
        cmocka_unit_test(test_the_environment_sets_values_and_a_bad_one_is_named),
        cmocka_unit_test(test_the_printed_table_has_every_field_default_and_range),
        cmocka_unit_test(test_a_table_with_a_default_it_refuses_or_a_name_twice_fails_its_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

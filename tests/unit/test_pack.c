/* SPDX-License-Identifier: MIT */
/* Unit tests of the msgpack helpers rrpc_pack / rrpc_unpack (libroce_rpc/core/pack.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <roce_rpc/error.h>
#include <roce_rpc/pack.h>

#define SENT_I ((int64_t)0x5A5A5A5A5A5A5A5Aull)
#define SENT_U 0xA5A5A5A5A5A5A5A5ull
#define SENT_D (-12345.678)
#define SENT_B 77
static const char sentinel_str[] = "sentinel";

/* Outputs of the "iudbsyn" format, preset to sentinels. */
struct outs {
    int64_t i;
    uint64_t u;
    double d;
    int b;
    const char *s;
    size_t slen;
    const void *y;
    size_t ylen;
};

static struct outs sentinels(void)
{
    struct outs o = {SENT_I, SENT_U, SENT_D, SENT_B, sentinel_str, 999, sentinel_str, 888};
    return o;
}

static void assert_untouched(const struct outs *o)
{
    assert_true(o->i == SENT_I);
    assert_true(o->u == SENT_U);
    assert_true(o->d == SENT_D);
    assert_int_equal(o->b, SENT_B);
    assert_ptr_equal(o->s, sentinel_str);
    assert_int_equal(o->slen, 999);
    assert_ptr_equal(o->y, sentinel_str);
    assert_int_equal(o->ylen, 888);
}

static int unpack_all(const void *buf, size_t len, char *eb, size_t el, struct outs *o)
{
    return rrpc_unpack(buf, len, eb, el, "iudbsyn", &o->i, &o->u, &o->d, &o->b, &o->s, &o->slen,
                       &o->y, &o->ylen);
}

/* ---- round trips ---------------------------------------------------------- */

static void test_every_type_round_trips(void **state)
{
    (void)state;
    static const uint8_t bytes[] = {0, 1, 2, 0, 0xFF};
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(rrpc_pack(&buf, &len, "iudbsyn", (int64_t)-42, (uint64_t)42, 3.25, 1,
                               "héllo", (const void *)bytes, sizeof(bytes)),
                     0);
    assert_non_null(buf);
    assert_true(len > 0);
    struct outs o = sentinels();
    char eb[128] = "";
    assert_int_equal(unpack_all(buf, len, eb, sizeof(eb), &o), 0);
    assert_true(o.i == -42);
    assert_true(o.u == 42);
    assert_true(o.d == 3.25);
    assert_int_equal(o.b, 1);
    assert_int_equal(o.slen, strlen("héllo"));
    assert_memory_equal(o.s, "héllo", o.slen);
    assert_int_equal(o.ylen, sizeof(bytes));
    assert_memory_equal(o.y, bytes, sizeof(bytes));
    /* No copies: strings and bytes point into the input. */
    assert_true((const char *)o.s >= (const char *)buf && o.s + o.slen <= (const char *)buf + len);
    assert_true((const char *)o.y >= (const char *)buf &&
                (const char *)o.y + o.ylen <= (const char *)buf + len);
    free(buf);
}

static void test_integer_extremes_round_trip(void **state)
{
    (void)state;
    static const int64_t iv[] = {INT64_MIN, INT64_MIN + 1, -129, -33, -32, -1, 0, 1,
                                 127,       128,           255,  65536, INT64_MAX};
    static const uint64_t uv[] = {0, 127, 128, 255, 256, 65535, 65536, UINT32_MAX,
                                  (uint64_t)UINT32_MAX + 1, (uint64_t)INT64_MAX + 1, UINT64_MAX};
    for (size_t k = 0; k < sizeof(iv) / sizeof(iv[0]); k++) {
        void *buf;
        size_t len;
        assert_int_equal(rrpc_pack(&buf, &len, "i", iv[k]), 0);
        int64_t out = SENT_I;
        assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "i", &out), 0);
        assert_true(out == iv[k]);
        free(buf);
    }
    for (size_t k = 0; k < sizeof(uv) / sizeof(uv[0]); k++) {
        void *buf;
        size_t len;
        assert_int_equal(rrpc_pack(&buf, &len, "u", uv[k]), 0);
        uint64_t out = SENT_U;
        assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "u", &out), 0);
        assert_true(out == uv[k]);
        free(buf);
    }
}

static void test_doubles_round_trip_bit_exactly(void **state)
{
    (void)state;
    static const double dv[] = {0.0, -0.0, 1e-308, 5e-324, 1.7976931348623157e308, -2.5,
                                INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof(dv) / sizeof(dv[0]); k++) {
        void *buf;
        size_t len;
        assert_int_equal(rrpc_pack(&buf, &len, "d", dv[k]), 0);
        double out = SENT_D;
        assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "d", &out), 0);
        assert_memory_equal(&out, &dv[k], sizeof(double));
        free(buf);
    }
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "d", NAN), 0);
    double out = 0;
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "d", &out), 0);
    assert_true(isnan(out));
    free(buf);
}

static void test_false_and_nonzero_bools_round_trip_as_0_and_1(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "bbb", 0, 1, 42), 0);
    int a = SENT_B, b = SENT_B, c = SENT_B;
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "bbb", &a, &b, &c), 0);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(c, 1);
    free(buf);
}

static void test_empty_string_and_empty_bytes_round_trip(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "sy", "", (const void *)NULL, (size_t)0), 0);
    const char *s = sentinel_str;
    size_t slen = 999, ylen = 888;
    const void *y = sentinel_str;
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "sy", &s, &slen, &y, &ylen), 0);
    assert_int_equal(slen, 0);
    assert_int_equal(ylen, 0);
    free(buf);
}

static void test_large_string_and_bytes_round_trip(void **state)
{
    (void)state;
    size_t n = 100000;
    char *str = malloc(n + 1);
    uint8_t *bin = malloc(n);
    assert_non_null(str);
    assert_non_null(bin);
    for (size_t k = 0; k < n; k++) {
        str[k] = (char)('a' + k % 26);
        bin[k] = (uint8_t)(k * 7);
    }
    str[n] = 0;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "sy", str, (const void *)bin, n), 0);
    const char *s;
    size_t slen, ylen;
    const void *y;
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "sy", &s, &slen, &y, &ylen), 0);
    assert_int_equal(slen, n);
    assert_memory_equal(s, str, n);
    assert_int_equal(ylen, n);
    assert_memory_equal(y, bin, n);
    free(buf);
    free(str);
    free(bin);
}

static void test_empty_format_round_trips_as_empty_array(void **state)
{
    (void)state;
    void *buf = NULL;
    size_t len = 99;
    assert_int_equal(rrpc_pack(&buf, &len, ""), 0);
    assert_non_null(buf);
    assert_int_equal(len, 1);
    assert_int_equal(((uint8_t *)buf)[0], 0x90); /* fixarray of 0 */
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, ""), 0);
    free(buf);
}

static void test_pack_writes_a_standard_msgpack_array(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "uisbn", (uint64_t)1, (int64_t)-1, "ab", 1), 0);
    static const uint8_t want[] = {0x95, 0x01, 0xFF, 0xA2, 'a', 'b', 0xC3, 0xC0};
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
    free(buf);
}

static void test_int_accepts_a_positive_integer_up_to_int64_max(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "u", (uint64_t)INT64_MAX), 0);
    int64_t out = SENT_I;
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "i", &out), 0);
    assert_true(out == INT64_MAX);
    free(buf);
}

static void test_double_accepts_a_float32(void **state)
{
    (void)state;
    static const uint8_t f32[] = {0x91, 0xCA, 0x40, 0x20, 0x00, 0x00}; /* [2.5f] */
    double out = SENT_D;
    assert_int_equal(rrpc_unpack(f32, sizeof(f32), NULL, 0, "d", &out), 0);
    assert_true(out == 2.5);
}

/* ---- errors ----------------------------------------------------------------- */

static void test_wrong_type_is_refused_naming_the_argument_index(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    /* Element 4 is a bool where a string is expected. */
    assert_int_equal(rrpc_pack(&buf, &len, "iudbbyn", (int64_t)1, (uint64_t)2, 3.0, 1, 0,
                               (const void *)"x", (size_t)1),
                     0);
    struct outs o = sentinels();
    char eb[128] = "";
    assert_int_equal(unpack_all(buf, len, eb, sizeof(eb), &o), RRPC_E_ARGS);
    assert_string_equal(eb, "argument 4: expected string, found bool");
    assert_untouched(&o); /* the first four matched, yet none was written */
    free(buf);
}

static void test_each_type_mismatch_names_both_types(void **state)
{
    (void)state;
    static const struct {
        const char *pack_fmt, *unpack_fmt, *msg;
    } cases[] = {
        {"s", "i", "argument 0: expected int64, found string"},
        {"i", "u", "argument 0: expected uint64, found negative integer"},
        {"u", "d", "argument 0: expected double, found unsigned integer"},
        {"d", "b", "argument 0: expected bool, found float"},
        {"y", "s", "argument 0: expected string, found bytes"},
        {"s", "y", "argument 0: expected bytes, found string"},
        {"b", "n", "argument 0: expected nil, found bool"},
        {"n", "i", "argument 0: expected int64, found nil"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        void *buf;
        size_t len;
        /* Pack one value of the type named by pack_fmt. */
        int r;
        switch (cases[k].pack_fmt[0]) {
        case 's': r = rrpc_pack(&buf, &len, "s", "str"); break;
        case 'i': r = rrpc_pack(&buf, &len, "i", (int64_t)-5); break;
        case 'u': r = rrpc_pack(&buf, &len, "u", (uint64_t)5); break;
        case 'd': r = rrpc_pack(&buf, &len, "d", 1.5); break;
        case 'y': r = rrpc_pack(&buf, &len, "y", (const void *)"ab", (size_t)2); break;
        case 'b': r = rrpc_pack(&buf, &len, "b", 1); break;
        default: r = rrpc_pack(&buf, &len, "n"); break;
        }
        assert_int_equal(r, 0);
        struct outs o = sentinels();
        char eb[128] = "";
        void *p1 = NULL, *p2 = NULL;
        switch (cases[k].unpack_fmt[0]) {
        case 'i': p1 = &o.i; break;
        case 'u': p1 = &o.u; break;
        case 'd': p1 = &o.d; break;
        case 'b': p1 = &o.b; break;
        case 's': p1 = &o.s; p2 = &o.slen; break;
        case 'y': p1 = &o.y; p2 = &o.ylen; break;
        default: break;
        }
        assert_int_equal(rrpc_unpack(buf, len, eb, sizeof(eb), cases[k].unpack_fmt, p1, p2),
                         RRPC_E_ARGS);
        assert_string_equal(eb, cases[k].msg);
        assert_untouched(&o);
        free(buf);
    }
}

static void test_integer_above_int64_max_is_refused_for_int(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "iu", (int64_t)0, (uint64_t)INT64_MAX + 1), 0);
    int64_t a = SENT_I, b = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(buf, len, eb, sizeof(eb), "ii", &a, &b), RRPC_E_ARGS);
    assert_string_equal(eb, "argument 1: expected int64, found unsigned integer above INT64_MAX");
    assert_true(a == SENT_I);
    assert_true(b == SENT_I);
    free(buf);
}

static void test_too_few_elements_are_refused(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "ii", (int64_t)1, (int64_t)2), 0);
    int64_t a = SENT_I, b = SENT_I, c = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(buf, len, eb, sizeof(eb), "iii", &a, &b, &c), RRPC_E_ARGS);
    assert_string_equal(eb, "expected 3 arguments, found 2");
    assert_true(a == SENT_I && b == SENT_I && c == SENT_I);
    free(buf);
}

static void test_too_many_elements_are_refused(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "iii", (int64_t)1, (int64_t)2, (int64_t)3), 0);
    int64_t a = SENT_I, b = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(buf, len, eb, sizeof(eb), "ii", &a, &b), RRPC_E_ARGS);
    assert_string_equal(eb, "expected 2 arguments, found 3");
    assert_true(a == SENT_I && b == SENT_I);
    free(buf);
}

static void test_truncated_data_is_refused(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "iudbsyn", (int64_t)-7, (uint64_t)7, 7.5, 0, "seven",
                               (const void *)"7777777", (size_t)7),
                     0);
    /* Every proper prefix is refused, and writes nothing. */
    for (size_t cut = 0; cut < len; cut++) {
        struct outs o = sentinels();
        char eb[128] = "";
        assert_int_equal(unpack_all(buf, cut, eb, sizeof(eb), &o), RRPC_E_ARGS);
        assert_string_equal(eb, "truncated msgpack data");
        assert_untouched(&o);
    }
    free(buf);
}

static void test_trailing_bytes_are_refused(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "i", (int64_t)5), 0);
    uint8_t *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, buf, len);
    longer[len] = 0xC0; /* a whole extra nil */
    int64_t out = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(longer, len + 1, eb, sizeof(eb), "i", &out), RRPC_E_ARGS);
    assert_string_equal(eb, "trailing bytes after the arguments");
    assert_true(out == SENT_I);
    free(longer);
    free(buf);
}

static void test_a_value_that_is_not_an_array_is_refused(void **state)
{
    (void)state;
    static const uint8_t fixint[] = {0x2A};                /* 42 */
    static const uint8_t map[] = {0x81, 0xA1, 'k', 0x01}; /* {"k": 1} */
    int64_t out = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(fixint, sizeof(fixint), eb, sizeof(eb), "i", &out),
                     RRPC_E_ARGS);
    assert_non_null(strstr(eb, "expected an array"));
    assert_non_null(strstr(eb, "found unsigned integer"));
    assert_true(out == SENT_I);
    assert_int_equal(rrpc_unpack(map, sizeof(map), eb, sizeof(eb), "i", &out), RRPC_E_ARGS);
    assert_non_null(strstr(eb, "expected an array"));
    assert_non_null(strstr(eb, "found map"));
    assert_true(out == SENT_I);
}

static void test_nested_containers_are_refused_as_elements(void **state)
{
    (void)state;
    static const uint8_t nested[] = {0x92, 0x01, 0x91, 0x02}; /* [1, [2]] */
    int64_t a = SENT_I, b = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(nested, sizeof(nested), eb, sizeof(eb), "ii", &a, &b),
                     RRPC_E_ARGS);
    assert_string_equal(eb, "argument 1: expected int64, found array");
    assert_true(a == SENT_I && b == SENT_I);
}

static void test_bytes_that_are_not_msgpack_are_refused(void **state)
{
    (void)state;
    static const uint8_t bad[] = {0xC1}; /* never used in msgpack */
    int64_t out = SENT_I;
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(bad, sizeof(bad), eb, sizeof(eb), "i", &out), RRPC_E_ARGS);
    assert_string_equal(eb, "not msgpack data");
    assert_true(out == SENT_I);
}

static void test_an_empty_buffer_is_refused(void **state)
{
    (void)state;
    static const uint8_t one[] = {0};
    char eb[128] = "";
    assert_int_equal(rrpc_unpack(one, 0, eb, sizeof(eb), ""), RRPC_E_ARGS);
    assert_int_equal(rrpc_unpack(NULL, 0, NULL, 0, ""), RRPC_E_ARGS);
}

static void test_error_message_is_truncated_to_errbuf_and_optional(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(&buf, &len, "s", "x"), 0);
    int64_t out = SENT_I;
    char eb[12];
    memset(eb, 'Z', sizeof(eb));
    assert_int_equal(rrpc_unpack(buf, len, eb, sizeof(eb), "i", &out), RRPC_E_ARGS);
    assert_string_equal(eb, "argument 0:"); /* 11 chars + NUL */
    memset(eb, 'Z', sizeof(eb));
    assert_int_equal(rrpc_unpack(buf, len, eb, 0, "i", &out), RRPC_E_ARGS);
    assert_int_equal(eb[0], 'Z'); /* errlen 0: nothing written */
    assert_int_equal(rrpc_unpack(buf, len, NULL, 0, "i", &out), RRPC_E_ARGS);
    assert_true(out == SENT_I);
    free(buf);
}

static void test_unknown_format_characters_are_invalid(void **state)
{
    (void)state;
    void *buf = (void *)sentinel_str;
    size_t len = 123;
    assert_int_equal(rrpc_pack(&buf, &len, "ix", (int64_t)1), -EINVAL);
    assert_ptr_equal(buf, sentinel_str);
    assert_int_equal(len, 123);
    static const uint8_t arr[] = {0x91, 0x01};
    int64_t out = SENT_I;
    assert_int_equal(rrpc_unpack(arr, sizeof(arr), NULL, 0, "x", &out), -EINVAL);
    assert_int_equal(rrpc_unpack(arr, sizeof(arr), NULL, 0, "I", &out), -EINVAL);
    assert_true(out == SENT_I);
}

static void test_null_arguments_are_invalid(void **state)
{
    (void)state;
    void *buf;
    size_t len;
    assert_int_equal(rrpc_pack(NULL, &len, "i", (int64_t)1), -EINVAL);
    assert_int_equal(rrpc_pack(&buf, NULL, "i", (int64_t)1), -EINVAL);
    assert_int_equal(rrpc_pack(&buf, &len, NULL), -EINVAL);
    assert_int_equal(rrpc_unpack(NULL, 4, NULL, 0, "i", NULL), -EINVAL);
    static const uint8_t arr[] = {0x90};
    assert_int_equal(rrpc_unpack(arr, sizeof(arr), NULL, 0, NULL), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type_round_trips),
        cmocka_unit_test(test_integer_extremes_round_trip),
        cmocka_unit_test(test_doubles_round_trip_bit_exactly),
        cmocka_unit_test(test_false_and_nonzero_bools_round_trip_as_0_and_1),
        cmocka_unit_test(test_empty_string_and_empty_bytes_round_trip),
        cmocka_unit_test(test_large_string_and_bytes_round_trip),
        cmocka_unit_test(test_empty_format_round_trips_as_empty_array),
        cmocka_unit_test(test_pack_writes_a_standard_msgpack_array),
        cmocka_unit_test(test_int_accepts_a_positive_integer_up_to_int64_max),
        cmocka_unit_test(test_double_accepts_a_float32),
        cmocka_unit_test(test_wrong_type_is_refused_naming_the_argument_index),
        cmocka_unit_test(test_each_type_mismatch_names_both_types),
        cmocka_unit_test(test_integer_above_int64_max_is_refused_for_int),
        cmocka_unit_test(test_too_few_elements_are_refused),
        cmocka_unit_test(test_too_many_elements_are_refused),
        cmocka_unit_test(test_truncated_data_is_refused),
        cmocka_unit_test(test_trailing_bytes_are_refused),
        cmocka_unit_test(test_a_value_that_is_not_an_array_is_refused),
        cmocka_unit_test(test_nested_containers_are_refused_as_elements),
        cmocka_unit_test(test_bytes_that_are_not_msgpack_are_refused),
        cmocka_unit_test(test_an_empty_buffer_is_refused),
        cmocka_unit_test(test_error_message_is_truncated_to_errbuf_and_optional),
        cmocka_unit_test(test_unknown_format_characters_are_invalid),
        cmocka_unit_test(test_null_arguments_are_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

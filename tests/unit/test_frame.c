/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/frame.c: the wire header, the one-sided
 * sub-header, the handshake record and the metadata block. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <roce_rpc/error.h>

#include "core/frame.h"

#define MAX_LEN (64u << 20)

/* A valid header with a distinct value in every field. */
static struct rrpci_hdr sample_hdr(void)
{
    struct rrpci_hdr h = {
        .version = RRPCI_PROTO_VERSION,
        .type = RRPCI_T_OS_WRITE,
        .cls = 3,
        .flags = RRPCI_F_NOTIFY,
        .id = 0x0102030405060708ull,
        .arg = 0xF1E2D3C4B5A69788ull,
        .len = 0x00ABCDEFu,
        .credits = 0xBEEF,
    };
    return h;
}

static void encode_sample(uint8_t out[RRPCI_HDR_SIZE])
{
    struct rrpci_hdr h = sample_hdr();
    rrpci_hdr_encode(&h, out);
}

static int decode(const uint8_t in[RRPCI_HDR_SIZE], uint32_t max_len)
{
    struct rrpci_hdr h;
    const char *why = NULL;
    int r = rrpci_hdr_decode(in, max_len, &h, &why);
    if (r != 0)
        assert_non_null(why); /* every rejection explains itself */
    return r;
}

/* ---- header: round trip and layout ------------------------------------ */

static void test_header_round_trips_every_field(void **state)
{
    (void)state;
    struct rrpci_hdr in = sample_hdr(), out;
    memset(&out, 0xAA, sizeof(out));
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&in, buf);
    const char *why = "untouched";
    assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, &why), 0);
    assert_int_equal(out.version, in.version);
    assert_int_equal(out.type, in.type);
    assert_int_equal(out.cls, in.cls);
    assert_int_equal(out.flags, in.flags);
    assert_int_equal(out.id, in.id);
    assert_int_equal(out.arg, in.arg);
    assert_int_equal(out.len, in.len);
    assert_int_equal(out.credits, in.credits);
}

static void test_header_round_trips_extreme_values(void **state)
{
    (void)state;
    struct rrpci_hdr in = {.version = RRPCI_PROTO_VERSION, .type = RRPCI_T_MAX_ - 1,
                           .cls = 0, .flags = 0, .id = UINT64_MAX, .arg = 0,
                           .len = 0, .credits = UINT16_MAX};
    struct rrpci_hdr out;
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&in, buf);
    assert_int_equal(rrpci_hdr_decode(buf, 0, &out, NULL), 0);
    assert_int_equal(out.type, RRPCI_T_MAX_ - 1);
    assert_int_equal(out.id, UINT64_MAX);
    assert_int_equal(out.arg, 0);
    assert_int_equal(out.len, 0);
    assert_int_equal(out.credits, UINT16_MAX);
}

static void test_header_is_little_endian_at_documented_offsets(void **state)
{
    (void)state;
    uint8_t buf[RRPCI_HDR_SIZE];
    memset(buf, 0x55, sizeof(buf)); /* the encoder must write every byte */
    encode_sample(buf);
    static const uint8_t want[RRPCI_HDR_SIZE] = {
        'R', 'R', 'P', 'C',                             /* 0 magic */
        RRPCI_PROTO_VERSION, RRPCI_T_OS_WRITE, 3, 0x01, /* 4 version type class flags */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* 8 id */
        0x88, 0x97, 0xA6, 0xB5, 0xC4, 0xD3, 0xE2, 0xF1, /* 16 arg */
        0xEF, 0xCD, 0xAB, 0x00,                         /* 24 len */
        0xEF, 0xBE,                                     /* 28 credits */
        0x00, 0x00,                                     /* 30 reserved */
    };
    assert_memory_equal(buf, want, RRPCI_HDR_SIZE);
}

/* ---- header: length boundaries ---------------------------------------- */

static void test_header_accepts_len_equal_to_max(void **state)
{
    (void)state;
    struct rrpci_hdr h = sample_hdr(), out;
    h.len = MAX_LEN;
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, NULL), 0);
    assert_int_equal(out.len, MAX_LEN);
}

static void test_header_rejects_len_one_above_max_with_too_big(void **state)
{
    (void)state;
    struct rrpci_hdr h = sample_hdr();
    h.len = MAX_LEN + 1;
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(decode(buf, MAX_LEN), RRPC_E_TOO_BIG);
}

static void test_header_rejects_all_ones_length_with_too_big(void **state)
{
    (void)state;
    struct rrpci_hdr h = sample_hdr();
    h.len = 0xFFFFFFFFu;
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(decode(buf, MAX_LEN), RRPC_E_TOO_BIG);
    assert_int_equal(decode(buf, 0xFFFFFFFEu), RRPC_E_TOO_BIG);
    assert_int_equal(decode(buf, 0xFFFFFFFFu), 0);
}

static void test_header_with_zero_max_accepts_only_empty_payloads(void **state)
{
    (void)state;
    struct rrpci_hdr h = sample_hdr();
    uint8_t buf[RRPCI_HDR_SIZE];
    h.len = 0;
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(decode(buf, 0), 0);
    h.len = 1;
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(decode(buf, 0), RRPC_E_TOO_BIG);
}

/* ---- header: validation of each field --------------------------------- */

static void test_header_rejects_wrong_magic_with_proto(void **state)
{
    (void)state;
    for (int i = 0; i < 4; i++) {
        uint8_t buf[RRPCI_HDR_SIZE];
        encode_sample(buf);
        buf[i] ^= 0x20; /* "rRPC", "RrPC", ... */
        const char *why = NULL;
        struct rrpci_hdr h;
        assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &h, &why), RRPC_E_PROTO);
        assert_non_null(strstr(why, "magic"));
    }
    uint8_t zeros[RRPCI_HDR_SIZE] = {0};
    assert_int_equal(decode(zeros, MAX_LEN), RRPC_E_PROTO);
}

static void test_header_rejects_other_versions_with_version(void **state)
{
    (void)state;
    static const uint8_t versions[] = {0, RRPCI_PROTO_VERSION + 1, 0x80, 0xFF};
    for (size_t i = 0; i < sizeof(versions); i++) {
        struct rrpci_hdr h = sample_hdr();
        h.version = versions[i];
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        assert_int_equal(decode(buf, MAX_LEN), RRPC_E_VERSION);
    }
}

static void test_header_of_newer_version_reports_version_even_with_unknown_type(void **state)
{
    (void)state;
    /* A newer peer may use types we do not know: the useful diagnosis is the version. */
    struct rrpci_hdr h = sample_hdr();
    h.version = RRPCI_PROTO_VERSION + 1;
    h.type = 200;
    h.flags = 0x80;
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(decode(buf, MAX_LEN), RRPC_E_VERSION);
}

static void test_header_accepts_every_known_type(void **state)
{
    (void)state;
    for (int t = 1; t < RRPCI_T_MAX_; t++) {
        struct rrpci_hdr h = sample_hdr(), out;
        h.type = (uint8_t)t;
        if (rrpci_type_is_exempt(h.type))
            h.len = rrpci_exempt_max_len(h.type); /* the largest it may carry */
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, NULL), 0);
        assert_int_equal(out.type, t);
        assert_int_equal(out.len, h.len);
    }
}

/* No credit bounds a control frame, so its type does: a KEEPALIVE that claims
 * a payload, or an ERROR that claims 64 MiB, is refused from the header. */
static void test_header_refuses_a_control_frame_longer_than_its_type_allows(void **state)
{
    (void)state;
    int n = 0;
    for (int t = 1; t < RRPCI_T_MAX_; t++) {
        if (!rrpci_type_is_exempt((uint8_t)t))
            continue;
        n++;
        struct rrpci_hdr h = sample_hdr(), out;
        h.type = (uint8_t)t;
        h.len = rrpci_exempt_max_len(h.type) + 1;
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        const char *why = NULL;
        assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, &why), RRPC_E_PROTO);
        assert_non_null(why);
    }
    assert_int_equal(n, 12);
    struct rrpci_hdr h = sample_hdr(), out;
    h.type = RRPCI_T_KEEPALIVE;
    h.len = 1;
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, NULL), RRPC_E_PROTO);
    h.type = RRPCI_T_ERROR;
    h.len = 64u << 20;
    rrpci_hdr_encode(&h, buf);
    assert_int_equal(rrpci_hdr_decode(buf, UINT32_MAX, &out, NULL), RRPC_E_PROTO);
}

static void test_header_rejects_type_zero_and_types_from_max_with_proto(void **state)
{
    (void)state;
    int bad[] = {0, RRPCI_T_MAX_, RRPCI_T_MAX_ + 1, 0x7F, 0xFF};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rrpci_hdr h = sample_hdr();
        h.type = (uint8_t)bad[i];
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        assert_int_equal(decode(buf, MAX_LEN), RRPC_E_PROTO);
    }
}

static void test_header_accepts_classes_0_to_3(void **state)
{
    (void)state;
    for (int c = 0; c < RRPCI_MAX_CLASSES; c++) {
        struct rrpci_hdr h = sample_hdr(), out;
        h.cls = (uint8_t)c;
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, NULL), 0);
        assert_int_equal(out.cls, c);
    }
}

static void test_header_rejects_class_4_and_above_with_bad_class(void **state)
{
    (void)state;
    int bad[] = {4, 5, 0x80, 0xFF};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rrpci_hdr h = sample_hdr();
        h.cls = (uint8_t)bad[i];
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        assert_int_equal(decode(buf, MAX_LEN), RRPC_E_BAD_CLASS);
    }
}

static void test_header_rejects_each_unknown_flag_bit_with_proto(void **state)
{
    (void)state;
    for (int bit = 0; bit < 8; bit++) {
        uint8_t f = (uint8_t)(1u << bit);
        struct rrpci_hdr h = sample_hdr();
        h.flags = f;
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        /* the sample is an OS_WRITE: NOTIFY is its flag, LAST any credited
         * frame's, META is not */
        assert_int_equal(decode(buf, MAX_LEN),
                         f == RRPCI_F_NOTIFY || f == RRPCI_F_LAST ? 0 : RRPC_E_PROTO);
    }
    assert_int_equal(RRPCI_F_ALL_, RRPCI_F_NOTIFY | RRPCI_F_META | RRPCI_F_LAST); /* known */
}

static void test_header_takes_the_last_credit_flag_only_on_credited_frames(void **state)
{
    (void)state;
    for (int t = 1; t < RRPCI_T_MAX_; t++) {
        struct rrpci_hdr h = sample_hdr();
        h.type = (uint8_t)t;
        h.flags = RRPCI_F_LAST;
        h.len = 0;
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        assert_int_equal(decode(buf, MAX_LEN), rrpci_type_is_exempt((uint8_t)t) ? RRPC_E_PROTO : 0);
    }
}

static void test_header_takes_the_metadata_flag_only_on_requests_and_responses(void **state)
{
    (void)state;
    for (int t = 1; t < RRPCI_T_MAX_; t++) {
        struct rrpci_hdr h = sample_hdr();
        h.type = (uint8_t)t;
        h.flags = RRPCI_F_META;
        h.len = 0;
        uint8_t buf[RRPCI_HDR_SIZE];
        rrpci_hdr_encode(&h, buf);
        bool rpc = t == RRPCI_T_REQUEST || t == RRPCI_T_RESPONSE;
        assert_int_equal(decode(buf, MAX_LEN), rpc ? 0 : RRPC_E_PROTO);
    }
}

/* ---- metadata block ---------------------------------------------------- */

static int meta_decode(const uint8_t *p, size_t len, struct rrpci_meta_view *v, size_t *size)
{
    char why[200] = "";
    int r = rrpci_meta_decode(p, len, v, size, why, sizeof(why));
    if (r)
        assert_true(why[0] != 0); /* every refusal says why */
    return r;
}

static void test_metadata_round_trips_at_documented_offsets(void **state)
{
    (void)state;
    const rrpc_meta in[] = {
        {.key = "traceparent",
         .value = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
         .len = 55},
        {.key = "empty", .value = NULL, .len = 0},
        {.key = "bin", .value = "\0\xff\n", .len = 3},
    };
    size_t size = 0;
    char why[200];
    assert_int_equal(rrpci_meta_check(in, 3, &size, why, sizeof(why)), 0);
    assert_int_equal(size, 4 + 3 * 3 + 11 + 55 + 5 + 0 + 3 + 3);
    uint8_t buf[256 + 7];
    rrpci_meta_encode(in, 3, buf);
    memcpy(buf + size, "payload", 7); /* the application's bytes follow */
    /* head: size u16, count u8, reserved u8; entry: key length u8, value length u16 */
    assert_int_equal(rrpci_get16(buf), size);
    assert_int_equal(buf[2], 3);
    assert_int_equal(buf[3], 0);
    assert_int_equal(buf[4], 11);
    assert_int_equal(rrpci_get16(buf + 5), 55);
    assert_memory_equal(buf + 7, "traceparent", 11);
    assert_memory_equal(buf + 18, "00-0af7", 7);
    struct rrpci_meta_view v;
    size_t got = 0;
    assert_int_equal(meta_decode(buf, size + 7, &v, &got), 0);
    assert_int_equal(got, size);
    assert_int_equal(v.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(v.e[i].key, in[i].key);
        assert_int_equal(v.e[i].len, in[i].len);
        if (in[i].len)
            assert_memory_equal(v.e[i].value, in[i].value, in[i].len);
        assert_int_equal(((const char *)v.e[i].value)[in[i].len], 0); /* NUL-terminated */
    }
    assert_ptr_equal(rrpc_meta_find(v.e, v.n, "bin"), &v.e[2]);
    assert_null(rrpc_meta_find(v.e, v.n, "Bin"));
}

static void test_metadata_holds_the_largest_block_the_bounds_allow(void **state)
{
    (void)state;
    static char keys[RRPC_META_MAX_ENTRIES][RRPC_META_MAX_KEY + 1];
    static char val[RRPC_META_MAX_VALUE];
    memset(val, 'v', sizeof(val));
    rrpc_meta in[RRPC_META_MAX_ENTRIES];
    /* 16 keys of 64 bytes and values to fill 4096 bytes exactly */
    size_t left = RRPC_META_MAX_BYTES - RRPC_META_MAX_ENTRIES * RRPC_META_MAX_KEY;
    for (int i = 0; i < RRPC_META_MAX_ENTRIES; i++) {
        memset(keys[i], 'k', RRPC_META_MAX_KEY);
        keys[i][0] = (char)('a' + i);
        in[i] = (rrpc_meta){.key = keys[i], .value = val, .len = left / RRPC_META_MAX_ENTRIES};
    }
    size_t size = 0;
    char why[200];
    assert_int_equal(rrpci_meta_check(in, RRPC_META_MAX_ENTRIES, &size, why, sizeof(why)), 0);
    assert_int_equal(size, RRPCI_META_MAX_BLOCK);
    static uint8_t buf[RRPCI_META_MAX_BLOCK];
    rrpci_meta_encode(in, RRPC_META_MAX_ENTRIES, buf);
    struct rrpci_meta_view v;
    size_t got;
    assert_int_equal(meta_decode(buf, size, &v, &got), 0);
    assert_int_equal(v.n, RRPC_META_MAX_ENTRIES);
    /* one byte more is refused by the sender's check */
    in[0].len++;
    assert_int_equal(rrpci_meta_check(in, RRPC_META_MAX_ENTRIES, &size, why, sizeof(why)),
                     RRPC_E_METADATA);
    assert_non_null(strstr(why, "4096"));
}

static void test_metadata_check_refuses_each_bound_with_a_reason(void **state)
{
    (void)state;
    static char big[RRPC_META_MAX_VALUE + 1];
    static char longkey[RRPC_META_MAX_KEY + 2];
    memset(longkey, 'k', RRPC_META_MAX_KEY + 1);
    rrpc_meta many[RRPC_META_MAX_ENTRIES + 1];
    static char names[RRPC_META_MAX_ENTRIES + 1][4];
    for (int i = 0; i <= RRPC_META_MAX_ENTRIES; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        many[i] = (rrpc_meta){.key = names[i], .value = "v", .len = 1};
    }
    struct {
        rrpc_meta m[2];
        size_t n;
        const char *says;
    } cases[] = {
        {{{.key = "Upper", .value = "v", .len = 1}}, 1, "0x55"},
        {{{.key = "sp ace", .value = "v", .len = 1}}, 1, "0x20"},
        {{{.key = "", .value = "v", .len = 1}}, 1, "0 bytes"},
        {{{.key = longkey, .value = "v", .len = 1}}, 1, "65 bytes"},
        {{{.key = "k", .value = big, .len = sizeof(big)}}, 1, "1025 bytes"},
        {{{.key = NULL, .value = "v", .len = 1}}, 1, "no key"},
        {{{.key = "k", .value = NULL, .len = 1}}, 1, "no value"},
        {{{.key = "k", .value = "a", .len = 1}, {.key = "k", .value = "b", .len = 1}}, 2, "twice"},
    };
    char why[200];
    size_t size;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        why[0] = 0;
        assert_int_equal(rrpci_meta_check(cases[i].m, cases[i].n, &size, why, sizeof(why)),
                         RRPC_E_METADATA);
        if (!strstr(why, cases[i].says))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, why, cases[i].says);
    }
    assert_int_equal(
        rrpci_meta_check(many, RRPC_META_MAX_ENTRIES + 1, &size, why, sizeof(why)),
        RRPC_E_METADATA);
    assert_non_null(strstr(why, "17 metadata entries"));
    assert_int_equal(rrpci_meta_check(many, RRPC_META_MAX_ENTRIES, &size, why, sizeof(why)), 0);
    assert_int_equal(rrpci_meta_check(NULL, 0, &size, why, sizeof(why)), 0);
    assert_int_equal(size, 0); /* no entries: no block */
}

/* A valid one-entry block "ab" = "xyz" to break by hand. */
static size_t one_entry(uint8_t *b)
{
    const rrpc_meta e = {.key = "ab", .value = "xyz", .len = 3};
    size_t size;
    char why[8];
    assert_int_equal(rrpci_meta_check(&e, 1, &size, why, sizeof(why)), 0);
    rrpci_meta_encode(&e, 1, b);
    return size;
}

static void test_metadata_decode_refuses_each_malformed_block(void **state)
{
    (void)state;
    uint8_t b[64];
    struct rrpci_meta_view v;
    size_t got;
    size_t size = one_entry(b);
    assert_int_equal(size, 12);
    assert_int_equal(meta_decode(b, size, &v, &got), 0);
    /* truncated: the frame ends inside the head, inside the block */
    for (size_t len = 0; len < size; len++)
        assert_int_equal(meta_decode(b, len, &v, &got), RRPC_E_METADATA);
    /* the block's size cuts an entry */
    one_entry(b);
    rrpci_put16(b, 10);
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    rrpci_put16(b, 6); /* inside the entry's head */
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    /* a size smaller than the head itself (a decoder that subtracts reads
     * past the frame: ASan saw it in the fuzz replay) */
    for (uint16_t sz = 0; sz < 7; sz++) {
        one_entry(b);
        rrpci_put16(b, sz);
        uint8_t *cut = malloc(4); /* exactly the head: nothing after it to read */
        memcpy(cut, b, 4);
        assert_int_equal(meta_decode(cut, 4, &v, &got), RRPC_E_METADATA);
        free(cut);
    }
    /* the block's size is larger than its entries */
    one_entry(b);
    rrpci_put16(b, 13);
    assert_int_equal(meta_decode(b, size + 1, &v, &got), RRPC_E_METADATA);
    /* no entries, more than 16 */
    one_entry(b);
    b[2] = 0;
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    b[2] = 17;
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    /* the reserved byte */
    one_entry(b);
    b[3] = 1;
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    /* an empty key, a bad key character */
    one_entry(b);
    b[4] = 0;
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    one_entry(b);
    b[7] = 'A';
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    one_entry(b);
    b[8] = 0;
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
    /* a value length past the block */
    one_entry(b);
    rrpci_put16(b + 5, 0xffff);
    assert_int_equal(meta_decode(b, size, &v, &got), RRPC_E_METADATA);
}

static void test_metadata_decode_refuses_oversized_keys_values_and_totals(void **state)
{
    (void)state;
    static uint8_t b[8192];
    struct rrpci_meta_view v;
    size_t got;
    /* a key of 65 bytes, well formed otherwise */
    memset(b, 0, sizeof(b));
    b[2] = 1;
    b[4] = 65;
    memset(b + 7, 'k', 65);
    rrpci_put16(b, 7 + 65);
    assert_int_equal(meta_decode(b, 7 + 65, &v, &got), RRPC_E_METADATA);
    /* a value of 1025 bytes */
    b[4] = 1;
    b[7] = 'k';
    rrpci_put16(b + 5, 1025);
    rrpci_put16(b, 8 + 1025);
    assert_int_equal(meta_decode(b, 8 + 1025, &v, &got), RRPC_E_METADATA);
    rrpci_put16(b + 5, 1024);
    rrpci_put16(b, 8 + 1024);
    assert_int_equal(meta_decode(b, 8 + 1024, &v, &got), 0);
    /* five values of 1000 bytes: 5005 bytes together */
    size_t off = 4;
    for (int i = 0; i < 5; i++) {
        b[off] = 1;
        rrpci_put16(b + off + 1, 1000);
        b[off + 3] = (uint8_t)('a' + i);
        off += 4 + 1000;
    }
    b[2] = 5;
    rrpci_put16(b, (uint16_t)off);
    assert_int_equal(meta_decode(b, off, &v, &got), RRPC_E_METADATA);
    /* a duplicate key */
    b[2] = 2;
    b[4 + 1004 + 3] = 'a';
    rrpci_put16(b, 4 + 2 * 1004);
    assert_int_equal(meta_decode(b, 4 + 2 * 1004, &v, &got), RRPC_E_METADATA);
    assert_int_equal(v.n, 0);
}

static void test_header_rejects_a_remaining_time_on_anything_but_a_request(void **state)
{
    (void)state;
    for (int t = 1; t < RRPCI_T_MAX_; t++) {
        for (int i = 30; i < 32; i++) {
            struct rrpci_hdr in = sample_hdr(), h;
            in.type = (uint8_t)t;
            in.len = 0;
            in.flags = t == RRPCI_T_OS_WRITE ? RRPCI_F_NOTIFY : 0;
            uint8_t buf[RRPCI_HDR_SIZE];
            rrpci_hdr_encode(&in, buf);
            buf[i] = 0x01;
            const char *why = NULL;
            int r = rrpci_hdr_decode(buf, MAX_LEN, &h, &why);
            if (t == RRPCI_T_REQUEST) {
                assert_int_equal(r, 0);
                assert_int_equal(h.ttl, i == 30 ? 0x0001 : 0x0100);
            } else {
                assert_int_equal(r, RRPC_E_PROTO);
                assert_non_null(strstr(why, "remaining time"));
            }
        }
    }
}

/* The remaining time's 16 bits: never more than the caller has, within a
 * unit's step of it, monotonic, and saturating at both ends. */
static void test_ttl_rounds_down_within_a_step_and_saturates(void **state)
{
    (void)state;
    assert_int_equal(rrpci_ttl_decode(0), 0.0);
    assert_int_equal(rrpci_ttl_encode(0), 1);
    assert_int_equal(rrpci_ttl_encode(-5), 1);
    assert_int_equal(rrpci_ttl_encode(1e9), 0xffff);
    assert_true(rrpci_ttl_decode(0xffff) > 4290 && rrpci_ttl_decode(0xffff) < 4300);
    double prev = 0;
    for (double s = 2e-6; s < 4290; s *= 1.01) {
        uint16_t t = rrpci_ttl_encode(s);
        double d = rrpci_ttl_decode(t);
        assert_true(t != 0);
        assert_true(d <= s * (1 + 1e-12));
        /* one step of the unit used, which is at most 1/256 of the value */
        assert_true(s - d <= s / 256.0 + 1e-6);
        assert_true(d >= prev);
        prev = d;
    }
    assert_true(rrpci_ttl_decode(rrpci_ttl_encode(0.1)) > 0.099);
    assert_true(rrpci_ttl_decode(rrpci_ttl_encode(30)) > 29.8);
}

static void test_header_carries_the_remaining_time_of_a_request(void **state)
{
    (void)state;
    struct rrpci_hdr in = sample_hdr(), out;
    in.type = RRPCI_T_REQUEST;
    in.flags = 0;
    in.ttl = rrpci_ttl_encode(0.25);
    uint8_t buf[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&in, buf);
    assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &out, NULL), 0);
    assert_int_equal(out.ttl, in.ttl);
    assert_int_equal(buf[30] | buf[31] << 8, in.ttl);
    /* on other types the field goes out as zero, whatever the struct holds */
    in.type = RRPCI_T_RESPONSE;
    rrpci_hdr_encode(&in, buf);
    assert_int_equal(buf[30] | buf[31], 0);
}

static void test_header_decode_leaves_why_alone_on_success_and_accepts_null_why(void **state)
{
    (void)state;
    uint8_t buf[RRPCI_HDR_SIZE];
    encode_sample(buf);
    struct rrpci_hdr h;
    const char *why = "untouched";
    assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &h, &why), 0);
    assert_string_equal(why, "untouched");
    buf[0] = 0;
    assert_int_equal(rrpci_hdr_decode(buf, MAX_LEN, &h, NULL), RRPC_E_PROTO);
}

static void test_exempt_types_are_exactly_handshake_credit_error_ticket_keepalive_cancel_and_lend(void **state)
{
    (void)state;
    for (int t = 0; t < 256; t++) {
        bool want = t == RRPCI_T_HELLO || t == RRPCI_T_HELLO_ACK || t == RRPCI_T_JOIN ||
                    t == RRPCI_T_JOIN_ACK || t == RRPCI_T_CREDIT || t == RRPCI_T_ERROR ||
                    t == RRPCI_T_TICKET || t == RRPCI_T_TICKET_ACK || t == RRPCI_T_KEEPALIVE ||
                    t == RRPCI_T_CANCEL || t == RRPCI_T_LEND || t == RRPCI_T_LEND_ACK;
        assert_int_equal(rrpci_type_is_exempt((uint8_t)t), want);
    }
    /* Requests, responses and one-sided frames consume credit. */
    assert_false(rrpci_type_is_exempt(RRPCI_T_REQUEST));
    assert_false(rrpci_type_is_exempt(RRPCI_T_RESPONSE));
    assert_false(rrpci_type_is_exempt(RRPCI_T_OS_WRITE));
    assert_false(rrpci_type_is_exempt(RRPCI_T_OS_READ));
    assert_false(rrpci_type_is_exempt(RRPCI_T_OS_ACK));
}

/* ---- one-sided sub-header ---------------------------------------------- */

static void test_os_header_round_trips_at_documented_offsets(void **state)
{
    (void)state;
    struct rrpci_os_hdr in = {.addr = 0xFFFFFFFFFFFFFFF0ull, .key = 0x1122334455667788ull,
                              .len = 0xDEADBEEFu, .imm = 0x01020304u};
    uint8_t buf[RRPCI_OS_HDR_SIZE];
    memset(buf, 0x55, sizeof(buf));
    rrpci_os_hdr_encode(&in, buf);
    static const uint8_t want[RRPCI_OS_HDR_SIZE] = {
        0xF0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, /* addr */
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* key */
        0xEF, 0xBE, 0xAD, 0xDE,                         /* len */
        0x04, 0x03, 0x02, 0x01,                         /* imm */
    };
    assert_memory_equal(buf, want, sizeof(want));
    struct rrpci_os_hdr out;
    memset(&out, 0, sizeof(out));
    assert_int_equal(rrpci_os_hdr_decode(buf, sizeof(buf), &out), 0);
    assert_int_equal(out.addr, in.addr);
    assert_int_equal(out.key, in.key);
    assert_int_equal(out.len, in.len);
    assert_int_equal(out.imm, in.imm);
}

static void test_os_header_decode_rejects_a_short_payload_with_proto(void **state)
{
    (void)state;
    uint8_t buf[RRPCI_OS_HDR_SIZE + 8] = {0};
    struct rrpci_os_hdr out;
    assert_int_equal(rrpci_os_hdr_decode(buf, 0, &out), RRPC_E_PROTO);
    assert_int_equal(rrpci_os_hdr_decode(buf, RRPCI_OS_HDR_SIZE - 1, &out), RRPC_E_PROTO);
    assert_int_equal(rrpci_os_hdr_decode(buf, RRPCI_OS_HDR_SIZE, &out), 0);
    /* WRITE: data follows the sub-header. */
    assert_int_equal(rrpci_os_hdr_decode(buf, sizeof(buf), &out), 0);
}

/* ---- hello -------------------------------------------------------------- */

static void test_hello_round_trips_every_field(void **state)
{
    (void)state;
    struct rrpci_hello in = {.version = RRPCI_PROTO_VERSION, .nclasses = 4,
                             .credits = {16, 64, 0xFFFF, 1}, .max_msg = 64u << 20,
                             .cookie = 0x8877665544332211ull, .rx_buf = 0x00012345u};
    uint8_t buf[RRPCI_HELLO_SIZE];
    rrpci_hello_encode(&in, buf);
    struct rrpci_hello out;
    memset(&out, 0xAA, sizeof(out));
    assert_int_equal(rrpci_hello_decode(buf, sizeof(buf), &out), 0);
    assert_int_equal(out.version, in.version);
    assert_int_equal(out.nclasses, in.nclasses);
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        assert_int_equal(out.credits[i], in.credits[i]);
    assert_int_equal(out.max_msg, in.max_msg);
    assert_int_equal(out.cookie, in.cookie);
    assert_int_equal(out.rx_buf, in.rx_buf);
}

static void test_hello_layout_matches_documented_offsets_with_zero_reserved(void **state)
{
    (void)state;
    struct rrpci_hello in = {.version = 1, .nclasses = 4, .credits = {0x0102, 0x0304, 0x0506,
                                                                      0x0708},
                             .max_msg = 0x0A0B0C0D, .cookie = 0x1112131415161718ull,
                             .rx_buf = 0x21222324};
    uint8_t buf[RRPCI_HELLO_SIZE];
    memset(buf, 0x55, sizeof(buf));
    rrpci_hello_encode(&in, buf);
    static const uint8_t want[RRPCI_HELLO_SIZE] = {
        1, 4,                                           /* version, nclasses */
        0x02, 0x01, 0x04, 0x03, 0x06, 0x05, 0x08, 0x07, /* credits */
        0, 0,                                           /* reserved */
        0x0D, 0x0C, 0x0B, 0x0A,                         /* max_msg */
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* cookie */
        0x24, 0x23, 0x22, 0x21,                         /* rx_buf */
        0, 0, 0, 0,                                     /* reserved */
    };
    assert_memory_equal(buf, want, sizeof(want));
}

static void test_hello_fits_in_rdma_cm_private_data(void **state)
{
    (void)state;
    assert_true(RRPCI_HELLO_SIZE <= 56);
}

static void test_hello_decode_rejects_a_short_record_with_proto(void **state)
{
    (void)state;
    uint8_t buf[RRPCI_HELLO_SIZE] = {0};
    struct rrpci_hello out;
    assert_int_equal(rrpci_hello_decode(buf, 0, &out), RRPC_E_PROTO);
    assert_int_equal(rrpci_hello_decode(buf, RRPCI_HELLO_SIZE - 1, &out), RRPC_E_PROTO);
    assert_int_equal(rrpci_hello_decode(buf, RRPCI_HELLO_SIZE, &out), 0);
}

/* ---- little-endian helpers ---------------------------------------------- */

static void test_le_helpers_round_trip_boundary_values(void **state)
{
    (void)state;
    static const uint64_t v64[] = {0, 1, 0x80, 0xFF, 0x8000000000000000ull, UINT64_MAX,
                                   0x0123456789ABCDEFull};
    for (size_t i = 0; i < sizeof(v64) / sizeof(v64[0]); i++) {
        uint8_t b[8];
        rrpci_put64(b, v64[i]);
        assert_int_equal(rrpci_get64(b), v64[i]);
        rrpci_put32(b, (uint32_t)v64[i]);
        assert_int_equal(rrpci_get32(b), (uint32_t)v64[i]);
        rrpci_put16(b, (uint16_t)v64[i]);
        assert_int_equal(rrpci_get16(b), (uint16_t)v64[i]);
    }
    uint8_t b[4] = {0x00, 0x00, 0x00, 0x80};
    assert_int_equal(rrpci_get32(b), 0x80000000u); /* no sign extension */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_round_trips_every_field),
        cmocka_unit_test(test_header_round_trips_extreme_values),
        cmocka_unit_test(test_header_is_little_endian_at_documented_offsets),
        cmocka_unit_test(test_header_accepts_len_equal_to_max),
        cmocka_unit_test(test_header_rejects_len_one_above_max_with_too_big),
        cmocka_unit_test(test_header_rejects_all_ones_length_with_too_big),
        cmocka_unit_test(test_header_with_zero_max_accepts_only_empty_payloads),
        cmocka_unit_test(test_header_rejects_wrong_magic_with_proto),
        cmocka_unit_test(test_header_rejects_other_versions_with_version),
        cmocka_unit_test(test_header_of_newer_version_reports_version_even_with_unknown_type),
        cmocka_unit_test(test_header_accepts_every_known_type),
        cmocka_unit_test(test_header_refuses_a_control_frame_longer_than_its_type_allows),
        cmocka_unit_test(test_header_rejects_type_zero_and_types_from_max_with_proto),
        cmocka_unit_test(test_header_accepts_classes_0_to_3),
        cmocka_unit_test(test_header_rejects_class_4_and_above_with_bad_class),
        cmocka_unit_test(test_header_rejects_each_unknown_flag_bit_with_proto),
        cmocka_unit_test(test_header_takes_the_metadata_flag_only_on_requests_and_responses),
        cmocka_unit_test(test_header_takes_the_last_credit_flag_only_on_credited_frames),
        cmocka_unit_test(test_metadata_round_trips_at_documented_offsets),
        cmocka_unit_test(test_metadata_holds_the_largest_block_the_bounds_allow),
        cmocka_unit_test(test_metadata_check_refuses_each_bound_with_a_reason),
        cmocka_unit_test(test_metadata_decode_refuses_each_malformed_block),
        cmocka_unit_test(test_metadata_decode_refuses_oversized_keys_values_and_totals),
        cmocka_unit_test(test_header_rejects_a_remaining_time_on_anything_but_a_request),
        cmocka_unit_test(test_ttl_rounds_down_within_a_step_and_saturates),
        cmocka_unit_test(test_header_carries_the_remaining_time_of_a_request),
        cmocka_unit_test(test_header_decode_leaves_why_alone_on_success_and_accepts_null_why),
        cmocka_unit_test(test_exempt_types_are_exactly_handshake_credit_error_ticket_keepalive_cancel_and_lend),
        cmocka_unit_test(test_os_header_round_trips_at_documented_offsets),
        cmocka_unit_test(test_os_header_decode_rejects_a_short_payload_with_proto),
        cmocka_unit_test(test_hello_round_trips_every_field),
        cmocka_unit_test(test_hello_layout_matches_documented_offsets_with_zero_reserved),
        cmocka_unit_test(test_hello_fits_in_rdma_cm_private_data),
        cmocka_unit_test(test_hello_decode_rejects_a_short_record_with_proto),
        cmocka_unit_test(test_le_helpers_round_trip_boundary_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

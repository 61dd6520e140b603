/* SPDX-License-Identifier: MIT */
/*
 * fuzz_frame: the wire header, the one-sided sub-header and the hello record
 * (libroce_rpc/core/frame.c), all decoded from untrusted bytes.
 *
 * Input: the bytes as they would arrive: a 32-byte header, then the payload
 * (an os sub-header, or a hello).  Besides "never crash", it checks:
 *  - a header that decodes re-encodes to the very same 32 bytes, and
 *    decode(encode(h)) == h;
 *  - decoding against a smaller max_len only adds RRPC_E_TOO_BIG;
 *  - os sub-header and hello: decode(encode(x)) == x, and encode(decode(b))
 *    gives back b except for the hello's reserved bytes;
 *  - a valid header built from the input bytes round-trips.
 */
#include <string.h>

#include <roce_rpc/error.h>

#include "core/frame.h"
#include "fuzz.h"

static int hdr_eq(const struct rrpci_hdr *a, const struct rrpci_hdr *b)
{
    return a->version == b->version && a->type == b->type && a->cls == b->cls &&
           a->flags == b->flags && a->id == b->id && a->arg == b->arg && a->len == b->len &&
           a->credits == b->credits;
}

static int hello_eq(const struct rrpci_hello *a, const struct rrpci_hello *b)
{
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        if (a->credits[i] != b->credits[i])
            return 0;
    return a->version == b->version && a->nclasses == b->nclasses && a->max_msg == b->max_msg &&
           a->cookie == b->cookie && a->rx_buf == b->rx_buf;
}

static void fuzz_hdr(const uint8_t *d, size_t n)
{
    if (n < RRPCI_HDR_SIZE)
        return;
    uint8_t in[RRPCI_HDR_SIZE], out[RRPCI_HDR_SIZE];
    memcpy(in, d, sizeof(in));
    struct rrpci_hdr h, h2;
    const char *why = NULL;
    int r = rrpci_hdr_decode(in, UINT32_MAX, &h, &why);
    FUZZ_CHECK(r == 0 || r == RRPC_E_PROTO || r == RRPC_E_VERSION || r == RRPC_E_BAD_CLASS);
    FUZZ_CHECK(r == 0 ? why == NULL : why != NULL && why[0] != 0);
    /* why may be NULL. */
    FUZZ_CHECK(rrpci_hdr_decode(in, UINT32_MAX, &h2, NULL) == r);
    if (r != 0)
        return;
    FUZZ_CHECK(h.version == RRPCI_PROTO_VERSION);
    FUZZ_CHECK(h.type > 0 && h.type < RRPCI_T_MAX_);
    FUZZ_CHECK(h.cls < RRPCI_MAX_CLASSES);
    FUZZ_CHECK((h.flags & ~RRPCI_F_ALL_) == 0);
    rrpci_hdr_encode(&h, out);
    FUZZ_CHECK(memcmp(in, out, sizeof(in)) == 0);
    FUZZ_CHECK(rrpci_hdr_decode(out, UINT32_MAX, &h2, NULL) == 0 && hdr_eq(&h, &h2));

    /* A smaller limit, taken from the payload, refuses exactly the longer frames. */
    uint32_t max = n >= RRPCI_HDR_SIZE + 4 ? rrpci_get32(d + RRPCI_HDR_SIZE) : 0;
    r = rrpci_hdr_decode(in, max, &h2, &why);
    FUZZ_CHECK(r == (h.len > max ? RRPC_E_TOO_BIG : 0));
    FUZZ_CHECK(hdr_eq(&h, &h2));
}

static void fuzz_os(const uint8_t *d, size_t n)
{
    struct rrpci_os_hdr o, o2;
    uint8_t out[RRPCI_OS_HDR_SIZE];
    int r = rrpci_os_hdr_decode(d, n, &o);
    FUZZ_CHECK(r == (n < RRPCI_OS_HDR_SIZE ? RRPC_E_PROTO : 0));
    if (r)
        return;
    rrpci_os_hdr_encode(&o, out);
    FUZZ_CHECK(memcmp(out, d, sizeof(out)) == 0);
    FUZZ_CHECK(rrpci_os_hdr_decode(out, sizeof(out), &o2) == 0);
    FUZZ_CHECK(o.addr == o2.addr && o.key == o2.key && o.len == o2.len && o.imm == o2.imm);
}

static void fuzz_hello(const uint8_t *d, size_t n)
{
    struct rrpci_hello h, h2;
    uint8_t out[RRPCI_HELLO_SIZE];
    int r = rrpci_hello_decode(d, n, &h);
    FUZZ_CHECK(r == (n < RRPCI_HELLO_SIZE ? RRPC_E_PROTO : 0));
    if (r)
        return;
    rrpci_hello_encode(&h, out);
    /* Everything but the reserved bytes (10..11, 28..31) comes back. */
    FUZZ_CHECK(memcmp(out, d, 10) == 0 && memcmp(out + 12, d + 12, 16) == 0);
    FUZZ_CHECK(out[10] == 0 && out[11] == 0 && out[28] == 0 && out[29] == 0 && out[30] == 0 &&
               out[31] == 0);
    FUZZ_CHECK(rrpci_hello_decode(out, sizeof(out), &h2) == 0 && hello_eq(&h, &h2));
}

/* A valid header made of the input's bytes: it must survive encode + decode. */
static void fuzz_roundtrip(const uint8_t *d, size_t n)
{
    uint8_t b[27] = {0};
    memcpy(b, d, n < sizeof(b) ? n : sizeof(b));
    struct rrpci_hdr h = {
        .version = RRPCI_PROTO_VERSION,
        .type = (uint8_t)(1 + b[0] % (RRPCI_T_MAX_ - 1)),
        .cls = (uint8_t)(b[1] % RRPCI_MAX_CLASSES),
        .flags = (uint8_t)(b[2] & RRPCI_F_NOTIFY),
        .id = rrpci_get64(b + 3),
        .arg = rrpci_get64(b + 11),
        .len = rrpci_get32(b + 19),
        .credits = rrpci_get16(b + 23),
    };
    if (h.type == RRPCI_T_REQUEST || h.type == RRPCI_T_RESPONSE)
        h.flags |= (uint8_t)(b[2] & RRPCI_F_META); /* only theirs */
    uint8_t out[RRPCI_HDR_SIZE];
    struct rrpci_hdr h2;
    rrpci_hdr_encode(&h, out);
    if (rrpci_type_is_exempt(h.type) && h.len > rrpci_exempt_max_len(h.type))
        FUZZ_CHECK(rrpci_hdr_decode(out, h.len, &h2, NULL) == RRPC_E_PROTO);
    else
        FUZZ_CHECK(rrpci_hdr_decode(out, h.len, &h2, NULL) == 0 && hdr_eq(&h, &h2));
    if (h.len > 0)
        FUZZ_CHECK(rrpci_hdr_decode(out, h.len - 1, &h2, NULL) == RRPC_E_TOO_BIG);

    struct rrpci_hello he = { .version = b[0], .nclasses = b[1],
                              .credits = { rrpci_get16(b + 2), rrpci_get16(b + 4),
                                           rrpci_get16(b + 6), rrpci_get16(b + 8) },
                              .max_msg = rrpci_get32(b + 10), .cookie = rrpci_get64(b + 14),
                              .rx_buf = rrpci_get32(b + 22) };
    uint8_t ho[RRPCI_HELLO_SIZE];
    struct rrpci_hello he2;
    rrpci_hello_encode(&he, ho);
    FUZZ_CHECK(rrpci_hello_decode(ho, sizeof(ho), &he2) == 0 && hello_eq(&he, &he2));
}

/* A metadata block: one that decodes passes the sender's check, and
 * encodes to the same bytes; the decoder never reads past @n. */
static void fuzz_meta(const uint8_t *d, size_t n)
{
    static struct rrpci_meta_view v;
    size_t size = 0;
    char why[200];
    int r = rrpci_meta_decode(d, n, &v, &size, why, sizeof(why));
    if (r != 0) {
        FUZZ_CHECK(r == RRPC_E_METADATA && v.n == 0 && why[0]);
        return;
    }
    FUZZ_CHECK(size <= n && size <= RRPCI_META_MAX_BLOCK && v.n >= 1);
    size_t size2 = 0;
    FUZZ_CHECK(rrpci_meta_check(v.e, v.n, &size2, why, sizeof(why)) == 0 && size2 == size);
    static uint8_t out[RRPCI_META_MAX_BLOCK];
    rrpci_meta_encode(v.e, v.n, out);
    FUZZ_CHECK(memcmp(out, d, size) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    fuzz_hdr(d, n);
    /* The payload after a header: an os sub-header (OS_WRITE / OS_READ) or a hello. */
    const uint8_t *p = n >= RRPCI_HDR_SIZE ? d + RRPCI_HDR_SIZE : d;
    size_t pn = n >= RRPCI_HDR_SIZE ? n - RRPCI_HDR_SIZE : n;
    fuzz_os(p, pn);
    fuzz_hello(p, pn);
    fuzz_meta(p, pn);
    fuzz_roundtrip(d, n);
    return 0;
}

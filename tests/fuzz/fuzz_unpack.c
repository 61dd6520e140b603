/* SPDX-License-Identifier: MIT */
/*
 * fuzz_unpack: rrpc_unpack (libroce_rpc/core/pack.c) on untrusted msgpack,
 * with the format strings the library itself uses and a few more.
 *
 * Input: byte 0 picks the format string, byte 1 the error buffer's size
 * (0..79), the rest is the msgpack data.  Checks:
 *  - the result is 0 or RRPC_E_ARGS (never -ENOMEM: the input is small);
 *  - on error no output is written, and the error text is NUL-terminated
 *    inside the size given (nothing is written past it);
 *  - on success strings and bytes point inside the input, booleans are 0/1,
 *    and rrpc_pack of the values unpacks to the same values.
 */
#include <errno.h>
#include <string.h>

#include <roce_rpc/error.h>
#include <roce_rpc/pack.h>

#include "fuzz.h"

#define NSLOT 8

struct slot {
    int64_t i;
    uint64_t u;
    double d;
    int b;
    const char *s;
    size_t sl;
    const void *y;
    size_t yl;
};

static const char *const formats[] = {
    "", "i", "u", "d", "b", "s", "y", "n",
    "ui", "usuy", "isuyuy", /* libroce_rpc/xfer/tensor.c */
    "iudbsyn", "nnnn", "ss", "yy", "siy",
};
#define NFMT (sizeof(formats) / sizeof(formats[0]))

#define I_(k) &v[k].i
#define U_(k) &v[k].u
#define D_(k) &v[k].d
#define B_(k) &v[k].b
#define S_(k) &v[k].s, &v[k].sl
#define Y_(k) &v[k].y, &v[k].yl

static int unpack(size_t f, const void *buf, size_t len, char *eb, size_t el, struct slot *v)
{
    const char *fmt = formats[f];
    switch (f) {
    case 0: return rrpc_unpack(buf, len, eb, el, fmt);
    case 1: return rrpc_unpack(buf, len, eb, el, fmt, I_(0));
    case 2: return rrpc_unpack(buf, len, eb, el, fmt, U_(0));
    case 3: return rrpc_unpack(buf, len, eb, el, fmt, D_(0));
    case 4: return rrpc_unpack(buf, len, eb, el, fmt, B_(0));
    case 5: return rrpc_unpack(buf, len, eb, el, fmt, S_(0));
    case 6: return rrpc_unpack(buf, len, eb, el, fmt, Y_(0));
    case 7: return rrpc_unpack(buf, len, eb, el, fmt);
    case 8: return rrpc_unpack(buf, len, eb, el, fmt, U_(0), I_(1));
    case 9: return rrpc_unpack(buf, len, eb, el, fmt, U_(0), S_(1), U_(2), Y_(3));
    case 10:
        return rrpc_unpack(buf, len, eb, el, fmt, I_(0), S_(1), U_(2), Y_(3), U_(4), Y_(5));
    case 11:
        return rrpc_unpack(buf, len, eb, el, fmt, I_(0), U_(1), D_(2), B_(3), S_(4), Y_(5));
    case 12: return rrpc_unpack(buf, len, eb, el, fmt);
    case 13: return rrpc_unpack(buf, len, eb, el, fmt, S_(0), S_(1));
    case 14: return rrpc_unpack(buf, len, eb, el, fmt, Y_(0), Y_(1));
    case 15: return rrpc_unpack(buf, len, eb, el, fmt, S_(0), I_(1), Y_(2));
    }
    abort();
}

/* rrpc_pack of unpacked values; 's' wants NUL-terminated copies in @str. */
static int pack(size_t f, void **out, size_t *outlen, const struct slot *v, char str[][64])
{
    const char *fmt = formats[f];
    switch (f) {
    case 0: return rrpc_pack(out, outlen, fmt);
    case 1: return rrpc_pack(out, outlen, fmt, v[0].i);
    case 2: return rrpc_pack(out, outlen, fmt, v[0].u);
    case 3: return rrpc_pack(out, outlen, fmt, v[0].d);
    case 4: return rrpc_pack(out, outlen, fmt, v[0].b);
    case 5: return rrpc_pack(out, outlen, fmt, str[0]);
    case 6: return rrpc_pack(out, outlen, fmt, v[0].y, v[0].yl);
    case 7: return rrpc_pack(out, outlen, fmt);
    case 8: return rrpc_pack(out, outlen, fmt, v[0].u, v[1].i);
    case 9: return rrpc_pack(out, outlen, fmt, v[0].u, str[1], v[2].u, v[3].y, v[3].yl);
    case 10:
        return rrpc_pack(out, outlen, fmt, v[0].i, str[1], v[2].u, v[3].y, v[3].yl, v[4].u,
                         v[5].y, v[5].yl);
    case 11:
        return rrpc_pack(out, outlen, fmt, v[0].i, v[1].u, v[2].d, v[3].b, str[4], v[5].y,
                         v[5].yl);
    case 12: return rrpc_pack(out, outlen, fmt);
    case 13: return rrpc_pack(out, outlen, fmt, str[0], str[1]);
    case 14: return rrpc_pack(out, outlen, fmt, v[0].y, v[0].yl, v[1].y, v[1].yl);
    case 15: return rrpc_pack(out, outlen, fmt, str[0], v[1].i, v[2].y, v[2].yl);
    }
    abort();
}

static int inside(const void *p, size_t n, const uint8_t *buf, size_t len)
{
    const uint8_t *q = p;
    if (n == 0)
        return 1; /* an empty string may point anywhere */
    return q >= buf && q <= buf + len && n <= (size_t)(buf + len - q);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 2)
        return 0;
    size_t f = d[0] % NFMT, el = d[1] % 80;
    const uint8_t *buf = d + 2;
    size_t len = n - 2;
    const char *fmt = formats[f];
    size_t nf = strlen(fmt);

    struct slot v[NSLOT], sentinel[NSLOT];
    memset(v, 0xa5, sizeof(v));
    memcpy(sentinel, v, sizeof(v));
    char eb[128];
    memset(eb, 'X', sizeof(eb));
    int r = unpack(f, len ? buf : NULL, len, el ? eb : NULL, el, v);
    /* -ENOMEM from a few KB means msgpack-c believed a huge claimed size
     * (corpus/unpack/crash-huge-*): that is a bug, not an answer. */
    FUZZ_CHECK(r == 0 || r == RRPC_E_ARGS);
    for (size_t i = el; i < sizeof(eb); i++)
        FUZZ_CHECK(eb[i] == 'X');
    if (r != 0) {
        FUZZ_CHECK(memcmp(v, sentinel, sizeof(v)) == 0);
        if (r == RRPC_E_ARGS && el > 0)
            FUZZ_CHECK(memchr(eb, 0, el) != NULL);
        return 0;
    }

    /* Success: the values are sane; pack them and get them back. */
    char str[NSLOT][64];
    int repack = 1;
    for (size_t i = 0; i < nf; i++) {
        switch (fmt[i]) {
        case 'b': FUZZ_CHECK(v[i].b == 0 || v[i].b == 1); break;
        case 's':
            FUZZ_CHECK(inside(v[i].s, v[i].sl, buf, len));
            /* An empty string may come back as NULL: mind memchr/memcpy. */
            if (v[i].sl >= sizeof(str[i]) || (v[i].sl && memchr(v[i].s, 0, v[i].sl)))
                repack = 0;
            else {
                if (v[i].sl)
                    memcpy(str[i], v[i].s, v[i].sl);
                str[i][v[i].sl] = 0;
            }
            break;
        case 'y': FUZZ_CHECK(inside(v[i].y, v[i].yl, buf, len)); break;
        default: break;
        }
    }
    if (!repack)
        return 0;
    void *out = NULL;
    size_t outlen = 0;
    FUZZ_CHECK(pack(f, &out, &outlen, v, str) == 0);
    struct slot w[NSLOT];
    memset(w, 0x5a, sizeof(w));
    FUZZ_CHECK(unpack(f, out, outlen, NULL, 0, w) == 0);
    for (size_t i = 0; i < nf; i++) {
        switch (fmt[i]) {
        case 'i': FUZZ_CHECK(v[i].i == w[i].i); break;
        case 'u': FUZZ_CHECK(v[i].u == w[i].u); break;
        case 'd': FUZZ_CHECK(memcmp(&v[i].d, &w[i].d, sizeof(double)) == 0); break;
        case 'b': FUZZ_CHECK(v[i].b == w[i].b); break;
        case 's':
            FUZZ_CHECK(v[i].sl == w[i].sl && (v[i].sl == 0 || !memcmp(v[i].s, w[i].s, v[i].sl)));
            break;
        case 'y':
            FUZZ_CHECK(v[i].yl == w[i].yl && (v[i].yl == 0 || !memcmp(v[i].y, w[i].y, v[i].yl)));
            break;
        default: break;
        }
    }
    free(out);
    return 0;
}

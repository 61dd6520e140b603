/* SPDX-License-Identifier: MIT */
#include "core/frame.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <roce_rpc/error.h>

/*
 * Layout (little-endian), docs/protocol.md:
 *   0 magic u32 | 4 version u8 | 5 type u8 | 6 class u8 | 7 flags u8
 *   8 id u64 | 16 arg u64 | 24 len u32 | 28 credits u16 | 30 ttl u16 (REQUEST; else 0)
 */
void rrpci_hdr_encode(const struct rrpci_hdr *h, uint8_t out[RRPCI_HDR_SIZE])
{
    rrpci_put32(out, RRPCI_MAGIC);
    out[4] = h->version;
    out[5] = h->type;
    out[6] = h->cls;
    out[7] = h->flags;
    rrpci_put64(out + 8, h->id);
    rrpci_put64(out + 16, h->arg);
    rrpci_put32(out + 24, h->len);
    rrpci_put16(out + 28, h->credits);
    rrpci_put16(out + 30, h->type == RRPCI_T_REQUEST ? h->ttl : 0);
}

static int bad(const char **why, const char *msg, int code)
{
    if (why)
        *why = msg;
    return code;
}

int rrpci_hdr_decode(const uint8_t in[RRPCI_HDR_SIZE], uint32_t max_len, struct rrpci_hdr *h,
                     const char **why)
{
    if (rrpci_get32(in) != RRPCI_MAGIC)
        return bad(why, "bad magic: the peer does not speak the roce-rpc protocol", RRPC_E_PROTO);
    h->version = in[4];
    h->type = in[5];
    h->cls = in[6];
    h->flags = in[7];
    h->id = rrpci_get64(in + 8);
    h->arg = rrpci_get64(in + 16);
    h->len = rrpci_get32(in + 24);
    h->credits = rrpci_get16(in + 28);
    h->ttl = rrpci_get16(in + 30);
    h->placed = false;
    if (h->version != RRPCI_PROTO_VERSION)
        return bad(why, "protocol version mismatch: upgrade the older side", RRPC_E_VERSION);
    if (h->type == 0 || h->type >= RRPCI_T_MAX_)
        return bad(why, "unknown frame type", RRPC_E_PROTO);
    if (h->cls >= RRPCI_MAX_CLASSES)
        return bad(why, "unknown QoS class in frame header", RRPC_E_BAD_CLASS);
    if (h->flags & ~RRPCI_F_ALL_)
        return bad(why, "unknown flag bits in frame header", RRPC_E_PROTO);
    if ((h->flags & RRPCI_F_META) && h->type != RRPCI_T_REQUEST && h->type != RRPCI_T_RESPONSE)
        return bad(why, "the metadata flag (0x02) on a frame that is not a request or a response",
                   RRPC_E_PROTO);
    if ((h->flags & RRPCI_F_LAST) && rrpci_type_is_exempt(h->type))
        return bad(why, "the last-credit flag (0x04) on a frame that takes no credit",
                   RRPC_E_PROTO);
    if (h->ttl != 0 && h->type != RRPCI_T_REQUEST)
        return bad(why, "a remaining time (header bytes 30-31) on a frame that is not a request",
                   RRPC_E_PROTO);
    if (h->len > max_len)
        return bad(why, "payload length exceeds the maximum message size (RRPC_MAX_MSG)",
                   RRPC_E_TOO_BIG);
    if (rrpci_type_is_exempt(h->type) && h->len > rrpci_exempt_max_len(h->type))
        return bad(why, "control frame longer than its type allows", RRPC_E_PROTO);
    return 0;
}

/* Each unit 64 times the last: a value is kept to within 1/256 of itself. */
static const double ttl_unit[4] = {1e-6, 64e-6, 4096e-6, 262144e-6};

uint16_t rrpci_ttl_encode(double seconds)
{
    if (!(seconds > 1e-6)) /* also NaN */
        return 1;
    for (unsigned u = 0; u < 4; u++) {
        double n = seconds / ttl_unit[u];
        if (n < 16384.0) {
            unsigned v = (unsigned)n; /* rounded down */
            return (uint16_t)((u << 14) | (v ? v : 1));
        }
    }
    return 0xffff;
}

double rrpci_ttl_decode(uint16_t ttl)
{
    return (double)(ttl & 0x3fffu) * ttl_unit[ttl >> 14];
}

/* ---- metadata ---------------------------------------------------------- */

static int meta_bad(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int meta_bad(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return RRPC_E_METADATA;
}

/* RFC 9110's token characters, letters lowercase only. */
static bool key_char(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Checks one key of @klen bytes (entry @i); 0 or RRPC_E_METADATA. */
static int key_check(const char *key, size_t klen, size_t i, char *why, size_t whylen)
{
    if (klen == 0 || klen > RRPC_META_MAX_KEY)
        return meta_bad(why, whylen, "metadata entry %zu: its key has %zu bytes (1..%d allowed)",
                        i, klen, RRPC_META_MAX_KEY);
    for (size_t j = 0; j < klen; j++) {
        unsigned char ch = (unsigned char)key[j];
        if (!key_char(ch))
            return meta_bad(why, whylen,
                            "metadata entry %zu: its key has the byte 0x%02x at %zu; keys are "
                            "lowercase tokens (a-z 0-9 !#$%%&'*+-.^_`|~)",
                            i, ch, j);
    }
    return 0;
}

/* Whether entry @i's key equals an earlier one's. */
static bool key_repeated(const rrpc_meta *meta, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(meta[j].key, meta[i].key) == 0)
            return true;
    return false;
}

int rrpci_meta_check(const rrpc_meta *meta, size_t n, size_t *ret_size, char *why,
                     size_t whylen)
{
    if (n > RRPC_META_MAX_ENTRIES)
        return meta_bad(why, whylen, "%zu metadata entries (at most %d)", n,
                        RRPC_META_MAX_ENTRIES);
    if (n && !meta)
        return meta_bad(why, whylen, "%zu metadata entries announced and none given", n);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!meta[i].key)
            return meta_bad(why, whylen, "metadata entry %zu has no key", i);
        size_t klen = strnlen(meta[i].key, RRPC_META_MAX_KEY + 1);
        int r = key_check(meta[i].key, klen, i, why, whylen);
        if (r)
            return r;
        if (meta[i].len > RRPC_META_MAX_VALUE)
            return meta_bad(why, whylen,
                            "metadata entry %zu (\"%s\"): its value has %zu bytes (at most %d)",
                            i, meta[i].key, meta[i].len, RRPC_META_MAX_VALUE);
        if (meta[i].len && !meta[i].value)
            return meta_bad(why, whylen, "metadata entry %zu (\"%s\"): a length and no value",
                            i, meta[i].key);
        if (key_repeated(meta, i))
            return meta_bad(why, whylen, "metadata key \"%s\" appears twice (entry %zu)",
                            meta[i].key, i);
        total += klen + meta[i].len;
    }
    if (total > RRPC_META_MAX_BYTES)
        return meta_bad(why, whylen,
                        "metadata keys and values hold %zu bytes together (at most %d)", total,
                        RRPC_META_MAX_BYTES);
    *ret_size = n ? RRPCI_META_HEAD + RRPCI_META_ENTRY_HEAD * n + total : 0;
    return 0;
}

void rrpci_meta_encode(const rrpc_meta *meta, size_t n, uint8_t *out)
{
    uint8_t *p = out + RRPCI_META_HEAD;
    for (size_t i = 0; i < n; i++) {
        size_t klen = strlen(meta[i].key);
        p[0] = (uint8_t)klen;
        rrpci_put16(p + 1, (uint16_t)meta[i].len);
        memcpy(p + RRPCI_META_ENTRY_HEAD, meta[i].key, klen);
        if (meta[i].len)
            memcpy(p + RRPCI_META_ENTRY_HEAD + klen, meta[i].value, meta[i].len);
        p += RRPCI_META_ENTRY_HEAD + klen + meta[i].len;
    }
    rrpci_put16(out, (uint16_t)(p - out));
    out[2] = (uint8_t)n;
    out[3] = 0;
}

static int meta_decode(const uint8_t *p, size_t len, struct rrpci_meta_view *v, size_t *ret_size,
                       char *why, size_t whylen)
{
    if (len < RRPCI_META_HEAD)
        return meta_bad(why, whylen,
                        "metadata block truncated: %zu payload bytes, its head alone needs %d",
                        len, RRPCI_META_HEAD);
    size_t size = rrpci_get16(p), n = p[2];
    if (size > len)
        return meta_bad(why, whylen,
                        "metadata block truncated: it announces %zu bytes, the frame has %zu",
                        size, len);
    if (size < RRPCI_META_HEAD + RRPCI_META_ENTRY_HEAD)
        return meta_bad(why, whylen,
                        "metadata block announces %zu bytes, fewer than its head and one entry's",
                        size);
    if (p[3] != 0)
        return meta_bad(why, whylen, "metadata block: its reserved byte is 0x%02x, not 0", p[3]);
    if (n == 0 || n > RRPC_META_MAX_ENTRIES)
        return meta_bad(why, whylen, "metadata block with %zu entries (1..%d allowed)", n,
                        RRPC_META_MAX_ENTRIES);
    size_t off = RRPCI_META_HEAD, total = 0;
    char *store = v->store;
    for (size_t i = 0; i < n; i++) {
        if (size - off < RRPCI_META_ENTRY_HEAD)
            return meta_bad(why, whylen, "metadata block truncated in the head of entry %zu",
                            i);
        size_t klen = p[off], vlen = rrpci_get16(p + off + 1);
        off += RRPCI_META_ENTRY_HEAD;
        if (size - off < klen + vlen)
            return meta_bad(why, whylen,
                            "metadata block truncated in entry %zu (%zu key and %zu value bytes "
                            "announced, %zu left in the block)",
                            i, klen, vlen, size - off);
        int r = key_check((const char *)p + off, klen, i, why, whylen);
        if (r)
            return r;
        if (vlen > RRPC_META_MAX_VALUE)
            return meta_bad(why, whylen, "metadata entry %zu: its value has %zu bytes (at most %d)",
                            i, vlen, RRPC_META_MAX_VALUE);
        total += klen + vlen;
        if (total > RRPC_META_MAX_BYTES)
            return meta_bad(why, whylen,
                            "metadata keys and values hold more than %d bytes together",
                            RRPC_META_MAX_BYTES);
        memcpy(store, p + off, klen);
        store[klen] = 0;
        v->e[i].key = store;
        store += klen + 1;
        if (vlen)
            memcpy(store, p + off + klen, vlen);
        store[vlen] = 0;
        v->e[i].value = store;
        v->e[i].len = vlen;
        store += vlen + 1;
        off += klen + vlen;
        v->n = i + 1;
        if (key_repeated(v->e, i))
            return meta_bad(why, whylen, "metadata key \"%s\" appears twice (entry %zu)",
                            v->e[i].key, i);
    }
    if (off != size)
        return meta_bad(why, whylen,
                        "metadata block announces %zu bytes and its entries fill %zu", size,
                        off);
    *ret_size = size;
    return 0;
}

int rrpci_meta_decode(const uint8_t *p, size_t len, struct rrpci_meta_view *v, size_t *ret_size,
                      char *why, size_t whylen)
{
    v->n = 0;
    int r = meta_decode(p, len, v, ret_size, why, whylen);
    if (r)
        v->n = 0; /* nothing of a refused block is kept */
    return r;
}

void rrpci_os_hdr_encode(const struct rrpci_os_hdr *o, uint8_t out[RRPCI_OS_HDR_SIZE])
{
    rrpci_put64(out, o->addr);
    rrpci_put64(out + 8, o->key);
    rrpci_put32(out + 16, o->len);
    rrpci_put32(out + 20, o->imm);
}

int rrpci_os_hdr_decode(const uint8_t *in, size_t len, struct rrpci_os_hdr *o)
{
    if (len < RRPCI_OS_HDR_SIZE)
        return RRPC_E_PROTO;
    o->addr = rrpci_get64(in);
    o->key = rrpci_get64(in + 8);
    o->len = rrpci_get32(in + 16);
    o->imm = rrpci_get32(in + 20);
    return 0;
}

/*
 * Hello (32 bytes): 0 version u8 | 1 nclasses u8 | 2 credits u16 x4 |
 * 10 reserved u16 | 12 max_msg u32 | 16 cookie u64 | 24 rx_buf u32 | 28 reserved u32
 */
void rrpci_hello_encode(const struct rrpci_hello *h, uint8_t out[RRPCI_HELLO_SIZE])
{
    memset(out, 0, RRPCI_HELLO_SIZE);
    out[0] = h->version;
    out[1] = h->nclasses;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        rrpci_put16(out + 2 + 2 * i, h->credits[i]);
    rrpci_put32(out + 12, h->max_msg);
    rrpci_put64(out + 16, h->cookie);
    rrpci_put32(out + 24, h->rx_buf);
}

int rrpci_hello_decode(const uint8_t *in, size_t len, struct rrpci_hello *h)
{
    if (len < RRPCI_HELLO_SIZE)
        return RRPC_E_PROTO;
    memset(h, 0, sizeof(*h));
    h->version = in[0];
    h->nclasses = in[1];
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        h->credits[i] = rrpci_get16(in + 2 + 2 * i);
    h->max_msg = rrpci_get32(in + 12);
    h->cookie = rrpci_get64(in + 16);
    h->rx_buf = rrpci_get32(in + 24);
    return 0;
}

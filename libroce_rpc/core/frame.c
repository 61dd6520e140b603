/* SPDX-License-Identifier: MIT */
#include "core/frame.h"

#include <errno.h>
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

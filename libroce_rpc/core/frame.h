/* SPDX-License-Identifier: MIT */
/* The wire header (docs/protocol.md) and the connection handshake record. */
#ifndef RRPCI_FRAME_H
#define RRPCI_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <roce_rpc/rpc.h>

#define RRPCI_MAGIC 0x43505252u /* "RRPC" as little-endian bytes */
/* 2: tcp sockets opened on demand; 3: a request carries its remaining time,
 * CANCEL; 4: REQUEST and RESPONSE may carry a metadata block (RRPCI_F_META);
 * 5: credit lent and taken back in LEND / LEND_ACK (docs/protocol.md) */
#define RRPCI_PROTO_VERSION 5
#define RRPCI_HDR_SIZE 32

enum rrpci_frame_type {
    RRPCI_T_HELLO = 1,     /* handshake, active -> passive (tcp; verbs uses cm private data) */
    RRPCI_T_HELLO_ACK = 2, /* handshake, passive -> active */
    RRPCI_T_JOIN = 3,      /* tcp: attach a class socket to a connection */
    RRPCI_T_JOIN_ACK = 4,
    RRPCI_T_REQUEST = 5,   /* arg = method id */
    RRPCI_T_RESPONSE = 6,  /* arg = status (int32 in the low bits), payload = data or message */
    RRPCI_T_CREDIT = 7,    /* credits field only */
    RRPCI_T_OS_WRITE = 8,  /* emulated one-sided WRITE: rrpci_os_hdr + data */
    RRPCI_T_OS_READ = 9,   /* emulated one-sided READ: rrpci_os_hdr */
    RRPCI_T_OS_ACK = 10,   /* arg = status; payload = data for a READ */
    RRPCI_T_ERROR = 11,    /* fatal: arg = code, payload = message; the sender closes */
    RRPCI_T_TICKET = 12,   /* active -> passive, first message: the broker's ticket */
    RRPCI_T_TICKET_ACK = 13,
    RRPCI_T_KEEPALIVE = 14, /* either, control class: arg 0 = probe, 1 = answer; no payload */
    RRPCI_T_CANCEL = 15,    /* caller -> server, the request's class: id = the request; no payload */
    RRPCI_T_LEND = 16,     /* either, the class's channel: arg = signed change of the grant the
                             * sender gives its peer; no payload */
    RRPCI_T_LEND_ACK = 17, /* answers a LEND that took credit back: arg = what it took */
    RRPCI_T_MAX_ = 18,
};

/* Flag bits of the header. */
#define RRPCI_F_NOTIFY 0x01u /* OS_WRITE: deliver the immediate to the target */
#define RRPCI_F_META 0x02u   /* REQUEST, RESPONSE: the payload starts with a metadata block */
#define RRPCI_F_LAST 0x04u   /* a credited frame: the sender has no credit of its class left */
#define RRPCI_F_ALL_ 0x07u

struct rrpci_hdr {
    uint8_t version;
    uint8_t type;
    uint8_t cls;
    uint8_t flags;
    uint64_t id;     /* request / operation id */
    uint64_t arg;    /* method id, status, ... by type */
    uint32_t len;    /* payload bytes after the header */
    uint16_t credits; /* credits returned for the header's class */
    uint16_t ttl;     /* REQUEST: the caller's remaining time (rrpci_ttl_*), 0: none */
    /* Not on the wire (false from rrpci_hdr_decode): an OS_WRITE whose data
     * the transport read straight into its target (rrpci_os_write_target);
     * the payload handed up is the sub-header alone. */
    bool placed;
};

/* Types that consume no credit (bounded by the protocol itself). */
static inline bool rrpci_type_is_exempt(uint8_t type)
{
    return type == RRPCI_T_HELLO || type == RRPCI_T_HELLO_ACK || type == RRPCI_T_JOIN ||
           type == RRPCI_T_JOIN_ACK || type == RRPCI_T_CREDIT || type == RRPCI_T_ERROR ||
           type == RRPCI_T_TICKET || type == RRPCI_T_TICKET_ACK || type == RRPCI_T_KEEPALIVE ||
           type == RRPCI_T_CANCEL || type == RRPCI_T_LEND || type == RRPCI_T_LEND_ACK;
}

/* The connection's own frames, not a class's: they travel on the
 * connection's first socket (tcp) or queue pair (verbs), whatever their
 * class field says (docs/protocol.md 6.1, 14). */
static inline bool rrpci_type_is_conn_frame(uint8_t type)
{
    return type == RRPCI_T_HELLO || type == RRPCI_T_HELLO_ACK || type == RRPCI_T_JOIN ||
           type == RRPCI_T_JOIN_ACK || type == RRPCI_T_ERROR || type == RRPCI_T_TICKET ||
           type == RRPCI_T_TICKET_ACK || type == RRPCI_T_KEEPALIVE;
}

/* The largest payload of a credit-exempt frame: what bounds them, since no
 * credit does.  Handshake records, tickets (at most 574 bytes) and ERROR
 * messages fit in RRPCI_CTL_MAX_LEN; CREDIT, KEEPALIVE, TICKET_ACK, CANCEL,
 * LEND and LEND_ACK carry nothing. */
#define RRPCI_CTL_MAX_LEN 4096u
static inline uint32_t rrpci_exempt_max_len(uint8_t type)
{
    return type == RRPCI_T_CREDIT || type == RRPCI_T_KEEPALIVE || type == RRPCI_T_TICKET_ACK ||
                   type == RRPCI_T_CANCEL || type == RRPCI_T_LEND || type == RRPCI_T_LEND_ACK
               ? 0
               : RRPCI_CTL_MAX_LEN;
}

void rrpci_hdr_encode(const struct rrpci_hdr *h, uint8_t out[RRPCI_HDR_SIZE]);

/*
 * A request's remaining time in 16 bits: the top 2 bits are the unit
 * (0: 1 us, 1: 64 us, 2: 4.096 ms, 3: 262.144 ms), the low 14 the count, in
 * the smallest unit that holds it, rounded down (the server never thinks
 * it has more time than the caller gives it; it loses at most 1/256).  0
 * means no deadline; a time of 0 or less encodes as 1 us; more than
 * 16383 x 262.144 ms (about 71.6 minutes) as that.
 */
uint16_t rrpci_ttl_encode(double seconds);
double rrpci_ttl_decode(uint16_t ttl); /* seconds; 0 for "none" */

/*
 * Decodes and validates a header: magic, version, type, class, flags, the
 * reserved field, len <= @max_len, and for credit-exempt types len <=
 * rrpci_exempt_max_len.  Returns 0, RRPC_E_PROTO,
 * RRPC_E_VERSION or RRPC_E_TOO_BIG; @why (may be NULL) gets a static
 * explanation for the log and the DOWN reason.
 */
int rrpci_hdr_decode(const uint8_t in[RRPCI_HDR_SIZE], uint32_t max_len, struct rrpci_hdr *h,
                     const char **why);

/*
 * The metadata block (docs/protocol.md section 10), at the start of the
 * payload of a REQUEST or RESPONSE flagged RRPCI_F_META:
 *   0 size u16 (the whole block, this head included) | 2 count u8 | 3 reserved u8 (0)
 *   then count entries: 0 key length u8 | 1 value length u16 | 3 key | value
 * Bounds: RRPC_META_* of <roce_rpc/rpc.h>.
 */
#define RRPCI_META_HEAD 4
#define RRPCI_META_ENTRY_HEAD 3
/* The largest block: every entry's head, and the keys and values. */
#define RRPCI_META_MAX_BLOCK                                                                      \
    (RRPCI_META_HEAD + RRPCI_META_ENTRY_HEAD * RRPC_META_MAX_ENTRIES + RRPC_META_MAX_BYTES)

/* Checks @n entries at @meta against the bounds (keys: lowercase tokens,
 * unique).  Returns 0 and the block's size in *@ret_size, or
 * RRPC_E_METADATA with a sentence naming the entry and the bound in @why
 * (@whylen bytes, NUL-terminated). */
int rrpci_meta_check(const rrpc_meta *meta, size_t n, size_t *ret_size, char *why,
                     size_t whylen);
/* Writes the block of @n checked entries at @out (rrpci_meta_check's size). */
void rrpci_meta_encode(const rrpc_meta *meta, size_t n, uint8_t *out);

/* A decoded block: its entries point into @store, where keys and values are
 * NUL-terminated copies. */
struct rrpci_meta_view {
    size_t n;
    rrpc_meta e[RRPC_META_MAX_ENTRIES];
    char store[RRPC_META_MAX_BYTES + 2 * RRPC_META_MAX_ENTRIES];
};
/* Decodes and checks the block at the start of the @len payload bytes at
 * @p into @v; *@ret_size gets the block's size (the application's bytes
 * follow it).  Returns 0, or RRPC_E_METADATA with the reason in @why
 * (truncated, too many entries, a key or value too long, a bad key
 * character, a duplicate key, a size that does not match its entries). */
int rrpci_meta_decode(const uint8_t *p, size_t len, struct rrpci_meta_view *v, size_t *ret_size,
                      char *why, size_t whylen);

/* Sub-header of emulated one-sided frames (24 bytes, little-endian). */
#define RRPCI_OS_HDR_SIZE 24
struct rrpci_os_hdr {
    uint64_t addr;
    uint64_t key;
    uint32_t len; /* READ: bytes wanted; WRITE: data bytes that follow */
    uint32_t imm;
};
void rrpci_os_hdr_encode(const struct rrpci_os_hdr *o, uint8_t out[RRPCI_OS_HDR_SIZE]);
int rrpci_os_hdr_decode(const uint8_t *in, size_t len, struct rrpci_os_hdr *o);

/*
 * The handshake record: carried by HELLO / HELLO_ACK frames on tcp and in
 * the rdma_cm private data on verbs (it fits in the 56 bytes of a REQ).
 */
#define RRPCI_HELLO_SIZE 32
#define RRPCI_MAX_CLASSES 4
/* Inside the library and on the wire a class is an index 0..3; the public
 * values (rrpc_class) are the index + 1, and 0 means "the default class". */
enum rrpci_cls {
    RRPCI_CLS_CONTROL = 0,
    RRPCI_CLS_LOW_LATENCY = 1,
    RRPCI_CLS_BULK = 2,
    RRPCI_CLS_BACKGROUND = 3,
};
/* The index of public class @api, or -1 when it names none (0 included). */
static inline int rrpci_cls_index(int api)
{
    return api >= 1 && api <= RRPCI_MAX_CLASSES ? api - 1 : -1;
}
/* The public value of class index @idx. */
static inline int rrpci_cls_public(int idx)
{
    return idx + 1;
}
struct rrpci_hello {
    uint8_t version;
    uint8_t nclasses;
    uint16_t credits[RRPCI_MAX_CLASSES]; /* what the sender grants its peer, per class */
    uint32_t max_msg;                    /* the largest payload the sender accepts */
    uint64_t cookie;                     /* tcp: connection id for JOIN; verbs: unused */
    uint32_t rx_buf;                     /* verbs: receive buffer size */
};
void rrpci_hello_encode(const struct rrpci_hello *h, uint8_t out[RRPCI_HELLO_SIZE]);
int rrpci_hello_decode(const uint8_t *in, size_t len, struct rrpci_hello *h);

/* Little-endian helpers. */
static inline void rrpci_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void rrpci_put32(uint8_t *p, uint32_t v)
{
    rrpci_put16(p, (uint16_t)v);
    rrpci_put16(p + 2, (uint16_t)(v >> 16));
}
static inline void rrpci_put64(uint8_t *p, uint64_t v)
{
    rrpci_put32(p, (uint32_t)v);
    rrpci_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint16_t rrpci_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t rrpci_get32(const uint8_t *p)
{
    return (uint32_t)rrpci_get16(p) | ((uint32_t)rrpci_get16(p + 2) << 16);
}
static inline uint64_t rrpci_get64(const uint8_t *p)
{
    return (uint64_t)rrpci_get32(p) | ((uint64_t)rrpci_get32(p + 4) << 32);
}

#endif

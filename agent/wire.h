/* SPDX-License-Identifier: MIT */
/*
 * The agent protocol's messages (docs/deployment.md, "Encrypted RoCE"), and
 * the query socket's request: pure parsers and builders, so that
 * tests/fuzz/fuzz_agent_wire.c reaches them without TLS or the kernel.
 *
 * PAIR (48 bytes, initiator -> responder), all integers big-endian:
 *   0 magic "RRPA"  4 version (1)  5 type (1)  6 family (4 or 6)  7 zero
 *   8 initiator's address (16; IPv4 in the first 4, the rest zero)
 *   24 responder's address (16, likewise)  40 initiator's inbound SPI
 *   44 lifetime in seconds (0: none)
 * OK / ERR (144 bytes, responder -> initiator):
 *   0 magic  4 version  5 type (2 OK, 3 ERR)  6, 7 zero  8 responder's
 *   inbound SPI (OK)  12 code, a negative errno (ERR)  16 reason (128
 *   bytes, NUL-padded; ERR)
 */
#ifndef RRPC_AGENT_WIRE_H
#define RRPC_AGENT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define AG_MAGIC 0x52525041u /* "RRPA" */
#define AG_VERSION 1
#define AG_T_PAIR 1
#define AG_T_OK 2
#define AG_T_ERR 3
#define AG_REQ_SIZE 48
#define AG_REP_SIZE 144
#define AG_REASON 128
#define AG_MIN_SPI 0x100 /* SPIs below are reserved (RFC 4303) */

struct ag_pair_msg {
    int family;                    /* AF_INET or AF_INET6 */
    uint8_t initiator[16], responder[16]; /* network order, zero-padded */
    uint32_t spi_i, lifetime;
};

struct ag_reply_msg {
    int type;                /* AG_T_OK or AG_T_ERR */
    uint32_t spi;            /* OK: >= AG_MIN_SPI */
    int32_t code;            /* ERR: what the peer sent (a negative errno if it is sane) */
    char reason[AG_REASON];  /* ERR: NUL-terminated; bytes outside printable ASCII are '?' */
};

/* Parses a PAIR request: 0, or -EPROTO (not a version 1 PAIR: magic,
 * version, type, family, or a reserved or padding byte not zero).  The
 * address and SPI checks against this host are the caller's. */
int ag_pair_parse(const uint8_t msg[AG_REQ_SIZE], struct ag_pair_msg *out);
/* Writes @m as a PAIR request (the inverse of ag_pair_parse). */
void ag_pair_build(const struct ag_pair_msg *m, uint8_t msg[AG_REQ_SIZE]);

/* Parses an answer: 0, or -EPROTO (not a version 1 OK or ERR, a reserved
 * byte not zero, or an OK whose SPI is below AG_MIN_SPI). */
int ag_reply_parse(const uint8_t msg[AG_REP_SIZE], struct ag_reply_msg *out);
/* Writes an answer: @reason (may be NULL) cut to AG_REASON - 1 bytes. */
void ag_reply_build(int type, uint32_t spi, int32_t code, const char *reason,
                    uint8_t msg[AG_REP_SIZE]);

/* Parses the query socket's request, @len bytes (not NUL-terminated):
 * "PAIR? " and an IPv4 or IPv6 address, nothing else (no newline).  0 with
 * *@family and @addr (zero-padded), or -EINVAL. */
int ag_query_parse(const char *req, size_t len, int *family, uint8_t addr[16]);

#endif

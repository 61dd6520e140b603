/* SPDX-License-Identifier: MIT */
/*
 * fuzz_agent_wire: rrpc-agent's message parsers (agent/wire.c), which a
 * hostile peer at the agent's port (after its TLS handshake) or a local
 * process at the query socket feeds: ag_pair_parse (PAIR, 48 bytes),
 * ag_reply_parse (OK / ERR, 144 bytes), ag_query_parse ("PAIR? ADDR").
 *
 * Input: byte 0 picks the parser (mod 3: PAIR, answer, query); the rest is
 * the message (cut or zero-padded to the fixed sizes; the query's exact
 * bytes).  Checks:
 *  - PAIR accepted exactly when the model accepts (magic, version 1, type
 *    1, family 4 or 6, reserved byte and IPv4 padding zero), and then
 *    canonical: ag_pair_build of what was parsed gives the same 48 bytes;
 *  - an answer accepted exactly when the model accepts (magic, version,
 *    type 2 or 3, reserved bytes zero, an OK's SPI >= 0x100); its reason is
 *    NUL-terminated, shorter than 128, printable ASCII only (it goes to the
 *    log), and equals the message's reason bytes with the others as '?';
 *    built again and parsed, it gives the same fields;
 *  - a query accepted only when it starts "PAIR? " and has no NUL, and its
 *    address written back by inet_ntop and parsed again is the same.
 */
#include <arpa/inet.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include "fuzz.h"
#include "wire.h"

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void pair(const uint8_t *d, size_t n)
{
    uint8_t m[AG_REQ_SIZE] = {0};
    memcpy(m, d, n < sizeof(m) ? n : sizeof(m));
    struct ag_pair_msg pm;
    int r = ag_pair_parse(m, &pm);
    bool pad_ok = true;
    if (m[6] == 4)
        for (int i = 0; i < 12; i++)
            pad_ok = pad_ok && !m[12 + i] && !m[28 + i];
    bool model = be32(m) == AG_MAGIC && m[4] == 1 && m[5] == 1 && (m[6] == 4 || m[6] == 6) &&
                 !m[7] && pad_ok;
    FUZZ_CHECK((r == 0) == model);
    if (r)
        return;
    FUZZ_CHECK(pm.family == (m[6] == 4 ? AF_INET : AF_INET6));
    FUZZ_CHECK(pm.spi_i == be32(m + 40) && pm.lifetime == be32(m + 44));
    uint8_t again[AG_REQ_SIZE];
    ag_pair_build(&pm, again);
    FUZZ_CHECK(!memcmp(again, m, sizeof(m)));
}

static void answer(const uint8_t *d, size_t n)
{
    uint8_t m[AG_REP_SIZE] = {0};
    memcpy(m, d, n < sizeof(m) ? n : sizeof(m));
    struct ag_reply_msg rm;
    memset(&rm, 0xa5, sizeof(rm));
    int r = ag_reply_parse(m, &rm);
    bool model = be32(m) == AG_MAGIC && m[4] == 1 && (m[5] == 2 || m[5] == 3) && !m[6] &&
                 !m[7] && (m[5] == 3 || be32(m + 8) >= 0x100);
    FUZZ_CHECK((r == 0) == model);
    if (r)
        return;
    FUZZ_CHECK(rm.type == m[5] && rm.spi == be32(m + 8) && rm.code == (int32_t)be32(m + 12));
    size_t len = strnlen(rm.reason, sizeof(rm.reason));
    FUZZ_CHECK(len < AG_REASON);
    for (size_t i = 0; i < len; i++) {
        uint8_t c = m[16 + i];
        FUZZ_CHECK(c != 0);
        FUZZ_CHECK(rm.reason[i] == (c >= 0x20 && c < 0x7f ? (char)c : '?'));
    }
    FUZZ_CHECK(len == AG_REASON - 1 || m[16 + len] == 0);
    uint8_t again[AG_REP_SIZE];
    ag_reply_build(rm.type, rm.spi, rm.code, rm.reason, again);
    struct ag_reply_msg rm2;
    FUZZ_CHECK(ag_reply_parse(again, &rm2) == 0);
    FUZZ_CHECK(rm2.type == rm.type && rm2.spi == rm.spi && rm2.code == rm.code &&
               !strcmp(rm2.reason, rm.reason));
}

static void query(const uint8_t *d, size_t n)
{
    int fam = -1;
    uint8_t addr[16];
    int r = ag_query_parse((const char *)d, n, &fam, addr);
    if (r)
        return;
    FUZZ_CHECK(n > 6 && !memcmp(d, "PAIR? ", 6) && !memchr(d, 0, n));
    FUZZ_CHECK(fam == AF_INET || fam == AF_INET6);
    char line[6 + INET6_ADDRSTRLEN] = "PAIR? ";
    FUZZ_CHECK(inet_ntop(fam, addr, line + 6, INET6_ADDRSTRLEN));
    int fam2 = -1;
    uint8_t addr2[16];
    FUZZ_CHECK(ag_query_parse(line, strlen(line), &fam2, addr2) == 0);
    FUZZ_CHECK(fam2 == fam && !memcmp(addr2, addr, 16));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0: pair(data + 1, size - 1); break;
    case 1: answer(data + 1, size - 1); break;
    default: query(data + 1, size - 1); break;
    }
    return 0;
}

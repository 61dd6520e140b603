/* SPDX-License-Identifier: MIT */
/* The agent protocol's messages (wire.h). */
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

static void put32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static bool zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

int ag_pair_parse(const uint8_t msg[AG_REQ_SIZE], struct ag_pair_msg *out)
{
    if (get32(msg) != AG_MAGIC || msg[4] != AG_VERSION || msg[5] != AG_T_PAIR ||
        (msg[6] != 4 && msg[6] != 6) || msg[7])
        return -EPROTO;
    if (msg[6] == 4 && (!zero(msg + 12, 12) || !zero(msg + 28, 12)))
        return -EPROTO;
    out->family = msg[6] == 4 ? AF_INET : AF_INET6;
    memcpy(out->initiator, msg + 8, 16);
    memcpy(out->responder, msg + 24, 16);
    out->spi_i = get32(msg + 40);
    out->lifetime = get32(msg + 44);
    return 0;
}

void ag_pair_build(const struct ag_pair_msg *m, uint8_t msg[AG_REQ_SIZE])
{
    memset(msg, 0, AG_REQ_SIZE);
    put32(msg, AG_MAGIC);
    msg[4] = AG_VERSION;
    msg[5] = AG_T_PAIR;
    msg[6] = m->family == AF_INET ? 4 : 6;
    size_t alen = m->family == AF_INET ? 4 : 16;
    memcpy(msg + 8, m->initiator, alen);
    memcpy(msg + 24, m->responder, alen);
    put32(msg + 40, m->spi_i);
    put32(msg + 44, m->lifetime);
}

int ag_reply_parse(const uint8_t msg[AG_REP_SIZE], struct ag_reply_msg *out)
{
    if (get32(msg) != AG_MAGIC || msg[4] != AG_VERSION ||
        (msg[5] != AG_T_OK && msg[5] != AG_T_ERR) || msg[6] || msg[7])
        return -EPROTO;
    out->type = msg[5];
    out->spi = get32(msg + 8);
    out->code = (int32_t)get32(msg + 12);
    if (out->type == AG_T_OK && out->spi < AG_MIN_SPI)
        return -EPROTO;
    size_t n = 0;
    while (n < AG_REASON - 1 && msg[16 + n]) {
        uint8_t c = msg[16 + n];
        out->reason[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out->reason[n] = 0;
    return 0;
}

void ag_reply_build(int type, uint32_t spi, int32_t code, const char *reason,
                    uint8_t msg[AG_REP_SIZE])
{
    memset(msg, 0, AG_REP_SIZE);
    put32(msg, AG_MAGIC);
    msg[4] = AG_VERSION;
    msg[5] = (uint8_t)type;
    put32(msg + 8, spi);
    put32(msg + 12, (uint32_t)code);
    if (reason) {
        size_t n = strnlen(reason, AG_REASON - 1);
        memcpy(msg + 16, reason, n);
    }
}

int ag_query_parse(const char *req, size_t len, int *family, uint8_t addr[16])
{
    static const char verb[] = "PAIR? ";
    char text[INET6_ADDRSTRLEN];
    size_t vl = sizeof(verb) - 1;
    if (len <= vl || len - vl >= sizeof(text) || memcmp(req, verb, vl) ||
        memchr(req, 0, len))
        return -EINVAL;
    memcpy(text, req + vl, len - vl);
    text[len - vl] = 0;
    memset(addr, 0, 16);
    if (inet_pton(AF_INET, text, addr) == 1)
        *family = AF_INET;
    else if (inet_pton(AF_INET6, text, addr) == 1)
        *family = AF_INET6;
    else
        return -EINVAL;
    return 0;
}

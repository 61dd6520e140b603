/* SPDX-License-Identifier: MIT */
/*
 * A hand-written roce-rpc peer over plain TCP sockets, for injecting frames
 * the library would never send.  It writes the wire format of
 * docs/protocol.md byte by byte, independently of the library's encoder.
 */
#ifndef RRPC_TEST_RAW_PEER_H
#define RRPC_TEST_RAW_PEER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static inline void raw_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t raw_get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void raw_header(uint8_t h[32], int type, int cls, int flags, uint64_t id,
                              uint64_t arg, uint32_t len, uint16_t credits)
{
    memset(h, 0, 32);
    memcpy(h, "RRPC", 4);
    h[4] = 5; /* protocol version */
    h[5] = (uint8_t)type;
    h[6] = (uint8_t)cls;
    h[7] = (uint8_t)flags;
    raw_le(h + 8, id, 8);
    raw_le(h + 16, arg, 8);
    raw_le(h + 24, len, 4);
    raw_le(h + 28, credits, 2);
}

/* A TCP connection to @host:@port, from the address @src when not NULL. */
static inline int raw_connect_from(const char *src, const char *host, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (fd >= 0 && src) {
        inet_pton(AF_INET, src, &sa.sin_addr);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            close(fd);
            return -1;
        }
    }
    sa.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static inline int raw_connect(const char *host, int port)
{
    return raw_connect_from(NULL, host, port);
}

static inline int raw_read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Reads one frame; the payload (up to @cap bytes) into @payload. */
static inline int raw_read_frame(int fd, uint8_t hdr[32], uint8_t *payload, size_t cap)
{
    if (raw_read_full(fd, hdr, 32) < 0)
        return -1;
    uint32_t len = (uint32_t)raw_get(hdr + 24, 4);
    if (len > cap)
        return -1;
    return len ? raw_read_full(fd, payload, len) : 0;
}

/* The server refuses: an ERROR frame (type 11) then EOF.  0 and its code. */
static inline int raw_read_refusal(int fd, int *code)
{
    uint8_t hdr[32], msg[512];
    if (raw_read_frame(fd, hdr, msg, sizeof(msg)) < 0 || hdr[5] != 11)
        return -1;
    *code = (int32_t)(uint32_t)raw_get(hdr + 16, 4);
    char c;
    return read(fd, &c, 1) == 0 ? 0 : -1;
}

/* fd[0] is the connection's first socket, which also carries low_latency
 * (fd[1] is the same descriptor); fd[2] and fd[3] are bulk's and
 * background's own sockets, attached with JOIN. */
struct raw_conn {
    int fd[4];
    uint64_t cookie;
    uint8_t secret[16];
};

/* Attaches a new socket, from @src (NULL: any address), to @rc's connection
 * as class @cls's own socket, with JOIN {cookie, @secret}.  The socket, or
 * -1; the server's answer (JOIN_ACK, or ERROR and its code) is for the
 * caller to read. */
static inline int raw_join(const struct raw_conn *rc, const char *src, const char *host, int port,
                           int cls, const uint8_t secret[16])
{
    int fd = raw_connect_from(src, host, port);
    if (fd < 0)
        return -1;
    uint8_t hdr[32], join[24];
    raw_le(join, rc->cookie, 8);
    memcpy(join + 8, secret, 16);
    raw_header(hdr, 3, cls, 0, 0, 0, 24, 0);
    if (write(fd, hdr, 32) != 32 || write(fd, join, 24) != 24) {
        close(fd);
        return -1;
    }
    return fd;
}

/* HELLO on the first socket, JOIN on bulk's and background's own sockets,
 * from @src (NULL: any address), granting @grant credits per class; the
 * server's grants go to @srv_grant (may be NULL).  0, or -1 (refused or
 * closed). */
static inline int raw_handshake_ex(struct raw_conn *rc, const char *src, const char *host,
                                   int port, int grant, int srv_grant[4])
{
    for (int i = 0; i < 4; i++)
        rc->fd[i] = -1;
    if ((rc->fd[0] = raw_connect_from(src, host, port)) < 0)
        return -1;
    rc->fd[1] = rc->fd[0];
    uint8_t hdr[32], hello[32] = {5, 4};
    for (int i = 0; i < 4; i++)
        raw_le(hello + 2 + 2 * i, (uint64_t)grant, 2);
    raw_le(hello + 12, 1u << 20, 4);
    raw_header(hdr, 1, 0, 0, 0, 0, 32, 0);
    if (write(rc->fd[0], hdr, 32) != 32 || write(rc->fd[0], hello, 32) != 32)
        return -1;
    uint8_t ack[64];
    if (raw_read_frame(rc->fd[0], hdr, ack, sizeof(ack)) < 0 || hdr[5] != 2 ||
        raw_get(hdr + 24, 4) < 48)
        return -1;
    for (int i = 0; srv_grant && i < 4; i++)
        srv_grant[i] = (int)raw_get(ack + 2 + 2 * i, 2);
    rc->cookie = raw_get(ack + 16, 8);
    memcpy(rc->secret, ack + 32, 16);
    for (int i = 2; i < 4; i++) {
        if ((rc->fd[i] = raw_join(rc, src, host, port, i, rc->secret)) < 0)
            return -1;
        if (raw_read_frame(rc->fd[i], hdr, ack, sizeof(ack)) < 0 || hdr[5] != 4)
            return -1;
    }
    return 0;
}

/* raw_handshake_ex from any address, granting 64 per class. */
static inline int raw_handshake(struct raw_conn *rc, const char *host, int port)
{
    return raw_handshake_ex(rc, NULL, host, port, 64, NULL);
}

static inline void raw_close(struct raw_conn *rc)
{
    for (int i = 0; i < 4; i++)
        if (rc->fd[i] >= 0 && (i == 0 || rc->fd[i] != rc->fd[0]))
            close(rc->fd[i]);
}

/* The method id of @name: 64-bit FNV-1a (docs/protocol.md §10). */
static inline uint64_t raw_method_id(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++)
        h = (h ^ (uint8_t)*name) * 0x100000001b3ull;
    return h;
}

/* Reads frames on @fd (skipping CREDIT and LEND) up to the RESPONSE with @id: 0 when
 * it has status 0 and "ping".  Another frame on the way: -1, its header in
 * @other_hdr (may be NULL). */
static inline int raw_echo_answer(int fd, uint64_t id, uint8_t other_hdr[32])
{
    uint8_t hdr[32], msg[512];
    for (;;) {
        if (raw_read_frame(fd, hdr, msg, sizeof(msg)) < 0)
            return -1;
        if (hdr[5] == 7 || hdr[5] == 16)
            continue;
        if (hdr[5] != 6 || raw_get(hdr + 8, 8) != id) {
            if (other_hdr)
                memcpy(other_hdr, hdr, 32);
            return -1;
        }
        return raw_get(hdr + 16, 4) == 0 && raw_get(hdr + 24, 4) == 4 && memcmp(msg, "ping", 4) == 0
                   ? 0
                   : -1;
    }
}

/* Sends REQUEST "echo" {"ping"} of class @cls with @id on @fd, and reads
 * frames on @fd up to its answer (raw_echo_answer). */
static inline int raw_echo(int fd, int cls, uint64_t id, uint8_t other_hdr[32])
{
    uint8_t hdr[32];
    raw_header(hdr, 5, cls, 0, id, raw_method_id("echo"), 4, 0);
    if (write(fd, hdr, 32) != 32 || write(fd, "ping", 4) != 4)
        return -1;
    return raw_echo_answer(fd, id, other_hdr);
}

/* A metadata block (docs/protocol.md section 10) of @n entries at @keys
 * and @vals (NUL-terminated) in @out; its size.  No bound is checked: the
 * point is to send what the library would refuse. */
static inline size_t raw_meta_block(uint8_t *out, size_t n, const char *const *keys,
                                    const char *const *vals)
{
    size_t off = 4;
    for (size_t i = 0; i < n; i++) {
        size_t kl = strlen(keys[i]), vl = strlen(vals[i]);
        out[off] = (uint8_t)kl;
        raw_le(out + off + 1, vl, 2);
        memcpy(out + off + 3, keys[i], kl);
        memcpy(out + off + 3 + kl, vals[i], vl);
        off += 3 + kl + vl;
    }
    raw_le(out, off, 2);
    out[2] = (uint8_t)n;
    out[3] = 0;
    return off;
}

/* Sends REQUEST @method of class @cls with @id, flagged as carrying
 * metadata, with the @blen bytes at @block then the @plen at @payload. */
static inline int raw_request_meta(int fd, int cls, uint64_t id, const char *method,
                                   const void *block, size_t blen, const void *payload,
                                   size_t plen)
{
    uint8_t hdr[32];
    raw_header(hdr, 5, cls, 0x02, id, raw_method_id(method), (uint32_t)(blen + plen), 0);
    if (write(fd, hdr, 32) != 32 || write(fd, block, blen) != (ssize_t)blen ||
        (plen && write(fd, payload, plen) != (ssize_t)plen))
        return -1;
    return 0;
}

/* Reads frames on @fd (skipping CREDIT) up to the RESPONSE with @id; its
 * status, its message (NUL-terminated, in @msg of @cap bytes), or -1 on
 * another frame or a read error. */
static inline int raw_response(int fd, uint64_t id, int32_t *status, char *msg, size_t cap)
{
    uint8_t hdr[32];
    for (;;) {
        memset(msg, 0, cap);
        if (raw_read_frame(fd, hdr, (uint8_t *)msg, cap - 1) < 0)
            return -1;
        if (hdr[5] == 7)
            continue;
        if (hdr[5] != 6 || raw_get(hdr + 8, 8) != id)
            return -1;
        *status = (int32_t)(uint32_t)raw_get(hdr + 16, 4);
        return 0;
    }
}

/* An emulated one-sided WRITE on the bulk socket; *status from its OS_ACK. */
static inline int raw_os_write(struct raw_conn *rc, uint64_t addr, uint64_t key, const void *data,
                               uint32_t len, int *status)
{
    static uint64_t id = 1000;
    uint8_t hdr[32], os[24];
    raw_header(hdr, 8, 2, 0, ++id, 0, 24 + len, 0);
    raw_le(os, addr, 8);
    raw_le(os + 8, key, 8);
    raw_le(os + 16, len, 4);
    raw_le(os + 20, 0, 4);
    if (write(rc->fd[2], hdr, 32) != 32 || write(rc->fd[2], os, 24) != 24 ||
        write(rc->fd[2], data, len) != (ssize_t)len)
        return -1;
    uint8_t msg[512];
    for (;;) { /* skip CREDIT frames */
        if (raw_read_frame(rc->fd[2], hdr, msg, sizeof(msg)) < 0)
            return -1;
        if (hdr[5] == 10)
            break;
    }
    if (raw_get(hdr + 8, 8) != id)
        return -1;
    *status = (int32_t)(uint32_t)raw_get(hdr + 16, 4);
    return 0;
}

#endif

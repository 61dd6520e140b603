/* SPDX-License-Identifier: MIT */
/* A raw client of rrpcd's control protocol for tests: its own TLS session
 * (a certificate of scripts/make-dev-certs.sh, or none), from a chosen source
 * address on 127/8, frames packed by hand, for what the library would never
 * send.  Include after cmocka.h; link broker_internal_dep (the socket BIO). */
#ifndef RRPC_TEST_RAW_CLIENT_H
#define RRPC_TEST_RAW_CLIENT_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <msgpack.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "broker/sockbio.h" /* TLS that never raises SIGPIPE */

struct raw {
    SSL_CTX *sctx;
    SSL *ssl;
    int fd;
    char *last; /* the last answer: msgpack-c's objects point into it */
};

/* A TCP connection to rrpcd on 127.0.0.1:@port from the source address @src
 * (NULL: any), blocking, with @timeout_s second send and receive timeouts. */
static inline int raw_tcp(int port, const char *src, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (src) {
        struct sockaddr_in b = { .sin_family = AF_INET };
        assert_int_equal(inet_pton(AF_INET, src, &b.sin_addr), 1);
        assert_int_equal(bind(fd, (struct sockaddr *)&b, sizeof(b)), 0);
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = { timeout_s, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

/* A TLS session with rrpcd on 127.0.0.1:@port as @who (@dir/@who.crt, .key)
 * or anonymous (@who NULL: no certificate), CA @dir/ca.crt, from the source
 * address @src (NULL: any), with @timeout_s second socket timeouts.  0, or -1
 * when the handshake failed.  TLS 1.3: the client is done before the server
 * has read its Finished, so a session closed at accept shows up on the first
 * read. */
static inline int raw_open_timed(struct raw *t, const char *dir, int port, const char *who,
                                 const char *src, int timeout_s)
{
    char p[300];
    memset(t, 0, sizeof(*t));
    t->sctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(t->sctx, TLS1_3_VERSION);
    snprintf(p, sizeof(p), "%s/ca.crt", dir);
    assert_int_equal(SSL_CTX_load_verify_locations(t->sctx, p, NULL), 1);
    SSL_CTX_set_verify(t->sctx, SSL_VERIFY_PEER, NULL);
    if (who) {
        snprintf(p, sizeof(p), "%s/%s.crt", dir, who);
        assert_int_equal(SSL_CTX_use_certificate_chain_file(t->sctx, p), 1);
        snprintf(p, sizeof(p), "%s/%s.key", dir, who);
        assert_int_equal(SSL_CTX_use_PrivateKey_file(t->sctx, p, SSL_FILETYPE_PEM), 1);
    }
    t->fd = raw_tcp(port, src, timeout_s);
    t->ssl = SSL_new(t->sctx);
    assert_int_equal(rrpci_ssl_set_socket(t->ssl, t->fd), 0);
    ERR_clear_error();
    int r = SSL_connect(t->ssl) == 1 ? 0 : -1;
    ERR_clear_error();
    return r;
}

/* raw_open_timed with 10 s timeouts. */
static inline int raw_open(struct raw *t, const char *dir, int port, const char *who,
                           const char *src)
{
    return raw_open_timed(t, dir, port, who, src, 10);
}

static inline void raw_close(struct raw *t)
{
    free(t->last);
    SSL_free(t->ssl);
    if (t->fd >= 0)
        close(t->fd);
    SSL_CTX_free(t->sctx);
    memset(t, 0, sizeof(*t));
    t->fd = -1;
}

static inline int raw_write(struct raw *t, const void *p, size_t len)
{
    size_t n = 0;
    ERR_clear_error();
    int ok = SSL_write_ex(t->ssl, p, len, &n);
    ERR_clear_error();
    return ok && n == len ? 0 : -1;
}

static inline int raw_read_all(struct raw *t, void *p, size_t len)
{
    for (size_t got = 0; got < len;) {
        size_t n = 0;
        ERR_clear_error();
        if (!SSL_read_ex(t->ssl, (char *)p + got, len - got, &n)) {
            ERR_clear_error();
            return -1;
        }
        got += n;
    }
    return 0;
}

/* Whether rrpcd ended the session: the next read sees its end (10 s at most). */
static inline bool raw_ended(struct raw *t)
{
    uint8_t b;
    return raw_read_all(t, &b, 1) != 0;
}

static inline void raw_pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static inline const msgpack_object *raw_get(const msgpack_object *m, const char *key)
{
    for (uint32_t i = 0; m->type == MSGPACK_OBJECT_MAP && i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
            !memcmp(k->via.str.ptr, key, k->via.str.size))
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

/* Sends @len bytes as one frame (its length prefix, then them): 0, or -1
 * when the session ended. */
static inline int raw_send(struct raw *t, const void *p, size_t len)
{
    uint8_t hdr[4] = { (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                       (uint8_t)(len >> 24) };
    return raw_write(t, hdr, 4) || (len && raw_write(t, p, len)) ? -1 : 0;
}

/* Reads one frame into @u (its bytes kept in t->last until the next): 0, or
 * -1 when the session ended.  Fills *ret_len (unless NULL) with its length. */
static inline int raw_recv(struct raw *t, msgpack_unpacked *u, size_t *ret_len)
{
    uint8_t hdr[4];
    if (raw_read_all(t, hdr, 4))
        return -1;
    uint32_t len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    if (ret_len)
        *ret_len = len;
    assert_true(len > 0 && len <= (1u << 20));
    char *buf = malloc(len);
    assert_non_null(buf);
    if (raw_read_all(t, buf, len)) {
        free(buf);
        return -1;
    }
    size_t off = 0;
    assert_int_equal(msgpack_unpack_next(u, buf, len, &off), MSGPACK_UNPACK_SUCCESS);
    free(t->last);
    t->last = buf;
    return 0;
}

/* Sends the request in @sb, reads the answer into @u: 0, or -1 when the
 * session ended.  Fills *ret_len (unless NULL) with the answer's length. */
static inline int raw_rpc(struct raw *t, msgpack_sbuffer *sb, msgpack_unpacked *u,
                          size_t *ret_len)
{
    if (raw_send(t, sb->data, sb->size))
        return -1;
    return raw_recv(t, u, ret_len);
}

/* A request's envelope, with @n more entries to pack. */
static inline void raw_begin(msgpack_sbuffer *sb, msgpack_packer *pk, const char *op, int id,
                             int n)
{
    msgpack_sbuffer_clear(sb);
    msgpack_pack_map(pk, 3 + (uint32_t)n);
    raw_pk_str(pk, "v");
    msgpack_pack_uint8(pk, 2); /* the control protocol's version */
    raw_pk_str(pk, "id");
    msgpack_pack_uint32(pk, (uint32_t)id);
    raw_pk_str(pk, "op");
    raw_pk_str(pk, op);
}

/* A request being packed (@sb through @pk) and its answer (@u). */
struct raw_req {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked u;
};

/* Readies @q (which must not move until raw_req_end) with the envelope of
 * @op, id @id, and room for @n more entries the caller packs into q->pk. */
static inline void raw_req_begin(struct raw_req *q, const char *op, int id, int n)
{
    msgpack_sbuffer_init(&q->sb);
    msgpack_packer_init(&q->pk, &q->sb, msgpack_sbuffer_write);
    msgpack_unpacked_init(&q->u);
    raw_begin(&q->sb, &q->pk, op, id, n);
}

static inline void raw_req_end(struct raw_req *q)
{
    msgpack_unpacked_destroy(&q->u);
    msgpack_sbuffer_destroy(&q->sb);
}

static inline bool raw_answer_ok(const msgpack_unpacked *u)
{
    const msgpack_object *ok = raw_get(&u->data, "ok");
    return ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean;
}

/* The answer's str @key copied into @out ("" when none). */
static inline const char *raw_text(const msgpack_unpacked *u, const char *key, char *out,
                                   size_t outlen)
{
    const msgpack_object *o = raw_get(&u->data, key);
    size_t n = o && o->type == MSGPACK_OBJECT_STR ? o->via.str.size : 0;
    if (n >= outlen)
        n = outlen - 1;
    if (n)
        memcpy(out, o->via.str.ptr, n);
    out[n] = 0;
    return out;
}

/* hello: 0 when rrpcd answered ok, -1 when the session ended; any other
 * answer fails the test. */
static inline int raw_hello(struct raw *t)
{
    struct raw_req q;
    raw_req_begin(&q, "hello", 1, 0);
    int r = raw_rpc(t, &q.sb, &q.u, NULL);
    if (!r)
        assert_true(raw_answer_ok(&q.u));
    raw_req_end(&q);
    return r;
}

#endif

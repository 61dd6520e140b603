/* SPDX-License-Identifier: MIT */
/*
 * One TLS 1.3 session with one rrpcd (client_int.h): TCP connect, handshake
 * and hello within one deadline, blocking TLS I/O on a non-blocking socket,
 * and the control protocol's framing (proto.h) of requests, answers and
 * pushes.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "broker/client_int.h"
#include "broker/sockbio.h"
#include "util/resolve.h"

/* ---- the TLS connection ---------------------------------------------------- */

void rrpci_session_close(struct rrpc_broker *b)
{
    if (b->ssl) {
        SSL_shutdown(b->ssl);
        SSL_free(b->ssl);
        b->ssl = NULL;
    }
    if (b->fd >= 0)
        close(b->fd);
    b->fd = -1;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - rrpci_mono_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

/* Runs one SSL call to completion (handshake, a full write or a full read). */
enum tls_op { OP_HANDSHAKE, OP_WRITE, OP_READ };
static int tls_do(struct rrpc_broker *b, enum tls_op op, void *buf, size_t len, int64_t deadline)
{
    size_t done = 0;
    for (;;) {
        size_t n = 0;
        int ok;
        ERR_clear_error();
        if (op == OP_HANDSHAKE) {
            ok = SSL_connect(b->ssl) == 1;
        } else if (op == OP_WRITE) {
            ok = SSL_write_ex(b->ssl, (char *)buf + done, len - done, &n);
        } else {
            ok = SSL_read_ex(b->ssl, (char *)buf + done, len - done, &n);
        }
        if (ok) {
            done += n;
            if (op == OP_HANDSHAKE || done == len)
                return 0;
            continue;
        }
        int e = SSL_get_error(b->ssl, 0);
        int r;
        if (e == SSL_ERROR_WANT_READ)
            r = wait_fd(b->fd, POLLIN, deadline);
        else if (e == SSL_ERROR_WANT_WRITE)
            r = wait_fd(b->fd, POLLOUT, deadline);
        else if (e == SSL_ERROR_SSL) {
            char s[256];
            long vr = SSL_get_verify_result(b->ssl);
            if (op == OP_HANDSHAKE && vr != X509_V_OK)
                return rrpci_broker_fail(b, -EPROTO,
                            "rrpcd %s:%s: its certificate did not verify against the CA: %s",
                            b->host, b->port, X509_verify_cert_error_string(vr));
            rrpci_ssl_errstr(s, sizeof(s));
            return rrpci_broker_fail(b, -EPROTO,
                                     "rrpcd %s:%s: TLS failed: %s (is our client certificate "
                                     "signed by the CA rrpcd trusts?)",
                                     b->host, b->port, s);
        } else {
            ERR_clear_error();
            return rrpci_broker_fail(b, -ECONNRESET, "rrpcd %s:%s closed the connection", b->host,
                                     b->port);
        }
        if (r)
            return rrpci_broker_fail(b, r, "rrpcd %s:%s: %s", b->host, b->port,
                        r == -ETIMEDOUT ? "timed out" : strerror(-r));
    }
}

static int tcp_connect(struct rrpc_broker *b, int64_t deadline)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    int g = getaddrinfo(b->host, b->port, &hints, &res);
    if (g)
        return rrpci_broker_fail(b, rrpci_resolve_code(g, errno), "rrpcd %s:%s: cannot resolve: %s",
                                 b->host, b->port, rrpci_resolve_why(g));
    int r = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            r = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            r = -errno;
            close(fd);
            continue;
        }
        r = wait_fd(fd, POLLOUT, deadline);
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (!r && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            r = -soerr;
        if (r) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        b->fd = fd;
        break;
    }
    freeaddrinfo(res);
    if (r)
        return rrpci_broker_fail(b, r, "rrpcd %s:%s: %s (is rrpcd running there?)", b->host,
                                 b->port, strerror(-r));
    return 0;
}

static int is_ip(const char *s)
{
    unsigned char a[16];
    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}
/* ---- framing -------------------------------------------------------------- */

void rrpci_reply_init(struct reply *rp)
{
    msgpack_unpacked_init(&rp->u);
    rp->buf = NULL;
}

void rrpci_reply_destroy(struct reply *rp)
{
    msgpack_unpacked_destroy(&rp->u);
    free(rp->buf);
    rp->buf = NULL;
}

void rrpci_req_start(struct rrpc_broker *b, struct req *q, enum rrpci_ctl_op op, uint32_t n)
{
    msgpack_sbuffer_init(&q->sb);
    msgpack_sbuffer_write(&q->sb, "\0\0\0\0", 4);
    msgpack_packer_init(&q->pk, &q->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&q->pk, 3 + n);
    pk_str(&q->pk, CTL_K_V);
    msgpack_pack_uint32(&q->pk, CTL_VERSION);
    pk_str(&q->pk, CTL_K_OP);
    pk_str(&q->pk, rrpci_ctl_op_name(op));
    pk_str(&q->pk, CTL_K_ID);
    q->id = ++b->next_id;
    msgpack_pack_uint64(&q->pk, q->id);
}

void rrpci_req_free(struct req *q)
{
    msgpack_sbuffer_destroy(&q->sb);
}

/* Reads one frame (length, then one msgpack map) into @rp by @deadline:
 * 0, or a session error. */
static int read_frame(struct rrpc_broker *b, struct reply *rp, int64_t deadline)
{
    uint8_t hdr[4];
    int r = tls_do(b, OP_READ, hdr, 4, deadline);
    uint32_t len = r ? 0 : rrpci_get_le32(hdr);
    if (!r && (len == 0 || len > CTL_MAX_FRAME))
        r = rrpci_broker_fail(b, -EPROTO, "rrpcd %s:%s sent a frame of %u bytes", b->host,
                              b->port, len);
    char *buf = r ? NULL : malloc(len);
    if (!r && !buf)
        r = -ENOMEM;
    if (!r)
        r = tls_do(b, OP_READ, buf, len, deadline);
    size_t off = 0;
    rrpci_reply_destroy(rp);
    rrpci_reply_init(rp);
    if (!r && (rrpci_mp_check(buf, len, CTL_MAX_DEPTH) ||
               msgpack_unpack_next(&rp->u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
               rp->u.data.type != MSGPACK_OBJECT_MAP))
        r = rrpci_broker_fail(b, -EPROTO, "rrpcd %s:%s sent malformed msgpack", b->host,
                              b->port);
    if (r) {
        free(buf);
        return r;
    }
    rp->buf = buf;
    return 0;
}

int rrpci_session_exchange(struct rrpc_broker *b, struct req *q, struct reply *rp, bool *refused,
                           int64_t deadline)
{
    msgpack_unpacked *u = &rp->u;
    rrpci_put_le32((uint8_t *)q->sb.data, (uint32_t)(q->sb.size - 4));
    *refused = false;
    int r = tls_do(b, OP_WRITE, q->sb.data, q->sb.size, deadline); /* one TLS record */
    if (!r)
        r = read_frame(b, rp, deadline);
    if (r)
        return r;
    uint64_t v = 0, id = 0;
    const msgpack_object *ok = rrpci_mp_get(&u->data, CTL_K_OK);
    if (!rrpci_mp_uint(rrpci_mp_get(&u->data, CTL_K_V), &v) || v != CTL_VERSION)
        return rrpci_broker_fail(b, RRPC_E_VERSION, "rrpcd %s:%s speaks control protocol "
                                 "version %llu, we speak %d", b->host, b->port,
                                 (unsigned long long)v, CTL_VERSION);
    if (!rrpci_mp_uint(rrpci_mp_get(&u->data, CTL_K_ID), &id) || id != q->id || !ok ||
        ok->type != MSGPACK_OBJECT_BOOLEAN)
        return rrpci_broker_fail(b, -EPROTO, "rrpcd %s:%s: answer does not match the request",
                                 b->host, b->port);
    if (!ok->via.boolean) {
        char code[64] = "?", msg[256] = "";
        rrpci_mp_text(rrpci_mp_get(&u->data, CTL_K_ERR), code, sizeof(code));
        rrpci_mp_text(rrpci_mp_get(&u->data, CTL_K_MSG), msg, sizeof(msg));
        if (!code[0])
            snprintf(code, sizeof(code), "?");
        *refused = true;
        return rrpci_broker_fail(b, rrpci_ctl_err_code(code), "rrpcd refused: %s: %s", code, msg);
    }
    return 0;
}

int rrpci_session_connect(struct rrpc_broker *b)
{
    int64_t deadline = rrpci_mono_ms() + b->timeout_ms;
    int r = tcp_connect(b, deadline);
    if (r)
        return r;
    b->ssl = SSL_new(b->sslctx);
    if (!b->ssl || rrpci_ssl_set_socket(b->ssl, b->fd)) { /* no SIGPIPE, ever */
        rrpci_session_close(b);
        return rrpci_broker_fail(b, -ENOMEM, "SSL_new failed");
    }
    if (is_ip(b->server_name)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(b->ssl), b->server_name);
    } else {
        SSL_set_tlsext_host_name(b->ssl, b->server_name);
        SSL_set1_host(b->ssl, b->server_name);
    }
    r = tls_do(b, OP_HANDSHAKE, NULL, 0, deadline);
    if (r) {
        rrpci_session_close(b);
        return r;
    }
    struct req q;
    rrpci_req_start(b, &q, CTL_OP_HELLO, b->token ? 1 : 0);
    if (b->token) {
        pk_str(&q.pk, CTL_K_TOKEN);
        pk_str(&q.pk, b->token);
    }
    struct reply u;
    rrpci_reply_init(&u);
    bool refused;
    r = rrpci_session_exchange(b, &q, &u, &refused, deadline);
    rrpci_req_free(&q);
    if (!r && !rrpci_mp_str(rrpci_mp_get(&u.u.data, CTL_K_PRINCIPAL), b->principal,
                            sizeof(b->principal)))
        r = rrpci_broker_fail(b, -EPROTO, "rrpcd did not say who we are");
    /* In TLS 1.3 the server checks our certificate after our handshake is
     * done; a refusal then shows up as a reset on the first exchange. */
    if (r == -ECONNRESET)
        r = rrpci_broker_fail(b, -EPROTO,
                              "rrpcd %s:%s ended the TLS session at once: it refused our client "
                              "certificate (not signed by the CA it trusts?)",
                              b->host, b->port);
    rrpci_reply_destroy(&u);
    if (r)
        rrpci_session_close(b);
    return r;
}

int rrpci_session_read(struct rrpc_broker *b, struct reply *rp, int wait_ms)
{
    if (!SSL_pending(b->ssl)) {
        struct pollfd p = { .fd = b->fd, .events = POLLIN };
        int n = poll(&p, 1, wait_ms);
        if (n == 0 || (n < 0 && errno == EINTR))
            return -EAGAIN;
    }
    int r = read_frame(b, rp, rrpci_mono_ms() + b->timeout_ms);
    if (r)
        rrpci_session_close(b);
    return r;
}

/* SPDX-License-Identifier: MIT */
/*
 * One session of the TLS control port (server_int.h): libev + non-blocking
 * OpenSSL, TLS 1.3 only.  Frames are a u32 little-endian length
 * (1..CTL_MAX_FRAME) and one msgpack map (docs/broker.md, broker/proto.h);
 * the frame reader hands each to the server's handle_frame (dispatch.c).
 * Answers and pushes are queued in the session's write buffer and flushed
 * when the socket takes them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "broker/sockbio.h"
#include "server_int.h"

#define MAX_WBUF (4u << 20)     /* stop reading while this much waits to go out */
#define FRAME_MIN_CAP 4096u     /* a frame buffer starts this small and grows as bytes come */
#define WBUF_KEEP (64u << 10)   /* a write buffer larger than this is freed once flushed */

static void conn_drive(struct conn *c);

/* ---- connections ------------------------------------------------------------ */

void session_close(struct conn *c, const char *why)
{
    if (why)
        LOG(LOG_INFO, "%s: closed: %s", c->peer, why);
    watch_conn_gone(c->srv->watch, c);
    if (c->agent) /* its report goes with it: a new session sends the next */
        pairs_session_gone(c->srv->pairs, &c->agent_local, c->serial);
    ev_io_stop(c->srv->loop, &c->io);
    ev_timer_stop(c->srv->loop, &c->timer);
    if (c->ssl) {
        if (c->handshaken && !c->closing)
            SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    close(c->fd);
    free(c->frame);
    free(c->wbuf);
    admit_held(c, 0);
    admit_principal_put(c->srv, c->pr);
    struct server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        srv->conns_tail = c->prev;
    admit_source_put(srv, c->src);
    srv->n_conns--;
    metrics_sessions(srv->n_conns);
    free(c);
}

void session_set_events(struct conn *c, int events)
{
    if ((c->io.events & (EV_READ | EV_WRITE)) == events)
        return;
    ev_io_stop(c->srv->loop, &c->io);
    ev_io_set(&c->io, c->fd, events);
    ev_io_start(c->srv->loop, &c->io);
}

static void conn_timeout_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    struct conn *c = w->data;
    if (c->authed && !c->draining && watch_any(c->srv->watch, c)) {
        ev_timer_again(c->srv->loop, &c->timer); /* watching: listening, not idle */
        return;
    }
    session_close(c, c->draining ? NULL
                  : c->authed ? "idle timeout (idle_timeout_ms)"
                  : c->handshaken
                      ? "no successful hello within auth_timeout_ms of the accept"
                      : "TLS handshake not done within auth_timeout_ms of the accept");
}

/*
 * After a failed handshake OpenSSL has queued its alert; closing with the
 * client's bytes unread would make the kernel send a reset, which can destroy
 * the alert before the client reads it ("unknown ca" becomes "connection
 * reset").  So: shut down our side, discard what comes for at most a second.
 */
static void conn_linger(struct conn *c, const char *why)
{
    LOG(LOG_INFO, "%s: closed: %s", c->peer, why);
    shutdown(c->fd, SHUT_WR);
    c->draining = true;
    session_set_events(c, EV_READ);
    ev_timer_stop(c->srv->loop, &c->timer);
    ev_timer_set(&c->timer, 1.0, 0);
    ev_timer_start(c->srv->loop, &c->timer);
}

static void conn_io_cb(struct ev_loop *l, ev_io *w, int revents)
{
    struct conn *c = w->data;
    if (revents & EV_READ)
        c->last_rx_ms = mono_ms(); /* not silent: the last to be evicted at the cap */
    if (c->draining) {
        char buf[4096];
        ssize_t n;
        while ((n = recv(c->fd, buf, sizeof(buf), 0)) > 0)
            ;
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            session_close(c, NULL);
        return;
    }
    conn_drive(c);
}

const char *session_ssl_reason(void)
{
    static char buf[256];
    unsigned long e = ERR_get_error();
    if (!e)
        return "connection closed";
    ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    return buf;
}

/* ---- answers ---------------------------------------------------------------- */

/* The write buffer's size once @len more bytes are in it. */
static size_t wbuf_cap_for(const struct conn *c, size_t len)
{
    size_t cap = c->wcap ? c->wcap : 4096;
    while (cap - c->wlen < len)
        cap *= 2;
    return cap;
}

static int wbuf_write(void *data, const char *buf, size_t len)
{
    struct conn *c = data;
    if (c->wcap - c->wlen < len) {
        size_t cap = wbuf_cap_for(c, len);
        uint8_t *n = realloc(c->wbuf, cap);
        if (!n)
            return -1;
        c->wbuf = n;
        c->wcap = cap;
        admit_held(c, c->frame_cap + c->wcap);
    }
    memcpy(c->wbuf + c->wlen, buf, len);
    c->wlen += len;
    return 0;
}

void answer_begin(struct answer *a, uint64_t id, bool ok, uint32_t n)
{
    msgpack_sbuffer_init(&a->sb);
    msgpack_packer_init(&a->pk, &a->sb, msgpack_sbuffer_write);
    a->id = id;
    a->ok = ok;
    msgpack_pack_map(&a->pk, 3 + n);
    pk_str(&a->pk, CTL_K_V);
    msgpack_pack_uint32(&a->pk, CTL_VERSION);
    pk_str(&a->pk, CTL_K_ID);
    msgpack_pack_uint64(&a->pk, id);
    pk_str(&a->pk, CTL_K_OK);
    if (ok)
        metrics_answer(CTL_OK);
    if (ok)
        msgpack_pack_true(&a->pk);
    else
        msgpack_pack_false(&a->pk);
}

void answer_end(struct conn *c, struct answer *a)
{
    if (a->sb.size > CTL_MAX_FRAME) {
        /* Never sent: the client would refuse it.  register bounds lookups;
         * this is the last line. */
        LOG(LOG_ERR, "%s: an answer of %zu bytes is above the frame limit; sent an error "
            "instead", c->peer, a->sb.size);
        msgpack_sbuffer_destroy(&a->sb);
        answer_error(c, a->id, CTL_ERR_INTERNAL, "the answer would exceed the 1 MiB frame limit");
        return;
    }
    /* An answer that would make rrpcd hold more than this principal's share, or than
     * all sessions may, is refused with a short error (errors are always sent). */
    char why[600];
    size_t cap = wbuf_cap_for(c, a->sb.size + 4);
    if (a->ok && a->sb.size > 512 && cap > c->wcap &&
        !admit_hold_ok(c, cap - c->wcap, why, sizeof(why))) {
        metrics_held_refused();
        /* A client asking on and on must not become a flood of log lines. */
        static int64_t logged_ms;
        static unsigned quiet;
        if (logged_ms && mono_ms() - logged_ms < 1000) {
            quiet++;
        } else {
            LOG(LOG_NOTICE, "%s: an answer of %zu bytes refused (%u more not logged): %s",
                c->peer, a->sb.size, quiet, why);
            logged_ms = mono_ms();
            quiet = 0;
        }
        msgpack_sbuffer_destroy(&a->sb);
        answer_error(c, a->id, CTL_ERR_BUSY, why);
        return;
    }
    uint8_t hdr[4];
    rrpci_put_le32(hdr, (uint32_t)a->sb.size);
    if (wbuf_write(c, (const char *)hdr, 4) || wbuf_write(c, a->sb.data, a->sb.size))
        c->closing = true; /* out of memory: drop the client, not the daemon */
    msgpack_sbuffer_destroy(&a->sb);
}

void answer_error(struct conn *c, uint64_t id, enum rrpci_ctl_err code, const char *msg)
{
    struct answer a;
    metrics_answer(code);
    answer_begin(&a, id, false, 2);
    pk_str(&a.pk, CTL_K_ERR);
    pk_str(&a.pk, rrpci_ctl_err_name(code));
    pk_str(&a.pk, CTL_K_MSG);
    pk_str(&a.pk, msg);
    answer_end(c, &a);
}

/* Answers with an error and closes the connection once it has gone out. */
void answer_fatal(struct conn *c, uint64_t id, enum rrpci_ctl_err code, const char *msg)
{
    LOG(LOG_NOTICE, "%s: %s: %s", c->peer, rrpci_ctl_err_name(code), msg);
    answer_error(c, id, code, msg);
    c->closing = true;
}

int session_push(struct conn *c, const void *buf, size_t len)
{
    if (c->closing || c->draining)
        return 0; /* going: nothing to send */
    if (len > CTL_MAX_FRAME)
        return -E2BIG;
    if (c->wlen - c->woff > WATCH_BACKLOG)
        return -EAGAIN;
    char why[600];
    size_t cap = wbuf_cap_for(c, len + 4);
    if (cap > c->wcap && !admit_hold_ok(c, cap - c->wcap, why, sizeof(why)))
        return -EAGAIN; /* the push waits until there is room */
    uint8_t hdr[4];
    rrpci_put_le32(hdr, (uint32_t)len);
    if (wbuf_write(c, (const char *)hdr, 4) || wbuf_write(c, buf, len)) {
        c->closing = true;
        session_set_events(c, EV_READ | EV_WRITE);
        return -ENOMEM;
    }
    session_set_events(c, EV_READ | EV_WRITE); /* conn_drive sends it */
    return 0;
}


/* Whether @c's request may grow by @more bytes; if not, the session is closed
 * with the reason (it chose to send a request larger than its share). */
static bool session_hold(struct conn *c, size_t more)
{
    char why[600];
    if (admit_hold_ok(c, more, why, sizeof(why)))
        return true;
    metrics_held_refused();
    answer_fatal(c, 0, CTL_ERR_LIMIT, why);
    return false;
}

/* Feeds received bytes to the frame reader. */
void session_feed(struct conn *c, const uint8_t *p, size_t n)
{
    while (n && !c->closing) {
        if (c->hdr_got < 4) {
            size_t k = 4 - c->hdr_got < n ? 4 - c->hdr_got : n;
            memcpy(c->hdr + c->hdr_got, p, k);
            c->hdr_got += k;
            p += k;
            n -= k;
            if (c->hdr_got < 4)
                return;
            uint32_t len = rrpci_get_le32(c->hdr);
            if (len == 0 || len > CTL_MAX_FRAME) {
                char msg[96];
                snprintf(msg, sizeof(msg), "frame length %u is outside 1..%u", len, CTL_MAX_FRAME);
                answer_fatal(c, 0, CTL_ERR_BAD_REQUEST, msg);
                return;
            }
            /* Before hello, only as much as a hello needs: an anonymous
             * session must not make us hold a large frame. */
            if (!c->authed && len > (uint32_t)c->srv->cfg->auth_max_frame) {
                char msg[160];
                snprintf(msg, sizeof(msg), "frame length %u is above the %d bytes allowed "
                         "before authentication (auth_max_frame); send hello first", len,
                         c->srv->cfg->auth_max_frame);
                answer_fatal(c, 0, CTL_ERR_BAD_REQUEST, msg);
                return;
            }
            if (n >= len) { /* the whole frame is in this read: no copy */
                c->srv->handle_frame(c, p, len);
                p += len;
                n -= len;
                c->hdr_got = 0;
                continue;
            }
            /* The buffer grows with the bytes that arrive, not with the
             * length announced. */
            size_t fcap = len < FRAME_MIN_CAP ? len : FRAME_MIN_CAP;
            if (fcap < n)
                fcap = n;
            if (!session_hold(c, fcap))
                return;
            c->frame = malloc(fcap);
            if (!c->frame) {
                c->closing = true;
                return;
            }
            c->frame_cap = fcap;
            admit_held(c, c->frame_cap + c->wcap);
            c->frame_len = len;
            c->frame_got = 0;
            continue;
        }
        size_t k = c->frame_len - c->frame_got < n ? c->frame_len - c->frame_got : n;
        if (c->frame_got + k > c->frame_cap) {
            size_t cap = c->frame_cap * 2;
            if (cap < c->frame_got + k)
                cap = c->frame_got + k;
            if (cap > c->frame_len)
                cap = c->frame_len;
            if (!session_hold(c, cap - c->frame_cap))
                return;
            uint8_t *nf = realloc(c->frame, cap);
            if (!nf) {
                c->closing = true; /* out of memory: drop the client, not the daemon */
                return;
            }
            c->frame = nf;
            c->frame_cap = cap;
            admit_held(c, c->frame_cap + c->wcap);
        }
        memcpy(c->frame + c->frame_got, p, k);
        c->frame_got += k;
        p += k;
        n -= k;
        if (c->frame_got == c->frame_len) {
            c->srv->handle_frame(c, c->frame, c->frame_len);
            free(c->frame);
            c->frame = NULL;
            c->frame_cap = 0;
            admit_held(c, c->wcap);
            c->hdr_got = 0;
        }
    }
}

static void take_peer_cert(struct conn *c)
{
    X509 *x = SSL_get1_peer_certificate(c->ssl);
    if (!x)
        return;
    if (SSL_get_verify_result(c->ssl) == X509_V_OK) {
        X509_NAME *nm = X509_get_subject_name(x);
        int n = X509_NAME_get_text_by_NID(nm, NID_commonName, c->cert_cn, sizeof(c->cert_cn));
        if (n <= 0 || (size_t)n != strlen(c->cert_cn))
            c->cert_cn[0] = 0; /* no CN, or one with a NUL in it */
    }
    X509_free(x);
}

/* Progress on a connection: handshake, then flush answers, then read. */
static void conn_drive(struct conn *c)
{
    if (!c->handshaken) {
        ERR_clear_error();
        int r = SSL_accept(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) {
                session_set_events(c, EV_READ);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                session_set_events(c, EV_READ | EV_WRITE);
                return;
            }
            char why[300];
            snprintf(why, sizeof(why), "TLS handshake failed: %s", session_ssl_reason());
            metrics_tls_failure();
            c->closing = true; /* no close_notify on a failed handshake */
            conn_linger(c, why);
            return;
        }
        c->handshaken = true;
        take_peer_cert(c);
        LOG(LOG_DEBUG, "%s: TLS up (%s, client certificate CN '%s')", c->peer,
            SSL_get_version(c->ssl), c->cert_cn);
        /* The accept's deadline still runs: it covers hello too. */
    }
    for (;;) {
        /* Flush. */
        while (c->woff < c->wlen) {
            size_t n = 0;
            ERR_clear_error();
            if (!SSL_write_ex(c->ssl, c->wbuf + c->woff, c->wlen - c->woff, &n)) {
                int e = SSL_get_error(c->ssl, 0);
                if (e == SSL_ERROR_WANT_WRITE) {
                    session_set_events(c, EV_READ | EV_WRITE);
                    return;
                }
                if (e == SSL_ERROR_WANT_READ) {
                    session_set_events(c, EV_READ);
                    return;
                }
                c->closing = true;
                session_close(c, e == SSL_ERROR_SSL ? session_ssl_reason() : "peer went away");
                return;
            }
            c->woff += n;
        }
        c->woff = c->wlen = 0;
        if (c->wcap > WBUF_KEEP) { /* a large answer went: give its buffer back */
            free(c->wbuf);
            c->wbuf = NULL;
            c->wcap = 0;
            admit_held(c, c->frame_cap);
        }
        if (c->closing) {
            session_close(c, NULL);
            return;
        }
        /* Read until OpenSSL wants more from the socket. */
        uint8_t buf[16384];
        size_t n = 0;
        ERR_clear_error();
        if (!SSL_read_ex(c->ssl, buf, sizeof(buf), &n)) {
            int e = SSL_get_error(c->ssl, 0);
            if (e == SSL_ERROR_WANT_READ) {
                session_set_events(c, EV_READ);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                session_set_events(c, EV_READ | EV_WRITE);
                return;
            }
            if (e == SSL_ERROR_ZERO_RETURN) {
                session_close(c, NULL);
                return;
            }
            c->closing = true;
            session_close(c, e == SSL_ERROR_SSL ? session_ssl_reason() : NULL);
            return;
        }
        /* Before hello only the accept's deadline counts: bytes trickling in
         * (one a second, say) must not keep an anonymous session alive. */
        if (c->idle_timer)
            ev_timer_again(c->srv->loop, &c->timer);
        session_feed(c, buf, n);
        if (c->authed && !c->idle_timer) {
            c->idle_timer = true;
            ev_timer_stop(c->srv->loop, &c->timer);
            c->timer.repeat = (double)c->srv->cfg->idle_timeout_ms / 1000.0;
            ev_timer_again(c->srv->loop, &c->timer);
        }
        if (c->wlen > MAX_WBUF)
            c->closing = true; /* a client that never reads its answers */
    }
}


/* ---- a new session ------------------------------------------------------------ */

struct conn *session_new(struct server *srv, int fd, struct source *src, const char *peer)
{
    struct conn *c = calloc(1, sizeof(*c));
    SSL *ssl = c ? SSL_new(srv->sslctx) : NULL;
    if (!ssl || rrpci_ssl_set_socket(ssl, fd)) { /* writes never raise SIGPIPE */
        SSL_free(ssl);
        free(c);
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->srv = srv;
    c->fd = fd;
    c->ssl = ssl;
    c->src = src;
    SSL_set_accept_state(ssl);
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->serial = ++srv->serials;
    c->last_rx_ms = mono_ms();
    c->prev = srv->conns_tail; /* the newest goes last: eviction looks from the head */
    if (srv->conns_tail)
        srv->conns_tail->next = c;
    else
        srv->conns = c;
    srv->conns_tail = c;
    srv->n_conns++;
    metrics_sessions(srv->n_conns);
    ev_io_init(&c->io, conn_io_cb, fd, EV_READ);
    c->io.data = c;
    ev_io_start(srv->loop, &c->io);
    /* One deadline for the handshake and hello together. */
    ev_timer_init(&c->timer, conn_timeout_cb, (double)srv->cfg->auth_timeout_ms / 1000.0, 0);
    c->timer.data = c;
    ev_timer_start(srv->loop, &c->timer);
    return c;
}

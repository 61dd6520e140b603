/* SPDX-License-Identifier: MIT */
/* The tcp transport's passive side: the listening socket, and accepted
 * sockets until their first frame says what they are: HELLO starts a
 * connection (this socket becomes its first), JOIN attaches a class's own
 * socket to one, proven by the connection's cookie and secret. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "transport/tcp/tcp_int.h"

/* An accepted socket that has not said which connection and class it is. */
struct tcp_pend {
    struct rrpci_list link;
    rrpc_listener *l;
    int fd;
    struct rrpci_io io;
    struct rrpci_timer timer;
    struct sockaddr_storage peer;
    uint8_t buf[RRPCI_HDR_SIZE + RRPCI_HELLO_SIZE];
    size_t got;
};

/* ---- passive side --------------------------------------------------------------- */

static void pend_free(struct tcp_pend *p, rrpc_ctx *ctx, bool close_fd)
{
    rrpci_io_stop(rrpci_ctx_loop(ctx), &p->io);
    rrpci_timer_stop(&p->timer);
    if (close_fd)
        close(p->fd);
    rrpci_list_del(&p->link);
    ((struct tcp_listener *)rrpci_listener_priv(p->l))->npend--;
    free(p);
}

/* Refuses an accepted socket with an ERROR frame the peer can show, its
 * header in protocol version @version (the peer's own, for a peer of
 * another version: so that it can read why). */
static void pend_refuse_v(struct tcp_pend *p, rrpc_ctx *ctx, int code, const char *why,
                          uint8_t version)
{
    struct rrpci_msg *m = rrpc_tcp_hs_msg(RRPCI_T_ERROR, 0, why, strlen(why));
    if (m) {
        m->h.arg = (uint32_t)code;
        m->h.version = version;
        rrpci_hdr_encode(&m->h, m->hdr);
        struct iovec iov[2] = {{m->hdr, RRPCI_HDR_SIZE}, {m->data, m->len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        /* Unread input at close() makes the kernel send a reset, which can
         * destroy the ERROR frame before the peer reads it: drain, send, and
         * close the sending side first. */
        char sink[4096];
        for (int i = 0; i < 16 && recv(p->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
            ;
        (void)!sendmsg(p->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(p->fd, SHUT_WR);
        rrpci_msg_free(m);
    }
    RRPCI_LOG(ctx, LOG_NOTICE, "refused an incoming tcp connection: %s", why);
    pend_free(p, ctx, true);
}

static void pend_refuse(struct tcp_pend *p, rrpc_ctx *ctx, int code, const char *why)
{
    pend_refuse_v(p, ctx, code, why, RRPCI_PROTO_VERSION);
}

/* A first header that failed to decode: a peer of another protocol version
 * hears, in its own version's header, what this side speaks. */
static void pend_refuse_header(struct tcp_pend *p, rrpc_ctx *ctx, int code, const char *why)
{
    if (code != RRPC_E_VERSION) {
        pend_refuse(p, ctx, code, why);
        return;
    }
    char msg[240];
    snprintf(msg, sizeof(msg),
             "this server speaks roce-rpc protocol version %d, "
             "the client version %u: run the same libroce_rpc release on both sides",
             RRPCI_PROTO_VERSION, p->buf[4]);
    pend_refuse_v(p, ctx, code, msg, p->buf[4]);
}

/* Constant-time comparison of two attach secrets. */
static bool secret_equal(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;
    for (int i = 0; i < TCP_SECRET_SIZE; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* @fd becomes @ch's socket, marked with @dscp, and is read from now on. */
static void adopt(struct tcp_chan *ch, int fd, int dscp, rrpc_ctx *ctx)
{
    rrpc_tcp_chan_fd(ch, fd, true);
    int r = rrpc_tcp_set_tos(fd, dscp);
    if (r < 0)
        RRPCI_LOG(ctx, LOG_WARNING, "cannot mark a socket with DSCP %d: %s", dscp, strerror(-r));
    rrpci_io_start(rrpci_ctx_loop(ctx), &ch->rio);
}

/* HELLO: a new connection, whose first socket this is. */
static void pend_hello(struct tcp_pend *p, rrpc_ctx *ctx, const struct rrpci_hdr *h,
                       const uint8_t *payload)
{
    struct tcp_ctx *t = tctx(ctx);
    rrpc_conn *c = NULL;
    char why[200];
    int r = rrpci_listener_accept(p->l, (struct sockaddr *)&p->peer, &c, why, sizeof(why));
    if (r < 0) {
        pend_refuse(p, ctx, r, why);
        return;
    }
    struct tcp_conn *tc = rrpci_conn_priv(c);
    struct rrpci_hello peer, mine;
    r = rrpci_hello_decode(payload, h->len, &peer);
    if (r < 0)
        rrpci_set_error(ctx, r, "HELLO of %u bytes, expected %d", h->len, RRPCI_HELLO_SIZE);
    else
        r = rrpci_conn_hello_peer(c, &peer);
    if (r < 0) {
        pend_refuse(p, ctx, r, rrpc_ctx_last_error(ctx));
        rrpci_conn_down(c, r, "handshake refused");
        return;
    }
    if (getrandom(tc->secret, sizeof(tc->secret), 0) != sizeof(tc->secret)) {
        pend_refuse(p, ctx, -EAGAIN, "no random bytes for the connection's secret");
        rrpci_conn_down(c, -EAGAIN, "handshake refused");
        return;
    }
    do {
        if (getrandom(&tc->cookie, sizeof(tc->cookie), 0) != sizeof(tc->cookie))
            tc->cookie = 0;
    } while (!tc->cookie || rrpci_idmap_put(&t->cookies, tc->cookie, &tc->node) < 0);
    int fd = p->fd;
    pend_free(p, ctx, false);
    rrpc_tcp_chan_init(&tc->first, c, RRPCI_CLS_LOW_LATENCY, true, -1, false);
    adopt(&tc->first, fd, rrpc_tcp_first_dscp(ctx), ctx);
    rrpci_conn_hello_local(c, &mine);
    mine.cookie = tc->cookie;
    uint8_t hb[RRPCI_HELLO_SIZE + TCP_SECRET_SIZE];
    rrpci_hello_encode(&mine, hb);
    memcpy(hb + RRPCI_HELLO_SIZE, tc->secret, TCP_SECRET_SIZE);
    struct rrpci_msg *m = rrpc_tcp_hs_msg(RRPCI_T_HELLO_ACK, RRPCI_CLS_CONTROL, hb, sizeof(hb));
    if (!m) {
        rrpci_conn_down(c, -ENOMEM, "out of memory");
        return;
    }
    rrpc_tcp_push(&tc->first, ctx, m);
    if (rrpci_conn_is_down(c))
        return;
    tc->hello_done = true;
    rrpci_conn_established(c);
}

/* JOIN: a class's own socket for a connection that is up.  A wrong cookie or
 * secret, a class that travels on the first socket or has its socket
 * already: refused, and the connection it names is not touched. */
static void pend_join(struct tcp_pend *p, rrpc_ctx *ctx, const struct rrpci_hdr *h,
                      const uint8_t *payload)
{
    struct tcp_ctx *t = tctx(ctx);
    struct rrpci_idnode *n = rrpci_idmap_get(&t->cookies, rrpci_get64(payload));
    struct tcp_conn *tc = n ? rrpci_container_of(n, struct tcp_conn, node) : NULL;
    if (!tc || !secret_equal(tc->secret, payload + 8)) {
        pend_refuse(p, ctx, RRPC_E_PROTO, "JOIN for an unknown connection or with a wrong secret");
        return;
    }
    rrpc_conn *c = tc->first.conn;
    if (!rrpci_conn_is_wired(c) || rrpci_conn_is_down(c)) {
        pend_refuse(p, ctx, RRPC_E_PROTO, "JOIN for a connection that is not up");
        return;
    }
    int cls = h->cls;
    if (cls == RRPCI_CLS_LOW_LATENCY) {
        pend_refuse(p, ctx, RRPC_E_PROTO, "JOIN for low_latency, which travels on the first "
                                          "socket");
        return;
    }
    if (tc->own[cls] && tc->own[cls]->fd >= 0) {
        pend_refuse(p, ctx, RRPC_E_PROTO, "JOIN for a class that has its socket already");
        return;
    }
    struct tcp_chan *ch = rrpc_tcp_own(c, cls);
    struct rrpci_msg *m = ch ? rrpc_tcp_hs_msg(RRPCI_T_JOIN_ACK, cls, NULL, 0) : NULL;
    if (!m) {
        pend_refuse(p, ctx, -ENOMEM, "out of memory");
        return;
    }
    int fd = p->fd;
    pend_free(p, ctx, false);
    adopt(ch, fd, rrpci_ctx_class_dscp(ctx, cls), ctx);
    rrpc_tcp_push(ch, ctx, m);
    if (!rrpci_conn_is_down(c))
        rrpc_tcp_attached(ch); /* what this side held for the class follows JOIN_ACK */
}

static void pend_frame(struct tcp_pend *p, rrpc_ctx *ctx, const struct rrpci_hdr *h,
                       const uint8_t *payload)
{
    if (h->type == RRPCI_T_HELLO && h->cls == RRPCI_CLS_CONTROL)
        pend_hello(p, ctx, h, payload);
    else if (h->type == RRPCI_T_JOIN && h->len == TCP_JOIN_SIZE)
        pend_join(p, ctx, h, payload);
    else
        pend_refuse(p, ctx, RRPC_E_PROTO,
                    "the first frame must be HELLO (class control) or JOIN (24 bytes)");
}

static void pend_read_cb(struct rrpci_io *w, unsigned revents)
{
    struct tcp_pend *p = w->data;
    rrpc_ctx *ctx = rrpci_listener_ctx(p->l);
    size_t want = RRPCI_HDR_SIZE;
    struct rrpci_hdr h;
    if (p->got >= RRPCI_HDR_SIZE) {
        const char *why = NULL;
        int r = rrpci_hdr_decode(p->buf, RRPCI_HELLO_SIZE, &h, &why);
        if (r < 0) {
            pend_refuse_header(p, ctx, r, why);
            return;
        }
        want += h.len;
    }
    ssize_t n = read(p->fd, p->buf + p->got, want - p->got);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        RRPCI_LOG(ctx, LOG_INFO, "an incoming tcp connection closed before its handshake");
        {
            pend_free(p, ctx, true);
            return;
        }
    }
    p->got += (size_t)n;
    if (p->got == RRPCI_HDR_SIZE) {
        const char *why = NULL;
        int r = rrpci_hdr_decode(p->buf, RRPCI_HELLO_SIZE, &h, &why);
        if (r < 0) {
            pend_refuse_header(p, ctx, r, why);
            return;
        }
        if (h.len > 0)
            return; /* the payload follows */
    } else if (p->got < want) {
        return;
    }
    rrpci_hdr_decode(p->buf, RRPCI_HELLO_SIZE, &h, NULL);
    pend_frame(p, ctx, &h, p->buf + RRPCI_HDR_SIZE);
}

static void pend_timeout_cb(struct rrpci_timer *w)
{
    struct tcp_pend *p = w->data;
    pend_refuse(p, rrpci_listener_ctx(p->l), -ETIMEDOUT, "no handshake in time");
}

static void resume_cb(struct rrpci_timer *w)
{
    struct tcp_listener *tl = w->data;
    rrpci_io_start(w->loop, &tl->io);
}

/* accept failed for want of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM):
 * the pending connection stays in the backlog and the listening socket stays
 * readable, so accepting again at once would spin.  Pause accepts for 100 ms
 * and say so once per episode. */
static void accept_pause(struct tcp_listener *tl, rrpc_ctx *ctx, int err)
{
    struct rrpci_evloop *loop = rrpci_ctx_loop(ctx);
    rrpci_io_stop(loop, &tl->io);
    if (!rrpci_timer_active(&tl->resume)) {
        if (tl->emfile_episodes++ == 0 || (tl->emfile_episodes & (tl->emfile_episodes - 1)) == 0)
            RRPCI_LOG(ctx, LOG_WARNING,
                      "tcp accept: %s; accepts paused for 100 ms (episode %llu); raise the "
                      "file limit (ulimit -n) or lower RRPC_MAX_CONNS",
                      strerror(err), (unsigned long long)tl->emfile_episodes);
        rrpci_timer_set(&tl->resume, 0.1, 0);
        rrpci_timer_start(&tl->resume);
    }
}

static int pend_same_source(struct tcp_listener *tl, const struct sockaddr_storage *ss)
{
    int n = 0;
    for (struct rrpci_list *i = tl->pend.next; i != &tl->pend; i = i->next) {
        struct tcp_pend *q = rrpci_container_of(i, struct tcp_pend, link);
        if (q->peer.ss_family != ss->ss_family)
            continue;
        if (ss->ss_family == AF_INET
                ? memcmp(&((const struct sockaddr_in *)(const void *)&q->peer)->sin_addr,
                         &((const struct sockaddr_in *)(const void *)ss)->sin_addr, 4) == 0
                : memcmp(&((const struct sockaddr_in6 *)(const void *)&q->peer)->sin6_addr,
                         &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, 16) == 0)
            n++;
    }
    return n;
}

static void accept_cb(struct rrpci_io *w, unsigned revents)
{
    rrpc_listener *l = w->data;
    struct tcp_listener *tl = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    struct rrpci_evloop *loop = rrpci_ctx_loop(ctx);
    /* Sockets that have not said which connection they are hold an fd each:
     * at most RRPC_MAX_CONNS of them (the oldest goes first), at most
     * NCLS x RRPC_MAX_CONNS_PER_SOURCE from one address (a connection opens
     * up to one socket per class, and a client that starts using its classes
     * on all its connections at once has them all in their handshake
     * together: refusing one would take its connection down), each for at
     * most RRPC_AUTH_TIMEOUT_MS. */
    struct rrpci_accept_limits lim;
    rrpci_ctx_accept_limits(ctx, &lim);
    int max_pend = lim.max_pending, per_source = lim.per_source * NCLS;
    double tmo = lim.auth_timeout_ms / 1000.0;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage peer;
        socklen_t pl = sizeof(peer);
        int fd = accept4(tl->fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)
                accept_pause(tl, ctx, e);
            else if (e != EAGAIN && e != EINTR && e != ECONNABORTED)
                RRPCI_LOG(ctx, LOG_WARNING, "tcp accept: %s", strerror(e));
            return;
        }
        if (pend_same_source(tl, &peer) >= per_source) {
            RRPCI_LOG(ctx, LOG_NOTICE, "refused a tcp socket: %d handshakes already pending "
                      "from its address (%d x RRPC_MAX_CONNS_PER_SOURCE)", per_source, NCLS);
            close(fd);
            continue;
        }
        if (tl->npend >= max_pend) {
            RRPCI_LOG(ctx, LOG_NOTICE, "%d tcp handshakes pending (RRPC_MAX_CONNS): closing "
                      "the oldest", tl->npend);
            pend_free(rrpci_container_of(tl->pend.next, struct tcp_pend, link), ctx, true);
        }
        struct tcp_pend *p = calloc(1, sizeof(*p));
        if (!p) {
            close(fd);
            continue;
        }
        rrpc_tcp_sock_setup(fd);
        p->l = l;
        p->fd = fd;
        p->peer = peer;
        rrpci_io_init(&p->io, pend_read_cb, fd, RRPCI_IO_READ);
        p->io.data = p;
        rrpci_timer_init(ctx, &p->timer, pend_timeout_cb, tmo, 0);
        p->timer.data = p;
        rrpci_io_start(loop, &p->io);
        rrpci_timer_start(&p->timer);
        rrpci_list_add(&tl->pend, &p->link);
        tl->npend++;
    }
}

int rrpc_tcp_listen(rrpc_listener *l, const struct rrpci_uri *u)
{
    struct tcp_listener *tl = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    struct sockaddr_storage ss;
    socklen_t sl;
    const char *why = NULL;
    rrpci_list_init(&tl->pend);
    tl->fd = -1;
    rrpci_timer_init(ctx, &tl->resume, resume_cb, 0, 0);
    tl->resume.data = tl;
    int rr = rrpc_tcp_resolve(u->host, u->port, true, &ss, &sl, &why);
    if (rr < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve \"%s\": %s", u->host, why);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rrpci_set_error(ctx, -errno, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* SYN-ACKs leave with the listener's mark: the control class's. */
    rrpc_tcp_set_tos(fd, rrpci_ctx_class_dscp(ctx, RRPCI_CLS_CONTROL));
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 512) < 0) {
        int e = errno;
        close(fd);
        return rrpci_set_error(ctx, -e, "cannot listen on %s:%d: %s%s", u->host, u->port,
                               strerror(e),
                               e == EADDRINUSE ? " (another process uses the port; pick another "
                                                 "or port 0)"
                                               : "");
    }
    tl->fd = fd;
    rrpci_io_init(&tl->io, accept_cb, fd, RRPCI_IO_READ);
    tl->io.data = l;
    rrpci_io_start(rrpci_ctx_loop(ctx), &tl->io);
    return 0;
}

void rrpc_tcp_listener_close(rrpc_listener *l)
{
    struct tcp_listener *tl = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    while (!rrpci_list_empty(&tl->pend))
        pend_free(rrpci_container_of(tl->pend.next, struct tcp_pend, link), ctx, true);
    rrpci_timer_stop(&tl->resume);
    if (tl->fd >= 0) {
        rrpci_io_stop(rrpci_ctx_loop(ctx), &tl->io);
        close(tl->fd);
        tl->fd = -1;
    }
}

int rrpc_tcp_listener_port(rrpc_listener *l)
{
    struct tcp_listener *tl = rrpci_listener_priv(l);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(tl->fd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}


/* SPDX-License-Identifier: MIT */
/*
 * The TCP transport: one socket per QoS class, each with IP_TOS (or
 * IPV6_TCLASS) set from its class's DSCP on both ends.
 *
 * Handshake: the active side connects all class sockets, sends HELLO on the
 * control socket, gets HELLO_ACK with a connection cookie, then sends JOIN
 * (cookie) on each other socket.  The connection is up when every class is
 * joined.  An accepted socket that says nothing valid within the connect
 * timeout is closed.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <roce_rpc/rrpc.h>

#include "transport/tcp/rx.h"
#include "transport/transport.h"
#include "util/idmap.h"
#include "util/list.h"
#include "util/resolve.h"

#define TX_HIGH (512 * 1024) /* above this the class reports -EAGAIN */
/* Class isolation is the core's receive-side QoS policy (core/qos.h), which
 * this transport executes in both directions: one loop wake-up serves one
 * class for a turn of at most (class weight x RRPC_TCP_SLICE_US), in pieces
 * of at most RRPC_TCP_PIECE_SHARED bytes per system call while another class
 * of the connection is busy, so a bulk stream never holds the loop for a
 * whole large message while a low-latency frame waits; the loop then runs
 * the other ready watchers, in the policy's order (rrpci_rx_prio).  A turn
 * is measured in time, not bytes: a piece costs from 10 us (a 64 KiB read)
 * to 250 us (a 1 MiB write on loopback, which also runs the receiver's TCP
 * processing), and bulk keeps the loop while nothing else is ready.
 *
 * A class whose connection has no other class busy (nothing queued to send,
 * no piece moved either way for RRPC_TCP_BUSY_MS) moves pieces of up to
 * RRPC_TCP_PIECE_ALONE: one sendmsg of 1 MiB costs the sender less than
 * sixteen of 64 KiB, but holds the loop for 100-250 us, which a low-latency
 * answer arriving meanwhile would wait out (docs/performance.md, "Adaptive
 * pieces on tcp").  The busy window is longer than a round trip takes on a
 * loaded machine, or a late answer would make bulk switch to large pieces
 * just when that answer waits for the loop. */
static const struct rrpci_tunable tcp_tunables[] = {
    {"RRPC_TCP_SLICE_US", 20, 1, 1000000,
     "tcp: time one loop wake-up gives a class, per unit of its weight, to read (and to "
     "write) before the loop serves the other ready classes, us"},
    {"RRPC_TCP_PIECE_SHARED", 64L << 10, 4096, 64L << 20,
     "tcp: largest read or write of one system call while another class of the connection is "
     "busy, bytes; what a low-latency frame may wait behind"},
    {"RRPC_TCP_PIECE_ALONE", 1L << 20, 4096, 64L << 20,
     "tcp: largest read or write of one system call while no other class of the connection "
     "is busy, bytes; larger pieces cost less CPU per byte"},
    {"RRPC_TCP_BUSY_MS", 100, 0, 60000,
     "tcp: a class counts as busy this long after it last moved a piece either way, ms"},
    {NULL, 0, 0, 0, NULL},
};
#define NCLS RRPCI_MAX_CLASSES

struct tcp_chan {
    rrpc_conn *conn;
    int fd;
    int cls;
    bool connected;
    ev_io rio, wio;
    struct rrpc_tcp_rx rx; /* receive: rx.h */
    /* transmit */
    struct rrpci_msg *txh, *txt;
    size_t tx_off;
    size_t tx_bytes;
    bool want_writable;
    uint64_t last_ns; /* when a piece of this class last moved, either way */
};

struct tcp_conn {
    struct tcp_chan ch[NCLS];
    struct rrpci_idnode node; /* passive: in the context's cookie map */
    uint64_t cookie;
    bool hello_done;
    unsigned joined; /* bit per class */
};

/* An accepted socket that has not said which connection and class it is. */
struct tcp_pend {
    struct rrpci_list link;
    rrpc_listener *l;
    int fd;
    ev_io io;
    struct rrpci_timer timer;
    struct sockaddr_storage peer;
    uint8_t buf[RRPCI_HDR_SIZE + RRPCI_HELLO_SIZE];
    size_t got;
};

struct tcp_listener {
    int fd;
    ev_io io;
    struct rrpci_list pend; /* oldest first */
    int npend;
    struct rrpci_timer resume; /* accepts paused: out of file descriptors */
    uint64_t emfile_episodes;
};

struct tcp_ctx {
    struct rrpci_idmap cookies;
    struct rrpci_qos qos; /* the core's policy with this transport's knobs */
};

static struct tcp_ctx *tctx(rrpc_ctx *ctx)
{
    return rrpci_ctx_tpriv(ctx, &rrpci_tcp_ops);
}

static int set_tos(int fd, int dscp)
{
    int tos = dscp << 2;
    struct sockaddr_storage ss = {.ss_family = AF_UNSPEC};
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET6) {
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos)) < 0)
            return -errno;
    }
    /* Also on IPv6 sockets: it applies to their IPv4-mapped traffic. */
    if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0 && ss.ss_family == AF_INET)
        return -errno;
    return 0;
}

static int sock_setup(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return 0;
}

/* ---- transmit ------------------------------------------------------------ */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct rrpci_qos *chan_qos(const struct tcp_chan *ch)
{
    return &tctx(rrpci_conn_ctx(ch->conn))->qos;
}

/* Bytes @ch may move in its next system call: the policy's piece, small
 * while another class of the connection is busy. */
static size_t piece_size(const struct tcp_chan *ch, uint64_t now)
{
    const struct tcp_conn *tc = rrpci_conn_priv(ch->conn);
    const struct rrpci_qos *qos = chan_qos(ch);
    bool shared = false;
    for (int i = 0; i < NCLS; i++) {
        const struct tcp_chan *o = &tc->ch[i];
        if (o != ch && (o->txh || rrpci_qos_busy(qos, o->last_ns, now)))
            shared = true;
    }
    return rrpci_qos_piece(qos, shared);
}

/* Writes queued frames, at most the class's turn per call.  Returns 0 when
 * the queue is empty, -EAGAIN when the socket is full or the turn is over
 * (the caller keeps the write watcher armed), or a negative errno. */
static int chan_write(struct tcp_chan *ch)
{
    uint64_t now = mono_ns();
    struct rrpci_qos_turn turn;
    rrpci_qos_turn_begin(chan_qos(ch), ch->cls, now, &turn);
    bool open = true;
    while (ch->txh) {
        if (!open)
            return -EAGAIN;
        struct rrpci_msg *m = ch->txh;
        struct iovec iov[3];
        int n = 0;
        size_t off = ch->tx_off, room = piece_size(ch, now);
        const size_t parts[3] = {RRPCI_HDR_SIZE, m->len, m->ext_len};
        const uint8_t *bases[3] = {m->hdr, m->data, m->ext};
        for (int i = 0; i < 3; i++) {
            if (off >= parts[i]) {
                off -= parts[i];
                continue;
            }
            iov[n].iov_base = (void *)(bases[i] + off);
            iov[n].iov_len = parts[i] - off < room ? parts[i] - off : room;
            room -= iov[n].iov_len;
            off = 0;
            n++;
            if (!room)
                break;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(ch->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return -EAGAIN;
            if (errno == EINTR)
                continue;
            return -errno;
        }
        ch->tx_off += (size_t)w;
        ch->tx_bytes -= (size_t)w;
        ch->last_ns = now;
        now = mono_ns();
        open = rrpci_qos_turn_charge(&turn, (size_t)w, now);
        if (ch->tx_off == RRPCI_HDR_SIZE + rrpci_msg_payload_len(m)) {
            ch->txh = m->next;
            if (!ch->txh)
                ch->txt = NULL;
            ch->tx_off = 0;
            rrpci_msg_free(m);
        }
    }
    return 0;
}

static void chan_push(struct tcp_chan *ch, rrpc_ctx *ctx, struct rrpci_msg *m)
{
    m->next = NULL;
    bool queued = ch->txh != NULL;
    if (ch->txt)
        ch->txt->next = m;
    else
        ch->txh = m;
    ch->txt = m;
    ch->tx_bytes += RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
    if (!ch->connected)
        return; /* written once the connect completes */
    if (queued)
        return; /* the armed write watcher writes it in the class's next slice */
    int r = chan_write(ch);
    if (r == -EAGAIN) {
        ev_io_start(rrpci_ctx_loop(ctx), &ch->wio);
    } else if (r < 0 && ch->conn) {
        rrpci_conn_down(ch->conn, RRPC_E_CONN_LOST, "write to the peer failed");
    }
}

/* A handshake frame built by the transport itself. */
static struct rrpci_msg *hs_msg(uint8_t type, int cls, const void *payload, size_t len)
{
    struct rrpci_msg *m = rrpci_msg_new(len);
    if (!m)
        return NULL;
    m->h.version = RRPCI_PROTO_VERSION;
    m->h.type = type;
    m->h.cls = (uint8_t)cls;
    m->h.len = (uint32_t)len;
    if (len)
        memcpy(m->data, payload, len);
    rrpci_hdr_encode(&m->h, m->hdr);
    return m;
}

static int tcp_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    struct tcp_chan *ch = &tc->ch[cls];
    if (ch->tx_bytes > TX_HIGH) {
        ch->want_writable = true;
        return -EAGAIN;
    }
    chan_push(ch, rrpci_conn_ctx(c), m);
    return 0;
}

static void chan_writable_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcp_chan *ch = w->data;
    rrpc_conn *c = ch->conn;
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (!ch->connected) {
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(ch->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            char why[128];
            snprintf(why, sizeof(why), "connect failed: %s", strerror(err));
            rrpci_set_error(ctx, -err, "%s", why);
            rrpci_conn_down(c, -err, why);
            return;
        }
        ch->connected = true;
        ev_io_start(loop, &ch->rio);
    }
    int r = chan_write(ch);
    if (r == -EAGAIN)
        return;
    ev_io_stop(loop, &ch->wio);
    if (r < 0) {
        rrpci_conn_down(c, RRPC_E_CONN_LOST, "write to the peer failed");
        return;
    }
    if (ch->want_writable) {
        ch->want_writable = false;
        rrpci_conn_writable(c, ch->cls);
    }
}

/* ---- receive ------------------------------------------------------------- */

static void on_handshake_frame(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                               const uint8_t *p);

/* Hands one complete frame up.  Returns false when the connection went away. */
static bool deliver(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                    const uint8_t *payload)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    if (h->type == RRPCI_T_HELLO_ACK || h->type == RRPCI_T_JOIN_ACK || h->type == RRPCI_T_HELLO ||
        h->type == RRPCI_T_JOIN) {
        if (tc->joined == (1u << NCLS) - 1) {
            rrpci_conn_down(c, RRPC_E_PROTO, "handshake frame on an established connection");
            return false;
        }
        on_handshake_frame(c, ch, h, payload);
    } else if (tc->joined != (1u << NCLS) - 1 && h->type == RRPCI_T_ERROR) {
        /* The passive side refused us and says why. */
        rrpci_conn_refused(c, (int32_t)(uint32_t)h->arg, payload, h->len);
        return false;
    } else if (tc->joined != (1u << NCLS) - 1) {
        rrpci_conn_down(c, RRPC_E_PROTO, "data frame before the handshake finished");
        return false;
    } else {
        rrpci_conn_recv(c, ch->cls, h, payload);
    }
    return !rrpci_conn_is_down(c);
}

/* ---- the receive machine's upcalls (rx.h) ---- */

/* The passive side is up and may already send on a class while the active
 * side's other JOIN_ACKs are on their way: such a frame waits in its
 * buffer until every class is joined (join_done). */
static bool chan_rx_ready(void *u, uint8_t type)
{
    struct tcp_chan *ch = u;
    struct tcp_conn *tc = rrpci_conn_priv(ch->conn);
    return rrpci_conn_passive(ch->conn) || tc->joined == (1u << NCLS) - 1 ||
           type == RRPCI_T_HELLO_ACK || type == RRPCI_T_JOIN_ACK || type == RRPCI_T_ERROR;
}

static int chan_rx_admit(void *u, const struct rrpci_hdr *h)
{
    struct tcp_chan *ch = u;
    return rrpci_conn_rx_admit(ch->conn, ch->cls, h);
}

static bool chan_rx_frame(void *u, const struct rrpci_hdr *h, const uint8_t *payload)
{
    struct tcp_chan *ch = u;
    return deliver(ch->conn, ch, h, payload);
}

static uint8_t *chan_rx_write_target(void *u, const struct rrpci_hdr *h, const uint8_t *p,
                                     size_t n)
{
    struct tcp_chan *ch = u;
    return rrpci_os_write_target(ch->conn, h, p, n);
}

static void chan_rx_fail(void *u, int code, const char *why)
{
    struct tcp_chan *ch = u;
    if (code != -ENOMEM)
        rrpci_set_error(rrpci_conn_ctx(ch->conn), code,
                        "bad frame from the peer: %s; connection closed", why);
    rrpci_conn_down(ch->conn, code, why);
}

static const struct rrpc_tcp_rx_up chan_rx_up = {
    .ready = chan_rx_ready,
    .admit = chan_rx_admit,
    .frame = chan_rx_frame,
    .write_target = chan_rx_write_target,
    .fail = chan_rx_fail,
};

/* Reads the socket for the class's turn (core/qos.h), where the receive
 * machine says, and runs the machine on what came. */
static void chan_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcp_chan *ch = w->data;
    rrpc_conn *c = ch->conn;
    rrpci_conn_ref(c);
    uint64_t now = mono_ns();
    struct rrpci_qos_turn turn;
    rrpci_qos_turn_begin(chan_qos(ch), ch->cls, now, &turn);
    /* Frames held back while the handshake finished come first. */
    enum rrpc_tcp_rx_next next = rrpc_tcp_rx_got(&ch->rx, 0);
    bool open = true;
    while (open && next == RRPC_TCP_RX_READ) {
        uint8_t *to;
        size_t want;
        next = rrpc_tcp_rx_want(&ch->rx, piece_size(ch, now), &to, &want);
        if (next != RRPC_TCP_RX_READ)
            break;
        ssize_t n = read(ch->fd, to, want);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n <= 0) {
            int err = n < 0 ? errno : 0;
            char why[128];
            if (n < 0)
                snprintf(why, sizeof(why), "read from the peer failed: %s", strerror(err));
            else
                snprintf(why, sizeof(why), "%s",
                         rrpc_tcp_rx_mid_frame(&ch->rx)
                             ? "the peer vanished in the middle of a message"
                             : "the peer closed the connection");
            rrpci_conn_down(c, RRPC_E_CONN_LOST, why);
            next = RRPC_TCP_RX_GONE;
            break;
        }
        ch->last_ns = now;
        now = mono_ns();
        open = rrpci_qos_turn_charge(&turn, (size_t)n, now); /* this piece is handled, then
                                                                 the loop moves on */
        /* A short read emptied the socket: the (level-triggered) watcher
         * calls again when more comes, which saves a read that would only
         * say EAGAIN. */
        bool drained = (size_t)n < want;
        next = rrpc_tcp_rx_got(&ch->rx, (size_t)n);
        if (drained)
            break;
    }
    if (next == RRPC_TCP_RX_HOLD)
        ev_io_stop(loop, &ch->rio);
    rrpci_conn_unref(c);
}

/* ---- channels -------------------------------------------------------------- */

static void chan_init(struct tcp_chan *ch, rrpc_conn *c, int cls, int fd, bool connected)
{
    ch->conn = c;
    ch->cls = cls;
    ch->fd = fd;
    ch->connected = connected;
    /* The read buffer comes on the first read: an idle connection holds none. */
    rrpc_tcp_rx_init(&ch->rx, &chan_rx_up, ch, rrpci_ctx_max_msg(rrpci_conn_ctx(c)));
    ev_io_init(&ch->rio, chan_read_cb, fd, EV_READ);
    ev_io_init(&ch->wio, chan_writable_cb, fd, EV_WRITE);
    ch->rio.data = ch->wio.data = ch;
    /* Within one loop iteration, the ready watchers of the class the
     * policy serves first run first (libev invokes them by priority). */
    int pri = rrpci_rx_prio(rrpci_conn_ctx(c), cls);
    ev_set_priority(&ch->rio, pri);
    ev_set_priority(&ch->wio, pri);
}

static void chan_stop(struct tcp_chan *ch, rrpc_ctx *ctx)
{
    if (ch->fd < 0 && !ch->rx.rbuf)
        return;
    ev_io_stop(rrpci_ctx_loop(ctx), &ch->rio);
    ev_io_stop(rrpci_ctx_loop(ctx), &ch->wio);
    if (ch->fd >= 0)
        close(ch->fd);
    ch->fd = -1;
    rrpc_tcp_rx_fini(&ch->rx);
    while (ch->txh) {
        struct rrpci_msg *m = ch->txh;
        ch->txh = m->next;
        rrpci_msg_free(m);
    }
    ch->txt = NULL;
}

/* Idle: free the kept large buffers and the empty read buffers; the read
 * path makes them again when traffic resumes.  An idle connection then costs
 * its sockets and a few hundred bytes of state. */
static void tcp_trim(rrpc_conn *c)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    for (int i = 0; i < NCLS; i++)
        rrpc_tcp_rx_trim(&tc->ch[i].rx);
}

static void tcp_conn_close(rrpc_conn *c)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    for (int i = 0; i < NCLS; i++)
        chan_stop(&tc->ch[i], ctx);
    if (rrpci_conn_passive(c) && tc->cookie)
        rrpci_idmap_del(&tctx(ctx)->cookies, tc->cookie);
    tc->cookie = 0;
}

/* ---- handshake --------------------------------------------------------------- */

static void join_done(rrpc_conn *c, struct tcp_conn *tc, int cls)
{
    tc->joined |= 1u << cls;
    if (tc->joined != (1u << NCLS) - 1)
        return;
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    for (int i = 0; i < NCLS; i++) {
        struct tcp_chan *ch = &tc->ch[i];
        if (ch->rx.state == RRPC_TCP_RX_HELD) { /* hand up what was held, then read on */
            rrpc_tcp_rx_resume(&ch->rx);
            ev_io_start(rrpci_ctx_loop(ctx), &ch->rio);
            ev_feed_event(rrpci_ctx_loop(ctx), &ch->rio, EV_READ);
        }
    }
    rrpci_conn_established(c);
}

/* Active side: HELLO_ACK on control, JOIN_ACK on the others. */
static void on_handshake_frame(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                               const uint8_t *p)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (rrpci_conn_passive(c)) {
        rrpci_conn_down(c, RRPC_E_PROTO, "unexpected handshake frame from the active side");
        return;
    }
    if (h->type == RRPCI_T_HELLO_ACK && ch->cls == RRPCI_CLS_CONTROL && !tc->hello_done) {
        struct rrpci_hello peer;
        int r = rrpci_hello_decode(p, h->len, &peer);
        if (r < 0)
            rrpci_set_error(ctx, r, "HELLO_ACK of %u bytes, expected %d", h->len,
                            RRPCI_HELLO_SIZE);
        else
            r = rrpci_conn_hello_peer(c, &peer);
        if (r < 0) {
            rrpci_conn_down(c, r, rrpc_ctx_last_error(ctx));
            return;
        }
        tc->hello_done = true;
        tc->cookie = peer.cookie;
        uint8_t ck[8];
        rrpci_put64(ck, tc->cookie);
        for (int i = 1; i < NCLS; i++) {
            struct rrpci_msg *m = hs_msg(RRPCI_T_JOIN, i, ck, sizeof(ck));
            if (!m) {
                rrpci_conn_down(c, -ENOMEM, "out of memory during the handshake");
                return;
            }
            chan_push(&tc->ch[i], ctx, m);
            if (rrpci_conn_is_down(c))
                return;
        }
        join_done(c, tc, RRPCI_CLS_CONTROL);
        return;
    }
    if (h->type == RRPCI_T_JOIN_ACK && ch->cls != RRPCI_CLS_CONTROL && tc->hello_done &&
        !(tc->joined & (1u << ch->cls))) {
        join_done(c, tc, ch->cls);
        return;
    }
    rrpci_conn_down(c, RRPC_E_PROTO, "unexpected handshake frame from the passive side");
}

/* 0, or the code of rrpci_resolve_code with the words in *why. */
static int resolve_addr(const char *host, int port, bool passive, struct sockaddr_storage *ss,
                        socklen_t *sl, const char **why)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *res = NULL;
    char ps[8];
    snprintf(ps, sizeof(ps), "%d", port);
    int r = getaddrinfo(host, ps, &hints, &res);
    if (r != 0 || !res) {
        int err = errno;
        if (r == 0)
            r = EAI_NONAME;
        *why = rrpci_resolve_why(r);
        return rrpci_resolve_code(r, err);
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sl = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int tcp_connect(rrpc_conn *c, const struct rrpci_uri *u)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    struct sockaddr_storage ss, src;
    socklen_t sl, srcl = 0;
    const char *why = NULL;
    int rr = resolve_addr(u->host, u->port, false, &ss, &sl, &why);
    if (rr < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve \"%s\": %s", u->host, why);
    if (u->src[0] && (rr = resolve_addr(u->src, 0, false, &src, &srcl, &why)) < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve ?src=%s: %s", u->src, why);
    for (int i = 0; i < NCLS; i++)
        tc->ch[i].fd = -1;
    for (int i = 0; i < NCLS; i++) {
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return rrpci_set_error(ctx, -errno, "socket: %s", strerror(errno));
        chan_init(&tc->ch[i], c, i, fd, false);
        sock_setup(fd);
        int r = set_tos(fd, rrpci_ctx_class_dscp(ctx, i));
        if (r < 0)
            return rrpci_set_error(ctx, r, "cannot set the DSCP of class %s: %s",
                                   rrpci_class_name(i), strerror(-r));
        if (srcl && bind(fd, (struct sockaddr *)&src, srcl) < 0)
            return rrpci_set_error(ctx, -errno, "cannot bind to ?src=%s: %s", u->src,
                                   strerror(errno));
        if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)
            return rrpci_set_error(ctx, -errno, "cannot connect to %s:%d: %s", u->host, u->port,
                                   strerror(errno));
        ev_io_start(rrpci_ctx_loop(ctx), &tc->ch[i].wio);
    }
    struct rrpci_hello hello;
    rrpci_conn_hello_local(c, &hello);
    uint8_t hb[RRPCI_HELLO_SIZE];
    rrpci_hello_encode(&hello, hb);
    struct rrpci_msg *m = hs_msg(RRPCI_T_HELLO, RRPCI_CLS_CONTROL, hb, sizeof(hb));
    if (!m)
        return -ENOMEM;
    chan_push(&tc->ch[0], ctx, m);
    return 0;
}

/* ---- passive side --------------------------------------------------------------- */

static void pend_free(struct tcp_pend *p, rrpc_ctx *ctx, bool close_fd)
{
    ev_io_stop(rrpci_ctx_loop(ctx), &p->io);
    rrpci_timer_stop(&p->timer);
    if (close_fd)
        close(p->fd);
    rrpci_list_del(&p->link);
    ((struct tcp_listener *)rrpci_listener_priv(p->l))->npend--;
    free(p);
}

/* Refuses an accepted socket with an ERROR frame the peer can show. */
static void pend_refuse(struct tcp_pend *p, rrpc_ctx *ctx, int code, const char *why)
{
    struct rrpci_msg *m = hs_msg(RRPCI_T_ERROR, 0, why, strlen(why));
    if (m) {
        m->h.arg = (uint32_t)code;
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

static void adopt(rrpc_conn *c, int cls, int fd, rrpc_ctx *ctx)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    chan_init(&tc->ch[cls], c, cls, fd, true);
    int r = set_tos(fd, rrpci_ctx_class_dscp(ctx, cls));
    if (r < 0)
        RRPCI_LOG(ctx, LOG_WARNING, "cannot mark class %s with DSCP %d: %s", rrpci_class_name(cls),
                  rrpci_ctx_class_dscp(ctx, cls), strerror(-r));
    ev_io_start(rrpci_ctx_loop(ctx), &tc->ch[cls].rio);
}

static void pend_frame(struct tcp_pend *p, rrpc_ctx *ctx, const struct rrpci_hdr *h,
                       const uint8_t *payload)
{
    rrpc_listener *l = p->l;
    struct tcp_ctx *t = tctx(ctx);
    if (h->type == RRPCI_T_HELLO && h->cls == RRPCI_CLS_CONTROL) {
        rrpc_conn *c = NULL;
        char why[200];
        int r = rrpci_listener_accept(l, (struct sockaddr *)&p->peer, &c, why, sizeof(why));
        if (r < 0) {
            pend_refuse(p, ctx, r, why);
            return;
        }
        struct tcp_conn *tc = rrpci_conn_priv(c);
        for (int i = 0; i < NCLS; i++)
            tc->ch[i].fd = -1;
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
        do {
            if (getrandom(&tc->cookie, sizeof(tc->cookie), 0) != sizeof(tc->cookie))
                tc->cookie = 0;
        } while (!tc->cookie || rrpci_idmap_put(&t->cookies, tc->cookie, &tc->node) < 0);
        int fd = p->fd;
        pend_free(p, ctx, false);
        adopt(c, RRPCI_CLS_CONTROL, fd, ctx);
        rrpci_conn_hello_local(c, &mine);
        mine.cookie = tc->cookie;
        uint8_t hb[RRPCI_HELLO_SIZE];
        rrpci_hello_encode(&mine, hb);
        struct rrpci_msg *m = hs_msg(RRPCI_T_HELLO_ACK, RRPCI_CLS_CONTROL, hb, sizeof(hb));
        if (!m)
            {
                rrpci_conn_down(c, -ENOMEM, "out of memory");
                return;
            }
        chan_push(&tc->ch[0], ctx, m);
        if (!rrpci_conn_is_down(c))
            join_done(c, tc, RRPCI_CLS_CONTROL);
        return;
    }
    if (h->type == RRPCI_T_JOIN && h->cls != RRPCI_CLS_CONTROL && h->len == 8) {
        struct rrpci_idnode *n = rrpci_idmap_get(&t->cookies, rrpci_get64(payload));
        if (!n)
            {
                pend_refuse(p, ctx, RRPC_E_PROTO, "JOIN for an unknown connection");
                return;
            }
        struct tcp_conn *tc = rrpci_container_of(n, struct tcp_conn, node);
        rrpc_conn *c = tc->ch[0].conn;
        if (tc->joined & (1u << h->cls))
            {
                pend_refuse(p, ctx, RRPC_E_PROTO, "class joined twice");
                return;
            }
        int fd = p->fd, cls = h->cls;
        pend_free(p, ctx, false);
        adopt(c, cls, fd, ctx);
        struct rrpci_msg *m = hs_msg(RRPCI_T_JOIN_ACK, cls, NULL, 0);
        if (!m)
            {
                rrpci_conn_down(c, -ENOMEM, "out of memory");
                return;
            }
        chan_push(&tc->ch[cls], ctx, m);
        if (!rrpci_conn_is_down(c))
            join_done(c, tc, cls);
        return;
    }
    pend_refuse(p, ctx, RRPC_E_PROTO, "the first frame must be HELLO (control) or JOIN");
}

static void pend_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcp_pend *p = w->data;
    rrpc_ctx *ctx = rrpci_listener_ctx(p->l);
    size_t want = RRPCI_HDR_SIZE;
    struct rrpci_hdr h;
    if (p->got >= RRPCI_HDR_SIZE) {
        const char *why = NULL;
        int r = rrpci_hdr_decode(p->buf, RRPCI_HELLO_SIZE, &h, &why);
        if (r < 0)
            {
                pend_refuse(p, ctx, r, why);
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
        if (r < 0)
            {
                pend_refuse(p, ctx, r, why);
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

static void pend_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct tcp_pend *p = w->data;
    pend_refuse(p, rrpci_listener_ctx(p->l), -ETIMEDOUT, "no handshake in time");
}

static void resume_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct tcp_listener *tl = w->data;
    ev_io_start(loop, &tl->io);
}

/* accept failed for want of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM):
 * the pending connection stays in the backlog and the listening socket stays
 * readable, so accepting again at once would spin.  Pause accepts for 100 ms
 * and say so once per episode. */
static void accept_pause(struct tcp_listener *tl, rrpc_ctx *ctx, int err)
{
    struct ev_loop *loop = rrpci_ctx_loop(ctx);
    ev_io_stop(loop, &tl->io);
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

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    rrpc_listener *l = w->data;
    struct tcp_listener *tl = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    /* Sockets that have not said which connection they are hold an fd each:
     * at most RRPC_MAX_CONNS of them (the oldest goes first), at most
     * RRPC_MAX_CONNS_PER_SOURCE from one address, each for at most
     * RRPC_AUTH_TIMEOUT_MS. */
    int max_pend = (int)rrpci_ctx_tunable(ctx, "RRPC_MAX_CONNS");
    int per_source = (int)rrpci_ctx_tunable(ctx, "RRPC_MAX_CONNS_PER_SOURCE");
    double tmo = (double)rrpci_ctx_tunable(ctx, "RRPC_AUTH_TIMEOUT_MS") / 1000.0;
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
                      "from its address (RRPC_MAX_CONNS_PER_SOURCE)", per_source);
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
        sock_setup(fd);
        p->l = l;
        p->fd = fd;
        p->peer = peer;
        ev_io_init(&p->io, pend_read_cb, fd, EV_READ);
        p->io.data = p;
        rrpci_timer_init(ctx, &p->timer, pend_timeout_cb, tmo, 0);
        p->timer.w.data = p;
        ev_io_start(loop, &p->io);
        rrpci_timer_start(&p->timer);
        rrpci_list_add(&tl->pend, &p->link);
        tl->npend++;
    }
}

static int tcp_listen(rrpc_listener *l, const struct rrpci_uri *u)
{
    struct tcp_listener *tl = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    struct sockaddr_storage ss;
    socklen_t sl;
    const char *why = NULL;
    rrpci_list_init(&tl->pend);
    tl->fd = -1;
    rrpci_timer_init(ctx, &tl->resume, resume_cb, 0, 0);
    tl->resume.w.data = tl;
    int rr = resolve_addr(u->host, u->port, true, &ss, &sl, &why);
    if (rr < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve \"%s\": %s", u->host, why);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rrpci_set_error(ctx, -errno, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* SYN-ACKs leave with the listener's mark: the control class's. */
    set_tos(fd, rrpci_ctx_class_dscp(ctx, RRPCI_CLS_CONTROL));
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
    ev_io_init(&tl->io, accept_cb, fd, EV_READ);
    tl->io.data = l;
    ev_io_start(rrpci_ctx_loop(ctx), &tl->io);
    return 0;
}

static void tcp_listener_close(rrpc_listener *l)
{
    struct tcp_listener *tl = rrpci_listener_priv(l);
    rrpc_ctx *ctx = rrpci_listener_ctx(l);
    while (!rrpci_list_empty(&tl->pend))
        pend_free(rrpci_container_of(tl->pend.next, struct tcp_pend, link), ctx, true);
    rrpci_timer_stop(&tl->resume);
    if (tl->fd >= 0) {
        ev_io_stop(rrpci_ctx_loop(ctx), &tl->io);
        close(tl->fd);
        tl->fd = -1;
    }
}

static int tcp_listener_port(rrpc_listener *l)
{
    struct tcp_listener *tl = rrpci_listener_priv(l);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(tl->fd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}

static int tcp_class_dscp(rrpc_conn *c, int cls, int *ret)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    int fd = tc->ch[cls].fd;
    if (fd < 0)
        return RRPC_E_CLOSED;
    int tos = 0;
    socklen_t tl = sizeof(tos);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int r;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET6)
        r = getsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, &tl);
    else
        r = getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &tl);
    if (r < 0)
        return -errno;
    *ret = (tos & 0xff) >> 2;
    return 0;
}

static int tcp_peer_name(rrpc_conn *c, char *buf, size_t len)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
    if (tc->ch[0].fd >= 0 && getpeername(tc->ch[0].fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(buf, len, "%s:%s", host, port);
    return 0;
}

static int tcp_ctx_init(rrpc_ctx *ctx)
{
    const struct rrpci_qos_knobs knobs = {
        .turn_ns = (uint64_t)rrpci_ctx_tunable(ctx, "RRPC_TCP_SLICE_US") * 1000u,
        .piece_alone = (size_t)rrpci_ctx_tunable(ctx, "RRPC_TCP_PIECE_ALONE"),
        .piece_shared = (size_t)rrpci_ctx_tunable(ctx, "RRPC_TCP_PIECE_SHARED"),
        .busy_ns = (uint64_t)rrpci_ctx_tunable(ctx, "RRPC_TCP_BUSY_MS") * 1000000u,
    };
    rrpci_ctx_qos(ctx, &knobs, &tctx(ctx)->qos);
    return 0;
}

static void tcp_ctx_fini(rrpc_ctx *ctx)
{
    rrpci_idmap_fini(&tctx(ctx)->cookies);
}

const struct rrpci_transport_ops rrpci_tcp_ops = {
    .version = RRPCI_TRANSPORT_OPS_VERSION,
    .name = "tcp",
    .scheme = "tcp",
    .ctx_priv_size = sizeof(struct tcp_ctx),
    .conn_priv_size = sizeof(struct tcp_conn),
    .listener_priv_size = sizeof(struct tcp_listener),
    .listen = tcp_listen,
    .listener_close = tcp_listener_close,
    .connect = tcp_connect,
    .send = tcp_send,
    .conn_close = tcp_conn_close,
    .ctx_init = tcp_ctx_init,
    .ctx_fini = tcp_ctx_fini,
    .class_dscp = tcp_class_dscp,
    .peer_name = tcp_peer_name,
    .listener_port = tcp_listener_port,
    .trim = tcp_trim,
    .tunables = tcp_tunables,
    .ext_repointable = true, /* chan_write reads m->ext afresh for every piece */
};

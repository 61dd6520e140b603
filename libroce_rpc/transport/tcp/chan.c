/* SPDX-License-Identifier: MIT */
/* The tcp transport: a socket of a connection, set up and torn down, read
 * for its class's turn on the loop (core/qos.h) into the receive machine
 * (rx.h), whose frames it checks against the socket and hands to the core. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "transport/tcp/tcp_int.h"

/* Bytes @ch may move in its next system call: the policy's piece, small
 * while another socket of the connection is busy. */
size_t rrpc_tcp_piece(const struct tcp_chan *ch, uint64_t now, bool *ret_shared)
{
    const struct tcp_conn *tc = rrpci_conn_priv(ch->conn);
    const struct rrpci_qos *qos = chan_qos(ch);
    bool shared = false;
    for (int i = -1; i < NCLS && !shared; i++) {
        const struct tcp_chan *o = i < 0 ? &tc->first : tc->own[i];
        if (o && o != ch && (o->txh || rrpci_qos_busy(qos, o->last_ns, now)))
            shared = true;
    }
    if (ret_shared)
        *ret_shared = shared;
    return rrpci_qos_piece(qos, shared);
}

bool rrpc_tcp_preempt(const struct tcp_chan *ch)
{
    if (ch->first)
        return false;
    rrpc_ctx *ctx = rrpci_conn_ctx(ch->conn);
    const struct tcp_ctx *t = tctx(ctx);
    if (t->urgent_fd < 0 ||
        rrpci_qos_rank(&t->qos, ch->cls) <= rrpci_qos_rank(&t->qos, RRPCI_CLS_LOW_LATENCY))
        return false;
    struct epoll_event ev;
    if (epoll_wait(t->urgent_fd, &ev, 1, 0) <= 0)
        return false;
    rrpci_ctx_qos_preempted(ctx);
    return true;
}

/* ---- receive ------------------------------------------------------------- */

/* Whether a frame of class h->cls may come on @ch: on the first socket the
 * classes that may share it (low_latency, control) and the connection's own
 * frames; on an own socket its class alone, and no frame of the connection's. */
static bool class_fits(const struct tcp_chan *ch, const struct rrpci_hdr *h)
{
    if (ch->first)
        return h->cls == RRPCI_CLS_CONTROL || h->cls == RRPCI_CLS_LOW_LATENCY;
    return h->cls == ch->cls && !rrpci_type_is_conn_frame(h->type);
}

static void wrong_socket(rrpc_conn *c, const struct tcp_chan *ch, const struct rrpci_hdr *h)
{
    char why[160];
    snprintf(why, sizeof(why), "a frame of class %s on the %s socket (docs/protocol.md 6.1)",
             rrpci_class_name(h->cls), ch->first ? "connection's first" : rrpci_class_name(ch->cls));
    rrpci_set_error(rrpci_conn_ctx(c), RRPC_E_PROTO, "%s", why);
    rrpci_conn_down(c, RRPC_E_PROTO, why);
}

/* Hands one complete frame up.  Returns false when the connection went away. */
static bool deliver(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                    const uint8_t *payload)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    if (h->type == RRPCI_T_HELLO_ACK || h->type == RRPCI_T_JOIN_ACK || h->type == RRPCI_T_HELLO ||
        h->type == RRPCI_T_JOIN) {
        rrpc_tcp_on_handshake(c, ch, h, payload);
    } else if (!tc->hello_done && h->type == RRPCI_T_ERROR) {
        /* The passive side refused us and says why. */
        rrpci_conn_refused(c, (int32_t)(uint32_t)h->arg, payload, h->len);
        return false;
    } else if (!tc->hello_done) {
        rrpci_conn_down(c, RRPC_E_PROTO, "data frame before the handshake finished");
        return false;
    } else if (!ch->first && !ch->attached) {
        char why[300];
        int code = (int32_t)(uint32_t)h->arg;
        if (h->type == RRPCI_T_ERROR)
            snprintf(why, sizeof(why), "the peer refused the %s class's socket: %.*s",
                     rrpci_class_name(ch->cls), (int)(h->len < 200 ? h->len : 200),
                     (const char *)payload);
        else
            snprintf(why, sizeof(why), "a frame before JOIN_ACK on the %s class's socket",
                     rrpci_class_name(ch->cls));
        if (h->type != RRPCI_T_ERROR || code >= 0)
            code = RRPC_E_PROTO;
        rrpci_set_error(rrpci_conn_ctx(c), code, "%s", why);
        rrpci_conn_down(c, code, why);
        return false;
    } else if (!class_fits(ch, h)) {
        wrong_socket(c, ch, h);
        return false;
    } else {
        rrpci_conn_recv(c, h->cls, h, payload);
    }
    return !rrpci_conn_is_down(c);
}

/* ---- the receive machine's upcalls (rx.h) ---- */

static int chan_rx_admit(void *u, const struct rrpci_hdr *h)
{
    struct tcp_chan *ch = u;
    if (!rrpci_type_is_conn_frame(h->type) && !class_fits(ch, h)) {
        wrong_socket(ch->conn, ch, h);
        return RRPC_E_PROTO;
    }
    return rrpci_conn_rx_admit(ch->conn, h->cls, h);
}

static bool chan_rx_frame(void *u, const struct rrpci_hdr *h, const uint8_t *payload)
{
    struct tcp_chan *ch = u;
    if (!rrpci_type_is_conn_frame(h->type))
        ch->last_ns = ch->rx_ns; /* before the core hears of it, and maybe answers */
    return deliver(ch->conn, ch, h, payload);
}

static uint8_t *chan_rx_write_target(void *u, const struct rrpci_hdr *h, const uint8_t *p,
                                     size_t n)
{
    struct tcp_chan *ch = u;
    return rrpci_os_write_target(ch->conn, h, p, n);
}

/* A large payload's buffer, from the context's budget: refused, the socket
 * is left unread (chan_read_cb stops its watcher) until chan_partial_cb. */
static int chan_rx_reserve(void *u, size_t len)
{
    struct tcp_chan *ch = u;
    if (rrpci_partial_reserve(rrpci_conn_ctx(ch->conn), len, &ch->pwait))
        return 0;
    ch->paused = true;
    return -EAGAIN;
}

static void chan_rx_unreserve(void *u, size_t len)
{
    struct tcp_chan *ch = u;
    rrpci_partial_release(rrpci_conn_ctx(ch->conn), len);
}

static void chan_rx_fail(void *u, int code, const char *why)
{
    struct tcp_chan *ch = u;
    struct tcp_conn *tc = rrpci_conn_priv(ch->conn);
    if (code == RRPC_E_VERSION && !tc->hello_done) {
        why = "the server speaks another protocol version (docs/protocol.md section 1 says "
              "what each version changed): run the same libroce_rpc release on both sides";
        rrpci_set_error(rrpci_conn_ctx(ch->conn), code, "this side speaks protocol version %d; %s",
                        RRPCI_PROTO_VERSION, why);
    } else if (code != -ENOMEM)
        rrpci_set_error(rrpci_conn_ctx(ch->conn), code,
                        "bad frame from the peer: %s; connection closed", why);
    rrpci_conn_down(ch->conn, code, why);
}

static const struct rrpc_tcp_rx_up chan_rx_up = {
    .admit = chan_rx_admit,
    .frame = chan_rx_frame,
    .write_target = chan_rx_write_target,
    .fail = chan_rx_fail,
    .reserve = chan_rx_reserve,
    .unreserve = chan_rx_unreserve,
};

/* When the bytes of @mh arrived, as the kernel stamped them (CLOCK_REALTIME
 * seconds); 0 when it did not. */
static double arrival(struct msghdr *mh)
{
    for (struct cmsghdr *h = CMSG_FIRSTHDR(mh); h; h = CMSG_NXTHDR(mh, h)) {
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(h), sizeof(ts));
            return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
        }
    }
    return 0;
}

/* Reads the socket for the class's turn (core/qos.h), where the receive
 * machine says, and runs the machine on what came. */
static void chan_read_cb(struct rrpci_io *w, unsigned revents)
{
    struct tcp_chan *ch = w->data;
    rrpc_conn *c = ch->conn;
    rrpci_conn_ref(c);
    uint64_t now = mono_ns();
    struct rrpci_qos_turn turn;
    rrpci_qos_turn_begin(chan_qos(ch), ch->cls, now, &turn);
    enum rrpc_tcp_rx_next next = RRPC_TCP_RX_READ;
    bool open = true;
    /* An idle socket (its read buffer given back) that wakes for a frame
     * without payload, a keepalive or a credit, gives the buffer back at
     * once: else an idle connection would hold a page of it from one
     * keepalive to the next. */
    bool was_idle = ch->rx.rbuf == NULL;
    size_t moved = 0;
    while (open && next == RRPC_TCP_RX_READ) {
        uint8_t *to;
        size_t want;
        next = rrpc_tcp_rx_want(&ch->rx, rrpc_tcp_piece(ch, now, NULL), &to, &want);
        if (next != RRPC_TCP_RX_READ)
            break;
        /* with the kernel's receive time of these bytes (SO_TIMESTAMPNS) */
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(struct timespec))];
        } cm;
        struct iovec iov = {to, want};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &cm,
                            .msg_controllen = sizeof(cm)};
        ssize_t n = recvmsg(ch->fd, &mh, 0);
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
        uint64_t t_read = now;
        moved += (size_t)n;
        now = mono_ns();
        /* Past the turn, this piece is still handled; then the loop moves on. */
        /* A short read emptied the socket: the (level-triggered) watcher
         * calls again when more comes, which saves a read that would only
         * say EAGAIN. */
        bool drained = (size_t)n < want;
        open = rrpci_qos_turn_charge(&turn, (size_t)n, now) && !drained && !rrpc_tcp_preempt(ch);
        rrpc_ctx *ctx = rrpci_conn_ctx(c);
        rrpci_ctx_rx_arrival(ctx, arrival(&mh));
        ch->rx_ns = t_read;
        next = rrpc_tcp_rx_got(&ch->rx, (size_t)n);
        rrpci_ctx_rx_arrival(ctx, 0);
        if (next == RRPC_TCP_RX_GONE) /* the socket may be gone with its connection */
            break;
        if (rrpc_tcp_rx_in_class_frame(&ch->rx)) /* a large frame's payload */
            ch->last_ns = t_read;
        if (drained)
            break;
    }
    if (next == RRPC_TCP_RX_READ && was_idle && moved <= RRPCI_HDR_SIZE)
        rrpc_tcp_rx_release(&ch->rx);
    if (next == RRPC_TCP_RX_PAUSE) /* level-triggered: unread, it would wake at once */
        rrpci_io_stop(rrpci_ctx_loop(rrpci_conn_ctx(c)), &ch->rio);
    rrpci_conn_unref(c);
}

/* Room may have come in the budget of large frames: the machine asks again,
 * and the socket is read again once it has its buffer. */
static void chan_partial_cb(struct rrpci_partial_wait *w)
{
    struct tcp_chan *ch = w->data;
    rrpc_conn *c = ch->conn;
    rrpci_conn_ref(c);
    enum rrpc_tcp_rx_next next = rrpc_tcp_rx_resume(&ch->rx);
    if (next == RRPC_TCP_RX_READ) {
        ch->paused = false;
        if (ch->fd >= 0)
            rrpci_io_start(rrpci_ctx_loop(rrpci_conn_ctx(c)), &ch->rio);
    }
    rrpci_conn_unref(c);
}

/* ---- channels -------------------------------------------------------------- */

/* An own socket that was not attached in time: the peer never took it
 * (passive side) or never asked for it back (active side). */
static void attach_timeout_cb(struct rrpci_timer *t)
{
    struct tcp_chan *ch = t->data;
    char why[160];
    snprintf(why, sizeof(why), "the %s class's socket was not attached within "
             "RRPC_AUTH_TIMEOUT_MS", rrpci_class_name(ch->cls));
    rrpci_set_error(rrpci_conn_ctx(ch->conn), -ETIMEDOUT, "%s", why);
    rrpci_conn_down(ch->conn, -ETIMEDOUT, why);
}

void rrpc_tcp_chan_init(struct tcp_chan *ch, rrpc_conn *c, int cls, bool first, int fd,
                        bool connected)
{
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    ch->conn = c;
    ch->cls = cls;
    ch->first = first;
    ch->fd = -1;
    ch->urgent = false;
    /* The read buffer comes on the first read: an idle connection holds none. */
    rrpc_tcp_rx_init(&ch->rx, &chan_rx_up, ch, rrpci_ctx_max_msg(ctx));
    ch->pwait.cb = chan_partial_cb;
    ch->pwait.data = ch;
    if (!first) {
        struct rrpci_accept_limits lim;
        rrpci_ctx_accept_limits(ctx, &lim);
        rrpci_timer_init(ctx, &ch->attach_timer, attach_timeout_cb, lim.auth_timeout_ms / 1000.0,
                         0);
        ch->attach_timer.data = ch;
    }
    rrpc_tcp_chan_fd(ch, fd, connected);
}

void rrpc_tcp_chan_fd(struct tcp_chan *ch, int fd, bool connected)
{
    ch->fd = fd;
    if (fd >= 0) { /* receive times, for requests' deadlines (arrival()) */
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    }
    ch->connected = connected && fd >= 0;
    const struct tcp_ctx *t = tctx(rrpci_conn_ctx(ch->conn));
    if (ch->first && fd >= 0 && !ch->urgent && t->urgent_fd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        ch->urgent = epoll_ctl(t->urgent_fd, EPOLL_CTL_ADD, fd, &ev) == 0;
    }
    rrpci_io_init(&ch->rio, chan_read_cb, fd, RRPCI_IO_READ);
    rrpci_io_init(&ch->wio, rrpc_tcp_writable_cb, fd, RRPCI_IO_WRITE);
    ch->rio.data = ch->wio.data = ch;
    /* Within one loop iteration, the ready watchers of the class the
     * policy serves first run first (libev invokes them by priority). */
    int pri = rrpci_rx_prio(rrpci_conn_ctx(ch->conn), ch->cls);
    rrpci_io_set_prio(&ch->rio, pri);
    rrpci_io_set_prio(&ch->wio, pri);
}

static void free_list(struct rrpci_msg *m)
{
    while (m) {
        struct rrpci_msg *next = m->next;
        rrpci_msg_free(m);
        m = next;
    }
}

static void chan_stop(struct tcp_chan *ch, rrpc_ctx *ctx)
{
    if (!ch->first)
        rrpci_timer_stop(&ch->attach_timer);
    if (ch->fd >= 0) {
        rrpci_io_stop(rrpci_ctx_loop(ctx), &ch->rio);
        rrpci_io_stop(rrpci_ctx_loop(ctx), &ch->wio);
        if (ch->urgent)
            (void)epoll_ctl(tctx(ctx)->urgent_fd, EPOLL_CTL_DEL, ch->fd, NULL);
        ch->urgent = false;
        close(ch->fd);
    }
    ch->fd = -1;
    rrpci_partial_cancel(&ch->pwait);
    ch->paused = false;
    rrpc_tcp_rx_fini(&ch->rx);
    free_list(ch->txh);
    free_list(ch->heldh);
    ch->txh = ch->txt = ch->heldh = ch->heldt = NULL;
    ch->tx_bytes = 0;
}

/* Idle: free the kept large buffers and the empty read buffers; the read
 * path makes them again when traffic resumes.  An idle connection then costs
 * its sockets and a few hundred bytes of state. */
void rrpc_tcp_trim(rrpc_conn *c)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_tcp_rx_trim(&tc->first.rx);
    for (int i = 0; i < NCLS; i++)
        if (tc->own[i])
            rrpc_tcp_rx_trim(&tc->own[i]->rx);
}

void rrpc_tcp_conn_close(rrpc_conn *c)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (tc->first.conn)
        chan_stop(&tc->first, ctx);
    for (int i = 0; i < NCLS; i++) {
        if (tc->own[i]) {
            chan_stop(tc->own[i], ctx);
            free(tc->own[i]);
            tc->own[i] = NULL;
        }
    }
    if (rrpci_conn_passive(c) && tc->cookie)
        rrpci_idmap_del(&tctx(ctx)->cookies, tc->cookie);
    tc->cookie = 0;
}

/* SPDX-License-Identifier: MIT */
/* The tcp transport: a class socket, set up and torn down, read for its
 * class's turn on the loop (core/qos.h) into the receive machine (rx.h),
 * whose frames it hands to the core. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/tcp/tcp_int.h"

/* Bytes @ch may move in its next system call: the policy's piece, small
 * while another class of the connection is busy. */
size_t rrpc_tcp_piece(const struct tcp_chan *ch, uint64_t now)
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

/* ---- receive ------------------------------------------------------------- */

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
        rrpc_tcp_on_handshake(c, ch, h, payload);
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
 * buffer until every class is joined (rrpc_tcp_join_done). */
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
static void chan_read_cb(struct rrpci_io *w, unsigned revents)
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
        next = rrpc_tcp_rx_want(&ch->rx, rrpc_tcp_piece(ch, now), &to, &want);
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
        /* Past the turn, this piece is still handled; then the loop moves on. */
        open = rrpci_qos_turn_charge(&turn, (size_t)n, now);
        /* A short read emptied the socket: the (level-triggered) watcher
         * calls again when more comes, which saves a read that would only
         * say EAGAIN. */
        bool drained = (size_t)n < want;
        next = rrpc_tcp_rx_got(&ch->rx, (size_t)n);
        if (drained)
            break;
    }
    if (next == RRPC_TCP_RX_HOLD)
        rrpci_io_stop(rrpci_ctx_loop(rrpci_conn_ctx(c)), &ch->rio);
    rrpci_conn_unref(c);
}

/* ---- channels -------------------------------------------------------------- */

void rrpc_tcp_chan_init(struct tcp_chan *ch, rrpc_conn *c, int cls, int fd, bool connected)
{
    ch->conn = c;
    ch->cls = cls;
    ch->fd = fd;
    ch->connected = connected;
    /* The read buffer comes on the first read: an idle connection holds none. */
    rrpc_tcp_rx_init(&ch->rx, &chan_rx_up, ch, rrpci_ctx_max_msg(rrpci_conn_ctx(c)));
    rrpci_io_init(&ch->rio, chan_read_cb, fd, RRPCI_IO_READ);
    rrpci_io_init(&ch->wio, rrpc_tcp_writable_cb, fd, RRPCI_IO_WRITE);
    ch->rio.data = ch->wio.data = ch;
    /* Within one loop iteration, the ready watchers of the class the
     * policy serves first run first (libev invokes them by priority). */
    int pri = rrpci_rx_prio(rrpci_conn_ctx(c), cls);
    rrpci_io_set_prio(&ch->rio, pri);
    rrpci_io_set_prio(&ch->wio, pri);
}

static void chan_stop(struct tcp_chan *ch, rrpc_ctx *ctx)
{
    if (ch->fd < 0 && !ch->rx.rbuf)
        return;
    rrpci_io_stop(rrpci_ctx_loop(ctx), &ch->rio);
    rrpci_io_stop(rrpci_ctx_loop(ctx), &ch->wio);
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
void rrpc_tcp_trim(rrpc_conn *c)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    for (int i = 0; i < NCLS; i++)
        rrpc_tcp_rx_trim(&tc->ch[i].rx);
}

void rrpc_tcp_conn_close(rrpc_conn *c)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    for (int i = 0; i < NCLS; i++)
        chan_stop(&tc->ch[i], ctx);
    if (rrpci_conn_passive(c) && tc->cookie)
        rrpci_idmap_del(&tctx(ctx)->cookies, tc->cookie);
    tc->cookie = 0;
}


/* SPDX-License-Identifier: MIT */
/* The tcp transport: a class socket's queue of frames, written for the
 * class's turn on the loop (core/qos.h) in pieces of rrpc_tcp_piece. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "transport/tcp/tcp_int.h"

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
        bool shared;
        size_t off = ch->tx_off, room = rrpc_tcp_piece(ch, now, &shared);
        if (shared && RRPCI_HDR_SIZE + rrpci_msg_payload_len(m) - off > room)
            rrpci_ctx_qos_piece_cut(rrpci_conn_ctx(ch->conn));
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
        if (!rrpci_type_is_conn_frame(m->h.type)) /* (tcp_int.h, last_ns) */
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
        /* only where more would be written in this turn */
        if (open && ch->txh && rrpc_tcp_preempt(ch))
            open = false;
    }
    return 0;
}

void rrpc_tcp_push(struct tcp_chan *ch, rrpc_ctx *ctx, struct rrpci_msg *m)
{
    m->next = NULL;
    ch->tx_bytes += RRPCI_HDR_SIZE + rrpci_msg_payload_len(m);
    if (!ch->first && !ch->attached && m->h.type != RRPCI_T_JOIN &&
        m->h.type != RRPCI_T_JOIN_ACK) {
        /* Not attached yet: the class's frames keep their order here. */
        if (ch->heldt)
            ch->heldt->next = m;
        else
            ch->heldh = m;
        ch->heldt = m;
        return;
    }
    bool queued = ch->txh != NULL;
    if (ch->txt)
        ch->txt->next = m;
    else
        ch->txh = m;
    ch->txt = m;
    if (!ch->connected)
        return; /* written once the connect completes */
    if (queued)
        return; /* the armed write watcher writes it in the class's next slice */
    int r = chan_write(ch);
    if (r == -EAGAIN) {
        rrpci_io_start(rrpci_ctx_loop(ctx), &ch->wio);
    } else if (r < 0 && ch->conn) {
        rrpci_conn_down(ch->conn, RRPC_E_CONN_LOST, "write to the peer failed");
    }
}

void rrpc_tcp_flush(struct tcp_chan *ch)
{
    rrpc_conn *c = ch->conn;
    struct rrpci_evloop *loop = rrpci_ctx_loop(rrpci_conn_ctx(c));
    if (!ch->connected)
        return;
    int r = chan_write(ch);
    if (r == -EAGAIN) {
        rrpci_io_start(loop, &ch->wio);
        return;
    }
    rrpci_io_stop(loop, &ch->wio);
    if (r < 0) {
        rrpci_conn_down(c, RRPC_E_CONN_LOST, "write to the peer failed");
        return;
    }
    unsigned want = ch->want_writable;
    ch->want_writable = 0;
    for (int cls = 0; cls < NCLS && !rrpci_conn_is_down(c); cls++)
        if (want & (1u << cls))
            rrpci_conn_writable(c, cls);
}

/* A handshake frame built by the transport itself. */
struct rrpci_msg *rrpc_tcp_hs_msg(uint8_t type, int cls, const void *payload, size_t len)
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

/* The socket a frame of class @cls goes on: the first socket, or the
 * class's own one, which the first frame that needs it sets going (the
 * active side opens it; the passive side asks for it with a JOIN on the
 * first socket).  NULL when the connection went down meanwhile. */
static struct tcp_chan *route(rrpc_conn *c, int cls, uint8_t type)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (rrpci_type_is_conn_frame(type) || rrpc_tcp_class_shares(ctx, cls))
        return &tc->first;
    if (tc->own[cls])
        return tc->own[cls];
    if (!rrpci_conn_passive(c))
        return rrpc_tcp_attach(c, cls) == 0 ? tc->own[cls] : NULL;
    struct tcp_chan *ch = rrpc_tcp_own(c, cls);
    struct rrpci_msg *ask = ch ? rrpc_tcp_hs_msg(RRPCI_T_JOIN, cls, NULL, 0) : NULL;
    if (!ask) {
        rrpci_conn_down(c, -ENOMEM, "out of memory for a class's socket");
        return NULL;
    }
    rrpci_timer_start(&ch->attach_timer);
    rrpc_tcp_push(&tc->first, ctx, ask);
    return rrpci_conn_is_down(c) ? NULL : ch;
}

int rrpc_tcp_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct tcp_chan *ch = route(c, cls, m->h.type);
    if (!ch)
        return RRPC_E_CLOSED;
    if (ch->tx_bytes > TX_HIGH) {
        ch->want_writable |= 1u << cls;
        return -EAGAIN;
    }
    rrpc_tcp_push(ch, rrpci_conn_ctx(c), m);
    return 0;
}

void rrpc_tcp_writable_cb(struct rrpci_io *w, unsigned revents)
{
    struct tcp_chan *ch = w->data;
    rrpc_conn *c = ch->conn;
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (!ch->connected) {
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(ch->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            char why[160];
            if (ch->first)
                snprintf(why, sizeof(why), "connect failed: %s", strerror(err));
            else
                snprintf(why, sizeof(why), "cannot open the %s class's socket: connect failed: %s",
                         rrpci_class_name(ch->cls), strerror(err));
            rrpci_set_error(ctx, -err, "%s", why);
            rrpci_conn_down(c, -err, why);
            return;
        }
        ch->connected = true;
        rrpci_io_start(rrpci_ctx_loop(ctx), &ch->rio);
    }
    rrpc_tcp_flush(ch);
}

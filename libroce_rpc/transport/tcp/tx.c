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
        size_t off = ch->tx_off, room = rrpc_tcp_piece(ch, now);
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

void rrpc_tcp_push(struct tcp_chan *ch, rrpc_ctx *ctx, struct rrpci_msg *m)
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
        rrpci_io_start(rrpci_ctx_loop(ctx), &ch->wio);
    } else if (r < 0 && ch->conn) {
        rrpci_conn_down(ch->conn, RRPC_E_CONN_LOST, "write to the peer failed");
    }
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

int rrpc_tcp_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    struct tcp_chan *ch = &tc->ch[cls];
    if (ch->tx_bytes > TX_HIGH) {
        ch->want_writable = true;
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
    struct rrpci_evloop *loop = rrpci_ctx_loop(ctx);
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
        rrpci_io_start(loop, &ch->rio);
    }
    int r = chan_write(ch);
    if (r == -EAGAIN)
        return;
    rrpci_io_stop(loop, &ch->wio);
    if (r < 0) {
        rrpci_conn_down(c, RRPC_E_CONN_LOST, "write to the peer failed");
        return;
    }
    if (ch->want_writable) {
        ch->want_writable = false;
        rrpci_conn_writable(c, ch->cls);
    }
}


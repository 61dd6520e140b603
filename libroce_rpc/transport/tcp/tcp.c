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
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <roce_rpc/rrpc.h>

#include "transport/transport.h"
#include "transport/tunables.h"
#include "util/idmap.h"
#include "util/list.h"
#include "util/resolve.h"

#define RBUF_SIZE (64 * 1024)
#define TX_HIGH (512 * 1024) /* above this the class reports -EAGAIN */
/* Class isolation: one loop wakeup serves one class for at most (class
 * weight x SLICE_UNIT_NS) in each direction, in pieces of at most
 * PIECE_SMALL bytes per system call while another class of the connection
 * is busy, so a bulk stream never holds the loop for a whole large message
 * while a low-latency frame waits; libev then runs the other ready watchers,
 * the heavier classes first (chan_init).  A slice is measured in time, not
 * bytes, so bulk keeps the loop while nothing else is ready.
 *
 * A class whose connection has no other class busy (nothing queued to send,
 * no piece moved either way for BUSY_NS, 100 ms) writes and reads in pieces of up to
 * PIECE_LARGE: on loopback one sendmsg of 1 MiB costs the sender less than
 * sixteen of 64 KiB (it also runs the receiver's TCP processing, once per
 * call), but holds the loop for 100-250 us, which a low-latency answer
 * arriving meanwhile would wait out (docs/performance.md, "Adaptive pieces
 * on tcp"). */
#define SLICE_UNIT_NS (20 * 1000ull)
#define PIECE_SMALL (64 * 1024)
#define PIECE_LARGE (1024 * 1024)
/* A class counts as busy this long after its last piece: longer than a
 * round trip takes on a loaded machine, or a late answer would make bulk
 * switch to large pieces just when that answer waits for the loop. */
#define BUSY_NS (100 * 1000 * 1000ull)
#define SPARE_MAX (8u << 20)       /* largest receive buffer kept for reuse */
#define NCLS RRPCI_MAX_CLASSES

struct tcp_chan {
    rrpc_conn *conn;
    int fd;
    int cls;
    bool connected;
    bool paused; /* active side: data arrived before every class was joined */
    ev_io rio, wio;
    /* receive */
    uint8_t *rbuf;
    size_t rlen, roff;
    bool have_hdr;
    struct rrpci_hdr h;
    uint8_t *big; /* payload larger than what rbuf holds */
    size_t big_got, big_cap;
    uint8_t *spare; /* the last large buffer, kept for the next large payload */
    size_t spare_cap;
    /* A large emulated WRITE read straight into its target region
     * (rrpci_os_write_target): the data goes to dst, big_got counts the
     * payload bytes come (sub-header included); dst_lost: the region went
     * away meanwhile, the rest is read into rbuf and dropped. */
    uint8_t *dst;
    uint8_t dst_sub[RRPCI_OS_HDR_SIZE];
    bool dst_lost;
    bool peek_hdr; /* the last header announced a large payload: read the next header alone */
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

/* Read buffers come straight from the kernel: freed on idle (tcp_trim), their
 * pages leave the process, which a heap block of this size would not. */
static uint8_t *rbuf_alloc(void)
{
    void *p = mmap(NULL, RBUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void rbuf_free(uint8_t *p)
{
    if (p)
        munmap(p, RBUF_SIZE);
}

/* ---- transmit ------------------------------------------------------------ */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The end of a slice of class @cls starting at @now. */
static uint64_t slice_end(rrpc_ctx *ctx, int cls, uint64_t now)
{
    return now + rrpci_ctx_class_weight(ctx, cls) * SLICE_UNIT_NS;
}

/* Bytes @ch may move in its next system call (see PIECE_LARGE). */
static size_t piece_size(const struct tcp_chan *ch, uint64_t now)
{
    const struct tcp_conn *tc = rrpci_conn_priv(ch->conn);
    for (int i = 0; i < NCLS; i++) {
        const struct tcp_chan *o = &tc->ch[i];
        if (o != ch && (o->txh || o->last_ns + BUSY_NS > now))
            return PIECE_SMALL;
    }
    return PIECE_LARGE;
}

/* Writes queued frames, at most the class's slice per call.  Returns 0 when
 * the queue is empty, -EAGAIN when the socket is full or the slice is used
 * (the caller keeps the write watcher armed), or a negative errno. */
static int chan_write(struct tcp_chan *ch)
{
    uint64_t end = 0;
    while (ch->txh) {
        uint64_t now = mono_ns();
        if (!end)
            end = slice_end(rrpci_conn_ctx(ch->conn), ch->cls, now);
        else if (now >= end)
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
static bool deliver(rrpc_conn *c, struct tcp_chan *ch, const uint8_t *payload)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    struct rrpci_hdr h = ch->h;
    ch->have_hdr = false;
    if (h.type == RRPCI_T_HELLO_ACK || h.type == RRPCI_T_JOIN_ACK || h.type == RRPCI_T_HELLO ||
        h.type == RRPCI_T_JOIN) {
        if (tc->joined == (1u << NCLS) - 1) {
            rrpci_conn_down(c, RRPC_E_PROTO, "handshake frame on an established connection");
            return false;
        }
        on_handshake_frame(c, ch, &h, payload);
    } else if (tc->joined != (1u << NCLS) - 1 && h.type == RRPCI_T_ERROR) {
        /* The passive side refused us and says why. */
        int code = (int32_t)(uint32_t)h.arg;
        char why[256];
        snprintf(why, sizeof(why), "the server refused the connection: %.*s",
                 (int)(h.len < 200 ? h.len : 200), (const char *)payload);
        rrpci_set_error(rrpci_conn_ctx(c), code < 0 ? code : RRPC_E_PROTO, "%s", why);
        rrpci_conn_down(c, code < 0 ? code : RRPC_E_PROTO, why);
        return false;
    } else if (tc->joined != (1u << NCLS) - 1) {
        rrpci_conn_down(c, RRPC_E_PROTO, "data frame before the handshake finished");
        return false;
    } else {
        rrpci_conn_recv(c, ch->cls, &h, payload);
    }
    return !rrpci_conn_is_down(c);
}

static bool handshake_frame_or_ready(rrpc_conn *c, uint8_t type)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    return rrpci_conn_passive(c) || tc->joined == (1u << NCLS) - 1 || type == RRPCI_T_HELLO_ACK ||
           type == RRPCI_T_JOIN_ACK || type == RRPCI_T_ERROR;
}

/* The header in @ch is of a WRITE large enough to be read into its region. */
static bool large_write(const struct tcp_chan *ch)
{
    return ch->h.type == RRPCI_T_OS_WRITE && ch->h.len > RBUF_SIZE / 2;
}

/* Delivers every complete frame buffered in @ch.  False when the
 * connection went away. */
static bool parse_buffer(rrpc_conn *c, struct tcp_chan *ch, struct ev_loop *loop)
{
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    bool alive = true;
    while (alive) {
        size_t avail = ch->rlen - ch->roff;
        if (!ch->have_hdr) {
            if (avail < RRPCI_HDR_SIZE)
                break;
            if (!handshake_frame_or_ready(c, ch->rbuf[ch->roff + 5])) {
                /* The passive side is up and already sends on this class
                 * while our other JOIN_ACKs are on their way: keep the
                 * frame buffered until every class is joined. */
                ch->paused = true;
                ev_io_stop(loop, &ch->rio);
                break;
            }
            const char *why = NULL;
            int r = rrpci_hdr_decode(ch->rbuf + ch->roff, rrpci_ctx_max_msg(ctx), &ch->h, &why);
            if (r < 0) {
                rrpci_set_error(ctx, r, "bad frame from the peer: %s; connection closed", why);
                rrpci_conn_down(c, r, why);
                alive = false;
                break;
            }
            ch->have_hdr = true;
            ch->roff += RRPCI_HDR_SIZE;
            avail -= RRPCI_HDR_SIZE;
            ch->peek_hdr = ch->h.len > RBUF_SIZE / 2;
            /* A frame that is whole in the buffer is checked on delivery;
             * one whose payload is still to come, before it is buffered. */
            if (avail < ch->h.len && rrpci_conn_rx_admit(c, ch->cls, &ch->h)) {
                alive = false;
                break;
            }
        }
        if (avail >= ch->h.len) {
            const uint8_t *p = ch->rbuf + ch->roff;
            ch->roff += ch->h.len;
            alive = deliver(c, ch, p);
            continue;
        }
        if (large_write(ch)) {
            /* A large WRITE: once its sub-header is here (chan_read_cb
             * reads it alone if need be), its data goes to its target. */
            if (avail < RRPCI_OS_HDR_SIZE)
                break;
            const uint8_t *p = ch->rbuf + ch->roff;
            uint8_t *dst = rrpci_os_write_target(c, &ch->h, p, avail);
            if (dst) {
                memcpy(ch->dst_sub, p, RRPCI_OS_HDR_SIZE);
                memcpy(dst, p + RRPCI_OS_HDR_SIZE, avail - RRPCI_OS_HDR_SIZE);
                ch->dst = dst;
                ch->dst_lost = false;
                ch->big_got = avail;
                ch->roff = ch->rlen = 0;
                break;
            }
            /* refused: read as any frame, rrpci_conn_recv answers it */
        }
        if (ch->h.len > RBUF_SIZE / 2) {
            /* Large: read the rest straight into its own buffer. */
            if (ch->spare && ch->spare_cap >= ch->h.len) {
                ch->big = ch->spare;
                ch->big_cap = ch->spare_cap;
                ch->spare = NULL;
            } else {
                free(ch->spare); /* too small: this buffer becomes the spare */
                ch->spare = NULL;
                ch->big = malloc(ch->h.len);
                ch->big_cap = ch->h.len;
            }
            if (!ch->big) {
                rrpci_conn_down(c, -ENOMEM, "out of memory for a large message");
                alive = false;
                break;
            }
            memcpy(ch->big, ch->rbuf + ch->roff, avail);
            ch->big_got = avail;
            ch->roff = ch->rlen = 0;
        }
        break;
    }
    return alive;
}

static void chan_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcp_chan *ch = w->data;
    rrpc_conn *c = ch->conn;
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    rrpci_conn_ref(c);
    /* Receive-side share of the loop: a time slice per wakeup proportional to
     * the class weight (see SLICE_UNIT_NS). */
    uint64_t now = mono_ns();
    uint64_t end = slice_end(ctx, ch->cls, now);
    bool slice_open = true;
    /* Frames held back while the handshake finished come first. */
    if (!ch->big && !ch->dst && ch->rlen > ch->roff && !parse_buffer(c, ch, loop))
        slice_open = false;
    while (slice_open && !ch->paused) {
        ssize_t n;
        size_t want;
        if (ch->dst || ch->big) { /* the rest of a large payload */
            want = ch->h.len - ch->big_got;
            size_t piece = piece_size(ch, now);
            if (want > piece)
                want = piece;
        }
        if (ch->dst) {
            uint8_t *to = ch->dst + (ch->big_got - RRPCI_OS_HDR_SIZE);
            /* Each time: the region may have been deregistered since. */
            if (ch->dst_lost || !rrpci_os_write_target(c, &ch->h, ch->dst_sub, RRPCI_OS_HDR_SIZE)) {
                ch->dst_lost = true;
                if (!ch->rbuf && !(ch->rbuf = rbuf_alloc())) {
                    rrpci_conn_down(c, -ENOMEM, "out of memory for a receive buffer");
                    break;
                }
                to = ch->rbuf;
                if (want > RBUF_SIZE)
                    want = RBUF_SIZE;
            }
            n = read(ch->fd, to, want);
        } else if (ch->big) {
            n = read(ch->fd, ch->big + ch->big_got, want);
        } else {
            if (ch->roff == ch->rlen)
                ch->roff = ch->rlen = 0;
            else if (ch->roff > RBUF_SIZE / 2) {
                memmove(ch->rbuf, ch->rbuf + ch->roff, ch->rlen - ch->roff);
                ch->rlen -= ch->roff;
                ch->roff = 0;
            }
            if (!ch->rbuf && !(ch->rbuf = rbuf_alloc())) {
                rrpci_conn_down(c, -ENOMEM, "out of memory for a receive buffer");
                break;
            }
            want = RBUF_SIZE - ch->rlen;
            /* After a large payload another often follows: its header alone
             * first, so that its payload is read straight into its own
             * buffer, not into rbuf and copied from there; a large WRITE's
             * sub-header alone next, for the same reason. */
            if (ch->peek_hdr && ch->rlen == 0)
                want = RRPCI_HDR_SIZE;
            if (ch->have_hdr && large_write(ch) && ch->rlen - ch->roff < RRPCI_OS_HDR_SIZE)
                want = RRPCI_OS_HDR_SIZE - (ch->rlen - ch->roff);
            n = read(ch->fd, ch->rbuf + ch->rlen, want);
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n > 0) {
            ch->last_ns = now;
            now = mono_ns();
            if (now >= end)
                slice_open = false; /* this piece is handled, then the loop moves on */
        }
        if (n <= 0) {
            bool mid = ch->have_hdr || ch->rlen > ch->roff;
            int err = n < 0 ? errno : 0;
            char why[128];
            if (n < 0)
                snprintf(why, sizeof(why), "read from the peer failed: %s", strerror(err));
            else
                snprintf(why, sizeof(why), "%s",
                         mid ? "the peer vanished in the middle of a message"
                             : "the peer closed the connection");
            rrpci_conn_down(c, RRPC_E_CONN_LOST, why);
            break;
        }
        /* A short read emptied the socket: the (level-triggered) watcher
         * calls again when more comes, which saves a read that would only
         * say EAGAIN. */
        bool drained = (size_t)n < want;
        if (ch->dst || ch->big) {
            ch->big_got += (size_t)n;
            if (ch->big_got < ch->h.len) {
                if (drained)
                    break;
                continue;
            }
        }
        if (ch->dst) {
            ch->dst = NULL;
            ch->h.placed = true; /* handed up with its sub-header alone */
            bool alive = deliver(c, ch, ch->dst_sub);
            if (!alive || drained)
                break;
            continue;
        }
        if (ch->big) {
            uint8_t *big = ch->big;
            size_t cap = ch->big_cap;
            ch->big = NULL;
            bool alive = deliver(c, ch, big);
            if (alive && !ch->spare && cap <= SPARE_MAX) {
                ch->spare = big; /* reused: no allocation, no page faults */
                ch->spare_cap = cap;
            } else {
                free(big);
            }
            if (!alive || drained)
                break;
            continue;
        }
        ch->rlen += (size_t)n;
        bool alive = parse_buffer(c, ch, loop);
        if (!alive || drained)
            break;
    }
    rrpci_conn_unref(c);
}

/* ---- channels -------------------------------------------------------------- */

/* libev priority of a class's watchers: by its weight against the others'. */
static int tcp_class_priority(rrpc_ctx *ctx, int cls)
{
    unsigned w = rrpci_ctx_class_weight(ctx, cls), above = 0;
    for (int i = 0; i < NCLS; i++)
        above += rrpci_ctx_class_weight(ctx, i) > w;
    /* The heaviest class gets EV_MAXPRI, the next EV_MAXPRI - 1, ... */
    int pri = EV_MAXPRI - (int)above;
    return pri < EV_MINPRI ? EV_MINPRI : pri;
}

static void chan_init(struct tcp_chan *ch, rrpc_conn *c, int cls, int fd, bool connected)
{
    ch->conn = c;
    ch->cls = cls;
    ch->fd = fd;
    ch->connected = connected;
    ch->rbuf = NULL; /* on the first read: an idle connection holds none */
    ev_io_init(&ch->rio, chan_read_cb, fd, EV_READ);
    ev_io_init(&ch->wio, chan_writable_cb, fd, EV_WRITE);
    ch->rio.data = ch->wio.data = ch;
    /* Within one loop iteration, the heavier-weighted classes' ready
     * watchers run first (libev invokes pending watchers by priority). */
    int pri = tcp_class_priority(rrpci_conn_ctx(c), cls);
    ev_set_priority(&ch->rio, pri);
    ev_set_priority(&ch->wio, pri);
}

static void chan_stop(struct tcp_chan *ch, rrpc_ctx *ctx)
{
    if (ch->fd < 0 && !ch->rbuf)
        return;
    ev_io_stop(rrpci_ctx_loop(ctx), &ch->rio);
    ev_io_stop(rrpci_ctx_loop(ctx), &ch->wio);
    if (ch->fd >= 0)
        close(ch->fd);
    ch->fd = -1;
    rbuf_free(ch->rbuf);
    ch->rbuf = NULL;
    free(ch->big);
    ch->big = NULL;
    ch->dst = NULL;
    free(ch->spare);
    ch->spare = NULL;
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
    for (int i = 0; i < NCLS; i++) {
        struct tcp_chan *ch = &tc->ch[i];
        free(ch->spare);
        ch->spare = NULL;
        ch->spare_cap = 0;
        if (ch->rbuf && !ch->big && !ch->have_hdr && ch->roff == ch->rlen) {
            rbuf_free(ch->rbuf);
            ch->rbuf = NULL;
            ch->roff = ch->rlen = 0;
        }
    }
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
        if (ch->paused) { /* parse what was held back, then read on */
            ch->paused = false;
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
    struct rrpci_accept_limits lim;
    rrpci_ctx_accept_limits(ctx, &lim);
    int max_pend = lim.max_pending, per_source = lim.per_source;
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
    .ctx_fini = tcp_ctx_fini,
    .class_dscp = tcp_class_dscp,
    .peer_name = tcp_peer_name,
    .listener_port = tcp_listener_port,
    .trim = tcp_trim,
    .ext_repointable = true, /* chan_write reads m->ext afresh for every piece */
};

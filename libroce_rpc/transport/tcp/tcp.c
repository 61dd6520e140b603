/* SPDX-License-Identifier: MIT */
/*
 * The TCP transport: a connection starts with one socket, and a class gets
 * a socket of its own when it is first used (docs/protocol.md §6): every
 * socket carries IP_TOS (or IPV6_TCLASS) set from the DSCP of the classes
 * it carries, on both ends.
 *
 * Handshake: the active side connects the first socket and sends HELLO; the
 * passive side answers HELLO_ACK with a connection cookie and an attach
 * secret, and both are up.  Which classes share the first socket: low_latency
 * always, control when its DSCP is low_latency's (so marking stays per
 * class); bulk and background never (their large frames would queue in
 * front of small ones in one byte stream, whatever the slicing).  A class
 * that does not share gets its own socket on its first frame: the active
 * side connects it and sends JOIN (cookie, secret); the passive side asks
 * for it with a JOIN on the first socket.  Until JOIN_ACK (active) or the
 * JOIN (passive) the class's frames wait in order on the new socket's
 * queue, so each class's frames travel on one socket for the connection's
 * life.  An accepted socket that says nothing valid within
 * RRPC_AUTH_TIMEOUT_MS is closed.
 *
 * This file: the active side (connect, attach), the handshake, the routing
 * rule, the per-context state (the tunables, whose table is tunables.c)
 * and the ops table; tcp_int.h lists the others.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "transport/tcp/tcp_int.h"
#include "util/resolve.h"

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
 * no piece of a class's frame moved either way for RRPC_TCP_BUSY_MS: the
 * connection's own frames do not count) moves pieces of up to
 * RRPC_TCP_PIECE_ALONE: one sendmsg of 1 MiB costs the sender less than
 * sixteen of 64 KiB, but holds the loop for 100-250 us, which a low-latency
 * answer arriving meanwhile would wait out (docs/performance.md, "Adaptive
 * pieces on tcp").  The busy window is longer than a round trip takes on a
 * loaded machine, or a late answer would make bulk switch to large pieces
 * just when that answer waits for the loop.  The RRPC_TCP_* tunables'
 * table: tunables.c. */
int rrpc_tcp_set_tos(int fd, int dscp)
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

int rrpc_tcp_sock_setup(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return 0;
}

/* ---- which socket a class travels on ----------------------------------------- */

bool rrpc_tcp_class_shares(rrpc_ctx *ctx, int cls)
{
    return cls == RRPCI_CLS_LOW_LATENCY ||
           (cls == RRPCI_CLS_CONTROL &&
            rrpci_ctx_class_dscp(ctx, RRPCI_CLS_CONTROL) == rrpc_tcp_first_dscp(ctx));
}

int rrpc_tcp_first_dscp(rrpc_ctx *ctx)
{
    return rrpci_ctx_class_dscp(ctx, RRPCI_CLS_LOW_LATENCY);
}

struct tcp_chan *rrpc_tcp_own(rrpc_conn *c, int cls)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    if (!tc->own[cls]) {
        struct tcp_chan *ch = calloc(1, sizeof(*ch));
        if (!ch)
            return NULL;
        rrpc_tcp_chan_init(ch, c, cls, false, -1, false);
        tc->own[cls] = ch;
    }
    return tc->own[cls];
}

/* Binds @fd to the address of @ss (port 0) without taking a port of its
 * own: the port comes with connect(), so sockets to different servers may
 * share it (IP_BIND_ADDRESS_NO_PORT). */
static int bind_no_port(int fd, struct sockaddr_storage *ss, socklen_t sl)
{
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = 0;
    else
        ((struct sockaddr_in *)ss)->sin_port = 0;
    return bind(fd, (struct sockaddr *)ss, sl) < 0 ? -errno : 0;
}

int rrpc_tcp_attach(rrpc_conn *c, int cls)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    struct tcp_chan *ch = rrpc_tcp_own(c, cls);
    if (!ch) {
        rrpci_conn_down(c, -ENOMEM, "out of memory for a class's socket");
        return -ENOMEM;
    }
    if (ch->fd >= 0)
        return 0; /* attaching or attached already */
    struct sockaddr_storage peer, local;
    socklen_t pl = sizeof(peer), ll = sizeof(local);
    int r = 0;
    if (getpeername(tc->first.fd, (struct sockaddr *)&peer, &pl) < 0 ||
        (tc->bind_src && getsockname(tc->first.fd, (struct sockaddr *)&local, &ll) < 0))
        r = -errno;
    int fd = r ? -1 : socket(peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (!r && fd < 0)
        r = -errno;
    if (!r) {
        rrpc_tcp_chan_fd(ch, fd, false); /* closed with the connection from here on */
        rrpc_tcp_sock_setup(fd);
        r = rrpc_tcp_set_tos(fd, rrpci_ctx_class_dscp(ctx, cls));
        if (!r && tc->bind_src)
            r = bind_no_port(fd, &local, ll);
        if (!r && connect(fd, (struct sockaddr *)&peer, pl) < 0 && errno != EINPROGRESS)
            r = -errno;
    }
    if (r < 0) {
        char why[200];
        snprintf(why, sizeof(why), "cannot open the %s class's socket: %s%s",
                 rrpci_class_name(cls), strerror(-r),
                 r == -EMFILE || r == -ENFILE ? " (raise the file limit, ulimit -n)"
                 : r == -EADDRNOTAVAIL        ? " (out of local ports to the server)"
                                              : "");
        rrpci_set_error(ctx, r, "%s", why);
        rrpci_conn_down(c, r, why);
        return r;
    }
    rrpci_io_start(rrpci_ctx_loop(ctx), &ch->wio);
    uint8_t join[TCP_JOIN_SIZE];
    rrpci_put64(join, tc->cookie);
    memcpy(join + 8, tc->secret, TCP_SECRET_SIZE);
    struct rrpci_msg *m = rrpc_tcp_hs_msg(RRPCI_T_JOIN, cls, join, sizeof(join));
    if (!m) {
        rrpci_conn_down(c, -ENOMEM, "out of memory for a class's socket");
        return -ENOMEM;
    }
    rrpci_timer_start(&ch->attach_timer);
    rrpc_tcp_push(ch, ctx, m);
    return rrpci_conn_is_down(c) ? RRPC_E_CLOSED : 0;
}

void rrpc_tcp_attached(struct tcp_chan *ch)
{
    ch->attached = true;
    rrpci_timer_stop(&ch->attach_timer);
    if (ch->heldh) {
        if (ch->txt)
            ch->txt->next = ch->heldh;
        else
            ch->txh = ch->heldh;
        ch->txt = ch->heldt;
        ch->heldh = ch->heldt = NULL;
    }
    rrpc_tcp_flush(ch);
}

/* ---- handshake --------------------------------------------------------------- */

/* Active side: HELLO_ACK on the first socket; JOIN (the passive side asks
 * for a class's own socket) on the first socket once up; JOIN_ACK on an own
 * socket. */
void rrpc_tcp_on_handshake(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                           const uint8_t *p)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (rrpci_conn_passive(c)) {
        rrpci_conn_down(c, RRPC_E_PROTO, "unexpected handshake frame from the active side");
        return;
    }
    if (h->type == RRPCI_T_HELLO_ACK && ch->first && !tc->hello_done) {
        struct rrpci_hello peer;
        int r = rrpci_hello_decode(p, h->len, &peer);
        if (r < 0 || h->len < RRPCI_HELLO_SIZE + TCP_SECRET_SIZE)
            r = rrpci_set_error(ctx, RRPC_E_PROTO, "HELLO_ACK of %u bytes, expected at least %d",
                                h->len, RRPCI_HELLO_SIZE + TCP_SECRET_SIZE);
        else
            r = rrpci_conn_hello_peer(c, &peer);
        if (r < 0) {
            rrpci_conn_down(c, r, rrpc_ctx_last_error(ctx));
            return;
        }
        tc->hello_done = true;
        tc->cookie = peer.cookie;
        memcpy(tc->secret, p + RRPCI_HELLO_SIZE, TCP_SECRET_SIZE);
        rrpci_conn_established(c);
        return;
    }
    if (h->type == RRPCI_T_JOIN && ch->first && tc->hello_done && h->len == 0 &&
        h->cls != RRPCI_CLS_LOW_LATENCY) {
        rrpc_tcp_attach(c, h->cls);
        return;
    }
    if (h->type == RRPCI_T_JOIN_ACK && !ch->first && ch->fd >= 0 && !ch->attached) {
        rrpc_tcp_attached(ch);
        return;
    }
    rrpci_conn_down(c, RRPC_E_PROTO, "unexpected handshake frame from the passive side");
}

/* 0, or the code of rrpci_resolve_code with the words in *why. */
int rrpc_tcp_resolve(const char *host, int port, bool passive, struct sockaddr_storage *ss,
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
    rrpc_tcp_chan_init(&tc->first, c, RRPCI_CLS_LOW_LATENCY, true, -1, false);
    int rr = rrpc_tcp_resolve(u->host, u->port, false, &ss, &sl, &why);
    if (rr < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve \"%s\": %s", u->host, why);
    if (u->src[0] && (rr = rrpc_tcp_resolve(u->src, 0, false, &src, &srcl, &why)) < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve ?src=%s: %s", u->src, why);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rrpci_set_error(ctx, -errno, "socket: %s", strerror(errno));
    rrpc_tcp_chan_fd(&tc->first, fd, false);
    rrpc_tcp_sock_setup(fd);
    int r = rrpc_tcp_set_tos(fd, rrpc_tcp_first_dscp(ctx));
    if (r < 0)
        return rrpci_set_error(ctx, r, "cannot set the DSCP of class %s: %s",
                               rrpci_class_name(RRPCI_CLS_LOW_LATENCY), strerror(-r));
    tc->bind_src = srcl != 0;
    if (srcl && (r = bind_no_port(fd, &src, srcl)) < 0)
        return rrpci_set_error(ctx, r, "cannot bind to ?src=%s: %s", u->src, strerror(-r));
    if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)
        return rrpci_set_error(ctx, -errno, "cannot connect to %s:%d: %s%s", u->host, u->port,
                               strerror(errno),
                               errno == EADDRNOTAVAIL ? " (out of local ports to the server)" : "");
    rrpci_io_start(rrpci_ctx_loop(ctx), &tc->first.wio);
    struct rrpci_hello hello;
    rrpci_conn_hello_local(c, &hello);
    uint8_t hb[RRPCI_HELLO_SIZE];
    rrpci_hello_encode(&hello, hb);
    struct rrpci_msg *m = rrpc_tcp_hs_msg(RRPCI_T_HELLO, RRPCI_CLS_CONTROL, hb, sizeof(hb));
    if (!m)
        return -ENOMEM;
    rrpc_tcp_push(&tc->first, ctx, m);
    return 0;
}

/* The DSCP on the socket class @cls travels on; a class whose own socket
 * is not open yet reports the DSCP that socket will be given. */
static int tcp_class_dscp(rrpc_conn *c, int cls, int *ret)
{
    struct tcp_conn *tc = rrpci_conn_priv(c);
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    if (tc->first.fd < 0)
        return RRPC_E_CLOSED;
    const struct tcp_chan *ch = rrpc_tcp_class_shares(ctx, cls) ? &tc->first : tc->own[cls];
    if (!ch || ch->fd < 0) {
        *ret = rrpci_ctx_class_dscp(ctx, cls);
        return 0;
    }
    int fd = ch->fd;
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
    if (tc->first.fd >= 0 && getpeername(tc->first.fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(buf, len, "%s:%s", host, port);
    return 0;
}

static int tcp_ctx_init(rrpc_ctx *ctx)
{
    const struct rrpci_tcp_tunables *t = rrpci_ctx_conf(ctx, RRPCI_CONF_SLOT_TCP);
    const struct rrpci_qos_knobs knobs = {
        .turn_ns = (uint64_t)t->slice_us * 1000u,
        .piece_alone = t->piece_alone,
        .piece_shared = t->piece_shared,
        .busy_ns = (uint64_t)t->busy_ms * 1000000u,
    };
    rrpci_ctx_qos(ctx, &knobs, &tctx(ctx)->qos);
    /* Without the set turns end by time only, as with RRPC_TCP_PREEMPT=0. */
    tctx(ctx)->urgent_fd = t->preempt ? epoll_create1(EPOLL_CLOEXEC) : -1;
    return 0;
}

static void tcp_ctx_fini(rrpc_ctx *ctx)
{
    rrpci_idmap_fini(&tctx(ctx)->cookies);
    if (tctx(ctx)->urgent_fd >= 0)
        close(tctx(ctx)->urgent_fd);
    tctx(ctx)->urgent_fd = -1;
}

const struct rrpci_transport_ops rrpci_tcp_ops = {
    .version = RRPCI_TRANSPORT_OPS_VERSION,
    .name = "tcp",
    .scheme = "tcp",
    .ctx_priv_size = sizeof(struct tcp_ctx),
    .conn_priv_size = sizeof(struct tcp_conn),
    .listener_priv_size = sizeof(struct tcp_listener),
    .listen = rrpc_tcp_listen,
    .listener_close = rrpc_tcp_listener_close,
    .connect = tcp_connect,
    .send = rrpc_tcp_send,
    .conn_close = rrpc_tcp_conn_close,
    .ctx_init = tcp_ctx_init,
    .ctx_fini = tcp_ctx_fini,
    .class_dscp = tcp_class_dscp,
    .peer_name = tcp_peer_name,
    .listener_port = rrpc_tcp_listener_port,
    .trim = rrpc_tcp_trim,
    .ext_repointable = true, /* chan_write reads m->ext afresh for every piece */
};

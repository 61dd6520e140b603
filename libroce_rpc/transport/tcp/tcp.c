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
 *
 * This file: the active side (connect), the handshake, the per-context
 * state (the tunables, whose table is tunables.c) and the ops table; tcp_int.h
 * lists the others.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
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
 * no piece moved either way for RRPC_TCP_BUSY_MS) moves pieces of up to
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

/* ---- handshake --------------------------------------------------------------- */

void rrpc_tcp_join_done(rrpc_conn *c, struct tcp_conn *tc, int cls)
{
    tc->joined |= 1u << cls;
    if (tc->joined != (1u << NCLS) - 1)
        return;
    rrpc_ctx *ctx = rrpci_conn_ctx(c);
    for (int i = 0; i < NCLS; i++) {
        struct tcp_chan *ch = &tc->ch[i];
        if (rrpc_tcp_rx_resume(&ch->rx)) { /* hand up what was held, then read on */
            rrpci_io_start(rrpci_ctx_loop(ctx), &ch->rio);
            rrpci_io_feed(rrpci_ctx_loop(ctx), &ch->rio, RRPCI_IO_READ);
        }
    }
    rrpci_conn_established(c);
}

/* Active side: HELLO_ACK on control, JOIN_ACK on the others. */
void rrpc_tcp_on_handshake(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
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
            struct rrpci_msg *m = rrpc_tcp_hs_msg(RRPCI_T_JOIN, i, ck, sizeof(ck));
            if (!m) {
                rrpci_conn_down(c, -ENOMEM, "out of memory during the handshake");
                return;
            }
            rrpc_tcp_push(&tc->ch[i], ctx, m);
            if (rrpci_conn_is_down(c))
                return;
        }
        rrpc_tcp_join_done(c, tc, RRPCI_CLS_CONTROL);
        return;
    }
    if (h->type == RRPCI_T_JOIN_ACK && ch->cls != RRPCI_CLS_CONTROL && tc->hello_done &&
        !(tc->joined & (1u << ch->cls))) {
        rrpc_tcp_join_done(c, tc, ch->cls);
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
    int rr = rrpc_tcp_resolve(u->host, u->port, false, &ss, &sl, &why);
    if (rr < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve \"%s\": %s", u->host, why);
    if (u->src[0] && (rr = rrpc_tcp_resolve(u->src, 0, false, &src, &srcl, &why)) < 0)
        return rrpci_set_error(ctx, rr, "cannot resolve ?src=%s: %s", u->src, why);
    for (int i = 0; i < NCLS; i++)
        tc->ch[i].fd = -1;
    for (int i = 0; i < NCLS; i++) {
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return rrpci_set_error(ctx, -errno, "socket: %s", strerror(errno));
        rrpc_tcp_chan_init(&tc->ch[i], c, i, fd, false);
        rrpc_tcp_sock_setup(fd);
        int r = rrpc_tcp_set_tos(fd, rrpci_ctx_class_dscp(ctx, i));
        if (r < 0)
            return rrpci_set_error(ctx, r, "cannot set the DSCP of class %s: %s",
                                   rrpci_class_name(i), strerror(-r));
        if (srcl && bind(fd, (struct sockaddr *)&src, srcl) < 0)
            return rrpci_set_error(ctx, -errno, "cannot bind to ?src=%s: %s", u->src,
                                   strerror(errno));
        if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)
            return rrpci_set_error(ctx, -errno, "cannot connect to %s:%d: %s", u->host, u->port,
                                   strerror(errno));
        rrpci_io_start(rrpci_ctx_loop(ctx), &tc->ch[i].wio);
    }
    struct rrpci_hello hello;
    rrpci_conn_hello_local(c, &hello);
    uint8_t hb[RRPCI_HELLO_SIZE];
    rrpci_hello_encode(&hello, hb);
    struct rrpci_msg *m = rrpc_tcp_hs_msg(RRPCI_T_HELLO, RRPCI_CLS_CONTROL, hb, sizeof(hb));
    if (!m)
        return -ENOMEM;
    rrpc_tcp_push(&tc->ch[0], ctx, m);
    return 0;
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
    const struct rrpci_tcp_tunables *t = rrpci_ctx_conf(ctx, RRPCI_CONF_SLOT_TCP);
    const struct rrpci_qos_knobs knobs = {
        .turn_ns = (uint64_t)t->slice_us * 1000u,
        .piece_alone = t->piece_alone,
        .piece_shared = t->piece_shared,
        .busy_ns = (uint64_t)t->busy_ms * 1000000u,
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

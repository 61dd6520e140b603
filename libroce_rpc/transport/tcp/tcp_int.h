/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's objects and the functions its files share:
 *   tcp.c     the active side (connect), the handshake, the per-context
 *             state (the tunables read) and the ops table
 *   accept.c  the passive side: listening, accepted sockets until their
 *             first frame says which connection and class they are
 *   chan.c    a class socket: set up, torn down, read for its turn into
 *             the receive machine, whose frames it hands to the core
 *   rx.c      the receive state machine (rx.h): bytes in, frames out
 *   tx.c      a class socket's queue of frames, written for its turn
 *   tunables.c the RRPC_TCP_* tunables' table (transport/tunables.h)
 */
#ifndef RRPC_TCP_INT_H
#define RRPC_TCP_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/socket.h>

#include <roce_rpc/rrpc.h>

#include "transport/tcp/rx.h"
#include "transport/transport.h"
#include "transport/tunables.h"
#include "util/idmap.h"
#include "util/list.h"

#define TX_HIGH (512 * 1024) /* above this the class reports -EAGAIN */
#define NCLS RRPCI_MAX_CLASSES

struct tcp_chan {
    rrpc_conn *conn;
    int fd;
    int cls;
    bool connected;
    struct rrpci_io rio, wio;
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

struct tcp_listener {
    int fd;
    struct rrpci_io io;
    struct rrpci_list pend; /* oldest first */
    int npend;
    struct rrpci_timer resume; /* accepts paused: out of file descriptors */
    uint64_t emfile_episodes;
};

struct tcp_ctx {
    struct rrpci_idmap cookies;
    struct rrpci_qos qos; /* the core's policy with this transport's knobs */
};

static inline struct tcp_ctx *tctx(rrpc_ctx *ctx)
{
    return rrpci_ctx_tpriv(ctx, &rrpci_tcp_ops);
}

static inline uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline const struct rrpci_qos *chan_qos(const struct tcp_chan *ch)
{
    return &tctx(rrpci_conn_ctx(ch->conn))->qos;
}

/* ---- tcp.c ---- */
/* Marks @fd's packets with @dscp (IP_TOS, and IPV6_TCLASS on IPv6). */
int rrpc_tcp_set_tos(int fd, int dscp);
/* The options every class socket gets (TCP_NODELAY). */
int rrpc_tcp_sock_setup(int fd);
/* 0, or the code of rrpci_resolve_code with the words in *why. */
int rrpc_tcp_resolve(const char *host, int port, bool passive, struct sockaddr_storage *ss,
                     socklen_t *sl, const char **why);
/* Class @cls of @c is joined; the connection is up once every class is. */
void rrpc_tcp_join_done(rrpc_conn *c, struct tcp_conn *tc, int cls);
/* Active side: HELLO_ACK on control, JOIN_ACK on the others. */
void rrpc_tcp_on_handshake(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                           const uint8_t *p);

/* ---- accept.c ---- */
int rrpc_tcp_listen(rrpc_listener *l, const struct rrpci_uri *u);
void rrpc_tcp_listener_close(rrpc_listener *l);
int rrpc_tcp_listener_port(rrpc_listener *l);

/* ---- chan.c ---- */
void rrpc_tcp_chan_init(struct tcp_chan *ch, rrpc_conn *c, int cls, int fd, bool connected);
/* Bytes @ch may move in its next system call at @now. */
size_t rrpc_tcp_piece(const struct tcp_chan *ch, uint64_t now);
void rrpc_tcp_trim(rrpc_conn *c);
void rrpc_tcp_conn_close(rrpc_conn *c);

/* ---- tx.c ---- */
/* Queues @m on @ch, writing it at once when nothing waits before it. */
void rrpc_tcp_push(struct tcp_chan *ch, rrpc_ctx *ctx, struct rrpci_msg *m);
/* A handshake frame built by the transport itself. */
struct rrpci_msg *rrpc_tcp_hs_msg(uint8_t type, int cls, const void *payload, size_t len);
int rrpc_tcp_send(rrpc_conn *c, int cls, struct rrpci_msg *m);
void rrpc_tcp_writable_cb(struct rrpci_io *w, unsigned revents);

#endif

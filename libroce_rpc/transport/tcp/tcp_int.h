/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's objects and the functions its files share:
 *   tcp.c     the active side (connect), the handshake, which socket a
 *             class travels on, opening a class's own socket on demand,
 *             the per-context state (the tunables read) and the ops table
 *   accept.c  the passive side: listening, accepted sockets until their
 *             first frame says which connection (and class) they are
 *   chan.c    a socket: set up, torn down, read for its turn into the
 *             receive machine, whose frames it checks and hands to the core
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
#define TCP_SECRET_SIZE 16 /* the attach secret, after the hello record in HELLO_ACK */
#define TCP_JOIN_SIZE (8 + TCP_SECRET_SIZE) /* JOIN's payload: cookie, secret */

/*
 * A socket of a connection (docs/protocol.md §6).  Each connection has its
 * first socket, which carries the handshake, the connection's own frames
 * (tickets, keepalives, attach requests) and the classes that share it
 * (low_latency, and control when its DSCP is low_latency's), and marks its
 * packets with low_latency's DSCP.  bulk and background, and control when
 * its DSCP differs, get a socket of their own (an "own socket") when they
 * are first used, opened by the active side.
 */
struct tcp_chan {
    rrpc_conn *conn;
    int fd; /* -1: an own socket whose attach the passive side asked for */
    int cls; /* own socket: its class; the first socket: low_latency's (turn, priority) */
    bool first;
    bool connected; /* the TCP connect completed */
    bool attached;  /* own socket: JOIN_ACK came (active) / JOIN was taken (passive) */
    struct rrpci_io rio, wio;
    struct rrpc_tcp_rx rx; /* receive: rx.h */
    /* transmit */
    struct rrpci_msg *txh, *txt;
    size_t tx_off;
    size_t tx_bytes; /* queued, the held frames included */
    /* An own socket before it is attached: its class's frames wait here, in
     * order, and go out after JOIN (active) or JOIN_ACK (passive). */
    struct rrpci_msg *heldh, *heldt;
    unsigned want_writable; /* bit per class that got -EAGAIN */
    /* When a piece of a class's frame last moved on this socket, either way:
     * the connection's own frames (the handshake, tickets, keepalives) make
     * no class busy, or every connection's bulk would move in small pieces
     * for RRPC_TCP_BUSY_MS after it came up. */
    uint64_t last_ns;
    uint64_t rx_ns; /* chan_read_cb: when the bytes being handed up were read */
    bool urgent;    /* the first socket, in tcp_ctx.urgent_fd */
    struct rrpci_timer attach_timer; /* own socket: attached within RRPC_AUTH_TIMEOUT_MS */
    /* The receive machine waits for the context's budget of large frames
     * (RRPC_MAX_PARTIAL_BYTES): the socket is not read meanwhile. */
    struct rrpci_partial_wait pwait;
    bool paused;
};

struct tcp_conn {
    struct tcp_chan first;
    struct tcp_chan *own[NCLS]; /* a class's own socket, NULL until the class needs one */
    struct rrpci_idnode node;   /* passive: in the context's cookie map */
    uint64_t cookie;
    uint8_t secret[TCP_SECRET_SIZE]; /* proves a JOIN comes from this connection's peer */
    bool hello_done; /* the first socket's handshake is over: the connection is up */
    bool bind_src;   /* active: the URI named ?src=, own sockets bind to its address too */
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
    /* RRPC_TCP_PREEMPT: an epoll set of every connection's first socket
     * (low_latency's), looked at between the pieces of an outranked
     * class's turn (rrpc_tcp_preempt); -1: off, or it could not be made. */
    int urgent_fd;
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
/* The options every socket gets (TCP_NODELAY). */
int rrpc_tcp_sock_setup(int fd);
/* 0, or the code of rrpci_resolve_code with the words in *why. */
int rrpc_tcp_resolve(const char *host, int port, bool passive, struct sockaddr_storage *ss,
                     socklen_t *sl, const char **why);
/* Whether class @cls travels on the first socket (on this side's DSCPs). */
bool rrpc_tcp_class_shares(rrpc_ctx *ctx, int cls);
/* The DSCP the first socket carries: low_latency's. */
int rrpc_tcp_first_dscp(rrpc_ctx *ctx);
/* The own socket of @cls, made (not yet attached) when missing; NULL when
 * out of memory. */
struct tcp_chan *rrpc_tcp_own(rrpc_conn *c, int cls);
/* Active side: opens class @cls's own socket and sends JOIN on it.  0, or
 * the connection went down. */
int rrpc_tcp_attach(rrpc_conn *c, int cls);
/* The own socket @ch is attached: its held frames follow what is queued. */
void rrpc_tcp_attached(struct tcp_chan *ch);
/* Active side: a handshake frame (HELLO_ACK, JOIN_ACK, JOIN) on @ch. */
void rrpc_tcp_on_handshake(rrpc_conn *c, struct tcp_chan *ch, const struct rrpci_hdr *h,
                           const uint8_t *p);

/* ---- accept.c ---- */
int rrpc_tcp_listen(rrpc_listener *l, const struct rrpci_uri *u);
void rrpc_tcp_listener_close(rrpc_listener *l);
int rrpc_tcp_listener_port(rrpc_listener *l);

/* ---- chan.c ---- */
/* Sets up @ch (zeroed) for @c: the first socket when @first, else class
 * @cls's own socket; @fd may be -1 (given later with rrpc_tcp_chan_fd). */
void rrpc_tcp_chan_init(struct tcp_chan *ch, rrpc_conn *c, int cls, bool first, int fd,
                        bool connected);
/* Gives @ch its socket @fd. */
void rrpc_tcp_chan_fd(struct tcp_chan *ch, int fd, bool connected);
/* Bytes @ch may move in its next system call at @now; *@ret_shared (NULL
 * allowed) says whether another class of the connection is busy, so that
 * the piece is RRPC_TCP_PIECE_SHARED's. */
size_t rrpc_tcp_piece(const struct tcp_chan *ch, uint64_t now, bool *ret_shared);
void rrpc_tcp_trim(rrpc_conn *c);
/* Between two pieces of @ch's turn: whether it ends now because @ch's class
 * is outranked by low_latency and a first socket has input waiting
 * (RRPC_TCP_PREEMPT; counted in rrpc_stats.qos_turns_preempted). */
bool rrpc_tcp_preempt(const struct tcp_chan *ch);
void rrpc_tcp_conn_close(rrpc_conn *c);

/* ---- tx.c ---- */
/* Queues @m on @ch, writing it at once when nothing waits before it; on
 * an own socket not yet attached, the class's frames are held. */
void rrpc_tcp_push(struct tcp_chan *ch, rrpc_ctx *ctx, struct rrpci_msg *m);
/* Writes what @ch has queued, arms its write watcher when the socket is
 * full, and says writable to the classes that were told -EAGAIN. */
void rrpc_tcp_flush(struct tcp_chan *ch);
/* A handshake frame built by the transport itself. */
struct rrpci_msg *rrpc_tcp_hs_msg(uint8_t type, int cls, const void *payload, size_t len);
int rrpc_tcp_send(rrpc_conn *c, int cls, struct rrpci_msg *m);
void rrpc_tcp_writable_cb(struct rrpci_io *w, unsigned revents);

#endif

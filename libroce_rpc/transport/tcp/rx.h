/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's receive state machine: the bytes of one socket
 * in, whole frames out.  No sockets and no core here: the channel reads
 * where rrpc_tcp_rx_want says, as much as it says, and reports what came
 * with rrpc_tcp_rx_got; frames and the decisions about them go up through
 * struct rrpc_tcp_rx_up.  So the machine is driven the same from a socket
 * (tcp.c) and from a test's bytes (tests/unit/test_tcp_rx.c).
 *
 * One state at a time, one step function per state (rx.c):
 *
 *   HEADER     no frame yet: reading a header.  Frames that are whole in
 *              the read buffer are handed up from here, one after another.
 *   BODY       a header, and its payload (at most RBUF_SIZE / 2 bytes)
 *              coming into the read buffer behind it.
 *   WRITE_SUB  a large emulated WRITE: its sub-header is coming, which says
 *              where its data goes (up->write_target).
 *   BIG        a large payload coming into a buffer of its own.
 *   REGION     a large WRITE's data coming straight into its target region.
 *   DISCARD    the rest of a large WRITE whose region went away meanwhile:
 *              read and dropped; the frame then goes up as if placed, and
 *              the core answers it (the region is gone).
 *   WAIT       a large payload whose buffer the context's budget
 *              (up->reserve, RRPC_MAX_PARTIAL_BYTES) does not allow yet:
 *              nothing is read until rrpc_tcp_rx_resume.
 *
 * (There is no state that holds a frame back: since protocol version 2 each
 * socket's frames come in order behind its own handshake frame, so every
 * whole frame may go up at once.)
 *
 * A header is decoded and checked (rrpci_hdr_decode) when it is whole; a
 * frame whose payload is still to come is admitted (up->admit) before any
 * of its payload is kept.  A bad header or memory running out is reported
 * with up->fail.  After an upcall that says the connection went away,
 * nothing of the machine is touched again (the channel is being closed).
 */
#ifndef RRPC_TCP_RX_H
#define RRPC_TCP_RX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/frame.h"

#define RRPC_TCP_RBUF_SIZE (64 * 1024) /* the read buffer of a socket */
#define RRPC_TCP_SPARE_MAX (8u << 20)  /* largest payload buffer kept for reuse */

enum rrpc_tcp_rx_state {
    RRPC_TCP_RX_HEADER,
    RRPC_TCP_RX_BODY,
    RRPC_TCP_RX_WRITE_SUB,
    RRPC_TCP_RX_BIG,
    RRPC_TCP_RX_REGION,
    RRPC_TCP_RX_DISCARD,
    RRPC_TCP_RX_WAIT,
};

/* What a call of the machine leaves the channel to do. */
enum rrpc_tcp_rx_next {
    RRPC_TCP_RX_READ, /* read on (rrpc_tcp_rx_want) */
    RRPC_TCP_RX_GONE, /* the connection went away: touch nothing of it */
    RRPC_TCP_RX_PAUSE, /* read nothing until rrpc_tcp_rx_resume (WAIT) */
};

/* The upcalls; @u is the machine's user pointer. */
struct rrpc_tcp_rx_up {
    /* A frame whose payload is still to come: 0, or an error after the
     * connection was taken down (rrpci_conn_rx_admit). */
    int (*admit)(void *u, const struct rrpci_hdr *h);
    /* A whole frame; @payload is valid during the call.  False when the
     * connection went away. */
    bool (*frame)(void *u, const struct rrpci_hdr *h, const uint8_t *payload);
    /* Where a large WRITE's data goes (rrpci_os_write_target), or NULL. */
    uint8_t *(*write_target)(void *u, const struct rrpci_hdr *h, const uint8_t *p, size_t n);
    /* The bytes are bad or memory ran out: take the connection down with
     * @code (an RRPC_E_* code or a negated errno) and the static @why. */
    void (*fail)(void *u, int code, const char *why);
    /* Optional (NULL: no budget): a large payload's buffer of @len bytes is
     * about to be made: 0, or -EAGAIN when the budget has no room yet (the
     * machine goes to WAIT; the user calls rrpc_tcp_rx_resume when room may
     * have come).  unreserve gives back what reserve took. */
    int (*reserve)(void *u, size_t len);
    void (*unreserve)(void *u, size_t len);
};

struct rrpc_tcp_rx {
    enum rrpc_tcp_rx_state state;
    const struct rrpc_tcp_rx_up *up;
    void *u;
    uint32_t max_msg; /* the largest payload accepted (RRPC_MAX_MSG) */
    /* The read buffer: bytes [roff, rlen) are not handed up yet.  Made on
     * the first read; an idle channel gives it back (rrpc_tcp_rx_trim). */
    uint8_t *rbuf;
    size_t rlen, roff;
    /* The frame being read (HEADER: the last one, which says whether the
     * next header is read alone); in BIG, REGION and DISCARD, @got payload
     * bytes of it have come. */
    struct rrpci_hdr h;
    size_t got;
    uint8_t *big; /* BIG: the payload's buffer, of @big_cap bytes */
    bool reserved; /* BIG: h.len bytes taken from up->reserve */
    size_t big_cap;
    uint8_t *spare; /* the last large buffer, kept for the next large payload */
    size_t spare_cap;
    uint8_t *dst; /* REGION: where the data goes; the sub-header is in @sub */
    uint8_t sub[RRPCI_OS_HDR_SIZE];
};

/* Sets up @rx (zeroed by its owner) in HEADER. */
void rrpc_tcp_rx_init(struct rrpc_tcp_rx *rx, const struct rrpc_tcp_rx_up *up, void *u,
                      uint32_t max_msg);
/* Frees every buffer; @rx may be set up again. */
void rrpc_tcp_rx_fini(struct rrpc_tcp_rx *rx);

/*
 * Where the next read goes: *@ret_to, at most *@ret_max bytes (> 0; a large
 * payload's reads at most @piece).  Returns READ, or GONE after
 * up->fail (no memory for the read buffer).  In REGION it asks
 * up->write_target again first: when the region went away meanwhile the
 * machine goes to DISCARD.
 */
enum rrpc_tcp_rx_next rrpc_tcp_rx_want(struct rrpc_tcp_rx *rx, size_t piece, uint8_t **ret_to,
                                       size_t *ret_max);

/* @n bytes were read where rrpc_tcp_rx_want said (0: none, but hand up what
 * is buffered).  Runs the machine: hands up every frame that is whole. */
enum rrpc_tcp_rx_next rrpc_tcp_rx_got(struct rrpc_tcp_rx *rx, size_t n);

/* WAIT: asks up->reserve again; READ once the payload's buffer is made (or
 * PAUSE again, or GONE).  In any other state: READ. */
enum rrpc_tcp_rx_next rrpc_tcp_rx_resume(struct rrpc_tcp_rx *rx);
/* Whether the peer stopped in the middle of a frame (for the reason given
 * when its socket ends). */
bool rrpc_tcp_rx_mid_frame(const struct rrpc_tcp_rx *rx);
/* Whether the machine is in the middle of a class's frame (not one of the
 * connection's own: the handshake, tickets, keepalives). */
bool rrpc_tcp_rx_in_class_frame(const struct rrpc_tcp_rx *rx);

/* Idle: frees the spare buffer, and the read buffer when it holds nothing. */
void rrpc_tcp_rx_trim(struct rrpc_tcp_rx *rx);
/* Frees the read buffer when it holds nothing (the spare buffer stays). */
void rrpc_tcp_rx_release(struct rrpc_tcp_rx *rx);

#endif

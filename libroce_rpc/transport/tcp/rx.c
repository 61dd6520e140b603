/* SPDX-License-Identifier: MIT */
/* The tcp transport's receive state machine (rx.h says what each state is). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <roce_rpc/rrpc.h>

#include "transport/tcp/rx.h"

#define RBUF_SIZE RRPC_TCP_RBUF_SIZE
/* A payload larger than this goes into a buffer of its own, not the read
 * buffer: copying it out of the read buffer would cost more than the
 * allocation (which the spare buffer mostly saves). */
#define RBUF_HALF (RBUF_SIZE / 2)

/* What a step leaves to the loop of rx_run. */
enum step { STEP_ON, STEP_NEED, STEP_GONE, STEP_WAIT };

/* Read buffers come straight from the kernel: freed on idle (rrpc_tcp_rx_trim),
 * their pages leave the process, which a heap block of this size would not. */
static bool rbuf_ensure(struct rrpc_tcp_rx *rx)
{
    if (rx->rbuf)
        return true;
    void *p = mmap(NULL, RBUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        rx->up->fail(rx->u, -ENOMEM, "out of memory for a receive buffer");
        return false;
    }
    rx->rbuf = p;
    return true;
}

static void rbuf_free(struct rrpc_tcp_rx *rx)
{
    if (rx->rbuf)
        munmap(rx->rbuf, RBUF_SIZE);
    rx->rbuf = NULL;
    rx->rlen = rx->roff = 0;
}

void rrpc_tcp_rx_init(struct rrpc_tcp_rx *rx, const struct rrpc_tcp_rx_up *up, void *u,
                      uint32_t max_msg)
{
    rx->state = RRPC_TCP_RX_HEADER;
    rx->up = up;
    rx->u = u;
    rx->max_msg = max_msg;
}

/* Gives back the budget a BIG payload took. */
static void unreserve(struct rrpc_tcp_rx *rx)
{
    if (rx->reserved) {
        rx->reserved = false;
        rx->up->unreserve(rx->u, rx->h.len);
    }
}

void rrpc_tcp_rx_fini(struct rrpc_tcp_rx *rx)
{
    unreserve(rx);
    rbuf_free(rx);
    free(rx->big);
    rx->big = NULL;
    free(rx->spare);
    rx->spare = NULL;
    rx->spare_cap = 0;
    rx->dst = NULL;
    rx->state = RRPC_TCP_RX_HEADER;
}

/* Hands up the frame in rx->h with @payload; the machine is in HEADER
 * during the upcall. */
static enum step hand_up(struct rrpc_tcp_rx *rx, bool placed, const uint8_t *payload)
{
    struct rrpci_hdr h = rx->h;
    h.placed = placed;
    rx->state = RRPC_TCP_RX_HEADER;
    return rx->up->frame(rx->u, &h, payload) ? STEP_ON : STEP_GONE;
}

/* The rest of a large payload goes into a buffer of its own (the spare
 * one when it is large enough). */
static enum step to_big(struct rrpc_tcp_rx *rx)
{
    if (rx->up->reserve) {
        if (rx->up->reserve(rx->u, rx->h.len) != 0) {
            rx->state = RRPC_TCP_RX_WAIT; /* its bytes so far stay in the read buffer */
            return STEP_WAIT;
        }
        rx->reserved = true;
    }
    if (rx->spare && rx->spare_cap >= rx->h.len) {
        rx->big = rx->spare;
        rx->big_cap = rx->spare_cap;
    } else {
        free(rx->spare); /* too small: this payload's buffer becomes the spare */
        rx->big = malloc(rx->h.len);
        rx->big_cap = rx->h.len;
    }
    rx->spare = NULL;
    rx->spare_cap = 0;
    if (!rx->big) {
        rx->up->fail(rx->u, -ENOMEM, "out of memory for a large message");
        return STEP_GONE;
    }
    size_t avail = rx->rlen - rx->roff;
    memcpy(rx->big, rx->rbuf + rx->roff, avail);
    rx->got = avail;
    rx->roff = rx->rlen = 0;
    rx->state = RRPC_TCP_RX_BIG;
    return STEP_NEED;
}

/* HEADER: decode the next header once it is whole, and choose where its
 * payload goes. */
static enum step step_header(struct rrpc_tcp_rx *rx)
{
    size_t avail = rx->rlen - rx->roff;
    if (avail < RRPCI_HDR_SIZE)
        return STEP_NEED;
    struct rrpci_hdr h;
    const char *why = NULL;
    int r = rrpci_hdr_decode(rx->rbuf + rx->roff, rx->max_msg, &h, &why);
    if (r < 0) {
        rx->up->fail(rx->u, r, why);
        return STEP_GONE;
    }
    rx->h = h;
    rx->roff += RRPCI_HDR_SIZE;
    avail -= RRPCI_HDR_SIZE;
    rx->state = RRPC_TCP_RX_BODY;
    /* A frame that is whole in the buffer is checked when it is handed up;
     * one whose payload is still to come, before any of it is kept. */
    if (avail >= h.len)
        return STEP_ON;
    if (rx->up->admit(rx->u, &rx->h) != 0)
        return STEP_GONE;
    if (h.len <= RBUF_HALF)
        return STEP_NEED;
    if (h.type == RRPCI_T_OS_WRITE) {
        rx->state = RRPC_TCP_RX_WRITE_SUB;
        return STEP_ON;
    }
    return to_big(rx);
}

/* BODY: hand the frame up once its payload is buffered. */
static enum step step_body(struct rrpc_tcp_rx *rx)
{
    if (rx->rlen - rx->roff < rx->h.len)
        return STEP_NEED;
    const uint8_t *p = rx->rbuf + rx->roff;
    rx->roff += rx->h.len;
    return hand_up(rx, false, p);
}

/* WRITE_SUB: once the sub-header is here, the data goes to its target, or
 * (refused: no such region, no right, out of bounds) is read as any frame,
 * and the core answers it. */
static enum step step_write_sub(struct rrpc_tcp_rx *rx)
{
    size_t avail = rx->rlen - rx->roff;
    if (avail < RRPCI_OS_HDR_SIZE)
        return STEP_NEED;
    const uint8_t *p = rx->rbuf + rx->roff;
    uint8_t *dst = rx->up->write_target(rx->u, &rx->h, p, avail);
    if (!dst)
        return to_big(rx);
    memcpy(rx->sub, p, RRPCI_OS_HDR_SIZE);
    memcpy(dst, p + RRPCI_OS_HDR_SIZE, avail - RRPCI_OS_HDR_SIZE);
    rx->dst = dst;
    rx->got = avail; /* < h.len: the frame was not whole when its header came */
    rx->roff = rx->rlen = 0;
    rx->state = RRPC_TCP_RX_REGION;
    return STEP_NEED;
}

/* BIG, REGION, DISCARD: the payload has come whole. */
static enum step step_payload_done(struct rrpc_tcp_rx *rx)
{
    if (rx->got < rx->h.len)
        return STEP_NEED;
    if (rx->state != RRPC_TCP_RX_BIG) {
        rx->dst = NULL;
        return hand_up(rx, true, rx->sub); /* handed up with its sub-header alone */
    }
    uint8_t *big = rx->big;
    size_t cap = rx->big_cap;
    rx->big = NULL;
    unreserve(rx); /* whole: no longer a frame being received */
    enum step s = hand_up(rx, false, big);
    if (s == STEP_ON && !rx->spare && cap <= RRPC_TCP_SPARE_MAX) {
        rx->spare = big; /* reused: no allocation, no page faults */
        rx->spare_cap = cap;
    } else {
        free(big);
    }
    return s;
}

static enum rrpc_tcp_rx_next rx_run(struct rrpc_tcp_rx *rx)
{
    for (;;) {
        enum step s = STEP_GONE;
        switch (rx->state) {
        case RRPC_TCP_RX_HEADER:
            s = step_header(rx);
            break;
        case RRPC_TCP_RX_BODY:
            s = step_body(rx);
            break;
        case RRPC_TCP_RX_WRITE_SUB:
            s = step_write_sub(rx);
            break;
        case RRPC_TCP_RX_BIG:
        case RRPC_TCP_RX_REGION:
        case RRPC_TCP_RX_DISCARD:
            s = step_payload_done(rx);
            break;
        case RRPC_TCP_RX_WAIT:
            s = STEP_WAIT;
            break;
        }
        switch (s) {
        case STEP_ON:
            continue;
        case STEP_NEED:
            return RRPC_TCP_RX_READ;
        case STEP_WAIT:
            return RRPC_TCP_RX_PAUSE;
        case STEP_GONE:
        default:
            return RRPC_TCP_RX_GONE;
        }
    }
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

enum rrpc_tcp_rx_next rrpc_tcp_rx_want(struct rrpc_tcp_rx *rx, size_t piece, uint8_t **ret_to,
                                       size_t *ret_max)
{
    if (piece == 0)
        piece = 1;
    switch (rx->state) {
    case RRPC_TCP_RX_BIG:
        *ret_to = rx->big + rx->got;
        *ret_max = min_size(rx->h.len - rx->got, piece);
        return RRPC_TCP_RX_READ;
    case RRPC_TCP_RX_REGION:
        /* Each time: the region may have been deregistered since. */
        if (rx->up->write_target(rx->u, &rx->h, rx->sub, RRPCI_OS_HDR_SIZE)) {
            *ret_to = rx->dst + (rx->got - RRPCI_OS_HDR_SIZE);
            *ret_max = min_size(rx->h.len - rx->got, piece);
            return RRPC_TCP_RX_READ;
        }
        rx->state = RRPC_TCP_RX_DISCARD;
        rx->dst = NULL;
        /* fall through */
    case RRPC_TCP_RX_DISCARD:
        if (!rbuf_ensure(rx))
            return RRPC_TCP_RX_GONE;
        *ret_to = rx->rbuf;
        *ret_max = min_size(min_size(rx->h.len - rx->got, piece), RBUF_SIZE);
        return RRPC_TCP_RX_READ;
    case RRPC_TCP_RX_WAIT:
        return RRPC_TCP_RX_PAUSE;
    case RRPC_TCP_RX_HEADER:
    case RRPC_TCP_RX_BODY:
    case RRPC_TCP_RX_WRITE_SUB:
    default:
        break;
    }
    if (rx->roff == rx->rlen) {
        rx->roff = rx->rlen = 0;
    } else if (rx->roff > RBUF_HALF) {
        memmove(rx->rbuf, rx->rbuf + rx->roff, rx->rlen - rx->roff);
        rx->rlen -= rx->roff;
        rx->roff = 0;
    }
    if (!rbuf_ensure(rx))
        return RRPC_TCP_RX_GONE;
    size_t max = RBUF_SIZE - rx->rlen;
    /* After a large payload another often follows: its header alone first,
     * so that its payload is read straight into its own buffer, not into
     * the read buffer and copied from there; a large WRITE's sub-header
     * alone next, for the same reason. */
    if (rx->state == RRPC_TCP_RX_HEADER && rx->rlen == 0 && rx->h.len > RBUF_HALF)
        max = RRPCI_HDR_SIZE;
    else if (rx->state == RRPC_TCP_RX_WRITE_SUB)
        max = RRPCI_OS_HDR_SIZE - (rx->rlen - rx->roff);
    *ret_to = rx->rbuf + rx->rlen;
    *ret_max = max;
    return RRPC_TCP_RX_READ;
}

enum rrpc_tcp_rx_next rrpc_tcp_rx_got(struct rrpc_tcp_rx *rx, size_t n)
{
    switch (rx->state) {
    case RRPC_TCP_RX_BIG:
    case RRPC_TCP_RX_REGION:
    case RRPC_TCP_RX_DISCARD:
        rx->got += n;
        break;
    case RRPC_TCP_RX_HEADER:
    case RRPC_TCP_RX_BODY:
    case RRPC_TCP_RX_WRITE_SUB:
    default:
        rx->rlen += n;
        break;
    }
    return rx_run(rx);
}

enum rrpc_tcp_rx_next rrpc_tcp_rx_resume(struct rrpc_tcp_rx *rx)
{
    if (rx->state != RRPC_TCP_RX_WAIT)
        return RRPC_TCP_RX_READ;
    switch (to_big(rx)) {
    case STEP_WAIT:
        return RRPC_TCP_RX_PAUSE;
    case STEP_GONE:
        return RRPC_TCP_RX_GONE;
    default:
        return rx_run(rx);
    }
}

bool rrpc_tcp_rx_mid_frame(const struct rrpc_tcp_rx *rx)
{
    return rx->state != RRPC_TCP_RX_HEADER || rx->rlen > rx->roff;
}

void rrpc_tcp_rx_trim(struct rrpc_tcp_rx *rx)
{
    free(rx->spare);
    rx->spare = NULL;
    rx->spare_cap = 0;
    rrpc_tcp_rx_release(rx);
}

void rrpc_tcp_rx_release(struct rrpc_tcp_rx *rx)
{
    if (rx->state == RRPC_TCP_RX_HEADER && rx->roff == rx->rlen)
        rbuf_free(rx);
}

bool rrpc_tcp_rx_in_class_frame(const struct rrpc_tcp_rx *rx)
{
    return rx->state != RRPC_TCP_RX_HEADER && !rrpci_type_is_conn_frame(rx->h.type);
}

/* SPDX-License-Identifier: MIT */
/*
 * Shared by the harnesses of the core's receive side (fuzz_tcp_rx,
 * fuzz_core_rx, fuzz_onesided): a context set up the same way in each, and
 * an in-memory transport that hands frames to the core and checks every
 * frame the core sends back.
 *
 * The context (fuzz_core_ctx):
 *  - methods "echo" (answers the payload), "fail" (answers error 7), "defer"
 *    (answered later: fuzz_core_answer_deferred, or at the end of the
 *    input), "call" (calls "back" on the same connection before answering:
 *    RESPONSE frames from the peer then have a pending call to match; ids
 *    count from 1 per connection), "read" and "write" (start a one-sided
 *    operation towards the peer: payload = a 32-byte token, u32 local
 *    offset, u32 length, u64 remote offset, u8 flags (bit 0 notify); OS_ACK
 *    frames then have a pending operation, with the same ids);
 *  - target regions at fixed addresses, each between PROT_NONE guard pages,
 *    with fixed keys (FUZZ_REGION_*), so that corpus files can name them;
 *  - a notify callback and a log callback at debug level that formats
 *    every message and prints none.
 */
#ifndef RRPC_FUZZ_CORE_H
#define RRPC_FUZZ_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "fuzz.h"

/* Target regions: at FUZZ_REGION_BASE when that address is free (else
 * anywhere, and corpus files that name them reach only the refusals). */
#define FUZZ_REGION_BASE 0x20000000ull
#define FUZZ_PAGE 4096ull
/* key, address, length, access */
#define FUZZ_REGION_RW_KEY 0x1000u /* page 1, 4096 bytes, read + write */
#define FUZZ_REGION_RO_KEY 0x1001u /* page 3, 4096 bytes, read only */
#define FUZZ_REGION_WO_KEY 0x1002u /* page 5, 4096 bytes, write only */
#define FUZZ_REGION_TINY_KEY 0x1003u /* last byte of page 7, 1 byte, read + write */
#define FUZZ_REGION_GONE_KEY 0x1004u /* registered and deregistered: refused */
#define FUZZ_REGION_PAGES 9          /* pages 0, 2, 4, 6, 8 are guards */

/* The context's local region, for the "read"/"write" methods: 8192 bytes
 * of heap (ASan sees an access past it). */
#define FUZZ_LOCAL_LEN 8192u

/* What a ticket-gated context accepts (its verifier is this comparison). */
#define FUZZ_TICKET_OK "fuzz-ticket-ok"

/* Creates a context set up as above; @ticket: it requires a connection
 * ticket.  Aborts on failure.  Lives until the process exits. */
rrpc_ctx *fuzz_core_ctx(bool ticket);

/* Answers the oldest deferred request (false: none). */
bool fuzz_core_answer_deferred(void);
/* End of an input: answers every deferred request (their connections may
 * be gone: the answer is then dropped). */
void fuzz_core_end_input(void);

/* Runs @ctx's code as its loop does: lock held, "inside a callback". */
void fuzz_core_enter(rrpc_ctx *ctx);
void fuzz_core_leave(rrpc_ctx *ctx);

/* ---- the in-memory transport ----------------------------------------- */

struct fuzz_memconn;
/* Called for every frame the core sends, after the generic checks. */
typedef void (*fuzz_sent_fn)(struct fuzz_memconn *mc, int cls, const struct rrpci_hdr *h,
                             const uint8_t *payload);

struct fuzz_memconn {
    rrpc_ctx *ctx;
    rrpc_listener l; /* a listener of the in-memory transport, for the core */
    rrpc_conn *c;    /* holds a reference until fuzz_memconn_close */
    uint32_t peer_max;                  /* what "the peer" accepts (its hello) */
    int64_t grant[RRPCI_MAX_CLASSES];   /* credits "the peer" granted, LENDs included */
    bool blocked[RRPCI_MAX_CLASSES];    /* send says -EAGAIN */
    /* Credit bookkeeping of "the peer", checked on every frame sent:
     * non-exempt frames sent <= grant (its first, changed by every LEND
     * the core took) + credits the peer returned, and
     * credits the core returned <= non-exempt frames it accepted. */
    uint64_t sent[RRPCI_MAX_CLASSES], returned[RRPCI_MAX_CLASSES];
    uint64_t delivered[RRPCI_MAX_CLASSES], got_back[RRPCI_MAX_CLASSES];
    bool closed; /* ops->conn_close ran: nothing may be sent after */
    int ups, downs;
    fuzz_sent_fn on_sent;
    void *user;
};

/*
 * Makes a connection of the in-memory transport in @ctx and brings it up
 * as the transports do (hello_peer, established).  Passive (accepted) or
 * active; an active one with @ticket presents it.  The peer grants @grant
 * credits per class and accepts @peer_max bytes.  Call inside
 * fuzz_core_enter.
 */
void fuzz_memconn_open(struct fuzz_memconn *mc, rrpc_ctx *ctx, bool passive, const char *ticket,
                       uint32_t grant, uint32_t peer_max);
/* Hands one frame to the core (rrpci_conn_recv) as a transport does, and
 * keeps the peer's credit books.  @payload: h->len bytes.  Inside enter. */
void fuzz_memconn_recv(struct fuzz_memconn *mc, int cls, const struct rrpci_hdr *h,
                       const uint8_t *payload);
/* Unblocks class @cls (rrpci_conn_writable) or blocks it. */
void fuzz_memconn_block(struct fuzz_memconn *mc, int cls, bool blocked);
/* Takes the connection down (if it is not) and drops the reference. */
void fuzz_memconn_close(struct fuzz_memconn *mc);

#endif

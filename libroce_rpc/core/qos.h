/* SPDX-License-Identifier: MIT */
/*
 * The receive-side QoS policy: how the loop's time is shared between the
 * QoS classes whose input is ready.  Pure: no I/O, no clock (the caller
 * passes the time), no context; the transports execute it.  (The send side's
 * share of a connection is core/sched.c's weighted scheduler.)
 *
 * It answers three questions:
 *  - Which class first: when several classes are ready in one loop
 *    iteration, the heavier weight first (rrpci_qos_rank, rrpci_qos_order).
 *  - How long a turn: one wake-up serves a class for at most
 *    weight x turn_ns of time and weight x turn_bytes bytes (either bound
 *    may be off), and at least one piece; then the loop serves the others.
 *    A time bound suits a transport whose pieces are system calls of very
 *    different costs (tcp: a 64 KiB read costs about 10 us, a 1 MiB write
 *    up to 250 us); a byte bound suits one that moves frames by pointer
 *    (inproc), and keeps it deterministic.
 *  - How large a piece: what one system call may move, piece_alone while no
 *    other class of the connection is busy, piece_shared while one is; a
 *    class is busy for busy_ns after it last moved a piece.  Large pieces
 *    cost less CPU per byte, small ones let a low-latency frame that
 *    arrives meanwhile wait less (docs/performance.md, "Adaptive pieces on
 *    tcp").
 *
 * A transport sets the knobs from its tunables (tcp: RRPC_TCP_*), the
 * weights from the context's classes (rrpci_ctx_qos, transport.h).
 */
#ifndef RRPCI_QOS_H
#define RRPCI_QOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RRPCI_QOS_MAX 4

struct rrpci_qos_knobs {
    uint64_t turn_ns;    /* time per unit of weight per turn; 0: no time bound */
    size_t turn_bytes;   /* bytes per unit of weight per turn; 0: no byte bound */
    size_t piece_alone;  /* bytes per piece while no other class is busy; 0: no bound */
    size_t piece_shared; /* bytes per piece while another class is busy; 0: no bound */
    uint64_t busy_ns;    /* a class is busy this long after its last piece */
};

struct rrpci_qos {
    struct rrpci_qos_knobs k;
    uint32_t weight[RRPCI_QOS_MAX];
    uint8_t rank[RRPCI_QOS_MAX];
    unsigned n;
};

/* Sets up @q for @n classes (at most RRPCI_QOS_MAX) of weights @weights (a
 * weight of 0 counts as 1) with the knobs @k. */
void rrpci_qos_init(struct rrpci_qos *q, unsigned n, const uint32_t *weights,
                    const struct rrpci_qos_knobs *k);

/* The rank of class @cls: the number of classes with a heavier weight, so
 * 0 is served first and classes of equal weight share a rank. */
unsigned rrpci_qos_rank(const struct rrpci_qos *q, int cls);

/* Fills @order[0..n-1] with the classes in the order they are served:
 * heavier first, equal weights by index. */
void rrpci_qos_order(const struct rrpci_qos *q, int *order);

/* One class's turn on the loop. */
struct rrpci_qos_turn {
    uint64_t end_ns; /* 0: no time bound */
    size_t left;     /* bytes still allowed */
    bool counted;    /* false: no byte bound */
};

/* Starts a turn of class @cls at time @now_ns. */
void rrpci_qos_turn_begin(const struct rrpci_qos *q, int cls, uint64_t now_ns,
                          struct rrpci_qos_turn *t);

/* A piece of @n bytes was moved in turn @t, done at @now_ns.  Returns
 * whether the turn may go on with another piece. */
bool rrpci_qos_turn_charge(struct rrpci_qos_turn *t, size_t n, uint64_t now_ns);

/* The largest piece one system call may move: @shared when another class
 * of the same connection is busy (rrpci_qos_busy).  SIZE_MAX when unbounded. */
size_t rrpci_qos_piece(const struct rrpci_qos *q, bool shared);

/* Whether a class whose last piece moved at @last_ns (0: never) is still
 * busy at @now_ns. */
bool rrpci_qos_busy(const struct rrpci_qos *q, uint64_t last_ns, uint64_t now_ns);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The weighted scheduler across QoS classes of one connection: deficit round
 * robin on bytes.  Each round a class with something to send earns
 * weight x RRPCI_SCHED_QUANTUM bytes; it sends while its deficit covers its
 * next frame.  So a class's share of a saturated connection is its weight's
 * share, and a small low-latency frame waits at most one round behind bulk.
 */
#ifndef RRPCI_SCHED_H
#define RRPCI_SCHED_H

#include <stddef.h>
#include <stdint.h>

#define RRPCI_SCHED_MAX 4
#define RRPCI_SCHED_QUANTUM 4096

struct rrpci_sched {
    uint32_t weight[RRPCI_SCHED_MAX];
    uint64_t deficit[RRPCI_SCHED_MAX];
    unsigned cursor;
    unsigned n;
    int fresh; /* the class at cursor has not yet earned its quantum this round */
};

void rrpci_sched_init(struct rrpci_sched *s, unsigned n, const uint32_t *weights);

/*
 * Picks the class that sends next.  @head[i] is the size in bytes of class
 * i's next frame, or 0 when class i cannot send (empty, or no credit, or the
 * transport is full).  Returns the class, or -1 when none can.  The pick is
 * charged: call again for the next frame.
 */
int rrpci_sched_next(struct rrpci_sched *s, const size_t *head);

#endif

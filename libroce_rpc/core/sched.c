/* SPDX-License-Identifier: MIT */
#include "core/sched.h"

void rrpci_sched_init(struct rrpci_sched *s, unsigned n, const uint32_t *weights)
{
    s->n = n > RRPCI_SCHED_MAX ? RRPCI_SCHED_MAX : n;
    for (unsigned i = 0; i < s->n; i++) {
        s->weight[i] = weights[i] ? weights[i] : 1;
        s->deficit[i] = 0;
    }
    s->cursor = 0;
    s->fresh = 1;
}

int rrpci_sched_next(struct rrpci_sched *s, const size_t *head)
{
    unsigned eligible = 0;
    int only = -1;
    for (unsigned i = 0; i < s->n; i++) {
        if (head[i]) {
            eligible++;
            only = (int)i;
        } else {
            s->deficit[i] = 0; /* an idle class does not bank credit */
        }
    }
    if (eligible == 0)
        return -1;
    if (eligible == 1) {
        s->deficit[only] = 0;
        return only;
    }
    /* Every eligible class gains at least one quantum per round, so a frame of
     * size L is reached within L / QUANTUM rounds; bound the loop by that. */
    for (;;) {
        unsigned i = s->cursor;
        if (head[i]) {
            if (s->fresh) {
                s->deficit[i] += (uint64_t)s->weight[i] * RRPCI_SCHED_QUANTUM;
                s->fresh = 0;
            }
            if (s->deficit[i] >= head[i]) {
                s->deficit[i] -= head[i];
                return (int)i;
            }
        }
        s->cursor = (s->cursor + 1) % s->n;
        s->fresh = 1;
    }
}

/* SPDX-License-Identifier: MIT */
#include "core/qos.h"

void rrpci_qos_init(struct rrpci_qos *q, unsigned n, const uint32_t *weights,
                    const struct rrpci_qos_knobs *k)
{
    q->k = *k;
    q->n = n > RRPCI_QOS_MAX ? RRPCI_QOS_MAX : n;
    for (unsigned i = 0; i < q->n; i++)
        q->weight[i] = weights[i] ? weights[i] : 1;
    for (unsigned i = 0; i < q->n; i++) {
        unsigned above = 0;
        for (unsigned j = 0; j < q->n; j++)
            above += q->weight[j] > q->weight[i];
        q->rank[i] = (uint8_t)above;
    }
}

unsigned rrpci_qos_rank(const struct rrpci_qos *q, int cls)
{
    return cls >= 0 && (unsigned)cls < q->n ? q->rank[cls] : q->n;
}

void rrpci_qos_order(const struct rrpci_qos *q, int *order)
{
    unsigned k = 0;
    for (unsigned r = 0; r < q->n; r++)
        for (unsigned i = 0; i < q->n; i++)
            if (q->rank[i] == r)
                order[k++] = (int)i;
}

void rrpci_qos_turn_begin(const struct rrpci_qos *q, int cls, uint64_t now_ns,
                          struct rrpci_qos_turn *t)
{
    uint32_t w = cls >= 0 && (unsigned)cls < q->n ? q->weight[cls] : 1;
    t->end_ns = q->k.turn_ns ? now_ns + w * q->k.turn_ns : 0;
    t->counted = q->k.turn_bytes != 0;
    t->left = t->counted ? w * q->k.turn_bytes : 0;
}

bool rrpci_qos_turn_charge(struct rrpci_qos_turn *t, size_t n, uint64_t now_ns)
{
    bool open = true;
    if (t->counted) {
        t->left = n < t->left ? t->left - n : 0;
        open = t->left > 0;
    }
    if (t->end_ns && now_ns >= t->end_ns)
        open = false;
    return open;
}

size_t rrpci_qos_piece(const struct rrpci_qos *q, bool shared)
{
    size_t p = shared ? q->k.piece_shared : q->k.piece_alone;
    return p ? p : SIZE_MAX;
}

bool rrpci_qos_busy(const struct rrpci_qos *q, uint64_t last_ns, uint64_t now_ns)
{
    return last_ns && last_ns + q->k.busy_ns > now_ns;
}

/* SPDX-License-Identifier: MIT */
#include "util/idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot(const struct rrpci_idmap *m, uint64_t key)
{
    /* Fibonacci hashing: sequential ids spread over the table. */
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (m->nbuckets - 1);
}

static int grow(struct rrpci_idmap *m)
{
    size_t nb = m->nbuckets ? m->nbuckets * 2 : 64;
    struct rrpci_idnode **b = calloc(nb, sizeof(*b));
    if (!b)
        return -ENOMEM;
    struct rrpci_idmap nm = {.buckets = b, .nbuckets = nb, .count = m->count};
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct rrpci_idnode *n = m->buckets[i];
        while (n) {
            struct rrpci_idnode *next = n->next;
            size_t s = slot(&nm, n->key);
            n->next = b[s];
            b[s] = n;
            n = next;
        }
    }
    free(m->buckets);
    *m = nm;
    return 0;
}

int rrpci_idmap_put(struct rrpci_idmap *m, uint64_t key, struct rrpci_idnode *n)
{
    if (rrpci_idmap_get(m, key))
        return -EEXIST;
    if (m->count + 1 > m->nbuckets) {
        int r = grow(m);
        if (r < 0)
            return r;
    }
    size_t s = slot(m, key);
    n->key = key;
    n->next = m->buckets[s];
    m->buckets[s] = n;
    m->count++;
    return 0;
}

struct rrpci_idnode *rrpci_idmap_get(const struct rrpci_idmap *m, uint64_t key)
{
    if (!m->nbuckets)
        return NULL;
    for (struct rrpci_idnode *n = m->buckets[slot(m, key)]; n; n = n->next)
        if (n->key == key)
            return n;
    return NULL;
}

struct rrpci_idnode *rrpci_idmap_del(struct rrpci_idmap *m, uint64_t key)
{
    if (!m->nbuckets)
        return NULL;
    for (struct rrpci_idnode **p = &m->buckets[slot(m, key)]; *p; p = &(*p)->next) {
        if ((*p)->key == key) {
            struct rrpci_idnode *n = *p;
            *p = n->next;
            m->count--;
            return n;
        }
    }
    return NULL;
}

struct rrpci_idnode *rrpci_idmap_pop(struct rrpci_idmap *m)
{
    for (size_t i = 0; m->count && i < m->nbuckets; i++) {
        if (m->buckets[i]) {
            struct rrpci_idnode *n = m->buckets[i];
            m->buckets[i] = n->next;
            m->count--;
            return n;
        }
    }
    return NULL;
}

void rrpci_idmap_fini(struct rrpci_idmap *m)
{
    free(m->buckets);
    m->buckets = NULL;
    m->nbuckets = m->count = 0;
}

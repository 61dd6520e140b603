/* SPDX-License-Identifier: MIT */
/* A map from 64-bit ids to intrusive nodes (pending calls, methods, regions). */
#ifndef RRPCI_IDMAP_H
#define RRPCI_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct rrpci_idnode {
    struct rrpci_idnode *next;
    uint64_t key;
};

struct rrpci_idmap {
    struct rrpci_idnode **buckets;
    size_t nbuckets; /* a power of two, or 0 before the first insert */
    size_t count;
};

/* Inserts @n with key @key.  -EEXIST when the key is present, -ENOMEM. */
int rrpci_idmap_put(struct rrpci_idmap *m, uint64_t key, struct rrpci_idnode *n);
struct rrpci_idnode *rrpci_idmap_get(const struct rrpci_idmap *m, uint64_t key);
/* Removes and returns the node of @key, or NULL. */
struct rrpci_idnode *rrpci_idmap_del(struct rrpci_idmap *m, uint64_t key);
/* Removes and returns some node, or NULL when empty (for draining). */
struct rrpci_idnode *rrpci_idmap_pop(struct rrpci_idmap *m);
void rrpci_idmap_fini(struct rrpci_idmap *m);

#define rrpci_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif

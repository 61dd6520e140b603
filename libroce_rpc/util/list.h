/* SPDX-License-Identifier: MIT */
/* An intrusive doubly-linked list with a sentinel head. */
#ifndef RRPCI_LIST_H
#define RRPCI_LIST_H

#include <stdbool.h>

struct rrpci_list {
    struct rrpci_list *prev, *next;
};
static inline void rrpci_list_init(struct rrpci_list *l)
{
    l->prev = l->next = l;
}
static inline void rrpci_list_add(struct rrpci_list *head, struct rrpci_list *n)
{
    n->next = head;
    n->prev = head->prev;
    head->prev->next = n;
    head->prev = n;
}
static inline void rrpci_list_del(struct rrpci_list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
static inline bool rrpci_list_empty(const struct rrpci_list *l)
{
    return l->next == l;
}

#endif

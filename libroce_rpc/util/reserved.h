/* SPDX-License-Identifier: MIT */
/* Options structs end with reserved words that must be zero (the public
 * headers' convention): new fields come out of them, and a library older
 * than the caller's header refuses what it would not understand. */
#ifndef RRPC_UTIL_RESERVED_H
#define RRPC_UTIL_RESERVED_H

#include <stddef.h>
#include <stdint.h>

/* The index of the first non-zero word of @r[@n], or -1 when all are zero. */
static inline int rrpci_reserved_bad(const uint64_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i])
            return (int)i;
    return -1;
}

#define RRPCI_RESERVED_BAD(o) rrpci_reserved_bad((o)->reserved, sizeof((o)->reserved) / sizeof((o)->reserved[0]))

/* The detail for a failed check, with %s (the struct) and %d (the word). */
#define RRPCI_RESERVED_WHY                                                                        \
    "%s.reserved[%d] is not zero: zero the whole struct before setting its fields (or this "   \
    "library is older than the header the program was built with)"

#endif

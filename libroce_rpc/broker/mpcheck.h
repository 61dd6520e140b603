/* SPDX-License-Identifier: MIT */
/* A structural check of untrusted msgpack before msgpack-c unpacks it. */
#ifndef RRPCI_BROKER_MPCHECK_H
#define RRPCI_BROKER_MPCHECK_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * 0 when @buf/@len is exactly one msgpack object, nested at most @max_depth
 * deep, whose arrays and maps claim no more elements than bytes remain
 * (msgpack-c allocates a container's claimed size before reading it).
 * -1 otherwise.
 */
int rrpci_mp_check(const void *buf, size_t len, int max_depth);

/* The value of the string key @key in the map @map, or NULL (also when @map
 * is not a map). */
const msgpack_object *rrpci_mp_get(const msgpack_object *map, const char *key);

/* A non-negative integer into *@out; false for anything else. */
bool rrpci_mp_uint(const msgpack_object *o, uint64_t *out);

#endif

/* SPDX-License-Identifier: MIT */
/* A structural check of untrusted msgpack before msgpack-c unpacks it. */
#ifndef RRPCI_BROKER_MPCHECK_H
#define RRPCI_BROKER_MPCHECK_H

#include <stddef.h>

/*
 * 0 when @buf/@len is exactly one msgpack object, nested at most @max_depth
 * deep, whose arrays and maps claim no more elements than bytes remain
 * (msgpack-c allocates a container's claimed size before reading it).
 * -1 otherwise.
 */
int rrpci_mp_check(const void *buf, size_t len, int max_depth);

#endif

/* SPDX-License-Identifier: MIT */
/* Shared by the fuzz harnesses: the libFuzzer entry point and a hard check. */
#ifndef RRPC_FUZZ_H
#define RRPC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant the harness checks: abort, so libFuzzer and replay both report it. */
#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#endif

/* SPDX-License-Identifier: MIT */
/* Helpers the broker tests share: shell commands, sleeps, a monotonic clock. */
#ifndef RRPC_TEST_BROKER_TEST_H
#define RRPC_TEST_BROKER_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Runs a shell command; a failure aborts the test program (setup is broken). */
static inline void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int r = system(cmd);
    if (r != 0) {
        fprintf(stderr, "command failed (%d): %s\n", r, cmd);
        abort();
    }
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * What the suites' threads share: one mutex and condition variable guarding
 * the test's counters (callbacks run on the library's loop threads, the
 * assertions on the test's thread), a bounded wait on a counter, and a
 * deterministic byte pattern.
 */
#ifndef RRPC_TEST_SYNC_H
#define RRPC_TEST_SYNC_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

static pthread_mutex_t test_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t test_cv = PTHREAD_COND_INITIALIZER;

static inline void lock(void)
{
    pthread_mutex_lock(&test_mu);
}

/* Wakes every waiter: a counter may have changed. */
static inline void unlock(void)
{
    pthread_cond_broadcast(&test_cv);
    pthread_mutex_unlock(&test_mu);
}

/* The CLOCK_REALTIME time @ms from now, for pthread_cond_timedwait. */
static inline struct timespec test_deadline(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits up to @ms for *@flag >= @want; returns the value seen. */
static inline int wait_for(int *flag, int want, int ms)
{
    struct timespec ts = test_deadline(ms);
    pthread_mutex_lock(&test_mu);
    while (*flag < want)
        if (pthread_cond_timedwait(&test_cv, &test_mu, &ts) == ETIMEDOUT)
            break;
    int v = *flag;
    pthread_mutex_unlock(&test_mu);
    return v;
}

/* @n pseudo-random bytes from @seed (the same seed, the same bytes). */
static inline void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

#endif

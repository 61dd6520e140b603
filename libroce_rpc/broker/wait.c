/* SPDX-License-Identifier: MIT */
/* Time and waits of the broker client (client_int.h): every deadline is on
 * CLOCK_MONOTONIC, and every condition variable is made on that clock. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "broker/client_int.h"

int64_t rrpci_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rrpci_cond_init(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

bool rrpci_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t deadline_ms)
{
    if (deadline_ms == INT64_MAX) {
        pthread_cond_wait(c, mu);
        return true;
    }
    if (rrpci_mono_ms() >= deadline_ms)
        return false;
    struct timespec ts = { .tv_sec = deadline_ms / 1000,
                           .tv_nsec = (deadline_ms % 1000) * 1000000 };
    return pthread_cond_timedwait(c, mu, &ts) != ETIMEDOUT;
}

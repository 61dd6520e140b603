/* SPDX-License-Identifier: MIT */
/* Helpers the broker tests share: shell commands, sleeps, a monotonic clock. */
#ifndef RRPC_TEST_BROKER_TEST_H
#define RRPC_TEST_BROKER_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>

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

/*
 * Waits (10 s at most) for the rrpcd started as @pid to write its port to
 * @portfile; fails the test when it exits first or never does (its stderr
 * is in @log).  Returns the port.
 */
static inline int rrpcd_wait_port(pid_t pid, const char *portfile, const char *log)
{
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            int port, ok = fscanf(f, "%d", &port) == 1;
            fclose(f);
            if (ok)
                return port;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("rrpcd exited at start (status %d); see %s", st, log);
        sleep_ms(10);
    }
    fail_msg("rrpcd did not start listening; see %s", log);
    return -1;
}

#endif

/* SPDX-License-Identifier: MIT */
/* rrpc-bench: CPU time of this process and of the bench server. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

static int srv_pid = -1;
static struct driver *srv_query; /* the server's CPU, when it is not a local child */
static struct driver *srv_polls; /* the server's polling stops (any mode) */

void cpu_server_is_local(int pid)
{
    srv_pid = pid;
}

void cpu_server_query_by(struct driver *d)
{
    if (!srv_query && d && d->server_cpu)
        srv_query = d;
    cpu_server_polls_by(d);
}

void cpu_server_polls_by(struct driver *d)
{
    if (!srv_polls && d && d->server_cpu)
        srv_polls = d;
}

/* The time on CPU of every thread of @pid, from /proc/PID/task/TID/schedstat
 * (nanoseconds; /proc/PID/stat's clock ticks are too coarse for 2 s tests). */
static bool proc_cpu_ns(int pid, uint64_t *ret)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    uint64_t sum = 0;
    bool any = false;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[300];
        snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", pid, e->d_name);
        FILE *f = fopen(p, "r");
        unsigned long long ns;
        if (f && fscanf(f, "%llu", &ns) == 1) {
            sum += ns;
            any = true;
        }
        if (f)
            fclose(f);
    }
    closedir(d);
    *ret = sum;
    return any;
}

uint64_t rusage_ns(const struct rusage *ru)
{
    return (uint64_t)ru->ru_utime.tv_sec * 1000000000u + (uint64_t)ru->ru_utime.tv_usec * 1000u +
           (uint64_t)ru->ru_stime.tv_sec * 1000000000u + (uint64_t)ru->ru_stime.tv_usec * 1000u;
}

/* Asks the bench server for its polling stops and, in client mode, its CPU
 * time: one call when one connection answers both. */
static void ask_server(struct cpu_mark *m)
{
    uint64_t ns = 0, polls[2] = {UINT64_MAX, UINT64_MAX};
    bool answered = srv_polls && srv_polls->server_cpu(srv_polls, &ns, polls) == 0;
    if (answered && polls[0] != UINT64_MAX) {
        m->polls_srv[0] = polls[0];
        m->polls_srv[1] = polls[1];
        m->polls_srv_ok = true;
    }
    if (srv_pid > 0 || !srv_query)
        return;
    if (srv_query == srv_polls) {
        m->srv_ok = answered;
        m->srv_ns = ns;
    } else {
        m->srv_ok = srv_query->server_cpu(srv_query, &m->srv_ns, polls) == 0;
    }
}

void cpu_mark(struct cpu_mark *m, bool end)
{
    m->srv_ok = m->polls_srv_ok = false;
    /* The call to the server stays outside the interval: before the clocks
     * are read at its start, after at its end. */
    if (!end)
        ask_server(m);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    m->self_ns = rusage_ns(&ru);
    lib_client_polls(m->polls_cli, m->loop_cli);
    if (srv_pid > 0)
        m->srv_ok = proc_cpu_ns(srv_pid, &m->srv_ns);
    m->t_ns = now_ns();
    if (end)
        ask_server(m);
}

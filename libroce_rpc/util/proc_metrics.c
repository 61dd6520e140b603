/* SPDX-License-Identifier: MIT */
/* The process_* metrics every Prometheus exporter serves (util/proc_metrics.h). */
#include "util/proc_metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Fields 14 (utime), 15 (stime), 22 (starttime, ticks since boot), 23
 * (vsize, bytes), 24 (rss, pages) of /proc/self/stat; 0 on success. */
static int self_stat(unsigned long long *ut, unsigned long long *st, unsigned long long *start,
                     unsigned long long *vsize, long long *rss)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* after the command name, which may hold spaces and parentheses */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    int got = sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                     "%*d %llu %llu %lld",
                     ut, st, start, vsize, rss);
    return got == 5 ? 0 : -1;
}

/* Seconds since the epoch at boot (/proc/stat btime), or -1. */
static long long boot_time(void)
{
    char line[256];
    long long bt = -1;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

void rrpci_proc_metrics(FILE *f)
{
    unsigned long long ut, st, start, vsize;
    long long rss;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (self_stat(&ut, &st, &start, &vsize, &rss) == 0 && tick > 0) {
        fprintf(f, "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                   "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                   "process_cpu_seconds_total %.2f\n",
                (double)(ut + st) / (double)tick);
        fprintf(f, "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
                   "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes "
                   "%llu\n",
                vsize);
        fprintf(f, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                   "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes "
                   "%lld\n",
                rss * (long long)page);
        long long bt = boot_time();
        if (bt >= 0)
            fprintf(f, "# HELP process_start_time_seconds Start time of the process since unix "
                       "epoch in seconds.\n# TYPE process_start_time_seconds gauge\n"
                       "process_start_time_seconds %.2f\n",
                    (double)bt + (double)start / (double)tick);
    }
    long fds = open_fds();
    if (fds >= 0)
        fprintf(f, "# HELP process_open_fds Number of open file descriptors.\n"
                   "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n",
                fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        fprintf(f, "# HELP process_max_fds Maximum number of open file descriptors.\n"
                   "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n",
                (unsigned long long)rl.rlim_cur);
}

/* SPDX-License-Identifier: MIT */
#include "util/nic_counters.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *rrpci_nic_sysfs_root = "/sys";

static const char *const dirs[] = {"hw_counters", "counters"};

/* One sysfs counter file: an unsigned decimal number and a newline. */
static int read_u64(int dfd, const char *name, uint64_t *ret)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char b[32];
    ssize_t n = read(fd, b, sizeof(b) - 1);
    close(fd);
    if (n <= 0)
        return -EINVAL;
    b[n] = 0;
    if (!isdigit((unsigned char)b[0]))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(b, &end, 10);
    if (errno || (*end && *end != '\n') || (*end == '\n' && end[1]))
        return -EINVAL;
    *ret = v;
    return 0;
}

int rrpci_nic_counters(const char *dev, unsigned port, rrpci_nic_cb cb, void *arg)
{
    if (!dev || !*dev || strchr(dev, '/') || dev[0] == '.')
        return -EINVAL;
    int given = 0, found = 0;
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char path[512];
        int n = snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/%s",
                         rrpci_nic_sysfs_root, dev, port, dirs[i]);
        if (n < 0 || (size_t)n >= sizeof(path))
            return -ENAMETOOLONG;
        DIR *d = opendir(path);
        if (!d)
            continue;
        found++;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || !strcmp(e->d_name, "lifespan"))
                continue;
            uint64_t v = 0;
            if (read_u64(dirfd(d), e->d_name, &v) == 0) {
                cb(arg, dirs[i], e->d_name, v);
                given++;
            }
        }
        closedir(d);
    }
    return found ? given : -ENOENT;
}

int rrpci_nic_metric_name(const char *name, char *out, size_t len)
{
    static const char pre[] = "rrpc_nic_", post[] = "_total";
    size_t k = strlen(name);
    if (!k || sizeof(pre) - 1 + k + sizeof(post) > len)
        return -EINVAL;
    memcpy(out, pre, sizeof(pre) - 1);
    char *p = out + sizeof(pre) - 1;
    for (size_t i = 0; i < k; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (!isalnum(ch) && ch != '_')
            return -EINVAL;
        *p++ = (char)tolower(ch);
    }
    memcpy(p, post, sizeof(post));
    return 0;
}

/* ---- rendering ------------------------------------------------------------------- */

struct sample {
    char metric[RRPCI_NIC_NAME_MAX + 16];
    const char *dir; /* static */
    const char *dev; /* the caller's */
    unsigned port;
    uint64_t v;
};

struct gather {
    struct sample *s;
    size_t n, cap;
    const char *dev;
    unsigned port;
    int err;
};

static void gather_cb(void *arg, const char *dir, const char *name, uint64_t v)
{
    struct gather *g = arg;
    struct sample s = {.dir = dir, .dev = g->dev, .port = g->port, .v = v};
    if (g->err || rrpci_nic_metric_name(name, s.metric, sizeof(s.metric)) < 0)
        return;
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 64;
        struct sample *ns = realloc(g->s, cap * sizeof(*ns));
        if (!ns) {
            g->err = -ENOMEM;
            return;
        }
        g->s = ns;
        g->cap = cap;
    }
    g->s[g->n++] = s;
}

static int sample_cmp(const void *a, const void *b)
{
    const struct sample *x = a, *y = b;
    int c = strcmp(x->metric, y->metric);
    if (!c)
        c = strcmp(x->dev, y->dev);
    if (!c)
        c = x->port < y->port ? -1 : x->port > y->port;
    return c;
}

static void put(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = *used < len ? len - *used : 0;
    int n = vsnprintf(room ? buf + *used : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used += (size_t)n;
}

/* A device name as a label value: the kernel's names are [a-z0-9_], but
 * anything else is escaped as the text format asks. */
static void put_label(char *buf, size_t len, size_t *used, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            put(buf, len, used, "\\%c", *v);
        else if (*v == '\n')
            put(buf, len, used, "\\n");
        else
            put(buf, len, used, "%c", *v);
    }
}

size_t rrpci_nic_render(const struct rrpci_nic_dev *devs, size_t n, char *buf, size_t len,
                        size_t used)
{
    struct gather g = {0};
    for (size_t i = 0; i < n; i++)
        for (unsigned p = 1; p <= devs[i].ports; p++) {
            g.dev = devs[i].name;
            g.port = p;
            rrpci_nic_counters(devs[i].name, p, gather_cb, &g);
        }
    if (g.n)
        qsort(g.s, g.n, sizeof(*g.s), sample_cmp);
    for (size_t i = 0; i < g.n; i++) {
        const struct sample *s = &g.s[i];
        bool first = i == 0 || strcmp(s->metric, g.s[i - 1].metric);
        if (!first && !sample_cmp(s, &g.s[i - 1]))
            continue; /* the same name in hw_counters and counters: the first */
        if (first)
            put(buf, len, &used,
                "# HELP %s RDMA port counter from the kernel (sysfs %s), read at the scrape: "
                "the port's, shared by every process using it.\n# TYPE %s counter\n",
                s->metric, s->dir, s->metric);
        put(buf, len, &used, "%s{device=\"", s->metric);
        put_label(buf, len, &used, s->dev);
        put(buf, len, &used, "\",port=\"%u\"} %llu\n", s->port, (unsigned long long)s->v);
    }
    free(g.s);
    return used;
}

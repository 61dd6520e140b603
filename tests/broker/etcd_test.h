/* SPDX-License-Identifier: MIT */
/* Helpers of the tests that run the real etcd: one member on free loopback
 * ports, its data in a directory of the test's. */
#ifndef RRPC_TEST_ETCD_TEST_H
#define RRPC_TEST_ETCD_TEST_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <string.h>

/* A loopback port free right now (the caller binds it a moment later). */
static inline int etcd_free_port(void)
{
    /* The kernel may hand the same ephemeral port out again once it is closed; a caller taking
     * several (a list of dead brokers, an etcd member's two ports) needs them distinct: a port
     * is not handed out again while it is among the last 128 given. */
    enum { KEPT = 128 };
    static int given[KEPT];
    static unsigned n_given;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
            getsockname(fd, (struct sockaddr *)&a, &len))
            abort();
        close(fd);
        int port = ntohs(a.sin_port);
        unsigned i = 0, seen = n_given < KEPT ? n_given : KEPT;
        while (i < seen && given[i] != port)
            i++;
        if (i < seen)
            continue;
        given[n_given++ % KEPT] = port;
        return port;
    }
}

/* The etcd binary: $ETCD, or Debian's; exits 77 (skip) with the reason when it is missing. */
static inline const char *etcd_bin_or_skip(void)
{
    const char *e = getenv("ETCD");
    e = e && e[0] ? e : "/usr/bin/etcd";
    if (access(e, X_OK)) {
        printf("skipped: no etcd binary at %s (apt-get install etcd-server, or set ETCD)\n", e);
        exit(77);
    }
    return e;
}

struct etcd_member {
    pid_t pid;
    int client_port, peer_port;
    char dir[300]; /* its data directory and log, etcd.log */
    /* A member of a cluster (etcd_cluster_init): its name and the
     * cluster's --initial-cluster; empty: a cluster of one, named "t". */
    char name[16];
    char cluster[400];
    const char *quota; /* --quota-backend-bytes, or NULL: etcd's default */
};

/*
 * Prepares @n members of one cluster (ports, names m0.., and each one's
 * directory @dir/mI, which must not exist yet); start each with
 * etcd_member_start.  Returns -1 when @dir is too long or mkdir fails.
 */
static inline int etcd_cluster_init(struct etcd_member *m, int n, const char *dir)
{
    char cluster[400] = "";
    for (int i = 0; i < n; i++) {
        memset(&m[i], 0, sizeof(m[i]));
        m[i].pid = -1;
        m[i].client_port = etcd_free_port();
        m[i].peer_port = etcd_free_port();
        snprintf(m[i].name, sizeof(m[i].name), "m%d", i);
        if ((size_t)snprintf(m[i].dir, sizeof(m[i].dir), "%s/m%d", dir, i) >= sizeof(m[i].dir) ||
            mkdir(m[i].dir, 0700))
            return -1;
        size_t k = strlen(cluster);
        snprintf(cluster + k, sizeof(cluster) - k, "%sm%d=http://127.0.0.1:%d", i ? "," : "", i,
                 m[i].peer_port);
    }
    for (int i = 0; i < n; i++)
        snprintf(m[i].cluster, sizeof(m[i].cluster), "%s", cluster);
    return 0;
}

/* Starts (or starts again, same ports and data) the member of @m in @m->dir; -1 on failure. */
static inline int etcd_member_start(struct etcd_member *m)
{
    if (!m->client_port) {
        m->client_port = etcd_free_port();
        m->peer_port = etcd_free_port();
    }
    char curl_[128], purl[128], cluster[400], ddir[400], log[400];
    snprintf(curl_, sizeof(curl_), "http://127.0.0.1:%d", m->client_port);
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", m->peer_port);
    const char *name = m->name[0] ? m->name : "t";
    if (m->cluster[0])
        snprintf(cluster, sizeof(cluster), "%s", m->cluster);
    else
        snprintf(cluster, sizeof(cluster), "t=%s", purl);
    snprintf(ddir, sizeof(ddir), "%s/data", m->dir);
    snprintf(log, sizeof(log), "%s/etcd.log", m->dir);
    const char *bin = etcd_bin_or_skip();
    m->pid = fork();
    if (m->pid == 0) {
        if (!freopen(log, "a", stderr) || !freopen(log, "a", stdout))
            _exit(126);
        execl(bin, "etcd", "--name", name, "--data-dir", ddir, "--listen-client-urls", curl_,
              "--advertise-client-urls", curl_, "--listen-peer-urls", purl,
              "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
              /* a shared 2-CPU test machine: slow heartbeats must not
               * look like a dead leader (etcd's defaults: 100 and 1000 ms) */
              "--heartbeat-interval", "250", "--election-timeout", "2500",
              m->quota ? "--quota-backend-bytes" : (char *)NULL, m->quota, (char *)NULL);
        _exit(127);
    }
    return m->pid > 0 ? 0 : -1;
}

static inline void etcd_member_stop(struct etcd_member *m, int sig)
{
    if (m->pid > 0) {
        kill(m->pid, sig);
        waitpid(m->pid, NULL, 0);
        m->pid = -1;
    }
}

#endif

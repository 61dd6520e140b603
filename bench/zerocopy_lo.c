/* SPDX-License-Identifier: MIT */
/*
 * rrpc-zerocopy-lo: does MSG_ZEROCOPY pay over loopback?  (docs/performance.md,
 * "Bulk without copies on tcp").  No library: a sender and a forked receiver
 * over 127.0.0.1 move 1 MiB messages for a while, the sender in pieces of
 * PIECE bytes per send(), with MSG_ZEROCOPY or without; it reads the
 * completions from the error queue and counts those the kernel reports as
 * copied (SO_EE_CODE_ZEROCOPY_COPIED).  Not installed.
 *
 *   rrpc-zerocopy-lo PIECE READ ZC SECONDS     e.g. 65536 65536 1 2
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/errqueue.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

#define MSG_SIZE (1u << 20)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static int full(int fd, void *p, size_t n, bool wr)
{
    for (size_t off = 0; off < n;) {
        ssize_t r = wr ? write(fd, (char *)p + off, n - off) : read(fd, (char *)p + off, n - off);
        if (r <= 0)
            return -1;
        off += (size_t)r;
    }
    return 0;
}

/* Reads the zerocopy completions waiting on @fd. */
static void reap(int fd, long *done, long *copied)
{
    char cbuf[128];
    struct msghdr mh = {.msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    while (recvmsg(fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0) {
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        if (cm) {
            struct sock_extended_err e;
            memcpy(&e, CMSG_DATA(cm), sizeof(e));
            if (e.ee_origin == SO_EE_ORIGIN_ZEROCOPY) {
                long n = (long)(e.ee_data - e.ee_info) + 1;
                *done += n;
                if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                    *copied += n;
            }
        }
        mh.msg_controllen = sizeof(cbuf);
    }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s PIECE READ ZC(0|1) SECONDS\n", argv[0]);
        return 2;
    }
    size_t piece = strtoul(argv[1], NULL, 0), rd = strtoul(argv[2], NULL, 0);
    int zc = atoi(argv[3]);
    double dur = atof(argv[4]);
    if (piece == 0 || piece > MSG_SIZE || rd == 0 || rd > MSG_SIZE || dur <= 0) {
        fprintf(stderr, "PIECE and READ: 1..%u bytes; SECONDS > 0\n", MSG_SIZE);
        return 2;
    }
    int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0), res[2];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &al) || pipe(res)) {
        perror("setup");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) { /* the receiver: reads until the sender shuts down */
        int fd = accept(ls, NULL, NULL);
        char *b = malloc(rd);
        if (fd < 0 || !b)
            _exit(1);
        double c0 = cpu_s();
        while (read(fd, b, rd) > 0)
            ;
        double c = cpu_s() - c0;
        _exit(full(res[1], &c, sizeof(c), true) ? 1 : 0);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
        (zc && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)))) {
        perror("connect");
        return 1;
    }
    char *b = malloc(MSG_SIZE);
    if (!b)
        return 1;
    memset(b, 7, MSG_SIZE);
    long sends = 0, done = 0, copied = 0;
    size_t sent = 0;
    double t0 = now_s(), c0 = cpu_s();
    while (now_s() - t0 < dur) {
        for (size_t off = 0; off < MSG_SIZE;) {
            size_t n = MSG_SIZE - off < piece ? MSG_SIZE - off : piece;
            ssize_t w = send(fd, b + off, n, zc ? MSG_ZEROCOPY : 0);
            if (w < 0 && errno == ENOBUFS) { /* too many completions unread */
                reap(fd, &done, &copied);
                continue;
            }
            if (w < 0) {
                perror("send");
                return 1;
            }
            off += (size_t)w;
            sent += (size_t)w;
            sends += zc;
            if (zc)
                reap(fd, &done, &copied);
        }
    }
    double el = now_s() - t0, c = cpu_s() - c0, rc = 0;
    shutdown(fd, SHUT_WR);
    int st = 0;
    if (full(res[0], &rc, sizeof(rc), false) || waitpid(pid, &st, 0) != pid) {
        fprintf(stderr, "the receiver failed\n");
        return 1;
    }
    double mib = (double)sent / (1 << 20);
    printf("piece %zu read %zu zerocopy %d: %.0f MiB/s, CPU per MiB sender %.1f us receiver "
           "%.1f us",
           piece, rd, zc, mib / el, c / mib * 1e6, rc / mib * 1e6);
    if (zc)
        printf(", %ld sends, %ld completed, %ld of them copied by the kernel", sends, done,
               copied);
    printf("\n");
    free(b);
    return 0;
}

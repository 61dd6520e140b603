/* SPDX-License-Identifier: MIT */
/*
 * rrpc-bench: the raw-tcp baseline.  The same exchanges as the library's
 * "echo" and "sink" methods over one plain TCP socket with TCP_NODELAY and
 * no library at all.
 *
 * Wire: each request is a 4-byte little-endian prefix and the payload.  The
 * prefix holds the payload length in bits 0..30; bit 31 set means "sink"
 * (answer with an empty message), clear means "echo" (answer with the same
 * bytes).  Each response is a 4-byte length and its payload.
 *
 * Server: one thread per connection, blocking buffered reads.
 * Client: depth 1 uses blocking sendmsg + buffered recv (the simplest, cheapest
 * ping-pong); deeper pipelines use a non-blocking loop with poll().
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench.h"

#define RAW_SINK 0x80000000u
#define RAW_LEN_MASK 0x7fffffffu
#define RAW_MAX_LEN (64u << 20)
#define RX_CHUNK (256 * 1024)

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A buffered reader, as a competent plain-socket program has one: a single
 * recv() usually brings a whole small frame (header and payload), and large
 * payloads are read straight into their destination. */
#define RD_CAP (64 * 1024)
struct rdbuf {
    uint8_t b[RD_CAP];
    size_t off, len;
};

/* Takes the next @n bytes of the stream into @dst. */
static int rd_take(int fd, struct rdbuf *r, void *dst, size_t n)
{
    uint8_t *d = dst;
    while (n) {
        if (r->off == r->len) {
            r->off = r->len = 0;
            bool direct = n >= RD_CAP / 2;
            ssize_t k = direct ? recv(fd, d, n, MSG_WAITALL) : recv(fd, r->b, RD_CAP, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                return k < 0 ? -errno : -ECONNRESET;
            if (direct) {
                d += k;
                n -= (size_t)k;
                continue;
            }
            r->len = (size_t)k;
        }
        size_t c = r->len - r->off < n ? r->len - r->off : n;
        memcpy(d, r->b + r->off, c);
        d += c;
        r->off += c;
        n -= c;
    }
    return 0;
}

/* Writes a 4-byte prefix and @len bytes at @data, in one writev when it fits. */
static int write_msg(int fd, const uint8_t hdr[4], const uint8_t *data, size_t len)
{
    size_t off = 0, total = 4 + len;
    while (off < total) {
        struct iovec iov[2];
        int n = 0;
        if (off < 4) {
            iov[n].iov_base = (void *)(hdr + off);
            iov[n++].iov_len = 4 - off;
            if (len) {
                iov[n].iov_base = (void *)data;
                iov[n++].iov_len = len;
            }
        } else {
            iov[n].iov_base = (void *)(data + (off - 4));
            iov[n++].iov_len = len - (off - 4);
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        off += (size_t)w;
    }
    return 0;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- server ------------------------------------------------------------------ */

static void *raw_conn_thread(void *arg)
{
    int fd = (int)(intptr_t)arg;
    size_t cap = BENCH_MAX_SIZE;
    uint8_t *buf = malloc(cap);
    struct rdbuf *rd = malloc(sizeof(*rd));
    nodelay(fd);
    if (rd)
        rd->off = rd->len = 0;
    while (buf && rd) {
        uint8_t h[4];
        if (rd_take(fd, rd, h, 4))
            break;
        uint32_t v = get32(h);
        size_t len = v & RAW_LEN_MASK;
        if (len > RAW_MAX_LEN)
            break;
        if (len > cap) {
            uint8_t *nb = realloc(buf, len);
            if (!nb)
                break;
            buf = nb;
            cap = len;
        }
        if (len && rd_take(fd, rd, buf, len))
            break;
        if (v & RAW_SINK) {
            uint8_t z[4] = {0, 0, 0, 0};
            if (write_msg(fd, z, NULL, 0))
                break;
        } else {
            put32(h, (uint32_t)len);
            if (write_msg(fd, h, buf, len))
                break;
        }
    }
    free(buf);
    free(rd);
    close(fd);
    return NULL;
}

static void *raw_accept_thread(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, raw_conn_thread, (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

int raw_server_start(const char *host, int port, int *ret_port, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int r = getaddrinfo(host, ps, &hints, &res);
    if (r || !res) {
        snprintf(err, errlen, "raw-tcp: cannot resolve %s: %s", host, gai_strerror(r));
        return -EINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 16) < 0) {
        r = -errno;
        snprintf(err, errlen, "raw-tcp: listen on %s:%d: %s", host, port, strerror(errno));
        freeaddrinfo(res);
        if (fd >= 0)
            close(fd);
        return r;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    pthread_t t;
    if ((r = pthread_create(&t, NULL, raw_accept_thread, (void *)(intptr_t)fd)) != 0) {
        snprintf(err, errlen, "raw-tcp: pthread_create: %s", strerror(r));
        close(fd);
        return -r;
    }
    pthread_detach(t);
    return 0;
}

/* ---- client ------------------------------------------------------------------- */

struct raw_drv {
    int fd;
    struct rdbuf rd;
    uint8_t *buf;  /* request payload */
    uint8_t *rbuf; /* response payload / scratch */
};

static int raw_rtt(struct raw_drv *d, const struct spec *sp, const struct phase *ph,
                   struct outcome *out)
{
    uint8_t hdr[4];
    put32(hdr, (uint32_t)sp->size | (sp->kind == OP_SINK ? RAW_SINK : 0));
    double total = ph->warm_max_s + ph->dur_s;
    uint64_t t_start = now_ns(), t_rec = 0, t_end = 0;
    long warm = 0;
    bool measuring = false;
    for (;;) {
        uint64_t t0 = now_ns();
        if (!measuring && (warm >= ph->warm_ops || (double)(t0 - t_start) / 1e9 >= ph->warm_max_s)) {
            measuring = true;
            t_rec = t0;
            t_end = t_rec + (uint64_t)(ph->dur_s * 1e9);
        }
        int r = write_msg(d->fd, hdr, d->buf, sp->size);
        uint8_t rh[4] = {0, 0, 0, 0};
        if (!r)
            r = rd_take(d->fd, &d->rd, rh, 4);
        size_t len = get32(rh) & RAW_LEN_MASK;
        if (!r && len > BENCH_MAX_SIZE)
            r = -EPROTO;
        if (!r && len)
            r = rd_take(d->fd, &d->rd, d->rbuf, len);
        if (r) {
            out->status = r;
            snprintf(out->err, sizeof(out->err), "raw-tcp exchange failed: %s", strerror(-r));
            return r;
        }
        uint64_t t = now_ns();
        if (!measuring) {
            warm++;
            continue;
        }
        out->ops++;
        out->bytes += sp->size;
        if (sp->lat)
            samples_add(&out->lat, t - t0);
        progress_tick((double)(t - t_start) / 1e9 / total);
        if (t >= t_end) {
            out->seconds = (double)(t - t_rec) / 1e9;
            return 0;
        }
    }
}

/* @depth requests in flight on the one socket, responses in order. */
static int raw_pipe(struct raw_drv *d, const struct spec *sp, const struct phase *ph,
                    struct outcome *out)
{
    int fd = d->fd, depth = sp->depth;
    uint64_t *ring = calloc((size_t)depth, sizeof(*ring));
    if (!ring)
        return out->status = -ENOMEM;
    uint8_t hdr[4];
    put32(hdr, (uint32_t)sp->size | (sp->kind == OP_SINK ? RAW_SINK : 0));
    size_t msglen = 4 + sp->size;
    int rh = 0, rt = 0, inflight = 0;
    bool sending = false;
    size_t txoff = 0;
    uint8_t rxh[4];
    size_t rxh_got = 0, body_left = 0;
    bool in_body = false;
    double total = ph->warm_max_s + ph->dur_s;
    uint64_t t_start = now_ns(), t_rec = 0, t_end = 0, last_move = t_start;
    long warm = 0;
    bool measuring = false, stop = false;
    int rc = 0;

    while (!(stop && inflight == 0)) {
        uint64_t t = now_ns();
        if (!stop && !measuring && (warm >= ph->warm_ops || (double)(t - t_start) / 1e9 >= ph->warm_max_s)) {
            measuring = true;
            t_rec = t;
            t_end = t_rec + (uint64_t)(ph->dur_s * 1e9);
        } else if (measuring && t >= t_end) {
            measuring = false;
            stop = true;
            out->seconds = (double)(t - t_rec) / 1e9;
        }
        if (measuring)
            progress_tick((double)(t - t_start) / 1e9 / total);
        if (!sending && !stop && inflight < depth) {
            ring[rt] = t;
            rt = (rt + 1) % depth;
            inflight++;
            sending = true;
            txoff = 0;
        }
        bool moved = false;
        if (sending) {
            struct iovec iov[2];
            int n = 0;
            if (txoff < 4) {
                iov[n].iov_base = hdr + txoff;
                iov[n++].iov_len = 4 - txoff;
                if (sp->size) {
                    iov[n].iov_base = d->buf;
                    iov[n++].iov_len = sp->size;
                }
            } else {
                iov[n].iov_base = d->buf + (txoff - 4);
                iov[n++].iov_len = msglen - txoff;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            ssize_t w = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0) {
                moved = true;
                txoff += (size_t)w;
                if (txoff == msglen)
                    sending = false;
            } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                rc = -errno;
                break;
            }
            if (sending == false && inflight < depth && !stop)
                continue; /* keep the pipe full before reading */
        }
        ssize_t nr = inflight ? recv(fd, d->rbuf, RX_CHUNK, MSG_DONTWAIT) : -1;
        if (nr == 0) {
            rc = -ECONNRESET;
            break;
        }
        if (nr < 0 && inflight && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            rc = -errno;
            break;
        }
        for (ssize_t i = 0; i < nr;) {
            if (!in_body) {
                while (rxh_got < 4 && i < nr)
                    rxh[rxh_got++] = d->rbuf[i++];
                if (rxh_got < 4)
                    break;
                rxh_got = 0;
                body_left = get32(rxh) & RAW_LEN_MASK;
                in_body = true;
            }
            size_t take = (size_t)(nr - i) < body_left ? (size_t)(nr - i) : body_left;
            i += (ssize_t)take;
            body_left -= take;
            if (body_left)
                break;
            in_body = false;
            /* One response complete. */
            uint64_t tc = now_ns(), t0 = ring[rh];
            rh = (rh + 1) % depth;
            inflight--;
            if (measuring) {
                out->ops++;
                out->bytes += sp->size;
                if (sp->lat && t0 >= t_rec)
                    samples_add(&out->lat, tc - t0);
            } else if (!t_rec) {
                warm++;
            }
        }
        if (nr > 0)
            moved = true;
        if (moved) {
            last_move = now_ns();
            continue;
        }
        if (now_ns() - last_move > 60ull * 1000000000u) {
            rc = -ETIMEDOUT;
            break;
        }
        struct pollfd p = {.fd = fd, .events = (short)(POLLIN | (sending ? POLLOUT : 0))};
        poll(&p, 1, 100);
    }
    free(ring);
    if (rc) {
        out->status = rc;
        snprintf(out->err, sizeof(out->err), "raw-tcp pipeline failed: %s", strerror(-rc));
    }
    return rc;
}

static int raw_run(struct driver *drv, const struct spec *sp, int n, const struct phase *ph,
                   struct outcome *out)
{
    struct raw_drv *d = drv->priv;
    if (n != 1 || sp->kind == OP_WRITE || sp->kind == OP_READ) {
        out->status = -EOPNOTSUPP;
        snprintf(out->err, sizeof(out->err), "raw-tcp has only echo and sink, one flow");
        return -EOPNOTSUPP;
    }
    return sp->depth == 1 ? raw_rtt(d, sp, ph, out) : raw_pipe(d, sp, ph, out);
}

static void raw_close(struct driver *drv)
{
    struct raw_drv *d = drv->priv;
    if (!d)
        return;
    if (d->fd >= 0)
        close(d->fd);
    free(d->buf);
    free(d->rbuf);
    free(d);
    drv->priv = NULL;
}

int raw_driver_open(struct driver *drv, const char *host, int port, const char *src, char *err,
                    size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int r = getaddrinfo(host, ps, &hints, &res);
    if (r || !res) {
        snprintf(err, errlen, "raw-tcp: cannot resolve %s: %s", host, gai_strerror(r));
        return -EINVAL;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 50; attempt++) { /* the server may still be starting */
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            break;
        if (src) {
            struct addrinfo *sa = NULL;
            struct addrinfo sh = {.ai_family = res->ai_family, .ai_socktype = SOCK_STREAM,
                                  .ai_flags = AI_PASSIVE};
            if (getaddrinfo(src, "0", &sh, &sa) == 0 && sa) {
                if (bind(fd, sa->ai_addr, sa->ai_addrlen) < 0) {
                    snprintf(err, errlen, "raw-tcp: bind to %s: %s", src, strerror(errno));
                    freeaddrinfo(sa);
                    freeaddrinfo(res);
                    close(fd);
                    return -EINVAL;
                }
                freeaddrinfo(sa);
            }
        }
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0)
            break;
        r = errno;
        close(fd);
        fd = -1;
        if (r != ECONNREFUSED)
            break;
        usleep(100000);
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "raw-tcp: connect %s:%d: %s", host, port, strerror(r ? r : errno));
        return -ECONNREFUSED;
    }
    nodelay(fd);
    struct raw_drv *d = calloc(1, sizeof(*d));
    if (d) {
        d->fd = fd;
        d->buf = malloc(BENCH_MAX_SIZE);
        d->rbuf = malloc(BENCH_MAX_SIZE > RX_CHUNK ? BENCH_MAX_SIZE : RX_CHUNK);
    }
    if (!d || !d->buf || !d->rbuf) {
        if (d) {
            free(d->buf);
            free(d->rbuf);
            free(d);
        }
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < BENCH_MAX_SIZE; i++)
        d->buf[i] = (uint8_t)(i * 7);
    drv->name = "raw-tcp";
    drv->onesided = false;
    drv->qos = false;
    drv->priv = d;
    drv->run = raw_run;
    drv->close = raw_close;
    return 0;
}

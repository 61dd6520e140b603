/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tcp_rx: the tcp transport's receive path (libroce_rpc/transport/tcp/:
 * the accept and handshake reader of accept.c, the receive state machine of
 * rx.c fed by chan.c's partial reads, the large-message and region paths)
 * and behind it the core's receive dispatch, through
 * real sockets: a context listens on 127.0.0.1 in this process, the harness
 * connects the sockets of one connection (docs/protocol.md §6: the first
 * socket, which carries control and low_latency, and bulk's and
 * background's own sockets) and writes the fuzzed bytes to them in
 * fuzzer-chosen pieces, running the context's loop after each piece, so a
 * frame arrives split wherever the input says.
 *
 * The contexts (one open, one requiring tickets) live across inputs and are
 * set up by fuzz_core.c: methods, target regions at fixed addresses and
 * keys.  Each input makes a new connection and closes it at the end.
 *
 * Input: byte 0:
 *   bit 0     the server requires a ticket (FUZZ_TICKET_OK)
 *   bit 1     raw: the harness does not do the handshake (HELLO and JOIN are
 *             the input's, or the "join" record's)
 *   bits 2-3  credits the harness grants per class in its HELLO: 1, 4, 64, 1000
 *   bit 4     the harness accepts 1 MiB messages (else 4096)
 *   bit 5     close with a reset (SO_LINGER 0) at the end, instead of a FIN
 * then records, byte c: bits 0-1 the socket of that class (0 and 1 are both
 *   the first socket), bits 2-3 what:
 *   0  write u8 n, then n bytes      1  write u8 k * 256 bytes of the next byte
 *   2  join: send JOIN with the cookie and secret of the HELLO_ACK on
 *      sockets 2 and 3 (classes 2 and 3), unless the HELLO went there
 *   3  shut the socket's sending side (the peer vanishes mid-message)
 * bit 4: do not run the loop after this record (the next piece arrives with
 * this one).  At most 2 MiB are written per input.
 *
 * Checks: never crash; every frame the server sends has a valid header
 * within what the harness accepts, and keeps to its socket's class (ERROR
 * aside; in raw inputs the first frame on a socket sets its class; the first
 * socket carries control and low_latency);
 * when the harness has closed its sockets, the server drops the connection
 * and every socket of it (no connection left, no fd left open).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "fuzz_core.h"

#define NCH RRPCI_MAX_CLASSES
#define WRITE_CAP (2u << 20)

struct server {
    rrpc_ctx *ctx;
    rrpc_listener *l;
    int port;
};

/* One class socket, and the frames the server sends on it. */
struct chan {
    int fd;
    int cls;   /* the class the server uses on it; -1: not known yet */
    bool dead; /* the server closed it */
    uint8_t hdr[RRPCI_HDR_SIZE];
    size_t hgot;
    bool in_payload;
    struct rrpci_hdr h;
    uint64_t left;
    uint8_t pay[RRPCI_HELLO_SIZE + 16]; /* a HELLO_ACK: the record and the attach secret */
    size_t pgot;
    size_t sent;         /* bytes the harness wrote on this socket */
    uint8_t sent_version; /* the version byte of the first header it wrote */
};

static struct server servers[2];
static struct chan chans[NCH];
static uint32_t accept_max; /* the largest frame the server may send us */
static bool have_cookie, joined;
static uint64_t cookie;
static uint8_t secret[16];
static int hello_sock; /* where the HELLO_ACK came */
static int base_fds;

/* The fds the library could hold: pipes are not counted, since the library
 * makes none, and the sanitizer's symbolizer opens a pair of them the first
 * time libFuzzer prints a new function's name (in the middle of a run). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len > 0 && (size_t)len >= 5 && strncmp(target, "pipe:", 5) == 0)
            continue;
        n++;
    }
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static void server_up(struct server *s, bool ticket)
{
    s->ctx = fuzz_core_ctx(ticket);
    if (rrpc_listen(s->ctx, "tcp://127.0.0.1:0", NULL, NULL, &s->l))
        abort();
    s->port = rrpc_listener_port(s->l);
    if (s->port <= 0)
        abort();
}

static void frame_done(int i)
{
    struct chan *ch = &chans[i];
    /* A socket's class is set by the first frame on it (raw inputs may
     * send the HELLO on any socket); the server keeps to it. */
    if (ch->h.type != RRPCI_T_ERROR) {
        if (ch->cls < 0)
            ch->cls = ch->h.cls;
        bool first = ch->cls == RRPCI_CLS_CONTROL || ch->cls == RRPCI_CLS_LOW_LATENCY;
        FUZZ_CHECK(first ? ch->h.cls <= RRPCI_CLS_LOW_LATENCY : ch->h.cls == ch->cls);
    }
    if (ch->h.type == RRPCI_T_HELLO_ACK && ch->h.len == sizeof(ch->pay) && !have_cookie) {
        struct rrpci_hello hello;
        if (rrpci_hello_decode(ch->pay, ch->h.len, &hello) == 0) {
            cookie = hello.cookie;
            memcpy(secret, ch->pay + RRPCI_HELLO_SIZE, sizeof(secret));
            have_cookie = true;
            hello_sock = i;
        }
    }
    ch->in_payload = false;
    ch->hgot = 0;
}

/* The server's bytes on socket @i: whole, valid frames. */
static void from_server(int i, const uint8_t *p, size_t n)
{
    struct chan *ch = &chans[i];
    while (n) {
        if (!ch->in_payload) {
            size_t k = RRPCI_HDR_SIZE - ch->hgot < n ? RRPCI_HDR_SIZE - ch->hgot : n;
            memcpy(ch->hdr + ch->hgot, p, k);
            ch->hgot += k;
            p += k;
            n -= k;
            if (ch->hgot < RRPCI_HDR_SIZE)
                break;
            const char *why = NULL;
            int dr = rrpci_hdr_decode(ch->hdr, accept_max, &ch->h, &why);
            if (dr == RRPC_E_VERSION && ch->sent > 4 && ch->hdr[4] == ch->sent_version) {
                /* A peer of another protocol version is refused in its own
                 * version's header (tcp/accept.c), so it can read why: an
                 * ERROR, and nothing else, may come that way. */
                uint8_t h2[RRPCI_HDR_SIZE];
                memcpy(h2, ch->hdr, sizeof(h2));
                h2[4] = RRPCI_PROTO_VERSION;
                dr = rrpci_hdr_decode(h2, accept_max, &ch->h, &why);
                FUZZ_CHECK(dr != 0 || ch->h.type == RRPCI_T_ERROR);
            }
            if (dr != 0) {
                fprintf(stderr, "fuzz_tcp_rx: the server sent a bad frame: %s\n", why);
                FUZZ_CHECK(!"a valid frame from the server");
            }
            ch->in_payload = true;
            ch->left = ch->h.len;
            ch->pgot = 0;
        }
        size_t k = ch->left < n ? (size_t)ch->left : n;
        if (ch->pgot < sizeof(ch->pay)) {
            size_t c = sizeof(ch->pay) - ch->pgot < k ? sizeof(ch->pay) - ch->pgot : k;
            memcpy(ch->pay + ch->pgot, p, c);
            ch->pgot += c;
        }
        ch->left -= k;
        p += k;
        n -= k;
        if (ch->left == 0)
            frame_done(i);
    }
}

static void drain(void)
{
    static uint8_t buf[65536];
    for (int i = 0; i < NCH; i++) {
        if (chans[i].fd < 0 || i == 1)
            continue; /* socket 1 is the first socket: read as socket 0 */
        for (;;) {
            ssize_t r = recv(chans[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (r <= 0)
                break;
            from_server(i, buf, (size_t)r);
        }
    }
}

/* Runs the loop until it has nothing to do, reading what the server sends. */
static void pump(rrpc_ctx *ctx)
{
    struct pollfd p = {.fd = rrpc_ctx_fd(ctx), .events = POLLIN};
    for (int i = 0; i < 1000; i++) {
        rrpc_ctx_progress(ctx, 0);
        drain();
        if (poll(&p, 1, 0) <= 0 && rrpci_list_empty(&ctx->credit_dirty))
            return;
    }
}

/* Runs the loop, waiting up to @ms for something to happen. */
static void pump_wait(rrpc_ctx *ctx, int ms)
{
    struct pollfd p = {.fd = rrpc_ctx_fd(ctx), .events = POLLIN};
    poll(&p, 1, ms);
    pump(ctx);
}

static size_t written;

static void put(rrpc_ctx *ctx, int i, const uint8_t *p, size_t n)
{
    struct chan *ch = &chans[i];
    if (n > WRITE_CAP - written)
        n = WRITE_CAP - written;
    written += n;
    struct chan *rd = &chans[i == 1 ? 0 : i]; /* where the server's answer is read */
    if (rd->sent <= 4 && rd->sent + n > 4)
        rd->sent_version = p[4 - rd->sent];
    rd->sent += n;
    int stalls = 0;
    while (n && !ch->dead) {
        ssize_t w = send(ch->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (++stalls > 200)
                ch->dead = true; /* the server stopped reading: leave it */
            else
                pump_wait(ctx, 5);
        } else {
            ch->dead = true; /* closed by the server */
        }
    }
}

static void put_frame(rrpc_ctx *ctx, int i, int cls, uint8_t type, const uint8_t *payload,
                      uint32_t len)
{
    uint8_t f[RRPCI_HDR_SIZE + RRPCI_HELLO_SIZE];
    struct rrpci_hdr h = {.version = RRPCI_PROTO_VERSION, .type = type, .cls = (uint8_t)cls,
                          .len = len};
    rrpci_hdr_encode(&h, f);
    memcpy(f + RRPCI_HDR_SIZE, payload, len);
    put(ctx, i, f, RRPCI_HDR_SIZE + len);
}

static void join(rrpc_ctx *ctx)
{
    if (!have_cookie || joined)
        return;
    joined = true;
    uint8_t jb[24];
    rrpci_put64(jb, cookie);
    memcpy(jb + 8, secret, sizeof(secret));
    /* bulk and background on their sockets, unless the HELLO went there. */
    for (int i = RRPCI_CLS_BULK; i < NCH; i++)
        if (i != hello_sock)
            put_frame(ctx, i, i, RRPCI_T_JOIN, jb, sizeof(jb));
    pump(ctx);
}

/* connect(2) that a signal cannot fail: after EINTR the connection goes on
 * in the background, so wait for it instead of giving up. */
static int connect_loopback(int fd, const struct sockaddr_in *sa)
{
    if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
        return 0;
    if (errno != EINTR)
        return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r;
    do
        r = poll(&p, 1, 10000);
    while (r < 0 && errno == EINTR);
    int err = 0;
    socklen_t el = sizeof(err);
    if (r != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
        errno = r == 0 ? ETIMEDOUT : err ? err : errno;
        return -1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static const uint16_t grants[4] = {1, 4, 64, 1000};
    if (!servers[0].ctx) {
        server_up(&servers[0], false);
        server_up(&servers[1], true);
        /* the contexts' fds (made on first use) are theirs, not a leak */
        FUZZ_CHECK(rrpc_ctx_fd(servers[0].ctx) >= 0 && rrpc_ctx_fd(servers[1].ctx) >= 0);
        base_fds = count_fds();
    }
    if (n < 1)
        return 0;
    uint8_t mode = d[0];
    struct server *s = &servers[mode & 1];
    rrpc_ctx *ctx = s->ctx;
    bool raw = mode & 2;
    accept_max = raw ? rrpci_ctx_max_msg(ctx) : (mode & 16) ? 1u << 20 : 4096;
    have_cookie = joined = false;
    written = 0;
    memset(chans, 0, sizeof(chans));
    for (int k = 0; k < NCH; k++)
        chans[k].cls = raw ? -1 : k;

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int k = 0; k < NCH; k++) {
        if (k == 1) {
            chans[1].fd = chans[0].fd; /* low_latency travels on the first socket */
            continue;
        }
        chans[k].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (chans[k].fd < 0 || connect_loopback(chans[k].fd, &sa)) {
            perror("fuzz_tcp_rx: connect to the server");
            abort();
        }
        int one = 1;
        setsockopt(chans[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fcntl(chans[k].fd, F_SETFL, O_NONBLOCK);
    }
    pump(ctx);
    if (!raw) {
        struct rrpci_hello hello = {.version = RRPCI_PROTO_VERSION,
                                    .nclasses = RRPCI_MAX_CLASSES,
                                    .max_msg = accept_max};
        for (int k = 0; k < NCH; k++)
            hello.credits[k] = grants[(mode >> 2) & 3];
        uint8_t hb[RRPCI_HELLO_SIZE];
        rrpci_hello_encode(&hello, hb);
        put_frame(ctx, 0, RRPCI_CLS_CONTROL, RRPCI_T_HELLO, hb, sizeof(hb));
        for (int tries = 0; tries < 200 && !have_cookie; tries++)
            pump_wait(ctx, 1);
        FUZZ_CHECK(have_cookie);
        join(ctx);
    }

    size_t i = 1;
    while (i < n && written < WRITE_CAP) {
        uint8_t c = d[i++];
        int k = c & 3;
        switch ((c >> 2) & 3) {
        case 0: {
            size_t len = i < n ? d[i] : 0;
            i++;
            if (i > n)
                break;
            len = len < n - i ? len : n - i;
            put(ctx, k, d + i, len);
            i += len;
            break;
        }
        case 1: {
            if (i + 2 > n) {
                i = n;
                break;
            }
            static uint8_t fill[65536];
            size_t len = (size_t)d[i] * 256;
            memset(fill, d[i + 1], len);
            i += 2;
            put(ctx, k, fill, len);
            break;
        }
        case 2:
            join(ctx);
            break;
        case 3:
            shutdown(chans[k].fd, SHUT_WR);
            chans[k].dead = true;
            break;
        }
        if (!(c & 16))
            pump(ctx);
    }
    pump(ctx);

    /* The end: the server must let go of everything. */
    for (int k = 0; k < NCH; k++) {
        if (mode & 32) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(chans[k].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        }
        if (k != 1)
            close(chans[k].fd);
        chans[k].fd = -1;
    }
    fuzz_core_end_input();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pump(ctx);
        if (rrpci_list_empty(&ctx->conns) && count_fds() == base_fds)
            break;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 3) {
            fprintf(stderr, "fuzz_tcp_rx: %s, %d fds (%d before) 3 s after the peer left\n",
                    rrpci_list_empty(&ctx->conns) ? "no connection" : "a connection is left",
                    count_fds(), base_fds);
            FUZZ_CHECK(!"the server lets go of a connection its peer closed");
        }
        pump_wait(ctx, 1);
    }
    return 0;
}

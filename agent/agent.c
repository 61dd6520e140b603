/* SPDX-License-Identifier: MIT */
/*
 * rrpc-agent: the host agent of encrypted RoCE (issue #30).  It holds
 * CAP_NET_ADMIN so that applications need none: with the agent of each peer
 * host it agrees fresh ESP keys over TLS 1.3 and installs the host pair in
 * the kernel (agent/xfrm.h), rekeys it before its lifetime ends, and
 * removes it when it stops.
 *
 *   rrpc-agent --local ADDR --listen HOST:PORT --cert F --key F --ca F
 *              [--peer ADDR@HOST:PORT]... [--lifetime S] [--port-file F] [-v]
 *              [--broker HOST:PORT]... [--broker-ca F]
 *
 * With --broker it reports its agreed pairs to rrpcd (broker_report.h), so
 * rrpcd hands the tickets of services that require ESP only to clients
 * whose host has a pair with the server's.
 *
 * Pairing (docs/deployment.md, "Encrypted RoCE"): of two hosts, the one
 * with the lower address initiates, to the peer's agent, over TLS 1.3 with
 * both certificates checked against the CA and each holding its host's
 * data address as an IP SAN.  The initiator sends PAIR {its address, the
 * peer's, the SPI it wants for its inbound SA, the lifetime}; the responder
 * picks its inbound SPI, derives the keys, installs its view and answers
 * OK {its SPI} (or ERR {code, reason}); then the initiator installs its
 * view.  Keys: SSL_export_keying_material(label "EXPORTER-roce-rpc-esp-v1",
 * context = both SPIs and both addresses) gives 40 bytes: the initiator ->
 * responder key and salt, then the other direction's.  They exist only in
 * memory, are wiped after use, and an exchange's keys are fresh for every
 * exchange (its own TLS session).  A rekey is the same exchange with new
 * SPIs at 80 % of the lifetime; the new SAs are added beside the old ones
 * (the policies pick the newest), and the old ones go 5 s later.  The
 * agent's own sockets bypass IPsec (a per-socket policy), so an expired SA
 * cannot lock the agents out.  Where both addresses are this kernel's (the
 * test VM), the pair is one set of kernel objects: the initiator installs
 * it, the responder only agrees.
 *
 * Bounds against a hostile peer at the port: one exchange at a time, 5 s
 * for all of it (TLS handshake included), fixed-size messages, 256 peers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <linux/xfrm.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "agent_metrics.h"
#ifdef RRPC_AGENT_BROKER
#include "broker_report.h"
#endif
#include "tls_err.h"
#include "wire.h"
#include "xfrm.h"
#ifdef RRPC_HAVE_MHD
#include "util/metrics_http.h"
#endif

#define AG_DEADLINE_S 5
#define AG_GRACE_S 5 /* the old SAs stay this long after a rekey */
#define AG_MAX_PEERS 256
#define AG_LABEL "EXPORTER-roce-rpc-esp-v1"
#define AG_REQID 0x7273

struct peer {
    int family;
    uint8_t addr[16];
    char text[INET6_ADDRSTRLEN];
    char endpoint[300]; /* HOST:PORT of its agent; "" when it initiates */
    bool initiator;     /* we initiate (the lower address) */
    bool loopback;      /* its address is this kernel's too */
    bool installed;     /* a pair of ours is in the kernel */
    bool agreed;        /* keys agreed (loopback responder: the other agent installed) */
    time_t expires;     /* the current SAs' hard expiry; 0: none */
    struct rrpc_xfrm_pair cur, old;
    bool old_pending;
    /* Loopback responder: the view before the last rekey (@cur is the new
     * one), whose SAs still count while the initiator installs the new. */
    struct rrpc_xfrm_pair lb_prev;
    bool lb_has_prev;
    time_t old_del_at, rekey_at, retry_at;
    unsigned rekeys;
};

static struct {
    int family;
    uint8_t local[16];
    char local_text[INET6_ADDRSTRLEN];
    unsigned lifetime;
    SSL_CTX *ctx;
    struct peer peers[AG_MAX_PEERS];
    int npeers;
    bool verbose;
    uint64_t pairings, failures[AG_FAIL_N]; /* for /metrics */
} g;

/* What /metrics reads (on the HTTP server's thread): a copy of the peers and
 * counters, published by the main loop before each wait (publish()). */
static struct {
    pthread_mutex_t lock;
    struct peer peers[AG_MAX_PEERS];
    int npeers;
    uint64_t pairings, failures[AG_FAIL_N];
} snap = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void failed(enum ag_fail r)
{
    g.failures[r]++;
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    char ts[32];
    time_t t = time(NULL);
    strftime(ts, sizeof(ts), "%H:%M:%S", localtime(&t));
    fprintf(stderr, "rrpc-agent %s: ", ts);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void put32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static int parse_addr(const char *text, int *family, uint8_t out[16])
{
    memset(out, 0, 16);
    if (inet_pton(AF_INET, text, out) == 1)
        *family = AF_INET;
    else if (inet_pton(AF_INET6, text, out) == 1)
        *family = AF_INET6;
    else
        return -1;
    return 0;
}

/* Whether @addr is one of this kernel's addresses (a bind to it works). */
static bool is_local(int family, const uint8_t addr[16])
{
    int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, addr, 4);
        sl = sizeof(*s);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, addr, 16);
        sl = sizeof(*s);
    }
    bool ok = bind(fd, (struct sockaddr *)&ss, sl) == 0;
    close(fd);
    return ok;
}

/* The agent's own sockets bypass IPsec: its TLS carries its own protection,
 * and an expired SA must not cut the agents off from each other. */
static int bypass(int fd, int family)
{
    struct xfrm_userpolicy_info pol;
    memset(&pol, 0, sizeof(pol));
    pol.action = XFRM_POLICY_ALLOW;
    pol.sel.family = (uint16_t)family;
    pol.lft.soft_byte_limit = pol.lft.hard_byte_limit = XFRM_INF;
    pol.lft.soft_packet_limit = pol.lft.hard_packet_limit = XFRM_INF;
    int lvl = family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
    int opt = family == AF_INET ? IP_XFRM_POLICY : IPV6_XFRM_POLICY;
    for (int dir = XFRM_POLICY_IN; dir <= XFRM_POLICY_OUT; dir++) {
        pol.dir = (uint8_t)dir;
        if (setsockopt(fd, lvl, opt, &pol, sizeof(pol)) < 0)
            return -errno;
    }
    return 0;
}

static uint64_t g_deadline_ms; /* the exchange under way must end by then (CLOCK_MONOTONIC) */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Starts an exchange on @fd: AG_DEADLINE_S for all of it, TLS handshake
 * included, whatever the peer trickles (the socket is non-blocking and every
 * wait is for what is left). */
static void set_deadline(int fd)
{
    g_deadline_ms = mono_ms() + AG_DEADLINE_S * 1000u;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Waits for @events on @fd until the exchange's deadline: 0, or -1 (late). */
static int wait_fd(int fd, short events)
{
    int64_t left = (int64_t)g_deadline_ms - (int64_t)mono_ms();
    struct pollfd p = {.fd = fd, .events = events};
    return left > 0 && poll(&p, 1, (int)left) > 0 ? 0 : -1;
}

enum ssl_op { OP_ACCEPT, OP_CONNECT, OP_READ, OP_WRITE };

/* One TLS operation, retried on the non-blocking socket until it is done,
 * fails, or the exchange's deadline passes: > 0, or -1. */
static int ssl_step(SSL *ssl, enum ssl_op op, void *buf, int n)
{
    for (;;) {
        int r = op == OP_ACCEPT    ? SSL_accept(ssl)
                : op == OP_CONNECT ? SSL_connect(ssl)
                : op == OP_READ    ? SSL_read(ssl, buf, n)
                                   : SSL_write(ssl, buf, n);
        if (r > 0)
            return r;
        int e = SSL_get_error(ssl, r);
        short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!ev || wait_fd(SSL_get_fd(ssl), ev))
            return -1;
    }
}

/* Reads or writes exactly @n bytes before the exchange's deadline. */
static int ssl_io(SSL *ssl, void *buf, int n, bool wr)
{
    int done = 0;
    while (done < n) {
        int r = ssl_step(ssl, wr ? OP_WRITE : OP_READ, (uint8_t *)buf + done, n - done);
        if (r <= 0)
            return -1;
        done += r;
    }
    return 0;
}

/* The certificate of the other end names @addr as an IP SAN. */
static bool cert_names(SSL *ssl, const char *addr)
{
    X509 *c = SSL_get1_peer_certificate(ssl);
    if (!c)
        return false;
    bool ok = X509_check_ip_asc(c, addr, 0) == 1;
    X509_free(c);
    return ok;
}

/* Both ends' keys from the TLS session: 40 bytes, initiator -> responder first. */
static int derive(SSL *ssl, int family, const uint8_t ai[16], const uint8_t ar[16], uint32_t spi_i,
                  uint32_t spi_r, uint8_t km[2 * RRPC_XFRM_KEY_BYTES])
{
    uint8_t ctx[8 + 32 + 1];
    put32(ctx, spi_i);
    put32(ctx + 4, spi_r);
    memcpy(ctx + 8, ai, 16);
    memcpy(ctx + 24, ar, 16);
    ctx[40] = (uint8_t)(family == AF_INET ? 4 : 6);
    return SSL_export_keying_material(ssl, km, 2 * RRPC_XFRM_KEY_BYTES, AG_LABEL,
                                      sizeof(AG_LABEL) - 1, ctx, sizeof(ctx), 1) == 1
               ? 0
               : -1;
}

static uint32_t random_spi(uint32_t not)
{
    uint32_t s = 0;
    while (s < 0x100 || s == not) {
        if (getrandom(&s, sizeof(s), 0) != sizeof(s))
            s = (uint32_t)rand();
    }
    return s;
}

/* Installs @pr's new keys: the whole pair the first time, the SAs alone on
 * a rekey (the old SAs then go after AG_GRACE_S).  @agree_only: the pair is
 * this kernel's once, and the other agent installs it. */
static int install(struct peer *pr, const struct rrpc_xfrm_pair *np, bool agree_only, char *why,
                   size_t len)
{
    if (agree_only) {
        /* The other agent installs these SAs in this same kernel, after our
         * answer: until they are there the query socket asks the kernel
         * (lb_in_kernel) rather than answering yes. */
        if (pr->agreed) {
            pr->lb_prev = pr->cur;
            pr->lb_has_prev = true;
        }
        pr->cur = *np;
        explicit_bzero(pr->cur.key_out, sizeof(pr->cur.key_out));
        explicit_bzero(pr->cur.key_in, sizeof(pr->cur.key_in));
        pr->agreed = true;
        pr->expires = np->hard_s ? time(NULL) + (time_t)np->hard_s : 0;
        return 0;
    }
    int rc = pr->installed ? rrpc_xfrm_sas_add(np, why, len) : rrpc_xfrm_pair_add(np, why, len);
    if (rc)
        return rc;
    if (pr->installed) {
        if (pr->old_pending) /* a rekey before the last one's grace ended */
            rrpc_xfrm_sas_del(&pr->old);
        pr->old = pr->cur;
        pr->old_pending = true;
        pr->old_del_at = time(NULL) + AG_GRACE_S;
        pr->rekeys++;
    }
    pr->cur = *np;
    pr->installed = pr->agreed = true;
    pr->expires = np->hard_s ? time(NULL) + (time_t)np->hard_s : 0;
    explicit_bzero(pr->cur.key_out, sizeof(pr->cur.key_out));
    explicit_bzero(pr->cur.key_in, sizeof(pr->cur.key_in));
    return 0;
}

static struct peer *find_peer(int family, const uint8_t addr[16])
{
    for (int i = 0; i < g.npeers; i++)
        if (g.peers[i].family == family && !memcmp(g.peers[i].addr, addr, 16))
            return &g.peers[i];
    return NULL;
}

static struct peer *add_peer(int family, const uint8_t addr[16])
{
    if (g.npeers == AG_MAX_PEERS)
        return NULL;
    struct peer *pr = &g.peers[g.npeers++];
    memset(pr, 0, sizeof(*pr));
    pr->family = family;
    memcpy(pr->addr, addr, 16);
    inet_ntop(family, addr, pr->text, sizeof(pr->text));
    pr->initiator = memcmp(g.local, addr, 16) < 0;
    pr->loopback = is_local(family, addr);
    return pr;
}

/* ---- responder ------------------------------------------------------------------ */

static void reply(SSL *ssl, int type, uint32_t spi, int32_t code, const char *reason)
{
    uint8_t rep[AG_REP_SIZE];
    ag_reply_build(type, spi, code, reason, rep);
    ssl_io(ssl, rep, sizeof(rep), true);
}

static void serve_one(int lfd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    set_deadline(fd);
    char from[INET6_ADDRSTRLEN] = "?";
    uint8_t from_addr[16] = {0};
    if (ss.ss_family == AF_INET) {
        memcpy(from_addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(from_addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    }
    inet_ntop(ss.ss_family, from_addr, from, sizeof(from));
    SSL *ssl = SSL_new(g.ctx);
    if (!ssl) {
        close(fd);
        return;
    }
    SSL_set_fd(ssl, fd);
    uint8_t req[AG_REQ_SIZE];
    char why[400] = "";
    if (ssl_step(ssl, OP_ACCEPT, NULL, 0) != 1) {
        logf_("refused %s: TLS handshake: %s", from, ag_tls_err());
        failed(AG_FAIL_TLS);
        goto out;
    }
    if (ssl_io(ssl, req, sizeof(req), false)) {
        logf_("refused %s: no PAIR request within %d s", from, AG_DEADLINE_S);
        failed(AG_FAIL_TIMEOUT);
        goto out;
    }
    struct ag_pair_msg pm;
    if (ag_pair_parse(req, &pm)) {
        logf_("refused %s: not a version %d PAIR request", from, AG_VERSION);
        reply(ssl, AG_T_ERR, 0, -EPROTO, "not a PAIR request of agent protocol version 1");
        failed(AG_FAIL_PROTOCOL);
        goto out;
    }
    int family = pm.family;
    const uint8_t *ai = pm.initiator, *ar = pm.responder;
    uint32_t spi_i = pm.spi_i, lifetime = pm.lifetime;
    char ai_text[INET6_ADDRSTRLEN] = "?";
    inet_ntop(family, ai, ai_text, sizeof(ai_text));
    const char *bad = NULL;
    enum ag_fail why_bad = AG_FAIL_REFUSED;
    if (family != g.family || memcmp(ar, g.local, 16))
        bad = "the pair is not for this host's address";
    else if (!cert_names(ssl, ai_text))
        bad = "the initiator's certificate does not name its address (IP SAN)",
        why_bad = AG_FAIL_CERTIFICATE;
    else if (memcmp(g.local, ai, 16) <= 0)
        bad = "the lower address initiates: this host does, not yours";
    else if (spi_i < AG_MIN_SPI)
        bad = "SPI below 0x100", why_bad = AG_FAIL_PROTOCOL;
    else if (lifetime && lifetime < 5)
        bad = "lifetime below 5 s", why_bad = AG_FAIL_PROTOCOL;
    if (bad) {
        logf_("refused %s (claims %s): %s", from, ai_text, bad);
        reply(ssl, AG_T_ERR, 0, -EACCES, bad);
        failed(why_bad);
        goto out;
    }
    struct peer *pr = find_peer(family, ai);
    if (!pr && !(pr = add_peer(family, ai))) {
        reply(ssl, AG_T_ERR, 0, -ENOSPC, "this agent has its 256 peers");
        failed(AG_FAIL_REFUSED);
        goto out;
    }
    uint32_t spi_r = random_spi(spi_i);
    if (pr->installed && (spi_r == pr->cur.spi_in || spi_r == pr->cur.spi_out))
        spi_r = random_spi(spi_i);
    uint8_t km[2 * RRPC_XFRM_KEY_BYTES];
    if (derive(ssl, family, ai, ar, spi_i, spi_r, km)) {
        reply(ssl, AG_T_ERR, 0, -EIO, "key derivation failed");
        failed(AG_FAIL_KEYS);
        goto out;
    }
    struct rrpc_xfrm_pair np = {.family = family, .spi_out = spi_i, .spi_in = spi_r,
                                .reqid = AG_REQID, .hard_s = lifetime,
                                .soft_s = rrpc_xfrm_soft_s(lifetime), .loopback = pr->loopback};
    memcpy(np.local, g.local, 16);
    memcpy(np.peer, ai, 16);
    memcpy(np.key_out, km + RRPC_XFRM_KEY_BYTES, RRPC_XFRM_KEY_BYTES);
    memcpy(np.key_in, km, RRPC_XFRM_KEY_BYTES);
    explicit_bzero(km, sizeof(km));
    int rc = install(pr, &np, pr->loopback, why, sizeof(why));
    explicit_bzero(&np, sizeof(np));
    if (rc) {
        logf_("pairing with %s failed: %s", ai_text, why);
        reply(ssl, AG_T_ERR, 0, rc, why);
        failed(AG_FAIL_INSTALL);
        goto out;
    }
    reply(ssl, AG_T_OK, spi_r, 0, NULL);
    g.pairings++;
    logf_("paired with %s as responder (spi in 0x%x, out 0x%x%s)", ai_text, spi_r, spi_i,
          pr->loopback ? "; both addresses are this kernel's: the initiator installs" : "");
out:
    SSL_shutdown(ssl);
    SSL_free(ssl);
    close(fd);
}

/* ---- initiator ------------------------------------------------------------------ */

static int dial(const char *endpoint)
{
    char host[256], port[16];
    const char *c = strrchr(endpoint, ':');
    if (!c || c == endpoint || (size_t)(c - endpoint) >= sizeof(host) || strlen(c + 1) >= sizeof(port))
        return -EINVAL;
    memcpy(host, endpoint, (size_t)(c - endpoint));
    host[c - endpoint] = 0;
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    snprintf(port, sizeof(port), "%s", c + 1);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) || !ai)
        return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    if (!rc && (rc = bypass(fd, ai->ai_family)) == 0) {
        set_deadline(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            int err = 0;
            socklen_t el = sizeof(err);
            if (errno != EINPROGRESS)
                rc = -errno;
            else if (wait_fd(fd, POLLOUT))
                rc = -ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)
                rc = err ? -err : -errno;
        }
    }
    freeaddrinfo(ai);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    return fd;
}

/* One PAIR exchange with @pr (first pairing or rekey). */
static int initiate(struct peer *pr)
{
    char why[400] = "";
    int fd = dial(pr->endpoint);
    if (fd < 0) {
        logf_("cannot reach the agent of %s at %s: %s", pr->text, pr->endpoint, strerror(-fd));
        failed(AG_FAIL_UNREACHABLE);
        return fd;
    }
    int rc = -EPROTO;
    SSL *ssl = SSL_new(g.ctx);
    if (!ssl) {
        close(fd);
        return -ENOMEM;
    }
    SSL_set_fd(ssl, fd);
    uint8_t req[AG_REQ_SIZE], rep[AG_REP_SIZE];
    if (ssl_step(ssl, OP_CONNECT, NULL, 0) != 1) {
        logf_("TLS with the agent of %s: %s", pr->text, ag_tls_err());
        failed(AG_FAIL_TLS);
        goto out;
    }
    if (!cert_names(ssl, pr->text)) {
        logf_("the agent at %s does not hold a certificate for %s (IP SAN): not pairing",
              pr->endpoint, pr->text);
        rc = -EACCES;
        failed(AG_FAIL_CERTIFICATE);
        goto out;
    }
    uint32_t spi_i = random_spi(0);
    if (pr->installed && (spi_i == pr->cur.spi_in || spi_i == pr->cur.spi_out))
        spi_i = random_spi(pr->cur.spi_in);
    struct ag_pair_msg pm = {.family = g.family, .spi_i = spi_i, .lifetime = g.lifetime};
    memcpy(pm.initiator, g.local, 16);
    memcpy(pm.responder, pr->addr, 16);
    ag_pair_build(&pm, req);
    if (ssl_io(ssl, req, sizeof(req), true) || ssl_io(ssl, rep, sizeof(rep), false)) {
        logf_("pairing with %s: no answer within %d s: %s", pr->text, AG_DEADLINE_S,
              ag_tls_err());
        failed(AG_FAIL_TIMEOUT);
        goto out;
    }
    struct ag_reply_msg rm;
    if (ag_reply_parse(rep, &rm)) {
        logf_("pairing with %s: the answer is not an OK or ERR of agent protocol version %d "
              "(or its SPI is below 0x100)", pr->text, AG_VERSION);
        failed(AG_FAIL_PROTOCOL);
        goto out;
    }
    if (rm.type == AG_T_ERR) {
        int32_t code = rm.code;
        logf_("the agent of %s refused to pair: %s", pr->text, rm.reason);
        rc = code < 0 && code > -4096 ? code : -EACCES;
        failed(AG_FAIL_REFUSED);
        goto out;
    }
    uint32_t spi_r = rm.spi;
    if (spi_r == spi_i) {
        logf_("pairing with %s: the answer's SPI 0x%x is invalid", pr->text, spi_r);
        failed(AG_FAIL_PROTOCOL);
        goto out;
    }
    uint8_t km[2 * RRPC_XFRM_KEY_BYTES];
    if (derive(ssl, g.family, g.local, pr->addr, spi_i, spi_r, km)) {
        logf_("pairing with %s: key derivation failed", pr->text);
        failed(AG_FAIL_KEYS);
        goto out;
    }
    struct rrpc_xfrm_pair np = {.family = g.family, .spi_out = spi_r, .spi_in = spi_i,
                                .reqid = AG_REQID, .hard_s = g.lifetime,
                                .soft_s = rrpc_xfrm_soft_s(g.lifetime), .loopback = pr->loopback};
    memcpy(np.local, g.local, 16);
    memcpy(np.peer, pr->addr, 16);
    memcpy(np.key_out, km, RRPC_XFRM_KEY_BYTES);
    memcpy(np.key_in, km + RRPC_XFRM_KEY_BYTES, RRPC_XFRM_KEY_BYTES);
    explicit_bzero(km, sizeof(km));
    bool rekey = pr->installed;
    rc = install(pr, &np, false, why, sizeof(why));
    explicit_bzero(&np, sizeof(np));
    if (rc) {
        logf_("pairing with %s: installing: %s", pr->text, why);
        failed(AG_FAIL_INSTALL);
        goto out;
    }
    g.pairings++;
    logf_("%s with %s as initiator (spi out 0x%x, in 0x%x%s)", rekey ? "rekeyed" : "paired",
          pr->text, spi_r, spi_i, pr->loopback ? "; both addresses are this kernel's" : "");
out:
    SSL_shutdown(ssl);
    SSL_free(ssl);
    close(fd);
    return rc;
}

/* ---- the local query socket ------------------------------------------------------ */

/* A UNIX seqpacket socket on which local processes (the library, with
 * RRPC_REQUIRE_ESP set) ask whether this host has an ESP pair with an
 * address: "PAIR? ADDR" -> "yes EXPIRES_IN_S" (0: no expiry) or "no REASON".
 * Read-only; one request per connection, answered at once. */
static int query_listen(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    unlink(path);
    mode_t old = umask(0111); /* any local user may ask: it learns only whether a pair is up */
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ? -errno : 0;
    umask(old);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

/* Both SAs of @p are in the kernel (a loopback pair the other agent installs). */
static bool lb_in_kernel(const struct rrpc_xfrm_pair *p)
{
    struct rrpc_xfrm_sa_stats st;
    return rrpc_xfrm_sa_stats(p, true, &st) == 0 && rrpc_xfrm_sa_stats(p, false, &st) == 0;
}

static void query_answer(int qfd)
{
    int fd = accept4(qfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char req[80], rep[160];
    ssize_t n = poll(&p, 1, 200) > 0 ? recv(fd, req, sizeof(req) - 1, 0) : -1;
    if (n <= 0) {
        close(fd);
        return;
    }
    req[n] = 0;
    int fam;
    uint8_t addr[16];
    struct peer *pr = NULL;
    if (ag_query_parse(req, (size_t)n, &fam, addr)) {
        snprintf(rep, sizeof(rep), "no bad request (want \"PAIR? ADDR\")");
    } else if (!(pr = find_peer(fam, addr)) || !pr->agreed) {
        snprintf(rep, sizeof(rep), "no this host's rrpc-agent has no ESP pair with %s", req + 6);
    } else if (pr->expires && pr->expires <= time(NULL)) {
        snprintf(rep, sizeof(rep), "no the ESP pair with %s expired (no rekey)", pr->text);
    } else if (pr->loopback && !pr->installed && !lb_in_kernel(&pr->cur) &&
               !(pr->lb_has_prev && lb_in_kernel(&pr->lb_prev))) {
        snprintf(rep, sizeof(rep),
                 "no the ESP pair with %s is agreed but not yet installed by the other agent",
                 pr->text);
    } else {
        snprintf(rep, sizeof(rep), "yes %lld",
                 pr->expires ? (long long)(pr->expires - time(NULL)) : 0ll);
    }
    send(fd, rep, strlen(rep), MSG_NOSIGNAL);
    close(fd);
}

#ifdef RRPC_AGENT_BROKER
/* --broker: the pairs to report, from the published state (the report's thread):
 * those the query socket would say yes for (query_answer). */
static int report_pairs(struct ag_report_pair *out, int max)
{
    time_t now = time(NULL);
    int n = 0;
    pthread_mutex_lock(&snap.lock);
    for (int i = 0; i < snap.npeers && n < max; i++) {
        const struct peer *pr = &snap.peers[i];
        if (!pr->agreed || (pr->expires && pr->expires <= now))
            continue;
        /* A loopback responder's pair is the other agent's to install (netlink
         * from this thread: each call opens its own socket). */
        if (pr->loopback && !pr->installed && !lb_in_kernel(&pr->cur) &&
            !(pr->lb_has_prev && lb_in_kernel(&pr->lb_prev)))
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        out[n].family = pr->family;
        memcpy(out[n].addr, pr->addr, 16);
        out[n].expires = pr->expires;
        n++;
    }
    pthread_mutex_unlock(&snap.lock);
    return n;
}
#endif

/* ---- /metrics (--metrics-listen) ------------------------------------------------- */

/* Copies what /metrics shows for the HTTP server's thread (the main loop's
 * state is the main thread's alone). */
static void publish(void)
{
    pthread_mutex_lock(&snap.lock);
    memcpy(snap.peers, g.peers, (size_t)g.npeers * sizeof(g.peers[0]));
    snap.npeers = g.npeers;
    snap.pairings = g.pairings;
    memcpy(snap.failures, g.failures, sizeof(snap.failures));
    pthread_mutex_unlock(&snap.lock);
}

#define AG_XFRM_STAT_MAX 64

/* One scrape, on the HTTP server's thread: the published state, and the
 * kernel's counters of each SA (netlink) and of the namespace
 * (/proc/net/xfrm_stat) read now. */
static int metrics_text(void *user, char **ret_text, size_t *ret_len)
{
    (void)user;
    struct peer *ps = malloc(sizeof(snap.peers));
    struct ag_peer_view *views = calloc(AG_MAX_PEERS, sizeof(*views));
    char(*names)[48] = malloc(AG_XFRM_STAT_MAX * sizeof(*names));
    uint64_t *values = malloc(AG_XFRM_STAT_MAX * sizeof(*values));
    char *proc = malloc(8192);
    int rc = -ENOMEM;
    if (!ps || !views || !names || !values || !proc)
        goto out;
    struct ag_metrics_snap m = {.local = g.local_text};
    pthread_mutex_lock(&snap.lock);
    int n = snap.npeers;
    memcpy(ps, snap.peers, (size_t)n * sizeof(ps[0]));
    m.pairings_total = snap.pairings;
    memcpy(m.failures, snap.failures, sizeof(m.failures));
    pthread_mutex_unlock(&snap.lock);
    time_t now = time(NULL);
    for (int i = 0; i < n; i++) {
        const struct peer *pr = &ps[i];
        struct ag_peer_view *v = &views[i];
        snprintf(v->addr, sizeof(v->addr), "%s", pr->text);
        v->configured = pr->endpoint[0] != 0;
        v->agreed = pr->agreed;
        v->up = pr->agreed && (!pr->expires || pr->expires > now);
        m.rekeys_total += pr->rekeys;
        if (!pr->installed)
            continue; /* none, or the loopback pair the other agent installed */
        for (int k = 0; k < (pr->old_pending ? 4 : 2); k++) {
            struct ag_sa_view *sa = &v->sas[v->nsas++];
            const struct rrpc_xfrm_pair *xp = k < 2 ? &pr->cur : &pr->old;
            sa->out = k % 2 == 0;
            sa->current = k < 2;
            sa->spi = sa->out ? xp->spi_out : xp->spi_in;
            sa->have = rrpc_xfrm_sa_stats(xp, sa->out, &sa->stats) == 0;
        }
    }
    m.npeers = (unsigned)n;
    m.peers = views;
    FILE *f = fopen("/proc/net/xfrm_stat", "re");
    if (f) {
        size_t got = fread(proc, 1, 8191, f);
        proc[got] = 0;
        fclose(f);
        m.nxfrm_stat = ag_parse_xfrm_stat(proc, names, values, AG_XFRM_STAT_MAX);
        m.have_xfrm_stat = m.nxfrm_stat > 0;
        m.xfrm_stat_name = (const char(*)[48])names;
        m.xfrm_stat_value = values;
    }
    rc = ag_metrics_render(&m, ret_text, ret_len);
out:
    free(ps);
    free(views);
    free(names);
    free(values);
    free(proc);
    return rc;
}

#ifdef RRPC_HAVE_MHD
static void metrics_log(void *user, const char *msg)
{
    (void)user;
    if (g.verbose)
        logf_("/metrics: %s", msg);
}
#endif

/* ---- main ----------------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: rrpc-agent --local ADDR --listen HOST:PORT --cert F --key F --ca F\n"
                    "                  [--peer ADDR@HOST:PORT]... [--lifetime S] [--port-file F]\n"
                    "                  [--query-socket PATH] [--metrics-listen HOST:PORT] [-v]\n"
                    "                  [--broker HOST:PORT]... [--broker-ca F]\n");
    return 2;
}

static int listen_on(const char *endpoint, const char *port_file)
{
    char host[256];
    const char *c = strrchr(endpoint, ':');
    if (!c || (size_t)(c - endpoint) >= sizeof(host))
        return -EINVAL;
    memcpy(host, endpoint, (size_t)(c - endpoint));
    host[c - endpoint] = 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    if (getaddrinfo(host[0] ? host : NULL, c + 1, &hints, &ai) || !ai)
        return -EINVAL;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, rc = 0;
    if (fd < 0)
        rc = -errno;
    else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
             (rc = bypass(fd, ai->ai_family)) || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
             listen(fd, 16) < 0)
        rc = rc ? rc : -errno;
    freeaddrinfo(ai);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if (port_file) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        int port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                 : ((struct sockaddr_in6 *)&ss)->sin6_port);
        FILE *f = fopen(port_file, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f))
            return -EIO;
    }
    return fd;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"local", required_argument, NULL, 'l'},   {"listen", required_argument, NULL, 'L'},
        {"cert", required_argument, NULL, 'c'},    {"key", required_argument, NULL, 'k'},
        {"ca", required_argument, NULL, 'a'},      {"peer", required_argument, NULL, 'p'},
        {"lifetime", required_argument, NULL, 't'}, {"port-file", required_argument, NULL, 'P'},
        {"verbose", no_argument, NULL, 'v'},       {"query-socket", required_argument, NULL, 'Q'},
        {"metrics-listen", required_argument, NULL, 'M'},
        {"broker", required_argument, NULL, 'B'}, {"broker-ca", required_argument, NULL, 'C'},
        {NULL, 0, NULL, 0}};
    const char *local = NULL, *listen_ep = NULL, *cert = NULL, *key = NULL, *ca = NULL,
               *port_file = NULL, *query_path = NULL, *metrics_listen = NULL, *broker_ca = NULL;
    /* --broker, repeated: every rrpcd that may answer this host's clients */
    enum { MAX_BROKERS = 8 };
    const char *brokers[MAX_BROKERS];
    int nbrokers = 0;
    const char *peer_args[AG_MAX_PEERS];
    int npeer_args = 0, c;
    while ((c = getopt_long(argc, argv, "v", opts, NULL)) != -1) {
        switch (c) {
        case 'l': local = optarg; break;
        case 'L': listen_ep = optarg; break;
        case 'c': cert = optarg; break;
        case 'k': key = optarg; break;
        case 'a': ca = optarg; break;
        case 'P': port_file = optarg; break;
        case 'Q': query_path = optarg; break;
        case 'M': {
#ifdef RRPC_HAVE_MHD
            char why[200];
            if (rrpci_mhttp_check_listen(optarg, why, sizeof(why))) {
                fprintf(stderr, "rrpc-agent: --metrics-listen %s: %s\n", optarg, why);
                return 2;
            }
            metrics_listen = optarg;
            break;
#else
            fprintf(stderr, "rrpc-agent: --metrics-listen: this rrpc-agent was built without "
                            "libmicrohttpd (install libmicrohttpd-dev and build with meson "
                            "-Dmetrics_http=enabled)\n");
            return 2;
#endif
        }
        case 'B':
#ifdef RRPC_AGENT_BROKER
            if (nbrokers == MAX_BROKERS) {
                fprintf(stderr, "rrpc-agent: --broker: at most %d\n", MAX_BROKERS);
                return 2;
            }
            brokers[nbrokers++] = optarg;
            break;
#else
            fprintf(stderr, "rrpc-agent: --broker: this rrpc-agent was built without the broker "
                            "client (msgpack-c: libmsgpack-dev)\n");
            return 2;
#endif
        case 'C': broker_ca = optarg; break;
        case 'v': g.verbose = true; break;
        case 'p':
            if (npeer_args == AG_MAX_PEERS)
                return usage();
            peer_args[npeer_args++] = optarg;
            break;
        case 't': {
            char *end;
            unsigned long v = strtoul(optarg, &end, 10);
            if (*end || !*optarg || v < 5 || v > 7 * 86400) {
                fprintf(stderr, "rrpc-agent: --lifetime wants 5 to 604800 seconds\n");
                return 2;
            }
            g.lifetime = (unsigned)v;
            break;
        }
        default: return usage();
        }
    }
    if (optind != argc || !local || !listen_ep || !cert || !key || !ca || (broker_ca && !nbrokers))
        return usage();
    if (parse_addr(local, &g.family, g.local)) {
        fprintf(stderr, "rrpc-agent: --local %s is not an IP address\n", local);
        return 2;
    }
    inet_ntop(g.family, g.local, g.local_text, sizeof(g.local_text));
    for (int i = 0; i < npeer_args; i++) {
        const char *at = strchr(peer_args[i], '@');
        char a[INET6_ADDRSTRLEN + 1];
        int fam;
        uint8_t addr[16];
        if (!at || (size_t)(at - peer_args[i]) >= sizeof(a)) {
            fprintf(stderr, "rrpc-agent: --peer %s: want ADDR@HOST:PORT\n", peer_args[i]);
            return 2;
        }
        memcpy(a, peer_args[i], (size_t)(at - peer_args[i]));
        a[at - peer_args[i]] = 0;
        if (parse_addr(a, &fam, addr) || fam != g.family || !memcmp(addr, g.local, 16)) {
            fprintf(stderr, "rrpc-agent: --peer %s: not an address of --local's family, "
                            "or --local itself\n", peer_args[i]);
            return 2;
        }
        struct peer *pr = find_peer(fam, addr) ? NULL : add_peer(fam, addr);
        if (!pr) {
            fprintf(stderr, "rrpc-agent: --peer %s named twice\n", a);
            return 2;
        }
        snprintf(pr->endpoint, sizeof(pr->endpoint), "%s", at + 1);
    }

    g.ctx = SSL_CTX_new(TLS_method());
    if (!g.ctx || !SSL_CTX_set_min_proto_version(g.ctx, TLS1_3_VERSION) ||
        SSL_CTX_use_certificate_chain_file(g.ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(g.ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(g.ctx) != 1 || SSL_CTX_load_verify_locations(g.ctx, ca, NULL) != 1) {
        fprintf(stderr, "rrpc-agent: TLS setup (--cert %s --key %s --ca %s): %s\n", cert, key, ca,
                ag_tls_err());
        return 1;
    }
    SSL_CTX_set_verify(g.ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int lfd = listen_on(listen_ep, port_file);
    if (lfd < 0) {
        fprintf(stderr, "rrpc-agent: cannot listen on %s: %s%s\n", listen_ep, strerror(-lfd),
                lfd == -EPERM ? " (the agent needs CAP_NET_ADMIN)" : "");
        return 1;
    }
    int qfd = -1;
    if (query_path && (qfd = query_listen(query_path)) < 0) {
        fprintf(stderr, "rrpc-agent: cannot listen on the query socket %s: %s\n", query_path,
                strerror(-qfd));
        return 1;
    }
#ifdef RRPC_HAVE_MHD
    struct rrpci_mhttp *mh = NULL;
    if (metrics_listen) {
        char why[300];
        struct rrpci_mhttp_opts mo = {.listen = metrics_listen, .max_conns = 8, .timeout_s = 10,
                                      .text = metrics_text, .log = metrics_log};
        int r = rrpci_mhttp_start(&mo, &mh, why, sizeof(why));
        if (r) {
            fprintf(stderr, "rrpc-agent: --metrics-listen %s: %s\n", metrics_listen, why);
            return 1;
        }
        logf_("serving /metrics on %s (port %d)", metrics_listen, rrpci_mhttp_port(mh));
    }
#else
    (void)metrics_listen;
    (void)metrics_text;
#endif
#ifdef RRPC_AGENT_BROKER
    if (nbrokers)
        publish(); /* what the first report says */
    for (int i = 0; i < nbrokers; i++) {
        char why[400];
        struct ag_report_opts ro = {.broker = brokers[i], .cert = cert, .key = key,
                                    .ca = broker_ca ? broker_ca : ca, .local = g.local_text,
                                    .pairs = report_pairs, .log = logf_};
        if (ag_report_start(&ro, why, sizeof(why))) {
            fprintf(stderr, "rrpc-agent: %s\n", why);
            return 1;
        }
    }
#else
    (void)brokers;
    (void)nbrokers;
    (void)broker_ca;
#endif
    logf_("agent of %s listening on %s, %d peer%s named, lifetime %s", g.local_text, listen_ep,
          g.npeers, g.npeers == 1 ? "" : "s", g.lifetime ? "set" : "none (no rekey)");
    for (int i = 0; i < g.npeers; i++)
        g.peers[i].retry_at = time(NULL);

    while (!stop) {
        time_t now = time(NULL), next = now + 3600;
        for (int i = 0; i < g.npeers && !stop; i++) {
            struct peer *pr = &g.peers[i];
            if (pr->old_pending && now >= pr->old_del_at) {
                if (!pr->loopback || pr->initiator)
                    rrpc_xfrm_sas_del(&pr->old);
                pr->old_pending = false;
            }
            bool due = pr->initiator && pr->endpoint[0] &&
                       ((!pr->installed && now >= pr->retry_at) ||
                        (pr->installed && g.lifetime && now >= pr->rekey_at));
            if (due) {
                if (initiate(pr) == 0)
                    pr->rekey_at = now + (g.lifetime ? g.lifetime * 8 / 10 : 0);
                else if (!pr->installed)
                    pr->retry_at = now + 2;
                else
                    pr->rekey_at = now + 2; /* retry the rekey before the hard expiry */
            }
            if (pr->old_pending && pr->old_del_at < next)
                next = pr->old_del_at;
            if (pr->initiator && pr->endpoint[0]) {
                time_t t = pr->installed ? (g.lifetime ? pr->rekey_at : next) : pr->retry_at;
                if (t < next)
                    next = t;
            }
        }
        publish();
        struct pollfd pfd[2] = {{.fd = lfd, .events = POLLIN}, {.fd = qfd, .events = POLLIN}};
        long ms = (long)(next - time(NULL)) * 1000;
        if (ms < 0)
            ms = 0;
        if (ms > 1000)
            ms = 1000;
        if (poll(pfd, qfd >= 0 ? 2 : 1, (int)ms) > 0) {
            if (pfd[1].revents & POLLIN)
                query_answer(qfd);
            if (pfd[0].revents & POLLIN)
                serve_one(lfd);
        }
    }
#ifdef RRPC_HAVE_MHD
    rrpci_mhttp_stop(mh); /* no scrape after this: the pairs go below */
#endif
#ifdef RRPC_AGENT_BROKER
    ag_report_stop(); /* rrpcd drops the report with the session, before the pairs go */
#endif
    int removed = 0;
    for (int i = 0; i < g.npeers; i++) {
        struct peer *pr = &g.peers[i];
        char why[200];
        if (pr->old_pending && (!pr->loopback || pr->initiator))
            rrpc_xfrm_sas_del(&pr->old);
        if (pr->installed && (!pr->loopback || pr->initiator) &&
            rrpc_xfrm_pair_del(&pr->cur, why, sizeof(why)) == 0)
            removed++;
    }
    logf_("stopping: removed %d host pair%s", removed, removed == 1 ? "" : "s");
    close(lfd);
    if (qfd >= 0) {
        close(qfd);
        unlink(query_path);
    }
    SSL_CTX_free(g.ctx);
    return 0;
}

/* SPDX-License-Identifier: MIT */
/* rrpc-agent --broker (broker_report.h): the pairs report to rrpcd. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <msgpack.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "broker/proto.h"
#include "broker/sockbio.h"
#include "broker_report.h"
#include "tls_err.h"

#define IO_TIMEOUT_S 5 /* one read or write of the session */

/* One rrpcd reported to (one --broker), on a thread of its own. */
struct reporter {
    struct ag_report_opts o;
    char host[256], port[16];
    SSL_CTX *ctx;
    pthread_t thread;
    atomic_uint_fast64_t accepted;
    uint64_t next_id;
};

static struct reporter reporters[AG_REPORT_BROKERS];
static int nreporters;
static atomic_bool stopping;

/* HOST:PORT or [IPv6]:PORT into r->host, r->port. */
static int split(struct reporter *r, const char *ep)
{
    const char *c;
    size_t hl;
    if (ep[0] == '[') {
        const char *rb = strchr(ep, ']');
        if (!rb || rb[1] != ':')
            return -1;
        hl = (size_t)(rb - ep - 1);
        if (hl == 0 || hl >= sizeof(r->host))
            return -1;
        memcpy(r->host, ep + 1, hl);
        c = rb + 1;
    } else {
        c = strrchr(ep, ':');
        if (!c || c == ep || (hl = (size_t)(c - ep)) >= sizeof(r->host))
            return -1;
        memcpy(r->host, ep, hl);
    }
    r->host[hl] = 0;
    char *end;
    unsigned long p = strtoul(c + 1, &end, 10);
    if (*end || !c[1] || p == 0 || p > 65535)
        return -1;
    snprintf(r->port, sizeof(r->port), "%lu", p);
    return 0;
}

/* ---- one session -------------------------------------------------------------- */

static int dial(struct reporter *r)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(r->host, r->port, &hints, &ai) || !ai)
        return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = fd < 0 ? -errno : 0;
    if (!rc && r->o.prepare_fd)
        rc = r->o.prepare_fd(fd, ai->ai_family);
    struct timeval tv = {IO_TIMEOUT_S, 0};
    if (!rc) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) /* SO_SNDTIMEO: EINPROGRESS */
            rc = errno == EINPROGRESS ? -ETIMEDOUT : -errno;
    }
    freeaddrinfo(ai);
    if (rc && fd >= 0)
        close(fd);
    return rc ? rc : fd;
}

static int write_all(SSL *ssl, const void *p, size_t n)
{
    size_t w = 0;
    return SSL_write_ex(ssl, p, n, &w) == 1 && w == n ? 0 : -1;
}

static int read_all(SSL *ssl, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        size_t k = 0;
        if (SSL_read_ex(ssl, (uint8_t *)p + got, n - got, &k) != 1)
            return -1;
        got += k;
    }
    return 0;
}

/* Sends the request in @sb and waits for its answer: 0 when ok; else -1 with
 * the reason (rrpcd's err and msg) in @why. */
static int roundtrip(SSL *ssl, msgpack_sbuffer *sb, uint64_t id, char *why, size_t whylen)
{
    uint8_t hdr[4];
    rrpci_put_le32(hdr, (uint32_t)sb->size);
    if (write_all(ssl, hdr, 4) || write_all(ssl, sb->data, sb->size)) {
        snprintf(why, whylen, "sending: %s", ag_tls_err());
        return -1;
    }
    for (;;) {
        if (read_all(ssl, hdr, 4)) {
            snprintf(why, whylen, "reading: %s", ag_tls_err());
            return -1;
        }
        uint32_t len = rrpci_get_le32(hdr);
        if (len == 0 || len > CTL_MAX_FRAME) {
            snprintf(why, whylen, "rrpcd sent a frame of %u bytes", len);
            return -1;
        }
        uint8_t *buf = malloc(len);
        if (!buf || read_all(ssl, buf, len)) {
            free(buf);
            snprintf(why, whylen, "reading: %s", buf ? ag_tls_err() : "out of memory");
            return -1;
        }
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        uint64_t got_id = 0;
        int r = -1;
        if (rrpci_mp_check(buf, len, CTL_MAX_DEPTH) ||
            msgpack_unpack_next(&u, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
            !rrpci_mp_uint(rrpci_mp_get(&u.data, CTL_K_ID), &got_id)) {
            snprintf(why, whylen, "rrpcd's answer is not a control message");
        } else if (got_id == id) {
            const msgpack_object *ok = rrpci_mp_get(&u.data, CTL_K_OK);
            if (ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean) {
                r = 0;
            } else {
                char err[32], msg[400];
                rrpci_mp_text(rrpci_mp_get(&u.data, CTL_K_ERR), err, sizeof(err));
                rrpci_mp_text(rrpci_mp_get(&u.data, CTL_K_MSG), msg, sizeof(msg));
                snprintf(why, whylen, "%s: %s", err, msg);
            }
        } else {
            r = 1; /* not ours (a push): read on */
        }
        msgpack_unpacked_destroy(&u);
        free(buf);
        if (r <= 0)
            return r;
    }
}

static void begin(struct reporter *r, msgpack_sbuffer *sb, msgpack_packer *pk, enum rrpci_ctl_op op, uint32_t n,
                  uint64_t *ret_id)
{
    msgpack_sbuffer_clear(sb);
    *ret_id = ++r->next_id;
    msgpack_pack_map(pk, 3 + n);
    pk_str(pk, CTL_K_V);
    msgpack_pack_uint32(pk, CTL_VERSION);
    pk_str(pk, CTL_K_ID);
    msgpack_pack_uint64(pk, *ret_id);
    pk_str(pk, CTL_K_OP);
    pk_str(pk, rrpci_ctl_op_name(op));
}

/* The report of @p (@n pairs) at @now. */
static void pack_pairs(struct reporter *r, msgpack_sbuffer *sb, msgpack_packer *pk, const struct ag_report_pair *p,
                       int n, time_t now, uint64_t *ret_id)
{
    begin(r, sb, pk, CTL_OP_PAIRS, 2, ret_id);
    pk_str(pk, CTL_K_LOCAL);
    pk_str(pk, r->o.local);
    pk_str(pk, CTL_K_PAIRS);
    msgpack_pack_array(pk, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        char text[INET6_ADDRSTRLEN];
        inet_ntop(p[i].family, p[i].addr, text, sizeof(text));
        /* No lifetime: the SAs do not expire; a week, renewed with every report. */
        int64_t left = p[i].expires ? (int64_t)(p[i].expires - now) : CTL_MAX_PAIR_EXPIRES_S;
        if (left < 0)
            left = 0;
        if (left > CTL_MAX_PAIR_EXPIRES_S)
            left = CTL_MAX_PAIR_EXPIRES_S;
        msgpack_pack_map(pk, 2);
        pk_str(pk, CTL_K_PEER);
        pk_str(pk, text);
        pk_str(pk, CTL_K_EXPIRES_S);
        msgpack_pack_uint64(pk, (uint64_t)left);
    }
}

static bool same(const struct ag_report_pair *a, int na, const struct ag_report_pair *b, int nb)
{
    return na == nb && !memcmp(a, b, (size_t)na * sizeof(*a));
}

/* One session: hello, then reports until it fails or the agent stops. */
static void session(struct reporter *r)
{
    char why[500];
    int fd = dial(r);
    if (fd < 0) {
        r->o.log("--broker %s: cannot connect: %s", r->o.broker, strerror(-fd));
        return;
    }
    SSL *ssl = SSL_new(r->ctx);
    if (!ssl || rrpci_ssl_set_socket(ssl, fd)) {
        r->o.log("--broker %s: out of memory", r->o.broker);
        SSL_free(ssl);
        close(fd);
        return;
    }
    struct in6_addr ip;
    if (inet_pton(AF_INET, r->host, &ip) == 1 || inet_pton(AF_INET6, r->host, &ip) == 1)
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), r->host);
    else {
        SSL_set1_host(ssl, r->host);
        SSL_set_tlsext_host_name(ssl, r->host);
    }
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    struct ag_report_pair *cur = calloc(2 * AG_REPORT_MAX, sizeof(*cur)), *last = cur + AG_REPORT_MAX;
    uint64_t id;
    ERR_clear_error();
    if (!cur) {
        r->o.log("--broker %s: out of memory", r->o.broker);
        goto out;
    }
    if (SSL_connect(ssl) != 1) {
        r->o.log("--broker %s: TLS handshake: %s", r->o.broker, ag_tls_err());
        goto out;
    }
    begin(r, &sb, &pk, CTL_OP_HELLO, 0, &id);
    if (roundtrip(ssl, &sb, id, why, sizeof(why))) {
        r->o.log("--broker %s: hello: %s", r->o.broker, why);
        goto out;
    }
    r->o.log("reporting this host's ESP pairs to rrpcd %s", r->o.broker);
    int nlast = -1;
    time_t sent = 0;
    while (!atomic_load(&stopping)) {
        int n = r->o.pairs(cur, AG_REPORT_MAX);
        time_t now = time(NULL);
        if (nlast < 0 || !same(cur, n, last, nlast) || now - sent >= AG_REPORT_EVERY_S) {
            pack_pairs(r, &sb, &pk, cur, n, now, &id);
            if (roundtrip(ssl, &sb, id, why, sizeof(why))) {
                r->o.log("--broker %s: rrpcd refused the pairs report: %s", r->o.broker, why);
                goto out;
            }
            atomic_fetch_add(&r->accepted, 1);
            if (nlast < 0 || !same(cur, n, last, nlast))
                r->o.log("reported %d ESP pair%s to rrpcd %s", n, n == 1 ? "" : "s", r->o.broker);
            memcpy(last, cur, (size_t)n * sizeof(*cur));
            nlast = n;
            sent = now;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            /* rrpcd sends nothing unasked: this is its end of the session. */
            r->o.log("--broker %s: rrpcd closed the session", r->o.broker);
            goto out;
        }
    }
    SSL_shutdown(ssl);
out:
    free(cur);
    msgpack_sbuffer_destroy(&sb);
    SSL_free(ssl);
    close(fd);
}

static void *report_thread(void *arg)
{
    struct reporter *r = arg;
    while (!atomic_load(&stopping)) {
        session(r);
        for (int i = 0; i < AG_REPORT_RETRY_S * 10 && !atomic_load(&stopping); i++)
            poll(NULL, 0, 100);
    }
    return NULL;
}

int ag_report_start(const struct ag_report_opts *o, char *why, size_t whylen)
{
    if (nreporters == AG_REPORT_BROKERS) {
        snprintf(why, whylen, "--broker %s: at most %d --broker", o->broker, AG_REPORT_BROKERS);
        return -1;
    }
    struct reporter *r = &reporters[nreporters];
    memset(r, 0, sizeof(*r));
    r->o = *o;
    if (split(r, o->broker)) {
        snprintf(why, whylen, "--broker %s: want HOST:PORT or [IPv6]:PORT", o->broker);
        return -1;
    }
    r->ctx = SSL_CTX_new(TLS_client_method());
    if (!r->ctx || !SSL_CTX_set_min_proto_version(r->ctx, TLS1_3_VERSION) ||
        SSL_CTX_use_certificate_chain_file(r->ctx, o->cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(r->ctx, o->key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_load_verify_locations(r->ctx, o->ca, NULL) != 1) {
        snprintf(why, whylen, "--broker: TLS setup (--cert %s --key %s, CA %s): %s", o->cert,
                 o->key, o->ca, ag_tls_err());
        SSL_CTX_free(r->ctx);
        r->ctx = NULL;
        return -1;
    }
    SSL_CTX_set_verify(r->ctx, SSL_VERIFY_PEER, NULL);
    int e = pthread_create(&r->thread, NULL, report_thread, r);
    if (e) {
        snprintf(why, whylen, "--broker: cannot start its thread: %s", strerror(e));
        SSL_CTX_free(r->ctx);
        r->ctx = NULL;
        return -1;
    }
    nreporters++;
    return 0;
}

void ag_report_stop(void)
{
    atomic_store(&stopping, true);
    for (int i = 0; i < nreporters; i++) {
        pthread_join(reporters[i].thread, NULL);
        SSL_CTX_free(reporters[i].ctx);
        reporters[i].ctx = NULL;
    }
    nreporters = 0;
}

uint64_t ag_report_accepted(void)
{
    uint64_t n = 0;
    for (int i = 0; i < nreporters; i++)
        n += atomic_load(&reporters[i].accepted);
    return n;
}

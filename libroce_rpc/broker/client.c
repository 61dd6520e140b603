/* SPDX-License-Identifier: MIT */
/*
 * The broker client: blocking TLS 1.3 round trips to rrpcd (docs/broker.md),
 * and a lease thread per handle that renews registrations and registers
 * again when rrpcd forgot them (restart, expiry).
 *
 * Locks: @io serialises round trips and guards the connection and the
 * registrations; @lock guards the thread's stop flag, its condition and the
 * error text.  @io is never taken while @lock is held.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <msgpack.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker/mpcheck.h"
#include "broker/sockbio.h"
#include "util/resolve.h"
#include "util/reserved.h"

#define ERR_MAX 4096 /* room for the reason of every broker of a list */
#define HOST_MAX 256
#define WHY_MAX 240  /* one broker's reason in the error of a list that failed */
#define STR_(x) #x
#define STR(x) STR_(x)

struct reg {
    struct reg *next;
    char service[256];
    rrpc_ctx *ctx;
    struct rrpci_endpoint *eps;
    size_t n_eps;
    unsigned class_mask;
    uint64_t id;       /* rrpcd's registration id; 0 while not registered */
    uint32_t lease_ms;
    int64_t due_ms;    /* monotonic: next renew (or retry) */
    int backoff_ms;
    rrpc_ticket_verifier *v;
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN]; /* this gate's; tickets are bound to it */
};

struct rrpc_broker {
    pthread_mutex_t io;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    bool thread_started, stop;

    /* The list of brokers (rrpc_broker_open's HOST:PORT,...); @cur is the
     * one of the session, or the first to try for the next one.  @host,
     * @port and @server_name are @cur's (the messages name them). */
    struct baddr {
        char host[HOST_MAX];
        char port[8];
    } addrs[RRPC_BROKER_MAX_ADDRS];
    int n_addrs, cur;
    char cur_addr[HOST_MAX + 16]; /* @lock: @cur as rrpc_broker_current gives it */
    bool own_server_name; /* opts->server_name: the same name for every broker */
    char host[HOST_MAX];
    char port[8];
    char server_name[HOST_MAX];
    char *token;
    int timeout_ms, skew_ms;
    rrpc_log_fn log;
    void *log_user;
    int log_level;

    SSL_CTX *sslctx;
    SSL *ssl;
    int fd;
    uint64_t next_id;
    char principal[256];
    struct reg *regs;
    char err[ERR_MAX];
};

static _Thread_local char open_err[ERR_MAX];
static _Thread_local char err_copy[ERR_MAX];

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void blog(struct rrpc_broker *b, int level, const char *fmt, ...)
{
    if (level > b->log_level)
        return;
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (b->log)
        b->log(level, msg, b->log_user);
    else
        fprintf(stderr, "rrpc broker: %s\n", msg);
}

/* Records the detail of a failure and returns @code. */
static int fail(struct rrpc_broker *b, int code, const char *fmt, ...)
{
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&b->lock);
    memcpy(b->err, msg, sizeof(msg));
    pthread_mutex_unlock(&b->lock);
    return code;
}

RRPC_API const char *rrpc_broker_last_error(rrpc_broker *b)
{
    if (!b)
        return open_err;
    pthread_mutex_lock(&b->lock);
    memcpy(err_copy, b->err, sizeof(err_copy));
    pthread_mutex_unlock(&b->lock);
    return err_copy;
}

RRPC_API const char *rrpc_broker_principal(rrpc_broker *b)
{
    return b ? b->principal : "";
}

static void ssl_errstr(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, buf, len);
    else
        snprintf(buf, len, "%s", "connection closed during the TLS exchange");
    ERR_clear_error();
}

/* ---- the TLS connection ---------------------------------------------------- */

static void disconnect(struct rrpc_broker *b)
{
    if (b->ssl) {
        SSL_shutdown(b->ssl);
        SSL_free(b->ssl);
        b->ssl = NULL;
    }
    if (b->fd >= 0)
        close(b->fd);
    b->fd = -1;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

/* Runs one SSL call to completion (handshake, a full write or a full read). */
enum tls_op { OP_HANDSHAKE, OP_WRITE, OP_READ };
static int tls_do(struct rrpc_broker *b, enum tls_op op, void *buf, size_t len, int64_t deadline)
{
    size_t done = 0;
    for (;;) {
        size_t n = 0;
        int ok;
        ERR_clear_error();
        if (op == OP_HANDSHAKE) {
            ok = SSL_connect(b->ssl) == 1;
        } else if (op == OP_WRITE) {
            ok = SSL_write_ex(b->ssl, (char *)buf + done, len - done, &n);
        } else {
            ok = SSL_read_ex(b->ssl, (char *)buf + done, len - done, &n);
        }
        if (ok) {
            done += n;
            if (op == OP_HANDSHAKE || done == len)
                return 0;
            continue;
        }
        int e = SSL_get_error(b->ssl, 0);
        int r;
        if (e == SSL_ERROR_WANT_READ)
            r = wait_fd(b->fd, POLLIN, deadline);
        else if (e == SSL_ERROR_WANT_WRITE)
            r = wait_fd(b->fd, POLLOUT, deadline);
        else if (e == SSL_ERROR_SSL) {
            char s[256];
            long vr = SSL_get_verify_result(b->ssl);
            if (op == OP_HANDSHAKE && vr != X509_V_OK)
                return fail(b, -EPROTO,
                            "rrpcd %s:%s: its certificate did not verify against the CA: %s",
                            b->host, b->port, X509_verify_cert_error_string(vr));
            ssl_errstr(s, sizeof(s));
            return fail(b, -EPROTO, "rrpcd %s:%s: TLS failed: %s (is our client certificate "
                        "signed by the CA rrpcd trusts?)", b->host, b->port, s);
        } else {
            ERR_clear_error();
            return fail(b, -ECONNRESET, "rrpcd %s:%s closed the connection", b->host, b->port);
        }
        if (r)
            return fail(b, r, "rrpcd %s:%s: %s", b->host, b->port,
                        r == -ETIMEDOUT ? "timed out" : strerror(-r));
    }
}

static int tcp_connect(struct rrpc_broker *b, int64_t deadline)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    int g = getaddrinfo(b->host, b->port, &hints, &res);
    if (g)
        return fail(b, rrpci_resolve_code(g, errno), "rrpcd %s:%s: cannot resolve: %s", b->host,
                    b->port, rrpci_resolve_why(g));
    int r = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            r = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
            r = -errno;
            close(fd);
            continue;
        }
        r = wait_fd(fd, POLLOUT, deadline);
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (!r && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            r = -soerr;
        if (r) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        b->fd = fd;
        break;
    }
    freeaddrinfo(res);
    if (r)
        return fail(b, r, "rrpcd %s:%s: %s (is rrpcd running there?)", b->host, b->port,
                    strerror(-r));
    return 0;
}

static int is_ip(const char *s)
{
    unsigned char a[16];
    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

/* ---- msgpack helpers ----------------------------------------------------- */


/* An answer: msgpack-c's objects point into the buffer they came from. */
struct reply {
    msgpack_unpacked u;
    char *buf;
};

static void reply_init(struct reply *rp)
{
    msgpack_unpacked_init(&rp->u);
    rp->buf = NULL;
}

static void reply_destroy(struct reply *rp)
{
    msgpack_unpacked_destroy(&rp->u);
    free(rp->buf);
    rp->buf = NULL;
}

/* A request: its frame (4 bytes of length, set by exchange, then the
 * msgpack map) and its id. */
struct req {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
};

/* Starts a request map of @n entries besides "v", "op" and "id" (under b->io:
 * it takes the next id).  req_free releases it. */
static void req_start(struct rrpc_broker *b, struct req *q, const char *op, uint32_t n)
{
    msgpack_sbuffer_init(&q->sb);
    msgpack_sbuffer_write(&q->sb, "\0\0\0\0", 4);
    msgpack_packer_init(&q->pk, &q->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&q->pk, 3 + n);
    pk_str(&q->pk, "v");
    msgpack_pack_uint32(&q->pk, CTL_VERSION);
    pk_str(&q->pk, "op");
    pk_str(&q->pk, op);
    pk_str(&q->pk, "id");
    q->id = ++b->next_id;
    msgpack_pack_uint64(&q->pk, q->id);
}

static void req_free(struct req *q)
{
    msgpack_sbuffer_destroy(&q->sb);
}

static int map_err(const char *code)
{
    if (!strcmp(code, "version"))
        return RRPC_E_VERSION;
    if (!strcmp(code, "unauthenticated") || !strcmp(code, "auth_failed"))
        return -EACCES;
    if (!strcmp(code, "denied"))
        return -EPERM;
    if (!strcmp(code, "not_found"))
        return -ENOENT;
    if (!strcmp(code, "busy"))
        return -EAGAIN;
    if (!strcmp(code, "limit"))
        return -ENOSPC;
    return -EPROTO;
}

/*
 * Sends the request in @sb on the current connection and reads the answer
 * into @u; checks the envelope.  Returns 0 (u->data is the answer map), a
 * connection error (-ECONN*, -ETIMEDOUT, -EPROTO: the caller may reconnect),
 * or rrpcd's refusal mapped by map_err with @refused set.  @deadline:
 * monotonic ms.
 */
static int exchange(struct rrpc_broker *b, struct req *q, struct reply *rp, bool *refused,
                    int64_t deadline)
{
    msgpack_unpacked *u = &rp->u;
    uint64_t want_id = q->id;
    uint8_t hdr[4];
    rrpci_put_le32((uint8_t *)q->sb.data, (uint32_t)(q->sb.size - 4));
    *refused = false;
    int r = tls_do(b, OP_WRITE, q->sb.data, q->sb.size, deadline); /* one TLS record */
    if (!r)
        r = tls_do(b, OP_READ, hdr, 4, deadline);
    if (r)
        return r;
    uint32_t len = rrpci_get_le32(hdr);
    if (len == 0 || len > CTL_MAX_FRAME)
        return fail(b, -EPROTO, "rrpcd %s:%s sent a frame of %u bytes", b->host, b->port, len);
    char *buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    r = tls_do(b, OP_READ, buf, len, deadline);
    size_t off = 0;
    if (!r && (rrpci_mp_check(buf, len, 8) ||
               msgpack_unpack_next(u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
               u->data.type != MSGPACK_OBJECT_MAP))
        r = fail(b, -EPROTO, "rrpcd %s:%s sent malformed msgpack", b->host, b->port);
    if (r) {
        free(buf);
        return r;
    }
    free(rp->buf);
    rp->buf = buf;
    uint64_t v = 0, id = 0;
    const msgpack_object *ok = rrpci_mp_get(&u->data, "ok");
    if (!rrpci_mp_uint(rrpci_mp_get(&u->data, "v"), &v) || v != CTL_VERSION)
        return fail(b, RRPC_E_VERSION, "rrpcd %s:%s speaks control protocol version %llu, "
                    "we speak %d", b->host, b->port, (unsigned long long)v, CTL_VERSION);
    if (!rrpci_mp_uint(rrpci_mp_get(&u->data, "id"), &id) || id != want_id || !ok ||
        ok->type != MSGPACK_OBJECT_BOOLEAN)
        return fail(b, -EPROTO, "rrpcd %s:%s: answer does not match the request", b->host,
                    b->port);
    if (!ok->via.boolean) {
        char code[64] = "?", msg[256] = "";
        rrpci_mp_text(rrpci_mp_get(&u->data, "err"), code, sizeof(code));
        rrpci_mp_text(rrpci_mp_get(&u->data, "msg"), msg, sizeof(msg));
        if (!code[0])
            snprintf(code, sizeof(code), "?");
        *refused = true;
        return fail(b, map_err(code), "rrpcd refused: %s: %s", code, msg);
    }
    return 0;
}

/* Connects to the broker @b->cur, handshakes and authenticates ("hello"),
 * all within one timeout_ms. */
static int do_connect(struct rrpc_broker *b)
{
    int64_t deadline = mono_ms() + b->timeout_ms;
    int r = tcp_connect(b, deadline);
    if (r)
        return r;
    b->ssl = SSL_new(b->sslctx);
    if (!b->ssl || rrpci_ssl_set_socket(b->ssl, b->fd)) { /* no SIGPIPE, ever */
        disconnect(b);
        return fail(b, -ENOMEM, "SSL_new failed");
    }
    if (is_ip(b->server_name)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(b->ssl), b->server_name);
    } else {
        SSL_set_tlsext_host_name(b->ssl, b->server_name);
        SSL_set1_host(b->ssl, b->server_name);
    }
    r = tls_do(b, OP_HANDSHAKE, NULL, 0, deadline);
    if (r) {
        disconnect(b);
        return r;
    }
    struct req q;
    req_start(b, &q, "hello", b->token ? 1 : 0);
    if (b->token) {
        pk_str(&q.pk, "token");
        pk_str(&q.pk, b->token);
    }
    struct reply u;
    reply_init(&u);
    bool refused;
    r = exchange(b, &q, &u, &refused, deadline);
    req_free(&q);
    if (!r && !rrpci_mp_str(rrpci_mp_get(&u.u.data, "principal"), b->principal,
                            sizeof(b->principal)))
        r = fail(b, -EPROTO, "rrpcd did not say who we are");
    /* In TLS 1.3 the server checks our certificate after our handshake is
     * done; a refusal then shows up as a reset on the first exchange. */
    if (r == -ECONNRESET)
        r = fail(b, -EPROTO, "rrpcd %s:%s ended the TLS session at once: it refused our client "
                 "certificate (not signed by the CA it trusts?)", b->host, b->port);
    reply_destroy(&u);
    if (r)
        disconnect(b);
    return r;
}

static void select_addr(struct rrpc_broker *b, int i)
{
    memcpy(b->host, b->addrs[i].host, sizeof(b->host));
    memcpy(b->port, b->addrs[i].port, sizeof(b->port));
    if (!b->own_server_name)
        memcpy(b->server_name, b->host, sizeof(b->server_name));
    pthread_mutex_lock(&b->lock);
    b->cur = i; /* written under both @io and @lock: either suffices to read it */
    snprintf(b->cur_addr, sizeof(b->cur_addr), strchr(b->host, ':') ? "[%s]:%s" : "%s:%s",
             b->host, b->port);
    pthread_mutex_unlock(&b->lock);
}

RRPC_API int rrpc_broker_current(rrpc_broker *b, char *buf, size_t len)
{
    if (!b || !buf || !len)
        return -EINVAL;
    pthread_mutex_lock(&b->lock);
    int n = snprintf(buf, len, "%s", b->cur_addr);
    int index = b->cur;
    pthread_mutex_unlock(&b->lock);
    return (size_t)n >= len ? -ENOSPC : index;
}

/*
 * Makes a session with the first broker of the list that answers, beginning
 * with the current one and going round the list once (at most timeout_ms
 * each).  @why is the reason the previous session ended, or NULL.  Every
 * broker that fails and every move to another one is logged.  When all
 * fail, the error names each broker and its reason, and the code is the
 * last one's.
 */
static int connect_any(struct rrpc_broker *b, const char *why)
{
    if (b->n_addrs == 1)
        return do_connect(b);
    int first = b->cur, r = 0;
    char all[ERR_MAX] = "";
    size_t used = 0;
    for (int k = 0; k < b->n_addrs; k++) {
        int i = (first + k) % b->n_addrs;
        select_addr(b, i);
        r = do_connect(b);
        if (!r) {
            if (k > 0)
                blog(b, LOG_WARNING, "failed over from rrpcd %s:%s to rrpcd %s:%s (broker %d of "
                     "%d)%s%.*s", b->addrs[first].host, b->addrs[first].port, b->host, b->port,
                     i + 1, b->n_addrs, why ? " after " : "", WHY_MAX, why ? why : "");
            else if (why)
                blog(b, LOG_NOTICE, "reconnected to rrpcd %s:%s after %.*s", b->host, b->port,
                     WHY_MAX, why);
            return 0;
        }
        char one[ERR_MAX];
        pthread_mutex_lock(&b->lock);
        snprintf(one, sizeof(one), "%s", b->err);
        pthread_mutex_unlock(&b->lock);
        int n = snprintf(all + used, sizeof(all) - used, "%s%.*s", k ? "; " : "", WHY_MAX, one);
        if (n > 0)
            used = used + (size_t)n < sizeof(all) ? used + (size_t)n : sizeof(all) - 1;
        blog(b, LOG_WARNING, "broker %d of %d failed: %.*s%s", i + 1, b->n_addrs, WHY_MAX, one,
             k + 1 < b->n_addrs ? "; trying the next one" : "");
    }
    select_addr(b, first);
    return fail(b, r, "none of the %d brokers answered (each tried for up to %d ms): %s",
                b->n_addrs, b->timeout_ms, all);
}

/*
 * One round trip with @io held: (re)connects when needed, going down the
 * list of brokers; a request that failed on a session made earlier is sent
 * once more on a new one (with the next broker when this one is gone).
 */
static int roundtrip(struct rrpc_broker *b, struct req *q, struct reply *u)
{
    char why[ERR_MAX] = "";
    for (int attempt = 0;; attempt++) {
        bool fresh = false;
        if (!b->ssl) {
            int r = connect_any(b, why[0] ? why : NULL);
            if (r)
                return r;
            fresh = true;
        }
        bool refused;
        reply_destroy(u);
        reply_init(u);
        int r = exchange(b, q, u, &refused, mono_ms() + b->timeout_ms);
        if (!r || refused)
            return r;
        disconnect(b);
        if (fresh || attempt > 0)
            return r;
        pthread_mutex_lock(&b->lock);
        snprintf(why, sizeof(why), "the session with rrpcd %s:%s ended: %.*s", b->host, b->port,
                 WHY_MAX, b->err);
        pthread_mutex_unlock(&b->lock);
    }
}

/* ---- open / close ---------------------------------------------------------- */

static int split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
    if (!strncmp(addr, "tls://", 6))
        addr += 6;
    const char *colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':')
            return -EINVAL;
        if ((size_t)(rb - addr - 1) >= hostlen)
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || colon == addr || (size_t)(colon - addr) >= hostlen)
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return -EINVAL;
    snprintf(port, portlen, "%ld", p);
    return 0;
}

static int open_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(open_err, sizeof(open_err), fmt, ap);
    va_end(ap);
    return code;
}

/*
 * Splits @list ("HOST:PORT[,HOST:PORT...]", blanks around an entry allowed)
 * into @b->addrs; every entry is checked, and a bad one is named.
 */
static int parse_addrs(struct rrpc_broker *b, const char *list)
{
    static const char how[] = "give HOST:PORT, [IPv6]:PORT or tls://HOST:PORT, several "
                              "separated by commas (at most " STR(RRPC_BROKER_MAX_ADDRS) ")";
    if (strlen(list) > RRPC_BROKER_MAX_ADDRS * (HOST_MAX + 16))
        return open_fail(-EINVAL, "broker address list is too long: %s", how);
    b->n_addrs = 0;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        int n = b->n_addrs + 1;
        char entry[HOST_MAX + 16];
        if (!len)
            return open_fail(-EINVAL, "broker address '%s': entry %d is empty; %s", list, n, how);
        if (n > RRPC_BROKER_MAX_ADDRS)
            return open_fail(-EINVAL, "broker address '%s' lists more than %d brokers", list,
                             RRPC_BROKER_MAX_ADDRS);
        if (len >= sizeof(entry))
            return open_fail(-EINVAL, "broker address '%s': entry %d is too long; %s", list, n,
                             how);
        memcpy(entry, p, len);
        entry[len] = 0;
        struct baddr *a = &b->addrs[b->n_addrs];
        if (split_addr(entry, a->host, sizeof(a->host), a->port, sizeof(a->port)) ||
            !a->host[0])
            return open_fail(-EINVAL, "broker address '%s': entry %d '%s' is not HOST:PORT "
                             "with a port 1..65535; %s", list, n, entry, how);
        for (int k = 0; k < b->n_addrs; k++)
            if (!strcmp(b->addrs[k].host, a->host) && !strcmp(b->addrs[k].port, a->port))
                return open_fail(-EINVAL, "broker address '%s': entries %d and %d are both "
                                 "'%s'; list each broker once", list, k + 1, n, entry);
        b->n_addrs = n;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

RRPC_API int rrpc_broker_open(const char *addr, const rrpc_broker_opts *opts,
                              rrpc_broker **ret_b)
{
    open_err[0] = 0;
    if (!addr || !opts || !ret_b || !opts->ca_file)
        return open_fail(-EINVAL, "rrpc_broker_open: address, opts and opts->ca_file are required");
    int bad = RRPCI_RESERVED_BAD(opts);
    if (bad >= 0)
        return open_fail(-EINVAL, RRPCI_RESERVED_WHY, "rrpc_broker_opts", bad);
    struct rrpc_broker *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    b->fd = -1;
    pthread_mutex_init(&b->io, NULL);
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    b->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 5000;
    b->skew_ms = opts->skew_ms > 0 ? opts->skew_ms : 5000;
    b->log = opts->log;
    b->log_user = opts->log_user;
    if (opts->log) {
        b->log_level = opts->log_level > 0 ? opts->log_level : LOG_INFO;
    } else {
        /* RRPC_LOG_LEVEL, read and checked by libroce_rpc's table of tunables. */
        rrpc_config *env = NULL;
        long level = -1;
        if (rrpc_config_create(&env) == 0)
            (void)rrpc_config_get(env, "RRPC_LOG_LEVEL", &level);
        rrpc_config_destroy(env);
        b->log_level = (int)level;
    }
    int r;
    if ((r = parse_addrs(b, addr)))
        goto err;
    if (opts->server_name) {
        if (!opts->server_name[0] || strlen(opts->server_name) >= sizeof(b->server_name)) {
            r = open_fail(-EINVAL, "server_name must be 1..%zu bytes", sizeof(b->server_name) - 1);
            goto err;
        }
        snprintf(b->server_name, sizeof(b->server_name), "%s", opts->server_name);
        b->own_server_name = true;
    }
    select_addr(b, 0);
    if (opts->token && !(b->token = strdup(opts->token))) {
        r = -ENOMEM;
        goto err;
    }

    b->sslctx = SSL_CTX_new(TLS_client_method());
    if (!b->sslctx) {
        r = open_fail(-ENOMEM, "SSL_CTX_new failed");
        goto err;
    }
    SSL_CTX_set_min_proto_version(b->sslctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(b->sslctx, TLS1_3_VERSION);
    SSL_CTX_set_verify(b->sslctx, SSL_VERIFY_PEER, NULL);
    char s[256];
    if (SSL_CTX_load_verify_locations(b->sslctx, opts->ca_file, NULL) != 1) {
        ssl_errstr(s, sizeof(s));
        r = open_fail(access(opts->ca_file, R_OK) ? -errno : -EINVAL,
                      "cannot load the CA file '%s': %s", opts->ca_file, s);
        goto err;
    }
    if (opts->cert_file) {
        const char *key = opts->key_file ? opts->key_file : opts->cert_file;
        if (SSL_CTX_use_certificate_chain_file(b->sslctx, opts->cert_file) != 1 ||
            SSL_CTX_use_PrivateKey_file(b->sslctx, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(b->sslctx) != 1) {
            ssl_errstr(s, sizeof(s));
            r = open_fail(access(opts->cert_file, R_OK) ? -errno
                          : access(key, R_OK)           ? -errno
                                                        : -EINVAL,
                          "cannot load the client certificate '%s' / key '%s': %s",
                          opts->cert_file, key, s);
            goto err;
        }
    }
    pthread_mutex_lock(&b->io);
    r = connect_any(b, NULL);
    pthread_mutex_unlock(&b->io);
    if (r) {
        open_fail(r, "%s", b->err);
        goto err;
    }
    blog(b, LOG_DEBUG, "connected to rrpcd %s:%s as '%s'", b->host, b->port, b->principal);
    *ret_b = b;
    return 0;
err:
    rrpc_broker_close(b);
    return r;
}

static void reg_free(struct reg *g)
{
    free(g->eps);
    rrpc_ticket_verifier_destroy(g->v);
    free(g);
}

RRPC_API int rrpc_broker_status(rrpc_broker *b, rrpc_broker_state *ret)
{
    if (!b || !ret)
        return -EINVAL;
    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&b->io);
    struct req q;
    req_start(b, &q, "status", 0);
    struct reply u;
    reply_init(&u);
    int r = roundtrip(b, &q, &u);
    if (!r) {
        /* Checked as wire input: every field there, of its type and bounds. */
        const msgpack_object *m = &u.u.data, *deg = rrpci_mp_get(m, "degraded");
        const msgpack_object *why = rrpci_mp_get(m, "why");
        if (!rrpci_mp_str(rrpci_mp_get(m, "registry"), ret->registry, sizeof(ret->registry)) ||
            (strcmp(ret->registry, "memory") && strcmp(ret->registry, "etcd")) || !deg ||
            deg->type != MSGPACK_OBJECT_BOOLEAN ||
            !rrpci_mp_uint(rrpci_mp_get(m, "services"), &ret->services) ||
            !rrpci_mp_uint(rrpci_mp_get(m, "registrations"), &ret->registrations) ||
            !rrpci_mp_uint(rrpci_mp_get(m, "sessions"), &ret->sessions) ||
            (deg->via.boolean && !why)) {
            r = fail(b, -EPROTO, "rrpcd %s:%s: the answer to status is malformed", b->host,
                     b->port);
        } else {
            ret->degraded = deg->via.boolean;
            if (why)
                rrpci_mp_text(why, ret->why, sizeof(ret->why));
        }
    }
    reply_destroy(&u);
    req_free(&q);
    pthread_mutex_unlock(&b->io);
    rrpc_broker_current(b, ret->broker, sizeof(ret->broker));
    if (r)
        memset(ret, 0, sizeof(*ret));
    return r;
}

static int send_unregister(struct rrpc_broker *b, uint64_t id)
{
    struct req q;
    req_start(b, &q, "unregister", 1);
    pk_str(&q.pk, "reg");
    msgpack_pack_uint64(&q.pk, id);
    struct reply u;
    reply_init(&u);
    int r = roundtrip(b, &q, &u);
    reply_destroy(&u);
    req_free(&q);
    return r;
}

RRPC_API void rrpc_broker_close(rrpc_broker *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    b->stop = true;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    if (b->thread_started)
        pthread_join(b->thread, NULL);
    pthread_mutex_lock(&b->io);
    while (b->regs) {
        struct reg *g = b->regs;
        b->regs = g->next;
        if (g->id && b->ssl)
            send_unregister(b, g->id);
        reg_free(g);
    }
    disconnect(b);
    pthread_mutex_unlock(&b->io);
    SSL_CTX_free(b->sslctx);
    if (b->token)
        OPENSSL_cleanse(b->token, strlen(b->token));
    free(b->token);
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
    pthread_mutex_destroy(&b->io);
    free(b);
}

/* ---- registration and leases ---------------------------------------------- */

/*
 * Takes the ticket keys of rrpcd's answer @m to @op (register or renew) into
 * @g's verifier: exactly those are accepted from now on.  An answer without
 * them (an rrpcd from before signed tickets) is refused: no ticket could be
 * verified.
 */
static int take_keys(struct rrpc_broker *b, struct reg *g, const char *op,
                     const msgpack_object *m)
{
    const msgpack_object *ks = rrpci_mp_get(m, "keys");
    uint8_t keys[RRPC_TICKET_MAX_KEYS * RRPC_TICKET_KEY_LEN];
    if (!ks || ks->type != MSGPACK_OBJECT_ARRAY || ks->via.array.size == 0 ||
        ks->via.array.size > RRPC_TICKET_MAX_KEYS)
        return fail(b, -EPROTO, "rrpcd's answer to %s has no ticket keys (1..%d): rrpcd %s:%s "
                    "is older than this library (it hands out a shared secret, which this "
                    "library no longer takes); upgrade it", op, RRPC_TICKET_MAX_KEYS, b->host,
                    b->port);
    for (uint32_t i = 0; i < ks->via.array.size; i++) {
        const msgpack_object *k = &ks->via.array.ptr[i];
        if (k->type != MSGPACK_OBJECT_BIN || k->via.bin.size != RRPC_TICKET_KEY_LEN)
            return fail(b, -EPROTO, "rrpcd's answer to %s: ticket key %u is not %d bytes", op,
                        i, RRPC_TICKET_KEY_LEN);
        memcpy(keys + i * RRPC_TICKET_KEY_LEN, k->via.bin.ptr, RRPC_TICKET_KEY_LEN);
    }
    int r = rrpc_ticket_verifier_set_keys(g->v, keys, ks->via.array.size);
    if (r)
        return fail(b, r == -EINVAL ? -EPROTO : r, "rrpcd's answer to %s: its ticket keys are "
                    "not Ed25519 public keys", op);
    return 0;
}

/* Sends "register" for @g; on success @g has an id, a lease, and its
 * verifier the ticket keys. */
static int do_register(struct rrpc_broker *b, struct reg *g)
{
    struct req q;
    req_start(b, &q, "register", 4);
    pk_str(&q.pk, "instance");
    msgpack_pack_bin(&q.pk, sizeof(g->instance));
    msgpack_pack_bin_body(&q.pk, g->instance, sizeof(g->instance));
    pk_str(&q.pk, "service");
    pk_str(&q.pk, g->service);
    pk_str(&q.pk, "endpoints");
    msgpack_pack_array(&q.pk, (uint32_t)g->n_eps);
    for (size_t i = 0; i < g->n_eps; i++)
        rrpci_pk_endpoint(&q.pk, &g->eps[i], false, 0);
    pk_str(&q.pk, "classes");
    rrpci_pk_classes(&q.pk, g->class_mask);

    struct reply u;
    reply_init(&u);
    int r = roundtrip(b, &q, &u);
    req_free(&q);
    if (!r) {
        uint64_t id = 0, lease = 0;
        if (!rrpci_mp_uint(rrpci_mp_get(&u.u.data, "reg"), &id) || id == 0 ||
            !rrpci_mp_uint(rrpci_mp_get(&u.u.data, "lease_ms"), &lease) || lease < 100 || lease > 86400000) {
            r = fail(b, -EPROTO, "rrpcd's answer to register is malformed");
        } else if (!(r = take_keys(b, g, "register", &u.u.data))) {
            g->id = id;
            g->lease_ms = (uint32_t)lease;
        }
    }
    reply_destroy(&u);
    return r;
}

static int do_renew(struct rrpc_broker *b, struct reg *g)
{
    struct req q;
    req_start(b, &q, "renew", 1);
    pk_str(&q.pk, "reg");
    msgpack_pack_uint64(&q.pk, g->id);
    struct reply u;
    reply_init(&u);
    int r = roundtrip(b, &q, &u);
    req_free(&q);
    uint64_t lease;
    if (!r && rrpci_mp_uint(rrpci_mp_get(&u.u.data, "lease_ms"), &lease) && lease >= 100 && lease <= 86400000)
        g->lease_ms = (uint32_t)lease;
    if (!r) /* a rotation at rrpcd reaches the gate here */
        r = take_keys(b, g, "renew", &u.u.data);
    reply_destroy(&u);
    return r;
}

/* Renews (or registers again) every registration that is due; @io held. */
static int64_t lease_work(struct rrpc_broker *b)
{
    int64_t now = mono_ms(), next = now + 60000;
    for (struct reg *g = b->regs; g; g = g->next) {
        if (g->n_eps && g->due_ms <= now) {
            int r = g->id ? do_renew(b, g) : -ENOENT;
            if (r == -ENOENT) {
                if (g->id)
                    blog(b, LOG_NOTICE, "rrpcd forgot service '%s' (restart or expired "
                         "lease); registering again", g->service);
                g->id = 0;
                r = do_register(b, g);
                if (!r) {
                    blog(b, LOG_NOTICE, "service '%s' registered again with rrpcd %s:%s",
                         g->service, b->host, b->port);
                }
            }
            now = mono_ms();
            if (r) {
                blog(b, g->backoff_ms ? LOG_DEBUG : LOG_WARNING,
                     "keeping service '%s' registered: %s", g->service,
                     rrpc_broker_last_error(b));
                g->backoff_ms = g->backoff_ms ? g->backoff_ms * 2 : 100;
                int cap = (int)(g->lease_ms / 3 > 0 ? g->lease_ms / 3 : 1000);
                if (g->backoff_ms > cap)
                    g->backoff_ms = cap;
                g->due_ms = now + g->backoff_ms;
            } else {
                g->backoff_ms = 0;
                g->due_ms = now + g->lease_ms / 3;
            }
        }
        if (g->due_ms < next)
            next = g->due_ms;
    }
    return next;
}

static void *lease_thread(void *arg)
{
    struct rrpc_broker *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->io);
        int64_t next = lease_work(b);
        pthread_mutex_unlock(&b->io);
        pthread_mutex_lock(&b->lock);
        struct timespec ts = { .tv_sec = next / 1000, .tv_nsec = (next % 1000) * 1000000 };
        if (!b->stop)
            pthread_cond_timedwait(&b->cond, &b->lock, &ts);
        bool stop = b->stop;
        pthread_mutex_unlock(&b->lock);
        if (stop)
            return NULL;
    }
}

/* Finds or makes the gate of @ctx for @service; @io held. */
static int gate_locked(struct rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                       struct reg **ret_g)
{
    for (struct reg *o = b->regs; o; o = o->next) {
        if (o->ctx != ctx)
            continue;
        if (strcmp(o->service, service))
            return fail(b, -EEXIST, "this context already serves '%s'", o->service);
        *ret_g = o;
        return 0;
    }
    struct reg *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    snprintf(g->service, sizeof(g->service), "%s", service);
    g->ctx = ctx;
    g->due_ms = INT64_MAX;
    /* A new instance id for every gate: tickets used on another instance,
     * or on this server before a restart, are refused here. */
    uint8_t any = 0;
    while (!any) {
        if (RAND_bytes(g->instance, sizeof(g->instance)) != 1) {
            free(g);
            return fail(b, -EIO, "no randomness for the instance id");
        }
        for (size_t i = 0; i < sizeof(g->instance); i++)
            any |= g->instance[i];
    }
    int r = rrpc_ticket_verifier_create(service, b->skew_ms, &g->v);
    if (!r)
        r = rrpc_ticket_verifier_set_instance(g->v, g->instance);
    if (!r) {
        r = rrpc_ctx_require_ticket(ctx, rrpc_ticket_verify_cb, g->v);
        if (r)
            fail(b, r, "cannot put a ticket gate on the context: %s (call rrpc_broker_gate "
                 "or rrpc_broker_register before rrpc_listen)", rrpc_ctx_last_error(ctx));
    }
    if (r) {
        reg_free(g);
        return r;
    }
    g->next = b->regs;
    b->regs = g;
    *ret_g = g;
    return 0;
}

RRPC_API int rrpc_broker_gate(rrpc_broker *b, rrpc_ctx *ctx, const char *service)
{
    if (!b || !ctx || !service || !*service || strlen(service) > 255)
        return -EINVAL;
    struct reg *g;
    pthread_mutex_lock(&b->io);
    int r = gate_locked(b, ctx, service, &g);
    pthread_mutex_unlock(&b->io);
    return r;
}

RRPC_API int rrpc_broker_register(rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                                  const char *const *uris, size_t n, unsigned class_mask)
{
    if (!b)
        return -EINVAL;
    if (!ctx || !service || !*service || strlen(service) > 255 || !uris || n == 0 || n > 64 ||
        (class_mask & ~RRPC_CLASS_MASK_ALL))
        return fail(b, -EINVAL, "rrpc_broker_register: bad arguments");
    struct rrpci_endpoint *eps = calloc(n, sizeof(*eps));
    if (!eps)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char port[8], rest[300];
        const char *sep = uris[i] ? strstr(uris[i], "://") : NULL;
        size_t sl = sep ? (size_t)(sep - uris[i]) : 0;
        int bad = 0;
        if (!sep || !((sl == 3 && !strncmp(uris[i], "tcp", 3)) ||
                      (sl == 4 && !strncmp(uris[i], "rdma", 4))))
            bad = fail(b, RRPC_E_URI, "endpoint '%s': not tcp://HOST:PORT or rdma://HOST:PORT",
                       uris[i] ? uris[i] : "(null)");
        else if (snprintf(rest, sizeof(rest), "%s", sep + 3) >= (int)sizeof(rest) ||
                 (rest[strcspn(rest, "?/")] = 0,
                  split_addr(rest, eps[i].host, sizeof(eps[i].host), port, sizeof(port))))
            bad = fail(b, RRPC_E_URI, "endpoint '%s': not tcp://HOST:PORT or rdma://HOST:PORT",
                       uris[i]);
        else if (!strcmp(eps[i].host, "0.0.0.0") || !strcmp(eps[i].host, "::") ||
                 !eps[i].host[0])
            bad = fail(b, -EINVAL, "endpoint '%s': give the address clients dial", uris[i]);
        if (bad) {
            free(eps);
            return bad;
        }
        strcpy(eps[i].transport, sl == 3 ? "tcp" : "rdma");
        eps[i].port = (uint16_t)atoi(port); /* split_addr checked 1..65535 */
    }

    pthread_mutex_lock(&b->io);
    struct reg *g;
    int r = gate_locked(b, ctx, service, &g);
    if (!r && g->n_eps)
        r = fail(b, -EEXIST, "service '%s' is already registered through this handle", service);
    if (r) {
        pthread_mutex_unlock(&b->io);
        free(eps);
        return r;
    }
    g->eps = eps;
    g->n_eps = n;
    g->class_mask = class_mask ? class_mask : RRPC_CLASS_MASK_ALL;
    r = do_register(b, g);
    if (r) {
        free(g->eps);
        g->eps = NULL;
        g->n_eps = 0;
        pthread_mutex_unlock(&b->io);
        return r;
    }
    g->due_ms = mono_ms() + g->lease_ms / 3;
    uint32_t lease = g->lease_ms;
    pthread_mutex_unlock(&b->io);

    pthread_mutex_lock(&b->lock);
    if (!b->thread_started) {
        r = pthread_create(&b->thread, NULL, lease_thread, b);
        if (r == 0)
            b->thread_started = true;
    }
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    if (r)
        blog(b, LOG_ERR, "cannot start the lease thread: %s", strerror(r));
    blog(b, LOG_INFO, "service '%s' registered with rrpcd %s:%s (lease %u ms); new "
         "connections need a ticket", service, b->host, b->port, lease);
    return 0;
}

RRPC_API int rrpc_broker_unregister(rrpc_broker *b, const char *service)
{
    if (!b || !service)
        return -EINVAL;
    pthread_mutex_lock(&b->io);
    struct reg *g = NULL;
    for (g = b->regs; g && strcmp(g->service, service); g = g->next)
        ;
    int r = g ? 0 : fail(b, -ENOENT, "service '%s' is not registered through this handle",
                         service);
    if (g && g->id) {
        r = send_unregister(b, g->id);
        if (r == -ENOENT)
            r = 0;
        if (!r)
            g->id = 0;
    }
    /* Keep the entry (and its verifier: the context's gate uses it) but stop renewing. */
    if (g && !r) {
        g->due_ms = INT64_MAX;
        free(g->eps);
        g->eps = NULL;
        g->n_eps = 0;
    }
    pthread_mutex_unlock(&b->io);
    return r;
}

/* ---- lookup and connect ---------------------------------------------------- */

RRPC_API void rrpc_service_info_free(rrpc_service_info *info)
{
    if (!info)
        return;
    free(info->endpoints);
    free(info->instances);
    free(info);
}

/* Appends the endpoints in the array @eps (of instance @k) to @info. */
static int add_endpoints(struct rrpc_broker *b, const char *service, const msgpack_object *eps,
                         size_t k, rrpc_service_info *info)
{
    for (uint32_t i = 0; i < eps->via.array.size; i++) {
        const msgpack_object *e = &eps->via.array.ptr[i];
        struct rrpci_endpoint ep;
        long mask = rrpci_mp_classes(rrpci_mp_get(e, "classes"));
        if (!rrpci_mp_endpoint(e, &ep) || mask < 0)
            return fail(b, -EPROTO, "rrpcd's answer to lookup '%s': an endpoint of instance %zu "
                        "is malformed", service, k);
        rrpc_service_endpoint *out = &info->endpoints[info->n_endpoints++];
        snprintf(out->uri, sizeof(out->uri),
                 strchr(ep.host, ':') ? "%s://[%s]:%u" : "%s://%s:%u", ep.transport, ep.host,
                 (unsigned)ep.port);
        out->instance = k;
        out->class_mask = (unsigned)mask;
    }
    return 0;
}

static bool ticket_ok(const msgpack_object *t)
{
    return t && t->type == MSGPACK_OBJECT_BIN && t->via.bin.size > 0 &&
           t->via.bin.size <= RRPC_TICKET_SIGNED_MAX_LEN;
}

static bool endpoints_ok(const msgpack_object *eps)
{
    return eps && eps->type == MSGPACK_OBJECT_ARRAY && eps->via.array.size > 0 &&
           eps->via.array.size <= 64;
}

/*
 * The answer of lookup: "instances" (each with its endpoints and ticket), or
 * from an rrpcd that knows none, "endpoints" and "ticket" as one instance
 * without an id.
 */
static int parse_lookup(struct rrpc_broker *b, const char *service, const msgpack_object *m,
                        rrpc_service_info *info)
{
    const msgpack_object *eps = rrpci_mp_get(m, "endpoints");
    const msgpack_object *t = rrpci_mp_get(m, "ticket");
    const msgpack_object *exp = rrpci_mp_get(m, "expiry_ms");
    const msgpack_object *ins = rrpci_mp_get(m, "instances");
    if (!exp || exp->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        (ins && (ins->type != MSGPACK_OBJECT_ARRAY || ins->via.array.size == 0 ||
                 ins->via.array.size > 65536)) ||
        (!ins && (!endpoints_ok(eps) || !ticket_ok(t))))
        return fail(b, -EPROTO, "rrpcd's answer to lookup '%s' is malformed", service);
    size_t n_ins = ins ? ins->via.array.size : 1, n_eps = 0;
    for (size_t k = 0; k < n_ins; k++) {
        const msgpack_object *in = ins ? &ins->via.array.ptr[k] : NULL;
        const msgpack_object *e = in ? rrpci_mp_get(in, "endpoints") : eps;
        const msgpack_object *id = in ? rrpci_mp_get(in, "instance") : NULL;
        if (!endpoints_ok(e) || (in && !ticket_ok(rrpci_mp_get(in, "ticket"))) ||
            (id && (id->type != MSGPACK_OBJECT_BIN ||
                    id->via.bin.size != RRPC_TICKET_INSTANCE_LEN)))
            return fail(b, -EPROTO, "rrpcd's answer to lookup '%s': instance %zu is malformed",
                        service, k);
        n_eps += e->via.array.size;
    }
    info->instances = calloc(n_ins, sizeof(*info->instances));
    info->endpoints = calloc(n_eps, sizeof(*info->endpoints));
    if (!info->instances || !info->endpoints)
        return -ENOMEM;
    for (size_t k = 0; k < n_ins; k++) {
        const msgpack_object *in = ins ? &ins->via.array.ptr[k] : NULL;
        const msgpack_object *id = in ? rrpci_mp_get(in, "instance") : NULL;
        const msgpack_object *tk = in ? rrpci_mp_get(in, "ticket") : t;
        rrpc_service_instance *out = &info->instances[info->n_instances++];
        if (id)
            memcpy(out->id, id->via.bin.ptr, RRPC_TICKET_INSTANCE_LEN);
        /* Presented with this handle's identity, which the server checks
         * against the principal rrpcd signed into the ticket. */
        if (rrpc_ticket_present(tk->via.bin.ptr, tk->via.bin.size, b->principal, out->ticket,
                                sizeof(out->ticket), &out->ticket_len))
            return fail(b, -EPROTO, "rrpcd's answer to lookup '%s': the ticket of instance "
                        "%zu is not a version 3 ticket (an rrpcd older than this library?)",
                        service, k);
        int r = add_endpoints(b, service, in ? rrpci_mp_get(in, "endpoints") : eps, k, info);
        if (r)
            return r;
    }
    memcpy(info->ticket, info->instances[0].ticket, info->instances[0].ticket_len);
    info->ticket_len = info->instances[0].ticket_len;
    info->ticket_expiry_ms = (int64_t)exp->via.u64;
    return 0;
}

RRPC_API int rrpc_broker_lookup(rrpc_broker *b, const char *service,
                                rrpc_service_info **ret_info)
{
    if (!b || !service || !*service || strlen(service) > 255 || !ret_info)
        return -EINVAL;
    struct req q;
    struct reply u;
    reply_init(&u);
    pthread_mutex_lock(&b->io);
    req_start(b, &q, "lookup", 1);
    pk_str(&q.pk, "service");
    pk_str(&q.pk, service);
    int r = roundtrip(b, &q, &u);
    pthread_mutex_unlock(&b->io);
    req_free(&q);
    rrpc_service_info *info = NULL;
    if (!r) {
        info = calloc(1, sizeof(*info));
        r = info ? parse_lookup(b, service, &u.u.data, info) : -ENOMEM;
    }
    reply_destroy(&u);
    if (r) {
        rrpc_service_info_free(info);
        return r;
    }
    *ret_info = info;
    return 0;
}

/* A fresh ticket for the instance @inst of @service (a server that saw the
 * previous one would refuse it as replayed); -ENOENT when it is gone. */
static int fresh_ticket(rrpc_broker *b, const char *service, rrpc_service_instance *inst)
{
    rrpc_service_info *again = NULL;
    int r = rrpc_broker_lookup(b, service, &again);
    if (r)
        return r;
    r = -ENOENT;
    for (size_t k = 0; k < again->n_instances && r; k++)
        if (!memcmp(again->instances[k].id, inst->id, sizeof(inst->id))) {
            memcpy(inst->ticket, again->instances[k].ticket, again->instances[k].ticket_len);
            inst->ticket_len = again->instances[k].ticket_len;
            r = 0;
        }
    rrpc_service_info_free(again);
    if (r)
        fail(b, r, "an instance of '%s' left the broker meanwhile", service);
    return r;
}

RRPC_API int rrpc_connect_service(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                                  int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                  rrpc_conn **ret_conn)
{
    if (!ctx || !b || !ret_conn || timeout_ms <= 0)
        return -EINVAL;
    rrpc_service_info *info = NULL;
    int r = rrpc_broker_lookup(b, service, &info);
    if (r)
        return r;
    bool *presented = calloc(info->n_instances, sizeof(bool));
    if (!presented) {
        rrpc_service_info_free(info);
        return -ENOMEM;
    }
    for (size_t i = 0; i < info->n_endpoints; i++) {
        /* Every attempt presents a ticket of the endpoint's instance that no
         * server has seen yet. */
        rrpc_service_instance *inst = &info->instances[info->endpoints[i].instance];
        if (presented[info->endpoints[i].instance]) {
            r = fresh_ticket(b, service, inst);
            if (r == -ENOENT)
                continue; /* that server left; try the next endpoint */
            if (r)
                break;
        }
        presented[info->endpoints[i].instance] = true;
        r = rrpc_connect_ticket(ctx, info->endpoints[i].uri, inst->ticket, inst->ticket_len,
                                timeout_ms, fn, user, ret_conn);
        if (!r)
            break;
        fail(b, r, "connecting to '%s' at %s: %s (%s)", service, info->endpoints[i].uri,
             rrpc_strerror(r), rrpc_ctx_last_error(ctx));
    }
    free(presented);
    rrpc_service_info_free(info);
    return r;
}

/* ---- watching a service ---------------------------------------------------- */

#define WATCH_QUEUE_MAX 4096 /* events not taken yet; beyond, the thread stops reading */

struct winst { /* one instance of the set last pushed */
    char *key;  /* instance id and endpoints: an instance whose endpoints change is
                   removed and added */
    uint8_t id[RRPC_TICKET_INSTANCE_LEN];
    size_t n;
    rrpc_service_endpoint *eps;
};

struct wev {
    struct wev *next;
    int type;
    struct winst in; /* owns key and eps */
};

struct rrpc_broker_watch {
    struct rrpc_broker *s; /* a session of its own, with the parent's list and credentials */
    char service[256];
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; /* the queue, stop, err */
    pthread_cond_t cond; /* CLOCK_MONOTONIC: an event queued or taken, or stop */
    bool stop;
    struct wev *head, *tail;
    size_t qlen;
    int err; /* a failure to report once through rrpc_broker_watch_next */
    struct winst *set;
    size_t n_set;
};

static void winst_free(struct winst *in)
{
    free(in->key);
    free(in->eps);
}

/* A second handle on @b's list and credentials, sharing its TLS context. */
static struct rrpc_broker *session_like(struct rrpc_broker *b)
{
    struct rrpc_broker *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->fd = -1;
    pthread_mutex_init(&s->io, NULL);
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    memcpy(s->addrs, b->addrs, sizeof(s->addrs));
    s->n_addrs = b->n_addrs;
    s->own_server_name = b->own_server_name;
    memcpy(s->server_name, b->server_name, sizeof(s->server_name));
    s->timeout_ms = b->timeout_ms;
    s->skew_ms = b->skew_ms;
    s->log = b->log;
    s->log_user = b->log_user;
    s->log_level = b->log_level;
    if (b->token && !(s->token = strdup(b->token))) {
        rrpc_broker_close(s);
        return NULL;
    }
    SSL_CTX_up_ref(b->sslctx);
    s->sslctx = b->sslctx;
    pthread_mutex_lock(&b->lock);
    int cur = b->cur;
    pthread_mutex_unlock(&b->lock);
    select_addr(s, cur);
    return s;
}

/* Reads the instances of a push (or of nothing: an empty set) into @ret (n in @ret_n). */
static int parse_set(struct rrpc_broker *b, const char *service, const msgpack_object *ins,
                     struct winst **ret, size_t *ret_n)
{
    if (!ins || ins->type != MSGPACK_OBJECT_ARRAY || ins->via.array.size > 65536)
        return fail(b, -EPROTO, "rrpcd's watch push for '%s' is malformed", service);
    size_t n = ins->via.array.size;
    struct winst *set = calloc(n ? n : 1, sizeof(*set));
    if (!set)
        return -ENOMEM;
    int r = 0;
    for (size_t k = 0; k < n && !r; k++) {
        const msgpack_object *in = &ins->via.array.ptr[k];
        const msgpack_object *id = rrpci_mp_get(in, "instance");
        const msgpack_object *eps = rrpci_mp_get(in, "endpoints");
        if (!endpoints_ok(eps) || (id && (id->type != MSGPACK_OBJECT_BIN ||
                                          id->via.bin.size != RRPC_TICKET_INSTANCE_LEN))) {
            r = fail(b, -EPROTO, "rrpcd's watch push for '%s': instance %zu is malformed",
                     service, k);
            break;
        }
        if (id)
            memcpy(set[k].id, id->via.bin.ptr, RRPC_TICKET_INSTANCE_LEN);
        rrpc_service_info tmp = { .endpoints = calloc(eps->via.array.size,
                                                      sizeof(rrpc_service_endpoint)) };
        size_t keylen = 2 * RRPC_TICKET_INSTANCE_LEN + 2 + eps->via.array.size * 310;
        set[k].key = malloc(keylen);
        if (!tmp.endpoints || !set[k].key) {
            free(tmp.endpoints);
            r = -ENOMEM;
            break;
        }
        r = add_endpoints(b, service, eps, 0, &tmp);
        set[k].eps = tmp.endpoints;
        set[k].n = tmp.n_endpoints;
        size_t off = 0;
        for (size_t i = 0; i < RRPC_TICKET_INSTANCE_LEN; i++)
            off += (size_t)snprintf(set[k].key + off, keylen - off, "%02x", set[k].id[i]);
        for (size_t i = 0; i < set[k].n && !r; i++)
            off += (size_t)snprintf(set[k].key + off, keylen - off, "|%s", set[k].eps[i].uri);
    }
    if (r) {
        for (size_t k = 0; k < n; k++)
            winst_free(&set[k]);
        free(set);
        return r;
    }
    *ret = set;
    *ret_n = n;
    return 0;
}

static bool in_set(const struct winst *set, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(set[i].key, key))
            return true;
    return false;
}

/* Queues one event (a copy of @in); waits while the queue is full.  @mu held. */
static int queue_event(struct rrpc_broker_watch *w, int type, const struct winst *in)
{
    while (w->qlen >= WATCH_QUEUE_MAX && !w->stop)
        pthread_cond_wait(&w->cond, &w->mu);
    if (w->stop)
        return -ECANCELED;
    struct wev *e = calloc(1, sizeof(*e));
    if (!e || !(e->in.key = strdup(in->key)) ||
        !(e->in.eps = malloc((in->n ? in->n : 1) * sizeof(*in->eps)))) {
        if (e)
            free(e->in.key);
        free(e);
        return -ENOMEM;
    }
    e->type = type;
    memcpy(e->in.id, in->id, sizeof(in->id));
    e->in.n = in->n;
    memcpy(e->in.eps, in->eps, in->n * sizeof(*in->eps));
    if (w->tail)
        w->tail->next = e;
    else
        w->head = e;
    w->tail = e;
    w->qlen++;
    pthread_cond_broadcast(&w->cond);
    return 0;
}

/* The set is now @set: queues what left and what came, and keeps @set. */
static void apply_set(struct rrpc_broker_watch *w, struct winst *set, size_t n)
{
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->n_set; i++)
        if (!in_set(set, n, w->set[i].key))
            queue_event(w, RRPC_WATCH_REMOVED, &w->set[i]);
    for (size_t i = 0; i < n; i++)
        if (!in_set(w->set, w->n_set, set[i].key))
            queue_event(w, RRPC_WATCH_ADDED, &set[i]);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < w->n_set; i++)
        winst_free(&w->set[i]);
    free(w->set);
    w->set = set;
    w->n_set = n;
}

/* Sends "watch" on a session (made, or failed over, by roundtrip). */
static int subscribe(struct rrpc_broker_watch *w)
{
    struct req q;
    struct reply u;
    reply_init(&u);
    pthread_mutex_lock(&w->s->io);
    req_start(w->s, &q, "watch", 1);
    pk_str(&q.pk, "service");
    pk_str(&q.pk, w->service);
    int r = roundtrip(w->s, &q, &u);
    uint64_t id;
    if (!r && !rrpci_mp_uint(rrpci_mp_get(&u.u.data, "watch"), &id))
        r = fail(w->s, -EPROTO, "rrpcd's answer to watch '%s' is malformed", w->service);
    pthread_mutex_unlock(&w->s->io);
    req_free(&q);
    reply_destroy(&u);
    return r;
}

/*
 * Waits up to @wait_ms for a frame on the watch's session and reads it into
 * @rp: 0, -EAGAIN (nothing came), or a session error (the session is closed).
 */
static int read_frame(struct rrpc_broker *b, struct reply *rp, int wait_ms)
{
    if (!SSL_pending(b->ssl)) {
        struct pollfd p = { .fd = b->fd, .events = POLLIN };
        int n = poll(&p, 1, wait_ms);
        if (n == 0 || (n < 0 && errno == EINTR))
            return -EAGAIN;
    }
    int64_t deadline = mono_ms() + b->timeout_ms;
    uint8_t hdr[4];
    int r = tls_do(b, OP_READ, hdr, 4, deadline);
    uint32_t len = r ? 0 : rrpci_get_le32(hdr);
    if (!r && (len == 0 || len > CTL_MAX_FRAME))
        r = fail(b, -EPROTO, "rrpcd %s:%s sent a frame of %u bytes", b->host, b->port, len);
    char *buf = r ? NULL : malloc(len);
    if (!r && !buf)
        r = -ENOMEM;
    if (!r)
        r = tls_do(b, OP_READ, buf, len, deadline);
    size_t off = 0;
    reply_destroy(rp);
    reply_init(rp);
    if (!r && (rrpci_mp_check(buf, len, 8) ||
               msgpack_unpack_next(&rp->u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
               rp->u.data.type != MSGPACK_OBJECT_MAP))
        r = fail(b, -EPROTO, "rrpcd %s:%s sent malformed msgpack", b->host, b->port);
    if (r) {
        free(buf);
        disconnect(b);
        return r;
    }
    rp->buf = buf;
    return 0;
}

static void *watch_thread(void *arg)
{
    struct rrpc_broker_watch *w = arg;
    struct rrpc_broker *s = w->s;
    int backoff = 0;
    char why[ERR_MAX] = "";
    struct reply u;
    reply_init(&u);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        if (backoff && !w->stop) {
            int64_t until = mono_ms() + backoff;
            struct timespec ts = { .tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000 };
            pthread_cond_timedwait(&w->cond, &w->mu, &ts);
        }
        bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
        if (!s->ssl) {
            blog(s, LOG_NOTICE, "watch of '%s': subscribing again (%s)", w->service, why);
            int r = subscribe(w);
            if (r) {
                blog(s, LOG_WARNING, "watch of '%s': %s", w->service, rrpc_broker_last_error(s));
                pthread_mutex_lock(&w->mu);
                if (!w->err)
                    w->err = r; /* said once by rrpc_broker_watch_next */
                pthread_cond_broadcast(&w->cond);
                pthread_mutex_unlock(&w->mu);
                backoff = backoff ? (backoff * 2 > 2000 ? 2000 : backoff * 2) : 100;
                continue;
            }
            backoff = 0;
        }
        int r = read_frame(s, &u, 200);
        if (r == -EAGAIN)
            continue;
        if (r) {
            snprintf(why, sizeof(why), "the session ended: %.*s", WHY_MAX,
                     rrpc_broker_last_error(s));
            continue; /* the session is closed: subscribe again (the next broker if need be) */
        }
        const msgpack_object *m = &u.u.data;
        char push[16] = "";
        if (!rrpci_mp_str(rrpci_mp_get(m, "push"), push, sizeof(push)) || strcmp(push, "watch"))
            continue; /* not a push: nothing we asked for */
        struct winst *set = NULL;
        size_t n = 0;
        r = parse_set(s, w->service, rrpci_mp_get(m, "instances"), &set, &n);
        if (r) {
            blog(s, LOG_WARNING, "watch of '%s': %s; subscribing again", w->service,
                 rrpc_broker_last_error(s));
            pthread_mutex_lock(&s->io);
            disconnect(s);
            pthread_mutex_unlock(&s->io);
            snprintf(why, sizeof(why), "a bad push");
            continue;
        }
        apply_set(w, set, n);
    }
    reply_destroy(&u);
    return NULL;
}

RRPC_API void rrpc_broker_watch_close(rrpc_broker_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    if (w->thread_started)
        pthread_join(w->thread, NULL);
    while (w->head) {
        struct wev *e = w->head;
        w->head = e->next;
        winst_free(&e->in);
        free(e);
    }
    for (size_t i = 0; i < w->n_set; i++)
        winst_free(&w->set[i]);
    free(w->set);
    rrpc_broker_close(w->s);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

RRPC_API int rrpc_broker_watch_open(rrpc_broker *b, const char *service,
                                    rrpc_broker_watch **ret_w)
{
    if (!b || !service || !*service || strlen(service) > 255 || !ret_w)
        return -EINVAL;
    struct rrpc_broker_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    snprintf(w->service, sizeof(w->service), "%s", service);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    w->s = session_like(b);
    int r = w->s ? subscribe(w) : -ENOMEM;
    if (!r) {
        r = -pthread_create(&w->thread, NULL, watch_thread, w);
        w->thread_started = r == 0;
    }
    if (r) {
        if (w->s)
            fail(b, r, "%s", rrpc_broker_last_error(w->s));
        rrpc_broker_watch_close(w);
        return r;
    }
    *ret_w = w;
    return 0;
}

RRPC_API int rrpc_broker_watch_next(rrpc_broker_watch *w, int timeout_ms, rrpc_watch_event *ev)
{
    if (!w || !ev || timeout_ms < 0)
        return -EINVAL;
    int64_t until = mono_ms() + timeout_ms;
    struct timespec ts = { .tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000 };
    pthread_mutex_lock(&w->mu);
    while (!w->head && !w->err && !w->stop && mono_ms() < until)
        pthread_cond_timedwait(&w->cond, &w->mu, &ts);
    struct wev *e = w->head;
    int r = 0;
    if (e) {
        w->head = e->next;
        if (!w->head)
            w->tail = NULL;
        w->qlen--;
        pthread_cond_broadcast(&w->cond);
    } else if (w->err) {
        r = w->err;
        w->err = 0;
    } else {
        r = -ETIMEDOUT;
    }
    pthread_mutex_unlock(&w->mu);
    if (!e)
        return r;
    memset(ev, 0, sizeof(*ev));
    ev->type = e->type;
    memcpy(ev->instance, e->in.id, sizeof(ev->instance));
    ev->n_endpoints = e->in.n < RRPC_WATCH_MAX_ENDPOINTS ? e->in.n : RRPC_WATCH_MAX_ENDPOINTS;
    memcpy(ev->endpoints, e->in.eps, ev->n_endpoints * sizeof(*ev->endpoints));
    winst_free(&e->in);
    free(e);
    return 0;
}

RRPC_API const char *rrpc_broker_watch_last_error(rrpc_broker_watch *w)
{
    return w ? rrpc_broker_last_error(w->s) : "";
}

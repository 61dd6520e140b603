/* SPDX-License-Identifier: MIT */
/* GET /metrics over libmicrohttpd (metrics_http.h says what is bounded). */
#include "util/metrics_http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "util/resolve.h"

/* A connection as the server's own bookkeeping sees it: MHD keeps the
 * socket, we keep a duplicate of its descriptor so shutdown() can end it from
 * the sweeper's thread without ever touching a descriptor number MHD has
 * closed and the process reused. */
struct slot {
    struct slot *next;
    struct MHD_Connection *conn;
    int fd;          /* our dup of the socket, or -1 */
    double deadline; /* CLOCK_MONOTONIC s: head whole, or answer taken, by then */
    bool answering;  /* a request head arrived; its answer is going out */
    bool cut;        /* shut down by us; MHD closes it on its next pass */
};

struct rrpci_mhttp {
    struct MHD_Daemon *d;
    int port;
    rrpci_mhttp_text_fn text;
    rrpci_mhttp_log_fn log;
    void *user;
    unsigned max_conns;
    double header_s, answer_s;
    pthread_mutex_t mu; /* the slots, the counters and stop */
    pthread_cond_t cv;  /* the sweeper's: a slot came or went, or stop */
    pthread_t sweeper;
    bool sweeper_on, stop;
    struct slot *slots; /* in order of arrival */
    unsigned live;      /* slots not cut */
    uint64_t evicted, timed_out, refused;
    double log_t0; /* the last line about them: at most one per 10 s */
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* With the lock held: ends @s's connection (MHD sees the end of the stream
 * and closes it). */
static void cut(struct rrpci_mhttp *h, struct slot *s, uint64_t *counter)
{
    if (s->cut)
        return;
    s->cut = true;
    h->live--;
    (*counter)++;
    if (s->fd >= 0)
        shutdown(s->fd, SHUT_RDWR);
}

static struct slot *slot_of(struct rrpci_mhttp *h, struct MHD_Connection *conn)
{
    for (struct slot *s = h->slots; s; s = s->next)
        if (s->conn == conn)
            return s;
    return NULL;
}

#define NOTE_MAX 256

/* With the lock held: a line for the log callback about what was cut or
 * refused, at most every 10 s, with the counts so far, into @msg (""
 * otherwise).  Logged once the lock is released (the callback may take
 * locks of its own). */
static void note(struct rrpci_mhttp *h, char *msg)
{
    double now = mono_now();
    msg[0] = 0;
    if (!h->log || (h->log_t0 != 0 && now - h->log_t0 < 10))
        return;
    h->log_t0 = now;
    snprintf(msg, NOTE_MAX, "so far %llu connection(s) closed for a newer one at the "
             "connection limit, %llu at their deadline, %llu refused (every place answering)",
             (unsigned long long)h->evicted, (unsigned long long)h->timed_out,
             (unsigned long long)h->refused);
}

static void note_out(struct rrpci_mhttp *h, const char *msg)
{
    if (msg[0])
        h->log(h->user, msg);
}

/* The sweeper: ends every connection past its deadline.  It sleeps until the
 * next deadline, and without connections until one comes (no wake-ups). */
static void *sweep_main(void *arg)
{
    struct rrpci_mhttp *h = arg;
    char msg[NOTE_MAX];
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        double now = mono_now(), next = 0;
        bool cut_any = false;
        for (struct slot *s = h->slots; s; s = s->next) {
            if (s->cut)
                continue;
            if (s->deadline <= now) {
                cut(h, s, &h->timed_out);
                cut_any = true;
            } else if (next == 0 || s->deadline < next) {
                next = s->deadline;
            }
        }
        if (cut_any) {
            note(h, msg);
            if (msg[0]) {
                pthread_mutex_unlock(&h->mu);
                note_out(h, msg);
                pthread_mutex_lock(&h->mu);
                continue; /* the slots may have changed meanwhile */
            }
        }
        if (next == 0) {
            pthread_cond_wait(&h->cv, &h->mu);
        } else {
            struct timespec ts = { .tv_sec = (time_t)next,
                                   .tv_nsec = (long)((next - (double)(time_t)next) * 1e9) };
            pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* A new connection, before MHD takes it: at the limit the oldest one that
 * has no request head yet (a partial head, or idle between requests) makes
 * room, so a scrape never waits behind slow clients; when every place is
 * answering a request, the new one is refused (closed). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addr, (void)addrlen;
    struct rrpci_mhttp *h = cls;
    enum MHD_Result ok = MHD_YES;
    char msg[NOTE_MAX] = "";
    pthread_mutex_lock(&h->mu);
    if (h->live >= h->max_conns) {
        struct slot *s = h->slots;
        while (s && (s->cut || s->answering))
            s = s->next;
        if (s) {
            cut(h, s, &h->evicted);
        } else {
            h->refused++;
            ok = MHD_NO;
        }
        note(h, msg);
    }
    pthread_mutex_unlock(&h->mu);
    note_out(h, msg);
    return ok;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)socket_context;
    struct rrpci_mhttp *h = cls;
    pthread_mutex_lock(&h->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct slot *s = calloc(1, sizeof(*s));
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (s) {
            s->conn = conn;
            s->fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
            s->deadline = mono_now() + h->header_s;
            struct slot **pp = &h->slots;
            while (*pp)
                pp = &(*pp)->next;
            *pp = s;
            h->live++;
            if (s->fd < 0) /* cannot be ended from outside: not kept at all */
                cut(h, s, &h->refused);
        }
        /* Out of memory: MHD's own idle timeout still ends it. */
    } else {
        for (struct slot **pp = &h->slots; *pp; pp = &(*pp)->next) {
            struct slot *s = *pp;
            if (s->conn != conn)
                continue;
            *pp = s->next;
            if (!s->cut)
                h->live--;
            if (s->fd >= 0)
                close(s->fd);
            free(s);
            break;
        }
    }
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* A request head arrived whole (@answering), or its answer went out: the
 * connection's deadline moves to the answer's, or to the next head's. */
static void slot_phase(struct rrpci_mhttp *h, struct MHD_Connection *conn, bool answering)
{
    pthread_mutex_lock(&h->mu);
    struct slot *s = slot_of(h, conn);
    if (s && !s->cut) {
        s->answering = answering;
        s->deadline = mono_now() + (answering ? h->answer_s : h->header_s);
        pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)req_cls, (void)code;
    slot_phase(cls, conn, false);
}

/* Splits @s into @host and @port; 0 or -EINVAL with the reason in *why. */
static int split(const char *s, char *host, size_t hs, char *port, size_t ps, const char **why)
{
    const char *colon;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':') {
            *why = "expected [IPv6]:PORT, for example [::1]:9464";
            return -EINVAL;
        }
        if ((size_t)(rb - s - 1) >= hs) {
            *why = "the host is too long";
            return -EINVAL;
        }
        memcpy(host, s + 1, (size_t)(rb - s - 1));
        host[rb - s - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) {
            *why = "expected HOST:PORT, for example 127.0.0.1:9464 (an IPv6 address in [])";
            return -EINVAL;
        }
        if ((size_t)(colon - s) >= hs) {
            *why = "the host is too long";
            return -EINVAL;
        }
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
        if (strchr(host, ':')) {
            *why = "an IPv6 address goes in brackets: [ADDRESS]:PORT";
            return -EINVAL;
        }
    }
    if (!host[0]) {
        *why = "the host is missing: name the address to serve on (127.0.0.1 for this host "
               "only, 0.0.0.0 or [::] for every address)";
        return -EINVAL;
    }
    /* Every address only when said in full: glibc's resolver reads "*" as no
     * host at all, and inet_aton reads "0" as 0.0.0.0 (and "127.1" as
     * 127.0.0.1), so both would bind more than was written. */
    struct in_addr a4;
    if (strcmp(host, "*") == 0) {
        *why = "\"*\" is not an address: say 0.0.0.0 (every IPv4 address) or [::] (every "
               "address), or name the one to serve on";
        return -EINVAL;
    }
    if (inet_aton(host, &a4) && inet_pton(AF_INET, host, &a4) != 1) {
        *why = "write an IPv4 address in full, a.b.c.d (0.0.0.0 for every IPv4 address): a "
               "shortened one such as \"0\" or \"127.1\" is refused";
        return -EINVAL;
    }
    const char *p = colon + 1;
    size_t n = strspn(p, "0123456789");
    if (!*p || p[n] || n > 5 || atoi(p) > 65535 || n >= ps) {
        *why = "the port must be a number 0..65535 (0 picks a free one)";
        return -EINVAL;
    }
    memcpy(port, p, n + 1);
    return 0;
}

int rrpci_mhttp_check_listen(const char *listen, char *why, size_t whylen)
{
    char host[RRPCI_MHTTP_ADDR_MAX], port[8];
    const char *w = "no address given";
    int r = listen && strlen(listen) < RRPCI_MHTTP_ADDR_MAX
                ? split(listen, host, sizeof(host), port, sizeof(port), &w)
                : -EINVAL;
    if (r && why && whylen)
        snprintf(why, whylen, "%s", listen && *listen ? w : "no address given");
    return r;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *body,
                              const char *allow)
{
    struct MHD_Response *rsp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!rsp)
        return MHD_NO;
    MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(rsp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result r = MHD_queue_response(conn, status, rsp);
    MHD_destroy_response(rsp);
    return r;
}

/* Every request, on the server's thread.  Answered on the first call, before
 * any body is read: a body is never wanted (the connection then closes). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)version, (void)upload_data, (void)upload_data_size, (void)req_cls;
    struct rrpci_mhttp *h = cls;
    slot_phase(h, conn, true);
    if (strcmp(url, "/metrics") != 0)
        return answer(conn, MHD_HTTP_NOT_FOUND, "not found: only /metrics is served here\n",
                      NULL);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                      "method not allowed: /metrics is read with GET\n", "GET, HEAD");
    char *text = NULL;
    size_t len = 0;
    if (h->text(h->user, &text, &len) < 0 || !text) {
        free(text);
        return answer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR,
                      "the metrics could not be read (out of memory)\n", NULL);
    }
    struct MHD_Response *rsp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!rsp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, RRPCI_MHTTP_CONTENT_TYPE);
    enum MHD_Result r = MHD_queue_response(conn, MHD_HTTP_OK, rsp);
    MHD_destroy_response(rsp);
    return r;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    struct rrpci_mhttp *h = cls;
    if (!h->log)
        return;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = 0;
    h->log(h->user, msg);
}

/* The words for a failed bind of @listen to follow it. */
static const char *bind_why(int e)
{
    switch (e) {
    case EADDRINUSE:
        return "address in use: another socket listens there (choose another port, or stop "
               "what holds it)";
    case EADDRNOTAVAIL:
        return "not an address of this host (give one of its addresses, or 127.0.0.1)";
    case EACCES:
        return "permission denied (ports below 1024 need privileges: choose a higher port)";
    default:
        return strerror(e);
    }
}

int rrpci_mhttp_start(const struct rrpci_mhttp_opts *o, struct rrpci_mhttp **ret, char *why,
                      size_t whylen)
{
    char host[RRPCI_MHTTP_ADDR_MAX], port[8];
    const char *w = NULL;
    if (!o || !ret || !o->text || o->max_conns < 1 || o->timeout_s < 1 ||
        o->max_conns > 100000) {
        snprintf(why, whylen, "internal error: bad options for the metrics server");
        return -EINVAL;
    }
    if (rrpci_mhttp_check_listen(o->listen, why, whylen))
        return -EINVAL;
    split(o->listen, host, sizeof(host), port, sizeof(port), &w);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g) {
        int e = errno;
        snprintf(why, whylen, "cannot resolve %s: %s", host, rrpci_resolve_why(g));
        return rrpci_resolve_code(g, e);
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, r = 0;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 64))
        r = -errno;
    freeaddrinfo(res);
    if (r) {
        snprintf(why, whylen, "cannot listen there: %s", bind_why(-r));
        if (fd >= 0)
            close(fd);
        return r;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    struct rrpci_mhttp *h = calloc(1, sizeof(*h));
    if (!h) {
        close(fd);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    h->text = o->text;
    h->log = o->log;
    h->user = o->user;
    h->max_conns = o->max_conns;
    unsigned head = o->header_timeout_s ? o->header_timeout_s
                                        : o->timeout_s < 5 ? o->timeout_s : 5;
    h->header_s = head;
    h->answer_s = o->timeout_s;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&h->sweeper, NULL, sweep_main, h) != 0) {
        close(fd);
        rrpci_mhttp_stop(h);
        snprintf(why, whylen, "cannot start the metrics server's thread");
        return -EAGAIN;
    }
    h->sweeper_on = true;
    /* One thread that polls (epoll) and answers; a pipe of its own (ITC) wakes it to stop.
     * MHD's own limit leaves room for connections cut and not yet closed: on_accept
     * keeps max_conns live. */
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
                                MHD_USE_ERROR_LOG,
                            0, on_accept, h, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_log, h,
                            MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_LIMIT, o->max_conns + 64,
                            MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_END);
    if (!h->d) {
        close(fd);
        rrpci_mhttp_stop(h);
        snprintf(why, whylen, "libmicrohttpd would not start a server there");
        return -EIO;
    }
    *ret = h;
    return 0;
}

int rrpci_mhttp_port(const struct rrpci_mhttp *h)
{
    return h ? h->port : -EINVAL;
}

void rrpci_mhttp_stop(struct rrpci_mhttp *h)
{
    if (!h)
        return;
    if (h->d)
        MHD_stop_daemon(h->d); /* joins the thread, closes the listening socket and the
                                * connections (each through on_connection) */
    if (h->sweeper_on) {
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->sweeper, NULL);
    }
    while (h->slots) { /* none left after MHD_stop_daemon; to be sure */
        struct slot *s = h->slots;
        h->slots = s->next;
        if (s->fd >= 0)
            close(s->fd);
        free(s);
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* SPDX-License-Identifier: MIT */
/* GET /metrics over libmicrohttpd (metrics_http.h says what is bounded). */
#include "util/metrics_http.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "util/resolve.h"

struct rrpci_mhttp {
    struct MHD_Daemon *d;
    int port;
    rrpci_mhttp_text_fn text;
    rrpci_mhttp_log_fn log;
    void *user;
};

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
    if (!o || !ret || !o->text || o->max_conns < 1 || o->timeout_s < 1) {
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
    /* One thread that polls (epoll) and answers; a pipe of its own (ITC) wakes it to stop. */
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_log, h,
                            MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_LIMIT, o->max_conns,
                            MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
                            MHD_OPTION_END);
    if (!h->d) {
        close(fd);
        free(h);
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
    MHD_stop_daemon(h->d); /* joins the thread and closes the listening socket */
    free(h);
}

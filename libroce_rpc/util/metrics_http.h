/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics over HTTP, served by Debian's libmicrohttpd on a thread of
 * its own: a context with metrics_listen set (core/ctx.c) and rrpcd
 * (daemon/metrics.c) serve their Prometheus text with it.
 *
 * What a client can make it hold is bounded, and no client can make a scrape
 * wait: at most max_conns connections; at that limit a new connection is
 * taken at once and the oldest one without a whole request head (partial, or
 * idle between requests) is closed for it (only when every place is
 * answering a request is the new one closed).  A request head must arrive
 * whole within header_timeout_s of the accept or of the previous answer,
 * however slowly it trickles; an answer must be taken within timeout_s; a
 * connection without progress for timeout_s is closed; each holds
 * libmicrohttpd's default 32 KiB of buffers (a longer request head gets 431).
 * Only /metrics exists (404 elsewhere) and only GET and HEAD are served
 * there (405 with Allow).  Idle, both threads (MHD's and the deadline
 * sweeper) sleep with no timeout: no wake-ups.
 */
#ifndef RRPCI_METRICS_HTTP_H
#define RRPCI_METRICS_HTTP_H

#include <stddef.h>

/* The longest metrics_listen value (HOST:PORT, [IPv6]:PORT). */
#define RRPCI_MHTTP_ADDR_MAX 300

/* The Content-Type of the Prometheus text exposition format 0.0.4. */
#define RRPCI_MHTTP_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*
 * Makes the text of one scrape, on the server's thread: a malloc'd buffer in
 * *@ret_text (the server frees it) of *@ret_len bytes.  Returns 0 or a
 * negative errno (the scrape gets 500).
 */
typedef int (*rrpci_mhttp_text_fn)(void *user, char **ret_text, size_t *ret_len);
/* A message of libmicrohttpd's about a client (a timeout, a bad request), on
 * the server's thread. */
typedef void (*rrpci_mhttp_log_fn)(void *user, const char *msg);

struct rrpci_mhttp_opts {
    const char *listen; /* HOST:PORT or [IPv6]:PORT, HOST required; port 0: a free one */
    unsigned max_conns; /* connections held at once, >= 1 */
    unsigned timeout_s; /* a connection without progress this long is closed, >= 1; and an
                         * answer not taken this long after its request */
    unsigned header_timeout_s; /* a request head must arrive whole this long after the
                                * accept (or the previous answer); 0: min(timeout_s, 5) */
    rrpci_mhttp_text_fn text;
    rrpci_mhttp_log_fn log; /* may be NULL */
    void *user;             /* for text and log */
};

struct rrpci_mhttp;

/*
 * Checks the form of @listen (HOST:PORT or [IPv6]:PORT, a host given, a
 * decimal port 0..65535), not whether it binds.  The host is a name, an IPv4
 * address written in full (a.b.c.d) or an IPv6 address; every address only
 * when said (0.0.0.0, [::]): "*", "0" and other shortened IPv4 forms are
 * refused.  0, or -EINVAL with the
 * reason (words that follow "metrics_listen=VALUE: ") in @why.
 */
int rrpci_mhttp_check_listen(const char *listen, char *why, size_t whylen);

/*
 * Resolves @o->listen (the first address getaddrinfo gives), binds and
 * listens there, and starts the server's thread.  On success *@ret is the
 * caller's, for rrpci_mhttp_stop.  Errors, with what failed and what to do in
 * @why: -EINVAL (a malformed address, or options), -EADDRINUSE (another
 * socket holds the address), -EADDRNOTAVAIL (not an address of this host),
 * -EACCES (a privileged port), RRPC_E_UNKNOWN_HOST and the other codes of
 * util/resolve.h, -ENOMEM, -EIO (libmicrohttpd would not start), other
 * negative errnos of socket/bind/listen.
 */
int rrpci_mhttp_start(const struct rrpci_mhttp_opts *o, struct rrpci_mhttp **ret, char *why,
                      size_t whylen);

/* The TCP port it listens on (the one picked when the port was 0). */
int rrpci_mhttp_port(const struct rrpci_mhttp *h);

/* Closes the listening socket and every connection and joins the thread: no
 * text callback runs after it returns.  Accepts NULL. */
void rrpci_mhttp_stop(struct rrpci_mhttp *h);

/*
 * The functions above as the loadable module roce_rpc-metrics_http-X.Y.so
 * exports them (util/metrics_http_module.c), so that libroce_rpc needs
 * libmicrohttpd only once a context serves /metrics (transport/module.h).
 * The module's one exported symbol, RRPCI_MHTTP_ENTRY_NAME, returns this
 * table; the core checks @abi.
 */
#define RRPCI_MHTTP_ABI 1
#define RRPCI_MHTTP_ENTRY rrpci_metrics_http_module_v1
#define RRPCI_MHTTP_ENTRY_NAME "rrpci_metrics_http_module_v1"
struct rrpci_mhttp_module {
    unsigned abi; /* RRPCI_MHTTP_ABI */
    int (*check_listen)(const char *listen, char *why, size_t whylen);
    int (*start)(const struct rrpci_mhttp_opts *o, struct rrpci_mhttp **ret, char *why,
                 size_t whylen);
    int (*port)(const struct rrpci_mhttp *h);
    void (*stop)(struct rrpci_mhttp *h);
};
typedef const struct rrpci_mhttp_module *(*rrpci_mhttp_entry_fn)(void);

/* The core's: the module loaded (once; thread-safe), or NULL with the path,
 * the loader's reason and the package to install in @why
 * (core/metrics_serve.c). */
const struct rrpci_mhttp_module *rrpci_mhttp_module_load(char *why, size_t whylen);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The TLS control port's listener (server_int.h names the server's other
 * files): the TLS context, the listening socket, accept, and the timer that
 * sweeps expired leases.  The server is handed the registry and the store it
 * serves from; it makes the watches and hears of the store's writes.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "server_int.h"

/* ---- accepting ----------------------------------------------------------------- */

static void accept_resume_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)revents;
    struct server *srv = w->data;
    ev_io_start(srv->loop, &srv->accept_w);
}

static void accept_cb(struct ev_loop *l, ev_io *w, int revents)
{
    (void)l, (void)revents;
    struct server *srv = w->data;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(srv->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                LOG(LOG_WARNING, "accept: %s; pausing for 100 ms", strerror(errno));
                ev_io_stop(srv->loop, &srv->accept_w);
                ev_timer_start(srv->loop, &srv->accept_pause_w);
            }
            return;
        }
        char host[INET6_ADDRSTRLEN] = "?", peer[64];
        int port = 0;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            port = ntohs(a->sin6_port);
        }
        snprintf(peer, sizeof(peer), "%s:%d", host, port);
        bool full;
        struct source *src = admit_source_get(srv, &ss, &full);
        if (!src) {
            metrics_refused(full ? REFUSED_PER_SOURCE : REFUSED_NO_MEMORY);
            admit_log_refusal(srv, peer, full ? "max_connections_per_source reached for this "
                                                "address"
                                              : "out of memory");
            close(fd);
            continue;
        }
        /* The last eighth of the slots is kept for addresses holding none: an
         * address that holds sessions gets one there only in place of an
         * anonymous session of its own (or of an address holding as many). */
        int max = srv->cfg->max_connections, limit = src->n == 1 ? max : max - max / 8;
        if (srv->n_conns >= limit) {
            struct conn *victim = admit_pick_victim(srv, src);
            if (!victim) {
                bool reserved = srv->n_conns < max;
                metrics_refused(reserved ? REFUSED_RESERVED : REFUSED_MAX_CONNECTIONS);
                admit_log_refusal(srv, peer, reserved
                                      ? "the last eighth of max_connections is kept for "
                                        "addresses holding no session, and this one holds some"
                                      : "max_connections reached, and no session that has not "
                                        "authenticated can make room for it");
                admit_source_put(srv, src);
                close(fd);
                continue;
            }
            admit_evict(srv, victim, peer);
        }
        if (!session_new(srv, fd, src, peer)) {
            metrics_refused(REFUSED_NO_MEMORY);
            admit_log_refusal(srv, peer, "out of memory");
            admit_source_put(srv, src);
            close(fd);
            continue;
        }
        LOG(LOG_DEBUG, "%s: accepted", peer);
    }
}

/* A lease expired here: with etcd, its key goes (only ours expire here). */
static void expired(void *arg, struct registration *r)
{
    struct store *st = arg;
    if (st->ops->remove)
        st->ops->remove(st, r);
}

static void sweep_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    (void)l, (void)revents;
    struct server *srv = w->data;
    registry_sweep(srv->reg, mono_ms(), expired, srv->st);
    if (mono_ms() - srv->principals_swept_ms >= 10000)
        admit_principals_sweep(srv);
    if (mono_ms() - srv->pairs_swept_ms >= 1000) {
        srv->pairs_swept_ms = mono_ms();
        pairs_sweep(srv->pairs, srv->pairs_swept_ms);
    }
}

/* ---- start / stop --------------------------------------------------------------- */

/* A TLS context for @cfg's certificate, key and CA, or NULL (logged). */
static SSL_CTX *tls_context(const struct config *cfg)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        LOG(LOG_ERR, "cannot make a TLS context: out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(ctx, 0); /* no resumption: every session authenticates */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, cfg->key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        LOG(LOG_ERR, "cannot load the certificate %s / key %s: %s", cfg->cert, cfg->key,
            session_ssl_reason());
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (cfg->ca[0]) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->ca, NULL) != 1) {
            LOG(LOG_ERR, "cannot load the CA %s: %s", cfg->ca, session_ssl_reason());
            SSL_CTX_free(ctx);
            return NULL;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca);
        if (names)
            SSL_CTX_set_client_CA_list(ctx, names);
        /* A certificate that does not chain to the CA fails the handshake;
         * none at all is allowed unless require_client_cert (then a token). */
        SSL_CTX_set_verify(
            ctx, SSL_VERIFY_PEER | (cfg->require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
            NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    return ctx;
}

int server_reload_tls(struct server *srv, const struct config *nc)
{
    SSL_CTX *ctx = tls_context(nc);
    if (!ctx)
        return -EINVAL;
    /* A session's SSL holds a reference to the context it was made from: the
     * sessions open now keep theirs, new ones get this one. */
    SSL_CTX_free(srv->sslctx);
    srv->sslctx = ctx;
    return 0;
}

static int listen_on(struct server *srv, const char *addr, int *ret_port)
{
    char host[256], port[16];
    const char *colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= sizeof(host))
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= sizeof(host))
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
    }
    snprintf(port, sizeof(port), "%s", colon + 1);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res;
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (g) {
        LOG(LOG_ERR, "listen %s: %s", addr, gai_strerror(g));
        return -EINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, r = 0;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1024))
        r = -errno;
    freeaddrinfo(res);
    if (r) {
        LOG(LOG_ERR, "listen %s: %s", addr, strerror(-r));
        if (fd >= 0)
            close(fd);
        return r;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *ret_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                              : ((struct sockaddr_in6 *)&ss)->sin6_port);
    srv->lfd = fd;
    return 0;
}

int server_start(struct ev_loop *loop, struct config *cfg, struct registry *reg, struct store *st,
                 struct server **ret)
{
    struct server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->loop = loop;
    srv->cfg = cfg;
    srv->reg = reg;
    srv->st = st;
    srv->lfd = -1;
    ev_timer_init(&srv->accept_pause_w, accept_resume_cb, 0.1, 0);
    srv->accept_pause_w.data = srv;
    ev_timer_init(&srv->sweep_w, sweep_cb, 0.1, 0.1);
    srv->sweep_w.data = srv;
    int r = (srv->watch = watch_new(loop, reg, session_push)) && (srv->pairs = pairs_new())
                ? 0
                : -ENOMEM;
    if (!r && !(srv->sslctx = tls_context(cfg)))
        r = -EINVAL;
    int port = 0;
    if (!r)
        r = listen_on(srv, cfg->listen, &port);
    if (r) {
        server_stop(srv);
        return r;
    }
    /* The lower modules tell the server through what it hands them. */
    registry_listen(reg, watch_changed, srv->watch);
    st->done = dispatch_register_done;
    st->done_arg = srv;
    srv->handle_frame = dispatch_frame;
    ev_io_init(&srv->accept_w, accept_cb, srv->lfd, EV_READ);
    srv->accept_w.data = srv;
    ev_io_start(loop, &srv->accept_w);
    ev_timer_start(loop, &srv->sweep_w);
    *ret = srv;
    LOG(LOG_NOTICE, "listening on %s (port %d), TLS 1.3, %s, %zu tokens, %zu ACL rules",
        cfg->listen, port,
        cfg->ca[0] ? (cfg->require_client_cert ? "client certificate required"
                                                : "client certificates verified")
                   : "no client certificates",
        cfg->n_tokens, cfg->n_acl);
    uint8_t kid[RRPC_TICKET_KEY_ID_LEN];
    rrpc_ticket_key_id(cfg->keys[0], kid);
    LOG(cfg->signer_ephemeral ? LOG_NOTICE : LOG_INFO, "tickets signed with Ed25519 key "
        "%02x%02x%02x%02x%02x%02x%02x%02x%s; %zu previous key(s) still accepted", kid[0], kid[1],
        kid[2], kid[3], kid[4], kid[5], kid[6], kid[7],
        cfg->signer_ephemeral ? " (no ticket_key: made for this run; tickets from before a "
                                "restart are refused)" : "", cfg->n_keys - 1);
    if (cfg->port_file[0]) {
        char tmp[1100];
        snprintf(tmp, sizeof(tmp), "%s.tmp", cfg->port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, cfg->port_file)) {
            LOG(LOG_ERR, "cannot write the port file %s: %s", cfg->port_file, strerror(errno));
            return -EIO; /* *ret is set: server_stop undoes the rest */
        }
    }
    return 0;
}

void server_stop(struct server *srv)
{
    if (!srv)
        return;
    while (srv->conns)
        session_close(srv->conns, NULL);
    if (srv->lfd >= 0) {
        ev_io_stop(srv->loop, &srv->accept_w);
        close(srv->lfd);
        srv->lfd = -1;
    }
    ev_timer_stop(srv->loop, &srv->accept_pause_w);
    ev_timer_stop(srv->loop, &srv->sweep_w);
    if (srv->reg)
        registry_listen(srv->reg, NULL, NULL);
    if (srv->st && srv->st->done_arg == srv) {
        srv->st->done = NULL;
        srv->st->done_arg = NULL;
    }
    watch_free(srv->watch);
    pairs_free(srv->pairs);
    SSL_CTX_free(srv->sslctx);
    for (size_t b = 0; b < PRINCIPAL_BUCKETS; b++)
        while (srv->principals[b]) { /* every session is closed: each holds nothing */
            struct principal *pr = srv->principals[b];
            srv->principals[b] = pr->next;
            free(pr);
        }
    for (size_t b = 0; b < SOURCE_BUCKETS; b++)
        while (srv->sources[b]) { /* every session is closed: none is left */
            struct source *s = srv->sources[b];
            srv->sources[b] = s->next;
            free(s);
        }
    free(srv->lookup_regs);
    free(srv);
}

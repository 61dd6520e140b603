/* SPDX-License-Identifier: MIT */
/*
 * The broker client's handle (include/roce_rpc/broker.h; client_int.h names
 * its other files): open and close, status, and a second handle for a watch.
 * Round trips to rrpcd are blocking TLS 1.3 exchanges (session.c,
 * failover.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>

#include "broker/client_int.h"
#include "util/reserved.h"

RRPC_API const char *rrpc_broker_principal(rrpc_broker *b)
{
    return b ? b->principal : "";
}

/* A handle with its locks and nothing else; NULL without memory. */
static struct rrpc_broker *handle_new(void)
{
    struct rrpc_broker *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->fd = -1;
    pthread_mutex_init(&b->io, NULL);
    pthread_mutex_init(&b->lock, NULL);
    rrpci_cond_init(&b->cond);
    return b;
}

RRPC_API int rrpc_broker_open(const char *addr, const rrpc_broker_opts *opts,
                              rrpc_broker **ret_b)
{
    rrpci_broker_open_clear();
    if (!addr || !opts || !ret_b || !opts->ca_file)
        return rrpci_broker_open_fail(
            -EINVAL, "rrpc_broker_open: address, opts and opts->ca_file are required");
    int bad = RRPCI_RESERVED_BAD(opts);
    if (bad >= 0)
        return rrpci_broker_open_fail(-EINVAL, RRPCI_RESERVED_WHY, "rrpc_broker_opts", bad);
    struct rrpc_broker *b = handle_new();
    if (!b)
        return -ENOMEM;
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
    /* RRPC_TICKET_RATE: the share of each client in the replay cache of the gates made
     * through this handle (libroce_rpc's table of tunables checks it). */
    rrpc_config *tun = NULL;
    long rate = 0;
    if (rrpc_config_create(&tun) == 0)
        (void)rrpc_config_get(tun, "RRPC_TICKET_RATE", &rate);
    rrpc_config_destroy(tun);
    b->ticket_rate = rate > 0 ? (int)rate : 256;
    int r;
    if ((r = rrpci_parse_addrs(b, addr)))
        goto err;
    if (opts->server_name) {
        if (!opts->server_name[0] || strlen(opts->server_name) >= sizeof(b->server_name)) {
            r = rrpci_broker_open_fail(-EINVAL, "server_name must be 1..%zu bytes",
                                       sizeof(b->server_name) - 1);
            goto err;
        }
        snprintf(b->server_name, sizeof(b->server_name), "%s", opts->server_name);
        b->own_server_name = true;
    }
    rrpci_select_addr(b, 0);
    if (opts->token && !(b->token = strdup(opts->token))) {
        r = -ENOMEM;
        goto err;
    }

    b->sslctx = SSL_CTX_new(TLS_client_method());
    if (!b->sslctx) {
        r = rrpci_broker_open_fail(-ENOMEM, "SSL_CTX_new failed");
        goto err;
    }
    SSL_CTX_set_min_proto_version(b->sslctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(b->sslctx, TLS1_3_VERSION);
    SSL_CTX_set_verify(b->sslctx, SSL_VERIFY_PEER, NULL);
    char s[256];
    if (SSL_CTX_load_verify_locations(b->sslctx, opts->ca_file, NULL) != 1) {
        rrpci_ssl_errstr(s, sizeof(s));
        r = rrpci_broker_open_fail(access(opts->ca_file, R_OK) ? -errno : -EINVAL,
                      "cannot load the CA file '%s': %s", opts->ca_file, s);
        goto err;
    }
    if (opts->cert_file) {
        const char *key = opts->key_file ? opts->key_file : opts->cert_file;
        if (SSL_CTX_use_certificate_chain_file(b->sslctx, opts->cert_file) != 1 ||
            SSL_CTX_use_PrivateKey_file(b->sslctx, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(b->sslctx) != 1) {
            rrpci_ssl_errstr(s, sizeof(s));
            r = rrpci_broker_open_fail(access(opts->cert_file, R_OK) ? -errno
                          : access(key, R_OK)           ? -errno
                                                        : -EINVAL,
                          "cannot load the client certificate '%s' / key '%s': %s",
                          opts->cert_file, key, s);
            goto err;
        }
    }
    pthread_mutex_lock(&b->io);
    r = rrpci_connect_any(b, NULL);
    pthread_mutex_unlock(&b->io);
    if (r) {
        rrpci_broker_open_fail(r, "%s", b->err);
        goto err;
    }
    BLOG(b, LOG_DEBUG, "connected to rrpcd %s:%s as '%s'", b->host, b->port, b->principal);
    *ret_b = b;
    return 0;
err:
    rrpc_broker_close(b);
    return r;
}

RRPC_API int rrpc_broker_status(rrpc_broker *b, rrpc_broker_state *ret)
{
    if (!b || !ret)
        return -EINVAL;
    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&b->io);
    struct req q;
    rrpci_req_start(b, &q, CTL_OP_STATUS, 0);
    struct reply u;
    rrpci_reply_init(&u);
    int r = rrpci_roundtrip(b, &q, &u);
    if (!r) {
        /* Checked as wire input: every field there, of its type and bounds. */
        const msgpack_object *m = &u.u.data, *deg = rrpci_mp_get(m, CTL_K_DEGRADED);
        const msgpack_object *why = rrpci_mp_get(m, CTL_K_WHY);
        if (!rrpci_mp_str(rrpci_mp_get(m, CTL_K_REGISTRY), ret->registry, sizeof(ret->registry)) ||
            (strcmp(ret->registry, CTL_REGISTRY_MEMORY) &&
             strcmp(ret->registry, CTL_REGISTRY_ETCD)) ||
            !deg || deg->type != MSGPACK_OBJECT_BOOLEAN ||
            !rrpci_mp_uint(rrpci_mp_get(m, CTL_K_SERVICES), &ret->services) ||
            !rrpci_mp_uint(rrpci_mp_get(m, CTL_K_REGISTRATIONS), &ret->registrations) ||
            !rrpci_mp_uint(rrpci_mp_get(m, CTL_K_SESSIONS), &ret->sessions) ||
            (deg->via.boolean && !why)) {
            r = rrpci_broker_fail(b, -EPROTO, "rrpcd %s:%s: the answer to status is malformed",
                                  b->host, b->port);
        } else {
            ret->degraded = deg->via.boolean;
            if (why)
                rrpci_mp_text(why, ret->why, sizeof(ret->why));
        }
    }
    rrpci_reply_destroy(&u);
    rrpci_req_free(&q);
    pthread_mutex_unlock(&b->io);
    rrpc_broker_current(b, ret->broker, sizeof(ret->broker));
    if (r)
        memset(ret, 0, sizeof(*ret));
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
            rrpci_send_unregister(b, g->id);
        rrpci_reg_free(g);
    }
    rrpci_session_close(b);
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

struct rrpc_broker *rrpci_broker_clone(struct rrpc_broker *b)
{
    struct rrpc_broker *s = handle_new();
    if (!s)
        return NULL;
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
    rrpci_select_addr(s, cur);
    return s;
}


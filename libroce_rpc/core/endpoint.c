/* SPDX-License-Identifier: MIT */
/* Endpoints: listen, connect (asynchronous and blocking, with options and
 * tickets), close, and a connection's accessors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"

/* ---- endpoints --------------------------------------------------------- */

static int resolve(rrpc_ctx *ctx, const char *uri, struct rrpci_uri *u,
                   const struct rrpci_transport_ops **ret_ops)
{
    const char *why = NULL;
    int r = rrpci_uri_parse(uri, u, &why);
    if (r < 0)
        return rrpci_set_error(ctx, r, "bad endpoint \"%s\": %s", uri ? uri : "(null)", why);
    char twhy[768];
    const struct rrpci_transport_ops *ops = rrpci_transport_by_scheme(u->scheme, twhy, sizeof(twhy));
    if (!ops)
        return rrpci_set_error(ctx, strcmp(u->scheme, "rdma") == 0 ? RRPC_E_TRANSPORT : RRPC_E_URI,
                               "\"%s\": %s", uri, twhy);
    r = rrpci_transport_use(ctx, ops);
    if (r < 0)
        return r;
    *ret_ops = ops;
    ctx->endpoints_made = true;
    return 0;
}

RRPC_API int rrpc_listen(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                         rrpc_listener **ret_listener)
{
    if (!ctx || !ret_listener)
        return -EINVAL;
    rrpci_lock(ctx);
    struct rrpci_uri u;
    const struct rrpci_transport_ops *ops;
    rrpc_listener *l = NULL;
    int r = resolve(ctx, uri, &u, &ops);
    if (r < 0)
        goto out;
    r = -ENOMEM;
    l = calloc(1, sizeof(*l));
    if (!l || (ops->listener_priv_size && !(l->priv = calloc(1, ops->listener_priv_size))))
        goto out;
    l->ctx = ctx;
    l->ops = ops;
    l->fn = fn;
    l->user = user;
    r = ops->listen(l, &u);
    if (r < 0)
        goto out;
    rrpci_list_add(&ctx->listeners, &l->link);
    *ret_listener = l;
    l = NULL;
out:
    if (l) {
        free(l->priv);
        free(l);
    }
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_listener_port(rrpc_listener *l)
{
    if (!l->ops->listener_port)
        return -EOPNOTSUPP;
    rrpci_lock(l->ctx);
    int r = l->ops->listener_port(l);
    rrpci_unlock(l->ctx);
    return r;
}

RRPC_API void rrpc_listener_close(rrpc_listener *l)
{
    if (!l)
        return;
    rrpc_ctx *ctx = l->ctx;
    rrpci_lock(ctx);
    l->ops->listener_close(l);
    rrpci_list_del(&l->link);
    free(l->priv);
    free(l);
    rrpci_unlock(ctx);
}

static int connect_locked(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                          int timeout_ms, const void *ticket, size_t ticket_len,
                          rrpc_conn **ret_conn)
{
    struct rrpci_uri u;
    const struct rrpci_transport_ops *ops;
    int r = resolve(ctx, uri, &u, &ops);
    if (r < 0)
        return r;
    rrpc_conn *c = rrpci_conn_alloc(ctx, ops, fn, user, timeout_ms);
    if (!c)
        return -ENOMEM;
    c->user_owned = true;
    rrpci_conn_ref(c); /* the application's, until rrpc_conn_close */
    rrpci_list_add(&ctx->owned, &c->owned_link);
    if (ticket_len) {
        c->ticket = malloc(ticket_len);
        if (!c->ticket) {
            c->fn = NULL;
            rrpci_conn_down(c, -ENOMEM, "out of memory");
            rrpci_conn_release_user(c);
            return -ENOMEM;
        }
        memcpy(c->ticket, ticket, ticket_len);
        c->ticket_len = ticket_len;
    }
    r = ops->connect(c, &u);
    if (r < 0) {
        /* Nothing was announced: release silently. */
        c->fn = NULL;
        rrpci_conn_down(c, r, "connect failed");
        rrpci_conn_release_user(c);
        return r;
    }
    *ret_conn = c;
    return 0;
}

RRPC_API int rrpc_connect(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                          rrpc_conn **ret_conn)
{
    if (!ctx || !ret_conn)
        return -EINVAL;
    rrpci_lock(ctx);
    int r = connect_locked(ctx, uri, fn, user, ctx->cfg.connect_timeout_ms, NULL, 0, ret_conn);
    rrpci_unlock(ctx);
    return r;
}

struct sync_connect {
    struct rrpci_sync s;
    const char *uri;
    rrpc_conn_event_fn fn;
    void *user;
};

static void sync_connect_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    struct sync_connect *sc = user;
    if (ev == RRPC_CONN_UP) {
        c->fn = sc->fn;
        c->user = sc->user;
        rrpci_sync_done(&sc->s, 0, NULL);
    } else {
        rrpci_sync_done(&sc->s, reason, "cannot connect to %s: %s (%s)", sc->uri, c->down_why,
                        rrpc_err_name(reason));
    }
}

RRPC_API int rrpc_ctx_ticket_principal(rrpc_ctx *ctx, const char *principal)
{
    if (!ctx || !principal)
        return -EINVAL;
    size_t n = strnlen(principal, RRPC_PRINCIPAL_MAX + 1);
    if (n == 0 || n > RRPC_PRINCIPAL_MAX)
        return rrpci_set_error(ctx, -EINVAL, "a principal has 1..%d bytes",
                               RRPC_PRINCIPAL_MAX);
    rrpci_lock(ctx);
    rrpc_conn *c = ctx->verifying;
    int r = 0;
    if (!c || !rrpci_in_callback(ctx)) {
        r = rrpci_set_error(ctx, -EPERM, "rrpc_ctx_ticket_principal names the principal of the "
                            "ticket being verified: call it from the rrpc_ticket_verify_fn");
    } else {
        char *copy = strndup(principal, n);
        if (!copy)
            r = -ENOMEM;
        else {
            free(c->principal);
            c->principal = copy;
        }
    }
    rrpci_unlock(ctx);
    return r;
}

static int connect_wait(rrpc_ctx *ctx, const char *uri, int timeout_ms, const void *ticket,
                        size_t ticket_len, rrpc_conn_event_fn fn, void *user,
                        rrpc_conn **ret_conn);

RRPC_API int rrpc_connect_sync(rrpc_ctx *ctx, const char *uri, int timeout_ms,
                               rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn)
{
    return connect_wait(ctx, uri, timeout_ms, NULL, 0, fn, user, ret_conn);
}

RRPC_API int rrpc_connect_ticket(rrpc_ctx *ctx, const char *uri, const void *ticket, size_t len,
                                 int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                 rrpc_conn **ret_conn)
{
    if (!ticket || len == 0 || len > RRPCI_CTL_MAX_LEN)
        return rrpci_set_error(ctx, -EINVAL, "a connection ticket has 1..%u bytes",
                               RRPCI_CTL_MAX_LEN);
    return connect_wait(ctx, uri, timeout_ms, ticket, len, fn, user, ret_conn);
}

/* Checks @o (NULL: defaults); the URI to dial goes to *ret_uri (@buf when
 * @o->src is added to it), the timeout to *ret_timeout. */
static int connect_opts(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *o, char *buf,
                        size_t buflen, const char **ret_uri, int *ret_timeout)
{
    *ret_uri = uri;
    *ret_timeout = ctx->cfg.connect_timeout_ms;
    int r = RRPCI_OPTS_CHECK(ctx, o, "rrpc_connect_opts");
    if (r < 0 || !o)
        return r;
    if (!o->ticket != !o->ticket_len || o->ticket_len > RRPCI_CTL_MAX_LEN)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_connect_opts: a ticket needs its length, 1..%u bytes",
                               RRPCI_CTL_MAX_LEN);
    if (o->timeout_ms < 0)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_connect_opts.timeout_ms is %d; 0 means the default",
                               o->timeout_ms);
    if (o->timeout_ms)
        *ret_timeout = o->timeout_ms;
    if (o->src) {
        if (!uri || strchr(uri, '?'))
            return rrpci_set_error(ctx, -EINVAL,
                                   "give the source address once: in rrpc_connect_opts.src or "
                                   "as ?src= in the URI");
        int n = snprintf(buf, buflen, "%s?src=%s", uri, o->src);
        if (n < 0 || (size_t)n >= buflen)
            return rrpci_set_error(ctx, -EINVAL, "the URI with its source address is too long");
        *ret_uri = buf;
    }
    return 0;
}

static int connect_with(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                        rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn, bool wait)
{
    if (!ctx || !ret_conn)
        return -EINVAL;
    char buf[512];
    const char *u;
    int timeout;
    int r = connect_opts(ctx, uri, opts, buf, sizeof(buf), &u, &timeout);
    if (r < 0)
        return r;
    const void *ticket = opts ? opts->ticket : NULL;
    size_t ticket_len = opts ? opts->ticket_len : 0;
    if (wait)
        return connect_wait(ctx, u, timeout, ticket, ticket_len, fn, user, ret_conn);
    rrpci_lock(ctx);
    r = connect_locked(ctx, u, fn, user, timeout, ticket, ticket_len, ret_conn);
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_connect_with(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                               rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn)
{
    return connect_with(ctx, uri, opts, fn, user, ret_conn, false);
}

RRPC_API int rrpc_connect_with_sync(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                                    rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn)
{
    return connect_with(ctx, uri, opts, fn, user, ret_conn, true);
}

RRPC_API int rrpc_ctx_require_ticket(rrpc_ctx *ctx, rrpc_ticket_verify_fn fn, void *user)
{
    if (!ctx || !fn)
        return -EINVAL;
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->endpoints_made)
        r = rrpci_set_error(ctx, -EBUSY, "require tickets before the first rrpc_listen");
    else {
        ctx->ticket_fn = fn;
        ctx->ticket_user = user;
    }
    rrpci_unlock(ctx);
    return r;
}

static int connect_wait(rrpc_ctx *ctx, const char *uri, int timeout_ms, const void *ticket,
                        size_t ticket_len, rrpc_conn_event_fn fn, void *user,
                        rrpc_conn **ret_conn)
{
    if (!ctx || !ret_conn || timeout_ms <= 0)
        return -EINVAL;
    struct sync_connect sc = {.uri = uri, .fn = fn, .user = user};
    int r = rrpci_sync_begin(&sc.s, ctx, "rrpc_connect_sync from a callback; use rrpc_connect");
    if (r)
        return r;
    rrpc_conn *c = NULL;
    r = connect_locked(ctx, uri, sync_connect_event, &sc, timeout_ms, ticket, ticket_len, &c);
    if (r == 0) {
        r = rrpci_sync_end(&sc.s, 0);
        if (r == 0) {
            *ret_conn = c;
        } else {
            /* Never handed out; the application's reference keeps @c. */
            rrpci_lock(ctx);
            rrpci_conn_release_user(c);
            rrpci_unlock(ctx);
        }
        return r;
    }
    return rrpci_sync_end(&sc.s, r);
}

void rrpci_conn_release_user(rrpc_conn *c)
{
    if (!c->user_owned || rrpci_list_empty(&c->owned_link))
        return;
    rrpci_list_del(&c->owned_link);
    rrpci_conn_unref(c);
}

RRPC_API void rrpc_conn_close(rrpc_conn *c)
{
    if (!c)
        return;
    rrpc_ctx *ctx = c->ctx;
    rrpci_lock(ctx);
    rrpci_conn_enter(c, RRPCI_EV_APP_CLOSE); /* DOWN follows from the loop */
    rrpci_conn_release_user(c);
    rrpci_unlock(ctx);
}

RRPC_API const char *rrpc_conn_transport(rrpc_conn *c)
{
    return c->ops->name;
}

RRPC_API int rrpc_conn_class_dscp(rrpc_conn *c, int api_cls, int *ret_dscp)
{
    int cls = rrpci_cls_index(api_cls);
    if (cls < 0)
        return RRPC_E_BAD_CLASS;
    if (!c->ops->class_dscp)
        return -EOPNOTSUPP;
    rrpci_lock(c->ctx);
    int r = rrpci_conn_is_down(c) ? RRPC_E_CLOSED : c->ops->class_dscp(c, cls, ret_dscp);
    rrpci_unlock(c->ctx);
    return r;
}

RRPC_API void *rrpc_conn_user(rrpc_conn *c)
{
    return c->user;
}

RRPC_API void rrpc_conn_set_user(rrpc_conn *c, void *user)
{
    c->user = user;
}

RRPC_API int rrpc_conn_peer(rrpc_conn *c, char *buf, size_t len)
{
    if (!c->ops->peer_name)
        return -EOPNOTSUPP;
    rrpci_lock(c->ctx);
    int r = c->ops->peer_name(c, buf, len);
    rrpci_unlock(c->ctx);
    return r;
}

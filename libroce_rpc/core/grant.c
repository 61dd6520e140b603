/* SPDX-License-Identifier: MIT */
/*
 * Grants (include/roce_rpc/memory.h): one connection's access to part of a
 * region, for one class, until revoked, expired, or its connection or
 * region is gone.
 *
 * A transport with grant ops (verbs: a type 2 memory window bound to the
 * connection's queue pair of the class) enforces a grant in the NIC and
 * names it by the window's key; the core only keeps its life.  For the
 * transports that emulate one-sided access (tcp, inproc) the core is the
 * NIC: a grant sits in ctx->grants under a random key from rrpc_region_grant to
 * rrpc_grant_revoke, and the emulated target checks it under the context's
 * lock (rrpci_access_check), so ending it is marking it ended: an access
 * then fails with the reason (expired, its connection closed), and after
 * the revoke with "no region or grant with this key".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/core.h"

#define ALL_ACCESS ((unsigned)(RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE))

/* A random key no region and no grant of @ctx has, put in the grant map. */
static int grant_key_put(rrpc_ctx *ctx, rrpc_grant *g)
{
    for (;;) {
        uint64_t key = 0;
        if (getrandom(&key, sizeof(key), 0) != sizeof(key))
            return -errno;
        if (!key || rrpci_idmap_get(&ctx->regions, key))
            continue;
        int rc = rrpci_idmap_put(&ctx->grants, key, &g->node);
        if (rc != -EEXIST) {
            g->key = key;
            return rc;
        }
    }
}

void rrpci_grant_end(rrpc_grant *g, const char *why)
{
    if (g->ended)
        return;
    g->ended = why;
    rrpci_timer_stop(&g->expiry);
    if (g->conn->ops->grant_end)
        g->conn->ops->grant_end(g->conn, g);
}

static void expiry_cb(struct rrpci_timer *t)
{
    rrpci_grant_end(t->data, "the grant expired");
}

void rrpci_grants_conn_down(rrpc_conn *c)
{
    for (struct rrpci_list *l = c->grants.next; l && l != &c->grants; l = l->next) {
        rrpc_grant *g = rrpci_container_of(l, rrpc_grant, conn_link);
        rrpci_grant_end(g, "the grant's connection is closed");
        rrpci_grant_bound(g, RRPC_E_CLOSED, "rrpc_region_grant: the connection went down");
    }
}

void rrpci_grants_region_gone(rrpc_region *r)
{
    while (r->grants.next && !rrpci_list_empty(&r->grants)) {
        rrpc_grant *g = rrpci_container_of(r->grants.next, rrpc_grant, region_link);
        rrpci_grant_end(g, "the grant's region was deregistered");
        rrpci_list_del(&g->region_link);
        g->region = NULL;
    }
}

/* Unlinks and frees @g (ended), the context locked. */
static void grant_free(rrpc_grant *g)
{
    rrpc_ctx *ctx = g->ctx;
    if (!g->conn->ops->grant_bind && g->key)
        rrpci_idmap_del(&ctx->grants, g->key);
    rrpci_list_del(&g->conn_link);
    rrpci_list_del(&g->ctx_link);
    if (g->region)
        rrpci_list_del(&g->region_link);
    rrpci_conn_unref(g->conn);
    ctx->n_grants--;
    free(g);
}

void rrpci_grants_fini(rrpc_ctx *ctx)
{
    /* Grants the application never revoked: every connection is down by
     * now, which ended its grants; what is left is the memory. */
    while (!rrpci_list_empty(&ctx->grant_list))
        grant_free(rrpci_container_of(ctx->grant_list.next, rrpc_grant, ctx_link));
    rrpci_idmap_fini(&ctx->grants);
}

void rrpci_grant_get(rrpc_grant *g, struct rrpci_grant_info *ret)
{
    *ret = (struct rrpci_grant_info){
        .region = g->region, .addr = g->addr, .len = g->len, .access = g->access, .cls = g->cls};
}
void rrpci_grant_set_key(rrpc_grant *g, uint64_t key)
{
    g->key = key;
}
void *rrpci_grant_tpriv(rrpc_grant *g)
{
    return g->tpriv;
}
void rrpci_grant_set_tpriv(rrpc_grant *g, void *p)
{
    g->tpriv = p;
}

void rrpci_grant_bound(rrpc_grant *g, int status, const char *why)
{
    struct rrpci_sync *s = g->waiter;
    g->waiter = NULL;
    if (s)
        rrpci_sync_done(s, status, "%s", why ? why : rrpc_strerror(status));
}

/* Checks rrpc_region_grant's arguments; the class index in *@cls. */
static int grant_args(rrpc_region *r, rrpc_conn *c, uint64_t off, uint64_t len, unsigned access,
                      const rrpc_grant_opts *o, rrpc_grant **ret, rrpc_token *tok, int *cls)
{
    if (!r || !c || !ret || !tok || !len || !access || (access & ~ALL_ACCESS))
        return rrpci_set_error(r   ? r->ctx
                               : c ? c->ctx
                                   : NULL,
                               -EINVAL,
                               "rrpc_region_grant needs a region, a connection, a length > 0, "
                               "RRPC_ACCESS_REMOTE_* bits and places for the grant and token");
    rrpc_ctx *ctx = r->ctx;
    if (c->ctx != ctx)
        return rrpci_set_error(
            ctx, -EINVAL,
            "rrpc_region_grant: the region and the connection belong to different "
            "contexts");
    int rc = RRPCI_OPTS_CHECK(ctx, o, "rrpc_grant_opts");
    if (rc < 0)
        return rc;
    if (access & ~r->access)
        return rrpci_set_error(
            ctx, RRPC_E_ACCESS,
            "rrpc_region_grant: the region was registered without %s; a grant can "
            "only narrow the region's rights",
            (access & ~r->access) & RRPC_ACCESS_REMOTE_READ ? "RRPC_ACCESS_REMOTE_READ"
                                                            : "RRPC_ACCESS_REMOTE_WRITE");
    if (!rrpci_range_inside(0, r->len, off, len))
        return rrpci_set_error(ctx, RRPC_E_REGION,
                               "rrpc_region_grant of %llu bytes at offset %llu is outside "
                               "the region of %zu bytes",
                               (unsigned long long)len, (unsigned long long)off, r->len);
    return rrpci_class_arg(ctx, o ? o->qos_class : 0, RRPCI_CLS_BULK, cls);
}

RRPC_API int rrpc_region_grant(rrpc_region *r, rrpc_conn *c, uint64_t off, uint64_t len,
                               unsigned access, const rrpc_grant_opts *o, rrpc_grant **ret,
                               rrpc_token *tok)
{
    int cls;
    int rc = grant_args(r, c, off, len, access, o, ret, tok, &cls);
    if (rc < 0)
        return rc;
    rrpc_ctx *ctx = r->ctx;
    struct rrpci_sync s;
    rc = rrpci_sync_begin(&s, ctx,
                          "rrpc_region_grant waits for the transport and cannot run in a "
                          "callback on the loop; run the handler on a worker "
                          "(RRPC_HANDLER_ON_WORKER)");
    if (rc < 0)
        return rc;
    rrpc_grant *g = NULL;
    if (!rrpci_conn_accepts_calls(c)) {
        rc = rrpci_set_error(ctx, RRPC_E_CLOSED, "rrpc_region_grant on a closed connection");
    } else if (ctx->n_grants >= (unsigned)ctx->cfg.max_grants) {
        rc = rrpci_set_error(ctx, RRPC_E_LIMIT,
                             "rrpc_region_grant: %u grants are alive on this context "
                             "(RRPC_MAX_GRANTS); revoke some first",
                             ctx->n_grants);
    } else if (!(g = calloc(1, sizeof(*g)))) {
        rc = -ENOMEM;
    } else {
        g->ctx = ctx;
        g->region = r;
        g->conn = c;
        g->addr = (uintptr_t)r->addr + off;
        g->len = len;
        g->access = access;
        g->cls = cls;
        rrpci_conn_ref(c);
        ctx->n_grants++;
        rrpci_list_add(&r->grants, &g->region_link);
        rrpci_list_add(&c->grants, &g->conn_link);
        rrpci_list_add(&ctx->grant_list, &g->ctx_link);
        rrpci_timer_init(ctx, &g->expiry, expiry_cb, (o ? o->expires_ms : 0) / 1000.0, 0);
        g->expiry.data = g;
        if (c->ops->grant_bind) {
            g->waiter = &s;
            rc = c->ops->grant_bind(c, g); /* done: rrpci_grant_bound */
            if (rc < 0)
                g->waiter = NULL;
        } else if ((rc = grant_key_put(ctx, g)) == 0) {
            rrpci_sync_done(&s, 0, NULL);
        }
        if (rc < 0) {
            g->ended = "never in force";
            grant_free(g);
            g = NULL;
        }
    }
    rc = rrpci_sync_end(&s, rc);
    if (!g)
        return rc;
    rrpci_lock(ctx);
    if (rc == 0 && g->ended) /* its connection went down meanwhile */
        rc = rrpci_set_error(ctx, RRPC_E_CLOSED, "rrpc_region_grant: %s", g->ended);
    if (rc < 0) {
        g->waiter = NULL;
        rrpci_grant_end(g, "never in force");
        grant_free(g);
        rrpci_unlock(ctx);
        return rc;
    }
    if (o && o->expires_ms)
        rrpci_timer_start(&g->expiry);
    memset(tok, 0, sizeof(*tok));
    tok->addr = g->addr;
    tok->len = len;
    tok->key = g->key;
    tok->access = access | (unsigned)rrpci_cls_public(cls) << RRPC_TOKEN_CLASS_SHIFT;
    *ret = g;
    rrpci_unlock(ctx);
    return 0;
}

RRPC_API int rrpc_grant_revoke(rrpc_grant *g)
{
    if (!g)
        return 0;
    rrpc_ctx *ctx = g->ctx;
    rrpci_lock(ctx);
    rrpci_grant_end(g, "the grant was revoked");
    grant_free(g);
    rrpci_unlock(ctx);
    return 0;
}

rrpc_region *rrpci_access_check(rrpc_conn *c, int cls, uint64_t key, uint64_t addr, uint64_t len,
                                unsigned need, const char **why, bool *grant)
{
    rrpc_ctx *ctx = c->ctx;
    *grant = false;
    struct rrpci_idnode *n = rrpci_idmap_get(&ctx->grants, key);
    if (!n)
        return rrpci_region_check(ctx, key, addr, len, need, why);
    rrpc_grant *g = rrpci_container_of(n, rrpc_grant, node);
    *grant = true;
    if (g->ended)
        *why = g->ended;
    else if (g->conn != c)
        *why = "the grant is for another peer";
    else if (g->cls != cls)
        *why = "the grant is for another QoS class";
    else if (!(g->access & need))
        *why = "the grant does not allow this access";
    else if (!rrpci_range_inside(g->addr, g->len, addr, len))
        *why = "the access is outside the grant's range";
    else
        return g->region;
    return NULL;
}

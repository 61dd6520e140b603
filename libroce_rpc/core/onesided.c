/* SPDX-License-Identifier: MIT */
/* One-sided operations, the initiator: rrpc_write / rrpc_read and their
 * blocking forms, issued natively (the transport's ops->rdma, verbs) or
 * emulated as OS_WRITE / OS_READ frames (tcp, inproc), the pending entry
 * that waits for their completion, and the answers (OS_ACK frames, native
 * completions) that end it.  The emulated target is os_target.c. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static int os_start(rrpc_conn *c, bool is_read, rrpc_region *local, size_t local_off,
                    const rrpc_token *remote, uint64_t remote_off, size_t len,
                    const rrpc_op_opts *opts, rrpc_op_cb cb, void *user)
{
    if (!c || !local || !remote || !cb || len == 0)
        return -EINVAL;
    rrpc_ctx *ctx = c->ctx;
    int cls;
    int r = RRPCI_OPTS_CHECK(ctx, opts, "rrpc_op_opts");
    if (r < 0)
        return r;
    /* A grant's token names the class its operations must use. */
    int tcls = (int)RRPC_TOKEN_CLASS(remote->access), want = opts ? opts->qos_class : 0;
    r = rrpci_class_arg(ctx, want ? want : tcls, RRPCI_CLS_BULK, &cls);
    if (r < 0)
        return r;
    const char *what = is_read ? "READ" : "WRITE";
    if (tcls && want && want != tcls)
        return rrpci_set_error(ctx, RRPC_E_GRANT,
                               "%s: the token is a grant for QoS class %d (%s), not %d; leave "
                               "qos_class 0 or pass %d",
                               what, tcls, rrpci_class_name(rrpci_cls_index(tcls)), want, tcls);
    if (!rrpci_range_inside(0, local->len, local_off, len))
        return rrpci_set_error(ctx, RRPC_E_REGION,
                               "%s of %zu bytes at offset %zu is outside the local region of %zu "
                               "bytes",
                               what, len, local_off, local->len);
    unsigned need = is_read ? RRPC_ACCESS_REMOTE_READ : RRPC_ACCESS_REMOTE_WRITE;
    if (!(remote->access & need))
        return rrpci_set_error(ctx, RRPC_E_ACCESS,
                               "the remote token does not allow %s; the owner must register the "
                               "region with RRPC_ACCESS_REMOTE_%s",
                               what, what);
    if (remote_off > UINT64_MAX - remote->addr ||
        !rrpci_range_inside(remote->addr, remote->len, remote->addr + remote_off, len))
        return rrpci_set_error(ctx, RRPC_E_ACCESS,
                               "%s of %zu bytes at offset %llu is outside the remote region of "
                               "%llu bytes; nothing was sent",
                               what, len, (unsigned long long)remote_off,
                               (unsigned long long)remote->len);
    bool notify = opts && opts->notify && !is_read;
    rrpci_lock(ctx);
    if (!rrpci_conn_accepts_calls(c)) {
        r = rrpci_set_error(ctx, RRPC_E_CLOSED, "%s on a closed connection", what);
        goto out;
    }
    struct rrpci_pending *pd = rrpci_pending_new(c, RRPCI_PEND_OS, 0);
    if (!pd) {
        r = -ENOMEM;
        goto out;
    }
    pd->op_cb = cb;
    pd->user = user;
    pd->local = local;
    pd->local_off = local_off;
    pd->is_read = is_read;
    pd->remote_addr = remote->addr + remote_off;
    pd->len = len;
    pd->cls = cls;
    pd->grant = tcls != 0;
    pd->t0 = rrpci_stats_now();
    uint64_t id = pd->node.key;
    if (c->ops->rdma) {
        struct rrpci_rdma_op op = {
            .opcode = is_read ? RRPCI_RDMA_READ : notify ? RRPCI_RDMA_WRITE_IMM : RRPCI_RDMA_WRITE,
            .cls = cls,
            .local = local,
            .local_off = local_off,
            .remote_addr = pd->remote_addr,
            .remote_key = remote->key,
            .len = len,
            .imm = opts ? opts->imm : 0,
            .id = id,
        };
        pd->parts_left = 1;
        r = c->ops->rdma(c, &op);
    } else {
        /* Emulated: frames of at most RRPCI_OS_CHUNK data bytes, in order on
         * one class channel, so the last one's NOTIFY follows all the data. */
        /* A WRITE frame must fit the target's limit; a READ's answer ours. */
        uint32_t chunk = RRPCI_OS_CHUNK;
        uint32_t limit = is_read ? ctx->cfg.max_msg : c->peer_max_msg;
        if ((is_read || rrpci_conn_wire_was_up(c)) && limit - RRPCI_OS_HDR_SIZE < chunk)
            chunk = limit - RRPCI_OS_HDR_SIZE;
        pd->parts_left = (uint32_t)((len + chunk - 1) / chunk);
        for (size_t off = 0; off < len && r == 0; off += chunk) {
            size_t n = len - off < chunk ? len - off : chunk;
            struct rrpci_msg *m = rrpci_msg_new(RRPCI_OS_HDR_SIZE);
            if (!m) {
                r = -ENOMEM;
                break;
            }
            bool last = off + n == len;
            struct rrpci_os_hdr oh = {.addr = pd->remote_addr + off, .key = remote->key,
                                      .len = (uint32_t)n, .imm = opts ? opts->imm : 0};
            rrpci_os_hdr_encode(&oh, m->data);
            m->h.type = is_read ? RRPCI_T_OS_READ : RRPCI_T_OS_WRITE;
            m->h.id = id;
            m->h.flags = notify && last ? RRPCI_F_NOTIFY : 0;
            if (!is_read) {
                m->ext = (const uint8_t *)local->addr + local_off + off;
                m->ext_len = n;
            }
            r = rrpci_conn_submit(c, cls, m);
        }
    }
    if (r < 0) {
        if (rrpci_idmap_del(&c->pending, id)) {
            /* Frames already queued are answered into nothing: the id is gone. */
            rrpci_timer_stop(&pd->deadline);
            free(pd);
        } else {
            r = 0; /* the connection went down meanwhile and @cb has had its answer */
        }
    }
    if (r == 0)
        rrpci_stats_onesided(c, cls, len);
out:
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_write(rrpc_conn *c, rrpc_region *local, size_t local_off,
                        const rrpc_token *remote, uint64_t remote_off, size_t len,
                        const rrpc_op_opts *opts, rrpc_op_cb cb, void *user)
{
    return os_start(c, false, local, local_off, remote, remote_off, len, opts, cb, user);
}

RRPC_API int rrpc_read(rrpc_conn *c, rrpc_region *local, size_t local_off,
                       const rrpc_token *remote, uint64_t remote_off, size_t len,
                       const rrpc_op_opts *opts, rrpc_op_cb cb, void *user)
{
    return os_start(c, true, local, local_off, remote, remote_off, len, opts, cb, user);
}

static void os_complete(rrpc_conn *c, struct rrpci_pending *pd)
{
    rrpci_idmap_del(&c->pending, pd->node.key);
    rrpci_timer_stop(&pd->deadline);
    rrpci_stats_onesided_done(c, pd->cls, pd->op_status, pd->t0);
    pd->op_cb(pd->op_status, pd->user);
    free(pd);
}

/* A failed one-sided operation leaves its own detail as the context's last
 * error on the thread that runs its callback, just before the callback (not
 * whatever failed before it): what, how many bytes, where, and @words:
 * the target's (@peer), untrusted, so only printable bytes are kept, or the
 * local reason (a deadline, the connection lost). */
void rrpci_os_fail_detail(const struct rrpci_pending *pd, int status, bool peer,
                          const uint8_t *words, size_t n)
{
    char w[161];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof(w) - 1; i++)
        w[k++] = words[i] >= 0x20 && words[i] < 0x7f ? (char)words[i] : '?';
    w[k] = 0;
    rrpci_set_error(pd->conn->ctx, status,
                    "one-sided %s of %zu bytes at remote 0x%llx failed: %s%s%s",
                    pd->is_read ? "READ" : "WRITE", pd->len,
                    (unsigned long long)pd->remote_addr, rrpc_strerror(status),
                    k ? (peer ? "; the target says: " : "; ") : "", w);
}

void rrpci_rdma_done(rrpc_conn *c, uint64_t id, int status)
{
    struct rrpci_idnode *n = rrpci_idmap_get(&c->pending, id);
    if (!n)
        return;
    struct rrpci_pending *pd = rrpci_container_of(n, struct rrpci_pending, node);
    /* A NIC says only "remote access error"; through a grant it is the
     * grant that refused (revoked, expired, another queue pair, range). */
    if (status == RRPC_E_ACCESS && pd->grant)
        status = RRPC_E_GRANT;
    pd->op_status = status;
    if (status)
        rrpci_os_fail_detail(pd, status, false, NULL, 0);
    os_complete(c, pd);
}

void rrpci_os_on_ack(rrpc_conn *c, const struct rrpci_hdr *h, const uint8_t *p)
{
    struct rrpci_idnode *n = rrpci_idmap_get(&c->pending, h->id);
    struct rrpci_pending *pd = n ? rrpci_container_of(n, struct rrpci_pending, node) : NULL;
    if (!pd || pd->kind != RRPCI_PEND_OS)
        return; /* expired */
    int status = (int32_t)(uint32_t)h->arg;
    if (status == RRPC_E_ACCESS && pd->grant) /* a revoked grant's key names nothing */
        status = RRPC_E_GRANT;
    if (status == 0 && pd->is_read) {
        struct rrpci_os_hdr oh;
        if (rrpci_os_hdr_decode(p, h->len, &oh) < 0 ||
            oh.len != h->len - RRPCI_OS_HDR_SIZE ||
            !rrpci_range_inside(pd->remote_addr, pd->len, oh.addr, oh.len)) {
            rrpci_set_error(c->ctx, RRPC_E_PROTO, "READ answer outside the requested range");
            rrpci_conn_down(c, RRPC_E_PROTO, "READ answer outside the requested range");
            return;
        }
        memcpy((uint8_t *)pd->local->addr + pd->local_off + (oh.addr - pd->remote_addr),
               p + RRPCI_OS_HDR_SIZE, oh.len);
    }
    if (status != 0 && pd->op_status == 0) {
        pd->op_status = status;
        rrpci_os_fail_detail(pd, status, true, p, h->len);
    }
    if (--pd->parts_left == 0)
        os_complete(c, pd);
}

/* ---- blocking forms ------------------------------------------------------- */

static int os_sync(rrpc_conn *c, bool is_read, rrpc_region *local, size_t local_off,
                   const rrpc_token *remote, uint64_t remote_off, size_t len,
                   const rrpc_op_opts *opts)
{
    if (!c)
        return -EINVAL;
    struct rrpci_sync s;
    int r = rrpci_sync_begin(&s, c->ctx,
                             "a blocking READ/WRITE from a callback; use rrpc_read/rrpc_write");
    if (r)
        return r;
    return rrpci_sync_end(&s, os_start(c, is_read, local, local_off, remote, remote_off, len,
                                       opts, rrpci_sync_op_cb, &s));
}

RRPC_API int rrpc_write_sync(rrpc_conn *c, rrpc_region *local, size_t local_off,
                             const rrpc_token *remote, uint64_t remote_off, size_t len,
                             const rrpc_op_opts *opts)
{
    return os_sync(c, false, local, local_off, remote, remote_off, len, opts);
}

RRPC_API int rrpc_read_sync(rrpc_conn *c, rrpc_region *local, size_t local_off,
                            const rrpc_token *remote, uint64_t remote_off, size_t len,
                            const rrpc_op_opts *opts)
{
    return os_sync(c, true, local, local_off, remote, remote_off, len, opts);
}

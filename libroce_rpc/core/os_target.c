/* SPDX-License-Identifier: MIT */
/* One-sided operations, the target side: what a NIC does for a remote
 * access, done in software for the transports that emulate it (tcp,
 * inproc): the key, rights and bounds check (rrpci_access_check: a
 * region's, or a grant's, core/grant.c), WRITEs
 * placed and READs answered with OS_ACK frames, tcp's direct placement of a
 * large WRITE into the region (rrpci_os_write_target), and the
 * notification of a write-with-immediate (native or emulated). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <syslog.h>

#include "core/core.h"

RRPC_API void rrpc_ctx_set_notify(rrpc_ctx *ctx, rrpc_notify_fn fn, void *user)
{
    rrpci_lock(ctx);
    ctx->notify_fn = fn;
    ctx->notify_user = user;
    rrpci_unlock(ctx);
}

void rrpci_conn_notify(rrpc_conn *c, uint32_t imm)
{
    if (c->ctx->notify_fn)
        c->ctx->notify_fn(c, imm, c->ctx->notify_user);
}

/* ---- the checks a NIC makes, and the answers ------------------------------ */

rrpc_region *rrpci_region_check(rrpc_ctx *ctx, uint64_t key, uint64_t addr, uint64_t len,
                                unsigned need, const char **why)
{
    struct rrpci_idnode *n = rrpci_idmap_get(&ctx->regions, key);
    if (!n) {
        *why = "no region or grant with this key (forged, deregistered, or revoked)";
        return NULL;
    }
    rrpc_region *r = rrpci_container_of(n, rrpc_region, node);
    if (!(r->access & need)) {
        *why = "the region does not allow this access";
        return NULL;
    }
    if (!rrpci_range_inside((uintptr_t)r->addr, r->len, addr, len)) {
        *why = "the access is outside the region";
        return NULL;
    }
    return r;
}

static void os_reply(rrpc_conn *c, int cls, uint64_t id, int status, const char *why)
{
    size_t n = why ? strlen(why) : 0;
    struct rrpci_msg *m = rrpci_msg_new(status ? n : 0);
    if (!m) {
        rrpci_conn_down(c, -ENOMEM, "out of memory for a one-sided answer");
        return;
    }
    m->h.type = RRPCI_T_OS_ACK;
    m->h.id = id;
    m->h.arg = (uint32_t)status;
    if (status && n)
        memcpy(m->data, why, n);
    rrpci_conn_submit(c, cls, m);
}

uint8_t *rrpci_os_write_target(rrpc_conn *c, const struct rrpci_hdr *h, const uint8_t *p,
                               size_t n)
{
    struct rrpci_os_hdr oh;
    const char *why = NULL;
    bool grant;
    if (h->type != RRPCI_T_OS_WRITE || n < RRPCI_OS_HDR_SIZE ||
        rrpci_os_hdr_decode(p, h->len, &oh) < 0 || oh.len != h->len - RRPCI_OS_HDR_SIZE ||
        !rrpci_conn_wire_open(c) || h->cls >= RRPCI_MAX_CLASSES ||
        !rrpci_access_check(c, h->cls, oh.key, oh.addr, oh.len, RRPC_ACCESS_REMOTE_WRITE, &why,
                            &grant))
        return NULL;
    return (uint8_t *)(uintptr_t)oh.addr;
}

void rrpci_os_on_frame(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p)
{
    struct rrpci_os_hdr oh;
    if (rrpci_os_hdr_decode(p, h->len, &oh) < 0) {
        rrpci_conn_down(c, RRPC_E_PROTO, "one-sided frame shorter than its sub-header");
        return;
    }
    const char *why = NULL;
    bool grant;
    if (h->type == RRPCI_T_OS_WRITE) {
        if (oh.len != h->len - RRPCI_OS_HDR_SIZE) {
            rrpci_conn_down(c, RRPC_E_PROTO, "one-sided WRITE length does not match its frame");
            return;
        }
        rrpc_region *r = rrpci_access_check(c, cls, oh.key, oh.addr, oh.len,
                                            RRPC_ACCESS_REMOTE_WRITE, &why, &grant);
        if (!r) {
            RRPCI_LOG(c->ctx, LOG_NOTICE, "remote WRITE refused: %s", why);
            os_reply(c, cls, h->id, grant ? RRPC_E_GRANT : RRPC_E_ACCESS, why);
            return;
        }
        if (!h->placed) /* else the transport read the data there (rrpci_os_write_target) */
            memcpy((void *)(uintptr_t)oh.addr, p + RRPCI_OS_HDR_SIZE, oh.len);
        os_reply(c, cls, h->id, 0, NULL);
        if ((h->flags & RRPCI_F_NOTIFY) && rrpci_conn_wire_open(c))
            rrpci_conn_notify(c, oh.imm);
        return;
    }
    /* READ */
    if (h->len != RRPCI_OS_HDR_SIZE) {
        rrpci_conn_down(c, RRPC_E_PROTO, "one-sided READ request carries data");
        return;
    }
    if (oh.len > c->peer_max_msg - RRPCI_OS_HDR_SIZE) {
        os_reply(c, cls, h->id, RRPC_E_TOO_BIG, "READ larger than the reader accepts");
        return;
    }
    if (rrpci_conn_backlogged(c)) {
        /* 56 bytes asking for up to a frame each: refused while the reader
         * leaves earlier answers waiting (RRPC_MAX_ANSWER_BACKLOG). */
        if (rrpci_conn_over_answer_share(c)) {
            c->ctx->guard.answer_holds++;
            os_reply(c, cls, h->id, RRPC_E_LIMIT,
                     "READ refused: the target holds RRPC_MAX_ANSWER_BYTES of answers its "
                     "readers have not taken, and this reader more than its share; take the "
                     "answers before asking for more");
        } else {
            os_reply(c, cls, h->id, RRPC_E_LIMIT,
                     "READ refused: the target's answers to this reader are not being taken "
                     "(RRPC_MAX_ANSWER_BACKLOG)");
        }
        return;
    }
    rrpc_region *r = rrpci_access_check(c, cls, oh.key, oh.addr, oh.len, RRPC_ACCESS_REMOTE_READ,
                                        &why, &grant);
    if (!r) {
        RRPCI_LOG(c->ctx, LOG_NOTICE, "remote READ refused: %s", why);
        os_reply(c, cls, h->id, grant ? RRPC_E_GRANT : RRPC_E_ACCESS, why);
        return;
    }
    struct rrpci_msg *m = rrpci_msg_new(RRPCI_OS_HDR_SIZE + oh.len);
    if (!m) {
        rrpci_conn_down(c, -ENOMEM, "out of memory for a READ answer");
        return;
    }
    m->h.type = RRPCI_T_OS_ACK;
    m->h.id = h->id;
    rrpci_os_hdr_encode(&oh, m->data);
    /* A copy, not a reference: the owner may deregister before it is sent. */
    memcpy(m->data + RRPCI_OS_HDR_SIZE, (void *)(uintptr_t)oh.addr, oh.len);
    rrpci_conn_submit(c, cls, m);
}

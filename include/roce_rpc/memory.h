/* SPDX-License-Identifier: MIT */
/*
 * Registered memory and one-sided channels.
 *
 * A region is memory registered with a context.  Its token (address, length,
 * key) may be sent to a peer, which can then READ or WRITE that memory with
 * no handler running on the owner (on verbs, no CPU at all: the NIC checks
 * the key and the bounds; on tcp the owner's loop checks them exactly the
 * same way).  A WRITE may carry a 32-bit notification that the owner's
 * notify callback receives once the data has landed.
 */
#ifndef ROCE_RPC_MEMORY_H
#define ROCE_RPC_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <roce_rpc/export.h>
#include <roce_rpc/context.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rrpc_region rrpc_region;

/* Access rights of a region, or'ed.  Local use is always allowed. */
enum {
    RRPC_ACCESS_REMOTE_READ = 1 << 0,
    RRPC_ACCESS_REMOTE_WRITE = 1 << 1,
};

/*
 * Registers @len bytes at @addr with @access rights.  The memory stays the
 * caller's and must outlive the region.  On success *ret_region is the
 * caller's, to be released with rrpc_mem_dereg.  Errors: -EINVAL (NULL,
 * zero length, unknown access bits), -ENOMEM, and transport errors
 * (for example -EPERM when the memlock limit is too low on verbs).
 */
RRPC_API int rrpc_mem_reg(rrpc_ctx *ctx, void *addr, size_t len, unsigned access,
                          rrpc_region **ret_region);

/*
 * Deregisters and frees @r; from then on remote accesses with its token fail
 * with RRPC_E_ACCESS.  The caller must not deregister a region that an
 * operation still in flight uses.  Accepts NULL.
 */
RRPC_API void rrpc_mem_dereg(rrpc_region *r);

/* Start and length of a region. */
RRPC_API void *rrpc_region_addr(rrpc_region *r);
RRPC_API size_t rrpc_region_len(rrpc_region *r);

/*
 * What a peer needs to access a region: plain data, safe to copy and to send.
 * @addr is the region's start as the owner sees it; the initiator may address
 * any [addr + off, addr + off + n) inside [addr, addr + len).
 */
typedef struct rrpc_token {
    uint64_t addr;
    uint64_t len;
    uint64_t key;
    uint32_t access;
    uint32_t reserved;
} rrpc_token;

/*
 * The token with which the peer of @conn may access @r.  The key depends on
 * the transport and device of @conn (on verbs it is the rkey of @r on the
 * connection's device; the region is registered there now if it was not),
 * so ask once per connection and send the token over that connection.
 * Errors: RRPC_E_CLOSED, -ENOMEM, transport errors.
 */
RRPC_API int rrpc_region_token(rrpc_region *r, rrpc_conn *conn, rrpc_token *ret_token);

/* A token's wire form (little-endian, 32 bytes) and back.  decode returns
 * -EINVAL when @len is not RRPC_TOKEN_SIZE. */
#define RRPC_TOKEN_SIZE 32
RRPC_API void rrpc_token_encode(const rrpc_token *t, uint8_t out[RRPC_TOKEN_SIZE]);
RRPC_API int rrpc_token_decode(const void *buf, size_t len, rrpc_token *ret_token);

/*
 * Grants: access to part of a region for one peer, revocable.
 *
 * A region's token (rrpc_region_token) lets the peer of a connection reach
 * the whole region for as long as it is registered.  A grant narrows that
 * to one connection, one byte range and READ and/or WRITE, for one QoS
 * class (the class the peer's operations must travel on), optionally until
 * an expiry, and can be revoked while the region lives.  Its token is used
 * by the peer exactly like a region's (rrpc_read / rrpc_write; with
 * RRPC_CLASS_DEFAULT in rrpc_op_opts the peer uses the grant's class).
 *
 * The checks are the target's, not the initiator's: on verbs a grant is a
 * memory window (type 2) bound to the connection's queue pair of that
 * class, so the NIC refuses any other queue pair, range or right, and any
 * access after the revoke; on tcp and inproc the owner's loop makes the
 * same checks (docs/protocol.md, section 11).  A refused access fails the
 * initiator's operation with RRPC_E_GRANT; the detail says which check
 * failed where the transport can tell (tcp, inproc; a NIC reports only
 * "remote access error", and on verbs, RC semantics, the error also takes
 * the connection down with RRPC_E_CONN_LOST).
 */
typedef struct rrpc_grant rrpc_grant;

typedef struct rrpc_grant_opts {
    int qos_class;       /* 0 (RRPC_CLASS_DEFAULT): RRPC_CLASS_BULK, as rrpc_op_opts */
    unsigned expires_ms; /* 0: none; else the grant fails like a revoked one after this */
    uint64_t reserved[3]; /* must be zero */
} rrpc_grant_opts;

/* A token's access word carries a grant's class in these bits (0: a
 * region's token, any class). */
#define RRPC_TOKEN_CLASS_SHIFT 8
#define RRPC_TOKEN_CLASS(access) (((access) >> RRPC_TOKEN_CLASS_SHIFT) & 0xffu)

/*
 * Grants the peer of @conn @access (RRPC_ACCESS_REMOTE_READ and/or _WRITE,
 * a subset of @r's) to [@off, @off + @len) of @r.  Blocks until the grant is
 * in force (on verbs: the window is bound, a local operation of the NIC;
 * the same rules as rrpc_call_sync: not from a callback on the loop, where
 * it fails with RRPC_E_DEADLOCK: run such a handler on a worker).  On
 * success *@ret_grant is the caller's, to be released with
 * rrpc_grant_revoke, and *@ret_token is what to send to the peer.
 * The grant ends on its own, failing later accesses, when @conn goes down,
 * when @r is deregistered, or at its expiry; it must still be revoked to be
 * freed.  Errors: -EINVAL (NULL, zero length, unknown access bits, reserved
 * words), RRPC_E_REGION (the range is outside @r), RRPC_E_ACCESS (@access
 * is not a subset of @r's), RRPC_E_BAD_CLASS, RRPC_E_CLOSED, RRPC_E_LIMIT
 * (RRPC_MAX_GRANTS grants are alive on the context), RRPC_E_DEADLOCK,
 * -ENOTSUP (a device without type 2 memory windows: see the detail),
 * -ENOMEM, transport errors.
 */
RRPC_API int rrpc_region_grant(rrpc_region *r, rrpc_conn *conn, uint64_t off, uint64_t len,
                        unsigned access, const rrpc_grant_opts *opts, rrpc_grant **ret_grant,
                        rrpc_token *ret_token);

/*
 * Revokes @g and frees it.  Returns once no access through it can succeed
 * any more (on verbs the window is deallocated, which invalidates it in
 * the NIC before the call returns); an access the target had already
 * begun may complete (on tcp, a WRITE being placed stops at its next piece).
 * Any thread, also in a callback.  Returns 0; accepts NULL.
 */
RRPC_API int rrpc_grant_revoke(rrpc_grant *g);

/* Options of a one-sided operation; NULL means all defaults. */
typedef struct rrpc_op_opts {
    int qos_class;   /* 0 (RRPC_CLASS_DEFAULT): RRPC_CLASS_BULK */
    int notify;      /* WRITE only: non-zero delivers @imm to the target's notify callback */
    uint32_t imm;
    uint64_t reserved[4]; /* must be zero (new fields come out of it) */
} rrpc_op_opts;

/*
 * Completion of a one-sided operation: 0, RRPC_E_ACCESS, RRPC_E_CONN_LOST,
 * RRPC_E_CLOSED, RRPC_E_DEADLINE, ...  On every failure,
 * rrpc_ctx_last_error(ctx) called inside the callback gives the detail of
 * this operation (what, how many bytes, the remote address, and the
 * target's own words when it refused, or why the connection went down, or
 * the deadline).  The blocking forms leave that same detail for their
 * caller: each blocking operation keeps its own, so blocking operations on
 * several threads never see each other's.
 */
typedef void (*rrpc_op_cb)(int status, void *user);

/*
 * WRITE: copies @len bytes from @local at @local_off to the peer's memory
 * described by @remote at @remote_off.  @cb runs once, when the data is in
 * the peer's memory (or with the error).  @local must stay registered until
 * then.  Errors returned at once: -EINVAL, RRPC_E_REGION (the local range is
 * outside @local), RRPC_E_ACCESS (the token does not allow writing, or the
 * range is outside it: nothing is sent), RRPC_E_CLOSED, RRPC_E_BAD_CLASS.
 * Errors found by the peer (a forged key, a deregistered region) come to @cb.
 */
RRPC_API int rrpc_write(rrpc_conn *conn, rrpc_region *local, size_t local_off,
                        const rrpc_token *remote, uint64_t remote_off, size_t len,
                        const rrpc_op_opts *opts, rrpc_op_cb cb, void *user);

/* READ: the reverse of rrpc_write; @cb runs when the data is in @local. */
RRPC_API int rrpc_read(rrpc_conn *conn, rrpc_region *local, size_t local_off,
                       const rrpc_token *remote, uint64_t remote_off, size_t len,
                       const rrpc_op_opts *opts, rrpc_op_cb cb, void *user);

/* Blocking forms, with the same rules as rrpc_call_sync; 0 or the error. */
RRPC_API int rrpc_write_sync(rrpc_conn *conn, rrpc_region *local, size_t local_off,
                             const rrpc_token *remote, uint64_t remote_off, size_t len,
                             const rrpc_op_opts *opts);
RRPC_API int rrpc_read_sync(rrpc_conn *conn, rrpc_region *local, size_t local_off,
                            const rrpc_token *remote, uint64_t remote_off, size_t len,
                            const rrpc_op_opts *opts);

/*
 * Notifications: after a WRITE with notify has landed in one of this
 * context's regions, @fn runs on the loop with the connection and the
 * notification value.  (On verbs this is write-with-immediate: the target
 * learns only the value, so that is all any transport reports.)
 */
typedef void (*rrpc_notify_fn)(rrpc_conn *conn, uint32_t imm, void *user);
RRPC_API void rrpc_ctx_set_notify(rrpc_ctx *ctx, rrpc_notify_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif

/* SPDX-License-Identifier: MIT */
/*
 * RPC by method name.
 *
 * A server registers handlers by name on its context; a client calls a
 * method on a connection.  Payloads are bytes (pack them with
 * <roce_rpc/pack.h> if you like msgpack).  A call completes exactly once:
 * with the response, with the handler's error (a positive application code
 * and a message), or with a local error (deadline, connection lost, closed).
 *
 * Every call is flow-controlled: when the peer has no credit left for the
 * call's QoS class, the call waits in the sender (never dropped, never sent
 * past the receiver's buffers) and its deadline keeps running.
 */
#ifndef ROCE_RPC_RPC_H
#define ROCE_RPC_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <roce_rpc/export.h>
#include <roce_rpc/context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A request being served; owned by the library until it is answered. */
typedef struct rrpc_request rrpc_request;

/*
 * A method handler.  @payload/@len is the request, valid only until the
 * handler returns (copy what you need for a later reply).  The handler must
 * answer @req exactly once, now or later (from any thread), with
 * rrpc_respond or rrpc_respond_error.  Runs on the loop thread (on a worker
 * thread when registered with RRPC_HANDLER_ON_WORKER, rrpc_register_with).
 * In thread mode a handler that has run RRPC_HANDLER_RELIEF_MS (10 ms) no
 * longer holds the loop: another thread of the library takes the loop over
 * and the next callbacks run there, beside it (docs/architecture.md); that
 * is the one case where two callbacks of a context run at once.  Not for a
 * request over 4 KiB or a method registered with
 * RRPC_HANDLER_CREDIT_ON_ANSWER: those run in place and hold the loop until
 * they return.
 */
typedef void (*rrpc_handler_fn)(rrpc_request *req, const void *payload, size_t len, void *user);

/*
 * Registers @fn for @method (1..255 bytes) on @ctx, for every connection of
 * the context, past and future.  The name is copied.  Errors: -EINVAL,
 * -EEXIST (the name, or another name with the same 64-bit method id, is
 * already registered), -ENOMEM.
 */
RRPC_API int rrpc_register(rrpc_ctx *ctx, const char *method, rrpc_handler_fn fn, void *user);

/* Options of rrpc_register_with; NULL means all defaults. */
typedef struct rrpc_register_opts {
    uint64_t flags;       /* RRPC_HANDLER_* */
    uint64_t reserved[3]; /* must be zero (new fields come out of it) */
} rrpc_register_opts;

/*
 * The handler runs on one of the context's handler worker threads, not on
 * the loop thread, so its work does not hold the loop: other classes' (and
 * other methods') requests are read, served and answered meanwhile.  The
 * request's payload is copied for it; the request's credit goes back to the
 * caller when the handler returns, so a caller has at most its credit
 * window of requests queued or running per class.  Workers take the
 * waiting requests in class priority order (control, low_latency, ...,
 * bulk).  RRPC_HANDLER_THREADS threads (default 2) start with the first
 * such method; RRPC_HANDLER_QUEUE_BYTES (default 64 MiB) bounds the request
 * bytes they hold, above which a request is answered RRPC_E_LIMIT.  Several
 * handlers may run at once: such a handler must be thread-safe.  It must
 * answer its request like any handler (rrpc_respond, now or later).
 */
#define RRPC_HANDLER_ON_WORKER 0x1ull

/*
 * The request keeps its credit until it is answered (rrpc_respond or
 * rrpc_respond_error, from any thread), not until the handler returns: for
 * a handler that answers later (an asyncio task, a thread pool), so a
 * caller holds at most its credit window of unanswered requests per class
 * at the server.  A request never answered keeps its credit until its
 * connection goes down.  Not with RRPC_HANDLER_ON_WORKER (-EINVAL).
 */
#define RRPC_HANDLER_CREDIT_ON_ANSWER 0x2ull

/*
 * rrpc_register with options.  Errors: those of rrpc_register, -EINVAL
 * (unknown flags, both RRPC_HANDLER_ON_WORKER and
 * RRPC_HANDLER_CREDIT_ON_ANSWER, non-zero reserved words), or the error of starting the
 * worker threads.
 */
RRPC_API int rrpc_register_with(rrpc_ctx *ctx, const char *method, rrpc_handler_fn fn,
                                void *user, const rrpc_register_opts *opts);

/* Removes the handler of @method.  Errors: -ENOENT. */
RRPC_API int rrpc_unregister(rrpc_ctx *ctx, const char *method);

/*
 * Answers @req with @len bytes at @data (copied; the caller keeps @data).
 * @req is freed by this call whatever it returns.  Errors: RRPC_E_CLOSED
 * (the connection went away; the answer is dropped), RRPC_E_TOO_BIG, -ENOMEM.
 */
RRPC_API int rrpc_respond(rrpc_request *req, const void *data, size_t len);

/*
 * Fails @req with the application code @code (> 0) and the message @msg
 * (may be NULL; copied, truncated to 1024 bytes).  Frees @req.  @code may
 * also be RRPC_E_LIMIT: the server refuses the request for load (the
 * caller's call fails with RRPC_E_LIMIT and @msg, as when the handler
 * workers' queue is full); or RRPC_E_CANCELLED: the handler stopped because
 * its caller gave up (rrpc_request_cancelled).  Errors as rrpc_respond, and -EINVAL when @code
 * is any other value <= 0 (the request is then failed with code 1 so the
 * caller still gets an answer).
 */
RRPC_API int rrpc_respond_error(rrpc_request *req, int code, const char *msg);

/* The connection a request came on (valid while the request is), and its class. */
RRPC_API rrpc_conn *rrpc_request_conn(rrpc_request *req);
RRPC_API int rrpc_request_class(rrpc_request *req);

/* rrpc_request_remaining_us of a request whose caller set no deadline. */
#define RRPC_NO_DEADLINE INT64_MAX

/*
 * The time the caller has left for @req, in microseconds: its call's
 * deadline travels with the request as the time remaining when it was sent,
 * counted at the server from when the request arrived (tcp: the kernel's
 * receive time; inproc: when it was handed over; verbs: when the loop read
 * it), so time on the wire is not subtracted.  A request already past its
 * time when the server gets to it is answered RRPC_E_DEADLINE without
 * running.  <= 0: the caller has given up; RRPC_NO_DEADLINE: it set
 * none.  A handler with long work checks it, or rrpc_request_cancelled, and
 * stops early.  Any thread, while @req is not yet answered.
 */
RRPC_API int64_t rrpc_request_remaining_us(rrpc_request *req);

/*
 * True once the caller has given up on @req: it cancelled the call
 * (rrpc_call_cancel), or its deadline passed (the caller then sends a
 * cancel), or the connection went down.  The handler should then answer at
 * once (the answer is dropped at the caller) or stop its work and answer.
 * Requests of RRPC_HANDLER_ON_WORKER methods that are cancelled or past
 * their deadline before a worker takes them are not run: they are answered
 * RRPC_E_CANCELLED or RRPC_E_DEADLINE and counted in
 * rrpc_requests_not_run_total.  Any thread, while @req is not yet answered.
 */
RRPC_API bool rrpc_request_cancelled(rrpc_request *req);

typedef void (*rrpc_cancel_fn)(rrpc_request *req, void *user);

/*
 * Asks for @fn(@req, @user) when the caller gives up on @req (its cancel
 * arrives: rrpc_call_cancel, or its deadline passed) or the connection goes
 * down: once, on the loop thread, under the context, and never after @req
 * is answered.  @fn may answer @req (then @req is gone when it returns);
 * else the handler answers it as usual, now that nobody waits.  One
 * callback per request: a second call replaces the first.  For a handler
 * that answers later (an asyncio task, a thread pool) and can stop early.
 * Returns 0, RRPC_E_CANCELLED when @req is cancelled already (@fn is not
 * kept and does not run: stop now), -EINVAL.
 */
RRPC_API int rrpc_request_on_cancel(rrpc_request *req, rrpc_cancel_fn fn, void *user);

/*
 * Per-call metadata: a few key/value headers (a W3C traceparent, a tenant,
 * ...) that travel with a request to its handler and with a response back
 * to its caller, beside the payload (docs/protocol.md section 10).  Keys
 * are 1..RRPC_META_MAX_KEY bytes of lowercase token characters
 * (a-z 0-9 ! # $ % & ' * + - . ^ _ ` | ~), unique within a call; values
 * are 0..RRPC_META_MAX_VALUE opaque bytes; at most RRPC_META_MAX_ENTRIES
 * entries whose keys and values together hold at most RRPC_META_MAX_BYTES.
 * A sender checks them before anything goes on the wire (RRPC_E_METADATA,
 * with the detail in rrpc_ctx_last_error); a receiver checks them again,
 * and answers a request whose metadata breaks them RRPC_E_METADATA
 * without running its handler (its connection keeps serving others),
 * and fails a call whose response's metadata breaks them the same way.
 */
#define RRPC_META_MAX_ENTRIES 16
#define RRPC_META_MAX_KEY 64
#define RRPC_META_MAX_VALUE 1024
#define RRPC_META_MAX_BYTES 4096

/* One metadata entry.  In the entries the library hands out, @key and
 * @value are also NUL-terminated (@len excludes the NUL). */
typedef struct rrpc_meta {
    const char *key;   /* NUL-terminated */
    const void *value; /* @len bytes */
    size_t len;
} rrpc_meta;

/*
 * The entry of @key among @n entries at @meta, or NULL.  For the entries of
 * rrpc_result (the response's) as much as the caller's own.
 */
RRPC_API const rrpc_meta *rrpc_meta_find(const rrpc_meta *meta, size_t n, const char *key);

/*
 * The metadata @req came with: *@ret_meta gets its entries (NULL when none),
 * *@ret_n their number.  The entries belong to @req: valid until it is
 * answered, from any thread.  Errors: -EINVAL.
 */
RRPC_API int rrpc_request_meta(rrpc_request *req, const rrpc_meta **ret_meta, size_t *ret_n);

/*
 * The value of @key in the metadata @req came with: *@ret_val (NUL-terminated
 * too) and *@ret_len, owned by @req as for rrpc_request_meta.  Returns 0,
 * -ENOENT (no such key), -EINVAL.
 */
RRPC_API int rrpc_request_meta_get(rrpc_request *req, const char *key, const void **ret_val,
                                   size_t *ret_len);

/*
 * Sets the metadata that goes back with @req's answer (rrpc_respond or
 * rrpc_respond_error; not with the answers the library makes itself): @n
 * entries at @meta, checked and copied (the caller keeps @meta), replacing
 * any set before; @n 0 clears it.  Any thread, before @req is answered.
 * Errors: RRPC_E_METADATA (the entries break the bounds above; the detail,
 * in rrpc_ctx_last_error of the request's context, says which entry and
 * how; nothing is set), -EINVAL, -ENOMEM.  With an answer above the
 * caller's maximum message it counts in the answer's size.
 */
RRPC_API int rrpc_request_set_response_meta(rrpc_request *req, const rrpc_meta *meta, size_t n);

/* Options of a call; NULL means all defaults. */
typedef struct rrpc_call_opts {
    int qos_class;   /* 0 (RRPC_CLASS_DEFAULT): RRPC_CLASS_LOW_LATENCY */
    int deadline_ms; /* 0: the context default (RRPC_DEADLINE_MS, 30 s); < 0: none */
    uint64_t flags;  /* RRPC_CALL_* bits; others: -EINVAL */
    /* The request's metadata: @nmeta entries at @meta (NULL and 0: none),
     * checked and copied before rrpc_call returns (the caller keeps them);
     * they count in the request's size.  Bounds: RRPC_META_*. */
    const rrpc_meta *meta;
    uint64_t nmeta;
    uint64_t reserved[1]; /* must be zero (new fields come out of it) */
} rrpc_call_opts;

/*
 * RRPC_CALL_BORROW: rrpc_call lends the library the request buffer instead
 * of copying it.  The caller keeps @req valid and unchanged from the call
 * until its completion callback runs (whatever the status: response,
 * application error, deadline, connection lost); the callback may reuse or
 * free it, and the library never reads it after that.  When rrpc_call fails
 * the buffer is the caller's at once.  On tcp the payload is written from
 * @req to the socket (in pieces, like every frame: up to 1 MiB, or 64 KiB
 * while another class of the connection is busy); if a
 * call completes while part of its request is still unwritten (its deadline
 * passed, or a peer answered early), the library copies the request before
 * the callback runs and sends the rest from the copy.  On inproc and verbs the flag is accepted and the payload
 * is copied as without it (the frame may be read by another context's
 * thread, or by the peer's RDMA READ, after an early completion).  It pays
 * for large payloads; rrpc_call_sync may use it (it returns after the
 * completion).
 */
#define RRPC_CALL_BORROW 1u

/*
 * The result of a call, handed to the completion callback.  Everything in it
 * is valid only during the callback.
 *   status   0: success, @data/@len is the response;
 *            > 0: the handler's application code, @message its message;
 *            < 0: a library code (RRPC_E_NO_METHOD, RRPC_E_DEADLINE,
 *                 RRPC_E_CONN_LOST, RRPC_E_CLOSED, RRPC_E_TOO_BIG, ...).
 *   message  never NULL ("" when there is none).
 *   meta     the @nmeta entries the handler set (rrpc_request_set_response_meta),
 *            NUL-terminated keys and values; a response whose metadata
 *            breaks the bounds completes with RRPC_E_METADATA instead.
 */
typedef struct rrpc_result {
    int status;
    const void *data;
    size_t len;
    const char *message;
    const rrpc_meta *meta; /* the response's metadata (NULL when none), any status */
    size_t nmeta;
} rrpc_result;

typedef void (*rrpc_call_cb)(const rrpc_result *res, void *user);

/*
 * Calls @method (1..255 bytes, as for rrpc_register) on the peer of @conn
 * with @len bytes at @req (copied before this returns; the caller keeps
 * @req; with RRPC_CALL_BORROW in @opts->flags, lent until @cb runs instead).
 * @cb runs exactly once, on the loop thread, unless this call fails,
 * in which case it never runs.  Errors: -EINVAL (also for an empty or a
 * longer method name, or an unknown flag; nothing goes on the wire),
 * RRPC_E_BAD_CLASS, RRPC_E_TOO_BIG, RRPC_E_CLOSED, -ENOMEM.
 */
RRPC_API int rrpc_call(rrpc_conn *conn, const char *method, const void *req, size_t len,
                       const rrpc_call_opts *opts, rrpc_call_cb cb, void *user);

/*
 * Cancels the calls pending on @conn that were made with this @cb and @user
 * (a caller that gives each call its own @user cancels exactly one): each
 * one's @cb runs before this returns, on the calling thread and under the
 * context, with status RRPC_E_CANCELLED, and never again.  Its request is
 * dropped if it has not gone out; one that went out is followed by a cancel
 * on its class: the server skips it if no handler worker has taken it yet,
 * and a handler that runs it sees rrpc_request_cancelled.  (At most 2
 * cancels of a class go unread by the server at once: beyond that a call
 * given up sends none, and the server runs its request or answers it
 * RRPC_E_DEADLINE from its deadline.)  An answer that
 * comes anyway is dropped.  A request that keeps its credit until answered
 * (RRPC_HANDLER_CREDIT_ON_ANSWER) gives it back when the cancel arrives.
 * A call whose deadline passes is cancelled the same way.  A borrowed request
 * (RRPC_CALL_BORROW) is the caller's again when @cb runs.  Call it where a
 * callback of the context may run: from a callback, from the thread that
 * drives a driven-mode context, or from any thread when nothing there
 * depends on callbacks running on the loop thread.  Errors: -EINVAL,
 * -ENOENT (no such call pending: answered, failed or cancelled already).
 */
RRPC_API int rrpc_call_cancel(rrpc_conn *conn, rrpc_call_cb cb, void *user);

/*
 * Calls @method and waits for the result.  Returns the status as in
 * rrpc_result (0, an application code > 0, or a negative library code).  On
 * 0 the response is in *ret_data and *ret_len, malloc'ed and owned by the caller
 * (free() it); on an application error the message goes to
 * rrpc_ctx_last_error.  In thread mode, from any thread but the loop's; in
 * driven mode, the call drives the loop itself.  Never from a callback
 * (RRPC_E_DEADLOCK).
 */
RRPC_API int rrpc_call_sync(rrpc_conn *conn, const char *method, const void *req, size_t len,
                            const rrpc_call_opts *opts, void **ret_data, size_t *ret_len);

/*
 * rrpc_call_sync that also returns the response's metadata: on success (and
 * on an application error) *@ret_meta gets a copy of its *@ret_nmeta entries
 * in one malloc'ed block that the caller frees with free() (NULL and 0 when
 * there are none); on any other return both are NULL and 0.  Errors as
 * rrpc_call_sync.
 */
RRPC_API int rrpc_call_sync_meta(rrpc_conn *conn, const char *method, const void *req,
                                 size_t len, const rrpc_call_opts *opts, void **ret_data,
                                 size_t *ret_len, rrpc_meta **ret_meta, size_t *ret_nmeta);

/* The 64-bit method id that travels on the wire for @method (FNV-1a). */
RRPC_API uint64_t rrpc_method_id(const char *method);

#ifdef __cplusplus
}
#endif
#endif

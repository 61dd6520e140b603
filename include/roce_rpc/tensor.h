/* SPDX-License-Identifier: MIT */
/*
 * Tensors and KV-cache pages: bulk transfers built on <roce_rpc/memory.h>.
 *
 * A tensor is described, not owned: a dtype, a shape, strides in bytes, and
 * the place of its first element in a registered region.  Sending one is a
 * small RPC carrying the metadata (the "offer"), answered by the receiver
 * with the destination it chose; the sender then WRITEs the data straight
 * into that destination (on verbs an RDMA WRITE between the two registered
 * buffers: no copy, no staging buffer) and tells the receiver with a second
 * RPC ("done").  The receiver's callback runs only then, when every byte
 * has landed.  See docs/tensors.md for the wire format.
 *
 * A KV-cache page pool is a registered array of equal pages.  A transfer
 * copies a list of (source page -> destination page) pairs into a peer's
 * pool: every input is checked before the first byte moves, pages that are
 * consecutive on both sides go as one WRITE, and one completion reports the
 * whole batch, optionally with a notification at the target.
 *
 * Error codes used here (besides those of rrpc_write and rrpc_call):
 *   -EINVAL        a malformed argument or descriptor: NULL, an unknown
 *                  dtype, ndim outside 0..RRPC_TENSOR_MAX_DIMS, a negative
 *                  dimension, strides under which two elements overlap, an
 *                  empty page list, a zero page size;
 *   -EDOM          the two sides do not match: the destination's dtype or
 *                  shape differs from the source's, or the pools' page
 *                  sizes differ;
 *   RRPC_E_REGION  memory outside its region, no region at all
 *                  (unregistered memory), or a region of another context;
 *   RRPC_E_ACCESS  the peer's destination does not allow remote writes or
 *                  does not cover what is to be written;
 *   -ERANGE        a page index outside its pool;
 *   -EEXIST        the same destination page twice in one batch;
 *   -ENOBUFS       a tensor offer that does not fit in what is left of the
 *                  receiver's budget (rrpc_tensor_server_opts.max_bytes).
 * On any of these nothing has been written anywhere, and
 * rrpc_ctx_last_error says which dimension, page or pair is at fault.
 */
#ifndef ROCE_RPC_TENSOR_H
#define ROCE_RPC_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <roce_rpc/export.h>
#include <roce_rpc/context.h>
#include <roce_rpc/memory.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtypes -------------------------------------------------------------- */

/* Element types.  The values travel on the wire: never renumbered. */
typedef enum rrpc_dtype {
    RRPC_DTYPE_U8 = 1,
    RRPC_DTYPE_I8 = 2,
    RRPC_DTYPE_U16 = 3,
    RRPC_DTYPE_I16 = 4,
    RRPC_DTYPE_U32 = 5,
    RRPC_DTYPE_I32 = 6,
    RRPC_DTYPE_U64 = 7,
    RRPC_DTYPE_I64 = 8,
    RRPC_DTYPE_F16 = 9,
    RRPC_DTYPE_BF16 = 10,
    RRPC_DTYPE_F32 = 11,
    RRPC_DTYPE_F64 = 12,
} rrpc_dtype;

/* The size in bytes of one element of @dtype, or 0 when @dtype is unknown. */
RRPC_API size_t rrpc_dtype_size(int dtype);

/* The numpy-style name of @dtype ("uint8", ..., "float16", "bfloat16",
 * "float32", "float64"); static; NULL when @dtype is unknown. */
RRPC_API const char *rrpc_dtype_name(int dtype);

/* The dtype named @name (as rrpc_dtype_name gives it), or -EINVAL. */
RRPC_API int rrpc_dtype_from_name(const char *name);

/* ---- tensor descriptors -------------------------------------------------- */

#define RRPC_TENSOR_MAX_DIMS 8

/*
 * A tensor: plain data, owned by whoever fills it in; the library never
 * keeps a pointer to a descriptor past the call it was given to.
 *   dtype    an rrpc_dtype;
 *   ndim     0..RRPC_TENSOR_MAX_DIMS (0: a scalar, one element);
 *   shape    ndim dimensions, each >= 0 (a 0 makes an empty tensor);
 *   strides  ndim steps in BYTES between neighbours along each dimension;
 *            they may be negative or not contiguous, but no two elements
 *            may overlap (a stride of 0 on a dimension > 1 is refused);
 *   region   the registered region that holds the elements;
 *   offset   where element [0, 0, ...] is, in bytes from the region's start.
 * Entries past ndim are ignored.
 */
typedef struct rrpc_tensor {
    int dtype;
    int ndim;
    int64_t shape[RRPC_TENSOR_MAX_DIMS];
    int64_t strides[RRPC_TENSOR_MAX_DIMS];
    rrpc_region *region;
    size_t offset;
} rrpc_tensor;

/*
 * Fills @t with a C-contiguous (row-major) tensor of @dtype and @shape
 * (@ndim dimensions) whose first element is @offset bytes into @region.
 * Does not validate against the region (see rrpc_tensor_validate).
 * Errors: -EINVAL (NULL @t, unknown dtype, @ndim out of range, a negative
 * dimension, a size that overflows).
 */
RRPC_API int rrpc_tensor_init(rrpc_tensor *t, int dtype, int ndim, const int64_t *shape,
                              rrpc_region *region, size_t offset);

/*
 * Checks @t: a known dtype, ndim in range, non-negative dimensions, strides
 * under which no two elements overlap, and every byte of every element
 * inside @t->region.  Returns 0, -EINVAL or RRPC_E_REGION (no region, or
 * the span leaves it); the detail goes to rrpc_ctx_last_error of the
 * region's context.
 */
RRPC_API int rrpc_tensor_validate(const rrpc_tensor *t);

/* Elements in @t (1 for a scalar, 0 for an empty tensor), or 0 when @t is
 * malformed.  rrpc_tensor_nbytes: elements times the dtype's size. */
RRPC_API uint64_t rrpc_tensor_numel(const rrpc_tensor *t);
RRPC_API uint64_t rrpc_tensor_nbytes(const rrpc_tensor *t);

/* Non-zero when @t's elements are packed in row-major order with no gaps. */
RRPC_API int rrpc_tensor_is_contiguous(const rrpc_tensor *t);

/*
 * How many WRITEs moving @src into a destination laid out as @dst takes
 * (dtype, ndim and shape must match; regions and offsets are ignored): one
 * per run of bytes contiguous in both layouts, taken in the source's memory
 * order, plus the splits of runs over 1 GiB.  1 for two C-contiguous
 * layouts, or for a transposed source into a destination with the same
 * strides; one per element for a transposed source into a C-contiguous
 * destination.  0 for an empty tensor or arguments that do not fit.
 */
RRPC_API uint64_t rrpc_tensor_write_count(const rrpc_tensor *src, const rrpc_tensor *dst);

/* ---- receiving tensors --------------------------------------------------- */

typedef struct rrpc_tensor_server rrpc_tensor_server;

/*
 * A peer offers a tensor called @name (NUL-terminated, at most 255 bytes)
 * described by @incoming (dtype, ndim, shape, and C-contiguous strides; its
 * region is NULL).  The callback chooses where it lands: *ret_dest comes
 * pre-filled with a copy of @incoming; set ret_dest->region and ->offset
 * (and ->strides for another layout; dtype and shape must stay those of
 * @incoming) and return 0.  The region must belong to the serving context
 * and allow RRPC_ACCESS_REMOTE_WRITE; it must stay registered and the
 * memory must not be touched until the done callback for this tensor has
 * run.  Or refuse with a negative library code or a positive application
 * code, which the sender's completion receives as its status.
 * Runs on the loop thread.
 */
typedef int (*rrpc_tensor_alloc_fn)(rrpc_conn *conn, const char *name,
                                    const rrpc_tensor *incoming, rrpc_tensor *ret_dest,
                                    void *user);

/*
 * Runs exactly once for every destination an alloc callback accepted: on
 * the loop thread, or on the thread calling rrpc_tensor_server_drop_conn or
 * rrpc_tensor_server_close when one of those ends the transfer.  @status 0: every byte of the tensor is in @dest (the
 * descriptor the alloc callback gave, valid during the call); the memory is
 * the application's again.  Otherwise the transfer failed and the content
 * of @dest is undefined: the sender's error, -EDOM / -EINVAL / RRPC_E_REGION /
 * RRPC_E_ACCESS when the destination chosen was not usable, RRPC_E_CONN_LOST
 * after rrpc_tensor_server_drop_conn, RRPC_E_CLOSED after
 * rrpc_tensor_server_close.  The sender's completion comes after this
 * callback returned.
 */
typedef void (*rrpc_tensor_done_fn)(rrpc_conn *conn, const char *name, const rrpc_tensor *dest,
                                    int status, void *user);

/*
 * Makes @ctx accept tensors from every connection, past and future, by
 * registering the reserved methods "rrpc.tensor.offer" and
 * "rrpc.tensor.done".  @alloc and @done run on the loop thread with @user.
 * Offers are held to the default budget (rrpc_tensor_serve_with sets another).
 * On success *ret_server is the caller's, to be released with
 * rrpc_tensor_server_close.  Errors: -EINVAL, -EEXIST (@ctx already
 * serves tensors), -ENOMEM.
 */
RRPC_API int rrpc_tensor_serve(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc, rrpc_tensor_done_fn done,
                               void *user, rrpc_tensor_server **ret_server);

/* The default budget for offered tensors: 1 GiB. */
#define RRPC_TENSOR_MAX_BYTES_DEFAULT ((uint64_t)1 << 30)

/*
 * Options of rrpc_tensor_serve_with; NULL or 0 fields take the default.
 *   max_bytes  the budget for offered tensors: the bytes (elements times
 *              dtype size) of every tensor that was offered, accepted, and
 *              has not arrived yet, over all connections of the server.
 *              Offers are checked against it before the alloc callback runs,
 *              so a peer cannot make the receiver allocate or pin more than
 *              this: an offer that does not fit in what is left is refused,
 *              and the sender's completion receives -ENOBUFS with a message
 *              giving the size offered, the budget, the bytes held, and this
 *              option as the way to raise it.  An offer's bytes return to
 *              the budget when its done callback has run, whether the
 *              transfer succeeded or failed (or the alloc callback refused
 *              it).  Default: the context's RRPC_TENSOR_MAX_BYTES
 *              (environment; RRPC_TENSOR_MAX_BYTES_DEFAULT when unset).
 */
typedef struct rrpc_tensor_server_opts {
    uint64_t max_bytes;
    uint64_t flags;       /* RRPC_TENSOR_SERVE_* bits; others: -EINVAL */
    uint64_t reserved[3]; /* must be zero (new fields come out of it) */
} rrpc_tensor_server_opts;

/*
 * flags: @incoming (and the pre-filled *ret_dest) of the alloc callback
 * carries dense strides in the sender's memory order instead of
 * C-contiguous ones: for a transposed or permuted source, contiguous in its
 * own order, a destination that keeps those strides (a buffer of
 * rrpc_tensor_nbytes at ret_dest->offset) receives it in one WRITE, where a
 * C-contiguous destination takes one WRITE per element (see
 * rrpc_tensor_write_count).  A C-contiguous source gives C-contiguous
 * strides either way.  Off by default, so an alloc callback that fills in
 * only the region and offset keeps getting the C layout it expects.
 */
#define RRPC_TENSOR_SERVE_SENDER_ORDER 1u

/*
 * rrpc_tensor_serve with options (@opts may be NULL: every default;
 * rrpc_tensor_serve is this with NULL).  @opts is read during the call
 * only.  Errors: those of rrpc_tensor_serve, and -EINVAL for unknown
 * @opts->flags bits or non-zero @opts->reserved.
 */
RRPC_API int rrpc_tensor_serve_with(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc,
                                    rrpc_tensor_done_fn done, void *user,
                                    const rrpc_tensor_server_opts *opts,
                                    rrpc_tensor_server **ret_server);

/*
 * Deprecated (0.2; removed in the next release): the old name of
 * rrpc_tensor_serve_with, which it calls with the same arguments.
 */
RRPC_API int rrpc_tensor_serve_ex(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc,
                                  rrpc_tensor_done_fn done, void *user,
                                  const rrpc_tensor_server_opts *opts,
                                  rrpc_tensor_server **ret_server)
    RRPC_DEPRECATED("use rrpc_tensor_serve_with");

/*
 * The bytes of @srv's budget held now: by the tensors accepted and still
 * arriving (and, inside an alloc callback, by the offer being decided).
 * 0 for NULL.  Any thread.
 */
RRPC_API uint64_t rrpc_tensor_server_bytes_held(rrpc_tensor_server *srv);

/*
 * The connection @conn went down (call this from its RRPC_CONN_DOWN event):
 * every tensor still arriving on it completes now with RRPC_E_CONN_LOST, so
 * its destination is released.  Without this call such a destination stays
 * claimed until rrpc_tensor_server_close.  Accepts NULL arguments.  @srv
 * must still be open: a DOWN callback that reads the server handle from a
 * shared variable is safe if the closing thread clears that variable before
 * rrpc_tensor_server_close, which waits for the running callback.
 */
RRPC_API void rrpc_tensor_server_drop_conn(rrpc_tensor_server *srv, rrpc_conn *conn);

/*
 * Stops serving: unregisters the methods (later offers fail at the sender
 * with RRPC_E_NO_METHOD), completes every tensor still arriving with
 * RRPC_E_CLOSED, and frees @srv.  Not from inside @srv's own callbacks.
 * Accepts NULL.
 */
RRPC_API void rrpc_tensor_server_close(rrpc_tensor_server *srv);

/* ---- sending tensors ----------------------------------------------------- */

/*
 * Options of rrpc_tensor_send_with; NULL, or a zeroed struct, means every
 * default.
 *   qos_class  the class of the offer and done RPCs and of every WRITE;
 *              0 (RRPC_CLASS_DEFAULT): RRPC_CLASS_BULK.
 *   flags      no bits are defined yet: must be 0 (else -EINVAL).
 */
typedef struct rrpc_tensor_send_opts {
    int qos_class;
    uint64_t flags;
    uint64_t reserved[4]; /* must be zero (new fields come out of it) */
} rrpc_tensor_send_opts;

/*
 * Sends the tensor @src under @name (1..255 bytes, copied) to the peer of
 * @conn, which must serve tensors, with @opts (NULL: every default; read
 * during the call only).  Its two RPCs and its WRITEs all go on
 * @opts->qos_class.  @src is copied; its memory must stay
 * registered and unchanged until @cb runs.  @cb runs once on the loop
 * thread: 0 when the receiver's done callback has run after every byte
 * landed; the receiver's refusal (its alloc callback's code, or -ENOBUFS when
 * the offer does not fit in its budget, see rrpc_tensor_server_opts); -EDOM /
 * -EINVAL / RRPC_E_REGION / RRPC_E_ACCESS when the destination it chose
 * does not fit (nothing is written then); RRPC_E_NO_METHOD (the peer does
 * not serve tensors), RRPC_E_PROTO (a malformed answer), or any error of
 * rrpc_call / rrpc_write.  Errors returned at once (then @cb never runs and
 * nothing is sent): -EINVAL (also unknown @opts->flags bits or non-zero
 * @opts->reserved), RRPC_E_REGION (see rrpc_tensor_validate; also a region
 * of another context than @conn's), RRPC_E_BAD_CLASS, RRPC_E_CLOSED,
 * -ENOMEM.
 *
 * The data goes as one WRITE per run of bytes that is contiguous in both
 * the source and the destination layout: one WRITE for two contiguous
 * layouts, one per row when only rows are contiguous, one per element for
 * a transpose (correct, but slow: transpose on one side first).
 */
RRPC_API int rrpc_tensor_send_with(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                                   const rrpc_tensor_send_opts *opts, rrpc_op_cb cb, void *user);

/* Blocking form, with the rules of rrpc_call_sync; returns the status @cb
 * would have received (RRPC_E_DEADLOCK from a callback). */
RRPC_API int rrpc_tensor_send_with_sync(rrpc_conn *conn, const char *name,
                                        const rrpc_tensor *src,
                                        const rrpc_tensor_send_opts *opts);

/*
 * Deprecated (0.2; removed in the next release): rrpc_tensor_send_with and
 * rrpc_tensor_send_with_sync with an options struct holding only
 * @qos_class, which they call.
 */
RRPC_API int rrpc_tensor_send(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                              int qos_class, rrpc_op_cb cb, void *user)
    RRPC_DEPRECATED("use rrpc_tensor_send_with");
RRPC_API int rrpc_tensor_send_sync(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                                   int qos_class)
    RRPC_DEPRECATED("use rrpc_tensor_send_with_sync");

/* ---- KV-cache page pools ------------------------------------------------- */

typedef struct rrpc_kv_pool rrpc_kv_pool;

/*
 * Registers @page_count pages of @page_size bytes at @base (both > 0, the
 * product must not overflow) as a pool of @ctx, with remote read and write
 * access.  The memory stays the caller's and must outlive the pool.  On
 * success *ret_pool is the caller's, to be released with
 * rrpc_kv_pool_dereg.  Errors: -EINVAL, -ENOMEM, and those of rrpc_mem_reg.
 */
RRPC_API int rrpc_kv_pool_reg(rrpc_ctx *ctx, void *base, size_t page_size, size_t page_count,
                              rrpc_kv_pool **ret_pool);

/* Deregisters and frees @pool, with the rules of rrpc_mem_dereg.  Accepts NULL. */
RRPC_API void rrpc_kv_pool_dereg(rrpc_kv_pool *pool);

/* The pool's geometry, its region, and the address of page @index (NULL
 * when out of range). */
RRPC_API size_t rrpc_kv_pool_page_size(const rrpc_kv_pool *pool);
RRPC_API size_t rrpc_kv_pool_page_count(const rrpc_kv_pool *pool);
RRPC_API rrpc_region *rrpc_kv_pool_region(rrpc_kv_pool *pool);
RRPC_API void *rrpc_kv_pool_page(rrpc_kv_pool *pool, size_t index);

/* What a peer needs to write into (or read from) a pool; plain data. */
typedef struct rrpc_kv_token {
    rrpc_token region;   /* the pool's region token, for one connection */
    uint64_t page_size;
    uint64_t page_count;
} rrpc_kv_token;

/*
 * The token of @pool for the peer of @conn (rules of rrpc_region_token:
 * ask once per connection, send it over that connection).
 * Errors: -EINVAL, and those of rrpc_region_token.
 */
RRPC_API int rrpc_kv_pool_token(rrpc_kv_pool *pool, rrpc_conn *conn, rrpc_kv_token *ret_token);

/*
 * A KV token's wire form: the region token (RRPC_TOKEN_SIZE bytes), then
 * page_size and page_count as little-endian u64, 48 bytes.  decode returns
 * -EINVAL when @len is not RRPC_KV_TOKEN_SIZE, the page size or count is 0,
 * or the pages do not fit in the region token; it writes *ret_token only
 * on success.
 */
#define RRPC_KV_TOKEN_SIZE 48
RRPC_API void rrpc_kv_token_encode(const rrpc_kv_token *t, uint8_t out[RRPC_KV_TOKEN_SIZE]);
RRPC_API int rrpc_kv_token_decode(const void *buf, size_t len, rrpc_kv_token *ret_token);

/* One page to copy: source page index -> destination page index. */
typedef struct rrpc_kv_pair {
    uint64_t src;
    uint64_t dst;
} rrpc_kv_pair;

/*
 * Copies the pages of @src named by the @n pairs at @pairs into the peer's
 * pool described by @dst, over @conn.  @opts (NULL: defaults) gives the QoS
 * class (default RRPC_CLASS_BULK) and, with @opts->notify, a notification:
 * the target's notify callback (rrpc_ctx_set_notify) receives @opts->imm
 * once per batch, after all of its pages have landed.
 *
 * Everything is checked before anything is sent: @n >= 1, every index in
 * range (-ERANGE), no destination page twice (-EEXIST), equal page sizes
 * (-EDOM), a destination that allows remote writes and covers its pages
 * (RRPC_E_ACCESS), @src's region in @conn's context (RRPC_E_REGION).  The
 * pairs are then sorted by destination and runs consecutive on both sides
 * become one WRITE each (split only past 1 GiB); *@ret_writes (may be NULL)
 * receives the number of WRITEs the batch uses.
 *
 * @pairs is copied; @src's pages must stay registered and unchanged until
 * @cb runs.  @cb runs once on the loop thread when every WRITE has
 * completed, that is when every page is in the peer's memory, with 0 or
 * the first error (RRPC_E_ACCESS from the target, RRPC_E_CONN_LOST, ...).
 * Errors returned at once (then @cb never runs and nothing was written):
 * those above, -EINVAL, RRPC_E_BAD_CLASS, RRPC_E_CLOSED, -ENOMEM.
 */
RRPC_API int rrpc_kv_transfer(rrpc_conn *conn, rrpc_kv_pool *src, const rrpc_kv_token *dst,
                              const rrpc_kv_pair *pairs, size_t n, const rrpc_op_opts *opts,
                              rrpc_op_cb cb, void *user, size_t *ret_writes);

/* Blocking form, with the rules of rrpc_write_sync; 0 or the error. */
RRPC_API int rrpc_kv_transfer_sync(rrpc_conn *conn, rrpc_kv_pool *src, const rrpc_kv_token *dst,
                                   const rrpc_kv_pair *pairs, size_t n, const rrpc_op_opts *opts,
                                   size_t *ret_writes);

#ifdef __cplusplus
}
#endif
#endif

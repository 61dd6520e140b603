/* SPDX-License-Identifier: MIT */
/*
 * Tensors: descriptors, and the offer / WRITE / done exchange
 * (docs/tensors.md).  The exchange goes through the public RPC API and the
 * transfer engine (engine.c, over the public rrpc_write), so the same code
 * runs on every transport; on verbs the WRITEs are RDMA WRITEs from the
 * sender's registered source straight into the receiver's destination.
 *
 * An internal module of the library, not a user of it: it includes
 * core/core.h for what the public API does not offer, namely the context
 * lock (held from the checks through the start of a batch, and guarding the
 * server's tables, as the engine requires), the owning context of a
 * connection and of a region, the per-thread error detail
 * (rrpci_set_error), the class and reserved-word checks of options, the
 * RRPC_TENSOR_MAX_BYTES tunable, the blocking mechanism (struct
 * rrpci_sync) and the little-endian helpers of frame.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "xfer/xfer.h"

#define OFFER_METHOD "rrpc.tensor.offer"
#define DONE_METHOD "rrpc.tensor.done"
#define TENSOR_PROTO_VERSION 1
#define NAME_MAX_LEN 255

/* ---- dtypes ------------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [RRPC_DTYPE_U8] = {"uint8", 1},     [RRPC_DTYPE_I8] = {"int8", 1},
    [RRPC_DTYPE_U16] = {"uint16", 2},   [RRPC_DTYPE_I16] = {"int16", 2},
    [RRPC_DTYPE_U32] = {"uint32", 4},   [RRPC_DTYPE_I32] = {"int32", 4},
    [RRPC_DTYPE_U64] = {"uint64", 8},   [RRPC_DTYPE_I64] = {"int64", 8},
    [RRPC_DTYPE_F16] = {"float16", 2},  [RRPC_DTYPE_BF16] = {"bfloat16", 2},
    [RRPC_DTYPE_F32] = {"float32", 4},  [RRPC_DTYPE_F64] = {"float64", 8},
};
#define NDTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

RRPC_API size_t rrpc_dtype_size(int dtype)
{
    return dtype > 0 && dtype < NDTYPES ? dtypes[dtype].size : 0;
}

RRPC_API const char *rrpc_dtype_name(int dtype)
{
    return dtype > 0 && dtype < NDTYPES ? dtypes[dtype].name : NULL;
}

RRPC_API int rrpc_dtype_from_name(const char *name)
{
    for (int i = 1; name && i < NDTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return i;
    return -EINVAL;
}

/* ---- descriptors ---------------------------------------------------------------- */

/* Elements can be addressed with int64 byte offsets up to this. */
#define SPAN_MAX ((uint64_t)1 << 62)

/* dtype, ndim, shape and element count; *ret_numel on success. */
static int check_shape(rrpc_ctx *ctx, const rrpc_tensor *t, const char *what,
                       uint64_t *ret_numel)
{
    size_t isz = rrpc_dtype_size(t->dtype);
    if (isz == 0)
        return rrpci_set_error(ctx, -EINVAL, "%s: unknown dtype %d", what, t->dtype);
    if (t->ndim < 0 || t->ndim > RRPC_TENSOR_MAX_DIMS)
        return rrpci_set_error(ctx, -EINVAL, "%s: ndim %d is outside 0..%d", what, t->ndim,
                               RRPC_TENSOR_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return rrpci_set_error(ctx, -EINVAL, "%s: dimension %d is negative (%lld)", what, i,
                                   (long long)t->shape[i]);
        if (__builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel) || numel > SPAN_MAX)
            return rrpci_set_error(ctx, -EINVAL, "%s: the element count overflows", what);
    }
    if (numel > SPAN_MAX / isz)
        return rrpci_set_error(ctx, -EINVAL, "%s: the size in bytes overflows", what);
    *ret_numel = numel;
    return 0;
}

struct dim {
    uint64_t step; /* |stride| */
    uint64_t count;
};

static int dim_by_step(const void *a, const void *b)
{
    const struct dim *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

/*
 * Shape plus strides: no two elements overlap, and the bytes touched lie in
 * [lo, hi) relative to element 0 (lo <= 0).  Sufficient test for no overlap:
 * sorted by |stride|, each dimension steps past everything the inner ones
 * span (true of every C, Fortran, sliced or transposed layout).
 */
static int check_layout(rrpc_ctx *ctx, const rrpc_tensor *t, const char *what, int64_t *ret_lo,
                        int64_t *ret_hi)
{
    uint64_t numel;
    int r = check_shape(ctx, t, what, &numel);
    if (r < 0)
        return r;
    size_t isz = rrpc_dtype_size(t->dtype);
    *ret_lo = *ret_hi = 0;
    if (numel == 0)
        return 0;
    struct dim d[RRPC_TENSOR_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1)
            continue; /* its stride is never used */
        int64_t s = t->strides[i];
        if (s == INT64_MIN || (uint64_t)(s < 0 ? -s : s) > SPAN_MAX)
            return rrpci_set_error(ctx, -EINVAL, "%s: stride %d (%lld) is out of range", what, i,
                                   (long long)s);
        d[nd++] = (struct dim){(uint64_t)(s < 0 ? -s : s), (uint64_t)t->shape[i]};
    }
    qsort(d, (size_t)nd, sizeof(d[0]), dim_by_step);
    uint64_t extent = isz; /* bytes spanned by the dimensions so far */
    for (int i = 0; i < nd; i++) {
        if (d[i].step < extent)
            return rrpci_set_error(ctx, -EINVAL,
                                   "%s: strides make elements overlap (a stride of %llu bytes "
                                   "inside a span of %llu)",
                                   what, (unsigned long long)d[i].step,
                                   (unsigned long long)extent);
        uint64_t add;
        if (__builtin_mul_overflow(d[i].step, d[i].count - 1, &add) ||
            __builtin_add_overflow(extent, add, &extent) || extent > SPAN_MAX)
            return rrpci_set_error(ctx, -EINVAL, "%s: the strides span more than 2^62 bytes",
                                   what);
    }
    int64_t lo = 0, hi = (int64_t)isz;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] <= 1)
            continue;
        int64_t reach = t->strides[i] * (t->shape[i] - 1); /* bounded by extent */
        if (reach < 0)
            lo += reach;
        else
            hi += reach;
    }
    *ret_lo = lo;
    *ret_hi = hi;
    return 0;
}

/* The layout fits in [0, len) when element 0 is at @offset. */
static bool span_inside(int64_t lo, int64_t hi, uint64_t offset, uint64_t len)
{
    if (lo == 0 && hi == 0)
        return offset <= len;
    if (offset > SPAN_MAX || (int64_t)offset + lo < 0)
        return false;
    return (uint64_t)((int64_t)offset + hi) <= len;
}

static int check_tensor(rrpc_ctx *ctx, const rrpc_tensor *t, const char *what)
{
    int64_t lo, hi;
    int r = check_layout(ctx, t, what, &lo, &hi);
    if (r < 0)
        return r;
    if (!t->region)
        return rrpci_set_error(ctx, RRPC_E_REGION, "%s: no region (the memory is not registered)",
                               what);
    if (!span_inside(lo, hi, t->offset, t->region->len))
        return rrpci_set_error(ctx, RRPC_E_REGION,
                               "%s: bytes [%lld, %lld) from offset %zu leave the region of %zu "
                               "bytes",
                               what, (long long)lo, (long long)hi, t->offset, t->region->len);
    return 0;
}

RRPC_API int rrpc_tensor_init(rrpc_tensor *t, int dtype, int ndim, const int64_t *shape,
                              rrpc_region *region, size_t offset)
{
    if (!t || (ndim > 0 && !shape))
        return -EINVAL;
    rrpc_tensor n = {.dtype = dtype, .ndim = ndim, .region = region, .offset = offset};
    if (ndim >= 0 && ndim <= RRPC_TENSOR_MAX_DIMS)
        for (int i = 0; i < ndim; i++)
            n.shape[i] = shape[i];
    uint64_t numel;
    int r = check_shape(region ? region->ctx : NULL, &n, "tensor", &numel);
    if (r < 0)
        return r;
    int64_t step = (int64_t)rrpc_dtype_size(dtype);
    for (int i = ndim - 1; i >= 0; i--) {
        n.strides[i] = step;
        step *= n.shape[i] ? n.shape[i] : 1; /* bounded by check_shape */
    }
    *t = n;
    return 0;
}

RRPC_API int rrpc_tensor_validate(const rrpc_tensor *t)
{
    if (!t)
        return -EINVAL;
    return check_tensor(t->region ? t->region->ctx : NULL, t, "tensor");
}

RRPC_API uint64_t rrpc_tensor_numel(const rrpc_tensor *t)
{
    uint64_t numel;
    return t && check_shape(NULL, t, "tensor", &numel) == 0 ? numel : 0;
}

RRPC_API uint64_t rrpc_tensor_nbytes(const rrpc_tensor *t)
{
    return rrpc_tensor_numel(t) * (t ? rrpc_dtype_size(t->dtype) : 0);
}

RRPC_API int rrpc_tensor_is_contiguous(const rrpc_tensor *t)
{
    uint64_t numel;
    if (!t || check_shape(NULL, t, "tensor", &numel) < 0)
        return 0;
    int64_t step = (int64_t)rrpc_dtype_size(t->dtype);
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != step)
            return numel == 0;
        step *= t->shape[i];
    }
    return 1;
}

/* ---- runs: one WRITE per block contiguous on both sides ------------------------- */

struct plan {
    int nouter;
    int64_t shape[RRPC_TENSOR_MAX_DIMS];
    int64_t sstr[RRPC_TENSOR_MAX_DIMS], dstr[RRPC_TENSOR_MAX_DIMS];
    size_t sbase;   /* local offset of element 0 */
    uint64_t dbase; /* remote offset of element 0 */
    size_t block;   /* contiguous bytes per outer index */
    size_t pieces;  /* WRITEs per block (blocks over 1 GiB are split) */
};

static void plan_get(const void *arg, size_t i, struct rrpci_run *out)
{
    const struct plan *p = arg;
    size_t piece = i % p->pieces, outer = i / p->pieces;
    int64_t so = 0, dofs = 0;
    for (int k = p->nouter - 1; k >= 0; k--) {
        int64_t idx = (int64_t)(outer % (uint64_t)p->shape[k]);
        outer /= (uint64_t)p->shape[k];
        so += idx * p->sstr[k];
        dofs += idx * p->dstr[k];
    }
    size_t off = piece * RRPCI_XFER_MAX_WRITE;
    out->loff = (size_t)((int64_t)p->sbase + so) + off;
    out->roff = (uint64_t)((int64_t)p->dbase + dofs) + off;
    out->len = p->block - off < RRPCI_XFER_MAX_WRITE ? p->block - off : RRPCI_XFER_MAX_WRITE;
}

/* The dimensions of @t that are not 1, outermost first: by falling
 * |stride| of @t, so the innermost in memory comes last whatever the order
 * of the indices (a transpose, a permutation).  Returns their count. */
static uint64_t stride_abs(int64_t s)
{
    return s < 0 ? 0 - (uint64_t)s : (uint64_t)s; /* INT64_MIN too: strides may be the wire's */
}

static int dims_by_memory(const rrpc_tensor *t, int idx[RRPC_TENSOR_MAX_DIMS])
{
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1)
            continue;
        uint64_t a = stride_abs(t->strides[i]);
        int k = nd++;
        for (; k > 0; k--) { /* insertion sort: at most 8 */
            int j = idx[k - 1];
            uint64_t b = stride_abs(t->strides[j]);
            if (b >= a)
                break;
            idx[k] = j;
        }
        idx[k] = i;
    }
    return nd;
}

/* Both validated, same dtype and shape, numel > 0.  Returns the run count:
 * the innermost dimensions (in the source's memory order) whose bytes are
 * contiguous on both sides make one block. */
static size_t plan_make(const rrpc_tensor *s, const int64_t *dstrides, uint64_t dbase,
                        struct plan *p)
{
    memset(p, 0, sizeof(*p));
    int idx[RRPC_TENSOR_MAX_DIMS];
    int nd = dims_by_memory(s, idx);
    size_t block = rrpc_dtype_size(s->dtype);
    while (nd > 0 && s->strides[idx[nd - 1]] == (int64_t)block &&
           dstrides[idx[nd - 1]] == (int64_t)block) {
        block *= (size_t)s->shape[idx[nd - 1]];
        nd--;
    }
    uint64_t outer = 1;
    for (int k = 0; k < nd; k++) {
        p->shape[k] = s->shape[idx[k]];
        p->sstr[k] = s->strides[idx[k]];
        p->dstr[k] = dstrides[idx[k]];
        outer *= (uint64_t)p->shape[k];
    }
    p->nouter = nd;
    p->sbase = s->offset;
    p->dbase = dbase;
    p->block = block;
    p->pieces = (block + RRPCI_XFER_MAX_WRITE - 1) / RRPCI_XFER_MAX_WRITE;
    return (size_t)outer * p->pieces;
}

RRPC_API uint64_t rrpc_tensor_write_count(const rrpc_tensor *src, const rrpc_tensor *dst)
{
    int64_t lo, hi;
    if (!src || !dst || src->dtype != dst->dtype || src->ndim != dst->ndim ||
        check_layout(NULL, src, "source", &lo, &hi) < 0 ||
        check_layout(NULL, dst, "destination", &lo, &hi) < 0)
        return 0;
    for (int i = 0; i < src->ndim; i++)
        if (src->shape[i] != dst->shape[i])
            return 0;
    if (rrpc_tensor_numel(src) == 0)
        return 0;
    struct plan p;
    rrpc_tensor s = *src;
    s.offset = 0;
    return plan_make(&s, dst->strides, 0, &p);
}

/* Dense strides for @t's shape, in the memory order that @order's strides
 * give (a C-contiguous @order gives C-contiguous strides). */
static void dense_in_order_of(rrpc_tensor *t, const int64_t *order_strides)
{
    rrpc_tensor o = *t;
    memcpy(o.strides, order_strides, sizeof(o.strides));
    int idx[RRPC_TENSOR_MAX_DIMS];
    int nd = dims_by_memory(&o, idx);
    int64_t step = (int64_t)rrpc_dtype_size(t->dtype);
    for (int k = nd - 1; k >= 0; k--) {
        t->strides[idx[k]] = step;
        step *= t->shape[idx[k]];
    }
}

/* @n int64s, little-endian (the frame helpers' byte order). */
static void put_i64s(uint8_t *out, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        rrpci_put64(out + 8 * i, (uint64_t)v[i]);
}

static void get_i64s(int64_t *v, const uint8_t *in, int n)
{
    for (int i = 0; i < n; i++)
        v[i] = (int64_t)rrpci_get64(in + 8 * i);
}

/* ---- receiver -------------------------------------------------------------------- */

struct rx {
    struct rx *next;
    uint64_t id;
    rrpc_conn *conn;
    uint64_t bytes; /* taken from the server's budget */
    rrpc_tensor dest;
    char name[NAME_MAX_LEN + 1];
};

struct rrpc_tensor_server {
    rrpc_ctx *ctx;
    rrpc_tensor_alloc_fn alloc;
    rrpc_tensor_done_fn done;
    void *user;
    uint64_t next_id;
    struct rx *rxs;
    uint64_t max_bytes; /* the budget for offered tensors */
    uint64_t held;      /* bytes of the offers accepted and still arriving */
    uint32_t pending;   /* offers accepted and not done: RRPC_TENSOR_MAX_PENDING */
    bool sender_order;  /* RRPC_TENSOR_SERVE_SENDER_ORDER */
};

#define BUDGET_HINT                                                                        \
    "the receiver can raise its budget (rrpc_tensor_server_opts.max_bytes; Python: "       \
    "serve_tensors(max_bytes=...))"

/* Takes @bytes of the budget for the offer of @name, or refuses it. */
static int budget_take(rrpc_tensor_server *srv, const char *name, uint64_t bytes)
{
    if (bytes > srv->max_bytes)
        return rrpci_set_error(srv->ctx, -ENOBUFS,
                               "tensor \"%s\": the offer of %llu bytes exceeds the receiver's "
                               "tensor budget of %llu bytes; " BUDGET_HINT,
                               name, (unsigned long long)bytes,
                               (unsigned long long)srv->max_bytes);
    if (bytes > srv->max_bytes - srv->held)
        return rrpci_set_error(srv->ctx, -ENOBUFS,
                               "tensor \"%s\": the offer of %llu bytes exceeds the %llu bytes "
                               "left of the receiver's tensor budget (%llu of %llu bytes are "
                               "held by tensors still arriving); send it when those have "
                               "landed, or " BUDGET_HINT,
                               name, (unsigned long long)bytes,
                               (unsigned long long)(srv->max_bytes - srv->held),
                               (unsigned long long)srv->held,
                               (unsigned long long)srv->max_bytes);
    srv->held += bytes;
    return 0;
}

/* Frees @rx (unlinked) and returns its bytes and its place to the budget. */
static void rx_free(rrpc_tensor_server *srv, struct rx *rx)
{
    srv->held -= rx->bytes;
    srv->pending--;
    srv->ctx->guard.tensor_pending--;
    free(rx);
}

/*
 * Offers are counted as well as sized: an offer of zero elements takes no
 * bytes but is held until its "done".  At most RRPC_TENSOR_MAX_PENDING over
 * all connections, a quarter of them per connection, so one peer cannot
 * take every place.  0, or -ENOBUFS with the reason set.
 */
static int count_take(rrpc_tensor_server *srv, rrpc_conn *conn)
{
    rrpc_ctx *ctx = srv->ctx;
    uint32_t max = (uint32_t)ctx->cfg.tensor_max_pending, share = max / 4, mine = 0;
    for (struct rx *rx = srv->rxs; rx && mine < share; rx = rx->next)
        mine += rx->conn == conn;
    if (srv->pending < max && mine < share) {
        srv->pending++;
        ctx->guard.tensor_pending++;
        return 0;
    }
    ctx->guard.tensor_refusals++;
    if (mine >= share)
        return rrpci_set_error(ctx, -ENOBUFS,
                               "tensor offer refused: this connection already has %u offers "
                               "accepted and not done, its share (a quarter) of the "
                               "receiver's RRPC_TENSOR_MAX_PENDING=%u; send \"done\" for those "
                               "first",
                               mine, max);
    return rrpci_set_error(ctx, -ENOBUFS,
                           "tensor offer refused: the receiver holds RRPC_TENSOR_MAX_PENDING=%u "
                           "offers accepted and not done; send when those have landed", max);
}

static int reply(rrpc_request *req, int64_t status, const char *msg, uint64_t id,
                 const rrpc_token *tok, uint64_t offset, const rrpc_tensor *dest)
{
    uint8_t tbuf[RRPC_TOKEN_SIZE] = {0}, sbuf[RRPC_TENSOR_MAX_DIMS * 8] = {0};
    int nd = dest ? dest->ndim : 0;
    if (tok)
        rrpc_token_encode(tok, tbuf);
    if (dest)
        put_i64s(sbuf, dest->strides, nd);
    void *buf;
    size_t len;
    int r = rrpc_pack(&buf, &len, "isuyuy", status, msg ? msg : "", id, (const void *)tbuf,
                      (size_t)(tok ? RRPC_TOKEN_SIZE : 0), offset, (const void *)sbuf,
                      (size_t)nd * 8);
    if (r < 0) {
        rrpc_respond_error(req, 1, "out of memory");
        return r;
    }
    r = rrpc_respond(req, buf, len);
    free(buf);
    return r;
}

static int refuse(rrpc_request *req, int code)
{
    /* The message is the detail rrpci_set_error just recorded on this thread. */
    rrpc_conn *c = rrpc_request_conn(req);
    return reply(req, code, rrpc_ctx_last_error(c->ctx), 0, NULL, 0, NULL);
}

/* Checks the destination the alloc callback chose against the offer. */
static int check_dest(rrpc_tensor_server *srv, const rrpc_tensor *in, const rrpc_tensor *d)
{
    rrpc_ctx *ctx = srv->ctx;
    if (d->dtype != in->dtype)
        return rrpci_set_error(ctx, -EDOM, "destination dtype %d (%s) is not the offered %s",
                               d->dtype, rrpc_dtype_name(d->dtype) ? rrpc_dtype_name(d->dtype)
                                                                   : "unknown",
                               rrpc_dtype_name(in->dtype));
    if (d->ndim != in->ndim)
        return rrpci_set_error(ctx, -EDOM, "destination has %d dimensions, the offer %d",
                               d->ndim, in->ndim);
    for (int i = 0; i < in->ndim; i++)
        if (d->shape[i] != in->shape[i])
            return rrpci_set_error(ctx, -EDOM,
                                   "destination dimension %d is %lld, the offer's %lld", i,
                                   (long long)d->shape[i], (long long)in->shape[i]);
    int r = check_tensor(ctx, d, "destination");
    if (r < 0)
        return r;
    if (d->region->ctx != ctx)
        return rrpci_set_error(ctx, RRPC_E_REGION,
                               "the destination region belongs to another context");
    if (!(d->region->access & RRPC_ACCESS_REMOTE_WRITE))
        return rrpci_set_error(ctx, RRPC_E_ACCESS,
                               "the destination region does not allow remote writes");
    return 0;
}

static void h_offer(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_tensor_server *srv = user;
    rrpc_conn *conn = rrpc_request_conn(req);
    uint64_t version, dtype;
    const char *name;
    size_t nlen, slen, olen = 0;
    const void *shape, *order = NULL;
    char why[128];
    /* A source that is not C-contiguous also sends its strides (a fifth
     * element): only their order is used, for RRPC_TENSOR_SERVE_SENDER_ORDER. */
    int r = rrpc_unpack(p, len, NULL, 0, "usuyy", &version, &name, &nlen, &dtype, &shape, &slen,
                        &order, &olen);
    if (r < 0)
        r = rrpc_unpack(p, len, why, sizeof(why), "usuy", &version, &name, &nlen, &dtype,
                        &shape, &slen);
    if (r < 0) {
        rrpci_set_error(srv->ctx, r, "malformed tensor offer: %s", why);
        refuse(req, r);
        return;
    }
    if (version != TENSOR_PROTO_VERSION) {
        rrpci_set_error(srv->ctx, RRPC_E_VERSION, "tensor offer version %llu, expected %d",
                        (unsigned long long)version, TENSOR_PROTO_VERSION);
        refuse(req, RRPC_E_VERSION);
        return;
    }
    if (nlen == 0 || nlen > NAME_MAX_LEN || memchr(name, 0, nlen) || slen % 8 ||
        slen / 8 > RRPC_TENSOR_MAX_DIMS || dtype > 1000 || (order && olen != slen)) {
        rrpci_set_error(srv->ctx, -EINVAL, "tensor offer with a bad name or shape");
        refuse(req, -EINVAL);
        return;
    }
    r = count_take(srv, conn);
    if (r < 0) {
        refuse(req, r);
        return;
    }
    struct rx *rx = calloc(1, sizeof(*rx));
    if (!rx) {
        srv->pending--;
        srv->ctx->guard.tensor_pending--;
        rrpci_set_error(srv->ctx, -ENOMEM, "out of memory for a tensor offer");
        refuse(req, -ENOMEM);
        return;
    }
    memcpy(rx->name, name, nlen);
    int64_t dims[RRPC_TENSOR_MAX_DIMS];
    get_i64s(dims, shape, (int)(slen / 8));
    rrpc_tensor in;
    r = rrpc_tensor_init(&in, (int)dtype, (int)(slen / 8), dims, NULL, 0);
    if (r < 0) {
        rrpci_set_error(srv->ctx, r, "tensor offer \"%s\": bad dtype or shape", rx->name);
        rx_free(srv, rx); /* no bytes taken yet */
        refuse(req, r);
        return;
    }
    if (order && srv->sender_order) {
        int64_t ostr[RRPC_TENSOR_MAX_DIMS] = {0};
        get_i64s(ostr, order, (int)(olen / 8));
        dense_in_order_of(&in, ostr);
    }
    /* Before the alloc callback: a receiver that allocates what it is
     * offered must not be made to hold more than its budget. */
    uint64_t need = rrpc_tensor_nbytes(&in);
    r = budget_take(srv, rx->name, need);
    if (r < 0) {
        rx_free(srv, rx); /* no bytes taken yet */
        refuse(req, r);
        return;
    }
    rx->bytes = need;
    rx->dest = in;
    r = srv->alloc(conn, rx->name, &in, &rx->dest, srv->user);
    if (r != 0) {
        if (r < 0)
            rrpci_set_error(srv->ctx, r, "the receiver refused tensor \"%s\": %s", rx->name,
                            rrpc_strerror(r));
        else
            rrpci_set_error(srv->ctx, r, "the receiver refused tensor \"%s\"", rx->name);
        rx_free(srv, rx);
        refuse(req, r);
        return;
    }
    rrpc_token tok;
    r = check_dest(srv, &in, &rx->dest);
    if (r == 0)
        r = rrpc_region_token(rx->dest.region, conn, &tok);
    if (r < 0) {
        srv->done(conn, rx->name, &rx->dest, r, srv->user);
        rx_free(srv, rx);
        refuse(req, r);
        return;
    }
    rx->id = ++srv->next_id;
    rx->conn = conn;
    rx->next = srv->rxs;
    srv->rxs = rx;
    uint64_t off = (uint64_t)((uintptr_t)rx->dest.region->addr - tok.addr) + rx->dest.offset;
    r = reply(req, 0, "", rx->id, &tok, off, &rx->dest);
    if (r < 0) { /* the sender will never write: release the destination */
        srv->rxs = rx->next;
        srv->done(conn, rx->name, &rx->dest, r, srv->user);
        rx_free(srv, rx);
    }
}

/* Unlinks and returns the reception @id of @conn, or NULL. */
static struct rx *rx_take(rrpc_tensor_server *srv, uint64_t id, rrpc_conn *conn)
{
    for (struct rx **pp = &srv->rxs; *pp; pp = &(*pp)->next) {
        struct rx *rx = *pp;
        if (rx->id == id && rx->conn == conn) {
            *pp = rx->next;
            return rx;
        }
    }
    return NULL;
}

static void h_done(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_tensor_server *srv = user;
    uint64_t id;
    int64_t status;
    char why[128];
    int r = rrpc_unpack(p, len, why, sizeof(why), "ui", &id, &status);
    if (r < 0) {
        rrpci_set_error(srv->ctx, r, "malformed tensor done: %s", why);
        refuse(req, r);
        return;
    }
    struct rx *rx = rx_take(srv, id, rrpc_request_conn(req));
    if (!rx) {
        rrpci_set_error(srv->ctx, -ENOENT, "no tensor %llu is arriving on this connection",
                        (unsigned long long)id);
        refuse(req, -ENOENT);
        return;
    }
    /* The sender reports the WRITEs' completion; it may claim any failure,
     * but a success code is exactly 0. */
    int st = status == 0 ? 0 : status < 0 && status >= INT32_MIN ? (int)status : RRPC_E_PROTO;
    /* On RC a WRITE completes at the initiator only once the target NIC has
     * acknowledged it, and the tcp target acknowledges after its memcpy: the
     * sender sends "done" only after every WRITE completed, so here every
     * byte is in rx->dest. */
    srv->done(rx->conn, rx->name, &rx->dest, st, srv->user);
    rx_free(srv, rx);
    reply(req, 0, "", 0, NULL, 0, NULL);
}

RRPC_API int rrpc_tensor_serve_with(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc,
                                    rrpc_tensor_done_fn done, void *user,
                                    const rrpc_tensor_server_opts *opts,
                                    rrpc_tensor_server **ret_server)
{
    if (!ctx || !alloc || !done || !ret_server)
        return rrpci_set_error(ctx, -EINVAL, "rrpc_tensor_serve needs alloc and done callbacks");
    int bad = RRPCI_OPTS_CHECK(ctx, opts, "rrpc_tensor_server_opts");
    if (bad < 0)
        return bad;
    rrpc_tensor_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    uint64_t max = opts && opts->max_bytes
                       ? opts->max_bytes
                       : ctx->cfg.tensor_max_bytes;
    if (opts && opts->flags & ~(uint64_t)RRPC_TENSOR_SERVE_SENDER_ORDER) {
        free(srv);
        return rrpci_set_error(ctx, -EINVAL, "rrpc_tensor_server_opts.flags: unknown bits %#llx",
                               (unsigned long long)(opts->flags &
                                                    ~(uint64_t)RRPC_TENSOR_SERVE_SENDER_ORDER));
    }
    *srv = (rrpc_tensor_server){.ctx = ctx,
                                .alloc = alloc,
                                .done = done,
                                .user = user,
                                .max_bytes = max,
                                .sender_order = opts && (opts->flags &
                                                         RRPC_TENSOR_SERVE_SENDER_ORDER)};
    int r = rrpc_register(ctx, OFFER_METHOD, h_offer, srv);
    if (r == 0) {
        r = rrpc_register(ctx, DONE_METHOD, h_done, srv);
        if (r < 0)
            rrpc_unregister(ctx, OFFER_METHOD);
    }
    if (r < 0) {
        free(srv);
        return r;
    }
    *ret_server = srv;
    return 0;
}

RRPC_API int rrpc_tensor_serve(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc, rrpc_tensor_done_fn done,
                               void *user, rrpc_tensor_server **ret_server)
{
    return rrpc_tensor_serve_with(ctx, alloc, done, user, NULL, ret_server);
}

RRPC_API uint64_t rrpc_tensor_server_bytes_held(rrpc_tensor_server *srv)
{
    if (!srv)
        return 0;
    rrpci_lock(srv->ctx);
    uint64_t held = srv->held;
    rrpci_unlock(srv->ctx);
    return held;
}

/* Completes the receptions of @conn (all when NULL) with @status. */
static void rx_fail(rrpc_tensor_server *srv, rrpc_conn *conn, int status)
{
    struct rx **pp = &srv->rxs;
    while (*pp) {
        struct rx *rx = *pp;
        if (conn && rx->conn != conn) {
            pp = &rx->next;
            continue;
        }
        *pp = rx->next;
        srv->done(rx->conn, rx->name, &rx->dest, status, srv->user);
        rx_free(srv, rx);
    }
}

RRPC_API void rrpc_tensor_server_drop_conn(rrpc_tensor_server *srv, rrpc_conn *conn)
{
    if (!srv || !conn)
        return;
    rrpci_lock(srv->ctx);
    rx_fail(srv, conn, RRPC_E_CONN_LOST);
    rrpci_unlock(srv->ctx);
}

RRPC_API void rrpc_tensor_server_close(rrpc_tensor_server *srv)
{
    if (!srv)
        return;
    rrpc_ctx *ctx = srv->ctx;
    /* Handlers run with the context lock held: once it is ours and the
     * methods are gone, none can be running or start. */
    rrpci_lock(ctx);
    rrpc_unregister(ctx, OFFER_METHOD);
    rrpc_unregister(ctx, DONE_METHOD);
    rx_fail(srv, NULL, RRPC_E_CLOSED);
    rrpci_unlock(ctx);
    free(srv);
}

/* ---- sender ------------------------------------------------------------------------ */

struct tx {
    rrpc_conn *conn;
    rrpc_ctx *ctx;
    rrpc_tensor src;
    int cls;
    rrpc_op_cb cb;
    void *user;
    uint64_t rx_id;
    int status; /* of the WRITEs */
    char name[NAME_MAX_LEN + 1];
};

static void tx_finish(struct tx *t, int status)
{
    rrpc_op_cb cb = t->cb;
    void *user = t->user;
    free(t);
    cb(status, user);
}

/* An answer's in-band status and message; RRPC_E_PROTO when malformed. */
static int answer_status(struct tx *t, const rrpc_result *res, const char *what)
{
    if (res->status != 0) {
        rrpci_set_error(t->ctx, res->status, "tensor \"%s\": %s failed: %s", t->name, what,
                        res->message);
        return res->status;
    }
    int64_t st;
    const char *msg;
    size_t mlen, tlen, slen;
    uint64_t id, off;
    const void *tok, *str;
    if (rrpc_unpack(res->data, res->len, NULL, 0, "isuyuy", &st, &msg, &mlen, &id, &tok, &tlen,
                    &off, &str, &slen) < 0 ||
        st < INT32_MIN || st > INT32_MAX)
        return rrpci_set_error(t->ctx, RRPC_E_PROTO, "tensor \"%s\": malformed %s answer",
                               t->name, what);
    if (st != 0)
        rrpci_set_error(t->ctx, (int)st, "tensor \"%s\": the receiver says: %.*s", t->name,
                        (int)(mlen > 512 ? 512 : mlen), msg);
    return (int)st;
}

static void tx_on_done(const rrpc_result *res, void *user)
{
    struct tx *t = user;
    int st = answer_status(t, res, "done");
    tx_finish(t, t->status ? t->status : st);
}

static void tx_send_done(struct tx *t, int status)
{
    t->status = status;
    void *buf;
    size_t len;
    int r = rrpc_pack(&buf, &len, "ui", t->rx_id, (int64_t)status);
    if (r == 0) {
        rrpc_call_opts o = {.qos_class = t->cls};
        r = rrpc_call(t->conn, DONE_METHOD, buf, len, &o, tx_on_done, t);
        free(buf);
    }
    if (r < 0)
        tx_finish(t, status ? status : r);
}

static void tx_on_written(int status, void *user)
{
    tx_send_done(user, status);
}

static void tx_on_offer(const rrpc_result *res, void *user)
{
    struct tx *t = user;
    int st = answer_status(t, res, "offer");
    if (st != 0) {
        tx_finish(t, st);
        return;
    }
    int64_t s64;
    const char *msg;
    size_t mlen, tlen, slen;
    uint64_t off;
    const void *tbuf, *sbuf;
    rrpc_unpack(res->data, res->len, NULL, 0, "isuyuy", &s64, &msg, &mlen, &t->rx_id, &tbuf,
                &tlen, &off, &sbuf, &slen);
    /* Nothing from the wire is trusted: the destination must be a layout of
     * our shape that lies inside the token, before anything is written. */
    rrpc_token tok;
    rrpc_tensor d = t->src;
    d.region = NULL;
    d.offset = 0;
    int64_t lo, hi;
    int r = rrpc_token_decode(tbuf, tlen, &tok);
    if (r < 0 || slen != (size_t)t->src.ndim * 8) {
        rrpci_set_error(t->ctx, RRPC_E_PROTO, "tensor \"%s\": malformed destination", t->name);
        tx_send_done(t, RRPC_E_PROTO);
        return;
    }
    get_i64s(d.strides, sbuf, t->src.ndim);
    r = check_layout(t->ctx, &d, "destination", &lo, &hi);
    if (r == 0 && !(tok.access & RRPC_ACCESS_REMOTE_WRITE))
        r = rrpci_set_error(t->ctx, RRPC_E_ACCESS, "tensor \"%s\": the destination does not "
                            "allow remote writes", t->name);
    if (r == 0 && !span_inside(lo, hi, off, tok.len))
        r = rrpci_set_error(t->ctx, RRPC_E_ACCESS,
                            "tensor \"%s\": the destination leaves the receiver's region",
                            t->name);
    if (r < 0) {
        tx_send_done(t, r);
        return;
    }
    if (rrpc_tensor_numel(&t->src) == 0) {
        tx_send_done(t, 0);
        return;
    }
    struct plan *p = malloc(sizeof(*p));
    if (!p) {
        tx_send_done(t, -ENOMEM);
        return;
    }
    struct rrpci_runs runs = {.n = plan_make(&t->src, d.strides, off, p), .get = plan_get,
                              .arg = p};
    rrpc_op_opts o = {.qos_class = t->cls};
    r = rrpci_xfer_batch(t->conn, t->src.region, &tok, &runs, &o, tx_on_written, t);
    if (r < 0)
        tx_send_done(t, r);
}

RRPC_API int rrpc_tensor_send_with(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                                   const rrpc_tensor_send_opts *opts, rrpc_op_cb cb, void *user)
{
    if (!conn)
        return -EINVAL;
    rrpc_ctx *ctx = conn->ctx;
    int bad = RRPCI_OPTS_CHECK(ctx, opts, "rrpc_tensor_send_opts");
    if (bad < 0)
        return bad;
    if (opts && opts->flags)
        return rrpci_set_error(ctx, -EINVAL, "rrpc_tensor_send_opts.flags: unknown bits %#llx",
                               (unsigned long long)opts->flags);
    int qos_class = opts ? opts->qos_class : RRPC_CLASS_DEFAULT;
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen > NAME_MAX_LEN || !src || !cb)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_tensor_send_with needs a name of 1..255 bytes, a tensor and a "
                               "callback");
    int r = check_tensor(ctx, src, "source");
    if (r < 0)
        return r;
    if (src->region->ctx != ctx)
        return rrpci_set_error(ctx, RRPC_E_REGION,
                               "source: the region belongs to another context than the "
                               "connection's");
    int cls = qos_class == RRPC_CLASS_DEFAULT ? RRPC_CLASS_BULK : qos_class, idx;
    r = rrpci_class_arg(ctx, cls, RRPCI_CLS_BULK, &idx);
    if (r < 0)
        return r;
    struct tx *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    *t = (struct tx){.conn = conn, .ctx = ctx, .src = *src, .cls = cls, .cb = cb, .user = user};
    memcpy(t->name, name, nlen);
    uint8_t shape[RRPC_TENSOR_MAX_DIMS * 8];
    put_i64s(shape, src->shape, src->ndim);
    void *buf;
    size_t len;
    if (rrpc_tensor_is_contiguous(src)) {
        r = rrpc_pack(&buf, &len, "usuy", (uint64_t)TENSOR_PROTO_VERSION, t->name,
                      (uint64_t)src->dtype, (const void *)shape, (size_t)src->ndim * 8);
    } else { /* its memory order, for a receiver that lays the tensor out the same way */
        uint8_t strides[RRPC_TENSOR_MAX_DIMS * 8];
        put_i64s(strides, src->strides, src->ndim);
        r = rrpc_pack(&buf, &len, "usuyy", (uint64_t)TENSOR_PROTO_VERSION, t->name,
                      (uint64_t)src->dtype, (const void *)shape, (size_t)src->ndim * 8,
                      (const void *)strides, (size_t)src->ndim * 8);
    }
    if (r == 0) {
        rrpc_call_opts o = {.qos_class = cls};
        r = rrpc_call(conn, OFFER_METHOD, buf, len, &o, tx_on_offer, t);
        free(buf);
    }
    if (r < 0)
        free(t);
    return r;
}

RRPC_API int rrpc_tensor_send_with_sync(rrpc_conn *conn, const char *name,
                                        const rrpc_tensor *src, const rrpc_tensor_send_opts *opts)
{
    struct rrpci_sync s;
    int r = rrpci_sync_begin(&s, conn ? conn->ctx : NULL,
                             "a blocking tensor send from a callback; use "
                             "rrpc_tensor_send_with");
    if (r)
        return r;
    return rrpci_sync_end(&s, rrpc_tensor_send_with(conn, name, src, opts, rrpci_sync_op_cb, &s));
}

/* ---- the names deprecated in 0.2 (tensor.h) ---------------------------------------- */

RRPC_API int rrpc_tensor_serve_ex(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc,
                                  rrpc_tensor_done_fn done, void *user,
                                  const rrpc_tensor_server_opts *opts,
                                  rrpc_tensor_server **ret_server)
{
    return rrpc_tensor_serve_with(ctx, alloc, done, user, opts, ret_server);
}

RRPC_API int rrpc_tensor_send(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                              int qos_class, rrpc_op_cb cb, void *user)
{
    rrpc_tensor_send_opts o = {.qos_class = qos_class};
    return rrpc_tensor_send_with(conn, name, src, &o, cb, user);
}

RRPC_API int rrpc_tensor_send_sync(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                                   int qos_class)
{
    rrpc_tensor_send_opts o = {.qos_class = qos_class};
    return rrpc_tensor_send_with_sync(conn, name, src, &o);
}

/* SPDX-License-Identifier: MIT */
/* KV-cache page pools, and the batch engine the tensors share. */
#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "xfer/xfer.h"

/* ---- the batch engine ------------------------------------------------------ */

/* WRITEs in flight per batch: enough to keep a link busy, few enough that a
 * batch of a million runs does not queue a million frames at once. */
#define XFER_WINDOW 64

struct batch {
    rrpc_conn *conn;
    rrpc_region *local;
    rrpc_token remote;
    struct rrpci_runs runs;
    size_t next, inflight, issued;
    int status;
    int cls;
    bool notify;
    uint32_t imm;
    bool pumping, starting;
    rrpc_op_cb cb;
    void *user;
};

static void batch_free(struct batch *b)
{
    free(b->runs.arg);
    free(b);
}

static bool batch_over(const struct batch *b)
{
    return b->inflight == 0 && (b->status != 0 || b->next == b->runs.n);
}

static void batch_on_write(int status, void *user);

/*
 * Issues what the window allows.  rrpc_write may complete a WRITE inside the
 * call (when the connection dies under it), which re-enters here through
 * batch_on_write: the inner call returns at once and this loop, seeing the
 * error, stops; only the outermost call ends the batch.
 */
static void batch_pump(struct batch *b)
{
    if (b->pumping)
        return;
    b->pumping = true;
    while (b->status == 0 && b->next < b->runs.n && b->inflight < XFER_WINDOW) {
        size_t i = b->next++;
        struct rrpci_run run;
        b->runs.get(b->runs.arg, i, &run);
        /* Only the last WRITE notifies.  WRITEs on one class are executed in
         * the order they were posted (one RC queue pair per class on verbs,
         * where the write-with-immediate completes at the target after every
         * earlier WRITE on that QP was placed; one socket per class on tcp,
         * whose target applies frames in order), so the notification
         * follows the data of the whole batch. */
        rrpc_op_opts o = {
            .qos_class = b->cls,
            .notify = b->notify && i + 1 == b->runs.n,
            .imm = b->imm,
        };
        b->inflight++;
        int r = rrpc_write(b->conn, b->local, run.loff, &b->remote, run.roff, run.len, &o,
                           batch_on_write, b);
        if (r < 0) {
            b->inflight--;
            if (b->status == 0)
                b->status = r;
        } else {
            b->issued++;
        }
    }
    b->pumping = false;
    if (!b->starting && batch_over(b)) {
        rrpc_op_cb cb = b->cb;
        void *user = b->user;
        int status = b->status;
        batch_free(b);
        cb(status, user);
    }
}

static void batch_on_write(int status, void *user)
{
    struct batch *b = user;
    b->inflight--;
    if (status != 0 && b->status == 0)
        b->status = status;
    batch_pump(b);
}

int rrpci_xfer_batch(rrpc_conn *conn, rrpc_region *local, const rrpc_token *remote,
                     struct rrpci_runs *runs, const rrpc_op_opts *opts, rrpc_op_cb cb,
                     void *user)
{
    struct batch *b = calloc(1, sizeof(*b));
    if (!b) {
        free(runs->arg);
        return -ENOMEM;
    }
    b->conn = conn;
    b->local = local;
    b->remote = *remote;
    b->runs = *runs;
    b->cls = opts ? opts->qos_class : RRPC_CLASS_BULK;
    b->notify = opts && opts->notify;
    b->imm = opts ? opts->imm : 0;
    b->cb = cb;
    b->user = user;
    b->starting = true;
    batch_pump(b);
    b->starting = false;
    if (b->issued == 0) {
        int r = b->status;
        batch_free(b);
        return r;
    }
    if (batch_over(b)) { /* everything completed inside rrpc_write: the connection died */
        int status = b->status;
        batch_free(b);
        cb(status, user);
    }
    return 0;
}

/* ---- pools ------------------------------------------------------------------ */

struct rrpc_kv_pool {
    rrpc_region *region;
    uint8_t *base;
    size_t page_size, page_count;
};

RRPC_API int rrpc_kv_pool_reg(rrpc_ctx *ctx, void *base, size_t page_size, size_t page_count,
                              rrpc_kv_pool **ret_pool)
{
    size_t len;
    if (!ctx || !base || !ret_pool || page_size == 0 || page_count == 0 ||
        __builtin_mul_overflow(page_size, page_count, &len))
        return rrpci_set_error(ctx, -EINVAL,
                               "a KV pool needs memory, a page size > 0 and a page count > 0 "
                               "whose product fits in size_t");
    rrpc_kv_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    int r = rrpc_mem_reg(ctx, base, len, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE,
                         &p->region);
    if (r < 0) {
        free(p);
        return r;
    }
    p->base = base;
    p->page_size = page_size;
    p->page_count = page_count;
    *ret_pool = p;
    return 0;
}

RRPC_API void rrpc_kv_pool_dereg(rrpc_kv_pool *pool)
{
    if (!pool)
        return;
    rrpc_mem_dereg(pool->region);
    free(pool);
}

RRPC_API size_t rrpc_kv_pool_page_size(const rrpc_kv_pool *pool)
{
    return pool ? pool->page_size : 0;
}

RRPC_API size_t rrpc_kv_pool_page_count(const rrpc_kv_pool *pool)
{
    return pool ? pool->page_count : 0;
}

RRPC_API rrpc_region *rrpc_kv_pool_region(rrpc_kv_pool *pool)
{
    return pool ? pool->region : NULL;
}

RRPC_API void *rrpc_kv_pool_page(rrpc_kv_pool *pool, size_t index)
{
    if (!pool || index >= pool->page_count)
        return NULL;
    return pool->base + index * pool->page_size;
}

RRPC_API int rrpc_kv_pool_token(rrpc_kv_pool *pool, rrpc_conn *conn, rrpc_kv_token *ret_token)
{
    if (!pool || !conn || !ret_token)
        return -EINVAL;
    rrpc_kv_token t = {.page_size = pool->page_size, .page_count = pool->page_count};
    int r = rrpc_region_token(pool->region, conn, &t.region);
    if (r < 0)
        return r;
    *ret_token = t;
    return 0;
}

RRPC_API void rrpc_kv_token_encode(const rrpc_kv_token *t, uint8_t out[RRPC_KV_TOKEN_SIZE])
{
    rrpc_token_encode(&t->region, out);
    rrpci_put64(out + RRPC_TOKEN_SIZE, t->page_size);
    rrpci_put64(out + RRPC_TOKEN_SIZE + 8, t->page_count);
}

/* The pages of @t fit in its region token. */
static bool kv_token_covers(const rrpc_kv_token *t)
{
    uint64_t len;
    return t->page_size && t->page_count &&
           !__builtin_mul_overflow(t->page_size, t->page_count, &len) && len <= t->region.len;
}

RRPC_API int rrpc_kv_token_decode(const void *buf, size_t len, rrpc_kv_token *ret_token)
{
    if (!buf || !ret_token || len != RRPC_KV_TOKEN_SIZE)
        return -EINVAL;
    rrpc_kv_token t;
    int r = rrpc_token_decode(buf, RRPC_TOKEN_SIZE, &t.region);
    if (r < 0)
        return r;
    const uint8_t *p = buf;
    t.page_size = rrpci_get64(p + RRPC_TOKEN_SIZE);
    t.page_count = rrpci_get64(p + RRPC_TOKEN_SIZE + 8);
    if (!kv_token_covers(&t))
        return -EINVAL;
    *ret_token = t;
    return 0;
}

/* ---- transfers -------------------------------------------------------------- */

static int pair_by_dst(const void *a, const void *b)
{
    const rrpc_kv_pair *x = a, *y = b;
    return x->dst < y->dst ? -1 : x->dst > y->dst;
}

static void kv_get_run(const void *arg, size_t i, struct rrpci_run *out)
{
    *out = ((const struct rrpci_run *)arg)[i];
}

/*
 * Checks everything and builds the runs.  Returns the number of runs (> 0)
 * in *ret_runs / *ret_n, or an error with nothing allocated.
 */
static int kv_plan(rrpc_conn *conn, rrpc_kv_pool *src, const rrpc_kv_token *dst,
                   const rrpc_kv_pair *pairs, size_t n, int cls, struct rrpci_run **ret_runs,
                   size_t *ret_n)
{
    rrpc_ctx *ctx = conn->ctx;
    if (src->region->ctx != ctx)
        return rrpci_set_error(ctx, RRPC_E_REGION,
                               "the source pool is registered with another context than the "
                               "connection's");
    int idx;
    int r = rrpci_class_arg(ctx, cls, RRPCI_CLS_BULK, &idx);
    if (r < 0)
        return r;
    if (dst->page_size != src->page_size)
        return rrpci_set_error(ctx, -EDOM,
                               "page sizes differ: source pool %zu bytes, destination %llu bytes",
                               src->page_size, (unsigned long long)dst->page_size);
    if (!(dst->region.access & RRPC_ACCESS_REMOTE_WRITE))
        return rrpci_set_error(ctx, RRPC_E_ACCESS,
                               "the destination pool's token does not allow remote writes");
    if (!kv_token_covers(dst))
        return rrpci_set_error(ctx, RRPC_E_ACCESS,
                               "the destination token's %llu pages of %llu bytes do not fit in "
                               "its region of %llu bytes",
                               (unsigned long long)dst->page_count,
                               (unsigned long long)dst->page_size,
                               (unsigned long long)dst->region.len);
    for (size_t i = 0; i < n; i++) {
        if (pairs[i].src >= src->page_count)
            return rrpci_set_error(ctx, -ERANGE,
                                   "pair %zu: source page %llu is outside the pool of %zu pages",
                                   i, (unsigned long long)pairs[i].src, src->page_count);
        if (pairs[i].dst >= dst->page_count)
            return rrpci_set_error(
                ctx, -ERANGE, "pair %zu: destination page %llu is outside the pool of %llu pages",
                i, (unsigned long long)pairs[i].dst, (unsigned long long)dst->page_count);
    }
    rrpc_kv_pair *s = malloc(n * sizeof(*s));
    if (!s)
        return -ENOMEM;
    memcpy(s, pairs, n * sizeof(*s));
    qsort(s, n, sizeof(*s), pair_by_dst);
    for (size_t i = 1; i < n; i++)
        if (s[i].dst == s[i - 1].dst) {
            unsigned long long d = s[i].dst;
            free(s);
            return rrpci_set_error(ctx, -EEXIST,
                                   "destination page %llu appears twice in one batch", d);
        }
    /* Coalesce: in destination order, a run grows while both sides step by
     * one page.  Then split runs longer than one WRITE may be. */
    size_t ps = src->page_size, pieces = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && s[j].dst == s[j - 1].dst + 1 && s[j].src == s[j - 1].src + 1)
            j++;
        size_t bytes = (j - i) * ps; /* within the pool: no overflow */
        pieces += (bytes + RRPCI_XFER_MAX_WRITE - 1) / RRPCI_XFER_MAX_WRITE;
        i = j;
    }
    struct rrpci_run *runs = malloc(pieces * sizeof(*runs));
    if (!runs) {
        free(s);
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && s[j].dst == s[j - 1].dst + 1 && s[j].src == s[j - 1].src + 1)
            j++;
        size_t bytes = (j - i) * ps;
        size_t loff = s[i].src * ps;
        uint64_t roff = s[i].dst * ps;
        for (size_t off = 0; off < bytes; off += RRPCI_XFER_MAX_WRITE) {
            size_t len = bytes - off < RRPCI_XFER_MAX_WRITE ? bytes - off : RRPCI_XFER_MAX_WRITE;
            runs[k++] = (struct rrpci_run){.loff = loff + off, .roff = roff + off, .len = len};
        }
        i = j;
    }
    free(s);
    *ret_runs = runs;
    *ret_n = pieces;
    return 0;
}

RRPC_API int rrpc_kv_transfer(rrpc_conn *conn, rrpc_kv_pool *src, const rrpc_kv_token *dst,
                              const rrpc_kv_pair *pairs, size_t n, const rrpc_op_opts *opts,
                              rrpc_op_cb cb, void *user, size_t *ret_writes)
{
    if (!conn)
        return -EINVAL;
    int bad = RRPCI_OPTS_CHECK(conn->ctx, opts, "rrpc_op_opts");
    if (bad < 0)
        return bad;
    if (!src || !dst || !pairs || n == 0 || !cb)
        return rrpci_set_error(conn->ctx, -EINVAL,
                               "a KV transfer needs a source pool, a destination token, at "
                               "least one pair and a callback");
    int cls = opts ? opts->qos_class : RRPC_CLASS_BULK;
    struct rrpci_run *runs = NULL;
    size_t nruns = 0;
    rrpc_ctx *ctx = conn->ctx;
    rrpci_lock(ctx);
    int r = kv_plan(conn, src, dst, pairs, n, cls, &runs, &nruns);
    if (r == 0) {
        struct rrpci_runs rs = {.n = nruns, .get = kv_get_run, .arg = runs};
        rrpc_op_opts o = {.qos_class = cls, .notify = opts && opts->notify,
                          .imm = opts ? opts->imm : 0};
        r = rrpci_xfer_batch(conn, src->region, &dst->region, &rs, &o, cb, user);
        if (r == 0 && ret_writes)
            *ret_writes = nruns;
    }
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_kv_transfer_sync(rrpc_conn *conn, rrpc_kv_pool *src, const rrpc_kv_token *dst,
                                   const rrpc_kv_pair *pairs, size_t n, const rrpc_op_opts *opts,
                                   size_t *ret_writes)
{
    struct rrpci_sync s;
    int r = rrpci_sync_begin(&s, conn ? conn->ctx : NULL,
                             "a blocking KV transfer from a callback; use "
                             "rrpc_kv_transfer");
    if (r)
        return r;
    return rrpci_sync_end(&s, rrpc_kv_transfer(conn, src, dst, pairs, n, opts,
                                         rrpci_sync_op_cb, &s, ret_writes));
}

/* SPDX-License-Identifier: MIT */
/*
 * KV-cache page pools: registration, tokens, and page-pair transfers
 * through the transfer engine (engine.c, over the public rrpc_write).
 *
 * An internal module of the library, not a user of it: it includes
 * core/core.h for the context lock (held from the checks through the start
 * of a batch, as the engine requires), the owning context of a connection
 * and of a region, the per-thread error detail (rrpci_set_error), the class
 * and reserved-word checks of options, the blocking mechanism (struct
 * rrpci_sync) and the little-endian helpers of frame.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "xfer/xfer.h"

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

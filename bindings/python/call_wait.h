/* SPDX-License-Identifier: MIT */
/*
 * Part of the roce_rpc extension's C source (build_ffi.py appends it): what
 * Conn.call waits on.  The call's completion runs in C, without the GIL: it
 * copies the answer and sets the record's done.  The caller starts the
 * call and waits inside rrpc_ctx_wait_until, as rrpc_call_sync would: while
 * the loop thread sleeps it runs the loop itself, so the answer wakes it
 * directly rather than through the loop thread.  It waits in slices so that
 * Python can raise KeyboardInterrupt between them.  Where the context
 * cannot be used (it is closing), rrpcpy_wait_for sleeps on the record
 * alone until a close fails the call.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RRPCPY_INLINE 256 /* answers up to this size need no allocation */

typedef struct rrpcpy_wait {
    int done; /* 1 once the completion has run; a futex word for rrpcpy_wait_for */
    int sleeping; /* 1 while rrpcpy_wait_for may sleep on done: the completion wakes it */
    int started; /* 1 once rrpc_call took the call: its completion will run */
    int status;
    int owned; /* 1 when data or meta was malloc'ed: rrpcpy_wait_clear frees them */
    void *data; /* the answer (status 0) or the message: small ones in inline */
    size_t len;
    unsigned char inline_buf[RRPCPY_INLINE];
    rrpc_meta *meta; /* the answer's metadata: one malloc'ed block, or NULL */
    size_t nmeta;
} rrpcpy_wait;

/* A copy of @n entries in one block (entries, then NUL-terminated keys and
 * values); NULL without memory. */
static rrpc_meta *rrpcpy_meta_copy(const rrpc_meta *meta, size_t n)
{
    size_t store = 0;
    for (size_t i = 0; i < n; i++)
        store += strlen(meta[i].key) + 1 + meta[i].len + 1;
    rrpc_meta *out = malloc(n * sizeof(*out) + store);
    if (!out)
        return NULL;
    char *p = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        size_t kl = strlen(meta[i].key) + 1;
        memcpy(p, meta[i].key, kl);
        out[i].key = p;
        p += kl;
        if (meta[i].len)
            memcpy(p, meta[i].value, meta[i].len);
        p[meta[i].len] = 0;
        out[i].value = p;
        out[i].len = meta[i].len;
        p += meta[i].len + 1;
    }
    return out;
}

static void rrpcpy_call_done(const rrpc_result *res, void *user)
{
    rrpcpy_wait *w = user;
    const void *src = res->status == 0 ? res->data : res->message;
    size_t n = res->status == 0 ? res->len : (res->message ? strlen(res->message) : 0);
    w->status = res->status;
    w->len = 0;
    w->data = NULL;
    w->meta = NULL;
    w->nmeta = 0;
    w->owned = res->nmeta != 0 || n > RRPCPY_INLINE;
    if (res->nmeta) {
        w->meta = rrpcpy_meta_copy(res->meta, res->nmeta);
        if (w->meta)
            w->nmeta = res->nmeta;
        else if (res->status == 0)
            w->status = -ENOMEM;
    }
    if (n) {
        w->data = n <= RRPCPY_INLINE ? w->inline_buf : malloc(n);
        if (w->data) {
            memcpy(w->data, src, n);
            w->len = n;
        } else if (res->status == 0) {
            w->status = -ENOMEM;
        }
    }
    /* Sequentially consistent with rrpcpy_wait_for's sleeping, then done:
     * either it sees done, or this sees sleeping and wakes it. */
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&w->sleeping, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &w->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

struct rrpcpy_start {
    rrpc_conn *conn;
    const char *method;
    const void *req;
    size_t len;
    const rrpc_call_opts *opts;
    rrpcpy_wait *w;
};

static int rrpcpy_start_call(void *arg)
{
    struct rrpcpy_start *s = arg;
    int r = rrpc_call(s->conn, s->method, s->req, s->len, s->opts, rrpcpy_call_done, s->w);
    s->w->started = r == 0;
    return r;
}

/* Starts the call on @conn (of @ctx) and waits up to @slice_ms for it:
 * 1 once its completion ran, 0 while it is pending (w->started: wait on
 * with rrpcpy_wait_more), or the error that kept it from starting. */
static int rrpcpy_call_wait(rrpc_ctx *ctx, rrpc_conn *conn, const char *method, const void *req,
                            size_t len, const rrpc_call_opts *opts, rrpcpy_wait *w, int slice_ms)
{
    struct rrpcpy_start s = {conn, method, req, len, opts, w};
    w->done = 0;
    w->sleeping = 0;
    w->started = 0;
    int r = rrpc_ctx_wait_until(ctx, rrpcpy_start_call, &s, &w->done, slice_ms);
    if (!w->started)
        return r;
    return r == 0 ? 1 : 0; /* -ETIMEDOUT: the slice passed */
}

/* Waits up to @slice_ms more for a started call: 1 once its completion
 * ran, 0 while it is pending. */
static int rrpcpy_wait_more(rrpc_ctx *ctx, rrpcpy_wait *w, int slice_ms)
{
    return rrpc_ctx_wait_until(ctx, NULL, NULL, &w->done, slice_ms) == 0;
}

static int rrpcpy_cancel(rrpc_conn *conn, rrpcpy_wait *w)
{
    return rrpc_call_cancel(conn, rrpcpy_call_done, w);
}

static double rrpcpy_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* 1 once @w's completion has run; 0 after about @slice_ms without it.
 * Without the context: for a context being closed, whose close runs it. */
static int rrpcpy_wait_for(rrpcpy_wait *w, int spin_us, int slice_ms)
{
    double t0 = rrpcpy_now_us();
    do {
        if (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
            return 1;
    } while (rrpcpy_now_us() - t0 < spin_us);
    struct timespec ts = {slice_ms / 1000, (long)(slice_ms % 1000) * 1000000L};
    __atomic_store_n(&w->sleeping, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&w->done, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &w->done, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    __atomic_store_n(&w->sleeping, 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

static void rrpcpy_wait_clear(rrpcpy_wait *w)
{
    if (w->data != w->inline_buf)
        free(w->data);
    w->data = NULL;
    w->len = 0;
    free(w->meta);
    w->meta = NULL;
    w->nmeta = 0;
    w->owned = 0;
}

/* roce_rpc.aio: the completion of a call, handed to Python (aio.py) with
 * its user pointer (the call's key), status and length as integers, so
 * the Python side converts no pointer to find its call. */
static void _rrpc_py_aio_done(uintptr_t key, int status, size_t len, const rrpc_result *res);

static void rrpcpy_aio_call_done(const rrpc_result *res, void *user)
{
    _rrpc_py_aio_done((uintptr_t)user, res->status, res->len, res);
}

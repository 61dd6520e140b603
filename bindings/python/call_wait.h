/* SPDX-License-Identifier: MIT */
/*
 * Part of the roce_rpc extension's C source (build_ffi.py appends it): what
 * Conn.call waits on.  The call's completion runs in C on the loop thread,
 * without the GIL: it copies the answer and wakes the caller, who spins a
 * few microseconds before sleeping (as rrpc_call_sync does), and sleeps in
 * slices so that Python can raise KeyboardInterrupt between them.
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
    int done; /* the futex word: 1 once the completion has run */
    int started; /* 1 once rrpc_call took the call: its completion will run */
    int status;
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
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &w->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static int rrpcpy_call(rrpc_conn *conn, const char *method, const void *req, size_t len,
                       const rrpc_call_opts *opts, rrpcpy_wait *w)
{
    w->done = 0;
    int r = rrpc_call(conn, method, req, len, opts, rrpcpy_call_done, w);
    w->started = r == 0;
    return r;
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

/* 1 once @w's completion has run; 0 after about @slice_ms without it. */
static int rrpcpy_wait_for(rrpcpy_wait *w, int spin_us, int slice_ms)
{
    double t0 = rrpcpy_now_us();
    do {
        if (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
            return 1;
    } while (rrpcpy_now_us() - t0 < spin_us);
    struct timespec ts = {slice_ms / 1000, (long)(slice_ms % 1000) * 1000000L};
    if (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, &w->done, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
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
}

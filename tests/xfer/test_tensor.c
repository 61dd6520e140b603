/* SPDX-License-Identifier: MIT */
/*
 * Tensors and KV-cache pages (<roce_rpc/tensor.h>), over a real connection.
 * Written against the public API only and run once per transport, like the
 * conformance suite; the transport and addresses come from the environment:
 *   RRPC_TEST_TRANSPORT   tcp (default) | verbs
 *   RRPC_TEST_SERVER      the server's address (default 127.0.0.1)
 *   RRPC_TEST_CLIENT_SRC  the client's source address (optional)
 * Receiver and sender are two contexts in this process, each on its own loop
 * thread, so the receiver's memory is checked directly, byte for byte.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "../common/test_sync.h"

enum alloc_mode {
    ALLOC_EXACT,       /* the destination T.dst_region at T.dst_off, strides T.dst_strides */
    ALLOC_WRONG_DTYPE, /* a destination of another dtype */
    ALLOC_WRONG_SHAPE, /* a destination of another shape */
    ALLOC_OUTSIDE,     /* a destination that leaves its region */
    ALLOC_READ_ONLY,   /* a region without remote write */
    ALLOC_REFUSE,      /* the application says no, with code 42 */
    ALLOC_FRESH,       /* a fresh mapping of the offered size, registered (what a
                          receiver without a pool does, like Python's default) */
};

#define MAX_HEAP 16

static struct {
    const char *transport, *scheme, *server_addr, *client_src;
    char uri[256];
    rrpc_ctx *sctx, *cctx;
    rrpc_listener *lis;
    rrpc_conn *conn; /* the client's */
    rrpc_tensor_server *srv;

    /* receiver: where tensors go */
    uint8_t *dst_mem;
    size_t dst_len;
    rrpc_region *dst_region, *ro_region;
    size_t dst_off;
    bool dst_strided; /* use T.dst_strides instead of C order */
    int64_t dst_strides[RRPC_TENSOR_MAX_DIMS];
    enum alloc_mode mode;
    /* what the receiver saw */
    int allocs, dones, done_status;
    void *done_addr;    /* region start + offset of the destination given */
    void *chosen_addr;  /* what the alloc callback chose */
    int verified;       /* the content checked inside the done callback */
    const rrpc_tensor *expect; /* the source, for the check */
    rrpc_conn *rx_conn;        /* the server's side of the last offer */
    int64_t in_strides[RRPC_TENSOR_MAX_DIMS]; /* of the last offer's @incoming */
    struct {
        void *mem;
        size_t len;
        rrpc_region *region;
    } heap[MAX_HEAP]; /* ALLOC_FRESH's mappings, unmapped by on_done */

    /* KV */
    rrpc_kv_pool *spool, *dpool;
    uint8_t *spages, *dpages;
    int notifies;
    uint32_t last_imm;
} T;

#define PAGE 4096u
#define NPAGES 64u
#define GUARD 4096u

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

/* ---- element-wise comparison of two in-process tensors ---------------------- */

static const uint8_t *elem(const rrpc_tensor *t, const int64_t *idx)
{
    const uint8_t *p = (const uint8_t *)rrpc_region_addr(t->region) + t->offset;
    for (int i = 0; i < t->ndim; i++)
        p += idx[i] * t->strides[i];
    return p;
}

static bool same_content(const rrpc_tensor *a, const rrpc_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    uint64_t n = rrpc_tensor_numel(a);
    size_t isz = rrpc_dtype_size(a->dtype);
    if (rrpc_tensor_is_contiguous(a) && rrpc_tensor_is_contiguous(b))
        return memcmp(elem(a, (int64_t[8]){0}), elem(b, (int64_t[8]){0}), n * isz) == 0;
    int64_t idx[RRPC_TENSOR_MAX_DIMS] = {0};
    for (uint64_t k = 0; k < n; k++) {
        if (memcmp(elem(a, idx), elem(b, idx), isz) != 0)
            return false;
        for (int d = a->ndim - 1; d >= 0; d--) {
            if (++idx[d] < a->shape[d])
                break;
            idx[d] = 0;
        }
    }
    return true;
}

/* ---- receiver callbacks --------------------------------------------------------- */

static int on_alloc(rrpc_conn *c, const char *name, const rrpc_tensor *in, rrpc_tensor *d,
                    void *user)
{
    lock();
    T.allocs++;
    memcpy(T.in_strides, in->strides, sizeof(T.in_strides));
    int r = 0;
    d->region = T.dst_region;
    d->offset = T.dst_off;
    if (T.dst_strided)
        memcpy(d->strides, T.dst_strides, sizeof(d->strides));
    switch (T.mode) {
    case ALLOC_EXACT:
        break;
    case ALLOC_WRONG_DTYPE:
        d->dtype = in->dtype == RRPC_DTYPE_F32 ? RRPC_DTYPE_I32 : RRPC_DTYPE_F32;
        break;
    case ALLOC_WRONG_SHAPE:
        d->shape[0] = in->shape[0] + 1;
        break;
    case ALLOC_OUTSIDE:
        d->offset = T.dst_len - 4;
        break;
    case ALLOC_READ_ONLY:
        d->region = T.ro_region;
        d->offset = 0;
        break;
    case ALLOC_REFUSE:
        r = 42;
        break;
    case ALLOC_FRESH: {
        /* mmap, not malloc: VmSize shows what was promised, and no
         * MALLOC_PERTURB_ (meson sets it) touches gigabytes should the
         * budget ever fail to stop an offer */
        size_t n = (size_t)rrpc_tensor_nbytes(in), slot = 0;
        while (slot < MAX_HEAP && T.heap[slot].mem)
            slot++;
        void *m = slot < MAX_HEAP && n ? mmap(NULL, n, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                                       : MAP_FAILED;
        rrpc_region *reg = NULL;
        if (m == MAP_FAILED || rrpc_mem_reg(T.sctx, m, n, RRPC_ACCESS_REMOTE_WRITE, &reg)) {
            if (m != MAP_FAILED)
                munmap(m, n);
            r = -ENOMEM;
            break;
        }
        T.heap[slot].mem = m;
        T.heap[slot].len = n;
        T.heap[slot].region = reg;
        d->region = reg;
        d->offset = 0;
        break;
    }
    }
    T.rx_conn = c;
    T.chosen_addr = (uint8_t *)rrpc_region_addr(d->region) + d->offset;
    unlock();
    return r;
}

static void on_done(rrpc_conn *c, const char *name, const rrpc_tensor *d, int status, void *user)
{
    /* Checked here, inside the callback: every byte must be in place now. */
    bool ok = status == 0 && T.expect && same_content(T.expect, d);
    lock();
    T.dones++;
    T.done_status = status;
    T.done_addr = (uint8_t *)rrpc_region_addr(d->region) + d->offset;
    T.verified = ok;
    for (size_t i = 0; i < MAX_HEAP; i++)
        if (T.heap[i].mem && T.heap[i].region == d->region) {
            rrpc_mem_dereg(T.heap[i].region);
            munmap(T.heap[i].mem, T.heap[i].len);
            T.heap[i].mem = NULL;
            T.heap[i].region = NULL;
        }
    unlock();
}

static void on_notify(rrpc_conn *c, uint32_t imm, void *user)
{
    lock();
    T.notifies++;
    T.last_imm = imm;
    unlock();
}

static void h_kvtoken(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_kv_token t;
    uint8_t buf[RRPC_KV_TOKEN_SIZE];
    assert_int_equal(rrpc_kv_pool_token(T.dpool, rrpc_request_conn(req), &t), 0);
    rrpc_kv_token_encode(&t, buf);
    rrpc_respond(req, buf, sizeof(buf));
}

/* Tensors still arriving on a connection that went down are released. */
static void server_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    lock();
    rrpc_tensor_server *srv = T.srv;
    unlock();
    /* srv cannot be freed under us: rrpc_tensor_server_close waits for the
     * context lock, which this callback holds. */
    if (ev == RRPC_CONN_DOWN)
        rrpc_tensor_server_drop_conn(srv, c);
}

/* Unpublishes T.srv, then closes it (see server_event). */
static void close_server(void)
{
    lock();
    rrpc_tensor_server *srv = T.srv;
    T.srv = NULL;
    unlock();
    rrpc_tensor_server_close(srv);
}

/* ---- setup ------------------------------------------------------------------------- */

#define DST_LEN ((64u << 20) + 2 * GUARD)

static int group_setup(void **state)
{
    T.transport = getenv("RRPC_TEST_TRANSPORT") ? getenv("RRPC_TEST_TRANSPORT") : "tcp";
    T.scheme = strcmp(T.transport, "verbs") == 0 ? "rdma" : "tcp";
    T.server_addr = getenv("RRPC_TEST_SERVER") ? getenv("RRPC_TEST_SERVER") : "127.0.0.1";
    T.client_src = getenv("RRPC_TEST_CLIENT_SRC");
    if (rrpc_ctx_create(&T.sctx) || rrpc_ctx_create(&T.cctx))
        return -1;
    if (rrpc_tensor_serve(T.sctx, on_alloc, on_done, NULL, &T.srv))
        return -1;
    if (rrpc_register(T.sctx, "kvtoken", h_kvtoken, NULL))
        return -1;
    rrpc_ctx_set_notify(T.sctx, on_notify, NULL);
    T.dst_len = DST_LEN;
    T.dst_mem = malloc(T.dst_len);
    static uint8_t ro[4096];
    T.spages = malloc(PAGE * NPAGES);
    T.dpages = malloc(PAGE * NPAGES);
    if (!T.dst_mem || !T.spages || !T.dpages ||
        rrpc_mem_reg(T.sctx, T.dst_mem, T.dst_len, RRPC_ACCESS_REMOTE_WRITE, &T.dst_region) ||
        rrpc_mem_reg(T.sctx, ro, sizeof(ro), RRPC_ACCESS_REMOTE_READ, &T.ro_region) ||
        rrpc_kv_pool_reg(T.cctx, T.spages, PAGE, NPAGES, &T.spool) ||
        rrpc_kv_pool_reg(T.sctx, T.dpages, PAGE, NPAGES, &T.dpool))
        return -1;
    char luri[256];
    snprintf(luri, sizeof(luri), "%s://%s:0", T.scheme, T.server_addr);
    int r = rrpc_listen(T.sctx, luri, server_event, NULL, &T.lis);
    if (r) {
        fprintf(stderr, "listen %s: %s: %s\n", luri, rrpc_err_name(r),
                rrpc_ctx_last_error(T.sctx));
        return -1;
    }
    int port = rrpc_listener_port(T.lis);
    if (T.client_src)
        snprintf(T.uri, sizeof(T.uri), "%s://%s:%d?src=%s", T.scheme, T.server_addr, port,
                 T.client_src);
    else
        snprintf(T.uri, sizeof(T.uri), "%s://%s:%d", T.scheme, T.server_addr, port);
    if (rrpc_ctx_start_thread(T.sctx) || rrpc_ctx_start_thread(T.cctx))
        return -1;
    r = rrpc_connect_sync(T.cctx, T.uri, 10000, NULL, NULL, &T.conn);
    if (r) {
        fprintf(stderr, "connect %s: %s: %s\n", T.uri, rrpc_err_name(r),
                rrpc_ctx_last_error(T.cctx));
        return -1;
    }
    if (strcmp(rrpc_conn_transport(T.conn), T.transport) != 0)
        return -1;
    printf("# xfer: transport %s, server %s\n", T.transport, T.uri);
    return 0;
}

static int group_teardown(void **state)
{
    rrpc_conn_close(T.conn);
    close_server();
    rrpc_ctx_destroy(T.cctx);
    rrpc_ctx_destroy(T.sctx);
    free(T.dst_mem);
    free(T.spages);
    free(T.dpages);
    return 0;
}

/* Regions and pools are deregistered before their context goes: the
 * context would otherwise free them under us. */
static int regions_teardown(void **state)
{
    rrpc_kv_pool_dereg(T.spool);
    rrpc_kv_pool_dereg(T.dpool);
    rrpc_mem_dereg(T.dst_region);
    rrpc_mem_dereg(T.ro_region);
    return group_teardown(state);
}

static void reset_rx(enum alloc_mode mode, size_t off)
{
    lock();
    T.mode = mode;
    T.dst_off = off;
    T.dst_strided = false;
    T.allocs = T.dones = T.verified = 0;
    T.done_status = 1;
    T.done_addr = T.chosen_addr = NULL;
    unlock();
    memset(T.dst_mem, 0xee, T.dst_len);
}

/* ---- tensors --------------------------------------------------------------------- */

static void test_tensor_64mib_float32_lands_byte_for_byte_in_place(void **state)
{
    size_t n = 16u << 20; /* floats: 64 MiB */
    float *src = malloc(n * sizeof(float));
    assert_non_null(src);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)i * 0.5f - 3.0f;
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, src, n * sizeof(float), 0, &sr), 0);
    rrpc_tensor t;
    int64_t shape[2] = {4096, 4096};
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 2, shape, sr, 0), 0);
    assert_int_equal(rrpc_tensor_nbytes(&t), 64u << 20);
    reset_rx(ALLOC_EXACT, GUARD);
    T.expect = &t;
    rrpc_tensor_send_opts so = {.qos_class = RRPC_CLASS_BULK};
    int r = rrpc_tensor_send_with_sync(T.conn, "weights.0", &t, &so);
    if (r)
        fprintf(stderr, "send: %s: %s\n", rrpc_err_name(r), rrpc_ctx_last_error(T.cctx));
    assert_int_equal(r, 0);
    /* The receiver's callback ran before the sender completed, saw every
     * byte, and the destination is exactly where the receiver put it. */
    assert_int_equal(T.allocs, 1);
    assert_int_equal(T.dones, 1);
    assert_int_equal(T.done_status, 0);
    assert_true(T.verified);
    assert_ptr_equal(T.done_addr, T.dst_mem + GUARD);
    assert_ptr_equal(T.chosen_addr, T.dst_mem + GUARD);
    assert_memory_equal(T.dst_mem + GUARD, src, n * sizeof(float));
    assert_true(all_bytes(T.dst_mem, GUARD, 0xee));
    assert_true(all_bytes(T.dst_mem + GUARD + (64u << 20), GUARD, 0xee));
    T.expect = NULL;
    rrpc_mem_dereg(sr);
    free(src);
}

static long status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = atol(line + n + 1);
    if (f)
        fclose(f);
    return v;
}

static void test_tensor_transfer_uses_no_staging_buffer(void **state)
{
    /* Source and destination are resident before the transfer; the peak RSS
     * is reset, the 64 MiB tensor moves, and the peak may grow by transport
     * buffers (a few MiB) but not by a copy of the tensor (64 MiB).  On
     * verbs the data goes by RDMA WRITE straight from the source region to
     * the destination the receiver chose. */
    FILE *cr = fopen("/proc/self/clear_refs", "w");
    if (!cr || fputs("5", cr) < 0) {
        if (cr)
            fclose(cr);
        printf("# skipped: cannot reset the peak RSS (/proc/self/clear_refs)\n");
        skip();
    }
    fclose(cr);
    size_t n = 16u << 20, bytes = n * sizeof(float);
    float *src = malloc(bytes);
    assert_non_null(src);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)i;
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, src, bytes, 0, &sr), 0);
    rrpc_tensor t;
    int64_t shape[1] = {(int64_t)n};
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, shape, sr, 0), 0);
    reset_rx(ALLOC_EXACT, 0); /* touches the whole destination */
    /* a small warm-up transfer: connection buffers exist before measuring */
    rrpc_tensor small = t;
    small.shape[0] = 1024;
    T.expect = &small;
    rrpc_tensor_send_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "warm", &small, &bulk), 0);
    reset_rx(ALLOC_EXACT, 0);
    cr = fopen("/proc/self/clear_refs", "w");
    assert_non_null(cr);
    fputs("5", cr);
    fclose(cr);
    long base = status_kib("VmRSS");
    T.expect = &t;
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "no-staging", &t, &bulk), 0);
    long peak = status_kib("VmHWM");
    assert_true(T.verified);
    assert_ptr_equal(T.done_addr, T.dst_mem);
    printf("# %s: peak RSS grew by %ld KiB while a %zu MiB tensor moved\n", T.transport,
           peak - base, bytes >> 20);
    assert_true(base > 0 && peak > 0);
    assert_true(peak - base < 16 * 1024);
    T.expect = NULL;
    rrpc_mem_dereg(sr);
    free(src);
}

/* Sends @src and checks the receiver's copy element by element. */
static void send_and_check(const rrpc_tensor *src, size_t dst_off, const int64_t *dst_strides)
{
    reset_rx(ALLOC_EXACT, dst_off);
    if (dst_strides) {
        T.dst_strided = true;
        memcpy(T.dst_strides, dst_strides, sizeof(T.dst_strides));
    }
    T.expect = src;
    int r = rrpc_tensor_send_with_sync(T.conn, "t", src, NULL);
    if (r)
        fprintf(stderr, "send: %s: %s\n", rrpc_err_name(r), rrpc_ctx_last_error(T.cctx));
    assert_int_equal(r, 0);
    assert_int_equal(T.dones, 1);
    assert_int_equal(T.done_status, 0);
    assert_true(T.verified);
    assert_ptr_equal(T.done_addr, T.dst_mem + dst_off);
    T.expect = NULL;
}

static void test_tensor_dtypes_and_shapes_round_trip(void **state)
{
    size_t len = 1u << 20;
    uint8_t *buf = malloc(len);
    fill(buf, len, 7);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, len, 0, &sr), 0);
    static const struct {
        int dtype, ndim;
        int64_t shape[4];
    } cases[] = {
        {RRPC_DTYPE_U8, 1, {1000}},
        {RRPC_DTYPE_I8, 2, {3, 5}},
        {RRPC_DTYPE_U16, 3, {2, 3, 4}},
        {RRPC_DTYPE_I16, 1, {1}},
        {RRPC_DTYPE_U32, 2, {17, 1}},
        {RRPC_DTYPE_I32, 4, {2, 1, 3, 7}},
        {RRPC_DTYPE_U64, 2, {10, 10}},
        {RRPC_DTYPE_I64, 1, {33}},
        {RRPC_DTYPE_F16, 2, {64, 64}},
        {RRPC_DTYPE_BF16, 3, {4, 8, 16}},
        {RRPC_DTYPE_F32, 2, {100, 250}},
        {RRPC_DTYPE_F64, 0, {0}}, /* a scalar */
        {RRPC_DTYPE_F32, 2, {0, 5}}, /* empty */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rrpc_tensor t;
        assert_int_equal(rrpc_tensor_init(&t, cases[i].dtype, cases[i].ndim, cases[i].shape, sr,
                                          8 * i),
                         0);
        assert_int_equal(rrpc_tensor_validate(&t), 0);
        send_and_check(&t, GUARD + 8 * i, NULL);
    }
    rrpc_mem_dereg(sr);
    free(buf);
}

/* Non-contiguous layouts on either side: one WRITE per contiguous run. */
static void test_tensor_strided_layouts_are_copied_element_by_element(void **state)
{
    size_t len = 1u << 20;
    uint8_t *buf = malloc(len);
    fill(buf, len, 11);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, len, 0, &sr), 0);
    /* every other row of a 64 x 32 float32 matrix, into C order */
    rrpc_tensor t;
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 2, (int64_t[]){32, 32}, sr, 0), 0);
    t.strides[0] = 2 * 32 * 4;
    assert_int_equal(rrpc_tensor_validate(&t), 0);
    assert_false(rrpc_tensor_is_contiguous(&t));
    send_and_check(&t, GUARD, NULL);
    /* C order into a transposed (Fortran-order) destination */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_I16, 2, (int64_t[]){12, 9}, sr, 100), 0);
    send_and_check(&t, GUARD, (int64_t[8]){2, 2 * 12});
    /* negative strides (a flipped view), 3-D */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 3, (int64_t[]){4, 5, 6}, sr, 0), 0);
    t.offset = 4 * 5 * 6 - 1;
    t.strides[0] = -30;
    t.strides[1] = -6;
    t.strides[2] = -1;
    assert_int_equal(rrpc_tensor_validate(&t), 0);
    send_and_check(&t, GUARD, NULL);
    rrpc_mem_dereg(sr);
    free(buf);
}

static void test_tensor_write_count_follows_both_layouts_in_memory_order(void **state)
{
    (void)state;
    rrpc_tensor c, f, rows;
    assert_int_equal(rrpc_tensor_init(&c, RRPC_DTYPE_F16, 2, (int64_t[]){1024, 512}, NULL, 0), 0);
    f = c; /* the transpose of a C-contiguous 512 x 1024: contiguous in its own order */
    f.strides[0] = 2;
    f.strides[1] = 2 * 1024;
    rows = c; /* every other row */
    rows.strides[0] = 2 * 2 * 512;
    assert_int_equal(rrpc_tensor_write_count(&c, &c), 1);
    assert_int_equal(rrpc_tensor_write_count(&f, &f), 1);
    assert_int_equal(rrpc_tensor_write_count(&f, &c), 1024 * 512);
    assert_int_equal(rrpc_tensor_write_count(&c, &f), 1024 * 512);
    assert_int_equal(rrpc_tensor_write_count(&rows, &c), 1024);
    /* a 3-D permutation (2, 0, 1) of a C-contiguous 4 x 5 x 6 */
    rrpc_tensor p, pd;
    assert_int_equal(rrpc_tensor_init(&p, RRPC_DTYPE_U8, 3, (int64_t[]){6, 4, 5}, NULL, 0), 0);
    p.strides[0] = 1;
    p.strides[1] = 30;
    p.strides[2] = 6;
    pd = p;
    assert_int_equal(rrpc_tensor_write_count(&p, &pd), 1);
    assert_int_equal(rrpc_tensor_write_count(&p, &c), 0); /* shapes differ */
    c.shape[0] = 0;
    assert_int_equal(rrpc_tensor_write_count(&c, &c), 0);
}

static void test_tensor_offers_keep_the_c_layout_unless_the_server_asks_for_the_senders(
    void **state)
{
    (void)state;
    size_t len = 1u << 16;
    uint8_t *buf = malloc(len);
    fill(buf, len, 5);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, len, 0, &sr), 0);
    rrpc_tensor t; /* a transposed 12 x 9 int16: contiguous in Fortran order */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_I16, 2, (int64_t[]){12, 9}, sr, 0), 0);
    t.strides[0] = 2;
    t.strides[1] = 2 * 12;
    send_and_check(&t, GUARD, NULL);
    assert_int_equal(T.in_strides[0], 2 * 9); /* C order, as an alloc callback expects */
    assert_int_equal(T.in_strides[1], 2);
    /* unknown flag bits are refused */
    rrpc_tensor_server_opts o = {.flags = 2};
    rrpc_tensor_server *srv;
    assert_int_equal(rrpc_tensor_serve_with(T.sctx, on_alloc, on_done, NULL, &o, &srv), -EINVAL);
    rrpc_mem_dereg(sr);
    free(buf);
}

static void test_tensor_bad_descriptors_fail_at_once_and_send_nothing(void **state)
{
    uint8_t buf[4096];
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, sizeof(buf), 0, &sr), 0);
    rrpc_tensor t;
    reset_rx(ALLOC_EXACT, GUARD);
    /* unknown dtype */
    assert_int_equal(rrpc_tensor_init(&t, 99, 1, (int64_t[]){4}, sr, 0), -EINVAL);
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 1, (int64_t[]){4}, sr, 0), 0);
    t.dtype = 0;
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), -EINVAL);
    /* negative dimension, too many dimensions */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 1, (int64_t[]){4}, sr, 0), 0);
    t.shape[0] = -4;
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), -EINVAL);
    t.shape[0] = 4;
    t.ndim = 9;
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), -EINVAL);
    /* strides that make elements overlap, or a zero stride */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 2, (int64_t[]){4, 4}, sr, 0), 0);
    t.strides[0] = 8;
    assert_int_equal(rrpc_tensor_validate(&t), -EINVAL);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), -EINVAL);
    t.strides[0] = 0;
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), -EINVAL);
    /* a buffer outside its region: past the end, before the start */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, (int64_t[]){1024}, sr, 4), 0);
    assert_int_equal(rrpc_tensor_validate(&t), RRPC_E_REGION);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), RRPC_E_REGION);
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, (int64_t[]){4}, sr, 0), 0);
    t.strides[0] = -4;
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), RRPC_E_REGION);
    /* unregistered memory */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, (int64_t[]){4}, NULL, 0), 0);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), RRPC_E_REGION);
    /* memory of the other context */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, (int64_t[]){4}, T.dst_region, 0), 0);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), RRPC_E_REGION);
    /* bad name, bad class */
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 1, (int64_t[]){4}, sr, 0), 0);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "", &t, NULL), -EINVAL);
    rrpc_tensor_send_opts bad_class = {.qos_class = 9};
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, &bad_class), RRPC_E_BAD_CLASS);
    /* options a newer header would have: unknown flag bits, a reserved word */
    rrpc_tensor_send_opts bad_flags = {.flags = 1};
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, &bad_flags), -EINVAL);
    rrpc_tensor_send_opts bad_reserved = {.reserved = {0, 0, 0, 1}};
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, &bad_reserved), -EINVAL);
    /* none of it reached the receiver */
    assert_int_equal(T.allocs, 0);
    assert_true(all_bytes(T.dst_mem, T.dst_len, 0xee));
    rrpc_mem_dereg(sr);
}

/* The offer, the done RPC and the WRITEs go on the class of the options;
 * a zeroed struct (or NULL) means bulk. */
static void test_tensor_send_goes_on_the_class_of_its_options_and_bulk_by_default(void **state)
{
    uint8_t buf[1024];
    fill(buf, sizeof(buf), 11);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, sizeof(buf), 0, &sr), 0);
    rrpc_tensor t;
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 1, (int64_t[]){1024}, sr, 0), 0);
    static const struct {
        int asked, used;
    } cases[] = {
        {RRPC_CLASS_LOW_LATENCY, RRPC_CLASS_LOW_LATENCY},
        {RRPC_CLASS_BACKGROUND, RRPC_CLASS_BACKGROUND},
        {RRPC_CLASS_DEFAULT, RRPC_CLASS_BULK},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rrpc_stats before, after;
        assert_int_equal(rrpc_ctx_stats(T.cctx, &before), 0);
        reset_rx(ALLOC_EXACT, 0);
        T.expect = &t;
        rrpc_tensor_send_opts so = {.qos_class = cases[i].asked};
        assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, &so), 0);
        assert_true(T.verified);
        assert_int_equal(rrpc_ctx_stats(T.cctx, &after), 0);
        for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++) {
            uint64_t calls = after.cls[c].calls - before.cls[c].calls;
            uint64_t ops = after.cls[c].onesided_ops - before.cls[c].onesided_ops;
            assert_int_equal(calls, c == cases[i].used ? 2 : 0); /* offer and done */
            assert_int_equal(ops, c == cases[i].used ? 1 : 0);
        }
    }
    T.expect = NULL;
    rrpc_mem_dereg(sr);
}

/* The names deprecated in 0.2 stay exported for one release and do what
 * the new ones do. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static int old_send_done_count, old_send_status;

static void on_old_send(int status, void *user)
{
    (void)user;
    lock();
    old_send_status = status;
    old_send_done_count++;
    unlock();
}

static void test_tensor_deprecated_names_still_send_and_serve(void **state)
{
    uint8_t buf[512];
    fill(buf, sizeof(buf), 13);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, sizeof(buf), 0, &sr), 0);
    rrpc_tensor t;
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 1, (int64_t[]){512}, sr, 0), 0);
    /* rrpc_tensor_serve_ex: the server of rrpc_tensor_serve_with */
    close_server();
    rrpc_tensor_server *srv;
    rrpc_tensor_server_opts o = {.flags = 2};
    assert_int_equal(rrpc_tensor_serve_ex(T.sctx, on_alloc, on_done, NULL, &o, &srv), -EINVAL);
    assert_int_equal(rrpc_tensor_serve_ex(T.sctx, on_alloc, on_done, NULL, NULL, &srv), 0);
    lock();
    T.srv = srv;
    unlock();
    /* rrpc_tensor_send_sync, on the class given as an int */
    rrpc_stats before, after;
    assert_int_equal(rrpc_ctx_stats(T.cctx, &before), 0);
    reset_rx(ALLOC_EXACT, 0);
    T.expect = &t;
    assert_int_equal(rrpc_tensor_send_sync(T.conn, "old-sync", &t, RRPC_CLASS_BACKGROUND), 0);
    assert_true(T.verified);
    assert_int_equal(rrpc_ctx_stats(T.cctx, &after), 0);
    assert_int_equal(after.cls[RRPC_CLASS_BACKGROUND].calls - before.cls[RRPC_CLASS_BACKGROUND].calls,
                     2);
    assert_int_equal(rrpc_tensor_send_sync(T.conn, "t", &t, 9), RRPC_E_BAD_CLASS);
    /* rrpc_tensor_send, with its callback */
    reset_rx(ALLOC_EXACT, 0);
    T.expect = &t;
    lock();
    old_send_done_count = 0;
    old_send_status = -1;
    unlock();
    assert_int_equal(rrpc_tensor_send(T.conn, "old", &t, RRPC_CLASS_DEFAULT, on_old_send, NULL), 0);
    assert_int_equal(wait_for(&old_send_done_count, 1, 10000), 1);
    assert_int_equal(old_send_status, 0);
    assert_true(T.verified);
    T.expect = NULL;
    rrpc_mem_dereg(sr);
}
#pragma GCC diagnostic pop

/* The receiver chose a destination that does not fit: an error, and nothing
 * written; the receiver gets its destination back through the done callback. */
static void test_tensor_unusable_destinations_are_refused_and_left_untouched(void **state)
{
    uint8_t buf[4096];
    fill(buf, sizeof(buf), 3);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, sizeof(buf), 0, &sr), 0);
    rrpc_tensor t;
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_F32, 2, (int64_t[]){8, 16}, sr, 0), 0);
    static const struct {
        enum alloc_mode mode;
        int code;
        int dones; /* the alloc accepted, then the check refused: done runs */
    } cases[] = {
        {ALLOC_WRONG_DTYPE, -EDOM, 1}, {ALLOC_WRONG_SHAPE, -EDOM, 1},
        {ALLOC_OUTSIDE, RRPC_E_REGION, 1}, {ALLOC_READ_ONLY, RRPC_E_ACCESS, 1},
        {ALLOC_REFUSE, 42, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        reset_rx(cases[i].mode, GUARD);
        rrpc_tensor_send_opts so = {.qos_class = RRPC_CLASS_LOW_LATENCY};
        int r = rrpc_tensor_send_with_sync(T.conn, "t", &t, &so);
        assert_int_equal(r, cases[i].code);
        assert_true(strlen(rrpc_ctx_last_error(T.cctx)) > 0);
        assert_int_equal(T.allocs, 1);
        assert_int_equal(T.dones, cases[i].dones);
        if (cases[i].dones)
            assert_int_equal(T.done_status, cases[i].code);
        assert_true(all_bytes(T.dst_mem, T.dst_len, 0xee));
    }
    /* a destination strided so that its elements overlap */
    reset_rx(ALLOC_EXACT, GUARD);
    T.dst_strided = true;
    memcpy(T.dst_strides, (int64_t[8]){4, 4}, sizeof(T.dst_strides));
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), -EINVAL);
    assert_int_equal(T.dones, 1);
    assert_true(all_bytes(T.dst_mem, T.dst_len, 0xee));
    rrpc_mem_dereg(sr);
}

static void test_tensor_to_a_peer_that_does_not_serve_fails_with_no_method(void **state)
{
    uint8_t buf[64];
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, buf, sizeof(buf), 0, &sr), 0);
    rrpc_tensor t;
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 1, (int64_t[]){64}, sr, 0), 0);
    close_server();
    reset_rx(ALLOC_EXACT, GUARD);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "t", &t, NULL), RRPC_E_NO_METHOD);
    assert_int_equal(T.allocs, 0);
    rrpc_tensor_server *srv, *dup;
    assert_int_equal(rrpc_tensor_serve(T.sctx, on_alloc, on_done, NULL, &srv), 0);
    lock();
    T.srv = srv;
    unlock();
    assert_int_equal(rrpc_tensor_serve(T.sctx, on_alloc, on_done, NULL, &dup), -EEXIST);
    rrpc_mem_dereg(sr);
}

/* ---- the receiver's budget for offered tensors --------------------------------------- */

/* Offers a tensor as a hostile peer can: the offer RPC alone, no data, no
 * source memory.  Returns the receiver's in-band status; *@ret_id gets the
 * reception id (0 when refused), @msg its message. */
static void put_le64s(uint8_t *out, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            out[8 * i + b] = (uint8_t)((uint64_t)v[i] >> (8 * b)); /* little-endian */
}

/* As raw_offer, with the sender's strides @order as the fifth element (the
 * offer of a source that is not C-contiguous), when not NULL. */
static int raw_offer_ordered(const char *name, int dtype, int ndim, const int64_t *shape,
                             const int64_t *order, uint64_t *ret_id, char *msg, size_t msglen)
{
    uint8_t sh[RRPC_TENSOR_MAX_DIMS * 8], st8[RRPC_TENSOR_MAX_DIMS * 8];
    put_le64s(sh, shape, ndim);
    void *req, *out = NULL;
    size_t len, olen = 0;
    if (order) {
        put_le64s(st8, order, ndim);
        assert_int_equal(rrpc_pack(&req, &len, "usuyy", (uint64_t)1, name, (uint64_t)dtype,
                                   (const void *)sh, (size_t)ndim * 8, (const void *)st8,
                                   (size_t)ndim * 8),
                         0);
    } else {
        assert_int_equal(rrpc_pack(&req, &len, "usuy", (uint64_t)1, name, (uint64_t)dtype,
                                   (const void *)sh, (size_t)ndim * 8),
                         0);
    }
    int r = rrpc_call_sync(T.conn, "rrpc.tensor.offer", req, len, NULL, &out, &olen);
    free(req);
    assert_int_equal(r, 0);
    int64_t st;
    const char *m;
    size_t mlen, tlen, slen;
    uint64_t id, off;
    const void *tok, *str;
    assert_int_equal(rrpc_unpack(out, olen, NULL, 0, "isuyuy", &st, &m, &mlen, &id, &tok, &tlen,
                                 &off, &str, &slen),
                     0);
    snprintf(msg, msglen, "%.*s", (int)mlen, m);
    *ret_id = id;
    free(out);
    return (int)st;
}

static int raw_offer(const char *name, int dtype, int ndim, const int64_t *shape,
                     uint64_t *ret_id, char *msg, size_t msglen)
{
    return raw_offer_ordered(name, dtype, ndim, shape, NULL, ret_id, msg, msglen);
}

/* Tells the receiver reception @id ended with @status, as the sender would. */
static void raw_done(uint64_t id, int64_t status)
{
    void *req, *out = NULL;
    size_t len, olen = 0;
    assert_int_equal(rrpc_pack(&req, &len, "ui", id, status), 0);
    assert_int_equal(rrpc_call_sync(T.conn, "rrpc.tensor.done", req, len, NULL, &out, &olen), 0);
    free(req);
    free(out);
}

/* Replaces the tensor server by one made with @o. */
static void serve_with(const rrpc_tensor_server_opts *o)
{
    close_server();
    rrpc_tensor_server *srv;
    assert_int_equal(rrpc_tensor_serve_with(T.sctx, on_alloc, on_done, NULL, o, &srv), 0);
    lock();
    T.srv = srv;
    unlock();
}

/* Replaces the tensor server by one with the budget @max_bytes (0: default). */
static void reserve(uint64_t max_bytes)
{
    rrpc_tensor_server_opts o = {.max_bytes = max_bytes};
    serve_with(&o);
}

static void test_tensor_offers_beyond_the_budget_are_refused_before_any_allocation(void **state)
{
    /* The attack of issue 13: four offers of 4 GiB to a receiver that
     * allocates what it is offered.  The default budget (1 GiB) refuses them
     * before the alloc callback runs, so the address space does not grow. */
    reset_rx(ALLOC_FRESH, 0);
    long vm0 = status_kib("VmSize");
    for (int i = 0; i < 4; i++) {
        char msg[512];
        uint64_t id;
        int st = raw_offer("huge", RRPC_DTYPE_U8, 1, (int64_t[]){(int64_t)4 << 30}, &id, msg,
                           sizeof(msg));
        printf("# offer %d of 4 GiB: %s: %s\n", i, rrpc_err_name(st), msg);
        assert_int_equal(st, -ENOBUFS);
        assert_int_equal(id, 0);
        assert_non_null(strstr(msg, "the offer of 4294967296 bytes exceeds the receiver's tensor "
                                    "budget of 1073741824 bytes"));
        assert_non_null(strstr(msg, "max_bytes"));
    }
    long vm1 = status_kib("VmSize");
    printf("# VmSize grew by %ld KiB after 16 GiB of offers\n", vm1 - vm0);
    assert_true(vm0 > 0 && vm1 > 0);
    assert_true(vm1 - vm0 < 256 * 1024);
    assert_int_equal(T.allocs, 0);
    assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), 0);
    /* a multi-dimensional offer is counted in bytes, dtype included */
    char msg[512];
    uint64_t id;
    assert_int_equal(raw_offer("wide", RRPC_DTYPE_F64, 2, (int64_t[]){1 << 15, 1 << 15}, &id,
                               msg, sizeof(msg)),
                     -ENOBUFS);
    assert_non_null(strstr(msg, "the offer of 8589934592 bytes"));
    assert_int_equal(T.allocs, 0);
}

/*
 * Issue 28, point 8: an offer of zero elements takes no bytes of the budget,
 * so 100,000 of them used to queue at the receiver (+48 MB) while
 * bytes_held stayed 0.  Offers are counted too: one connection gets a
 * quarter of RRPC_TENSOR_MAX_PENDING (4096), the rest is refused with a
 * reason, and "done" gives the places back.
 */
static void test_tensor_offers_are_counted_so_empty_ones_cannot_pile_up(void **state)
{
    enum { N = 3000, SHARE = 4096 / 4 };
    reserve(0);
    reset_rx(ALLOC_EXACT, 0);
    uint64_t *ids = calloc(N, sizeof(*ids));
    assert_non_null(ids);
    int accepted = 0, refused = 0;
    char msg[512], first[512] = "";
    for (int i = 0; i < N; i++) {
        uint64_t id = 0;
        int st = raw_offer("empty", RRPC_DTYPE_U8, 1, (int64_t[]){0}, &id, msg, sizeof(msg));
        if (st == 0) {
            ids[accepted++] = id;
            continue;
        }
        assert_int_equal(st, -ENOBUFS);
        if (!refused++)
            snprintf(first, sizeof(first), "%s", msg);
    }
    printf("# %d empty offers: %d accepted, %d refused: %s\n", N, accepted, refused, first);
    assert_int_equal(accepted, SHARE);
    assert_int_equal(refused, N - SHARE);
    assert_non_null(strstr(first, "RRPC_TENSOR_MAX_PENDING=4096"));
    assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), 0);
    char *text = malloc(1 << 20);
    size_t tl;
    assert_non_null(text);
    assert_int_equal(rrpc_ctx_stats_text(T.sctx, text, 1 << 20, &tl), 0);
    assert_non_null(strstr(text, "\nrrpc_tensor_offers_pending 1024\n"));
    assert_non_null(strstr(text, "\nrrpc_tensor_offers_refused_total 1976\n"));
    for (int i = 0; i < accepted; i++)
        raw_done(ids[i], 0);
    assert_int_equal(rrpc_ctx_stats_text(T.sctx, text, 1 << 20, &tl), 0);
    assert_non_null(strstr(text, "\nrrpc_tensor_offers_pending 0\n"));
    free(text);
    uint64_t id;
    assert_int_equal(raw_offer("empty", RRPC_DTYPE_U8, 1, (int64_t[]){0}, &id, msg, sizeof(msg)),
                     0);
    raw_done(id, 0);
    free(ids);
}

static void test_tensor_budget_holds_offers_still_arriving_and_frees_them_when_done(
    void **state)
{
    const uint64_t budget = 1u << 20, part = 768u << 10;
    reserve(budget);
    reset_rx(ALLOC_FRESH, 0);
    char msg[512];
    uint64_t a, b;
    /* an offer within the budget is accepted and holds its bytes... */
    assert_int_equal(raw_offer("a", RRPC_DTYPE_U8, 1, (int64_t[]){(int64_t)part}, &a, msg,
                               sizeof(msg)),
                     0);
    assert_true(a != 0);
    assert_int_equal(T.allocs, 1);
    assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), part);
    /* ...so the next one that does not fit in what is left is refused */
    assert_int_equal(raw_offer("b", RRPC_DTYPE_U8, 1, (int64_t[]){512 << 10}, &b, msg,
                               sizeof(msg)),
                     -ENOBUFS);
    printf("# %s\n", msg);
    assert_non_null(strstr(msg, "the offer of 524288 bytes exceeds the 262144 bytes left"));
    assert_non_null(strstr(msg, "786432 of 1048576 bytes are held"));
    assert_non_null(strstr(msg, "max_bytes"));
    assert_int_equal(T.allocs, 1);
    /* a failed reception returns its bytes: the sender says the WRITEs failed */
    raw_done(a, -EIO);
    assert_int_equal(T.dones, 1);
    assert_int_equal(T.done_status, -EIO);
    assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), 0);
    /* and so does one ended by the connection going down */
    assert_int_equal(raw_offer("c", RRPC_DTYPE_U8, 1, (int64_t[]){(int64_t)part}, &b, msg,
                               sizeof(msg)),
                     0);
    assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), part);
    rrpc_tensor_server_drop_conn(T.srv, T.rx_conn);
    assert_int_equal(T.done_status, RRPC_E_CONN_LOST);
    assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), 0);
    /* real tensors within the budget land, one after another: a finished
     * reception returns its bytes too */
    uint8_t *src = malloc(part);
    assert_non_null(src);
    fill(src, part, 11);
    rrpc_region *sr;
    assert_int_equal(rrpc_mem_reg(T.cctx, src, part, 0, &sr), 0);
    rrpc_tensor t;
    assert_int_equal(rrpc_tensor_init(&t, RRPC_DTYPE_U8, 1, (int64_t[]){(int64_t)part}, sr, 0),
                     0);
    for (int i = 0; i < 3; i++) {
        reset_rx(ALLOC_FRESH, 0);
        T.expect = &t;
        assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "fits", &t, NULL), 0);
        assert_true(T.verified);
        assert_int_equal(rrpc_tensor_server_bytes_held(T.srv), 0);
    }
    T.expect = NULL;
    /* a real sender beyond the budget gets the code and the receiver's words */
    rrpc_tensor big = t;
    big.shape[0] = 2 * (int64_t)part;
    uint8_t *src2 = malloc(2 * part);
    assert_non_null(src2);
    rrpc_region *sr2;
    assert_int_equal(rrpc_mem_reg(T.cctx, src2, 2 * part, 0, &sr2), 0);
    big.region = sr2;
    reset_rx(ALLOC_FRESH, 0);
    assert_int_equal(rrpc_tensor_send_with_sync(T.conn, "too-big", &big, NULL), -ENOBUFS);
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx), "tensor \"too-big\""));
    assert_non_null(strstr(rrpc_ctx_last_error(T.cctx),
                           "the offer of 1572864 bytes exceeds the receiver's tensor budget "
                           "of 1048576 bytes"));
    assert_int_equal(T.allocs, 0);
    rrpc_mem_dereg(sr2);
    free(src2);
    rrpc_mem_dereg(sr);
    free(src);
    reserve(0); /* back to the default for the tests that follow */
}

/* A server that takes the sender's memory order gets dense strides in that
 * order, whatever strides the offer carries: the wire's are only sorted,
 * never used as a layout, so hostile ones (INT64_MIN, 0, overlapping) give
 * a valid dense destination or nothing. */
static void test_tensor_sender_order_offers_give_dense_strides_whatever_the_wire_says(void **state)
{
    (void)state;
    rrpc_tensor_server_opts o = {.flags = RRPC_TENSOR_SERVE_SENDER_ORDER};
    serve_with(&o);
    static const struct {
        int64_t order[3];
        int64_t want[3];
    } cases[] = {
        {{4, 24, 96}, {4, 24, 96}},            /* Fortran order of 6 x 4 x 5 float32 */
        {{80, 20, 4}, {80, 20, 4}},            /* C order */
        {{80, 4, 20}, {80, 4, 16}},            /* dimensions 1 and 2 swapped in memory */
        {{INT64_MIN, 0, INT64_MAX}, {80, 4, 16}}, /* |INT64_MIN| largest, 0 innermost */
        {{7, 7, 7}, {80, 20, 4}},              /* ties keep the index order */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        reset_rx(ALLOC_EXACT, 0);
        char msg[256];
        uint64_t id;
        int st = raw_offer_ordered("t", RRPC_DTYPE_F32, 3, (int64_t[]){6, 4, 5}, cases[k].order,
                                   &id, msg, sizeof(msg));
        assert_int_equal(st, 0);
        lock();
        int64_t got[3] = {T.in_strides[0], T.in_strides[1], T.in_strides[2]};
        unlock();
        if (memcmp(got, cases[k].want, sizeof(got)) != 0)
            fail_msg("case %zu: incoming strides %lld %lld %lld, want %lld %lld %lld", k,
                     (long long)got[0], (long long)got[1], (long long)got[2],
                     (long long)cases[k].want[0], (long long)cases[k].want[1],
                     (long long)cases[k].want[2]);
        raw_done(id, RRPC_E_CLOSED); /* release the destination */
    }
    /* a fifth element of the wrong length is refused */
    char msg[256];
    uint64_t id;
    reset_rx(ALLOC_EXACT, 0);
    void *req, *out = NULL;
    size_t len, olen = 0;
    uint8_t sh[8] = {4}, bad[3] = {1, 2, 3};
    assert_int_equal(rrpc_pack(&req, &len, "usuyy", (uint64_t)1, "t", (uint64_t)RRPC_DTYPE_U8,
                               (const void *)sh, (size_t)8, (const void *)bad, (size_t)3),
                     0);
    assert_int_equal(rrpc_call_sync(T.conn, "rrpc.tensor.offer", req, len, NULL, &out, &olen), 0);
    int64_t st;
    const char *m;
    size_t mlen, tlen, slen;
    uint64_t off;
    const void *tok, *str;
    assert_int_equal(rrpc_unpack(out, olen, NULL, 0, "isuyuy", &st, &m, &mlen, &id, &tok, &tlen,
                                 &off, &str, &slen),
                     0);
    assert_int_equal(st, -EINVAL);
    (void)msg;
    free(req);
    free(out);
    reserve(0); /* the fixture's server again */
}

static void test_dtype_names_round_trip(void **state)
{
    for (int d = RRPC_DTYPE_U8; d <= RRPC_DTYPE_F64; d++) {
        assert_non_null(rrpc_dtype_name(d));
        assert_int_equal(rrpc_dtype_from_name(rrpc_dtype_name(d)), d);
        assert_true(rrpc_dtype_size(d) >= 1);
    }
    assert_int_equal(rrpc_dtype_size(RRPC_DTYPE_BF16), 2);
    assert_int_equal(rrpc_dtype_size(0), 0);
    assert_null(rrpc_dtype_name(13));
    assert_int_equal(rrpc_dtype_from_name("float128"), -EINVAL);
}

/* ---- KV pages -------------------------------------------------------------------- */

static rrpc_kv_token kv_token(void)
{
    void *out = NULL;
    size_t len = 0;
    assert_int_equal(rrpc_call_sync(T.conn, "kvtoken", NULL, 0, NULL, &out, &len), 0);
    rrpc_kv_token t;
    assert_int_equal(rrpc_kv_token_decode(out, len, &t), 0);
    assert_int_equal(t.page_size, PAGE);
    assert_int_equal(t.page_count, NPAGES);
    free(out);
    return t;
}

static void kv_reset(uint32_t seed)
{
    fill(T.spages, PAGE * NPAGES, seed);
    memset(T.dpages, 0xee, PAGE * NPAGES);
}

/* Every destination page named holds its source page; every other is untouched. */
static void kv_check(const rrpc_kv_pair *pairs, size_t n)
{
    bool hit[NPAGES] = {false};
    for (size_t i = 0; i < n; i++) {
        assert_memory_equal(T.dpages + pairs[i].dst * PAGE, T.spages + pairs[i].src * PAGE,
                            PAGE);
        hit[pairs[i].dst] = true;
    }
    for (size_t p = 0; p < NPAGES; p++)
        if (!hit[p])
            assert_true(all_bytes(T.dpages + p * PAGE, PAGE, 0xee));
}

static void test_kv_random_pairs_land_byte_for_byte(void **state)
{
    rrpc_kv_token tok = kv_token();
    uint32_t seed = 12345;
    for (int round = 0; round < 20; round++) {
        kv_reset((uint32_t)round + 1);
        uint64_t perm[NPAGES];
        for (size_t i = 0; i < NPAGES; i++)
            perm[i] = i;
        for (size_t i = NPAGES - 1; i > 0; i--) {
            seed = seed * 1103515245u + 12345u;
            size_t j = (seed >> 8) % (i + 1);
            uint64_t x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
        seed = seed * 1103515245u + 12345u;
        size_t n = 1 + (seed >> 8) % NPAGES;
        rrpc_kv_pair pairs[NPAGES];
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            pairs[i] = (rrpc_kv_pair){.src = (seed >> 8) % NPAGES, .dst = perm[i]};
        }
        size_t writes = 0;
        assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, pairs, n, NULL, &writes),
                         0);
        assert_true(writes >= 1 && writes <= n);
        kv_check(pairs, n);
    }
}

static void test_kv_contiguous_runs_coalesce_into_one_write_each(void **state)
{
    rrpc_kv_token tok = kv_token();
    kv_reset(99);
    rrpc_kv_pair pairs[] = {{0, 10}, {1, 11}, {2, 12}, {7, 3}};
    size_t writes = 0;
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, pairs, 4, NULL, &writes), 0);
    assert_int_equal(writes, 2);
    kv_check(pairs, 4);
    /* given out of order: sorted by destination before coalescing */
    kv_reset(98);
    rrpc_kv_pair shuffled[] = {{22, 42}, {20, 40}, {5, 0}, {21, 41}, {6, 1}, {9, 2}};
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, shuffled, 6, NULL, &writes), 0);
    assert_int_equal(writes, 3); /* 5,6->0,1  9->2  20..22->40..42 */
    kv_check(shuffled, 6);
    /* the whole pool in one WRITE */
    kv_reset(97);
    rrpc_kv_pair all[NPAGES];
    for (size_t i = 0; i < NPAGES; i++)
        all[i] = (rrpc_kv_pair){i, i};
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, all, NPAGES, NULL, &writes), 0);
    assert_int_equal(writes, 1);
    kv_check(all, NPAGES);
}

struct kv_async {
    int calls, status;
};

static void kv_cb(int status, void *user)
{
    struct kv_async *a = user;
    lock();
    a->status = status;
    a->calls++;
    unlock();
}

static void test_kv_batch_notifies_the_target_once_with_its_imm(void **state)
{
    rrpc_kv_token tok = kv_token();
    kv_reset(5);
    lock();
    int before = T.notifies;
    unlock();
    rrpc_kv_pair pairs[] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}};
    rrpc_op_opts o = {.qos_class = RRPC_CLASS_BULK, .notify = 1, .imm = 0xC0FFEE};
    struct kv_async a = {0};
    size_t writes = 0;
    assert_int_equal(rrpc_kv_transfer(T.conn, T.spool, &tok, pairs, 7, &o, kv_cb, &a, &writes), 0);
    assert_int_equal(writes, 7);
    assert_int_equal(wait_for(&a.calls, 1, 10000), 1);
    assert_int_equal(a.status, 0);
    assert_int_equal(wait_for(&T.notifies, before + 1, 10000), before + 1);
    kv_check(pairs, 7);
    /* exactly one notification for the batch: a later batch without notify
     * adds none */
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, pairs, 7, NULL, NULL), 0);
    assert_int_equal(wait_for(&T.notifies, before + 2, 300), before + 1);
    lock();
    assert_int_equal(T.last_imm, 0xC0FFEE);
    unlock();
    assert_int_equal(a.calls, 1);
}

static void test_kv_bad_input_is_refused_and_nothing_is_written(void **state)
{
    rrpc_kv_token tok = kv_token();
    kv_reset(8);
    size_t writes = 77;
    /* a page index out of range, on either side */
    rrpc_kv_pair src_out[] = {{0, 1}, {NPAGES, 2}};
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, src_out, 2, NULL, &writes),
                     -ERANGE);
    rrpc_kv_pair dst_out[] = {{0, 1}, {1, NPAGES + 5}};
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, dst_out, 2, NULL, &writes),
                     -ERANGE);
    /* the same destination page twice in one batch */
    rrpc_kv_pair dup[] = {{0, 4}, {1, 5}, {2, 4}};
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, dup, 3, NULL, &writes),
                     -EEXIST);
    /* page sizes differ */
    rrpc_kv_pair ok[] = {{0, 1}};
    rrpc_kv_token other = tok;
    other.page_size = PAGE / 2;
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &other, ok, 1, NULL, &writes),
                     -EDOM);
    /* a destination that does not allow writes, or is smaller than it says */
    other = tok;
    other.region.access = RRPC_ACCESS_REMOTE_READ;
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &other, ok, 1, NULL, &writes),
                     RRPC_E_ACCESS);
    other = tok;
    other.page_count = NPAGES * 2;
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &other, ok, 1, NULL, &writes),
                     RRPC_E_ACCESS);
    /* empty batch, bad class */
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, ok, 0, NULL, &writes), -EINVAL);
    rrpc_op_opts bad = {.qos_class = 17};
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.spool, &tok, ok, 1, &bad, &writes),
                     RRPC_E_BAD_CLASS);
    /* a source pool of another context (registered memory, but not the
     * connection's) */
    assert_int_equal(rrpc_kv_transfer_sync(T.conn, T.dpool, &tok, ok, 1, NULL, &writes),
                     RRPC_E_REGION);
    assert_int_equal(writes, 77);
    assert_true(all_bytes(T.dpages, PAGE * NPAGES, 0xee));
    /* malformed tokens */
    uint8_t enc[RRPC_KV_TOKEN_SIZE];
    rrpc_kv_token dec;
    rrpc_kv_token_encode(&tok, enc);
    assert_int_equal(rrpc_kv_token_decode(enc, sizeof(enc) - 1, &dec), -EINVAL);
    other = tok;
    other.page_count = tok.region.len / PAGE + 1;
    rrpc_kv_token_encode(&other, enc);
    assert_int_equal(rrpc_kv_token_decode(enc, sizeof(enc), &dec), -EINVAL);
    /* bad pools */
    rrpc_kv_pool *p;
    assert_int_equal(rrpc_kv_pool_reg(T.cctx, T.spages, 0, 4, &p), -EINVAL);
    assert_int_equal(rrpc_kv_pool_reg(T.cctx, T.spages, SIZE_MAX / 2, 4, &p), -EINVAL);
    assert_null(rrpc_kv_pool_page(T.spool, NPAGES));
    assert_ptr_equal(rrpc_kv_pool_page(T.spool, 3), T.spages + 3 * PAGE);
}

/* Last: on verbs a forged key is a remote access error, which ends the
 * queue pair (RRPC_E_CONN_LOST is then the honest answer). */
static void test_kv_into_unregistered_memory_fails_and_writes_nothing(void **state)
{
    rrpc_kv_token tok = kv_token();
    kv_reset(9);
    tok.region.key ^= 0x5a5a5a5a5a5a5a5aull;
    rrpc_kv_pair pairs[] = {{0, 0}, {1, 1}, {5, 9}};
    int r = rrpc_kv_transfer_sync(T.conn, T.spool, &tok, pairs, 3, NULL, NULL);
    if (strcmp(T.transport, "verbs") == 0)
        assert_true(r == RRPC_E_ACCESS || r == RRPC_E_CONN_LOST);
    else
        assert_int_equal(r, RRPC_E_ACCESS);
    assert_true(all_bytes(T.dpages, PAGE * NPAGES, 0xee));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_names_round_trip),
        cmocka_unit_test(test_tensor_64mib_float32_lands_byte_for_byte_in_place),
        cmocka_unit_test(test_tensor_transfer_uses_no_staging_buffer),
        cmocka_unit_test(test_tensor_dtypes_and_shapes_round_trip),
        cmocka_unit_test(test_tensor_strided_layouts_are_copied_element_by_element),
        cmocka_unit_test(test_tensor_write_count_follows_both_layouts_in_memory_order),
        cmocka_unit_test(
            test_tensor_offers_keep_the_c_layout_unless_the_server_asks_for_the_senders),
        cmocka_unit_test(test_tensor_bad_descriptors_fail_at_once_and_send_nothing),
        cmocka_unit_test(test_tensor_send_goes_on_the_class_of_its_options_and_bulk_by_default),
        cmocka_unit_test(test_tensor_deprecated_names_still_send_and_serve),
        cmocka_unit_test(test_tensor_unusable_destinations_are_refused_and_left_untouched),
        cmocka_unit_test(test_tensor_to_a_peer_that_does_not_serve_fails_with_no_method),
        cmocka_unit_test(test_tensor_offers_beyond_the_budget_are_refused_before_any_allocation),
        cmocka_unit_test(test_tensor_budget_holds_offers_still_arriving_and_frees_them_when_done),
        cmocka_unit_test(test_tensor_offers_are_counted_so_empty_ones_cannot_pile_up),
        cmocka_unit_test(
            test_tensor_sender_order_offers_give_dense_strides_whatever_the_wire_says),
        cmocka_unit_test(test_kv_random_pairs_land_byte_for_byte),
        cmocka_unit_test(test_kv_contiguous_runs_coalesce_into_one_write_each),
        cmocka_unit_test(test_kv_batch_notifies_the_target_once_with_its_imm),
        cmocka_unit_test(test_kv_bad_input_is_refused_and_nothing_is_written),
        cmocka_unit_test(test_kv_into_unregistered_memory_fails_and_writes_nothing),
    };
    const char *name = getenv("RRPC_TEST_TRANSPORT") ? getenv("RRPC_TEST_TRANSPORT") : "tcp";
    char suite[64];
    snprintf(suite, sizeof(suite), "xfer_%s", name);
    return cmocka_run_group_tests_name(suite, tests, group_setup, regions_teardown);
}

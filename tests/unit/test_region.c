/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of registered regions (libroce_rpc/core/region.c, onesided.c):
 * the pure bounds check rrpci_range_inside, the token wire form,
 * rrpc_mem_reg's argument checks, generations unique across threads and
 * contexts, and the initiator's checks of rrpc_write / rrpc_read over a
 * loopback tcp connection (refused at once, nothing sent).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include <pthread.h>

#include <roce_rpc/rrpc.h>

#include "core/core.h"

/* ---- rrpci_range_inside ------------------------------------------------- */

static void test_range_covering_the_whole_region_is_inside(void **state)
{
    (void)state;
    assert_true(rrpci_range_inside(0x1000, 0x100, 0x1000, 0x100));
    assert_true(rrpci_range_inside(0x1000, 0x100, 0x1080, 0x80));
    assert_true(rrpci_range_inside(0x1000, 0x100, 0x1000, 1));
    assert_true(rrpci_range_inside(0x1000, 0x100, 0x10FF, 1));
}

static void test_range_one_byte_past_the_end_is_outside(void **state)
{
    (void)state;
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x1000, 0x101));
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x1081, 0x80));
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x1100, 1));
}

static void test_range_starting_before_the_region_is_outside(void **state)
{
    (void)state;
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x0FFF, 1));
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x0FFF, 0x101));
    assert_false(rrpci_range_inside(0x1000, 0x100, 0, 0));
}

static void test_empty_range_is_inside_only_up_to_the_end(void **state)
{
    (void)state;
    assert_true(rrpci_range_inside(0x1000, 0x100, 0x1000, 0));
    assert_true(rrpci_range_inside(0x1000, 0x100, 0x1100, 0));
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x1101, 0));
}

static void test_range_check_does_not_overflow_near_uint64_max(void **state)
{
    (void)state;
    uint64_t base = UINT64_MAX - 15; /* the region is the last 16 bytes */
    assert_true(rrpci_range_inside(base, 16, base, 16));
    assert_true(rrpci_range_inside(base, 16, base + 8, 8));
    assert_true(rrpci_range_inside(base, 16, UINT64_MAX, 1));
    assert_false(rrpci_range_inside(base, 16, base + 8, 9));
    assert_false(rrpci_range_inside(base, 16, UINT64_MAX, 2));
    /* addr + len wraps to a small number: a naive "addr + len <= base + blen" passes. */
    assert_false(rrpci_range_inside(base, 16, base + 8, UINT64_MAX));
    assert_false(rrpci_range_inside(0x1000, 0x100, 0x1080, UINT64_MAX - 0x7F));
    assert_false(rrpci_range_inside(0x1000, 0x100, UINT64_MAX, 2));
    /* A region whose base + len itself wraps is handled by offsets, not sums. */
    assert_true(rrpci_range_inside(0, UINT64_MAX, UINT64_MAX - 1, 1));
    assert_false(rrpci_range_inside(0, UINT64_MAX, 1, UINT64_MAX));
    assert_false(rrpci_range_inside(1, UINT64_MAX, 2, UINT64_MAX));
}

static void test_empty_region_contains_only_empty_ranges_at_its_base(void **state)
{
    (void)state;
    assert_true(rrpci_range_inside(0x1000, 0, 0x1000, 0));
    assert_false(rrpci_range_inside(0x1000, 0, 0x1000, 1));
    assert_false(rrpci_range_inside(0x1000, 0, 0x1001, 0));
}

/* ---- token wire form ------------------------------------------------------ */

static void test_token_round_trips_through_its_wire_form(void **state)
{
    (void)state;
    rrpc_token t = {.addr = 0x00007F0012345678ull, .len = 0x100000000ull,
                    .key = 0xFEDCBA9876543210ull,
                    .access = RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE,
                    .reserved = 0};
    uint8_t wire[RRPC_TOKEN_SIZE];
    memset(wire, 0x55, sizeof(wire));
    rrpc_token_encode(&t, wire);
    static const uint8_t want[RRPC_TOKEN_SIZE] = {
        0x78, 0x56, 0x34, 0x12, 0x00, 0x7F, 0x00, 0x00, /* addr */
        0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* len */
        0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, /* key */
        0x03, 0x00, 0x00, 0x00,                         /* access */
        0x00, 0x00, 0x00, 0x00,                         /* reserved */
    };
    assert_memory_equal(wire, want, sizeof(want));
    rrpc_token out;
    memset(&out, 0xAA, sizeof(out));
    assert_int_equal(rrpc_token_decode(wire, sizeof(wire), &out), 0);
    assert_int_equal(out.addr, t.addr);
    assert_int_equal(out.len, t.len);
    assert_int_equal(out.key, t.key);
    assert_int_equal(out.access, t.access);
    assert_int_equal(out.reserved, 0);
}

static void test_token_decode_refuses_any_other_length(void **state)
{
    (void)state;
    uint8_t wire[RRPC_TOKEN_SIZE + 1] = {0};
    rrpc_token out = {.addr = 7};
    assert_int_equal(rrpc_token_decode(wire, RRPC_TOKEN_SIZE - 1, &out), -EINVAL);
    assert_int_equal(rrpc_token_decode(wire, RRPC_TOKEN_SIZE + 1, &out), -EINVAL);
    assert_int_equal(rrpc_token_decode(wire, 0, &out), -EINVAL);
    assert_int_equal(out.addr, 7);
    assert_int_equal(rrpc_token_decode(NULL, RRPC_TOKEN_SIZE, &out), -EINVAL);
    assert_int_equal(rrpc_token_decode(wire, RRPC_TOKEN_SIZE, NULL), -EINVAL);
}

/* ---- rrpc_mem_reg ------------------------------------------------------------ */

static void test_mem_reg_refuses_bad_arguments_with_einval(void **state)
{
    (void)state;
    rrpc_ctx *ctx = NULL;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    static char mem[64];
    rrpc_region *r = (rrpc_region *)(void *)mem; /* a sentinel: must stay untouched */
    rrpc_region *const sentinel = r;
    assert_int_equal(rrpc_mem_reg(NULL, mem, sizeof(mem), RRPC_ACCESS_REMOTE_READ, &r), -EINVAL);
    assert_int_equal(rrpc_mem_reg(ctx, NULL, sizeof(mem), RRPC_ACCESS_REMOTE_READ, &r), -EINVAL);
    assert_int_equal(rrpc_mem_reg(ctx, mem, 0, RRPC_ACCESS_REMOTE_READ, &r), -EINVAL);
    assert_int_equal(rrpc_mem_reg(ctx, mem, sizeof(mem), 1u << 2, &r), -EINVAL);
    assert_int_equal(rrpc_mem_reg(ctx, mem, sizeof(mem), RRPC_ACCESS_REMOTE_WRITE | 0x80, &r),
                     -EINVAL);
    assert_int_equal(rrpc_mem_reg(ctx, mem, sizeof(mem), 0, NULL), -EINVAL);
    assert_ptr_equal(r, sentinel);
    assert_true(strlen(rrpc_ctx_last_error(ctx)) > 0);
    rrpc_ctx_destroy(ctx);
}

static void test_mem_reg_keeps_address_length_and_accepts_no_remote_rights(void **state)
{
    (void)state;
    rrpc_ctx *ctx = NULL;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    static char mem[100];
    rrpc_region *a = NULL, *b = NULL;
    assert_int_equal(rrpc_mem_reg(ctx, mem, sizeof(mem), 0, &a), 0);
    assert_int_equal(rrpc_mem_reg(ctx, mem + 10, 5,
                                  RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &b),
                     0);
    assert_ptr_equal(rrpc_region_addr(a), mem);
    assert_int_equal(rrpc_region_len(a), sizeof(mem));
    assert_ptr_equal(rrpc_region_addr(b), mem + 10);
    assert_int_equal(rrpc_region_len(b), 5);
    rrpc_mem_dereg(a);
    rrpc_mem_dereg(b);
    rrpc_mem_dereg(NULL);
    rrpc_ctx_destroy(ctx);
}

static void test_regions_left_registered_are_freed_by_ctx_destroy(void **state)
{
    (void)state;
    /* Under ASan, a leak here fails the run. */
    rrpc_ctx *ctx = NULL;
    assert_int_equal(rrpc_ctx_create(&ctx), 0);
    static char mem[16][64];
    for (int i = 0; i < 16; i++) {
        rrpc_region *r;
        assert_int_equal(rrpc_mem_reg(ctx, mem[i], sizeof(mem[i]), RRPC_ACCESS_REMOTE_READ, &r),
                         0);
    }
    rrpc_ctx_destroy(ctx);
}

/* ---- generations ------------------------------------------------------------ */

/* Two threads take generations at once; every one must be unique.  The
 * counter is process-wide and taken outside any context lock, so a plain
 * increment loses or repeats values here within a few thousand rounds. */
#define GEN_PER_THREAD (1u << 21)

struct gen_job {
    pthread_barrier_t *start;
    uint64_t *out;
    size_t n;
    rrpc_ctx *ctx; /* NULL: take generations directly; else register regions */
};

static void *gen_take(void *arg)
{
    struct gen_job *j = arg;
    static char mem[64];
    pthread_barrier_wait(j->start);
    for (size_t i = 0; i < j->n; i++) {
        if (!j->ctx) {
            j->out[i] = rrpci_region_next_generation();
            continue;
        }
        rrpc_region *r = NULL;
        if (rrpc_mem_reg(j->ctx, mem, sizeof(mem), RRPC_ACCESS_REMOTE_READ, &r) < 0)
            return (void *)1;
        j->out[i] = rrpci_region_generation(r);
        rrpc_mem_dereg(r);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs two gen_take jobs of @n each (with @c0/@c1 as their contexts) and
 * checks the 2n generations are non-zero and distinct. */
static void two_threads_take_distinct_generations(rrpc_ctx *c0, rrpc_ctx *c1, size_t n)
{
    uint64_t *all = calloc(2 * n, sizeof(*all));
    assert_non_null(all);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    struct gen_job j[2] = {{&start, all, n, c0}, {&start, all + n, n, c1}};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, gen_take, &j[1]), 0);
    void *r0 = gen_take(&j[0]), *r1 = NULL;
    pthread_join(t, &r1);
    pthread_barrier_destroy(&start);
    assert_null(r0);
    assert_null(r1);
    qsort(all, 2 * n, sizeof(*all), cmp_u64);
    size_t dups = 0;
    for (size_t i = 1; i < 2 * n; i++)
        dups += all[i] == all[i - 1];
    assert_true(all[0] != 0);
    free(all);
    assert_int_equal(dups, 0);
}

static void test_generations_taken_on_two_threads_at_once_are_all_distinct(void **state)
{
    (void)state;
    two_threads_take_distinct_generations(NULL, NULL, GEN_PER_THREAD);
}

static void test_regions_of_two_contexts_registered_on_two_threads_have_distinct_generations(
    void **state)
{
    (void)state;
    rrpc_ctx *c0 = NULL, *c1 = NULL;
    assert_int_equal(rrpc_ctx_create(&c0), 0);
    assert_int_equal(rrpc_ctx_create(&c1), 0);
    two_threads_take_distinct_generations(c0, c1, 20000);
    rrpc_ctx_destroy(c0);
    rrpc_ctx_destroy(c1);
}

/* ---- one-sided operations over a loopback connection -------------------------- */

#define RSIZE 4096

struct fixture {
    rrpc_ctx *srv, *cli;
    rrpc_listener *l;
    rrpc_conn *cconn;            /* client -> server */
    _Atomic(rrpc_conn *) sconn;  /* server's side, set on UP */
    uint8_t *target, *ro, *wo, *local;
    rrpc_region *rtarget, *rro, *rwo, *rlocal;
    rrpc_token ttarget, tro, two;
};

static void srv_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)reason;
    struct fixture *f = user;
    atomic_store(&f->sconn, ev == RRPC_CONN_UP ? c : NULL);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int loopback_setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    *state = f;
    f->target = calloc(1, RSIZE);
    f->ro = calloc(1, RSIZE);
    f->wo = calloc(1, RSIZE);
    f->local = calloc(1, RSIZE);
    if (!f->target || !f->ro || !f->wo || !f->local)
        return -1;
    if (rrpc_ctx_create(&f->srv) || rrpc_ctx_create(&f->cli) || rrpc_ctx_start_thread(f->srv) ||
        rrpc_ctx_start_thread(f->cli))
        return -1;
    int r = rrpc_listen(f->srv, "tcp://127.0.0.1:0", srv_event, f, &f->l);
    if (r < 0) {
        print_error("listen: %s: %s\n", rrpc_err_name(r), rrpc_ctx_last_error(f->srv));
        return -1;
    }
    int port = rrpc_listener_port(f->l);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", port);
    r = rrpc_connect_sync(f->cli, uri, 5000, NULL, NULL, &f->cconn);
    if (r < 0) {
        print_error("connect %s: %s: %s\n", uri, rrpc_err_name(r), rrpc_ctx_last_error(f->cli));
        return -1;
    }
    for (int i = 0; i < 500 && !atomic_load(&f->sconn); i++)
        sleep_ms(10);
    rrpc_conn *sc = atomic_load(&f->sconn);
    if (!sc)
        return -1;
    if (rrpc_mem_reg(f->srv, f->target, RSIZE, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE,
                     &f->rtarget) ||
        rrpc_mem_reg(f->srv, f->ro, RSIZE, RRPC_ACCESS_REMOTE_READ, &f->rro) ||
        rrpc_mem_reg(f->srv, f->wo, RSIZE, RRPC_ACCESS_REMOTE_WRITE, &f->rwo) ||
        rrpc_mem_reg(f->cli, f->local, RSIZE, 0, &f->rlocal))
        return -1;
    if (rrpc_region_token(f->rtarget, sc, &f->ttarget) || rrpc_region_token(f->rro, sc, &f->tro) ||
        rrpc_region_token(f->rwo, sc, &f->two))
        return -1;
    /* Tokens travel as bytes: use the decoded form, as a real peer would. */
    rrpc_token *toks[] = {&f->ttarget, &f->tro, &f->two};
    for (int i = 0; i < 3; i++) {
        uint8_t wire[RRPC_TOKEN_SIZE];
        rrpc_token_encode(toks[i], wire);
        if (rrpc_token_decode(wire, sizeof(wire), toks[i]))
            return -1;
    }
    return 0;
}

static int loopback_teardown(void **state)
{
    struct fixture *f = *state;
    if (!f)
        return 0;
    rrpc_ctx_destroy(f->cli); /* frees its connection and regions */
    rrpc_ctx_destroy(f->srv);
    free(f->target);
    free(f->ro);
    free(f->wo);
    free(f->local);
    free(f);
    return 0;
}

struct op_result {
    atomic_int calls;
    atomic_int status;
};

static void op_cb(int status, void *user)
{
    struct op_result *res = user;
    atomic_store(&res->status, status);
    atomic_fetch_add(&res->calls, 1);
}

/* Fills @n bytes of the local region with a pattern derived from @seed. */
static void fill_local(struct fixture *f, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        f->local[i] = (uint8_t)(seed + i * 31);
}

/* A WRITE that the peer answers: everything earlier on the connection's bulk
 * class has been answered too. */
static void flush(struct fixture *f)
{
    fill_local(f, 1, 0);
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &f->ttarget, RSIZE - 1, 1, NULL), 0);
}

static void test_token_carries_the_region_address_length_and_rights(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(f->ttarget.addr, (uintptr_t)f->target);
    assert_int_equal(f->ttarget.len, RSIZE);
    assert_int_equal(f->ttarget.access, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE);
    assert_int_equal(f->tro.access, RRPC_ACCESS_REMOTE_READ);
    assert_int_equal(f->two.access, RRPC_ACCESS_REMOTE_WRITE);
    assert_int_not_equal(f->ttarget.key, f->tro.key);
    assert_int_not_equal(f->ttarget.key, f->two.key);
    assert_int_not_equal(f->tro.key, f->two.key);
}

static void test_write_inside_the_remote_region_lands_in_its_memory(void **state)
{
    struct fixture *f = *state;
    fill_local(f, 256, 7);
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &f->ttarget, 100, 256, NULL), 0);
    assert_memory_equal(f->target + 100, f->local, 256);
}

static void test_write_ending_exactly_at_the_region_end_is_accepted(void **state)
{
    struct fixture *f = *state;
    fill_local(f, 64, 9);
    assert_int_equal(
        rrpc_write_sync(f->cconn, f->rlocal, 0, &f->ttarget, RSIZE - 64, 64, NULL), 0);
    assert_memory_equal(f->target + RSIZE - 64, f->local, 64);
}

static void test_read_of_the_whole_remote_region_copies_it(void **state)
{
    struct fixture *f = *state;
    for (size_t i = 0; i < RSIZE; i++)
        f->ro[i] = (uint8_t)(i * 13 + 1);
    memset(f->local, 0, RSIZE);
    assert_int_equal(rrpc_read_sync(f->cconn, f->rlocal, 0, &f->tro, 0, RSIZE, NULL), 0);
    assert_memory_equal(f->local, f->ro, RSIZE);
}

/* Expects rrpc_write (or rrpc_read) to return @want at once, with no callback
 * ever and no byte of the target region changed. */
static void expect_refused(struct fixture *f, bool is_read, const rrpc_token *t, uint64_t off,
                           size_t len, int want)
{
    uint8_t *snapshot = malloc(RSIZE);
    assert_non_null(snapshot);
    memcpy(snapshot, f->target, RSIZE);
    fill_local(f, RSIZE, 0xA0);
    struct op_result res = {0};
    int r = is_read ? rrpc_read(f->cconn, f->rlocal, 0, t, off, len, NULL, op_cb, &res)
                    : rrpc_write(f->cconn, f->rlocal, 0, t, off, len, NULL, op_cb, &res);
    assert_int_equal(r, want);
    flush(f);
    assert_int_equal(atomic_load(&res.calls), 0);
    /* flush() wrote one byte at the last position: compare the rest. */
    assert_memory_equal(f->target, snapshot, RSIZE - 1);
    free(snapshot);
}

static void test_write_past_the_remote_region_is_refused_at_once_with_access(void **state)
{
    struct fixture *f = *state;
    expect_refused(f, false, &f->ttarget, RSIZE - 63, 64, RRPC_E_ACCESS);
    expect_refused(f, false, &f->ttarget, RSIZE, 1, RRPC_E_ACCESS);
    expect_refused(f, false, &f->ttarget, 1, RSIZE, RRPC_E_ACCESS);
    assert_non_null(strstr(rrpc_ctx_last_error(f->cli), "outside the remote region"));
}

static void test_write_at_an_offset_that_wraps_the_address_is_refused_with_access(void **state)
{
    struct fixture *f = *state;
    /* addr + off wraps around to the region's start (or just before it). */
    expect_refused(f, false, &f->ttarget, UINT64_MAX, 1, RRPC_E_ACCESS);
    expect_refused(f, false, &f->ttarget, UINT64_MAX - f->ttarget.addr + 1, 1, RRPC_E_ACCESS);
    expect_refused(f, false, &f->ttarget, UINT64_MAX - f->ttarget.addr, 1, RRPC_E_ACCESS);
    /* A token whose addr + len wraps: offsets past the wrap are still refused. */
    rrpc_token high = f->ttarget;
    high.addr = UINT64_MAX - 15;
    high.len = 16;
    expect_refused(f, false, &high, 16, 1, RRPC_E_ACCESS);
    expect_refused(f, false, &high, 8, 9, RRPC_E_ACCESS);
}

static void test_write_with_a_token_lacking_remote_write_is_refused_at_once_with_access(
    void **state)
{
    struct fixture *f = *state;
    expect_refused(f, false, &f->tro, 0, 16, RRPC_E_ACCESS);
    assert_non_null(strstr(rrpc_ctx_last_error(f->cli), "RRPC_ACCESS_REMOTE_WRITE"));
    /* The rights are the token's: an in-range write is refused too. */
    rrpc_token none = f->ttarget;
    none.access = 0;
    expect_refused(f, false, &none, 0, 1, RRPC_E_ACCESS);
}

static void test_read_with_a_token_lacking_remote_read_is_refused_at_once_with_access(
    void **state)
{
    struct fixture *f = *state;
    expect_refused(f, true, &f->two, 0, 16, RRPC_E_ACCESS);
    assert_non_null(strstr(rrpc_ctx_last_error(f->cli), "RRPC_ACCESS_REMOTE_READ"));
    expect_refused(f, true, &f->tro, RSIZE - 8, 9, RRPC_E_ACCESS);
}

static void test_local_range_outside_the_local_region_is_refused_with_region(void **state)
{
    struct fixture *f = *state;
    struct op_result res = {0};
    assert_int_equal(
        rrpc_write(f->cconn, f->rlocal, RSIZE - 8, &f->ttarget, 0, 9, NULL, op_cb, &res),
        RRPC_E_REGION);
    assert_int_equal(
        rrpc_read(f->cconn, f->rlocal, RSIZE + 1, &f->ttarget, 0, 0 + 1, NULL, op_cb, &res),
        RRPC_E_REGION);
    flush(f);
    assert_int_equal(atomic_load(&res.calls), 0);
}

static void test_zero_length_or_null_arguments_are_invalid(void **state)
{
    struct fixture *f = *state;
    struct op_result res = {0};
    assert_int_equal(rrpc_write(f->cconn, f->rlocal, 0, &f->ttarget, 0, 0, NULL, op_cb, &res),
                     -EINVAL);
    assert_int_equal(rrpc_write(f->cconn, NULL, 0, &f->ttarget, 0, 1, NULL, op_cb, &res),
                     -EINVAL);
    assert_int_equal(rrpc_write(f->cconn, f->rlocal, 0, NULL, 0, 1, NULL, op_cb, &res), -EINVAL);
    assert_int_equal(rrpc_write(f->cconn, f->rlocal, 0, &f->ttarget, 0, 1, NULL, NULL, &res),
                     -EINVAL);
    assert_int_equal(rrpc_write(NULL, f->rlocal, 0, &f->ttarget, 0, 1, NULL, op_cb, &res),
                     -EINVAL);
    flush(f);
    assert_int_equal(atomic_load(&res.calls), 0);
}

static void test_forged_key_is_refused_by_the_target_with_access(void **state)
{
    struct fixture *f = *state;
    rrpc_token forged = f->ttarget;
    forged.key ^= 1;
    memset(f->target, 0x11, 32);
    fill_local(f, 32, 0x22);
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &forged, 0, 32, NULL), RRPC_E_ACCESS);
    for (int i = 0; i < 32; i++)
        assert_int_equal(f->target[i], 0x11);
}

static void test_token_forged_to_cover_more_is_refused_by_the_target(void **state)
{
    struct fixture *f = *state;
    /* The initiator trusts the token's len; the target checks its own. */
    rrpc_token bigger = f->ttarget;
    bigger.len = 2 * RSIZE;
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &bigger, RSIZE, 16, NULL),
                     RRPC_E_ACCESS);
    rrpc_token writable = f->tro;
    writable.access |= RRPC_ACCESS_REMOTE_WRITE;
    uint8_t before = f->ro[0];
    fill_local(f, 1, (uint8_t)(before + 1));
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &writable, 0, 1, NULL),
                     RRPC_E_ACCESS);
    assert_int_equal(f->ro[0], before);
}

static void test_write_to_a_deregistered_region_is_refused_by_the_target(void **state)
{
    struct fixture *f = *state;
    uint8_t *mem = calloc(1, 64);
    assert_non_null(mem);
    rrpc_region *r = NULL;
    rrpc_token t;
    assert_int_equal(rrpc_mem_reg(f->srv, mem, 64, RRPC_ACCESS_REMOTE_WRITE, &r), 0);
    assert_int_equal(rrpc_region_token(r, atomic_load(&f->sconn), &t), 0);
    fill_local(f, 8, 1);
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &t, 0, 8, NULL), 0);
    assert_memory_equal(mem, f->local, 8);
    rrpc_mem_dereg(r);
    assert_int_equal(rrpc_write_sync(f->cconn, f->rlocal, 0, &t, 0, 8, NULL), RRPC_E_ACCESS);
    free(mem);
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_range_covering_the_whole_region_is_inside),
        cmocka_unit_test(test_range_one_byte_past_the_end_is_outside),
        cmocka_unit_test(test_range_starting_before_the_region_is_outside),
        cmocka_unit_test(test_empty_range_is_inside_only_up_to_the_end),
        cmocka_unit_test(test_range_check_does_not_overflow_near_uint64_max),
        cmocka_unit_test(test_empty_region_contains_only_empty_ranges_at_its_base),
        cmocka_unit_test(test_token_round_trips_through_its_wire_form),
        cmocka_unit_test(test_token_decode_refuses_any_other_length),
        cmocka_unit_test(test_mem_reg_refuses_bad_arguments_with_einval),
        cmocka_unit_test(test_mem_reg_keeps_address_length_and_accepts_no_remote_rights),
        cmocka_unit_test(test_regions_left_registered_are_freed_by_ctx_destroy),
        cmocka_unit_test(test_generations_taken_on_two_threads_at_once_are_all_distinct),
        cmocka_unit_test(
            test_regions_of_two_contexts_registered_on_two_threads_have_distinct_generations),
    };
    const struct CMUnitTest loopback[] = {
        cmocka_unit_test(test_token_carries_the_region_address_length_and_rights),
        cmocka_unit_test(test_write_inside_the_remote_region_lands_in_its_memory),
        cmocka_unit_test(test_write_ending_exactly_at_the_region_end_is_accepted),
        cmocka_unit_test(test_read_of_the_whole_remote_region_copies_it),
        cmocka_unit_test(test_write_past_the_remote_region_is_refused_at_once_with_access),
        cmocka_unit_test(test_write_at_an_offset_that_wraps_the_address_is_refused_with_access),
        cmocka_unit_test(test_write_with_a_token_lacking_remote_write_is_refused_at_once_with_access),
        cmocka_unit_test(test_read_with_a_token_lacking_remote_read_is_refused_at_once_with_access),
        cmocka_unit_test(test_local_range_outside_the_local_region_is_refused_with_region),
        cmocka_unit_test(test_zero_length_or_null_arguments_are_invalid),
        cmocka_unit_test(test_forged_key_is_refused_by_the_target_with_access),
        cmocka_unit_test(test_token_forged_to_cover_more_is_refused_by_the_target),
        cmocka_unit_test(test_write_to_a_deregistered_region_is_refused_by_the_target),
    };
    int failed = cmocka_run_group_tests_name("region_pure", pure, NULL, NULL);
    failed += cmocka_run_group_tests_name("region_loopback", loopback, loopback_setup,
                                          loopback_teardown);
    return failed;
}

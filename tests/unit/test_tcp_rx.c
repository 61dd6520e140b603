/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of libroce_rpc/transport/tcp/rx.c: the tcp receive state
 * machine, driven without sockets.  A byte stream of frames is fed in read
 * sizes chosen by each test (headers split across reads, a byte at a
 * time, everything at once); the upcalls record what the machine hands up.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "transport/tcp/rx.h"

#define MAX_MSG (4u << 20)
#define NREC 16
#define KIB 1024u

/* ---- a recording peer of the machine ---------------------------------- */

struct rec {
    struct rrpci_hdr h;
    uint8_t *payload; /* a copy */
    size_t plen;
};

struct up_state {
    struct rec rec[NREC];
    int nrec;
    int admit_code;  /* what admit answers */
    int admitted;    /* admit calls */
    uint8_t *region; /* write_target's answer; NULL: refused */
    int targets_left; /* write_target answers region this many more times, then NULL */
    int failed;      /* the code fail got, 0 while none */
    bool down;       /* frame answers false from now on */
};

static int up_admit(void *u, const struct rrpci_hdr *h)
{
    (void)h;
    struct up_state *s = u;
    s->admitted++;
    return s->admit_code;
}

static bool up_frame(void *u, const struct rrpci_hdr *h, const uint8_t *payload)
{
    struct up_state *s = u;
    assert_true(s->nrec < NREC);
    struct rec *r = &s->rec[s->nrec++];
    r->h = *h;
    r->plen = h->placed ? RRPCI_OS_HDR_SIZE : h->len;
    r->payload = malloc(r->plen + 1);
    assert_non_null(r->payload);
    memcpy(r->payload, payload, r->plen);
    return !s->down;
}

static uint8_t *up_write_target(void *u, const struct rrpci_hdr *h, const uint8_t *p, size_t n)
{
    (void)h;
    (void)p;
    assert_true(n >= RRPCI_OS_HDR_SIZE);
    struct up_state *s = u;
    if (!s->region || s->targets_left == 0)
        return NULL;
    s->targets_left--;
    return s->region;
}

static void up_fail(void *u, int code, const char *why)
{
    struct up_state *s = u;
    assert_non_null(why);
    s->failed = code;
}

static const struct rrpc_tcp_rx_up up = {up_admit, up_frame, up_write_target, up_fail, NULL,
                                         NULL};

/* A budget of large payloads (RRPC_MAX_PARTIAL_BYTES in the channel): room
 * for @room bytes, taken and given back here. */
static size_t budget_room, budget_held;
static int budget_refusals;

static int up_reserve(void *u, size_t len)
{
    (void)u;
    if (len > budget_room - budget_held) {
        budget_refusals++;
        return -EAGAIN;
    }
    budget_held += len;
    return 0;
}

static void up_unreserve(void *u, size_t len)
{
    (void)u;
    assert_true(len <= budget_held);
    budget_held -= len;
}

static const struct rrpc_tcp_rx_up up_budget = {up_admit,   up_frame,    up_write_target,
                                                up_fail,    up_reserve,  up_unreserve};

struct fixture {
    struct rrpc_tcp_rx rx;
    struct up_state s;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->s.targets_left = -1;
    rrpc_tcp_rx_init(&f->rx, &up, &f->s, MAX_MSG);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    rrpc_tcp_rx_fini(&f->rx);
    for (int i = 0; i < f->s.nrec; i++)
        free(f->s.rec[i].payload);
    free(f);
    return 0;
}

/* ---- streams ------------------------------------------------------------- */

struct stream {
    uint8_t *b;
    size_t len, cap;
};

static void put(struct stream *st, const void *p, size_t n)
{
    if (st->len + n > st->cap) {
        st->cap = (st->len + n) * 2;
        st->b = realloc(st->b, st->cap);
        assert_non_null(st->b);
    }
    memcpy(st->b + st->len, p, n);
    st->len += n;
}

/* Byte i of the payload of the frame with id @id. */
static uint8_t pattern(uint64_t id, size_t i)
{
    return (uint8_t)(id * 131 + i * 7 + (i >> 9));
}

/* Appends a frame of @type with a patterned payload of @len bytes. */
static void frame(struct stream *st, uint8_t type, uint64_t id, uint32_t len)
{
    struct rrpci_hdr h = {.version = RRPCI_PROTO_VERSION, .type = type, .cls = 2, .id = id,
                          .len = len};
    uint8_t hb[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, hb);
    put(st, hb, sizeof(hb));
    for (uint32_t i = 0; i < len; i++) {
        uint8_t c = pattern(id, i);
        put(st, &c, 1);
    }
}

/* Appends an emulated WRITE of @data bytes (patterned by @id after its sub-header). */
static void os_write(struct stream *st, uint64_t id, uint32_t data)
{
    struct rrpci_hdr h = {.version = RRPCI_PROTO_VERSION, .type = RRPCI_T_OS_WRITE, .cls = 2,
                          .id = id, .len = RRPCI_OS_HDR_SIZE + data};
    uint8_t hb[RRPCI_HDR_SIZE], sub[RRPCI_OS_HDR_SIZE];
    rrpci_hdr_encode(&h, hb);
    put(st, hb, sizeof(hb));
    struct rrpci_os_hdr o = {.addr = 0x1000, .key = 7, .len = data};
    rrpci_os_hdr_encode(&o, sub);
    put(st, sub, sizeof(sub));
    for (uint32_t i = 0; i < data; i++) {
        uint8_t c = pattern(id, i);
        put(st, &c, 1);
    }
}

/*
 * Feeds @st from @*off through the machine: each read takes what the
 * machine asks, at most the next of @splits (cycled; 0: no bound) and at
 * most @piece for a large payload.  Stops at the end of the stream or when
 * the machine says GONE, which it returns.
 */
static enum rrpc_tcp_rx_next feed(struct fixture *f, const struct stream *st, size_t *off,
                                  const size_t *splits, int nsplits, size_t piece)
{
    enum rrpc_tcp_rx_next next = RRPC_TCP_RX_READ;
    for (int k = 0; *off < st->len; k++) {
        uint8_t *to;
        size_t max;
        next = rrpc_tcp_rx_want(&f->rx, piece, &to, &max);
        if (next != RRPC_TCP_RX_READ)
            return next;
        assert_true(max > 0);
        if (f->rx.state == RRPC_TCP_RX_BIG || f->rx.state == RRPC_TCP_RX_REGION ||
            f->rx.state == RRPC_TCP_RX_DISCARD)
            assert_true(max <= piece);
        size_t n = st->len - *off;
        if (n > max)
            n = max;
        size_t cut = splits[k % nsplits];
        if (cut && n > cut)
            n = cut;
        memcpy(to, st->b + *off, n);
        *off += n;
        next = rrpc_tcp_rx_got(&f->rx, n);
        if (next != RRPC_TCP_RX_READ)
            return next;
    }
    return next;
}

static void check_frame(const struct rec *r, uint8_t type, uint64_t id, uint32_t len)
{
    assert_int_equal(r->h.type, type);
    assert_int_equal(r->h.id, id);
    assert_int_equal(r->h.len, len);
    assert_false(r->h.placed);
    for (uint32_t i = 0; i < len; i++)
        if (r->payload[i] != pattern(id, i))
            fail_msg("frame %llu: payload byte %u differs", (unsigned long long)id, i);
}

/* A mix: empty, small, half a read buffer, just above it (a buffer of its
 * own), large. */
static const uint32_t mix[] = {0, 100, RRPC_TCP_RBUF_SIZE / 2, RRPC_TCP_RBUF_SIZE / 2 + 1,
                               300 * KIB, 5, 200 * KIB};
#define NMIX (sizeof(mix) / sizeof(mix[0]))

static void run_mix(void **state, const size_t *splits, int nsplits, size_t piece)
{
    struct fixture *f = *state;
    struct stream st = {0};
    for (size_t i = 0; i < NMIX; i++)
        frame(&st, RRPCI_T_REQUEST, i + 1, mix[i]);
    size_t off = 0;
    assert_int_equal(feed(f, &st, &off, splits, nsplits, piece), RRPC_TCP_RX_READ);
    assert_int_equal(f->s.nrec, NMIX);
    for (size_t i = 0; i < NMIX; i++)
        check_frame(&f->s.rec[i], RRPCI_T_REQUEST, i + 1, mix[i]);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_HEADER);
    assert_false(rrpc_tcp_rx_mid_frame(&f->rx));
    assert_int_equal(f->s.failed, 0);
    free(st.b);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_frames_arrive_whole_when_everything_comes_at_once(void **state)
{
    const size_t all[] = {0};
    run_mix(state, all, 1, 1u << 20);
}

static void test_frames_arrive_whole_when_read_a_byte_at_a_time(void **state)
{
    const size_t one[] = {1};
    run_mix(state, one, 1, 1u << 20);
}

static void test_frames_arrive_whole_in_odd_splits_and_small_pieces(void **state)
{
    const size_t odd[] = {31, 1, 33, 4095, 7, 65536, 3, 100000};
    run_mix(state, odd, 8, 64 * KIB);
}

static void test_a_header_split_across_reads_is_decoded_once_whole(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 9, 10);
    size_t off = 0;
    const size_t first[] = {RRPCI_HDR_SIZE - 1};
    struct stream head = {st.b, RRPCI_HDR_SIZE - 1, 0};
    assert_int_equal(feed(f, &head, &off, first, 1, 1u << 20), RRPC_TCP_RX_READ);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_HEADER);
    assert_true(rrpc_tcp_rx_mid_frame(&f->rx));
    assert_int_equal(f->s.nrec, 0);
    const size_t rest[] = {1, 0};
    assert_int_equal(feed(f, &st, &off, rest, 2, 1u << 20), RRPC_TCP_RX_READ);
    assert_int_equal(f->s.nrec, 1);
    check_frame(&f->s.rec[0], RRPCI_T_REQUEST, 9, 10);
    free(st.b);
}

static void test_a_small_body_is_read_into_the_read_buffer(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 3, 1000);
    size_t off = 0;
    struct stream part = {st.b, RRPCI_HDR_SIZE + 10, 0};
    const size_t all[] = {0};
    feed(f, &part, &off, all, 1, 1u << 20);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_BODY);
    assert_int_equal(f->s.admitted, 1); /* its payload is still to come */
    uint8_t *to;
    size_t max;
    assert_int_equal(rrpc_tcp_rx_want(&f->rx, 1u << 20, &to, &max), RRPC_TCP_RX_READ);
    assert_ptr_equal(to, f->rx.rbuf + f->rx.rlen);
    assert_null(f->rx.big);
    feed(f, &st, &off, all, 1, 1u << 20);
    assert_int_equal(f->s.nrec, 1);
    check_frame(&f->s.rec[0], RRPCI_T_REQUEST, 3, 1000);
    free(st.b);
}

static void test_a_whole_frame_is_not_admitted_before_it_is_handed_up(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 500);
    size_t off = 0;
    const size_t all[] = {0};
    feed(f, &st, &off, all, 1, 1u << 20);
    assert_int_equal(f->s.nrec, 1);
    assert_int_equal(f->s.admitted, 0); /* the core checks it on delivery */
    free(st.b);
}

static void test_a_large_body_comes_into_its_own_buffer_which_is_kept_for_the_next(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 300 * KIB);
    frame(&st, RRPCI_T_REQUEST, 2, 200 * KIB);
    size_t off = 0;
    /* The first frame's header and a little of its payload. */
    struct stream part = {st.b, RRPCI_HDR_SIZE + 100, 0};
    const size_t all[] = {0};
    feed(f, &part, &off, all, 1, 64 * KIB);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_BIG);
    uint8_t *first = f->rx.big;
    assert_non_null(first);
    uint8_t *to;
    size_t max;
    assert_int_equal(rrpc_tcp_rx_want(&f->rx, 64 * KIB, &to, &max), RRPC_TCP_RX_READ);
    assert_ptr_equal(to, first + 100);
    assert_int_equal(max, 64 * KIB);
    /* The rest of the first frame and the second's header. */
    part.len = RRPCI_HDR_SIZE + 300 * KIB + RRPCI_HDR_SIZE;
    feed(f, &part, &off, all, 1, 64 * KIB);
    assert_int_equal(f->s.nrec, 1);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_BIG);
    assert_ptr_equal(f->rx.big, first); /* the spare, reused */
    feed(f, &st, &off, all, 1, 64 * KIB);
    assert_int_equal(f->s.nrec, 2);
    check_frame(&f->s.rec[0], RRPCI_T_REQUEST, 1, 300 * KIB);
    check_frame(&f->s.rec[1], RRPCI_T_REQUEST, 2, 200 * KIB);
    free(st.b);
}

static void test_the_header_after_a_large_payload_is_read_alone(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 100 * KIB);
    size_t off = 0;
    const size_t all[] = {0};
    feed(f, &st, &off, all, 1, 1u << 20);
    assert_int_equal(f->s.nrec, 1);
    uint8_t *to;
    size_t max;
    assert_int_equal(rrpc_tcp_rx_want(&f->rx, 1u << 20, &to, &max), RRPC_TCP_RX_READ);
    assert_int_equal(max, RRPCI_HDR_SIZE);
    free(st.b);
}

static void test_a_large_write_goes_straight_into_its_region(void **state)
{
    struct fixture *f = *state;
    enum { DATA = 100 * KIB };
    uint8_t *region = calloc(1, DATA);
    assert_non_null(region);
    f->s.region = region;
    struct stream st = {0};
    os_write(&st, 5, DATA);
    frame(&st, RRPCI_T_REQUEST, 6, 10);
    size_t off = 0;
    const size_t odd[] = {7, 40, 1000, 0};
    feed(f, &st, &off, odd, 4, 16 * KIB);
    assert_int_equal(f->s.nrec, 2);
    const struct rec *r = &f->s.rec[0];
    assert_int_equal(r->h.type, RRPCI_T_OS_WRITE);
    assert_true(r->h.placed);
    assert_int_equal(r->h.len, RRPCI_OS_HDR_SIZE + DATA);
    assert_memory_equal(r->payload, st.b + RRPCI_HDR_SIZE, RRPCI_OS_HDR_SIZE);
    for (size_t i = 0; i < DATA; i++)
        if (region[i] != pattern(5, i))
            fail_msg("region byte %zu differs", i);
    assert_null(f->rx.spare); /* no buffer of its own was made */
    check_frame(&f->s.rec[1], RRPCI_T_REQUEST, 6, 10);
    free(region);
    free(st.b);
}

static void test_a_write_whose_region_goes_away_is_read_and_dropped(void **state)
{
    struct fixture *f = *state;
    enum { DATA = 100 * KIB };
    uint8_t *region = calloc(1, DATA);
    assert_non_null(region);
    f->s.region = region;
    f->s.targets_left = 2; /* the sub-header, and one read; then the region is gone */
    struct stream st = {0};
    os_write(&st, 5, DATA);
    frame(&st, RRPCI_T_REQUEST, 6, 10);
    size_t off = 0;
    const size_t all[] = {0};
    struct stream part = {st.b, RRPCI_HDR_SIZE + RRPCI_OS_HDR_SIZE, 0};
    feed(f, &part, &off, all, 1, 16 * KIB);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_REGION);
    feed(f, &st, &off, all, 1, 16 * KIB);
    assert_int_equal(f->s.nrec, 2);
    assert_true(f->s.rec[0].h.placed); /* handed up: the core answers it */
    for (size_t i = 0; i < 16 * KIB; i++)
        assert_int_equal(region[i], pattern(5, i));
    for (size_t i = 16 * KIB; i < DATA; i++)
        if (region[i] != 0)
            fail_msg("byte %zu written after the region went away", i);
    check_frame(&f->s.rec[1], RRPCI_T_REQUEST, 6, 10);
    free(region);
    free(st.b);
}

static void test_a_refused_large_write_is_read_as_any_frame(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    os_write(&st, 5, 50 * KIB); /* no region: write_target refuses */
    size_t off = 0;
    const size_t odd[] = {3, 0};
    feed(f, &st, &off, odd, 2, 1u << 20);
    assert_int_equal(f->s.nrec, 1);
    const struct rec *r = &f->s.rec[0];
    assert_false(r->h.placed);
    assert_int_equal(r->plen, RRPCI_OS_HDR_SIZE + 50 * KIB);
    assert_memory_equal(r->payload, st.b + RRPCI_HDR_SIZE, r->plen);
    free(st.b);
}

static void test_a_frame_above_the_maximum_takes_the_connection_down(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    struct rrpci_hdr h = {.version = RRPCI_PROTO_VERSION, .type = RRPCI_T_REQUEST, .cls = 2,
                          .len = MAX_MSG + 1};
    uint8_t hb[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, hb);
    put(&st, hb, sizeof(hb));
    size_t off = 0;
    const size_t all[] = {0};
    assert_int_equal(feed(f, &st, &off, all, 1, 1u << 20), RRPC_TCP_RX_GONE);
    assert_int_equal(f->s.failed, RRPC_E_TOO_BIG);
    assert_int_equal(f->s.nrec, 0);
    assert_int_equal(f->s.admitted, 0);
    free(st.b);
}

static void test_a_frame_without_admission_keeps_none_of_its_payload(void **state)
{
    struct fixture *f = *state;
    f->s.admit_code = RRPC_E_CREDIT;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 300 * KIB);
    size_t off = 0;
    const size_t some[] = {RRPCI_HDR_SIZE + 10};
    assert_int_equal(feed(f, &st, &off, some, 1, 1u << 20), RRPC_TCP_RX_GONE);
    assert_int_equal(f->s.admitted, 1);
    assert_null(f->rx.big);
    assert_int_equal(f->s.nrec, 0);
    free(st.b);
}

static void test_nothing_is_handed_up_after_the_connection_went_away(void **state)
{
    struct fixture *f = *state;
    f->s.down = true;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 10);
    frame(&st, RRPCI_T_REQUEST, 2, 10);
    size_t off = 0;
    const size_t all[] = {0};
    assert_int_equal(feed(f, &st, &off, all, 1, 1u << 20), RRPC_TCP_RX_GONE);
    assert_int_equal(f->s.nrec, 1);
    free(st.b);
}

static void test_an_idle_machine_gives_its_buffers_back(void **state)
{
    struct fixture *f = *state;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 100 * KIB);
    frame(&st, RRPCI_T_REQUEST, 2, 10);
    size_t off = 0;
    const size_t all[] = {0};
    struct stream part = {st.b, st.len - 5, 0};
    feed(f, &part, &off, all, 1, 1u << 20);
    assert_non_null(f->rx.spare);
    rrpc_tcp_rx_trim(&f->rx); /* in the middle of a frame: the read buffer stays */
    assert_null(f->rx.spare);
    assert_non_null(f->rx.rbuf);
    feed(f, &st, &off, all, 1, 1u << 20);
    assert_int_equal(f->s.nrec, 2);
    rrpc_tcp_rx_trim(&f->rx);
    assert_null(f->rx.rbuf);
    free(st.b);
}

/* A large payload the budget has no room for: the machine pauses before it
 * keeps any of it (the bytes already read stay in the read buffer), asks
 * nothing to read, and goes on when resumed with room; the budget is given
 * back when the frame is whole, and when the machine goes mid-frame. */
static void test_a_large_payload_waits_for_the_budget_and_gives_it_back(void **state)
{
    struct fixture *f = *state;
    rrpc_tcp_rx_fini(&f->rx);
    rrpc_tcp_rx_init(&f->rx, &up_budget, &f->s, MAX_MSG);
    budget_room = 100 * KIB, budget_held = 0, budget_refusals = 0;
    struct stream st = {0};
    frame(&st, RRPCI_T_REQUEST, 1, 300 * KIB);
    frame(&st, RRPCI_T_REQUEST, 2, 200 * KIB);
    size_t off = 0;
    const size_t all[] = {0};
    assert_int_equal(feed(f, &st, &off, all, 1, 1u << 20), RRPC_TCP_RX_PAUSE);
    assert_int_equal(f->rx.state, RRPC_TCP_RX_WAIT);
    assert_int_equal(budget_refusals, 1);
    assert_int_equal(f->s.nrec, 0);
    uint8_t *to;
    size_t max;
    assert_int_equal(rrpc_tcp_rx_want(&f->rx, 1u << 20, &to, &max), RRPC_TCP_RX_PAUSE);
    /* still no room */
    assert_int_equal(rrpc_tcp_rx_resume(&f->rx), RRPC_TCP_RX_PAUSE);
    /* room: the first goes on, holding its 300 KiB until it is whole */
    budget_room = 1024 * KIB;
    assert_int_equal(rrpc_tcp_rx_resume(&f->rx), RRPC_TCP_RX_READ);
    assert_int_equal(budget_held, 300 * KIB);
    assert_int_equal(feed(f, &st, &off, all, 1, 1u << 20), RRPC_TCP_RX_READ);
    assert_int_equal(f->s.nrec, 2);
    check_frame(&f->s.rec[0], RRPCI_T_REQUEST, 1, 300 * KIB);
    check_frame(&f->s.rec[1], RRPCI_T_REQUEST, 2, 200 * KIB);
    assert_int_equal(budget_held, 0);
    /* mid-frame when the machine goes: its budget comes back */
    struct stream st2 = {0};
    frame(&st2, RRPCI_T_REQUEST, 3, 300 * KIB);
    st2.len -= 1000;
    off = 0;
    assert_int_equal(feed(f, &st2, &off, all, 1, 1u << 20), RRPC_TCP_RX_READ);
    assert_int_equal(budget_held, 300 * KIB);
    rrpc_tcp_rx_fini(&f->rx);
    assert_int_equal(budget_held, 0);
    rrpc_tcp_rx_init(&f->rx, &up, &f->s, MAX_MSG);
    free(st.b);
    free(st2.b);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_frames_arrive_whole_when_everything_comes_at_once),
        T(test_frames_arrive_whole_when_read_a_byte_at_a_time),
        T(test_frames_arrive_whole_in_odd_splits_and_small_pieces),
        T(test_a_header_split_across_reads_is_decoded_once_whole),
        T(test_a_small_body_is_read_into_the_read_buffer),
        T(test_a_whole_frame_is_not_admitted_before_it_is_handed_up),
        T(test_a_large_body_comes_into_its_own_buffer_which_is_kept_for_the_next),
        T(test_the_header_after_a_large_payload_is_read_alone),
        T(test_a_large_write_goes_straight_into_its_region),
        T(test_a_write_whose_region_goes_away_is_read_and_dropped),
        T(test_a_refused_large_write_is_read_as_any_frame),
        T(test_a_frame_above_the_maximum_takes_the_connection_down),
        T(test_a_frame_without_admission_keeps_none_of_its_payload),
        T(test_nothing_is_handed_up_after_the_connection_went_away),
        T(test_an_idle_machine_gives_its_buffers_back),
        T(test_a_large_payload_waits_for_the_budget_and_gives_it_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: MIT */
/*
 * fuzz_onesided: the one-sided target (libroce_rpc/core/os_target.c
 * rrpci_os_on_frame, rrpci_region_check): the READ, WRITE and WRITE+notify
 * requests a tcp peer sends, against the regions registered in the
 * context, checked against a model of what a NIC would allow.
 *
 * Each input registers fresh regions on heap buffers of their exact size
 * (ASan sees any access past one), then sends one-sided frames on an
 * in-memory connection (fuzz_core.c) through the core's receive dispatch.
 * After every frame the harness checks, against its own model:
 *  - the answer: one OS_ACK with the frame's id and class, status 0 only
 *    when the key is live, the region allows the access and [addr,
 *    addr+len) lies inside it; RRPC_E_ACCESS otherwise, RRPC_E_TOO_BIG for a
 *    READ above the reader's maximum; a malformed frame (short, or a length
 *    that does not match) takes the connection down instead;
 *  - a READ answer echoes the sub-header and carries the region's bytes;
 *  - every buffer equals the model's copy (a WRITE changed exactly its
 *    bytes, a refused one nothing), and notify ran once, with the
 *    immediate, exactly for accepted WRITEs with the NOTIFY flag.
 *
 * Regions (index: buffer, offset, length, rights):
 *   0: B0 (64 bytes), whole, read+write   1: B1 (1 byte), read+write
 *   2: B2 (4096), whole, write only       3: B3 (100), no remote access
 *   4: B0 + 16, 32 bytes, read only       5: B4 (32), read+write, deregistered
 * Input: byte 0: bits 0-1 the reader's maximum message: 4096, 4121, 65536,
 * 1 MiB; then 16-byte operations:
 *   byte 0  bits 0-1: 0 READ, 1 WRITE, 2 WRITE + NOTIFY, 3 deregister the
 *           region (or register it again: a new key); bits 2-3: class;
 *           bit 4: key ^= (bytes 14-15 | 1); bit 6: READ carries a data
 *           byte / WRITE's sub-header length is off by one; bit 7: the
 *           frame is cut to (byte 15 % 24) bytes
 *   byte 1  region index (mod 6)
 *   2-9     address offset from the region's start, int64 LE
 *   10-13   length, u32 LE      14-15  immediate (u16 LE)
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_core.h"

#define NBUF 5
#define NREG 6
#define OP_SIZE 16
#define WRITE_CAP 65536u

static const size_t buf_len[NBUF] = {64, 1, 4096, 100, 32};
static const struct {
    int buf;
    size_t off, len;
    unsigned access;
} reg_def[NREG] = {
    {0, 0, 64, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE},
    {1, 0, 1, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE},
    {2, 0, 4096, RRPC_ACCESS_REMOTE_WRITE},
    {3, 0, 100, 0},
    {0, 16, 32, RRPC_ACCESS_REMOTE_READ},
    {4, 0, 32, RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE},
};

static uint8_t *bufs[NBUF], *model[NBUF];
static struct {
    rrpc_region *r; /* NULL: deregistered */
    uint64_t key;   /* the last key it had */
} regs[NREG];

/* The answer to the frame in flight. */
static struct {
    int count;
    int cls;
    struct rrpci_hdr h;
    uint8_t *payload;
} ack;
static int notifies;
static uint32_t last_imm;

static void notify_cb(rrpc_conn *c, uint32_t imm, void *user)
{
    notifies++;
    last_imm = imm;
}

static void log_discard(int level, const char *msg, void *user)
{
}

static void on_sent(struct fuzz_memconn *mc, int cls, const struct rrpci_hdr *h,
                    const uint8_t *payload)
{
    if (h->type == RRPCI_T_CREDIT)
        return;
    FUZZ_CHECK(h->type == RRPCI_T_OS_ACK);
    ack.count++;
    ack.cls = cls;
    ack.h = *h;
    free(ack.payload);
    ack.payload = malloc(h->len ? h->len : 1);
    if (!ack.payload)
        abort();
    memcpy(ack.payload, payload, h->len);
}

static uint64_t reg_key(rrpc_region *r, rrpc_conn *c)
{
    rrpc_token t;
    FUZZ_CHECK(rrpc_region_token(r, c, &t) == 0);
    return t.key;
}

__extension__ typedef unsigned __int128 u128;

/* The model's region check: exact arithmetic, no shortcuts. */
static int model_region(uint64_t key, uint64_t addr, uint64_t len, unsigned need)
{
    for (int i = 0; i < NREG; i++) {
        if (!regs[i].r || regs[i].key != key)
            continue;
        if (!(reg_def[i].access & need))
            return -1;
        /* In 128 bits: no wrap-around to reason about. */
        u128 base = (uintptr_t)bufs[reg_def[i].buf] + reg_def[i].off;
        u128 end = base + reg_def[i].len;
        if (addr < base || (u128)addr + len > end)
            return -1;
        return i;
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static rrpc_ctx *ctx;
    static const uint32_t maxes[4] = {4096, 4096 + RRPCI_OS_HDR_SIZE + 1, 65536, 1u << 20};
    if (!ctx) {
        setenv("RRPC_MAX_MSG", "1048576", 0);
        if (rrpc_ctx_create(&ctx))
            abort();
        rrpc_ctx_set_log(ctx, 7, log_discard, NULL);
        rrpc_ctx_set_notify(ctx, notify_cb, NULL);
        for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++)
            if (rrpc_class_set(ctx, c, 0, 1, 4096))
                abort();
    }
    if (n < 1)
        return 0;
    uint32_t peer_max = maxes[d[0] & 3];
    for (int b = 0; b < NBUF; b++) {
        bufs[b] = malloc(buf_len[b]);
        model[b] = malloc(buf_len[b]);
        if (!bufs[b] || !model[b])
            abort();
        for (size_t i = 0; i < buf_len[b]; i++)
            bufs[b][i] = model[b][i] = (uint8_t)(b * 64 + i);
    }
    struct fuzz_memconn mc;
    fuzz_core_enter(ctx);
    fuzz_memconn_open(&mc, ctx, true, NULL, 4096, peer_max);
    mc.on_sent = on_sent;
    FUZZ_CHECK(mc.ups == 1);
    for (int i = 0; i < NREG; i++) {
        FUZZ_CHECK(rrpc_mem_reg(ctx, bufs[reg_def[i].buf] + reg_def[i].off, reg_def[i].len,
                                reg_def[i].access, &regs[i].r) == 0);
        regs[i].key = reg_key(regs[i].r, mc.c);
    }
    rrpc_mem_dereg(regs[5].r);
    regs[5].r = NULL;
    notifies = 0;

    uint8_t *frame = malloc(RRPCI_OS_HDR_SIZE + WRITE_CAP + 1);
    if (!frame)
        abort();
    uint64_t id = 0;
    for (size_t at = 1; at + OP_SIZE <= n && !rrpci_conn_is_down(mc.c); at += OP_SIZE) {
        const uint8_t *op = d + at;
        int kind = op[0] & 3, cls = (op[0] >> 2) & 3, ri = op[1] % NREG;
        if (kind == 3) {
            if (regs[ri].r) {
                rrpc_mem_dereg(regs[ri].r);
                regs[ri].r = NULL;
            } else {
                FUZZ_CHECK(rrpc_mem_reg(ctx, bufs[reg_def[ri].buf] + reg_def[ri].off,
                                        reg_def[ri].len, reg_def[ri].access, &regs[ri].r) == 0);
                regs[ri].key = reg_key(regs[ri].r, mc.c);
            }
            continue;
        }
        bool is_read = kind == 0, notify = kind == 2;
        uint16_t imm = rrpci_get16(op + 14);
        struct rrpci_os_hdr oh = {
            .addr = (uintptr_t)bufs[reg_def[ri].buf] + reg_def[ri].off + rrpci_get64(op + 2),
            .key = regs[ri].key ^ ((op[0] & 16) ? (uint64_t)(imm | 1) : 0),
            .len = rrpci_get32(op + 10),
            .imm = imm,
        };
        size_t data = 0;
        if (is_read)
            data = (op[0] & 64) ? 1 : 0;
        else
            data = oh.len > WRITE_CAP ? WRITE_CAP : oh.len + ((op[0] & 64) ? 1 : 0);
        size_t flen = RRPCI_OS_HDR_SIZE + data;
        if (op[0] & 128)
            flen = op[15] % RRPCI_OS_HDR_SIZE;
        rrpci_os_hdr_encode(&oh, frame);
        for (size_t i = 0; i < data; i++)
            frame[RRPCI_OS_HDR_SIZE + i] = (uint8_t)(id * 31 + i);
        struct rrpci_hdr h = {.version = RRPCI_PROTO_VERSION,
                              .type = is_read ? RRPCI_T_OS_READ : RRPCI_T_OS_WRITE,
                              .cls = (uint8_t)cls,
                              .flags = notify ? RRPCI_F_NOTIFY : 0,
                              .id = ++id,
                              .len = (uint32_t)flen};
        /* What a NIC would do. */
        bool malformed = flen < RRPCI_OS_HDR_SIZE ||
                         (is_read ? flen != RRPCI_OS_HDR_SIZE
                                  : oh.len != flen - RRPCI_OS_HDR_SIZE);
        int want = 0, region = -1;
        if (!malformed) {
            if (is_read && oh.len > peer_max - RRPCI_OS_HDR_SIZE)
                want = RRPC_E_TOO_BIG;
            else if ((region = model_region(oh.key, oh.addr, oh.len,
                                            is_read ? RRPC_ACCESS_REMOTE_READ
                                                    : RRPC_ACCESS_REMOTE_WRITE)) < 0)
                want = RRPC_E_ACCESS;
        }
        uint8_t *exact = malloc(flen ? flen : 1);
        if (!exact)
            abort();
        memcpy(exact, frame, flen);
        ack.count = 0;
        int notifies_before = notifies;
        fuzz_memconn_recv(&mc, cls, &h, exact);
        free(exact);

        if (malformed) {
            FUZZ_CHECK(rrpci_conn_is_down(mc.c) && ack.count == 0);
        } else {
            FUZZ_CHECK(!rrpci_conn_is_down(mc.c));
            FUZZ_CHECK(ack.count == 1 && ack.cls == cls && ack.h.id == id);
            FUZZ_CHECK((int32_t)(uint32_t)ack.h.arg == want);
            if (want == 0 && is_read) {
                struct rrpci_os_hdr back;
                FUZZ_CHECK(ack.h.len == RRPCI_OS_HDR_SIZE + oh.len);
                FUZZ_CHECK(rrpci_os_hdr_decode(ack.payload, ack.h.len, &back) == 0);
                FUZZ_CHECK(back.addr == oh.addr && back.key == oh.key && back.len == oh.len);
                const uint8_t *mine = model[reg_def[region].buf] +
                                      (oh.addr - (uintptr_t)bufs[reg_def[region].buf]);
                FUZZ_CHECK(memcmp(ack.payload + RRPCI_OS_HDR_SIZE, mine, oh.len) == 0);
            } else if (want == 0) {
                FUZZ_CHECK(ack.h.len == 0);
                memcpy(model[reg_def[region].buf] + (oh.addr - (uintptr_t)bufs[reg_def[region].buf]),
                       frame + RRPCI_OS_HDR_SIZE, oh.len);
            } else {
                FUZZ_CHECK(ack.h.len > 0); /* the reason, for the initiator's log */
            }
        }
        FUZZ_CHECK(notifies == notifies_before + (!malformed && want == 0 && notify));
        if (notifies != notifies_before)
            FUZZ_CHECK(last_imm == imm);
        for (int b = 0; b < NBUF; b++)
            FUZZ_CHECK(memcmp(bufs[b], model[b], buf_len[b]) == 0);
    }
    free(frame);
    free(ack.payload);
    ack.payload = NULL;
    fuzz_memconn_close(&mc);
    fuzz_core_leave(ctx);
    for (int i = 0; i < NREG; i++) {
        rrpc_mem_dereg(regs[i].r);
        regs[i].r = NULL;
    }
    for (int b = 0; b < NBUF; b++) {
        free(bufs[b]);
        free(model[b]);
    }
    return 0;
}

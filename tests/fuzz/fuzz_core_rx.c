/* SPDX-License-Identifier: MIT */
/*
 * fuzz_core_rx: the core's receive dispatch (libroce_rpc/core/recv.c
 * rrpci_conn_rx_admit / rrpci_conn_recv, and behind it rpc.c, onesided.c and
 * os_target.c: requests, responses, credits, tickets, keepalives, one-sided
 * frames and their answers) on a connection of an in-memory transport (fuzz_core.c),
 * so that it runs fast and every frame the core sends back is checked.
 *
 * The bytes of each class are parsed as the tcp transport does: 32-byte
 * header (rrpci_hdr_decode; a bad one takes the connection down), then
 * rrpci_conn_rx_admit while the payload is incomplete, and the whole frame
 * to rrpci_conn_recv.  fuzz_tcp_rx feeds the same core through real sockets.
 *
 * Input: byte 0, the connection:
 *   bit 0     passive: the context requires a ticket (FUZZ_TICKET_OK);
 *             active: the connection presents FUZZ_TICKET_OK
 *   bit 1     active (made by this side) instead of passive (accepted)
 *   bits 2-3  credits the peer grants per class: 1, 2, 16, 1000
 *   bit 4     the peer's maximum message: 1 MiB instead of 4096
 * then records, byte c: bits 0-1 the class, bits 2-4 what:
 *   0  bytes on the class: u8 n, n bytes        1  the same with u16 LE n
 *   2  the class's transport is full (-EAGAIN)  3  it has room again
 *   4  the loop is about to sleep (explicit CREDIT frames go)
 *   5  the connect timer fires (if running: ticket wait, refusal, close)
 *   6  the oldest deferred request is answered  7  the application closes
 * Checks (fuzz_core.c, on every frame sent): a valid header within the
 * peer's maximum, on its class, never after the connection was closed,
 * never beyond the peer's credit, credit returned only for frames received;
 * UP and DOWN each at most once, DOWN only after UP; and here: no
 * handshake frame, ERROR and TICKET_ACK only from the passive side, TICKET
 * only from the active side.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_core.h"

struct stream {
    uint8_t buf[65536 + RRPCI_HDR_SIZE];
    size_t len;
    bool have_hdr, admitted;
    struct rrpci_hdr h;
};

static struct stream streams[RRPCI_MAX_CLASSES];

static void on_sent(struct fuzz_memconn *mc, int cls, const struct rrpci_hdr *h,
                    const uint8_t *payload)
{
    bool passive = mc->c->passive;
    FUZZ_CHECK(h->type != RRPCI_T_HELLO && h->type != RRPCI_T_HELLO_ACK &&
               h->type != RRPCI_T_JOIN && h->type != RRPCI_T_JOIN_ACK);
    if (h->type == RRPCI_T_ERROR || h->type == RRPCI_T_TICKET_ACK)
        FUZZ_CHECK(passive);
    if (h->type == RRPCI_T_TICKET)
        FUZZ_CHECK(!passive && cls == RRPCI_CLS_CONTROL);
}

/* Parses what @s holds; false when the connection went down. */
static bool parse(struct fuzz_memconn *mc, int cls, struct stream *s)
{
    size_t off = 0;
    bool alive = true;
    while (alive) {
        if (!s->have_hdr) {
            if (s->len - off < RRPCI_HDR_SIZE)
                break;
            const char *why = NULL;
            int r = rrpci_hdr_decode(s->buf + off, rrpci_ctx_max_msg(mc->ctx), &s->h, &why);
            if (r < 0) {
                rrpci_conn_down(mc->c, r, why);
                alive = false;
                break;
            }
            off += RRPCI_HDR_SIZE;
            s->have_hdr = true;
            s->admitted = false;
        }
        if (s->len - off < s->h.len) {
            if (!s->admitted) {
                s->admitted = true;
                if (rrpci_conn_rx_admit(mc->c, cls, &s->h))
                    alive = false;
            }
            break;
        }
        /* An exact copy: ASan sees a read past the payload. */
        uint8_t *p = malloc(s->h.len ? s->h.len : 1);
        if (!p)
            abort();
        memcpy(p, s->buf + off, s->h.len);
        off += s->h.len;
        s->have_hdr = false;
        fuzz_memconn_recv(mc, cls, &s->h, p);
        free(p);
        alive = !rrpci_conn_is_down(mc->c);
    }
    memmove(s->buf, s->buf + off, s->len - off);
    s->len -= off;
    return alive;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static rrpc_ctx *open_ctx, *ticket_ctx;
    static const uint32_t grants[4] = {1, 2, 16, 1000};
    if (!open_ctx) {
        open_ctx = fuzz_core_ctx(false);
        ticket_ctx = fuzz_core_ctx(true);
    }
    if (n < 1)
        return 0;
    uint8_t mode = d[0];
    bool passive = !(mode & 2);
    rrpc_ctx *ctx = passive && (mode & 1) ? ticket_ctx : open_ctx;
    struct fuzz_memconn mc;
    memset(streams, 0, sizeof(streams));
    fuzz_core_enter(ctx);
    fuzz_memconn_open(&mc, ctx, passive, !passive && (mode & 1) ? FUZZ_TICKET_OK : NULL,
                      grants[(mode >> 2) & 3], mode & 16 ? 1u << 20 : 4096);
    mc.on_sent = on_sent;
    size_t i = 1;
    while (i < n && !rrpci_conn_is_down(mc.c)) {
        uint8_t c = d[i++];
        int cls = c & 3;
        struct stream *s = &streams[cls];
        switch ((c >> 2) & 7) {
        case 0:
        case 1: {
            size_t want = 0;
            if (((c >> 2) & 7) == 0) {
                want = i < n ? d[i] : 0;
                i += 1;
            } else {
                want = i + 1 < n ? rrpci_get16(d + i) : 0;
                i += 2;
            }
            if (i > n)
                break;
            if (want > n - i)
                want = n - i;
            if (want > sizeof(s->buf) - s->len)
                want = sizeof(s->buf) - s->len;
            memcpy(s->buf + s->len, d + i, want);
            s->len += want;
            i += want;
            parse(&mc, cls, s);
            break;
        }
        case 2:
            fuzz_memconn_block(&mc, cls, true);
            break;
        case 3:
            fuzz_memconn_block(&mc, cls, false);
            break;
        case 4:
            rrpci_credit_return(ctx);
            break;
        case 5:
            /* the state's timer fires now: setup deadline, or close due */
            if (rrpci_timer_active(&mc.c->setup_timer)) {
                rrpci_timer_stop(&mc.c->setup_timer);
                mc.c->setup_timer.cb(&mc.c->setup_timer);
            } else if (rrpci_timer_active(&mc.c->close_timer)) {
                rrpci_timer_stop(&mc.c->close_timer);
                mc.c->close_timer.cb(&mc.c->close_timer);
            }
            break;
        case 6:
            fuzz_core_answer_deferred();
            break;
        case 7:
            if (rrpci_conn_accepts_calls(mc.c)) {
                /* rrpc_conn_close would wait for the loop: its effect. */
                rrpci_conn_ref(mc.c);
                fuzz_core_leave(ctx);
                rrpc_conn_close(mc.c);
                fuzz_core_enter(ctx);
                rrpci_conn_unref(mc.c);
            }
            break;
        }
    }
    fuzz_core_end_input();
    fuzz_memconn_close(&mc);
    fuzz_core_leave(ctx);
    return 0;
}

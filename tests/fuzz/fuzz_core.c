/* SPDX-License-Identifier: MIT */
/* The context and the in-memory transport of the core harnesses (fuzz_core.h). */
#include "fuzz_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- the context ----------------------------------------------------------- */

#define MAX_DEFERRED 64
static rrpc_request *deferred[MAX_DEFERRED];
static int n_deferred;
static uint8_t *region_mem;

static void log_discard(int level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    (void)user;
}

static void notify_cb(rrpc_conn *c, uint32_t imm, void *user)
{
    (void)c;
    (void)imm;
    (void)user;
}

static int ticket_cb(void *user, const void *ticket, size_t len, char *why, size_t whylen)
{
    (void)user;
    if (len == strlen(FUZZ_TICKET_OK) && memcmp(ticket, FUZZ_TICKET_OK, len) == 0)
        return 0;
    snprintf(why, whylen, "not the fuzz ticket (%zu bytes)", len);
    return RRPC_E_TICKET;
}

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond(req, p, len);
}

static void h_fail(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_respond_error(req, 7, "failed on purpose");
}

static void h_defer(rrpc_request *req, const void *p, size_t len, void *user)
{
    if (n_deferred == MAX_DEFERRED) {
        rrpc_respond(req, NULL, 0);
        return;
    }
    deferred[n_deferred++] = req;
}

static void call_done(const rrpc_result *res, void *user)
{
    FUZZ_CHECK(res->status != 0 || res->len == 0 || res->data);
    FUZZ_CHECK(res->message != NULL);
}

static void h_call(rrpc_request *req, const void *p, size_t len, void *user)
{
    rrpc_call_opts o = {.qos_class = rrpc_request_class(req)};
    int r = rrpc_call(rrpc_request_conn(req), "back", p, len, &o, call_done, NULL);
    if (r)
        rrpc_respond_error(req, 8, "call failed");
    else
        rrpc_respond(req, NULL, 0);
}

static void op_done(int status, void *user)
{
    (void)status;
    (void)user;
}

static void onesided(rrpc_request *req, const void *p, size_t len, bool is_read,
                     rrpc_region *local_region)
{
    const uint8_t *b = p;
    rrpc_token t;
    if (len != RRPC_TOKEN_SIZE + 17 || rrpc_token_decode(b, RRPC_TOKEN_SIZE, &t)) {
        rrpc_respond_error(req, 9, "want a token, u32 local offset, u32 length, u64 offset, u8");
        return;
    }
    b += RRPC_TOKEN_SIZE;
    uint32_t local_off = rrpci_get32(b), n = rrpci_get32(b + 4);
    uint64_t remote_off = rrpci_get64(b + 8);
    rrpc_op_opts o = {.qos_class = rrpc_request_class(req), .notify = b[16] & 1, .imm = 0x5a};
    int r = (is_read ? rrpc_read : rrpc_write)(rrpc_request_conn(req), local_region, local_off,
                                               &t, remote_off, n, &o, op_done, NULL);
    if (r)
        rrpc_respond_error(req, 10, "refused locally");
    else
        rrpc_respond(req, NULL, 0);
}

static void h_read(rrpc_request *req, const void *p, size_t len, void *user)
{
    onesided(req, p, len, true, user);
}

static void h_write(rrpc_request *req, const void *p, size_t len, void *user)
{
    onesided(req, p, len, false, user);
}

bool fuzz_core_answer_deferred(void)
{
    if (!n_deferred)
        return false;
    rrpc_request *req = deferred[0];
    memmove(deferred, deferred + 1, (size_t)(--n_deferred) * sizeof(*deferred));
    rrpc_respond(req, "late", 4);
    return true;
}

void fuzz_core_end_input(void)
{
    while (fuzz_core_answer_deferred())
        ;
}

/* The target regions: one mapping, guard pages between the regions. */
static void map_regions(void)
{
    size_t len = FUZZ_REGION_PAGES * FUZZ_PAGE;
    void *p = mmap((void *)(uintptr_t)FUZZ_REGION_BASE, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && p != (void *)(uintptr_t)FUZZ_REGION_BASE) {
        munmap(p, len); /* an old kernel took the address as a hint */
        p = MAP_FAILED;
    }
    if (p == MAP_FAILED) {
        fprintf(stderr, "fuzz: 0x%llx is taken; the target regions are elsewhere\n",
                FUZZ_REGION_BASE);
        p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            abort();
    }
    region_mem = p;
    for (int page = 1; page < FUZZ_REGION_PAGES; page += 2) {
        if (mprotect(region_mem + page * FUZZ_PAGE, FUZZ_PAGE, PROT_READ | PROT_WRITE))
            abort();
        memset(region_mem + page * FUZZ_PAGE, 0x40 + page, FUZZ_PAGE);
    }
}

/* Registers @len bytes at @addr and gives the region the fixed key @key. */
static rrpc_region *reg_keyed(rrpc_ctx *ctx, void *addr, size_t len, unsigned access, uint64_t key)
{
    rrpc_region *r;
    if (rrpc_mem_reg(ctx, addr, len, access, &r))
        abort();
    rrpci_lock(ctx);
    rrpci_idmap_del(&ctx->regions, r->node.key);
    if (rrpci_idmap_put(&ctx->regions, key, &r->node))
        abort();
    rrpci_unlock(ctx);
    return r;
}

rrpc_ctx *fuzz_core_ctx(bool ticket)
{
    /* Small enough that a fuzzed length is cheap, large enough for the
     * transports' large-message paths. */
    setenv("RRPC_MAX_MSG", "1048576", 0);
    rrpc_ctx *ctx;
    if (rrpc_ctx_create(&ctx))
        abort();
    rrpc_ctx_set_log(ctx, 7, log_discard, NULL);
    rrpc_ctx_set_notify(ctx, notify_cb, NULL);
    if (ticket && rrpc_ctx_require_ticket(ctx, ticket_cb, NULL))
        abort();
    rrpc_region *local;
    void *mem = calloc(1, FUZZ_LOCAL_LEN);
    if (!mem || rrpc_mem_reg(ctx, mem, FUZZ_LOCAL_LEN,
                             RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, &local))
        abort();
    if (rrpc_register(ctx, "echo", h_echo, NULL) || rrpc_register(ctx, "fail", h_fail, NULL) ||
        rrpc_register(ctx, "defer", h_defer, NULL) || rrpc_register(ctx, "call", h_call, NULL) ||
        rrpc_register(ctx, "read", h_read, local) || rrpc_register(ctx, "write", h_write, local))
        abort();
    if (!region_mem)
        map_regions();
    reg_keyed(ctx, region_mem + 1 * FUZZ_PAGE, FUZZ_PAGE,
              RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, FUZZ_REGION_RW_KEY);
    reg_keyed(ctx, region_mem + 3 * FUZZ_PAGE, FUZZ_PAGE, RRPC_ACCESS_REMOTE_READ,
              FUZZ_REGION_RO_KEY);
    reg_keyed(ctx, region_mem + 5 * FUZZ_PAGE, FUZZ_PAGE, RRPC_ACCESS_REMOTE_WRITE,
              FUZZ_REGION_WO_KEY);
    reg_keyed(ctx, region_mem + 8 * FUZZ_PAGE - 1, 1,
              RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE, FUZZ_REGION_TINY_KEY);
    rrpc_mem_dereg(reg_keyed(ctx, region_mem + 1 * FUZZ_PAGE, FUZZ_PAGE,
                             RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE,
                             FUZZ_REGION_GONE_KEY));
    return ctx;
}

void fuzz_core_enter(rrpc_ctx *ctx)
{
    rrpci_lock(ctx);
    ctx->in_run++;
    ctx->owner = pthread_self();
}

void fuzz_core_leave(rrpc_ctx *ctx)
{
    ctx->in_run--;
    pthread_mutex_unlock(&ctx->lock);
}

/* ---- the in-memory transport ------------------------------------------------ */

static struct fuzz_memconn *mc_of(rrpc_conn *c)
{
    return *(struct fuzz_memconn **)rrpci_conn_priv(c);
}

static int mem_listen(rrpc_listener *l, const struct rrpci_uri *u)
{
    return -EOPNOTSUPP;
}

static void mem_listener_close(rrpc_listener *l)
{
}

static int mem_connect(rrpc_conn *c, const struct rrpci_uri *u)
{
    return -EOPNOTSUPP;
}

/* Every frame the core sends: a header "the peer" accepts, on its class,
 * within the peer's credit and size limits. */
static int mem_send(rrpc_conn *c, int cls, struct rrpci_msg *m)
{
    struct fuzz_memconn *mc = mc_of(c);
    FUZZ_CHECK(!mc->closed);
    FUZZ_CHECK(cls >= 0 && cls < RRPCI_MAX_CLASSES);
    if (mc->blocked[cls])
        return -EAGAIN;
    struct rrpci_hdr h;
    const char *why = NULL;
    FUZZ_CHECK(rrpci_hdr_decode(m->hdr, mc->peer_max, &h, &why) == 0);
    FUZZ_CHECK(h.cls == cls);
    FUZZ_CHECK(h.len == rrpci_msg_payload_len(m));
    if (!rrpci_type_is_exempt(h.type)) {
        mc->sent[cls]++;
        FUZZ_CHECK((int64_t)mc->sent[cls] <= mc->grant[cls] + (int64_t)mc->returned[cls]);
    }
    mc->got_back[cls] += h.credits;
    FUZZ_CHECK(mc->got_back[cls] <= mc->delivered[cls]);
    uint8_t *p = malloc(h.len ? h.len : 1);
    if (!p)
        abort();
    memcpy(p, m->data, m->len);
    if (m->ext_len)
        memcpy(p + m->len, m->ext, m->ext_len);
    if (mc->on_sent)
        mc->on_sent(mc, cls, &h, p);
    free(p);
    rrpci_msg_free(m);
    return 0;
}

static void mem_conn_close(rrpc_conn *c)
{
    mc_of(c)->closed = true;
}

static int mem_peer_name(rrpc_conn *c, char *buf, size_t len)
{
    snprintf(buf, len, "fuzz-peer:1");
    return 0;
}

static const struct rrpci_transport_ops mem_ops = {
    .version = RRPCI_TRANSPORT_OPS_VERSION,
    .name = "fuzz-mem",
    .scheme = "fuzz-mem",
    .conn_priv_size = sizeof(struct fuzz_memconn *),
    .listen = mem_listen,
    .listener_close = mem_listener_close,
    .connect = mem_connect,
    .send = mem_send,
    .conn_close = mem_conn_close,
    .peer_name = mem_peer_name,
};

static void conn_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    struct fuzz_memconn *mc = user;
    if (ev == RRPC_CONN_UP) {
        FUZZ_CHECK(mc->ups == 0 && mc->downs == 0);
        mc->ups++;
    } else {
        FUZZ_CHECK(ev == RRPC_CONN_DOWN && mc->ups == 1 && mc->downs == 0);
        mc->downs++;
    }
}

void fuzz_memconn_open(struct fuzz_memconn *mc, rrpc_ctx *ctx, bool passive, const char *ticket,
                       uint32_t grant, uint32_t peer_max)
{
    memset(mc, 0, sizeof(*mc));
    mc->ctx = ctx;
    mc->peer_max = peer_max;
    mc->l.ctx = ctx;
    mc->l.ops = &mem_ops;
    mc->l.fn = conn_event;
    mc->l.user = mc;
    rrpc_conn *c = NULL;
    char why[200];
    if (rrpci_listener_accept(&mc->l, NULL, &c, why, sizeof(why)) < 0)
        abort();
    c->passive = passive;
    *(struct fuzz_memconn **)rrpci_conn_priv(c) = mc;
    rrpci_conn_ref(c);
    mc->c = c;
    if (!passive && ticket) {
        c->ticket_len = strlen(ticket);
        c->ticket = malloc(c->ticket_len);
        if (!c->ticket)
            abort();
        memcpy(c->ticket, ticket, c->ticket_len);
    }
    struct rrpci_hello peer = {.version = RRPCI_PROTO_VERSION, .nclasses = RRPCI_MAX_CLASSES,
                               .max_msg = peer_max};
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++) {
        peer.credits[i] = (uint16_t)grant;
        mc->grant[i] = grant;
    }
    FUZZ_CHECK(rrpci_conn_hello_peer(c, &peer) == 0);
    rrpci_conn_established(c);
}

void fuzz_memconn_recv(struct fuzz_memconn *mc, int cls, const struct rrpci_hdr *h,
                       const uint8_t *payload)
{
    rrpc_conn *c = mc->c;
    /* What the core counts (rrpci_conn_recv): credits only past the ticket
     * check and on the frame's own class. */
    if (rrpci_conn_authenticated(c) && h->cls == cls) {
        mc->returned[cls] += h->credits;
        if (!rrpci_type_is_exempt(h->type))
            mc->delivered[cls]++;
        /* A LEND the core takes (recv.c, credit.c) changes the grant before
         * the core sends what waited for it; one it refuses takes the
         * connection down, after which nothing credited goes. */
        if (h->type == RRPCI_T_LEND && !h->id && !h->credits && h->arg <= 0xffffffffu) {
            int64_t g = mc->grant[cls] + (int32_t)(uint32_t)h->arg;
            if (g != mc->grant[cls] && g >= 1 && g <= RRPCI_CREDIT_MAX)
                mc->grant[cls] = g;
        }
    }
    rrpci_conn_recv(c, cls, h, payload);
}

void fuzz_memconn_block(struct fuzz_memconn *mc, int cls, bool blocked)
{
    mc->blocked[cls] = blocked;
    if (!blocked && !rrpci_conn_is_down(mc->c))
        rrpci_conn_writable(mc->c, cls);
}

void fuzz_memconn_close(struct fuzz_memconn *mc)
{
    if (!rrpci_conn_is_down(mc->c))
        rrpci_conn_down(mc->c, RRPC_E_CLOSED, "end of the fuzz input");
    FUZZ_CHECK(mc->closed);
    FUZZ_CHECK(mc->downs == mc->ups);
    rrpci_conn_unref(mc->c);
    mc->c = NULL;
}

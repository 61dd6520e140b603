/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport connects a class's queue pair on its first use
 * (transport/verbs/cm.c, docs/protocol.md 14): an RPC-only connection holds
 * one QP and one class's receive buffers on each side; a class the client
 * uses first is connected by the client, one the server uses first is
 * asked for by the server; a REQ naming a connection's cookie from another
 * address, or naming no connection, is refused and leaves the connection
 * up; a connection frame (keepalive) on a class's QP other than the first
 * closes the connection (RRPC_E_PROTO); a class whose QP the peer does not
 * connect in time takes the
 * connection down at RRPC_AUTH_TIMEOUT_MS; with one peer stalled in its
 * own loop (it reads nothing, acknowledges no take-back), lending to three
 * others and taking it back round after round draws no RNR NAK on any
 * device, and what stays lent is the stalled peer's share, at most one
 * peer's.  Over rdma:// only: run inside
 * the Soft-RoCE VM with
 *   tests/softroce/run-suite.sh BUILD tests/unit/test_verbs_classes
 * elsewhere it skips (exit 77).  The QPs are read from the transport's own
 * state (struct vb_conn) under the context's lock.
 */
#include <glob.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "../common/test_uri.h"
#include "core/core.h"
#include "transport/verbs/verbs_int.h"

static void echo(rrpc_request *req, const void *p, size_t n, void *user)
{
    (void)user;
    rrpc_respond(req, p, n);
}

static void hold(rrpc_request *req, const void *p, size_t n, void *user)
{
    (void)p;
    (void)n;
    (void)user;
    usleep(1500 * 1000); /* on the server's loop thread: nothing else runs */
    rrpc_respond(req, NULL, 0);
}

static struct {
    pthread_mutex_t mu;
    rrpc_conn *srv_conn;
    int downs, last_reason;   /* the client's connection */
    int srv_downs, srv_reason; /* the server's */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void srv_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)user;
    pthread_mutex_lock(&S.mu);
    if (ev == RRPC_CONN_UP) {
        S.srv_conn = c;
    } else {
        S.srv_downs++;
        S.srv_reason = reason;
        if (S.srv_conn == c)
            S.srv_conn = NULL;
    }
    pthread_mutex_unlock(&S.mu);
}

/* Waits up to @ms for *@downs (a field of S) to be non-zero; returns it,
 * with the reason in *@reason. */
static int wait_down(const int *downs, const int *reason_field, int ms, int *reason)
{
    int n = 0;
    for (int i = 0; i < ms / 10 && !n; i++) {
        pthread_mutex_lock(&S.mu);
        n = *downs;
        *reason = *reason_field;
        pthread_mutex_unlock(&S.mu);
        if (!n)
            usleep(10 * 1000);
    }
    return n;
}

static void cli_event(rrpc_conn *c, rrpc_conn_event ev, int reason, void *user)
{
    (void)c;
    (void)user;
    if (ev != RRPC_CONN_DOWN)
        return;
    pthread_mutex_lock(&S.mu);
    S.downs++;
    S.last_reason = reason;
    pthread_mutex_unlock(&S.mu);
}

struct pair {
    rrpc_ctx *srv, *cli;
    rrpc_listener *l;
    rrpc_conn *c, *sc;
    char uri[128];
};

static void pair_open(struct pair *p, const char *auth_timeout_ms)
{
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    if (auth_timeout_ms)
        assert_int_equal(rrpc_config_set(cfg, "RRPC_AUTH_TIMEOUT_MS", auth_timeout_ms), 0);
    /* "hold" holds the server's loop on purpose: no other thread takes the
     * loop over from it (core/relief.c). */
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_RELIEF_MS", "0"), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &p->srv), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &p->cli), 0);
    rrpc_config_destroy(cfg);
    assert_int_equal(rrpc_register(p->srv, "echo", echo, NULL), 0);
    assert_int_equal(rrpc_register(p->srv, "hold", hold, NULL), 0);
    assert_int_equal(rrpc_register(p->cli, "echo", echo, NULL), 0);
    test_listen_uri(p->uri, sizeof(p->uri));
    S.srv_conn = NULL;
    S.downs = S.srv_downs = 0;
    assert_int_equal(rrpc_listen(p->srv, p->uri, srv_event, NULL, &p->l), 0);
    assert_int_equal(rrpc_ctx_start_thread(p->srv), 0);
    assert_int_equal(rrpc_ctx_start_thread(p->cli), 0);
    test_connect_uri(p->uri, sizeof(p->uri), rrpc_listener_port(p->l));
    int rc = rrpc_connect_sync(p->cli, p->uri, 10000, cli_event, NULL, &p->c);
    if (rc)
        fail_msg("connect: %s", rrpc_ctx_last_error(p->cli));
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&S.mu);
        p->sc = S.srv_conn;
        pthread_mutex_unlock(&S.mu);
        if (p->sc)
            break;
        usleep(10 * 1000);
    }
    assert_non_null(p->sc);
}

static void pair_close(struct pair *p)
{
    rrpc_conn_close(p->c);
    rrpc_listener_close(p->l);
    rrpc_ctx_destroy(p->cli);
    rrpc_ctx_destroy(p->srv);
}

/* Counts the calls answered with "0123456789" (any thread); fails on others. */
static void count_cb(const rrpc_result *res, void *user)
{
    if (res->status != 0 || res->len != 10)
        fprintf(stderr, "a pipelined call failed: %d %s\n", res->status,
                res->message ? res->message : "");
    else
        __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST);
}

/* @n echo calls in flight at once on @c, every one answered (30 s at most). */
static void echo_burst(rrpc_conn *c, const rrpc_call_opts *o, int n)
{
    int done = 0;
    for (int i = 0; i < n; i++)
        assert_int_equal(rrpc_call(c, "echo", "0123456789", 10, o, count_cb, &done), 0);
    for (int i = 0; i < 3000 && __atomic_load_n(&done, __ATOMIC_SEQ_CST) < n; i++)
        usleep(10000);
    assert_int_equal(__atomic_load_n(&done, __ATOMIC_SEQ_CST), n);
}

static void call_ok(rrpc_conn *c, rrpc_ctx *ctx, int cls)
{
    rrpc_call_opts o = {.qos_class = cls};
    void *out = NULL;
    size_t n = 0;
    int rc = rrpc_call_sync(c, "echo", "0123456789", 10, &o, &out, &n);
    if (rc)
        fail_msg("echo on class %d: %s", cls, rrpc_ctx_last_error(ctx));
    assert_int_equal(n, 10);
    assert_memory_equal(out, "0123456789", 10);
    free(out);
}

/* Which classes of @c have a QP established, as a bit mask of internal
 * class indexes, and the bytes of receive buffers they registered (for the
 * first grant, and what lent credit added). */
static unsigned qps(rrpc_ctx *ctx, rrpc_conn *c, size_t *pool)
{
    unsigned mask = 0;
    size_t bytes = 0;
    rrpci_lock(ctx);
    struct vb_conn *vc = vb_vc(c);
    assert_non_null(vc);
    for (int i = 0; i < VB_NCLS; i++) {
        if (vc->q[i].state == VB_QP_ESTABLISHED)
            mask |= 1u << i;
        bytes += vc->q[i].pool_len;
    }
    rrpci_unlock(ctx);
    if (pool)
        *pool = bytes;
    return mask;
}

static unsigned wait_qps(rrpc_ctx *ctx, rrpc_conn *c, unsigned want)
{
    unsigned got = 0;
    for (int i = 0; i < 500 && (got = qps(ctx, c, NULL)) != want; i++)
        usleep(10 * 1000);
    return got;
}

#define FIRST (1u << VB_FIRST)

static void test_an_rpc_only_connection_holds_one_queue_pair_on_each_side(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, NULL);
    for (int i = 0; i < 20; i++)
        call_ok(p.c, p.cli, RRPC_CLASS_LOW_LATENCY);
    size_t cpool = 0, spool = 0;
    assert_int_equal(qps(p.cli, p.c, &cpool), FIRST);
    assert_int_equal(wait_qps(p.srv, p.sc, FIRST), FIRST);
    qps(p.srv, p.sc, &spool);
    printf("# one class: %zu bytes of receive buffers on the client, %zu on the server\n", cpool,
           spool);
    /* One class's buffers, not four classes', and for the first grant
     * (RRPC_CREDIT_BASE, 4): calls one at a time never use it all, so no
     * credit is lent. */
    int cr = 0;
    rrpc_class_get(p.cli, RRPC_CLASS_LOW_LATENCY, NULL, NULL, &cr);
    size_t reserve = VB_EXEMPT_RESERVE + VB_NASK_RESERVE + VB_NCREDIT_RESERVE + VB_SPARE +
                     VB_FIRST_RESERVE,
           bsz = vb_bsz(vb_vx(p.cli));
    uint32_t first = rrpci_ctx_class_first_grant(p.cli, VB_FIRST);
    assert_int_equal(first, 4);
    assert_int_equal(cpool, (first + reserve) * bsz);
    assert_int_equal(spool, (first + reserve) * bsz);
    /* 300 calls in flight at once: the server lends the client credit up
     * to the class's (4 -> 8 -> 16 -> 32 -> 64), its receive buffers made
     * before each LEND; they stay after the credit is taken back. */
    echo_burst(p.c, NULL, 300);
    qps(p.srv, p.sc, &spool);
    printf("# after 300 calls in flight: %zu bytes of receive buffers on the server\n", spool);
    assert_int_equal(spool, ((size_t)cr + reserve) * bsz);
    /* No buffers for rendezvous answers until a side first sends a payload
     * above the eager limit: then VB_RNDV_MAX, once. */
    size_t c0 = 0, s0 = spool;
    qps(p.cli, p.c, &c0);
    size_t big = vb_vx(p.cli)->eager + 1000;
    char *payload = malloc(big);
    assert_non_null(payload);
    memset(payload, 'r', big);
    for (int i = 0; i < 2; i++) {
        void *out = NULL;
        size_t n = 0;
        assert_int_equal(rrpc_call_sync(p.c, "echo", payload, big, NULL, &out, &n), 0);
        assert_int_equal(n, big);
        assert_memory_equal(out, payload, big);
        free(out);
    }
    free(payload);
    qps(p.cli, p.c, &cpool);
    qps(p.srv, p.sc, &spool);
    printf("# after two %zu-byte echoes: +%zu bytes of receive buffers on the client, +%zu on "
           "the server\n",
           big, cpool - c0, spool - s0);
    assert_int_equal(cpool - c0, VB_RNDV_MAX * bsz);
    assert_int_equal(spool - s0, VB_RNDV_MAX * bsz);
    pair_close(&p);
}

static void test_a_class_is_connected_by_its_first_use_from_either_side(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, NULL);
    call_ok(p.c, p.cli, RRPC_CLASS_LOW_LATENCY);
    /* The client uses bulk first: it connects bulk's QP. */
    call_ok(p.c, p.cli, RRPC_CLASS_BULK);
    unsigned both = FIRST | (1u << RRPCI_CLS_BULK);
    assert_int_equal(qps(p.cli, p.c, NULL), both);
    assert_int_equal(wait_qps(p.srv, p.sc, both), both);
    /* The server uses background first: it asks the client for it. */
    call_ok(p.sc, p.srv, RRPC_CLASS_BACKGROUND);
    unsigned three = both | (1u << RRPCI_CLS_BACKGROUND);
    assert_int_equal(qps(p.srv, p.sc, NULL), three);
    assert_int_equal(wait_qps(p.cli, p.c, three), three);
    /* Each class's QP carries its DSCP. */
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
        int want = -1, got = -2;
        rrpc_class_get(p.cli, k, &want, NULL, NULL);
        assert_int_equal(rrpc_conn_class_dscp(p.c, k, &got), 0);
        assert_int_equal(got, want);
    }
    /* And all of them still work, both ways. */
    for (int k = RRPC_CLASS_FIRST; k <= RRPC_CLASS_LAST; k++) {
        call_ok(p.c, p.cli, k);
        call_ok(p.sc, p.srv, k);
    }
    pthread_mutex_lock(&S.mu);
    int downs = S.downs;
    pthread_mutex_unlock(&S.mu);
    assert_int_equal(downs, 0);
    pair_close(&p);
}

/* A queue pair of our own, made by hand like a roce-rpc peer's. */
struct forged {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    enum rdma_cm_event_type ev; /* what answered its REQ */
};

/* A REQ for class @cls with @cookie, from a cm_id bound to @src, to the
 * server of @p; f->ev says what answered it. */
static void forged_open(struct forged *f, struct pair *p, const char *src, int cls,
                        uint64_t cookie)
{
    memset(f, 0, sizeof(*f));
    f->ch = rdma_create_event_channel();
    assert_non_null(f->ch);
    assert_int_equal(rdma_create_id(f->ch, &f->id, NULL, RDMA_PS_TCP), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET}, da = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &sa.sin_addr);
    inet_pton(AF_INET, test_server_addr(), &da.sin_addr);
    da.sin_port = htons((uint16_t)rrpc_listener_port(p->l));
    f->ev = RDMA_CM_EVENT_ADDR_ERROR;
    struct rdma_cm_event *e = NULL;
    if (rdma_resolve_addr(f->id, (struct sockaddr *)&sa, (struct sockaddr *)&da, 2000) ||
        rdma_get_cm_event(f->ch, &e))
        return;
    f->ev = e->event;
    rdma_ack_cm_event(e);
    if (f->ev != RDMA_CM_EVENT_ADDR_RESOLVED || rdma_resolve_route(f->id, 2000) ||
        rdma_get_cm_event(f->ch, &e))
        return;
    f->ev = e->event;
    rdma_ack_cm_event(e);
    if (f->ev != RDMA_CM_EVENT_ROUTE_RESOLVED)
        return;
    f->pd = ibv_alloc_pd(f->id->verbs);
    f->cq = ibv_create_cq(f->id->verbs, 8, NULL, NULL, 0);
    assert_non_null(f->pd);
    assert_non_null(f->cq);
    struct ibv_qp_init_attr qa = {.send_cq = f->cq, .recv_cq = f->cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
                                          .max_recv_sge = 1, .max_inline_data = 64}};
    assert_int_equal(rdma_create_qp(f->id, f->pd, &qa), 0);
    /* The private data a roce-rpc peer sends for that class and cookie. */
    struct vb_conn fake;
    memset(&fake, 0, sizeof(fake));
    rrpci_lock(p->cli);
    fake.hello = vb_vc(p->c)->hello;
    rrpci_unlock(p->cli);
    fake.cookie = cookie;
    uint8_t pdata[VB_PD_SIZE];
    vb_pd_encode(&fake, cls, pdata);
    struct rdma_conn_param cp = {.private_data = pdata, .private_data_len = VB_PD_SIZE,
                                 .responder_resources = 1, .initiator_depth = 1,
                                 .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(f->id, &cp) || rdma_get_cm_event(f->ch, &e))
        return;
    f->ev = e->event;
    rdma_ack_cm_event(e);
}

static void forged_close(struct forged *f)
{
    if (f->id && f->id->qp)
        rdma_destroy_qp(f->id);
    if (f->cq)
        ibv_destroy_cq(f->cq);
    if (f->pd)
        ibv_dealloc_pd(f->pd);
    if (f->id)
        rdma_destroy_id(f->id);
    rdma_destroy_event_channel(f->ch);
}

static enum rdma_cm_event_type forged_req(struct pair *p, const char *src, int cls,
                                          uint64_t cookie)
{
    struct forged f;
    forged_open(&f, p, src, cls, cookie);
    enum rdma_cm_event_type ev = f.ev;
    forged_close(&f);
    return ev;
}

/* The client's address in the VM (RRPC_TEST_CLIENT_SRC); skips without it. */
static const char *client_src(void)
{
    const char *src = test_env("RRPC_TEST_CLIENT_SRC", NULL);
    if (!src) {
        printf("# skipped: needs RRPC_TEST_CLIENT_SRC (the client's address in the VM)\n");
        skip();
    }
    return src;
}

/* A pair whose connection got a bulk QP of our own making, from the
 * client's address @src with the connection's cookie: attached, as the
 * peer's own would be. */
static void pair_with_forged_bulk(struct pair *p, struct forged *f, const char *src)
{
    pair_open(p, NULL);
    call_ok(p->c, p->cli, RRPC_CLASS_LOW_LATENCY);
    rrpci_lock(p->cli);
    uint64_t cookie = vb_vc(p->c)->cookie;
    rrpci_unlock(p->cli);
    forged_open(f, p, src, RRPCI_CLS_BULK, cookie);
    printf("# bulk's QP from %s with the cookie: %s\n", src, rdma_event_str(f->ev));
    assert_int_equal(f->ev, RDMA_CM_EVENT_ESTABLISHED);
}

static void test_a_queue_pair_naming_another_peers_connection_is_refused(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, NULL);
    call_ok(p.c, p.cli, RRPC_CLASS_LOW_LATENCY);
    rrpci_lock(p.cli);
    uint64_t cookie = vb_vc(p.c)->cookie;
    rrpci_unlock(p.cli);
    /* The connection's cookie, from the server's own address (another
     * host than the client's): refused. */
    enum rdma_cm_event_type e = forged_req(&p, test_server_addr(), RRPCI_CLS_BULK, cookie);
    printf("# bulk's QP with the cookie from %s: %s\n", test_server_addr(), rdma_event_str(e));
    assert_int_equal(e, RDMA_CM_EVENT_REJECTED);
    /* A later class naming no connection: refused. */
    e = forged_req(&p, test_server_addr(), RRPCI_CLS_BULK, cookie ^ 0x5a5a5a5a5a5a5a5aull);
    printf("# bulk's QP with an unknown cookie: %s\n", rdma_event_str(e));
    assert_int_equal(e, RDMA_CM_EVENT_REJECTED);
    /* The connection is untouched and its bulk class still connects. */
    call_ok(p.c, p.cli, RRPC_CLASS_BULK);
    assert_int_equal(wait_qps(p.srv, p.sc, FIRST | (1u << RRPCI_CLS_BULK)),
                     FIRST | (1u << RRPCI_CLS_BULK));
    pthread_mutex_lock(&S.mu);
    int downs = S.downs;
    pthread_mutex_unlock(&S.mu);
    assert_int_equal(downs, 0);
    pair_close(&p);
}

static void test_a_connection_frame_on_a_class_queue_pair_is_refused(void **state)
{
    (void)state;
    const char *src = client_src();
    struct pair p;
    struct forged f;
    pair_with_forged_bulk(&p, &f, src);
    /* A KEEPALIVE, a connection frame, on it: only the first QP carries those. */
    struct rrpci_hdr h = {.version = RRPCI_PROTO_VERSION, .type = RRPCI_T_KEEPALIVE,
                          .cls = RRPCI_CLS_CONTROL};
    uint8_t frame[RRPCI_HDR_SIZE];
    rrpci_hdr_encode(&h, frame);
    struct ibv_sge sge = {(uintptr_t)frame, sizeof(frame), 0};
    struct ibv_send_wr wr = {.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
                             .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    assert_int_equal(ibv_post_send(f.id->qp, &wr, &bad), 0);
    int reason = 0, downs = wait_down(&S.srv_downs, &S.srv_reason, 5000, &reason);
    printf("# the server's connection: %d down, reason %s\n", downs, rrpc_err_name(reason));
    assert_int_equal(downs, 1);
    assert_int_equal(reason, RRPC_E_PROTO);
    forged_close(&f);
    pair_close(&p);
}

/* Posts an immediate with no payload on @f: a SEND (an envelope of
 * verbs_int.h) or an RDMA WRITE of 0 bytes (a notify). */
static void forged_imm(struct forged *f, enum ibv_wr_opcode op, uint32_t imm)
{
    struct ibv_send_wr wr = {.opcode = op, .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl(imm)}, *bad = NULL;
    assert_int_equal(ibv_post_send(f->id->qp, &wr, &bad), 0);
}

/* A peer that writes with notify without notify credit, or asks for them
 * twice, breaks verbs layout 3 (docs/protocol.md §14): the connection goes
 * down with RRPC_E_PROTO. */
static void test_notifies_beyond_the_grant_and_a_second_ask_are_refused(void **state)
{
    (void)state;
    const char *src = client_src();
    for (int round = 0; round < 2; round++) {
        struct pair p;
        struct forged f;
        pair_with_forged_bulk(&p, &f, src);
        size_t before = 0, after = 0;
        assert_int_equal(wait_qps(p.srv, p.sc, FIRST | (1u << RRPCI_CLS_BULK)),
                         FIRST | (1u << RRPCI_CLS_BULK));
        qps(p.srv, p.sc, &before);
        after = before;
        if (round == 0) {
            /* A notify, never granted: the private data grants none. */
            forged_imm(&f, IBV_WR_RDMA_WRITE_WITH_IMM, 0xBAD);
        } else {
            /* The ask: the server makes the notify buffers and grants them
             * (a message with no payload, which a receive without a buffer
             * takes: no RNR NAK to count in the lending test below). */
            for (int i = 0; i < 4; i++) {
                struct ibv_recv_wr rw = {.wr_id = (uint64_t)i}, *rbad = NULL;
                assert_int_equal(ibv_post_recv(f.id->qp, &rw, &rbad), 0);
            }
            forged_imm(&f, IBV_WR_SEND_WITH_IMM, VB_ENV_NASK << 24);
            for (int i = 0; i < 300 && after - before < VB_NOTIFY_CREDITS * vb_bsz(vb_vx(p.srv));
                 i++) {
                usleep(10000);
                qps(p.srv, p.sc, &after);
            }
            printf("# after the ask: +%zu bytes of receive buffers on the server\n",
                   after - before);
            assert_int_equal(after - before, VB_NOTIFY_CREDITS * vb_bsz(vb_vx(p.srv)));
            forged_imm(&f, IBV_WR_SEND_WITH_IMM, VB_ENV_NASK << 24);
        }
        int reason = 0, downs = wait_down(&S.srv_downs, &S.srv_reason, 5000, &reason);
        printf("# %s: the server's connection %d down, reason %s\n",
               round ? "a second ask" : "a notify without credit", downs, rrpc_err_name(reason));
        assert_int_equal(downs, 1);
        assert_int_equal(reason, RRPC_E_PROTO);
        forged_close(&f);
        pair_close(&p);
    }
}

struct hold_call {
    pthread_mutex_t mu;
    int done, status;
};

static void hold_done(const rrpc_result *res, void *user)
{
    struct hold_call *h = user;
    pthread_mutex_lock(&h->mu);
    h->done = 1;
    h->status = res->status;
    pthread_mutex_unlock(&h->mu);
}

static void test_a_class_the_peer_does_not_connect_in_time_takes_the_connection_down(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, "400");
    /* The server's loop is held for 1.5 s: it cannot take bulk's REQ. */
    struct hold_call h = {.mu = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(rrpc_call(p.c, "hold", NULL, 0, NULL, hold_done, &h), 0);
    usleep(100 * 1000);
    rrpc_call_opts o = {.qos_class = RRPC_CLASS_BULK, .deadline_ms = 10000};
    void *out = NULL;
    size_t n = 0;
    int rc = rrpc_call_sync(p.c, "echo", "x", 1, &o, &out, &n);
    free(out);
    printf("# a bulk call while the server cannot connect bulk's QP: %s (%s)\n",
           rrpc_err_name(rc), rrpc_ctx_last_error(p.cli));
    assert_int_not_equal(rc, 0);
    int reason = 0, downs = wait_down(&S.downs, &S.last_reason, 3000, &reason);
    assert_int_equal(downs, 1);
    assert_int_equal(reason, -ETIMEDOUT);
    pair_close(&p);
}

/* ---- lending to many peers, one of which stopped reading ---------------- */

/* RNR NAKs every RDMA device of the machine counted, sent and received
 * (the kernel's hw_counters); *@files: how many counters were read. */
static long rnr_naks(int *files)
{
    glob_t g;
    long sum = 0;
    *files = 0;
    if (glob("/sys/class/infiniband/*/ports/*/hw_counters/*_rnr_err", 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        FILE *f = fopen(g.gl_pathv[i], "r");
        long v;
        if (f && fscanf(f, "%ld", &v) == 1) {
            sum += v;
            ++*files;
        }
        if (f)
            fclose(f);
    }
    globfree(&g);
    return sum;
}

/* The stalled peer: its loop thread blocks in the completion of its
 * @stall_at-th answer until released, so it reads nothing, returns no
 * credit and acknowledges no take-back meanwhile. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int answered, failed, stall_at;
    bool stalled, released;
} ST = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void stall_cb(const rrpc_result *res, void *user)
{
    (void)user;
    pthread_mutex_lock(&ST.mu);
    if (res->status != 0)
        ST.failed++;
    if (++ST.answered == ST.stall_at) {
        ST.stalled = true;
        pthread_cond_broadcast(&ST.cv);
        while (!ST.released)
            pthread_cond_wait(&ST.cv, &ST.mu);
    }
    pthread_mutex_unlock(&ST.mu);
}

static rrpc_class_stats bulk_stats(rrpc_ctx *ctx)
{
    rrpc_stats st;
    assert_int_equal(rrpc_ctx_stats(ctx, &st), 0);
    return st.cls[RRPC_CLASS_BULK];
}

static void test_lending_to_peers_while_one_stopped_reading_draws_no_rnr_nak(void **state)
{
    (void)state;
    enum { NACT = 3, ROUNDS = 3, BURST = 200 };
    rrpc_config *cfg;
    assert_int_equal(rrpc_config_create(&cfg), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_HANDLER_RELIEF_MS", "0"), 0);
    assert_int_equal(rrpc_config_set(cfg, "RRPC_CREDIT_IDLE_MS", "100"), 0);
    rrpc_ctx *srv, *cli[NACT + 1];
    assert_int_equal(rrpc_ctx_create_with(cfg, &cli[NACT]), 0); /* the stalled peer */
    int cr = 0;
    rrpc_class_get(cli[NACT], RRPC_CLASS_BULK, NULL, NULL, &cr);
    int base = (int)rrpci_ctx_class_first_grant(cli[NACT], RRPCI_CLS_BULK);
    /* Room for the stalled peer's full share and one more peer's: the
     * others are refused some of the time, and refusal draws no RNR NAK
     * either. */
    char budget[16];
    snprintf(budget, sizeof(budget), "%d", 2 * (cr - base));
    assert_int_equal(rrpc_config_set(cfg, "RRPC_CREDIT_BUDGET", budget), 0);
    assert_int_equal(rrpc_ctx_create_with(cfg, &srv), 0);
    for (int i = 0; i < NACT; i++)
        assert_int_equal(rrpc_ctx_create_with(cfg, &cli[i]), 0);
    rrpc_config_destroy(cfg);
    assert_int_equal(rrpc_register(srv, "echo", echo, NULL), 0);
    char uri[128];
    test_listen_uri(uri, sizeof(uri));
    rrpc_listener *l;
    assert_int_equal(rrpc_listen(srv, uri, srv_event, NULL, &l), 0);
    assert_int_equal(rrpc_ctx_start_thread(srv), 0);
    test_connect_uri(uri, sizeof(uri), rrpc_listener_port(l));
    rrpc_conn *c[NACT + 1];
    for (int i = 0; i <= NACT; i++) {
        assert_int_equal(rrpc_ctx_start_thread(cli[i]), 0);
        if (rrpc_connect_sync(cli[i], uri, 10000, NULL, NULL, &c[i]))
            fail_msg("connect: %s", rrpc_ctx_last_error(cli[i]));
        call_ok(c[i], cli[i], RRPC_CLASS_BULK); /* bulk's QP connected */
    }
    int files;
    long rnr0 = rnr_naks(&files);
    assert_true(files > 0); /* the VM's rxe devices count RNR NAKs */
    rrpc_class_stats s0 = bulk_stats(srv);

    /* The stalled peer pipelines a burst, so the server lends it credit,
     * then stops reading three quarters in. */
    rrpc_call_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    ST.stall_at = BURST * 3 / 4;
    for (int k = 0; k < BURST; k++)
        assert_int_equal(rrpc_call(c[NACT], "echo", "0123456789", 10, &bulk, stall_cb, NULL), 0);
    pthread_mutex_lock(&ST.mu);
    while (!ST.stalled)
        pthread_cond_wait(&ST.cv, &ST.mu);
    pthread_mutex_unlock(&ST.mu);

    /* The others burst and go idle, round after round: lent, taken back. */
    int done[NACT] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < NACT; i++)
            for (int k = 0; k < BURST; k++)
                assert_int_equal(
                    rrpc_call(c[i], "echo", "0123456789", 10, &bulk, count_cb, &done[i]), 0);
        for (int i = 0; i < NACT; i++) {
            int want = (r + 1) * BURST;
            for (int t = 0; t < 3000 && __atomic_load_n(&done[i], __ATOMIC_SEQ_CST) < want; t++)
                usleep(10000);
            assert_int_equal(__atomic_load_n(&done[i], __ATOMIC_SEQ_CST), want);
        }
        usleep(400 * 1000); /* > RRPC_CREDIT_IDLE_MS: the server takes its credit back */
    }
    rrpc_class_stats s1 = bulk_stats(srv);
    printf("# bulk, class credits %d, first grant %d, budget %s: %llu lends, %llu refused, %llu "
           "taken back; %llu credits still lent with one peer stalled\n",
           cr, base, budget, (unsigned long long)(s1.credit_lends - s0.credit_lends),
           (unsigned long long)(s1.credit_lend_refused - s0.credit_lend_refused),
           (unsigned long long)(s1.credit_taken_back - s0.credit_taken_back),
           (unsigned long long)s1.credit_lent);
    assert_true(s1.credit_lends - s0.credit_lends >= NACT);
    assert_true(s1.credit_taken_back - s0.credit_taken_back >= NACT);
    /* What is still lent is the stalled peer's: one peer's share at most. */
    assert_true(s1.credit_lent <= (uint64_t)(cr - base));

    pthread_mutex_lock(&ST.mu);
    ST.released = true;
    pthread_cond_broadcast(&ST.cv);
    pthread_mutex_unlock(&ST.mu);
    for (int t = 0; t < 3000; t++) {
        pthread_mutex_lock(&ST.mu);
        int a = ST.answered;
        pthread_mutex_unlock(&ST.mu);
        if (a == BURST)
            break;
        usleep(10000);
    }
    assert_int_equal(ST.answered, BURST);
    assert_int_equal(ST.failed, 0);
    /* Once the stalled peer reads again it acknowledges the take-back. */
    rrpc_class_stats s2 = bulk_stats(srv);
    for (int t = 0; t < 300 && (s2 = bulk_stats(srv)).credit_lent; t++)
        usleep(10000);
    assert_int_equal(s2.credit_lent, 0);
    long rnr1 = rnr_naks(&files);
    printf("# RNR NAKs counted by the devices: %ld before, %ld after\n", rnr0, rnr1);
    assert_int_equal(rnr1, rnr0);
    for (int i = 0; i <= NACT; i++) {
        rrpc_conn_close(c[i]);
        rrpc_ctx_destroy(cli[i]);
    }
    rrpc_listener_close(l);
    rrpc_ctx_destroy(srv);
}

/* Counts answers by status (any thread). */
static struct {
    pthread_mutex_t mu;
    int ok, deadline, other;
} GU = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void given_up_cb(const rrpc_result *res, void *user)
{
    (void)user;
    pthread_mutex_lock(&GU.mu);
    if (res->status == 0)
        GU.ok++;
    else if (res->status == RRPC_E_DEADLINE)
        GU.deadline++;
    else
        GU.other++;
    pthread_mutex_unlock(&GU.mu);
}

/* Calls given up while the server's loop is held each send a CANCEL, which
 * takes no credit: without a bound, 16 requests and their 16 CANCELs would
 * need more receive buffers than the bulk QP holds (its grant, 16, and 11
 * reserved) and draw RNR NAKs.  At most RRPCI_CANCEL_WINDOW go unread. */
static void test_calls_given_up_while_the_server_is_held_draw_no_rnr_nak(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p, NULL);
    int cr = 0;
    rrpc_class_get(p.srv, RRPC_CLASS_BULK, NULL, NULL, &cr);
    /* Lent the whole class's credit: 300 calls in flight. */
    rrpc_call_opts bulk = {.qos_class = RRPC_CLASS_BULK};
    echo_burst(p.c, &bulk, 300);
    int files;
    long rnr0 = rnr_naks(&files);
    assert_true(files > 0);
    /* The server's loop held for 1.5 s, then cr bulk calls that give up
     * after 200 ms. */
    struct hold_call h = {.mu = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(rrpc_call(p.c, "hold", NULL, 0, NULL, hold_done, &h), 0);
    usleep(100 * 1000);
    GU.ok = GU.deadline = GU.other = 0;
    rrpc_call_opts soon = {.qos_class = RRPC_CLASS_BULK, .deadline_ms = 200};
    for (int i = 0; i < cr; i++)
        assert_int_equal(rrpc_call(p.c, "echo", "0123456789", 10, &soon, given_up_cb, NULL), 0);
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&GU.mu);
        int n = GU.ok + GU.deadline + GU.other;
        pthread_mutex_unlock(&GU.mu);
        pthread_mutex_lock(&h.mu);
        int held = h.done;
        pthread_mutex_unlock(&h.mu);
        if (n == cr && held)
            break;
        usleep(10000);
    }
    /* The server answers again: a call after the hold, then the counters. */
    call_ok(p.c, p.cli, RRPC_CLASS_BULK);
    long rnr1 = rnr_naks(&files);
    printf("# %d bulk calls given up while the server was held: %d past their deadline, %d "
           "answered, %d other; RNR NAKs %ld before, %ld after\n",
           cr, GU.deadline, GU.ok, GU.other, rnr0, rnr1);
    assert_int_equal(h.done, 1);
    assert_int_equal(h.status, 0);
    assert_int_equal(GU.deadline, cr);
    assert_int_equal(GU.other, 0);
    assert_int_equal(rnr1, rnr0);
    pair_close(&p);
}

int main(void)
{
    if (strcmp(test_transport(), "verbs") != 0) {
        printf("skipped: verbs only: run it with "
               "tests/softroce/run-suite.sh BUILD tests/unit/test_verbs_classes\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_rpc_only_connection_holds_one_queue_pair_on_each_side),
        cmocka_unit_test(test_a_class_is_connected_by_its_first_use_from_either_side),
        cmocka_unit_test(test_a_queue_pair_naming_another_peers_connection_is_refused),
        cmocka_unit_test(test_a_connection_frame_on_a_class_queue_pair_is_refused),
        cmocka_unit_test(test_notifies_beyond_the_grant_and_a_second_ask_are_refused),
        cmocka_unit_test(test_a_class_the_peer_does_not_connect_in_time_takes_the_connection_down),
        cmocka_unit_test(test_lending_to_peers_while_one_stopped_reading_draws_no_rnr_nak),
        cmocka_unit_test(test_calls_given_up_while_the_server_is_held_draw_no_rnr_nak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

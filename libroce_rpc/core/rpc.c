/* SPDX-License-Identifier: MIT */
/* The RPC engine: methods, calls, responses, deadlines. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <syslog.h>

#include "core/core.h"

#define RRPCI_ERRMSG_WIRE_MAX 1024

/* A handler on the loop thread that runs longer holds every connection's
 * reads and answers: logged once per method, with the hint. */
#define RRPCI_SLOW_HANDLER_S 0.1

struct method {
    struct rrpci_idnode node;
    rrpc_handler_fn fn;
    void *user;
    uint64_t flags; /* RRPC_HANDLER_* */
    bool slow_logged;
    char name[];
};

struct rrpc_request {
    struct rrpci_idnode node; /* in conn->serving while tracked */
    rrpc_conn *conn;
    uint64_t id;
    int cls;
    bool credit_on_answer; /* RRPC_HANDLER_CREDIT_ON_ANSWER: respond() gives it back */
    bool tracked;          /* in conn->serving (a peer reusing a live id is not) */
    double due;            /* when the caller's deadline passes (rrpci_stats_now); 0: none */
    _Atomic bool cancelled; /* the caller's CANCEL came, or the connection went down */
    rrpc_cancel_fn on_cancel; /* rrpc_request_on_cancel, under the context lock */
    void *on_cancel_user;
    size_t nmeta;             /* the request's metadata: entries in the same allocation */
    rrpc_meta *meta;
    uint8_t *resp_meta;       /* rrpc_request_set_response_meta: the encoded block, or NULL */
    size_t resp_meta_len;
};

/* @req's caller gave up: marked, and its rrpc_request_on_cancel callback
 * runs (which may answer, and so free, @req). */
static void request_cancel(rrpc_request *req)
{
    atomic_store(&req->cancelled, true);
    rrpc_cancel_fn fn = req->on_cancel;
    if (fn) {
        req->on_cancel = NULL;
        fn(req, req->on_cancel_user);
    }
}

RRPC_API uint64_t rrpc_method_id(const char *method)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)method; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

RRPC_API int rrpc_register(rrpc_ctx *ctx, const char *method, rrpc_handler_fn fn, void *user)
{
    return rrpc_register_with(ctx, method, fn, user, NULL);
}

RRPC_API int rrpc_register_with(rrpc_ctx *ctx, const char *method, rrpc_handler_fn fn,
                                void *user, const rrpc_register_opts *opts)
{
    size_t n = method ? strlen(method) : 0;
    if (!ctx || !fn || n == 0 || n > 255)
        return rrpci_set_error(ctx, -EINVAL, "a method needs a name of 1..255 bytes and a handler");
    int r = RRPCI_OPTS_CHECK(ctx, opts, "rrpc_register_opts");
    if (r < 0)
        return r;
    uint64_t flags = opts ? opts->flags : 0;
    const uint64_t known = RRPC_HANDLER_ON_WORKER | RRPC_HANDLER_CREDIT_ON_ANSWER;
    if (flags & ~known)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_register_opts.flags 0x%llx: unknown bits 0x%llx (known: "
                               "RRPC_HANDLER_ON_WORKER, RRPC_HANDLER_CREDIT_ON_ANSWER)",
                               (unsigned long long)flags, (unsigned long long)(flags & ~known));
    if ((flags & known) == known)
        return rrpci_set_error(ctx, -EINVAL,
                               "RRPC_HANDLER_CREDIT_ON_ANSWER and RRPC_HANDLER_ON_WORKER do not "
                               "go together (a worker's request keeps its credit until the "
                               "handler returns): choose one");
    struct method *m = malloc(sizeof(*m) + n + 1);
    if (!m)
        return -ENOMEM;
    m->fn = fn;
    m->user = user;
    m->flags = flags;
    m->slow_logged = false;
    memcpy(m->name, method, n + 1);
    rrpci_lock(ctx);
    uint64_t id = rrpc_method_id(method);
    struct rrpci_idnode *old = rrpci_idmap_get(&ctx->methods, id);
    if (old) {
        r = rrpci_set_error(ctx, -EEXIST, "method \"%s\" is already registered%s%s", method,
                            strcmp(rrpci_container_of(old, struct method, node)->name, method)
                                ? " (as a different name with the same id: rename one) "
                                : "",
                            "");
    } else if ((flags & RRPC_HANDLER_ON_WORKER) && (r = rrpci_workers_start(ctx)) < 0) {
        /* the detail is set */
    } else {
        r = rrpci_idmap_put(&ctx->methods, id, &m->node);
    }
    rrpci_unlock(ctx);
    if (r < 0)
        free(m);
    return r;
}

RRPC_API int rrpc_unregister(rrpc_ctx *ctx, const char *method)
{
    if (!ctx || !method)
        return -EINVAL;
    rrpci_lock(ctx);
    struct rrpci_idnode *n = rrpci_idmap_del(&ctx->methods, rrpc_method_id(method));
    rrpci_unlock(ctx);
    if (!n)
        return rrpci_set_error(ctx, -ENOENT, "method \"%s\" is not registered", method);
    free(rrpci_container_of(n, struct method, node));
    return 0;
}

void rrpci_methods_fini(rrpc_ctx *ctx)
{
    struct rrpci_idnode *n;
    while ((n = rrpci_idmap_pop(&ctx->methods)))
        free(rrpci_container_of(n, struct method, node));
    rrpci_idmap_fini(&ctx->methods);
}

/* ---- server side -------------------------------------------------------- */

/* Queues a response (status 0: @data is the result; else @data is the
 * message), after the metadata block @meta of @mlen bytes if any. */
static int send_response_meta(rrpc_conn *c, int cls, uint64_t id, int32_t status,
                              const void *data, size_t len, const uint8_t *meta, size_t mlen)
{
    struct rrpci_msg *m = rrpci_msg_new(mlen + len);
    if (!m)
        return -ENOMEM;
    m->h.type = RRPCI_T_RESPONSE;
    m->h.id = id;
    m->h.arg = (uint32_t)status;
    if (mlen) {
        m->h.flags |= RRPCI_F_META;
        memcpy(m->data, meta, mlen);
    }
    if (len)
        memcpy(m->data + mlen, data, len);
    return rrpci_conn_submit(c, cls, m);
}

static int send_response(rrpc_conn *c, int cls, uint64_t id, int32_t status, const void *data,
                         size_t len)
{
    return send_response_meta(c, cls, id, status, data, len, NULL, 0);
}

/* A new request for @h, with a copy of the @v->n metadata entries; NULL
 * without memory. */
static rrpc_request *request_new(const struct rrpci_meta_view *v)
{
    size_t store = 0;
    for (size_t i = 0; i < v->n; i++)
        store += strlen(v->e[i].key) + 1 + v->e[i].len + 1;
    rrpc_request *req = malloc(sizeof(*req) + v->n * sizeof(rrpc_meta) + store);
    if (!req)
        return NULL;
    req->nmeta = v->n;
    req->meta = v->n ? (rrpc_meta *)(req + 1) : NULL;
    req->resp_meta = NULL;
    req->resp_meta_len = 0;
    char *p = (char *)(req + 1) + v->n * sizeof(rrpc_meta);
    for (size_t i = 0; i < v->n; i++) {
        size_t klen = strlen(v->e[i].key) + 1;
        memcpy(p, v->e[i].key, klen);
        req->meta[i].key = p;
        p += klen;
        memcpy(p, v->e[i].value, v->e[i].len + 1);
        req->meta[i].value = p;
        req->meta[i].len = v->e[i].len;
        p += v->e[i].len + 1;
    }
    return req;
}

static void request_free(rrpc_request *req)
{
    free(req->resp_meta);
    free(req);
}

static int respond(rrpc_request *req, int32_t status, const void *data, size_t len);

/* When the request being handed up arrived, on rrpci_stats_now's clock
 * (@now): the transport's stamp (rrpci_ctx_rx_arrival, realtime) where it
 * has one, so a request a held loop reads late counts from its arrival. */
static double arrived(rrpc_ctx *ctx, double now)
{
    if (ctx->rx_arrival <= 0)
        return now;
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    double ago = (double)real.tv_sec + (double)real.tv_nsec / 1e9 - ctx->rx_arrival;
    if (ago < -0.001 || ago > 3600)
        return now; /* the realtime clock was stepped: unknown */
    return ago > 0 ? now - ago : now;
}

void rrpci_conn_cancel_ahead(rrpc_conn *c, uint64_t id)
{
    for (unsigned i = 0; i < c->n_cancel_ahead; i++)
        if (c->cancel_ahead[i] == id)
            return;
    if (c->n_cancel_ahead < RRPCI_CANCEL_AHEAD)
        c->cancel_ahead[c->n_cancel_ahead++] = id;
}

/* Whether a CANCEL of @id was seen ahead of it; forgets it. */
static bool cancel_ahead_take(rrpc_conn *c, uint64_t id)
{
    for (unsigned i = 0; i < c->n_cancel_ahead; i++) {
        if (c->cancel_ahead[i] == id) {
            c->cancel_ahead[i] = c->cancel_ahead[--c->n_cancel_ahead];
            return true;
        }
    }
    return false;
}

bool rrpci_rpc_on_request(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p)
{
    rrpc_ctx *ctx = c->ctx;
    rrpci_stats_request(c, cls);
    struct rrpci_idnode *n = rrpci_idmap_get(&ctx->methods, h->arg);
    if (!n) {
        char msg[96];
        int len = snprintf(msg, sizeof(msg),
                           "no method with id 0x%016llx is registered at the server",
                           (unsigned long long)h->arg);
        send_response(c, cls, h->id, RRPC_E_NO_METHOD, msg, (size_t)len);
        return false;
    }
    struct method *m = rrpci_container_of(n, struct method, node);
    struct rrpci_meta_view meta = {.n = 0};
    size_t mlen = 0;
    if (h->flags & RRPCI_F_META) {
        char why[200];
        if (rrpci_meta_decode(p, h->len, &meta, &mlen, why, sizeof(why)) != 0) {
            ctx->guard.meta_refused_request++;
            char msg[300];
            int len = snprintf(msg, sizeof(msg), "call \"%s\": not run, its request's %s",
                               m->name, why);
            send_response(c, cls, h->id, RRPC_E_METADATA, msg, (size_t)len);
            return false;
        }
        p += mlen;
    }
    size_t plen = h->len - mlen;
    struct rrpc_request *req = request_new(&meta);
    if (!req) {
        send_response(c, cls, h->id, -ENOMEM, "server out of memory", 20);
        return false;
    }
    req->conn = c;
    req->id = h->id;
    req->cls = cls;
    req->credit_on_answer = (m->flags & RRPC_HANDLER_CREDIT_ON_ANSWER) != 0;
    double now = rrpci_stats_now();
    req->due = h->ttl ? arrived(ctx, now) + rrpci_ttl_decode(h->ttl) : 0;
    atomic_init(&req->cancelled, false);
    req->on_cancel = NULL;
    req->tracked = rrpci_idmap_put(&c->serving, h->id, &req->node) == 0;
    rrpci_conn_ref(c);
    if (c->n_cancel_ahead && cancel_ahead_take(c, h->id)) {
        /* its CANCEL came right behind it (the transport saw it ahead) */
        ctx->guard.not_run_cancelled++;
        char msg[200];
        int len = snprintf(msg, sizeof(msg),
                           "call \"%s\": cancelled by its caller before the server read it "
                           "(a handler held the server's loop?); not run",
                           m->name);
        req->credit_on_answer = false;
        respond(req, RRPC_E_CANCELLED, msg, (size_t)len);
        return false;
    }
    if (req->due > 0 && now >= req->due) {
        /* its caller has given up already: answered, not run */
        ctx->guard.not_run_deadline++;
        char msg[200];
        int len = snprintf(msg, sizeof(msg),
                           "call \"%s\": its deadline passed %.0f ms before the server read it "
                           "(a handler held the server's loop?); not run",
                           m->name, (now - req->due) * 1e3);
        req->credit_on_answer = false;
        respond(req, RRPC_E_DEADLINE, msg, (size_t)len);
        return false;
    }
    if (m->flags & RRPC_HANDLER_ON_WORKER)
        return rrpci_workers_submit(ctx, req, c, cls, m->fn, m->user, p, plen, m->name);
    /* The loop thread's own pass: the handler runs after this callback, off
     * the receive path, so the loop can move on should it run long
     * (relief.c).  A method that keeps its credit until the answer, or a
     * payload too large to copy cheaply, runs here. */
    if (ctx->defer_handlers && !req->credit_on_answer && plen <= RRPCI_RELIEF_COPY_MAX)
        return rrpci_relief_defer(ctx, req, c, cls, m->fn, m->user, p, plen, m->name, h->arg);
    if (ctx->defer_handlers && rrpci_relief_queued(ctx))
        rrpci_relief_flush(ctx); /* those that came before it first */
    bool later = req->credit_on_answer; /* @req may be freed by the handler */
    m->fn(req, p, plen, m->user);
    rrpci_handler_took(ctx, h->arg, rrpci_stats_now() - now, false);
    return later;
}

void rrpci_handler_took(rrpc_ctx *ctx, uint64_t method_id, double took, bool moved)
{
    if (took <= RRPCI_SLOW_HANDLER_S)
        return;
    ctx->guard.slow_handlers++;
    /* the handler may have unregistered its method: found again */
    struct rrpci_idnode *n = rrpci_idmap_get(&ctx->methods, method_id);
    struct method *m = n ? rrpci_container_of(n, struct method, node) : NULL;
    if (m && !m->slow_logged) {
        m->slow_logged = true;
        RRPCI_LOG(ctx, LOG_WARNING,
                  "handler of \"%s\" ran %.0f ms on the loop thread; %s: register it with "
                  "RRPC_HANDLER_ON_WORKER, or answer later from your own thread (logged once "
                  "per method)",
                  m->name, took * 1e3,
                  moved ? "another thread ran the loop once it had run RRPC_HANDLER_RELIEF_MS, "
                          "beside it"
                        : "the loop read and answered nothing meanwhile (other methods and "
                          "connections waited)");
    }
}

/* Takes @req out of its connection's map of requests being served. */
static void untrack(rrpc_request *req)
{
    if (req->tracked) {
        rrpci_idmap_del(&req->conn->serving, req->id);
        req->tracked = false;
    }
}

void rrpci_ctx_rx_arrival(rrpc_ctx *ctx, double at)
{
    ctx->rx_arrival = at;
}

void rrpci_rpc_on_cancel(rrpc_conn *c, uint64_t id)
{
    if (c->n_cancel_ahead)
        (void)cancel_ahead_take(c, id); /* its request was answered already */
    struct rrpci_idnode *n = rrpci_idmap_get(&c->serving, id);
    if (!n)
        return; /* answered already, or never seen: nothing to do */
    rrpc_request *req = rrpci_container_of(n, struct rrpc_request, node);
    c->ctx->guard.cancels_found++;
    if (req->credit_on_answer && rrpci_conn_wire_open(c)) {
        /* the caller gave up: its credit comes back now, not at the answer */
        req->credit_on_answer = false;
        if (rrpci_conn_backlogged(c))
            c->cls[req->cls].held++;
        else
            rrpci_conn_consumed(c, req->cls);
    }
    rrpci_conn_ref(c);
    request_cancel(req);
    rrpci_conn_unref(c);
}

void rrpci_rpc_serving_drop(rrpc_conn *c)
{
    struct rrpci_idnode *n;
    while ((n = rrpci_idmap_pop(&c->serving))) {
        rrpc_request *req = rrpci_container_of(n, struct rrpc_request, node);
        req->tracked = false;
        request_cancel(req);
    }
    rrpci_idmap_fini(&c->serving);
}

bool rrpci_request_should_run(rrpc_request *req, const char *method)
{
    rrpc_ctx *ctx = req->conn->ctx;
    double now = rrpci_stats_now();
    char msg[200];
    int n;
    int status;
    if (atomic_load(&req->cancelled)) {
        status = RRPC_E_CANCELLED;
        n = snprintf(msg, sizeof(msg),
                     "call \"%s\" was cancelled before a handler worker took it; not run",
                     method);
    } else if (req->due > 0 && now >= req->due) {
        status = RRPC_E_DEADLINE;
        n = snprintf(msg, sizeof(msg),
                     "call \"%s\": its deadline passed %.0f ms before a handler worker took it; "
                     "not run",
                     method, (now - req->due) * 1e3);
    } else {
        return true;
    }
    rrpci_lock(ctx);
    if (status == RRPC_E_CANCELLED)
        ctx->guard.not_run_cancelled++;
    else
        ctx->guard.not_run_deadline++;
    rrpci_unlock(ctx);
    respond(req, status, msg, (size_t)n);
    return false;
}

static int respond(rrpc_request *req, int32_t status, const void *data, size_t len)
{
    rrpc_conn *c = req->conn;
    rrpc_ctx *ctx = c->ctx;
    rrpci_lock(ctx);
    untrack(req);
    if (req->credit_on_answer && rrpci_conn_wire_open(c)) {
        /* before the answer, so it carries the credit back */
        if (rrpci_conn_backlogged(c))
            c->cls[req->cls].held++;
        else
            rrpci_conn_consumed(c, req->cls);
    }
    int r;
    if (!rrpci_conn_takes_frames(c)) {
        r = rrpci_set_error(ctx, RRPC_E_CLOSED,
                            "the connection of this request is closed; the answer is dropped");
    } else if (len + req->resp_meta_len > c->peer_max_msg) {
        char msg[160];
        int n = snprintf(msg, sizeof(msg),
                         "the response of %zu bytes (%zu of them metadata) exceeds the caller's "
                         "maximum of %u",
                         len + req->resp_meta_len, req->resp_meta_len, c->peer_max_msg);
        send_response(c, req->cls, req->id, RRPC_E_TOO_BIG, msg, (size_t)n);
        r = rrpci_set_error(ctx, RRPC_E_TOO_BIG, "%s", msg);
    } else {
        r = send_response_meta(c, req->cls, req->id, status, data, len, req->resp_meta,
                               req->resp_meta_len);
    }
    rrpci_conn_unref(c);
    request_free(req);
    rrpci_unlock(ctx);
    return r;
}

int rrpci_respond_now(rrpc_request *req, int32_t status, const void *msg, size_t len)
{
    return respond(req, status, msg, len);
}

RRPC_API int rrpc_respond(rrpc_request *req, const void *data, size_t len)
{
    if (!req)
        return -EINVAL;
    return respond(req, 0, data, data ? len : 0);
}

RRPC_API int rrpc_respond_error(rrpc_request *req, int code, const char *msg)
{
    if (!req)
        return -EINVAL;
    size_t len = msg ? strnlen(msg, RRPCI_ERRMSG_WIRE_MAX) : 0;
    if (code <= 0 && code != RRPC_E_LIMIT && code != RRPC_E_CANCELLED) {
        respond(req, 1, msg, len);
        return -EINVAL;
    }
    return respond(req, code, msg, len);
}

RRPC_API rrpc_conn *rrpc_request_conn(rrpc_request *req)
{
    return req->conn;
}

RRPC_API int rrpc_request_class(rrpc_request *req)
{
    return rrpci_cls_public(req->cls);
}

RRPC_API int64_t rrpc_request_remaining_us(rrpc_request *req)
{
    if (!req || req->due <= 0)
        return RRPC_NO_DEADLINE;
    return (int64_t)((req->due - rrpci_stats_now()) * 1e6);
}

RRPC_API const rrpc_meta *rrpc_meta_find(const rrpc_meta *meta, size_t n, const char *key)
{
    if (!meta || !key)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (meta[i].key && strcmp(meta[i].key, key) == 0)
            return &meta[i];
    return NULL;
}

RRPC_API int rrpc_request_meta(rrpc_request *req, const rrpc_meta **ret_meta, size_t *ret_n)
{
    if (!req || !ret_meta || !ret_n)
        return -EINVAL;
    *ret_meta = req->meta;
    *ret_n = req->nmeta;
    return 0;
}

RRPC_API int rrpc_request_meta_get(rrpc_request *req, const char *key, const void **ret_val,
                                   size_t *ret_len)
{
    if (!req || !key || !ret_val || !ret_len)
        return -EINVAL;
    const rrpc_meta *e = rrpc_meta_find(req->meta, req->nmeta, key);
    if (!e)
        return -ENOENT;
    *ret_val = e->value;
    *ret_len = e->len;
    return 0;
}

RRPC_API int rrpc_request_set_response_meta(rrpc_request *req, const rrpc_meta *meta, size_t n)
{
    if (!req)
        return -EINVAL;
    rrpc_ctx *ctx = req->conn->ctx;
    char why[200];
    size_t size = 0;
    if (rrpci_meta_check(meta, n, &size, why, sizeof(why)) != 0)
        return rrpci_set_error(ctx, RRPC_E_METADATA, "response %s", why);
    uint8_t *block = NULL;
    if (size) {
        block = malloc(size);
        if (!block)
            return -ENOMEM;
        rrpci_meta_encode(meta, n, block);
    }
    free(req->resp_meta);
    req->resp_meta = block;
    req->resp_meta_len = size;
    return 0;
}

RRPC_API bool rrpc_request_cancelled(rrpc_request *req)
{
    return req && atomic_load(&req->cancelled);
}

RRPC_API int rrpc_request_on_cancel(rrpc_request *req, rrpc_cancel_fn fn, void *user)
{
    if (!req)
        return -EINVAL;
    rrpc_ctx *ctx = req->conn->ctx;
    rrpci_lock(ctx);
    int r = 0;
    if (atomic_load(&req->cancelled)) {
        r = RRPC_E_CANCELLED;
    } else {
        req->on_cancel = fn;
        req->on_cancel_user = user;
    }
    rrpci_unlock(ctx);
    return r;
}

/* ---- client side -------------------------------------------------------- */

/* A call completes while the transport still holds its borrowed request
 * (RRPC_CALL_BORROW): the frame goes on from a copy, for the caller may reuse
 * the buffer once the callback ran.  Without memory for the copy, the
 * connection goes down (which releases the frame) rather than read a buffer
 * that is the caller's again. */
static void unborrow(struct rrpci_pending *pd)
{
    struct rrpci_msg *m = pd->borrowed;
    if (!m)
        return;
    void *copy = malloc(m->ext_len);
    if (!copy) {
        rrpci_conn_down(pd->conn, -ENOMEM,
                        "out of memory for the copy of a borrowed request that completed early");
        if (pd->borrowed) { /* a transport that kept it: never read it again */
            pd->borrowed->ext_len = 0;
            pd->borrowed->lender = NULL;
        }
        pd->borrowed = NULL;
        return;
    }
    memcpy(copy, m->ext, m->ext_len);
    m->ext = copy;
    m->ext_owned = true;
    m->lender = NULL;
    pd->borrowed = NULL;
}

void rrpci_pending_fail(struct rrpci_pending *pd, int status, const char *msg)
{
    rrpci_timer_stop(&pd->deadline);
    if (pd->kind == RRPCI_PEND_CALL) {
        unborrow(pd);
        rrpci_stats_call_done(pd->conn, pd->cls, status, 0, pd->t0);
        rrpc_result res = {.status = status, .message = msg ? msg : ""};
        pd->cb(&res, pd->user);
    } else if (pd->op_cb) {
        rrpci_stats_onesided_done(pd->conn, pd->cls, status, pd->t0);
        rrpci_os_fail_detail(pd, status, false, (const uint8_t *)msg, msg ? strlen(msg) : 0);
        pd->op_cb(status, pd->user);
    }
    free(pd);
}

/* Drops every frame of @id that still waits in the send queue of @cls (a
 * call, or all unsent chunks of a one-sided operation: a NOTIFY must never
 * follow a WRITE whose middle did not go). */
static bool unqueue(rrpc_conn *c, int cls, uint64_t id)
{
    struct rrpci_class_state *s = &c->cls[cls];
    struct rrpci_msg **pp = &s->head, *prev = NULL;
    bool dropped = false;
    while (*pp) {
        struct rrpci_msg *m = *pp;
        if (m->h.id != id || rrpci_type_is_exempt(m->h.type)) {
            prev = m;
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        if (s->tail == m)
            s->tail = prev;
        dropped = true;
        rrpci_msg_free(m);
    }
    return dropped;
}

/* Whether one more CANCEL may go on class @s: fewer than
 * RRPCI_CANCEL_WINDOW are unread.  A class's frames are read in order, so
 * once the peer returned credit for a frame sent after a CANCEL (more credit,
 * ever, than frames sent before it), it has read the CANCEL. */
static bool cancel_room(struct rrpci_class_state *s)
{
    unsigned k = 0;
    for (unsigned i = 0; i < s->cancels; i++)
        if (s->cancel_mark[i] >= s->credit.tx_returned)
            s->cancel_mark[k++] = s->cancel_mark[i];
    s->cancels = k;
    return k < RRPCI_CANCEL_WINDOW;
}

/* A call ends at the caller (deadline, rrpc_call_cancel) before its answer:
 * a request still queued here is dropped; one that went out is followed, on
 * its class, by a CANCEL, so the server skips it if it has not started and
 * its handler can see it (rrpc_request_cancelled) if it has.  With
 * RRPCI_CANCEL_WINDOW CANCELs unread, none goes: the server runs the request
 * (or answers it RRPC_E_DEADLINE from its ttl), nothing is lost but its work. */
static void call_abandon(rrpc_conn *c, struct rrpci_pending *pd)
{
    bool dropped = false;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        dropped |= unqueue(c, i, pd->node.key);
    if (dropped || pd->kind != RRPCI_PEND_CALL || !rrpci_conn_takes_frames(c))
        return;
    struct rrpci_class_state *s = &c->cls[pd->cls];
    if (!cancel_room(s)) {
        RRPCI_LOG(c->ctx, LOG_DEBUG,
                  "call %llu given up: no CANCEL, %d on class %s not read by the peer yet",
                  (unsigned long long)pd->node.key, RRPCI_CANCEL_WINDOW,
                  rrpci_class_name(pd->cls));
        return;
    }
    struct rrpci_msg *m = rrpci_msg_new(0);
    if (!m)
        return; /* the server runs it to the end: nothing is lost but its work */
    m->h.type = RRPCI_T_CANCEL;
    m->h.id = pd->node.key;
    /* Exempt frames go first: after what went out so far, before the rest. */
    s->cancel_mark[s->cancels++] = s->credit.tx_sent;
    rrpci_conn_submit(c, pd->cls, m);
}

static void deadline_cb(struct rrpci_timer *t)
{
    struct rrpci_pending *pd = t->data;
    rrpc_conn *c = pd->conn;
    rrpci_idmap_del(&c->pending, pd->node.key);
    rrpci_conn_ref(c);
    call_abandon(c, pd);
    char msg[96];
    snprintf(msg, sizeof(msg), "no answer within the deadline of %d ms", pd->deadline_ms);
    rrpci_pending_fail(pd, RRPC_E_DEADLINE, msg);
    rrpci_conn_unref(c);
}

struct rrpci_pending *rrpci_pending_new(rrpc_conn *c, enum rrpci_pending_kind kind,
                                        int deadline_ms)
{
    struct rrpci_pending *pd = calloc(1, sizeof(*pd));
    if (!pd)
        return NULL;
    pd->kind = kind;
    pd->conn = c;
    if (deadline_ms == 0)
        deadline_ms = c->ctx->cfg.deadline_ms;
    rrpci_timer_init(c->ctx, &pd->deadline, deadline_cb, 0, 0);
    pd->deadline.data = pd;
    pd->deadline_ms = deadline_ms;
    if (deadline_ms > 0) {
        rrpci_timer_set(&pd->deadline, deadline_ms / 1000.0, 0);
        rrpci_timer_start(&pd->deadline);
    }
    if (rrpci_idmap_put(&c->pending, rrpci_conn_new_id(c), &pd->node) < 0) {
        rrpci_timer_stop(&pd->deadline);
        free(pd);
        return NULL;
    }
    return pd;
}

RRPC_API int rrpc_call(rrpc_conn *c, const char *method, const void *req, size_t len,
                       const rrpc_call_opts *opts, rrpc_call_cb cb, void *user)
{
    if (!c || !method || !cb || (len && !req))
        return -EINVAL;
    rrpc_ctx *ctx = c->ctx;
    size_t mlen = strnlen(method, 256);
    if (mlen == 0 || mlen > 255) /* the rule of rrpc_register */
        return rrpci_set_error(ctx, -EINVAL, "a method name has 1..255 bytes (this one has %s)",
                               mlen ? "more than 255" : "none");
    int cls;
    int r = RRPCI_OPTS_CHECK(ctx, opts, "rrpc_call_opts");
    if (r < 0)
        return r;
    uint64_t flags = opts ? opts->flags : 0;
    if (flags & ~(uint64_t)RRPC_CALL_BORROW)
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_call_opts.flags 0x%llx has bits this library does not know "
                               "(RRPC_CALL_BORROW is the only flag)",
                               (unsigned long long)flags);
    const rrpc_meta *meta = opts ? opts->meta : NULL;
    size_t nmeta = opts ? (size_t)opts->nmeta : 0, metalen = 0;
    if (opts && opts->nmeta > RRPC_META_MAX_ENTRIES) /* before it is narrowed to size_t */
        return rrpci_set_error(ctx, RRPC_E_METADATA,
                               "call \"%s\": %llu metadata entries (at most %d; nothing was sent)",
                               method, (unsigned long long)opts->nmeta, RRPC_META_MAX_ENTRIES);
    char why[200];
    if (rrpci_meta_check(meta, nmeta, &metalen, why, sizeof(why)) != 0)
        return rrpci_set_error(ctx, RRPC_E_METADATA, "call \"%s\": %s (nothing was sent)",
                               method, why);
    /* Borrowed only where the transport lets the core take the frame back. */
    bool borrow = (flags & RRPC_CALL_BORROW) && len && c->ops->ext_repointable;
    r = rrpci_class_arg(ctx, opts ? opts->qos_class : 0, RRPCI_CLS_LOW_LATENCY, &cls);
    if (r < 0)
        return r;
    rrpci_lock(ctx);
    uint32_t limit = rrpci_conn_wire_was_up(c) ? c->peer_max_msg : ctx->cfg.max_msg;
    struct rrpci_pending *pd = NULL;
    struct rrpci_msg *m = NULL;
    if (!rrpci_conn_accepts_calls(c)) {
        r = rrpci_set_error(ctx, RRPC_E_CLOSED, "call \"%s\" on a closed connection", method);
        goto out;
    }
    if (len + metalen > limit) {
        r = rrpci_set_error(ctx, RRPC_E_TOO_BIG,
                            "call \"%s\": %zu bytes (%zu of them metadata) exceed the peer's "
                            "maximum message of %u (RRPC_MAX_MSG on the server), or use a "
                            "one-sided channel",
                            method, len + metalen, metalen, limit);
        goto out;
    }
    r = -ENOMEM;
    pd = rrpci_pending_new(c, RRPCI_PEND_CALL, opts ? opts->deadline_ms : 0);
    m = pd ? rrpci_msg_new(metalen + (borrow ? 0 : len)) : NULL;
    if (!m)
        goto out;
    pd->cb = cb;
    pd->user = user;
    pd->cls = cls;
    pd->t0 = rrpci_stats_now();
    m->h.type = RRPCI_T_REQUEST;
    m->h.id = pd->node.key;
    m->h.arg = rrpc_method_id(method);
    if (pd->deadline_ms > 0)
        m->due = pd->t0 + pd->deadline_ms / 1000.0;
    if (metalen) {
        m->h.flags |= RRPCI_F_META;
        rrpci_meta_encode(meta, nmeta, m->data);
    }
    if (borrow) {
        m->ext = req;
        m->ext_len = len;
        m->lender = &pd->borrowed;
        pd->borrowed = m;
    } else if (len) {
        memcpy(m->data + metalen, req, len);
    }
    r = rrpci_conn_submit(c, cls, m);
    m = NULL;
    if (r == 0) {
        pd = NULL;
        rrpci_stats_call(c, cls, len);
    }
out:
    if (pd) {
        rrpci_idmap_del(&c->pending, pd->node.key);
        rrpci_timer_stop(&pd->deadline);
        free(pd);
    }
    rrpci_msg_free(m);
    rrpci_unlock(ctx);
    return r;
}

/* A call pending on @c with @cb and @user, or NULL. */
static struct rrpci_pending *find_call(rrpc_conn *c, rrpc_call_cb cb, void *user)
{
    for (size_t b = 0; b < c->pending.nbuckets; b++)
        for (struct rrpci_idnode *n = c->pending.buckets[b]; n; n = n->next) {
            struct rrpci_pending *pd = rrpci_container_of(n, struct rrpci_pending, node);
            if (pd->kind == RRPCI_PEND_CALL && pd->cb == cb && pd->user == user)
                return pd;
        }
    return NULL;
}

RRPC_API int rrpc_call_cancel(rrpc_conn *c, rrpc_call_cb cb, void *user)
{
    if (!c || !cb)
        return -EINVAL;
    rrpc_ctx *ctx = c->ctx;
    rrpci_lock(ctx);
    int found = 0;
    rrpci_conn_ref(c);
    for (struct rrpci_pending *pd; (pd = find_call(c, cb, user)); found++) {
        rrpci_idmap_del(&c->pending, pd->node.key);
        call_abandon(c, pd);
        rrpci_pending_fail(pd, RRPC_E_CANCELLED, "cancelled by the caller");
    }
    rrpci_conn_unref(c);
    int r = found ? 0
                  : rrpci_set_error(ctx, -ENOENT,
                                    "no call with this callback and user is pending on the "
                                    "connection (answered, failed or cancelled already)");
    rrpci_unlock(ctx);
    return r;
}

void rrpci_rpc_on_response(rrpc_conn *c, const struct rrpci_hdr *h, const uint8_t *p)
{
    struct rrpci_idnode *n = rrpci_idmap_get(&c->pending, h->id);
    struct rrpci_pending *pd = n ? rrpci_container_of(n, struct rrpci_pending, node) : NULL;
    if (!pd || pd->kind != RRPCI_PEND_CALL) {
        /* Its deadline passed already (or a confused peer): nothing waits. */
        RRPCI_LOG(c->ctx, LOG_DEBUG, "response to unknown request %llu dropped",
                  (unsigned long long)h->id);
        return;
    }
    rrpci_idmap_del(&c->pending, h->id);
    rrpci_timer_stop(&pd->deadline);
    unborrow(pd); /* answered before its request was all written: a broken peer */
    rrpc_result res = {.status = (int32_t)(uint32_t)h->arg, .message = ""};
    char msg[RRPCI_ERRMSG_WIRE_MAX + 1];
    struct rrpci_meta_view meta;
    size_t mlen = 0, plen = h->len;
    if (h->flags & RRPCI_F_META) {
        char why[200];
        if (rrpci_meta_decode(p, h->len, &meta, &mlen, why, sizeof(why)) != 0) {
            c->ctx->guard.meta_refused_response++;
            res.status = RRPC_E_METADATA;
            snprintf(msg, sizeof(msg), "the server's response was dropped: its %s", why);
            res.message = msg;
            plen = 0;
        } else {
            p += mlen;
            plen -= mlen;
            res.meta = meta.e;
            res.nmeta = meta.n;
        }
    }
    if (res.status == 0) {
        res.data = p;
        res.len = plen;
    } else if (plen) {
        size_t n2 = plen < RRPCI_ERRMSG_WIRE_MAX ? plen : RRPCI_ERRMSG_WIRE_MAX;
        memcpy(msg, p, n2);
        msg[n2] = 0;
        res.message = msg;
    }
    rrpci_stats_call_done(c, pd->cls, res.status, res.len, pd->t0);
    pd->cb(&res, pd->user);
    free(pd);
}

struct sync_call {
    struct rrpci_sync s;
    const char *method;
    void *data;
    size_t len;
    bool want_meta;
    rrpc_meta *meta; /* one block: the entries, then their keys and values */
    size_t nmeta;
};

/* A copy of @n entries in one malloc'ed block; NULL without memory. */
static rrpc_meta *meta_copy(const rrpc_meta *meta, size_t n)
{
    size_t store = 0;
    for (size_t i = 0; i < n; i++)
        store += strlen(meta[i].key) + 1 + meta[i].len + 1;
    rrpc_meta *out = malloc(n * sizeof(*out) + store);
    if (!out)
        return NULL;
    char *p = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        size_t klen = strlen(meta[i].key) + 1;
        memcpy(p, meta[i].key, klen);
        out[i].key = p;
        p += klen;
        if (meta[i].len)
            memcpy(p, meta[i].value, meta[i].len);
        p[meta[i].len] = 0;
        out[i].value = p;
        out[i].len = meta[i].len;
        p += meta[i].len + 1;
    }
    return out;
}

static void sync_call_cb(const rrpc_result *res, void *user)
{
    struct sync_call *sc = user;
    if (sc->want_meta && res->nmeta && res->status >= 0) {
        sc->meta = meta_copy(res->meta, res->nmeta);
        if (!sc->meta) {
            rrpci_sync_done(&sc->s, -ENOMEM, "call \"%s\": no memory for its answer's metadata",
                            sc->method);
            return;
        }
        sc->nmeta = res->nmeta;
    }
    if (res->status == 0) {
        sc->data = malloc(res->len ? res->len : 1);
        if (!sc->data) {
            free(sc->meta);
            sc->meta = NULL;
            sc->nmeta = 0;
            rrpci_sync_done(&sc->s, -ENOMEM, "call \"%s\": no memory for its %zu-byte answer",
                            sc->method, res->len);
            return;
        }
        memcpy(sc->data, res->data, res->len);
        sc->len = res->len;
    }
    rrpci_sync_done(&sc->s, res->status, "call \"%s\" failed: %s%s%s", sc->method,
                    rrpc_strerror(res->status), res->message[0] ? ": " : "", res->message);
}

RRPC_API int rrpc_call_sync(rrpc_conn *c, const char *method, const void *req, size_t len,
                            const rrpc_call_opts *opts, void **ret_data, size_t *ret_len)
{
    return rrpc_call_sync_meta(c, method, req, len, opts, ret_data, ret_len, NULL, NULL);
}

RRPC_API int rrpc_call_sync_meta(rrpc_conn *c, const char *method, const void *req, size_t len,
                                 const rrpc_call_opts *opts, void **ret_data, size_t *ret_len,
                                 rrpc_meta **ret_meta, size_t *ret_nmeta)
{
    if (ret_meta)
        *ret_meta = NULL;
    if (ret_nmeta)
        *ret_nmeta = 0;
    if (!c || !ret_data || !ret_len || !ret_meta != !ret_nmeta)
        return -EINVAL;
    struct sync_call sc = {.method = method, .want_meta = ret_meta != NULL};
    int r = rrpci_sync_begin(&sc.s, c->ctx,
                             "rrpc_call_sync from a callback would wait for itself; "
                             "use rrpc_call with a completion callback");
    if (r)
        return r;
    r = rrpci_sync_end(&sc.s, rrpc_call(c, method, req, len, opts, sync_call_cb, &sc));
    if (r == 0) {
        *ret_data = sc.data;
        *ret_len = sc.len;
    }
    if (ret_meta && r >= 0) {
        *ret_meta = sc.meta;
        *ret_nmeta = sc.nmeta;
    } else {
        free(sc.meta);
    }
    return r;
}

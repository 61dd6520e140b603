/* SPDX-License-Identifier: MIT */
/* Metrics: the context's counters per QoS class (rrpc_ctx_stats) and their
 * Prometheus text (rrpc_ctx_stats_text).  Counted under the context lock,
 * which every caller of the rrpci_stats_* hooks holds. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "core/core.h"

double rrpci_stats_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* rrpc_stats.cls is indexed by public class number: one slot per class
 * and slot 0 (RRPC_CLASS_DEFAULT) unused. */
_Static_assert(RRPC_STATS_CLASS_SLOTS == RRPCI_MAX_CLASSES + 1,
               "rrpc_stats.cls must have a slot per class plus the unused slot 0");

static rrpc_class_stats *cls_stats(rrpc_ctx *ctx, int cls)
{
    return &ctx->stats.cls[rrpci_cls_public(cls)];
}

int rrpci_stats_bucket(double us)
{
    int i = 0;
    double edge = 1.0;
    while (i < RRPC_STATS_RTT_BUCKETS - 1 && us > edge) {
        i++;
        edge *= 2.0;
    }
    return i;
}

/* Slot of call_errors by status; rrpc_stats_error_label names them. */
static const struct {
    int code;
    const char *label;
} err_slots[RRPC_STATS_ERRORS - 2] = {
    {RRPC_E_DEADLINE, "RRPC_E_DEADLINE"}, {RRPC_E_CONN_LOST, "RRPC_E_CONN_LOST"},
    {RRPC_E_CLOSED, "RRPC_E_CLOSED"},     {RRPC_E_NO_METHOD, "RRPC_E_NO_METHOD"},
    {RRPC_E_TOO_BIG, "RRPC_E_TOO_BIG"},   {RRPC_E_LIMIT, "RRPC_E_LIMIT"},
    {RRPC_E_ARGS, "RRPC_E_ARGS"},
};
#define ERR_APPLICATION (RRPC_STATS_ERRORS - 2)
#define ERR_OTHER (RRPC_STATS_ERRORS - 1)

RRPC_API const char *rrpc_stats_error_label(int i)
{
    if (i < 0 || i >= RRPC_STATS_ERRORS)
        return NULL;
    if (i == ERR_APPLICATION)
        return "application";
    if (i == ERR_OTHER)
        return "other";
    return err_slots[i].label;
}

RRPC_API int rrpc_stats_error_slot(int status)
{
    if (status == 0)
        return -1;
    if (status > 0)
        return ERR_APPLICATION;
    for (int i = 0; i < ERR_APPLICATION; i++)
        if (err_slots[i].code == status)
            return i;
    return ERR_OTHER;
}

void rrpci_stats_call(rrpc_conn *c, int cls, size_t len)
{
    rrpc_class_stats *s = cls_stats(c->ctx, cls);
    s->calls++;
    s->call_bytes_out += len;
    c->stats.calls++;
}

/* Adds the time since @t0 to a latency histogram. */
static void observe(uint64_t *sum_us, uint64_t *buckets, double t0)
{
    double us = (rrpci_stats_now() - t0) * 1e6;
    if (us < 0)
        us = 0;
    *sum_us += (uint64_t)us;
    buckets[rrpci_stats_bucket(us)]++;
}

void rrpci_stats_call_done(rrpc_conn *c, int cls, int status, size_t len, double t0)
{
    rrpc_class_stats *s = cls_stats(c->ctx, cls);
    if (status == 0) {
        s->calls_ok++;
        c->stats.calls_ok++;
    } else {
        s->calls_failed++;
        s->call_errors[rrpc_stats_error_slot(status)]++;
        c->stats.calls_failed++;
    }
    s->call_bytes_in += len;
    observe(&s->rtt_us_sum, s->rtt_buckets, t0);
}

void rrpci_stats_request(rrpc_conn *c, int cls)
{
    cls_stats(c->ctx, cls)->requests++;
    c->stats.requests++;
}

void rrpci_stats_frame_out(rrpc_conn *c, size_t len)
{
    c->stats.frames_out++;
    c->stats.bytes_out += len;
}

void rrpci_ctx_qos_piece_cut(rrpc_ctx *ctx)
{
    ctx->stats.qos_pieces_cut++;
}

void rrpci_ctx_qos_preempted(rrpc_ctx *ctx)
{
    ctx->stats.qos_turns_preempted++;
}

void rrpci_stats_frame_in(rrpc_conn *c, size_t len)
{
    c->stats.frames_in++;
    c->stats.bytes_in += len;
}

void rrpci_stats_onesided(rrpc_conn *c, int cls, size_t len)
{
    rrpc_class_stats *s = cls_stats(c->ctx, cls);
    s->onesided_ops++;
    s->onesided_bytes += len;
    c->stats.onesided_ops++;
    c->stats.onesided_bytes += len;
}

void rrpci_stats_onesided_done(rrpc_conn *c, int cls, int status, double t0)
{
    rrpc_class_stats *s = cls_stats(c->ctx, cls);
    if (status != 0)
        s->onesided_failed++;
    observe(&s->onesided_us_sum, s->onesided_buckets, t0);
}

void rrpci_stats_credit_stall(rrpc_ctx *ctx, int cls, struct rrpci_class_state *s)
{
    cls_stats(ctx, cls)->credit_stalls++;
    if (s->stall_t0 == 0)
        s->stall_t0 = rrpci_stats_now();
}

/* Off the fast path: only called while a wait clock runs. */
void rrpci_stats_credit_sent(rrpc_ctx *ctx, int cls, struct rrpci_class_state *s)
{
    double now = rrpci_stats_now();
    if (now > s->stall_t0)
        cls_stats(ctx, cls)->credit_wait_ns += (uint64_t)((now - s->stall_t0) * 1e9);
    bool still = !rrpci_credit_can_send(&s->credit) && s->head;
    s->stall_t0 = still ? now : 0;
}

/* ---- per peer -------------------------------------------------------------- */

static void conn_stat_add(rrpc_conn_stat *to, const rrpc_conn_stat *from)
{
    to->calls += from->calls;
    to->calls_ok += from->calls_ok;
    to->calls_failed += from->calls_failed;
    to->requests += from->requests;
    to->frames_out += from->frames_out;
    to->bytes_out += from->bytes_out;
    to->frames_in += from->frames_in;
    to->bytes_in += from->bytes_in;
    to->onesided_ops += from->onesided_ops;
    to->onesided_bytes += from->onesided_bytes;
}

void rrpci_stats_conn_up(rrpc_conn *c)
{
    rrpc_ctx *ctx = c->ctx;
    ctx->stats.conns_up++;
    char name[sizeof(ctx->peers[0].name) + 8] = "";
    if (c->ops->peer_name)
        c->ops->peer_name(c, name, sizeof(name));
    char *colon = strrchr(name, ':'); /* "HOST:PORT": the port goes */
    if (colon)
        *colon = 0;
    if (!name[0] || strlen(name) >= sizeof(ctx->peers[0].name))
        snprintf(name, sizeof(name), "%s", c->ops->name);
    uint32_t i = 0;
    while (i < ctx->n_peers && strcmp(ctx->peers[i].name, name) != 0)
        i++;
    if (i == ctx->n_peers) {
        if (ctx->n_peers < RRPC_STATS_PEERS) {
            snprintf(ctx->peers[i].name, sizeof(ctx->peers[i].name), "%s", name);
            ctx->n_peers++;
        } else {
            i = RRPC_STATS_PEERS;
            ctx->peer_other = true;
        }
    }
    c->peer_slot = (int)i + 1;
}

void rrpci_stats_conn_gone(rrpc_conn *c)
{
    if (c->peer_slot)
        conn_stat_add(&c->ctx->peers[c->peer_slot - 1].gone, &c->stats);
}

/* The per-peer view under the lock: @ret has room for RRPC_STATS_PEERS + 1. */
static size_t peer_snapshot(rrpc_ctx *ctx, rrpc_peer_stats *ret)
{
    size_t n = ctx->n_peers + (ctx->peer_other ? 1 : 0);
    for (uint32_t i = 0; i < ctx->n_peers; i++) {
        snprintf(ret[i].peer, sizeof(ret[i].peer), "%s", ctx->peers[i].name);
        ret[i].conns = 0;
        ret[i].s = ctx->peers[i].gone;
    }
    if (ctx->peer_other) {
        rrpc_peer_stats *o = &ret[n - 1];
        snprintf(o->peer, sizeof(o->peer), "other");
        o->conns = 0;
        o->s = ctx->peers[RRPC_STATS_PEERS].gone;
    }
    for (struct rrpci_list *l = ctx->conns.next; l != &ctx->conns; l = l->next) {
        const rrpc_conn *c = rrpci_container_of(l, rrpc_conn, link);
        if (!c->peer_slot)
            continue;
        size_t i = c->peer_slot - 1 == RRPC_STATS_PEERS ? n - 1 : (size_t)c->peer_slot - 1;
        conn_stat_add(&ret[i].s, &c->stats);
        if (rrpci_conn_is_up(c))
            ret[i].conns++;
    }
    return n;
}

/* The counters under the lock; the queue depths are counted here, when read,
 * not on every send. */
static void ctx_snapshot(rrpc_ctx *ctx, rrpc_stats *ret)
{
    *ret = ctx->stats;
    /* the governor keeps its own counts (core/governor.h) */
    ret->busy_poll_budget_stops = ctx->gov.budget_stops;
    ret->busy_poll_contended_stops = ctx->gov.contended_stops;
    ret->loop_thread_wakeups = ctx->thread_wakeups;
    ret->loop_takeovers = ctx->takeovers;
    for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
        ret->cls[rrpci_cls_public(i)].credit_lent = rrpci_lend_total(ctx, i);
    for (struct rrpci_list *l = ctx->conns.next; l != &ctx->conns; l = l->next) {
        const rrpc_conn *c = rrpci_container_of(l, rrpc_conn, link);
        for (int i = 0; i < RRPCI_MAX_CLASSES; i++)
            for (const struct rrpci_msg *m = c->cls[i].head; m; m = m->next)
                ret->cls[rrpci_cls_public(i)].queued_frames++;
    }
}

RRPC_API int rrpc_ctx_stats(rrpc_ctx *ctx, rrpc_stats *ret)
{
    if (!ctx || !ret)
        return -EINVAL;
    rrpci_lock(ctx);
    ctx_snapshot(ctx, ret);
    pthread_mutex_unlock(&ctx->lock); /* not rrpci_unlock: nothing changed */
    return 0;
}

RRPC_API int rrpc_conn_stats(rrpc_conn *c, rrpc_conn_stat *ret)
{
    if (!c || !ret)
        return -EINVAL;
    rrpci_lock(c->ctx);
    *ret = c->stats;
    pthread_mutex_unlock(&c->ctx->lock); /* as rrpc_ctx_stats */
    return 0;
}

RRPC_API int rrpc_ctx_peer_stats(rrpc_ctx *ctx, rrpc_peer_stats *ret, size_t n, size_t *ret_n)
{
    if (!ctx || !ret_n || (n && !ret))
        return -EINVAL;
    rrpc_peer_stats *all = malloc(sizeof(*all) * (RRPC_STATS_PEERS + 1));
    if (!all)
        return -ENOMEM;
    rrpci_lock(ctx);
    size_t have = peer_snapshot(ctx, all);
    pthread_mutex_unlock(&ctx->lock); /* as rrpc_ctx_stats */
    if (n)
        memcpy(ret, all, sizeof(*all) * (have < n ? have : n));
    free(all);
    *ret_n = have;
    return have > n ? -ENOBUFS : 0;
}

/* ---- Prometheus text ------------------------------------------------------------ */

struct out {
    char *buf;
    size_t len, used; /* @used may pass @len: the length the whole text needs */
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->used < o->len ? o->len - o->used : 0;
    int n = vsnprintf(room ? o->buf + o->used : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->used += (size_t)n;
}

/* One family of @type ("counter", "gauge") with a value per class: @off is the
 * field's offset in rrpc_class_stats. */
static void per_class_typed(struct out *o, const rrpc_stats *st, const char *name,
                            const char *help, size_t off, const char *type)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++) {
        uint64_t v;
        memcpy(&v, (const char *)&st->cls[c] + off, sizeof(v));
        put(o, "%s{class=\"%s\"} %llu\n", name, rrpc_class_name(c), (unsigned long long)v);
    }
}

static void per_class(struct out *o, const rrpc_stats *st, const char *name, const char *help,
                      size_t off)
{
    per_class_typed(o, st, name, help, off, "counter");
}

static void single(struct out *o, const char *name, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

/* A histogram family per class from microsecond buckets at offset @off_b of
 * rrpc_class_stats and their sum at @off_sum. */
static void histogram(struct out *o, const rrpc_stats *st, const char *h, const char *help,
                      size_t off_b, size_t off_sum)
{
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", h, help, h);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++) {
        const char *base = (const char *)&st->cls[c];
        uint64_t b[RRPC_STATS_RTT_BUCKETS], sum_us;
        memcpy(b, base + off_b, sizeof(b));
        memcpy(&sum_us, base + off_sum, sizeof(sum_us));
        const char *cn = rrpc_class_name(c);
        uint64_t cum = 0;
        double edge_us = 1.0;
        for (int i = 0; i < RRPC_STATS_RTT_BUCKETS - 1; i++, edge_us *= 2.0) {
            cum += b[i];
            put(o, "%s_bucket{class=\"%s\",le=\"%.9g\"} %llu\n", h, cn, edge_us / 1e6,
                (unsigned long long)cum);
        }
        cum += b[RRPC_STATS_RTT_BUCKETS - 1];
        put(o, "%s_bucket{class=\"%s\",le=\"+Inf\"} %llu\n", h, cn, (unsigned long long)cum);
        put(o, "%s_sum{class=\"%s\"} %.6f\n", h, cn, (double)sum_us / 1e6);
        put(o, "%s_count{class=\"%s\"} %llu\n", h, cn, (unsigned long long)cum);
    }
}

/* @v as a label value of the text format: backslash, quote and newline
 * escaped (the rest is the peer's numeric address, or "other"). */
static const char *label(char *dst, size_t len, const char *v)
{
    size_t k = 0;
    for (; *v && k + 3 < len; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n') {
            dst[k++] = '\\';
            dst[k++] = *v == '\n' ? 'n' : *v;
        } else {
            dst[k++] = *v;
        }
    }
    dst[k] = 0;
    return dst;
}

/* One family with a value per peer: @off is the field's offset in
 * rrpc_conn_stat, or SIZE_MAX for the open connections (a gauge). */
static void per_peer(struct out *o, const rrpc_peer_stats *p, size_t n, const char *name,
                     const char *help, size_t off)
{
    if (!n)
        return;
    const char *type = off == SIZE_MAX ? "gauge" : "counter";
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = p[i].conns;
        if (off != SIZE_MAX)
            memcpy(&v, (const char *)&p[i].s + off, sizeof(v));
        char lv[2 * sizeof(p[i].peer) + 1];
        put(o, "%s{peer=\"%s\"} %llu\n", name, label(lv, sizeof(lv), p[i].peer),
            (unsigned long long)v);
    }
}

int rrpci_stats_render(const rrpc_stats *sp, const rrpc_peer_stats *peers, size_t n_peers,
                       char *buf, size_t len, size_t *ret_len)
{
    const rrpc_stats st = *sp;
    struct out o = {.buf = buf, .len = len};
#define F(field) offsetof(rrpc_class_stats, field)
    per_class(&o, &st, "rrpc_calls_total", "Calls made.", F(calls));
    per_class(&o, &st, "rrpc_calls_ok_total", "Calls answered with status 0.", F(calls_ok));
    per_class(&o, &st, "rrpc_calls_failed_total",
              "Calls answered with an error, or failed locally (deadline, lost connection).",
              F(calls_failed));
    const char *e = "rrpc_call_errors_total";
    put(&o, "# HELP %s Calls failed, by code (a fixed set; application: a handler's positive "
            "code).\n# TYPE %s counter\n", e, e);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++)
        for (int i = 0; i < RRPC_STATS_ERRORS; i++)
            put(&o, "%s{class=\"%s\",code=\"%s\"} %llu\n", e, rrpc_class_name(c),
                rrpc_stats_error_label(i), (unsigned long long)st.cls[c].call_errors[i]);
    per_class(&o, &st, "rrpc_call_sent_bytes_total", "Request payload bytes of the calls made.",
              F(call_bytes_out));
    per_class(&o, &st, "rrpc_call_received_bytes_total",
              "Response payload bytes of the answers received.", F(call_bytes_in));
    per_class(&o, &st, "rrpc_requests_total", "Requests received for this context's handlers.",
              F(requests));
    per_class(&o, &st, "rrpc_onesided_ops_total", "One-sided READs and WRITEs started.",
              F(onesided_ops));
    per_class(&o, &st, "rrpc_onesided_bytes_total", "Bytes of the one-sided operations started.",
              F(onesided_bytes));
    per_class(&o, &st, "rrpc_onesided_failed_total",
              "One-sided operations that completed with an error.", F(onesided_failed));
    per_class(&o, &st, "rrpc_credit_stalls_total",
              "Frames queued while their class had no credit from the peer.", F(credit_stalls));
    const char *w = "rrpc_credit_wait_seconds_total";
    put(&o, "# HELP %s Time frames of the class waited for credit from the peer, summed over "
            "the connections.\n# TYPE %s counter\n", w, w);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++)
        put(&o, "%s{class=\"%s\"} %.9f\n", w, rrpc_class_name(c),
            (double)st.cls[c].credit_wait_ns / 1e9);
    per_class_typed(&o, &st, "rrpc_send_queue_frames",
                    "Frames of the class in the connections' send queues (waiting for credit "
                    "or for the transport).", F(queued_frames), "gauge");
    per_class_typed(&o, &st, "rrpc_credit_lent",
                    "Credit lent to the peers beyond their first grant (RRPC_CREDIT_LENDING).",
                    F(credit_lent), "gauge");
    per_class(&o, &st, "rrpc_credit_lends_total",
              "Times a peer that had all its credit of the class in flight was lent more.",
              F(credit_lends));
    per_class(&o, &st, "rrpc_credit_lend_refused_total",
              "Times a peer that had all its credit in flight was lent nothing: the class's "
              "RRPC_CREDIT_BUDGET was lent out.", F(credit_lend_refused));
    per_class(&o, &st, "rrpc_credit_taken_back_total",
              "Credit taken back from peers idle for RRPC_CREDIT_IDLE_MS.",
              F(credit_taken_back));
    histogram(&o, &st, "rrpc_call_duration_seconds",
              "Round trip of the calls answered, from the call to its answer.", F(rtt_buckets),
              F(rtt_us_sum));
    histogram(&o, &st, "rrpc_onesided_duration_seconds",
              "One-sided operations from their start to their completion (ok or failed).",
              F(onesided_buckets), F(onesided_us_sum));
#undef F
    single(&o, "rrpc_connections_up_total", "Connections that came up.", st.conns_up);
    single(&o, "rrpc_connections_down_total", "Connections that went down after coming up.",
           st.conns_down);
    single(&o, "rrpc_keepalive_losses_total", "Peers declared lost by the keepalive timeout.",
           st.keepalive_losses);
    single(&o, "rrpc_busy_poll_budget_stops_total",
           "Times polling stopped because its CPU budget was spent.", st.busy_poll_budget_stops);
    single(&o, "rrpc_busy_poll_contended_stops_total",
           "Times polling stopped because the polling thread was not getting its CPU.",
           st.busy_poll_contended_stops);
    single(&o, "rrpc_loop_thread_wakeups_total",
           "Times the loop thread woke from its wait (thread mode).", st.loop_thread_wakeups);
    single(&o, "rrpc_loop_takeovers_total",
           "Blocking calls that ran the loop themselves while the loop thread slept (thread mode).",
           st.loop_takeovers);
    single(&o, "rrpc_qos_pieces_cut_total",
           "tcp: writes of a large frame cut to the shared piece size because another class of "
           "the connection was busy.",
           st.qos_pieces_cut);
    single(&o, "rrpc_qos_turns_preempted_total",
           "tcp: turns of bulk or background that ended early because low-latency input was "
           "waiting (RRPC_TCP_PREEMPT).",
           st.qos_turns_preempted);
#define P(field) offsetof(rrpc_conn_stat, field)
    per_peer(&o, peers, n_peers, "rrpc_peer_connections", "Connections to the peer up now.",
             SIZE_MAX);
    per_peer(&o, peers, n_peers, "rrpc_peer_calls_total", "Calls made to the peer.", P(calls));
    per_peer(&o, peers, n_peers, "rrpc_peer_calls_failed_total",
             "Calls to the peer that failed (answered with an error or failed here).",
             P(calls_failed));
    per_peer(&o, peers, n_peers, "rrpc_peer_requests_total",
             "Requests received from the peer for this context's handlers.", P(requests));
    per_peer(&o, peers, n_peers, "rrpc_peer_sent_bytes_total",
             "Payload bytes of the frames sent to the peer (all types).", P(bytes_out));
    per_peer(&o, peers, n_peers, "rrpc_peer_received_bytes_total",
             "Payload bytes of the frames received from the peer (all types).", P(bytes_in));
    per_peer(&o, peers, n_peers, "rrpc_peer_onesided_bytes_total",
             "Bytes of the one-sided operations started towards the peer.", P(onesided_bytes));
#undef P
    *ret_len = o.used;
    if (o.used >= len) { /* cut (or only sized, with @len 0) */
        if (len)
            buf[len - 1] = 0;
        return -ENOBUFS;
    }
    return 0;
}

static void gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

/* What peers make the context hold and what was refused or evicted for it
 * (struct rrpci_guard), appended at @used of @buf; the length it needs. */
static size_t render_guard(const struct rrpci_guard *g, char *buf, size_t len, size_t used)
{
    struct out o = {.buf = buf, .len = len, .used = used};
    const char *ev = "rrpc_connections_evicted_total";
    put(&o, "# HELP %s Connections closed at a cap to admit another, by why they could go.\n"
        "# TYPE %s counter\n%s{reason=\"unauthenticated\"} %llu\n%s{reason=\"idle\"} %llu\n",
        ev, ev, ev, (unsigned long long)g->evicted_unauth, ev,
        (unsigned long long)g->evicted_idle);
    const char *rf = "rrpc_connections_refused_total";
    put(&o, "# HELP %s Connections refused at accept (or at their ticket), by cap.\n"
        "# TYPE %s counter\n%s{reason=\"per_source\"} %llu\n%s{reason=\"full\"} %llu\n"
        "%s{reason=\"per_principal\"} %llu\n",
        rf, rf, rf, (unsigned long long)g->refused_source, rf,
        (unsigned long long)g->refused_full, rf, (unsigned long long)g->refused_principal);
    gauge(&o, "rrpc_answer_queued_bytes",
          "Answer bytes queued for peers that have not taken them (RRPC_MAX_ANSWER_BYTES).",
          g->answer_bytes);
    single(&o, "rrpc_answer_budget_holds_total",
           "Requests held back and READs refused because the peer held more than its share "
           "of RRPC_MAX_ANSWER_BYTES.", g->answer_holds);
    gauge(&o, "rrpc_tensor_offers_pending",
          "Tensor offers accepted and not yet done (RRPC_TENSOR_MAX_PENDING).",
          g->tensor_pending);
    single(&o, "rrpc_tensor_offers_refused_total",
           "Tensor offers refused at RRPC_TENSOR_MAX_PENDING.", g->tensor_refusals);
    gauge(&o, "rrpc_partial_frame_bytes",
          "Payload bytes of large frames being received (RRPC_MAX_PARTIAL_BYTES).",
          g->partial_bytes);
    single(&o, "rrpc_partial_frame_waits_total",
           "Times a socket was left unread because RRPC_MAX_PARTIAL_BYTES was spent.",
           g->partial_waits);
    single(&o, "rrpc_request_cancels_total",
           "Cancels from callers that found their request still being served.",
           g->cancels_found);
    const char *nr = "rrpc_requests_not_run_total";
    put(&o, "# HELP %s Requests answered without running their handler: cancelled by the "
        "caller, or past the caller's deadline, before a handler worker took them.\n"
        "# TYPE %s counter\n%s{reason=\"cancelled\"} %llu\n%s{reason=\"deadline\"} %llu\n",
        nr, nr, nr, (unsigned long long)g->not_run_cancelled, nr,
        (unsigned long long)g->not_run_deadline);
    single(&o, "rrpc_slow_handlers_total",
           "Handlers that ran longer than 100 ms on the loop thread (RRPC_HANDLER_ON_WORKER "
           "keeps them off it).",
           g->slow_handlers);
    single(&o, "rrpc_handler_reliefs_total",
           "Handlers that ran past RRPC_HANDLER_RELIEF_MS on the loop thread, whose loop "
           "another thread took over meanwhile.",
           g->reliefs);
    const char *mr = "rrpc_metadata_refused_total";
    put(&o, "# HELP %s Frames whose metadata broke its bounds: requests answered "
        "RRPC_E_METADATA unrun, responses that failed their call with it.\n"
        "# TYPE %s counter\n%s{frame=\"request\"} %llu\n%s{frame=\"response\"} %llu\n",
        mr, mr, mr, (unsigned long long)g->meta_refused_request, mr,
        (unsigned long long)g->meta_refused_response);
    return o.used;
}

RRPC_API int rrpc_ctx_stats_text(rrpc_ctx *ctx, char *buf, size_t len, size_t *ret_len)
{
    if (!ctx || !ret_len || (len && !buf))
        return -EINVAL;
    rrpc_stats st;
    rrpc_peer_stats *peers = malloc(sizeof(*peers) * (RRPC_STATS_PEERS + 1));
    if (!peers)
        return -ENOMEM;
    rrpci_lock(ctx); /* one snapshot of both: the classes and the peers agree */
    ctx_snapshot(ctx, &st);
    size_t n = peer_snapshot(ctx, peers);
    struct rrpci_guard g = ctx->guard;
    struct rrpci_nic_dev nics[RRPCI_CTX_NICS];
    size_t n_nics = ctx->n_nics;
    memcpy(nics, ctx->nics, n_nics * sizeof(nics[0]));
    pthread_mutex_unlock(&ctx->lock); /* as rrpc_ctx_stats */
    size_t used = 0;
    rrpci_stats_render(&st, peers, n, buf, len, &used);
    free(peers);
    used = render_guard(&g, buf, len, used);
    /* sysfs is read outside the lock: the loop does not wait for it */
    *ret_len = rrpci_nic_render(nics, n_nics, buf, len, used);
    if (*ret_len >= len) { /* cut (or only sized, with @len 0) */
        if (len)
            buf[len - 1] = 0;
        return -ENOBUFS;
    }
    return 0;
}

void rrpci_ctx_nic_used(rrpc_ctx *ctx, const char *dev, unsigned ports)
{
    for (unsigned i = 0; i < ctx->n_nics; i++)
        if (!strcmp(ctx->nics[i].name, dev))
            return;
    if (ctx->n_nics == RRPCI_CTX_NICS || strlen(dev) >= RRPCI_NIC_NAME_MAX) {
        RRPCI_LOG(ctx, LOG_NOTICE, "RDMA device %s: its port counters are not in the metrics "
                  "(the metrics carry %d devices per context)", dev, RRPCI_CTX_NICS);
        return;
    }
    struct rrpci_nic_dev *d = &ctx->nics[ctx->n_nics++];
    snprintf(d->name, sizeof(d->name), "%s", dev);
    d->ports = ports;
}

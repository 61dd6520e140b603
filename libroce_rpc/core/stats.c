/* SPDX-License-Identifier: MIT */
/* Metrics: the context's counters per QoS class (rrpc_ctx_stats) and their
 * Prometheus text (rrpc_ctx_stats_text).  Counted under the context lock,
 * which every caller of the rrpci_stats_* hooks holds. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

double rrpci_stats_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

void rrpci_stats_call(rrpc_conn *c, int cls, size_t len)
{
    rrpc_class_stats *s = cls_stats(c->ctx, cls);
    s->calls++;
    s->call_bytes_out += len;
    c->stats.calls++;
}

void rrpci_stats_call_done(rrpc_conn *c, int cls, int status, size_t len, double t0)
{
    rrpc_class_stats *s = cls_stats(c->ctx, cls);
    if (status == 0) {
        s->calls_ok++;
        c->stats.calls_ok++;
    } else {
        s->calls_failed++;
        c->stats.calls_failed++;
    }
    s->call_bytes_in += len;
    double us = (rrpci_stats_now() - t0) * 1e6;
    if (us < 0)
        us = 0;
    s->rtt_us_sum += (uint64_t)us;
    s->rtt_buckets[rrpci_stats_bucket(us)]++;
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

void rrpci_stats_frame_in(rrpc_conn *c, size_t len)
{
    c->stats.frames_in++;
    c->stats.bytes_in += len;
}

void rrpci_stats_onesided(rrpc_ctx *ctx, int cls, size_t len)
{
    rrpc_class_stats *s = cls_stats(ctx, cls);
    s->onesided_ops++;
    s->onesided_bytes += len;
}

void rrpci_stats_onesided_failed(rrpc_ctx *ctx, int cls)
{
    cls_stats(ctx, cls)->onesided_failed++;
}

void rrpci_stats_credit_stall(rrpc_ctx *ctx, int cls)
{
    cls_stats(ctx, cls)->credit_stalls++;
}

RRPC_API int rrpc_ctx_stats(rrpc_ctx *ctx, rrpc_stats *ret)
{
    if (!ctx || !ret)
        return -EINVAL;
    rrpci_lock(ctx);
    *ret = ctx->stats;
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

/* One counter family with a value per class: @off is the field's offset in
 * rrpc_class_stats. */
static void per_class(struct out *o, const rrpc_stats *st, const char *name, const char *help,
                      size_t off)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++) {
        uint64_t v;
        memcpy(&v, (const char *)&st->cls[c] + off, sizeof(v));
        put(o, "%s{class=\"%s\"} %llu\n", name, rrpc_class_name(c), (unsigned long long)v);
    }
}

static void single(struct out *o, const char *name, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

int rrpci_stats_render(const rrpc_stats *sp, char *buf, size_t len, size_t *ret_len)
{
    const rrpc_stats st = *sp;
    struct out o = {.buf = buf, .len = len};
#define F(field) offsetof(rrpc_class_stats, field)
    per_class(&o, &st, "rrpc_calls_total", "Calls made.", F(calls));
    per_class(&o, &st, "rrpc_calls_ok_total", "Calls answered with status 0.", F(calls_ok));
    per_class(&o, &st, "rrpc_calls_failed_total",
              "Calls answered with an error, or failed locally (deadline, lost connection).",
              F(calls_failed));
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
#undef F
    const char *h = "rrpc_call_duration_seconds";
    put(&o, "# HELP %s Round trip of the calls answered, from the call to its answer.\n"
            "# TYPE %s histogram\n", h, h);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++) {
        const rrpc_class_stats *s = &st.cls[c];
        const char *cn = rrpc_class_name(c);
        uint64_t cum = 0;
        double edge_us = 1.0;
        for (int i = 0; i < RRPC_STATS_RTT_BUCKETS - 1; i++, edge_us *= 2.0) {
            cum += s->rtt_buckets[i];
            put(&o, "%s_bucket{class=\"%s\",le=\"%.9g\"} %llu\n", h, cn, edge_us / 1e6,
                (unsigned long long)cum);
        }
        cum += s->rtt_buckets[RRPC_STATS_RTT_BUCKETS - 1];
        put(&o, "%s_bucket{class=\"%s\",le=\"+Inf\"} %llu\n", h, cn, (unsigned long long)cum);
        put(&o, "%s_sum{class=\"%s\"} %.6f\n", h, cn, (double)s->rtt_us_sum / 1e6);
        put(&o, "%s_count{class=\"%s\"} %llu\n", h, cn, (unsigned long long)cum);
    }
    single(&o, "rrpc_connections_up_total", "Connections that came up.", st.conns_up);
    single(&o, "rrpc_connections_down_total", "Connections that went down after coming up.",
           st.conns_down);
    single(&o, "rrpc_keepalive_losses_total", "Peers declared lost by the keepalive timeout.",
           st.keepalive_losses);
    *ret_len = o.used;
    if (o.used >= len) { /* cut (or only sized, with @len 0) */
        if (len)
            buf[len - 1] = 0;
        return -ENOBUFS;
    }
    return 0;
}

RRPC_API int rrpc_ctx_stats_text(rrpc_ctx *ctx, char *buf, size_t len, size_t *ret_len)
{
    if (!ctx || !ret_len || (len && !buf))
        return -EINVAL;
    rrpc_stats st;
    rrpc_ctx_stats(ctx, &st);
    return rrpci_stats_render(&st, buf, len, ret_len);
}

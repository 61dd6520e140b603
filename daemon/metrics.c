/* SPDX-License-Identifier: MIT */
/*
 * rrpcd's own metrics (metrics_listen; docs/metrics.md lists them): counters
 * the loop thread (and the etcd threads) add to with one call each, read by
 * the HTTP server's thread for a scrape.  Every counter is an atomic, so a
 * scrape never takes a lock the loop holds; every label comes from a fixed
 * set, so no client can grow the series.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "rrpcd.h"
#ifdef RRPC_HAVE_MHD
#include "util/metrics_http.h"
#endif

/* The operations with series of their own (the first five of the schema's,
 * docs/metrics.md), then "other": watch, unwatch, status and unknown ops. */
#define NOPS (CTL_OP_LOOKUP + 2)
#define OP_OTHER (NOPS - 1)
/* "ok", then the error codes of the control protocol (proto.h), then "other". */
#define NRESULTS (CTL_ERR_COUNT + 1)
#define RESULT_OTHER (NRESULTS - 1)
static const char *const refusal_names[] = {
    [REFUSED_MAX_CONNECTIONS] = "max_connections",
    [REFUSED_PER_SOURCE] = "max_connections_per_source",
    [REFUSED_NO_MEMORY] = "out_of_memory",
    [REFUSED_RESERVED] = "reserved_for_new_sources",
};
#define NREFUSALS (sizeof(refusal_names) / sizeof(refusal_names[0]))
static const char *const etcd_error_names[] = { [ETCD_ERROR_WATCH] = "watch",
                                                [ETCD_ERROR_WRITE] = "write" };
#define NETCD (sizeof(etcd_error_names) / sizeof(etcd_error_names[0]))
static const char *const report_names[] = {
    [REPORT_ACCEPTED] = "accepted",
    [REPORT_NOT_AN_AGENT] = "not_in_agents",
    [REPORT_ADDRESS_NOT_CERTIFIED] = "address_not_in_certificate",
    [REPORT_MALFORMED] = "bad_request",
    [REPORT_MAX_AGENTS] = "max_agents",
};
#define NREPORTS (sizeof(report_names) / sizeof(report_names[0]))

static _Atomic uint64_t requests[NOPS][NRESULTS];
static _Atomic uint64_t refusals[NREFUSALS];
static _Atomic uint64_t etcd_errors[NETCD];
static _Atomic uint64_t reports[NREPORTS], esp_withheld, esp_denied;
static _Atomic int64_t agents;
static _Atomic uint64_t tickets, tls_failures, evictions, held_refusals, etcd_compactions;
static _Atomic int64_t held_bytes;
static _Atomic int64_t sessions, services, instances;
static _Atomic int etcd_degraded = 1; /* until the first synchronization */
static bool etcd_on;
static size_t cur_op = OP_OTHER; /* the loop thread's request being answered */

#define ADD(v, n) atomic_fetch_add_explicit(&(v), (n), memory_order_relaxed)
#define GET(v) atomic_load_explicit(&(v), memory_order_relaxed)

void metrics_op(int op)
{
    cur_op = op >= 0 && op < OP_OTHER ? (size_t)op : OP_OTHER;
}

void metrics_answer(int err)
{
    ADD(requests[cur_op][err >= 0 && err < CTL_ERR_COUNT ? (size_t)err : RESULT_OTHER], 1);
}

void metrics_tickets(size_t n)
{
    ADD(tickets, n);
}

void metrics_tls_failure(void)
{
    ADD(tls_failures, 1);
}

void metrics_sessions(int n)
{
    atomic_store_explicit(&sessions, n, memory_order_relaxed);
}

void metrics_refused(enum metrics_refusal why)
{
    ADD(refusals[why], 1);
}

void metrics_evicted(void)
{
    ADD(evictions, 1);
}

void metrics_held(size_t bytes)
{
    atomic_store_explicit(&held_bytes, (int64_t)bytes, memory_order_relaxed);
}

void metrics_held_refused(void)
{
    ADD(held_refusals, 1);
}

void metrics_registry(int d_services, int d_instances)
{
    ADD(services, d_services);
    ADD(instances, d_instances);
}

void metrics_etcd_degraded(bool d)
{
    atomic_store_explicit(&etcd_degraded, d, memory_order_relaxed);
}

void metrics_etcd_error(enum metrics_etcd_error what)
{
    ADD(etcd_errors[what], 1);
}

void metrics_etcd_compaction(void)
{
    ADD(etcd_compactions, 1);
}

void metrics_report(enum metrics_report what)
{
    ADD(reports[what], 1);
}

void metrics_agents(size_t n)
{
    atomic_store_explicit(&agents, (int64_t)n, memory_order_relaxed);
}

void metrics_esp_lookup(size_t withheld, bool denied)
{
    ADD(esp_withheld, withheld);
    ADD(esp_denied, denied);
}

/* ---- the text, and the server ------------------------------------------------- */

#ifdef RRPC_HAVE_MHD

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of counters with one label, @label: a series for each of the @n
 * values @names, counted in @v. */
static void by_label(FILE *f, const char *name, const char *help, const char *label,
                     const char *const *names, _Atomic uint64_t *v, size_t n)
{
    family(f, name, "counter", help);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
                (unsigned long long)GET(v[i]));
}

static int text(void *user, char **ret_text, size_t *ret_len)
{
    (void)user;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;
    family(f, "rrpcd_build_info", "gauge", "Always 1; the version of this rrpcd.");
    fprintf(f, "rrpcd_build_info{version=\"%s\"} 1\n", RRPC_VERSION_STRING);
    family(f, "rrpcd_services", "gauge", "Services with at least one registration.");
    fprintf(f, "rrpcd_services %lld\n", (long long)GET(services));
    family(f, "rrpcd_registrations", "gauge",
           "Registrations (server instances) held, all services together.");
    fprintf(f, "rrpcd_registrations %lld\n", (long long)GET(instances));
    family(f, "rrpcd_sessions", "gauge", "TLS sessions open, authenticated or not.");
    fprintf(f, "rrpcd_sessions %lld\n", (long long)GET(sessions));
    by_label(f, "rrpcd_sessions_refused_total", "Connections closed at accept, by reason.",
             "reason", refusal_names, refusals, NREFUSALS);
    family(f, "rrpcd_sessions_evicted_total", "counter",
           "Sessions that had not authenticated closed to make room at max_connections.");
    fprintf(f, "rrpcd_sessions_evicted_total %llu\n", (unsigned long long)GET(evictions));
    family(f, "rrpcd_held_bytes", "gauge",
           "Bytes of partly received requests and unsent answers, all sessions.");
    fprintf(f, "rrpcd_held_bytes %lld\n", (long long)GET(held_bytes));
    family(f, "rrpcd_held_refusals_total", "counter",
           "Answers refused and sessions closed for what they would make rrpcd hold "
           "(max_held_per_principal, max_held_total).");
    fprintf(f, "rrpcd_held_refusals_total %llu\n", (unsigned long long)GET(held_refusals));
    family(f, "rrpcd_tls_handshake_failures_total", "counter",
           "TLS handshakes that failed (bad or unknown client certificate, not TLS 1.3, ...).");
    fprintf(f, "rrpcd_tls_handshake_failures_total %llu\n",
            (unsigned long long)GET(tls_failures));
    family(f, "rrpcd_requests_total", "counter",
           "Requests answered, by operation and result (ok or the error code).");
    for (size_t o = 0; o < NOPS; o++)
        for (size_t r = 0; r < NRESULTS; r++)
            fprintf(f, "rrpcd_requests_total{op=\"%s\",result=\"%s\"} %llu\n",
                    o < OP_OTHER ? rrpci_ctl_op_name((int)o) : "other",
                    r < RESULT_OTHER ? rrpci_ctl_err_name((int)r) : "other",
                    (unsigned long long)GET(requests[o][r]));
    family(f, "rrpcd_tickets_issued_total", "counter",
           "Connection tickets issued in lookup answers (one per instance listed).");
    fprintf(f, "rrpcd_tickets_issued_total %llu\n", (unsigned long long)GET(tickets));
    by_label(f, "rrpcd_agent_reports_total",
             "ESP pairs reports of rrpc-agents (op pairs), by result: accepted, or why refused.",
             "result", report_names, reports, NREPORTS);
    family(f, "rrpcd_agents", "gauge",
           "Host addresses whose rrpc-agent's pairs report is held (not expired).");
    fprintf(f, "rrpcd_agents %lld\n", (long long)GET(agents));
    family(f, "rrpcd_esp_instances_withheld_total", "counter",
           "Instances of services that require ESP left out of lookup answers: no pair "
           "between the client's host and theirs.");
    fprintf(f, "rrpcd_esp_instances_withheld_total %llu\n",
            (unsigned long long)GET(esp_withheld));
    family(f, "rrpcd_esp_lookups_denied_total", "counter",
           "Lookups of services that require ESP denied: no instance's host has a pair with "
           "the client's host.");
    fprintf(f, "rrpcd_esp_lookups_denied_total %llu\n", (unsigned long long)GET(esp_denied));
    if (etcd_on) {
        family(f, "rrpcd_etcd_degraded", "gauge",
               "1 while the registry on etcd is unreachable or not synchronized yet.");
        fprintf(f, "rrpcd_etcd_degraded %d\n", GET(etcd_degraded));
        by_label(f, "rrpcd_etcd_errors_total",
                 "Failures to reach etcd: the watch broke, or a write failed.", "op",
                 etcd_error_names, etcd_errors, NETCD);
        family(f, "rrpcd_etcd_compactions_total", "counter",
               "Compactions of etcd's history this rrpcd made (etcd_compact_interval_s, and "
               "after NOSPACE).");
        fprintf(f, "rrpcd_etcd_compactions_total %llu\n",
                (unsigned long long)GET(etcd_compactions));
    }
    if (fclose(f) || !buf) {
        free(buf);
        return -ENOMEM;
    }
    *ret_text = buf;
    *ret_len = len;
    return 0;
}

static struct rrpci_mhttp *server;

/* As port_file: written whole under a temporary name, then renamed. */
static int write_port_file(const char *path, int port)
{
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, path)) {
        LOG(LOG_ERR, "cannot write the metrics port file %s: %s", path, strerror(errno));
        return -EIO;
    }
    return 0;
}

static void http_log(void *user, const char *msg)
{
    (void)user;
    LOG(LOG_DEBUG, "metrics HTTP server: %s", msg);
}
#endif

int metrics_start(const struct config *c)
{
    etcd_on = c->n_etcd > 0;
    if (!c->metrics_listen[0])
        return 0;
#ifdef RRPC_HAVE_MHD
    struct rrpci_mhttp_opts o = { .listen = c->metrics_listen,
                                  .max_conns = (unsigned)c->metrics_max_connections,
                                  .timeout_s = (unsigned)c->metrics_timeout_s,
                                  .text = text, .log = http_log };
    char why[512];
    int r = rrpci_mhttp_start(&o, &server, why, sizeof(why));
    if (r) {
        LOG(LOG_ERR, "metrics_listen = %s: %s", c->metrics_listen, why);
        return r;
    }
    int port = rrpci_mhttp_port(server);
    LOG(LOG_NOTICE, "serving GET /metrics on %s (port %d)", c->metrics_listen, port);
    if (c->metrics_port_file[0])
        return write_port_file(c->metrics_port_file, port);
    return 0;
#else
    LOG(LOG_ERR, "metrics_listen: this rrpcd was built without libmicrohttpd");
    return -EOPNOTSUPP;
#endif
}

void metrics_stop(void)
{
#ifdef RRPC_HAVE_MHD
    rrpci_mhttp_stop(server);
    server = NULL;
#endif
}

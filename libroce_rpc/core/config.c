/* SPDX-License-Identifier: MIT */
/* The core's table of tunables (util/conf.h: name, type, default, range,
 * doc, member of struct rrpci_config), the transports' tables by slot
 * (transport/tunables.h), rrpc_config objects and printing the tables. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/core.h"
#ifdef RRPC_HAVE_MHD
#include "util/metrics_http.h"
#endif

/* metrics_listen: "" (off) or HOST:PORT; binding is tried by rrpc_ctx_create_with. */
static int check_listen(const char *v, char *why, size_t whylen)
{
    if (!*v)
        return 0;
#ifdef RRPC_HAVE_MHD
    /* Setting it loads the server's module: a missing libmicrohttpd is said
     * here, where the value is given. */
    const struct rrpci_mhttp_module *m = rrpci_mhttp_module_load(why, whylen);
    if (!m)
        return -EOPNOTSUPP;
    return m->check_listen(v, why, whylen);
#else
    snprintf(why, whylen, "this libroce_rpc was built without libmicrohttpd (install "
             "libmicrohttpd-dev and build with meson -Dmetrics_http=enabled)");
    return -EOPNOTSUPP;
#endif
}

/* RRPC_REQUIRE_ESP: "" or an absolute path that fits a UNIX socket address. */
static int check_esp(const char *v, char *why, size_t whylen)
{
    if (!*v)
        return 0;
    if (v[0] != '/' || strlen(v) >= 108) {
        snprintf(why, whylen, "want the absolute path of rrpc-agent's --query-socket (at most "
                 "107 bytes), e.g. /run/rrpc-agent/query.sock");
        return -EINVAL;
    }
    return 0;
}

#define C struct rrpci_config
static const struct rrpci_conf_field core_fields[] = {
    {.name = "RRPC_MAX_MSG", RRPCI_CONF_UINT(C, max_msg), .def = 64L << 20, .min = 4096,
     .max = 0x7fffffff, .doc = "largest message payload accepted from a peer, bytes"},
    {.name = "RRPC_DEADLINE_MS", RRPCI_CONF_INT(C, deadline_ms), .def = 30000, .min = -1,
     .max = 86400000, .doc = "default deadline of a call, ms (-1: none)"},
    {.name = "RRPC_CONNECT_TIMEOUT_MS", RRPCI_CONF_INT(C, connect_timeout_ms), .def = 10000,
     .min = 1, .max = 3600000, .doc = "time allowed for a connection to come up, ms"},
    {.name = "RRPC_LOG_LEVEL", RRPCI_CONF_INT(C, log_level), .def = -1, .min = -1, .max = 7,
     .doc = "log to stderr up to this syslog level (3 err .. 7 debug; -1: off); the broker "
            "client's default too"},
    {.name = "RRPC_KEEPALIVE_MS", RRPCI_CONF_INT(C, keepalive_ms), .def = 5000, .min = 0,
     .max = 3600000,
     .doc = "probe a connection after this long without a frame from the peer, ms (0: off)"},
    {.name = "RRPC_KEEPALIVE_TIMEOUT_MS", RRPCI_CONF_INT(C, keepalive_timeout_ms), .def = 0,
     .min = 0, .max = 86400000,
     .doc = "declare the peer dead after this long without any frame, ms (0: 3 x "
            "RRPC_KEEPALIVE_MS); must exceed RRPC_KEEPALIVE_MS"},
    {.name = "RRPC_AUTH_TIMEOUT_MS", RRPCI_CONF_INT(C, auth_timeout_ms), .def = 5000, .min = 1,
     .max = 3600000,
     .doc = "server side: time from accept until the peer has shaken hands and shown its "
            "ticket; either side: from a class's first use until its own socket (tcp) or "
            "queue pair (verbs) is attached, ms"},
    {.name = "RRPC_MAX_CONNS", RRPCI_CONF_INT(C, max_conns), .def = 0, .min = 0, .max = 1000000,
     .doc = "server side: connections held at once; at the cap the oldest unauthenticated one "
            "is closed (0: what RLIMIT_NOFILE allows, at most 4096)"},
    {.name = "RRPC_MAX_CONNS_PER_SOURCE", RRPCI_CONF_INT(C, max_conns_per_source), .def = 64,
     .min = 1, .max = 1000000,
     .doc = "server side: connections held at once from one peer address"},
    {.name = "RRPC_TICKET_RATE", RRPCI_CONF_INT(C, ticket_rate), .def = 256, .min = 1,
     .max = 16384,
     .doc = "server side, broker gates (rrpc_broker_gate): tickets a second one client identity "
            "may use; its share of the replay cache is this times the ticket lifetime + skew "
            "(16..16384 tickets), and a client past its share is refused, not the others"},
    {.name = "RRPC_MAX_CONNS_PER_PRINCIPAL", RRPCI_CONF_INT(C, max_conns_per_principal),
     .def = 64, .min = 1, .max = 1000000,
     .doc = "server side, with tickets: connections held at once authenticated as one principal "
            "(as the ticket verifier names it); these no longer count against their address's "
            "RRPC_MAX_CONNS_PER_SOURCE"},
    {.name = "RRPC_CONNS_RESERVE_PCT", RRPCI_CONF_INT(C, conns_reserve_pct), .def = 25, .min = 0,
     .max = 90,
     .doc = "server side: share of RRPC_MAX_CONNS, percent, kept for peer addresses that hold "
            "no connection; an address that holds one gets a new one only below the rest"},
    {.name = "RRPC_IDLE_EVICT_MS", RRPCI_CONF_INT(C, idle_evict_ms), .def = 2000, .min = 0,
     .max = 86400000,
     .doc = "server side, without tickets: a connection with nothing asked or answered this "
            "long may be closed, the longest idle first, to admit a new one at a cap, ms "
            "(0: never)"},
    {.name = "RRPC_MAX_GRANTS", RRPCI_CONF_INT(C, max_grants), .def = 65536, .min = 1,
     .max = 16777216,
     .doc = "grants (rrpc_grant) alive at once on a context; rrpc_grant refuses more with "
            "RRPC_E_LIMIT until some are revoked"},
    {.name = "RRPC_MAX_ANSWER_BACKLOG", RRPCI_CONF_INT(C, max_answer_backlog), .def = 16L << 20,
     .min = 65536, .max = 1LL << 40,
     .doc = "answer bytes queued for a peer that does not take them; above it its requests' "
            "credit is held back and its one-sided reads are refused"},
    {.name = "RRPC_MAX_ANSWER_BYTES", RRPCI_CONF_INT(C, max_answer_bytes), .def = 64L << 20,
     .min = 65536, .max = 1LL << 40,
     .doc = "answer bytes queued for all peers together; above it a peer holding more than "
            "its share (this / peers holding answers) is held back as by "
            "RRPC_MAX_ANSWER_BACKLOG"},
    {.name = "RRPC_CREDIT_LENDING", RRPCI_CONF_INT(C, credit_lending), .def = 1, .min = 0,
     .max = 1,
     .doc = "1: a connection's peer starts with RRPC_CREDIT_BASE credits per class and is lent "
            "more, up to the class's credits, while it uses them all, out of "
            "RRPC_CREDIT_BUDGET; taken back once idle. 0: every peer holds the class's "
            "credits from the start"},
    {.name = "RRPC_CREDIT_BASE", RRPCI_CONF_INT(C, credit_base), .def = 4, .min = 1,
     .max = 4096,
     .doc = "with lending: the credits per class a peer starts with and keeps (at most the "
            "class's credits)"},
    {.name = "RRPC_CREDIT_BUDGET", RRPCI_CONF_INT(C, credit_budget), .def = 4096, .min = 0,
     .max = 1 << 24,
     .doc = "with lending: credits lent beyond the base at once, per class, over all the "
            "context's connections"},
    {.name = "RRPC_CREDIT_IDLE_MS", RRPCI_CONF_INT(C, credit_idle_ms), .def = 1000, .min = 1,
     .max = 3600000,
     .doc = "with lending: a connection that carried no request or answer this long gives "
            "its lent credit back, ms"},
    {.name = "RRPC_MAX_PARTIAL_BYTES", RRPCI_CONF_INT(C, max_partial_bytes), .def = 256L << 20,
     .min = 1L << 20, .max = 1LL << 40,
     .doc = "payload bytes of large frames being received, over all connections (a frame's "
            "buffer is its announced length until its last byte came); a frame that would "
            "pass it waits, its socket left unread, until another completes (one frame is "
            "always let in)"},
    {.name = "RRPC_SYNC_SPIN_US", RRPCI_CONF_INT(C, sync_spin_us), .def = 50, .min = 0,
     .max = 100000,
     .doc = "thread mode: a blocking (_sync) call watches for its answer this long before it "
            "sleeps, us (0: sleep at once); saves a wake-up per call when answers come fast"},
    {.name = "RRPC_BUSY_POLL_US", RRPCI_CONF_INT(C, busy_poll_us), .def = 200, .min = 0,
     .max = 100000,
     .doc = "after traffic the loop keeps polling its fds without sleeping this long, us (0: "
            "off); trades CPU for latency (a round trip's wake-ups), within "
            "RRPC_BUSY_POLL_BUDGET_PCT; an idle context sleeps again once it passes"},
    {.name = "RRPC_BUSY_POLL_BUDGET_PCT", RRPCI_CONF_INT(C, busy_poll_budget_pct), .def = 50,
     .min = 1, .max = 100,
     .doc = "share of one core, percent, the loop's thread may waste polling (this and the "
            "transports' own polling, e.g. RRPC_VERBS_BUSY_POLL_US) over the last 100 ms: "
            "polling until a window passes with nothing found, and the CPU beyond 1 ms a wait "
            "spent before it found work (under the default windows, polling that finds work "
            "costs nothing: a ping-pong polls on); past it the loop arms its fds and sleeps "
            "until the share falls below (100: no limit); see also "
            "RRPC_BUSY_POLL_MIN_SHARE_PCT"},
    {.name = "RRPC_BUSY_POLL_MIN_SHARE_PCT", RRPCI_CONF_INT(C, busy_poll_min_share_pct),
     .def = 50, .min = 0, .max = 100,
     .doc = "a polling loop thread that ran less than this share of the time it polled (over "
            "20 ms or more) is not getting its CPU and stops polling for 0.1 s, doubled on each "
            "repeat up to 1.6 s, percent (0: never)"},
    {.name = "RRPC_HANDLER_THREADS", RRPCI_CONF_INT(C, handler_threads), .def = 2, .min = 1,
     .max = 256,
     .doc = "threads that run the handlers registered with RRPC_HANDLER_ON_WORKER (started "
            "with the first such method)"},
    {.name = "RRPC_HANDLER_RELIEF_MS", RRPCI_CONF_INT(C, handler_relief_ms), .def = 10,
     .min = 0, .max = 600000,
     .doc = "thread mode: a handler that has run this long on the loop thread no longer holds "
            "the loop: another thread takes it over and serves the other calls beside it, ms "
            "(0: never; the handler holds the loop until it returns)"},
    {.name = "RRPC_HANDLER_QUEUE_BYTES", RRPCI_CONF_INT(C, handler_queue_bytes),
     .def = 64L << 20, .min = 0, .max = 1LL << 40,
     .doc = "request bytes the handler workers may hold, queued or being served; above it a "
            "request is answered RRPC_E_LIMIT (one request is always taken)"},
    {.name = "RRPC_METRICS_MAX_CONNS", RRPCI_CONF_INT(C, metrics_max_conns), .def = 8, .min = 1,
     .max = 1024,
     .doc = "metrics_listen: HTTP connections held at once; at the limit a new one takes the "
            "place of the oldest without a whole request head"},
    {.name = "RRPC_METRICS_TIMEOUT_S", RRPCI_CONF_INT(C, metrics_timeout_s), .def = 10,
     .min = 1, .max = 3600,
     .doc = "metrics_listen: an HTTP connection without progress this long is closed, s"},
    {.name = "RRPC_METRICS_HEADER_TIMEOUT_S", RRPCI_CONF_INT(C, metrics_header_timeout_s),
     .def = 5, .min = 1, .max = 3600,
     .doc = "metrics_listen: a request head must arrive whole within this long of the "
            "connection's accept (or of its previous answer), s; sending slowly does not "
            "extend it"},
    {.name = "RRPC_TENSOR_MAX_BYTES", RRPCI_CONF_UINT(C, tensor_max_bytes), .def = 1L << 30,
     .min = 1, .max = 0x7fffffffffffffffLL,
     .doc = "tensor servers: bytes of offered tensors accepted and not yet arrived, over all "
            "connections (rrpc_tensor_server_opts.max_bytes overrides it)"},
    {.name = "RRPC_TENSOR_MAX_PENDING", RRPCI_CONF_INT(C, tensor_max_pending), .def = 4096,
     .min = 4, .max = 1000000,
     .doc = "tensor servers: offers accepted and not yet done (of any size, zero elements "
            "too), over all connections; one connection may hold a quarter of them"},
    /* Text, from code only: an RRPC_* variable reaches every context of a
     * process, and every one would try to listen on the same address. */
    {.name = "metrics_listen", RRPCI_CONF_TEXT(C, metrics_listen), .def_text = "",
     .def_doc = "\"\" (off)", .check = check_listen, .flags = RRPCI_CONF_NO_ENV,
     .doc = "serve GET /metrics (Prometheus text) over HTTP on HOST:PORT, [IPv6]:PORT (port 0: "
            "a free one, rrpc_ctx_metrics_port says which); \"\": off"},
    {.name = "RRPC_REQUIRE_ESP", RRPCI_CONF_TEXT(C, require_esp), .def_text = "",
     .def_doc = "\"\" (off)", .check = check_esp,
     .doc = "accept a connection from another host only when this host's rrpc-agent, asked "
            "on its query socket at this path, has an ESP pair with it (loopback and inproc "
            "peers pass); \"\": off"},
};
#undef C

const struct rrpci_conf_table rrpci_core_conf = {
    .name = "core",
    .prefix = "RRPC_",
    .fields = core_fields,
    .nfields = RRPCI_CONF_NFIELDS(core_fields),
    .size = sizeof(struct rrpci_config),
};

/* Every table, the core's first, then the transports' by slot; [i + 1] is
 * slot i's.  Those of transports not built in are printed, not accepted. */
static const struct rrpci_conf_table *const all_tables[1 + RRPCI_CONF_NSLOTS] = {
    &rrpci_core_conf,
    [1 + RRPCI_CONF_SLOT_VERBS] = &rrpci_verbs_conf,
    [1 + RRPCI_CONF_SLOT_TCP] = &rrpci_tcp_conf,
};
static const bool built_in[1 + RRPCI_CONF_NSLOTS] = {
    true,
#ifdef RRPC_HAVE_VERBS
    [1 + RRPCI_CONF_SLOT_VERBS] = true,
#endif
    [1 + RRPCI_CONF_SLOT_TCP] = true,
};
#define NTABLES (1 + RRPCI_CONF_NSLOTS)

/* Where table @i's struct is in @cfg. */
static void *table_obj(struct rrpci_config *cfg, size_t i)
{
    return i == 0 ? (void *)cfg : (void *)cfg->tp[i - 1];
}

struct rrpc_config {
    struct rrpci_config v;
};

/* The defaults, then the environment's values. */
static int cfg_from_env(struct rrpci_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NTABLES; i++) {
        char why[600];
        if (!built_in[i])
            continue;
        int r = rrpci_conf_defaults(all_tables[i], table_obj(cfg, i));
        if (r == 0)
            r = rrpci_conf_from_env(all_tables[i], table_obj(cfg, i), why, sizeof(why));
        if (r < 0) {
            rrpci_set_error(NULL, -EINVAL, "%s", why);
            fprintf(stderr, "roce-rpc: %s\n", rrpc_ctx_last_error(NULL));
            return -EINVAL;
        }
    }
    return 0;
}

/* What follows from the values: derived defaults, and checks of pairs. */
static int cfg_finish(struct rrpci_config *cfg)
{
    if (cfg->max_conns == 0) {
        /* Room for every connection's sockets (tcp: one per class) plus the
         * pending handshakes and the application's own files. */
        struct rlimit rl;
        long fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (long)rl.rlim_cur
                       : 65536;
        long n = (fds - 64) / (RRPCI_MAX_CLASSES + 1);
        cfg->max_conns = (int)(n < 4 ? 4 : n > 4096 ? 4096 : n);
    }
    if (cfg->keepalive_ms > 0 && cfg->keepalive_timeout_ms == 0)
        cfg->keepalive_timeout_ms = 3 * cfg->keepalive_ms; /* keepalive_ms <= 3600000 */
    if (cfg->keepalive_ms > 0 && cfg->keepalive_timeout_ms <= cfg->keepalive_ms)
        return rrpci_set_error(NULL, -EINVAL,
                               "RRPC_KEEPALIVE_TIMEOUT_MS=%d must exceed RRPC_KEEPALIVE_MS=%d "
                               "(the peer needs time to answer a probe)",
                               cfg->keepalive_timeout_ms, cfg->keepalive_ms);
    return 0;
}

int rrpci_config_resolve(const rrpc_config *from, struct rrpci_config *ret_cfg)
{
    if (from)
        *ret_cfg = from->v;
    else if (cfg_from_env(ret_cfg) < 0)
        return -EINVAL;
    return cfg_finish(ret_cfg);
}

const void *rrpci_ctx_conf(rrpc_ctx *ctx, enum rrpci_conf_slot slot)
{
    return ctx->cfg.tp[slot];
}

void rrpci_ctx_accept_limits(rrpc_ctx *ctx, struct rrpci_accept_limits *ret)
{
    *ret = (struct rrpci_accept_limits){.max_pending = ctx->cfg.max_conns,
                                        .per_source = ctx->cfg.max_conns_per_source,
                                        .auth_timeout_ms = ctx->cfg.auth_timeout_ms};
}

/* The field called @name in the tables built in, and the index of its table. */
static const struct rrpci_conf_field *cfg_find(const char *name, size_t *ret_table)
{
    for (size_t i = 0; name && i < NTABLES; i++) {
        const struct rrpci_conf_field *f = built_in[i] ? rrpci_conf_find(all_tables[i], name)
                                                       : NULL;
        if (f) {
            *ret_table = i;
            return f;
        }
    }
    return NULL;
}

/* -ENOENT with the closest name of the tables built in, if one is close. */
static int no_such(const char *name)
{
    const struct rrpci_conf_table *in[NTABLES];
    size_t n = 0;
    for (size_t i = 0; i < NTABLES; i++)
        if (built_in[i])
            in[n++] = all_tables[i];
    const char *near = rrpci_conf_suggest(in, n, name);
    return rrpci_set_error(NULL, -ENOENT, "no tunable is called \"%s\" (%s%s%srrpc_config_print "
                           "lists them)", name ? name : "", near ? "did you mean " : "",
                           near ? near : "", near ? "? " : "");
}

RRPC_API int rrpc_config_create(rrpc_config **ret_cfg)
{
    if (!ret_cfg)
        return -EINVAL;
    rrpc_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    int r = cfg_from_env(&cfg->v);
    if (r < 0) {
        free(cfg);
        return r;
    }
    *ret_cfg = cfg;
    return 0;
}

RRPC_API int rrpc_config_set(rrpc_config *cfg, const char *name, const char *value)
{
    if (!cfg || !name || !value)
        return rrpci_set_error(NULL, -EINVAL, "rrpc_config_set needs a config, a name, a value");
    size_t t;
    const struct rrpci_conf_field *f = cfg_find(name, &t);
    if (!f)
        return no_such(name);
    char why[400];
    int r = rrpci_conf_set_field(f, table_obj(&cfg->v, t), value, why, sizeof(why));
    if (r < 0)
        return rrpci_set_error(NULL, r == -EOPNOTSUPP ? r : -EINVAL, "%s=\"%s\": %s (%s)",
                               f->name, value, why, f->doc);
    return 0;
}

RRPC_API int rrpc_config_get(const rrpc_config *cfg, const char *name, long *ret_value)
{
    if (!cfg || !ret_value)
        return -EINVAL;
    size_t t;
    const struct rrpci_conf_field *f = cfg_find(name, &t);
    if (!f)
        return no_such(name);
    if (f->type == RRPCI_CONF_T_TEXT)
        return rrpci_set_error(NULL, -EINVAL, "%s is text, not a number: rrpc_config_get "
                               "reads numbers only", f->name);
    const void *obj = t == 0 ? (const void *)&cfg->v : (const void *)cfg->v.tp[t - 1];
    *ret_value = (long)rrpci_conf_number(f, obj);
    return 0;
}

RRPC_API void rrpc_config_destroy(rrpc_config *cfg)
{
    free(cfg);
}

void rrpci_config_print_as(FILE *fp, enum rrpci_conf_style style, bool all)
{
    for (size_t i = 0; i < NTABLES; i++) {
        if (!all && !built_in[i])
            continue;
        if (style == RRPCI_CONF_SCDOC && i > 0)
            fputc('\n', fp);
        rrpci_conf_print(all_tables[i], fp, style);
    }
}

RRPC_API void rrpc_config_print(FILE *fp)
{
    rrpci_config_print_as(fp ? fp : stdout, RRPCI_CONF_PLAIN, false);
}

/* SPDX-License-Identifier: MIT */
/* The configuration table: every tunable, its default, range, doc string
 * and environment variable; rrpc_config objects; printing the table. */
#include <dirent.h>
#include <sched.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/timerfd.h>

#include <pthread.h>

#include "core/core.h"
#include "util/reserved.h"
#ifdef RRPC_HAVE_MHD
#include "util/metrics_http.h"
#endif

/* ---- configuration table ---------------------------------------------- */

struct cfg_entry {
    const char *env;
    long def, min, max;
    size_t off;
    const char *doc;
};

#define CFG_OFF(f) offsetof(struct rrpci_config, f)
#define CFG_TRANSPORT SIZE_MAX /* read by a transport through rrpci_ctx_tunable */
/* The core's tunables; the transports compiled in add theirs (cfg_init). */
static const struct cfg_entry core_table[] = {
    {"RRPC_MAX_MSG", 64L << 20, 4096, 0x7fffffffL, CFG_OFF(max_msg),
     "largest message payload accepted from a peer, bytes"},
    {"RRPC_DEADLINE_MS", 30000, -1, 86400000L, CFG_OFF(deadline_ms),
     "default deadline of a call, ms (-1: none)"},
    {"RRPC_CONNECT_TIMEOUT_MS", 10000, 1, 3600000L, CFG_OFF(connect_timeout_ms),
     "time allowed for a connection to come up, ms"},
    {"RRPC_LOG_LEVEL", -1, -1, 7, CFG_OFF(log_level),
     "log to stderr up to this syslog level (3 err .. 7 debug; -1: off)"},
    {"RRPC_KEEPALIVE_MS", 5000, 0, 3600000L, CFG_OFF(keepalive_ms),
     "probe a connection after this long without a frame from the peer, ms (0: off)"},
    {"RRPC_KEEPALIVE_TIMEOUT_MS", 0, 0, 86400000L, CFG_OFF(keepalive_timeout_ms),
     "declare the peer dead after this long without any frame, ms (0: 3 x RRPC_KEEPALIVE_MS)"},
    {"RRPC_AUTH_TIMEOUT_MS", 5000, 1, 3600000L, CFG_OFF(auth_timeout_ms),
     "server side: time from accept until the peer has shaken hands and shown its ticket, ms"},
    {"RRPC_MAX_CONNS", 0, 0, 1000000L, CFG_OFF(max_conns),
     "server side: connections held at once; at the cap the oldest unauthenticated one is "
     "closed (0: what RLIMIT_NOFILE allows, at most 4096)"},
    {"RRPC_MAX_CONNS_PER_SOURCE", 64, 1, 1000000L, CFG_OFF(max_conns_per_source),
     "server side: connections held at once from one peer address"},
    {"RRPC_MAX_ANSWER_BACKLOG", 16L << 20, 65536, 1L << 40, CFG_OFF(max_answer_backlog),
     "answer bytes queued for a peer that does not take them; above it its requests' credit "
     "is held back and its one-sided reads are refused"},
    {"RRPC_SYNC_SPIN_US", 50, 0, 100000, CFG_OFF(sync_spin_us),
     "thread mode: a blocking (_sync) call watches for its answer this long before it sleeps, "
     "us (0: sleep at once); saves a wake-up per call when answers come fast"},
    {"RRPC_BUSY_POLL_US", 0, 0, 100000, CFG_OFF(busy_poll_us),
     "after traffic the loop keeps polling its fds without sleeping this long, us (0: off); "
     "trades CPU for latency, an idle context sleeps again once it passes"},
    {"RRPC_BUSY_POLL_BUDGET_PCT", 50, 1, 100, CFG_OFF(busy_poll_budget_pct),
     "share of one core, percent, the loop's thread may spend while polling (this and the "
     "transports' own polling, e.g. RRPC_VERBS_BUSY_POLL_US) over the last 100 ms; past it the "
     "loop arms its fds and sleeps until the share falls below (100: no limit); see also "
     "RRPC_BUSY_POLL_MIN_SHARE_PCT"},
    {"RRPC_BUSY_POLL_MIN_SHARE_PCT", 50, 0, 100, CFG_OFF(busy_poll_min_share_pct),
     "a polling loop thread that ran less than this share of the time it polled (over 20 ms "
     "or more) is not getting its CPU and stops polling for 0.1 s, doubled on each repeat up "
     "to 1.6 s, percent (0: never)"},
    {"RRPC_HANDLER_THREADS", 2, 1, 256, CFG_OFF(handler_threads),
     "threads that run the handlers registered with RRPC_HANDLER_ON_WORKER (started with "
     "the first such method)"},
    {"RRPC_HANDLER_QUEUE_BYTES", 64L << 20, 0, 1L << 40, CFG_OFF(handler_queue_bytes),
     "request bytes the handler workers may hold, queued or being served; above it a "
     "request is answered RRPC_E_LIMIT (one request is always taken)"},
    {"RRPC_METRICS_MAX_CONNS", 8, 1, 1024, CFG_OFF(metrics_max_conns),
     "metrics_listen: HTTP connections held at once; more wait in the kernel's backlog"},
    {"RRPC_METRICS_TIMEOUT_S", 10, 1, 3600, CFG_OFF(metrics_timeout_s),
     "metrics_listen: an HTTP connection without progress this long is closed, s"},
    {"RRPC_TENSOR_MAX_BYTES", 1L << 30, 1, 0x7fffffffffffffffL, CFG_TRANSPORT,
     "tensor servers: bytes of offered tensors accepted and not yet arrived, over all "
     "connections (rrpc_tensor_server_opts.max_bytes overrides it)"},
};
#define NCORE (sizeof(core_table) / sizeof(core_table[0]))
_Static_assert(NCORE <= RRPCI_MAX_TUNABLES, "raise RRPCI_MAX_TUNABLES");

/* The whole table: the core's entries, then each transport's (made once). */
static struct cfg_entry cfg_table[RRPCI_MAX_TUNABLES];
static size_t ncfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static void cfg_init(void)
{
    memcpy(cfg_table, core_table, sizeof(core_table));
    ncfg = NCORE;
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++) {
        const struct rrpci_transport_ops *ops = rrpci_transport_nth(i);
        for (const struct rrpci_tunable *t = ops ? ops->tunables : NULL; t && t->env; t++) {
            if (ncfg == RRPCI_MAX_TUNABLES) {
                fprintf(stderr, "roce-rpc: internal error: raise RRPCI_MAX_TUNABLES\n");
                abort();
            }
            cfg_table[ncfg++] =
                (struct cfg_entry){t->env, t->def, t->min, t->max, CFG_TRANSPORT, t->doc};
        }
    }
}

/* The number of entries of cfg_table, which this makes on first use. */
static size_t cfg_count(void)
{
    pthread_once(&cfg_once, cfg_init);
    return ncfg;
}

static void cfg_store(struct rrpci_config *cfg, const struct cfg_entry *e, long v)
{
    cfg->all[e - cfg_table] = v;
    if (e->off == CFG_TRANSPORT)
        return;
    char *p = (char *)cfg + e->off;
    if (e->off == CFG_OFF(max_msg))
        *(uint32_t *)(void *)p = (uint32_t)v;
    else if (e->off == CFG_OFF(max_answer_backlog) || e->off == CFG_OFF(handler_queue_bytes))
        *(long *)(void *)p = v;
    else
        *(int *)(void *)p = (int)v;
}

#define NCFG cfg_count()

/*
 * Text tunables: set from code only (rrpc_config_set), never from the
 * environment: an RRPC_* variable reaches every context of a process, and
 * every one would try to listen on the same address.
 */
struct cfg_text {
    const char *name;
    size_t off;
    int (*check)(const char *value, char *why, size_t whylen);
    const char *doc;
};

/* metrics_listen: "" (off) or HOST:PORT; binding is tried by rrpc_ctx_create_with. */
static int check_listen(const char *v, char *why, size_t whylen)
{
    if (!*v)
        return 0;
#ifdef RRPC_HAVE_MHD
    return rrpci_mhttp_check_listen(v, why, whylen);
#else
    snprintf(why, whylen, "this libroce_rpc was built without libmicrohttpd (install "
             "libmicrohttpd-dev and build with meson -Dmetrics_http=enabled)");
    return -EOPNOTSUPP;
#endif
}

static const struct cfg_text text_table[] = {
    {"metrics_listen", offsetof(struct rrpci_config, metrics_listen), check_listen,
     "serve GET /metrics (Prometheus text) over HTTP on HOST:PORT, [IPv6]:PORT (port 0: a "
     "free one, rrpc_ctx_metrics_port says which); \"\": off"},
};
#define NTEXT (sizeof(text_table) / sizeof(text_table[0]))

struct rrpc_config {
    long v[RRPCI_MAX_TUNABLES];
    char text[NTEXT][RRPCI_TEXT_MAX];
};

static const struct cfg_text *text_find(const char *name)
{
    for (size_t i = 0; name && i < NTEXT; i++)
        if (strcasecmp(name, text_table[i].name) == 0)
            return &text_table[i];
    return NULL;
}

/* Parses @s for entry @e; -EINVAL with the detail in the thread's error. */
static int cfg_parse(const struct cfg_entry *e, const char *s, long *ret)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (!*s || errno || *end || v < e->min || v > e->max)
        return rrpci_set_error(NULL, -EINVAL, "%s=\"%s\" is not a number from %ld to %ld (%s)",
                               e->env, s, e->min, e->max, e->doc);
    *ret = v;
    return 0;
}

/* The environment's values, else the defaults. */
static int cfg_from_env(long v[RRPCI_MAX_TUNABLES])
{
    for (size_t i = 0; i < NCFG; i++) {
        v[i] = cfg_table[i].def;
        const char *s = getenv(cfg_table[i].env);
        if (s && *s && cfg_parse(&cfg_table[i], s, &v[i]) < 0) {
            fprintf(stderr, "roce-rpc: %s\n", rrpc_ctx_last_error(NULL));
            return -EINVAL;
        }
    }
    return 0;
}

static int cfg_load(struct rrpci_config *cfg, const long v[RRPCI_MAX_TUNABLES])
{
    for (size_t i = 0; i < NCFG; i++)
        cfg_store(cfg, &cfg_table[i], v[i]);
    if (cfg->max_conns == 0) {
        /* Room for every connection's sockets (tcp: one per class) plus the
         * pending handshakes and the application's own files. */
        struct rlimit rl;
        long fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (long)rl.rlim_cur
                       : 65536;
        long n = (fds - 64) / (RRPCI_MAX_CLASSES + 1);
        cfg->max_conns = (int)(n < 4 ? 4 : n > 4096 ? 4096 : n);
        for (size_t i = 0; i < NCFG; i++)
            if (cfg_table[i].off == CFG_OFF(max_conns))
                cfg->all[i] = cfg->max_conns; /* what rrpci_ctx_tunable reports */
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
    long env[RRPCI_MAX_TUNABLES];
    if (!from && cfg_from_env(env) < 0)
        return -EINVAL;
    for (size_t i = 0; from && i < NTEXT; i++)
        memcpy((char *)ret_cfg + text_table[i].off, from->text[i], RRPCI_TEXT_MAX);
    return cfg_load(ret_cfg, from ? from->v : env);
}

/* The entry called @name: "RRPC_MAX_CONNS" or "max_conns", any case. */
static const struct cfg_entry *cfg_find(const char *name)
{
    for (size_t i = 0; name && i < NCFG; i++) {
        const char *env = cfg_table[i].env;
        if (strcasecmp(name, env) == 0 || strcasecmp(name, env + 5) == 0)
            return &cfg_table[i];
    }
    return NULL;
}

RRPC_API int rrpc_config_create(rrpc_config **ret_cfg)
{
    if (!ret_cfg)
        return -EINVAL;
    rrpc_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return -ENOMEM;
    int r = cfg_from_env(cfg->v);
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
    const struct cfg_text *t = text_find(name);
    if (t) {
        char why[400];
        int r = strlen(value) < RRPCI_TEXT_MAX ? t->check(value, why, sizeof(why))
                                               : (snprintf(why, sizeof(why), "too long"), -EINVAL);
        if (r < 0)
            return rrpci_set_error(NULL, r, "%s=\"%s\": %s", t->name, value, why);
        snprintf(cfg->text[t - text_table], RRPCI_TEXT_MAX, "%s", value);
        return 0;
    }
    const struct cfg_entry *e = cfg_find(name);
    if (!e)
        return rrpci_set_error(NULL, -ENOENT, "no tunable is called \"%s\" "
                               "(rrpc_config_print lists them)", name);
    return cfg_parse(e, value, &cfg->v[e - cfg_table]);
}

RRPC_API int rrpc_config_get(const rrpc_config *cfg, const char *name, long *ret_value)
{
    const struct cfg_entry *e = cfg_find(name);
    if (!cfg || !ret_value)
        return -EINVAL;
    if (!e && text_find(name))
        return rrpci_set_error(NULL, -EINVAL, "%s is text, not a number: rrpc_config_get "
                               "reads numbers only", name);
    if (!e)
        return rrpci_set_error(NULL, -ENOENT, "no tunable is called \"%s\"", name ? name : "");
    *ret_value = cfg->v[e - cfg_table];
    return 0;
}

RRPC_API void rrpc_config_destroy(rrpc_config *cfg)
{
    free(cfg);
}

long rrpci_ctx_tunable(rrpc_ctx *ctx, const char *env)
{
    for (size_t i = 0; i < NCFG; i++)
        if (strcmp(cfg_table[i].env, env) == 0)
            return ctx->cfg.all[i];
    fprintf(stderr, "roce-rpc: internal error: tunable %s is not in the table\n", env);
    abort();
}

RRPC_API void rrpc_config_print(void *fp)
{
    FILE *f = fp ? fp : stdout;
    for (size_t i = 0; i < NCFG; i++)
        fprintf(f, "%-26s default %-10ld %s\n", cfg_table[i].env, cfg_table[i].def,
                cfg_table[i].doc);
    for (size_t i = 0; i < NTEXT; i++)
        fprintf(f, "%-26s default %-10s %s (rrpc_config_set only, not the environment)\n",
                text_table[i].name, "\"\"", text_table[i].doc);
}

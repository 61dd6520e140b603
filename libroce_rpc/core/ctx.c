/* SPDX-License-Identifier: MIT */
/* Contexts: the loop, its lock and thread, configuration, errors and logs. */
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

#include "core/core.h"
#include "util/reserved.h"

/* ---- configuration table ---------------------------------------------- */

struct cfg_entry {
    const char *env;
    long def, min, max;
    size_t off;
    const char *doc;
};

#define CFG_OFF(f) offsetof(struct rrpci_config, f)
#define CFG_TRANSPORT SIZE_MAX /* read by a transport through rrpci_ctx_tunable */
static const struct cfg_entry cfg_table[] = {
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
    {"RRPC_TENSOR_MAX_BYTES", 1L << 30, 1, 0x7fffffffffffffffL, CFG_TRANSPORT,
     "tensor servers: bytes of offered tensors accepted and not yet arrived, over all "
     "connections (rrpc_tensor_server_opts.max_bytes overrides it)"},
    {"RRPC_VERBS_EAGER", 8192, 256, 1L << 20, CFG_TRANSPORT,
     "verbs: payloads above this many bytes use the rendezvous (RDMA READ)"},
    {"RRPC_VERBS_BUSY_POLL_US", 0, 0, 100000, CFG_TRANSPORT,
     "verbs: after completions, the loop polls the CQ once per iteration instead of "
     "sleeping on its channel until this long passed without one, us (0: off)"},
    {"RRPC_VERBS_CHUNK", 256L << 10, 4096, 1L << 30, CFG_TRANSPORT,
     "verbs: bytes per RDMA READ/WRITE work request"},
    {"RRPC_VERBS_DATA_DEPTH", 2, 1, 64, CFG_TRANSPORT,
     "verbs: RDMA READ/WRITE work requests in flight per queue pair"},
};
_Static_assert(sizeof(cfg_table) / sizeof(cfg_table[0]) <= RRPCI_MAX_TUNABLES,
               "raise RRPCI_MAX_TUNABLES");

static void cfg_store(struct rrpci_config *cfg, const struct cfg_entry *e, long v)
{
    cfg->all[e - cfg_table] = v;
    if (e->off == CFG_TRANSPORT)
        return;
    char *p = (char *)cfg + e->off;
    if (e->off == CFG_OFF(max_msg))
        *(uint32_t *)(void *)p = (uint32_t)v;
    else if (e->off == CFG_OFF(max_answer_backlog))
        *(long *)(void *)p = v;
    else
        *(int *)(void *)p = (int)v;
}

#define NCFG (sizeof(cfg_table) / sizeof(cfg_table[0]))

struct rrpc_config {
    long v[NCFG];
};

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
static int cfg_from_env(long v[NCFG])
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

static int cfg_load(struct rrpci_config *cfg, const long v[NCFG])
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
    for (size_t i = 0; i < sizeof(cfg_table) / sizeof(cfg_table[0]); i++)
        fprintf(f, "%-26s default %-10ld %s\n", cfg_table[i].env, cfg_table[i].def,
                cfg_table[i].doc);
}

/* ---- classes ----------------------------------------------------------- */

static const char *const class_names[RRPCI_MAX_CLASSES] = {"control", "low_latency", "bulk",
                                                           "background"};
static const struct rrpci_class_cfg class_defaults[RRPCI_MAX_CLASSES] = {
    {48, 4, 16}, {46, 8, 64}, {10, 2, 16}, {8, 1, 8}};

RRPC_API int rrpc_class_from_name(const char *name)
{
    for (int i = 0; name && i < RRPCI_MAX_CLASSES; i++)
        if (strcmp(name, class_names[i]) == 0)
            return rrpci_cls_public(i);
    return RRPC_E_BAD_CLASS;
}

RRPC_API const char *rrpc_class_name(int cls)
{
    int i = rrpci_cls_index(cls);
    return i >= 0 ? class_names[i] : NULL;
}

const char *rrpci_class_name(int idx)
{
    return idx >= 0 && idx < RRPCI_MAX_CLASSES ? class_names[idx] : "?";
}

int rrpci_class_arg(rrpc_ctx *ctx, int cls, int dflt, int *ret_idx)
{
    if (cls == RRPC_CLASS_DEFAULT) {
        *ret_idx = dflt;
        return 0;
    }
    int i = rrpci_cls_index(cls);
    if (i < 0)
        return rrpci_set_error(ctx, RRPC_E_BAD_CLASS,
                               "QoS class %d does not exist (RRPC_CLASS_CONTROL=%d .. "
                               "RRPC_CLASS_BACKGROUND=%d, or 0 for the default)",
                               cls, RRPC_CLASS_FIRST, RRPC_CLASS_LAST);
    *ret_idx = i;
    return 0;
}

int rrpci_reserved_check(rrpc_ctx *ctx, const uint64_t *r, size_t n, const char *what)
{
    int bad = r ? rrpci_reserved_bad(r, n) : -1;
    return bad < 0 ? 0 : rrpci_set_error(ctx, -EINVAL, RRPCI_RESERVED_WHY, what, bad);
}

RRPC_API int rrpc_class_set(rrpc_ctx *ctx, int api_cls, int dscp, int weight, int credits)
{
    int cls = rrpci_cls_index(api_cls);
    if (cls < 0)
        return rrpci_set_error(ctx, RRPC_E_BAD_CLASS, "class %d does not exist (%d..%d)", api_cls,
                               RRPC_CLASS_FIRST, RRPC_CLASS_LAST);
    if (dscp < 0 || dscp > 63 || weight < 1 || weight > 1000 || credits < 1 || credits > 4096)
        return rrpci_set_error(ctx, -EINVAL,
                               "class %s: dscp must be 0..63, weight 1..1000, credits 1..4096",
                               class_names[cls]);
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->endpoints_made) {
        r = rrpci_set_error(ctx, -EBUSY,
                            "configure classes before the first rrpc_listen/rrpc_connect");
    } else {
        ctx->cls[cls] = (struct rrpci_class_cfg){dscp, (uint32_t)weight, (uint32_t)credits};
    }
    rrpci_unlock(ctx);
    return r;
}

RRPC_API int rrpc_class_get(rrpc_ctx *ctx, int api_cls, int *ret_dscp, int *ret_weight,
                            int *ret_credits)
{
    int cls = rrpci_cls_index(api_cls);
    if (cls < 0)
        return RRPC_E_BAD_CLASS;
    if (ret_dscp)
        *ret_dscp = ctx->cls[cls].dscp;
    if (ret_weight)
        *ret_weight = (int)ctx->cls[cls].weight;
    if (ret_credits)
        *ret_credits = (int)ctx->cls[cls].credits;
    return 0;
}

int rrpci_ctx_class_dscp(rrpc_ctx *ctx, int cls)
{
    return ctx->cls[cls].dscp;
}

unsigned rrpci_ctx_class_weight(rrpc_ctx *ctx, int cls)
{
    return ctx->cls[cls].weight;
}

uint32_t rrpci_ctx_max_msg(rrpc_ctx *ctx)
{
    return ctx->cfg.max_msg;
}

/* ---- errors and logs --------------------------------------------------- */

static _Thread_local rrpc_ctx *err_ctx;
static _Thread_local char err_buf[RRPCI_ERRMSG_MAX];

int rrpci_set_error(rrpc_ctx *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
    err_ctx = ctx;
    if (ctx)
        RRPCI_LOG(ctx, LOG_INFO, "%s: %s", rrpc_err_name(code), err_buf);
    return code;
}

RRPC_API const char *rrpc_ctx_last_error(rrpc_ctx *ctx)
{
    return err_ctx == ctx ? err_buf : "";
}

bool rrpci_log_enabled(rrpc_ctx *ctx, int level)
{
    return level <= ctx->log_max;
}

void rrpci_log(rrpc_ctx *ctx, int level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (ctx->log_fn)
        ctx->log_fn(level, buf, ctx->log_user);
    else
        fprintf(stderr, "roce-rpc[%d]: %s\n", level, buf);
}

RRPC_API void rrpc_ctx_set_log(rrpc_ctx *ctx, int max_level, rrpc_log_fn fn, void *user)
{
    rrpci_lock(ctx);
    ctx->log_fn = fn;
    ctx->log_user = user;
    ctx->log_max = max_level;
    rrpci_unlock(ctx);
}

/* ---- the loop and its lock --------------------------------------------- */

void rrpci_lock(rrpc_ctx *ctx)
{
    atomic_fetch_add(&ctx->lock_waiters, 1);
    pthread_mutex_lock(&ctx->lock);
    atomic_fetch_sub(&ctx->lock_waiters, 1);
}

static void timer_unlink(struct rrpci_timer *t)
{
    if (!t->pprev)
        return;
    *t->pprev = t->next;
    if (t->next)
        t->next->pprev = t->pprev;
    t->next = NULL;
    t->pprev = NULL;
}

static void timer_link(struct rrpci_timer *t)
{
    if (t->pprev)
        return;
    rrpc_ctx *ctx = t->ctx;
    t->next = ctx->timers;
    if (t->next)
        t->next->pprev = &t->next;
    ctx->timers = t;
    t->pprev = &ctx->timers;
}

static void timer_fired(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct rrpci_timer *t = rrpci_container_of(w, struct rrpci_timer, w);
    if (!ev_is_active(w))
        timer_unlink(t); /* a one-shot timer: libev stopped it */
    t->cb(loop, w, revents); /* which may free @t */
}

void rrpci_timer_init(rrpc_ctx *ctx, struct rrpci_timer *t,
                      void (*cb)(struct ev_loop *loop, ev_timer *w, int revents), double after,
                      double repeat)
{
    ev_timer_init(&t->w, timer_fired, after, repeat);
    t->ctx = ctx;
    t->cb = cb;
    t->next = NULL;
    t->pprev = NULL;
}

void rrpci_timer_set(struct rrpci_timer *t, double after, double repeat)
{
    ev_timer_set(&t->w, after, repeat);
}

void rrpci_timer_start(struct rrpci_timer *t)
{
    if (!rrpci_in_callback(t->ctx))
        ev_now_update(t->ctx->loop);
    ev_timer_start(t->ctx->loop, &t->w);
    timer_link(t);
}

void rrpci_timer_stop(struct rrpci_timer *t)
{
    ev_timer_stop(t->ctx->loop, &t->w);
    timer_unlink(t);
}

void rrpci_timer_again(struct rrpci_timer *t)
{
    ev_timer_again(t->ctx->loop, &t->w);
    if (ev_is_active(&t->w))
        timer_link(t);
    else
        timer_unlink(t);
}

bool rrpci_timer_active(const struct rrpci_timer *t)
{
    return ev_is_active(&t->w);
}

void rrpci_unlock(rrpc_ctx *ctx)
{
    bool other = !(ctx->in_run && pthread_equal(ctx->owner, pthread_self()));
    pthread_mutex_unlock(&ctx->lock);
    /* Another thread changed watchers or queued work: make the loop look. */
    if (other)
        ev_async_send(ctx->loop, &ctx->wake);
}

bool rrpci_in_callback(rrpc_ctx *ctx)
{
    return ctx->in_run && pthread_equal(ctx->owner, pthread_self());
}

static void loop_release(struct ev_loop *loop)
{
    rrpc_ctx *ctx = ev_userdata(loop);
    pthread_mutex_unlock(&ctx->lock);
}

static void loop_acquire(struct ev_loop *loop)
{
    rrpc_ctx *ctx = ev_userdata(loop);
    /* A busy loop would re-take the (unfair) mutex at once and starve the
     * threads calling in: let them through first. */
    while (atomic_load(&ctx->lock_waiters) > 0)
        sched_yield();
    pthread_mutex_lock(&ctx->lock);
}

/*
 * Adaptive polling: while the idle watcher is active libev polls its fds
 * with a zero timeout instead of sleeping, so an answer that follows traffic
 * closely is picked up without a wake-up, and the check watcher lets each
 * transport look for completions that wake no fd (ops->busy_poll: a verbs
 * CQ that is not armed).  Both stop once the window (RRPC_BUSY_POLL_US, or a
 * transport's own) has passed without traffic and no transport wants more:
 * an idle context sleeps, and the CPU it spends is bounded by that window
 * after each burst.
 */
static void busy_idle_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    /* Its being active is the point: the loop does not sleep. */
}

static void busy_check_cb(struct ev_loop *loop, ev_check *w, int revents)
{
    rrpc_ctx *ctx = w->data;
    bool more = false;
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (ctx->tops[i] && ctx->tops[i]->busy_poll && ctx->tops[i]->busy_poll(ctx))
            more = true;
    if (!more && ev_now(loop) >= ctx->busy_until) {
        ev_idle_stop(loop, &ctx->busy_idle);
        ev_check_stop(loop, w);
    }
}

void rrpci_ctx_busy(rrpc_ctx *ctx, unsigned us)
{
    ev_tstamp until = ev_now(ctx->loop) + us * 1e-6;
    if (until > ctx->busy_until)
        ctx->busy_until = until;
    if (!ev_is_active(&ctx->busy_idle)) {
        ev_idle_start(ctx->loop, &ctx->busy_idle);
        ev_check_start(ctx->loop, &ctx->busy_check);
    }
}

void rrpci_ctx_activity(rrpc_ctx *ctx)
{
    if (ctx->cfg.busy_poll_us > 0)
        rrpci_ctx_busy(ctx, (unsigned)ctx->cfg.busy_poll_us);
}

static void wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    rrpc_ctx *ctx = w->data;
    if (ctx->stopping)
        ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop with the lock held once by the caller. */
static void run_locked(rrpc_ctx *ctx, int flags)
{
    ctx->in_run++;
    ctx->owner = pthread_self();
    ev_run(ctx->loop, flags);
    ctx->in_run--;
}

static void *loop_thread(void *arg)
{
    rrpc_ctx *ctx = arg;
    rrpci_lock(ctx);
    while (!ctx->stopping)
        run_locked(ctx, 0);
    pthread_mutex_unlock(&ctx->lock);
    return NULL;
}

int rrpci_sync_begin(struct rrpci_sync *s, rrpc_ctx *ctx, const char *why_not_here)
{
    if (!ctx)
        return -EINVAL;
    if (rrpci_in_callback(ctx))
        return rrpci_set_error(ctx, RRPC_E_DEADLOCK, "%s", why_not_here);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->done = false;
    s->ctx = ctx;
    s->status = 0;
    s->detail[0] = 0;
    rrpci_lock(ctx);
    return 0;
}

void rrpci_sync_done(struct rrpci_sync *s, int status, const char *fmt, ...)
{
    s->status = status;
    if (status != 0) {
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(s->detail, sizeof(s->detail), fmt, ap);
            va_end(ap);
        } else {
            snprintf(s->detail, sizeof(s->detail), "%s", rrpc_strerror(status));
        }
    }
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->done, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void rrpci_sync_op_cb(int status, void *user)
{
    struct rrpci_sync *s = user;
    const char *why = rrpc_ctx_last_error(s->ctx);
    rrpci_sync_done(s, status, "%s", why[0] ? why : rrpc_strerror(status));
}

static bool sync_done(struct rrpci_sync *s)
{
    pthread_mutex_lock(&s->mu);
    bool d = s->done;
    pthread_mutex_unlock(&s->mu);
    return d;
}

static void driven_rearm(rrpc_ctx *ctx);

/* Watches @s for up to @us without sleeping: an answer that comes within it
 * costs no wake-up of this thread.  Whether it came. */
static bool spin_for(struct rrpci_sync *s, int us)
{
    if (us <= 0)
        return false;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0;; i++) {
        if (__atomic_load_n(&s->done, __ATOMIC_ACQUIRE))
            return true;
        if ((i & 63) == 63) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 >= us)
                return false;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static void sync_wait(rrpc_ctx *ctx, struct rrpci_sync *s)
{
    while (!sync_done(s)) {
        if (!ctx->thread_mode && !ctx->in_run) {
            run_locked(ctx, EVRUN_ONCE);
            driven_rearm(ctx);
            continue;
        }
        /* The loop runs on another thread.  Let go of the context (waking
         * the loop: it must see what this thread just queued) and sleep on
         * the sync.  The timeout re-checks who drives the loop in driven
         * mode. */
        rrpci_unlock(ctx);
        if (spin_for(s, ctx->cfg.sync_spin_us)) {
            rrpci_lock(ctx);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&s->mu);
        if (!s->done)
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        pthread_mutex_unlock(&s->mu);
        rrpci_lock(ctx);
    }
}

int rrpci_sync_end(struct rrpci_sync *s, int started)
{
    rrpc_ctx *ctx = s->ctx;
    int r = started;
    if (r == 0) {
        sync_wait(ctx, s);
        r = s->status;
        if (r != 0)
            rrpci_set_error(ctx, r, "%s", s->detail);
    }
    rrpci_unlock(ctx);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    return r;
}

static void probe_cb(struct ev_loop *loop, ev_io *w, int revents)
{
}

/* Whether the epoll fdinfo text @info lists the file (@fd, @ino) as a target. */
static bool epoll_watches(const char *info, int fd, unsigned long ino)
{
    for (const char *p = strstr(info, "tfd:"); p; p = strstr(p + 4, "tfd:")) {
        int tfd = -1;
        const char *in = strstr(p, "ino:");
        const char *nl = strchr(p, '\n');
        if (sscanf(p, "tfd: %d", &tfd) == 1 && tfd == fd && in && (!nl || in < nl) &&
            strtoul(in + 4, NULL, 16) == ino)
            return true;
    }
    return false;
}

/*
 * libev has no call that returns its backend fd.  Find it without racing the
 * other threads of the process that make fds: watch an eventfd of our own,
 * let libev register it (one non-blocking iteration, before any other
 * watcher of ours exists), and take the epoll instance whose fdinfo lists
 * that eventfd, by fd number and inode, among its targets.
 */
static int find_backend_fd(struct ev_loop *loop)
{
    int probe = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct stat st;
    if (probe < 0 || fstat(probe, &st) < 0) {
        int e = -errno;
        if (probe >= 0)
            close(probe);
        return e;
    }
    ev_io w;
    ev_io_init(&w, probe_cb, probe, EV_READ);
    ev_io_start(loop, &w);
    ev_run(loop, EVRUN_NOWAIT);
    int found = -ENOENT;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    while (d && found < 0 && (de = readdir(d))) {
        int fd = atoi(de->d_name);
        char path[64], target[64], info[8192];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t n = de->d_name[0] == '.' ? -1 : readlink(path, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strcmp(target, "anon_inode:[eventpoll]") != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
        FILE *f = fopen(path, "re");
        size_t got = f ? fread(info, 1, sizeof(info) - 1, f) : 0;
        if (f)
            fclose(f);
        info[got] = 0;
        if (epoll_watches(info, probe, (unsigned long)st.st_ino))
            found = fd;
    }
    if (d)
        closedir(d);
    ev_io_stop(loop, &w);
    close(probe);
    return found;
}

RRPC_API int rrpc_ctx_create(rrpc_ctx **ret_ctx)
{
    return rrpc_ctx_create_with(NULL, ret_ctx);
}

RRPC_API int rrpc_ctx_create_with(const rrpc_config *cfg, rrpc_ctx **ret_ctx)
{
    if (!ret_ctx)
        return -EINVAL;
    long env[NCFG];
    if (!cfg && cfg_from_env(env) < 0)
        return -EINVAL;
    rrpc_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    int r = cfg_load(&ctx->cfg, cfg ? cfg->v : env);
    if (r < 0) {
        free(ctx);
        return r;
    }
    memcpy(ctx->cls, class_defaults, sizeof(ctx->cls));
    ctx->log_max = ctx->cfg.log_level;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &a);
    pthread_mutexattr_destroy(&a);
    rrpci_list_init(&ctx->conns);
    rrpci_list_init(&ctx->listeners);
    rrpci_list_init(&ctx->credit_dirty);
    rrpci_list_init(&ctx->owned);

    ctx->drive_fd = ctx->timer_fd = -1;
    ctx->loop = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOENV);
    ctx->backend_fd = ctx->loop ? find_backend_fd(ctx->loop) : -ENOMEM;
    if (!ctx->loop) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return -ENOMEM;
    }
    ev_set_userdata(ctx->loop, ctx);
    ev_set_loop_release_cb(ctx->loop, loop_release, loop_acquire);
    ev_async_init(&ctx->wake, wake_cb);
    ctx->wake.data = ctx;
    ev_async_start(ctx->loop, &ctx->wake);
    ev_prepare_init(&ctx->credit_prep, rrpci_credit_prepare_cb);
    ctx->credit_prep.data = ctx;
    ev_prepare_start(ctx->loop, &ctx->credit_prep);
    ev_unref(ctx->loop); /* the prepare watcher alone does not keep the loop alive */
    ev_idle_init(&ctx->busy_idle, busy_idle_cb);
    ctx->busy_idle.data = ctx;
    ev_check_init(&ctx->busy_check, busy_check_cb);
    ctx->busy_check.data = ctx;
    *ret_ctx = ctx;
    return 0;
}

RRPC_API const char *rrpc_version(void)
{
    return RRPC_VERSION_STRING;
}

RRPC_API int rrpc_ctx_start_thread(rrpc_ctx *ctx)
{
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->thread_mode) {
        r = rrpci_set_error(ctx, -EBUSY, "the context's loop thread is already running");
    } else {
        ctx->thread_mode = true;
        r = -pthread_create(&ctx->thread, NULL, loop_thread, ctx);
        if (r) {
            ctx->thread_mode = false;
            rrpci_set_error(ctx, r, "cannot start the loop thread: %s", rrpc_strerror(r));
        }
    }
    rrpci_unlock(ctx);
    return r;
}

/* Milliseconds until the loop's next timer (rounded up), 0 when work is
 * pending already, -1 when no timer runs.  Called with the lock held. */
static int timeout_locked(rrpc_ctx *ctx)
{
    if (ev_pending_count(ctx->loop) > 0 || ev_is_active(&ctx->busy_idle))
        return 0; /* work pending, or polling after traffic */
    ev_tstamp t = -1;
    for (struct rrpci_timer *i = ctx->timers; i; i = i->next) {
        ev_tstamp left = ev_timer_remaining(ctx->loop, &i->w);
        if (t < 0 || left < t)
            t = left;
    }
    if (t < 0)
        return -1;
    double ms = t * 1000.0;
    return ms <= 0 ? 0 : ms >= 86400000.0 ? 86400000 : (int)ms + (ms > (int)ms);
}

/* Driven mode: after the loop ran, the timer fd in the context's fd is armed
 * to the next timer, so an application that waits on that fd alone wakes for
 * deadlines, keepalives and connect timeouts too. */
static void driven_rearm(rrpc_ctx *ctx)
{
    if (ctx->timer_fd < 0)
        return;
    uint64_t n;
    while (read(ctx->timer_fd, &n, sizeof(n)) > 0) /* consumed: the loop just ran */
        ;
    int ms = timeout_locked(ctx);
    struct itimerspec its = {0};
    if (ms == 0)
        its.it_value.tv_nsec = 1; /* at once */
    else if (ms > 0) {
        its.it_value.tv_sec = ms / 1000;
        its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    }
    timerfd_settime(ctx->timer_fd, 0, &its, NULL);
}

RRPC_API int rrpc_ctx_fd(rrpc_ctx *ctx)
{
    if (ctx->thread_mode)
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread; no fd to poll");
    rrpci_lock(ctx);
    int r = ctx->drive_fd;
    if (r < 0 && ctx->backend_fd < 0)
        r = rrpci_set_error(ctx, ctx->backend_fd, "the event loop's fd could not be found "
                            "(/proc/self/fdinfo is needed for driven mode); use thread mode");
    if (r < 0 && ctx->backend_fd >= 0) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        int tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct epoll_event e1 = {.events = EPOLLIN, .data.fd = ctx->backend_fd};
        struct epoll_event e2 = {.events = EPOLLIN, .data.fd = tf};
        if (ep < 0 || tf < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ctx->backend_fd, &e1) < 0 ||
            epoll_ctl(ep, EPOLL_CTL_ADD, tf, &e2) < 0) {
            r = rrpci_set_error(ctx, -errno, "cannot make the context's fd: %s", strerror(errno));
            if (ep >= 0)
                close(ep);
            if (tf >= 0)
                close(tf);
        } else {
            ctx->drive_fd = r = ep;
            ctx->timer_fd = tf;
            driven_rearm(ctx);
        }
    }
    pthread_mutex_unlock(&ctx->lock); /* not rrpci_unlock: nothing to wake */
    return r;
}

RRPC_API int rrpc_ctx_timeout(rrpc_ctx *ctx, int *ret_ms)
{
    if (!ctx || !ret_ms)
        return -EINVAL;
    if (ctx->thread_mode)
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread");
    rrpci_lock(ctx);
    *ret_ms = timeout_locked(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

static void progress_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    ev_break(loop, EVBREAK_ONE);
}

RRPC_API int rrpc_ctx_progress(rrpc_ctx *ctx, int timeout_ms)
{
    if (rrpci_in_callback(ctx))
        return rrpci_set_error(ctx, RRPC_E_DEADLOCK,
                               "rrpc_ctx_progress called from inside a callback");
    if (ctx->thread_mode)
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread");
    rrpci_lock(ctx);
    int r = 0;
    if (ctx->in_run) {
        r = rrpci_set_error(ctx, -EBUSY, "another thread is driving this context's loop");
    } else if (timeout_ms == 0) {
        run_locked(ctx, EVRUN_NOWAIT);
    } else {
        struct rrpci_timer t;
        rrpci_timer_init(ctx, &t, progress_timeout, 0, 0);
        if (timeout_ms > 0) {
            rrpci_timer_set(&t, timeout_ms / 1000.0, 0);
            rrpci_timer_start(&t);
        }
        run_locked(ctx, EVRUN_ONCE);
        rrpci_timer_stop(&t);
    }
    if (r == 0)
        driven_rearm(ctx);
    pthread_mutex_unlock(&ctx->lock);
    return r;
}

static void transports_fini(rrpc_ctx *ctx)
{
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++) {
        if (ctx->tops[i] && ctx->tops[i]->ctx_fini)
            ctx->tops[i]->ctx_fini(ctx);
        free(ctx->tpriv[i]);
    }
}

RRPC_API void rrpc_ctx_destroy(rrpc_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->thread_mode) {
        rrpci_lock(ctx);
        ctx->stopping = true;
        pthread_mutex_unlock(&ctx->lock);
        ev_async_send(ctx->loop, &ctx->wake);
        pthread_join(ctx->thread, NULL);
        ctx->thread_mode = false;
    }
    rrpci_lock(ctx);
    ctx->stopping = true;
    while (!rrpci_list_empty(&ctx->listeners)) {
        rrpc_listener *l = rrpci_container_of(ctx->listeners.next, rrpc_listener, link);
        rrpc_listener_close(l);
    }
    while (!rrpci_list_empty(&ctx->conns)) {
        rrpc_conn *c = rrpci_container_of(ctx->conns.next, rrpc_conn, link);
        rrpci_conn_ref(c);
        rrpci_conn_down(c, RRPC_E_CLOSED, "the context is being destroyed");
        rrpci_conn_unref(c);
    }
    /* Handles the application did not close are released with the context. */
    while (!rrpci_list_empty(&ctx->owned))
        rrpci_conn_release_user(rrpci_container_of(ctx->owned.next, rrpc_conn, owned_link));
    rrpci_methods_fini(ctx);
    rrpci_regions_fini(ctx);
    ev_idle_stop(ctx->loop, &ctx->busy_idle);
    ev_check_stop(ctx->loop, &ctx->busy_check); /* before the transports' state goes */
    transports_fini(ctx);
    ev_async_stop(ctx->loop, &ctx->wake);
    ev_ref(ctx->loop);
    ev_prepare_stop(ctx->loop, &ctx->credit_prep);
    pthread_mutex_unlock(&ctx->lock);
    ev_loop_destroy(ctx->loop);
    if (ctx->drive_fd >= 0)
        close(ctx->drive_fd);
    if (ctx->timer_fd >= 0)
        close(ctx->timer_fd);
    pthread_mutex_destroy(&ctx->lock);
    if (err_ctx == ctx)
        err_ctx = NULL;
    free(ctx);
}

/* ---- transports -------------------------------------------------------- */

static const struct rrpci_transport_ops *const all_transports[RRPCI_NTRANSPORTS] = {
    &rrpci_tcp_ops,
#ifdef RRPC_HAVE_VERBS
    &rrpci_verbs_ops,
#else
    NULL,
#endif
    &rrpci_inproc_ops,
};

const struct rrpci_transport_ops *rrpci_transport_by_scheme(const char *scheme)
{
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (all_transports[i] && strcmp(all_transports[i]->scheme, scheme) == 0)
            return all_transports[i];
    return NULL;
}

static int transport_index(const struct rrpci_transport_ops *ops)
{
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (all_transports[i] == ops)
            return i;
    return -1;
}

int rrpci_transport_use(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops)
{
    int i = transport_index(ops);
    if (ctx->tops[i])
        return 0;
    if (ops->version != RRPCI_TRANSPORT_OPS_VERSION || !ops->listen || !ops->listener_close ||
        !ops->connect || !ops->send || !ops->conn_close)
        return rrpci_set_error(ctx, RRPC_E_TRANSPORT,
                               "transport %s was built for ops version %u, the core speaks %u "
                               "(or lacks a mandatory op): rebuild it with this core",
                               ops->name, ops->version, RRPCI_TRANSPORT_OPS_VERSION);
    if (ops->ctx_priv_size) {
        ctx->tpriv[i] = calloc(1, ops->ctx_priv_size);
        if (!ctx->tpriv[i])
            return -ENOMEM;
    }
    ctx->tops[i] = ops;
    if (ops->ctx_init) {
        int r = ops->ctx_init(ctx);
        if (r < 0) {
            ctx->tops[i] = NULL;
            free(ctx->tpriv[i]);
            ctx->tpriv[i] = NULL;
            return r;
        }
    }
    return 0;
}

void *rrpci_ctx_tpriv(rrpc_ctx *ctx, const struct rrpci_transport_ops *ops)
{
    return ctx->tpriv[transport_index(ops)];
}

struct ev_loop *rrpci_ctx_loop(rrpc_ctx *ctx)
{
    return ctx->loop;
}

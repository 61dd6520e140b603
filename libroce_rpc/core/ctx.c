/* SPDX-License-Identifier: MIT */
/* Contexts: creation and destruction, driven mode (the fd the context owns
 * and its timeout), and the transports a context uses. */
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
    struct rrpci_config conf = {0};
    int r = rrpci_config_resolve(cfg, &conf);
    if (r < 0)
        return r;
    rrpc_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    ctx->cfg = conf;
    memcpy(ctx->cls, rrpci_class_defaults, sizeof(ctx->cls));
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

    ctx->drive_fd = ctx->timer_fd = ctx->kick_fd = -1;
    atomic_init(&ctx->kick_to, -1);
    ctx->loop = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOENV);
    ctx->backend_fd = ctx->loop ? find_backend_fd(ctx->loop) : -ENOMEM;
    if (!ctx->loop) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return -ENOMEM;
    }
    ev_set_userdata(ctx->loop, ctx);
    ev_set_loop_release_cb(ctx->loop, rrpci_loop_release, rrpci_loop_acquire);
    ev_set_invoke_pending_cb(ctx->loop, rrpci_invoke_pending);
    ev_async_init(&ctx->wake, rrpci_wake_cb);
    ctx->wake.data = ctx;
    ev_async_start(ctx->loop, &ctx->wake);
    ev_prepare_init(&ctx->credit_prep, rrpci_credit_prepare_cb);
    ctx->credit_prep.data = ctx;
    ev_prepare_start(ctx->loop, &ctx->credit_prep);
    ev_unref(ctx->loop); /* the prepare watcher alone does not keep the loop alive */
    ev_idle_init(&ctx->busy_idle, rrpci_busy_idle_cb);
    ctx->busy_idle.data = ctx;
    ev_check_init(&ctx->busy_check, rrpci_busy_check_cb);
    ctx->busy_check.data = ctx;
    if ((r = rrpci_serve_start(ctx)) < 0) {
        rrpc_ctx_destroy(ctx);
        return r;
    }
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
    } else if (ctx->in_run) {
        /* libev runs a loop on one thread at a time (it aborts otherwise). */
        r = rrpci_set_error(ctx, -EBUSY,
                            "a thread is running this context's loop (rrpc_ctx_progress, a "
                            "callback, or a blocking call driving it): start the loop thread "
                            "between two progress calls");
    } else {
        __atomic_store_n(&ctx->thread_mode, true, __ATOMIC_RELAXED);
        atomic_store(&ctx->kick_to, -1); /* the loop thread needs no kick */
        r = -pthread_create(&ctx->thread, NULL, rrpci_loop_thread, ctx);
        if (r) {
            __atomic_store_n(&ctx->thread_mode, false, __ATOMIC_RELAXED);
            atomic_store(&ctx->kick_to, ctx->kick_fd);
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
    /* The credit prepare watcher left pending by a pass that invoked
     * nothing (driven_reify) is work only when credit is owed. */
    unsigned idle_prep = ev_is_pending(&ctx->credit_prep) && rrpci_list_empty(&ctx->credit_dirty);
    if (ev_pending_count(ctx->loop) > idle_prep || ev_is_active(&ctx->busy_idle) ||
        ctx->ran_callbacks)
        return 0; /* work pending, watchers to hand to epoll, or polling after traffic */
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
void rrpci_driven_rearm(rrpc_ctx *ctx)
{
    if (ctx->timer_fd < 0)
        return;
    /* Few system calls: the timer is read only once it may have fired, and
     * set only when the next due time comes before the armed one (a timer
     * that fires early costs one spare run, which arms it again). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (ctx->timer_armed && ctx->timer_due <= now) {
        uint64_t n;
        while (read(ctx->timer_fd, &n, sizeof(n)) > 0) /* consumed: the loop runs now */
            ;
        ctx->timer_armed = false;
    }
    int ms = timeout_locked(ctx);
    if (ms < 0)
        return; /* no timer runs: an armed one only makes a spare wake-up */
    double due = now + ms / 1000.0;
    if (ctx->timer_armed && ctx->timer_due <= due)
        return;
    struct itimerspec its = {0};
    if (ms == 0)
        its.it_value.tv_nsec = 1; /* at once */
    else {
        its.it_value.tv_sec = ms / 1000;
        its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    }
    if (timerfd_settime(ctx->timer_fd, 0, &its, NULL) == 0) {
        ctx->timer_armed = true;
        ctx->timer_due = due;
    }
}

RRPC_API int rrpc_ctx_fd(rrpc_ctx *ctx)
{
    if (__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED))
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread; no fd to poll");
    rrpci_lock(ctx);
    int r = ctx->drive_fd;
    if (r < 0 && ctx->backend_fd < 0)
        r = rrpci_set_error(ctx, ctx->backend_fd, "the event loop's fd could not be found "
                            "(/proc/self/fdinfo is needed for driven mode); use thread mode");
    if (r < 0 && ctx->backend_fd >= 0) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        int tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        int kf = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event e1 = {.events = EPOLLIN, .data.fd = ctx->backend_fd};
        struct epoll_event e2 = {.events = EPOLLIN, .data.fd = tf};
        struct epoll_event e3 = {.events = EPOLLIN, .data.fd = kf};
        if (ep < 0 || tf < 0 || kf < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ctx->backend_fd, &e1) < 0 ||
            epoll_ctl(ep, EPOLL_CTL_ADD, tf, &e2) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, kf, &e3) < 0) {
            r = rrpci_set_error(ctx, -errno, "cannot make the context's fd: %s", strerror(errno));
            if (ep >= 0)
                close(ep);
            if (tf >= 0)
                close(tf);
            if (kf >= 0)
                close(kf);
        } else {
            ctx->drive_fd = r = ep;
            ctx->timer_fd = tf;
            ctx->kick_fd = kf;
            atomic_store(&ctx->kick_to, kf);
            rrpci_driven_rearm(ctx);
        }
    }
    pthread_mutex_unlock(&ctx->lock); /* not rrpci_unlock: nothing to wake */
    return r;
}

RRPC_API int rrpc_ctx_timeout(rrpc_ctx *ctx, int *ret_ms)
{
    if (!ctx || !ret_ms)
        return -EINVAL;
    if (__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED))
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
    if (__atomic_load_n(&ctx->thread_mode, __ATOMIC_RELAXED))
        return rrpci_set_error(ctx, -EBUSY, "the context runs its own loop thread");
    rrpci_lock(ctx);
    int r = 0;
    uint64_t kicks;
    if (atomic_exchange(&ctx->kicked, false)) /* the run below sees what the kick was for */
        (void)!read(ctx->kick_fd, &kicks, sizeof(kicks));
    if (ctx->in_run) {
        r = rrpci_set_error(ctx, -EBUSY, "another thread is driving this context's loop");
    } else if (timeout_ms == 0 || timeout_locked(ctx) == 0) {
        /* Also when work is pending (what driven_reify found, say): libev
         * invokes it first and would then sleep in the same run for a next
         * event, though the one the application waits for was that work. */
        rrpci_run_locked(ctx, EVRUN_NOWAIT);
    } else {
        struct rrpci_timer t;
        rrpci_timer_init(ctx, &t, progress_timeout, 0, 0);
        if (timeout_ms > 0) {
            rrpci_timer_set(&t, timeout_ms / 1000.0, 0);
            rrpci_timer_start(&t);
        }
        rrpci_run_locked(ctx, EVRUN_ONCE);
        rrpci_timer_stop(&t);
    }
    /* Callbacks ran: one more pass without waiting hands the watchers they
     * started to epoll (and serves what is ready at once), so the fd is
     * complete when the application goes back to sleep on it; if that pass
     * ran callbacks too, rrpc_ctx_timeout says 0. */
    if (r == 0 && ctx->ran_callbacks)
        rrpci_run_locked(ctx, EVRUN_NOWAIT);
    if (r == 0)
        rrpci_driven_rearm(ctx);
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
    rrpci_serve_stop(ctx); /* first: a scrape reads the whole context */
    if (ctx->thread_mode) {
        rrpci_lock(ctx);
        ctx->stopping = true;
        pthread_mutex_unlock(&ctx->lock);
        ev_async_send(ctx->loop, &ctx->wake);
        pthread_join(ctx->thread, NULL);
        /* A worker's blocking call now drives the loop itself. */
        __atomic_store_n(&ctx->thread_mode, false, __ATOMIC_RELAXED);
    }
    rrpci_workers_stop(ctx); /* running handlers may still answer: the connections are up */
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
    if (ctx->kick_fd >= 0)
        close(ctx->kick_fd);
    pthread_mutex_destroy(&ctx->lock);
    rrpci_error_forget(ctx);
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

const struct rrpci_transport_ops *rrpci_transport_nth(int i)
{
    return i >= 0 && i < RRPCI_NTRANSPORTS ? all_transports[i] : NULL;
}

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

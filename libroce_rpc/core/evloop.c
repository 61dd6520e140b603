/* SPDX-License-Identifier: MIT */
/* The library's event loop (evloop.h): epoll, a timer heap, asyncs. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "core/evloop.h"

#define EVLOOP_MAX_EVENTS 64

/* The watchers of one fd: epoll knows an fd once, whatever watches it. */
struct fdslot {
    struct rrpci_io *r, *w;
    uint32_t registered; /* the epoll events asked for, 0: not in the set */
};

struct rrpci_evloop {
    int epfd;
    int wake_fd;             /* eventfd: rrpci_async_send */
    atomic_bool wake_sent;   /* written since the loop last read it */
    atomic_bool async_fired; /* an async was sent: scan them */
    double now;
    struct fdslot *fds;
    int nfds;
    struct rrpci_timer **heap;
    int nheap, heap_cap;
    struct rrpci_list pending[RRPCI_NPRIO]; /* index prio - RRPCI_PRIO_MIN */
    struct rrpci_list asyncs;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rrpci_evloop_init(struct rrpci_evloop **ret_loop)
{
    struct rrpci_evloop *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = -1};
    if (l->epfd < 0 || l->wake_fd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake_fd, &e) < 0) {
        int r = -errno;
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->wake_fd >= 0)
            close(l->wake_fd);
        free(l);
        return r;
    }
    for (int i = 0; i < RRPCI_NPRIO; i++)
        rrpci_list_init(&l->pending[i]);
    rrpci_list_init(&l->asyncs);
    l->now = mono_now();
    *ret_loop = l;
    return 0;
}

void rrpci_evloop_fini(struct rrpci_evloop *loop)
{
    if (!loop)
        return;
    close(loop->epfd);
    close(loop->wake_fd);
    free(loop->fds);
    free(loop->heap);
    free(loop);
}

int rrpci_evloop_fd(const struct rrpci_evloop *loop)
{
    return loop->epfd;
}

double rrpci_evloop_now(const struct rrpci_evloop *loop)
{
    return loop->now;
}

void rrpci_evloop_now_update(struct rrpci_evloop *loop)
{
    loop->now = mono_now();
}

/* ---- timers: a binary min-heap on @at ------------------------------------- */

/* A timer's heap_slot is its index + 1: a zeroed timer is a stopped one. */
static void heap_place(struct rrpci_evloop *l, int i, struct rrpci_timer *t)
{
    l->heap[i] = t;
    t->heap_slot = i + 1;
}

static void heap_up(struct rrpci_evloop *l, int i)
{
    struct rrpci_timer *t = l->heap[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (l->heap[p]->at <= t->at)
            break;
        heap_place(l, i, l->heap[p]);
        i = p;
    }
    heap_place(l, i, t);
}

static void heap_down(struct rrpci_evloop *l, int i)
{
    struct rrpci_timer *t = l->heap[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && l->heap[c + 1]->at < l->heap[c]->at)
            c++;
        if (l->heap[c]->at >= t->at)
            break;
        heap_place(l, i, l->heap[c]);
        i = c;
    }
    heap_place(l, i, t);
}

static void heap_remove(struct rrpci_evloop *l, struct rrpci_timer *t)
{
    int i = t->heap_slot - 1;
    t->heap_slot = 0;
    struct rrpci_timer *last = l->heap[--l->nheap];
    if (i == l->nheap)
        return;
    heap_place(l, i, last);
    heap_up(l, i);
    heap_down(l, last->heap_slot - 1);
}

void rrpci_timer_init_loop(struct rrpci_evloop *loop, struct rrpci_timer *t,
                           void (*cb)(struct rrpci_timer *t), double after, double repeat)
{
    t->loop = loop;
    t->cb = cb;
    t->after = after;
    t->repeat = repeat;
    t->at = 0;
    t->heap_slot = 0;
}

void rrpci_timer_set(struct rrpci_timer *t, double after, double repeat)
{
    t->after = after;
    t->repeat = repeat;
}

/* Puts @t in the heap (or moves it) to fire at @at. */
static void timer_arm(struct rrpci_timer *t, double at)
{
    struct rrpci_evloop *l = t->loop;
    t->at = at;
    if (t->heap_slot) {
        heap_up(l, t->heap_slot - 1);
        heap_down(l, t->heap_slot - 1);
        return;
    }
    if (l->nheap == l->heap_cap) {
        int cap = l->heap_cap ? 2 * l->heap_cap : 64;
        struct rrpci_timer **h = realloc(l->heap, (size_t)cap * sizeof(*h));
        if (!h)
            abort(); /* a few pointers: the process is out of memory */
        l->heap = h;
        l->heap_cap = cap;
    }
    heap_place(l, l->nheap++, t);
    heap_up(l, t->heap_slot - 1);
}

void rrpci_timer_start(struct rrpci_timer *t)
{
    /* From now, not from the loop's last wake-up: a deadline set by a
     * thread that called in counts from when it was set. */
    timer_arm(t, mono_now() + t->after);
}

void rrpci_timer_stop(struct rrpci_timer *t)
{
    if (t->heap_slot)
        heap_remove(t->loop, t);
}

void rrpci_timer_again(struct rrpci_timer *t)
{
    if (t->repeat > 0)
        timer_arm(t, mono_now() + t->repeat);
    else
        rrpci_timer_stop(t);
}

double rrpci_timer_remaining(const struct rrpci_timer *t)
{
    return t->at - mono_now();
}

double rrpci_evloop_next_timer(const struct rrpci_evloop *loop)
{
    if (!loop->nheap)
        return -1;
    double left = loop->heap[0]->at - mono_now();
    return left > 0 ? left : 0;
}

/* ---- fds ------------------------------------------------------------------ */

static int slot_sync(struct rrpci_evloop *l, int fd)
{
    struct fdslot *s = &l->fds[fd];
    uint32_t want = 0;
    if (s->r && s->r->active)
        want |= EPOLLIN;
    if (s->w && s->w->active)
        want |= EPOLLOUT;
    if (want == s->registered)
        return 0;
    struct epoll_event e = {.events = want, .data.fd = fd};
    int op = !s->registered ? EPOLL_CTL_ADD : want ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
    if (epoll_ctl(l->epfd, op, fd, &e) < 0) {
        /* The fd was closed and reused behind our back: start afresh. */
        if (errno == ENOENT && op == EPOLL_CTL_MOD)
            op = EPOLL_CTL_ADD;
        else if (errno == EEXIST && op == EPOLL_CTL_ADD)
            op = EPOLL_CTL_MOD;
        else if (op == EPOLL_CTL_DEL) {
            s->registered = 0;
            return 0; /* closed already: the kernel dropped it */
        } else
            return -errno;
        if (epoll_ctl(l->epfd, op, fd, &e) < 0)
            return -errno;
    }
    s->registered = want;
    return 0;
}

void rrpci_io_init(struct rrpci_io *w, void (*cb)(struct rrpci_io *w, unsigned revents), int fd,
                   unsigned events)
{
    w->fd = fd;
    w->events = events;
    w->prio = 0;
    w->active = false;
    w->revents = 0;
    rrpci_list_init(&w->pending);
    w->cb = cb;
}

void rrpci_io_set_prio(struct rrpci_io *w, int prio)
{
    w->prio = prio < RRPCI_PRIO_MIN ? RRPCI_PRIO_MIN : prio > RRPCI_PRIO_MAX ? RRPCI_PRIO_MAX : prio;
}

int rrpci_io_start(struct rrpci_evloop *l, struct rrpci_io *w)
{
    if (w->active)
        return 0;
    if (w->fd < 0)
        return -EBADF;
    if (w->fd >= l->nfds) {
        int n = l->nfds ? l->nfds : 64;
        while (n <= w->fd)
            n *= 2;
        struct fdslot *f = realloc(l->fds, (size_t)n * sizeof(*f));
        if (!f)
            return -ENOMEM;
        memset(f + l->nfds, 0, (size_t)(n - l->nfds) * sizeof(*f));
        l->fds = f;
        l->nfds = n;
    }
    struct fdslot *s = &l->fds[w->fd];
    if (((w->events & RRPCI_IO_READ) && s->r && s->r != w) ||
        ((w->events & RRPCI_IO_WRITE) && s->w && s->w != w))
        return -EEXIST;
    if (w->events & RRPCI_IO_READ)
        s->r = w;
    if (w->events & RRPCI_IO_WRITE)
        s->w = w;
    w->active = true;
    int r = slot_sync(l, w->fd);
    if (r < 0) {
        rrpci_io_stop(l, w);
        return r;
    }
    return 0;
}

void rrpci_io_stop(struct rrpci_evloop *l, struct rrpci_io *w)
{
    if (w->pending.next) /* a zeroed watcher is a stopped one */
        rrpci_list_del(&w->pending);
    w->revents = 0;
    if (!w->active)
        return;
    w->active = false;
    struct fdslot *s = &l->fds[w->fd];
    if (s->r == w)
        s->r = NULL;
    if (s->w == w)
        s->w = NULL;
    (void)slot_sync(l, w->fd);
}

void rrpci_io_feed(struct rrpci_evloop *l, struct rrpci_io *w, unsigned revents)
{
    if (!w->revents)
        rrpci_list_add(&l->pending[w->prio - RRPCI_PRIO_MIN], &w->pending);
    w->revents |= revents;
}

/* ---- asyncs --------------------------------------------------------------- */

void rrpci_async_init(struct rrpci_async *a, void (*cb)(struct rrpci_async *a))
{
    atomic_init(&a->sent, false);
    a->active = false;
    rrpci_list_init(&a->link);
    a->cb = cb;
}

void rrpci_async_start(struct rrpci_evloop *l, struct rrpci_async *a)
{
    if (a->active)
        return;
    a->active = true;
    rrpci_list_add(&l->asyncs, &a->link);
    if (atomic_load(&a->sent))
        atomic_store(&l->async_fired, true);
}

void rrpci_async_stop(struct rrpci_evloop *l, struct rrpci_async *a)
{
    (void)l;
    if (!a->active)
        return;
    a->active = false;
    rrpci_list_del(&a->link);
}

void rrpci_async_send(struct rrpci_evloop *l, struct rrpci_async *a)
{
    if (atomic_exchange(&a->sent, true))
        return; /* not yet seen: that one call covers this send too */
    atomic_store(&l->async_fired, true);
    if (!atomic_exchange(&l->wake_sent, true)) {
        uint64_t one = 1;
        (void)!write(l->wake_fd, &one, sizeof(one));
    }
}

/* ---- waiting and dispatching ---------------------------------------------- */

bool rrpci_evloop_has_pending(const struct rrpci_evloop *l)
{
    for (int i = 0; i < RRPCI_NPRIO; i++)
        if (!rrpci_list_empty(&l->pending[i]))
            return true;
    /* By the loop's time: a timer due since is found by the next_timer
     * that follows (a wait of 0), which reads the clock. */
    return atomic_load(&l->async_fired) || (l->nheap && l->heap[0]->at <= l->now);
}

int rrpci_evloop_wait(struct rrpci_evloop *l, int timeout_ms)
{
    struct epoll_event ev[EVLOOP_MAX_EVENTS];
    int n = epoll_wait(l->epfd, ev, EVLOOP_MAX_EVENTS, timeout_ms);
    l->now = mono_now();
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) {
        int fd = ev[i].data.fd;
        uint32_t e = ev[i].events;
        if (fd < 0) { /* the wake eventfd */
            /* Read, then allow the next write: a send in between writes
             * nothing, but its async_fired is seen by the dispatch that
             * follows this wait.  (The other order loses a write that the
             * read consumes, and every later send then writes nothing.) */
            uint64_t v;
            (void)!read(l->wake_fd, &v, sizeof(v));
            atomic_store(&l->wake_sent, false);
            continue;
        }
        if (fd >= l->nfds)
            continue;
        struct fdslot *s = &l->fds[fd];
        /* An error or a hang-up wakes both directions: each reads or
         * writes and finds out. */
        if (s->r && s->r->active && (e & (EPOLLIN | EPOLLERR | EPOLLHUP)))
            rrpci_io_feed(l, s->r, RRPCI_IO_READ);
        if (s->w && s->w->active && (e & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            rrpci_io_feed(l, s->w, RRPCI_IO_WRITE);
    }
    return n;
}

static unsigned run_timers(struct rrpci_evloop *l)
{
    unsigned n = 0;
    /* The time of the wait just before (every dispatch follows one): due
     * by it, and a clock read fewer per pass. */
    double now = l->now;
    /* Each timer due now fires once; one that re-arms itself for a time
     * already past waits for the next dispatch. */
    while (l->nheap && l->heap[0]->at <= now) {
        struct rrpci_timer *t = l->heap[0];
        if (t->repeat > 0) {
            double at = t->at + t->repeat;
            timer_arm(t, at > now ? at : now + t->repeat);
        } else {
            heap_remove(l, t);
        }
        t->cb(t); /* which may free @t */
        n++;
        if (n >= 1024)
            break;
    }
    return n;
}

#define ASYNC_OF(i) ((struct rrpci_async *)((char *)(i) - offsetof(struct rrpci_async, link)))

/* The asyncs sent before this dispatch run once each; one sent again by a
 * callback (the rest of its work, say) waits for the next dispatch.  The
 * ones to run move to a list of their own first: a callback may stop (and
 * free) any async, which takes it off whichever list holds it. */
static unsigned run_asyncs(struct rrpci_evloop *l)
{
    if (!atomic_exchange(&l->async_fired, false))
        return 0;
    struct rrpci_list firing;
    rrpci_list_init(&firing);
    for (struct rrpci_list *i = l->asyncs.next, *next; i != &l->asyncs; i = next) {
        next = i->next;
        if (atomic_exchange(&ASYNC_OF(i)->sent, false)) {
            rrpci_list_del(i);
            rrpci_list_add(&firing, i);
        }
    }
    unsigned n = 0;
    while (!rrpci_list_empty(&firing)) {
        struct rrpci_async *a = ASYNC_OF(firing.next);
        rrpci_list_del(&a->link);
        rrpci_list_add(&l->asyncs, &a->link);
        a->cb(a); /* which may stop or free @a */
        n++;
    }
    return n;
}

unsigned rrpci_evloop_dispatch(struct rrpci_evloop *l, unsigned max, bool (*after)(void *arg),
                               void *arg)
{
    unsigned n = run_timers(l) + run_asyncs(l);
    if (after && !after(arg))
        return n;
    for (int p = RRPCI_NPRIO - 1; p >= 0 && n < max;) {
        struct rrpci_list *q = &l->pending[p];
        if (rrpci_list_empty(q)) {
            p--;
            continue;
        }
        struct rrpci_io *w = (struct rrpci_io *)((char *)q->next - offsetof(struct rrpci_io, pending));
        unsigned rev = w->revents;
        rrpci_list_del(&w->pending);
        w->revents = 0;
        w->cb(w, rev); /* which may stop, free or feed watchers */
        n++;
        if (after && !after(arg))
            return n;
        p = RRPCI_NPRIO - 1; /* a callback may have made a higher one ready */
    }
    return n;
}

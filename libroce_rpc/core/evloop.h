/* SPDX-License-Identifier: MIT */
/*
 * The library's event loop: one epoll instance, the fds, timers and
 * cross-thread wake-ups the library asks it to watch, and nothing else.
 *
 * It replaces libev so that driven mode is built on what the library itself
 * registered: the epoll fd is the context's fd (rrpc_ctx_fd), the timer heap
 * says when the next timer is due (rrpc_ctx_timeout), and a watcher started
 * or stopped is in the kernel's set at once (epoll_ctl on the spot), so no
 * pass is owed to hand deferred changes to the kernel.
 *
 * Threading: an rrpci_evloop is not locked.  Every call except
 * rrpci_async_send is made by the one thread that holds the owner's lock
 * (the context lock); rrpci_evloop_wait may be called without it by the
 * thread that runs the loop (core/loop.c says who that is).
 *
 * Priorities: a ready watcher is invoked in priority order, highest first
 * (RRPCI_PRIO_MIN..RRPCI_PRIO_MAX, 0 by default); timers run before I/O.
 * That is how the receive-side QoS policy (which class reads first) reaches
 * the loop.
 */
#ifndef RRPCI_EVLOOP_H
#define RRPCI_EVLOOP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/list.h"

#define RRPCI_IO_READ 1u
#define RRPCI_IO_WRITE 2u
#define RRPCI_PRIO_MIN (-2)
#define RRPCI_PRIO_MAX 2
#define RRPCI_NPRIO (RRPCI_PRIO_MAX - RRPCI_PRIO_MIN + 1)

struct rrpci_evloop;

/* A file descriptor watched for RRPCI_IO_READ and/or RRPCI_IO_WRITE.  At
 * most one started watcher per fd and direction.  @data is the owner's.
 * Watchers and timers that are zeroed count as stopped (stopping one is a
 * no-op), as do asyncs. */
struct rrpci_io {
    int fd;
    unsigned events;
    int prio;
    bool active;
    unsigned revents;          /* ready, not yet invoked */
    struct rrpci_list pending; /* in the loop's queue of its priority while ready */
    void (*cb)(struct rrpci_io *w, unsigned revents);
    void *data;
};

/*
 * A timer: fires @after seconds after rrpci_timer_start, then every @repeat
 * seconds while @repeat > 0.  rrpci_timer_again restarts it @repeat from
 * now (stops it when @repeat is 0).  Free the owner only with it stopped.
 * Times are CLOCK_MONOTONIC seconds (rrpci_evloop_now).
 */
struct rrpci_timer {
    double at, after, repeat;
    int heap_slot; /* its place in the loop's heap + 1; 0: stopped (zeroed is stopped) */
    struct rrpci_evloop *loop;
    void (*cb)(struct rrpci_timer *t);
    void *data;
};

/* A wake-up any thread may send (rrpci_async_send); its callback runs on
 * the loop.  Sends before the callback ran coalesce into one call. */
struct rrpci_async {
    atomic_bool sent;
    bool active;
    struct rrpci_list link; /* in the loop's list while started */
    void (*cb)(struct rrpci_async *a);
    void *data;
};

/* ---- the loop ------------------------------------------------------------ */

/* 0, or -errno (no epoll or eventfd could be made). */
int rrpci_evloop_init(struct rrpci_evloop **ret_loop);
/* Every watcher must be stopped already. */
void rrpci_evloop_fini(struct rrpci_evloop *loop);
/* The epoll fd: readable when a watched fd is ready or an async was sent. */
int rrpci_evloop_fd(const struct rrpci_evloop *loop);
/* The loop's time (CLOCK_MONOTONIC seconds), taken when it last waited;
 * rrpci_evloop_now_update takes it again. */
double rrpci_evloop_now(const struct rrpci_evloop *loop);
void rrpci_evloop_now_update(struct rrpci_evloop *loop);
/* Seconds until the next timer is due (0 when one is due), -1 with none. */
double rrpci_evloop_next_timer(const struct rrpci_evloop *loop);
/* Whether a ready watcher, a sent async or a timer due by the loop's time
 * (rrpci_evloop_now, its last wait) waits to be invoked. */
bool rrpci_evloop_has_pending(const struct rrpci_evloop *loop);
/*
 * Waits for events at most @timeout_ms (0: not at all, -1: no limit) and
 * queues what is ready; a wake-up from rrpci_async_send is consumed here.
 * Returns the number of epoll events seen, or -errno (EINTR is 0).  Does not
 * touch the watchers' owners: it may run without the owner's lock, by the
 * one thread that runs the loop.
 */
int rrpci_evloop_wait(struct rrpci_evloop *loop, int timeout_ms);
/* Invokes the timers due by the loop's time (its last wait, so call it
 * after rrpci_evloop_wait), the asyncs sent, then the ready watchers by
 * priority; at most @max watcher callbacks (the rest stay queued).  After
 * the timers and asyncs, and after each watcher's callback, @after(@arg)
 * runs when given; when it returns false the dispatch ends at once without
 * touching the loop again (its thread no longer runs it).  Returns the
 * number of callbacks invoked. */
unsigned rrpci_evloop_dispatch(struct rrpci_evloop *loop, unsigned max, bool (*after)(void *arg),
                               void *arg);

/* ---- watchers ------------------------------------------------------------ */

void rrpci_io_init(struct rrpci_io *w, void (*cb)(struct rrpci_io *w, unsigned revents), int fd,
                   unsigned events);
/* Before start only. */
void rrpci_io_set_prio(struct rrpci_io *w, int prio);
/* 0, or -errno from epoll_ctl (-EEXIST: another watcher has this fd and
 * direction). */
int rrpci_io_start(struct rrpci_evloop *loop, struct rrpci_io *w);
void rrpci_io_stop(struct rrpci_evloop *loop, struct rrpci_io *w);
/* Queues @w as ready with @revents, as if the fd had said so. */
void rrpci_io_feed(struct rrpci_evloop *loop, struct rrpci_io *w, unsigned revents);

void rrpci_timer_init_loop(struct rrpci_evloop *loop, struct rrpci_timer *t,
                           void (*cb)(struct rrpci_timer *t), double after, double repeat);
void rrpci_timer_set(struct rrpci_timer *t, double after, double repeat);
void rrpci_timer_start(struct rrpci_timer *t);
void rrpci_timer_stop(struct rrpci_timer *t);
void rrpci_timer_again(struct rrpci_timer *t);
static inline bool rrpci_timer_active(const struct rrpci_timer *t)
{
    return t->heap_slot != 0;
}
/* Seconds until @t fires (it is active). */
double rrpci_timer_remaining(const struct rrpci_timer *t);

void rrpci_async_init(struct rrpci_async *a, void (*cb)(struct rrpci_async *a));
void rrpci_async_start(struct rrpci_evloop *loop, struct rrpci_async *a);
void rrpci_async_stop(struct rrpci_evloop *loop, struct rrpci_async *a);
/* Any thread, no lock: @a's callback runs on the loop soon (the loop's fd
 * becomes readable, and a thread waiting in it wakes). */
void rrpci_async_send(struct rrpci_evloop *loop, struct rrpci_async *a);

#endif

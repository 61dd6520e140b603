/* SPDX-License-Identifier: MIT */
/* Unit tests of libroce_rpc/core/evloop.c: the library's own event loop. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core/evloop.h"

static int order[16], norder;

static void note_io(struct rrpci_io *w, unsigned revents)
{
    assert_true(revents & RRPCI_IO_READ);
    order[norder++] = (int)(intptr_t)w->data;
    char b[16];
    (void)!read(w->fd, b, sizeof(b));
}

/* Two pipes read by @lo (data 1) and @hi (data 2, the highest priority),
 * both started on @l. */
static void two_watchers(struct rrpci_evloop *l, int p1[2], int p2[2], struct rrpci_io *lo,
                         struct rrpci_io *hi)
{
    assert_int_equal(pipe(p1), 0);
    assert_int_equal(pipe(p2), 0);
    rrpci_io_init(lo, note_io, p1[0], RRPCI_IO_READ);
    rrpci_io_init(hi, note_io, p2[0], RRPCI_IO_READ);
    lo->data = (void *)1;
    hi->data = (void *)2;
    rrpci_io_set_prio(hi, RRPCI_PRIO_MAX);
    assert_int_equal(rrpci_io_start(l, lo), 0);
    assert_int_equal(rrpci_io_start(l, hi), 0);
}

static void note_timer(struct rrpci_timer *t)
{
    order[norder++] = (int)(intptr_t)t->data;
}

static int readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0);
}

static void test_ready_watchers_run_highest_priority_first_after_due_timers(void **state)
{
    (void)state;
    struct rrpci_evloop *l;
    assert_int_equal(rrpci_evloop_init(&l), 0);
    int p1[2], p2[2];
    struct rrpci_io lo, hi;
    two_watchers(l, p1, p2, &lo, &hi);
    struct rrpci_timer t;
    rrpci_timer_init_loop(l, &t, note_timer, 0, 0);
    t.data = (void *)3;
    rrpci_timer_start(&t);
    assert_int_equal(write(p1[1], "x", 1), 1);
    assert_int_equal(write(p2[1], "x", 1), 1);
    norder = 0;
    assert_int_equal(rrpci_evloop_wait(l, 1000), 2);
    assert_int_equal(rrpci_evloop_dispatch(l, 100, NULL, NULL), 3);
    assert_int_equal(norder, 3);
    assert_int_equal(order[0], 3); /* the due timer */
    assert_int_equal(order[1], 2); /* then the higher priority */
    assert_int_equal(order[2], 1);
    assert_false(rrpci_timer_active(&t));
    rrpci_io_stop(l, &lo);
    rrpci_io_stop(l, &hi);
    rrpci_evloop_fini(l);
    close(p1[0]), close(p1[1]), close(p2[0]), close(p2[1]);
}

/* The dispatch's @after hook: it runs after the timers and asyncs and
 * after each watcher's callback, and the dispatch ends at once when it
 * says false (its thread no longer runs the loop: relief.c). */
static int afters, stop_after;
static bool after_hook(void *arg)
{
    (void)arg;
    afters++;
    return afters != stop_after;
}

static void test_the_after_hook_runs_after_each_callback_and_ends_the_dispatch(void **state)
{
    (void)state;
    struct rrpci_evloop *l;
    assert_int_equal(rrpci_evloop_init(&l), 0);
    int p1[2], p2[2];
    struct rrpci_io a, b;
    two_watchers(l, p1, p2, &a, &b);
    assert_int_equal(write(p1[1], "x", 1), 1);
    assert_int_equal(write(p2[1], "x", 1), 1);
    /* every callback, then once after the timers and asyncs (none) */
    norder = afters = 0;
    stop_after = -1;
    assert_int_equal(rrpci_evloop_wait(l, 1000), 2);
    assert_int_equal(rrpci_evloop_dispatch(l, 100, after_hook, NULL), 2);
    assert_int_equal(norder, 2);
    assert_int_equal(afters, 3);
    /* false after the first watcher: the second stays queued */
    assert_int_equal(write(p1[1], "x", 1), 1);
    assert_int_equal(write(p2[1], "x", 1), 1);
    norder = afters = 0;
    stop_after = 2;
    assert_int_equal(rrpci_evloop_wait(l, 1000), 2);
    assert_int_equal(rrpci_evloop_dispatch(l, 100, after_hook, NULL), 1);
    assert_int_equal(norder, 1);
    assert_int_equal(order[0], 2);
    stop_after = -1;
    assert_int_equal(rrpci_evloop_dispatch(l, 100, after_hook, NULL), 1);
    assert_int_equal(order[1], 1);
    rrpci_io_stop(l, &a);
    rrpci_io_stop(l, &b);
    close(p1[0]), close(p1[1]), close(p2[0]), close(p2[1]);
    rrpci_evloop_fini(l);
}

static void test_a_stopped_watcher_is_out_of_the_kernel_set_at_once(void **state)
{
    (void)state;
    struct rrpci_evloop *l;
    assert_int_equal(rrpci_evloop_init(&l), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct rrpci_io w;
    rrpci_io_init(&w, note_io, p[0], RRPCI_IO_READ);
    assert_int_equal(write(p[1], "x", 1), 1);
    assert_int_equal(readable(rrpci_evloop_fd(l)), 0);
    assert_int_equal(rrpci_io_start(l, &w), 0);
    /* No pass owed: the loop's fd says so as soon as the watcher starts. */
    assert_int_equal(readable(rrpci_evloop_fd(l)), 1);
    rrpci_io_stop(l, &w);
    assert_int_equal(readable(rrpci_evloop_fd(l)), 0);
    /* A second watcher on the same fd and direction is refused. */
    struct rrpci_io w2;
    rrpci_io_init(&w2, note_io, p[0], RRPCI_IO_READ);
    assert_int_equal(rrpci_io_start(l, &w), 0);
    assert_int_equal(rrpci_io_start(l, &w2), -EEXIST);
    rrpci_io_stop(l, &w);
    /* Zeroed watchers and timers are stopped ones. */
    struct rrpci_io z = {0};
    struct rrpci_timer zt = {0};
    rrpci_io_stop(l, &z);
    assert_false(rrpci_timer_active(&zt));
    rrpci_evloop_fini(l);
    close(p[0]), close(p[1]);
}

static void test_timers_fire_in_due_order_and_repeat(void **state)
{
    (void)state;
    struct rrpci_evloop *l;
    assert_int_equal(rrpci_evloop_init(&l), 0);
    struct rrpci_timer t[5];
    double after[5] = {0.004, 0.001, 0.003, 0.002, 0.005};
    for (int i = 0; i < 5; i++) {
        rrpci_timer_init_loop(l, &t[i], note_timer, after[i], 0);
        t[i].data = (void *)(intptr_t)i;
        rrpci_timer_start(&t[i]);
    }
    rrpci_timer_stop(&t[4]);
    norder = 0;
    while (norder < 4) {
        double left = rrpci_evloop_next_timer(l);
        assert_true(left >= 0 && left < 1);
        (void)rrpci_evloop_wait(l, (int)(left * 1000) + 1);
        (void)rrpci_evloop_dispatch(l, 100, NULL, NULL);
    }
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 3);
    assert_int_equal(order[2], 2);
    assert_int_equal(order[3], 0);
    assert_true(rrpci_evloop_next_timer(l) < 0);
    /* again with a repeat re-arms; without one it stops */
    rrpci_timer_set(&t[0], 0, 10);
    rrpci_timer_again(&t[0]);
    assert_true(rrpci_timer_active(&t[0]));
    assert_true(rrpci_timer_remaining(&t[0]) > 9);
    rrpci_timer_set(&t[0], 0, 0);
    rrpci_timer_again(&t[0]);
    assert_false(rrpci_timer_active(&t[0]));
    rrpci_evloop_fini(l);
}

static struct rrpci_evloop *resend_loop;
static int async_runs;

static void resend_cb(struct rrpci_async *a)
{
    async_runs++;
    if (async_runs == 1)
        rrpci_async_send(resend_loop, a); /* the rest of its work: next dispatch */
}

static void *send_from_thread(void *arg)
{
    rrpci_async_send(resend_loop, arg);
    return NULL;
}

static void test_an_async_from_another_thread_makes_the_fd_readable_and_runs_once(void **state)
{
    (void)state;
    assert_int_equal(rrpci_evloop_init(&resend_loop), 0);
    struct rrpci_async a;
    rrpci_async_init(&a, resend_cb);
    rrpci_async_start(resend_loop, &a);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_from_thread, &a), 0);
    pthread_join(th, NULL);
    rrpci_async_send(resend_loop, &a); /* coalesces with the first */
    assert_int_equal(readable(rrpci_evloop_fd(resend_loop)), 1);
    async_runs = 0;
    (void)rrpci_evloop_wait(resend_loop, 0);
    assert_int_equal(rrpci_evloop_dispatch(resend_loop, 100, NULL, NULL), 1);
    assert_int_equal(async_runs, 1);
    /* sent again from its callback: not in the same dispatch, but pending */
    assert_true(rrpci_evloop_has_pending(resend_loop));
    (void)rrpci_evloop_wait(resend_loop, 0);
    assert_int_equal(rrpci_evloop_dispatch(resend_loop, 100, NULL, NULL), 1);
    assert_int_equal(async_runs, 2);
    assert_false(rrpci_evloop_has_pending(resend_loop));
    assert_int_equal(readable(rrpci_evloop_fd(resend_loop)), 0);
    rrpci_async_stop(resend_loop, &a);
    rrpci_evloop_fini(resend_loop);
}

/* ---- no wake-up is lost under a sender racing the loop's read ----------- */

#define RACE_ROUNDS 20000
#define RACE_SENDERS 3
static atomic_int race_runs[RACE_SENDERS];
static struct rrpci_async race_async[RACE_SENDERS];

static void race_cb(struct rrpci_async *a)
{
    atomic_fetch_add(&race_runs[a - race_async], 1);
}

static void *race_sender(void *arg)
{
    int k = (int)(intptr_t)arg;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        rrpci_async_send(resend_loop, &race_async[k]);
        while (atomic_load(&race_runs[k]) <= i)
            ; /* the loop ran it: send the next at once */
    }
    return NULL;
}

static int race_total(void)
{
    int n = 0;
    for (int k = 0; k < RACE_SENDERS; k++)
        n += atomic_load(&race_runs[k]);
    return n;
}

/* Senders on several threads send whenever their last send was handled,
 * so sends land at any point of the loop's wait: one whose wake-up is lost
 * leaves the loop asleep with work outstanding.  The race it guards (a send
 * between the loop's read of its eventfd and its clearing of wake_sent, in
 * the wrong order) is narrow here: with that order this test rarely fails,
 * while the conformance suite over inproc hung in one run of three. */
static void test_no_wake_up_is_lost_when_sends_race_the_loop(void **state)
{
    (void)state;
    assert_int_equal(rrpci_evloop_init(&resend_loop), 0);
    pthread_t th[RACE_SENDERS];
    for (int k = 0; k < RACE_SENDERS; k++) {
        rrpci_async_init(&race_async[k], race_cb);
        rrpci_async_start(resend_loop, &race_async[k]);
        atomic_store(&race_runs[k], 0);
    }
    for (int k = 0; k < RACE_SENDERS; k++)
        assert_int_equal(pthread_create(&th[k], NULL, race_sender, (void *)(intptr_t)k), 0);
    while (race_total() < RACE_SENDERS * RACE_ROUNDS) {
        int n = rrpci_evloop_wait(resend_loop, 2000);
        if (n == 0 && !rrpci_evloop_has_pending(resend_loop))
            fail_msg("the loop slept 2 s with sends outstanding (%d handled)", race_total());
        (void)rrpci_evloop_dispatch(resend_loop, 100, NULL, NULL);
    }
    for (int k = 0; k < RACE_SENDERS; k++) {
        pthread_join(th[k], NULL);
        rrpci_async_stop(resend_loop, &race_async[k]);
    }
    rrpci_evloop_fini(resend_loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_watchers_run_highest_priority_first_after_due_timers),
        cmocka_unit_test(test_the_after_hook_runs_after_each_callback_and_ends_the_dispatch),
        cmocka_unit_test(test_a_stopped_watcher_is_out_of_the_kernel_set_at_once),
        cmocka_unit_test(test_timers_fire_in_due_order_and_repeat),
        cmocka_unit_test(test_an_async_from_another_thread_makes_the_fd_readable_and_runs_once),
        cmocka_unit_test(test_no_wake_up_is_lost_when_sends_race_the_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

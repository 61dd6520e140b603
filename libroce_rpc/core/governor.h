/* SPDX-License-Identifier: MIT */
/*
 * The polling governor: one object per context that decides, for every
 * transport, whether the loop polls instead of sleeping, for how long after
 * traffic, and within which CPU budget.
 *
 * After traffic (rrpci_gov_request) the loop polls: it waits with a zero
 * timeout and asks each transport's busy_poll op to look for completions
 * that wake no fd (a verbs CQ left unarmed while the governor polls).  It
 * stops once the window (RRPC_BUSY_POLL_US, or the longer one a transport
 * asked for, RRPC_VERBS_BUSY_POLL_US) has passed without traffic, and then
 * tells the transports to arm what they polled: an idle context sleeps.
 *
 * Two stops hold polling back for a while (rrpci_gov_charge says so):
 *  - the budget: the CPU the polling thread wasted polling, over a sliding
 *    RRPCI_GOV_WINDOW, above RRPC_BUSY_POLL_BUDGET_PCT of it.  What is
 *    charged is spinning that finds nothing: a stretch that ends because
 *    the window passed with nothing found is charged whole, and one that
 *    finds work (a completion, a ready fd, a due timer) only for the CPU
 *    it spent beyond RRPCI_GOV_PAYOFF, which is the longest default window
 *    (verbs' 1 ms): under the defaults polling that finds work costs
 *    nothing, whatever the round trip (a steady ping-pong polls on, also
 *    Soft-RoCE under emulation, 400-550 us between requests), while
 *    traffic every few ms under a long window set by hand is held to the
 *    budget.  An idle context's polling so costs one window after its last
 *    traffic, and traffic a little slower than the window is held to the
 *    budget too;
 *  - contention: over at least RRPCI_GOV_CONTEND_MIN_WALL of polling, the
 *    thread ran less than RRPC_BUSY_POLL_MIN_SHARE_PCT of the time.  A
 *    poller that others preempt burns what CPU it gets while an answer
 *    waits for the scheduler to give it back, where a sleeping thread
 *    would be woken at once.  Then polling stops for 0.1 s, doubled on
 *    each repeat up to 1.6 s.
 *
 * Pure: times are handed in (CLOCK_MONOTONIC seconds for @now, the polling
 * thread's CPU clock for @cpu), so the unit tests drive it with made-up
 * clocks.  Not locked: the context's lock covers it.
 */
#ifndef RRPCI_GOVERNOR_H
#define RRPCI_GOVERNOR_H

#include <stdbool.h>
#include <stdint.h>

#define RRPCI_GOV_WINDOW 0.1             /* s: the budget's sliding window */
#define RRPCI_GOV_HOLD_MIN 0.001         /* s: a budget stop lasts at least this */
#define RRPCI_GOV_CONTEND_MIN_WALL 0.02  /* s of polling before contention is judged */
#define RRPCI_GOV_CONTEND_HOLD_MAX 1.6   /* s */
/* Between two loop passes, the transports' completion queues are looked at
 * for up to this long until one has something: one look per pass alone
 * pays the loop's own system calls between two looks (measured in the
 * TCG-emulated VM over verbs: 64 B RPC round trip p50 306 us against
 * 122 us with the looks repeated). */
#define RRPCI_GOV_SLICE 50e-6 /* s */
/* CPU a stretch of polling may spend before it finds work and cost the
 * budget nothing: the longest default window (RRPC_VERBS_BUSY_POLL_US).
 * It was 250 us, a round trip's wait on real RoCE NICs (2-20 us) with room
 * to spare, but Soft-RoCE in the TCG-emulated VM has 400-550 us between a
 * ping-pong's requests, and the budget then stopped its polling (46-119
 * stops per thread-mode rtt test on the server). */
#define RRPCI_GOV_PAYOFF 1e-3 /* s */

struct rrpci_governor {
    /* The tunables (RRPC_BUSY_POLL_US, _BUDGET_PCT, _MIN_SHARE_PCT). */
    int window_us, budget_pct, min_share_pct;

    bool polling;        /* the loop polls instead of sleeping */
    /* ... because a transport asked (rrpci_ctx_busy): it left work that
     * wakes no fd (an unarmed CQ), which only polling finds */
    bool unarmed;
    double until;        /* ... at least until then */
    double held_until;   /* polling is refused until then (a stop) */
    double contend_hold; /* the current hold after contention (0: none recently) */
    /* The sliding window: CPU and wall seconds spent polling in the current
     * window (since win_start) and in the previous one. */
    double cpu_cur, cpu_prev, wall_cur, wall_prev, win_start;
    /* The budget's share of it: CPU seconds of wasted stretches, in the
     * current and the previous window; and the current stretch's CPU since
     * it last found work (wasted if the window passes before it does). */
    double waste_cur, waste_prev, stretch_cpu;
    bool found; /* rrpci_gov_found since the last charge */
    /* The clocks at the last charge; mark_ok: they belong to this stretch
     * of polling, on thread @mark_thread (an opaque id). */
    double mark_cpu, mark_wall;
    uint64_t mark_thread;
    bool mark_ok;

    uint64_t budget_stops, contended_stops; /* for the metrics */
};

void rrpci_gov_init(struct rrpci_governor *g, int window_us, int budget_pct, int min_share_pct);
/* Whether a stop holds polling back at @now. */
static inline bool rrpci_gov_held(const struct rrpci_governor *g, double now)
{
    return now < g->held_until;
}
/*
 * Traffic: poll until at least @now + @us.  Returns false, and changes
 * nothing, while a stop holds polling back (the caller then arms what it
 * would have polled).  @cpu and @thread start the charge of a new stretch.
 * @unarmed: the caller (a transport) left work that wakes no fd, so polling
 * must go on until it ends (g->unarmed, cleared by rrpci_gov_stop).
 */
bool rrpci_gov_request(struct rrpci_governor *g, double now, unsigned us, double cpu,
                       uint64_t thread, bool unarmed);
/* Traffic seen by the core: rrpci_gov_request with the configured window
 * (nothing when it is 0). */
void rrpci_gov_activity(struct rrpci_governor *g, double now, double cpu, uint64_t thread);
/* Whether rrpci_gov_request and rrpci_gov_activity would read their @cpu:
 * only to start a stretch of polling.  A caller whose CPU clock is a system
 * call (CLOCK_THREAD_CPUTIME_ID) reads it only then, and passes 0 else. */
static inline bool rrpci_gov_wants_cpu(const struct rrpci_governor *g)
{
    return !g->polling;
}
/* Polling found work (a completion, a ready fd, a due timer) since the
 * last charge: the stretch paid off. */
static inline void rrpci_gov_found(struct rrpci_governor *g)
{
    g->found = true;
}
/*
 * One polling iteration ended at @now with the polling thread's CPU clock
 * at @cpu: charges it.  Returns true when polling must stop now (a budget
 * or contention stop, counted, holds it back from now on).
 */
bool rrpci_gov_charge(struct rrpci_governor *g, double now, double cpu, uint64_t thread);
/* Whether polling goes on after this iteration: not @held (by the charge
 * just made) and the window has not passed. */
bool rrpci_gov_continue(const struct rrpci_governor *g, double now, bool held);
/* Polling ends (the loop sleeps from now on). */
void rrpci_gov_stop(struct rrpci_governor *g);

#endif

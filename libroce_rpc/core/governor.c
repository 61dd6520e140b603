/* SPDX-License-Identifier: MIT */
/* The polling governor (governor.h). */
#include "core/governor.h"

void rrpci_gov_init(struct rrpci_governor *g, int window_us, int budget_pct, int min_share_pct)
{
    *g = (struct rrpci_governor){
        .window_us = window_us,
        .budget_pct = budget_pct,
        .min_share_pct = min_share_pct,
    };
}

/* Whether @cpu seconds of running over @wall seconds spent polling are
 * below the share a poller must get. */
static bool ran_short(const struct rrpci_governor *g, double cpu, double wall)
{
    return cpu < g->min_share_pct / 100.0 * wall;
}

/* Moves the window on to @now; the sliding estimates of the CPU (*@cpu),
 * wall time (*@wall) spent polling and CPU wasted (*@waste) over the last
 * RRPCI_GOV_WINDOW. */
static void slide(struct rrpci_governor *g, double now, double *cpu, double *wall, double *waste)
{
    double since = now - g->win_start;
    if (since >= 2 * RRPCI_GOV_WINDOW || since < 0) {
        g->cpu_prev = g->cpu_cur = g->wall_prev = g->wall_cur = 0;
        g->waste_prev = g->waste_cur = 0;
        g->win_start = now;
        since = 0;
    } else if (since >= RRPCI_GOV_WINDOW) {
        /* A window in which the thread polled and had its CPU: contention,
         * if it comes back, is met with the shortest hold again. */
        if (g->wall_cur >= RRPCI_GOV_CONTEND_MIN_WALL && !ran_short(g, g->cpu_cur, g->wall_cur))
            g->contend_hold = 0;
        g->cpu_prev = g->cpu_cur;
        g->wall_prev = g->wall_cur;
        g->waste_prev = g->waste_cur;
        g->cpu_cur = g->wall_cur = g->waste_cur = 0;
        g->win_start += RRPCI_GOV_WINDOW;
        since -= RRPCI_GOV_WINDOW;
    }
    double f = 1 - since / RRPCI_GOV_WINDOW;
    *cpu = g->cpu_cur + g->cpu_prev * f;
    *wall = g->wall_cur + g->wall_prev * f;
    *waste = g->waste_cur + g->waste_prev * f;
}

static void mark(struct rrpci_governor *g, double now, double cpu, uint64_t thread)
{
    g->mark_cpu = cpu;
    g->mark_wall = now;
    g->mark_thread = thread;
    g->mark_ok = true;
}

bool rrpci_gov_request(struct rrpci_governor *g, double now, unsigned us, double cpu,
                       uint64_t thread, bool unarmed)
{
    if (rrpci_gov_held(g, now))
        return false;
    if (unarmed)
        g->unarmed = true;
    double until = now + us * 1e-6;
    if (until > g->until)
        g->until = until;
    if (!g->polling) {
        g->polling = true;
        g->stretch_cpu = 0;
        mark(g, now, cpu, thread);
    }
    return true;
}

void rrpci_gov_activity(struct rrpci_governor *g, double now, double cpu, uint64_t thread)
{
    if (g->window_us > 0)
        (void)rrpci_gov_request(g, now, (unsigned)g->window_us, cpu, thread, false);
}

bool rrpci_gov_charge(struct rrpci_governor *g, double now, double cpu, uint64_t thread)
{
    /* Only a stretch on one thread is charged: the loop may move between
     * threads (a blocking call that runs it), each with its own CPU clock. */
    if (g->mark_ok && g->mark_thread == thread && cpu >= g->mark_cpu && now >= g->mark_wall) {
        g->cpu_cur += cpu - g->mark_cpu;
        g->wall_cur += now - g->mark_wall;
        g->stretch_cpu += cpu - g->mark_cpu;
    }
    mark(g, now, cpu, thread);
    if (g->found) {
        /* it paid off, unless it took longer than any default window */
        if (g->stretch_cpu > RRPCI_GOV_PAYOFF)
            g->waste_cur += g->stretch_cpu - RRPCI_GOV_PAYOFF;
        g->stretch_cpu = 0;
        g->found = false;
    } else if (now >= g->until) {
        g->waste_cur += g->stretch_cpu; /* the window passed with nothing found */
        g->stretch_cpu = 0;
    }
    double c, w, waste;
    slide(g, now, &c, &w, &waste);
    if (w >= RRPCI_GOV_CONTEND_MIN_WALL && ran_short(g, c, w)) {
        double hold = g->contend_hold > 0 ? 2 * g->contend_hold : RRPCI_GOV_WINDOW;
        g->contend_hold = hold < RRPCI_GOV_CONTEND_HOLD_MAX ? hold : RRPCI_GOV_CONTEND_HOLD_MAX;
        g->held_until = now + g->contend_hold;
        /* the next polling is measured afresh */
        g->cpu_prev = g->cpu_cur = g->wall_prev = g->wall_cur = 0;
        g->stretch_cpu = 0;
        g->contended_stops++;
        return true;
    }
    if (g->budget_pct >= 100)
        return false;
    double budget = g->budget_pct / 100.0 * RRPCI_GOV_WINDOW;
    if (waste <= budget)
        return false;
    /* The share falls below the budget at the latest when the window has
     * moved on by the excess: ask again then, a window later at most and
     * RRPCI_GOV_HOLD_MIN at least. */
    double wait = waste - budget;
    if (wait < RRPCI_GOV_HOLD_MIN)
        wait = RRPCI_GOV_HOLD_MIN;
    g->held_until = now + (wait < RRPCI_GOV_WINDOW ? wait : RRPCI_GOV_WINDOW);
    g->budget_stops++;
    return true;
}

bool rrpci_gov_continue(const struct rrpci_governor *g, double now, bool held)
{
    return !held && now < g->until;
}

void rrpci_gov_stop(struct rrpci_governor *g)
{
    g->polling = false;
    g->unarmed = false;
    g->found = false;
    g->mark_ok = false;
}

/* SPDX-License-Identifier: MIT */
/*
 * rrpc-agent --broker: the pairs report to rrpcd (docs/deployment.md,
 * "Refusing tickets to hosts without a pair"), on a thread of its own for
 * each rrpcd named.  It
 * keeps a TLS 1.3 session with rrpcd (the agent's certificate, whose IP SAN
 * is --local; rrpcd's checked against the CA and the broker's address),
 * says hello, and sends op "pairs" {local, pairs: [{peer, expires_s}]} at
 * start, within a second of a change (a pair agreed, rekeyed or gone) and
 * every AG_REPORT_EVERY_S; a session that fails is made again after
 * AG_REPORT_RETRY_S.  The thread only reads what the main loop publishes.
 */
#ifndef RRPC_AGENT_BROKER_REPORT_H
#define RRPC_AGENT_BROKER_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define AG_REPORT_EVERY_S 10
#define AG_REPORT_RETRY_S 5
#define AG_REPORT_MAX 256 /* rrpcd's bound of one report (CTL_MAX_PAIRS) */
#define AG_REPORT_BROKERS 8 /* --broker given at most this often: one rrpcd each */

/* A pair to report: the peer host and its SAs' hard expiry (0: none). */
struct ag_report_pair {
    int family;
    uint8_t addr[16];
    time_t expires;
};

struct ag_report_opts {
    const char *broker;              /* HOST:PORT or [IPv6]:PORT */
    const char *cert, *key, *ca;     /* PEM files; @ca: rrpcd's CA */
    const char *local;               /* --local, as given */
    /* The pairs to report now (at most @max into @out): their count.  Called
     * on the report thread; must take its own lock. */
    int (*pairs)(struct ag_report_pair *out, int max);
    /* Applied to the socket before connect; may be NULL.  Not the agent's IPsec
     * bypass: rrpcd's end of the session follows the host pair's policies (its
     * in policy drops clear text from a paired host), so this end must too. */
    int (*prepare_fd)(int fd, int family);
    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

/* Checks @o (the address, the TLS files) and starts the thread that reports
 * to @o->broker: 0, or -1 with the reason in @why.  Once per --broker (at
 * most AG_REPORT_BROKERS): several rrpcd on one etcd each hold their own
 * reports (they are not in etcd), so an agent reports to every one. */
int ag_report_start(const struct ag_report_opts *o, char *why, size_t whylen);
/* Ends the sessions (each rrpcd drops the report with it) and joins the threads. */
void ag_report_stop(void);
/* Reports the rrpcd accepted so far, all together (for -v and the tests' logs). */
uint64_t ag_report_accepted(void);

#endif

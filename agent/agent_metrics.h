/* SPDX-License-Identifier: MIT */
/*
 * rrpc-agent's GET /metrics (issue #30): the Prometheus text of one scrape,
 * made from a snapshot of the agent's state and the kernel's per-SA
 * counters.  Pure: no I/O but the caller's buffer, so that a recorded
 * snapshot can be rendered and checked (tests/agent/agent_metrics.sh).
 * docs/metrics.md lists the families.
 */
#ifndef RRPC_AGENT_METRICS_H
#define RRPC_AGENT_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#include "xfrm.h"

/* Why a pairing exchange (first pairing or rekey, either role) failed. */
enum ag_fail {
    AG_FAIL_UNREACHABLE, /* the peer's agent could not be reached */
    AG_FAIL_TLS,         /* the TLS 1.3 handshake failed (no or a bad certificate, not TLS) */
    AG_FAIL_CERTIFICATE, /* the certificate does not name the peer's address (IP SAN) */
    AG_FAIL_TIMEOUT,     /* no whole message within the exchange's 5 s */
    AG_FAIL_PROTOCOL,    /* a message not of the agent protocol, or invalid fields */
    AG_FAIL_REFUSED,     /* the request was refused (ERR sent or received) */
    AG_FAIL_KEYS,        /* key derivation (the TLS exporter) failed */
    AG_FAIL_INSTALL,     /* the kernel refused the states or policies */
    AG_FAIL_N
};

/* The label value of @r ("unreachable", "tls", ...). */
const char *ag_fail_name(enum ag_fail r);

/* One SA of a pair: its kernel counters, when they could be read. */
struct ag_sa_view {
    uint32_t spi;
    bool out;       /* local -> peer */
    bool current;   /* false: the previous SA, kept for the grace after a rekey */
    bool have;      /* stats read (false: the kernel has no such SA, or netlink failed) */
    struct rrpc_xfrm_sa_stats stats;
};

struct ag_peer_view {
    char addr[INET6_ADDRSTRLEN];
    bool configured; /* named by --peer */
    bool agreed;     /* keys agreed at least once and the pair not removed */
    bool up;         /* agreed and not past its hard expiry */
    unsigned nsas;   /* of sas[] */
    struct ag_sa_view sas[4];
};

struct ag_metrics_snap {
    const char *local; /* this host's address */
    uint64_t pairings_total, rekeys_total;
    uint64_t failures[AG_FAIL_N];
    unsigned npeers;
    const struct ag_peer_view *peers;
    bool have_xfrm_stat; /* the kernel's /proc/net/xfrm_stat was read */
    unsigned nxfrm_stat;
    const char (*xfrm_stat_name)[48];
    const uint64_t *xfrm_stat_value;
};

/*
 * Renders @s as Prometheus text (format 0.0.4) into a malloc'd buffer in
 * *@ret_text (the caller's to free) of *@ret_len bytes.  0, or -ENOMEM.
 */
int ag_metrics_render(const struct ag_metrics_snap *s, char **ret_text, size_t *ret_len);

/*
 * Parses /proc/net/xfrm_stat's text (lines "NAME<blanks>VALUE") in @text
 * into at most @max entries; names longer than 47 bytes or lines not of the
 * form are left out.  Returns the number of entries.
 */
unsigned ag_parse_xfrm_stat(const char *text, char (*names)[48], uint64_t *values, unsigned max);

#endif

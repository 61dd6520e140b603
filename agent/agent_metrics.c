/* SPDX-License-Identifier: MIT */
/* rrpc-agent's Prometheus text (agent_metrics.h). */
#include "agent_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fail_names[AG_FAIL_N] = {
    [AG_FAIL_UNREACHABLE] = "unreachable", [AG_FAIL_TLS] = "tls",
    [AG_FAIL_CERTIFICATE] = "certificate", [AG_FAIL_TIMEOUT] = "timeout",
    [AG_FAIL_PROTOCOL] = "protocol",       [AG_FAIL_REFUSED] = "refused",
    [AG_FAIL_KEYS] = "keys",               [AG_FAIL_INSTALL] = "install",
};

const char *ag_fail_name(enum ag_fail r)
{
    return (unsigned)r < AG_FAIL_N ? fail_names[r] : "?";
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The per-SA families: one series per SA whose counters were read. */
static void sa_family(FILE *f, const struct ag_metrics_snap *s, const char *name,
                      const char *help, int which)
{
    head(f, name, "counter", help);
    for (unsigned i = 0; i < s->npeers; i++) {
        const struct ag_peer_view *p = &s->peers[i];
        for (unsigned j = 0; j < p->nsas && j < 4; j++) {
            const struct ag_sa_view *sa = &p->sas[j];
            if (!sa->have)
                continue;
            const struct rrpc_xfrm_sa_stats *st = &sa->stats;
            unsigned long long v = which == 0   ? st->packets
                                   : which == 1 ? st->bytes
                                   : which == 2 ? st->integrity_fails
                                   : which == 3 ? st->replay_fails
                                                : st->replay_window_fails;
            fprintf(f, "%s{peer=\"%s\",direction=\"%s\",spi=\"0x%08x\",sa=\"%s\"} %llu\n", name,
                    p->addr, sa->out ? "out" : "in", sa->spi, sa->current ? "current" : "previous",
                    v);
        }
    }
}

int ag_metrics_render(const struct ag_metrics_snap *s, char **ret_text, size_t *ret_len)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return -ENOMEM;
    unsigned configured = 0, agreed = 0, up = 0, sas = 0;
    for (unsigned i = 0; i < s->npeers; i++) {
        configured += s->peers[i].configured;
        agreed += s->peers[i].agreed;
        up += s->peers[i].up;
        sas += s->peers[i].nsas;
    }
    head(f, "rrpc_agent_info", "gauge", "This host's data address, as --local gives it (always 1).");
    fprintf(f, "rrpc_agent_info{local=\"%s\"} 1\n", s->local ? s->local : "");
    head(f, "rrpc_agent_peers_configured", "gauge", "Peer hosts named by --peer.");
    fprintf(f, "rrpc_agent_peers_configured %u\n", configured);
    head(f, "rrpc_agent_peers_paired", "gauge",
         "Peer hosts with which keys were agreed and whose pair is not removed.");
    fprintf(f, "rrpc_agent_peers_paired %u\n", agreed);
    head(f, "rrpc_agent_pairs_up", "gauge", "Host pairs agreed and not past their hard expiry.");
    fprintf(f, "rrpc_agent_pairs_up %u\n", up);
    head(f, "rrpc_agent_sas_installed", "gauge",
         "ESP SAs this agent installed in the kernel (2 a pair, 4 during a rekey's grace).");
    fprintf(f, "rrpc_agent_sas_installed %u\n", sas);
    head(f, "rrpc_agent_pairings_total", "counter",
         "Pairing exchanges that agreed keys (first pairings and rekeys, either role).");
    fprintf(f, "rrpc_agent_pairings_total %llu\n", (unsigned long long)s->pairings_total);
    head(f, "rrpc_agent_rekeys_total", "counter", "Rekeys: new SAs installed beside a pair's old ones.");
    fprintf(f, "rrpc_agent_rekeys_total %llu\n", (unsigned long long)s->rekeys_total);
    head(f, "rrpc_agent_pairing_failures_total", "counter",
         "Pairing exchanges that failed, by reason (either role).");
    for (int r = 0; r < AG_FAIL_N; r++)
        fprintf(f, "rrpc_agent_pairing_failures_total{reason=\"%s\"} %llu\n", fail_names[r],
                (unsigned long long)s->failures[r]);
    sa_family(f, s, "rrpc_esp_sa_packets_total", "Packets through the SA (the kernel's count).", 0);
    sa_family(f, s, "rrpc_esp_sa_bytes_total", "Bytes through the SA (the kernel's count).", 1);
    sa_family(f, s, "rrpc_esp_sa_integrity_failures_total",
              "Packets the SA dropped for a bad ICV (tampered or wrong key).", 2);
    sa_family(f, s, "rrpc_esp_sa_replay_failures_total",
              "Packets the SA dropped as replays (a sequence number seen before).", 3);
    sa_family(f, s, "rrpc_esp_sa_replay_window_failures_total",
              "Packets the SA dropped as older than its replay window.", 4);
    if (s->have_xfrm_stat) {
        head(f, "rrpc_esp_kernel_errors_total", "counter",
             "The kernel's IPsec error counters of the agent's network namespace "
             "(/proc/net/xfrm_stat), all SAs together.");
        for (unsigned i = 0; i < s->nxfrm_stat; i++)
            fprintf(f, "rrpc_esp_kernel_errors_total{counter=\"%s\"} %llu\n", s->xfrm_stat_name[i],
                    (unsigned long long)s->xfrm_stat_value[i]);
    }
    if (fclose(f) != 0) {
        free(text);
        return -ENOMEM;
    }
    *ret_text = text;
    *ret_len = len;
    return 0;
}

unsigned ag_parse_xfrm_stat(const char *text, char (*names)[48], uint64_t *values, unsigned max)
{
    unsigned n = 0;
    const char *p = text;
    while (*p && n < max) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        size_t nl = 0;
        while (nl < ll && ((p[nl] >= 'A' && p[nl] <= 'Z') || (p[nl] >= 'a' && p[nl] <= 'z') ||
                           (p[nl] >= '0' && p[nl] <= '9') || p[nl] == '_'))
            nl++;
        size_t i = nl;
        while (i < ll && (p[i] == ' ' || p[i] == '\t'))
            i++;
        uint64_t v = 0;
        size_t digits = 0;
        bool overflow = false;
        while (i < ll && p[i] >= '0' && p[i] <= '9') {
            if (v > (UINT64_MAX - (uint64_t)(p[i] - '0')) / 10)
                overflow = true;
            v = v * 10 + (uint64_t)(p[i] - '0');
            i++, digits++;
        }
        while (i < ll && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
            i++;
        if (nl > 0 && nl < 48 && i > nl && digits && !overflow && i == ll) {
            memcpy(names[n], p, nl);
            names[n][nl] = 0;
            values[n++] = v;
        }
        p += ll + (eol ? 1 : 0);
    }
    return n;
}

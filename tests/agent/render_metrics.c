/* SPDX-License-Identifier: MIT */
/*
 * Prints rrpc-agent's /metrics text for a recorded state (two peers, one of
 * them mid-rekey with its previous SAs still in, integrity and replay
 * failures counted) and a recorded /proc/net/xfrm_stat, so that
 * tests/agent/agent_metrics.sh can check the per-SA families that a host
 * without ESP never shows live.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_metrics.h"

static const char xfrm_stat[] = "XfrmInError             \t0\n"
                                "XfrmInStateProtoError   \t7\n"
                                "XfrmInNoStates          \t2\n"
                                "Bad line\n"
                                "XfrmOutPolBlock\t18446744073709551615\n"
                                "XfrmTooBig\t18446744073709551616\n";

int main(void)
{
    struct ag_peer_view peers[2] = {
        {.addr = "10.77.0.2", .configured = true, .agreed = true, .up = true, .nsas = 4,
         .sas = {{.spi = 0x1002, .out = true, .current = true, .have = true,
                  .stats = {.packets = 1200, .bytes = 1500000}},
                 {.spi = 0x1001, .out = false, .current = true, .have = true,
                  .stats = {.packets = 1100, .bytes = 900000, .integrity_fails = 3,
                            .replay_fails = 1, .replay_window_fails = 2}},
                 {.spi = 0xabcdef01, .out = true, .current = false, .have = true,
                  .stats = {.packets = 5, .bytes = 640}},
                 {.spi = 0x2001, .out = false, .current = false, .have = false}}},
        {.addr = "10.77.0.3", .configured = false, .agreed = false},
    };
    char names[8][48];
    uint64_t values[8];
    unsigned n = ag_parse_xfrm_stat(xfrm_stat, names, values, 8);
    struct ag_metrics_snap s = {.local = "10.77.0.1", .pairings_total = 4, .rekeys_total = 3,
                                .npeers = 2, .peers = peers, .have_xfrm_stat = true,
                                .nxfrm_stat = n, .xfrm_stat_name = (const char(*)[48])names,
                                .xfrm_stat_value = values};
    s.failures[AG_FAIL_TLS] = 2;
    s.failures[AG_FAIL_CERTIFICATE] = 1;
    char *text;
    size_t len;
    if (ag_metrics_render(&s, &text, &len))
        return 1;
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

/* Unit test of rrpc-doctor's dcb(8) output parsers (dcb_parse.c) against recorded outputs.
 *
 * Every fixture below is an output printed in a document, named next to it; none is made up.
 * Those named "iproute2 man page" are the EXAMPLE sections of the pages iproute2 ships
 * (man/man8/dcb-*.8, e.g. https://man7.org/linux/man-pages/man8/dcb-pfc.8.html); those named
 * "netdev patch" are the commit messages of the patches that added the subtools to iproute2
 * (Petr Machata, netdev@vger.kernel.org, 2020).  Last line "N passed, N failed".
 */
#include "dcb_parse.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int pass, failed;
#define CHECK(what, cond)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            pass++;                                                                                \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL - %s (%s:%d: %s)\n", what, __FILE__, __LINE__, #cond);                    \
        }                                                                                          \
    } while (0)

/* dcb-pfc(8), EXAMPLE & USAGE, "Show what was set" (iproute2 man page). */
static const char pfc_man[] = "pfc-cap 8 macsec-bypass off delay 4096\n"
                              "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on\n";

/* dcb-ets(8), EXAMPLE & USAGE: `dcb ets show dev eth0 prio-tc tc-tsa tc-bw` (iproute2 man page). */
static const char ets_man[] = "prio-tc 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7\n"
                              "tc-tsa 0:ets 1:ets 2:ets 3:strict 4:strict 5:strict 6:strict 7:strict\n"
                              "tc-bw 0:33 1:33 2:34 3:0 4:0 5:0 6:0 7:0\n";

/* "dcb: Add a subtool for the DCB ETS object": `dcb ets show dev eni1np1` (netdev patch; the
 * reco-tc-tsa line, wrapped by the mail, joined again). */
static const char ets_patch[] =
    "willing on ets_cap 8 cbs off\n"
    "tc-bw 0:0 1:0 2:0 3:0 4:100 5:0 6:0 7:0\n"
    "pg-bw 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0\n"
    "tc-tsa 0:strict 1:strict 2:strict 3:strict 4:ets 5:strict 6:strict 7:strict\n"
    "prio-tc 0:1 1:3 2:5 3:0 4:0 5:0 6:0 7:0\n"
    "reco-tc-bw 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0\n"
    "reco-tc-tsa 0:strict 1:strict 2:strict 3:strict 4:strict 5:strict 6:strict 7:strict\n"
    "reco-prio-tc 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0\n";

/* dcb-app(8), EXAMPLE & USAGE (iproute2 man page): `dcb app show dev eth0 dscp-prio` with the
 * symbolic names, the same with -N, and after `replace ... 24:4`. */
static const char app_man_names[] = "dscp-prio 0:0 CS3:2 CS3:3 CS6:6\n";
static const char app_man_numeric[] = "dscp-prio 0:0 24:2 24:3 48:6\n";
static const char app_man_replaced[] = "dscp-prio 0:0 24:4 48:6\n";
/* dcb-app(8): after `dcb app flush dev eth0 dscp-prio` the show prints "(nothing)", i.e. no output. */
static const char app_man_flushed[] = "";

/* Recorded on the build host (Debian iproute2 6.1.0, `dcb pfc show dev lo`, exit status 1): what
 * dcb prints for a netdev without DCB ops (loopback; veth is the same kind). */
static const char out_unsupported[] = "Attribute read: Operation not supported\n";
/* Recorded on the build host: `dcb pfc show dev nonexist`, exit status 1. */
static const char out_nodev[] = "Attribute read: No such device\n";

int main(void)
{
    char err[256];
    struct dcbp_pfc pfc;
    CHECK("pfc: man page example parses", dcbp_parse_pfc(pfc_man, &pfc, err, sizeof(err)) == 0);
    CHECK("pfc: pfc-cap 8", pfc.pfc_cap == 8);
    CHECK("pfc: on for 6 and 7 only", pfc.have_prio && pfc.on_mask == 0xc0);
    CHECK("pfc: no prio-pfc line is a parse error",
          dcbp_parse_pfc("pfc-cap 8 macsec-bypass off delay 0\n", &pfc, err, sizeof(err)) == -EINVAL &&
              strstr(err, "prio-pfc"));
    CHECK("pfc: a bad value is a parse error naming it",
          dcbp_parse_pfc("prio-pfc 0:off 1:maybe\n", &pfc, err, sizeof(err)) == -EINVAL &&
              strstr(err, "maybe"));
    CHECK("pfc: a priority out of range is a parse error",
          dcbp_parse_pfc("prio-pfc 8:on\n", &pfc, err, sizeof(err)) == -EINVAL);

    struct dcbp_ets ets;
    CHECK("ets: man page example parses", dcbp_parse_ets(ets_man, &ets, err, sizeof(err)) == 0);
    CHECK("ets: one-to-one prio-tc", ets.have_prio_tc && ets.prio_tc[5] == 5 && ets.prio_tc[7] == 7);
    CHECK("ets: tc 0..2 ets, 3 strict", ets.have_tsa && ets.tc_tsa[0] == DCBP_TSA_ETS &&
                                            ets.tc_tsa[2] == DCBP_TSA_ETS &&
                                            ets.tc_tsa[3] == DCBP_TSA_STRICT);
    CHECK("ets: shares 33/33/34", ets.have_bw && ets.tc_bw[0] == 33 && ets.tc_bw[2] == 34 &&
                                      ets.tc_bw[6] == 0);
    CHECK("ets: patch example parses", dcbp_parse_ets(ets_patch, &ets, err, sizeof(err)) == 0);
    CHECK("ets: prio-tc, not reco-prio-tc", ets.prio_tc[0] == 1 && ets.prio_tc[1] == 3 &&
                                                ets.prio_tc[2] == 5 && ets.prio_tc[3] == 0);
    CHECK("ets: tc-bw, not reco-tc-bw or pg-bw", ets.tc_bw[4] == 100 && ets.tc_bw[0] == 0);
    CHECK("ets: tc 4 ets, tc 0 strict", ets.tc_tsa[4] == DCBP_TSA_ETS &&
                                            ets.tc_tsa[0] == DCBP_TSA_STRICT);
    CHECK("ets: empty output is a parse error", dcbp_parse_ets("", &ets, err, sizeof(err)) == -EINVAL);
    CHECK("ets: unknown tsa is a parse error",
          dcbp_parse_ets("tc-tsa 0:fair\n", &ets, err, sizeof(err)) == -EINVAL && strstr(err, "fair"));

    struct dcbp_app app;
    CHECK("app: symbolic names parse", dcbp_parse_app(app_man_names, &app, err, sizeof(err)) == 0);
    CHECK("app: CS3 -> 2 and 3, CS6 -> 6, 0 -> 0",
          app.n == 4 && app.prio_mask[24] == 0x0c && app.prio_mask[48] == 0x40 &&
              app.prio_mask[0] == 0x01);
    struct dcbp_app app2;
    CHECK("app: -N output parses", dcbp_parse_app(app_man_numeric, &app2, err, sizeof(err)) == 0);
    CHECK("app: names and numbers give the same table", memcmp(&app, &app2, sizeof(app)) == 0);
    CHECK("app: two rules for DSCP 24: the lowest priority is the effective one",
          dcbp_effective_prio(&app2, 24, NULL) == 2);
    CHECK("app: replaced table parses", dcbp_parse_app(app_man_replaced, &app, err, sizeof(err)) == 0);
    bool rule;
    CHECK("app: 24 -> 4 by rule", dcbp_effective_prio(&app, 24, &rule) == 4 && rule);
    CHECK("app: 46 (no rule) -> 46 >> 3 = 5, not by rule",
          dcbp_effective_prio(&app, 46, &rule) == 5 && !rule);
    CHECK("app: flushed (no output) is no rules",
          dcbp_parse_app(app_man_flushed, &app, err, sizeof(err)) == 0 && app.n == 0);
    CHECK("app: an error message is not taken for an empty table",
          dcbp_parse_app(out_unsupported, &app, err, sizeof(err)) == -EINVAL);
    CHECK("app: an unknown DSCP name is a parse error",
          dcbp_parse_app("dscp-prio VOICE:5\n", &app, err, sizeof(err)) == -EINVAL &&
              strstr(err, "VOICE"));

    CHECK("dscp names: CS0..CS7, AF11..AF43, EF",
          dcbp_dscp_value("CS1") == 8 && dcbp_dscp_value("CS6") == 48 &&
              dcbp_dscp_value("AF11") == 10 && dcbp_dscp_value("AF43") == 38 &&
              dcbp_dscp_value("EF") == 46 && dcbp_dscp_value("63") == 63 &&
              dcbp_dscp_value("64") == -1 && dcbp_dscp_value("AF51") == -1);
    CHECK("default mapping: the library's class DSCPs 48/46/10/8 -> 6/5/1/1",
          dcbp_default_prio(48) == 6 && dcbp_default_prio(46) == 5 && dcbp_default_prio(10) == 1 &&
              dcbp_default_prio(8) == 1 && dcbp_default_prio(64) == -1);
    CHECK("no rules table: default mapping", dcbp_effective_prio(NULL, 10, &rule) == 1 && !rule);

    CHECK("classify: exit 0 is ok", dcbp_classify(0, "") == DCBP_RUN_OK);
    CHECK("classify: 127 is not installed", dcbp_classify(127, "") == DCBP_RUN_NOT_INSTALLED);
    CHECK("classify: recorded 'Operation not supported' is unsupported",
          dcbp_classify(1, out_unsupported) == DCBP_RUN_UNSUPPORTED);
    CHECK("classify: recorded 'No such device' is a failure", dcbp_classify(1, out_nodev) == DCBP_RUN_FAILED);

    char buf[64];
    CHECK("prio list for the fix", strcmp(dcbp_prio_list(0x62, ":on", buf, sizeof(buf)), "1:on 5:on 6:on") == 0);
    CHECK("prio list: empty mask", strcmp(dcbp_prio_list(0, ":on", buf, sizeof(buf)), "") == 0);

    printf("%d passed, %d failed\n", pass, failed);
    return failed ? 1 : 0;
}

/* rrpc-doctor: parsing of the output of iproute2's dcb(8) and the DSCP -> priority mapping.
 *
 * Pure functions (no I/O): rrpc_doctor.c runs the commands and feeds their output here, and
 * tools/doctor/test_dcb_parse.c checks them against outputs recorded from the dcb man pages.
 * Every parser returns 0, or -EINVAL with a one-line reason in @err (never NULL).
 */
#ifndef RRPC_DOCTOR_DCB_PARSE_H
#define RRPC_DOCTOR_DCB_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DCBP_PRIOS 8 /* IEEE 802.1Q priorities 0..7 (also the number of traffic classes) */
#define DCBP_DSCPS 64

/* `dcb pfc show dev X`: "pfc-cap N macsec-bypass on|off delay N" and "prio-pfc P:on|off ...". */
struct dcbp_pfc {
    int pfc_cap;     /* -1: not in the output */
    bool have_prio;  /* a prio-pfc line was found */
    uint8_t on_mask; /* bit P: PFC enabled on priority P */
};

/* `dcb ets show dev X`: "prio-tc P:TC ...", "tc-tsa TC:strict|cbs|ets|vendor ...", "tc-bw TC:N". */
enum dcbp_tsa { DCBP_TSA_UNKNOWN, DCBP_TSA_STRICT, DCBP_TSA_CBS, DCBP_TSA_ETS, DCBP_TSA_VENDOR };
struct dcbp_ets {
    bool have_prio_tc, have_tsa, have_bw;
    int prio_tc[DCBP_PRIOS];           /* traffic class of each priority */
    enum dcbp_tsa tc_tsa[DCBP_PRIOS];  /* selection algorithm of each traffic class */
    int tc_bw[DCBP_PRIOS];             /* bandwidth share (percent) of each traffic class */
};

/* `dcb -N app show dev X dscp-prio`: "dscp-prio DSCP:PRIO ..." (empty output: no rules). */
struct dcbp_app {
    int n;                         /* rules found */
    uint8_t prio_mask[DCBP_DSCPS]; /* bit P: a rule maps this DSCP to priority P */
};

int dcbp_parse_pfc(const char *text, struct dcbp_pfc *out, char *err, size_t errsize);
int dcbp_parse_ets(const char *text, struct dcbp_ets *out, char *err, size_t errsize);
int dcbp_parse_app(const char *text, struct dcbp_app *out, char *err, size_t errsize);

/* A DSCP as dcb prints it: a number 0..63, or (without -N) an /etc/iproute2/rt_dsfield name:
 * CS0..CS7, AF11..AF43, EF.  Returns 0..63, or -1. */
int dcbp_dscp_value(const char *tok);

/* The priority the project assumes for @dscp when the NIC has no DSCP rule for it: DSCP >> 3,
 * the class selector bits (mlx5's default dscp2prio table in trust-dscp mode is the same). */
int dcbp_default_prio(int dscp);

/* The priority @dscp gets on a NIC with rules @app (NULL: none): the lowest priority a rule maps
 * it to, else dcbp_default_prio().  *ret_from_rule (may be NULL) says which. */
int dcbp_effective_prio(const struct dcbp_app *app, int dscp, bool *ret_from_rule);

/* How a dcb run went, from its exit status (127: not found / could not be executed) and its
 * merged stdout+stderr. */
enum dcbp_run { DCBP_RUN_OK, DCBP_RUN_NOT_INSTALLED, DCBP_RUN_UNSUPPORTED, DCBP_RUN_FAILED };
enum dcbp_run dcbp_classify(int exit_status, const char *output);

/* "P:on P:on ..." for each bit of @mask, in @buf (the argument list of `dcb pfc set ... prio-pfc`).
 * Returns @buf. */
char *dcbp_prio_list(uint8_t mask, const char *suffix, char *buf, size_t size);

#endif

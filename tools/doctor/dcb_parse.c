/* rrpc-doctor: parsing of dcb(8) output (see dcb_parse.h). */
#include "dcb_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Copies the next whitespace-separated token of *s into @tok; false at the end of the line. */
static bool next_token(const char **s, char *tok, size_t size)
{
    const char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '\n')
        return false;
    size_t n = strcspn(p, " \t\n");
    snprintf(tok, size, "%.*s", (int)n, p);
    *s = p + n;
    return true;
}

/* The rest of the line whose first word is @key, or NULL. */
static const char *find_line(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, key, kl) == 0 && (p[kl] == ' ' || p[kl] == '\t' || p[kl] == '\n' || !p[kl]))
            return p + kl;
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return NULL;
}

/* A decimal integer token in [lo, hi], or -1. */
static int int_in(const char *s, int lo, int hi)
{
    if (!*s || strlen(s) > 9)
        return -1;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return -1;
    int v = atoi(s);
    return v >= lo && v <= hi ? v : -1;
}

/* Splits "K:V" of @tok; false when there is no colon. */
static bool split_kv(const char *tok, char *k, size_t ks, char *v, size_t vs)
{
    const char *c = strrchr(tok, ':');
    if (!c)
        return false;
    snprintf(k, ks, "%.*s", (int)(c - tok), tok);
    snprintf(v, vs, "%s", c + 1);
    return true;
}

int dcbp_dscp_value(const char *tok)
{
    int v = int_in(tok, 0, 63);
    if (v >= 0)
        return v;
    if (strcasecmp(tok, "EF") == 0)
        return 46;
    if (strlen(tok) == 3 && strncasecmp(tok, "CS", 2) == 0 && tok[2] >= '0' && tok[2] <= '7')
        return (tok[2] - '0') << 3;
    if (strlen(tok) == 4 && strncasecmp(tok, "AF", 2) == 0 && tok[2] >= '1' && tok[2] <= '4' &&
        tok[3] >= '1' && tok[3] <= '3')
        return ((tok[2] - '0') << 3) | ((tok[3] - '0') << 1);
    return -1;
}

int dcbp_default_prio(int dscp)
{
    return dscp < 0 || dscp > 63 ? -1 : dscp >> 3;
}

int dcbp_effective_prio(const struct dcbp_app *app, int dscp, bool *ret_from_rule)
{
    if (ret_from_rule)
        *ret_from_rule = false;
    if (dscp < 0 || dscp > 63)
        return -1;
    if (app && app->prio_mask[dscp]) {
        if (ret_from_rule)
            *ret_from_rule = true;
        return __builtin_ctz(app->prio_mask[dscp]);
    }
    return dcbp_default_prio(dscp);
}

int dcbp_parse_pfc(const char *text, struct dcbp_pfc *out, char *err, size_t errsize)
{
    memset(out, 0, sizeof(*out));
    out->pfc_cap = -1;
    char tok[64], k[32], v[32];
    /* "pfc-cap 8 macsec-bypass off delay 4096": pfc-cap may be anywhere on its line. */
    for (const char *line = text; line && *line;) {
        const char *p = line;
        bool prev_cap = false;
        while (next_token(&p, tok, sizeof(tok))) {
            if (prev_cap) {
                out->pfc_cap = int_in(tok, 0, 8);
                if (out->pfc_cap < 0)
                    return fail(err, errsize, "pfc-cap: '%s' is not a number 0..8", tok);
            }
            prev_cap = strcmp(tok, "pfc-cap") == 0;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    const char *p = find_line(text, "prio-pfc");
    if (!p)
        return fail(err, errsize, "no prio-pfc line");
    out->have_prio = true;
    while (next_token(&p, tok, sizeof(tok))) {
        if (!split_kv(tok, k, sizeof(k), v, sizeof(v)))
            return fail(err, errsize, "prio-pfc: '%s' is not PRIO:on|off", tok);
        int prio = int_in(k, 0, 7);
        if (prio < 0)
            return fail(err, errsize, "prio-pfc: '%s' is not a priority 0..7", k);
        if (strcmp(v, "on") == 0)
            out->on_mask |= (uint8_t)(1u << prio);
        else if (strcmp(v, "off") != 0)
            return fail(err, errsize, "prio-pfc: '%s' is neither on nor off", v);
    }
    return 0;
}

/* Parses "K:V ..." after @key into vals[8] with keys 0..7; @conv turns a value into an int (-1:
 * invalid).  Returns 1 when the line is there, 0 when not, -EINVAL. */
static int parse_map(const char *text, const char *key, int vals[DCBP_PRIOS],
                     int (*conv)(const char *), char *err, size_t errsize)
{
    const char *p = find_line(text, key);
    if (!p)
        return 0;
    char tok[64], k[32], v[32];
    while (next_token(&p, tok, sizeof(tok))) {
        if (!split_kv(tok, k, sizeof(k), v, sizeof(v)))
            return fail(err, errsize, "%s: '%s' is not KEY:VALUE", key, tok);
        int i = int_in(k, 0, 7);
        if (i < 0)
            return fail(err, errsize, "%s: '%s' is not 0..7", key, k);
        int x = conv(v);
        if (x < 0)
            return fail(err, errsize, "%s: unexpected value '%s'", key, v);
        vals[i] = x;
    }
    return 1;
}

static int conv_tc(const char *v)
{
    return int_in(v, 0, 7);
}

static int conv_bw(const char *v)
{
    return int_in(v, 0, 100);
}

static int conv_tsa(const char *v)
{
    static const char *const names[] = {"", "strict", "cbs", "ets", "vendor"};
    for (int i = 1; i < 5; i++)
        if (strcmp(v, names[i]) == 0)
            return i;
    return -1;
}

int dcbp_parse_ets(const char *text, struct dcbp_ets *out, char *err, size_t errsize)
{
    memset(out, 0, sizeof(*out));
    int tsa[DCBP_PRIOS] = {0};
    int r1 = parse_map(text, "prio-tc", out->prio_tc, conv_tc, err, errsize);
    if (r1 < 0)
        return r1;
    int r2 = parse_map(text, "tc-tsa", tsa, conv_tsa, err, errsize);
    if (r2 < 0)
        return r2;
    int r3 = parse_map(text, "tc-bw", out->tc_bw, conv_bw, err, errsize);
    if (r3 < 0)
        return r3;
    if (!r1 && !r2 && !r3)
        return fail(err, errsize, "none of prio-tc, tc-tsa, tc-bw found");
    out->have_prio_tc = r1;
    out->have_tsa = r2;
    out->have_bw = r3;
    for (int i = 0; i < DCBP_PRIOS; i++)
        out->tc_tsa[i] = (enum dcbp_tsa)tsa[i];
    return 0;
}

int dcbp_parse_app(const char *text, struct dcbp_app *out, char *err, size_t errsize)
{
    memset(out, 0, sizeof(*out));
    const char *p = find_line(text, "dscp-prio");
    if (!p) {
        /* No rules: dcb prints nothing.  Anything else is not what we asked for. */
        for (const char *q = text; *q; q++)
            if (!isspace((unsigned char)*q))
                return fail(err, errsize, "no dscp-prio line in a non-empty output");
        return 0;
    }
    char tok[64], k[32], v[32];
    while (next_token(&p, tok, sizeof(tok))) {
        if (!split_kv(tok, k, sizeof(k), v, sizeof(v)))
            return fail(err, errsize, "dscp-prio: '%s' is not DSCP:PRIO", tok);
        int dscp = dcbp_dscp_value(k);
        if (dscp < 0)
            return fail(err, errsize, "dscp-prio: '%s' is not a DSCP (0..63, CSn, AFxy, EF)", k);
        int prio = int_in(v, 0, 7);
        if (prio < 0)
            return fail(err, errsize, "dscp-prio: '%s' is not a priority 0..7", v);
        out->prio_mask[dscp] |= (uint8_t)(1u << prio);
        out->n++;
    }
    return 0;
}

enum dcbp_run dcbp_classify(int exit_status, const char *output)
{
    if (exit_status == 0)
        return DCBP_RUN_OK;
    if (exit_status == 127)
        return DCBP_RUN_NOT_INSTALLED;
    if (output && (strstr(output, "Operation not supported") || strstr(output, "not supported")))
        return DCBP_RUN_UNSUPPORTED;
    return DCBP_RUN_FAILED;
}

char *dcbp_prio_list(uint8_t mask, const char *suffix, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (int p = 0; p < DCBP_PRIOS && n < size; p++)
        if (mask & (1u << p))
            n += (size_t)snprintf(buf + n, size - n, "%s%d%s", n ? " " : "", p, suffix);
    return buf;
}

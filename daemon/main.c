/* SPDX-License-Identifier: MIT */
/*
 * rrpcd, the roce-rpc broker: a TLS 1.3 control plane where servers register
 * services under leases and clients look them up and get connection tickets.
 * See docs/broker.md.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <sys/resource.h>

#include <ev.h>

#include "rrpcd.h"

int log_level = LOG_INFO;
static bool use_syslog;

void log_open(bool sys, int level)
{
    use_syslog = sys;
    log_level = level;
    if (sys)
        openlog("rrpcd", LOG_PID, LOG_DAEMON);
}

/* Whether the code point @u must not reach a log as it is: C1 controls, the
 * marks and overrides of bidirectional text, line and paragraph separators. */
static bool log_hides(uint32_t u)
{
    return (u >= 0x80 && u <= 0x9f) || u == 0x061c || u == 0x200e || u == 0x200f ||
           (u >= 0x2028 && u <= 0x202e) || (u >= 0x2066 && u <= 0x2069) || u == 0xfeff;
}

/* The length of the well-formed UTF-8 sequence at @p (of @n bytes) and its
 * code point, or 0 when it is not one (overlong, surrogate, beyond U+10FFFF,
 * cut short). */
static size_t utf8_seq(const unsigned char *p, size_t n, uint32_t *ret_u)
{
    size_t len;
    uint32_t u, min;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2, u = p[0] & 0x1f, min = 0x80;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        len = 3, u = p[0] & 0x0f, min = 0x800;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        len = 4, u = p[0] & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        u = u << 6 | (p[i] & 0x3f);
    }
    if (u < min || u > 0x10ffff || (u >= 0xd800 && u <= 0xdfff))
        return 0;
    *ret_u = u;
    return len;
}

size_t log_escape(const char *in, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t n = strlen(in), o = 0;
    if (!outlen)
        return 0;
    for (size_t i = 0; i < n;) {
        char esc[16];
        size_t take = 1;
        uint32_t u = 0;
        const char *put = esc;
        size_t plen;
        if (p[i] == '\\') {
            put = "\\\\";
            plen = 2;
        } else if (p[i] >= 0x20 && p[i] < 0x7f) {
            put = (const char *)p + i;
            plen = 1;
        } else if (p[i] >= 0x80 && (take = utf8_seq(p + i, n - i, &u)) != 0) {
            if (log_hides(u)) {
                plen = (size_t)snprintf(esc, sizeof(esc), "\\u{%04x}", (unsigned)u);
            } else {
                put = (const char *)p + i;
                plen = take;
            }
        } else {
            take = 1; /* a control character, or a byte of no well-formed sequence */
            plen = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", p[i]);
        }
        if (o + plen >= outlen)
            break; /* cut at a whole character */
        memcpy(out + o, put, plen);
        o += plen;
        i += take;
    }
    out[o] = 0;
    return o;
}

/* Every line goes through log_escape: the strings a peer chose (service
 * names, principals, messages) reach the log only as printable text. */
void log_msg(int level, const char *fmt, ...)
{
    char raw[2048], line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    log_escape(raw, line, sizeof(line));
    if (use_syslog) {
        syslog(level, "%s", line);
    } else {
        static const char *const names[] = { "emerg", "alert", "crit", "error",
                                              "warning", "notice", "info", "debug" };
        struct timespec ts;
        struct tm tm;
        char t[32];
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        strftime(t, sizeof(t), "%Y-%m-%d %H:%M:%S", &tm);
        fprintf(stderr, "%s.%03ld rrpcd %s: %s\n", t, ts.tv_nsec / 1000000, names[level & 7],
                line);
    }
}

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: rrpcd [-c FILE] [-s NAME=VALUE]... [--check]\n"
            "  rrpcd, the roce-rpc broker: a TLS 1.3 control plane where servers register\n"
            "  services and clients look them up and receive connection tickets.\n\n"
            "  -c, --config FILE     read settings from FILE (\"name = value\" lines, # comments)\n"
            "  -s, --set NAME=VALUE  set one setting (after the file; repeatable)\n"
            "      --check           load and check what a start loads (address, certificate,\n"
            "                        key, CA, token file) without listening, and exit\n"
            "  -h, --help            this text\n"
            "      --help-settings[=scdoc]  the table of settings alone (scdoc: as the man page)\n"
            "  -V, --version         the version\n\n"
            "Signals: SIGTERM/SIGINT shut down cleanly.  Registrations live in memory:\n"
            "after a restart, servers register again by themselves.\n\n");
    config_print_table(fp, RRPCI_CONF_HELP);
}

static void on_stop(struct ev_loop *loop, ev_signal *w, int revents)
{
    LOG(LOG_NOTICE, "signal %d: shutting down", w->signum);
    ev_break(loop, EVBREAK_ALL);
}

/* After getopt refused @arg (it said why): the closest long option, when one
 * is a likely misspelling, and where the help is, instead of the whole help. */
static void bad_usage(const char *arg, const struct option *opts)
{
    const char *best = NULL;
    if (arg && !strncmp(arg, "--", 2)) {
        char a[64];
        snprintf(a, sizeof(a), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
        size_t best_d = 3; /* at most 2 edits away */
        for (const struct option *o = opts; o->name; o++) {
            size_t d = rrpci_conf_distance(a, o->name);
            if (d < best_d) {
                best_d = d;
                best = o->name;
            }
        }
    }
    if (best)
        fprintf(stderr, "rrpcd: did you mean --%s?\n", best);
    fprintf(stderr, "usage: rrpcd [-c FILE] [-s NAME=VALUE]... [--check]  (rrpcd --help for "
                    "the options, rrpcd --help-settings for the settings)\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' }, { "set", required_argument, NULL, 's' },
        { "check", no_argument, NULL, 'k' },        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },      { "help-settings", optional_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    struct config cfg;
    config_init(&cfg);
    const char *file = NULL;
    char **sets = calloc((size_t)argc, sizeof(char *));
    int nsets = 0, opt, rc = 1;
    bool check = false;
    if (!sets)
        return 1;
    while ((opt = getopt_long(argc, argv, "c:s:hV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': file = optarg; break;
        case 's': sets[nsets++] = optarg; break;
        case 'k': check = true; break;
        case 'h': usage(stdout); rc = 0; goto out;
        case 'S':
            config_print_table(stdout, optarg && !strcmp(optarg, "scdoc") ? RRPCI_CONF_SCDOC
                                                                           : RRPCI_CONF_HELP);
            rc = 0;
            goto out;
        case 'V':
            printf("rrpcd %s (control protocol %d), libroce_rpc %s\n", RRPC_VERSION_STRING,
                   CTL_VERSION, rrpc_version());
            rc = 0;
            goto out;
        default: bad_usage(argv[optind - 1], longopts); rc = 2; goto out;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "rrpcd: unexpected argument '%s'\n", argv[optind]);
        bad_usage(NULL, longopts);
        rc = 2;
        goto out;
    }
    if (file && config_load_file(&cfg, file))
        goto out;
    for (int i = 0; i < nsets; i++) {
        char *eq = strchr(sets[i], '=');
        if (!eq) {
            fprintf(stderr, "rrpcd: -s wants NAME=VALUE, not '%s'\n", sets[i]);
            goto out;
        }
        *eq = 0;
        int r = config_set(&cfg, sets[i], eq + 1, "command line");
        *eq = '=';
        if (r)
            goto out;
    }
    if (config_finish(&cfg))
        goto out;
    if (check) {
        uint8_t id[RRPC_TICKET_KEY_ID_LEN];
        rrpc_ticket_key_id(cfg.keys[0], id);
        printf("rrpcd: ticket key ");
        for (size_t i = 0; i < sizeof(id); i++)
            printf("%02x", id[i]);
        printf(" (Ed25519%s), %zu previous key(s) accepted\n",
               cfg.signer_ephemeral ? ", made at start: no ticket_key" : "", cfg.n_keys - 1);
        printf("rrpcd: configuration OK\n");
        rc = 0;
        goto out;
    }
    log_open(cfg.syslog, cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    /* Many clients at once: use the hard limit of open files. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    if (!loop) {
        LOG(LOG_ERR, "cannot make an event loop");
        goto out;
    }
    ev_signal sterm, sint;
    ev_signal_init(&sterm, on_stop, SIGTERM);
    ev_signal_init(&sint, on_stop, SIGINT);
    ev_signal_start(loop, &sterm);
    ev_signal_start(loop, &sint);
    /* The modules, each handed what it uses (rrpcd.h).  The metrics address first:
     * a start that fails there (or at etcd) writes no port_file. */
    struct registry *reg = registry_new();
    struct store *st = NULL;
    struct server *srv = NULL;
    if (!reg)
        LOG(LOG_ERR, "out of memory");
    else if (metrics_start(&cfg) == 0 &&
             (cfg.n_etcd ? etcdreg_start(loop, &cfg, reg, &st) : (st = store_memory(), 0)) == 0 &&
             server_start(loop, &cfg, reg, st, &srv) == 0) {
        ev_run(loop, 0);
        rc = 0;
    }
    metrics_stop();
    if (st && st->ops->stop)
        st->ops->stop(st);
    server_stop(srv);
    registry_free(reg);
    ev_signal_stop(loop, &sterm);
    ev_signal_stop(loop, &sint);
    ev_loop_destroy(loop);
    LOG(LOG_NOTICE, "stopped");
    if (use_syslog)
        closelog();
out:
    config_free(&cfg);
    free(sets);
    return rc;
}

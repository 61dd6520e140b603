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
#ifdef RRPC_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

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
            "Signals: SIGTERM/SIGINT shut down cleanly.  SIGHUP reloads the configuration\n"
            "(certificates, CA, tokens, ACL, ticket keys, log level, limits) keeping the\n"
            "sessions and registrations; a bad one is refused and the old one kept.  listen,\n"
            "port_file, log, registry, etcd_* and metrics_* need a restart.  Registrations\n"
            "live in memory: after a restart, servers register again by themselves.\n\n");
    config_print_table(fp, RRPCI_CONF_HELP);
}

/* Tells systemd (Type=notify; NOTIFY_SOCKET) how rrpcd is; nothing without it, or
 * when rrpcd was built without libsystemd. */
static void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notify(const char *fmt, ...)
{
#ifdef RRPC_HAVE_SYSTEMD
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sd_notify(0, msg);
#else
    (void)fmt;
#endif
}

static void on_stop(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    LOG(LOG_NOTICE, "signal %d: shutting down", w->signum);
    notify("STOPPING=1\nSTATUS=shutting down (signal %d)", w->signum);
    ev_break(loop, EVBREAK_ALL);
}

/* What a start reads, and a reload again: the file, then the -s settings. */
struct config_source {
    const char *file;
    char **sets;
    int nsets;
};

static int config_read(struct config *cfg, const struct config_source *src)
{
    if (src->file && config_load_file(cfg, src->file))
        return -EINVAL;
    for (int i = 0; i < src->nsets; i++) {
        char *eq = strchr(src->sets[i], '=');
        if (!eq) {
            fprintf(stderr, "rrpcd: -s wants NAME=VALUE, not '%s'\n", src->sets[i]);
            return -EINVAL;
        }
        *eq = 0;
        int r = config_set(cfg, src->sets[i], eq + 1, "command line");
        *eq = '=';
        if (r)
            return r;
    }
    return config_finish(cfg);
}

/* The running rrpcd, as SIGHUP's watcher sees it. */
struct reload_ctx {
    struct config *cfg;
    const struct config_source *src;
    struct server *srv;
};

/* Logs each line of @text at @level with @prefix (the complaints a reload gathered). */
static void log_lines(int level, const char *prefix, char *text)
{
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        LOG(level, "%s%s", prefix, !strncmp(l, "rrpcd: ", 7) ? l + 7 : l);
}

static const char *level_name(int level)
{
    static const char *const names[] = { "emerg", "alert", "crit", "err",
                                          "warning", "notice", "info", "debug" };
    return names[level & 7];
}

/*
 * SIGHUP, on the loop (libev turns the signal into this call; nothing runs in
 * the signal handler): reads the configuration again as a start would.  A bad
 * one is refused with its reasons and the one in use kept; a good one applies
 * to new TLS sessions and to every request from now on; sessions, registrations
 * and watches stay.
 */
static void on_reload(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop, (void)revents;
    struct reload_ctx *rc = w->data;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    notify("RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=%llu",
           (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    const char *what = rc->src->file ? rc->src->file : "the command line's settings";
    LOG(LOG_NOTICE, "signal %d: reloading %s", w->signum, what);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    struct config *nc = malloc(sizeof(*nc));
    int r = -ENOMEM;
    if (mem && nc) {
        config_init(nc);
        config_report_to(mem);
        r = config_read(nc, rc->src);
        config_report_to(NULL);
    }
    if (mem)
        fclose(mem);
    char restart[512] = "";
    if (!r) {
        config_keep_restart_only(rc->cfg, nc, restart, sizeof(restart));
        r = server_reload_tls(rc->srv, nc);
    }
    if (r) {
        if (text && text[0])
            log_lines(LOG_ERR, "reload refused: ", text);
        LOG(LOG_ERR, "reload of %s refused%s: still running with the configuration in use",
            what, r == -ENOMEM ? " (out of memory)" : "");
        if (nc)
            config_free(nc);
        free(nc);
        free(text);
        notify("READY=1\nSTATUS=serving; the last reload was refused (see the log)");
        return;
    }
    if (text && text[0])
        log_lines(LOG_WARNING, "reload: ", text);
    free(text);
    config_apply(rc->cfg, nc);
    free(nc);
    const struct config *c = rc->cfg;
    log_level = c->log_level;
    uint8_t kid[RRPC_TICKET_KEY_ID_LEN];
    rrpc_ticket_key_id(c->keys[0], kid);
    LOG(restart[0] ? LOG_WARNING : LOG_NOTICE,
        "reloaded %s: certificate %s, CA %s, %zu tokens, %zu ACL rules, ticket key "
        "%02x%02x%02x%02x%02x%02x%02x%02x (%zu previous), log level %s, limits and timeouts; "
        "sessions and registrations kept%s%s%s",
        what, c->cert, c->ca[0] ? c->ca : "none", c->n_tokens, c->n_acl, kid[0], kid[1], kid[2],
        kid[3], kid[4], kid[5], kid[6], kid[7], c->n_keys - 1, level_name(c->log_level),
        restart[0] ? "; NOT applied, needs a restart: " : "", restart,
        restart[0] ? " (the old values stay in use)" : "");
    notify("READY=1\nSTATUS=serving; configuration reloaded%s", restart[0] ? " (some settings "
           "need a restart: see the log)" : "");
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
    const struct config_source src = { .file = file, .sets = sets, .nsets = nsets };
    if (config_read(&cfg, &src))
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
    /* libev's signal watchers: the handler only notes the signal, the loop calls these. */
    ev_signal sterm, sint, shup;
    ev_signal_init(&sterm, on_stop, SIGTERM);
    ev_signal_init(&sint, on_stop, SIGINT);
    ev_signal_start(loop, &sterm);
    ev_signal_start(loop, &sint);
    struct reload_ctx reload = { .cfg = &cfg, .src = &src };
    ev_signal_init(&shup, on_reload, SIGHUP);
    shup.data = &reload;
    ev_signal_start(loop, &shup); /* heard once the loop runs, when the server is up */
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
        reload.srv = srv;
        notify("READY=1\nSTATUS=serving on %s", cfg.listen);
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
    ev_signal_stop(loop, &shup);
    ev_loop_destroy(loop);
    LOG(LOG_NOTICE, "stopped");
    if (use_syslog)
        closelog();
out:
    config_free(&cfg);
    free(sets);
    return rc;
}

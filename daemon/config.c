/* SPDX-License-Identifier: MIT */
/* rrpcd's settings: one typed table (util/conf.h), a "name = value" file read by libinih. */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <ini.h>

#include "rrpcd.h"
#ifdef RRPC_HAVE_MHD
#include "util/metrics_http.h"
#endif

/* Where the configuration's complaints go: stderr, or what config_report_to set
 * (a reload gathers them to log them). */
static FILE *report_fp;

void config_report_to(FILE *fp)
{
    report_fp = fp;
}

static FILE *errf(void)
{
    return report_fp ? report_fp : stderr;
}

/* ---- values that need more than a type ------------------------------- */

/* Splits "HOST:PORT" or "[IPv6]:PORT" (HOST may be empty: every address).  The port must be
 * decimal 0..65535: getaddrinfo() would take 99999 and listen on 99999 - 65536. */
static int split_listen(const char *v, char *host, size_t hs, char *port, size_t ps,
                        const char **why)
{
    const char *colon;
    if (v[0] == '[') {
        const char *rb = strchr(v, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - v - 1) >= hs) {
            *why = "expected [IPv6]:PORT";
            return -EINVAL;
        }
        memcpy(host, v + 1, (size_t)(rb - v - 1));
        host[rb - v - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(v, ':');
        if (!colon || (size_t)(colon - v) >= hs) {
            *why = "expected HOST:PORT or [IPv6]:PORT";
            return -EINVAL;
        }
        memcpy(host, v, (size_t)(colon - v));
        host[colon - v] = 0;
    }
    const char *p = colon + 1;
    size_t n = strspn(p, "0123456789");
    if (!*p || p[n] || n > 5 || atoi(p) > 65535 || n >= ps) {
        *why = "the port must be a number 0..65535 (0 picks a free one)";
        return -ERANGE;
    }
    snprintf(port, ps, "%s", p);
    return 0;
}

static int check_listen(const char *v, char *why, size_t whylen)
{
    char host[256], port[8];
    const char *w = NULL;
    int r = split_listen(v, host, sizeof(host), port, sizeof(port), &w);
    if (r)
        snprintf(why, whylen, "%s", w);
    return r;
}

/* registry = memory | etcd://HOST:PORT[,HOST:PORT...]; each HOST:PORT is checked as listen
 * is, and the port must not be 0. */
static int set_registry(struct config *c, const char *v, const char **why)
{
    if (!strcmp(v, "memory")) {
        c->n_etcd = 0;
        return 0;
    }
    static const char scheme[] = "etcd://";
    if (strncmp(v, scheme, sizeof(scheme) - 1)) {
        *why = "expected memory or etcd://HOST:PORT[,HOST:PORT...]";
        return -EINVAL;
    }
    char hosts[ETCD_MAX_ENDPOINTS][300];
    size_t n = 0;
    for (const char *p = v + sizeof(scheme) - 1;; n++) {
        size_t len = strcspn(p, ",");
        char one[300], host[256], port[8];
        if (n == ETCD_MAX_ENDPOINTS) {
            *why = "at most 16 etcd endpoints";
            return -E2BIG;
        }
        if (len == 0 || len >= sizeof(one)) {
            *why = "each etcd endpoint is HOST:PORT or [IPv6]:PORT, separated by commas";
            return -EINVAL;
        }
        memcpy(one, p, len);
        one[len] = 0;
        int r = split_listen(one, host, sizeof(host), port, sizeof(port), why);
        if (r) {
            *why = "each etcd endpoint is HOST:PORT or [IPv6]:PORT, port 1..65535";
            return r;
        }
        if (!host[0] || atoi(port) == 0) {
            *why = "an etcd endpoint needs a host and a port 1..65535";
            return -EINVAL;
        }
        snprintf(hosts[n], sizeof(hosts[n]), "%s", one);
        if (!p[len])
            break;
        p += len + 1;
    }
    memcpy(c->etcd_hosts, hosts, sizeof(hosts));
    c->n_etcd = n + 1;
    return 0;
}

static int parse_registry(void *obj, const char *v, char *why, size_t whylen)
{
    const char *w = NULL;
    int r = set_registry(obj, v, &w);
    if (r && why)
        snprintf(why, whylen, "%s", w);
    return r;
}

static int check_prefix(const char *v, char *why, size_t whylen)
{
    if (v[0] != '/' || strlen(v) >= sizeof(((struct config *)0)->etcd_prefix)) {
        snprintf(why, whylen, "the prefix begins with / and has at most 199 characters");
        return -EINVAL;
    }
    for (const char *p = v; *p; p++)
        if (!isgraph((unsigned char)*p)) {
            snprintf(why, whylen, "the prefix is printable ASCII without spaces");
            return -EINVAL;
        }
    return 0;
}

/* agents: principals separated by commas (spaces around them ignored), each
 * 1..255 printable characters without a comma or space. */
static int check_agents(const char *v, char *why, size_t whylen)
{
    for (const char *p = v; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = 0;
        while (p[n] && p[n] != ',' && p[n] != ' ') {
            if (!isgraph((unsigned char)p[n])) {
                snprintf(why, whylen, "a principal of printable characters, without spaces");
                return -EINVAL;
            }
            n++;
        }
        if (n > 255) {
            snprintf(why, whylen, "a principal longer than 255 characters");
            return -EINVAL;
        }
        p += n;
    }
    return 0;
}

/* metrics_listen: "" (off) or HOST:PORT with a host: never every address by default. */
static int check_metrics_listen(const char *v, char *why, size_t whylen)
{
    if (!*v)
        return 0;
#ifdef RRPC_HAVE_MHD
    return rrpci_mhttp_check_listen(v, why, whylen) ? -EINVAL : 0;
#else
    snprintf(why, whylen, "this rrpcd was built without libmicrohttpd (install libmicrohttpd-dev "
             "and build with meson -Dmetrics_http=enabled)");
    return -EOPNOTSUPP;
#endif
}

/* allow = ACTION SERVICE PRINCIPAL: appended to the ACL. */
static int add_rule(void *obj, const char *v, char *why, size_t whylen)
{
    struct config *c = obj;
    struct acl_rule r;
    char extra[2];
    memset(&r, 0, sizeof(r));
    if (sscanf(v, "%15s %255s %255s %1s", r.action, r.service, r.principal, extra) != 3 ||
        (strcmp(r.action, "register") && strcmp(r.action, "lookup") && strcmp(r.action, "*"))) {
        snprintf(why, whylen, "expected ACTION SERVICE PRINCIPAL, ACTION register, lookup or *");
        return -EINVAL;
    }
    struct acl_rule *n = realloc(c->acl, (c->n_acl + 1) * sizeof(*n));
    if (!n) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    c->acl = n;
    c->acl[c->n_acl++] = r;
    return 0;
}

/* ticket_key_previous = PATH[,PATH...]: appended; empty: cleared. */
static int add_previous(void *obj, const char *v, char *why, size_t whylen)
{
    struct config *c = obj;
    if (!*v) {
        c->n_ticket_prev = 0;
        return 0;
    }
    char buf[4096], paths[RRPC_TICKET_MAX_KEYS - 1][sizeof(c->ticket_prev[0])];
    size_t n = c->n_ticket_prev;
    if (strlen(v) >= sizeof(buf)) {
        snprintf(why, whylen, "longer than %zu bytes", sizeof(buf) - 1);
        return -EINVAL;
    }
    strcpy(buf, v);
    memcpy(paths, c->ticket_prev, sizeof(paths));
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*t))
            t++;
        size_t len = strlen(t);
        while (len && isspace((unsigned char)t[len - 1]))
            t[--len] = 0;
        if (!len) {
            snprintf(why, whylen, "an empty path in the list");
            return -EINVAL;
        }
        if (n >= RRPC_TICKET_MAX_KEYS - 1) {
            snprintf(why, whylen, "at most 7 previous ticket keys (remove those whose overlap "
                     "is over)");
            return -E2BIG;
        }
        if (len >= sizeof(paths[0])) {
            snprintf(why, whylen, "a path longer than %zu bytes", sizeof(paths[0]) - 1);
            return -EINVAL;
        }
        memcpy(paths[n++], t, len + 1);
    }
    memcpy(c->ticket_prev, paths, sizeof(paths));
    c->n_ticket_prev = n;
    return 0;
}

/* ---- the table --------------------------------------------------------- */

static const char *const log_names[] = {"stderr", "syslog", NULL};
static const char *const level_names[] = {"err", "warning", "notice", "info", "debug", NULL};
static const int level_values[] = {LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG};

/* The one table of settings: type, default, range, meaning, member of struct config.  The
 * list in man/rrpcd.8.scd is made from it (man/gen-lists.py; a test compares them). */
#define S struct config
static const struct rrpci_conf_field fields[] = {
    {.name = "listen", RRPCI_CONF_TEXT(S, listen), .def_text = "127.0.0.1:7700",
     .check = check_listen,
     .doc = "HOST:PORT or [IPv6]:PORT of the TLS control port (HOST empty: every address); port "
            "0 picks a free one"},
    {.name = "cert", RRPCI_CONF_TEXT(S, cert), .def_doc = "none, required",
     .doc = "PEM certificate (chain) of rrpcd"},
    {.name = "key", RRPCI_CONF_TEXT(S, key), .def_doc = "the cert file",
     .doc = "PEM private key of that certificate"},
    {.name = "ca", RRPCI_CONF_TEXT(S, ca),
     .doc = "PEM CA bundle client certificates must chain to (mutual TLS); empty: no client "
            "certificates, tokens only"},
    {.name = "require_client_cert", RRPCI_CONF_BOOL(S, require_client_cert), .def = 0,
     .doc = "yes: refuse a TLS client without a certificate at the handshake (tokens are then "
            "not accepted); needs ca"},
    {.name = "token_file", RRPCI_CONF_TEXT(S, token_file),
     .doc = "file of \"PRINCIPAL TOKEN\" lines (pre-shared tokens of at least 8 characters); "
            "empty: no tokens; must not be readable by others (rrpcd warns)"},
    {.name = "allow", RRPCI_CONF_CUSTOM, .parse = add_rule, .flags = RRPCI_CONF_REPEAT,
     .def_doc = "none, deny everything",
     .doc = "an ACL rule \"ACTION SERVICE PRINCIPAL\": ACTION register, lookup or *, SERVICE "
            "and PRINCIPAL fnmatch(3) patterns; what no rule allows is denied"},
    {.name = "ticket_lifetime_ms", RRPCI_CONF_INT(S, ticket_lifetime_ms), .def = 30000,
     .min = 1000, .max = 3600000, .doc = "how long a connection ticket from a lookup is valid"},
    {.name = "ticket_key", RRPCI_CONF_TEXT(S, ticket_key), .def_doc = "a key made at start",
     .doc = "PEM Ed25519 private key tickets are signed with (openssl genpkey -algorithm "
            "ed25519); must not be readable by others; only brokers hold it, servers verify "
            "tickets with its public half, which they receive when they register and at every "
            "renewal; every rrpcd on one etcd prefix needs the same file, and registry = "
            "etcd://... requires it; without it (registry in memory only) rrpcd makes a key at "
            "each start"},
    {.name = "ticket_key_previous", RRPCI_CONF_CUSTOM, .parse = add_previous,
     .flags = RRPCI_CONF_REPEAT, .def_doc = "none",
     .doc = "PEM Ed25519 public keys (or a comma list of them; at most 7 in all) whose tickets "
            "servers still accept besides those of ticket_key (openssl pkey -in KEY -pubout; a "
            "private key file works too): the key being rotated out, or the one about to be "
            "rotated in; each key once, and not the current one; an empty value clears the "
            "list; servers drop a key at their next renewal after it left this list"},
    {.name = "lease_ms", RRPCI_CONF_INT(S, lease_ms), .def = 10000, .min = 300, .max = 3600000,
     .doc = "longest lease of a registration; servers renew at a third of it"},
    {.name = "idle_timeout_ms", RRPCI_CONF_INT(S, idle_timeout_ms), .def = 120000, .min = 1000,
     .max = 86400000, .doc = "an authenticated session silent this long is closed"},
    {.name = "auth_timeout_ms", RRPCI_CONF_INT(S, auth_timeout_ms), .def = 5000, .min = 100,
     .max = 600000,
     .doc = "a session must finish the TLS handshake and its hello within this long of its "
            "accept; bytes arriving do not extend it"},
    {.name = "auth_max_frame", RRPCI_CONF_INT(S, auth_max_frame), .def = 4096, .min = 512,
     .max = CTL_MAX_FRAME,
     .doc = "largest control frame a session may announce before its hello succeeds; a larger "
            "one closes the session"},
    {.name = "max_connections", RRPCI_CONF_INT(S, max_connections), .def = 4096, .min = 1,
     .max = 1000000,
     .doc = "sessions at once; the last eighth is kept for source addresses holding no "
            "session; at the cap a new session evicts one that has not authenticated yet (of "
            "the address holding the most, without a TLS handshake first, then the one "
            "silent longest; only from its own address or one holding at least as many), or "
            "is closed at accept when there is none"},
    {.name = "max_connections_per_source", RRPCI_CONF_INT(S, max_connections_per_source),
     .def = 1024, .min = 1, .max = 1000000,
     .doc = "sessions at once from one source address; more from that address are closed at "
            "accept"},
    {.name = "max_sessions_per_principal", RRPCI_CONF_INT(S, max_sessions_per_principal),
     .def = 1024, .min = 1, .max = 1000000,
     .doc = "authenticated sessions of one principal at once; a hello beyond is refused "
            "(limit) and the session closed"},
    {.name = "max_held_per_principal", RRPCI_CONF_INT(S, max_held_per_principal),
     .def = 16 << 20, .min = 2 << 20, .max = (int64_t)1 << 40,
     .doc = "bytes the sessions of one principal may make rrpcd hold in partly received "
            "requests and answers not sent yet; beyond, an answer is refused (busy) and a "
            "session whose request would grow past it is closed"},
    {.name = "max_held_total", RRPCI_CONF_INT(S, max_held_total), .def = 256 << 20,
     .min = 2 << 20, .max = (int64_t)1 << 40,
     .doc = "the same for every session together (anonymous ones included)"},
    {.name = "max_registers_per_s", RRPCI_CONF_INT(S, max_registers_per_s), .def = 20,
     .min = 1, .max = 100000,
     .doc = "registers one principal may send a second (bursts of twice that); more are "
            "refused (busy) naming the setting: each register writes etcd's history"},
    {.name = "max_registrations", RRPCI_CONF_INT(S, max_registrations), .def = 65536, .min = 1,
     .max = 1000000, .doc = "registrations at once, all services together"},
    {.name = "max_instances_per_service", RRPCI_CONF_INT(S, max_instances_per_service),
     .def = 64, .min = 1, .max = 65536,
     .doc = "registrations (server instances) of one service at once; more are refused "
            "(limit)"},
    {.name = "max_endpoints_per_registration",
     RRPCI_CONF_INT(S, max_endpoints_per_registration), .def = 64, .min = 1, .max = 64,
     .doc = "endpoints one registration may have; more are refused (limit)"},
    {.name = "agents", RRPCI_CONF_TEXT(S, agents), .def_doc = "none",
     .check = check_agents,
     .doc = "principals (comma-separated) of the rrpc-agents whose ESP pairs reports rrpcd "
            "takes: a report counts only over a session with such a certificate naming the "
            "reported address as an IP SAN; lookups of a service registered with require_esp "
            "answer only instances whose host has a pair both agents report with the client's "
            "host; empty: no reports, and such services answer no client"},
    {.name = "max_agents", RRPCI_CONF_INT(S, max_agents), .def = 4096, .min = 1, .max = 65536,
     .doc = "host addresses whose agent's pairs report rrpcd holds at once; a report from one "
            "more is refused (limit)"},
    {.name = "log", RRPCI_CONF_ENUM(S, syslog), .def = 0, .names = log_names,
     .doc = "where logs go (syslog: facility daemon)"},
    {.name = "log_level", RRPCI_CONF_ENUM(S, log_level), .def = LOG_INFO, .names = level_names,
     .values = level_values, .doc = "the least important messages logged"},
    {.name = "registry", RRPCI_CONF_CUSTOM, .parse = parse_registry, .def_text = "memory",
     .doc = "memory: the registry in this rrpcd's memory; etcd://HOST:PORT[,HOST:PORT...] (at "
            "most 16): the registry on etcd, shared by every rrpcd with the same etcd and "
            "prefix"},
    {.name = "etcd_prefix", RRPCI_CONF_TEXT(S, etcd_prefix), .def_text = "/rrpc/",
     .check = check_prefix,
     .doc = "key prefix of the registry on etcd (begins with /, at most 199 printable "
            "characters)"},
    {.name = "etcd_compact_interval_s", RRPCI_CONF_INT(S, etcd_compact_interval_s),
     .def = 300, .min = 0, .max = 86400,
     .doc = "with the registry on etcd: every this many seconds rrpcd compacts etcd's history "
            "up to the revision it saw one interval before (etcd compacts its whole keyspace, "
            "not a prefix; with several rrpcd each does, which is harmless); 0: rrpcd does "
            "not, and etcd's own --auto-compaction-retention must be on, or register/unregister "
            "churn grows its database until NOSPACE"},
    {.name = "etcd_cert", RRPCI_CONF_TEXT(S, etcd_cert),
     .doc = "PEM client certificate rrpcd presents to etcd (then https)"},
    {.name = "etcd_key", RRPCI_CONF_TEXT(S, etcd_key), .def_doc = "the etcd_cert file",
     .doc = "PEM private key of etcd_cert"},
    {.name = "etcd_ca", RRPCI_CONF_TEXT(S, etcd_ca),
     .doc = "PEM CA bundle etcd's server certificate must chain to (then https)"},
    {.name = "etcd_user", RRPCI_CONF_TEXT(S, etcd_user),
     .doc = "etcd user: rrpcd asks etcd for a token with it and etcd_password_file at its first "
            "request, and again when etcd says the token is no longer valid; the user's role "
            "needs read and write on etcd_prefix; set both or neither"},
    {.name = "etcd_password_file", RRPCI_CONF_TEXT(S, etcd_password_file),
     .doc = "file whose first line is etcd_user's password; must not be readable by others"},
    {.name = "port_file", RRPCI_CONF_TEXT(S, port_file),
     .doc = "once listening, write the port to this file (for scripts and tests)"},
    {.name = "metrics_listen", RRPCI_CONF_TEXT(S, metrics_listen), .def_doc = "none, off",
     .check = check_metrics_listen,
     .doc = "HOST:PORT (or [IPv6]:PORT) to serve GET /metrics on over HTTP: rrpcd's registry, "
            "sessions, requests by operation and result, tickets issued, TLS handshake failures "
            "and etcd state as Prometheus text (docs/metrics.md lists them); the host is "
            "required, port 0 picks a free one; other paths get 404, other methods 405; an "
            "address in use stops the start, naming it"},
    {.name = "metrics_port_file", RRPCI_CONF_TEXT(S, metrics_port_file),
     .doc = "once serving metrics, write their port to this file; needs metrics_listen"},
    {.name = "metrics_max_connections", RRPCI_CONF_INT(S, metrics_max_connections), .def = 8,
     .min = 1, .max = 1024,
     .doc = "HTTP connections to metrics_listen held at once; at the limit a new one takes "
            "the place of the oldest without a whole request head"},
    {.name = "metrics_timeout_s", RRPCI_CONF_INT(S, metrics_timeout_s), .def = 10, .min = 1,
     .max = 3600, .doc = "an HTTP connection to metrics_listen without progress this long is "
                         "closed"},
};
#undef S

const struct rrpci_conf_table rrpcd_settings = {
    .name = "rrpcd",
    .prefix = NULL,
    .fields = fields,
    .nfields = RRPCI_CONF_NFIELDS(fields),
    .size = sizeof(struct config),
};

void config_print_table(FILE *fp, enum rrpci_conf_style style)
{
    if (style == RRPCI_CONF_HELP)
        fprintf(fp, "Settings (config file lines \"name = value\", or -s name=value):\n");
    rrpci_conf_print(&rrpcd_settings, fp, style);
}

void config_init(struct config *c)
{
    char why[300];
    memset(c, 0, sizeof(*c));
    if (rrpci_conf_check_table(&rrpcd_settings, why, sizeof(why)) ||
        rrpci_conf_defaults(&rrpcd_settings, c)) {
        /* A mistake in the table above, which every run of rrpcd meets. */
        fprintf(errf(), "rrpcd: internal error: the settings table: %s\n", why);
        abort();
    }
}

int config_set(struct config *c, const char *k, const char *v, const char *where)
{
    char why[600];
    const struct rrpci_conf_field *f = rrpci_conf_find(&rrpcd_settings, k);
    if (!f) {
        const struct rrpci_conf_table *t = &rrpcd_settings;
        const char *near = rrpci_conf_suggest(&t, 1, k);
        fprintf(errf(), "rrpcd: %s: unknown setting '%s' (%s%s%srrpcd --help lists them)\n",
                where, k, near ? "did you mean '" : "", near ? near : "", near ? "'? " : "");
        return -ENOENT;
    }
    int r = rrpci_conf_set_field(f, c, v, why, sizeof(why));
    if (r)
        fprintf(errf(), "rrpcd: %s: bad value '%s' for %s: %s\n", where, v, f->name, why);
    return r;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* ---- the file, through libinih ----------------------------------------- */

struct ini_state {
    struct config *c;
    FILE *f;
    const char *path;
    int lineno;     /* of the line inih works on */
    int err;        /* the first error (reported), then nothing more is read */
    bool too_long;  /* ... a line longer than inih's buffer */
    int max_line;   /* inih's buffer, as it says when it reads */
};

/*
 * inih's line reader, where this file's format differs from inih's defaults:
 * leading blanks are dropped (inih would join an indented line to the value
 * above it); '#' or ';' at the start of a line or after a blank begins a
 * comment (Debian's libinih strips only ';' after a value: its
 * INI_INLINE_COMMENT_PREFIXES is fixed when it is built); a line longer than
 * inih's buffer is an error rather than cut, unless the cut falls in a
 * comment.
 */
static char *ini_read_line(char *str, int num, void *stream)
{
    struct ini_state *st = stream;
    if (st->err || !fgets(str, num, st->f))
        return NULL;
    st->lineno++;
    st->max_line = num - 1;
    size_t n = strlen(str);
    bool cut = false;
    if (n && str[n - 1] != '\n') {
        int ch = fgetc(st->f);
        cut = ch != EOF && ch != '\n';
        if (cut)
            ungetc(ch, st->f);
    }
    size_t lead = strspn(str, " \t");
    memmove(str, str + lead, n - lead + 1);
    bool comment = false;
    for (char *p = str; *p && !comment; p++) {
        if ((*p == '#' || *p == ';') && (p == str || p[-1] == ' ' || p[-1] == '\t')) {
            p[0] = '\n';
            p[1] = 0;
            comment = true;
        }
    }
    if (cut && !comment) {
        st->too_long = true;
        st->err = -EINVAL;
        return NULL;
    }
    for (int ch = 0; cut && ch != EOF && ch != '\n';)
        ch = fgetc(st->f); /* the rest of the comment */
    return str;
}

static int ini_setting(void *user, const char *section, const char *name, const char *value)
{
    struct ini_state *st = user;
    char where[1100];
    if (st->err)
        return 1;
    snprintf(where, sizeof(where), "%s:%d", st->path, st->lineno);
    if (section[0]) {
        fprintf(errf(), "rrpcd: %s: [%s]: rrpcd's file has no sections (remove the line "
                "\"[%s]\")\n", where, section, section);
        st->err = -EINVAL;
        return 0;
    }
    st->err = config_set(st->c, name, value, where);
    return st->err == 0;
}

int config_load_file(struct config *c, const char *path)
{
    struct ini_state st = {.c = c, .path = path};
    st.f = fopen(path, "r");
    if (!st.f) {
        int r = -errno;
        fprintf(errf(), "rrpcd: cannot open the config file %s: %s\n", path, strerror(-r));
        return r;
    }
    int line = ini_parse_stream(ini_read_line, &st, ini_setting, &st);
    fclose(st.f);
    if (st.too_long) {
        fprintf(errf(), "rrpcd: %s:%d: the line is longer than %d characters (libinih's limit; "
                "allow and ticket_key_previous can be split over several lines, -s NAME=VALUE "
                "has no such limit)\n", path, st.lineno, st.max_line);
        return -EINVAL;
    }
    if (st.err)
        return st.err;
    if (line == -2) {
        fprintf(errf(), "rrpcd: %s: out of memory\n", path);
        return -ENOMEM;
    }
    if (line) {
        fprintf(errf(), "rrpcd: %s:%d: expected \"name = value\"\n", path, line);
        return -EINVAL;
    }
    return 0;
}

static int load_tokens(struct config *c)
{
    FILE *f = fopen(c->token_file, "r");
    if (!f) {
        int r = -errno;
        fprintf(errf(), "rrpcd: cannot open the token file %s: %s\n", c->token_file,
                strerror(-r));
        return r;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 007))
        fprintf(errf(), "rrpcd: warning: the token file %s is readable by others "
                "(chmod 600 it)\n", c->token_file);
    char line[1024];
    int lineno = 0, r = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char principal[256], tok[512], extra[2];
        if (sscanf(s, "%255s %511s %1s", principal, tok, extra) != 2 || strlen(tok) < 8) {
            fprintf(errf(), "rrpcd: %s:%d: expected \"PRINCIPAL TOKEN\" (token >= 8 chars)\n",
                    c->token_file, lineno);
            r = -EINVAL;
            break;
        }
        struct token *n = realloc(c->tokens, (c->n_tokens + 1) * sizeof(*n));
        if (!n) {
            r = -ENOMEM;
            break;
        }
        c->tokens = n;
        snprintf(n[c->n_tokens].principal, sizeof(n->principal), "%s", principal);
        SHA256((const unsigned char *)tok, strlen(tok), n[c->n_tokens].digest);
        OPENSSL_cleanse(tok, sizeof(tok));
        c->n_tokens++;
    }
    OPENSSL_cleanse(line, sizeof(line));
    fclose(f);
    return r;
}

/* The listen address resolves as the start will resolve it (the port is not bound here: a
 * running rrpcd may hold it). */
static int check_listen_host(const struct config *c)
{
    char host[256], port[8];
    const char *why = NULL;
    if (split_listen(c->listen, host, sizeof(host), port, sizeof(port), &why))
        return -EINVAL; /* config_set checked it */
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res;
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (g) {
        fprintf(errf(), "rrpcd: listen = %s: %s (give an address of this host, or a name it "
                "resolves)\n", c->listen, gai_strerror(g));
        return -EINVAL;
    }
    freeaddrinfo(res);
    return 0;
}

/* metrics_listen's host resolves as the start will resolve it (not bound here either). */
static int check_metrics_host(const struct config *c)
{
    char host[300];
    if (!c->metrics_listen[0])
        return 0;
    const char *v = c->metrics_listen, *end = v[0] == '[' ? strchr(v, ']') : strrchr(v, ':');
    size_t n = (size_t)(end - v) - (v[0] == '[');
    memcpy(host, v + (v[0] == '['), n); /* set_metrics_listen checked the form */
    host[n] = 0;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE };
    struct addrinfo *res;
    int g = getaddrinfo(host, NULL, &hints, &res);
    if (g) {
        fprintf(errf(), "rrpcd: metrics_listen = %s: %s (give an address of this host, or a "
                "name it resolves)\n", v, gai_strerror(g));
        return -EINVAL;
    }
    freeaddrinfo(res);
    return 0;
}

/* Prints OpenSSL's reasons for the last failure (and clears them). */
static void print_ssl_errors(void)
{
    unsigned long e;
    char buf[256];
    while ((e = ERR_get_error()) != 0) {
        ERR_error_string_n(e, buf, sizeof(buf));
        fprintf(errf(), "rrpcd:   %s\n", buf);
    }
}

static int check_readable(const char *what, const char *path, const char *hint)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int r = -errno;
        fprintf(errf(), "rrpcd: %s = %s: cannot open it: %s (%s)\n", what, path, strerror(-r),
                hint);
        return r;
    }
    fclose(f);
    return 0;
}

/* Loads the certificate, its key and the CA bundle the way the start does (server.c
 * tls_setup), so that --check and the start refuse the same files. */
static int check_tls(const struct config *c)
{
    int r;
    if ((r = check_readable("cert", c->cert, "the broker's PEM certificate; "
                            "rrpc-make-dev-certs makes a development one")) ||
        (r = check_readable("key", c->key, "the PEM private key of 'cert'")) ||
        (c->ca[0] && (r = check_readable("ca", c->ca, "the PEM CA bundle client certificates "
                                         "chain to; empty: tokens only"))))
        return r;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return -ENOMEM;
    ERR_clear_error();
    r = -EINVAL;
    if (SSL_CTX_use_certificate_chain_file(ctx, c->cert) != 1) {
        fprintf(errf(), "rrpcd: cert = %s: not a PEM certificate (chain) OpenSSL can load "
                "(a file that begins with -----BEGIN CERTIFICATE-----):\n", c->cert);
        print_ssl_errors();
    } else if (SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
            fprintf(errf(), "rrpcd: key = %s does not belong to cert = %s (use the key the "
                    "certificate was made for):\n", c->key, c->cert);
        else
            fprintf(errf(), "rrpcd: key = %s: not a PEM private key OpenSSL can load (an "
                    "unencrypted key: -----BEGIN PRIVATE KEY-----):\n", c->key);
        print_ssl_errors();
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        fprintf(errf(), "rrpcd: key = %s does not belong to cert = %s (use the key the "
                "certificate was made for):\n", c->key, c->cert);
        print_ssl_errors();
    } else if (c->ca[0] && SSL_CTX_load_verify_locations(ctx, c->ca, NULL) != 1) {
        fprintf(errf(), "rrpcd: ca = %s: no PEM certificate OpenSSL can load in it:\n", c->ca);
        print_ssl_errors();
    } else {
        r = 0;
    }
    SSL_CTX_free(ctx);
    return r;
}

/* The etcd settings: only with registry = etcd://..., and their files load as a start would
 * load them. */
static int check_etcd(struct config *c)
{
    const char *stray = c->etcd_cert[0] ? "etcd_cert" : c->etcd_key[0] ? "etcd_key"
                        : c->etcd_ca[0] ? "etcd_ca" : c->etcd_user[0] ? "etcd_user"
                        : c->etcd_password_file[0] ? "etcd_password_file"
                        : strcmp(c->etcd_prefix, "/rrpc/") ? "etcd_prefix" : NULL;
    if (!c->n_etcd) {
        if (!stray)
            return 0;
        fprintf(errf(), "rrpcd: %s is set but registry is not etcd://... (set registry = "
                "etcd://HOST:PORT, or remove %s)\n", stray, stray);
        return -EINVAL;
    }
    if (c->etcd_key[0] && !c->etcd_cert[0]) {
        fprintf(errf(), "rrpcd: etcd_key is set without etcd_cert (set both, or neither)\n");
        return -EINVAL;
    }
    if (!!c->etcd_user[0] != !!c->etcd_password_file[0]) {
        fprintf(errf(), "rrpcd: etcd_user and etcd_password_file go together (set both, or "
                "neither)\n");
        return -EINVAL;
    }
    if (c->etcd_cert[0] && !c->etcd_key[0])
        strcpy(c->etcd_key, c->etcd_cert);
    int r;
    if ((c->etcd_cert[0] &&
         ((r = check_readable("etcd_cert", c->etcd_cert, "rrpcd's PEM client certificate "
                              "for etcd")) ||
          (r = check_readable("etcd_key", c->etcd_key, "the PEM private key of etcd_cert")))) ||
        (c->etcd_ca[0] && (r = check_readable("etcd_ca", c->etcd_ca, "the PEM CA bundle "
                                              "etcd's certificate chains to"))))
        return r;
    if (c->etcd_cert[0] || c->etcd_ca[0]) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx)
            return -ENOMEM;
        ERR_clear_error();
        r = -EINVAL;
        if (c->etcd_cert[0] && SSL_CTX_use_certificate_chain_file(ctx, c->etcd_cert) != 1)
            fprintf(errf(), "rrpcd: etcd_cert = %s: not a PEM certificate (chain) OpenSSL "
                    "can load:\n", c->etcd_cert);
        else if (c->etcd_cert[0] &&
                 (SSL_CTX_use_PrivateKey_file(ctx, c->etcd_key, SSL_FILETYPE_PEM) != 1 ||
                  SSL_CTX_check_private_key(ctx) != 1))
            fprintf(errf(), "rrpcd: etcd_key = %s: not a PEM private key of etcd_cert = %s "
                    "(use the unencrypted key the certificate was made for):\n",
                    c->etcd_key, c->etcd_cert);
        else if (c->etcd_ca[0] && SSL_CTX_load_verify_locations(ctx, c->etcd_ca, NULL) != 1)
            fprintf(errf(), "rrpcd: etcd_ca = %s: no PEM certificate OpenSSL can load in "
                    "it:\n", c->etcd_ca);
        else
            r = 0;
        print_ssl_errors();
        SSL_CTX_free(ctx);
        if (r)
            return r;
    }
    if (c->etcd_password_file[0]) {
        FILE *f = fopen(c->etcd_password_file, "r");
        if (!f) {
            r = -errno;
            fprintf(errf(), "rrpcd: etcd_password_file = %s: cannot open it: %s\n",
                    c->etcd_password_file, strerror(-r));
            return r;
        }
        struct stat st;
        char line[512];
        bool got = fgets(line, sizeof(line), f) && trim(line)[0];
        if (fstat(fileno(f), &st) == 0 && (st.st_mode & 007))
            fprintf(errf(), "rrpcd: warning: etcd_password_file %s is readable by others "
                    "(chmod 600 it)\n", c->etcd_password_file);
        OPENSSL_cleanse(line, sizeof(line));
        fclose(f);
        if (!got) {
            fprintf(errf(), "rrpcd: etcd_password_file = %s: its first line is empty (write "
                    "the password of etcd_user on it)\n", c->etcd_password_file);
            return -EINVAL;
        }
    }
    return 0;
}

int config_etcd_password(const struct config *c, char *buf, size_t len)
{
    FILE *f = fopen(c->etcd_password_file, "r");
    if (!f)
        return -errno;
    char line[512];
    bool got = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    int r = got && trim(line)[0] && strlen(trim(line)) < len ? 0 : -EINVAL;
    if (!r)
        snprintf(buf, len, "%s", trim(line));
    OPENSSL_cleanse(line, sizeof(line));
    return r;
}

/* Loads ticket_key (or makes one) and ticket_key_previous into c->signer and c->keys. */
static int load_ticket_keys(struct config *c)
{
    char why[600];
    int r;
    if (!c->ticket_key[0]) {
        if (c->n_etcd) {
            fprintf(errf(), "rrpcd: the registry on etcd needs 'ticket_key': every rrpcd on "
                    "the prefix must sign tickets with the same Ed25519 key (make one with: "
                    "openssl genpkey -algorithm ed25519 -out ticket.pem)\n");
            return -EINVAL;
        }
        if (c->n_ticket_prev) {
            fprintf(errf(), "rrpcd: 'ticket_key_previous' is set without 'ticket_key'\n");
            return -EINVAL;
        }
        if ((r = rrpc_ticket_key_new(NULL, &c->signer)) != 0) {
            fprintf(errf(), "rrpcd: cannot make a ticket key: %s\n", strerror(-r));
            return r;
        }
        c->signer_ephemeral = true;
    } else {
        struct stat st;
        if (stat(c->ticket_key, &st) == 0 && (st.st_mode & 077)) {
            fprintf(errf(), "rrpcd: ticket_key = %s is readable by its group or others "
                    "(mode %03o): chmod 600 it; whoever reads it can sign tickets\n",
                    c->ticket_key, (unsigned)(st.st_mode & 0777));
            return -EACCES;
        }
        if ((r = rrpc_ticket_key_load(c->ticket_key, &c->signer, why, sizeof(why))) != 0) {
            fprintf(errf(), "rrpcd: ticket_key: %s\n", why);
            return r;
        }
    }
    rrpc_ticket_key_public(c->signer, c->keys[0]);
    c->n_keys = 1;
    for (size_t i = 0; i < c->n_ticket_prev; i++) {
        uint8_t *pub = c->keys[c->n_keys];
        if ((r = rrpc_ticket_public_key_load(c->ticket_prev[i], pub, why, sizeof(why))) != 0) {
            fprintf(errf(), "rrpcd: ticket_key_previous: %s\n", why);
            return r;
        }
        for (size_t j = 0; j < c->n_keys; j++) {
            if (!memcmp(c->keys[j], pub, RRPC_TICKET_KEY_LEN)) {
                fprintf(errf(), "rrpcd: ticket_key_previous = %s is %s: list each key once, "
                        "and the current one only as ticket_key\n", c->ticket_prev[i],
                        j ? "listed twice" : "the current ticket_key");
                return -EINVAL;
            }
        }
        c->n_keys++;
    }
    return 0;
}

int config_finish(struct config *c)
{
    if (!c->cert[0]) {
        fprintf(errf(), "rrpcd: 'cert' is not set (the broker's TLS certificate)\n");
        return -EINVAL;
    }
    if (!c->key[0])
        strcpy(c->key, c->cert);
    if (c->require_client_cert && !c->ca[0]) {
        fprintf(errf(), "rrpcd: require_client_cert = yes needs 'ca'\n");
        return -EINVAL;
    }
    if (c->metrics_port_file[0] && !c->metrics_listen[0]) {
        fprintf(errf(), "rrpcd: metrics_port_file is set but metrics_listen is not (set "
                "metrics_listen = HOST:PORT, or remove metrics_port_file)\n");
        return -EINVAL;
    }
    int r = check_listen_host(c);
    if (!r)
        r = check_metrics_host(c);
    if (!r)
        r = check_tls(c);
    if (!r)
        r = check_etcd(c);
    if (!r)
        r = load_ticket_keys(c);
    if (r)
        return r;
    if (c->token_file[0])
        return load_tokens(c);
    if (!c->ca[0])
        fprintf(errf(), "rrpcd: warning: neither 'ca' nor 'token_file' is set: no client "
                "can authenticate\n");
    return 0;
}

void config_free(struct config *c)
{
    rrpc_ticket_key_free(c->signer);
    c->signer = NULL;
    free(c->acl);
    if (c->tokens)
        OPENSSL_cleanse(c->tokens, c->n_tokens * sizeof(*c->tokens));
    free(c->tokens);
    c->acl = NULL;
    c->tokens = NULL;
}

/* The settings a reload does not change (listen, registry, metrics, log destination):
 * @nc takes @cur's; their names, when @nc had others, in @out ("" when none). */
void config_keep_restart_only(const struct config *cur, struct config *nc, char *out,
                              size_t outlen)
{
    size_t o = 0;
    out[0] = 0;
#define KEEP(cond, name, copy)                                                                \
    do {                                                                                      \
        if (cond) {                                                                           \
            int w = snprintf(out + o, outlen - o, "%s%s", o ? ", " : "", name);               \
            if (w > 0 && (size_t)w < outlen - o)                                              \
                o += (size_t)w;                                                               \
        }                                                                                     \
        copy;                                                                                 \
    } while (0)
#define KEEP_STR(f) KEEP(strcmp(cur->f, nc->f), #f, memcpy(nc->f, cur->f, sizeof(nc->f)))
#define KEEP_VAL(f) KEEP(cur->f != nc->f, #f, nc->f = cur->f)
    KEEP_STR(listen);
    KEEP_STR(port_file);
    KEEP(cur->syslog != nc->syslog, "log", nc->syslog = cur->syslog);
    KEEP(cur->n_etcd != nc->n_etcd || memcmp(cur->etcd_hosts, nc->etcd_hosts,
                                             sizeof(cur->etcd_hosts)),
         "registry",
         (nc->n_etcd = cur->n_etcd, memcpy(nc->etcd_hosts, cur->etcd_hosts,
                                           sizeof(nc->etcd_hosts))));
    KEEP_STR(etcd_prefix);
    KEEP_VAL(etcd_compact_interval_s);
    KEEP_STR(etcd_cert);
    KEEP_STR(etcd_key);
    KEEP_STR(etcd_ca);
    KEEP_STR(etcd_user);
    KEEP_STR(etcd_password_file);
    KEEP_STR(metrics_listen);
    KEEP_STR(metrics_port_file);
    KEEP_VAL(metrics_max_connections);
    KEEP_VAL(metrics_timeout_s);
#undef KEEP_VAL
#undef KEEP_STR
#undef KEEP
}

/* Field by field: the etcd and metrics threads read the settings @cur keeps. */
void config_apply(struct config *cur, struct config *nc)
{
#define MOVE(f) memcpy(&cur->f, &nc->f, sizeof(cur->f))
    MOVE(cert);
    MOVE(key);
    MOVE(ca);
    MOVE(token_file);
    MOVE(require_client_cert);
    MOVE(ticket_lifetime_ms);
    MOVE(lease_ms);
    MOVE(idle_timeout_ms);
    MOVE(auth_timeout_ms);
    MOVE(auth_max_frame);
    MOVE(max_connections);
    MOVE(max_connections_per_source);
    MOVE(max_registrations);
    MOVE(max_sessions_per_principal);
    MOVE(max_registers_per_s);
    MOVE(max_held_per_principal);
    MOVE(max_held_total);
    MOVE(max_instances_per_service);
    MOVE(max_endpoints_per_registration);
    MOVE(agents);
    MOVE(max_agents);
    MOVE(log_level);
    free(cur->acl);
    MOVE(acl);
    MOVE(n_acl);
    nc->acl = NULL;
    if (cur->tokens)
        OPENSSL_cleanse(cur->tokens, cur->n_tokens * sizeof(*cur->tokens));
    free(cur->tokens);
    MOVE(tokens);
    MOVE(n_tokens);
    nc->tokens = NULL;
    /* Without ticket_key before and after, the key made at start stays: tickets
     * issued before the reload keep working. */
    if (!(cur->signer_ephemeral && nc->signer_ephemeral)) {
        rrpc_ticket_key_free(cur->signer);
        MOVE(signer);
        nc->signer = NULL;
        MOVE(signer_ephemeral);
        MOVE(ticket_key);
        MOVE(ticket_prev);
        MOVE(n_ticket_prev);
        MOVE(keys);
        MOVE(n_keys);
    }
#undef MOVE
    config_free(nc);
}

bool acl_allows(const struct config *c, const char *action, const char *service,
                const char *principal)
{
    for (size_t i = 0; i < c->n_acl; i++) {
        const struct acl_rule *r = &c->acl[i];
        if ((!strcmp(r->action, "*") || !strcmp(r->action, action)) &&
            fnmatch(r->service, service, 0) == 0 && fnmatch(r->principal, principal, 0) == 0)
            return true;
    }
    return false;
}

bool agent_allowed(const struct config *c, const char *principal)
{
    size_t pl = strlen(principal);
    for (const char *p = c->agents; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n && n == pl && !memcmp(p, principal, n))
            return true;
        p += n;
    }
    return false;
}

const char *token_principal(const struct config *c, const char *token, size_t len)
{
    uint8_t d[32];
    const char *found = NULL;
    SHA256((const unsigned char *)token, len, d);
    /* Every entry is compared, so the time taken does not say which matched. */
    for (size_t i = 0; i < c->n_tokens; i++)
        if (CRYPTO_memcmp(d, c->tokens[i].digest, sizeof(d)) == 0)
            found = c->tokens[i].principal;
    return found;
}

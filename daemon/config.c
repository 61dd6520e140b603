/* SPDX-License-Identifier: MIT */
/* rrpcd's settings: one table (name, default, meaning), a "key = value" file. */
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

#include "rrpcd.h"
#ifdef RRPC_HAVE_MHD
#include "util/metrics_http.h"
#endif

struct setting {
    const char *name;
    const char *def;
    const char *doc;
};

/* The one table of settings; docs/broker.md repeats it. */
static const struct setting settings[] = {
    { "listen", "127.0.0.1:7700",
      "HOST:PORT (or [IPv6]:PORT) of the TLS control port; port 0 picks a free one" },
    { "cert", "", "PEM certificate (chain) of rrpcd; required" },
    { "key", "", "PEM private key of that certificate; default: the cert file" },
    { "ca", "", "PEM CA bundle client certificates must chain to (mutual TLS); "
                "empty: no client certificates, tokens only" },
    { "require_client_cert", "no",
      "yes: refuse a TLS client without a certificate at the handshake (no tokens)" },
    { "token_file", "", "file of \"PRINCIPAL TOKEN\" lines (pre-shared tokens); "
                        "empty: no tokens; must not be readable by others" },
    { "allow", "", "an ACL rule, repeatable: \"ACTION SERVICE PRINCIPAL\", ACTION register, "
                   "lookup or *, SERVICE and PRINCIPAL fnmatch patterns; no rule: deny" },
    { "ticket_lifetime_ms", "30000", "how long a connection ticket from a lookup is valid" },
    { "ticket_key", "", "PEM Ed25519 private key tickets are signed with (openssl genpkey "
                        "-algorithm ed25519); every rrpcd on one etcd prefix needs the same; "
                        "empty: a key made at start (registry = memory only); must not be "
                        "readable by others" },
    { "ticket_key_previous", "", "PEM Ed25519 public keys (or comma lists of them; repeatable, "
                                 "at most 7) whose tickets servers accept too: the key being "
                                 "rotated out, or the one about to be rotated in; an empty "
                                 "value clears the list" },
    { "lease_ms", "10000", "longest lease of a registration; servers renew at a third of it" },
    { "idle_timeout_ms", "120000", "an authenticated session silent this long is closed" },
    { "auth_timeout_ms", "5000",
      "a session must finish the TLS handshake and hello within this long of its accept; "
      "bytes arriving do not extend it" },
    { "auth_max_frame", "4096",
      "largest control frame a session may announce before hello succeeds (512..1048576); "
      "a larger one is refused and the session closed" },
    { "max_connections", "4096",
      "sessions at once; at the cap a new one evicts the oldest session that has not "
      "authenticated yet, or is closed at accept when every session has" },
    { "max_connections_per_source", "1024", "sessions at once from one source address; "
      "more from that address are closed at accept" },
    { "max_registrations", "65536", "registrations at once, all services together" },
    { "max_instances_per_service", "64",
      "registrations (server instances) of one service at once; more are refused" },
    { "max_endpoints_per_registration", "64", "endpoints one registration may have (1..64)" },
    { "log", "stderr", "where logs go: stderr or syslog (facility daemon)" },
    { "log_level", "info", "err, warning, notice, info or debug" },
    { "registry", "memory",
      "memory: the registry in this rrpcd's memory; etcd://HOST:PORT[,HOST:PORT...] "
      "(at most 16): the registry on etcd, shared by every rrpcd on the same prefix" },
    { "etcd_prefix", "/rrpc/", "key prefix of the registry on etcd (begins with /, at most "
                               "199 printable characters)" },
    { "etcd_cert", "", "PEM client certificate rrpcd presents to etcd (then https)" },
    { "etcd_key", "", "PEM private key of etcd_cert; default: the etcd_cert file" },
    { "etcd_ca", "", "PEM CA bundle etcd's server certificate must chain to (then https)" },
    { "etcd_user", "", "etcd user (etcd's own authentication: a token asked for with this "
                       "user and password); needs etcd_password_file" },
    { "etcd_password_file", "", "file whose first line is etcd_user's password; must not be "
                                "readable by others" },
    { "port_file", "", "once listening, write the port to this file (for scripts and tests)" },
    { "metrics_listen", "", "HOST:PORT (or [IPv6]:PORT) to serve GET /metrics on over HTTP "
      "(Prometheus text; port 0 picks a free one); empty: off" },
    { "metrics_port_file", "", "once serving metrics, write their port to this file" },
    { "metrics_max_connections", "8",
      "HTTP connections to metrics_listen held at once (1..1024); more wait in the backlog" },
    { "metrics_timeout_s", "10",
      "an HTTP connection to metrics_listen without progress this long is closed (1..3600)" },
};

void config_print_table(void *fpv)
{
    FILE *fp = fpv;
    fprintf(fp, "Settings (config file lines \"name = value\", or -s name=value):\n");
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        fprintf(fp, "  %-26s default \"%s\"\n      %s\n", settings[i].name, settings[i].def,
                settings[i].doc);
}

static int parse_ms(const char *v, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < min || x > max)
        return -EINVAL;
    *out = x;
    return 0;
}

static int parse_int(const char *v, int min, int max, int *out)
{
    int64_t x;
    int r = parse_ms(v, min, max, &x);
    if (!r)
        *out = (int)x;
    return r;
}

static int parse_bool(const char *v, bool *out)
{
    if (!strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcmp(v, "1"))
        *out = true;
    else if (!strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcmp(v, "0"))
        *out = false;
    else
        return -EINVAL;
    return 0;
}

static int set_path(char *dst, size_t len, const char *v)
{
    if (strlen(v) >= len)
        return -ENAMETOOLONG;
    strcpy(dst, v);
    return 0;
}

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

static int check_listen(const char *v, const char **why)
{
    char host[256], port[8];
    return split_listen(v, host, sizeof(host), port, sizeof(port), why);
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
        snprintf(c->etcd_hosts[n], sizeof(c->etcd_hosts[n]), "%s", one);
        if (!p[len])
            break;
        p += len + 1;
    }
    c->n_etcd = n + 1;
    return 0;
}

static int set_prefix(struct config *c, const char *v, const char **why)
{
    if (v[0] != '/' || strlen(v) >= sizeof(c->etcd_prefix)) {
        *why = "the prefix begins with / and has at most 199 characters";
        return -EINVAL;
    }
    for (const char *p = v; *p; p++)
        if (!isgraph((unsigned char)*p)) {
            *why = "the prefix is printable ASCII without spaces";
            return -EINVAL;
        }
    strcpy(c->etcd_prefix, v);
    return 0;
}

/* metrics_listen: "" (off) or HOST:PORT with a host: never every address by default. */
static int set_metrics_listen(struct config *c, const char *v, const char **why)
{
    static char buf[400];
    if (!*v) {
        c->metrics_listen[0] = 0;
        return 0;
    }
#ifdef RRPC_HAVE_MHD
    if (rrpci_mhttp_check_listen(v, buf, sizeof(buf))) {
        *why = buf;
        return -EINVAL;
    }
    return set_path(c->metrics_listen, sizeof(c->metrics_listen), v);
#else
    (void)c, (void)buf;
    *why = "this rrpcd was built without libmicrohttpd (install libmicrohttpd-dev and build "
           "with meson -Dmetrics_http=enabled)";
    return -EOPNOTSUPP;
#endif
}

static int add_rule(struct config *c, const char *v)
{
    struct acl_rule r;
    char extra[2];
    memset(&r, 0, sizeof(r));
    if (sscanf(v, "%15s %255s %255s %1s", r.action, r.service, r.principal, extra) != 3)
        return -EINVAL;
    if (strcmp(r.action, "register") && strcmp(r.action, "lookup") && strcmp(r.action, "*"))
        return -EINVAL;
    struct acl_rule *n = realloc(c->acl, (c->n_acl + 1) * sizeof(*n));
    if (!n)
        return -ENOMEM;
    c->acl = n;
    c->acl[c->n_acl++] = r;
    return 0;
}

void config_init(struct config *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        if (settings[i].def[0])
            config_set(c, settings[i].name, settings[i].def, "default");
}

/* ticket_key_previous = PATH[,PATH...]: appended; empty: cleared. */
static int add_previous(struct config *c, const char *v, const char **why)
{
    if (!*v) {
        c->n_ticket_prev = 0;
        return 0;
    }
    char buf[4096];
    if (strlen(v) >= sizeof(buf))
        return -ENAMETOOLONG;
    strcpy(buf, v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*t))
            t++;
        size_t n = strlen(t);
        while (n && isspace((unsigned char)t[n - 1]))
            t[--n] = 0;
        if (!n) {
            *why = "an empty path in the list";
            return -EINVAL;
        }
        if (c->n_ticket_prev >= RRPC_TICKET_MAX_KEYS - 1) {
            *why = "at most 7 previous ticket keys (remove those whose overlap is over)";
            return -E2BIG;
        }
        if (set_path(c->ticket_prev[c->n_ticket_prev], sizeof(c->ticket_prev[0]), t))
            return -ENAMETOOLONG;
        c->n_ticket_prev++;
    }
    return 0;
}

int config_set(struct config *c, const char *k, const char *v, const char *where)
{
    int r = -ENOENT;
    const char *why = NULL;
    if (!strcmp(k, "listen")) {
        r = check_listen(v, &why);
        if (!r)
            r = set_path(c->listen, sizeof(c->listen), v);
    }
    else if (!strcmp(k, "cert"))
        r = set_path(c->cert, sizeof(c->cert), v);
    else if (!strcmp(k, "key"))
        r = set_path(c->key, sizeof(c->key), v);
    else if (!strcmp(k, "ca"))
        r = set_path(c->ca, sizeof(c->ca), v);
    else if (!strcmp(k, "token_file"))
        r = set_path(c->token_file, sizeof(c->token_file), v);
    else if (!strcmp(k, "registry"))
        r = set_registry(c, v, &why);
    else if (!strcmp(k, "etcd_prefix"))
        r = set_prefix(c, v, &why);
    else if (!strcmp(k, "etcd_cert"))
        r = set_path(c->etcd_cert, sizeof(c->etcd_cert), v);
    else if (!strcmp(k, "etcd_key"))
        r = set_path(c->etcd_key, sizeof(c->etcd_key), v);
    else if (!strcmp(k, "etcd_ca"))
        r = set_path(c->etcd_ca, sizeof(c->etcd_ca), v);
    else if (!strcmp(k, "etcd_user"))
        r = set_path(c->etcd_user, sizeof(c->etcd_user), v);
    else if (!strcmp(k, "etcd_password_file"))
        r = set_path(c->etcd_password_file, sizeof(c->etcd_password_file), v);
    else if (!strcmp(k, "ticket_key"))
        r = set_path(c->ticket_key, sizeof(c->ticket_key), v);
    else if (!strcmp(k, "ticket_key_previous"))
        r = add_previous(c, v, &why);
    else if (!strcmp(k, "port_file"))
        r = set_path(c->port_file, sizeof(c->port_file), v);
    else if (!strcmp(k, "metrics_listen"))
        r = set_metrics_listen(c, v, &why);
    else if (!strcmp(k, "metrics_port_file"))
        r = set_path(c->metrics_port_file, sizeof(c->metrics_port_file), v);
    else if (!strcmp(k, "metrics_max_connections"))
        r = parse_int(v, 1, 1024, &c->metrics_max_connections);
    else if (!strcmp(k, "metrics_timeout_s"))
        r = parse_int(v, 1, 3600, &c->metrics_timeout_s);
    else if (!strcmp(k, "require_client_cert"))
        r = parse_bool(v, &c->require_client_cert);
    else if (!strcmp(k, "allow"))
        r = add_rule(c, v);
    else if (!strcmp(k, "ticket_lifetime_ms"))
        r = parse_ms(v, 1000, 3600000, &c->ticket_lifetime_ms);
    else if (!strcmp(k, "lease_ms"))
        r = parse_ms(v, 300, 3600000, &c->lease_ms);
    else if (!strcmp(k, "idle_timeout_ms"))
        r = parse_ms(v, 1000, 86400000, &c->idle_timeout_ms);
    else if (!strcmp(k, "auth_timeout_ms"))
        r = parse_ms(v, 100, 600000, &c->auth_timeout_ms);
    else if (!strcmp(k, "auth_max_frame"))
        r = parse_int(v, 512, CTL_MAX_FRAME, &c->auth_max_frame);
    else if (!strcmp(k, "max_connections"))
        r = parse_int(v, 1, 1000000, &c->max_connections);
    else if (!strcmp(k, "max_connections_per_source"))
        r = parse_int(v, 1, 1000000, &c->max_connections_per_source);
    else if (!strcmp(k, "max_registrations"))
        r = parse_int(v, 1, 1000000, &c->max_registrations);
    else if (!strcmp(k, "max_instances_per_service"))
        r = parse_int(v, 1, 65536, &c->max_instances_per_service);
    else if (!strcmp(k, "max_endpoints_per_registration"))
        r = parse_int(v, 1, 64, &c->max_endpoints_per_registration);
    else if (!strcmp(k, "log")) {
        r = !strcmp(v, "syslog") ? (c->syslog = true, 0)
            : !strcmp(v, "stderr") ? (c->syslog = false, 0)
                                   : -EINVAL;
    } else if (!strcmp(k, "log_level")) {
        static const char *const lv[] = { "err", "warning", "notice", "info", "debug" };
        static const int val[] = { LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG };
        r = -EINVAL;
        for (int i = 0; i < 5; i++)
            if (!strcmp(v, lv[i])) {
                c->log_level = val[i];
                r = 0;
            }
    }
    if (r == -ENOENT)
        fprintf(stderr, "rrpcd: %s: unknown setting '%s' (rrpcd --help lists them)\n", where, k);
    else if (r)
        fprintf(stderr, "rrpcd: %s: bad value '%s' for %s%s%s\n", where, v, k, why ? ": " : "",
                why ? why : "");
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

int config_load_file(struct config *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int r = -errno;
        fprintf(stderr, "rrpcd: cannot open the config file %s: %s\n", path, strerror(-r));
        return r;
    }
    char line[4096];
    int lineno = 0, r = 0;
    while (!r && fgets(line, sizeof(line), f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        char where[1100];
        snprintf(where, sizeof(where), "%s:%d", path, lineno);
        if (!eq) {
            fprintf(stderr, "rrpcd: %s: expected \"name = value\"\n", where);
            r = -EINVAL;
            break;
        }
        *eq = 0;
        r = config_set(c, trim(s), trim(eq + 1), where);
    }
    fclose(f);
    return r;
}

static int load_tokens(struct config *c)
{
    FILE *f = fopen(c->token_file, "r");
    if (!f) {
        int r = -errno;
        fprintf(stderr, "rrpcd: cannot open the token file %s: %s\n", c->token_file,
                strerror(-r));
        return r;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 007))
        fprintf(stderr, "rrpcd: warning: the token file %s is readable by others "
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
            fprintf(stderr, "rrpcd: %s:%d: expected \"PRINCIPAL TOKEN\" (token >= 8 chars)\n",
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
        fprintf(stderr, "rrpcd: listen = %s: %s (give an address of this host, or a name it "
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
        fprintf(stderr, "rrpcd: metrics_listen = %s: %s (give an address of this host, or a "
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
        fprintf(stderr, "rrpcd:   %s\n", buf);
    }
}

static int check_readable(const char *what, const char *path, const char *hint)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int r = -errno;
        fprintf(stderr, "rrpcd: %s = %s: cannot open it: %s (%s)\n", what, path, strerror(-r),
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
        fprintf(stderr, "rrpcd: cert = %s: not a PEM certificate (chain) OpenSSL can load "
                "(a file that begins with -----BEGIN CERTIFICATE-----):\n", c->cert);
        print_ssl_errors();
    } else if (SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
            fprintf(stderr, "rrpcd: key = %s does not belong to cert = %s (use the key the "
                    "certificate was made for):\n", c->key, c->cert);
        else
            fprintf(stderr, "rrpcd: key = %s: not a PEM private key OpenSSL can load (an "
                    "unencrypted key: -----BEGIN PRIVATE KEY-----):\n", c->key);
        print_ssl_errors();
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        fprintf(stderr, "rrpcd: key = %s does not belong to cert = %s (use the key the "
                "certificate was made for):\n", c->key, c->cert);
        print_ssl_errors();
    } else if (c->ca[0] && SSL_CTX_load_verify_locations(ctx, c->ca, NULL) != 1) {
        fprintf(stderr, "rrpcd: ca = %s: no PEM certificate OpenSSL can load in it:\n", c->ca);
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
        fprintf(stderr, "rrpcd: %s is set but registry is not etcd://... (set registry = "
                "etcd://HOST:PORT, or remove %s)\n", stray, stray);
        return -EINVAL;
    }
    if (c->etcd_key[0] && !c->etcd_cert[0]) {
        fprintf(stderr, "rrpcd: etcd_key is set without etcd_cert (set both, or neither)\n");
        return -EINVAL;
    }
    if (!!c->etcd_user[0] != !!c->etcd_password_file[0]) {
        fprintf(stderr, "rrpcd: etcd_user and etcd_password_file go together (set both, or "
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
            fprintf(stderr, "rrpcd: etcd_cert = %s: not a PEM certificate (chain) OpenSSL "
                    "can load:\n", c->etcd_cert);
        else if (c->etcd_cert[0] &&
                 (SSL_CTX_use_PrivateKey_file(ctx, c->etcd_key, SSL_FILETYPE_PEM) != 1 ||
                  SSL_CTX_check_private_key(ctx) != 1))
            fprintf(stderr, "rrpcd: etcd_key = %s: not a PEM private key of etcd_cert = %s "
                    "(use the unencrypted key the certificate was made for):\n",
                    c->etcd_key, c->etcd_cert);
        else if (c->etcd_ca[0] && SSL_CTX_load_verify_locations(ctx, c->etcd_ca, NULL) != 1)
            fprintf(stderr, "rrpcd: etcd_ca = %s: no PEM certificate OpenSSL can load in "
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
            fprintf(stderr, "rrpcd: etcd_password_file = %s: cannot open it: %s\n",
                    c->etcd_password_file, strerror(-r));
            return r;
        }
        struct stat st;
        char line[512];
        bool got = fgets(line, sizeof(line), f) && trim(line)[0];
        if (fstat(fileno(f), &st) == 0 && (st.st_mode & 007))
            fprintf(stderr, "rrpcd: warning: etcd_password_file %s is readable by others "
                    "(chmod 600 it)\n", c->etcd_password_file);
        OPENSSL_cleanse(line, sizeof(line));
        fclose(f);
        if (!got) {
            fprintf(stderr, "rrpcd: etcd_password_file = %s: its first line is empty (write "
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
            fprintf(stderr, "rrpcd: the registry on etcd needs 'ticket_key': every rrpcd on "
                    "the prefix must sign tickets with the same Ed25519 key (make one with: "
                    "openssl genpkey -algorithm ed25519 -out ticket.pem)\n");
            return -EINVAL;
        }
        if (c->n_ticket_prev) {
            fprintf(stderr, "rrpcd: 'ticket_key_previous' is set without 'ticket_key'\n");
            return -EINVAL;
        }
        if ((r = rrpc_ticket_key_new(NULL, &c->signer)) != 0) {
            fprintf(stderr, "rrpcd: cannot make a ticket key: %s\n", strerror(-r));
            return r;
        }
        c->signer_ephemeral = true;
    } else {
        struct stat st;
        if (stat(c->ticket_key, &st) == 0 && (st.st_mode & 077)) {
            fprintf(stderr, "rrpcd: ticket_key = %s is readable by its group or others "
                    "(mode %03o): chmod 600 it; whoever reads it can sign tickets\n",
                    c->ticket_key, (unsigned)(st.st_mode & 0777));
            return -EACCES;
        }
        if ((r = rrpc_ticket_key_load(c->ticket_key, &c->signer, why, sizeof(why))) != 0) {
            fprintf(stderr, "rrpcd: ticket_key: %s\n", why);
            return r;
        }
    }
    rrpc_ticket_key_public(c->signer, c->keys[0]);
    c->n_keys = 1;
    for (size_t i = 0; i < c->n_ticket_prev; i++) {
        uint8_t *pub = c->keys[c->n_keys];
        if ((r = rrpc_ticket_public_key_load(c->ticket_prev[i], pub, why, sizeof(why))) != 0) {
            fprintf(stderr, "rrpcd: ticket_key_previous: %s\n", why);
            return r;
        }
        for (size_t j = 0; j < c->n_keys; j++) {
            if (!memcmp(c->keys[j], pub, RRPC_TICKET_KEY_LEN)) {
                fprintf(stderr, "rrpcd: ticket_key_previous = %s is %s: list each key once, "
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
        fprintf(stderr, "rrpcd: 'cert' is not set (the broker's TLS certificate)\n");
        return -EINVAL;
    }
    if (!c->key[0])
        strcpy(c->key, c->cert);
    if (c->require_client_cert && !c->ca[0]) {
        fprintf(stderr, "rrpcd: require_client_cert = yes needs 'ca'\n");
        return -EINVAL;
    }
    if (c->metrics_port_file[0] && !c->metrics_listen[0]) {
        fprintf(stderr, "rrpcd: metrics_port_file is set but metrics_listen is not (set "
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
        fprintf(stderr, "rrpcd: warning: neither 'ca' nor 'token_file' is set: no client "
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

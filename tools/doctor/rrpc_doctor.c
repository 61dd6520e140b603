/* rrpc-doctor: inspects this host for roce-rpc (issue #8) and prints each finding with its fix.
 *
 * Reads sysfs (/sys/class/infiniband, /sys/class/net), libibverbs when built with it (active and
 * maximum MTU of each port), the addresses of the network interfaces, and optionally performs a
 * TLS 1.3 handshake with the broker (rrpcd).  Exit status: 0 no error found, 1 errors found,
 * 2 bad usage.  See docs/doctor.md.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dcb_parse.h"
#include "doctor_classes.h"

#ifdef RRPC_DOCTOR_HAVE_VERBS
#include <infiniband/verbs.h>
#endif
#ifdef RRPC_DOCTOR_HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#endif

#define SYSFS_IB "/sys/class/infiniband"
#define SYSFS_NET "/sys/class/net"

/* ---- findings ------------------------------------------------------------------------------ */

enum sev { SEV_OK, SEV_INFO, SEV_WARN, SEV_ERROR };
static const char *const sev_name[] = {"ok", "info", "warn", "error"};
static const char *const sev_tag[] = {"[ OK  ]", "[INFO ]", "[WARN ]", "[ERROR]"};

struct finding {
    enum sev sev;
    char check[32];    /* short machine name of the check: "devices", "port", "gid", ... */
    char subject[96];  /* what it is about: "rxe0", "rxe0/1", "va", "10.77.0.1", "broker" */
    char *message;
    char *fix;         /* NULL: nothing to do */
    char details[768]; /* JSON object members ("\"k\":v,...") for --json, may be empty */
};

static struct finding *findings;
static size_t nfindings, capfindings;

static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) {
        perror("rrpc-doctor");
        exit(2);
    }
    return s;
}

/* Adds a finding; @fix may be NULL; @fmt formats the message. Returns it for details. */
__attribute__((format(printf, 5, 6))) static struct finding *
add(enum sev sev, const char *check, const char *subject, const char *fix, const char *fmt, ...)
{
    if (nfindings == capfindings) {
        capfindings = capfindings ? 2 * capfindings : 32;
        findings = realloc(findings, capfindings * sizeof(*findings));
        if (!findings) {
            perror("rrpc-doctor");
            exit(2);
        }
    }
    struct finding *f = &findings[nfindings++];
    memset(f, 0, sizeof(*f));
    f->sev = sev;
    snprintf(f->check, sizeof(f->check), "%s", check);
    snprintf(f->subject, sizeof(f->subject), "%s", subject ? subject : "");
    va_list ap;
    va_start(ap, fmt);
    f->message = vfmt(fmt, ap);
    va_end(ap);
    f->fix = fix ? strdup(fix) : NULL;
    return f;
}

static char *xfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xfmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = vfmt(fmt, ap);
    va_end(ap);
    return s;
}

/* Like add() but takes ownership of a malloc'ed @fix. */
__attribute__((format(printf, 5, 6))) static struct finding *
ADDF(enum sev sev, const char *check, const char *subject, char *fix, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = vfmt(fmt, ap);
    va_end(ap);
    struct finding *f = add(sev, check, subject, fix, "%s", msg);
    free(msg);
    free(fix);
    return f;
}

static void json_str(FILE *o, const char *s);

static void detail_sep(struct finding *f)
{
    size_t n = strlen(f->details);
    if (n && n < sizeof(f->details) - 1)
        strcat(f->details, ",");
}

static void detail_str(struct finding *f, const char *k, const char *v)
{
    if (!f || !v)
        return;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return;
    json_str(m, k);
    fputc(':', m);
    json_str(m, v);
    fclose(m);
    if (strlen(f->details) + len + 2 < sizeof(f->details)) {
        detail_sep(f);
        strcat(f->details, buf);
    }
    free(buf);
}

static void detail_int(struct finding *f, const char *k, long long v)
{
    if (!f)
        return;
    char buf[128];
    snprintf(buf, sizeof(buf), "\"%s\":%lld", k, v);
    if (strlen(f->details) + strlen(buf) + 2 < sizeof(f->details)) {
        detail_sep(f);
        strcat(f->details, buf);
    }
}

static void detail_bool(struct finding *f, const char *k, bool v)
{
    if (!f)
        return;
    char buf[128];
    snprintf(buf, sizeof(buf), "\"%s\":%s", k, v ? "true" : "false");
    if (strlen(f->details) + strlen(buf) + 2 < sizeof(f->details)) {
        detail_sep(f);
        strcat(f->details, buf);
    }
}

/* ---- small helpers ------------------------------------------------------------------------- */

/* Reads the first line of a file without its newline. Returns 0, or -errno. */
static int read_line(const char *path, char *buf, size_t size)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -errno;
    if (!fgets(buf, (int)size, fp)) {
        int e = ferror(fp) ? -(errno ? errno : EIO) : -ENODATA;
        fclose(fp);
        buf[0] = 0;
        return e;
    }
    fclose(fp);
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

__attribute__((format(printf, 3, 4))) static int read_linef(char *buf, size_t size,
                                                           const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    return read_line(path, buf, size);
}

__attribute__((format(printf, 1, 2))) static bool existsf(const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    return access(path, F_OK) == 0;
}

/* Basename of the target of a symlink, or "" */
static void link_base(const char *path, char *buf, size_t size)
{
    char t[512];
    ssize_t n = readlink(path, t, sizeof(t) - 1);
    buf[0] = 0;
    if (n <= 0)
        return;
    t[n] = 0;
    const char *b = strrchr(t, '/');
    b = b ? b + 1 : t;
    size_t l = strlen(b);
    if (l >= size)
        l = size - 1;
    memcpy(buf, b, l);
    buf[l] = 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entries of a directory (without dot files). Returns count, or -errno. */
static int list_dir(const char *path, char ***ret)
{
    DIR *d = opendir(path);
    *ret = NULL;
    if (!d)
        return -errno;
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(v, (size_t)cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n > 1)
        qsort(v, (size_t)n, sizeof(*v), cmp_str);
    *ret = v;
    return n;
}

static void free_list(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* "4: ACTIVE" -> "ACTIVE" */
static const char *after_colon(const char *s)
{
    const char *c = strchr(s, ':');
    if (!c)
        return s;
    c++;
    while (*c == ' ')
        c++;
    return c;
}

/* The largest IB MTU (256..4096) a RoCE port can use over a netdev MTU: the netdev MTU minus the
 * RoCEv2 headers the kernel reserves (GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4 = 96,
 * as in iboe_get_mtu()/rxe_set_mtu()).  0 when even 256 does not fit. */
#define ROCE_HDR_RESERVE 96
static int roce_mtu_for_netdev(int netdev_mtu)
{
    int room = netdev_mtu - ROCE_HDR_RESERVE;
    for (int m = 4096; m >= 256; m /= 2)
        if (room >= m)
            return m;
    return 0;
}

/* ---- network interfaces -------------------------------------------------------------------- */

struct hostaddr {
    char ifname[IF_NAMESIZE];
    int family;
    char addr[INET6_ADDRSTRLEN];
    uint8_t gid[16]; /* the GID this address maps to: ::ffff:a.b.c.d or the IPv6 address */
};
static struct hostaddr *ifaddrs_v;
static int nifaddrs;

static void load_ifaddrs(void)
{
    struct ifaddrs *ifa0;
    if (getifaddrs(&ifa0))
        return;
    for (struct ifaddrs *i = ifa0; i; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        struct hostaddr *nv = realloc(ifaddrs_v, (size_t)(nifaddrs + 1) * sizeof(*nv));
        if (!nv)
            break;
        ifaddrs_v = nv;
        struct hostaddr *a = &ifaddrs_v[nifaddrs++];
        memset(a, 0, sizeof(*a));
        snprintf(a->ifname, sizeof(a->ifname), "%s", i->ifa_name);
        a->family = i->ifa_addr->sa_family;
        if (a->family == AF_INET) {
            struct in_addr in = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr;
            inet_ntop(AF_INET, &in, a->addr, sizeof(a->addr));
            a->gid[10] = a->gid[11] = 0xff;
            memcpy(a->gid + 12, &in, 4);
        } else {
            struct in6_addr in6 = ((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr;
            inet_ntop(AF_INET6, &in6, a->addr, sizeof(a->addr));
            memcpy(a->gid, &in6, 16);
        }
    }
    freeifaddrs(ifa0);
}

/* A netdev to suggest for "rdma link add": the first UP, non-loopback interface with an IPv4
 * address, else "<if>". */
static const char *suggest_netdev(void)
{
    static char best[IF_NAMESIZE];
    for (int i = 0; i < nifaddrs; i++) {
        struct hostaddr *a = &ifaddrs_v[i];
        if (a->family != AF_INET || !strcmp(a->ifname, "lo"))
            continue;
        char st[32];
        if (read_linef(st, sizeof(st), SYSFS_NET "/%s/operstate", a->ifname) == 0 &&
            (!strcmp(st, "up") || !strcmp(st, "unknown"))) {
            snprintf(best, sizeof(best), "%s", a->ifname);
            return best;
        }
    }
    return "<if>";
}

/* Parses a sysfs GID "fe80:0000:...". */
static bool parse_gid(const char *s, uint8_t gid[16])
{
    unsigned v[8];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]) != 8)
        return false;
    for (int i = 0; i < 8; i++) {
        gid[2 * i] = (uint8_t)(v[i] >> 8);
        gid[2 * i + 1] = (uint8_t)v[i];
    }
    return true;
}

static bool gid_is_zero(const uint8_t g[16])
{
    for (int i = 0; i < 16; i++)
        if (g[i])
            return false;
    return true;
}

/* ---- RDMA devices -------------------------------------------------------------------------- */

struct gid_ent {
    int index;
    uint8_t gid[16];
    char text[64];
    char type[32];
    char ndev[IF_NAMESIZE];
};

static bool is_software_name(const char *dev, const char *prefix)
{
    return !strncmp(dev, prefix, strlen(prefix));
}

/* Checks one port of one device. */
/* ---- DCB: PFC, DSCP trust, ETS (dcb(8) from iproute2) ------------------------------------- */

/* The class -> DSCP -> priority mapping: the DSCPs are the library's defaults (doctor_classes.c),
 * the priorities the NIC's dcb app rules for them, else DSCP >> 3 (dcb_parse.c). */
static void check_classes(void)
{
    char msg[256] = "";
    size_t n = 0;
    for (int i = 0; i < doctor_class_count(); i++) {
        int d = doctor_class_dscp(i);
        n += (size_t)snprintf(msg + n, sizeof(msg) - n, "%s%s DSCP %d -> priority %d",
                              i ? ", " : "", doctor_class_name(i), d, dcbp_default_prio(d));
    }
    struct finding *f = add(SEV_INFO, "classes", "qos", NULL,
                            "class -> DSCP -> priority: %s (the library's default DSCPs, which "
                            "rrpc_class_set can change; priority = DSCP >> 3 unless the NIC's "
                            "dcb app table maps the DSCP elsewhere)",
                            msg);
    for (int i = 0; i < doctor_class_count(); i++)
        detail_int(f, doctor_class_name(i), doctor_class_dscp(i));
}

/* Runs dcb with @args (NULL-terminated, after "dcb") and the C locale, stdout and stderr merged
 * into @out.  Returns its exit status: 127 when dcb is not installed (also looked for in
 * /usr/sbin and /sbin, which a user's PATH often lacks), 124 when it ran longer than 5 s. */
static int run_dcb(const char *const *args, char *out, size_t size)
{
    /* RRPC_DOCTOR_DCB: the dcb to run instead (another install, or a test's stand-in). */
    const char *cmd = getenv("RRPC_DOCTOR_DCB");
    const char *argv[16] = {cmd && *cmd ? cmd : "dcb"};
    int na = 1;
    while (args[na - 1] && na < 15) {
        argv[na] = args[na - 1];
        na++;
    }
    argv[na] = NULL;
    out[0] = 0;
    int pfd[2];
    if (pipe(pfd) < 0)
        return 127;
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return 127;
    }
    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        setenv("LC_ALL", "C", 1);
        execvp(argv[0], (char *const *)argv);
        if (!strchr(argv[0], '/')) {
            execv("/usr/sbin/dcb", (char *const *)argv);
            execv("/sbin/dcb", (char *const *)argv);
        }
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0;
    bool timed_out = false;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = 5000 - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        char tmp[512];
        ssize_t r = read(pfd[0], tmp, sizeof(tmp));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        size_t c = (size_t)r < size - 1 - len ? (size_t)r : size - 1 - len;
        memcpy(out + len, tmp, c);
        len += c;
    }
    out[len] = 0;
    close(pfd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return 124;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The first line of @s, for a message. */
static const char *first_line(const char *s, char *buf, size_t size)
{
    snprintf(buf, size, "%.*s", (int)strcspn(s, "\n"), s);
    return buf[0] ? buf : "(no output)";
}

/* Checks DCB on RoCE netdev @ndev: PFC on the priorities of the classes' DSCPs, DSCP trust (dcb
 * app dscp-prio rules, or mlx5's qos/trust), ETS shares.  Returns the mask of the classes'
 * priorities on this netdev (for the ECN check).  Never fails the run: dcb missing, a netdev
 * without DCB and output it cannot parse are warnings that say so. */
static uint8_t check_dcb(const char *ndev)
{
    uint8_t want = 0;
    for (int i = 0; i < doctor_class_count(); i++)
        want |= (uint8_t)(1u << dcbp_default_prio(doctor_class_dscp(i)));
    char out[4096], line[200], err[256];
    struct finding *f;

    const char *pfc_args[] = {"-N", "pfc", "show", "dev", ndev, NULL};
    char pfc_out[1024];
    int st = run_dcb(pfc_args, pfc_out, sizeof(pfc_out));
    memcpy(out, pfc_out, sizeof(pfc_out));
    switch (dcbp_classify(st, out)) {
    case DCBP_RUN_NOT_INSTALLED:
        f = ADDF(SEV_WARN, "dcb", ndev,
                 xfmt("install iproute2 (5.11 or later has dcb: apt-get install iproute2), or "
                      "check with the NIC vendor's tool (mlnx_qos -i %s)",
                      ndev),
                 "PFC, ETS and DSCP trust of %s not checked: the dcb tool (iproute2) is not "
                 "installed",
                 ndev);
        detail_str(f, "netdev", ndev);
        detail_str(f, "dcb", "not installed");
        return want;
    case DCBP_RUN_UNSUPPORTED:
        f = ADDF(SEV_WARN, "dcb", ndev,
                 xfmt("nothing to do on a veth or a development host; on a RoCE fabric use a NIC "
                      "whose driver has DCB (e.g. mlx5_core with CONFIG_MLX5_CORE_EN_DCB) and "
                      "check again"),
                 "%s has no DCB (dcb: %s): no PFC, ETS or DSCP trust to check, RoCE traffic on "
                 "it is not lossless (fine for Soft-RoCE over veth, not for a RoCE fabric)",
                 ndev, first_line(out, line, sizeof(line)));
        detail_str(f, "netdev", ndev);
        detail_str(f, "dcb", "not supported");
        return want;
    case DCBP_RUN_FAILED:
        f = ADDF(SEV_WARN, "dcb", ndev, xfmt("run it by hand to see why: dcb pfc show dev %s", ndev),
                 "dcb pfc show dev %s failed (exit status %d): %s", ndev, st,
                 first_line(out, line, sizeof(line)));
        detail_str(f, "netdev", ndev);
        detail_str(f, "dcb", "failed");
        return want;
    case DCBP_RUN_OK:
        break;
    }

    /* DSCP -> priority rules first: they decide which priorities the classes use. */
    struct dcbp_app app;
    bool have_app = false;
    const char *app_args[] = {"-N", "app", "show", "dev", ndev, "dscp-prio", NULL};
    st = run_dcb(app_args, out, sizeof(out));
    if (st == 0 && dcbp_parse_app(out, &app, err, sizeof(err)) == 0) {
        have_app = true;
    } else {
        f = ADDF(SEV_WARN, "trust", ndev, xfmt("run it by hand: dcb app show dev %s dscp-prio", ndev),
                 "DSCP rules of %s not read (dcb app show: %s); assuming priority = DSCP >> 3",
                 ndev, st == 0 ? err : first_line(out, line, sizeof(line)));
        detail_str(f, "netdev", ndev);
    }
    want = 0;
    uint8_t missing_rule = 0;
    char map[160] = "", rules[160] = "";
    size_t nm = 0, nr = 0;
    for (int i = 0; i < doctor_class_count(); i++) {
        int d = doctor_class_dscp(i);
        bool by_rule;
        int p = dcbp_effective_prio(have_app ? &app : NULL, d, &by_rule);
        want |= (uint8_t)(1u << p);
        nm += (size_t)snprintf(map + nm, sizeof(map) - nm, "%s%s %d->%d", i ? ", " : "",
                               doctor_class_name(i), d, p);
        if (!by_rule) {
            missing_rule |= (uint8_t)(1u << i);
            nr += (size_t)snprintf(rules + nr, sizeof(rules) - nr, "%s%d:%d", nr ? " " : "", d, p);
        }
    }
    if (have_app) {
        char tr[64] = "";
        bool sysfs_dscp = read_linef(tr, sizeof(tr), SYSFS_NET "/%s/qos/trust", ndev) == 0 &&
                          strstr(tr, "dscp");
        if (!missing_rule)
            f = add(SEV_OK, "trust", ndev, NULL,
                    "%s classifies the classes' DSCPs by dcb app rules: %s", ndev, map);
        else if (sysfs_dscp && app.n == 0)
            f = add(SEV_OK, "trust", ndev, NULL,
                    "%s trusts DSCP (qos/trust) with the default table: %s", ndev, map);
        else
            f = ADDF(SEV_WARN, "trust", ndev,
                     xfmt("dcb app add dev %s dscp-prio %s (on mlx5 this also sets trust dscp; or "
                          "mlnx_qos -i %s --trust dscp)",
                          ndev, rules, ndev),
                     "%s has no DSCP -> priority rule for %s of the classes' DSCPs: without trust "
                     "DSCP the NIC classifies by the VLAN PCP (untagged: priority 0); %s",
                     ndev, app.n ? "some" : "any", map);
        detail_str(f, "netdev", ndev);
        detail_str(f, "mapping", map);
        detail_int(f, "rules", app.n);
    }

    char pl[64];
    struct dcbp_pfc pfc;
    if (dcbp_parse_pfc(pfc_out, &pfc, err, sizeof(err)) < 0) {
        f = ADDF(SEV_WARN, "pfc", ndev, xfmt("run it by hand: dcb pfc show dev %s", ndev),
                 "PFC of %s not read (cannot parse dcb's output: %s)", ndev, err);
        detail_str(f, "netdev", ndev);
    } else {
        uint8_t miss = want & (uint8_t)~pfc.on_mask;
        if (!miss)
            f = add(SEV_OK, "pfc", ndev, NULL, "PFC on for the classes' priorities %s on %s",
                    dcbp_prio_list(want, "", pl, sizeof(pl)), ndev);
        else
            f = ADDF(SEV_WARN, "pfc", ndev,
                     xfmt("dcb pfc set dev %s prio-pfc %s (and the same on the switch ports)",
                          ndev, dcbp_prio_list(miss, ":on", pl, sizeof(pl))),
                     "PFC is off on %s for priorities %s%s of the classes (%s): RoCE traffic on "
                     "them is lossy and recovers by retransmission",
                     ndev, dcbp_prio_list(miss, "", line, sizeof(line)),
                     pfc.on_mask ? "" : " (no priority has PFC)", map);
        detail_str(f, "netdev", ndev);
        detail_int(f, "pfc_enabled_mask", pfc.on_mask);
        detail_int(f, "class_prio_mask", want);
    }

    const char *ets_args[] = {"-N", "ets", "show", "dev", ndev, NULL};
    struct dcbp_ets ets;
    st = run_dcb(ets_args, out, sizeof(out));
    if (st != 0 || dcbp_parse_ets(out, &ets, err, sizeof(err)) < 0 || !ets.have_prio_tc) {
        f = ADDF(SEV_WARN, "ets", ndev, xfmt("run it by hand: dcb ets show dev %s", ndev),
                 "ETS of %s not read (%s)", ndev,
                 st ? first_line(out, line, sizeof(line)) : err[0] ? err : "no prio-tc line");
        detail_str(f, "netdev", ndev);
        return want;
    }
    static const char *const tsa_name[] = {"?", "strict", "cbs", "ets", "vendor"};
    char shares[200] = "", starved[64] = "";
    size_t ns = 0, nz = 0;
    for (int p = 0; p < DCBP_PRIOS; p++) {
        if (!(want & (1u << p)))
            continue;
        int tc = ets.prio_tc[p];
        enum dcbp_tsa t = ets.have_tsa ? ets.tc_tsa[tc] : DCBP_TSA_UNKNOWN;
        if (t == DCBP_TSA_ETS)
            ns += (size_t)snprintf(shares + ns, sizeof(shares) - ns, "%sprio %d -> tc %d ets %d%%",
                                   ns ? ", " : "", p, tc, ets.tc_bw[tc]);
        else
            ns += (size_t)snprintf(shares + ns, sizeof(shares) - ns, "%sprio %d -> tc %d %s",
                                   ns ? ", " : "", p, tc, tsa_name[t]);
        if (t == DCBP_TSA_ETS && ets.have_bw && ets.tc_bw[tc] == 0)
            nz += (size_t)snprintf(starved + nz, sizeof(starved) - nz, "%s%d:10", nz ? " " : "", tc);
    }
    if (!nz)
        f = add(SEV_OK, "ets", ndev, NULL, "ETS on %s for the classes' priorities: %s", ndev, shares);
    else
        f = ADDF(SEV_WARN, "ets", ndev,
                 xfmt("give those traffic classes a share, e.g. dcb ets set dev %s tc-bw %s "
                      "(the ets shares must add up to 100: lower the others)",
                      ndev, starved),
                 "ETS on %s gives a class's traffic class 0%% of the bandwidth under "
                 "congestion: %s",
                 ndev, shares);
    detail_str(f, "netdev", ndev);
    return want;
}

static void check_port(const char *dev, int port, bool soft_roce, const char *parent_ndev,
                       void *vctx)
{
    char subj[96], p[512], state[64] = "", phys[64] = "", ll[64] = "";
    snprintf(subj, sizeof(subj), "%s/%d", dev, port);
    snprintf(p, sizeof(p), SYSFS_IB "/%s/ports/%d", dev, port);
    read_linef(state, sizeof(state), "%s/state", p);
    read_linef(phys, sizeof(phys), "%s/phys_state", p);
    read_linef(ll, sizeof(ll), "%s/link_layer", p);
    bool eth = !strcmp(ll, "Ethernet");

    /* GID table: gids/<i> until the first missing file; empty entries are all zero. */
    struct gid_ent *g = NULL;
    int ng = 0;
    for (int i = 0;; i++) {
        char s[64];
        if (read_linef(s, sizeof(s), "%s/gids/%d", p, i) == -ENOENT)
            break;
        uint8_t gid[16];
        if (!parse_gid(s, gid) || gid_is_zero(gid))
            continue;
        struct gid_ent *ng_ = realloc(g, (size_t)(ng + 1) * sizeof(*g));
        if (!ng_)
            break;
        g = ng_;
        struct gid_ent *e = &g[ng++];
        memset(e, 0, sizeof(*e));
        e->index = i;
        memcpy(e->gid, gid, 16);
        snprintf(e->text, sizeof(e->text), "%s", s);
        read_linef(e->type, sizeof(e->type), "%s/gid_attrs/types/%d", p, i);
        read_linef(e->ndev, sizeof(e->ndev), "%s/gid_attrs/ndevs/%d", p, i);
        if (i > 4096)
            break;
    }

    /* The netdev of the port: the one most GIDs name, else the device's parent (Soft-RoCE). */
    char ndev[IF_NAMESIZE] = "";
    for (int i = 0; i < ng && !ndev[0]; i++)
        if (g[i].ndev[0])
            snprintf(ndev, sizeof(ndev), "%s", g[i].ndev);
    if (!ndev[0] && parent_ndev && parent_ndev[0])
        snprintf(ndev, sizeof(ndev), "%s", parent_ndev);

    /* State. */
    int active_mtu = 0, max_mtu = 0;
    bool mtu_from_verbs = false;
#ifdef RRPC_DOCTOR_HAVE_VERBS
    struct ibv_context *ctx = vctx;
    struct ibv_port_attr pa;
    if (ctx && ibv_query_port(ctx, (uint8_t)port, &pa) == 0) {
        active_mtu = 128 << pa.active_mtu;
        max_mtu = 128 << pa.max_mtu;
        mtu_from_verbs = true;
    }
#else
    (void)vctx;
#endif
    const char *st = after_colon(state), *ph = after_colon(phys);
    struct finding *f;
    if (!strcmp(st, "ACTIVE")) {
        f = add(SEV_OK, "port", subj, NULL, "port %d of %s is ACTIVE (%s, link layer %s%s%s)",
                port, dev, ph[0] ? ph : "?", ll[0] ? ll : "?", ndev[0] ? ", netdev " : "", ndev);
    } else {
        char *fix;
        if (ndev[0])
            fix = xfmt("bring the netdev up and check its carrier: ip link set %s up; "
                       "ip link show %s (a cable/peer must be connected for hardware ports)",
                       ndev, ndev);
        else
            fix = xfmt("bring the port's netdev up (ip link set <if> up) and check the cable/peer;"
                       " rdma link show lists the netdev of each port");
        f = ADDF(SEV_ERROR, "port", subj, fix, "port %d of %s is %s (physical state %s)", port, dev,
                 st[0] ? st : "unknown", ph[0] ? ph : "unknown");
    }
    detail_str(f, "device", dev);
    detail_int(f, "port", port);
    detail_str(f, "state", st);
    detail_str(f, "phys_state", ph);
    detail_str(f, "link_layer", ll);
    if (ndev[0])
        detail_str(f, "netdev", ndev);

    if (ll[0] && !eth) {
        add(SEV_INFO, "port", subj, NULL,
            "%s port %d has link layer %s: not RoCE (InfiniBand fabric); the GID/ECN checks below "
            "apply to RoCE only",
            dev, port, ll);
    }

    /* MTU. */
    int netdev_mtu = 0;
    char s[32];
    if (ndev[0] && read_linef(s, sizeof(s), SYSFS_NET "/%s/mtu", ndev) == 0)
        netdev_mtu = atoi(s);
    if (eth && netdev_mtu > 0) {
        int allowed = roce_mtu_for_netdev(netdev_mtu);
        if (!mtu_from_verbs)
            active_mtu = 0;
        int cap = max_mtu ? max_mtu : 4096;
        if (!active_mtu) {
            f = add(SEV_INFO, "mtu", subj, NULL,
                    "netdev %s has MTU %d, which allows a RoCE MTU of %d (active_mtu not read: "
                    "rrpc-doctor was built without libibverbs)",
                    ndev, netdev_mtu, allowed);
        } else if (active_mtu < allowed && active_mtu < cap) {
            f = ADDF(SEV_WARN, "mtu", subj,
                     xfmt("the port did not follow the netdev MTU: check the driver/firmware "
                          "(mlx5: the port MTU set by the firmware tool), or re-create the device "
                          "(Soft-RoCE: rdma link delete %s; rdma link add %s type rxe netdev %s)",
                          dev, dev, ndev),
                     "active_mtu %d on %s is lower than netdev %s's MTU %d allows (%d)", active_mtu,
                     subj, ndev, netdev_mtu, allowed);
        } else if (active_mtu < 4096 && cap >= 4096) {
            f = ADDF(SEV_WARN, "mtu", subj,
                     xfmt("for active_mtu 4096 raise the netdev MTU to at least %d (4200, or 9000 "
                          "with jumbo frames): ip link set %s mtu 4200 -- on both ends and every "
                          "switch port on the path",
                          4096 + ROCE_HDR_RESERVE, ndev),
                     "active_mtu %d on %s: limited by netdev %s MTU %d (RoCE needs %d bytes of "
                     "headers; 4096 needs a netdev MTU >= %d)",
                     active_mtu, subj, ndev, netdev_mtu, ROCE_HDR_RESERVE,
                     4096 + ROCE_HDR_RESERVE);
        } else {
            f = add(SEV_OK, "mtu", subj, NULL, "active_mtu %d on %s (netdev %s MTU %d, port max %d)",
                    active_mtu, subj, ndev, netdev_mtu, cap);
        }
        if (active_mtu)
            detail_int(f, "active_mtu", active_mtu);
        if (max_mtu)
            detail_int(f, "max_mtu", max_mtu);
        detail_str(f, "netdev", ndev);
        detail_int(f, "netdev_mtu", netdev_mtu);
        detail_int(f, "mtu_allowed_by_netdev", allowed);
    } else if (mtu_from_verbs) {
        f = add(SEV_INFO, "mtu", subj, NULL, "active_mtu %d on %s (max %d)", active_mtu, subj,
                max_mtu);
        detail_int(f, "active_mtu", active_mtu);
        detail_int(f, "max_mtu", max_mtu);
    }

    /* GIDs: list them, then check that every address of the port's netdevs has a RoCE v2 GID. */
    if (eth) {
        int nv2 = 0, nv1 = 0;
        for (int i = 0; i < ng; i++) {
            bool v2 = strstr(g[i].type, "v2") != NULL;
            nv2 += v2;
            nv1 += !v2;
            f = add(SEV_INFO, "gid", subj, NULL, "GID index %d: %s (%s%s%s)", g[i].index,
                    g[i].text, g[i].type[0] ? g[i].type : "type unknown",
                    g[i].ndev[0] ? ", netdev " : "", g[i].ndev);
            detail_str(f, "device", dev);
            detail_int(f, "port", port);
            detail_int(f, "index", g[i].index);
            detail_str(f, "gid", g[i].text);
            detail_str(f, "type", g[i].type);
            detail_str(f, "netdev", g[i].ndev);
        }
        if (!ng) {
            f = ADDF(SEV_ERROR, "gid", subj,
                     xfmt("the GID table is filled from the addresses of the port's netdev: "
                          "give %s an address and bring it up (ip addr add A.B.C.D/N dev %s; "
                          "ip link set %s up)",
                          ndev[0] ? ndev : "<if>", ndev[0] ? ndev : "<if>",
                          ndev[0] ? ndev : "<if>"),
                     "%s has no GID at all", subj);
        }
        /* Each address on each netdev the GIDs name (or the port's netdev). */
        for (int i = 0; i < nifaddrs; i++) {
            struct hostaddr *a = &ifaddrs_v[i];
            bool ours = ndev[0] && !strcmp(a->ifname, ndev);
            for (int j = 0; j < ng && !ours; j++)
                ours = !strcmp(g[j].ndev, a->ifname);
            if (!ours)
                continue;
            int v2 = -1, v1 = -1;
            for (int j = 0; j < ng; j++)
                if (!memcmp(g[j].gid, a->gid, 16)) {
                    if (strstr(g[j].type, "v2"))
                        v2 = g[j].index;
                    else
                        v1 = g[j].index;
                }
            char asub[96];
            snprintf(asub, sizeof(asub), "%s", a->addr);
            if (v2 >= 0) {
                f = add(SEV_OK, "gid", asub, NULL,
                        "RoCE v2 GID for %s (%s) on %s: index %d -- use GID index %d for "
                        "address handles/QPs bound to %s",
                        a->addr, a->ifname, subj, v2, v2, a->addr);
            } else {
                f = ADDF(SEV_ERROR, "gid", asub,
                         xfmt("RoCE v2 GIDs are added by the kernel for each address of the "
                              "netdev: check the address is on %s and the device is bound to it "
                              "(ip addr show %s; rdma link show); %s; a Soft-RoCE device can be "
                              "re-created: rdma link delete %s; rdma link add %s type rxe netdev %s",
                              a->ifname, a->ifname,
                              v1 >= 0 ? "only a RoCE v1 GID exists: the driver/firmware has RoCE "
                                        "v2 disabled (mlx5: enable RoCE v2 in the firmware)"
                                      : "VLAN and bond addresses need the device on that netdev",
                              dev, dev, a->ifname),
                         "no RoCE v2 GID for %s (%s) on %s%s", a->addr, a->ifname, subj,
                         v1 >= 0 ? " (only RoCE v1)" : "");
            }
            detail_str(f, "ip", a->addr);
            detail_str(f, "netdev", a->ifname);
            detail_str(f, "device", dev);
            detail_int(f, "port", port);
            if (v2 >= 0)
                detail_int(f, "gid_index", v2);
        }
        (void)nv1;
        (void)nv2;
    }

    /* DCB (PFC, DSCP trust, ETS), once per netdev, then ECN / DCQCN for the classes'
     * priorities and mlx5's trust mode, where the driver exposes them. */
    if (eth && ndev[0]) {
        static char seen[16][IF_NAMESIZE + 1];
        static uint8_t seen_prios[16];
        static int nseen;
        int si = 0;
        while (si < nseen && strcmp(seen[si], ndev) != 0)
            si++;
        uint8_t class_prios = si < nseen ? seen_prios[si] : check_dcb(ndev);
        if (si == nseen && nseen < 16) {
            snprintf(seen[nseen], sizeof(seen[nseen]), "%s", ndev);
            seen_prios[nseen++] = class_prios;
        }
        char base[256];
        snprintf(base, sizeof(base), SYSFS_NET "/%s/ecn", ndev);
        if (access(base, F_OK) == 0) {
            const char *roles[] = {"roce_np", "roce_rp"};
            for (int r = 0; r < 2; r++) {
                char on[32] = "", off[32] = "", fixcmd[512] = "";
                size_t lon = 0, loff = 0, lfix = 0;
                for (int prio = 0; prio < 8; prio++) {
                    char v[16];
                    if (read_linef(v, sizeof(v), "%s/%s/enable/%d", base, roles[r], prio))
                        continue;
                    if (atoi(v))
                        lon += (size_t)snprintf(on + lon, sizeof(on) - lon, "%s%d", lon ? "," : "",
                                                prio);
                    else
                        loff += (size_t)snprintf(off + loff, sizeof(off) - loff, "%s%d",
                                                 loff ? "," : "", prio);
                    if (!atoi(v) && (class_prios & (1u << prio)) && lfix < sizeof(fixcmd))
                        lfix += (size_t)snprintf(fixcmd + lfix, sizeof(fixcmd) - lfix,
                                                 "%secho 1 > %s/%s/enable/%d", lfix ? "; " : "",
                                                 base, roles[r], prio);
                }
                if (!on[0] && !off[0])
                    continue;
                if (on[0] && fixcmd[0])
                    f = ADDF(SEV_WARN, "ecn", ndev,
                             xfmt("%s (and mark ECN on the switches)", fixcmd),
                             "ECN %s is enabled for priorities %s but not for all the classes' "
                             "priorities (disabled: %s)",
                             roles[r], on, off);
                else if (on[0])
                    f = add(SEV_OK, "ecn", ndev, NULL,
                            "ECN %s (%s) enabled for priorities %s%s%s", roles[r],
                            r ? "reaction point: rate limiting on CNPs"
                              : "notification point: sends CNPs",
                            on, off[0] ? ", disabled for " : "", off);
                else
                    f = ADDF(SEV_WARN, "ecn", ndev,
                             xfmt("enable DCQCN for the priority RoCE traffic uses: echo 1 > %s/%s/"
                                  "enable/<prio> (and mark ECN on the switches)",
                                  base, roles[r]),
                             "ECN %s is disabled for every priority on %s", roles[r], ndev);
                detail_str(f, "netdev", ndev);
                detail_str(f, "role", roles[r]);
                detail_str(f, "enabled_prios", on);
            }
        } else if (soft_roce) {
            f = add(SEV_INFO, "ecn", ndev, NULL,
                    "ECN/DCQCN: not exposed by this driver (Soft-RoCE has no congestion control; "
                    "the netdev's qdisc and the kernel IP stack apply)");
            detail_str(f, "netdev", ndev);
        } else {
            f = add(SEV_INFO, "ecn", ndev, NULL,
                    "ECN/DCQCN settings: not exposed by this driver in sysfs (%s/ecn missing); "
                    "check the vendor tool",
                    SYSFS_NET "/<if>");
            detail_str(f, "netdev", ndev);
        }
        char tr[64];
        if (read_linef(tr, sizeof(tr), SYSFS_NET "/%s/qos/trust", ndev) == 0) {
            bool dscp = strstr(tr, "dscp") != NULL;
            f = ADDF(dscp ? SEV_OK : SEV_WARN, "dscp", ndev,
                     dscp ? NULL
                          : xfmt("roce-rpc marks each class with a DSCP: set the trust mode to "
                                 "dscp (mlnx_qos -i %s --trust dscp)",
                                 ndev),
                     "QoS trust mode of %s: %s", ndev, tr);
            detail_str(f, "trust", tr);
        }
        if (read_linef(tr, sizeof(tr), SYSFS_IB "/%s/tc/%d/traffic_class", dev, port) == 0) {
            f = add(SEV_INFO, "dscp", subj, NULL, "default traffic class of %s: %s", subj, tr);
            detail_str(f, "traffic_class", tr);
        }
    }
    free(g);
}

/* The verbs device of @name, or NULL. */
#ifdef RRPC_DOCTOR_HAVE_VERBS
static struct ibv_device **verbs_list;
static int verbs_n;
static struct ibv_device *verbs_find(const char *name)
{
    for (int i = 0; i < verbs_n; i++)
        if (!strcmp(ibv_get_device_name(verbs_list[i]), name))
            return verbs_list[i];
    return NULL;
}
#endif

static void check_device(const char *dev)
{
    char p[300], s[600], driver[64] = "", parent[IF_NAMESIZE] = "", node_type[64] = "";
    snprintf(p, sizeof(p), SYSFS_IB "/%s", dev);
    read_linef(node_type, sizeof(node_type), "%s/node_type", p);
    snprintf(s, sizeof(s), "%s/device/driver", p);
    link_base(s, driver, sizeof(driver));
    read_linef(parent, sizeof(parent), "%s/parent", p);

    /* Soft-RoCE evidence: rdma_rxe devices are virtual (no bus "device" link, so no driver), carry
     * a "parent" attribute naming their netdev, are named rxe* by convention, and report vendor id
     * 0xffffff through verbs.  Hardware has a driver link (mlx5_core, bnxt_en, irdma, ...). */
    char evidence[256] = "";
    size_t el = 0;
#define EVID(...) (el += (size_t)snprintf(evidence + el, el < sizeof(evidence) ? sizeof(evidence) - el : 0, __VA_ARGS__))
    bool siw = !strcmp(driver, "siw") || is_software_name(dev, "siw");
    int rxe_votes = 0;
    if (!strcmp(driver, "rdma_rxe"))
        rxe_votes += 2, EVID("driver rdma_rxe; ");
    if (is_software_name(dev, "rxe"))
        rxe_votes++, EVID("name rxe*; ");
    if (!driver[0] && parent[0] && !siw)
        rxe_votes++, EVID("virtual device with parent netdev %s; ", parent);

    void *ctx = NULL;
    struct finding *f;
#ifdef RRPC_DOCTOR_HAVE_VERBS
    struct ibv_device *vd = verbs_find(dev);
    int open_errno = 0;
    if (vd && !(ctx = ibv_open_device(vd)))
        open_errno = errno;
    struct ibv_device_attr da;
    if (ctx && ibv_query_device(ctx, &da) == 0 && da.vendor_id == 0xffffff && !siw)
        rxe_votes++, EVID("verbs vendor_id 0xffffff; ");
#endif
#undef EVID
    if (el >= 2 && el < sizeof(evidence))
        evidence[el - 2] = 0;
    bool rxe = rxe_votes > 0 && !siw;

    if (rxe) {
        f = add(SEV_INFO, "device", dev, NULL,
                "%s is Soft-RoCE (rdma_rxe): a software RoCE v2 device%s%s -- fine for development "
                "and tests, but it has no offload, no DCQCN and costs CPU; do not benchmark on it",
                dev, parent[0] ? " on netdev " : "", parent);
    } else if (siw) {
        f = add(SEV_WARN, "device", dev,
                "roce-rpc needs RoCE; for a software device use Soft-RoCE instead: rdma link add "
                "rxe0 type rxe netdev <if>",
                "%s is soft-iWARP (siw): a software iWARP device, not RoCE", dev);
    } else {
        f = add(SEV_OK, "device", dev, NULL, "%s: hardware RDMA device (driver %s, node type %s)",
                dev, driver[0] ? driver : "unknown", node_type[0] ? after_colon(node_type) : "?");
    }
    detail_str(f, "device", dev);
    detail_bool(f, "software", rxe || siw);
    detail_str(f, "kind", rxe ? "soft-roce" : siw ? "soft-iwarp" : "hardware");
    detail_str(f, "driver", driver[0] ? driver : rxe ? "rdma_rxe" : siw ? "siw" : "");
    if (rxe)
        detail_str(f, "evidence", evidence);
    if (parent[0])
        detail_str(f, "parent", parent);
    if (node_type[0])
        detail_str(f, "node_type", after_colon(node_type));
    if (read_linef(s, sizeof(s), "%s/fw_ver", p) == 0 && s[0])
        detail_str(f, "fw_ver", s);

#ifdef RRPC_DOCTOR_HAVE_VERBS
    if (!vd)
        ADDF(SEV_ERROR, "verbs", dev,
             xfmt("install the libibverbs provider for %s (Debian/Ubuntu: apt-get install "
                  "ibverbs-providers; RHEL: dnf install libibverbs) and check ibv_devices",
                  rxe ? "rxe" : driver[0] ? driver : "this driver"),
             "%s is in the kernel but libibverbs does not list it: no user-space provider", dev);
    else if (!ctx)
        ADDF(SEV_ERROR, "verbs", dev,
             xfmt("check the permissions of /dev/infiniband/uverbs* (group rdma, udev rules) "
                  "or run as root"),
             "cannot open %s through libibverbs: %s", dev, strerror(open_errno));
    else
        add(SEV_OK, "verbs", dev, NULL, "%s opens through libibverbs", dev);
#endif

    char **ports;
    int np = 0;
    snprintf(s, sizeof(s), "%s/ports", p);
    np = list_dir(s, &ports);
    if (np <= 0) {
        add(SEV_ERROR, "port", dev, "reload the driver (modprobe -r / modprobe) or re-create the device",
            "%s has no ports in sysfs", dev);
    }
    for (int i = 0; i < np; i++)
        check_port(dev, atoi(ports[i]), rxe, parent, ctx);
    if (np > 0)
        free_list(ports, np);
#ifdef RRPC_DOCTOR_HAVE_VERBS
    if (ctx)
        ibv_close_device(ctx);
#endif
}

/* 1: loaded or in modules.dep, 0: not in modules.dep, -1: cannot tell (no modules.dep). */
static int module_available(const char *mod)
{
    if (existsf("/sys/module/%s", mod))
        return 1;
    struct utsname u;
    if (uname(&u))
        return -1;
    char path[512], line[1024];
    snprintf(path, sizeof(path), "/lib/modules/%s/modules.dep", u.release);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    char needle[128];
    snprintf(needle, sizeof(needle), "/%s.ko", mod);
    bool found = false;
    while (!found && fgets(line, sizeof(line), fp)) {
        char *colon = strchr(line, ':');
        if (colon)
            *colon = 0;
        found = strstr(line, needle) != NULL;
    }
    fclose(fp);
    return found;
}

static int count_devices(void)
{
    char **devs;
    int n = list_dir(SYSFS_IB, &devs);
    if (n > 0)
        free_list(devs, n);
    return n;
}

/* The verbs transport: every device, port, GID and MTU. */
static void check_devices(void)
{
    char **devs;
    int n = list_dir(SYSFS_IB, &devs);
#ifdef RRPC_DOCTOR_HAVE_VERBS
    verbs_list = ibv_get_device_list(&verbs_n);
    if (!verbs_list)
        verbs_n = 0;
#endif
    if (n <= 0) {
        const char *ifn = suggest_netdev();
        int rxe_mod = module_available("rdma_rxe");
        struct utsname u;
        if (uname(&u))
            snprintf(u.release, sizeof(u.release), "?");
        struct finding *f = ADDF(
            SEV_ERROR, "devices", "rdma",
            xfmt("create a Soft-RoCE device: modprobe rdma_rxe && rdma link add rxe0 type rxe "
                 "netdev %s (as root; the rdma tool is in iproute2); with a RoCE NIC, load its "
                 "RDMA driver instead (e.g. modprobe mlx5_ib)%s%s%s; or, if tcp:// is what you "
                 "mean to use, check for that: rrpc-doctor --transport tcp",
                 ifn,
                 rxe_mod == 0 ? ". Note: kernel " : rxe_mod < 0 ? ". Note: no module list for kernel " : "",
                 rxe_mod <= 0 ? u.release : "",
                 rxe_mod == 0 ? " has no rdma_rxe module: install the distribution's full kernel "
                                "(Debian: linux-image-amd64; Ubuntu: linux-modules-extra-$(uname -r))"
                 : rxe_mod < 0 ? " here (a container?): run this on the host or VM that owns the "
                                 "kernel"
                               : ""),
            "no RDMA device found (%s %s): the verbs transport (rdma://) cannot run on this host; "
            "tcp:// needs no device",
            SYSFS_IB, n == 0 ? "is empty" : "does not exist");
        detail_int(f, "devices", 0);
        detail_str(f, "suggested_netdev", ifn);
        detail_str(f, "rdma_rxe_module", rxe_mod > 0 ? "available" : rxe_mod == 0 ? "missing" : "unknown");
    } else {
        struct finding *f = add(SEV_OK, "devices", "rdma", NULL, "%d RDMA device%s found", n,
                                n == 1 ? "" : "s");
        detail_int(f, "devices", n);
        for (int i = 0; i < n; i++)
            check_device(devs[i]);
    }
    if (n > 0)
        free_list(devs, n);
#ifdef RRPC_DOCTOR_HAVE_VERBS
    if (verbs_list)
        ibv_free_device_list(verbs_list);
#else
    add(SEV_INFO, "verbs", "build", NULL,
        "rrpc-doctor was built without libibverbs: active_mtu is not read and the library would "
        "have no verbs transport (install libibverbs-dev librdmacm-dev and reconfigure)");
#endif
}

/* Locked memory: on verbs every registered buffer is pinned; tcp pins nothing. */
static void check_memlock(bool verbs)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl))
        return;
    struct finding *f;
    bool unl = rl.rlim_cur == RLIM_INFINITY;
    unsigned long long mib = unl ? 0 : (unsigned long long)rl.rlim_cur >> 20;
    if (unl || rl.rlim_cur >= (64ull << 20))
        f = add(SEV_OK, "memlock", "limits", NULL, "locked-memory limit: %s%s",
                unl ? "unlimited" : "", unl ? "" : "large enough");
    else if (!verbs)
        f = add(SEV_INFO, "memlock", "limits", NULL,
                "locked-memory limit %llu MiB: fine for tcp, which pins no memory; the verbs "
                "transport would need more (ulimit -l unlimited)",
                mib);
    else if (geteuid() == 0)
        f = add(SEV_INFO, "memlock", "limits", NULL,
                "locked-memory limit %llu MiB, but running as root (CAP_IPC_LOCK) lifts "
                "it",
                mib);
    else
        f = add(SEV_WARN, "memlock", "limits",
                "raise it for the processes that register memory: ulimit -l unlimited, "
                "LimitMEMLOCK=infinity in a systemd unit, or memlock in "
                "/etc/security/limits.conf",
                "locked-memory limit is %llu MiB: registering larger buffers will fail "
                "with ENOMEM",
                mib);
    if (!unl)
        detail_int(f, "memlock_bytes", (long long)rl.rlim_cur);
}

/* Encrypted RoCE (issue #30): what the kernel needs for the ESP states of a host pair
 * (agent/xfrm.h: AES-GCM, transport mode): the XFRM netlink interface, ESP, GCM, and a
 * default RNG for the IVs (without drbg + jitterentropy_rng, every state add fails with
 * "Kernel was unable to initialize cryptographic operations").  Informational: clear-text
 * RoCE needs none of it. */
static bool module_present(const char *m)
{
    char p[128];
    snprintf(p, sizeof(p), "/sys/module/%s", m);
    return access(p, F_OK) == 0;
}

static bool crypto_has(const char *name)
{
    FILE *f = fopen("/proc/crypto", "r");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        char v[128];
        if (sscanf(line, "name : %127s", v) == 1 && !strcmp(v, name))
            found = true;
    }
    fclose(f);
    return found;
}

static void check_ipsec(void)
{
    static const char *const mods[] = {"xfrm_user", "esp4", "gcm", "ghash_generic"};
    char missing[160] = "";
    size_t k = 0;
    for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++)
        if (!module_present(mods[i]))
            k += (size_t)snprintf(missing + k, sizeof(missing) - k, "%s%s", k ? " " : "", mods[i]);
    bool rng = crypto_has("stdrng");
    if (!rng)
        k += (size_t)snprintf(missing + k, sizeof(missing) - k, "%sdrbg jitterentropy_rng",
                              k ? " " : "");
    struct finding *f;
    if (!missing[0]) {
        f = add(SEV_OK, "ipsec", "kernel", NULL,
                "kernel IPsec for encrypted RoCE: XFRM netlink, ESP, GCM and a default RNG "
                "present (rrpc-xfrm can install a host pair)");
    } else {
        char fix[256];
        snprintf(fix, sizeof(fix), "only for encrypted RoCE: modprobe %s", missing);
        f = add(SEV_INFO, "ipsec", "kernel", fix,
                "kernel IPsec for encrypted RoCE not ready (clear-text RoCE does not need it): "
                "missing %s%s",
                missing, rng ? "" : " (no default RNG: every ESP state add would fail)");
    }
    detail_str(f, "ipsec_missing", missing);
}

/* The tcp transport: an address peers can reach, and file descriptors (one socket per
 * connection and class). */
static void check_tcp(void)
{
    int n = count_devices();
    struct finding *f =
        add(SEV_INFO, "devices", "rdma", NULL,
            "%d RDMA device%s (not needed for tcp://; rrpc-doctor without --transport tcp "
            "checks them for rdma://)",
            n > 0 ? n : 0, n == 1 ? "" : "s");
    detail_int(f, "devices", n > 0 ? n : 0);

    int reach = 0;
    char first[IF_NAMESIZE + INET6_ADDRSTRLEN + 4] = "";
    for (int i = 0; i < nifaddrs; i++) {
        struct hostaddr *a = &ifaddrs_v[i];
        char st[32];
        if (!strcmp(a->ifname, "lo") || !strncmp(a->addr, "fe80:", 5))
            continue;
        if (read_linef(st, sizeof(st), SYSFS_NET "/%s/operstate", a->ifname) == 0 &&
            strcmp(st, "up") && strcmp(st, "unknown"))
            continue;
        if (!reach++)
            snprintf(first, sizeof(first), "%s (%s)", a->addr, a->ifname);
    }
    if (reach)
        f = add(SEV_OK, "network", "tcp", NULL,
                "%d address%s other hosts can reach, e.g. %s: listen on tcp://ADDR:PORT", reach,
                reach == 1 ? "" : "es", first);
    else
        f = add(SEV_WARN, "network", "tcp",
                "bring an interface up with an address (ip link set IF up; ip addr add ...) "
                "before serving other hosts",
                "no interface other than loopback is up with an address: only tcp://127.0.0.1 "
                "works on this host");
    detail_int(f, "addresses", reach);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        long long cur = rl.rlim_cur == RLIM_INFINITY ? -1 : (long long)rl.rlim_cur;
        if (cur < 0 || cur >= 4096)
            f = add(SEV_OK, "fds", "limits", NULL, "open-files limit %lld: large enough", cur);
        else
            f = add(SEV_INFO, "fds", "limits",
                    "for many peers raise it: ulimit -n 65536, LimitNOFILE=65536 in a systemd "
                    "unit",
                    "open-files limit %lld: a tcp connection holds one socket per QoS class it "
                    "uses, so a server with many peers may run out",
                    cur);
        detail_int(f, "nofile", cur);
    }
}

/* ---- broker -------------------------------------------------------------------------------- */

struct broker_opts {
    const char *addr, *ca, *cert, *key, *server_name;
    int timeout_ms;
};

static int split_hostport(const char *addr, char *host, size_t hs, char *port, size_t ps)
{
    const char *colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= hs)
            return -1;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || colon == addr || (size_t)(colon - addr) >= hs)
            return -1;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
    }
    if (!colon[1] || strlen(colon + 1) >= ps)
        return -1;
    snprintf(port, ps, "%s", colon + 1);
    return 0;
}

static const char *broker_fix_unreachable =
    "start the broker (systemctl start rrpcd, or rrpcd -c rrpcd.conf), check that its "
    "'listen =' address matches, and that no firewall blocks the port";

/* Connects with a timeout. Returns fd, or -errno (-EAI_* mapped to -EHOSTUNREACH with @err). */
static int tcp_connect(const char *host, const char *port, int timeout_ms, char *err, size_t es)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int r = getaddrinfo(host, port, &hints, &res);
    if (r) {
        snprintf(err, es, "cannot resolve %s: %s", host, gai_strerror(r));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int pr = poll(&pfd, 1, timeout_ms);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && !soerr)
                break;
            snprintf(err, es, "cannot connect to %s:%s: %s", host, port,
                     pr == 0 ? "timed out" : strerror(soerr ? soerr : errno));
        } else {
            snprintf(err, es, "cannot connect to %s:%s: %s", host, port, strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    return fd;
}

static void check_broker(const struct broker_opts *o)
{
    char host[256], port[32], err[512] = "";
    struct finding *f;
    if (split_hostport(o->addr, host, sizeof(host), port, sizeof(port))) {
        add(SEV_ERROR, "broker", o->addr, "pass the broker as HOST:PORT (e.g. 10.0.0.1:7700)",
            "broker address '%s' is not HOST:PORT", o->addr);
        return;
    }
#ifndef RRPC_DOCTOR_HAVE_OPENSSL
    int fd = tcp_connect(host, port, o->timeout_ms, err, sizeof(err));
    if (fd < 0) {
        f = add(SEV_ERROR, "broker", o->addr, broker_fix_unreachable, "broker %s does not answer: %s",
                o->addr, err);
    } else {
        close(fd);
        f = add(SEV_WARN, "broker", o->addr,
                "rebuild rrpc-doctor with OpenSSL (libssl-dev) to check the TLS handshake",
                "broker %s accepts TCP connections; TLS not checked (built without OpenSSL)",
                o->addr);
    }
    detail_str(f, "address", o->addr);
    detail_bool(f, "reachable", fd >= 0);
#else
    int fd = tcp_connect(host, port, o->timeout_ms, err, sizeof(err));
    if (fd < 0) {
        f = add(SEV_ERROR, "broker", o->addr, broker_fix_unreachable, "broker %s does not answer: %s",
                o->addr, err);
        detail_str(f, "address", o->addr);
        detail_bool(f, "reachable", false);
        return;
    }
    SSL_CTX *sc = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    if (!sc)
        goto ssl_fail;
    SSL_CTX_set_min_proto_version(sc, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(sc, TLS1_3_VERSION);
    /* Verify after the handshake, so "reachable but not trusted" can be told apart. */
    SSL_CTX_set_verify(sc, SSL_VERIFY_NONE, NULL);
    if (o->ca) {
        if (SSL_CTX_load_verify_locations(sc, o->ca, NULL) != 1) {
            unsigned long e = ERR_get_error();
            f = ADDF(SEV_ERROR, "broker", o->addr,
                     xfmt("pass the CA certificate that signed rrpcd's certificate "
                          "(the 'ca_file' of rrpc_broker_opts), in PEM"),
                     "cannot load the CA file '%s': %s", o->ca,
                     access(o->ca, R_OK) ? strerror(errno) : ERR_reason_error_string(e));
            close(fd);
            SSL_CTX_free(sc);
            return;
        }
    } else {
        SSL_CTX_set_default_verify_paths(sc);
    }
    if (o->cert) {
        const char *key = o->key ? o->key : o->cert;
        if (SSL_CTX_use_certificate_chain_file(sc, o->cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(sc, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(sc) != 1) {
            unsigned long e = ERR_get_error();
            add(SEV_ERROR, "broker", o->addr, "pass a PEM certificate and its private key",
                "cannot load the client certificate '%s' / key '%s': %s", o->cert, key,
                ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "?");
            close(fd);
            SSL_CTX_free(sc);
            return;
        }
    }
    ssl = SSL_new(sc);
    if (!ssl)
        goto ssl_fail;
    const char *sni = o->server_name ? o->server_name : host;
    struct in6_addr tmp6;
    struct in_addr tmp4;
    bool is_ip = inet_pton(AF_INET, sni, &tmp4) == 1 || inet_pton(AF_INET6, sni, &tmp6) == 1;
    if (!is_ip)
        SSL_set_tlsext_host_name(ssl, sni);
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    if (is_ip)
        X509_VERIFY_PARAM_set1_ip_asc(vp, sni);
    else
        X509_VERIFY_PARAM_set1_host(vp, sni, 0);
    SSL_set_fd(ssl, fd); /* a reset peer's SIGPIPE is ignored in main() */
    ERR_clear_error();
    if (SSL_connect(ssl) != 1) {
        unsigned long e = ERR_get_error();
        const char *why = e ? ERR_reason_error_string(e) : (errno ? strerror(errno) : "closed");
        f = ADDF(SEV_ERROR, "broker", o->addr,
                 xfmt("the port answers but not with TLS 1.3: check that %s is rrpcd (not another "
                      "service) and that it runs with OpenSSL >= 1.1.1",
                      o->addr),
                 "TLS 1.3 handshake with %s failed: %s", o->addr, why ? why : "?");
        detail_str(f, "address", o->addr);
        detail_bool(f, "reachable", true);
        detail_bool(f, "tls", false);
        goto out;
    }
    /* TLS 1.3: a server that rejects our client certificate (or its absence) says so after the
     * handshake.  A short read lets that alert arrive; rrpcd itself sends nothing unasked. */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 300) == 1) {
        char b;
        ERR_clear_error();
        int n = SSL_peek(ssl, &b, 1);
        if (n <= 0 && SSL_get_error(ssl, n) == SSL_ERROR_SSL) {
            unsigned long e = ERR_get_error();
            f = ADDF(SEV_ERROR, "broker", o->addr,
                     xfmt("rrpcd requires a client certificate signed by its CA "
                          "(require_client_cert): pass --cert FILE --key FILE"),
                     "broker %s closed the session after the handshake: %s", o->addr,
                     e ? ERR_reason_error_string(e) : "?");
            detail_str(f, "address", o->addr);
            goto out;
        }
    }
    long vr = SSL_get_verify_result(ssl);
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    X509 *peer = SSL_get1_peer_certificate(ssl);
#else
    X509 *peer = SSL_get_peer_certificate(ssl);
#endif
    char subj[256] = "?";
    if (peer)
        X509_NAME_oneline(X509_get_subject_name(peer), subj, sizeof(subj));
    if (vr == X509_V_OK && peer) {
        f = add(SEV_OK, "broker", o->addr, NULL,
                "broker %s answers: %s, %s, certificate '%s' verified%s%s", o->addr,
                SSL_get_version(ssl), SSL_get_cipher_name(ssl), subj, o->ca ? " against " : "",
                o->ca ? o->ca : " against the system CAs");
    } else {
        const char *why = peer ? X509_verify_cert_error_string(vr) : "no certificate";
        f = ADDF(SEV_ERROR, "broker", o->addr,
                 o->ca ? xfmt("the broker's certificate must be signed by %s and name %s (CN or "
                              "subjectAltName); or pass --server-name NAME for the name it has",
                              o->ca, sni)
                       : xfmt("pass the CA that signed rrpcd's certificate: --ca FILE (the same "
                              "file clients give as ca_file)"),
                 "broker %s answers (%s) but its certificate '%s' is not trusted: %s", o->addr,
                 SSL_get_version(ssl), subj, why);
    }
    detail_str(f, "address", o->addr);
    detail_bool(f, "reachable", true);
    detail_bool(f, "tls", true);
    detail_str(f, "tls_version", SSL_get_version(ssl));
    detail_str(f, "peer_subject", subj);
    detail_bool(f, "cert_verified", vr == X509_V_OK && peer);
    X509_free(peer);
out:
    SSL_free(ssl);
    SSL_CTX_free(sc);
    close(fd);
    return;
ssl_fail:
    add(SEV_ERROR, "broker", o->addr, NULL, "OpenSSL initialisation failed");
    SSL_CTX_free(sc);
    close(fd);
#endif
}

/* ---- output -------------------------------------------------------------------------------- */

static void json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", o);
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

static void counts(int c[4])
{
    c[0] = c[1] = c[2] = c[3] = 0;
    for (size_t i = 0; i < nfindings; i++)
        c[findings[i].sev]++;
}

static void print_json(FILE *o, int exit_code)
{
    int c[4];
    counts(c);
    fputs("{\"tool\":\"rrpc-doctor\",\"version\":1,\"findings\":[", o);
    for (size_t i = 0; i < nfindings; i++) {
        struct finding *f = &findings[i];
        fputs(i ? ",\n  {" : "\n  {", o);
        fprintf(o, "\"severity\":\"%s\",\"check\":", sev_name[f->sev]);
        json_str(o, f->check);
        fputs(",\"subject\":", o);
        json_str(o, f->subject);
        fputs(",\"message\":", o);
        json_str(o, f->message);
        fputs(",\"fix\":", o);
        if (f->fix)
            json_str(o, f->fix);
        else
            fputs("null", o);
        fprintf(o, ",\"details\":{%s}}", f->details);
    }
    fprintf(o,
            "\n],\"summary\":{\"ok\":%d,\"info\":%d,\"warn\":%d,\"error\":%d,\"exit_code\":%d}}\n",
            c[SEV_OK], c[SEV_INFO], c[SEV_WARN], c[SEV_ERROR], exit_code);
}

static void print_text(FILE *o, bool verbose)
{
    int c[4];
    counts(c);
    for (size_t i = 0; i < nfindings; i++) {
        struct finding *f = &findings[i];
        /* GID table entries are many: list them with -v only. */
        if (!verbose && f->sev == SEV_INFO && !strcmp(f->check, "gid"))
            continue;
        fprintf(o, "%s %-8s %s\n", sev_tag[f->sev], f->check, f->message);
        if (f->fix)
            fprintf(o, "        %-8s fix: %s\n", "", f->fix);
    }
    fprintf(o, "rrpc-doctor: %d error%s, %d warning%s, %d ok, %d info\n", c[SEV_ERROR],
            c[SEV_ERROR] == 1 ? "" : "s", c[SEV_WARN], c[SEV_WARN] == 1 ? "" : "s", c[SEV_OK],
            c[SEV_INFO]);
}

static void usage(FILE *o)
{
    fputs("usage: rrpc-doctor [--transport verbs|tcp] [--json] [-v]\n"
          "                   [--broker HOST:PORT [--ca FILE] [--cert FILE [--key FILE]]\n"
          "                   [--server-name NAME] [--timeout MS]] [--dcb-netdev IF]\n"
          "Inspects this host for roce-rpc: RDMA devices and ports and their state, the RoCE v2\n"
          "GID of each IP address, active MTU against the netdev MTU, DCB (PFC, DSCP trust, ETS;\n"
          "with iproute2's dcb) and ECN for the priorities of the classes' DSCPs, Soft-RoCE\n"
          "devices, locked memory, and (with --broker) whether rrpcd answers a TLS 1.3\n"
          "handshake with a certificate it can verify. Each finding comes with its fix.\n"
          "\n"
          "  --transport T        what to check for: verbs (default; rdma://, needs an RDMA\n"
          "                       device) or tcp (tcp://: reachable addresses, open-files limit)\n"
          "  --json               one JSON object: {\"findings\":[...],\"summary\":{...}}\n"
          "  -v, --verbose        also list every GID table entry\n"
          "  --broker HOST:PORT   check the broker (rrpcd) at this address\n"
          "  --ca FILE            CA that signed the broker's certificate (default: system CAs)\n"
          "  --cert FILE, --key FILE  client certificate/key, for a broker that requires one\n"
          "  --server-name NAME   name expected in the broker's certificate (default: HOST)\n"
          "  --timeout MS         connect/handshake timeout (default 3000)\n"
          "  --dcb-netdev IF      also check DCB (PFC, DSCP trust, ETS) of IF, a netdev no\n"
          "                       RDMA port uses (the RoCE ports' netdevs are always checked)\n"
          "  -h, --help           this text\n"
          "  -V, --version        print the version and exit\n"
          "\n"
          "Exit status: 0 no errors, 1 errors found, 2 bad usage.\n",
          o);
}

int main(int argc, char **argv)
{
    enum { O_JSON = 256, O_BROKER, O_CA, O_CERT, O_KEY, O_SNI, O_TIMEOUT, O_TRANSPORT, O_DCB_NETDEV };
    static const struct option lo[] = {
        {"json", no_argument, NULL, O_JSON},
        {"transport", required_argument, NULL, O_TRANSPORT},
        {"verbose", no_argument, NULL, 'v'},
        {"broker", required_argument, NULL, O_BROKER},
        {"ca", required_argument, NULL, O_CA},
        {"cert", required_argument, NULL, O_CERT},
        {"key", required_argument, NULL, O_KEY},
        {"server-name", required_argument, NULL, O_SNI},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"dcb-netdev", required_argument, NULL, O_DCB_NETDEV},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    signal(SIGPIPE, SIG_IGN); /* a broker that resets the TLS session is a finding, not a crash */
    bool json = false, verbose = false, tcp = false;
    struct broker_opts bo = {.timeout_ms = 3000};
    const char *dcb_netdev = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "hvV", lo, NULL)) != -1) {
        switch (c) {
        case O_JSON: json = true; break;
        case 'v': verbose = true; break;
        case O_TRANSPORT:
            if (!strcmp(optarg, "tcp") || !strcmp(optarg, "verbs") || !strcmp(optarg, "rdma")) {
                tcp = !strcmp(optarg, "tcp");
                break;
            }
            fprintf(stderr, "rrpc-doctor: --transport wants verbs or tcp, not '%s'\n", optarg);
            return 2;
        case O_BROKER: bo.addr = optarg; break;
        case O_CA: bo.ca = optarg; break;
        case O_CERT: bo.cert = optarg; break;
        case O_KEY: bo.key = optarg; break;
        case O_SNI: bo.server_name = optarg; break;
        case O_DCB_NETDEV:
            if (!*optarg || strlen(optarg) >= IF_NAMESIZE || strchr(optarg, '/')) {
                fprintf(stderr, "rrpc-doctor: --dcb-netdev wants a network interface name\n");
                return 2;
            }
            dcb_netdev = optarg;
            break;
        case O_TIMEOUT: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > 600000) {
                fprintf(stderr, "rrpc-doctor: --timeout wants milliseconds (1..600000)\n");
                return 2;
            }
            bo.timeout_ms = (int)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        case 'V': printf("rrpc-doctor %s\n", RRPC_DOCTOR_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "rrpc-doctor: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!bo.addr && (bo.ca || bo.cert || bo.key || bo.server_name)) {
        fprintf(stderr, "rrpc-doctor: --ca/--cert/--key/--server-name need --broker HOST:PORT\n");
        return 2;
    }

    load_ifaddrs();
    struct finding *t =
        tcp ? add(SEV_INFO, "transport", "tcp", NULL,
                  "checking for the tcp transport (--transport tcp): tcp:// URIs, no RDMA "
                  "device needed")
            : add(SEV_INFO, "transport", "verbs", NULL,
                  "checking for the verbs transport (RoCE v2, rdma:// URIs; --transport tcp "
                  "checks for tcp:// instead)");
    detail_str(t, "transport", tcp ? "tcp" : "verbs");
    if (tcp)
        check_tcp();
    else {
        check_classes();
        check_devices();
        if (dcb_netdev)
            check_dcb(dcb_netdev);
    }
    check_memlock(!tcp);
    check_ipsec();
    if (bo.addr)
        check_broker(&bo);
    else
        add(SEV_INFO, "broker", "broker", NULL,
            "broker not checked (pass --broker HOST:PORT [--ca FILE] to check rrpcd)");

    int cnt[4];
    counts(cnt);
    int rc = cnt[SEV_ERROR] ? 1 : 0;
    if (json)
        print_json(stdout, rc);
    else
        print_text(stdout, verbose);
    return rc;
}

/* SPDX-License-Identifier: MIT */
/*
 * rrpc-bench: the peers, the tools a user would pick instead of roce-rpc, run
 * in the same run under the same CPU placement as the bench's own tests:
 *
 *   sockperf (else qperf)   blocking TCP ping-pong, 64 B
 *   ucx_perftest over tcp   tag_lat 64 B, tag_bw 1 MiB (UCX_TLS=tcp)
 *   iperf3                  bulk TCP, 1 MiB writes
 *   perftest                ib_send_lat 64 B, ib_write_bw 1 MiB (verbs runs only)
 *
 * Each peer's server and client are child processes on this host (the server
 * pinned like the bench server, the client like the bench client); their CPU
 * time comes from wait4()'s rusage, so it covers the whole process (start-up
 * and warm-up included: a slight overestimate per operation).  A tool that is
 * not installed gets a "skipped" row saying so; it is never left out.
 * Latencies are stored as ROUND TRIPS: the tools that report RTT/2 are
 * doubled, and the row's notes say so.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

struct peer_env g_peer;

/* ---- finding and running tools ------------------------------------------------- */

static bool have_tool(const char *tool)
{
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, tool);
        if (access(p, X_OK) == 0)
            return true;
    }
    return false;
}


/* Starts @argv with @env ("NAME=VALUE", NULL-terminated, may be NULL) added,
 * pinned to @cpu (-1: not pinned), stdout and stderr to @outfd (-1: /dev/null). */
static pid_t spawn(char *const argv[], char *const env[], int cpu, int outfd)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the bench blocks some; tools expect defaults */
    signal(SIGPIPE, SIG_DFL);
    int fd = outfd >= 0 ? outfd : open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    for (size_t i = 0; env && env[i]; i++)
        putenv(env[i]);
    bench_pin(cpu, true); /* quiet: stderr may be the tool's captured output */
    execvp(argv[0], argv);
    _exit(127);
}

static double ru_seconds(const struct rusage *ru)
{
    return (double)rusage_ns(ru) / 1e9;
}

/* Waits for @pid up to @secs, then SIGTERM, then SIGKILL; returns its status. */
static int reap(pid_t pid, double secs, struct rusage *ru)
{
    int st = 0;
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
    for (int phase = 0; phase < 3; phase++) {
        while (now_ns() < end) {
            pid_t r = wait4(pid, &st, WNOHANG, ru);
            if (r == pid)
                return st;
            if (r < 0)
                return -1;
            usleep(10000);
        }
        kill(pid, phase == 0 ? SIGTERM : SIGKILL);
        end = now_ns() + 2000000000ull;
    }
    wait4(pid, &st, 0, ru);
    return st;
}

struct pair_out {
    char text[32768];  /* the client's stdout + stderr */
    char srv_tail[600]; /* the last lines of the server's output */
    char why[400];     /* non-empty: the server never listened, why */
    int status;        /* the client's wait status */
    bool cli_timed_out;
    double timeout_s;
    double cli_cpu_s, srv_cpu_s;
};

/* Whether @pid is @ppid or its child (/proc/PID/stat's fourth field). */
static bool is_or_child_of(long pid, pid_t ppid)
{
    if (pid == ppid)
        return true;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    long pp = -1;
    return p && sscanf(p + 1, " %*c %ld", &pp) == 1 && pp == ppid;
}

/* The inodes of the sockets listening on tcp @port (IPv4 and IPv6), from the
 * kernel's tables; how many went into @ino. */
static int listening_inodes(int port, unsigned long *ino, int max)
{
    int n = 0;
    for (int v6 = 0; v6 < 2; v6++) {
        FILE *f = fopen(v6 ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
        char line[512];
        if (!f)
            continue;
        if (!fgets(line, sizeof(line), f)) { /* the header */
            fclose(f);
            continue;
        }
        while (n < max && fgets(line, sizeof(line), f)) {
            char local[80];
            unsigned st;
            unsigned long inode;
            /* sl local rem st tx:rx tr:when retr uid timeout inode */
            if (sscanf(line, " %*s %79s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) != 3)
                continue;
            const char *colon = strrchr(local, ':');
            if (st == 0x0A && colon && strtol(colon + 1, NULL, 16) == port)
                ino[n++] = inode;
        }
        fclose(f);
    }
    return n;
}

/* Whether @pid (or a child of it) holds a socket listening on tcp @port. */
static bool pid_listens(pid_t pid, int port)
{
    unsigned long ino[16];
    int n = listening_inodes(port, ino, 16);
    if (!n)
        return false;
    DIR *procs = opendir("/proc");
    bool found = false;
    struct dirent *pe;
    while (procs && !found && (pe = readdir(procs))) {
        char *end;
        long p = strtol(pe->d_name, &end, 10);
        if (*end || p <= 0 || !is_or_child_of(p, pid))
            continue;
        char dir[64];
        snprintf(dir, sizeof(dir), "/proc/%ld/fd", p);
        DIR *fds = opendir(dir);
        struct dirent *fe;
        while (fds && !found && (fe = readdir(fds))) {
            char link[400], target[64];
            snprintf(link, sizeof(link), "%s/%s", dir, fe->d_name);
            ssize_t k = readlink(link, target, sizeof(target) - 1);
            if (k <= 0)
                continue;
            target[k] = 0;
            unsigned long i;
            if (sscanf(target, "socket:[%lu]", &i) == 1)
                for (int j = 0; j < n; j++)
                    found |= ino[j] == i;
        }
        if (fds)
            closedir(fds);
    }
    if (procs)
        closedir(procs);
    return found;
}

/* "exit 3", "killed by signal 9 (Killed)" */
static void fmt_status(char *buf, size_t len, int st)
{
    if (WIFEXITED(st))
        snprintf(buf, len, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "wait status %#x", (unsigned)st);
}

/* The last @lines non-empty lines of @t, joined with " | ", into @out. */
static void tail_lines(const char *t, int lines, char *out, size_t len)
{
    size_t n = strlen(t), b = n;
    int got = 0;
    while (b > 0 && got < lines) {
        while (b > 0 && (t[b - 1] == '\n' || t[b - 1] == ' ' || t[b - 1] == '\r'))
            b--;
        if (b == 0)
            break;
        while (b > 0 && t[b - 1] != '\n')
            b--;
        got++;
    }
    size_t o = 0;
    out[0] = 0;
    for (const char *p = t + b; *p && o + 1 < len; p++) {
        if (*p == '\n' || *p == '\r') {
            while (p[1] == '\n' || p[1] == '\r')
                p++;
            if (p[1] && o + 4 < len) {
                memcpy(out + o, " | ", 3);
                o += 3;
            }
            continue;
        }
        out[o++] = *p;
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = 0;
}

/* The tail of what the server wrote to @f (its stdout and stderr). */
static void read_server_tail(FILE *f, char *out, size_t len)
{
    out[0] = 0;
    if (!f)
        return;
    char buf[2048];
    fflush(f);
    long size = lseek(fileno(f), 0, SEEK_END);
    long from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
    ssize_t k = size > 0 ? pread(fileno(f), buf, sizeof(buf) - 1, from) : 0;
    buf[k > 0 ? k : 0] = 0;
    tail_lines(buf, 3, out, len);
}

/* Waits until the server @pid listens on tcp @port, at most --peer-wait
 * seconds.  0 when it does; else -1 and the reason in o->why (the server
 * reaped when it exited, its status in @ret_st). */
static int wait_listen(pid_t pid, int port, const char *tool, struct pair_out *o, int *ret_st,
                       struct rusage *ru)
{
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)(g_opts.peer_wait_s * 1e9);
    for (;;) {
        int st;
        if (wait4(pid, &st, WNOHANG, ru) == pid) {
            char how[96];
            fmt_status(how, sizeof(how), st);
            *ret_st = st;
            snprintf(o->why, sizeof(o->why), "its server (%s) ended (%s) after %.1f s without "
                     "listening on port %d", tool, how, (double)(now_ns() - t0) / 1e9, port);
            return -1;
        }
        if (pid_listens(pid, port))
            return 0;
        if (now_ns() >= end) {
            snprintf(o->why, sizeof(o->why), "its server (%s) did not listen on port %d within "
                     "%.1f s (--peer-wait)", tool, port, g_opts.peer_wait_s);
            return -1;
        }
        usleep(20000);
    }
}

/* One server + client run: the server in the background; the client starts
 * once the server listens on tcp @listen_port (<= 0: the server has no tcp
 * port to watch, as perftest over rdma_cm: the client is retried while it
 * fails fast).  The client's output is captured, the server's tail kept.
 * @srv_exits: the server ends by itself after one client. */
static int run_pair(char *const srv[], char *const cli[], char *const env[], bool srv_exits,
                    int listen_port, double timeout_s, struct pair_out *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = timeout_s;
    FILE *sf = tmpfile();
    pid_t sp = spawn(srv, env, g_peer.cpu_srv, sf ? fileno(sf) : -1);
    if (sp < 0) {
        snprintf(o->why, sizeof(o->why), "cannot start its server: %s", strerror(errno));
        if (sf)
            fclose(sf);
        return -1;
    }
    struct rusage ru_cli = {0}, ru_srv = {0};
    int srv_st = -1; /* -1: not reaped */
    if (listen_port > 0) {
        if (wait_listen(sp, listen_port, srv[0], o, &srv_st, &ru_srv)) {
            if (srv_st == -1)
                reap(sp, 0, &ru_srv); /* still running, not listening */
            read_server_tail(sf, o->srv_tail, sizeof(o->srv_tail));
            fclose(sf);
            return -1;
        }
    } else {
        usleep(300000);
    }
    for (int attempt = 0; attempt < 10; attempt++) {
        int p[2];
        if (pipe(p) < 0)
            break;
        uint64_t t0 = now_ns();
        pid_t cp = spawn(cli, env, g_peer.cpu_cli, p[1]);
        close(p[1]);
        size_t len = 0;
        uint64_t end = t0 + (uint64_t)(timeout_s * 1e9);
        o->cli_timed_out = false;
        for (;;) {
            struct pollfd pf = {.fd = p[0], .events = POLLIN};
            uint64_t t = now_ns();
            if (t >= end) {
                o->cli_timed_out = true;
                break;
            }
            if (poll(&pf, 1, (int)((end - t) / 1000000 + 1)) <= 0)
                continue;
            char tmp[4096];
            ssize_t k = read(p[0], tmp, sizeof(tmp));
            if (k <= 0)
                break;
            size_t c = (size_t)k < sizeof(o->text) - 1 - len ? (size_t)k : sizeof(o->text) - 1 - len;
            memcpy(o->text + len, tmp, c);
            len += c;
        }
        o->text[len] = 0;
        close(p[0]);
        o->status = reap(cp, 1, &ru_cli);
        bool ok = WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0;
        bool fast = now_ns() - t0 < 1500000000ull;
        int st;
        if (ok || !fast || listen_port > 0 || waitpid(sp, &st, WNOHANG) == sp)
            break;
        usleep(300000); /* refused: the server is not listening yet */
    }
    o->cli_cpu_s = ru_seconds(&ru_cli);
    reap(sp, srv_exits ? 3 : 0, &ru_srv);
    o->srv_cpu_s = ru_seconds(&ru_srv);
    read_server_tail(sf, o->srv_tail, sizeof(o->srv_tail));
    if (sf)
        fclose(sf);
    return WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0 && !o->cli_timed_out ? 0 : -1;
}

/* ---- results -------------------------------------------------------------------- */

static struct result *peer_row(const char *tool, const char *test, size_t size, int depth,
                               const char *variant)
{
    return result_add(tool, test, size, depth, variant);
}

static void not_installed(const char *tool, const char *test, size_t size, const char *pkg)
{
    struct result *r = peer_row(tool, test, size, 1, NULL);
    r->skipped = true;
    snprintf(r->error, sizeof(r->error), "%s not installed (apt-get install %s)", tool, pkg);
    note("peer %s: not installed (apt-get install %s)", tool, pkg);
}

/* Why a peer gave no figure: its server never listened, its client failed
 * (status, last lines), or the client ended well but printed no result. */
static void failed(struct result *r, const char *what, const struct pair_out *o)
{
    char cli[400], srv[700] = "";
    tail_lines(o->text, 2, cli, sizeof(cli));
    if (o->srv_tail[0])
        snprintf(srv, sizeof(srv), "; server output: %s", o->srv_tail);
    if (o->why[0]) {
        snprintf(r->error, sizeof(r->error), "%s not run: %s%s", what, o->why,
                 o->srv_tail[0] ? srv : "; the server printed nothing");
    } else if (o->cli_timed_out) {
        snprintf(r->error, sizeof(r->error), "%s timed out after %.0f s: %s%s", what, o->timeout_s,
                 cli[0] ? cli : "(no output)", srv);
    } else if (WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0) {
        snprintf(r->error, sizeof(r->error), "%s ended (exit 0) but printed no result this "
                 "version of rrpc-bench reads: %s", what, cli[0] ? cli : "(no output)");
    } else {
        char how[96];
        fmt_status(how, sizeof(how), o->status);
        if (WIFEXITED(o->status) && WEXITSTATUS(o->status) == 127 && !o->text[0])
            snprintf(how, sizeof(how), "exit 127: could not be started");
        snprintf(r->error, sizeof(r->error), "%s failed (%s): %s%s", what, how,
                 cli[0] ? cli : "(no output)", srv);
    }
    note("peer %s", r->error);
}

static void cpu_per_op(struct result *r, const struct pair_out *o, double ops)
{
    if (ops <= 0)
        return;
    r->has_cpu = true;
    r->cpu_cli_us = o->cli_cpu_s * 1e6 / ops;
    r->cpu_srv_us = o->srv_cpu_s * 1e6 / ops;
}

/* The number after @key in @text (NAN-free: false when absent). */
static bool num_after(const char *text, const char *key, double *ret)
{
    const char *p = strstr(text, key);
    if (!p)
        return false;
    p += strlen(key);
    while (*p == ' ' || *p == '=' || *p == ':')
        p++;
    char *end;
    double v = strtod(p, &end);
    if (end == p)
        return false;
    *ret = v;
    return true;
}

static char *itoa_dup(char *buf, size_t len, long v)
{
    snprintf(buf, len, "%ld", v);
    return buf;
}

/* The next port for a peer's server that nothing holds now: a tcp bind to
 * it on the peers' host succeeds (a port a client socket of this host holds,
 * or a server left over, would make the peer's server fail to listen). */
static int peer_port(void)
{
    for (int tries = 0; tries < 200; tries++) {
        int port = g_peer.port++;
        if (g_peer.port > 32000)
            g_peer.port = 20000;
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
        struct addrinfo *ai = NULL;
        char ps[16];
        snprintf(ps, sizeof(ps), "%d", port);
        if (getaddrinfo(g_peer.host ? g_peer.host : "127.0.0.1", ps, &hints, &ai) != 0)
            return port; /* cannot tell: take it */
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        bool free_ = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
                     bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        if (free_)
            return port;
    }
    return g_peer.port++;
}

/* ---- the tcp peers ---------------------------------------------------------------- */

static void peer_sockperf(void)
{
    const char *h = g_peer.host;
    char port[24], secs[24], *srv[] = {"sockperf", "sr", "--tcp", "-i", (char *)h, "-p", port, NULL};
    itoa_dup(port, sizeof(port), peer_port());
    long s = (long)(g_opts.duration + 0.5);
    itoa_dup(secs, sizeof(secs), s < 1 ? 1 : s);
    char *cli[] = {"sockperf", "pp", "--tcp", "-i", (char *)h, "-p", port, "-m", "64", "-t", secs,
                   NULL};
    progress_begin("peer    sockperf pp    64 B (blocking ping-pong)");
    struct pair_out *o = malloc(sizeof(*o));
    if (!o)
        return;
    int rc = run_pair(srv, cli, NULL, false, atoi(port), g_opts.duration * 4 + 30, o);
    struct result *r = peer_row("sockperf", "pingpong", 64, 1,
                                "sockperf pp --tcp -m 64, blocking; reports RTT/2 (doubled here)");
    double p50, p90, p99, p999, mx, mn, avg, valid_s, valid_n, total_n;
    if (rc || !num_after(o->text, "percentile 50.000", &p50) ||
        !num_after(o->text, "percentile 99.000", &p99)) {
        failed(r, "sockperf pp", o);
    } else {
        r->has_lat = true;
        r->p50 = 2 * p50;
        r->p99 = 2 * p99;
        r->p90 = num_after(o->text, "percentile 90.000", &p90) ? 2 * p90 : 0;
        r->p999 = num_after(o->text, "percentile 99.900", &p999) ? 2 * p999 : 0;
        r->lat_max = num_after(o->text, "<MAX> observation", &mx) ? 2 * mx : 0;
        r->lat_min = num_after(o->text, "<MIN> observation", &mn) ? 2 * mn : 0;
        r->mean = num_after(o->text, "avg-latency", &avg) ? 2 * avg : 0;
        const char *v = strstr(o->text, "[Valid Duration]");
        if (v && num_after(v, "RunTime", &valid_s) && num_after(v, "ReceivedMessages", &valid_n) &&
            valid_s > 0) {
            r->samples = r->ops = (uint64_t)valid_n;
            r->seconds = valid_s;
            r->ops_per_s = valid_n / valid_s;
        }
        const char *t = strstr(o->text, "[Total Run]");
        if (t && num_after(t, "ReceivedMessages", &total_n))
            cpu_per_op(r, o, total_n);
    }
    progress_end(r->error[0] ? "FAILED" : "done");
    free(o);
}

static void peer_qperf(void)
{
    char port[24], secs[24], *srv[] = {"qperf", "--listen_port", port, NULL};
    itoa_dup(port, sizeof(port), peer_port());
    long s = (long)(g_opts.duration + 0.5);
    itoa_dup(secs, sizeof(secs), s < 1 ? 1 : s);
    char *cli[] = {"qperf", (char *)g_peer.host, "--listen_port", port, "-m", "64", "-t", secs,
                   "-v", "tcp_lat", NULL};
    progress_begin("peer    qperf tcp_lat   64 B (blocking ping-pong)");
    struct pair_out *o = malloc(sizeof(*o));
    if (!o)
        return;
    int rc = run_pair(srv, cli, NULL, false, atoi(port), g_opts.duration * 4 + 30, o);
    struct result *r = peer_row("qperf", "pingpong", 64, 1,
                                "qperf -m 64 tcp_lat, blocking; reports RTT/2 (doubled here)");
    double lat, msgs;
    const char *p = strstr(o->text, "latency");
    if (rc || !p || !num_after(p, "latency", &lat)) {
        failed(r, "qperf tcp_lat", o);
    } else {
        /* the unit follows the number: ns, us or ms */
        const char *u = strpbrk(p + 7, "num");
        double scale = u && u[0] == 'n' ? 1e-3 : u && u[0] == 'm' ? 1e3 : 1;
        r->has_lat = true;
        r->p50 = r->mean = 2 * lat * scale; /* qperf gives the mean only */
        snprintf(r->variant + strlen(r->variant), sizeof(r->variant) - strlen(r->variant),
                 "; mean only");
        if (num_after(o->text, "msg_rate", &msgs))
            r->ops_per_s = msgs * 1e3; /* qperf prints K/sec */
        r->samples = 1;
        double run_s = (double)(s < 1 ? 1 : s);
        if (r->ops_per_s > 0)
            cpu_per_op(r, o, r->ops_per_s * run_s);
    }
    progress_end(r->error[0] ? "FAILED" : "done");
    free(o);
}

/* UCX over tcp only, on the loopback where the peers' host is 127.0.0.1. */
static char **ucx_env(void)
{
    static char tls[] = "UCX_TLS=tcp", dev_lo[] = "UCX_NET_DEVICES=lo";
    static char *env[3];
    env[0] = tls;
    env[1] = strcmp(g_peer.host, "127.0.0.1") == 0 ? dev_lo : NULL;
    env[2] = NULL;
    return env;
}

static void peer_ucx(bool bw)
{
    char port[24], iters[24], warm[24], *srv[] = {"ucx_perftest", "-p", port, NULL};
    itoa_dup(port, sizeof(port), peer_port());
    long n = bw ? (long)(g_opts.duration * 1500) : (long)(g_opts.duration * 25000);
    long w = bw ? 50 : 1000;
    itoa_dup(iters, sizeof(iters), n < 100 ? 100 : n);
    itoa_dup(warm, sizeof(warm), w);
    char *cli[] = {"ucx_perftest", (char *)g_peer.host, "-p", port, "-t", bw ? "tag_bw" : "tag_lat",
                   "-s", bw ? "1048576" : "64", "-n", iters, "-w", warm, "-v", NULL};
    progress_begin("peer    ucx_perftest   %s over tcp", bw ? "tag_bw 1 MiB" : "tag_lat 64 B");
    struct pair_out *o = malloc(sizeof(*o));
    if (!o)
        return;
    int rc = run_pair(srv, cli, ucx_env(), true, atoi(port), g_opts.duration * 10 + 60, o);
    struct result *r =
        bw ? peer_row("ucx-tcp", "tag_bw", 1u << 20, 1,
                      "ucx_perftest -t tag_bw -s 1M, UCX_TLS=tcp, spins")
           : peer_row("ucx-tcp", "tag_lat", 64, 1,
                      "ucx_perftest -t tag_lat -s 64, UCX_TLS=tcp, spins; RTT/2 doubled here");
    /* -v: a CSV header "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,
     * overall_bw,avg_mr,overall_mr" and the final row under it. */
    const char *h = strstr(o->text, "iterations,");
    double v[8] = {0};
    int k = 0;
    /* The last line after the header with eight numbers (progress or warning
     * lines may come between). */
    for (const char *row = h ? strchr(h, '\n') : NULL; row; row = strchr(row + 1, '\n')) {
        double t[8];
        const char *p = row + 1;
        int m;
        for (m = 0; m < 8; m++) {
            char *end;
            t[m] = strtod(p, &end);
            if (end == p)
                break;
            p = end;
            if (m < 7 && *p != ',')
                break;
            if (*p == ',')
                p++;
        }
        if (m == 8) {
            memcpy(v, t, sizeof(v));
            k = 8;
        }
    }
    if (rc || k < 8) {
        failed(r, bw ? "ucx_perftest tag_bw" : "ucx_perftest tag_lat", o);
    } else {
        r->ops = (uint64_t)v[0];
        if (bw) {
            r->mib_per_s = v[5]; /* UCX's "MB/s" is 2^20 bytes */
            r->ops_per_s = v[7];
            r->seconds = v[7] > 0 ? v[0] / v[7] : 0;
        } else {
            r->has_lat = true;
            r->samples = (uint64_t)v[0];
            r->p50 = 2 * v[1];
            r->mean = 2 * v[2];
            r->ops_per_s = v[7];
        }
        cpu_per_op(r, o, v[0] + (double)w);
    }
    progress_end(r->error[0] ? "FAILED" : "done");
    free(o);
}

static void peer_iperf3(void)
{
    char port[24], secs[24];
    itoa_dup(port, sizeof(port), peer_port());
    snprintf(secs, sizeof(secs), "%.0f", g_opts.duration < 1 ? 1 : g_opts.duration);
    char *srv[] = {"iperf3", "-s", "-1", "-B", (char *)g_peer.host, "-p", port, NULL};
    char *cli[] = {"iperf3", "-c", (char *)g_peer.host, "-p", port, "-l", "1M", "-t", secs,
                   "-f", "M", NULL};
    progress_begin("peer    iperf3         1 MiB writes, %s s", secs);
    struct pair_out *o = malloc(sizeof(*o));
    if (!o)
        return;
    int rc = run_pair(srv, cli, NULL, true, atoi(port), g_opts.duration * 4 + 30, o);
    struct result *r = peer_row("iperf3", "bulk", 1u << 20, 1, "iperf3 -l 1M, one stream");
    /* "[  5]   0.00-2.00   sec  9.50 GBytes  4862 MBytes/sec   receiver" */
    char *line = strstr(o->text, "receiver");
    bool ok = false;
    if (!rc && line) {
        char *b = line;
        while (b > o->text && b[-1] != '\n')
            b--;
        char *u = strstr(b, "MBytes/sec");
        char *iv = strstr(b, "0.00-");
        if (u && u < line && iv) {
            char *s = u;
            while (s > b && s[-1] == ' ')
                s--;
            while (s > b && s[-1] != ' ')
                s--;
            r->mib_per_s = strtod(s, NULL);
            r->seconds = strtod(iv + 5, NULL);
            ok = r->mib_per_s > 0 && r->seconds > 0;
        }
    }
    if (!ok) {
        failed(r, "iperf3", o);
    } else {
        r->ops_per_s = r->mib_per_s; /* one "operation" = one 1 MiB write */
        r->ops = (uint64_t)(r->mib_per_s * r->seconds);
        cpu_per_op(r, o, r->mib_per_s * r->seconds);
    }
    progress_end(r->error[0] ? "FAILED" : "done");
    free(o);
}

/* ---- perftest (verbs) ---------------------------------------------------------------- */

/* The data row of perftest's output for @size: its columns in @v. */
static int perftest_row(const char *text, size_t size, double *v, int max)
{
    char key[32];
    snprintf(key, sizeof(key), "%zu", size);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        while (*l == ' ')
            l++;
        size_t kl = strlen(key);
        if (strncmp(l, key, kl) || l[kl] != ' ')
            continue;
        int n = 0;
        const char *p = l;
        while (n < max) {
            char *end;
            double x = strtod(p, &end);
            if (end == p)
                break;
            v[n++] = x;
            p = end;
        }
        if (n >= 4)
            return n;
    }
    return 0;
}

static void peer_perftest(bool bw)
{
    const char *tool = bw ? "ib_write_bw" : "ib_send_lat";
    size_t size = bw ? (1u << 20) : 64;
    char port[24], sz[24], iters[24];
    itoa_dup(port, sizeof(port), peer_port());
    snprintf(sz, sizeof(sz), "%zu", size);
    const char *ni = getenv(bw ? "PERFTEST_BW_ITERS" : "PERFTEST_LAT_ITERS");
    snprintf(iters, sizeof(iters), "%s", ni && *ni ? ni : bw ? "200" : "5000");
    char *srv[16], *cli[16];
    int a = 0, b = 0;
    srv[a++] = cli[b++] = (char *)tool;
    srv[a++] = "-d";
    srv[a++] = g_peer.pt_srv_dev;
    cli[b++] = "-d";
    cli[b++] = g_peer.pt_cli_dev;
    if (g_peer.pt_srv_gid[0]) {
        srv[a++] = "-x";
        srv[a++] = g_peer.pt_srv_gid;
        cli[b++] = "-x";
        cli[b++] = g_peer.pt_cli_gid;
    } else {
        srv[a++] = cli[b++] = "-R"; /* one device, rdma_cm picks the GID */
    }
    srv[a++] = cli[b++] = "-F";
    srv[a++] = cli[b++] = "-p";
    srv[a++] = cli[b++] = port;
    srv[a++] = cli[b++] = "-s";
    srv[a++] = cli[b++] = sz;
    srv[a++] = cli[b++] = "-n";
    srv[a++] = cli[b++] = iters;
    cli[b++] = (char *)g_peer.pt_host;
    srv[a] = cli[b] = NULL;
    progress_begin("peer    perftest       %s -s %s", tool, sz);
    struct pair_out *o = malloc(sizeof(*o));
    if (!o)
        return;
    /* with -x perftest exchanges its parameters over tcp on the port; with -R
     * rdma_cm listens there, and no tcp socket shows when it is ready */
    int rc = run_pair(srv, cli, NULL, true, g_peer.pt_srv_gid[0] ? atoi(port) : 0, 300, o);
    struct result *r =
        bw ? peer_row("perftest", "ib_write_bw", size, 1, "ib_write_bw -s 1M, BW average, spins")
           : peer_row("perftest", "ib_send_lat", size, 1,
                      "ib_send_lat -s 64, t_typical; reports RTT/2 (doubled here), spins");
    double v[12];
    int n = rc ? 0 : perftest_row(o->text, size, v, 12);
    double iter = strtod(iters, NULL);
    if (bw && n >= 4 && v[3] > 0) {
        /* #bytes #iterations BW_peak BW_average MsgRate */
        r->mib_per_s = v[3];
        r->ops = (uint64_t)iter;
        r->ops_per_s = v[3]; /* 1 MiB each */
        r->seconds = iter / v[3];
        cpu_per_op(r, o, iter);
    } else if (!bw && n >= 6 && v[4] > 0) {
        /* #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% */
        r->has_lat = true;
        r->samples = r->ops = (uint64_t)iter;
        r->lat_min = 2 * v[2];
        r->lat_max = 2 * v[3];
        r->p50 = 2 * v[4];
        r->mean = 2 * v[5];
        if (n >= 9) {
            r->p99 = 2 * v[7];
            r->p999 = 2 * v[8];
        }
        cpu_per_op(r, o, iter);
    } else {
        failed(r, tool, o);
    }
    progress_end(r->error[0] ? "FAILED" : "done");
    free(o);
}

/* A figure given on the command line (--ref-send-lat / --ref-write-bw): stands
 * in for a perftest run, marked as such. */
static void perftest_given(bool bw)
{
    struct result *r =
        bw ? peer_row("perftest", "ib_write_bw", 1u << 20, 1, "ib_write_bw BW average, given by --ref-write-bw")
           : peer_row("perftest", "ib_send_lat", 64, 1,
                      "ib_send_lat t_typical x 2, given by --ref-send-lat");
    if (bw)
        r->mib_per_s = g_opts.ref_write_bw_mibs;
    else {
        r->has_lat = true;
        r->p50 = 2 * g_opts.ref_send_lat_us;
    }
}

/* ---- entry ------------------------------------------------------------------------- */

void peers_run(enum peer_kind k)
{
    if (g_opts.no_peers || (g_peer.done & (1u << k)))
        return;
    g_peer.done |= 1u << k;
    bool verbs = k == PEER_VERBS_LAT || k == PEER_VERBS_BW;
    if (verbs) {
        bool bw = k == PEER_VERBS_BW;
        if (bw ? g_opts.ref_write_bw_mibs > 0 : g_opts.ref_send_lat_us > 0) {
            perftest_given(bw);
            return;
        }
        const char *tool = bw ? "ib_write_bw" : "ib_send_lat";
        if (!have_tool(tool)) {
            not_installed("perftest", tool, bw ? 1u << 20 : 64, "perftest");
            return;
        }
        if (!g_peer.pt_srv_dev[0]) {
            struct result *r = peer_row("perftest", tool, bw ? 1u << 20 : 64, 1, NULL);
            r->skipped = true;
            snprintf(r->error, sizeof(r->error), "not run: %s", g_peer.why_not_pt);
            note("peer perftest: %s", r->error);
            return;
        }
        peer_perftest(bw);
        return;
    }
    if (g_peer.why_not[0]) {
        static const struct {
            enum peer_kind k;
            const char *tool, *test;
            size_t size;
        } rows[] = {{PEER_TCP_LAT, "sockperf", "pingpong", 64},
                    {PEER_TCP_LAT, "ucx-tcp", "tag_lat", 64},
                    {PEER_TCP_BW, "iperf3", "bulk", 1u << 20},
                    {PEER_TCP_BW, "ucx-tcp", "tag_bw", 1u << 20}};
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            if (rows[i].k != k)
                continue;
            struct result *r = peer_row(rows[i].tool, rows[i].test, rows[i].size, 1, NULL);
            r->skipped = true;
            snprintf(r->error, sizeof(r->error), "not run: %s", g_peer.why_not);
        }
        return;
    }
    if (k == PEER_TCP_LAT) {
        if (have_tool("sockperf"))
            peer_sockperf();
        else if (have_tool("qperf"))
            peer_qperf();
        else
            not_installed("sockperf", "pingpong", 64, "sockperf (or qperf)");
        if (have_tool("ucx_perftest"))
            peer_ucx(false);
        else
            not_installed("ucx-tcp", "tag_lat", 64, "ucx-utils");
    } else {
        if (have_tool("iperf3"))
            peer_iperf3();
        else
            not_installed("iperf3", "bulk", 1u << 20, "iperf3");
        if (have_tool("ucx_perftest"))
            peer_ucx(true);
        else
            not_installed("ucx-tcp", "tag_bw", 1u << 20, "ucx-utils");
    }
}

/* SPDX-License-Identifier: MIT */
/* Helpers of the tests that run the real rrpcd ($RRPCD, set by meson): the
 * group's directory with certificates of scripts/make-dev-certs.sh
 * ($MAKE_CERTS) and rrpcd's configuration file, start and stop one, and open
 * a broker handle with one of those certificates.  Include after cmocka.h. */
#ifndef RRPC_TEST_RRPCD_TEST_H
#define RRPC_TEST_RRPCD_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker_test.h"

/*
 * The directory of a test group: @dir (@len bytes) made from @tmpl (ending in
 * XXXXXX), with the CA and the certificates of rrpcd and of @names (as
 * $MAKE_CERTS takes them, space-separated).  Returns 0, or -1 when $MAKE_CERTS
 * or $RRPCD is not set or the directory cannot be made (the group fails).
 */
static inline int rrpcd_test_dir(char *dir, size_t len, const char *tmpl, const char *names)
{
    const char *mk = getenv("MAKE_CERTS");
    snprintf(dir, len, "%s", tmpl);
    if (!mk || !getenv("RRPCD") || !mkdtemp(dir))
        return -1;
    sh("%s %s %s >/dev/null", mk, dir, names);
    return 0;
}

/* Removes the group's directory @dir; with RRPC_TEST_KEEP set, keeps it and says where. */
static inline void rrpcd_test_dir_remove(const char *dir)
{
    if (getenv("RRPC_TEST_KEEP"))
        fprintf(stderr, "kept %s\n", dir);
    else
        sh("rm -rf %s", dir);
}

/* Writes @dir/rrpcd.conf: the cert, key and ca of rrpcd_test_dir, then @fmt
 * formatted.  Returns 0, or -1 when the file could not be written. */
static inline int rrpcd_test_conf(const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int rrpcd_test_conf(const char *dir, const char *fmt, ...)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/rrpcd.conf", dir);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fprintf(f, "cert = %s/rrpcd.crt\nkey = %s/rrpcd.key\nca = %s/ca.crt\n", dir, dir, dir);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    return fclose(f) ? -1 : 0;
}

/* SIGTERM to rrpcd *@pid, which must exit 0 (under ASan: nothing leaked), or
 * the test fails pointing at its log in @dir.  *@pid becomes -1. */
static inline void rrpcd_stop(pid_t *pid, const char *dir)
{
    int st = 0;
    kill(*pid, SIGTERM);
    assert_int_equal(waitpid(*pid, &st, 0), *pid);
    *pid = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("rrpcd did not exit cleanly on SIGTERM (status 0x%x); see its log in %s", st,
                 dir);
}

/*
 * Starts rrpcd with the configuration file @conf and the settings @set
 * (a NULL-terminated list of "NAME=VALUE", each given as -s; at most 8), its
 * stderr appended to @dir/rrpcd-@name.log and its port written to
 * @dir/port-@name.  Waits for the port (the test fails if rrpcd exits
 * first).  *@ret_pid: the process.  Returns the port.
 */
static inline int rrpcd_spawn(const char *dir, const char *name, const char *conf,
                              const char *const *set, pid_t *ret_pid)
{
    char portfile[300], log[300], pf[320];
    snprintf(portfile, sizeof(portfile), "%s/port-%s", dir, name);
    snprintf(log, sizeof(log), "%s/rrpcd-%s.log", dir, name);
    snprintf(pf, sizeof(pf), "port_file=%s", portfile);
    const char *argv[24] = { "rrpcd", "-c", conf, "-s", pf };
    int n = 5;
    for (int i = 0; set && set[i] && i < 8; i++) {
        argv[n++] = "-s";
        argv[n++] = set[i];
    }
    argv[n] = NULL;
    unlink(portfile);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: cannot start rrpcd %s", name);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(fd, 2);
        execv(getenv("RRPCD"), (char *const *)argv);
        _exit(127);
    }
    *ret_pid = pid;
    return rrpcd_wait_port(pid, portfile, log);
}

/* Opens a handle on @addr as @who (@dir/@who.crt and .key, @dir/ca.crt). */
static inline int broker_open_as(const char *dir, const char *addr, const char *who,
                                 int timeout_ms, rrpc_broker **ret)
{
    char ca[300], cert[300], key[300];
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    snprintf(cert, sizeof(cert), "%s/%s.crt", dir, who);
    snprintf(key, sizeof(key), "%s/%s.key", dir, who);
    rrpc_broker_opts o = { .ca_file = ca, .cert_file = cert, .key_file = key,
                           .timeout_ms = timeout_ms };
    return rrpc_broker_open(addr, &o, ret);
}

/*
 * A server of @service through @b: a thread-mode context with @fn as method
 * "echo", the broker's gate, a listener on tcp://127.0.0.1:0, and the
 * register of that endpoint.  With @wait, a register answered -EAGAIN (an
 * rrpcd on etcd not synchronized yet) is tried again for 30 s.  *@ret_ctx and
 * *@ret_l are the caller's whatever the result; returns the register's.
 */
static inline int test_server_register(rrpc_broker *b, const char *service, rrpc_handler_fn fn,
                                       void *user, bool wait, rrpc_ctx **ret_ctx,
                                       rrpc_listener **ret_l)
{
    assert_int_equal(rrpc_ctx_create(ret_ctx), 0);
    assert_int_equal(rrpc_register(*ret_ctx, "echo", fn, user), 0);
    assert_int_equal(rrpc_broker_gate(b, *ret_ctx, service), 0);
    assert_int_equal(rrpc_ctx_start_thread(*ret_ctx), 0);
    assert_int_equal(rrpc_listen(*ret_ctx, "tcp://127.0.0.1:0", NULL, NULL, ret_l), 0);
    char uri[64];
    snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%d", rrpc_listener_port(*ret_l));
    const char *uris[] = { uri };
    int r;
    int64_t t0 = now_ms();
    while ((r = rrpc_broker_register(b, *ret_ctx, service, uris, 1, 0)) == -EAGAIN && wait &&
           now_ms() - t0 < 30000)
        sleep_ms(50);
    return r;
}

#endif

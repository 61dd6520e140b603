/* SPDX-License-Identifier: MIT */
/* Helpers of the tests that run the real rrpcd ($RRPCD, set by meson): start
 * one, and open a broker handle with a certificate of
 * scripts/make-dev-certs.sh.  Include after cmocka.h. */
#ifndef RRPC_TEST_RRPCD_TEST_H
#define RRPC_TEST_RRPCD_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker_test.h"

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

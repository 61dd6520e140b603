/* SPDX-License-Identifier: MIT */
/*
 * Where the conformance and reliability suites (and rel_server) listen and
 * connect, from the environment:
 *   RRPC_TEST_TRANSPORT   tcp (default) | verbs | inproc
 *   RRPC_TEST_SERVER      the server's address (default 127.0.0.1)
 *   RRPC_TEST_CLIENT_SRC  the client's source address (optional; in the
 *                         Soft-RoCE VM 10.77.0.1 so traffic crosses the veth)
 * inproc has names, not addresses: each listen URI is a fresh name
 * (inproc://test-PID-N), and a connect URI names the last one made (the
 * port, -EOPNOTSUPP from rrpc_listener_port, is ignored).
 */
#ifndef RRPC_TEST_URI_H
#define RRPC_TEST_URI_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline const char *test_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static inline const char *test_transport(void)
{
    return test_env("RRPC_TEST_TRANSPORT", "tcp");
}

static inline const char *test_server_addr(void)
{
    return test_env("RRPC_TEST_SERVER", "127.0.0.1");
}

static inline const char *test_scheme(void)
{
    if (strcmp(test_transport(), "inproc") == 0)
        return "inproc";
    return strcmp(test_transport(), "verbs") == 0 ? "rdma" : "tcp";
}

static inline bool test_is_inproc(void)
{
    return strcmp(test_transport(), "inproc") == 0;
}

/* inproc: the name of the last listen URI made. */
static char test_inproc_name[64];

/* "scheme://server:0" */
static inline void test_listen_uri(char *buf, size_t n)
{
    static unsigned seq;
    if (test_is_inproc()) {
        snprintf(test_inproc_name, sizeof(test_inproc_name), "test-%ld-%u", (long)getpid(),
                 ++seq);
        snprintf(buf, n, "inproc://%s", test_inproc_name);
        return;
    }
    snprintf(buf, n, "%s://%s:0", test_scheme(), test_server_addr());
}

/* "scheme://server:port[?src=client_src]" */
static inline void test_connect_uri(char *buf, size_t n, int port)
{
    if (test_is_inproc()) {
        snprintf(buf, n, "inproc://%s", test_inproc_name);
        return;
    }
    const char *src = test_env("RRPC_TEST_CLIENT_SRC", NULL);
    snprintf(buf, n, "%s://%s:%d%s%s", test_scheme(), test_server_addr(), port, src ? "?src=" : "",
             src ? src : "");
}

#endif

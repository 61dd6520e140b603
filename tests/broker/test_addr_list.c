/* SPDX-License-Identifier: MIT */
/*
 * The broker address list of rrpc_broker_open ("HOST:PORT,HOST:PORT", at
 * most RRPC_BROKER_MAX_ADDRS): every bad entry refused with an error that
 * names it; a good list whose brokers all refuse fails with an error that
 * names each of them.  No rrpcd: the ports have nobody listening.
 *
 * Environment (set by meson): MAKE_CERTS (a CA file to load).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <roce_rpc/broker.h>

#include "broker_test.h"
#include "etcd_test.h" /* etcd_free_port */

static char dir[256], ca[300];

static int open_list(const char *list)
{
    rrpc_broker_opts o = { .ca_file = ca, .timeout_ms = 2000 };
    rrpc_broker *b = NULL;
    int r = rrpc_broker_open(list, &o, &b);
    assert_null(b);
    return r;
}

/* @list is refused with -EINVAL and an error holding each of the NULL-ended @words. */
static void refused(const char *list, ...)
{
    int r = open_list(list);
    const char *why = rrpc_broker_last_error(NULL);
    printf("'%.60s%s': %s\n", list, strlen(list) > 60 ? "..." : "", why);
    assert_int_equal(r, -EINVAL);
    va_list ap;
    va_start(ap, list);
    for (const char *w; (w = va_arg(ap, const char *));)
        if (!strstr(why, w))
            fail_msg("the error for '%s' does not say '%s': %s", list, w, why);
    va_end(ap);
}

static void bad_entries_are_refused_naming_the_entry(void **state)
{
    (void)state;
    refused("", "entry 1 is empty", NULL);
    refused("127.0.0.1:7700,,127.0.0.1:7701", "entry 2 is empty", NULL);
    refused("127.0.0.1:7700,", "entry 2 is empty", NULL);
    refused("127.0.0.1:7700, ", "entry 2 is empty", NULL);
    refused("127.0.0.1:7700,broker-b", "entry 2 'broker-b' is not HOST:PORT", NULL);
    refused("127.0.0.1:0", "entry 1 '127.0.0.1:0'", "1..65535", NULL);
    refused("127.0.0.1:7700,127.0.0.1:70000", "entry 2 '127.0.0.1:70000'", NULL);
    refused("127.0.0.1:7700,[::1:7701", "entry 2 '[::1:7701'", NULL);
    refused(":7700", "entry 1 ':7700'", NULL);
    refused("a:1, b:2,a:1", "entries 1 and 3 are both 'a:1'", NULL);
    refused("tls://a:1,a:1", "entries 1 and 2 are both", NULL);
    char many[400] = "";
    for (int i = 0; i <= RRPC_BROKER_MAX_ADDRS; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sh%d:%d", i ? "," : "", i,
                 7700 + i);
    refused(many, "more than 16 brokers", NULL);
    char longhost[400];
    memset(longhost, 'x', 300);
    snprintf(longhost + 300, sizeof(longhost) - 300, ":1");
    refused(longhost, "entry 1 is too long", NULL);
}

static void a_list_of_brokers_that_all_refuse_names_each_one(void **state)
{
    (void)state;
    /* Blanks around entries are allowed; every one of 16 is tried and named. */
    char list[600] = "", ports[RRPC_BROKER_MAX_ADDRS][24];
    for (int i = 0; i < RRPC_BROKER_MAX_ADDRS; i++) {
        snprintf(ports[i], sizeof(ports[i]), "127.0.0.1:%d", etcd_free_port());
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s %s", i ? "," : "",
                 ports[i]);
    }
    int r = open_list(list);
    const char *why = rrpc_broker_last_error(NULL);
    printf("%s\n", why);
    assert_int_equal(r, -ECONNREFUSED);
    assert_non_null(strstr(why, "none of the 16 brokers answered"));
    for (int i = 0; i < RRPC_BROKER_MAX_ADDRS; i++)
        if (!strstr(why, ports[i]))
            fail_msg("the error does not name broker %d (%s)", i + 1, ports[i]);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/rrpc-addr-list-XXXXXX");
    const char *mk = getenv("MAKE_CERTS");
    if (!mkdtemp(dir) || !mk)
        return -1;
    sh("%s %s >/dev/null", mk, dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sh("rm -rf %s", dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_entries_are_refused_naming_the_entry),
        cmocka_unit_test(a_list_of_brokers_that_all_refuse_names_each_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

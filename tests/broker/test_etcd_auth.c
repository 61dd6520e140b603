/* SPDX-License-Identifier: MIT */
/*
 * etcd's own authentication (etcd_user, etcd_password_file; issue #16)
 * against the real etcd this program starts on free loopback ports, with
 * authentication turned on through etcd's JSON gateway: a root user, and a
 * user "rrpcd" whose role may read and write the prefix /auth/ only.
 * rrpcd's etcd client (daemon/etcd.c) is driven directly, then rrpcd itself
 * registers and looks up through such an etcd.  Skipped when etcd-server
 * is missing.
 *
 * Environment (set by meson): RRPCD, MAKE_CERTS; ETCD (optional).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "rrpcd_test.h"
#include "etcd.h"
#include "etcd_test.h"

static char dir[256];
static char host[64];
static struct etcd_member member = { .pid = -1 };
static char root_token[512];
static pid_t rrpcd_pid = -1;

/* ---- etcd's gateway, as an administrator would use it ------------------------ */

struct body {
    char buf[4096];
    size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t k = size * n;
    if (b->len + k >= sizeof(b->buf))
        k = sizeof(b->buf) - 1 - b->len;
    memcpy(b->buf + b->len, p, k);
    b->len += k;
    b->buf[b->len] = 0;
    return size * n;
}

/* POSTs @json to @path (with root's token once there is one); the HTTP status. */
static long gw(const char *path, const char *json, struct body *out)
{
    CURL *c = curl_easy_init();
    char url[256], auth[600];
    snprintf(url, sizeof(url), "http://%s%s", host, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (root_token[0]) {
        snprintf(auth, sizeof(auth), "Authorization: %s", root_token);
        h = curl_slist_append(h, auth);
    }
    struct body local;
    if (!out)
        out = &local;
    out->len = 0;
    out->buf[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

static void gw_ok(const char *path, const char *json)
{
    struct body b;
    long st = gw(path, json, &b);
    if (st != 200)
        fail_msg("%s %s: HTTP %ld %s", path, json, st, b.buf);
}

/* Turns authentication on: root, and "rrpcd" (password "pw-rrpcd") with
 * read-write on [/auth/, /auth0). */
static void auth_on(void)
{
    gw_ok("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"pw-root\"}");
    gw_ok("/v3/auth/role/add", "{\"name\":\"root\"}");
    gw_ok("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}");
    gw_ok("/v3/auth/enable", "{}");
    struct body b;
    assert_int_equal(gw("/v3/auth/authenticate", "{\"name\":\"root\",\"password\":\"pw-root\"}",
                        &b), 200);
    const char *t = strstr(b.buf, "\"token\":\"");
    assert_non_null(t);
    t += 9;
    size_t n = strcspn(t, "\"");
    assert_true(n > 0 && n < sizeof(root_token));
    memcpy(root_token, t, n);
    root_token[n] = 0;
    gw_ok("/v3/auth/role/add", "{\"name\":\"rrpc\"}");
    /* base64 of "/auth/" and "/auth0" */
    gw_ok("/v3/auth/role/grant", "{\"name\":\"rrpc\",\"perm\":{\"permType\":\"READWRITE\","
                                 "\"key\":\"L2F1dGgv\",\"range_end\":\"L2F1dGgw\"}}");
    gw_ok("/v3/auth/user/add", "{\"name\":\"rrpcd\",\"password\":\"pw-rrpcd\"}");
    gw_ok("/v3/auth/user/grant", "{\"user\":\"rrpcd\",\"role\":\"rrpc\"}");
}

static struct etcd *client_as(const char *user, const char *password)
{
    const char *hosts[] = { host };
    struct etcd_opts o = { .hosts = hosts, .n_hosts = 1, .user = user, .password = password,
                           .timeout_ms = 5000 };
    struct etcd *e;
    assert_int_equal(etcd_open(&e, &o), 0);
    return e;
}

static int group_setup(void **state)
{
    (void)state;
    etcd_bin_or_skip();
    signal(SIGPIPE, SIG_DFL);
    snprintf(dir, sizeof(dir), "/tmp/rrpc-etcd-auth-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(member.dir, sizeof(member.dir), "%s", dir);
    if (etcd_member_start(&member))
        return -1;
    snprintf(host, sizeof(host), "127.0.0.1:%d", member.client_port);
    struct etcd *e = client_as(NULL, NULL);
    int r = -1;
    for (int i = 0; i < 300 && r; i++) { /* ready when it answers; a generous bound */
        int64_t id;
        if ((r = etcd_lease_grant(e, 5, &id)))
            sleep_ms(100);
    }
    etcd_close(e);
    if (r)
        return -1;
    auth_on();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (rrpcd_pid > 0) { /* a failed test left it running */
        kill(rrpcd_pid, SIGKILL);
        waitpid(rrpcd_pid, NULL, 0);
    }
    etcd_member_stop(&member, SIGTERM);
    rrpcd_test_dir_remove(dir);
    return 0;
}

struct seen {
    int n;
};

static int count(void *arg, const char *key, const void *val, size_t len)
{
    (void)key, (void)val, (void)len;
    ((struct seen *)arg)->n++;
    return 0;
}

/* ---- the client ---------------------------------------------------------------- */

static void a_user_reads_and_writes_its_prefix_and_nothing_else(void **state)
{
    (void)state;
    struct etcd *e = client_as("rrpcd", "pw-rrpcd");
    int64_t lease;
    assert_int_equal(etcd_lease_grant(e, 10, &lease), 0);
    assert_int_equal(etcd_put(e, "/auth/reg/1", "v1", 2, lease), 0);
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/auth/", 0, count, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    int r = etcd_put(e, "/other/x", "v", 1, 0);
    assert_int_equal(r, -EPROTO);
    printf("outside its prefix: %s\n", etcd_error(e));
    assert_non_null(strstr(etcd_error(e), "permission denied"));
    assert_int_equal(etcd_lease_revoke(e, lease), 0);
    etcd_close(e);
}

static void a_wrong_password_is_refused_naming_the_user(void **state)
{
    (void)state;
    struct etcd *e = client_as("rrpcd", "not-the-password");
    int r = etcd_put(e, "/auth/x", "v", 1, 0);
    assert_int_equal(r, -EACCES);
    printf("wrong password: %s\n", etcd_error(e));
    assert_non_null(strstr(etcd_error(e), "etcd refused the user 'rrpcd'"));
    assert_non_null(strstr(etcd_error(e), "etcd_password_file"));
    etcd_close(e);
}

static void without_a_user_an_etcd_with_authentication_refuses(void **state)
{
    (void)state;
    struct etcd *e = client_as(NULL, NULL);
    assert_int_equal(etcd_put(e, "/auth/x", "v", 1, 0), -EPROTO);
    printf("no user: %s\n", etcd_error(e));
    assert_non_null(strstr(etcd_error(e), "user name is empty"));
    etcd_close(e);
}

/* Turning authentication off and on again invalidates every token etcd gave
 * (as a simple token's expiry does): the client asks for a new one by itself. */
static void a_token_etcd_forgot_is_asked_for_again(void **state)
{
    (void)state;
    struct etcd *e = client_as("rrpcd", "pw-rrpcd");
    assert_int_equal(etcd_put(e, "/auth/t", "1", 1, 0), 0);
    gw_ok("/v3/auth/disable", "{}");
    char saved[sizeof(root_token)];
    memcpy(saved, root_token, sizeof(saved));
    root_token[0] = 0;
    gw_ok("/v3/auth/enable", "{}");
    struct body b;
    assert_int_equal(gw("/v3/auth/authenticate", "{\"name\":\"root\",\"password\":\"pw-root\"}",
                        &b), 200);
    const char *t = strstr(b.buf, "\"token\":\"") + 9;
    size_t n = strcspn(t, "\"");
    memcpy(root_token, t, n);
    root_token[n] = 0;
    assert_string_not_equal(saved, root_token);
    int r = etcd_put(e, "/auth/t", "2", 1, 0);
    if (r)
        fail_msg("put after the token was invalidated: %d: %s", r, etcd_error(e));
    etcd_close(e);
}

/* ---- rrpcd ------------------------------------------------------------------------ */

static void h_echo(rrpc_request *req, const void *p, size_t len, void *user)
{
    (void)user;
    rrpc_respond(req, p, len);
}

static void rrpcd_registers_and_looks_up_through_an_etcd_with_authentication(void **state)
{
    (void)state;
    const char *mk = getenv("MAKE_CERTS"), *rrpcd = getenv("RRPCD");
    assert_non_null(mk);
    assert_non_null(rrpcd);
    sh("%s %s kv-server kv-client >/dev/null", mk, dir);
    char p[300];
    snprintf(p, sizeof(p), "%s/etcd-password", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "pw-rrpcd\n");
    fclose(f);
    chmod(p, 0600);
    snprintf(p, sizeof(p), "%s/rrpcd.conf", dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f,
            "cert = %s/rrpcd.crt\nkey = %s/rrpcd.key\nca = %s/ca.crt\nticket_key = %s/ticket.pem\n"
            "listen = 127.0.0.1:0\nlog_level = info\n"
            "registry = etcd://%s\netcd_prefix = /auth/rrpc/\n"
            "etcd_user = rrpcd\netcd_password_file = %s/etcd-password\n"
            "allow = register * kv-server\nallow = lookup * kv-server\n",
            dir, dir, dir, dir, host, dir);
    fclose(f);
    char check[700];
    snprintf(check, sizeof(check), "%s -c %s --check >/dev/null", rrpcd, p);
    sh("%s", check); /* --check accepts it (it was refused while not built) */
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", rrpcd_spawn(dir, "auth", p, NULL, &rrpcd_pid));
    pid_t pid = rrpcd_pid;
    rrpc_broker *b;
    assert_int_equal(broker_open_as(dir, addr, "kv-server", 15000, &b), 0);
    rrpc_ctx *ctx;
    rrpc_listener *l;
    /* waits for rrpcd's first view of etcd */
    int r = test_server_register(b, "kv-auth", h_echo, NULL, true, &ctx, &l);
    if (r)
        fail_msg("register through rrpcd on an etcd with authentication: %s: %s (logs in %s)",
                 rrpc_strerror(r), rrpc_broker_last_error(b), dir);
    /* The key is on etcd, under the prefix the user may write. */
    struct etcd *e = client_as("rrpcd", "pw-rrpcd");
    struct seen s = { 0 };
    assert_int_equal(etcd_range_prefix(e, "/auth/rrpc/", 0, count, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    etcd_close(e);
    rrpc_service_info *info = NULL;
    assert_int_equal(rrpc_broker_lookup(b, "kv-auth", &info), 0);
    rrpc_service_info_free(info);
    assert_int_equal(rrpc_broker_unregister(b, "kv-auth"), 0);
    rrpc_listener_close(l);
    rrpc_ctx_destroy(ctx);
    rrpc_broker_close(b);
    kill(pid, SIGTERM);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    rrpcd_pid = -1;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_user_reads_and_writes_its_prefix_and_nothing_else),
        cmocka_unit_test(a_wrong_password_is_refused_naming_the_user),
        cmocka_unit_test(without_a_user_an_etcd_with_authentication_refuses),
        cmocka_unit_test(a_token_etcd_forgot_is_asked_for_again),
        cmocka_unit_test(rrpcd_registers_and_looks_up_through_an_etcd_with_authentication),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

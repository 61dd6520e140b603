/* SPDX-License-Identifier: MIT */
/* The control schema's tables (libroce_rpc/broker/proto.h): names to ids and
 * back, and what the broker client makes of each error code. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <roce_rpc/rrpc.h>

#include "broker/proto.h"

static void test_every_op_name_parses_back_to_its_op(void **state)
{
    (void)state;
    for (int op = 0; op < CTL_OP_COUNT; op++) {
        const char *name = rrpci_ctl_op_name(op);
        assert_string_not_equal(name, "?");
        assert_int_equal(rrpci_ctl_op_parse(name, strlen(name)), op);
        for (int other = 0; other < op; other++)
            assert_string_not_equal(rrpci_ctl_op_name(other), name);
    }
}

static void test_ops_keep_their_wire_names(void **state)
{
    (void)state;
    /* Names are the protocol: rrpcd and old clients depend on them. */
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_HELLO), "hello");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_REGISTER), "register");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_RENEW), "renew");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_UNREGISTER), "unregister");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_LOOKUP), "lookup");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_WATCH), "watch");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_UNWATCH), "unwatch");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_STATUS), "status");
}

static void test_unknown_op_names_are_refused(void **state)
{
    (void)state;
    static const char *const bad[] = { "", "hell", "hello2", "HELLO", "look up", "ok", "?" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(rrpci_ctl_op_parse(bad[i], strlen(bad[i])), -1);
    /* The length counts, not a NUL: "hello" followed by more bytes is not hello. */
    assert_int_equal(rrpci_ctl_op_parse("hellohello", 10), -1);
    assert_int_equal(rrpci_ctl_op_parse("hellohello", 5), CTL_OP_HELLO);
    assert_int_equal(rrpci_ctl_op_parse(NULL, 0), -1);
    assert_string_equal(rrpci_ctl_op_name(-1), "?");
    assert_string_equal(rrpci_ctl_op_name(CTL_OP_COUNT), "?");
}

static void test_every_error_name_parses_back_to_its_code(void **state)
{
    (void)state;
    assert_string_equal(rrpci_ctl_err_name(CTL_OK), "ok");
    for (int e = CTL_OK + 1; e < CTL_ERR_COUNT; e++) {
        const char *name = rrpci_ctl_err_name(e);
        assert_string_not_equal(name, "?");
        assert_int_equal(rrpci_ctl_err_parse(name), e);
    }
    assert_int_equal(rrpci_ctl_err_parse("ok"), -1); /* no error is called ok */
    assert_int_equal(rrpci_ctl_err_parse("nope"), -1);
    assert_string_equal(rrpci_ctl_err_name(CTL_ERR_COUNT), "?");
}

static void test_refusals_map_to_the_codes_the_client_documents(void **state)
{
    (void)state;
    assert_int_equal(rrpci_ctl_err_code("version"), RRPC_E_VERSION);
    assert_int_equal(rrpci_ctl_err_code("unauthenticated"), -EACCES);
    assert_int_equal(rrpci_ctl_err_code("auth_failed"), -EACCES);
    assert_int_equal(rrpci_ctl_err_code("denied"), -EPERM);
    assert_int_equal(rrpci_ctl_err_code("not_found"), -ENOENT);
    assert_int_equal(rrpci_ctl_err_code("busy"), -EAGAIN);
    assert_int_equal(rrpci_ctl_err_code("limit"), -ENOSPC);
    assert_int_equal(rrpci_ctl_err_code("bad_request"), -EPROTO);
    assert_int_equal(rrpci_ctl_err_code("internal"), -EPROTO);
    assert_int_equal(rrpci_ctl_err_code("something_new"), -EPROTO);
    assert_int_equal(rrpci_ctl_err_code("?"), -EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_name_parses_back_to_its_op),
        cmocka_unit_test(test_ops_keep_their_wire_names),
        cmocka_unit_test(test_unknown_op_names_are_refused),
        cmocka_unit_test(test_every_error_name_parses_back_to_its_code),
        cmocka_unit_test(test_refusals_map_to_the_codes_the_client_documents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

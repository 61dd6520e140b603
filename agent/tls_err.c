/* SPDX-License-Identifier: MIT */
/* rrpc-agent (tls_err.h): why a TLS call failed. */
#include <openssl/err.h>

#include "tls_err.h"

const char *ag_tls_err(void)
{
    static _Thread_local char b[200];
    unsigned long e = ERR_get_error();
    if (!e)
        return "connection closed or timed out";
    ERR_error_string_n(e, b, sizeof(b));
    ERR_clear_error();
    return b;
}

/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <roce_rpc/error.h>

/* Separate buffers: a name and a description may be printed together. */
static _Thread_local char unknown_desc[64];
static _Thread_local char unknown_name[32];

RRPC_API const char *rrpc_strerror(int code)
{
    switch (code) {
#define RRPC_ERRNO_DESC_(name, value, desc) \
    case value:                             \
        return desc;
        RRPC_ERRNO_MAP(RRPC_ERRNO_DESC_)
#undef RRPC_ERRNO_DESC_
    default:
        break;
    }
    if (code == 0)
        return "success";
    if (code < 0 && code > -1000)
        return strerror(-code);
    snprintf(unknown_desc, sizeof(unknown_desc), code > 0 ? "application error %d" : "error %d",
             code);
    return unknown_desc;
}

RRPC_API const char *rrpc_err_name(int code)
{
    switch (code) {
#define RRPC_ERRNO_NAME_(name, value, desc) \
    case value:                             \
        return "RRPC_E_" #name;
        RRPC_ERRNO_MAP(RRPC_ERRNO_NAME_)
#undef RRPC_ERRNO_NAME_
    default:
        break;
    }
    if (code == 0)
        return "OK";
    if (code < 0 && code > -1000) {
        const char *n = strerrorname_np(-code);
        if (n)
            return n;
    }
    snprintf(unknown_name, sizeof(unknown_name), "%d", code);
    return unknown_name;
}

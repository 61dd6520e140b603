/* SPDX-License-Identifier: MIT */
/* One meaning for a failed name lookup, in every transport and the broker
 * client: the code that getaddrinfo's result maps to, and its words. */
#ifndef RRPC_UTIL_RESOLVE_H
#define RRPC_UTIL_RESOLVE_H

#include <errno.h>
#include <netdb.h>

#include <roce_rpc/error.h>

/* The library's code for getaddrinfo's failure @eai (@sys_errno: errno after
 * EAI_SYSTEM): RRPC_E_UNKNOWN_HOST when the name does not resolve, -EAGAIN
 * when the resolver could not answer now, else a negated errno. */
static inline int rrpci_resolve_code(int eai, int sys_errno)
{
    switch (eai) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
    case EAI_FAIL:
        return RRPC_E_UNKNOWN_HOST;
    case EAI_AGAIN:
        return -EAGAIN;
    case EAI_MEMORY:
        return -ENOMEM;
    case EAI_SYSTEM:
        return sys_errno > 0 ? -sys_errno : -EIO;
    default:
        return -EINVAL; /* EAI_FAMILY, EAI_SERVICE, EAI_BADFLAGS: a malformed request */
    }
}

/* Words for @eai to follow "cannot resolve X: ". */
static inline const char *rrpci_resolve_why(int eai)
{
    switch (eai) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
    case EAI_FAIL:
        return "unknown host (check the name, or give an IP address)";
    case EAI_AGAIN:
        return "the name server did not answer; try again";
    default:
        return gai_strerror(eai);
    }
}

#endif

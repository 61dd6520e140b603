/* SPDX-License-Identifier: MIT */
/* One meaning for a failed name lookup, in every transport and the broker
 * client: the code that getaddrinfo's result maps to, and its words. */
#ifndef RRPC_UTIL_RESOLVE_H
#define RRPC_UTIL_RESOLVE_H

#include <errno.h>
#include <netdb.h>

#include <roce_rpc/error.h>

/* Whether getaddrinfo's @eai says the name does not resolve. */
static inline int rrpci_eai_unknown(int eai)
{
#ifdef EAI_NODATA
    if (eai == EAI_NODATA)
        return 1;
#endif
    return eai == EAI_NONAME || eai == EAI_FAIL;
}

/* The library's code for getaddrinfo's failure @eai (@sys_errno: errno after
 * EAI_SYSTEM): RRPC_E_UNKNOWN_HOST when the name does not resolve, -EAGAIN
 * when the resolver could not answer now, else a negated errno. */
static inline int rrpci_resolve_code(int eai, int sys_errno)
{
    if (rrpci_eai_unknown(eai))
        return RRPC_E_UNKNOWN_HOST;
    switch (eai) {
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
    if (rrpci_eai_unknown(eai))
        return "unknown host (check the name, or give an IP address)";
    return eai == EAI_AGAIN ? "the name server did not answer; try again" : gai_strerror(eai);
}

#endif

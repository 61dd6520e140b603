/* SPDX-License-Identifier: MIT */
/* Symbol visibility: the library is built with -fvisibility=hidden and
 * exports exactly the functions marked RRPC_API; RRPC_DEPRECATED marks the
 * old names kept for one release. */
#ifndef ROCE_RPC_EXPORT_H
#define ROCE_RPC_EXPORT_H

#if defined(RRPC_BUILDING_LIBRARY) && defined(__GNUC__)
#define RRPC_API __attribute__((visibility("default")))
#else
#define RRPC_API
#endif

/*
 * Marks a function kept under an old name for one release after it was
 * replaced; @msg names the replacement.  Calling it still works (it calls
 * the new function) but warns at compile time (-Wdeprecated-declarations).
 */
#if defined(__GNUC__)
#define RRPC_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define RRPC_DEPRECATED(msg)
#endif

#endif

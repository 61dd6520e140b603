/* SPDX-License-Identifier: MIT */
/* Symbol visibility: the library is built with -fvisibility=hidden and
 * exports exactly the functions marked RRPC_API. */
#ifndef ROCE_RPC_EXPORT_H
#define ROCE_RPC_EXPORT_H

#if defined(RRPC_BUILDING_LIBRARY) && defined(__GNUC__)
#define RRPC_API __attribute__((visibility("default")))
#else
#define RRPC_API
#endif

#endif

/* SPDX-License-Identifier: MIT */
/*
 * msgpack helpers for RPC arguments.
 *
 * Arguments travel as one msgpack array.  A format string names the type of
 * each element, in order:
 *   'i' int64_t            'u' uint64_t           'd' double
 *   'b' bool (int)         's' string (const char *, NUL-terminated)
 *   'y' bytes (const void *, size_t)               'n' nil (no argument)
 * rrpc_pack takes the values; rrpc_unpack takes pointers to them.  Unpacked
 * strings and bytes point into the input buffer (no copy) and are NOT
 * NUL-terminated: 's' takes (const char **, size_t *).
 */
#ifndef ROCE_RPC_PACK_H
#define ROCE_RPC_PACK_H

#include <stddef.h>
#include <roce_rpc/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Packs the values after @fmt as a msgpack array.  On success *ret_buf is
 * malloc'ed and owned by the caller (free() it), *ret_len its length.
 * Errors: -EINVAL (an unknown format character), -ENOMEM.
 */
RRPC_API int rrpc_pack(void **ret_buf, size_t *ret_len, const char *fmt, ...);

/*
 * Unpacks @len bytes at @buf, which must hold exactly one msgpack array of
 * strlen(@fmt) elements of the types named by @fmt.  Errors:
 * RRPC_E_ARGS (not msgpack, trailing bytes, wrong element count, a type
 * mismatch or an integer out of range: @errbuf, when not NULL, says which
 * element and what was found), -EINVAL (an unknown format character).  On
 * error no output pointer is written.
 */
RRPC_API int rrpc_unpack(const void *buf, size_t len, char *errbuf, size_t errlen,
                         const char *fmt, ...);

#ifdef __cplusplus
}
#endif
#endif

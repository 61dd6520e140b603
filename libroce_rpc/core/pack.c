/* SPDX-License-Identifier: MIT */
/* msgpack helpers for RPC arguments (include/roce_rpc/pack.h). */
#include <errno.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roce_rpc/error.h>
#include <roce_rpc/pack.h>

static bool fmt_valid(const char *fmt)
{
    for (const char *f = fmt; *f; f++)
        if (!strchr("iudbsyn", *f))
            return false;
    return true;
}

RRPC_API int rrpc_pack(void **ret_buf, size_t *ret_len, const char *fmt, ...)
{
    if (!ret_buf || !ret_len || !fmt || !fmt_valid(fmt))
        return -EINVAL;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int r = msgpack_pack_array(&pk, strlen(fmt));
    va_list ap;
    va_start(ap, fmt);
    for (const char *f = fmt; *f && r == 0; f++) {
        switch (*f) {
        case 'i':
            r = msgpack_pack_int64(&pk, va_arg(ap, int64_t));
            break;
        case 'u':
            r = msgpack_pack_uint64(&pk, va_arg(ap, uint64_t));
            break;
        case 'd':
            r = msgpack_pack_double(&pk, va_arg(ap, double));
            break;
        case 'b':
            r = va_arg(ap, int) ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            size_t n = s ? strlen(s) : 0;
            r = msgpack_pack_str(&pk, n);
            if (r == 0 && n)
                r = msgpack_pack_str_body(&pk, s, n);
            break;
        }
        case 'y': {
            const void *p = va_arg(ap, const void *);
            size_t n = va_arg(ap, size_t);
            r = msgpack_pack_bin(&pk, n);
            if (r == 0 && n)
                r = msgpack_pack_bin_body(&pk, p, n);
            break;
        }
        case 'n':
            r = msgpack_pack_nil(&pk);
            break;
        }
    }
    va_end(ap);
    if (r != 0) {
        msgpack_sbuffer_destroy(&sb);
        return -ENOMEM;
    }
    *ret_len = sb.size;
    *ret_buf = sb.data ? sb.data : malloc(1);
    return *ret_buf ? 0 : -ENOMEM;
}

static const char *type_name(msgpack_object_type t)
{
    switch (t) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return "unsigned integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "negative integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "string";
    case MSGPACK_OBJECT_BIN: return "bytes";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    default: return "extension";
    }
}

static int args_error(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int args_error(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (errbuf && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return RRPC_E_ARGS;
}

/* Checks element @o against format char @f without writing anything. */
static int check(const msgpack_object *o, char f, size_t idx, char *eb, size_t el)
{
    bool ok;
    switch (f) {
    case 'i':
        ok = o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
             (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX);
        break;
    case 'u': ok = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER; break;
    case 'd':
        ok = o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32;
        break;
    case 'b': ok = o->type == MSGPACK_OBJECT_BOOLEAN; break;
    case 's': ok = o->type == MSGPACK_OBJECT_STR; break;
    case 'y': ok = o->type == MSGPACK_OBJECT_BIN; break;
    default: ok = o->type == MSGPACK_OBJECT_NIL; break;
    }
    if (ok)
        return 0;
    static const char *const want[] = {"i", "int64", "u", "uint64", "d", "double", "b", "bool",
                                       "s", "string", "y", "bytes", "n", "nil"};
    const char *w = "?";
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i += 2)
        if (want[i][0] == f)
            w = want[i + 1];
    return args_error(eb, el, "argument %zu: expected %s, found %s%s", idx, w, type_name(o->type),
                      f == 'i' && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? " above INT64_MAX"
                                                                              : "");
}

/*
 * Untrusted msgpack is walked before msgpack-c sees it (found by tests/fuzz,
 * corpus/unpack/crash-*):
 *  - msgpack-c allocates an array's or map's claimed size before reading the
 *    elements, so 5 bytes claiming 2^32 elements would cost ~100 GB: -1 when
 *    the elements still expected outnumber the bytes left (each takes at
 *    least one), which only truncated data does;
 *  - msgpack-c says "out of memory" for nesting deeper than its stack (32):
 *    -2 for more than MP_MAX_DEPTH open arrays and maps.
 * Anything else is left to msgpack-c.
 */
#define MP_MAX_DEPTH 16
static int precheck(const uint8_t *p, size_t len)
{
    uint64_t left[MP_MAX_DEPTH + 1] = {1}, pending = 1;
    int depth = 0;
    size_t off = 0;
    while (off < len) {
        while (depth > 0 && left[depth] == 0)
            depth--;
        if (left[depth] == 0)
            break;
        left[depth]--;
        pending--;
        uint8_t t = p[off++];
        uint64_t n = 0, skip = 0;
        int lb = 0;
        bool container = false;
        if ((t & 0xf0) == 0x80 || (t & 0xf0) == 0x90) {
            n = (uint64_t)(t & 0x0f) * ((t & 0xf0) == 0x80 ? 2 : 1);
            container = true;
        } else if ((t & 0xe0) == 0xa0) {
            skip = t & 0x1f;
        } else if (t >= 0xc4 && t <= 0xdf) {
            static const uint8_t lbs[] = {1, 2, 4, 1, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 2, 4, 2, 4};
            static const uint8_t skips[] = {0, 0, 0, 1, 1, 1, 4, 8, 1, 2, 4, 8, 1, 2,
                                            4, 8, 2, 3, 5, 9, 17, 0, 0, 0, 0, 0, 0, 0};
            lb = lbs[t - 0xc4];
            skip = skips[t - 0xc4];
            container = t >= 0xdc;
        }
        if (len - off < (size_t)lb)
            return 0;
        uint64_t v = 0;
        for (int i = 0; i < lb; i++)
            v = v << 8 | p[off++];
        if (container) {
            if (lb)
                n = v * (t >= 0xde ? 2 : 1); /* maps: keys and values */
            if (n == 0)
                continue;
            if (depth == MP_MAX_DEPTH)
                return -2;
            left[++depth] = n;
            pending += n;
            if (pending > len - off)
                return -1;
        } else {
            skip += v;
            if (skip > len - off)
                return 0;
            off += (size_t)skip;
        }
    }
    return 0;
}

RRPC_API int rrpc_unpack(const void *buf, size_t len, char *errbuf, size_t errlen,
                         const char *fmt, ...)
{
    if (!fmt || !fmt_valid(fmt) || (!buf && len))
        return -EINVAL;
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 1024))
        return -ENOMEM;
    msgpack_object obj;
    size_t off = 0;
    int r = 0;
    int pre = precheck(buf, len);
    msgpack_unpack_return ur =
        pre ? MSGPACK_UNPACK_PARSE_ERROR
            : msgpack_unpack((const char *)buf, len, &off, &zone, &obj);
    size_t n = strlen(fmt);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        r = -ENOMEM;
    else if (ur != MSGPACK_UNPACK_SUCCESS)
        r = args_error(errbuf, errlen, "%s",
                       pre == -2                        ? "msgpack nested too deep"
                       : ur == MSGPACK_UNPACK_EXTRA_BYTES ? "trailing bytes after the arguments"
                       : ur == MSGPACK_UNPACK_CONTINUE || pre == -1 ? "truncated msgpack data"
                                                                    : "not msgpack data");
    else if (obj.type != MSGPACK_OBJECT_ARRAY)
        r = args_error(errbuf, errlen, "expected an array of %zu arguments, found %s", n,
                       type_name(obj.type));
    else if (obj.via.array.size != n)
        r = args_error(errbuf, errlen, "expected %zu arguments, found %u", n,
                       obj.via.array.size);
    for (size_t i = 0; r == 0 && i < n; i++)
        r = check(&obj.via.array.ptr[i], fmt[i], i, errbuf, errlen);
    if (r == 0) {
        va_list ap;
        va_start(ap, fmt);
        for (size_t i = 0; i < n; i++) {
            const msgpack_object *o = &obj.via.array.ptr[i];
            switch (fmt[i]) {
            case 'i': *va_arg(ap, int64_t *) = o->via.i64; break;
            case 'u': *va_arg(ap, uint64_t *) = o->via.u64; break;
            case 'd': *va_arg(ap, double *) = o->via.f64; break;
            case 'b': *va_arg(ap, int *) = o->via.boolean; break;
            case 's':
                /* never NULL, also for an empty string */
                *va_arg(ap, const char **) = o->via.str.size ? o->via.str.ptr : "";
                *va_arg(ap, size_t *) = o->via.str.size;
                break;
            case 'y':
                *va_arg(ap, const void **) = o->via.bin.size ? o->via.bin.ptr : (const void *)"";
                *va_arg(ap, size_t *) = o->via.bin.size;
                break;
            default: break;
            }
        }
        va_end(ap);
    }
    msgpack_zone_destroy(&zone);
    return r;
}

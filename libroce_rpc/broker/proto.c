/* SPDX-License-Identifier: MIT */
/* The control schema (proto.h): the names of operations and error codes, and
 * the structural checks and packers of its msgpack. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <roce_rpc/rrpc.h>

#include "broker/proto.h"

static const char *const op_names[CTL_OP_COUNT] = {
#define OP_NAME(e, name) [CTL_OP_##e] = name,
    RRPCI_CTL_OPS(OP_NAME)
#undef OP_NAME
};

const char *rrpci_ctl_op_name(int op)
{
    return op >= 0 && op < CTL_OP_COUNT ? op_names[op] : "?";
}

int rrpci_ctl_op_parse(const char *name, size_t len)
{
    for (int op = 0; name && op < CTL_OP_COUNT; op++)
        if (strlen(op_names[op]) == len && !memcmp(op_names[op], name, len))
            return op;
    return -1;
}

static const struct {
    const char *name;
    int code;
} errs[CTL_ERR_COUNT] = {
    [CTL_OK] = { "ok", 0 },
#define ERR_ROW(e, name, code) [CTL_ERR_##e] = { name, code },
    RRPCI_CTL_ERRS(ERR_ROW)
#undef ERR_ROW
};

const char *rrpci_ctl_err_name(int err)
{
    return err >= 0 && err < CTL_ERR_COUNT ? errs[err].name : "?";
}

int rrpci_ctl_err_parse(const char *name)
{
    for (int e = CTL_OK + 1; name && e < CTL_ERR_COUNT; e++)
        if (!strcmp(errs[e].name, name))
            return e;
    return -1;
}

int rrpci_ctl_err_code(const char *name)
{
    int e = rrpci_ctl_err_parse(name);
    return e > 0 ? errs[e].code : -EPROTO;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static int skip(const uint8_t *p, size_t len, size_t *off, int depth, int max_depth)
{
    if (*off >= len)
        return -1;
    uint8_t t = p[(*off)++];
    uint64_t n = 0, need = 0;
    int lenbytes = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 0;
    if ((t & 0xf0) == 0x80) {
        n = (uint64_t)(t & 0x0f) * 2;
        goto container;
    }
    if ((t & 0xf0) == 0x90) {
        n = t & 0x0f;
        goto container;
    }
    if ((t & 0xe0) == 0xa0) {
        need = t & 0x1f;
        goto bytes;
    }
    switch (t) {
    case 0xc4: case 0xd9: lenbytes = 1; break;          /* bin8, str8 */
    case 0xc5: case 0xda: lenbytes = 2; break;          /* bin16, str16 */
    case 0xc6: case 0xdb: lenbytes = 4; break;          /* bin32, str32 */
    case 0xc7: lenbytes = 1; need = 1; break;           /* ext8: + type byte */
    case 0xc8: lenbytes = 2; need = 1; break;
    case 0xc9: lenbytes = 4; need = 1; break;
    case 0xca: need = 4; goto bytes;
    case 0xcb: need = 8; goto bytes;
    case 0xcc: case 0xd0: need = 1; goto bytes;
    case 0xcd: case 0xd1: need = 2; goto bytes;
    case 0xce: case 0xd2: need = 4; goto bytes;
    case 0xcf: case 0xd3: need = 8; goto bytes;
    case 0xd4: need = 2; goto bytes;                    /* fixext 1..16: type + data */
    case 0xd5: need = 3; goto bytes;
    case 0xd6: need = 5; goto bytes;
    case 0xd7: need = 9; goto bytes;
    case 0xd8: need = 17; goto bytes;
    case 0xdc: case 0xdd:                               /* array16/32 */
    case 0xde: case 0xdf: {                             /* map16/32 */
        int k = (t == 0xdc || t == 0xde) ? 2 : 4;
        if (len - *off < (size_t)k)
            return -1;
        n = be(p + *off, k) * (t >= 0xde ? 2 : 1);
        *off += (size_t)k;
        goto container;
    }
    default:
        return -1; /* 0xc1 */
    }
    if (len - *off < (size_t)lenbytes)
        return -1;
    need += be(p + *off, lenbytes);
    *off += (size_t)lenbytes;
bytes:
    if (len - *off < need)
        return -1;
    *off += (size_t)need;
    return 0;
container:
    if (depth >= max_depth || n > len - *off)
        return -1;
    for (uint64_t i = 0; i < n; i++)
        if (skip(p, len, off, depth + 1, max_depth))
            return -1;
    return 0;
}

int rrpci_mp_check(const void *buf, size_t len, int max_depth)
{
    size_t off = 0;
    if (!buf || skip(buf, len, &off, 0, max_depth))
        return -1;
    return off == len ? 0 : -1;
}

const msgpack_object *rrpci_mp_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl &&
            memcmp(k->via.str.ptr, key, kl) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

bool rrpci_mp_uint(const msgpack_object *o, uint64_t *out)
{
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *out = o->via.u64;
    return true;
}

bool rrpci_mp_str(const msgpack_object *o, char *out, size_t outlen)
{
    if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
        o->via.str.size >= outlen)
        return false;
    for (uint32_t i = 0; i < o->via.str.size; i++)
        if ((unsigned char)o->via.str.ptr[i] < 0x20 || o->via.str.ptr[i] == 0x7f)
            return false;
    memcpy(out, o->via.str.ptr, o->via.str.size);
    out[o->via.str.size] = 0;
    return true;
}

void rrpci_mp_text(const msgpack_object *o, char *out, size_t outlen)
{
    if (!outlen)
        return;
    out[0] = 0;
    if (!o || o->type != MSGPACK_OBJECT_STR)
        return;
    size_t n = o->via.str.size < outlen - 1 ? o->via.str.size : outlen - 1;
    const char *nul = memchr(o->via.str.ptr, 0, n);
    if (nul)
        n = (size_t)(nul - o->via.str.ptr);
    memcpy(out, o->via.str.ptr, n);
    out[n] = 0;
}

void rrpci_pk_classes(msgpack_packer *pk, unsigned mask)
{
    uint32_t n = 0;
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++)
        n += !!(mask & (1u << c));
    msgpack_pack_array(pk, n);
    for (int c = RRPC_CLASS_FIRST; c <= RRPC_CLASS_LAST; c++)
        if (mask & (1u << c))
            pk_str(pk, rrpc_class_name(c));
}

long rrpci_mp_classes(const msgpack_object *o)
{
    if (!o || o->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    long mask = 0;
    for (uint32_t j = 0; j < o->via.array.size; j++) {
        char name[32];
        int c;
        if (rrpci_mp_str(&o->via.array.ptr[j], name, sizeof(name)) &&
            (c = rrpc_class_from_name(name)) >= 0)
            mask |= 1L << c;
    }
    return mask;
}

void rrpci_pk_endpoint(msgpack_packer *pk, const struct rrpci_endpoint *e, bool with_classes,
                       unsigned class_mask)
{
    msgpack_pack_map(pk, with_classes ? 4 : 3);
    pk_str(pk, CTL_K_TRANSPORT);
    pk_str(pk, e->transport);
    pk_str(pk, CTL_K_HOST);
    pk_str(pk, e->host);
    pk_str(pk, CTL_K_PORT);
    msgpack_pack_uint32(pk, e->port);
    if (with_classes) {
        pk_str(pk, CTL_K_CLASSES);
        rrpci_pk_classes(pk, class_mask);
    }
}

bool rrpci_mp_endpoint(const msgpack_object *o, struct rrpci_endpoint *e)
{
    uint64_t port;
    if (!rrpci_mp_str(rrpci_mp_get(o, CTL_K_TRANSPORT), e->transport, sizeof(e->transport)) ||
        (strcmp(e->transport, CTL_TRANSPORT_TCP) != 0 &&
         strcmp(e->transport, CTL_TRANSPORT_RDMA) != 0) ||
        !rrpci_mp_str(rrpci_mp_get(o, CTL_K_HOST), e->host, sizeof(e->host)) ||
        !rrpci_mp_uint(rrpci_mp_get(o, CTL_K_PORT), &port) || port == 0 || port > 65535)
        return false;
    e->port = (uint16_t)port;
    return true;
}

/* SPDX-License-Identifier: MIT */
/* The control protocol's framing, shared by rrpcd and the broker client, and
 * a structural check of untrusted msgpack before msgpack-c unpacks it. */
#ifndef RRPCI_BROKER_MPCHECK_H
#define RRPCI_BROKER_MPCHECK_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* docs/broker.md: each frame is a u32 little-endian length (1..CTL_MAX_FRAME)
 * and one msgpack map whose "v" is CTL_VERSION.  Version 2: register and renew
 * answer the ticket keys (signed tickets), no longer a shared secret. */
#define CTL_VERSION 2
#define CTL_MAX_FRAME (1u << 20)

static inline void rrpci_put_le32(uint8_t out[4], uint32_t v)
{
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
    out[3] = (uint8_t)(v >> 24);
}

static inline uint32_t rrpci_get_le32(const uint8_t in[4])
{
    return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

/* Packs the C string @s as a msgpack str. */
static inline void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/*
 * 0 when @buf/@len is exactly one msgpack object, nested at most @max_depth
 * deep, whose arrays and maps claim no more elements than bytes remain
 * (msgpack-c allocates a container's claimed size before reading it).
 * -1 otherwise.
 */
int rrpci_mp_check(const void *buf, size_t len, int max_depth);

/* The value of the string key @key in the map @map, or NULL (also when @map
 * is not a map). */
const msgpack_object *rrpci_mp_get(const msgpack_object *map, const char *key);

/* A non-negative integer into *@out; false for anything else. */
bool rrpci_mp_uint(const msgpack_object *o, uint64_t *out);

/* ---- the control schema's shared pieces (docs/broker.md), for rrpcd and the
 * broker client alike ---------------------------------------------------- */

/* A name (service, principal, host, class, transport): a str of
 * 1..@outlen-1 bytes without NUL or control characters, copied to @out. */
bool rrpci_mp_str(const msgpack_object *o, char *out, size_t outlen);

/* A message (an error's code and words): any str without NUL, possibly
 * empty, cut to @outlen-1 bytes; "" when @o is no str. */
void rrpci_mp_text(const msgpack_object *o, char *out, size_t outlen);

/* An endpoint of a registration or a lookup answer:
 * {"transport": "tcp"|"rdma", "host": HOST, "port": 1..65535[, "classes": [...]]}. */
struct rrpci_endpoint {
    char transport[8];
    char host[256];
    uint16_t port;
};

/* Packs @e with its "classes" (bit 1 << class, public numbers) when
 * @with_classes. */
void rrpci_pk_endpoint(msgpack_packer *pk, const struct rrpci_endpoint *e, bool with_classes,
                       unsigned class_mask);

/* Reads the endpoint map @o into *@e; false when a field is missing or
 * malformed (an unknown transport, port 0 or above 65535). */
bool rrpci_mp_endpoint(const msgpack_object *o, struct rrpci_endpoint *e);

/* Packs the classes of @mask as an array of names; reads such an array back
 * into a mask (names it does not know are skipped; -1 when @o is no array). */
void rrpci_pk_classes(msgpack_packer *pk, unsigned mask);
long rrpci_mp_classes(const msgpack_object *o);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * How a registration appears in lookup answers and watch pushes
 * (docs/broker.md), and how large that makes them: register refuses a
 * registration that would take a lookup answer above the frame limit, and
 * the etcd store sizes the registrations it learns of the same way.
 */
#include <stdint.h>

#include <msgpack.h>

#include "rrpcd.h"

/* What a lookup answer holds besides the instances: the envelope, expiry_ms,
 * the keys, the array header (generously). */
#define LOOKUP_OVERHEAD 256

void answer_pack_endpoints(msgpack_packer *pk, const struct registration *r)
{
    msgpack_pack_array(pk, (uint32_t)r->n_eps);
    for (size_t i = 0; i < r->n_eps; i++)
        rrpci_pk_endpoint(pk, &r->eps[i], true, r->classes);
}

void answer_pack_instance(msgpack_packer *pk, const struct registration *r, const uint8_t *t,
                          size_t tlen)
{
    msgpack_pack_map(pk, r->has_instance ? 3 : 2);
    if (r->has_instance) {
        pk_str(pk, CTL_K_INSTANCE);
        msgpack_pack_bin(pk, sizeof(r->instance));
        msgpack_pack_bin_body(pk, r->instance, sizeof(r->instance));
    }
    pk_str(pk, CTL_K_ENDPOINTS);
    answer_pack_endpoints(pk, r);
    pk_str(pk, CTL_K_TICKET);
    msgpack_pack_bin(pk, tlen);
    msgpack_pack_bin_body(pk, t, tlen);
}

size_t answer_bytes(const struct registration *r)
{
    static const uint8_t longest[RRPC_TICKET_SIGNED_MAX_LEN];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    answer_pack_instance(&pk, r, longest, sizeof(longest));
    size_t n = sb.size;
    msgpack_sbuffer_destroy(&sb);
    return n;
}

/*
 * The instances, plus a copy of the first one's endpoints and ticket for
 * clients that know no "instances" (at most the largest entry), plus the
 * envelope.
 */
bool answer_lookup_fits(const struct service *s, const struct registration *r,
                        size_t *ret_total)
{
    size_t largest = r->answer_bytes, total = r->answer_bytes + LOOKUP_OVERHEAD;
    if (s) {
        total += s->answer_bytes;
        for (const struct registration *o = s->regs; o; o = o->next)
            if (o->answer_bytes > largest)
                largest = o->answer_bytes;
    }
    total += largest;
    *ret_total = total;
    return total <= CTL_MAX_FRAME;
}

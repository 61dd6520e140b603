/* SPDX-License-Identifier: MIT */
/* The region registry: rrpc_mem_reg / rrpc_mem_dereg, the keys the tcp
 * emulation finds a region by, the generation the verbs registration cache
 * tells regions apart with, and tokens (what a peer needs to address a
 * region) with their wire form.  The initiator is in onesided.c, the
 * emulated target in os_target.c. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/core.h"

/*
 * Every region of the process gets a generation of its own, never reused,
 * so that a registration cache keyed by (address, length) cannot take a new
 * region at the address of a freed one for the old one (verbs' cache keys
 * its entries by (addr, len, generation)).  Process-wide and atomic: two
 * contexts register on two threads under two different locks, and a cache
 * that some day serves more than one context must still see them apart.
 */
static _Atomic uint64_t next_generation = 1;

uint64_t rrpci_region_next_generation(void)
{
    return atomic_fetch_add_explicit(&next_generation, 1, memory_order_relaxed);
}

bool rrpci_range_inside(uint64_t base, uint64_t blen, uint64_t addr, uint64_t len)
{
    if (addr < base)
        return false;
    uint64_t off = addr - base;
    return off <= blen && len <= blen - off;
}

RRPC_API int rrpc_mem_reg(rrpc_ctx *ctx, void *addr, size_t len, unsigned access,
                          rrpc_region **ret_region)
{
    if (!ctx || !addr || !len || !ret_region ||
        (access & ~(unsigned)(RRPC_ACCESS_REMOTE_READ | RRPC_ACCESS_REMOTE_WRITE)))
        return rrpci_set_error(ctx, -EINVAL,
                               "rrpc_mem_reg needs memory, a length > 0 and RRPC_ACCESS_* bits");
    rrpc_region *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->ctx = ctx;
    r->addr = addr;
    r->len = len;
    r->access = access;
    r->generation = rrpci_region_next_generation();
    rrpci_list_init(&r->grants);
    rrpci_lock(ctx);
    int rc;
    do {
        uint64_t key = 0;
        if (getrandom(&key, sizeof(key), 0) != sizeof(key)) {
            rc = -errno;
            break;
        }
        rc = key ? rrpci_idmap_put(&ctx->regions, key, &r->node) : -EEXIST;
    } while (rc == -EEXIST);
    rrpci_unlock(ctx);
    if (rc < 0) {
        free(r);
        return rc;
    }
    *ret_region = r;
    return 0;
}

static void region_free(rrpc_region *r)
{
    rrpc_ctx *ctx = r->ctx;
    rrpci_grants_region_gone(r); /* before the transports release what the grants use */
    for (int i = 0; i < RRPCI_NTRANSPORTS; i++)
        if (ctx->tops[i] && ctx->tops[i]->region_release)
            ctx->tops[i]->region_release(ctx, r);
    free(r);
}

RRPC_API void rrpc_mem_dereg(rrpc_region *r)
{
    if (!r)
        return;
    rrpc_ctx *ctx = r->ctx;
    rrpci_lock(ctx);
    rrpci_idmap_del(&ctx->regions, r->node.key);
    region_free(r);
    rrpci_unlock(ctx);
}

void rrpci_regions_fini(rrpc_ctx *ctx)
{
    struct rrpci_idnode *n;
    while ((n = rrpci_idmap_pop(&ctx->regions)))
        region_free(rrpci_container_of(n, rrpc_region, node));
    rrpci_idmap_fini(&ctx->regions);
}

RRPC_API void *rrpc_region_addr(rrpc_region *r)
{
    return r->addr;
}
RRPC_API size_t rrpc_region_len(rrpc_region *r)
{
    return r->len;
}
void *rrpci_region_tpriv(rrpc_region *r)
{
    return r->tpriv;
}
void rrpci_region_set_tpriv(rrpc_region *r, void *p)
{
    r->tpriv = p;
}
void *rrpci_region_addr(rrpc_region *r)
{
    return r->addr;
}
size_t rrpci_region_len(rrpc_region *r)
{
    return r->len;
}
unsigned rrpci_region_access(rrpc_region *r)
{
    return r->access;
}
uint64_t rrpci_region_generation(rrpc_region *r)
{
    return r->generation;
}

RRPC_API int rrpc_region_token(rrpc_region *r, rrpc_conn *c, rrpc_token *t)
{
    if (!r || !c || !t)
        return -EINVAL;
    rrpci_lock(c->ctx);
    int rc = 0;
    memset(t, 0, sizeof(*t));
    t->addr = (uintptr_t)r->addr;
    t->len = r->len;
    t->access = r->access;
    if (rrpci_conn_is_down(c))
        rc = RRPC_E_CLOSED;
    else if (c->ops->region_key)
        rc = c->ops->region_key(c, r, &t->key);
    else
        t->key = r->node.key;
    rrpci_unlock(c->ctx);
    return rc;
}

RRPC_API void rrpc_token_encode(const rrpc_token *t, uint8_t out[RRPC_TOKEN_SIZE])
{
    rrpci_put64(out, t->addr);
    rrpci_put64(out + 8, t->len);
    rrpci_put64(out + 16, t->key);
    rrpci_put32(out + 24, t->access);
    rrpci_put32(out + 28, 0);
}

RRPC_API int rrpc_token_decode(const void *buf, size_t len, rrpc_token *t)
{
    if (!buf || !t || len != RRPC_TOKEN_SIZE)
        return -EINVAL;
    const uint8_t *p = buf;
    t->addr = rrpci_get64(p);
    t->len = rrpci_get64(p + 8);
    t->key = rrpci_get64(p + 16);
    t->access = rrpci_get32(p + 24);
    t->reserved = 0;
    return 0;
}

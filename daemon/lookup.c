/* SPDX-License-Identifier: MIT */
/*
 * lookup: the live instances of a service, in an order that rotates from
 * lookup to lookup, each with a connection ticket issued for the asking
 * principal and bound to that instance.
 */
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "server_int.h"

/* A ticket for @principal to reach the instance @r of @s. */
static int make_ticket(const struct config *cfg, const struct service *s,
                       const struct registration *r, const char *principal, int64_t expiry,
                       uint8_t *t, size_t *tlen)
{
    return rrpc_ticket_issue(cfg->signer, principal, s->name,
                             r->has_instance ? r->instance : NULL, expiry, NULL, t,
                             RRPC_TICKET_SIGNED_MAX_LEN, tlen);
}

/*
 * The answer lists every live registration ("instances", in an order that
 * rotates from lookup to lookup), each with its endpoints and a ticket bound
 * to that instance; "endpoints" and "ticket" repeat the first instance's for
 * clients that know no "instances".  register keeps its size within the
 * frame limit (answer_lookup_fits).
 */
/* The registration of @s after @r (the first for NULL), round the list, skipping those
 * whose etcd write is under way; @s has at least one that is not. */
static struct registration *next_live(const struct service *s, struct registration *r)
{
    do
        r = r && r->next ? r->next : s->regs;
    while (r->etcd_pending);
    return r;
}


void op_lookup(struct conn *c, uint64_t id, const msgpack_object *m)
{
    char service[256];
    if (!rrpci_mp_str(rrpci_mp_get(m, CTL_K_SERVICE), service, sizeof(service))) {
        answer_error(c, id, CTL_ERR_BAD_REQUEST, "lookup needs service");
        return;
    }
    if (!acl_allows(c->srv->cfg, rrpci_ctl_op_name(CTL_OP_LOOKUP), service, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' may not look up '%s'", c->peer, c->principal, service);
        answer_error(c, id, CTL_ERR_DENIED, "the ACL does not let this principal look it up");
        return;
    }
    struct service *s = registry_service(c->srv->reg, service);
    /* Registrations whose etcd write is under way are not answered yet. */
    size_t live = s ? s->n_regs - s->n_pending : 0;
    if (!live) {
        answer_error(c, id, CTL_ERR_NOT_FOUND, "no live registration of this service");
        return;
    }
    /* Rotate: instance k of the list comes first this time. */
    size_t first = c->srv->rotation++ % live;
    struct registration *r0 = next_live(s, NULL);
    for (size_t i = 0; i < first; i++)
        r0 = next_live(s, r0);
    int64_t expiry = wall_ms() + c->srv->cfg->ticket_lifetime_ms;
    uint8_t ticket[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t tlen;
    if (make_ticket(c->srv->cfg, s, r0, c->principal, expiry, ticket, &tlen)) {
        answer_error(c, id, CTL_ERR_INTERNAL, "cannot make a ticket");
        return;
    }
    struct answer a;
    answer_begin(&a, id, true, 4);
    pk_str(&a.pk, CTL_K_ENDPOINTS);
    answer_pack_endpoints(&a.pk, r0);
    pk_str(&a.pk, CTL_K_TICKET);
    msgpack_pack_bin(&a.pk, tlen);
    msgpack_pack_bin_body(&a.pk, ticket, tlen);
    pk_str(&a.pk, CTL_K_EXPIRY_MS);
    msgpack_pack_uint64(&a.pk, (uint64_t)expiry);
    pk_str(&a.pk, CTL_K_INSTANCES);
    msgpack_pack_array(&a.pk, (uint32_t)live);
    struct registration *r = r0;
    for (size_t i = 0; i < live; i++) {
        if (i > 0 && make_ticket(c->srv->cfg, s, r, c->principal, expiry, ticket, &tlen)) {
            msgpack_sbuffer_destroy(&a.sb);
            answer_error(c, id, CTL_ERR_INTERNAL, "cannot make a ticket");
            return;
        }
        answer_pack_instance(&a.pk, r, ticket, tlen);
        r = next_live(s, r);
    }
    answer_end(c, &a);
    metrics_tickets(live);
    LOG(LOG_DEBUG, "%s: '%s' looked up '%s' (%zu instances)", c->peer, c->principal, service,
        live);
}


/* SPDX-License-Identifier: MIT */
/*
 * lookup: the live instances of a service, in an order that rotates from
 * lookup to lookup, each with a connection ticket issued for the asking
 * principal and bound to that instance.
 */
#include <stdio.h>
#include <stdlib.h>
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
 *
 * A registration made with require_esp is listed only when every host of its
 * endpoints has an ESP pair with the client's host (the source address of
 * this session) that both hosts' rrpc-agents report (pairs.c), or is that
 * host itself; none left: denied, naming both addresses.
 */

/* Whether the client of @c may be handed @r; else its host's text in @host. */
static bool esp_allows(struct conn *c, const struct host_addr *client,
                       const struct registration *r, int64_t now, char *host, size_t hostlen)
{
    if (!r->require_esp)
        return true;
    for (size_t i = 0; i < r->n_eps; i++) {
        struct host_addr h;
        if (!host_addr_parse(r->eps[i].host, 0, &h) ||
            (memcmp(&h, client, sizeof(h)) && !pairs_agreed(c->srv->pairs, client, &h, now))) {
            snprintf(host, hostlen, "%s", r->eps[i].host);
            return false;
        }
    }
    return true;
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
    if (live > c->srv->lookup_cap) {
        struct registration **grown = realloc(c->srv->lookup_regs, live * sizeof(*grown));
        if (!grown) {
            answer_error(c, id, CTL_ERR_INTERNAL, "out of memory");
            return;
        }
        c->srv->lookup_regs = grown;
        c->srv->lookup_cap = live;
    }
    struct registration **regs = c->srv->lookup_regs;
    struct host_addr client = {.family = AF_INET};
    if (c->src) {
        client.family = c->src->family;
        memcpy(client.addr, c->src->addr, sizeof(client.addr));
        host_addr_normalize(&client);
    }
    char refused[256] = "";
    size_t n = 0, withheld = 0;
    int64_t now = mono_ms();
    for (struct registration *r = s->regs; r; r = r->next)
        if (!r->etcd_pending) {
            if (esp_allows(c, &client, r, now, refused, sizeof(refused)))
                regs[n++] = r;
            else
                withheld++;
        }
    if (withheld)
        metrics_esp_lookup(withheld, n == 0);
    if (!n) {
        char msg[700], ca[64];
        snprintf(msg, sizeof(msg), "%s requires ESP between the client's host (%s as rrpcd sees "
                 "it) and the server's host (%s): no rrpc-agent reported an agreed pair between "
                 "them; start rrpc-agent on both hosts with --broker", service,
                 host_addr_text(&client, ca, sizeof(ca)), refused);
        LOG(LOG_NOTICE, "%s: '%s' looked up '%s': %s", c->peer, c->principal, service, msg);
        answer_error(c, id, CTL_ERR_DENIED, msg);
        return;
    }
    /* Rotate: instance k of the list comes first this time. */
    size_t first = c->srv->rotation++ % n;
    int64_t expiry = wall_ms() + c->srv->cfg->ticket_lifetime_ms;
    uint8_t ticket[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t tlen;
    if (make_ticket(c->srv->cfg, s, regs[first], c->principal, expiry, ticket, &tlen)) {
        answer_error(c, id, CTL_ERR_INTERNAL, "cannot make a ticket");
        return;
    }
    struct answer a;
    answer_begin(&a, id, true, 4);
    pk_str(&a.pk, CTL_K_ENDPOINTS);
    answer_pack_endpoints(&a.pk, regs[first]);
    pk_str(&a.pk, CTL_K_TICKET);
    msgpack_pack_bin(&a.pk, tlen);
    msgpack_pack_bin_body(&a.pk, ticket, tlen);
    pk_str(&a.pk, CTL_K_EXPIRY_MS);
    msgpack_pack_uint64(&a.pk, (uint64_t)expiry);
    pk_str(&a.pk, CTL_K_INSTANCES);
    msgpack_pack_array(&a.pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        struct registration *r = regs[(first + i) % n];
        if (i > 0 && make_ticket(c->srv->cfg, s, r, c->principal, expiry, ticket, &tlen)) {
            msgpack_sbuffer_destroy(&a.sb);
                answer_error(c, id, CTL_ERR_INTERNAL, "cannot make a ticket");
            return;
        }
        answer_pack_instance(&a.pk, r, ticket, tlen);
    }
    answer_end(c, &a);
    metrics_tickets(n);
    LOG(LOG_DEBUG, "%s: '%s' looked up '%s' (%zu instances%s)", c->peer, c->principal, service,
        n, withheld ? ", some withheld: no ESP pair" : "");
}

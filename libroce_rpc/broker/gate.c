/* SPDX-License-Identifier: MIT */
/*
 * A context's ticket gate (rrpc_broker_gate, and the first step of
 * rrpc_broker_register): a verifier for the service with an instance id of
 * its own, put on the context; the keys come with the registration (lease.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "broker/client_int.h"

void rrpci_reg_free(struct reg *g)
{
    free(g->eps);
    rrpc_ticket_verifier_destroy(g->v);
    free(g);
}

/* The gate's ticket verifier: rrpc_ticket_verify, then the ticket's
 * principal named to the context, so a connection counts against its
 * principal's cap (RRPC_MAX_CONNS_PER_PRINCIPAL) and not its address's. */
static int gate_verify(void *user, const void *ticket, size_t len, char *why, size_t whylen)
{
    struct reg *g = user;
    char principal[256]; /* rrpc_ticket_verify's size */
    int r = rrpc_ticket_verify(g->v, ticket, len, 0, principal, why, whylen);
    /* A principal longer than RRPC_PRINCIPAL_MAX is refused there (-EINVAL):
     * its connections then count against their address, as without names. */
    if (r == 0)
        (void)rrpc_ctx_ticket_principal(g->ctx, principal);
    return r;
}

/* Finds or makes the gate of @ctx for @service; @io held. */
int rrpci_gate_locked(struct rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                       struct reg **ret_g)
{
    for (struct reg *o = b->regs; o; o = o->next) {
        if (o->ctx != ctx)
            continue;
        if (strcmp(o->service, service))
            return rrpci_broker_fail(b, -EEXIST, "this context already serves '%s'", o->service);
        *ret_g = o;
        return 0;
    }
    struct reg *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    snprintf(g->service, sizeof(g->service), "%s", service);
    g->ctx = ctx;
    g->due_ms = INT64_MAX;
    /* A new instance id for every gate: tickets used on another instance,
     * or on this server before a restart, are refused here. */
    uint8_t any = 0;
    while (!any) {
        if (RAND_bytes(g->instance, sizeof(g->instance)) != 1) {
            free(g);
            return rrpci_broker_fail(b, -EIO, "no randomness for the instance id");
        }
        for (size_t i = 0; i < sizeof(g->instance); i++)
            any |= g->instance[i];
    }
    int r = rrpc_ticket_verifier_create(service, b->skew_ms, &g->v);
    if (!r)
        r = rrpc_ticket_verifier_set_instance(g->v, g->instance);
    if (!r)
        rrpci_ticket_verifier_set_rate(g->v, b->ticket_rate);
    if (!r) {
        r = rrpc_ctx_require_ticket(ctx, gate_verify, g);
        if (r)
            rrpci_broker_fail(b, r,
                              "cannot put a ticket gate on the context: %s (call rrpc_broker_gate "
                              "or rrpc_broker_register before rrpc_listen)",
                              rrpc_ctx_last_error(ctx));
    }
    if (r) {
        rrpci_reg_free(g);
        return r;
    }
    g->next = b->regs;
    b->regs = g;
    *ret_g = g;
    return 0;
}

RRPC_API int rrpc_broker_gate(rrpc_broker *b, rrpc_ctx *ctx, const char *service)
{
    if (!b || !ctx || !service || !*service || strlen(service) > 255)
        return -EINVAL;
    struct reg *g;
    pthread_mutex_lock(&b->io);
    int r = rrpci_gate_locked(b, ctx, service, &g);
    pthread_mutex_unlock(&b->io);
    return r;
}


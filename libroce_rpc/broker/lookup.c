/* SPDX-License-Identifier: MIT */
/*
 * Looking a service up (its instances, endpoints and tickets) and connecting
 * to it by name, a fresh ticket for every attempt.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/client_int.h"

RRPC_API void rrpc_service_info_free(rrpc_service_info *info)
{
    if (!info)
        return;
    free(info->endpoints);
    free(info->instances);
    free(info);
}

/* Appends the endpoints in the array @eps (of instance @k) to @info. */
int rrpci_add_endpoints(struct rrpc_broker *b, const char *service, const msgpack_object *eps,
                         size_t k, rrpc_service_info *info)
{
    for (uint32_t i = 0; i < eps->via.array.size; i++) {
        const msgpack_object *e = &eps->via.array.ptr[i];
        struct rrpci_endpoint ep;
        long mask = rrpci_mp_classes(rrpci_mp_get(e, CTL_K_CLASSES));
        if (!rrpci_mp_endpoint(e, &ep) || mask < 0)
            return rrpci_broker_fail(b, -EPROTO,
                                     "rrpcd's answer to lookup '%s': an endpoint of instance %zu "
                                     "is malformed",
                                     service, k);
        rrpc_service_endpoint *out = &info->endpoints[info->n_endpoints++];
        snprintf(out->uri, sizeof(out->uri),
                 strchr(ep.host, ':') ? "%s://[%s]:%u" : "%s://%s:%u", ep.transport, ep.host,
                 (unsigned)ep.port);
        out->instance = k;
        out->class_mask = (unsigned)mask;
    }
    return 0;
}

static bool ticket_ok(const msgpack_object *t)
{
    return t && t->type == MSGPACK_OBJECT_BIN && t->via.bin.size > 0 &&
           t->via.bin.size <= RRPC_TICKET_SIGNED_MAX_LEN;
}

bool rrpci_endpoints_ok(const msgpack_object *eps)
{
    return eps && eps->type == MSGPACK_OBJECT_ARRAY && eps->via.array.size > 0 &&
           eps->via.array.size <= CTL_MAX_ENDPOINTS;
}

/*
 * The answer of lookup: "instances" (each with its endpoints and ticket), or
 * from an rrpcd that knows none, "endpoints" and "ticket" as one instance
 * without an id.
 */
static int parse_lookup(struct rrpc_broker *b, const char *service, const msgpack_object *m,
                        rrpc_service_info *info)
{
    const msgpack_object *eps = rrpci_mp_get(m, CTL_K_ENDPOINTS);
    const msgpack_object *t = rrpci_mp_get(m, CTL_K_TICKET);
    const msgpack_object *exp = rrpci_mp_get(m, CTL_K_EXPIRY_MS);
    const msgpack_object *ins = rrpci_mp_get(m, CTL_K_INSTANCES);
    if (!exp || exp->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        (ins && (ins->type != MSGPACK_OBJECT_ARRAY || ins->via.array.size == 0 ||
                 ins->via.array.size > 65536)) ||
        (!ins && (!rrpci_endpoints_ok(eps) || !ticket_ok(t))))
        return rrpci_broker_fail(b, -EPROTO, "rrpcd's answer to lookup '%s' is malformed", service);
    size_t n_ins = ins ? ins->via.array.size : 1, n_eps = 0;
    for (size_t k = 0; k < n_ins; k++) {
        const msgpack_object *in = ins ? &ins->via.array.ptr[k] : NULL;
        const msgpack_object *e = in ? rrpci_mp_get(in, CTL_K_ENDPOINTS) : eps;
        const msgpack_object *id = in ? rrpci_mp_get(in, CTL_K_INSTANCE) : NULL;
        if (!rrpci_endpoints_ok(e) || (in && !ticket_ok(rrpci_mp_get(in, CTL_K_TICKET))) ||
            (id && (id->type != MSGPACK_OBJECT_BIN ||
                    id->via.bin.size != RRPC_TICKET_INSTANCE_LEN)))
            return rrpci_broker_fail(
                b, -EPROTO, "rrpcd's answer to lookup '%s': instance %zu is malformed", service, k);
        n_eps += e->via.array.size;
    }
    info->instances = calloc(n_ins, sizeof(*info->instances));
    info->endpoints = calloc(n_eps, sizeof(*info->endpoints));
    if (!info->instances || !info->endpoints)
        return -ENOMEM;
    for (size_t k = 0; k < n_ins; k++) {
        const msgpack_object *in = ins ? &ins->via.array.ptr[k] : NULL;
        const msgpack_object *id = in ? rrpci_mp_get(in, CTL_K_INSTANCE) : NULL;
        const msgpack_object *tk = in ? rrpci_mp_get(in, CTL_K_TICKET) : t;
        rrpc_service_instance *out = &info->instances[info->n_instances++];
        if (id)
            memcpy(out->id, id->via.bin.ptr, RRPC_TICKET_INSTANCE_LEN);
        /* Presented with this handle's identity, which the server checks
         * against the principal rrpcd signed into the ticket. */
        if (rrpc_ticket_present(tk->via.bin.ptr, tk->via.bin.size, b->principal, out->ticket,
                                sizeof(out->ticket), &out->ticket_len))
            return rrpci_broker_fail(
                b, -EPROTO,
                "rrpcd's answer to lookup '%s': the ticket of instance "
                "%zu is not a version 3 ticket (an rrpcd older than this library?)",
                service, k);
        int r =
            rrpci_add_endpoints(b, service, in ? rrpci_mp_get(in, CTL_K_ENDPOINTS) : eps, k, info);
        if (r)
            return r;
    }
    memcpy(info->ticket, info->instances[0].ticket, info->instances[0].ticket_len);
    info->ticket_len = info->instances[0].ticket_len;
    info->ticket_expiry_ms = (int64_t)exp->via.u64;
    return 0;
}

RRPC_API int rrpc_broker_lookup(rrpc_broker *b, const char *service,
                                rrpc_service_info **ret_info)
{
    if (!b || !service || !*service || strlen(service) > 255 || !ret_info)
        return -EINVAL;
    struct req q;
    struct reply u;
    rrpci_reply_init(&u);
    pthread_mutex_lock(&b->io);
    rrpci_req_start(b, &q, CTL_OP_LOOKUP, 1);
    pk_str(&q.pk, CTL_K_SERVICE);
    pk_str(&q.pk, service);
    int r = rrpci_roundtrip(b, &q, &u);
    pthread_mutex_unlock(&b->io);
    rrpci_req_free(&q);
    rrpc_service_info *info = NULL;
    if (!r) {
        info = calloc(1, sizeof(*info));
        r = info ? parse_lookup(b, service, &u.u.data, info) : -ENOMEM;
    }
    rrpci_reply_destroy(&u);
    if (r) {
        rrpc_service_info_free(info);
        return r;
    }
    *ret_info = info;
    return 0;
}

/* A fresh ticket for the instance @inst of @service (a server that saw the
 * previous one would refuse it as replayed); -ENOENT when it is gone. */
static int fresh_ticket(rrpc_broker *b, const char *service, rrpc_service_instance *inst)
{
    rrpc_service_info *again = NULL;
    int r = rrpc_broker_lookup(b, service, &again);
    if (r)
        return r;
    r = -ENOENT;
    for (size_t k = 0; k < again->n_instances && r; k++)
        if (!memcmp(again->instances[k].id, inst->id, sizeof(inst->id))) {
            memcpy(inst->ticket, again->instances[k].ticket, again->instances[k].ticket_len);
            inst->ticket_len = again->instances[k].ticket_len;
            r = 0;
        }
    rrpc_service_info_free(again);
    if (r)
        rrpci_broker_fail(b, r, "an instance of '%s' left the broker meanwhile", service);
    return r;
}

RRPC_API int rrpc_connect_service(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                                  int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                  rrpc_conn **ret_conn)
{
    if (!ctx || !b || !ret_conn || timeout_ms <= 0)
        return -EINVAL;
    rrpc_service_info *info = NULL;
    int r = rrpc_broker_lookup(b, service, &info);
    if (r)
        return r;
    bool *presented = calloc(info->n_instances, sizeof(bool));
    if (!presented) {
        rrpc_service_info_free(info);
        return -ENOMEM;
    }
    for (size_t i = 0; i < info->n_endpoints; i++) {
        /* Every attempt presents a ticket of the endpoint's instance that no
         * server has seen yet. */
        rrpc_service_instance *inst = &info->instances[info->endpoints[i].instance];
        if (presented[info->endpoints[i].instance]) {
            r = fresh_ticket(b, service, inst);
            if (r == -ENOENT)
                continue; /* that server left; try the next endpoint */
            if (r)
                break;
        }
        presented[info->endpoints[i].instance] = true;
        r = rrpc_connect_ticket(ctx, info->endpoints[i].uri, inst->ticket, inst->ticket_len,
                                timeout_ms, fn, user, ret_conn);
        if (!r)
            break;
        rrpci_broker_fail(b, r, "connecting to '%s' at %s: %s (%s)", service,
                          info->endpoints[i].uri, rrpc_strerror(r), rrpc_ctx_last_error(ctx));
    }
    free(presented);
    rrpc_service_info_free(info);
    return r;
}


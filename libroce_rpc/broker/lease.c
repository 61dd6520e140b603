/* SPDX-License-Identifier: MIT */
/*
 * Registrations and their leases: register, renew and unregister, and a lease
 * thread per handle that renews registrations and registers again when
 * rrpcd forgot them (restart, expiry), with a backoff when it cannot.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/client_int.h"

#define LEASE_MAX_MS 86400000 /* the longest lease an answer may give: a day */

int rrpci_send_unregister(struct rrpc_broker *b, uint64_t id)
{
    struct req q;
    rrpci_req_start(b, &q, CTL_OP_UNREGISTER, 1);
    pk_str(&q.pk, CTL_K_REG);
    msgpack_pack_uint64(&q.pk, id);
    struct reply u;
    rrpci_reply_init(&u);
    int r = rrpci_roundtrip(b, &q, &u);
    rrpci_reply_destroy(&u);
    rrpci_req_free(&q);
    return r;
}

/* ---- registration and leases ---------------------------------------------- */

/*
 * Takes the ticket keys of rrpcd's answer @m to @op (register or renew) into
 * @g's verifier: exactly those are accepted from now on.  An answer without
 * them (an rrpcd from before signed tickets) is refused: no ticket could be
 * verified.
 */
static int take_keys(struct rrpc_broker *b, struct reg *g, enum rrpci_ctl_op answer_to,
                     const msgpack_object *m)
{
    const char *op = rrpci_ctl_op_name(answer_to);
    const msgpack_object *ks = rrpci_mp_get(m, CTL_K_KEYS);
    uint8_t keys[RRPC_TICKET_MAX_KEYS * RRPC_TICKET_KEY_LEN];
    if (!ks || ks->type != MSGPACK_OBJECT_ARRAY || ks->via.array.size == 0 ||
        ks->via.array.size > RRPC_TICKET_MAX_KEYS)
        return rrpci_broker_fail(
            b, -EPROTO,
            "rrpcd's answer to %s has no ticket keys (1..%d): rrpcd %s:%s "
            "is older than this library (it hands out a shared secret, which this "
            "library no longer takes); upgrade it",
            op, RRPC_TICKET_MAX_KEYS, b->host, b->port);
    for (uint32_t i = 0; i < ks->via.array.size; i++) {
        const msgpack_object *k = &ks->via.array.ptr[i];
        if (k->type != MSGPACK_OBJECT_BIN || k->via.bin.size != RRPC_TICKET_KEY_LEN)
            return rrpci_broker_fail(b, -EPROTO,
                                     "rrpcd's answer to %s: ticket key %u is not %d bytes", op, i,
                                     RRPC_TICKET_KEY_LEN);
        memcpy(keys + i * RRPC_TICKET_KEY_LEN, k->via.bin.ptr, RRPC_TICKET_KEY_LEN);
    }
    int r = rrpc_ticket_verifier_set_keys(g->v, keys, ks->via.array.size);
    if (r)
        return rrpci_broker_fail(b, r == -EINVAL ? -EPROTO : r,
                                 "rrpcd's answer to %s: its ticket keys are "
                                 "not Ed25519 public keys",
                                 op);
    return 0;
}

/* Sends "register" for @g; on success @g has an id, a lease, and its
 * verifier the ticket keys. */
static int do_register(struct rrpc_broker *b, struct reg *g)
{
    struct req q;
    /* A context that requires ESP asks rrpcd to hand its tickets only to hosts
     * with a pair with this one (docs/deployment.md). */
    bool esp = g->require_esp;
    rrpci_req_start(b, &q, CTL_OP_REGISTER, esp ? 5 : 4);
    if (esp) {
        pk_str(&q.pk, CTL_K_REQUIRE_ESP);
        msgpack_pack_true(&q.pk);
    }
    pk_str(&q.pk, CTL_K_INSTANCE);
    msgpack_pack_bin(&q.pk, sizeof(g->instance));
    msgpack_pack_bin_body(&q.pk, g->instance, sizeof(g->instance));
    pk_str(&q.pk, CTL_K_SERVICE);
    pk_str(&q.pk, g->service);
    pk_str(&q.pk, CTL_K_ENDPOINTS);
    msgpack_pack_array(&q.pk, (uint32_t)g->n_eps);
    for (size_t i = 0; i < g->n_eps; i++)
        rrpci_pk_endpoint(&q.pk, &g->eps[i], false, 0);
    pk_str(&q.pk, CTL_K_CLASSES);
    rrpci_pk_classes(&q.pk, g->class_mask);

    struct reply u;
    rrpci_reply_init(&u);
    int r = rrpci_roundtrip(b, &q, &u);
    rrpci_req_free(&q);
    if (!r) {
        uint64_t id = 0, lease = 0;
        const msgpack_object *kept = rrpci_mp_get(&u.u.data, CTL_K_REQUIRE_ESP);
        if (!rrpci_mp_uint(rrpci_mp_get(&u.u.data, CTL_K_REG), &id) || id == 0 ||
            !rrpci_mp_uint(rrpci_mp_get(&u.u.data, CTL_K_LEASE_MS), &lease) ||
            lease < CTL_LEASE_MIN_MS || lease > LEASE_MAX_MS) {
            r = rrpci_broker_fail(b, -EPROTO, "rrpcd's answer to register is malformed");
        } else if (esp && !(kept && kept->type == MSGPACK_OBJECT_BOOLEAN && kept->via.boolean)) {
            /* An rrpcd from before require_esp ignores the key: it would hand
             * tickets to any host.  Its registration goes again. */
            (void)rrpci_send_unregister(b, id);
            r = rrpci_broker_fail(
                b, -EPROTO,
                "service '%s' requires ESP (RRPC_REQUIRE_ESP) but rrpcd %s:%s did not say it "
                "keeps require_esp: it is older than this library and would hand tickets to "
                "hosts without an ESP pair; upgrade it",
                g->service, b->host, b->port);
        } else if (!(r = take_keys(b, g, CTL_OP_REGISTER, &u.u.data))) {
            g->id = id;
            g->lease_ms = (uint32_t)lease;
        }
    }
    rrpci_reply_destroy(&u);
    return r;
}

static int do_renew(struct rrpc_broker *b, struct reg *g)
{
    struct req q;
    rrpci_req_start(b, &q, CTL_OP_RENEW, 1);
    pk_str(&q.pk, CTL_K_REG);
    msgpack_pack_uint64(&q.pk, g->id);
    struct reply u;
    rrpci_reply_init(&u);
    int r = rrpci_roundtrip(b, &q, &u);
    rrpci_req_free(&q);
    uint64_t lease;
    if (!r && rrpci_mp_uint(rrpci_mp_get(&u.u.data, CTL_K_LEASE_MS), &lease) &&
        lease >= CTL_LEASE_MIN_MS && lease <= LEASE_MAX_MS)
        g->lease_ms = (uint32_t)lease;
    if (!r) /* a rotation at rrpcd reaches the gate here */
        r = take_keys(b, g, CTL_OP_RENEW, &u.u.data);
    rrpci_reply_destroy(&u);
    return r;
}

/* Renews (or registers again) every registration that is due; @io held. */
static int64_t lease_work(struct rrpc_broker *b)
{
    int64_t now = rrpci_mono_ms(), next = now + 60000;
    for (struct reg *g = b->regs; g; g = g->next) {
        if (g->n_eps && g->due_ms <= now) {
            int r = g->id ? do_renew(b, g) : -ENOENT;
            if (r == -ENOENT) {
                if (g->id)
                    BLOG(b, LOG_NOTICE, "rrpcd forgot service '%s' (restart or expired "
                         "lease); registering again", g->service);
                g->id = 0;
                r = do_register(b, g);
                if (!r) {
                    BLOG(b, LOG_NOTICE, "service '%s' registered again with rrpcd %s:%s",
                         g->service, b->host, b->port);
                }
            }
            now = rrpci_mono_ms();
            if (r) {
                BLOG(b, g->backoff_ms ? LOG_DEBUG : LOG_WARNING,
                     "keeping service '%s' registered: %s", g->service,
                     rrpc_broker_last_error(b));
                g->backoff_ms = g->backoff_ms ? g->backoff_ms * 2 : 100;
                int cap = (int)(g->lease_ms / 3 > 0 ? g->lease_ms / 3 : 1000);
                if (g->backoff_ms > cap)
                    g->backoff_ms = cap;
                g->due_ms = now + g->backoff_ms;
            } else {
                g->backoff_ms = 0;
                g->due_ms = now + g->lease_ms / 3;
            }
        }
        if (g->due_ms < next)
            next = g->due_ms;
    }
    return next;
}

static void *lease_thread(void *arg)
{
    struct rrpc_broker *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->io);
        int64_t next = lease_work(b);
        pthread_mutex_unlock(&b->io);
        pthread_mutex_lock(&b->lock);
        RRPCI_WAIT_FOR(&b->cond, &b->lock, next, b->stop || b->kick);
        b->kick = false;
        bool stop = b->stop;
        pthread_mutex_unlock(&b->lock);
        if (stop)
            return NULL;
    }
}

RRPC_API int rrpc_broker_register(rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                                  const char *const *uris, size_t n, unsigned class_mask)
{
    if (!b)
        return -EINVAL;
    if (!ctx || !service || !*service || strlen(service) > 255 || !uris || n == 0 ||
        n > CTL_MAX_ENDPOINTS ||
        (class_mask & ~RRPC_CLASS_MASK_ALL))
        return rrpci_broker_fail(b, -EINVAL, "rrpc_broker_register: bad arguments");
    struct rrpci_endpoint *eps = calloc(n, sizeof(*eps));
    if (!eps)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char port[8], rest[300];
        const char *sep = uris[i] ? strstr(uris[i], "://") : NULL;
        size_t sl = sep ? (size_t)(sep - uris[i]) : 0;
        int bad = 0;
        if (!sep || !((sl == 3 && !strncmp(uris[i], "tcp", 3)) ||
                      (sl == 4 && !strncmp(uris[i], "rdma", 4))))
            bad = rrpci_broker_fail(b, RRPC_E_URI,
                                    "endpoint '%s': not tcp://HOST:PORT or rdma://HOST:PORT",
                                    uris[i] ? uris[i] : "(null)");
        else if (snprintf(rest, sizeof(rest), "%s", sep + 3) >= (int)sizeof(rest) ||
                 (rest[strcspn(rest, "?/")] = 0,
                  rrpci_split_addr(rest, eps[i].host, sizeof(eps[i].host), port, sizeof(port))))
            bad = rrpci_broker_fail(
                b, RRPC_E_URI, "endpoint '%s': not tcp://HOST:PORT or rdma://HOST:PORT", uris[i]);
        else if (!strcmp(eps[i].host, "0.0.0.0") || !strcmp(eps[i].host, "::") ||
                 !eps[i].host[0])
            bad = rrpci_broker_fail(b, -EINVAL, "endpoint '%s': give the address clients dial",
                                    uris[i]);
        if (bad) {
            free(eps);
            return bad;
        }
        strcpy(eps[i].transport, sl == 3 ? CTL_TRANSPORT_TCP : CTL_TRANSPORT_RDMA);
        eps[i].port = (uint16_t)atoi(port); /* split_addr checked 1..65535 */
    }

    pthread_mutex_lock(&b->io);
    struct reg *g;
    int r = rrpci_gate_locked(b, ctx, service, &g);
    if (!r && g->n_eps)
        r = rrpci_broker_fail(b, -EEXIST, "service '%s' is already registered through this handle",
                              service);
    if (r) {
        pthread_mutex_unlock(&b->io);
        free(eps);
        return r;
    }
    g->eps = eps;
    g->n_eps = n;
    g->class_mask = class_mask ? class_mask : RRPC_CLASS_MASK_ALL;
    g->require_esp = rrpc_ctx_require_esp(ctx) == 1;
    r = do_register(b, g);
    if (r) {
        free(g->eps);
        g->eps = NULL;
        g->n_eps = 0;
        pthread_mutex_unlock(&b->io);
        return r;
    }
    g->due_ms = rrpci_mono_ms() + g->lease_ms / 3;
    uint32_t lease = g->lease_ms;
    pthread_mutex_unlock(&b->io);

    pthread_mutex_lock(&b->lock);
    if (!b->thread_started) {
        r = pthread_create(&b->thread, NULL, lease_thread, b);
        if (r == 0)
            b->thread_started = true;
    }
    b->kick = true; /* a new registration: its first renewal may come before the next */
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    if (r)
        BLOG(b, LOG_ERR, "cannot start the lease thread: %s", strerror(r));
    BLOG(b, LOG_INFO, "service '%s' registered with rrpcd %s:%s (lease %u ms); new "
         "connections need a ticket", service, b->host, b->port, lease);
    return 0;
}

RRPC_API int rrpc_broker_unregister(rrpc_broker *b, const char *service)
{
    if (!b || !service)
        return -EINVAL;
    pthread_mutex_lock(&b->io);
    struct reg *g = NULL;
    for (g = b->regs; g && strcmp(g->service, service); g = g->next)
        ;
    int r = g ? 0
              : rrpci_broker_fail(b, -ENOENT, "service '%s' is not registered through this handle",
                                  service);
    if (g && g->id) {
        r = rrpci_send_unregister(b, g->id);
        if (r == -ENOENT)
            r = 0;
        if (!r)
            g->id = 0;
    }
    /* Keep the entry (and its verifier: the context's gate uses it) but stop renewing. */
    if (g && !r) {
        g->due_ms = INT64_MAX;
        free(g->eps);
        g->eps = NULL;
        g->n_eps = 0;
    }
    pthread_mutex_unlock(&b->io);
    return r;
}


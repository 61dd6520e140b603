/* SPDX-License-Identifier: MIT */
/*
 * The service registry: services, their registrations and leases, in memory
 * (rrpcd.h).  It tells one listener (the server's watches) when a service's
 * live set may have changed, and whoever sweeps it of each expired lease.
 * Also the memory store: registry = memory keeps registrations here alone.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "rrpcd.h"

struct registry {
    struct service *services;
    struct rrpci_idmap by_id; /* every registration; renewals find theirs here */
    registry_changed_fn *changed;
    void *changed_arg;
};

int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct registry *registry_new(void)
{
    return calloc(1, sizeof(struct registry));
}

void registry_listen(struct registry *reg, registry_changed_fn *fn, void *arg)
{
    reg->changed = fn;
    reg->changed_arg = arg;
}

static void changed(struct registry *reg, const char *service)
{
    if (reg->changed)
        reg->changed(reg->changed_arg, service);
}

static void reg_free(struct registry *reg, struct registration *r)
{
    metrics_registry(0, -1);
    changed(reg, r->svc->name);
    r->svc->n_regs--;
    if (r->etcd_pending)
        r->svc->n_pending--;
    r->svc->answer_bytes -= r->answer_bytes;
    rrpci_idmap_del(&reg->by_id, r->id);
    free(r->eps);
    free(r);
}

static void service_free(struct service *s)
{
    metrics_registry(-1, 0);
    free(s);
}

/* Unlinks and frees services without registrations. */
static void drop_empty(struct registry *reg)
{
    for (struct service **pp = &reg->services; *pp;) {
        struct service *s = *pp;
        if (!s->regs) {
            LOG(LOG_INFO, "service '%s' has no live registration left; forgotten", s->name);
            *pp = s->next;
            service_free(s);
        } else {
            pp = &s->next;
        }
    }
}

void registry_sweep(struct registry *reg, int64_t now, registry_expired_fn *fn, void *arg)
{
    bool dropped = false;
    for (struct service *s = reg->services; s; s = s->next) {
        for (struct registration **pp = &s->regs; *pp;) {
            struct registration *r = *pp;
            if (r->expires_ms <= now) {
                LOG(LOG_NOTICE, "lease of '%s' registration %016llx (%s) expired", s->name,
                    (unsigned long long)r->id, r->principal);
                if (fn)
                    fn(arg, r);
                *pp = r->next;
                reg_free(reg, r);
                dropped = true;
            } else {
                pp = &r->next;
            }
        }
    }
    if (dropped)
        drop_empty(reg);
}

size_t registry_count(const struct registry *reg)
{
    return reg->by_id.count;
}

struct service *registry_services(struct registry *reg)
{
    return reg->services;
}

struct service *registry_service(struct registry *reg, const char *name)
{
    for (struct service *s = reg->services; s; s = s->next)
        if (!strcmp(s->name, name))
            return s;
    return NULL;
}

int registry_add(struct registry *reg, const char *name, const char *principal,
                 struct rrpci_endpoint *eps, size_t n_eps, const struct registration *tmpl,
                 struct registration **ret)
{
    uint64_t id = tmpl->id;
    if (id && registry_find(reg, id))
        return -EEXIST;
    while (id == 0 || registry_find(reg, id))
        if (RAND_bytes((unsigned char *)&id, sizeof(id)) != 1)
            return -EIO;
    struct service *s = registry_service(reg, name);
    bool new_service = !s;
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -ENOMEM;
        snprintf(s->name, sizeof(s->name), "%s", name);
        metrics_registry(1, 0); /* service_free takes it back */
    }
    struct registration *r = calloc(1, sizeof(*r));
    if (!r || rrpci_idmap_put(&reg->by_id, id, &r->node)) {
        free(r);
        if (new_service)
            service_free(s);
        return -ENOMEM;
    }
    r->id = id; /* random: renewals are checked against the principal too */
    r->svc = s;
    snprintf(r->principal, sizeof(r->principal), "%s", principal);
    r->eps = eps;
    r->n_eps = n_eps;
    r->classes = tmpl->classes;
    r->lease_ms = tmpl->lease_ms;
    r->expires_ms = tmpl->expires_ms ? tmpl->expires_ms : mono_ms() + tmpl->lease_ms;
    r->etcd_lease = tmpl->etcd_lease;
    r->has_instance = tmpl->has_instance;
    r->require_esp = tmpl->require_esp;
    memcpy(r->instance, tmpl->instance, sizeof(r->instance));
    r->answer_bytes = tmpl->answer_bytes;
    r->next = s->regs;
    s->regs = r;
    s->n_regs++;
    metrics_registry(0, 1);
    s->answer_bytes += r->answer_bytes;
    if (new_service) {
        s->next = reg->services;
        reg->services = s;
    }
    changed(reg, name);
    *ret = r;
    return 0;
}

struct registration *registry_find(struct registry *reg, uint64_t id)
{
    struct rrpci_idnode *n = rrpci_idmap_get(&reg->by_id, id);
    return n ? rrpci_container_of(n, struct registration, node) : NULL;
}

void registry_remove(struct registry *reg, struct registration *r)
{
    struct service *s = r->svc;
    for (struct registration **pp = &s->regs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    reg_free(reg, r);
    drop_empty(reg);
}

void registry_set_live(struct registry *reg, struct registration *r)
{
    if (!r->etcd_pending)
        return;
    r->etcd_pending = false;
    r->svc->n_pending--;
    changed(reg, r->svc->name);
}

void registry_free(struct registry *reg)
{
    if (!reg)
        return;
    while (reg->services) {
        struct service *s = reg->services;
        reg->services = s->next;
        while (s->regs) {
            struct registration *r = s->regs;
            s->regs = r->next;
            reg_free(reg, r);
        }
        service_free(s);
    }
    rrpci_idmap_fini(&reg->by_id);
    free(reg);
}

/* ---- the memory store: nothing besides the registry -------------------------- */

static const struct store_ops memory_ops = { .name = CTL_REGISTRY_MEMORY };
static struct store memory_store = { .ops = &memory_ops };

struct store *store_memory(void)
{
    return &memory_store;
}

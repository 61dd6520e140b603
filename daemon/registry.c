/* SPDX-License-Identifier: MIT */
/* The service registry: services, their registrations and leases. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "rrpcd.h"

static struct service *services;
static struct rrpci_idmap by_id; /* every registration; renewals find theirs here */

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

static void reg_free(struct registration *r)
{
    metrics_registry(0, -1);
    watch_changed(r->svc->name);
    r->svc->n_regs--;
    if (r->etcd_pending)
        r->svc->n_pending--;
    r->svc->answer_bytes -= r->answer_bytes;
    rrpci_idmap_del(&by_id, r->id);
    free(r->eps);
    free(r);
}

static void service_free(struct service *s)
{
    metrics_registry(-1, 0);
    free(s);
}

/* Unlinks and frees services without registrations. */
static void drop_empty(void)
{
    for (struct service **pp = &services; *pp;) {
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

void registry_sweep(int64_t now)
{
    bool dropped = false;
    for (struct service *s = services; s; s = s->next) {
        for (struct registration **pp = &s->regs; *pp;) {
            struct registration *r = *pp;
            if (r->expires_ms <= now) {
                LOG(LOG_NOTICE, "lease of '%s' registration %016llx (%s) expired", s->name,
                    (unsigned long long)r->id, r->principal);
                if (etcdreg_on())
                    etcdreg_remove(r); /* ours (only ours expire here): its key goes */
                *pp = r->next;
                reg_free(r);
                dropped = true;
            } else {
                pp = &r->next;
            }
        }
    }
    if (dropped)
        drop_empty();
}

size_t registry_count(void)
{
    return by_id.count;
}

struct service *registry_services(void)
{
    return services;
}

struct service *registry_service(const char *name)
{
    for (struct service *s = services; s; s = s->next)
        if (!strcmp(s->name, name))
            return s;
    return NULL;
}

int registry_add(const char *name, const char *principal, struct rrpci_endpoint *eps, size_t n_eps,
                 const struct registration *tmpl, struct registration **ret)
{
    uint64_t id = tmpl->id;
    if (id && registry_find(id))
        return -EEXIST;
    while (id == 0 || registry_find(id))
        if (RAND_bytes((unsigned char *)&id, sizeof(id)) != 1)
            return -EIO;
    struct service *s = registry_service(name);
    bool new_service = !s;
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -ENOMEM;
        snprintf(s->name, sizeof(s->name), "%s", name);
        metrics_registry(1, 0); /* service_free takes it back */
    }
    struct registration *r = calloc(1, sizeof(*r));
    if (!r || rrpci_idmap_put(&by_id, id, &r->node)) {
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
    memcpy(r->instance, tmpl->instance, sizeof(r->instance));
    r->answer_bytes = tmpl->answer_bytes;
    r->next = s->regs;
    s->regs = r;
    s->n_regs++;
    metrics_registry(0, 1);
    s->answer_bytes += r->answer_bytes;
    if (new_service) {
        s->next = services;
        services = s;
    }
    watch_changed(name);
    *ret = r;
    return 0;
}

struct registration *registry_find(uint64_t id)
{
    struct rrpci_idnode *n = rrpci_idmap_get(&by_id, id);
    return n ? rrpci_container_of(n, struct registration, node) : NULL;
}

void registry_remove(struct registration *r)
{
    struct service *s = r->svc;
    for (struct registration **pp = &s->regs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    reg_free(r);
    drop_empty();
}

void registry_free(void)
{
    while (services) {
        struct service *s = services;
        services = s->next;
        while (s->regs) {
            struct registration *r = s->regs;
            s->regs = r->next;
            reg_free(r);
        }
        service_free(s);
    }
    rrpci_idmap_fini(&by_id);
}

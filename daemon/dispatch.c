/* SPDX-License-Identifier: MIT */
/*
 * The requests of the control protocol (docs/broker.md, broker/proto.h), one
 * function per op, each checking its fields as wire input: hello, register,
 * renew, unregister, status, watch, unwatch and pairs (lookup: lookup.c).  A
 * register with etcd is answered when the store took it
 * (dispatch_register_done).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <openssl/x509v3.h>

#include "server_int.h"

static void op_hello(struct conn *c, uint64_t id, const msgpack_object *m)
{
    const msgpack_object *tok = rrpci_mp_get(m, CTL_K_TOKEN);
    if (tok) {
        const char *p = NULL;
        if (tok->type == MSGPACK_OBJECT_STR && tok->via.str.size > 0 &&
            tok->via.str.size <= 512)
            p = token_principal(c->srv->cfg, tok->via.str.ptr, tok->via.str.size);
        if (!p) {
            answer_fatal(c, id, CTL_ERR_AUTH_FAILED, "the token is not valid");
            return;
        }
        snprintf(c->principal, sizeof(c->principal), "%s", p);
        c->authed = true;
    } else if (c->cert_cn[0]) {
        snprintf(c->principal, sizeof(c->principal), "%s", c->cert_cn);
        c->authed = true;
    } else {
        answer_fatal(c, id, CTL_ERR_UNAUTHENTICATED,
                     "present a client certificate signed by the broker's CA, or a token");
        return;
    }
    if (!c->pr) {
        char why[400];
        c->pr = admit_principal_get(c->srv, c->principal, why, sizeof(why));
        if (!c->pr) {
            c->authed = false;
            answer_fatal(c, id, CTL_ERR_LIMIT, why);
            return;
        }
        c->pr->held += c->held; /* from now on its principal's too */
    }
    LOG(LOG_INFO, "%s: authenticated as '%s' (%s)", c->peer, c->principal,
        tok ? "token" : "certificate");
    struct answer a;
    answer_begin(&a, id, true, 2);
    pk_str(&a.pk, CTL_K_PRINCIPAL);
    pk_str(&a.pk, c->principal);
    pk_str(&a.pk, CTL_K_LEASE_MS);
    msgpack_pack_uint64(&a.pk, (uint64_t)c->srv->cfg->lease_ms);
    answer_end(c, &a);
}

static void register_answer(struct conn *c, uint64_t id, const struct registration *r);

static void op_register(struct conn *c, uint64_t id, const msgpack_object *m)
{
    const struct config *cfg = c->srv->cfg;
    char service[256];
    const msgpack_object *eps = rrpci_mp_get(m, CTL_K_ENDPOINTS),
                         *cls = rrpci_mp_get(m, CTL_K_CLASSES);
    const msgpack_object *inst = rrpci_mp_get(m, CTL_K_INSTANCE);
    if (!rrpci_mp_str(rrpci_mp_get(m, CTL_K_SERVICE), service, sizeof(service)) || !eps ||
        eps->type != MSGPACK_OBJECT_ARRAY || eps->via.array.size == 0 ||
        eps->via.array.size > CTL_MAX_ENDPOINTS || !cls || cls->type != MSGPACK_OBJECT_ARRAY ||
        cls->via.array.size > 4) {
        answer_error(c, id, CTL_ERR_BAD_REQUEST, "register needs service, endpoints (1..64) and "
                     "classes");
        return;
    }
    struct registration tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    if (inst) {
        if (inst->type != MSGPACK_OBJECT_BIN || inst->via.bin.size != sizeof(tmpl.instance)) {
            answer_error(c, id, CTL_ERR_BAD_REQUEST, "instance must be 16 bytes (bin)");
            return;
        }
        memcpy(tmpl.instance, inst->via.bin.ptr, sizeof(tmpl.instance));
        uint8_t any = 0;
        for (size_t i = 0; i < sizeof(tmpl.instance); i++)
            any |= tmpl.instance[i];
        if (!any) {
            answer_error(c, id, CTL_ERR_BAD_REQUEST,
                         "instance must not be all zero (draw it at random)");
            return;
        }
        tmpl.has_instance = true;
    }
    const msgpack_object *esp = rrpci_mp_get(m, CTL_K_REQUIRE_ESP);
    if (esp) {
        if (esp->type != MSGPACK_OBJECT_BOOLEAN) {
            answer_error(c, id, CTL_ERR_BAD_REQUEST, "require_esp must be a boolean");
            return;
        }
        tmpl.require_esp = esp->via.boolean;
    }
    if (!acl_allows(cfg, rrpci_ctl_op_name(CTL_OP_REGISTER), service, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' may not register '%s'", c->peer, c->principal, service);
        answer_error(c, id, CTL_ERR_DENIED, "the ACL does not let this principal register it");
        return;
    }
    /* Each register writes etcd's history (or churns the registry): one principal
     * may not do it faster than max_registers_per_s. */
    if (!admit_register_rate(c->srv, c->pr)) {
        char msg[400];
        snprintf(msg, sizeof(msg), "principal '%s' sends registers faster than %d a second "
                 "(max_registers_per_s); try again in a second", c->principal,
                 cfg->max_registers_per_s);
        answer_error(c, id, CTL_ERR_BUSY, msg);
        return;
    }
    if (eps->via.array.size > (uint32_t)cfg->max_endpoints_per_registration) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%u endpoints; this rrpcd takes at most %d per registration "
                 "(max_endpoints_per_registration)", eps->via.array.size,
                 cfg->max_endpoints_per_registration);
        answer_error(c, id, CTL_ERR_LIMIT, msg);
        return;
    }
    uint32_t classes = 0;
    for (uint32_t i = 0; i < cls->via.array.size; i++) {
        char name[32];
        int k = rrpci_mp_str(&cls->via.array.ptr[i], name, sizeof(name))
                    ? rrpc_class_from_name(name)
                    : -1;
        if (k < 0) {
            answer_error(c, id, CTL_ERR_BAD_REQUEST, "unknown QoS class");
            return;
        }
        classes |= 1u << k;
    }
    if (!classes)
        classes = RRPC_CLASS_MASK_ALL;
    uint64_t lease = (uint64_t)cfg->lease_ms;
    const msgpack_object *lo = rrpci_mp_get(m, CTL_K_LEASE_MS);
    if (lo) {
        if (!rrpci_mp_uint(lo, &lease) || lease < CTL_LEASE_MIN_MS) {
            answer_error(c, id, CTL_ERR_BAD_REQUEST, "lease_ms must be >= 100");
            return;
        }
        if (lease > (uint64_t)cfg->lease_ms)
            lease = (uint64_t)cfg->lease_ms;
    }
    if (registry_count(c->srv->reg) >= (size_t)cfg->max_registrations) {
        answer_error(c, id, CTL_ERR_BUSY, "too many registrations; try later");
        return;
    }
    struct service *svc = registry_service(c->srv->reg, service);
    if (svc && svc->n_regs >= (size_t)cfg->max_instances_per_service) {
        char msg[400];
        snprintf(msg, sizeof(msg), "service '%s' has %zu registrations, the most this rrpcd "
                 "takes (max_instances_per_service)", service, svc->n_regs);
        answer_error(c, id, CTL_ERR_LIMIT, msg);
        return;
    }
    const char *down = store_degraded(c->srv->st);
    if (down) {
        char msg[500];
        snprintf(msg, sizeof(msg), "this rrpcd is degraded, the registry on etcd is unreachable "
                 "(%s): lookups answer from its cache, registrations are refused; try again "
                 "later", down);
        answer_error(c, id, CTL_ERR_BUSY, msg);
        return;
    }
    struct rrpci_endpoint *ep = calloc(eps->via.array.size, sizeof(*ep));
    if (!ep) {
        answer_error(c, id, CTL_ERR_INTERNAL, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < eps->via.array.size; i++) {
        if (!rrpci_mp_endpoint(&eps->via.array.ptr[i], &ep[i])) {
            free(ep);
            answer_error(c, id, CTL_ERR_BAD_REQUEST, "an endpoint needs transport (tcp|rdma), host "
                         "and port");
            return;
        }
    }
    tmpl.eps = ep;
    tmpl.n_eps = eps->via.array.size;
    tmpl.classes = classes;
    tmpl.lease_ms = (uint32_t)lease;
    tmpl.answer_bytes = answer_bytes(&tmpl);
    size_t total;
    if (!answer_lookup_fits(svc, &tmpl, &total)) {
        char msg[500];
        snprintf(msg, sizeof(msg), "with this registration a lookup of '%s' could answer %zu "
                 "bytes, above the %u-byte frame limit: register fewer endpoints or shorter "
                 "host names", service, total, CTL_MAX_FRAME);
        free(ep);
        answer_error(c, id, CTL_ERR_LIMIT, msg);
        return;
    }
    struct registration *r;
    int e = registry_add(c->srv->reg, service, c->principal, ep, tmpl.n_eps, &tmpl, &r);
    if (e) {
        free(ep);
        answer_error(c, id, CTL_ERR_INTERNAL, strerror(-e));
        return;
    }
    struct store *st = c->srv->st;
    if (st->ops->put) {
        /* Answered by dispatch_register_done once the store took it (or did not). */
        if ((e = st->ops->put(st, r, c->serial, id)) != 0) {
            char msg[600];
            snprintf(msg, sizeof(msg), "the registry on etcd did not take it (%s); this rrpcd "
                     "is degraded: try again later",
                     e == -ENOMEM ? "out of memory"
                     : e == -EAGAIN && !store_degraded(st) ? "too many writes waiting"
                                                           : st->ops->error(st));
            registry_remove(c->srv->reg, r);
            answer_error(c, id, CTL_ERR_BUSY, msg);
        }
        return;
    }
    register_answer(c, id, r);
}

/* "keys": the public keys servers accept tickets of, the current one first. */
static void pack_keys(msgpack_packer *pk, const struct config *cfg)
{
    pk_str(pk, CTL_K_KEYS);
    msgpack_pack_array(pk, (uint32_t)cfg->n_keys);
    for (size_t i = 0; i < cfg->n_keys; i++) {
        msgpack_pack_bin(pk, RRPC_TICKET_KEY_LEN);
        msgpack_pack_bin_body(pk, cfg->keys[i], RRPC_TICKET_KEY_LEN);
    }
}

/* The answer to the register @id that made @r. */
static void register_answer(struct conn *c, uint64_t id, const struct registration *r)
{
    const struct rrpci_endpoint *ep = r->eps;
    LOG(LOG_INFO, "%s: '%s' registered '%s' (%zu endpoints, first %s://%s:%u, lease %u ms%s%s)",
        c->peer, c->principal, r->svc->name, r->n_eps, ep[0].transport, ep[0].host, ep[0].port,
        r->lease_ms, r->has_instance ? "" : ", no instance id: its tickets are unbound",
        r->require_esp ? ", requires ESP" : "");
    struct answer a;
    answer_begin(&a, id, true, r->require_esp ? 4 : 3);
    if (r->require_esp) { /* the server checks that this rrpcd kept the flag */
        pk_str(&a.pk, CTL_K_REQUIRE_ESP);
        msgpack_pack_true(&a.pk);
    }
    pk_str(&a.pk, CTL_K_REG);
    msgpack_pack_uint64(&a.pk, r->id);
    pk_str(&a.pk, CTL_K_LEASE_MS);
    msgpack_pack_uint32(&a.pk, r->lease_ms);
    pack_keys(&a.pk, c->srv->cfg);
    answer_end(c, &a);
}

bool dispatch_register_done(void *arg, uint64_t serial, uint64_t req_id, struct registration *r,
                            int err, const char *why)
{
    struct server *srv = arg;
    struct conn *c = srv->conns;
    while (c && c->serial != serial)
        c = c->next;
    if (!c || c->closing || c->draining)
        return false;
    metrics_op(CTL_OP_REGISTER);
    if (err)
        answer_error(c, req_id, CTL_ERR_BUSY, why);
    else
        register_answer(c, req_id, r);
    metrics_op(-1);
    session_set_events(c, EV_READ | EV_WRITE); /* its io callback sends it */
    return true;
}

static struct registration *own_reg(struct conn *c, uint64_t id, const msgpack_object *m)
{
    uint64_t reg;
    if (!rrpci_mp_uint(rrpci_mp_get(m, CTL_K_REG), &reg)) {
        answer_error(c, id, CTL_ERR_BAD_REQUEST, "missing reg");
        return NULL;
    }
    struct registration *r = registry_find(c->srv->reg, reg);
    if (!r || strcmp(r->principal, c->principal)) {
        answer_error(c, id, CTL_ERR_NOT_FOUND,
                     "no such registration (expired, or rrpcd restarted)");
        return NULL;
    }
    return r;
}

static void op_renew(struct conn *c, uint64_t id, const msgpack_object *m)
{
    struct registration *r = own_reg(c, id, m);
    if (!r)
        return;
    /* With etcd: nothing to write for one this rrpcd owns; one registered through
     * another rrpcd moves here (queued).  Degraded, the registration stays in this
     * rrpcd's cache as long as it is renewed. */
    struct store *st = c->srv->st;
    if (st->ops->renew)
        st->ops->renew(st, r);
    if (r->expires_ms != INT64_MAX)
        r->expires_ms = mono_ms() + r->lease_ms;
    LOG(LOG_DEBUG, "%s: renewed '%s' %016llx", c->peer, r->svc->name,
        (unsigned long long)r->id);
    struct answer a;
    answer_begin(&a, id, true, 2);
    pk_str(&a.pk, CTL_K_LEASE_MS);
    msgpack_pack_uint32(&a.pk, r->lease_ms);
    pack_keys(&a.pk, c->srv->cfg); /* a rotation reaches running servers here */
    answer_end(c, &a);
}

static void op_unregister(struct conn *c, uint64_t id, const msgpack_object *m)
{
    struct registration *r = own_reg(c, id, m);
    if (!r)
        return;
    LOG(LOG_INFO, "%s: '%s' unregistered '%s'", c->peer, c->principal, r->svc->name);
    struct store *st = c->srv->st;
    if (st->ops->remove)
        st->ops->remove(st, r);
    registry_remove(c->srv->reg, r);
    struct answer a;
    answer_begin(&a, id, true, 0);
    answer_end(c, &a);
}

/* What this rrpcd says of itself: any authenticated session may ask. */
static void op_status(struct conn *c, uint64_t id)
{
    const char *down = store_degraded(c->srv->st);
    uint64_t n_services = 0;
    for (const struct service *s = registry_services(c->srv->reg); s; s = s->next)
        n_services++;
    struct answer a;
    answer_begin(&a, id, true, down ? 6 : 5);
    pk_str(&a.pk, CTL_K_REGISTRY);
    pk_str(&a.pk, c->srv->st->ops->name);
    pk_str(&a.pk, CTL_K_DEGRADED);
    if (down)
        msgpack_pack_true(&a.pk);
    else
        msgpack_pack_false(&a.pk);
    if (down) {
        pk_str(&a.pk, CTL_K_WHY);
        pk_str(&a.pk, down);
    }
    pk_str(&a.pk, CTL_K_SERVICES);
    msgpack_pack_uint64(&a.pk, n_services);
    pk_str(&a.pk, CTL_K_REGISTRATIONS);
    msgpack_pack_uint64(&a.pk, registry_count(c->srv->reg));
    pk_str(&a.pk, CTL_K_SESSIONS);
    msgpack_pack_uint64(&a.pk, (uint64_t)c->srv->n_conns);
    answer_end(c, &a);
}

/* watch {service}: answers {watch: id}, then pushes the live set now and on every
 * change (watch.c); unwatch {watch}. */
static void op_watch(struct conn *c, uint64_t id, int op, const msgpack_object *m)
{
    char service[256];
    uint64_t wid = 0;
    int r;
    if (op == CTL_OP_UNWATCH) {
        if (!rrpci_mp_uint(rrpci_mp_get(m, CTL_K_WATCH), &wid)) {
            answer_error(c, id, CTL_ERR_BAD_REQUEST, "unwatch needs watch");
            return;
        }
        r = watch_del(c->srv->watch, c, wid);
    } else if (!rrpci_mp_str(rrpci_mp_get(m, CTL_K_SERVICE), service, sizeof(service))) {
        answer_error(c, id, CTL_ERR_BAD_REQUEST, "watch needs service");
        return;
    } else if (!acl_allows(c->srv->cfg, rrpci_ctl_op_name(CTL_OP_LOOKUP), service, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' may not watch '%s'", c->peer, c->principal, service);
        answer_error(c, id, CTL_ERR_DENIED, "the ACL does not let this principal look it up");
        return;
    } else {
        r = watch_add(c->srv->watch, c, service, &wid);
    }
    if (r) {
        answer_error(c, id,
                     r == -ENOENT   ? CTL_ERR_NOT_FOUND
                     : r == -ENOSPC ? CTL_ERR_LIMIT
                                    : CTL_ERR_INTERNAL,
                     r == -ENOENT   ? "no such watch on this session"
                     : r == -ENOSPC ? "at most 64 watches per session (65536 in all)"
                                    : "out of memory");
        return;
    }
    struct answer a;
    answer_begin(&a, id, true, 1);
    pk_str(&a.pk, CTL_K_WATCH);
    msgpack_pack_uint64(&a.pk, wid);
    answer_end(c, &a);
}

/* ---- pairs: rrpc-agent's report of its ESP pairs ------------------------------ */

/* Closes the session with bad_request for the report's @msg. */
static void pairs_bad(struct conn *c, uint64_t id, const char *msg)
{
    metrics_report(REPORT_MALFORMED);
    answer_fatal(c, id, CTL_ERR_BAD_REQUEST, msg);
}

/*
 * {local: ADDR, pairs: [{peer: ADDR, expires_s: N}...]}: taken from a
 * principal of the agents list whose certificate names @local as an IP SAN;
 * replaces the last report of @local.  Every address is an IP literal of the
 * session's family; anything malformed or beyond the bounds closes the session
 * (checked first: the fuzzer, which has no certificate, reaches all of it).
 */
void op_pairs(struct conn *c, uint64_t id, const msgpack_object *m, size_t len)
{
    const struct config *cfg = c->srv->cfg;
    char text[64], msg[400];
    int family = c->src ? c->src->family : AF_INET;
    if (family == AF_INET6) { /* a v4-mapped source is an IPv4 session */
        struct host_addr s = {.family = family};
        memcpy(s.addr, c->src->addr, 16);
        host_addr_normalize(&s);
        family = s.family;
    }
    if (len > CTL_MAX_PAIRS_FRAME) {
        snprintf(msg, sizeof(msg), "a pairs report has at most %u bytes (this one %zu)",
                 CTL_MAX_PAIRS_FRAME, len);
        pairs_bad(c, id, msg);
        return;
    }
    const msgpack_object *ps = rrpci_mp_get(m, CTL_K_PAIRS);
    struct host_addr local;
    if (!rrpci_mp_str(rrpci_mp_get(m, CTL_K_LOCAL), text, sizeof(text)) ||
        !host_addr_parse(text, family, &local)) {
        pairs_bad(c, id, family == AF_INET6 ? "pairs needs local, an IPv6 literal (the session's "
                                              "family)"
                                            : "pairs needs local, an IPv4 literal (the session's "
                                              "family)");
        return;
    }
    if (!ps || ps->type != MSGPACK_OBJECT_ARRAY || ps->via.array.size > CTL_MAX_PAIRS) {
        snprintf(msg, sizeof(msg), "pairs needs pairs, an array of at most %d {peer, expires_s}",
                 CTL_MAX_PAIRS);
        pairs_bad(c, id, msg);
        return;
    }
    struct pair_entry e[CTL_MAX_PAIRS];
    int64_t now = mono_ms();
    for (uint32_t i = 0; i < ps->via.array.size; i++) {
        const msgpack_object *p = &ps->via.array.ptr[i];
        char peer[64];
        uint64_t ex;
        if (!rrpci_mp_str(rrpci_mp_get(p, CTL_K_PEER), peer, sizeof(peer)) ||
            !host_addr_parse(peer, family, &e[i].peer) ||
            !rrpci_mp_uint(rrpci_mp_get(p, CTL_K_EXPIRES_S), &ex) ||
            ex > CTL_MAX_PAIR_EXPIRES_S) {
            snprintf(msg, sizeof(msg), "pair %u: needs peer (an IP literal of the session's "
                     "family) and expires_s (0..%u)", i, CTL_MAX_PAIR_EXPIRES_S);
            pairs_bad(c, id, msg);
            return;
        }
        e[i].until_ms = now + (int64_t)ex * 1000;
    }
    if (!agent_allowed(cfg, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' sent a pairs report but is not in agents", c->peer,
            c->principal);
        metrics_report(REPORT_NOT_AN_AGENT);
        snprintf(msg, sizeof(msg), "principal '%s' is not in this rrpcd's agents list: its pairs "
                 "reports are not taken", c->principal);
        answer_fatal(c, id, CTL_ERR_DENIED, msg);
        return;
    }
    /* The address must be the certificate's, not only the principal's claim. */
    X509 *x = c->ssl && c->cert_cn[0] && !strcmp(c->principal, c->cert_cn)
                  ? SSL_get0_peer_certificate(c->ssl)
                  : NULL;
    if (!x || X509_check_ip(x, local.addr, local.family == AF_INET ? 4 : 16, 0) != 1) {
        LOG(LOG_NOTICE, "%s: '%s' reported pairs for %s, which its certificate does not name",
            c->peer, c->principal, text);
        metrics_report(REPORT_ADDRESS_NOT_CERTIFIED);
        snprintf(msg, sizeof(msg), "local %s is not an IP SAN of this session's certificate "
                 "(the agent reports for the address its certificate names; a token does not "
                 "do)", text);
        answer_fatal(c, id, CTL_ERR_DENIED, msg);
        return;
    }
    if (c->agent && memcmp(&c->agent_local, &local, sizeof(local))) { /* moved: the old goes */
        pairs_session_gone(c->srv->pairs, &c->agent_local, c->serial);
        c->agent = false;
    }
    int r = pairs_report(c->srv->pairs, &local, e, ps->via.array.size, c->serial, now,
                         (size_t)cfg->max_agents);
    if (r == -ENOSPC) {
        metrics_report(REPORT_MAX_AGENTS);
        snprintf(msg, sizeof(msg), "this rrpcd holds the reports of %d hosts (max_agents)",
                 cfg->max_agents);
        answer_error(c, id, CTL_ERR_LIMIT, msg);
        return;
    }
    if (r) {
        answer_error(c, id, CTL_ERR_INTERNAL, "out of memory");
        return;
    }
    c->agent = true;
    c->agent_local = local;
    metrics_report(REPORT_ACCEPTED);
    LOG(LOG_DEBUG, "%s: '%s' reported %u pairs for %s", c->peer, c->principal,
        ps->via.array.size, text);
    struct answer a;
    answer_begin(&a, id, true, 0);
    answer_end(c, &a);
}

void dispatch_frame(struct conn *c, const uint8_t *buf, size_t len)
{
    if (rrpci_mp_check(buf, len, CTL_MAX_DEPTH)) {
        answer_fatal(c, 0, CTL_ERR_BAD_REQUEST, "the frame is not one well-formed msgpack object");
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_MAP) {
        answer_fatal(c, 0, CTL_ERR_BAD_REQUEST, "a request is a msgpack map");
        goto out;
    }
    const msgpack_object *m = &u.data;
    uint64_t v = 0, id = 0;
    char op_s[32];
    if (!rrpci_mp_uint(rrpci_mp_get(m, CTL_K_V), &v) || v != CTL_VERSION) {
        answer_fatal(c, 0, CTL_ERR_VERSION, "this rrpcd speaks control protocol version "
                     CTL_VERSION_STR " (signed tickets): upgrade libroce_rpc_broker");
        goto out;
    }
    if (!rrpci_mp_uint(rrpci_mp_get(m, CTL_K_ID), &id) ||
        !rrpci_mp_str(rrpci_mp_get(m, CTL_K_OP), op_s, sizeof(op_s))) {
        answer_fatal(c, id, CTL_ERR_BAD_REQUEST, "a request needs id and op");
        goto out;
    }
    int op = rrpci_ctl_op_parse(op_s, strlen(op_s));
    metrics_op(op);
    if (op == CTL_OP_HELLO) {
        op_hello(c, id, m);
        goto out;
    }
    if (!c->authed) {
        answer_fatal(c, id, CTL_ERR_UNAUTHENTICATED, "say hello first");
        goto out;
    }
    switch (op) {
    case CTL_OP_REGISTER: op_register(c, id, m); break;
    case CTL_OP_RENEW: op_renew(c, id, m); break;
    case CTL_OP_UNREGISTER: op_unregister(c, id, m); break;
    case CTL_OP_LOOKUP: op_lookup(c, id, m); break;
    case CTL_OP_WATCH:
    case CTL_OP_UNWATCH: op_watch(c, id, op, m); break;
    case CTL_OP_STATUS: op_status(c, id); break;
    case CTL_OP_PAIRS: op_pairs(c, id, m, len); break;
    default: answer_error(c, id, CTL_ERR_BAD_REQUEST, "unknown op"); break;
    }
out:
    metrics_op(-1);
    msgpack_unpacked_destroy(&u);
}

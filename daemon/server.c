/* SPDX-License-Identifier: MIT */
/*
 * The TLS control port: libev + non-blocking OpenSSL, TLS 1.3 only.
 * Frames are a u32 little-endian length (1..CTL_MAX_FRAME) and one msgpack map
 * (docs/broker.md).  Nothing a client sends is trusted: a bad length, bad
 * msgpack or a wrong version gets an error answer and the connection closes.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <ev.h>
#include <msgpack.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "rrpcd.h"
#include "broker/sockbio.h"

#define MAX_WBUF (4u << 20)     /* stop reading while this much waits to go out */
#define MAX_EPS 64
#define FRAME_MIN_CAP 4096u     /* a frame buffer starts this small and grows as bytes come */
#define SOURCE_BUCKETS 1024

/* The sessions of one source address (for max_connections_per_source). */
struct source {
    struct source *next;
    int family;
    uint8_t addr[16];
    int n;
};

/*
 * A session.  Until hello succeeds it is "anonymous": one deadline from its
 * accept (auth_timeout_ms) that nothing it sends extends, frames of at most
 * auth_max_frame bytes, and it is the first to go when max_connections is
 * reached.  Once authenticated, the timer is the idle timeout.
 */
struct conn {
    struct conn *prev, *next; /* the list of sessions, oldest first */
    ev_io io;
    ev_timer timer;
    int fd;
    SSL *ssl;
    struct source *src;
    bool handshaken, closing, draining;
    bool authed;
    bool idle_timer; /* the timer has been switched to the idle timeout */
    char peer[64];
    char cert_cn[256]; /* "" without a verified client certificate */
    char principal[256];
    uint8_t hdr[4];
    size_t hdr_got;
    uint8_t *frame;    /* the body being read: frame_got of frame_len bytes, room for frame_cap */
    size_t frame_len, frame_got, frame_cap;
    uint8_t *wbuf;
    size_t wlen, woff, wcap;
    uint64_t serial; /* names the session to answers that come later (etcd writes) */
};

static struct ev_loop *loop;
static struct config *cfg;
static SSL_CTX *sslctx;
static int lfd = -1;
static ev_io accept_w;
static ev_timer sweep_w, accept_pause_w;
static struct conn *conns, *conns_tail;
static int n_conns;
static struct source *sources[SOURCE_BUCKETS];

static void conn_drive(struct conn *c);

/* ---- sources ----------------------------------------------------------------- */

static unsigned source_hash(int family, const uint8_t *a)
{
    uint32_t h = 2166136261u ^ (uint32_t)family; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 16777619u;
    return h % SOURCE_BUCKETS;
}

/* The entry of @ss's address with one more session, or NULL when that
 * address has max_connections_per_source (or no memory). */
static struct source *source_get(const struct sockaddr_storage *ss, bool *ret_full)
{
    uint8_t a[16] = { 0 };
    int family = ss->ss_family;
    if (family == AF_INET)
        memcpy(a, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    else if (family == AF_INET6)
        memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    unsigned b = source_hash(family, a);
    struct source *s;
    *ret_full = false;
    for (s = sources[b]; s; s = s->next)
        if (s->family == family && !memcmp(s->addr, a, 16))
            break;
    if (s && s->n >= cfg->max_connections_per_source) {
        *ret_full = true;
        return NULL;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        s->family = family;
        memcpy(s->addr, a, 16);
        s->next = sources[b];
        sources[b] = s;
    }
    s->n++;
    return s;
}

static void source_put(struct source *s)
{
    if (!s || --s->n > 0)
        return;
    unsigned b = source_hash(s->family, s->addr);
    for (struct source **pp = &sources[b]; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    free(s);
}

/*
 * A refusal at accept, logged at most once a second (a flood of them must
 * not become a flood of log lines), with the number left unlogged.
 */
static void log_refusal(const char *peer, const char *why)
{
    static int64_t last_ms;
    static unsigned quiet;
    int64_t now = mono_ms();
    if (last_ms && now - last_ms < 1000) {
        quiet++;
        return;
    }
    LOG(LOG_WARNING, "%s: refused: %s (%u more refusals not logged)", peer, why, quiet);
    last_ms = now;
    quiet = 0;
}

/* ---- connections ------------------------------------------------------------ */

static void conn_close(struct conn *c, const char *why)
{
    if (why)
        LOG(LOG_INFO, "%s: closed: %s", c->peer, why);
    watch_conn_gone(c);
    ev_io_stop(loop, &c->io);
    ev_timer_stop(loop, &c->timer);
    if (c->ssl) {
        if (c->handshaken && !c->closing)
            SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    close(c->fd);
    free(c->frame);
    free(c->wbuf);
    if (c->prev)
        c->prev->next = c->next;
    else
        conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        conns_tail = c->prev;
    source_put(c->src);
    n_conns--;
    metrics_sessions(n_conns);
    free(c);
}

static void set_events(struct conn *c, int events)
{
    if ((c->io.events & (EV_READ | EV_WRITE)) == events)
        return;
    ev_io_stop(loop, &c->io);
    ev_io_set(&c->io, c->fd, events);
    ev_io_start(loop, &c->io);
}

static void conn_timeout_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    struct conn *c = w->data;
    if (c->authed && !c->draining && watch_any(c)) {
        ev_timer_again(loop, &c->timer); /* watching: listening, not idle */
        return;
    }
    conn_close(c, c->draining ? NULL
                  : c->authed ? "idle timeout (idle_timeout_ms)"
                  : c->handshaken
                      ? "no successful hello within auth_timeout_ms of the accept"
                      : "TLS handshake not done within auth_timeout_ms of the accept");
}

/*
 * After a failed handshake OpenSSL has queued its alert; closing with the
 * client's bytes unread would make the kernel send a reset, which can destroy
 * the alert before the client reads it ("unknown ca" becomes "connection
 * reset").  So: shut down our side, discard what comes for at most a second.
 */
static void conn_linger(struct conn *c, const char *why)
{
    LOG(LOG_INFO, "%s: closed: %s", c->peer, why);
    shutdown(c->fd, SHUT_WR);
    c->draining = true;
    set_events(c, EV_READ);
    ev_timer_stop(loop, &c->timer);
    ev_timer_set(&c->timer, 1.0, 0);
    ev_timer_start(loop, &c->timer);
}

static void conn_io_cb(struct ev_loop *l, ev_io *w, int revents)
{
    struct conn *c = w->data;
    if (c->draining) {
        char buf[4096];
        ssize_t n;
        while ((n = recv(c->fd, buf, sizeof(buf), 0)) > 0)
            ;
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            conn_close(c, NULL);
        return;
    }
    conn_drive(c);
}

static const char *ssl_reason(void)
{
    static char buf[256];
    unsigned long e = ERR_get_error();
    if (!e)
        return "connection closed";
    ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    return buf;
}

/* ---- answers ---------------------------------------------------------------- */

static int wbuf_write(void *data, const char *buf, size_t len)
{
    struct conn *c = data;
    if (c->wcap - c->wlen < len) {
        size_t cap = c->wcap ? c->wcap : 4096;
        while (cap - c->wlen < len)
            cap *= 2;
        uint8_t *n = realloc(c->wbuf, cap);
        if (!n)
            return -1;
        c->wbuf = n;
        c->wcap = cap;
    }
    memcpy(c->wbuf + c->wlen, buf, len);
    c->wlen += len;
    return 0;
}

/* An answer: begin with @n extra map entries, pack them, then answer_end. */
struct answer {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
};

static void answer_begin(struct answer *a, uint64_t id, bool ok, uint32_t n)
{
    msgpack_sbuffer_init(&a->sb);
    msgpack_packer_init(&a->pk, &a->sb, msgpack_sbuffer_write);
    a->id = id;
    msgpack_pack_map(&a->pk, 3 + n);
    pk_str(&a->pk, "v");
    msgpack_pack_uint32(&a->pk, CTL_VERSION);
    pk_str(&a->pk, "id");
    msgpack_pack_uint64(&a->pk, id);
    pk_str(&a->pk, "ok");
    if (ok)
        metrics_answer(NULL);
    if (ok)
        msgpack_pack_true(&a->pk);
    else
        msgpack_pack_false(&a->pk);
}

static void answer_error(struct conn *c, uint64_t id, const char *code, const char *msg);

static void answer_end(struct conn *c, struct answer *a)
{
    if (a->sb.size > CTL_MAX_FRAME) {
        /* Never sent: the client would refuse it.  register bounds lookups;
         * this is the last line. */
        LOG(LOG_ERR, "%s: an answer of %zu bytes is above the frame limit; sent an error "
            "instead", c->peer, a->sb.size);
        msgpack_sbuffer_destroy(&a->sb);
        answer_error(c, a->id, "internal", "the answer would exceed the 1 MiB frame limit");
        return;
    }
    uint8_t hdr[4];
    rrpci_put_le32(hdr, (uint32_t)a->sb.size);
    if (wbuf_write(c, (const char *)hdr, 4) || wbuf_write(c, a->sb.data, a->sb.size))
        c->closing = true; /* out of memory: drop the client, not the daemon */
    msgpack_sbuffer_destroy(&a->sb);
}

static void answer_error(struct conn *c, uint64_t id, const char *code, const char *msg)
{
    struct answer a;
    metrics_answer(code);
    answer_begin(&a, id, false, 2);
    pk_str(&a.pk, "err");
    pk_str(&a.pk, code);
    pk_str(&a.pk, "msg");
    pk_str(&a.pk, msg);
    answer_end(c, &a);
}

/* Answers with an error and closes the connection once it has gone out. */
static void answer_fatal(struct conn *c, uint64_t id, const char *code, const char *msg)
{
    LOG(LOG_NOTICE, "%s: %s: %s", c->peer, code, msg);
    answer_error(c, id, code, msg);
    c->closing = true;
}

/* ---- requests ---------------------------------------------------------------- */


static void op_hello(struct conn *c, uint64_t id, const msgpack_object *m)
{
    const msgpack_object *tok = rrpci_mp_get(m, "token");
    if (tok) {
        const char *p = NULL;
        if (tok->type == MSGPACK_OBJECT_STR && tok->via.str.size > 0 &&
            tok->via.str.size <= 512)
            p = token_principal(cfg, tok->via.str.ptr, tok->via.str.size);
        if (!p) {
            answer_fatal(c, id, "auth_failed", "the token is not valid");
            return;
        }
        snprintf(c->principal, sizeof(c->principal), "%s", p);
        c->authed = true;
    } else if (c->cert_cn[0]) {
        snprintf(c->principal, sizeof(c->principal), "%s", c->cert_cn);
        c->authed = true;
    } else {
        answer_fatal(c, id, "unauthenticated",
                     "present a client certificate signed by the broker's CA, or a token");
        return;
    }
    LOG(LOG_INFO, "%s: authenticated as '%s' (%s)", c->peer, c->principal,
        tok ? "token" : "certificate");
    struct answer a;
    answer_begin(&a, id, true, 2);
    pk_str(&a.pk, "principal");
    pk_str(&a.pk, c->principal);
    pk_str(&a.pk, "lease_ms");
    msgpack_pack_uint64(&a.pk, (uint64_t)cfg->lease_ms);
    answer_end(c, &a);
}

/* The endpoints of @r as a lookup answer lists them. */
static void pack_endpoints(msgpack_packer *pk, const struct registration *r)
{
    msgpack_pack_array(pk, (uint32_t)r->n_eps);
    for (size_t i = 0; i < r->n_eps; i++) {
        rrpci_pk_endpoint(pk, &r->eps[i], true, r->classes);
    }
}

/* One entry of a lookup answer's "instances": {instance, endpoints, ticket}. */
static void pack_instance(msgpack_packer *pk, const struct registration *r, const uint8_t *t,
                          size_t tlen)
{
    msgpack_pack_map(pk, r->has_instance ? 3 : 2);
    if (r->has_instance) {
        pk_str(pk, "instance");
        msgpack_pack_bin(pk, sizeof(r->instance));
        msgpack_pack_bin_body(pk, r->instance, sizeof(r->instance));
    }
    pk_str(pk, "endpoints");
    pack_endpoints(pk, r);
    pk_str(pk, "ticket");
    msgpack_pack_bin(pk, tlen);
    msgpack_pack_bin_body(pk, t, tlen);
}

/* What a lookup answer holds besides the instances: the envelope, expiry_ms,
 * the keys, the array header (generously). */
#define LOOKUP_OVERHEAD 256

/* The most @r can add to a lookup answer: its entry with the longest ticket. */
size_t server_answer_bytes(const struct registration *r)
{
    static const uint8_t longest[RRPC_TICKET_SIGNED_MAX_LEN];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_instance(&pk, r, longest, sizeof(longest));
    size_t n = sb.size;
    msgpack_sbuffer_destroy(&sb);
    return n;
}

/*
 * Whether one more registration @r of @s keeps every lookup answer of @s
 * within the frame limit: the instances, plus a copy of the first one's
 * endpoints and ticket for clients that know no "instances" (at most the
 * largest entry), plus the envelope.
 */
static bool lookup_fits(const struct service *s, const struct registration *r, size_t *ret_total)
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

static void register_answer(struct conn *c, uint64_t id, const struct registration *r);

static void op_register(struct conn *c, uint64_t id, const msgpack_object *m)
{
    char service[256];
    const msgpack_object *eps = rrpci_mp_get(m, "endpoints"), *cls = rrpci_mp_get(m, "classes");
    const msgpack_object *inst = rrpci_mp_get(m, "instance");
    if (!rrpci_mp_str(rrpci_mp_get(m, "service"), service, sizeof(service)) || !eps ||
        eps->type != MSGPACK_OBJECT_ARRAY || eps->via.array.size == 0 ||
        eps->via.array.size > MAX_EPS || !cls || cls->type != MSGPACK_OBJECT_ARRAY ||
        cls->via.array.size > 4) {
        answer_error(c, id, "bad_request", "register needs service, endpoints (1..64) and "
                     "classes");
        return;
    }
    struct registration tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    if (inst) {
        if (inst->type != MSGPACK_OBJECT_BIN || inst->via.bin.size != sizeof(tmpl.instance)) {
            answer_error(c, id, "bad_request", "instance must be 16 bytes (bin)");
            return;
        }
        memcpy(tmpl.instance, inst->via.bin.ptr, sizeof(tmpl.instance));
        uint8_t any = 0;
        for (size_t i = 0; i < sizeof(tmpl.instance); i++)
            any |= tmpl.instance[i];
        if (!any) {
            answer_error(c, id, "bad_request", "instance must not be all zero (draw it at random)");
            return;
        }
        tmpl.has_instance = true;
    }
    if (!acl_allows(cfg, "register", service, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' may not register '%s'", c->peer, c->principal, service);
        answer_error(c, id, "denied", "the ACL does not let this principal register it");
        return;
    }
    if (eps->via.array.size > (uint32_t)cfg->max_endpoints_per_registration) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%u endpoints; this rrpcd takes at most %d per registration "
                 "(max_endpoints_per_registration)", eps->via.array.size,
                 cfg->max_endpoints_per_registration);
        answer_error(c, id, "limit", msg);
        return;
    }
    uint32_t classes = 0;
    for (uint32_t i = 0; i < cls->via.array.size; i++) {
        char name[32];
        int k = rrpci_mp_str(&cls->via.array.ptr[i], name, sizeof(name)) ? rrpc_class_from_name(name) : -1;
        if (k < 0) {
            answer_error(c, id, "bad_request", "unknown QoS class");
            return;
        }
        classes |= 1u << k;
    }
    if (!classes)
        classes = RRPC_CLASS_MASK_ALL;
    uint64_t lease = (uint64_t)cfg->lease_ms;
    const msgpack_object *lo = rrpci_mp_get(m, "lease_ms");
    if (lo) {
        if (!rrpci_mp_uint(lo, &lease) || lease < 100) {
            answer_error(c, id, "bad_request", "lease_ms must be >= 100");
            return;
        }
        if (lease > (uint64_t)cfg->lease_ms)
            lease = (uint64_t)cfg->lease_ms;
    }
    if (registry_count() >= (size_t)cfg->max_registrations) {
        answer_error(c, id, "busy", "too many registrations; try later");
        return;
    }
    struct service *svc = registry_service(service);
    if (svc && svc->n_regs >= (size_t)cfg->max_instances_per_service) {
        char msg[400];
        snprintf(msg, sizeof(msg), "service '%s' has %zu registrations, the most this rrpcd "
                 "takes (max_instances_per_service)", service, svc->n_regs);
        answer_error(c, id, "limit", msg);
        return;
    }
    const char *down = etcdreg_on() ? etcdreg_degraded() : NULL;
    if (down) {
        char msg[500];
        snprintf(msg, sizeof(msg), "this rrpcd is degraded, the registry on etcd is unreachable "
                 "(%s): lookups answer from its cache, registrations are refused; try again "
                 "later", down);
        answer_error(c, id, "busy", msg);
        return;
    }
    struct rrpci_endpoint *ep = calloc(eps->via.array.size, sizeof(*ep));
    if (!ep) {
        answer_error(c, id, "internal", "out of memory");
        return;
    }
    for (uint32_t i = 0; i < eps->via.array.size; i++) {
        if (!rrpci_mp_endpoint(&eps->via.array.ptr[i], &ep[i])) {
            free(ep);
            answer_error(c, id, "bad_request", "an endpoint needs transport (tcp|rdma), host "
                         "and port");
            return;
        }
    }
    tmpl.eps = ep;
    tmpl.n_eps = eps->via.array.size;
    tmpl.classes = classes;
    tmpl.lease_ms = (uint32_t)lease;
    tmpl.answer_bytes = server_answer_bytes(&tmpl);
    size_t total;
    if (!lookup_fits(svc, &tmpl, &total)) {
        char msg[500];
        snprintf(msg, sizeof(msg), "with this registration a lookup of '%s' could answer %zu "
                 "bytes, above the %u-byte frame limit: register fewer endpoints or shorter "
                 "host names", service, total, CTL_MAX_FRAME);
        free(ep);
        answer_error(c, id, "limit", msg);
        return;
    }
    struct registration *r;
    int e = registry_add(service, c->principal, ep, tmpl.n_eps, &tmpl, &r);
    if (e) {
        free(ep);
        answer_error(c, id, "internal", strerror(-e));
        return;
    }
    if (etcdreg_on()) {
        /* Answered by server_register_done once etcd took it (or did not). */
        if ((e = etcdreg_put(r, c->serial, id)) != 0) {
            char msg[600];
            snprintf(msg, sizeof(msg), "the registry on etcd did not take it (%s); this rrpcd "
                     "is degraded: try again later",
                     e == -ENOMEM ? "out of memory"
                     : e == -EAGAIN && !etcdreg_degraded() ? "too many writes waiting"
                                                           : etcdreg_error());
            registry_remove(r);
            answer_error(c, id, "busy", msg);
        }
        return;
    }
    register_answer(c, id, r);
}

/* "keys": the public keys servers accept tickets of, the current one first. */
static void pack_keys(msgpack_packer *pk)
{
    pk_str(pk, "keys");
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
    LOG(LOG_INFO, "%s: '%s' registered '%s' (%zu endpoints, first %s://%s:%u, lease %u ms%s)",
        c->peer, c->principal, r->svc->name, r->n_eps, ep[0].transport, ep[0].host, ep[0].port,
        r->lease_ms, r->has_instance ? "" : ", no instance id: its tickets are unbound");
    struct answer a;
    answer_begin(&a, id, true, 3);
    pk_str(&a.pk, "reg");
    msgpack_pack_uint64(&a.pk, r->id);
    pk_str(&a.pk, "lease_ms");
    msgpack_pack_uint32(&a.pk, r->lease_ms);
    pack_keys(&a.pk);
    answer_end(c, &a);
}

bool server_register_done(uint64_t serial, uint64_t req_id, struct registration *r, int err,
                          const char *why)
{
    struct conn *c = conns;
    while (c && c->serial != serial)
        c = c->next;
    if (!c || c->closing || c->draining)
        return false;
    metrics_op("register");
    if (err)
        answer_error(c, req_id, "busy", why);
    else
        register_answer(c, req_id, r);
    metrics_op(NULL);
    set_events(c, EV_READ | EV_WRITE); /* its io callback sends it */
    return true;
}

static struct registration *own_reg(struct conn *c, uint64_t id, const msgpack_object *m)
{
    uint64_t reg;
    if (!rrpci_mp_uint(rrpci_mp_get(m, "reg"), &reg)) {
        answer_error(c, id, "bad_request", "missing reg");
        return NULL;
    }
    struct registration *r = registry_find(reg);
    if (!r || strcmp(r->principal, c->principal)) {
        answer_error(c, id, "not_found", "no such registration (expired, or rrpcd restarted)");
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
    if (etcdreg_on())
        etcdreg_renew(r);
    if (r->expires_ms != INT64_MAX)
        r->expires_ms = mono_ms() + r->lease_ms;
    LOG(LOG_DEBUG, "%s: renewed '%s' %016llx", c->peer, r->svc->name,
        (unsigned long long)r->id);
    struct answer a;
    answer_begin(&a, id, true, 2);
    pk_str(&a.pk, "lease_ms");
    msgpack_pack_uint32(&a.pk, r->lease_ms);
    pack_keys(&a.pk); /* a rotation reaches running servers here */
    answer_end(c, &a);
}

static void op_unregister(struct conn *c, uint64_t id, const msgpack_object *m)
{
    struct registration *r = own_reg(c, id, m);
    if (!r)
        return;
    LOG(LOG_INFO, "%s: '%s' unregistered '%s'", c->peer, c->principal, r->svc->name);
    if (etcdreg_on())
        etcdreg_remove(r);
    registry_remove(r);
    struct answer a;
    answer_begin(&a, id, true, 0);
    answer_end(c, &a);
}

/* A ticket for @principal to reach the instance @r of @s. */
static int make_ticket(const struct service *s, const struct registration *r,
                       const char *principal, int64_t expiry, uint8_t *t, size_t *tlen)
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
 * frame limit (lookup_fits).
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

/* What this rrpcd says of itself: any authenticated session may ask. */
static void op_status(struct conn *c, uint64_t id)
{
    const char *down = etcdreg_on() ? etcdreg_degraded() : NULL;
    uint64_t n_services = 0;
    for (const struct service *s = registry_services(); s; s = s->next)
        n_services++;
    struct answer a;
    answer_begin(&a, id, true, down ? 6 : 5);
    pk_str(&a.pk, "registry");
    pk_str(&a.pk, etcdreg_on() ? "etcd" : "memory");
    pk_str(&a.pk, "degraded");
    if (down)
        msgpack_pack_true(&a.pk);
    else
        msgpack_pack_false(&a.pk);
    if (down) {
        pk_str(&a.pk, "why");
        pk_str(&a.pk, down);
    }
    pk_str(&a.pk, "services");
    msgpack_pack_uint64(&a.pk, n_services);
    pk_str(&a.pk, "registrations");
    msgpack_pack_uint64(&a.pk, registry_count());
    pk_str(&a.pk, "sessions");
    msgpack_pack_uint64(&a.pk, (uint64_t)n_conns);
    answer_end(c, &a);
}

static void op_lookup(struct conn *c, uint64_t id, const msgpack_object *m)
{
    char service[256];
    if (!rrpci_mp_str(rrpci_mp_get(m, "service"), service, sizeof(service))) {
        answer_error(c, id, "bad_request", "lookup needs service");
        return;
    }
    if (!acl_allows(cfg, "lookup", service, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' may not look up '%s'", c->peer, c->principal, service);
        answer_error(c, id, "denied", "the ACL does not let this principal look it up");
        return;
    }
    struct service *s = registry_service(service);
    /* Registrations whose etcd write is under way are not answered yet. */
    size_t live = s ? s->n_regs - s->n_pending : 0;
    if (!live) {
        answer_error(c, id, "not_found", "no live registration of this service");
        return;
    }
    /* Rotate: instance k of the list comes first this time. */
    static unsigned rotation;
    size_t first = rotation++ % live;
    struct registration *r0 = next_live(s, NULL);
    for (size_t i = 0; i < first; i++)
        r0 = next_live(s, r0);
    int64_t expiry = wall_ms() + cfg->ticket_lifetime_ms;
    uint8_t ticket[RRPC_TICKET_SIGNED_MAX_LEN];
    size_t tlen;
    if (make_ticket(s, r0, c->principal, expiry, ticket, &tlen)) {
        answer_error(c, id, "internal", "cannot make a ticket");
        return;
    }
    struct answer a;
    answer_begin(&a, id, true, 4);
    pk_str(&a.pk, "endpoints");
    pack_endpoints(&a.pk, r0);
    pk_str(&a.pk, "ticket");
    msgpack_pack_bin(&a.pk, tlen);
    msgpack_pack_bin_body(&a.pk, ticket, tlen);
    pk_str(&a.pk, "expiry_ms");
    msgpack_pack_uint64(&a.pk, (uint64_t)expiry);
    pk_str(&a.pk, "instances");
    msgpack_pack_array(&a.pk, (uint32_t)live);
    struct registration *r = r0;
    for (size_t i = 0; i < live; i++) {
        if (i > 0 && make_ticket(s, r, c->principal, expiry, ticket, &tlen)) {
            msgpack_sbuffer_destroy(&a.sb);
            answer_error(c, id, "internal", "cannot make a ticket");
            return;
        }
        pack_instance(&a.pk, r, ticket, tlen);
        r = next_live(s, r);
    }
    answer_end(c, &a);
    metrics_tickets(live);
    LOG(LOG_DEBUG, "%s: '%s' looked up '%s' (%zu instances)", c->peer, c->principal, service,
        live);
}

/* watch {service}: answers {watch: id}, then pushes the live set now and on every
 * change (watch.c); unwatch {watch}. */
static void op_watch(struct conn *c, uint64_t id, const char *op, const msgpack_object *m)
{
    char service[256];
    uint64_t wid = 0;
    int r;
    if (!strcmp(op, "unwatch")) {
        if (!rrpci_mp_uint(rrpci_mp_get(m, "watch"), &wid)) {
            answer_error(c, id, "bad_request", "unwatch needs watch");
            return;
        }
        r = watch_del(c, wid);
    } else if (!rrpci_mp_str(rrpci_mp_get(m, "service"), service, sizeof(service))) {
        answer_error(c, id, "bad_request", "watch needs service");
        return;
    } else if (!acl_allows(cfg, "lookup", service, c->principal)) {
        LOG(LOG_NOTICE, "%s: '%s' may not watch '%s'", c->peer, c->principal, service);
        answer_error(c, id, "denied", "the ACL does not let this principal look it up");
        return;
    } else {
        r = watch_add(c, service, &wid);
    }
    if (r) {
        answer_error(c, id, r == -ENOENT ? "not_found" : r == -ENOSPC ? "limit" : "internal",
                     r == -ENOENT   ? "no such watch on this session"
                     : r == -ENOSPC ? "at most 64 watches per session (65536 in all)"
                                    : "out of memory");
        return;
    }
    struct answer a;
    answer_begin(&a, id, true, 1);
    pk_str(&a.pk, "watch");
    msgpack_pack_uint64(&a.pk, wid);
    answer_end(c, &a);
}

int server_push(struct conn *c, const void *buf, size_t len)
{
    if (c->closing || c->draining)
        return 0; /* going: nothing to send */
    if (len > CTL_MAX_FRAME)
        return -E2BIG;
    if (c->wlen - c->woff > WATCH_BACKLOG)
        return -EAGAIN;
    uint8_t hdr[4];
    rrpci_put_le32(hdr, (uint32_t)len);
    if (wbuf_write(c, (const char *)hdr, 4) || wbuf_write(c, buf, len)) {
        c->closing = true;
        set_events(c, EV_READ | EV_WRITE);
        return -ENOMEM;
    }
    set_events(c, EV_READ | EV_WRITE); /* conn_drive sends it */
    return 0;
}

static void handle_frame(struct conn *c, const uint8_t *buf, size_t len)
{
    if (rrpci_mp_check(buf, len, 8)) {
        answer_fatal(c, 0, "bad_request", "the frame is not one well-formed msgpack object");
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_MAP) {
        answer_fatal(c, 0, "bad_request", "a request is a msgpack map");
        goto out;
    }
    const msgpack_object *m = &u.data;
    uint64_t v = 0, id = 0;
    char op[32];
    if (!rrpci_mp_uint(rrpci_mp_get(m, "v"), &v) || v != CTL_VERSION) {
        answer_fatal(c, 0, "version", "this rrpcd speaks control protocol version 2 (signed "
                     "tickets): upgrade libroce_rpc_broker");
        goto out;
    }
    if (!rrpci_mp_uint(rrpci_mp_get(m, "id"), &id) || !rrpci_mp_str(rrpci_mp_get(m, "op"), op, sizeof(op))) {
        answer_fatal(c, id, "bad_request", "a request needs id and op");
        goto out;
    }
    metrics_op(op);
    if (!strcmp(op, "hello"))
        op_hello(c, id, m);
    else if (!c->authed)
        answer_fatal(c, id, "unauthenticated", "say hello first");
    else if (!strcmp(op, "register"))
        op_register(c, id, m);
    else if (!strcmp(op, "renew"))
        op_renew(c, id, m);
    else if (!strcmp(op, "unregister"))
        op_unregister(c, id, m);
    else if (!strcmp(op, "lookup"))
        op_lookup(c, id, m);
    else if (!strcmp(op, "watch") || !strcmp(op, "unwatch"))
        op_watch(c, id, op, m);
    else if (!strcmp(op, "status"))
        op_status(c, id);
    else
        answer_error(c, id, "bad_request", "unknown op");
out:
    metrics_op(NULL);
    msgpack_unpacked_destroy(&u);
}

/* Feeds received bytes to the frame reader. */
static void feed(struct conn *c, const uint8_t *p, size_t n)
{
    while (n && !c->closing) {
        if (c->hdr_got < 4) {
            size_t k = 4 - c->hdr_got < n ? 4 - c->hdr_got : n;
            memcpy(c->hdr + c->hdr_got, p, k);
            c->hdr_got += k;
            p += k;
            n -= k;
            if (c->hdr_got < 4)
                return;
            uint32_t len = rrpci_get_le32(c->hdr);
            if (len == 0 || len > CTL_MAX_FRAME) {
                char msg[96];
                snprintf(msg, sizeof(msg), "frame length %u is outside 1..%u", len, CTL_MAX_FRAME);
                answer_fatal(c, 0, "bad_request", msg);
                return;
            }
            /* Before hello, only as much as a hello needs: an anonymous
             * session must not make us hold a large frame. */
            if (!c->authed && len > (uint32_t)cfg->auth_max_frame) {
                char msg[160];
                snprintf(msg, sizeof(msg), "frame length %u is above the %d bytes allowed "
                         "before authentication (auth_max_frame); send hello first", len,
                         cfg->auth_max_frame);
                answer_fatal(c, 0, "bad_request", msg);
                return;
            }
            if (n >= len) { /* the whole frame is in this read: no copy */
                handle_frame(c, p, len);
                p += len;
                n -= len;
                c->hdr_got = 0;
                continue;
            }
            /* The buffer grows with the bytes that arrive, not with the
             * length announced. */
            c->frame_cap = len < FRAME_MIN_CAP ? len : FRAME_MIN_CAP;
            if (c->frame_cap < n)
                c->frame_cap = n;
            c->frame = malloc(c->frame_cap);
            if (!c->frame) {
                c->closing = true;
                return;
            }
            c->frame_len = len;
            c->frame_got = 0;
            continue;
        }
        size_t k = c->frame_len - c->frame_got < n ? c->frame_len - c->frame_got : n;
        if (c->frame_got + k > c->frame_cap) {
            size_t cap = c->frame_cap * 2;
            if (cap < c->frame_got + k)
                cap = c->frame_got + k;
            if (cap > c->frame_len)
                cap = c->frame_len;
            uint8_t *nf = realloc(c->frame, cap);
            if (!nf) {
                c->closing = true; /* out of memory: drop the client, not the daemon */
                return;
            }
            c->frame = nf;
            c->frame_cap = cap;
        }
        memcpy(c->frame + c->frame_got, p, k);
        c->frame_got += k;
        p += k;
        n -= k;
        if (c->frame_got == c->frame_len) {
            handle_frame(c, c->frame, c->frame_len);
            free(c->frame);
            c->frame = NULL;
            c->hdr_got = 0;
        }
    }
}

static void take_peer_cert(struct conn *c)
{
    X509 *x = SSL_get1_peer_certificate(c->ssl);
    if (!x)
        return;
    if (SSL_get_verify_result(c->ssl) == X509_V_OK) {
        X509_NAME *nm = X509_get_subject_name(x);
        int n = X509_NAME_get_text_by_NID(nm, NID_commonName, c->cert_cn, sizeof(c->cert_cn));
        if (n <= 0 || (size_t)n != strlen(c->cert_cn))
            c->cert_cn[0] = 0; /* no CN, or one with a NUL in it */
    }
    X509_free(x);
}

/* Progress on a connection: handshake, then flush answers, then read. */
static void conn_drive(struct conn *c)
{
    if (!c->handshaken) {
        ERR_clear_error();
        int r = SSL_accept(c->ssl);
        if (r != 1) {
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ) {
                set_events(c, EV_READ);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                set_events(c, EV_READ | EV_WRITE);
                return;
            }
            char why[300];
            snprintf(why, sizeof(why), "TLS handshake failed: %s", ssl_reason());
            metrics_tls_failure();
            c->closing = true; /* no close_notify on a failed handshake */
            conn_linger(c, why);
            return;
        }
        c->handshaken = true;
        take_peer_cert(c);
        LOG(LOG_DEBUG, "%s: TLS up (%s, client certificate CN '%s')", c->peer,
            SSL_get_version(c->ssl), c->cert_cn);
        /* The accept's deadline still runs: it covers hello too. */
    }
    for (;;) {
        /* Flush. */
        while (c->woff < c->wlen) {
            size_t n = 0;
            ERR_clear_error();
            if (!SSL_write_ex(c->ssl, c->wbuf + c->woff, c->wlen - c->woff, &n)) {
                int e = SSL_get_error(c->ssl, 0);
                if (e == SSL_ERROR_WANT_WRITE) {
                    set_events(c, EV_READ | EV_WRITE);
                    return;
                }
                if (e == SSL_ERROR_WANT_READ) {
                    set_events(c, EV_READ);
                    return;
                }
                c->closing = true;
                conn_close(c, e == SSL_ERROR_SSL ? ssl_reason() : "peer went away");
                return;
            }
            c->woff += n;
        }
        c->woff = c->wlen = 0;
        if (c->closing) {
            conn_close(c, NULL);
            return;
        }
        /* Read until OpenSSL wants more from the socket. */
        uint8_t buf[16384];
        size_t n = 0;
        ERR_clear_error();
        if (!SSL_read_ex(c->ssl, buf, sizeof(buf), &n)) {
            int e = SSL_get_error(c->ssl, 0);
            if (e == SSL_ERROR_WANT_READ) {
                set_events(c, EV_READ);
                return;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                set_events(c, EV_READ | EV_WRITE);
                return;
            }
            if (e == SSL_ERROR_ZERO_RETURN) {
                conn_close(c, NULL);
                return;
            }
            c->closing = true;
            conn_close(c, e == SSL_ERROR_SSL ? ssl_reason() : NULL);
            return;
        }
        /* Before hello only the accept's deadline counts: bytes trickling in
         * (one a second, say) must not keep an anonymous session alive. */
        if (c->idle_timer)
            ev_timer_again(loop, &c->timer);
        feed(c, buf, n);
        if (c->authed && !c->idle_timer) {
            c->idle_timer = true;
            ev_timer_stop(loop, &c->timer);
            c->timer.repeat = (double)cfg->idle_timeout_ms / 1000.0;
            ev_timer_again(loop, &c->timer);
        }
        if (c->wlen > MAX_WBUF)
            c->closing = true; /* a client that never reads its answers */
    }
}

/* ---- accepting ----------------------------------------------------------------- */

static void accept_resume_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    ev_io_start(loop, &accept_w);
}

/*
 * At max_connections: closes the oldest session that has not authenticated,
 * so anonymous sessions can never push out authenticated ones (nor keep a
 * new client out for longer than one auth_timeout_ms).  False when every
 * session has authenticated.
 */
static bool evict_anonymous(void)
{
    for (struct conn *c = conns; c; c = c->next)
        if (!c->authed) {
            conn_close(c, "evicted: max_connections reached and it had not authenticated");
            return true;
        }
    return false;
}

static void accept_cb(struct ev_loop *l, ev_io *w, int revents)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                LOG(LOG_WARNING, "accept: %s; pausing for 100 ms", strerror(errno));
                ev_io_stop(loop, &accept_w);
                ev_timer_start(loop, &accept_pause_w);
            }
            return;
        }
        char host[INET6_ADDRSTRLEN] = "?", peer[64];
        int port = 0;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            port = ntohs(a->sin6_port);
        }
        snprintf(peer, sizeof(peer), "%s:%d", host, port);
        bool full;
        struct source *src = source_get(&ss, &full);
        if (!src) {
            metrics_refused(full ? "max_connections_per_source" : "out_of_memory");
            log_refusal(peer, full ? "max_connections_per_source reached for this address"
                                   : "out of memory");
            close(fd);
            continue;
        }
        if (n_conns >= cfg->max_connections && !evict_anonymous()) {
            metrics_refused("max_connections");
            log_refusal(peer, "max_connections reached, every session authenticated");
            source_put(src);
            close(fd);
            continue;
        }
        struct conn *c = calloc(1, sizeof(*c));
        SSL *ssl = c ? SSL_new(sslctx) : NULL;
        if (!ssl || rrpci_ssl_set_socket(ssl, fd)) { /* writes never raise SIGPIPE */
            metrics_refused("out_of_memory");
            log_refusal(peer, "out of memory");
            SSL_free(ssl);
            free(c);
            source_put(src);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->fd = fd;
        c->ssl = ssl;
        c->src = src;
        SSL_set_accept_state(ssl);
        snprintf(c->peer, sizeof(c->peer), "%s", peer);
        static uint64_t serials;
        c->serial = ++serials;
        c->prev = conns_tail; /* the newest goes last: eviction looks from the head */
        if (conns_tail)
            conns_tail->next = c;
        else
            conns = c;
        conns_tail = c;
        n_conns++;
        metrics_sessions(n_conns);
        ev_io_init(&c->io, conn_io_cb, fd, EV_READ);
        c->io.data = c;
        ev_io_start(loop, &c->io);
        /* One deadline for the handshake and hello together. */
        ev_timer_init(&c->timer, conn_timeout_cb, (double)cfg->auth_timeout_ms / 1000.0, 0);
        c->timer.data = c;
        ev_timer_start(loop, &c->timer);
        LOG(LOG_DEBUG, "%s: accepted", peer);
    }
}

static void sweep_cb(struct ev_loop *l, ev_timer *w, int revents)
{
    registry_sweep(mono_ms());
}

/* ---- start / stop --------------------------------------------------------------- */

static int tls_setup(void)
{
    sslctx = SSL_CTX_new(TLS_server_method());
    if (!sslctx)
        return -ENOMEM;
    SSL_CTX_set_min_proto_version(sslctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(sslctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(sslctx, 0); /* no resumption: every session authenticates */
    SSL_CTX_set_mode(sslctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(sslctx, cfg->cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(sslctx, cfg->key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(sslctx) != 1) {
        LOG(LOG_ERR, "cannot load the certificate %s / key %s: %s", cfg->cert, cfg->key,
            ssl_reason());
        return -EINVAL;
    }
    if (cfg->ca[0]) {
        if (SSL_CTX_load_verify_locations(sslctx, cfg->ca, NULL) != 1) {
            LOG(LOG_ERR, "cannot load the CA %s: %s", cfg->ca, ssl_reason());
            return -EINVAL;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca);
        if (names)
            SSL_CTX_set_client_CA_list(sslctx, names);
        /* A certificate that does not chain to the CA fails the handshake;
         * none at all is allowed unless require_client_cert (then a token). */
        SSL_CTX_set_verify(sslctx,
                           SSL_VERIFY_PEER |
                               (cfg->require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                           NULL);
    } else {
        SSL_CTX_set_verify(sslctx, SSL_VERIFY_NONE, NULL);
    }
    return 0;
}

static int listen_on(const char *addr, int *ret_port)
{
    char host[256], port[16];
    const char *colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= sizeof(host))
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = 0;
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= sizeof(host))
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
    }
    snprintf(port, sizeof(port), "%s", colon + 1);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res;
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (g) {
        LOG(LOG_ERR, "listen %s: %s", addr, gai_strerror(g));
        return -EINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, r = 0;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1024))
        r = -errno;
    freeaddrinfo(res);
    if (r) {
        LOG(LOG_ERR, "listen %s: %s", addr, strerror(-r));
        if (fd >= 0)
            close(fd);
        return r;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *ret_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                              : ((struct sockaddr_in6 *)&ss)->sin6_port);
    lfd = fd;
    return 0;
}

int server_start(struct ev_loop *l, struct config *c)
{
    loop = l;
    cfg = c;
    int r = tls_setup();
    int port = 0;
    if (!r)
        r = listen_on(cfg->listen, &port);
    if (r)
        return r;
    ev_io_init(&accept_w, accept_cb, lfd, EV_READ);
    ev_io_start(loop, &accept_w);
    ev_timer_init(&accept_pause_w, accept_resume_cb, 0.1, 0);
    ev_timer_init(&sweep_w, sweep_cb, 0.1, 0.1);
    ev_timer_start(loop, &sweep_w);
    watch_start(loop);
    LOG(LOG_NOTICE, "listening on %s (port %d), TLS 1.3, %s, %zu tokens, %zu ACL rules", cfg->listen,
        port, cfg->ca[0] ? (cfg->require_client_cert ? "client certificate required"
                                                     : "client certificates verified")
                         : "no client certificates",
        cfg->n_tokens, cfg->n_acl);
    uint8_t kid[RRPC_TICKET_KEY_ID_LEN];
    rrpc_ticket_key_id(cfg->keys[0], kid);
    LOG(cfg->signer_ephemeral ? LOG_NOTICE : LOG_INFO, "tickets signed with Ed25519 key "
        "%02x%02x%02x%02x%02x%02x%02x%02x%s; %zu previous key(s) still accepted", kid[0], kid[1],
        kid[2], kid[3], kid[4], kid[5], kid[6], kid[7],
        cfg->signer_ephemeral ? " (no ticket_key: made for this run; tickets from before a "
                                "restart are refused)" : "", cfg->n_keys - 1);
    if (cfg->port_file[0]) {
        char tmp[1100];
        snprintf(tmp, sizeof(tmp), "%s.tmp", cfg->port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, cfg->port_file)) {
            LOG(LOG_ERR, "cannot write the port file %s: %s", cfg->port_file, strerror(errno));
            return -EIO;
        }
    }
    return 0;
}

void server_stop(void)
{
    while (conns)
        conn_close(conns, NULL);
    if (lfd >= 0) {
        ev_io_stop(loop, &accept_w);
        close(lfd);
        lfd = -1;
    }
    ev_timer_stop(loop, &accept_pause_w);
    ev_timer_stop(loop, &sweep_w);
    watch_stop();
    SSL_CTX_free(sslctx);
    sslctx = NULL;
}

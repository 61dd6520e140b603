/* SPDX-License-Identifier: MIT */
/* rrpcd, the broker: what its files share. */
#ifndef RRPCD_H
#define RRPCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

#include "broker/proto.h" /* the control schema, rrpci_mp_* */
#include "util/conf.h"
#include "util/idmap.h"

/* ---- configuration (config.c) ----------------------------------------- */

struct acl_rule {
    char action[16];    /* "register", "lookup" or "*" */
    char service[256];  /* fnmatch(3) pattern */
    char principal[256];
};

struct token {
    char principal[256];
    uint8_t digest[32]; /* SHA-256 of the token; compared in constant time */
};

#define ETCD_MAX_ENDPOINTS 16

struct config {
    char listen[300];
    char cert[1024], key[1024], ca[1024], token_file[1024], port_file[1024];
    bool require_client_cert;
    int64_t ticket_lifetime_ms, lease_ms, idle_timeout_ms, auth_timeout_ms;
    int auth_max_frame; /* bytes a frame may have before hello succeeds */
    int max_connections, max_connections_per_source, max_registrations;
    int max_sessions_per_principal, max_registers_per_s;
    int64_t max_held_per_principal, max_held_total; /* bytes */
    int max_instances_per_service, max_endpoints_per_registration;
    /* agents: the principals whose pairs reports are taken (comma-separated; "" none);
     * max_agents: the hosts whose reports rrpcd holds at once. */
    char agents[4096];
    int max_agents;
    bool syslog;
    int log_level;
    struct acl_rule *acl;
    size_t n_acl;
    struct token *tokens;
    size_t n_tokens;
    /* registry = etcd://HOST:PORT[,HOST:PORT...]: n_etcd > 0 (etcdreg.c;
     * docs/broker.md). */
    char etcd_hosts[ETCD_MAX_ENDPOINTS][300];
    size_t n_etcd;
    char etcd_prefix[200];
    int etcd_compact_interval_s; /* 0: rrpcd does not compact etcd's history */
    char etcd_cert[1024], etcd_key[1024], etcd_ca[1024], etcd_user[256], etcd_password_file[1024];
    /* metrics_listen = HOST:PORT: GET /metrics over HTTP (metrics.c); "" off. */
    char metrics_listen[300], metrics_port_file[1024];
    int metrics_max_connections, metrics_timeout_s;
    /* Tickets: signed with ticket_key (ticket_key_previous: public keys still accepted
     * during a rotation's overlap).  config_finish loads them: signer, and keys[0] its
     * public half, keys[1..] the previous ones; servers get keys[] at register and renew. */
    char ticket_key[1024];
    char ticket_prev[RRPC_TICKET_MAX_KEYS - 1][1024];
    size_t n_ticket_prev;
    rrpc_ticket_key *signer;
    bool signer_ephemeral; /* no ticket_key: a key made for this run */
    uint8_t keys[RRPC_TICKET_MAX_KEYS][RRPC_TICKET_KEY_LEN];
    size_t n_keys;
};

/* rrpcd's settings: one typed table (util/conf.h) over struct config. */
extern const struct rrpci_conf_table rrpcd_settings;
/* Prints the settings table (name, default, range, meaning) in @style. */
void config_print_table(FILE *fp, enum rrpci_conf_style style);
/* Sets defaults; then each call applies a file or one "key = value". */
void config_init(struct config *c);
int config_load_file(struct config *c, const char *path);
int config_set(struct config *c, const char *key, const char *value, const char *where);
/* Checks what must be set, resolves the listen address and loads the certificate, key and
 * CA as the start does (so --check refuses what the start would), loads the token file and
 * the ticket keys. */
int config_finish(struct config *c);
void config_free(struct config *c);
/* Where the complaints of the calls above go (NULL: stderr). */
void config_report_to(FILE *fp);
/* A reload: @nc (finished) takes @cur's values of the settings only a restart changes
 * (listen, port_file, log, registry and etcd_*, metrics_*); the names of those @nc had
 * other values for go to @out, comma-separated ("" when none). */
void config_keep_restart_only(const struct config *cur, struct config *nc, char *out,
                              size_t outlen);
/* Moves the rest of @nc into @cur (freeing what @cur held), then frees @nc's. */
void config_apply(struct config *cur, struct config *nc);

/* The first line of etcd_password_file, trimmed, into @buf: 0, -errno, or -EINVAL (empty,
 * or longer than @len). */
int config_etcd_password(const struct config *c, char *buf, size_t len);

bool acl_allows(const struct config *c, const char *action, const char *service,
                const char *principal);
/* Whether @principal is in the agents list. */
bool agent_allowed(const struct config *c, const char *principal);
/* The principal of @token, or NULL. */
const char *token_principal(const struct config *c, const char *token, size_t len);

/* ---- logging (main.c) -------------------------------------------------- */

void log_open(bool use_syslog, int level);
/* Copies @in to @out (@outlen bytes, NUL-terminated; cut at a whole character)
 * as printable text: a control byte, DEL or a byte of no well-formed UTF-8
 * sequence becomes \xNN, a C1 control, a bidirectional mark or override
 * (U+202E...), a line separator or U+FEFF becomes \u{NNNN}, a backslash
 * \\; other UTF-8 stays.  Returns the length written.  log_msg passes every
 * line through it. */
size_t log_escape(const char *in, char *out, size_t outlen);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern int log_level;
#define LOG(level, ...)                                                                       \
    do {                                                                                      \
        if ((level) <= log_level)                                                             \
            log_msg(level, __VA_ARGS__);                                                      \
    } while (0)

/*
 * The modules, each an object handed to those that use it; every arrow goes
 * one way (main.c makes them, in this order):
 *
 *   main ──> server ──> watch ──> registry ──> metrics
 *              │          ^          ^
 *              ├──────────┘          │
 *              └──> store ───────────┘      (store: memory, or etcd: etcdreg.c)
 *
 * Where a lower module must tell a higher one something (the registry: a
 * service's live set changed; the etcd store: a register was written; watch:
 * a push is ready for a session), it calls a function the higher one handed
 * it.  The schema of the control protocol is broker/proto.h.
 */

/* ---- the registry (registry.c): services and registrations in memory ---------- */

/* struct rrpci_endpoint: the control schema's endpoint (broker/proto.h). */

struct registration {
    struct registration *next;
    struct rrpci_idnode node; /* in the registry's map by id (key == id) */
    struct service *svc;
    uint64_t id;
    char principal[256];
    struct rrpci_endpoint *eps;
    size_t n_eps;
    uint32_t classes; /* bit per QoS class */
    uint32_t lease_ms;
    int64_t expires_ms; /* monotonic */
    bool has_instance;  /* the server sent an instance id: its tickets are bound to it */
    bool require_esp;   /* lookups answer it only to clients whose host has a pair with it */
    uint8_t instance[RRPC_TICKET_INSTANCE_LEN];
    size_t answer_bytes; /* the most its entry adds to a lookup answer */
    int64_t etcd_lease; /* registry on etcd: the lease its key is bound to */
    bool etcd_stale;    /* registry on etcd: not (yet) seen since the last resync */
    bool etcd_pending;  /* registry on etcd: its write is under way; not in lookups yet */
};

struct service {
    struct service *next;
    char name[256];
    struct registration *regs;
    size_t n_regs;
    size_t n_pending; /* of them, registrations whose etcd write is under way */
    size_t answer_bytes; /* sum of the registrations' answer_bytes */
};

int64_t mono_ms(void);
int64_t wall_ms(void);

struct registry;
/* The live set of @service may have changed (a registration came, went, or became live). */
typedef void registry_changed_fn(void *arg, const char *service);
/* @r's lease ran out; it is freed when this returns. */
typedef void registry_expired_fn(void *arg, struct registration *r);

/* An empty registry, or NULL without memory.  registry_free frees it and all it holds
 * (NULL: nothing). */
struct registry *registry_new(void);
void registry_free(struct registry *reg);
/* Who hears of changes (one listener; NULL: nobody). */
void registry_listen(struct registry *reg, registry_changed_fn *fn, void *arg);
/* Drops registrations expired at @now (and services left without any), telling @fn of each. */
void registry_sweep(struct registry *reg, int64_t now, registry_expired_fn *fn, void *arg);
size_t registry_count(const struct registry *reg);
/* Takes ownership of @eps on success; copies the rest of @tmpl (classes,
 * lease_ms, has_instance, instance, answer_bytes, etcd_lease; id when not 0
 * (-EEXIST when taken), else a random one; expires_ms when not 0, else now +
 * lease_ms).  -ENOMEM, -EIO (no randomness). */
int registry_add(struct registry *reg, const char *service, const char *principal,
                 struct rrpci_endpoint *eps, size_t n_eps, const struct registration *tmpl,
                 struct registration **ret);
struct registration *registry_find(struct registry *reg, uint64_t id);
void registry_remove(struct registry *reg, struct registration *r);
/* @r, pending while its etcd write was under way, is live now (lookups, watches). */
void registry_set_live(struct registry *reg, struct registration *r);
struct service *registry_service(struct registry *reg, const char *name);
/* The first service (then ->next), for walks that do not remove. */
struct service *registry_services(struct registry *reg);

/* ---- how registrations appear in answers (answer.c) --------------------------- */

/* The endpoints of @r as a lookup answer and a watch push list them. */
void answer_pack_endpoints(msgpack_packer *pk, const struct registration *r);
/* One entry of a lookup answer's "instances": {instance, endpoints, ticket}. */
void answer_pack_instance(msgpack_packer *pk, const struct registration *r, const uint8_t *t,
                          size_t tlen);
/* The most @r adds to a lookup answer: its entry with the longest ticket. */
size_t answer_bytes(const struct registration *r);
/* Whether one more registration @r of @s (NULL: a new service) keeps every lookup
 * answer of @s within the frame limit; the largest answer in *@ret_total. */
bool answer_lookup_fits(const struct service *s, const struct registration *r,
                        size_t *ret_total);

/* ---- where registrations are kept: the store ----------------------------------- */

/*
 * registry = memory: in the registry alone (store_memory, registry.c).
 * registry = etcd://...: on etcd too, the registry a cache kept in step with it
 * (etcdreg_start, etcdreg.c).  Ops a store does not need are NULL.
 */
struct store;
struct store_ops {
    const char *name; /* status's "registry": CTL_REGISTRY_MEMORY or CTL_REGISTRY_ETCD */
    /* Why the store is degraded (etcd unreachable, or not synchronized yet), or NULL. */
    const char *(*degraded)(struct store *st);
    /* Why rrpcd is degraded, or the last write failed. */
    const char *(*error)(struct store *st);
    /* Starts the write of @r (a lease of its lease_ms, then its key) and marks it
     * pending (not in lookups, no local expiry); store->done hears of the result
     * with @serial and @req_id.  -EAGAIN at once while degraded or when too many
     * writes wait, -ENOMEM. */
    int (*put)(struct store *st, struct registration *r, uint64_t serial, uint64_t req_id);
    /* A renewal of @r through this rrpcd (-EAGAIN at once while degraded). */
    int (*renew)(struct store *st, struct registration *r);
    /* @r is unregistered or expired here: its key goes (a failure is logged). */
    void (*remove)(struct store *st, struct registration *r);
    /* Stops its threads and frees it. */
    void (*stop)(struct store *st);
};
/* The answer to the register @req_id of the session @serial that put @r (@err 0),
 * or did not (@r NULL, @why).  false when that session is gone. */
typedef bool store_done_fn(void *arg, uint64_t serial, uint64_t req_id, struct registration *r,
                           int err, const char *why);
struct store {
    const struct store_ops *ops;
    store_done_fn *done; /* set by whoever puts (the server) */
    void *done_arg;
};
/* The memory store (a static object: nothing to free). */
struct store *store_memory(void);
/* With registry = etcd://...: the clients, and the threads that keep @reg in step
 * with etcd (range, then watch) and write to it.  0 and *@ret, or a negative code. */
struct ev_loop;
int etcdreg_start(struct ev_loop *loop, const struct config *cfg, struct registry *reg,
                  struct store **ret);

static inline const char *store_degraded(struct store *st)
{
    return st->ops->degraded ? st->ops->degraded(st) : NULL;
}

/* ---- watches of a service (watch.c) -------------------------------------------- */

#define WATCH_MAX_PER_SESSION 64 /* subscriptions of one session */
#define WATCH_MAX_TOTAL 65536    /* of all sessions together */
#define WATCH_BACKLOG (256u << 10) /* bytes waiting to a session above which pushes wait */
struct watch;
struct conn; /* a session of the server; a watch only names it */
/* Queues the frame @buf (@len bytes, without its length) to the session @c:
 * 0, -EAGAIN when more than WATCH_BACKLOG bytes wait to go out to it (try
 * later), -E2BIG above the frame limit, -ENOMEM (the session is then closed). */
typedef int watch_push_fn(struct conn *c, const void *buf, size_t len);
/* Watches of the services of @reg, pushed through @push from timers on @loop (NULL:
 * none, nothing is pushed); NULL without memory.  watch_free: NULL is nothing. */
struct watch *watch_new(struct ev_loop *loop, struct registry *reg, watch_push_fn *push);
void watch_free(struct watch *w);
/* Subscribes @c to @service; the first push (soon) is its live set as it is.
 * -ENOSPC beyond WATCH_MAX_PER_SESSION or WATCH_MAX_TOTAL, -ENOMEM. */
int watch_add(struct watch *w, struct conn *c, const char *service, uint64_t *ret_id);
/* -ENOENT when @c has no subscription @id. */
int watch_del(struct watch *w, struct conn *c, uint64_t id);
/* Whether @c has a subscription (such a session is not closed for idleness). */
bool watch_any(const struct watch *w, const struct conn *c);
/* Forgets the subscriptions of @c (closed). */
void watch_conn_gone(struct watch *w, struct conn *c);
/* The live set of @service may have changed: its subscribers get it soon (a
 * registry_changed_fn). */
void watch_changed(void *w, const char *service);

/* ---- the server (server.c; its files: server_int.h) ----------------------------- */

struct server;
/* Listens on cfg->listen with TLS and serves the control protocol from @reg and @st
 * (which it answers registers for: st->done); writes cfg->port_file.  0 and *@ret,
 * or a negative code (logged). */
int server_start(struct ev_loop *loop, struct config *cfg, struct registry *reg, struct store *st,
                 struct server **ret);
/* A reload: new TLS sessions use @nc's certificate, key, CA and require_client_cert
 * (those open keep theirs).  0, or -EINVAL (logged) with nothing changed. */
int server_reload_tls(struct server *srv, const struct config *nc);
/* Closes every session and the listener; NULL is nothing. */
void server_stop(struct server *srv);

/* ---- rrpcd's own metrics (metrics.c) ------------------------------------------- */

enum metrics_refusal { REFUSED_MAX_CONNECTIONS, REFUSED_PER_SOURCE, REFUSED_NO_MEMORY,
                       REFUSED_RESERVED };
enum metrics_etcd_error { ETCD_ERROR_WATCH, ETCD_ERROR_WRITE };
/* With metrics_listen set, serves GET /metrics on a thread of its own (and writes
 * metrics_port_file); 0 or a negative code, logged with the address. */
int metrics_start(const struct config *c);
void metrics_stop(void);
/* One call where each thing happens; any thread (the counters are atomics).
 * metrics_op names the request being handled (enum rrpci_ctl_op; -1: none or
 * unknown), metrics_answer counts its answer: CTL_OK, else the error code sent
 * (enum rrpci_ctl_err). */
void metrics_op(int op);
void metrics_answer(int err);
void metrics_tickets(size_t n);
void metrics_tls_failure(void);
void metrics_sessions(int n);
/* A connection closed at accept. */
void metrics_refused(enum metrics_refusal why);
/* An anonymous session closed to make room for a new one at max_connections. */
void metrics_evicted(void);
/* Bytes of partly received requests and unsent answers, all sessions. */
void metrics_held(size_t bytes);
/* A session closed, or an answer refused, for what it would make rrpcd hold. */
void metrics_held_refused(void);
void metrics_registry(int d_services, int d_instances);
void metrics_etcd_degraded(bool degraded);
void metrics_etcd_error(enum metrics_etcd_error what);
/* rrpcd compacted etcd's history. */
void metrics_etcd_compaction(void);
/* A pairs report taken, or refused for @why. */
enum metrics_report { REPORT_ACCEPTED, REPORT_NOT_AN_AGENT, REPORT_ADDRESS_NOT_CERTIFIED,
                      REPORT_MALFORMED, REPORT_MAX_AGENTS };
void metrics_report(enum metrics_report what);
/* Hosts whose agent's report rrpcd holds. */
void metrics_agents(size_t n);
/* A lookup of a service that requires ESP: @withheld instances left out for
 * want of a pair, @denied when none was left to answer. */
void metrics_esp_lookup(size_t withheld, bool denied);


#endif

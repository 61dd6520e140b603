/* SPDX-License-Identifier: MIT */
/* rrpcd, the broker: what its files share. */
#ifndef RRPCD_H
#define RRPCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <roce_rpc/broker.h>
#include <roce_rpc/rrpc.h>

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
    int max_instances_per_service, max_endpoints_per_registration;
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

/* The first line of etcd_password_file, trimmed, into @buf: 0, -errno, or -EINVAL (empty,
 * or longer than @len). */
int config_etcd_password(const struct config *c, char *buf, size_t len);

bool acl_allows(const struct config *c, const char *action, const char *service,
                const char *principal);
/* The principal of @token, or NULL. */
const char *token_principal(const struct config *c, const char *token, size_t len);

/* ---- logging (main.c) -------------------------------------------------- */

void log_open(bool use_syslog, int level);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern int log_level;
#define LOG(level, ...)                                                                       \
    do {                                                                                      \
        if ((level) <= log_level)                                                             \
            log_msg(level, __VA_ARGS__);                                                      \
    } while (0)

/* ---- the registry (registry.c) ------------------------------------------ */

/* struct rrpci_endpoint: the control schema's endpoint (broker/mpcheck.h). */

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
/* Drops expired registrations (and services left without any). */
void registry_sweep(int64_t now);
size_t registry_count(void);
/* Takes ownership of @eps on success; copies the rest of @tmpl (classes,
 * lease_ms, has_instance, instance, answer_bytes, etcd_lease; id when not 0
 * (-EEXIST when taken), else a random one; expires_ms when not 0, else now +
 * lease_ms).  -ENOMEM, -EIO (no randomness). */
int registry_add(const char *service, const char *principal, struct rrpci_endpoint *eps,
                 size_t n_eps, const struct registration *tmpl, struct registration **ret);
struct registration *registry_find(uint64_t id);
void registry_remove(struct registration *r);
struct service *registry_service(const char *name);
/* The first service (then ->next), for walks that do not remove. */
struct service *registry_services(void);
void registry_free(void);

/* ---- the server (server.c) ----------------------------------------------- */

struct ev_loop;
int server_start(struct ev_loop *loop, struct config *cfg);
/* The most @r adds to a lookup answer (its answer_bytes). */
size_t server_answer_bytes(const struct registration *r);
/* The registry on etcd took @r (@err 0) or did not (@r NULL, @why): answers the
 * register @req_id of the session @serial.  false when that session is gone. */
bool server_register_done(uint64_t serial, uint64_t req_id, struct registration *r, int err,
                          const char *why);

/* ---- the registry on etcd (etcdreg.c) ----------------------------------------- */

/* With registry = etcd://...: the clients, and the thread that keeps the local registry in
 * step with etcd (range, then watch).  0 or a negative code; nothing without etcd. */
int etcdreg_start(struct ev_loop *loop, const struct config *cfg);
void etcdreg_stop(void);
bool etcdreg_on(void);
/* Why rrpcd is degraded (etcd unreachable, or not synchronized yet), or NULL. */
const char *etcdreg_degraded(void);
/* Queues the write of @r (a lease of its lease_ms, then its key) for the writer
 * thread and marks it pending (not in lookups, no local expiry); the loop hears
 * of the result through server_register_done(@serial, @req_id, ...).  -EAGAIN at
 * once while degraded or when too many writes wait, -ENOMEM. */
int etcdreg_put(struct registration *r, uint64_t serial, uint64_t req_id);
/* A renewal of @r through this rrpcd: nothing to write when it owns @r (its key is
 * bound to this rrpcd's lease, kept alive on its own); one registered through
 * another rrpcd moves to this one's (queued; -EAGAIN at once while degraded). */
int etcdreg_renew(struct registration *r);
/* Queues the delete of @r's key (unregistered, or expired here); a failure is
 * logged, and the key goes with this rrpcd's lease. */
void etcdreg_remove(struct registration *r);
/* Why rrpcd is degraded, or the last write failed. */
const char *etcdreg_error(void);
void server_stop(void);
struct conn;
/* Queues the frame @buf (@len bytes, without its length) to the session @c:
 * 0, -EAGAIN when more than WATCH_BACKLOG bytes wait to go out to it (try
 * later), -E2BIG above the frame limit, -ENOMEM (the session is then closed). */
int server_push(struct conn *c, const void *buf, size_t len);

/* ---- watches of a service (watch.c) -------------------------------------------- */

#define WATCH_MAX_PER_SESSION 64 /* subscriptions of one session */
#define WATCH_MAX_TOTAL 65536    /* of all sessions together */
#define WATCH_BACKLOG (256u << 10) /* bytes waiting to a session above which pushes wait */
void watch_start(struct ev_loop *loop);
void watch_stop(void);
/* Subscribes @c to @service; the first push (soon) is its live set as it is.
 * -ENOSPC beyond WATCH_MAX_PER_SESSION or WATCH_MAX_TOTAL, -ENOMEM. */
int watch_add(struct conn *c, const char *service, uint64_t *ret_id);
/* -ENOENT when @c has no subscription @id. */
int watch_del(struct conn *c, uint64_t id);
/* Whether @c has a subscription (such a session is not closed for idleness). */
bool watch_any(const struct conn *c);
/* Forgets the subscriptions of @c (closed). */
void watch_conn_gone(struct conn *c);
/* The live set of @service may have changed: its subscribers get it soon. */
void watch_changed(const char *service);

/* ---- rrpcd's own metrics (metrics.c) ------------------------------------------- */

/* With metrics_listen set, serves GET /metrics on a thread of its own (and writes
 * metrics_port_file); 0 or a negative code, logged with the address. */
int metrics_start(const struct config *c);
void metrics_stop(void);
/* One call where each thing happens; any thread (the counters are atomics).
 * metrics_op names the request being handled ("hello", "lookup"...; NULL: none),
 * metrics_answer counts its answer: NULL ok, else the error code sent. */
void metrics_op(const char *op);
void metrics_answer(const char *err);
void metrics_tickets(size_t n);
void metrics_tls_failure(void);
void metrics_sessions(int n);
/* A connection closed at accept: "max_connections", "max_connections_per_source",
 * "out_of_memory". */
void metrics_refused(const char *reason);
void metrics_registry(int d_services, int d_instances);
void metrics_etcd_degraded(bool degraded);
/* "watch" (the watch broke) or "write" (a write failed). */
void metrics_etcd_error(const char *what);

#include "broker/mpcheck.h" /* rrpci_mp_check, rrpci_mp_get, rrpci_mp_uint */

#endif

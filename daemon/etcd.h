/* SPDX-License-Identifier: MIT */
/* A small client of etcd's v3 JSON gateway (/v3/...) over libcurl and json-c:
 * leases, put, range by prefix, delete.  Blocking calls, each bounded by a
 * timeout (a watch: its connect); one client is used by one thread at a time.  rrpcd
 * uses it for the registry on etcd (etcdreg.c, issue #16). */
#ifndef RRPCD_ETCD_H
#define RRPCD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct etcd;

/* What a client needs: endpoints "HOST:PORT", tried in turn; https when
 * @ca or @cert is set (NULL or "" otherwise). */
struct etcd_opts {
    const char *const *hosts;
    size_t n_hosts;
    const char *cert, *key, *ca;
    const char *user, *password; /* etcd's own authentication (NULL or "": none) */
    long timeout_ms; /* each request, connect included */
};

/* The largest answer a client accepts; a larger one fails the call (-EMSGSIZE). */
#define ETCD_MAX_ANSWER (4u << 20)

/* -ENOMEM, -EINVAL (no host). */
int etcd_open(struct etcd **ret, const struct etcd_opts *o);
void etcd_close(struct etcd *e);
/* Why the last call failed, for logs and answers ("" after a success). */
const char *etcd_error(const struct etcd *e);
/* Whether an endpoint of the last call did not answer in time (a cluster busy
 * electing a leader does that; a stopped etcd refuses at once). */
bool etcd_timed_out(const struct etcd *e);

/* From now on no request of @e runs past @mono_ms (CLOCK_MONOTONIC, in ms): each
 * one's timeout is cut to what is left, and one that has nothing left fails at once
 * (-EHOSTUNREACH, etcd_timed_out).  0: none (each request has its timeout_ms). */
void etcd_set_deadline(struct etcd *e, int64_t mono_ms);

/* Every call returns 0, -EHOSTUNREACH (no endpoint answered), -EPROTO (an
 * answer that is not what the gateway sends, or an error it reports, such as
 * "permission denied"), -EACCES (etcd refused the user and password),
 * -EMSGSIZE or -ENOMEM.  With a user, the client authenticates at its first
 * call, and again when etcd answers that the token is no longer valid. */
int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *ret_id);
/* -ENOENT: the lease is gone (expired or revoked). */
int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ret_ttl_s);
int etcd_lease_revoke(struct etcd *e, int64_t id);
/* @lease 0: no lease. */
int etcd_put(struct etcd *e, const char *key, const void *val, size_t len, int64_t lease);
int etcd_delete(struct etcd *e, const char *key);
/* Calls @fn for each key under @prefix (at most @limit of them; 0: no limit),
 * in key order; stops at @fn's first non-zero return, which it returns.
 * *@ret_rev (may be NULL): the store's revision the answer reflects. */
typedef int (*etcd_kv_fn)(void *arg, const char *key, const void *val, size_t len);
int etcd_range_prefix(struct etcd *e, const char *prefix, int64_t limit, etcd_kv_fn fn, void *arg,
                      int64_t *ret_rev);

/* Compacts etcd's history (all of it: etcd compacts by revision, not by prefix) up to
 * @rev; -EALREADY when it was compacted further already. */
int etcd_compact(struct etcd *e, int64_t rev);
/* Defragments the member that answers (it gives back what compaction freed). */
int etcd_defragment(struct etcd *e);
/* Disarms every NOSPACE alarm; *@ret_n: how many there were. */
int etcd_disarm_nospace(struct etcd *e, int *ret_n);
/* Whether the last call failed because etcd is out of space (its NOSPACE alarm). */
bool etcd_nospace(const struct etcd *e);

enum etcd_event { ETCD_PUT, ETCD_DELETE };
/* Called for each change (a DELETE has no value: @val "" and @len 0, also when
 * a lease's expiry took the key); a non-zero return ends the watch with it. */
typedef int (*etcd_watch_fn)(void *arg, enum etcd_event ev, const char *key, const void *val,
                             size_t len, int64_t rev);
/*
 * Watches every key under @prefix from revision @start_rev on (range's
 * revision + 1: nothing is missed between the two), calling @fn for each
 * change, in order.  Blocks on one streaming request (no request timeout; the
 * connect timeout stays) until @fn returns non-zero, *@stop becomes non-zero
 * (checked at least once a second: -ECANCELED), or the stream fails: the
 * usual errors, and -ECONNRESET when the connection ends.  The text of one
 * message is bounded by ETCD_MAX_ANSWER (-EMSGSIZE).  Use a client of its own
 * for it (one thread at a time per client).
 */
int etcd_watch_prefix(struct etcd *e, const char *prefix, int64_t start_rev, etcd_watch_fn fn,
                      void *arg, const volatile int *stop);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * rrpcd's client of etcd's v3 JSON gateway (issue #16): leases, keys under a
 * prefix.  HTTP through libcurl, JSON through json-c, keys and values in base64
 * through OpenSSL.  Calls are synchronous and bounded by the timeout given to
 * etcd_open(); each tries the members in order and stays with the first that
 * answers.
 *
 * Errors (negative errno): -ECONNREFUSED no member answered (etcd unreachable);
 * -EPROTO an answer that is not what the gateway sends (or larger than
 * ETCD_MAX_ANSWER); -ENOENT the lease no longer exists (keep-alive);
 * -EINVAL a bad argument; -ENOMEM.
 */
#ifndef RRPCD_ETCD_H
#define RRPCD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most bytes of one answer an etcd member can make rrpcd hold. */
#define ETCD_MAX_ANSWER (16u << 20)
/* The longest key and value rrpcd writes or accepts. */
#define ETCD_MAX_KEY 1024
#define ETCD_MAX_VALUE (1u << 20)

struct etcd;

/* @members: n "HOST:PORT" strings (copied); @timeout_ms bounds each call. */
int etcd_open(struct etcd **ret, const char (*members)[300], size_t n, long timeout_ms);
void etcd_close(struct etcd *e);

/* A lease of @ttl_s seconds (etcd rounds up to its minimum); its id in @id. */
int etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t *id);
/* Renews lease @id; @ttl_s (may be NULL) gets the TTL it has again.  -ENOENT: gone. */
int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl_s);
/* Revokes lease @id, deleting its keys.  Revoking a lease that is gone is not an error. */
int etcd_lease_revoke(struct etcd *e, int64_t id);

/* Puts @key = @val bound to @lease (0: no lease). */
int etcd_put(struct etcd *e, const char *key, const void *val, size_t len, int64_t lease);
/* Deletes @key; @deleted (may be NULL) gets how many keys went. */
int etcd_delete(struct etcd *e, const char *key, int64_t *deleted);

/* Called for each key: a non-zero return stops the walk and is returned. */
typedef int (*etcd_kv_fn)(void *arg, const char *key, size_t klen, const uint8_t *val,
                          size_t vlen, int64_t lease);
/* Every key beginning with @prefix (whose last byte must be below 0xff), to @fn (may be
 * NULL: only whether etcd answers); @revision
 * (may be NULL) gets the store's revision the answer reflects. */
int etcd_range_prefix(struct etcd *e, const char *prefix, etcd_kv_fn fn, void *arg,
                      int64_t *revision);

/* ---- a watch on a prefix: a curl stream on its own thread ------------------------------
 * The thread reads etcd's watch stream (from one member after the other, reconnecting
 * with the revision after the last one it saw) and queues what it reads; at
 * ETCD_WATCH_QUEUE events or ETCD_WATCH_QUEUE_BYTES of keys and values queued it stops
 * reading until the owner takes some.  A line of the stream is at most ETCD_MAX_ANSWER.  @wake is
 * called on the thread after each event is queued and each change of state (for an
 * ev_async). */
#define ETCD_WATCH_QUEUE 4096
#define ETCD_WATCH_QUEUE_BYTES (64u << 20)

struct etcd_event {
    bool put;        /* false: the key was deleted (or its lease ended) */
    char *key;       /* NUL-terminated */
    size_t klen;
    uint8_t *val;    /* put only */
    size_t vlen;
    int64_t lease;   /* put only */
    int64_t revision;
};

struct etcd_watch;
/* Watches every key under @prefix from revision @start_rev on (the one after a range's). */
int etcd_watch_start(struct etcd_watch **ret, const char (*members)[300], size_t n,
                     const char *prefix, int64_t start_rev, void (*wake)(void *), void *arg);
/* 0 and the oldest event in @ev (free it with etcd_event_free), -EAGAIN none queued, or
 * -ESTALE: etcd compacted the revisions the watch needed; stop it, range and start again. */
int etcd_watch_next(struct etcd_watch *w, struct etcd_event *ev);
void etcd_event_free(struct etcd_event *ev);
/* Whether the stream is open now (false while etcd is unreachable). */
bool etcd_watch_connected(struct etcd_watch *w);
void etcd_watch_stop(struct etcd_watch *w);

/* Base64 (RFC 4648, with padding) through OpenSSL: the encoder writes a NUL-terminated
 * string of 4 * ((n + 2) / 3) characters into @out (@cap bytes; -ENOSPC if it does not fit);
 * the decoder refuses anything but whole, well padded base64 (-EINVAL). */
int etcd_b64_encode(const void *in, size_t n, char *out, size_t cap);
int etcd_b64_decode(const char *in, size_t n, uint8_t *out, size_t cap, size_t *len);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The configuration a transport reads, typed and by compile-time handles.
 *
 * A transport with tunables of its own describes them in a table
 * (util/conf.h) over a struct of its own and is given a slot below; the
 * context's configuration (rrpc_config, the RRPC_* environment,
 * rrpc_config_print) lists, checks and keeps its values beside the core's,
 * and the transport reads them with rrpci_ctx_conf(ctx, its slot) as that
 * struct.  The core's values a transport applies come through functions of
 * their own (rrpci_ctx_accept_limits; rrpci_ctx_max_msg in transport.h).
 *
 * A transport's tunables, step by step (verbs is the example):
 *  1. its struct below (struct rrpci_verbs_tunables), at most
 *     RRPCI_CONF_SLOT_BYTES, and a slot in enum rrpci_conf_slot;
 *  2. its table in transport/NAME/tunables.c (verbs/tunables.c), built
 *     into every build (libroce_rpc/meson.build), RRPCI_CONF_UINT and the
 *     other makers of util/conf.h checking each member's C type;
 *  3. the table at its slot in core/config.c's all_tables, and whether the
 *     transport is built in in built_in;
 *  4. reads: const struct rrpci_verbs_tunables *t =
 *     rrpci_ctx_conf(ctx, RRPCI_CONF_SLOT_VERBS); t->eager.
 * man/roce_rpc.7.scd's list follows (ninja -C build man-lists).

 */
#ifndef RRPCI_TRANSPORT_TUNABLES_H
#define RRPCI_TRANSPORT_TUNABLES_H

#include <stdint.h>

#include <roce_rpc/context.h>

#include "util/conf.h"

/* The transports' tables, by slot.  Every table is compiled in (so the
 * printed list and the man page are those of every build); only those of
 * the transports built in are accepted by rrpc_config_set. */
enum rrpci_conf_slot {
    RRPCI_CONF_SLOT_VERBS, /* rrpci_verbs_conf, struct rrpci_verbs_tunables */
    RRPCI_CONF_SLOT_TCP,   /* rrpci_tcp_conf, struct rrpci_tcp_tunables */
    RRPCI_CONF_NSLOTS,
};
/* Room for one slot's struct in every context's configuration. */
#define RRPCI_CONF_SLOT_BYTES 128

struct rrpci_verbs_tunables {
    uint32_t eager;         /* RRPC_VERBS_EAGER */
    unsigned busy_poll_us;  /* RRPC_VERBS_BUSY_POLL_US */
    size_t rndv_pool_bytes; /* RRPC_VERBS_RNDV_POOL_BYTES */
    uint32_t chunk;         /* RRPC_VERBS_CHUNK */
    unsigned data_depth;    /* RRPC_VERBS_DATA_DEPTH */
};
extern const struct rrpci_conf_table rrpci_verbs_conf; /* transport/verbs/tunables.c */

/* tcp's class isolation: the knobs of the core's QoS policy (core/qos.h). */
struct rrpci_tcp_tunables {
    unsigned slice_us;   /* RRPC_TCP_SLICE_US */
    size_t piece_shared; /* RRPC_TCP_PIECE_SHARED */
    size_t piece_alone;  /* RRPC_TCP_PIECE_ALONE */
    unsigned busy_ms;    /* RRPC_TCP_BUSY_MS */
    bool preempt;        /* RRPC_TCP_PREEMPT */
};
extern const struct rrpci_conf_table rrpci_tcp_conf; /* transport/tcp/tunables.c */

/* @slot's values in @ctx (the struct its table describes), checked when
 * the context was made and constant for its life.  Any thread. */
const void *rrpci_ctx_conf(rrpc_ctx *ctx, enum rrpci_conf_slot slot);

/* The core's caps on passive connections, which a transport applies to
 * sockets that have not yet said which connection they are. */
struct rrpci_accept_limits {
    int max_pending;     /* RRPC_MAX_CONNS: at most this many at once */
    int per_source;      /* RRPC_MAX_CONNS_PER_SOURCE: ... from one address */
    int auth_timeout_ms; /* RRPC_AUTH_TIMEOUT_MS: each for at most this long */
};
void rrpci_ctx_accept_limits(rrpc_ctx *ctx, struct rrpci_accept_limits *ret);

#endif

/* SPDX-License-Identifier: MIT */
/* The verbs transport's tunables (transport/tunables.h): compiled into every
 * build, so that rrpc_config_print and the man page list them everywhere;
 * a context accepts them when the transport is built in. */
#include <stdint.h>

#include "transport/tunables.h"

#define T struct rrpci_verbs_tunables
static const struct rrpci_conf_field fields[] = {
    {.name = "RRPC_VERBS_EAGER", RRPCI_CONF_UINT(T, eager), .def = 8192, .min = 256,
     .max = 1L << 20, .doc = "verbs: payloads above this many bytes use the rendezvous (RDMA READ)"},
    {.name = "RRPC_VERBS_BUSY_POLL_US", RRPCI_CONF_UINT(T, busy_poll_us), .def = 1000, .min = 0,
     .max = 100000,
     .doc = "verbs: after completions, the loop keeps polling the CQ (up to 50 us per loop "
            "iteration) instead of sleeping on its channel until this long passed without one, "
            "us (0: off); within the context's RRPC_BUSY_POLL_BUDGET_PCT"},
    {.name = "RRPC_VERBS_RNDV_POOL_BYTES", RRPCI_CONF_UINT(T, rndv_pool_bytes), .def = 32L << 20,
     .min = 0, .max = 1LL << 40,
     .doc = "verbs: registered buffers kept per device for rendezvous payloads received, reused "
            "from one message to the next; a payload that does not fit is registered for "
            "itself (0: every payload is)"},
    {.name = "RRPC_VERBS_CHUNK", RRPCI_CONF_UINT(T, chunk), .def = 256L << 10, .min = 4096,
     .max = 1L << 30, .doc = "verbs: bytes per RDMA READ/WRITE work request"},
    {.name = "RRPC_VERBS_DATA_DEPTH", RRPCI_CONF_UINT(T, data_depth), .def = 2, .min = 1,
     .max = 64, .doc = "verbs: RDMA READ/WRITE work requests in flight per queue pair"},
};
#undef T
_Static_assert(sizeof(struct rrpci_verbs_tunables) <= RRPCI_CONF_SLOT_BYTES,
               "raise RRPCI_CONF_SLOT_BYTES");

const struct rrpci_conf_table rrpci_verbs_conf = {
    .name = "verbs",
    .prefix = "RRPC_",
    .fields = fields,
    .nfields = RRPCI_CONF_NFIELDS(fields),
    .size = sizeof(struct rrpci_verbs_tunables),
};

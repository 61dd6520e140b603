/* SPDX-License-Identifier: MIT */
/* The tcp transport's tunables (transport/tunables.h): the knobs of class
 * isolation, which tcp.c hands to the core's QoS policy (tcp_ctx_init). */
#include "transport/tunables.h"

#define T struct rrpci_tcp_tunables
static const struct rrpci_conf_field fields[] = {
    {.name = "RRPC_TCP_SLICE_US", RRPCI_CONF_UINT(T, slice_us), .def = 20, .min = 1,
     .max = 1000000,
     .doc = "tcp: time one loop wake-up gives a class, per unit of its weight, to read (and to "
            "write) before the loop serves the other ready classes, us"},
    {.name = "RRPC_TCP_PIECE_SHARED", RRPCI_CONF_UINT(T, piece_shared), .def = 256L << 10,
     .min = 4096, .max = 64L << 20,
     .doc = "tcp: largest read or write of one system call while another class of the "
            "connection is busy, bytes; what a low-latency frame may wait behind"},
    {.name = "RRPC_TCP_PIECE_ALONE", RRPCI_CONF_UINT(T, piece_alone), .def = 1L << 20,
     .min = 4096, .max = 64L << 20,
     .doc = "tcp: largest read or write of one system call while no other class of the "
            "connection is busy, bytes; larger pieces cost less CPU per byte"},
    {.name = "RRPC_TCP_BUSY_MS", RRPCI_CONF_UINT(T, busy_ms), .def = 100, .min = 0,
     .max = 60000,
     .doc = "tcp: a class counts as busy this long after a piece of its frames last moved "
            "either way (the connection's own frames, its handshake and keepalives, do not "
            "count), ms"},
    {.name = "RRPC_TCP_PREEMPT", RRPCI_CONF_BOOL(T, preempt), .def = 1, .min = 0,
     .max = 1,
     .doc = "tcp: a turn of a class that low_latency outranks (bulk, background) ends after "
            "the piece that is moving when a connection's first socket, which carries "
            "low_latency, has input waiting (one epoll_wait of no time per piece); 0: turns "
            "end by time only"},
};
#undef T
_Static_assert(sizeof(struct rrpci_tcp_tunables) <= RRPCI_CONF_SLOT_BYTES,
               "raise RRPCI_CONF_SLOT_BYTES");

const struct rrpci_conf_table rrpci_tcp_conf = {
    .name = "tcp",
    .prefix = "RRPC_",
    .fields = fields,
    .nfields = RRPCI_CONF_NFIELDS(fields),
    .size = sizeof(struct rrpci_tcp_tunables),
};

/* SPDX-License-Identifier: MIT */
/* roce-rpc: RPC and one-sided data movement over RoCEv2 (and TCP).
 * The umbrella header; include this one.
 *
 * Options structs (rrpc_call_opts, rrpc_op_opts, rrpc_connect_opts,
 * rrpc_tensor_server_opts, rrpc_tensor_send_opts, rrpc_broker_opts,
 * rrpc_service_opts) share one
 * convention: a zeroed struct means every default, each field's zero means
 * its default (qos_class 0 is RRPC_CLASS_DEFAULT, never control), and the
 * struct ends with `reserved` words that must be zero.  New fields come out
 * of the reserved words, so a struct never changes size, and a library older
 * than the caller's header refuses (-EINVAL) a field it does not know
 * instead of ignoring it.  Initialise with `= {0}` or designated
 * initialisers; NULL where an options pointer is taken means the same. */
#ifndef ROCE_RPC_RRPC_H
#define ROCE_RPC_RRPC_H

#include <roce_rpc/error.h>
#include <roce_rpc/context.h>
#include <roce_rpc/rpc.h>
#include <roce_rpc/memory.h>
#include <roce_rpc/pack.h>
#include <roce_rpc/tensor.h>

#define RRPC_VERSION_STRING "0.2.0" /* = meson.build's project version (test tools_version) */
/* The wire protocol version this library speaks (docs/protocol.md). */
#define RRPC_PROTOCOL_VERSION 1

#endif

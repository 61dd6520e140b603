/* SPDX-License-Identifier: MIT */
/* roce-rpc: RPC and one-sided data movement over RoCEv2 (and TCP).
 * The umbrella header; include this one. */
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

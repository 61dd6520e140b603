/* SPDX-License-Identifier: MIT */
/*
 * Loadable modules: the parts of the library that need a heavy dependency
 * are shared objects the core dlopen()s the first time a context needs them,
 * so a program that never uses them never maps their libraries:
 *
 *   roce_rpc-verbs-X.Y.so            the verbs transport (rdma://): libibverbs, librdmacm
 *   roce_rpc-metrics_http-X.Y.so     GET /metrics (metrics_listen): libmicrohttpd
 *
 * X.Y is the library's soversion (a module of another release is never
 * picked up).  Where they are looked for: $RRPC_MODULE_DIR when set (and
 * only there), else the roce_rpc/ directory beside the object that holds
 * the core (libroce_rpc.so.X.Y in LIBDIR, or the Python extension that
 * embeds it), which is also their place in the build tree
 * (BUILD/libroce_rpc/roce_rpc/).  A module that cannot be loaded is an
 * error with the path, the loader's reason and the package to install;
 * nothing falls back to another transport.
 *
 * The verbs module calls the core only through a table the core hands it
 * (struct rrpci_core_services below): it is linked against no copy of the
 * core, so it works the same under libroce_rpc.so, a program that links the
 * core statically and the Python extension.  transport/module_shim.c, built
 * into the module, defines each rrpci_* function the transport calls as a
 * call through that table.  A transport that calls a core function not in
 * RRPCI_CORE_SERVICES fails to link (-Wl,--no-undefined): add it to the
 * list (and bump RRPCI_MODULE_ABI).
 *
 * The module's one exported symbol, RRPCI_TRANSPORT_ENTRY, checks the
 * table's version and size and returns its ops (whose version the core
 * checks, rrpci_transport_use).  A program that links the verbs objects
 * themselves (tests of verbs internals) gets them built in: the core then
 * loads nothing.
 */
#ifndef RRPCI_MODULE_H
#define RRPCI_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "roce_rpc/error.h"
#include "transport/transport.h"
#include "transport/tunables.h"

/* The interface version between the core and a transport module: bump it
 * when RRPCI_CORE_SERVICES or struct rrpci_transport_ops changes.  It is
 * part of the entry symbol's name. */
#define RRPCI_MODULE_ABI 3
#define RRPCI_TRANSPORT_ENTRY rrpci_transport_module_v1
#define RRPCI_TRANSPORT_ENTRY_NAME "rrpci_transport_module_v1"

/*
 * The core functions a transport module calls: X(return type, name,
 * (parameters), (arguments)) for those returning a value, XV(name,
 * (parameters), (arguments)) for void ones.  The variadic rrpci_log and
 * rrpci_set_error travel as their formatted text (rrpci_log_text,
 * rrpci_set_error_text).
 */
#define RRPCI_CORE_SERVICES(X, XV)                                                                  \
    X(const char *, rrpc_strerror, (int code), (code))                                             \
    X(const char *, rrpci_class_name, (int idx), (idx))                                            \
    XV(rrpci_ctx_accept_limits, (rrpc_ctx * ctx, struct rrpci_accept_limits * ret), (ctx, ret))   \
    XV(rrpci_conn_cancel_ahead, (rrpc_conn * c, uint64_t id), (c, id))                             \
    X(rrpc_ctx *, rrpci_conn_ctx, (rrpc_conn * c), (c))                                            \
    XV(rrpci_conn_down, (rrpc_conn * c, int reason, const char *why), (c, reason, why))           \
    XV(rrpci_conn_established, (rrpc_conn * c), (c))                                               \
    XV(rrpci_conn_hello_local, (rrpc_conn * c, struct rrpci_hello *h), (c, h))                    \
    X(int, rrpci_conn_hello_peer, (rrpc_conn * c, const struct rrpci_hello *peer), (c, peer))     \
    X(bool, rrpci_conn_is_down, (rrpc_conn * c), (c))                                              \
    X(bool, rrpci_conn_is_wired, (rrpc_conn * c), (c))                                             \
    XV(rrpci_conn_notify, (rrpc_conn * c, uint32_t imm), (c, imm))                                 \
    X(bool, rrpci_conn_passive, (rrpc_conn * c), (c))                                              \
    X(void *, rrpci_conn_priv, (rrpc_conn * c), (c))                                               \
    XV(rrpci_conn_recv,                                                                            \
       (rrpc_conn * c, int cls, const struct rrpci_hdr *h, const uint8_t *payload),                \
       (c, cls, h, payload))                                                                       \
    XV(rrpci_conn_ref, (rrpc_conn * c), (c))                                                       \
    X(int, rrpci_conn_rx_admit, (rrpc_conn * c, int cls, const struct rrpci_hdr *h), (c, cls, h)) \
    XV(rrpci_conn_unref, (rrpc_conn * c), (c))                                                     \
    XV(rrpci_conn_writable, (rrpc_conn * c, int cls), (c, cls))                                    \
    X(bool, rrpci_ctx_busy, (rrpc_ctx * ctx, unsigned us), (ctx, us))                              \
    X(int, rrpci_ctx_class_dscp, (rrpc_ctx * ctx, int cls), (ctx, cls))                            \
    X(uint32_t, rrpci_ctx_class_credits, (rrpc_ctx * ctx, int cls), (ctx, cls))                    \
    X(uint32_t, rrpci_ctx_class_first_grant, (rrpc_ctx * ctx, int cls), (ctx, cls))                \
    X(const void *, rrpci_ctx_conf, (rrpc_ctx * ctx, enum rrpci_conf_slot slot), (ctx, slot))      \
    X(struct rrpci_evloop *, rrpci_ctx_loop, (rrpc_ctx * ctx), (ctx))                              \
    X(uint32_t, rrpci_ctx_max_msg, (rrpc_ctx * ctx), (ctx))                                        \
    X(bool, rrpci_ctx_polling, (rrpc_ctx * ctx), (ctx))                                            \
    XV(rrpci_ctx_nic_used, (rrpc_ctx * ctx, const char *dev, unsigned ports), (ctx, dev, ports))  \
    X(void *, rrpci_ctx_tpriv, (rrpc_ctx * ctx, const struct rrpci_transport_ops *ops),           \
      (ctx, ops))                                                                                  \
    XV(rrpci_ctx_rx_arrival, (rrpc_ctx * ctx, double at), (ctx, at))                               \
    XV(rrpci_grant_bound, (rrpc_grant * g, int status, const char *why), (g, status, why))        \
    XV(rrpci_grant_get, (rrpc_grant * g, struct rrpci_grant_info *ret), (g, ret))                 \
    XV(rrpci_grant_set_key, (rrpc_grant * g, uint64_t key), (g, key))                              \
    XV(rrpci_grant_set_tpriv, (rrpc_grant * g, void *p), (g, p))                                   \
    X(void *, rrpci_grant_tpriv, (rrpc_grant * g), (g))                                            \
    X(int, rrpci_hdr_decode,                                                                       \
      (const uint8_t in[RRPCI_HDR_SIZE], uint32_t max_len, struct rrpci_hdr *h, const char **why), \
      (in, max_len, h, why))                                                                       \
    X(int, rrpci_hello_decode, (const uint8_t *in, size_t len, struct rrpci_hello *h),            \
      (in, len, h))                                                                                \
    XV(rrpci_hello_encode, (const struct rrpci_hello *h, uint8_t out[RRPCI_HELLO_SIZE]), (h, out)) \
    XV(rrpci_io_init,                                                                              \
       (struct rrpci_io * w, void (*cb)(struct rrpci_io * w, unsigned revents), int fd,            \
        unsigned events),                                                                          \
       (w, cb, fd, events))                                                                        \
    X(int, rrpci_io_start, (struct rrpci_evloop * loop, struct rrpci_io * w), (loop, w))          \
    XV(rrpci_io_stop, (struct rrpci_evloop * loop, struct rrpci_io * w), (loop, w))               \
    X(int, rrpci_listener_accept,                                                                  \
      (rrpc_listener * l, const struct sockaddr *peer, rrpc_conn **ret, char *why, size_t whylen), \
      (l, peer, ret, why, whylen))                                                                 \
    X(rrpc_ctx *, rrpci_listener_ctx, (rrpc_listener * l), (l))                                    \
    X(void *, rrpci_listener_priv, (rrpc_listener * l), (l))                                       \
    XV(rrpci_log_text, (rrpc_ctx * ctx, int level, const char *text), (ctx, level, text))         \
    X(bool, rrpci_log_enabled, (rrpc_ctx * ctx, int level), (ctx, level))                          \
    XV(rrpci_msg_free, (struct rrpci_msg * m), (m))                                                \
    X(struct rrpci_msg *, rrpci_msg_new, (size_t len), (len))                                      \
    XV(rrpci_rdma_done, (rrpc_conn * c, uint64_t id, int status), (c, id, status))                 \
    X(unsigned, rrpci_region_access, (rrpc_region * r), (r))                                       \
    X(void *, rrpci_region_addr, (rrpc_region * r), (r))                                           \
    X(uint64_t, rrpci_region_generation, (rrpc_region * r), (r))                                   \
    X(size_t, rrpci_region_len, (rrpc_region * r), (r))                                            \
    XV(rrpci_region_set_tpriv, (rrpc_region * r, void *p), (r, p))                                 \
    X(void *, rrpci_region_tpriv, (rrpc_region * r), (r))                                          \
    X(int, rrpci_set_error_text, (rrpc_ctx * ctx, int code, const char *text), (ctx, code, text)) \
    XV(rrpci_timer_init,                                                                           \
       (rrpc_ctx * ctx, struct rrpci_timer * t, void (*cb)(struct rrpci_timer * t), double after,  \
        double repeat),                                                                            \
       (ctx, t, cb, after, repeat))                                                                \
    XV(rrpci_timer_start, (struct rrpci_timer * t), (t))                                           \
    XV(rrpci_timer_stop, (struct rrpci_timer * t), (t))

#define RRPCI_SERVICE_FIELD(ret, name, params, args) ret(*name) params;
#define RRPCI_SERVICE_FIELD_V(name, params, args) void(*name) params;
struct rrpci_core_services {
    uint32_t abi;  /* RRPCI_MODULE_ABI */
    uint32_t size; /* sizeof(struct rrpci_core_services) */
    RRPCI_CORE_SERVICES(RRPCI_SERVICE_FIELD, RRPCI_SERVICE_FIELD_V)
};
#undef RRPCI_SERVICE_FIELD
#undef RRPCI_SERVICE_FIELD_V

/* rrpci_log and rrpci_set_error with their text made already (the module's
 * side of the variadic functions). */
void rrpci_log_text(rrpc_ctx *ctx, int level, const char *text);
int rrpci_set_error_text(rrpc_ctx *ctx, int code, const char *text);

/*
 * The entry of a transport module: checks @core (its abi and size) and
 * returns the module's ops; or NULL with the reason in @why.
 */
typedef const struct rrpci_transport_ops *(*rrpci_transport_entry_fn)(
    const struct rrpci_core_services *core, char *why, size_t whylen);

/* ---- the core's loader --------------------------------------------------- */

/*
 * Loads module @file (a file name, e.g. "roce_rpc-verbs-0.2.so") and
 * returns its symbol @entry; once loaded, a module stays loaded and later
 * calls return at once (thread-safe).  Fails with NULL and, in @why, the
 * path, the dynamic loader's reason and what to do, @hint being the
 * package(s) that provide the module's dependencies (said when the module
 * is there but will not load).  @what names the feature for the message
 * ("rdma://", "metrics_listen").
 */
void *rrpci_module_entry(const char *what, const char *file, const char *entry, const char *hint,
                         char *why, size_t whylen);

/* The directory modules are looked for in now (RRPC_MODULE_DIR or the one
 * beside the core), in @buf; "" when it cannot be told. */
void rrpci_module_dir(char *buf, size_t len);

/*
 * The verbs transport: built in (a program linking its objects), loaded
 * (the module), or NULL with the reason in @why (the module is missing or
 * broken; or this build has none).
 */
const struct rrpci_transport_ops *rrpci_verbs_transport(char *why, size_t whylen);
/* The verbs ops when built in or loaded already, else NULL; loads nothing. */
const struct rrpci_transport_ops *rrpci_verbs_transport_if_loaded(void);

#endif

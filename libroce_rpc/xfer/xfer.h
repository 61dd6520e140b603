/* SPDX-License-Identifier: MIT */
/*
 * The transfer engine (engine.c) shared by tensors (tensor.c) and KV pages
 * (kv.c): a batch of WRITEs from one local region to one remote token,
 * issued through the public rrpc_write (so it runs unchanged on every
 * transport), with one completion.  This header needs only the public API.
 */
#ifndef RRPC_XFER_XFER_H
#define RRPC_XFER_XFER_H

#include <stddef.h>
#include <stdint.h>

#include <roce_rpc/rrpc.h>

/* One WRITE: @len bytes from local offset @loff to remote offset @roff. */
struct rrpci_run {
    size_t loff;
    uint64_t roff;
    size_t len;
};

/* The largest single WRITE: a verbs work request carries less than 2 GiB. */
#define RRPCI_XFER_MAX_WRITE ((size_t)1 << 30)

/*
 * The runs of a batch, produced on demand (a transposed tensor has one per
 * element: they are computed, not stored).  @get fills run @i of @n; @arg is
 * freed with free() when the batch ends.
 */
struct rrpci_runs {
    size_t n;
    void (*get)(const void *arg, size_t i, struct rrpci_run *out);
    void *arg;
};

/*
 * Issues @runs as WRITEs on @conn, in order on @opts->qos_class, with at
 * most a window of them in flight; with @opts->notify only the last one
 * carries the notification.  @cb runs once with 0 or the first error, when
 * every WRITE issued has completed; after an error no more are issued.
 * When nothing could be issued, the error is returned and @cb never runs.
 * Takes @runs->arg in every case.  The caller has validated every run and
 * holds the context lock; @runs->n >= 1.
 */
int rrpci_xfer_batch(rrpc_conn *conn, rrpc_region *local, const rrpc_token *remote,
                     struct rrpci_runs *runs, const rrpc_op_opts *opts, rrpc_op_cb cb,
                     void *user);

/* Blocking forms wait on a struct rrpci_sync (core/core.h). */

#endif

/* SPDX-License-Identifier: MIT */
/*
 * The transfer engine (xfer.h): a batch of WRITEs from one local region to
 * one remote token with one completion, shared by tensors (tensor.c) and KV
 * pages (kv.c).  It uses the public rrpc_write only, so it runs unchanged
 * on every transport; its state is guarded by the context lock its callers
 * hold (the completions it receives run under that lock too).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include <roce_rpc/rrpc.h>

#include "xfer/xfer.h"

/* WRITEs in flight per batch: enough to keep a link busy, few enough that a
 * batch of a million runs does not queue a million frames at once. */
#define XFER_WINDOW 64

struct batch {
    rrpc_conn *conn;
    rrpc_region *local;
    rrpc_token remote;
    struct rrpci_runs runs;
    size_t next, inflight, issued;
    int status;
    int cls;
    bool notify;
    uint32_t imm;
    bool pumping, starting;
    rrpc_op_cb cb;
    void *user;
};

static void batch_free(struct batch *b)
{
    free(b->runs.arg);
    free(b);
}

static bool batch_over(const struct batch *b)
{
    return b->inflight == 0 && (b->status != 0 || b->next == b->runs.n);
}

static void batch_on_write(int status, void *user);

/*
 * Issues what the window allows.  rrpc_write may complete a WRITE inside the
 * call (when the connection dies under it), which re-enters here through
 * batch_on_write: the inner call returns at once and this loop, seeing the
 * error, stops; only the outermost call ends the batch.
 */
static void batch_pump(struct batch *b)
{
    if (b->pumping)
        return;
    b->pumping = true;
    while (b->status == 0 && b->next < b->runs.n && b->inflight < XFER_WINDOW) {
        size_t i = b->next++;
        struct rrpci_run run;
        b->runs.get(b->runs.arg, i, &run);
        /* Only the last WRITE notifies.  WRITEs on one class are executed in
         * the order they were posted (one RC queue pair per class on verbs,
         * where the write-with-immediate completes at the target after every
         * earlier WRITE on that QP was placed; one socket per class on tcp,
         * whose target applies frames in order), so the notification
         * follows the data of the whole batch. */
        rrpc_op_opts o = {
            .qos_class = b->cls,
            .notify = b->notify && i + 1 == b->runs.n,
            .imm = b->imm,
        };
        b->inflight++;
        int r = rrpc_write(b->conn, b->local, run.loff, &b->remote, run.roff, run.len, &o,
                           batch_on_write, b);
        if (r < 0) {
            b->inflight--;
            if (b->status == 0)
                b->status = r;
        } else {
            b->issued++;
        }
    }
    b->pumping = false;
    if (!b->starting && batch_over(b)) {
        rrpc_op_cb cb = b->cb;
        void *user = b->user;
        int status = b->status;
        batch_free(b);
        cb(status, user);
    }
}

static void batch_on_write(int status, void *user)
{
    struct batch *b = user;
    b->inflight--;
    if (status != 0 && b->status == 0)
        b->status = status;
    batch_pump(b);
}

int rrpci_xfer_batch(rrpc_conn *conn, rrpc_region *local, const rrpc_token *remote,
                     struct rrpci_runs *runs, const rrpc_op_opts *opts, rrpc_op_cb cb,
                     void *user)
{
    struct batch *b = calloc(1, sizeof(*b));
    if (!b) {
        free(runs->arg);
        return -ENOMEM;
    }
    b->conn = conn;
    b->local = local;
    b->remote = *remote;
    b->runs = *runs;
    b->cls = opts ? opts->qos_class : RRPC_CLASS_BULK;
    b->notify = opts && opts->notify;
    b->imm = opts ? opts->imm : 0;
    b->cb = cb;
    b->user = user;
    b->starting = true;
    batch_pump(b);
    b->starting = false;
    if (b->issued == 0) {
        int r = b->status;
        batch_free(b);
        return r;
    }
    if (batch_over(b)) { /* everything completed inside rrpc_write: the connection died */
        int status = b->status;
        batch_free(b);
        cb(status, user);
    }
    return 0;
}

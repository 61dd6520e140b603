/* SPDX-License-Identifier: MIT */
/* The verbs transport: devices, the context's rdma_cm event channel, rdma-core's error conventions
 * and the registration cache (one ibv_mr per region and device). */
#include "transport/verbs/verbs_int.h"

#include <sys/mman.h>

/* ---- rdma-core's error conventions, converted here once ---------------- */



void vb_sa_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
        port = ntohs(s4->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
        port = ntohs(s6->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        snprintf(buf, len, "?");
    }
}

/* @what says what has no device, e.g. "rdma://h:p: no RDMA device serves h". */
int vb_no_device(rrpc_ctx *ctx, const char *what)
{
    return rrpci_set_error(ctx, RRPC_E_NO_DEVICE,
                           "%s. The verbs transport (rdma://) needs an RDMA device and never "
                           "falls back to tcp; for Soft-RoCE on a host without RDMA hardware: "
                           "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <if> (then "
                           "use that interface's address), or use tcp://",
                           what);
}

/* ---- context ------------------------------------------------------------ */


struct vb_ctx *vb_vx(rrpc_ctx *ctx)
{
    return rrpci_ctx_tpriv(ctx, &rrpci_verbs_ops);
}

int vb_ctx_open(rrpc_ctx *ctx, struct vb_ctx **ret)
{
    struct vb_ctx *vx = vb_vx(ctx);
    if (vx->open) {
        *ret = vx;
        return 0;
    }
    vx->ctx = ctx;
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list)
        ibv_free_device_list(list);
    if (!list || n == 0)
        return vb_no_device(ctx, "rdma://: no RDMA device on this host");
    vx->ech = rdma_create_event_channel();
    if (!vx->ech) {
        int err = vb_errno();
        if (err == -ENODEV || err == -ENOENT || err == -ENOSYS)
            return vb_no_device(ctx, "rdma://: rdma_cm is not available on this host");
        return rrpci_set_error(ctx, err, "rdma_create_event_channel: %s", rrpc_strerror(err));
    }
    int fl = fcntl(vx->ech->fd, F_GETFL);
    if (fl < 0 || fcntl(vx->ech->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int err = vb_errno();
        rdma_destroy_event_channel(vx->ech);
        vx->ech = NULL;
        return err;
    }
    /* Checked, with their defaults, by the context's configuration (tunables.c). */
    const struct rrpci_verbs_tunables *t = rrpci_ctx_conf(ctx, RRPCI_CONF_SLOT_VERBS);
    vx->eager = t->eager;
    vx->busy_poll_us = t->busy_poll_us;
    vx->chunk = t->chunk;
    vx->rndv_pool_max = t->rndv_pool_bytes;
    vx->data_depth = t->data_depth;
    rrpci_io_init(&vx->ech_w, vb_cm_cb, vx->ech->fd, RRPCI_IO_READ);
    vx->ech_w.data = vx;
    rrpci_io_start(rrpci_ctx_loop(ctx), &vx->ech_w);
    vx->open = true;
    *ret = vx;
    return 0;
}

struct vb_dev *vb_dev_get(struct vb_ctx *vx, struct ibv_context *verbs, int *ret)
{
    struct vb_dev *d;
    for (d = vx->devs; d; d = d->next)
        if (d->verbs == verbs)
            return d;
    d = calloc(1, sizeof(*d));
    if (!d) {
        *ret = -ENOMEM;
        return NULL;
    }
    d->vx = vx;
    d->verbs = verbs;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    int rc = vb_ret(ibv_query_device(verbs, &da));
    if (rc)
        goto fail;
    d->max_rd_atom = da.max_qp_rd_atom;
    d->max_init_rd_atom = da.max_qp_init_rd_atom;
    d->max_qp_wr = da.max_qp_wr;
    d->mw2 = da.max_mw > 0 &&
             (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
    /* Soft-RoCE checks an access through a window against the window's MR,
     * not the window's own range (measured in the VM, kernel 6.1: a WRITE
     * below a window, inside its MR, succeeded): grants there get an MR of
     * their own range (grant.c). */
    d->mw_range_unchecked = da.vendor_id == VB_RXE_VENDOR_ID;
    d->max_cqe = da.max_cqe;
    rrpci_ctx_nic_used(vx->ctx, ibv_get_device_name(verbs->device), da.phys_port_cnt);
    d->max_msg_sz = vx->chunk;
    if (vb_ret(ibv_query_port(verbs, 1, &pa)) == 0 && pa.max_msg_sz && pa.max_msg_sz < d->max_msg_sz)
        d->max_msg_sz = pa.max_msg_sz;
    d->pd = ibv_alloc_pd(verbs);
    if (!d->pd) {
        rc = vb_errno();
        goto fail;
    }
    d->ch = ibv_create_comp_channel(verbs);
    if (!d->ch) {
        rc = vb_errno();
        goto fail;
    }
    int fl = fcntl(d->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(d->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        rc = vb_errno();
        goto fail;
    }
    rrpci_io_init(&d->w, vb_cq_cb, d->ch->fd, RRPCI_IO_READ);
    d->w.data = d;
    rrpci_io_start(rrpci_ctx_loop(vx->ctx), &d->w);
    d->next = vx->devs;
    vx->devs = d;
    RRPCI_LOG(vx->ctx, LOG_DEBUG, "verbs: using device %s (chunk %u, rd_atom %d/%d)",
              ibv_get_device_name(verbs->device), d->max_msg_sz, d->max_rd_atom,
              d->max_init_rd_atom);
    return d;
fail:
    if (d->ch)
        ibv_destroy_comp_channel(d->ch);
    if (d->pd)
        ibv_dealloc_pd(d->pd);
    free(d);
    *ret = rrpci_set_error(vx->ctx, rc, "verbs: setting up device %s: %s",
                           ibv_get_device_name(verbs->device), rrpc_strerror(rc));
    return NULL;
}

/* ---- the transport's own registered buffers ---------------------------- */

int vb_pages_reg(struct ibv_pd *pd, size_t len, struct ibv_mr **mr, bool *mapped)
{
    *mapped = false;
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return -ENOMEM;
    *mapped = true;
    *mr = ibv_reg_mr(pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
    if (!*mr) {
        int rc = vb_errno();
        munmap(mem, len);
        return rc;
    }
    return 0;
}

void vb_pages_dereg(struct ibv_mr *mr)
{
    void *mem = mr->addr;
    size_t len = mr->length;
    ibv_dereg_mr(mr);
    munmap(mem, len);
}

/* ---- registration cache ----------------------------------------------- */

static unsigned vb_hash(uintptr_t a, size_t l, uint64_t g)
{
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)l + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
    h ^= g * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return (unsigned)(h % VB_CACHE_BUCKETS);
}

unsigned vb_remote_access(unsigned access)
{
    unsigned fl = 0;
    if (access & RRPC_ACCESS_REMOTE_READ)
        fl |= IBV_ACCESS_REMOTE_READ;
    if (access & RRPC_ACCESS_REMOTE_WRITE)
        fl |= IBV_ACCESS_REMOTE_WRITE;
    return fl;
}

int vb_mr_get(struct vb_dev *d, rrpc_region *r, struct vb_mr **ret)
{
    uintptr_t a = (uintptr_t)rrpci_region_addr(r);
    size_t l = rrpci_region_len(r);
    uint64_t g = rrpci_region_generation(r);
    unsigned h = vb_hash(a, l, g);
    struct vb_mr *m;
    for (m = d->cache[h]; m; m = m->hnext)
        if (m->addr == a && m->len == l && m->gen == g) {
            *ret = m;
            return 0;
        }
    unsigned acc = rrpci_region_access(r);
    int fl = IBV_ACCESS_LOCAL_WRITE | (int)vb_remote_access(acc);
    if (d->mw2 && acc) /* grants bind windows over it (grant.c) */
        fl |= IBV_ACCESS_MW_BIND;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->mr = ibv_reg_mr(d->pd, (void *)a, l, fl);
    if (!m->mr) {
        int rc = vb_errno();
        free(m);
        return rrpci_set_error(d->vx->ctx, rc, "ibv_reg_mr of %zu bytes on %s: %s%s", l,
                               ibv_get_device_name(d->verbs->device), rrpc_strerror(rc),
                               rc == -ENOMEM || rc == -EPERM || rc == -EAGAIN
                                   ? " (is the locked-memory limit, ulimit -l, too low?)"
                                   : "");
    }
    m->dev = d;
    m->r = r;
    m->addr = a;
    m->len = l;
    m->gen = g;
    m->hnext = d->cache[h];
    d->cache[h] = m;
    m->rnext = rrpci_region_tpriv(r);
    rrpci_region_set_tpriv(r, m);
    *ret = m;
    return 0;
}

static void vb_mr_unhash(struct vb_mr *m)
{
    struct vb_mr **pp = &m->dev->cache[vb_hash(m->addr, m->len, m->gen)];
    while (*pp && *pp != m)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = m->hnext;
}

void vb_region_release(rrpc_ctx *ctx, rrpc_region *r)
{
    struct vb_mr *m = rrpci_region_tpriv(r);
    while (m) {
        struct vb_mr *next = m->rnext;
        vb_mr_unhash(m);
        ibv_dereg_mr(m->mr);
        free(m);
        m = next;
    }
    rrpci_region_set_tpriv(r, NULL);
}

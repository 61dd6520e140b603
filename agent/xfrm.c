/* SPDX-License-Identifier: MIT */
#include "xfrm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <linux/xfrm.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>
#include <netlink/xfrm/lifetime.h>
#include <netlink/xfrm/sa.h>
#include <netlink/xfrm/selector.h>
#include <netlink/xfrm/sp.h>
#include <netlink/xfrm/template.h>

static int say(char *why, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int say(char *why, size_t len, int rc, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* A libnl error as -errno, with the hint that fixes it. */
static int nl_fail(char *why, size_t len, int nlerr, const char *what)
{
    int e = nlerr < 0 ? -nlerr : nlerr;
    switch (e) {
    case NLE_EXIST:
        return say(why, len, -EEXIST, "%s: already installed (remove the pair first: rrpc-xfrm del)",
                   what);
    case NLE_PERM:
    case NLE_NOACCESS:
        return say(why, len, -EPERM, "%s: not permitted (needs CAP_NET_ADMIN: run as root or "
                   "give the agent the capability)", what);
    case NLE_OBJ_NOTFOUND:
        return say(why, len, -ENOENT, "%s: not installed", what);
    default:
        return say(why, len, -ENOPROTOOPT,
                   "%s: %s (the kernel needs xfrm_user, esp4/esp6, gcm, ghash and a default RNG "
                   "(drbg, jitterentropy_rng): rrpc-doctor checks them)",
                   what, nl_geterror(nlerr));
    }
}

int rrpc_xfrm_addr(struct rrpc_xfrm_pair *p, bool peer, const char *text)
{
    uint8_t buf[16] = {0};
    int fam;
    if (inet_pton(AF_INET, text, buf) == 1)
        fam = AF_INET;
    else if (inet_pton(AF_INET6, text, buf) == 1)
        fam = AF_INET6;
    else
        return -EINVAL;
    if (p->family && p->family != fam)
        return -EINVAL;
    p->family = fam;
    memcpy(peer ? p->peer : p->local, buf, sizeof(buf));
    return 0;
}

static struct nl_addr *addr(const struct rrpc_xfrm_pair *p, bool peer)
{
    return nl_addr_build(p->family, peer ? p->peer : p->local, p->family == AF_INET ? 4 : 16);
}

static unsigned plen(const struct rrpc_xfrm_pair *p)
{
    return p->family == AF_INET ? 32 : 128;
}

/* A selector of every packet from @src to @dst (any protocol, any port). */
static struct xfrmnl_sel *host_sel(const struct rrpc_xfrm_pair *p, bool from_peer)
{
    struct xfrmnl_sel *sel = xfrmnl_sel_alloc();
    struct nl_addr *s = addr(p, from_peer), *d = addr(p, !from_peer);
    if (!sel || !s || !d) {
        if (sel)
            xfrmnl_sel_put(sel);
        sel = NULL;
    } else {
        xfrmnl_sel_set_family(sel, (unsigned)p->family);
        xfrmnl_sel_set_saddr(sel, s);
        xfrmnl_sel_set_daddr(sel, d);
        xfrmnl_sel_set_prefixlen_s(sel, plen(p));
        xfrmnl_sel_set_prefixlen_d(sel, plen(p));
    }
    if (s)
        nl_addr_put(s);
    if (d)
        nl_addr_put(d);
    return sel;
}

static struct nl_sock *sock_open(char *why, size_t len, int *rc)
{
    struct nl_sock *sk = nl_socket_alloc();
    if (!sk) {
        *rc = say(why, len, -ENOMEM, "out of memory for a netlink socket");
        return NULL;
    }
    int r = nl_connect(sk, NETLINK_XFRM);
    if (r < 0) {
        *rc = say(why, len, -ENOPROTOOPT, "netlink XFRM socket: %s (is xfrm_user loaded?)",
                  nl_geterror(r));
        nl_socket_free(sk);
        return NULL;
    }
    return sk;
}

/* The SA of one direction: @out local -> peer with spi_out/key_out, else
 * peer -> local with spi_in/key_in. */
static int sa_add(struct nl_sock *sk, const struct rrpc_xfrm_pair *p, bool out, char *why,
                  size_t len)
{
    struct xfrmnl_sa *sa = xfrmnl_sa_alloc();
    struct nl_addr *s = addr(p, !out), *d = addr(p, out);
    struct xfrmnl_sel *sel = host_sel(p, !out);
    struct xfrmnl_ltime_cfg *lt = xfrmnl_ltime_cfg_alloc();
    int rc = 0;
    if (!sa || !s || !d || !sel || !lt) {
        rc = say(why, len, -ENOMEM, "out of memory for an SA");
        goto out;
    }
    xfrmnl_sa_set_family(sa, (unsigned)p->family);
    xfrmnl_sa_set_saddr(sa, s);
    xfrmnl_sa_set_daddr(sa, d);
    xfrmnl_sa_set_spi(sa, out ? p->spi_out : p->spi_in);
    xfrmnl_sa_set_proto(sa, IPPROTO_ESP);
    xfrmnl_sa_set_mode(sa, XFRM_MODE_TRANSPORT);
    xfrmnl_sa_set_reqid(sa, p->reqid);
    xfrmnl_sa_set_replay_window(sa, 32);
    xfrmnl_sa_set_sel(sa, sel);
    /* No byte or packet limit (the kernel's "infinite"), time limits as asked. */
    xfrmnl_ltime_cfg_set_soft_bytelimit(lt, XFRM_INF);
    xfrmnl_ltime_cfg_set_hard_bytelimit(lt, XFRM_INF);
    xfrmnl_ltime_cfg_set_soft_packetlimit(lt, XFRM_INF);
    xfrmnl_ltime_cfg_set_hard_packetlimit(lt, XFRM_INF);
    xfrmnl_ltime_cfg_set_soft_addexpires(lt, p->soft_s);
    xfrmnl_ltime_cfg_set_hard_addexpires(lt, p->hard_s);
    xfrmnl_sa_set_lifetime_cfg(sa, lt);
    char key[RRPC_XFRM_KEY_BYTES];
    memcpy(key, out ? p->key_out : p->key_in, sizeof(key));
    int r = xfrmnl_sa_set_aead_params(sa, RRPC_XFRM_ALGO, RRPC_XFRM_KEY_BYTES * 8,
                                      RRPC_XFRM_ICV_BITS, key);
    explicit_bzero(key, sizeof(key));
    if (r < 0) {
        rc = say(why, len, -ENOMEM, "setting the SA's key: %s", nl_geterror(r));
        goto out;
    }
    r = xfrmnl_sa_add(sk, sa, NLM_F_CREATE | NLM_F_EXCL);
    if (r < 0) {
        char what[64];
        snprintf(what, sizeof(what), "the %s SA (spi 0x%x)", out ? "outbound" : "inbound",
                 out ? p->spi_out : p->spi_in);
        rc = nl_fail(why, len, r, what);
    }
out:
    if (sa)
        xfrmnl_sa_put(sa);
    if (s)
        nl_addr_put(s);
    if (d)
        nl_addr_put(d);
    if (sel)
        xfrmnl_sel_put(sel);
    if (lt)
        xfrmnl_ltime_cfg_put(lt);
    return rc;
}

static int sa_del(struct nl_sock *sk, const struct rrpc_xfrm_pair *p, bool out)
{
    struct xfrmnl_sa *sa = xfrmnl_sa_alloc();
    struct nl_addr *s = addr(p, !out), *d = addr(p, out);
    int r = -NLE_NOMEM;
    if (sa && s && d) {
        xfrmnl_sa_set_family(sa, (unsigned)p->family);
        xfrmnl_sa_set_saddr(sa, s);
        xfrmnl_sa_set_daddr(sa, d);
        xfrmnl_sa_set_spi(sa, out ? p->spi_out : p->spi_in);
        xfrmnl_sa_set_proto(sa, IPPROTO_ESP);
        r = xfrmnl_sa_delete(sk, sa, 0);
    }
    if (sa)
        xfrmnl_sa_put(sa);
    if (s)
        nl_addr_put(s);
    if (d)
        nl_addr_put(d);
    return r;
}

/* The policy of packets @from_peer (dir in) or to the peer (dir out): ESP in
 * transport mode with @p's reqid, required. */
static int sp_op(struct nl_sock *sk, const struct rrpc_xfrm_pair *p, bool from_peer, bool add,
                 char *why, size_t len)
{
    struct xfrmnl_sp *sp = xfrmnl_sp_alloc();
    struct xfrmnl_sel *sel = host_sel(p, from_peer);
    struct xfrmnl_user_tmpl *t = add ? xfrmnl_user_tmpl_alloc() : NULL;
    struct nl_addr *s = addr(p, from_peer), *d = addr(p, !from_peer);
    struct xfrmnl_ltime_cfg *lt = add ? xfrmnl_ltime_cfg_alloc() : NULL;
    int rc = 0, r;
    if (!sp || !sel || !s || !d || (add && (!t || !lt))) {
        rc = say(why, len, -ENOMEM, "out of memory for a policy");
        goto out;
    }
    xfrmnl_sp_set_sel(sp, sel);
    xfrmnl_sp_set_dir(sp, from_peer ? XFRM_POLICY_IN : XFRM_POLICY_OUT);
    if (add) {
        xfrmnl_sp_set_action(sp, XFRM_POLICY_ALLOW);
        xfrmnl_sp_set_priority(sp, 0);
        xfrmnl_ltime_cfg_set_soft_bytelimit(lt, XFRM_INF);
        xfrmnl_ltime_cfg_set_hard_bytelimit(lt, XFRM_INF);
        xfrmnl_ltime_cfg_set_soft_packetlimit(lt, XFRM_INF);
        xfrmnl_ltime_cfg_set_hard_packetlimit(lt, XFRM_INF);
        xfrmnl_sp_set_lifetime_cfg(sp, lt);
        xfrmnl_user_tmpl_set_family(t, (unsigned)p->family);
        xfrmnl_user_tmpl_set_saddr(t, s);
        xfrmnl_user_tmpl_set_daddr(t, d);
        xfrmnl_user_tmpl_set_proto(t, IPPROTO_ESP);
        xfrmnl_user_tmpl_set_mode(t, XFRM_MODE_TRANSPORT);
        xfrmnl_user_tmpl_set_reqid(t, p->reqid);
        xfrmnl_user_tmpl_set_aalgos(t, ~0u);
        xfrmnl_user_tmpl_set_ealgos(t, ~0u);
        xfrmnl_user_tmpl_set_calgos(t, ~0u);
        xfrmnl_sp_add_usertemplate(sp, t);
        t = NULL; /* the policy's now */
        r = xfrmnl_sp_add(sk, sp, NLM_F_CREATE | NLM_F_EXCL);
    } else {
        r = xfrmnl_sp_delete(sk, sp, 0);
    }
    if (r < 0)
        rc = nl_fail(why, len, r, from_peer ? "the inbound policy" : "the outbound policy");
out:
    if (sp)
        xfrmnl_sp_put(sp);
    if (sel)
        xfrmnl_sel_put(sel);
    if (t)
        xfrmnl_user_tmpl_free(t);
    if (s)
        nl_addr_put(s);
    if (d)
        nl_addr_put(d);
    if (lt)
        xfrmnl_ltime_cfg_put(lt);
    return rc;
}

/* The peer's view of the pair: its addresses swapped. */
static struct rrpc_xfrm_pair mirror(const struct rrpc_xfrm_pair *p)
{
    struct rrpc_xfrm_pair m = *p;
    memcpy(m.local, p->peer, sizeof(m.local));
    memcpy(m.peer, p->local, sizeof(m.peer));
    explicit_bzero(m.key_out, sizeof(m.key_out));
    explicit_bzero(m.key_in, sizeof(m.key_in));
    return m;
}

static int check(const struct rrpc_xfrm_pair *p, char *why, size_t len)
{
    if (p->family != AF_INET && p->family != AF_INET6)
        return say(why, len, -EINVAL, "the pair has no addresses");
    if (!memcmp(p->local, p->peer, sizeof(p->local)))
        return say(why, len, -EINVAL, "the local and the peer address are the same");
    if (p->spi_out < 256 || p->spi_in < 256 || p->spi_out == p->spi_in)
        return say(why, len, -EINVAL, "SPIs must be >= 256 (0x100) and differ (got 0x%x, 0x%x)",
                   p->spi_out, p->spi_in);
    if (!p->reqid)
        return say(why, len, -EINVAL, "the reqid must not be 0");
    if (p->hard_s && p->soft_s >= p->hard_s)
        return say(why, len, -EINVAL, "the soft lifetime (%llu s) must be below the hard one "
                   "(%llu s)", (unsigned long long)p->soft_s, (unsigned long long)p->hard_s);
    return 0;
}

int rrpc_xfrm_pair_add(const struct rrpc_xfrm_pair *p, char *why, size_t len)
{
    int rc = check(p, why, len);
    if (rc)
        return rc;
    struct nl_sock *sk = sock_open(why, len, &rc);
    if (!sk)
        return rc;
    struct rrpc_xfrm_pair m = mirror(p);
    int step = 0;
    if (!(rc = sa_add(sk, p, true, why, len)) && ++step && !(rc = sa_add(sk, p, false, why, len)) &&
        ++step && !(rc = sp_op(sk, p, false, true, why, len)) && ++step &&
        !(rc = sp_op(sk, p, true, true, why, len)) && ++step && p->loopback &&
        !(rc = sp_op(sk, &m, false, true, why, len)) && ++step)
        rc = sp_op(sk, &m, true, true, why, len);
    if (rc) { /* undo what went in, in reverse */
        char ignore[8];
        if (step >= 5)
            sp_op(sk, &m, false, false, ignore, sizeof(ignore));
        if (step >= 4)
            sp_op(sk, p, true, false, ignore, sizeof(ignore));
        if (step >= 3)
            sp_op(sk, p, false, false, ignore, sizeof(ignore));
        if (step >= 2)
            sa_del(sk, p, false);
        if (step >= 1)
            sa_del(sk, p, true);
    }
    nl_socket_free(sk);
    return rc;
}

int rrpc_xfrm_sas_add(const struct rrpc_xfrm_pair *p, char *why, size_t len)
{
    int rc = check(p, why, len);
    if (rc)
        return rc;
    struct nl_sock *sk = sock_open(why, len, &rc);
    if (!sk)
        return rc;
    if (!(rc = sa_add(sk, p, true, why, len)) && (rc = sa_add(sk, p, false, why, len)))
        sa_del(sk, p, true);
    nl_socket_free(sk);
    return rc;
}

int rrpc_xfrm_sas_del(const struct rrpc_xfrm_pair *p)
{
    int rc = 0;
    struct nl_sock *sk = sock_open(NULL, 0, &rc);
    if (!sk)
        return rc;
    int a = sa_del(sk, p, true), b = sa_del(sk, p, false);
    nl_socket_free(sk);
    return a || b ? -ENOENT : 0;
}

int rrpc_xfrm_pair_del(const struct rrpc_xfrm_pair *p, char *why, size_t len)
{
    int rc = 0;
    if (p->family != AF_INET && p->family != AF_INET6)
        return say(why, len, -EINVAL, "the pair has no addresses");
    struct nl_sock *sk = sock_open(why, len, &rc);
    if (!sk)
        return rc;
    struct rrpc_xfrm_pair m = mirror(p);
    char w[4][160] = {{0}};
    int r[6];
    r[0] = sp_op(sk, p, false, false, w[0], sizeof(w[0]));
    r[1] = sp_op(sk, p, true, false, w[1], sizeof(w[1]));
    r[2] = p->loopback ? sp_op(sk, &m, false, false, w[2], sizeof(w[2])) : 0;
    r[3] = p->loopback ? sp_op(sk, &m, true, false, w[3], sizeof(w[3])) : 0;
    r[4] = sa_del(sk, p, true);
    r[5] = sa_del(sk, p, false);
    nl_socket_free(sk);
    int missing = 0, other = 0;
    for (int i = 0; i < 6; i++) {
        if (r[i] == -ENOENT || r[i] == -NLE_OBJ_NOTFOUND)
            missing++;
        else if (r[i])
            other = i < 4 ? r[i] : nl_fail(why, len, r[i], i == 4 ? "the outbound SA" : "the inbound SA");
    }
    for (int i = 0; i < 4 && other; i++)
        if (r[i] && r[i] != -ENOENT)
            say(why, len, r[i], "%s", w[i]);
    if (other)
        return other;
    if (missing)
        return say(why, len, -ENOENT, "%d of the pair's %d states and policies were not installed",
                   missing, p->loopback ? 6 : 4);
    return 0;
}

int rrpc_xfrm_sa_stats(const struct rrpc_xfrm_pair *p, bool out, struct rrpc_xfrm_sa_stats *ret)
{
    int rc = 0;
    struct nl_sock *sk = sock_open(NULL, 0, &rc);
    if (!sk)
        return rc;
    struct nl_addr *d = addr(p, out);
    struct xfrmnl_sa *sa = NULL;
    int r = d ? xfrmnl_sa_get_kernel(sk, d, out ? p->spi_out : p->spi_in, IPPROTO_ESP, 0, 0, &sa)
              : -NLE_NOMEM;
    if (r < 0 || !sa) {
        rc = r == -NLE_OBJ_NOTFOUND || !sa ? -ENOENT : -EIO;
    } else {
        unsigned long long bytes = 0, packets = 0, add_t = 0, use_t = 0, rw = 0, rp = 0, integ = 0;
        xfrmnl_sa_get_curlifetime(sa, &bytes, &packets, &add_t, &use_t);
        xfrmnl_sa_get_stats(sa, &rw, &rp, &integ);
        *ret = (struct rrpc_xfrm_sa_stats){.packets = packets, .bytes = bytes,
                                           .replay_window_fails = (uint32_t)rw,
                                           .replay_fails = (uint32_t)rp,
                                           .integrity_fails = (uint32_t)integ};
    }
    if (sa)
        xfrmnl_sa_put(sa);
    if (d)
        nl_addr_put(d);
    nl_socket_free(sk);
    return rc;
}

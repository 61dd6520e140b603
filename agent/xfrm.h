/* SPDX-License-Identifier: MIT */
/*
 * ESP between two hosts, installed in the kernel's IPsec (XFRM) over
 * netlink with libnl-xfrm-3 (issue #30): the privileged half of the host
 * agent.  A host pair is two security associations (one per direction,
 * transport mode, AES-GCM with a 128-bit key and 4-byte salt as RFC 4106
 * gives them, 16-byte ICV) and two policies (out: local -> peer, in: peer ->
 * local), keyed on the two addresses and no port or protocol: Soft-RoCE's
 * route lookup carries no UDP ports, so a policy on port 4791 would never
 * match (docs/deployment.md, "Encrypted RoCE").  So RoCEv2 and tcp between
 * the two hosts are both covered, and a clear-text packet from the peer is
 * dropped by the in policy.
 *
 * Needs CAP_NET_ADMIN.  Keys are the caller's: this module keeps none; the
 * copy a libnl object holds while a request is built is freed by libnl
 * (not wiped: libnl offers no way to).
 */
#ifndef RRPC_AGENT_XFRM_H
#define RRPC_AGENT_XFRM_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RRPC_XFRM_KEY_BYTES 20 /* AES-128 key (16) + salt (4), RFC 4106 */
#define RRPC_XFRM_ICV_BITS 128
#define RRPC_XFRM_ALGO "rfc4106(gcm(aes))"

struct rrpc_xfrm_pair {
    int family;                 /* AF_INET or AF_INET6 */
    uint8_t local[16], peer[16]; /* network order; the first 4 bytes for AF_INET */
    uint32_t spi_out, spi_in;   /* the SA local -> peer, peer -> local; >= 256 */
    uint8_t key_out[RRPC_XFRM_KEY_BYTES], key_in[RRPC_XFRM_KEY_BYTES];
    uint32_t reqid;             /* ties the policies to their SAs; != 0 */
    uint64_t soft_s, hard_s;    /* seconds after which the SAs expire (rekey before
                                 * hard_s; soft_s warns); 0: never */
    bool loopback;              /* both addresses are this kernel's (the test VM): the
                                 * peer's view is installed too, its two policies
                                 * (the SAs are the same two) */
};

/* The soft lifetime (the kernel's warning) for a hard one of @hard_s
 * seconds: 90 % of it, at least a second before it; 0 for 0 (never). */
static inline uint64_t rrpc_xfrm_soft_s(uint64_t hard_s)
{
    uint64_t margin = hard_s / 10 ? hard_s / 10 : 1;
    return hard_s > margin ? hard_s - margin : 0;
}

/* Parses an address into @p's @which ("local" or "peer") and family.
 * -EINVAL when it is not an IPv4 or IPv6 address, or families differ. */
int rrpc_xfrm_addr(struct rrpc_xfrm_pair *p, bool peer, const char *text);

/* Installs @p: both SAs, then the policies.  On error nothing of @p is
 * left installed, and @why (@len bytes) says what failed and the hint:
 * -EPERM (needs CAP_NET_ADMIN), -EEXIST (a state or policy for this pair
 * or SPI is there: remove it first), -ENOPROTOOPT (the kernel lacks a
 * module: xfrm_user, esp4/esp6, gcm, or an RNG for the IVs).  */
int rrpc_xfrm_pair_add(const struct rrpc_xfrm_pair *p, char *why, size_t len);

/* The two SAs of @p alone (a rekey: the policies are in place and pick the
 * newest SA of their reqid), all or nothing; errors as rrpc_xfrm_pair_add. */
int rrpc_xfrm_sas_add(const struct rrpc_xfrm_pair *p, char *why, size_t len);
/* Removes the two SAs of @p (after a rekey, the old ones); -ENOENT when one
 * was not there. */
int rrpc_xfrm_sas_del(const struct rrpc_xfrm_pair *p);

/* Removes what rrpc_xfrm_pair_add installed for @p (the keys are not
 * needed).  Returns 0 when everything was there and went; -ENOENT when some
 * of it was not there (the rest is removed all the same). */
int rrpc_xfrm_pair_del(const struct rrpc_xfrm_pair *p, char *why, size_t len);

/* Packets and bytes through the SA of @spi towards @dst (@p's addresses):
 * -ENOENT when there is no such SA.  @errors: the SA's replay, integrity
 * and other failures as the kernel counts them. */
struct rrpc_xfrm_sa_stats {
    uint64_t packets, bytes;
    uint32_t replay_window_fails, replay_fails, integrity_fails;
};
int rrpc_xfrm_sa_stats(const struct rrpc_xfrm_pair *p, bool out, struct rrpc_xfrm_sa_stats *ret);

#endif

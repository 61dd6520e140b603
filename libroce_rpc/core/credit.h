/* SPDX-License-Identifier: MIT */
/*
 * Credit accounting of one QoS class of one connection (both directions).
 *
 * Transmit: the peer granted @tx_grant messages; each non-exempt frame we
 * send takes one, the peer gives them back (piggybacked or in CREDIT
 * frames).  The peer may lend more (LEND +n) or take some back (LEND -n);
 * a take-back applies at once, so @tx_avail may fall below 0: a debt the
 * credit returned next pays first.  Receive: we granted @rx_grant; a frame
 * arriving while the peer has none left is a protocol violation; a frame
 * consumed by the application is a credit owed back to the peer.  Credit we
 * take back stays in @rx_grant until the peer acknowledges it (LEND_ACK):
 * frames it sent before it saw the LEND are still covered.
 */
#ifndef RRPCI_CREDIT_H
#define RRPCI_CREDIT_H

#include <stdbool.h>
#include <stdint.h>

/* The largest grant either side accepts from its peer (the wire's credit
 * fields are 16 bits). */
#define RRPCI_CREDIT_MAX 65535u

struct rrpci_credit {
    uint32_t tx_grant;    /* what the peer granted us */
    int32_t tx_avail;     /* what we may still send; < 0: a debt (taken back while in flight) */
    uint32_t rx_grant;    /* what we granted the peer (a take-back counts until acknowledged) */
    uint32_t rx_inflight; /* frames the peer sent whose credit it has not got back */
    uint32_t rx_owed;     /* consumed frames whose credit we have not returned */
    uint32_t rx_taking;   /* taken back, not acknowledged yet: 0 or the LEND's amount */
    int32_t rx_announce;  /* change of rx_grant the peer has not been told yet */
    uint64_t tx_sent;     /* credited frames sent, ever (taken and not given back) */
    uint64_t tx_returned; /* credit the peer returned, ever: frames of ours it has read */
};

void rrpci_credit_init(struct rrpci_credit *c, uint32_t rx_grant, uint32_t tx_grant);
/* Whether a non-exempt frame may be sent now. */
static inline bool rrpci_credit_can_send(const struct rrpci_credit *c)
{
    return c->tx_avail > 0;
}
/* Takes one transmit credit; false when none is left. */
bool rrpci_credit_take(struct rrpci_credit *c);
/* The peer returned @n credits.  RRPC_E_CREDIT when that is more than it could owe us. */
int rrpci_credit_returned(struct rrpci_credit *c, uint32_t n);
/* The peer's LEND changed our grant by @delta.  RRPC_E_CREDIT when it would
 * leave us a grant below 1 or above RRPCI_CREDIT_MAX, RRPC_E_PROTO for 0. */
int rrpci_credit_granted(struct rrpci_credit *c, int32_t delta);
/* A non-exempt frame arrived.  RRPC_E_CREDIT when the peer had no credit for it. */
int rrpci_credit_rx(struct rrpci_credit *c);
/* Whether the peer has credit for one more frame (rrpci_credit_rx would accept it). */
bool rrpci_credit_rx_room(const struct rrpci_credit *c);
/* The application consumed a received frame: its credit is owed back. */
void rrpci_credit_consumed(struct rrpci_credit *c);
/* Takes every owed credit, to send back (piggybacked or explicit); at most 65535. */
uint16_t rrpci_credit_harvest(struct rrpci_credit *c);
/* Undoes rrpci_credit_take (when @took) and a harvest of @harvested, for a
 * frame the transport could not take after all. */
void rrpci_credit_unsend(struct rrpci_credit *c, bool took, uint16_t harvested);
/* Whether enough is owed that an explicit CREDIT frame should go now (half the grant). */
bool rrpci_credit_should_return(const struct rrpci_credit *c);
/* We lend the peer @n more (announced with the next LEND). */
void rrpci_credit_lend(struct rrpci_credit *c, uint32_t n);
/* We take @n back (announced with the next LEND; acknowledged by
 * rrpci_credit_take_acked).  Only one take-back at a time, and it leaves
 * at least 1. */
bool rrpci_credit_take_back(struct rrpci_credit *c, uint32_t n);
/* The peer's LEND_ACK for @n.  RRPC_E_PROTO when we took no such amount. */
int rrpci_credit_take_acked(struct rrpci_credit *c, uint32_t n);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Credit accounting of one QoS class of one connection (both directions).
 *
 * Transmit: the peer granted @tx_grant messages; each non-exempt frame we
 * send takes one, the peer gives them back (piggybacked or in CREDIT
 * frames).  Receive: we granted @rx_grant; a frame arriving while the peer
 * has none left is a protocol violation; a frame consumed by the
 * application is a credit owed back to the peer.
 */
#ifndef RRPCI_CREDIT_H
#define RRPCI_CREDIT_H

#include <stdbool.h>
#include <stdint.h>

struct rrpci_credit {
    uint32_t tx_grant;    /* what the peer granted us */
    uint32_t tx_avail;    /* what we may still send */
    uint32_t rx_grant;    /* what we granted the peer */
    uint32_t rx_inflight; /* frames the peer sent whose credit it has not got back */
    uint32_t rx_owed;     /* consumed frames whose credit we have not returned */
};

void rrpci_credit_init(struct rrpci_credit *c, uint32_t rx_grant, uint32_t tx_grant);
/* Takes one transmit credit; false when none is left. */
bool rrpci_credit_take(struct rrpci_credit *c);
/* The peer returned @n credits.  RRPC_E_CREDIT when that is more than it could owe us. */
int rrpci_credit_returned(struct rrpci_credit *c, uint32_t n);
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

#endif

/* SPDX-License-Identifier: MIT */
#include "core/credit.h"

#include <roce_rpc/error.h>

void rrpci_credit_init(struct rrpci_credit *c, uint32_t rx_grant, uint32_t tx_grant)
{
    c->rx_grant = rx_grant;
    c->tx_grant = tx_grant;
    c->tx_avail = tx_grant;
    c->rx_inflight = 0;
    c->rx_owed = 0;
}

bool rrpci_credit_take(struct rrpci_credit *c)
{
    if (c->tx_avail == 0)
        return false;
    c->tx_avail--;
    return true;
}

int rrpci_credit_returned(struct rrpci_credit *c, uint32_t n)
{
    if (n > c->tx_grant - c->tx_avail)
        return RRPC_E_CREDIT;
    c->tx_avail += n;
    return 0;
}

bool rrpci_credit_rx_room(const struct rrpci_credit *c)
{
    return c->rx_inflight < c->rx_grant;
}

int rrpci_credit_rx(struct rrpci_credit *c)
{
    if (!rrpci_credit_rx_room(c))
        return RRPC_E_CREDIT;
    c->rx_inflight++;
    return 0;
}

void rrpci_credit_consumed(struct rrpci_credit *c)
{
    c->rx_owed++;
}

uint16_t rrpci_credit_harvest(struct rrpci_credit *c)
{
    uint32_t n = c->rx_owed > 0xffff ? 0xffff : c->rx_owed;
    c->rx_owed -= n;
    c->rx_inflight -= n;
    return (uint16_t)n;
}

void rrpci_credit_unsend(struct rrpci_credit *c, bool took, uint16_t harvested)
{
    c->rx_owed += harvested;
    c->rx_inflight += harvested;
    if (took)
        c->tx_avail++;
}

bool rrpci_credit_should_return(const struct rrpci_credit *c)
{
    uint32_t half = c->rx_grant / 2 ? c->rx_grant / 2 : 1;
    return c->rx_owed >= half;
}

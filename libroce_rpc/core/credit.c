/* SPDX-License-Identifier: MIT */
#include "core/credit.h"

#include <roce_rpc/error.h>

void rrpci_credit_init(struct rrpci_credit *c, uint32_t rx_grant, uint32_t tx_grant)
{
    *c = (struct rrpci_credit){.rx_grant = rx_grant, .tx_grant = tx_grant,
                               .tx_avail = (int32_t)tx_grant};
}

bool rrpci_credit_take(struct rrpci_credit *c)
{
    if (c->tx_avail <= 0)
        return false;
    c->tx_avail--;
    c->tx_sent++;
    return true;
}

/* Frames we sent whose credit has not come back. */
static int64_t tx_inflight(const struct rrpci_credit *c)
{
    return (int64_t)c->tx_grant - c->tx_avail;
}

int rrpci_credit_returned(struct rrpci_credit *c, uint32_t n)
{
    if ((int64_t)n > tx_inflight(c))
        return RRPC_E_CREDIT;
    c->tx_avail += (int32_t)n;
    c->tx_returned += n;
    return 0;
}

int rrpci_credit_granted(struct rrpci_credit *c, int32_t delta)
{
    if (delta == 0)
        return RRPC_E_PROTO;
    int64_t g = (int64_t)c->tx_grant + delta;
    if (g < 1 || g > RRPCI_CREDIT_MAX)
        return RRPC_E_CREDIT;
    c->tx_grant = (uint32_t)g;
    c->tx_avail += delta;
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
    if (took) {
        c->tx_avail++;
        c->tx_sent--;
    }
}

bool rrpci_credit_should_return(const struct rrpci_credit *c)
{
    uint32_t grant = c->rx_grant - c->rx_taking;
    uint32_t half = grant / 2 ? grant / 2 : 1;
    return c->rx_owed >= half;
}

void rrpci_credit_lend(struct rrpci_credit *c, uint32_t n)
{
    c->rx_grant += n;
    c->rx_announce += (int32_t)n;
}

bool rrpci_credit_take_back(struct rrpci_credit *c, uint32_t n)
{
    if (c->rx_taking || c->rx_announce || n == 0 || n >= c->rx_grant)
        return false;
    c->rx_taking = n;
    c->rx_announce = -(int32_t)n;
    return true;
}

int rrpci_credit_take_acked(struct rrpci_credit *c, uint32_t n)
{
    if (!c->rx_taking || n != c->rx_taking || c->rx_announce)
        return RRPC_E_PROTO;
    c->rx_grant -= n;
    c->rx_taking = 0;
    return 0;
}

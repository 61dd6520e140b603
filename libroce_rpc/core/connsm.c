/* SPDX-License-Identifier: MIT */
#include "core/connsm.h"

#define X -1
static const signed char next[RRPCI_NSTATES_][RRPCI_NEVENTS_] = {
    /*                 WIRE_UP   WIRE_UP_TICKET        TICKET_OK TICKET_REFUSED  APP_CLOSE     DOWN */
    [RRPCI_CONNECTING] = {RRPCI_UP, RRPCI_AUTHENTICATING, X, X, RRPCI_CLOSING, RRPCI_DOWN},
    [RRPCI_AUTHENTICATING] = {X, X, RRPCI_UP, RRPCI_REFUSING, RRPCI_CLOSING, RRPCI_DOWN},
    [RRPCI_UP] = {X, X, X, X, RRPCI_CLOSING, RRPCI_DOWN},
    [RRPCI_REFUSING] = {X, X, X, X, X, RRPCI_DOWN},
    [RRPCI_CLOSING] = {X, X, X, X, X, RRPCI_DOWN},
    [RRPCI_DOWN] = {X, X, X, X, X, X},
};
#undef X

int rrpci_conn_next(enum rrpci_conn_state s, enum rrpci_conn_event ev)
{
    if ((unsigned)s >= RRPCI_NSTATES_ || (unsigned)ev >= RRPCI_NEVENTS_)
        return -1;
    return next[s][ev];
}

const char *rrpci_conn_state_name(enum rrpci_conn_state s)
{
    static const char *const names[RRPCI_NSTATES_] = {
        "connecting", "authenticating", "up", "refusing", "closing", "down"};
    return (unsigned)s < RRPCI_NSTATES_ ? names[s] : "?";
}

/* SPDX-License-Identifier: MIT */
/*
 * A connection's lifecycle, as one table.  Pure: no I/O, no timers; conn.c
 * applies it in rrpci_conn_enter(), the only place a connection's state changes,
 * which also starts and stops the timers of each state.  The diagram is in
 * docs/architecture.md.
 *
 *   state           meaning                                     timer running
 *   CONNECTING      the transport sets up                       setup (connect, or
 *   AUTHENTICATING  transport up; the ticket is being exchanged  setup   auth deadline)
 *   UP              announced to the application                keepalive
 *   REFUSING        passive: ticket refused, ERROR on its way   close (50 ms)
 *   CLOSING         closed by the application                   close (next iteration)
 *   DOWN            over; the transport has released it         none
 */
#ifndef RRPCI_CONNSM_H
#define RRPCI_CONNSM_H

enum rrpci_conn_state {
    RRPCI_CONNECTING,
    RRPCI_AUTHENTICATING,
    RRPCI_UP,
    RRPCI_REFUSING,
    RRPCI_CLOSING,
    RRPCI_DOWN,
    RRPCI_NSTATES_
};

enum rrpci_conn_event {
    RRPCI_EV_WIRE_UP,        /* the transport is up, no ticket to exchange */
    RRPCI_EV_WIRE_UP_TICKET, /* the transport is up, a ticket to send or to check */
    RRPCI_EV_TICKET_OK,      /* the ticket was accepted (passive) / acknowledged (active) */
    RRPCI_EV_TICKET_REFUSED, /* passive: the ticket is refused, or a frame came instead */
    RRPCI_EV_APP_CLOSE,      /* rrpc_conn_close */
    RRPCI_EV_DOWN,           /* error, peer gone, timeout, close due: the end */
    RRPCI_NEVENTS_
};

/* The state after @ev in @s, or -1 when @ev does not apply in @s (the event
 * is then ignored: for example a late "transport up" on a closing
 * connection). */
int rrpci_conn_next(enum rrpci_conn_state s, enum rrpci_conn_event ev);
const char *rrpci_conn_state_name(enum rrpci_conn_state s);

#endif

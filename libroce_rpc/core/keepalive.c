/* SPDX-License-Identifier: MIT */
/* Keepalive: a connection idle for the interval sends one probe, and goes
 * down when nothing at all arrived within the timeout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"

/* ---- keepalive ---------------------------------------------------------- */

/* Re-arms the keepalive timer to fire at loop time @at.  The timer is never
 * touched on the receive path (that only stores @last_rx): it wakes at most
 * once per interval and works out what happened since. */
static void ka_arm(rrpc_conn *c, double at)
{
    double d = at - rrpci_ctx_now(c->ctx);
    c->ka_timer.repeat = d > 0.001 ? d : 0.001;
    rrpci_timer_again(&c->ka_timer);
}

void rrpci_ka_timer_cb(struct rrpci_timer *t)
{
    rrpc_conn *c = t->data;
    const struct rrpci_config *cfg = &c->ctx->cfg;
    double now = rrpci_ctx_now(c->ctx);
    double ival = cfg->keepalive_ms / 1000.0, tmo = cfg->keepalive_timeout_ms / 1000.0;
    if (c->ka_probe_out && c->last_rx >= c->ka_sent)
        c->ka_probe_out = false; /* anything after the probe answers it */
    if (now - c->last_rx >= tmo) {
        char why[128];
        snprintf(why, sizeof(why), "no keepalive from the peer in %d ms (RRPC_KEEPALIVE_TIMEOUT_MS)",
                 cfg->keepalive_timeout_ms);
        rrpci_set_error(c->ctx, RRPC_E_CONN_LOST, "%s", why);
        c->ctx->stats.keepalive_losses++;
        rrpci_conn_down(c, RRPC_E_CONN_LOST, why);
        return;
    }
    if (!c->ka_probe_out && now - c->last_rx >= ival) {
        if (c->ops->trim) /* idle: give back buffers sized for past traffic */
            c->ops->trim(c);
        /* One probe at a time: the transports are reliable, and it bounds
         * the exempt frames a peer must have receive buffers for. */
        int r = rrpci_send_exempt(c, RRPCI_T_KEEPALIVE, 0, NULL, 0);
        if (r < 0 || !rrpci_conn_wire_open(c)) {
            if (!rrpci_conn_is_down(c))
                rrpci_conn_down(c, r, "cannot send a keepalive");
            return;
        }
        c->ka_probe_out = true;
        c->ka_sent = now;
    }
    ka_arm(c, c->last_rx + (c->ka_probe_out ? tmo : ival));
}

void rrpci_ka_start(rrpc_conn *c)
{
    if (c->ctx->cfg.keepalive_ms <= 0 || !rrpci_conn_is_up(c))
        return;
    c->last_rx = rrpci_ctx_now(c->ctx);
    c->ka_probe_out = false;
    ka_arm(c, c->last_rx + c->ctx->cfg.keepalive_ms / 1000.0);
}

/* SPDX-License-Identifier: MIT */
/* The receive dispatch: admission of a frame at its header, the ticket
 * gate of a connection that is not yet authenticated, protocol errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"

/* ---- receive dispatch -------------------------------------------------- */

static void protocol_error(rrpc_conn *c, int code, const char *why)
{
    char peer[80] = "?";
    if (c->ops->peer_name)
        c->ops->peer_name(c, peer, sizeof(peer));
    rrpci_set_error(c->ctx, code, "peer %s broke the protocol: %s; connection closed", peer, why);
    RRPCI_LOG(c->ctx, LOG_WARNING, "peer %s broke the protocol: %s", peer, why);
    rrpci_conn_down(c, code, why);
}

/* The passive side refuses: the reason goes to the peer in an ERROR frame,
 * and the connection closes shortly after, once the frame has gone out. */
static void refuse_code(rrpc_conn *c, int code, const char *why)
{
    RRPCI_LOG(c->ctx, LOG_NOTICE, "connection refused: %s", why);
    rrpci_set_error(c->ctx, code, "connection refused: %s", why);
    rrpci_send_exempt(c, RRPCI_T_ERROR, code, why, strlen(why));
    rrpci_conn_enter(c, RRPCI_EV_TICKET_REFUSED);
}

static void refuse(rrpc_conn *c, const char *why)
{
    refuse_code(c, RRPC_E_TICKET, why);
}

void rrpci_conn_refused(rrpc_conn *c, int code, const uint8_t *reason, size_t len)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "the server refused the connection: %.*s",
             (int)(len < 200 ? len : 200), (const char *)reason);
    if (code >= 0) /* not a code: what was being refused is */
        code = rrpci_conn_wire_open(c) ? RRPC_E_TICKET : RRPC_E_PROTO;
    rrpci_set_error(c->ctx, code, "%s", msg);
    rrpci_conn_down(c, code, msg);
}

/* Frames while the ticket is being checked: nothing but the ticket exchange. */
static void auth_frame(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p)
{
    if (!rrpci_conn_authenticating(c))
        return; /* refusing or closing: on its way out */
    if (c->passive && h->type == RRPCI_T_TICKET && cls == RRPCI_CLS_CONTROL) {
        char why[256] = "";
        c->ctx->verifying = c; /* for rrpc_ctx_ticket_principal */
        int r = c->ctx->ticket_fn(c->ctx->ticket_user, p, h->len, why, sizeof(why));
        c->ctx->verifying = NULL;
        if (r == 0 && rrpci_admit_principal(c, why, sizeof(why)) < 0) {
            refuse_code(c, RRPC_E_LIMIT, why);
            return;
        }
        if (r == 0) {
            if (rrpci_send_exempt(c, RRPCI_T_TICKET_ACK, 0, NULL, 0) == 0)
                rrpci_conn_announce(c, RRPCI_EV_TICKET_OK);
            return;
        }
        if (!why[0])
            snprintf(why, sizeof(why), "%s", rrpc_strerror(RRPC_E_TICKET));
        refuse(c, why);
        return;
    }
    if (!c->passive && h->type == RRPCI_T_TICKET_ACK) {
        rrpci_conn_announce(c, RRPCI_EV_TICKET_OK);
        return;
    }
    if (!c->passive && h->type == RRPCI_T_ERROR) {
        rrpci_conn_refused(c, (int32_t)(uint32_t)h->arg, p, h->len);
        return;
    }
    if (c->passive) {
        refuse(c, "this server requires a connection ticket as the first message; "
                  "connect through the broker (rrpc_connect_service)");
    } else {
        rrpci_conn_down(c, RRPC_E_PROTO, "unexpected frame while the ticket was checked");
    }
}

int rrpci_conn_rx_admit(rrpc_conn *c, int cls, const struct rrpci_hdr *h)
{
    if (rrpci_type_is_exempt(h->type))
        return 0; /* bounded by rrpci_hdr_decode; checked in full by rrpci_conn_recv */
    if (rrpci_conn_is_down(c))
        return RRPC_E_CLOSED;
    if (!rrpci_conn_authenticated(c)) {
        /* Before the handshake and the ticket only their own (small,
         * exempt) frames may come: nothing a peer sends is buffered on
         * credit it has not earned yet. */
        static const char need[] = "this server requires a connection ticket as the first "
                                   "message";
        if (c->passive && rrpci_conn_authenticating(c))
            rrpci_send_exempt(c, RRPCI_T_ERROR, RRPC_E_TICKET, need, sizeof(need) - 1);
        protocol_error(c, RRPC_E_PROTO, "a data frame before the connection was authenticated");
        return RRPC_E_PROTO;
    }
    if (h->cls != cls) {
        protocol_error(c, RRPC_E_PROTO, "frame class differs from its channel's class");
        return RRPC_E_PROTO;
    }
    if (!rrpci_credit_rx_room(&c->cls[cls].credit)) {
        protocol_error(c, RRPC_E_CREDIT, "peer sent a message without credit");
        return RRPC_E_CREDIT;
    }
    return 0;
}

void rrpci_conn_recv(rrpc_conn *c, int cls, const struct rrpci_hdr *h, const uint8_t *p)
{
    if (!rrpci_conn_wire_open(c))
        return;
    c->last_rx = rrpci_ctx_now(c->ctx);
    rrpci_stats_frame_in(c, h->len);
    rrpci_ctx_activity(c->ctx);
    if (h->type == RRPCI_T_KEEPALIVE && !rrpci_conn_reached_up(c))
        return; /* the peer is already up; this side starts probing once it is */
    if (!rrpci_conn_reached_up(c)) {
        auth_frame(c, cls, h, p);
        return;
    }
    if (h->cls != cls) {
        protocol_error(c, RRPC_E_PROTO, "frame class differs from its channel's class");
        return;
    }
    struct rrpci_class_state *s = &c->cls[cls];
    if (h->credits) {
        if (rrpci_credit_returned(&s->credit, h->credits) < 0) {
            protocol_error(c, RRPC_E_CREDIT, "peer returned more credit than it owed");
            return;
        }
    }
    bool exempt = rrpci_type_is_exempt(h->type);
    if (!exempt)
        c->last_data = c->last_rx; /* idleness, for admission (admit.c) */
    if (!exempt && rrpci_credit_rx(&s->credit) < 0) {
        protocol_error(c, RRPC_E_CREDIT, "peer sent a message without credit");
        return;
    }
    if (!exempt && (h->flags & RRPCI_F_LAST)) {
        rrpci_lend_on_rx(c, cls);
        if (!rrpci_conn_wire_open(c))
            return; /* the transport failed making room for it */
    }
    rrpci_conn_ref(c);
    bool credit_later = false; /* a worker's job gives it back when it ends */
    switch (h->type) {
    case RRPCI_T_REQUEST:
        credit_later = rrpci_rpc_on_request(c, cls, h, p);
        break;
    case RRPCI_T_RESPONSE:
        rrpci_rpc_on_response(c, h, p);
        break;
    case RRPCI_T_OS_WRITE:
    case RRPCI_T_OS_READ:
        rrpci_os_on_frame(c, cls, h, p);
        break;
    case RRPCI_T_OS_ACK:
        rrpci_os_on_ack(c, h, p);
        break;
    case RRPCI_T_CREDIT:
        break;
    case RRPCI_T_LEND: /* no payload: rrpci_hdr_decode */
    case RRPCI_T_LEND_ACK: {
        const char *why = NULL;
        int r = h->id || h->credits || h->arg > 0xffffffffu
                    ? (why = "a LEND or LEND_ACK with an id, returned credit or more than 32 "
                             "bits of argument",
                       RRPC_E_PROTO)
                    : rrpci_lend_on_frame(c, cls, h, &why);
        if (r == -ENOMEM)
            rrpci_conn_down(c, r, why);
        else if (r < 0)
            protocol_error(c, r, why);
        break;
    }
    case RRPCI_T_CANCEL: /* no payload: rrpci_hdr_decode */
        rrpci_rpc_on_cancel(c, h->id);
        break;
    case RRPCI_T_KEEPALIVE:
        if (cls != RRPCI_CLS_CONTROL || h->arg > 1) /* no payload: rrpci_hdr_decode */
            protocol_error(c, RRPC_E_PROTO, "malformed keepalive frame");
        else if (h->arg == 0)
            rrpci_send_exempt(c, RRPCI_T_KEEPALIVE, 1, NULL, 0); /* the answer */
        break;
    case RRPCI_T_TICKET:
        /* A server without tickets acknowledges the first one, so the
         * client goes on; a ticket is verified once, before anything else,
         * so any other is refused (it would be acknowledged unverified). */
        if (c->passive && cls == RRPCI_CLS_CONTROL && !c->ctx->ticket_fn && !c->ticket_acked) {
            RRPCI_LOG(c->ctx, LOG_INFO, "ticket ignored: this server requires none");
            c->ticket_acked = true;
            rrpci_send_exempt(c, RRPCI_T_TICKET_ACK, 0, NULL, 0);
        } else {
            protocol_error(c, RRPC_E_PROTO, "a connection ticket after the connection was "
                           "accepted (a ticket is shown once, as the first message)");
        }
        break;
    case RRPCI_T_ERROR: {
        char msg[256];
        snprintf(msg, sizeof(msg), "the peer closed the connection: %.*s",
                 (int)(h->len < 200 ? h->len : 200), (const char *)p);
        int code = (int32_t)(uint32_t)h->arg;
        rrpci_conn_down(c, code < 0 ? code : RRPC_E_CONN_LOST, msg);
        break;
    }
    default:
        protocol_error(c, RRPC_E_PROTO, "handshake frame on an established connection");
        break;
    }
    if (rrpci_conn_wire_open(c)) {
        bool request = h->type == RRPCI_T_REQUEST || h->type == RRPCI_T_OS_READ ||
                       h->type == RRPCI_T_OS_WRITE;
        if (credit_later)
            ;
        else if (!exempt && request && rrpci_conn_backlogged(c)) {
            c->cls[cls].held++; /* it does not take its answers: no new requests */
            c->ctx->guard.answer_holds += rrpci_conn_over_answer_share(c);
        }
        else if (!exempt)
            rrpci_conn_consumed(c, cls);
        if (h->credits)
            rrpci_conn_flush(c);
    }
    rrpci_conn_unref(c);
}

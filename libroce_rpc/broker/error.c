/* SPDX-License-Identifier: MIT */
/*
 * The broker client's errors and log (client_int.h): the detail of the last
 * failure of a handle (rrpc_broker_last_error), of rrpc_broker_open on the
 * calling thread, and the log through the library's sink (util/log.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>

#include "broker/client_int.h"
#include "util/log.h"

static _Thread_local char open_err[ERR_MAX];
static _Thread_local char err_copy[ERR_MAX];

void rrpci_broker_log(struct rrpc_broker *b, int level, const char *fmt, ...)
{
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rrpci_log_emit(b->log, b->log_user, level, msg);
}

/* Records the detail of a failure and returns @code. */
int rrpci_broker_fail(struct rrpc_broker *b, int code, const char *fmt, ...)
{
    char msg[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&b->lock);
    memcpy(b->err, msg, sizeof(msg));
    pthread_mutex_unlock(&b->lock);
    return code;
}

void rrpci_broker_err_copy(struct rrpc_broker *b, char *buf, size_t len)
{
    pthread_mutex_lock(&b->lock);
    snprintf(buf, len, "%s", b->err);
    pthread_mutex_unlock(&b->lock);
}

void rrpci_broker_open_clear(void)
{
    open_err[0] = 0;
}

int rrpci_broker_open_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(open_err, sizeof(open_err), fmt, ap);
    va_end(ap);
    return code;
}

RRPC_API const char *rrpc_broker_last_error(rrpc_broker *b)
{
    if (!b)
        return open_err;
    pthread_mutex_lock(&b->lock);
    memcpy(err_copy, b->err, sizeof(err_copy));
    pthread_mutex_unlock(&b->lock);
    return err_copy;
}

void rrpci_ssl_errstr(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, buf, len);
    else
        snprintf(buf, len, "%s", "connection closed during the TLS exchange");
    ERR_clear_error();
}


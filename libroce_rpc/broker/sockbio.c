/* SPDX-License-Identifier: MIT */
/*
 * A socket BIO that never raises SIGPIPE.
 *
 * OpenSSL's socket BIO writes with write(2): when the peer has reset the
 * connection, the kernel raises SIGPIPE, whose default action ends the
 * process. Every TLS write can reach it: SSL_write, the close_notify of
 * SSL_shutdown, the handshake's own records, even an SSL_read that answers
 * a key update. Blocking the signal around some calls missed the others
 * (rrpcd's restart killed every registered server through SSL_shutdown), so
 * the fix is at the bottom: this BIO writes with send(MSG_NOSIGNAL) and
 * reads with recv, and a failed write is reported as an error (EPIPE) like
 * any other. The host process's signal dispositions are never touched.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "broker/sockbio.h"

static BIO_METHOD *method;
static pthread_once_t method_once = PTHREAD_ONCE_INIT;

static int fd_of(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int retryable(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == EINPROGRESS;
}

static int sb_write(BIO *b, const char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd_of(b), buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && retryable(errno))
        BIO_set_retry_write(b);
    return (int)n;
}

static int sb_read(BIO *b, char *buf, int len)
{
    BIO_clear_retry_flags(b);
    if (!buf || len <= 0)
        return 0;
    ssize_t n = recv(fd_of(b), buf, (size_t)len, 0);
    if (n < 0 && retryable(errno))
        BIO_set_retry_read(b);
    return (int)n;
}

static int sb_puts(BIO *b, const char *s)
{
    return sb_write(b, s, (int)strlen(s));
}

static long sb_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    switch (cmd) {
    case BIO_C_GET_FD: /* SSL_get_fd */
        if (ptr)
            *(int *)ptr = fd_of(b);
        return fd_of(b);
    case BIO_CTRL_FLUSH:
        return 1;
    default:
        return 0;
    }
}

static int sb_create(BIO *b)
{
    BIO_set_data(b, (void *)(intptr_t)-1);
    BIO_set_init(b, 1);
    return 1;
}

static void make_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK |
                                 BIO_TYPE_DESCRIPTOR, "roce-rpc socket (MSG_NOSIGNAL)");
    if (!m)
        return;
    if (!BIO_meth_set_write(m, sb_write) || !BIO_meth_set_read(m, sb_read) ||
        !BIO_meth_set_puts(m, sb_puts) || !BIO_meth_set_ctrl(m, sb_ctrl) ||
        !BIO_meth_set_create(m, sb_create)) {
        BIO_meth_free(m);
        return;
    }
    method = m;
}

int rrpci_ssl_set_socket(SSL *ssl, int fd)
{
    if (pthread_once(&method_once, make_method) != 0 || !method)
        return -ENOMEM;
    BIO *b = BIO_new(method);
    if (!b)
        return -ENOMEM;
    BIO_set_data(b, (void *)(intptr_t)fd);
    SSL_set_bio(ssl, b, b); /* the SSL owns @b now; the fd stays the caller's */
    return 0;
}

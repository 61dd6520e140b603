/* SPDX-License-Identifier: MIT */
/* A socket BIO that writes with send(MSG_NOSIGNAL): TLS on it never raises SIGPIPE. */
#ifndef RRPCI_SOCKBIO_H
#define RRPCI_SOCKBIO_H

#include <openssl/ssl.h>

/*
 * Attaches the connected socket @fd to @ssl through a BIO whose writes can
 * never raise SIGPIPE (use instead of SSL_set_fd). @ssl owns the BIO from
 * then on (SSL_free frees it); @fd stays the caller's to close.
 * Returns 0, or -ENOMEM.
 */
int rrpci_ssl_set_socket(SSL *ssl, int fd);

#endif

/* SPDX-License-Identifier: MIT */
/* Endpoint URIs: scheme://host:port[?src=addr], or inproc://name (the name in
 * host, port 0). */
#ifndef RRPCI_URI_H
#define RRPCI_URI_H

#include <stddef.h>

#define RRPCI_URI_HOST_MAX 256

struct rrpci_uri {
    char scheme[16];
    char host[RRPCI_URI_HOST_MAX]; /* without brackets for IPv6 */
    char src[RRPCI_URI_HOST_MAX];  /* "" when no ?src= */
    int port;                      /* 0..65535 */
};

/*
 * Parses @s.  Returns 0 or RRPC_E_URI with a static explanation in *why
 * (may be NULL).
 */
int rrpci_uri_parse(const char *s, struct rrpci_uri *u, const char **why);

#endif

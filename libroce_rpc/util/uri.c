/* SPDX-License-Identifier: MIT */
#include "util/uri.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <roce_rpc/error.h>

static int fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return RRPC_E_URI;
}

/* inproc://NAME: a name, not an address; no port and no query. */
static int parse_inproc_name(const char *name, struct rrpci_uri *u, const char **why)
{
    size_t n = strlen(name);
    if (n == 0)
        return fail(why, "inproc:// needs a name, for example inproc://server");
    if (n >= sizeof(u->host))
        return fail(why, "inproc name too long (at most 255 bytes)");
    if (strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
        return fail(why, "an inproc name has only letters, digits, '.', '_' and '-' "
                         "(no port: inproc://NAME)");
    memcpy(u->host, name, n);
    return 0;
}

int rrpci_uri_parse(const char *s, struct rrpci_uri *u, const char **why)
{
    memset(u, 0, sizeof(*u));
    if (!s)
        return fail(why, "no URI given");
    const char *sep = strstr(s, "://");
    if (!sep || sep == s || (size_t)(sep - s) >= sizeof(u->scheme))
        return fail(why, "expected SCHEME://HOST:PORT, for example tcp://127.0.0.1:7000");
    memcpy(u->scheme, s, (size_t)(sep - s));
    const char *h = sep + 3;
    if (strcmp(u->scheme, "inproc") == 0)
        return parse_inproc_name(h, u, why);
    const char *hend;
    const char *rest;
    if (*h == '[') {
        hend = strchr(h, ']');
        if (!hend)
            return fail(why, "unterminated [IPv6] host");
        h++;
        rest = hend + 1;
    } else {
        hend = h + strcspn(h, ":?/");
        rest = hend;
    }
    if (hend == h)
        return fail(why, "empty host");
    if ((size_t)(hend - h) >= sizeof(u->host))
        return fail(why, "host name too long");
    memcpy(u->host, h, (size_t)(hend - h));
    if (*rest != ':')
        return fail(why, "missing :PORT after the host");
    rest++;
    char *end;
    errno = 0;
    long port = strtol(rest, &end, 10);
    if (end == rest || errno || port < 0 || port > 65535)
        return fail(why, "port must be a number from 0 to 65535");
    u->port = (int)port;
    if (*end == '\0')
        return 0;
    if (*end != '?')
        return fail(why, "unexpected characters after the port");
    const char *q = end + 1;
    if (strncmp(q, "src=", 4) != 0)
        return fail(why, "unknown query parameter (the only one is ?src=ADDR)");
    q += 4;
    size_t n = strlen(q);
    if (n >= 2 && q[0] == '[' && q[n - 1] == ']') {
        q++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof(u->src))
        return fail(why, "?src= needs an address");
    memcpy(u->src, q, n);
    return 0;
}

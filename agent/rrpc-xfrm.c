/* SPDX-License-Identifier: MIT */
/*
 * rrpc-xfrm: installs, shows and removes the ESP protection of one host pair
 * in the kernel (agent/xfrm.h), as the host agent will do over its TLS
 * session with the peer's agent (issue #30; the agent is not built yet).
 * For operators and tests; needs CAP_NET_ADMIN.
 *
 *   rrpc-xfrm add LOCAL PEER --spi-out N --spi-in N (--key-file F | --random-keys)
 *             [--reqid N] [--lifetime S] [--loopback]
 *   rrpc-xfrm del LOCAL PEER --spi-out N --spi-in N [--reqid N] [--loopback]
 *   rrpc-xfrm stats LOCAL PEER --spi-out N --spi-in N
 *
 * A key file holds two lines of 40 hex digits: the key of LOCAL -> PEER,
 * then of PEER -> LOCAL (each AES-128 key + 4-byte salt, RFC 4106); the
 * peer's file has them the other way round.  --random-keys makes both (for
 * --loopback, where both ends are this kernel).  Exit 0, 1 on failure (the
 * reason and its fix on stderr), 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "xfrm.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: rrpc-xfrm add LOCAL PEER --spi-out N --spi-in N (--key-file F | --random-keys)\n"
            "                 [--reqid N] [--lifetime S] [--loopback]\n"
            "       rrpc-xfrm del LOCAL PEER --spi-out N --spi-in N [--loopback]\n"
            "       rrpc-xfrm stats LOCAL PEER --spi-out N --spi-in N\n");
    return 2;
}

static int parse_u32(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || !*s || *end || v > max || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static int hex_key(const char *line, uint8_t out[RRPC_XFRM_KEY_BYTES])
{
    size_t n = strcspn(line, "\r\n");
    if (n != 2 * RRPC_XFRM_KEY_BYTES)
        return -1;
    for (size_t i = 0; i < RRPC_XFRM_KEY_BYTES; i++) {
        unsigned v;
        if (sscanf(line + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static int read_keys(const char *path, struct rrpc_xfrm_pair *p)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "rrpc-xfrm: cannot open the key file %s: %s\n", path, strerror(errno));
        return -1;
    }
    char a[128] = "", b[128] = "";
    int ok = fgets(a, sizeof(a), f) && fgets(b, sizeof(b), f) && !hex_key(a, p->key_out) &&
             !hex_key(b, p->key_in);
    fclose(f);
    explicit_bzero(a, sizeof(a));
    explicit_bzero(b, sizeof(b));
    if (!ok)
        fprintf(stderr, "rrpc-xfrm: %s: want two lines of %d hex digits (LOCAL -> PEER, then "
                        "PEER -> LOCAL)\n", path, 2 * RRPC_XFRM_KEY_BYTES);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"spi-out", required_argument, NULL, 'o'}, {"spi-in", required_argument, NULL, 'i'},
        {"key-file", required_argument, NULL, 'k'}, {"random-keys", no_argument, NULL, 'r'},
        {"reqid", required_argument, NULL, 'q'},   {"lifetime", required_argument, NULL, 'l'},
        {"loopback", no_argument, NULL, 'L'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    struct rrpc_xfrm_pair p = {.reqid = 0x7272}; /* "rr" */
    const char *key_file = NULL;
    bool random_keys = false, have_out = false, have_in = false;
    unsigned long long v;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (parse_u32(optarg, UINT32_MAX, &v))
                return usage();
            p.spi_out = (uint32_t)v, have_out = true;
            break;
        case 'i':
            if (parse_u32(optarg, UINT32_MAX, &v))
                return usage();
            p.spi_in = (uint32_t)v, have_in = true;
            break;
        case 'k': key_file = optarg; break;
        case 'r': random_keys = true; break;
        case 'q':
            if (parse_u32(optarg, UINT32_MAX, &v))
                return usage();
            p.reqid = (uint32_t)v;
            break;
        case 'l':
            if (parse_u32(optarg, 10ull * 365 * 86400, &v))
                return usage();
            p.hard_s = v;
            p.soft_s = rrpc_xfrm_soft_s(v);
            break;
        case 'L': p.loopback = true; break;
        default: return usage();
        }
    }
    if (argc - optind != 3 || !have_out || !have_in)
        return usage();
    const char *cmd = argv[optind];
    if (rrpc_xfrm_addr(&p, false, argv[optind + 1]) || rrpc_xfrm_addr(&p, true, argv[optind + 2])) {
        fprintf(stderr, "rrpc-xfrm: LOCAL and PEER must be IPv4 or IPv6 addresses of one family\n");
        return 2;
    }
    char why[400] = "";
    int rc;
    if (!strcmp(cmd, "add")) {
        if (!!key_file == random_keys) {
            fprintf(stderr, "rrpc-xfrm: give exactly one of --key-file F and --random-keys\n");
            return 2;
        }
        if (key_file && read_keys(key_file, &p))
            return 1;
        if (random_keys && (getrandom(p.key_out, sizeof(p.key_out), 0) != sizeof(p.key_out) ||
                            getrandom(p.key_in, sizeof(p.key_in), 0) != sizeof(p.key_in))) {
            fprintf(stderr, "rrpc-xfrm: getrandom: %s\n", strerror(errno));
            return 1;
        }
        rc = rrpc_xfrm_pair_add(&p, why, sizeof(why));
        explicit_bzero(p.key_out, sizeof(p.key_out));
        explicit_bzero(p.key_in, sizeof(p.key_in));
    } else if (!strcmp(cmd, "del")) {
        rc = rrpc_xfrm_pair_del(&p, why, sizeof(why));
    } else if (!strcmp(cmd, "stats")) {
        for (int out = 1; out >= 0; out--) {
            struct rrpc_xfrm_sa_stats st;
            rc = rrpc_xfrm_sa_stats(&p, out, &st);
            if (rc) {
                snprintf(why, sizeof(why), "the %s SA (spi 0x%x): %s", out ? "outbound" : "inbound",
                         out ? p.spi_out : p.spi_in, strerror(-rc));
                break;
            }
            printf("%s spi=0x%x packets=%llu bytes=%llu replay_window_fails=%u replay_fails=%u "
                   "integrity_fails=%u\n", out ? "out" : "in", out ? p.spi_out : p.spi_in,
                   (unsigned long long)st.packets, (unsigned long long)st.bytes,
                   st.replay_window_fails, st.replay_fails, st.integrity_fails);
        }
    } else {
        return usage();
    }
    if (rc) {
        fprintf(stderr, "rrpc-xfrm %s: %s\n", cmd, why[0] ? why : strerror(-rc));
        return 1;
    }
    return 0;
}

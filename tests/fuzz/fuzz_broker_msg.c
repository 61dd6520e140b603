/* SPDX-License-Identifier: MIT */
/*
 * fuzz_broker_msg: rrpcd's control protocol (docs/broker.md), from the bytes
 * a client sends after the TLS handshake to the answers queued for it.
 *
 * rrpcd's session and request code (daemon/session.c, dispatch.c, lookup.c)
 * is linked in, so its frame reader session_feed() -- u32 length + msgpack
 * map, which calls dispatch_frame(): rrpci_mp_check, msgpack-c, the
 * version/id/op checks and every op -- runs on a real session object of a
 * server made by hand, with the registry (daemon/registry.c) and its memory
 * store, the watches and the configuration code (daemon/config.c); only TLS
 * and the event loop are left out.  The session has a verified client
 * certificate with CN "fuzz", so "hello" without a token authenticates; a
 * token ("fuzz-token-1", principal "tok") and an ACL letting everyone do
 * everything are configured, and "fuzz" is in agents: "pairs" reports are
 * parsed and checked in full, then refused (the session has no certificate
 * to name an address; tests/broker/test_esp_pairs.c runs the rest over TLS).
 *
 * Input: byte 0: bits 0..6 the chunk size the stream is fed in, 1..128 (as
 * TLS records would split it), bit 7 set: the connection starts out
 * authenticated as "fuzz" (so no hello is needed); the rest is the stream.
 * Checks: never crash, and every queued answer is a length-prefixed,
 * well-formed msgpack map with v == CTL_VERSION, id and ok (and err when not
 * ok).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <openssl/rand.h>
#include <openssl/sha.h>

#include "../../daemon/server_int.h"
#include "fuzz.h"

/* daemon/main.c's logging, without main(): format everything, print nothing. */
int log_level = LOG_DEBUG;
void log_open(bool use_syslog, int level)
{
}
void log_msg(int level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
}

/*
 * OpenSSL's RAND_bytes, replaced for this program: registration ids are then
 * small numbers (the first is 1; a new service also draws its secret), so
 * "renew" and "unregister" can name a live one, and every run is
 * reproducible.  Reset for each input.
 */
static uint64_t fuzz_rand_ctr;
int RAND_bytes(unsigned char *buf, int num)
{
    fuzz_rand_ctr++;
    for (int i = 0; i < num; i++)
        buf[i] = i < 8 ? (uint8_t)(fuzz_rand_ctr >> (8 * i)) : 0x5a;
    return 1;
}

static struct config fuzz_cfg;

static void setup(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    config_init(&fuzz_cfg);
    if (config_set(&fuzz_cfg, "allow", "* * *", "fuzz") ||
        config_set(&fuzz_cfg, "allow", "lookup sec?et* t*", "fuzz") ||
        config_set(&fuzz_cfg, "max_registrations", "4", "fuzz") ||
        config_set(&fuzz_cfg, "lease_ms", "5000", "fuzz") ||
        config_set(&fuzz_cfg, "agents", "fuzz, agent", "fuzz"))
        abort();
    fuzz_cfg.tokens = calloc(1, sizeof(*fuzz_cfg.tokens));
    if (!fuzz_cfg.tokens)
        abort();
    snprintf(fuzz_cfg.tokens[0].principal, sizeof(fuzz_cfg.tokens[0].principal), "tok");
    SHA256((const unsigned char *)"fuzz-token-1", 12, fuzz_cfg.tokens[0].digest);
    fuzz_cfg.n_tokens = 1;
}

/* Every answer in the write buffer: u32 length, then a map with v, id, ok. */
static void check_answers(const struct conn *c)
{
    size_t off = 0;
    while (off < c->wlen) {
        FUZZ_CHECK(c->wlen - off >= 4);
        const uint8_t *p = c->wbuf + off;
        size_t len = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        off += 4;
        FUZZ_CHECK(len > 0 && len <= c->wlen - off);
        FUZZ_CHECK(rrpci_mp_check(c->wbuf + off, len, CTL_MAX_DEPTH) == 0);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t o = 0;
        FUZZ_CHECK(msgpack_unpack_next(&u, (const char *)c->wbuf + off, len, &o) ==
                       MSGPACK_UNPACK_SUCCESS &&
                   o == len);
        uint64_t v = 0, id;
        FUZZ_CHECK(u.data.type == MSGPACK_OBJECT_MAP);
        FUZZ_CHECK(rrpci_mp_uint(rrpci_mp_get(&u.data, CTL_K_V), &v) && v == CTL_VERSION);
        FUZZ_CHECK(rrpci_mp_uint(rrpci_mp_get(&u.data, CTL_K_ID), &id));
        const msgpack_object *ok = rrpci_mp_get(&u.data, CTL_K_OK);
        FUZZ_CHECK(ok && ok->type == MSGPACK_OBJECT_BOOLEAN);
        if (!ok->via.boolean) {
            const msgpack_object *err = rrpci_mp_get(&u.data, CTL_K_ERR);
            FUZZ_CHECK(err && err->type == MSGPACK_OBJECT_STR);
        }
        msgpack_unpacked_destroy(&u);
        off += len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1)
        return 0;
    setup();
    fuzz_rand_ctr = 0;
    size_t chunk = (size_t)(d[0] & 0x7f) + 1;
    /* A server as server_start makes one, without its TLS, socket and loop. */
    struct server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        abort();
    srv->cfg = &fuzz_cfg;
    srv->lfd = -1;
    srv->st = store_memory();
    srv->handle_frame = dispatch_frame;
    if (!(srv->reg = registry_new()) || !(srv->watch = watch_new(NULL, srv->reg, session_push)) ||
        !(srv->pairs = pairs_new()))
        abort();
    registry_listen(srv->reg, watch_changed, srv->watch);
    struct conn c;
    memset(&c, 0, sizeof(c));
    c.srv = srv;
    c.fd = -1;
    c.handshaken = true;
    snprintf(c.peer, sizeof(c.peer), "fuzz:1");
    snprintf(c.cert_cn, sizeof(c.cert_cn), "fuzz");
    if (d[0] & 0x80) {
        char why[400];
        c.authed = true;
        snprintf(c.principal, sizeof(c.principal), "fuzz");
        if (!(c.pr = admit_principal_get(srv, c.principal, why, sizeof(why))))
            abort();
    }
    d++;
    n--;
    while (n && !c.closing) {
        size_t k = n < chunk ? n : chunk;
        /* A copy of each chunk, so ASan sees reads past what has arrived. */
        uint8_t *piece = malloc(k);
        if (!piece)
            abort();
        memcpy(piece, d, k);
        session_feed(&c, piece, k);
        free(piece);
        d += k;
        n -= k;
        FUZZ_CHECK(c.hdr_got <= 4);
        FUZZ_CHECK(!c.frame || c.frame_got < c.frame_len);
    }
    check_answers(&c);
    watch_conn_gone(srv->watch, &c); /* its subscriptions (op "watch") */
    free(c.frame);
    free(c.wbuf);
    admit_held(&c, 0);
    admit_principal_put(srv, c.pr);
    for (size_t b = 0; b < PRINCIPAL_BUCKETS; b++)
        while (srv->principals[b]) {
            struct principal *pr = srv->principals[b];
            srv->principals[b] = pr->next;
            free(pr);
        }
    registry_listen(srv->reg, NULL, NULL);
    watch_free(srv->watch);
    pairs_free(srv->pairs);
    registry_free(srv->reg);
    free(srv->lookup_regs); /* server_stop's part of the teardown */
    free(srv);
    return 0;
}

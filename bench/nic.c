/* SPDX-License-Identifier: MIT */
/*
 * The RDMA ports' kernel counters over each test (issue #31): every port of
 * every device under /sys/class/infiniband, read when a test starts and when
 * it ends (progress_begin / progress_end).  A test during which a counter of
 * loss or recovery grew (sequence errors, duplicates, retries, RNR NAKs,
 * CNPs) is named with the counters, on stderr at its end and in the report's
 * "NIC counters" section on stdout.  The counters are the host's, so in the
 * Soft-RoCE VM, where both ends run, they cover both sides.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define NIC_MAX 512   /* counters per snapshot */
#define NIC_NOTES 64  /* tests named in the report */

struct nic_val {
    char key[96]; /* "DEV/PORT/NAME" */
    unsigned long long v;
};
struct nic_snap {
    struct nic_val v[NIC_MAX];
    int n;
};

/* Names that mean a packet was lost, repeated or pushed back. */
static const char *const loss_names[] = {
    "rcvd_seq_err", "out_of_seq_request", "duplicate_request", "retry_exceeded_err",
    "retry_rnr_exceeded_err", "completer_retry_err", "rcvd_rnr_err", "send_rnr_err",
    "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent",
    "rp_cnp_handled", "np_ecn_marked_roce_packets", "implied_nak_seq_err",
};

static struct nic_snap before;
static bool have_before;
static char notes[NIC_NOTES][320];
static int n_notes, n_tests;

static void snap(struct nic_snap *s)
{
    s->n = 0;
    const char *base = "/sys/class/infiniband";
    DIR *devs = opendir(base);
    if (!devs)
        return;
    struct dirent *d;
    while ((d = readdir(devs))) {
        if (d->d_name[0] == '.')
            continue;
        for (int port = 1; port <= 8; port++) {
            char path[512];
            snprintf(path, sizeof(path), "%s/%s/ports/%d/hw_counters", base, d->d_name, port);
            DIR *c = opendir(path);
            if (!c)
                break;
            struct dirent *e;
            while ((e = readdir(c)) && s->n < NIC_MAX) {
                if (e->d_name[0] == '.' || !strcmp(e->d_name, "lifespan"))
                    continue;
                char f[800];
                snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
                FILE *fp = fopen(f, "r");
                if (!fp)
                    continue;
                unsigned long long v;
                if (fscanf(fp, "%llu", &v) == 1) {
                    struct nic_val *x = &s->v[s->n++];
                    snprintf(x->key, sizeof(x->key), "%.40s/%d/%.48s", d->d_name, port, e->d_name);
                    x->v = v;
                }
                fclose(fp);
            }
            closedir(c);
        }
    }
    closedir(devs);
}

static bool is_loss(const char *key)
{
    const char *name = strrchr(key, '/');
    name = name ? name + 1 : key;
    for (size_t i = 0; i < sizeof(loss_names) / sizeof(loss_names[0]); i++)
        if (!strcmp(name, loss_names[i]))
            return true;
    return false;
}

void nic_mark_begin(void)
{
    snap(&before);
    have_before = before.n > 0;
}

void nic_mark_end(const char *label)
{
    if (!have_before)
        return;
    have_before = false;
    static struct nic_snap after;
    snap(&after);
    char loss[256] = "", sent[160] = "";
    size_t lk = 0, sk = 0;
    for (int i = 0; i < after.n; i++)
        for (int j = 0; j < before.n; j++) {
            if (strcmp(after.v[i].key, before.v[j].key))
                continue;
            unsigned long long dv = after.v[i].v - before.v[j].v;
            if (dv && is_loss(after.v[i].key) && lk < sizeof(loss))
                lk += (size_t)snprintf(loss + lk, sizeof(loss) - lk, " %s +%llu",
                                       after.v[i].key, dv);
            else if (dv && strstr(after.v[i].key, "/sent_pkts") && sk < sizeof(sent))
                sk += (size_t)snprintf(sent + sk, sizeof(sent) - sk, " %s +%llu",
                                       after.v[i].key, dv);
            break;
        }
    n_tests++;
    if (loss[0]) {
        fprintf(stderr, "rrpc-bench:   nic: RETRANSMITTED or pushed back during this test:%s "
                        "(packets:%s)\n", loss, sent[0] ? sent : " none counted");
        if (n_notes < NIC_NOTES)
            snprintf(notes[n_notes++], sizeof(notes[0]), "%s:%s", label, loss);
    }
}

void report_nic(FILE *f)
{
    if (!n_tests)
        return; /* no RDMA device on this host */
    fprintf(f, "\nNIC counters (/sys/class/infiniband/*/ports/*/hw_counters, the host's): ");
    if (!n_notes) {
        fprintf(f, "no loss or recovery counter grew during any of the %d tests.\n", n_tests);
        return;
    }
    fprintf(f, "%d of %d tests saw loss or recovery (sequence errors, duplicates, retries, "
               "RNR NAKs, CNPs):\n", n_notes, n_tests);
    for (int i = 0; i < n_notes; i++)
        fprintf(f, "  %s\n", notes[i]);
}

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
#include "util/nic_counters.h"

#define NIC_MAX 512   /* counters per snapshot */
#define NIC_NOTES 64  /* tests named in the report */

struct nic_val {
    char key[96]; /* "DEV/PORT/NAME" */
    unsigned long long v;
};
struct nic_snap {
    struct nic_val v[NIC_MAX];
    int n;
    const char *dev; /* while snap() reads it */
    unsigned port;
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

static void snap_one(void *arg, const char *dir, const char *name, uint64_t v)
{
    struct nic_snap *s = arg;
    if (strcmp(dir, "hw_counters") || s->n == NIC_MAX)
        return; /* the driver's counters; the IB port counters are not compared */
    struct nic_val *x = &s->v[s->n++];
    snprintf(x->key, sizeof(x->key), "%.40s/%u/%.48s", s->dev, s->port, name);
    x->v = v;
}

/* Every port's hw_counters, read by the library's own reader (util/nic_counters.c). */
static void snap(struct nic_snap *s)
{
    s->n = 0;
    DIR *devs = opendir("/sys/class/infiniband");
    if (!devs)
        return;
    struct dirent *d;
    while ((d = readdir(devs))) {
        if (d->d_name[0] == '.')
            continue;
        s->dev = d->d_name;
        for (s->port = 1; s->port <= 8; s->port++)
            if (rrpci_nic_counters(d->d_name, s->port, snap_one, s) < 0)
                break;
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

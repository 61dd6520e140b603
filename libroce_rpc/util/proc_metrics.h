/* SPDX-License-Identifier: MIT */
/*
 * The process_* metrics Prometheus exporters serve by convention (names,
 * types and help as the Prometheus client libraries write them): CPU
 * seconds, virtual and resident memory, start time, open and maximum fds,
 * read from /proc/self.  Appended to every GET /metrics answer of the
 * library and of rrpcd (util/metrics_http.c), once per process's scrape
 * whatever the number of contexts: rrpc_ctx_stats_text stays per context.
 */
#ifndef RRPCI_PROC_METRICS_H
#define RRPCI_PROC_METRICS_H

#include <stdio.h>

/* Writes the families to @f; a figure /proc does not give is left out. */
void rrpci_proc_metrics(FILE *f);

#endif

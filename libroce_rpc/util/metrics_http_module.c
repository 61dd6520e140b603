/* SPDX-License-Identifier: MIT */
/* The entry of the loadable module roce_rpc-metrics_http-X.Y.so
 * (util/metrics_http.h): GET /metrics with libmicrohttpd, loaded by the
 * core the first time a context is configured with metrics_listen. */
#include "util/metrics_http.h"

static const struct rrpci_mhttp_module module = {
    .abi = RRPCI_MHTTP_ABI,
    .check_listen = rrpci_mhttp_check_listen,
    .start = rrpci_mhttp_start,
    .port = rrpci_mhttp_port,
    .stop = rrpci_mhttp_stop,
};

__attribute__((visibility("default"))) const struct rrpci_mhttp_module *RRPCI_MHTTP_ENTRY(void);

__attribute__((visibility("default"))) const struct rrpci_mhttp_module *RRPCI_MHTTP_ENTRY(void)
{
    return &module;
}

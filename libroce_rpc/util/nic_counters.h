/* SPDX-License-Identifier: MIT */
/*
 * The counters the kernel keeps for an RDMA port, read from sysfs:
 *   ROOT/class/infiniband/DEV/ports/PORT/hw_counters/NAME  (the driver's:
 *       rxe's sent_pkts, rcvd_seq_err, rcvd_rnr_err...; mlx5's np_cnp_sent...)
 *   ROOT/class/infiniband/DEV/ports/PORT/counters/NAME     (the IB port
 *       counters: port_xmit_data...; not every driver has them)
 * and rendered as Prometheus families rrpc_nic_NAME_total{device,port}, one
 * family per counter name whatever the number of devices (docs/metrics.md).
 * A file that does not hold one unsigned decimal number is left out, and so
 * is mlx5's hw_counters/lifespan (a setting, not a count).
 */
#ifndef RRPCI_NIC_COUNTERS_H
#define RRPCI_NIC_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#define RRPCI_NIC_NAME_MAX 64 /* a counter's or a device's name, NUL included */

/* "/sys" unless a test points it at a recorded tree. */
extern const char *rrpci_nic_sysfs_root;

/* One counter of @dev's port @port: @dir is "hw_counters" or "counters",
 * @name as in sysfs (a metric name only after rrpci_nic_metric_name). */
typedef void (*rrpci_nic_cb)(void *arg, const char *dir, const char *name, uint64_t value);

/* Calls @cb for every counter of @dev's port @port that reads as a number.
 * The number of counters given, or -errno when the port has neither
 * directory (-ENOENT: no such device or port). */
int rrpci_nic_counters(const char *dev, unsigned port, rrpci_nic_cb cb, void *arg);

/* Writes "rrpc_nic_" + @name in lowercase + "_total" to @out (@len bytes);
 * -EINVAL when @name has a character other than letters, digits and '_' or
 * the result does not fit. */
int rrpci_nic_metric_name(const char *name, char *out, size_t len);

/* One device a context uses, and its port count. */
struct rrpci_nic_dev {
    char name[RRPCI_NIC_NAME_MAX];
    unsigned ports;
};

/* Appends the families of the ports of @devs (@n of them) to @buf at
 * @used (at most @len bytes; the return value is the length the whole text
 * needs, as snprintf).  Nothing when no port has a counter. */
size_t rrpci_nic_render(const struct rrpci_nic_dev *devs, size_t n, char *buf, size_t len,
                        size_t used);

#endif

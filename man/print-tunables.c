/* SPDX-License-Identifier: MIT */
/* Prints libroce_rpc's tables of tunables (every transport's, built in or
 * not) as the scdoc list man/roce_rpc.7.scd has: man/gen-lists.py writes it
 * there and checks it (meson test man_lists_match_the_tables). */
#include <stdio.h>

#include "core/core.h"

int main(void)
{
    rrpci_config_print_as(stdout, RRPCI_CONF_SCDOC, true);
    return fflush(stdout) == 0 ? 0 : 1;
}

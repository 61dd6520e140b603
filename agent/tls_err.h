/* SPDX-License-Identifier: MIT */
/* rrpc-agent's one way of telling why a TLS call failed, for its log lines. */
#ifndef RRPC_AGENT_TLS_ERR_H
#define RRPC_AGENT_TLS_ERR_H

/* OpenSSL's oldest queued error of this thread as text, or "connection
 * closed or timed out" when none is queued; clears the queue.  The string
 * lives in a buffer of the calling thread until its next call. */
const char *ag_tls_err(void);

#endif

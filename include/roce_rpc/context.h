/* SPDX-License-Identifier: MIT */
/*
 * Contexts, QoS classes, endpoints and connections.
 *
 * A context (rrpc_ctx) owns one event loop (the library's own, on epoll).
 * Every callback the library makes for a context runs on the thread that
 * runs that loop, one at a time.  The loop runs in one of two modes:
 *
 *  - thread mode: rrpc_ctx_start_thread() starts a library thread that runs
 *    the loop until rrpc_ctx_destroy(); while it sleeps, a thread making a
 *    blocking call (rrpc_call_sync, ...) runs the loop itself until its
 *    answer came, so callbacks may also run on that thread, inside that
 *    call;
 *  - driven mode: the application polls rrpc_ctx_fd() for readability (in
 *    its own poll/epoll/libev/asyncio loop) and calls rrpc_ctx_progress().
 *
 * Every public function may be called from any thread, in either mode: the
 * context serialises access with its own lock, which the loop releases while
 * it waits for events, and wakes the loop (an eventfd) when another thread
 * changed something.  The exceptions are stated on the function (the blocking
 * calls cannot be made from inside a callback).
 */
#ifndef ROCE_RPC_CONTEXT_H
#define ROCE_RPC_CONTEXT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <roce_rpc/export.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rrpc_ctx rrpc_ctx;
typedef struct rrpc_conn rrpc_conn;
typedef struct rrpc_listener rrpc_listener;

/* ---- QoS classes ------------------------------------------------------- */

/*
 * Every message belongs to a QoS class.  A class has a DSCP (set on every
 * packet of that class, in both directions), a scheduling weight (its share
 * when several classes have something to send) and a credit pool (how many
 * messages of that class a peer may have in flight towards us).
 *
 * Defaults (rrpc_class_set changes them per context, before any endpoint):
 *   class          DSCP        weight  credits
 *   control        48 (CS6)    4       16
 *   low_latency    46 (EF)     8       64
 *   bulk           10 (AF11)   2       16
 *   background      8 (CS1)    1       8
 */
typedef enum rrpc_class {
    RRPC_CLASS_DEFAULT = 0, /* in an options struct: the operation's default class */
    RRPC_CLASS_CONTROL = 1,
    RRPC_CLASS_LOW_LATENCY = 2,
    RRPC_CLASS_BULK = 3,
    RRPC_CLASS_BACKGROUND = 4,
} rrpc_class;
/* The classes are RRPC_CLASS_FIRST .. RRPC_CLASS_LAST, RRPC_CLASS_COUNT of
 * them; a zeroed options struct (qos_class 0) means the operation's default
 * class, never control.  (Before 0.2, control was 0 and there was no
 * default.) */
#define RRPC_CLASS_COUNT 4
#define RRPC_CLASS_FIRST RRPC_CLASS_CONTROL
#define RRPC_CLASS_LAST RRPC_CLASS_BACKGROUND
/* A class mask (bit 1 << class) with every class. */
#define RRPC_CLASS_MASK_ALL (((1u << (RRPC_CLASS_LAST + 1)) - 1) & ~((1u << RRPC_CLASS_FIRST) - 1))

/*
 * The class named @name ("control", "low_latency", "bulk", "background").
 * Returns the class (RRPC_CLASS_FIRST..RRPC_CLASS_LAST) or RRPC_E_BAD_CLASS.
 */
RRPC_API int rrpc_class_from_name(const char *name);

/* The name of class @cls, or NULL when @cls is not a class (also for
 * RRPC_CLASS_DEFAULT, which stands for a class, but is none). */
RRPC_API const char *rrpc_class_name(int cls);

/*
 * Configures class @cls of @ctx: @dscp (0..63), @weight (1..1000) and
 * @credits (1..4096, the messages of this class a peer may send us before
 * it must wait for credit).  Only before the first rrpc_listen/rrpc_connect.
 * Errors: RRPC_E_BAD_CLASS, -EINVAL (a value out of range), -EBUSY (an
 * endpoint already exists).
 */
RRPC_API int rrpc_class_set(rrpc_ctx *ctx, int cls, int dscp, int weight, int credits);

/* Reads the configuration of class @cls into the non-NULL ret_ pointers. */
RRPC_API int rrpc_class_get(rrpc_ctx *ctx, int cls, int *ret_dscp, int *ret_weight,
                            int *ret_credits);

/* ---- logging ----------------------------------------------------------- */

/*
 * The library logs only through this callback, with syslog levels (LOG_ERR=3
 * .. LOG_DEBUG=7).  Without one, nothing is printed unless the environment
 * variable RRPC_LOG_LEVEL is set, in which case messages at or below that
 * level go to stderr.  @fn runs on whichever thread logs; it must not call
 * the library.
 */
typedef void (*rrpc_log_fn)(int level, const char *msg, void *user);
RRPC_API void rrpc_ctx_set_log(rrpc_ctx *ctx, int max_level, rrpc_log_fn fn, void *user);

/* ---- contexts ----------------------------------------------------------- */

/*
 * Creates a context.  Tunables are read from the environment (see
 * rrpc_config_print).  On success *ret_ctx is the caller's, to be released
 * with rrpc_ctx_destroy().  Errors: -ENOMEM, -EINVAL (an RRPC_* environment
 * variable is malformed; rrpc_ctx_last_error(NULL) and stderr name it).
 * The same as rrpc_ctx_create_with(NULL, ret_ctx).
 */
RRPC_API int rrpc_ctx_create(rrpc_ctx **ret_ctx);

/*
 * Configuration from code.  An rrpc_config holds a value for every tunable
 * that rrpc_config_print lists: the RRPC_* environment gives the starting
 * values (else the defaults), rrpc_config_set overrides them one by one, and
 * rrpc_ctx_create_with makes a context from it (the config stays the
 * caller's; a context copies what it needs, so one config may make many).
 *
 * rrpc_config_create: 0, -ENOMEM, or -EINVAL when an RRPC_* variable is
 * malformed (rrpc_ctx_last_error(NULL) says which).
 * rrpc_config_set: @name is the variable's name ("RRPC_MAX_CONNS") or its
 * short form ("max_conns", any case); @value a decimal or 0x number.
 * Errors: -ENOENT (no such tunable), -EINVAL (not a number, or out of its
 * range); rrpc_ctx_last_error(NULL) gives the name, the range and what the
 * tunable means.  Nothing is changed on error.
 * rrpc_config_get: the current value, or -ENOENT; -EINVAL for a text
 * tunable (below).
 * rrpc_ctx_create_with: as rrpc_ctx_create, with @cfg's values (NULL: the
 * environment's); -EINVAL when they do not fit together (for example a
 * keepalive timeout not above the interval).
 *
 * Text tunables, set with rrpc_config_set only (never from the environment,
 * which every context of a process would share):
 * "metrics_listen" = HOST:PORT or [IPv6]:PORT (default "": off): the context
 * serves GET /metrics over HTTP there, its rrpc_ctx_stats_text as
 * "text/plain; version=0.0.4; charset=utf-8", on a thread of its own (idle
 * in poll until scraped), from rrpc_ctx_create_with until rrpc_ctx_destroy,
 * which stops and joins it.  HOST is required (no implicit every-address:
 * 0.0.0.0 or [::] say so); port 0 picks a free one (rrpc_ctx_metrics_port).
 * Other paths get 404, other methods than GET and HEAD 405; at most
 * RRPC_METRICS_MAX_CONNS connections are held, each closed after
 * RRPC_METRICS_TIMEOUT_S without progress.  rrpc_config_set refuses a
 * malformed address (-EINVAL) and, in a libroce_rpc built without
 * libmicrohttpd (meson -Dmetrics_http), any address (-EOPNOTSUPP).
 * rrpc_ctx_create_with fails when it cannot serve there, with the address in
 * rrpc_ctx_last_error(NULL): -EADDRINUSE (another socket holds it),
 * -EADDRNOTAVAIL (not this host's), -EACCES (a privileged port),
 * RRPC_E_UNKNOWN_HOST, -EIO (libmicrohttpd would not start).
 */
typedef struct rrpc_config rrpc_config;
RRPC_API int rrpc_config_create(rrpc_config **ret_cfg);
RRPC_API int rrpc_config_set(rrpc_config *cfg, const char *name, const char *value);
RRPC_API int rrpc_config_get(const rrpc_config *cfg, const char *name, long *ret_value);
RRPC_API void rrpc_config_destroy(rrpc_config *cfg);
RRPC_API int rrpc_ctx_create_with(const rrpc_config *cfg, rrpc_ctx **ret_ctx);

/*
 * Closes every connection and listener (their callbacks run with
 * RRPC_CONN_DOWN and RRPC_E_CLOSED), fails pending calls with RRPC_E_CLOSED,
 * stops the loop thread if any, and frees the context and every connection
 * handle not yet closed (they become invalid).  Accepts NULL.
 * Must not be called from inside a callback of the same context.
 */
RRPC_API void rrpc_ctx_destroy(rrpc_ctx *ctx);

/*
 * The version of the libroce_rpc that is loaded ("0.2.0"), which can differ
 * from RRPC_VERSION_STRING, the version of the headers a program was built
 * with.  A static string.
 */
RRPC_API const char *rrpc_version(void);

/*
 * Thread mode: starts the library thread that runs the loop.  A driven
 * context may switch, between two progress calls.  Errors: -EBUSY (already
 * started, or a thread is inside the loop: rrpc_ctx_progress, a callback,
 * or a blocking call driving it), -errno from pthread_create.
 */
RRPC_API int rrpc_ctx_start_thread(rrpc_ctx *ctx);

/*
 * Driven mode: a file descriptor that becomes readable when the context has
 * work, I/O or a timer that is due (a call's deadline, a keepalive, a
 * connect timeout); then call rrpc_ctx_progress(ctx, 0).  An application
 * may wait on this fd alone, with no timeout of its own: the timers are in
 * it (after each rrpc_ctx_progress it is armed to the next one).  Such an
 * application does not poll after traffic: the fd stays readable through
 * the polling window (RRPC_BUSY_POLL_US) only where a transport left work
 * no fd shows (verbs' completion queues while they are polled); to poll,
 * ask rrpc_ctx_timeout, which says 0 while the context polls.  The
 * library creates the fd on the first call (an epoll instance of its own)
 * and owns it: do not close it; it is closed by rrpc_ctx_destroy, and the
 * same fd is returned on every call.  Errors: -EBUSY (thread mode is on),
 * -errno when it cannot be made.
 */
RRPC_API int rrpc_ctx_fd(rrpc_ctx *ctx);

/*
 * Driven mode: how long the application may wait before it must call
 * rrpc_ctx_progress, in *@ret_ms: the time until the context's next timer,
 * rounded up to a millisecond; 0 when work is pending now or while the
 * context polls after traffic (RRPC_BUSY_POLL_US); -1 when no timer runs
 * (wait for the fd alone).  For loops that take a timeout rather than
 * an fd (like libuv's uv_backend_timeout).  Returns 0, -EINVAL, or -EBUSY in
 * thread mode.
 */
RRPC_API int rrpc_ctx_timeout(rrpc_ctx *ctx, int *ret_ms);

/*
 * Driven mode: runs the loop once, waiting at most @timeout_ms for an event
 * (0: do not wait; -1: wait for one event).  Callbacks run inside this call.
 * One call does a bounded amount of work, so it returns even while callbacks
 * keep issuing operations that complete at once; call it again for the rest.
 * Returns 0, -EBUSY in thread mode or while another thread is inside the
 * loop (its own rrpc_ctx_progress, or a blocking call driving it),
 * RRPC_E_DEADLOCK from inside a callback.
 */
RRPC_API int rrpc_ctx_progress(rrpc_ctx *ctx, int timeout_ms);

/*
 * Waits, as a blocking call does, until *@flag is non-zero: the cost of
 * rrpc_call_sync for a wait on any asynchronous operation (a binding's
 * call whose completion callback sets the flag, several calls at once).
 * First, if @start is not NULL, calls @start(@arg) with the context held,
 * so that the operation it starts (rrpc_call, rrpc_write, ...) does not
 * wake the loop thread; a non-zero return from @start is returned at once,
 * with no wait.  Then, like a blocking call: in driven mode with nobody in
 * the loop, runs the loop on this thread; in thread mode while the loop
 * thread sleeps, takes the loop over and runs it here, so that the answer
 * wakes this thread directly; otherwise sleeps until the thread running
 * the loop sees the flag set after a pass.  Callbacks may therefore run on
 * this thread, inside this call.
 * @flag: owned by the caller, valid until this returns; set it to non-zero
 * (an atomic or release store) from a callback of @ctx, typically the
 * operation's completion.  A flag set by another thread outside the
 * context's callbacks is seen within about 20 ms.  The function only reads
 * it.  @timeout_ms: -1 waits for the flag alone; 0 looks once.  A caller
 * that must react to signals waits in slices (say 100 ms, @start given on
 * the first only) and checks between them.
 * Any thread may call it, also several at once, but not from a callback of
 * @ctx (it would wait for itself).
 * Returns 0 once *@flag is non-zero; -ETIMEDOUT when @timeout_ms passed
 * first (the operation goes on: wait again, or cancel it and wait for its
 * completion before releasing what it uses); @start's non-zero return;
 * RRPC_E_DEADLOCK from a callback of @ctx; -EINVAL for a NULL @ctx or
 * @flag.  Errors set rrpc_ctx_last_error.
 */
RRPC_API int rrpc_ctx_wait_until(rrpc_ctx *ctx, int (*start)(void *arg), void *arg,
                                 const int *flag, int timeout_ms);

/* ---- metrics --------------------------------------------------------------- */

/* Latency buckets of rrpc_class_stats (call round trips, one-sided
 * completions): bucket 0 counts durations of at most 1 us, bucket i
 * (1..RRPC_STATS_RTT_BUCKETS - 2) those in (2^(i-1), 2^i] us, the last one
 * those over 2^(RRPC_STATS_RTT_BUCKETS - 2) us (about 4.2 s).  Upper bounds
 * are inclusive, as Prometheus' "le" says. */
#define RRPC_STATS_RTT_BUCKETS 24

/* Failed calls by code (rrpc_class_stats.call_errors): a fixed table, so the
 * series stay bounded whatever the peers answer.  rrpc_stats_error_label
 * names each slot: "RRPC_E_DEADLINE", "RRPC_E_CONN_LOST", "RRPC_E_CLOSED",
 * "RRPC_E_NO_METHOD", "RRPC_E_TOO_BIG", "RRPC_E_LIMIT", "RRPC_E_ARGS",
 * "application" (a positive code a handler answered), "other". */
#define RRPC_STATS_ERRORS 9

/* The label of slot @i of call_errors (NULL outside 0..RRPC_STATS_ERRORS-1),
 * and the slot a status counts in (-1 for status 0). */
RRPC_API const char *rrpc_stats_error_label(int i);
RRPC_API int rrpc_stats_error_slot(int status);

/*
 * What a context did in one QoS class, counted since it was made.  The
 * client-side figures count calls and one-sided operations this context
 * made; @requests counts the requests its handlers were given.
 */
typedef struct rrpc_class_stats {
    uint64_t calls;           /* calls made (accepted by rrpc_call) */
    uint64_t calls_ok;        /* answered with status 0 */
    uint64_t calls_failed;    /* answered with an error, or failed here (deadline, lost) */
    uint64_t call_bytes_out;  /* request payload bytes of the calls made */
    uint64_t call_bytes_in;   /* response payload bytes of the answers received */
    uint64_t requests;        /* requests received for this context's handlers */
    uint64_t onesided_ops;    /* READs and WRITEs started */
    uint64_t onesided_bytes;  /* their bytes */
    uint64_t onesided_failed; /* those that completed with an error */
    uint64_t credit_stalls;   /* frames queued while the class had no credit from the peer */
    uint64_t credit_wait_ns;  /* time frames of the class waited for credit, ns: on each
                                 connection from its first stall until a frame that waited
                                 leaves, summed over the connections */
    uint64_t queued_frames;   /* a gauge: frames of the class in the send queues of the
                                 context's connections when the snapshot was taken (waiting
                                 for credit or for the transport) */
    uint64_t rtt_us_sum;      /* sum of the round trips of answered calls, us */
    uint64_t rtt_buckets[RRPC_STATS_RTT_BUCKETS]; /* their round trips (see above) */
    uint64_t onesided_us_sum; /* sum of the one-sided operations' durations, start to
                                 completion (ok or failed), us */
    uint64_t onesided_buckets[RRPC_STATS_RTT_BUCKETS]; /* their durations */
    uint64_t call_errors[RRPC_STATS_ERRORS]; /* calls_failed by code (see above) */
    /* Credit lending (RRPC_CREDIT_LENDING): a gauge of the credit lent to
     * peers beyond their first grant now; times a peer that had all its
     * credit in flight was lent more; times it was not, the class's
     * RRPC_CREDIT_BUDGET being lent out; credit taken back from idle peers. */
    uint64_t credit_lent;
    uint64_t credit_lends;
    uint64_t credit_lend_refused;
    uint64_t credit_taken_back;
} rrpc_class_stats;

/*
 * The slots of rrpc_stats.cls: indexed by the public class number, so
 * cls[RRPC_CLASS_CONTROL] .. cls[RRPC_CLASS_BACKGROUND] (1..4) are the
 * RRPC_CLASS_COUNT classes and cls[0], the place of RRPC_CLASS_DEFAULT
 * (which names no class of its own), stays zero: RRPC_CLASS_COUNT + 1 = 5.
 * Part of the ABI: it changes only with the soname.
 */
#define RRPC_STATS_CLASS_SLOTS (RRPC_CLASS_LAST + 1)

typedef struct rrpc_stats {
    rrpc_class_stats cls[RRPC_STATS_CLASS_SLOTS]; /* by class number; [0] zero, see above */
    uint64_t conns_up;         /* connections that came up */
    uint64_t conns_down;       /* connections that went down after coming up */
    uint64_t keepalive_losses; /* peers declared lost by the keepalive timeout */
    /* Adaptive polling stopped before its window ended: the budget of
     * wasted polling (RRPC_BUSY_POLL_BUDGET_PCT) was spent, or the polling thread was not
     * getting its CPU (others runnable on it; it then sleeps 0.1-1.6 s). */
    uint64_t busy_poll_budget_stops;
    uint64_t busy_poll_contended_stops;
    /* Thread mode: times the loop thread woke from its wait (for traffic, a
     * timer, a wake-up from another thread), and blocking calls or
     * rrpc_ctx_wait_until that ran the loop themselves because the loop
     * thread slept (then their answer woke only them).  A thread that makes
     * blocking calls back to back on a context whose loop thread has
     * nothing else to do sees loop_takeovers grow by one per call and
     * loop_thread_wakeups barely move.  Zero in driven mode. */
    uint64_t loop_thread_wakeups;
    uint64_t loop_takeovers;
    /* tcp: writes of a large frame cut to RRPC_TCP_PIECE_SHARED because
     * another class of the same connection had moved a frame within
     * RRPC_TCP_BUSY_MS (or had one queued): class isolation at work.  A
     * connection's own frames (its handshake, tickets, keepalives) do not
     * count as a class's. */
    uint64_t qos_pieces_cut;
    /* tcp: turns of a class that low_latency outranks (bulk, background)
     * that ended after a piece because a connection's first socket had
     * input waiting (RRPC_TCP_PREEMPT). */
    uint64_t qos_turns_preempted;
    uint64_t reserved[2];
} rrpc_stats;

/*
 * Copies @ctx's counters into *@ret (any thread; a consistent snapshot,
 * taken under the context's lock; the queue depths are counted then, by
 * walking the connections' send queues).  Counting costs a few additions per
 * call on the loop thread and is always on.  Returns 0 or -EINVAL.
 */
RRPC_API int rrpc_ctx_stats(rrpc_ctx *ctx, rrpc_stats *ret);

/*
 * The counters of @ctx in the Prometheus text exposition format (0.0.4):
 * metric families rrpc_*, with a class="..." label where they are per
 * class; docs/metrics.md lists them.  Writes at most @len bytes, NUL
 * included, to @buf and the length of the whole text (NUL excluded) to
 * *@ret_len, so a call with @len 0 sizes the buffer.  Returns 0, -EINVAL,
 * or -ENOBUFS when the text was cut (*@ret_len says how much is needed).
 */
RRPC_API int rrpc_ctx_stats_text(rrpc_ctx *ctx, char *buf, size_t len, size_t *ret_len);

/*
 * The TCP port @ctx serves GET /metrics on (metrics_listen; the one picked
 * when its port was 0), or -ENOENT when it serves none, -EINVAL.
 */
RRPC_API int rrpc_ctx_metrics_port(rrpc_ctx *ctx);

/*
 * 1 when @ctx was made with RRPC_REQUIRE_ESP set (it accepts peers of other
 * hosts only over an ESP pair), 0 when not, -EINVAL for NULL.  The broker
 * client registers the services of such a context with require_esp, so
 * rrpcd hands their tickets only to clients whose host has a pair with the
 * server's (docs/deployment.md).
 */
RRPC_API int rrpc_ctx_require_esp(rrpc_ctx *ctx);

/*
 * A human-readable description of the last error reported in @ctx on the
 * calling thread: what failed, with whom, and what to do.  Valid until the
 * thread's next call into the library.  Never NULL ("" when none).
 */
RRPC_API const char *rrpc_ctx_last_error(rrpc_ctx *ctx);

/*
 * Prints every tunable rrpc_config_set accepts to @fp (NULL: stdout): a
 * line with its name (the environment variable's), its default and the
 * values it takes, then what it means, indented.  Writes only to @fp; no
 * error.
 */
RRPC_API void rrpc_config_print(FILE *fp);

/* ---- endpoints and connections ----------------------------------------- */

typedef enum rrpc_conn_event {
    RRPC_CONN_UP = 1,   /* the connection may carry calls */
    RRPC_CONN_DOWN = 2, /* the connection is gone; @reason says why */
} rrpc_conn_event;

/*
 * Connection events.  RRPC_CONN_DOWN comes exactly once per connection that
 * was handed to the application (an accepted one, or one from rrpc_connect),
 * with @reason: RRPC_E_CLOSED after rrpc_conn_close, RRPC_E_CONN_LOST when
 * the peer vanished, RRPC_E_PROTO / RRPC_E_VERSION / RRPC_E_CREDIT when the
 * peer broke the protocol (also RRPC_E_BAD_CLASS and RRPC_E_TOO_BIG for a bad
 * header), RRPC_E_TICKET when a connection ticket was refused, or a negated
 * errno from the transport; rrpc_ctx_last_error(ctx) inside the DOWN
 * callback says why in words.  After the DOWN callback returns, an accepted
 * connection's handle is invalid; one from rrpc_connect* stays valid until
 * rrpc_conn_close.
 */
typedef void (*rrpc_conn_event_fn)(rrpc_conn *conn, rrpc_conn_event ev, int reason,
                                   void *user);

/*
 * Endpoint URIs:
 *   tcp://HOST:PORT    the TCP transport (one socket; bulk, background get their own on first use)
 *   rdma://HOST:PORT   the RoCEv2 verbs transport (one RC QP per QoS class)
 *   inproc://NAME      client and server in this process (no sockets)
 * HOST is an IPv4 address, a name, or [IPv6].  A query may follow:
 *   ?src=ADDR          bind the local side of a connection to ADDR
 * Port 0 in rrpc_listen picks a free port (see rrpc_listener_port).
 *
 * inproc: NAME (letters, digits, '.', '_', '-'; no port, no query) is
 * looked up in a registry of the whole process, so the two sides may be one
 * context or two, on the same thread or on different ones.  rrpc_listen
 * fails with -EADDRINUSE when the name is taken; a connect to a name nobody
 * listens on fails with -ECONNREFUSED.  Frames are handed over, not copied
 * (one copy for an emulated one-sided WRITE's two-piece frame); one-sided
 * operations, credits and classes behave as on tcp.  rrpc_listener_port
 * and rrpc_conn_class_dscp return -EOPNOTSUPP: there is no port, and no
 * packet to mark.
 */

/*
 * Listens on @uri.  Accepted connections are announced to @fn (UP, later
 * DOWN) with @user.  On success *ret_listener belongs to the caller, to be
 * released with rrpc_listener_close().  Errors: RRPC_E_URI, RRPC_E_TRANSPORT
 * (not built in), RRPC_E_NO_DEVICE (rdma:// with no RDMA device for the
 * address), -EADDRINUSE and other negated errnos.
 */
RRPC_API int rrpc_listen(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                         rrpc_listener **ret_listener);

/* The port the listener is bound to (useful after port 0), or a negative code
 * (-EOPNOTSUPP for inproc://, which has none). */
RRPC_API int rrpc_listener_port(rrpc_listener *l);

/* Stops listening and frees @l; accepted connections stay up.  Accepts NULL. */
RRPC_API void rrpc_listener_close(rrpc_listener *l);

/*
 * Starts connecting to @uri; @fn receives UP when every QoS class of the
 * connection is established (or DOWN with the reason it failed).  On success
 * *ret_conn belongs to the caller until rrpc_conn_close, also after DOWN
 * (calls on a connection that is down fail with RRPC_E_CLOSED); close it
 * exactly once.  Errors as rrpc_listen.
 */
RRPC_API int rrpc_connect(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                          rrpc_conn **ret_conn);

/*
 * Connects and waits until the connection is up or @timeout_ms passed.
 * Events after UP still go to @fn (may be NULL).  Not from a callback
 * (RRPC_E_DEADLOCK).  On failure nothing is left behind and the reason is
 * returned (-ETIMEDOUT, -ECONNREFUSED, RRPC_E_VERSION, ...).
 */
RRPC_API int rrpc_connect_sync(rrpc_ctx *ctx, const char *uri, int timeout_ms,
                               rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn);

/*
 * Options of rrpc_connect_with / rrpc_connect_with_sync.  A zeroed struct
 * means every default, and each field's zero means its default; @reserved
 * must be zero (new fields come out of it, so the struct keeps its size and
 * an older library refuses what it would not understand).
 */
typedef struct rrpc_connect_opts {
    const void *ticket;   /* NULL: none; else presented as the first message */
    size_t ticket_len;    /* 1..4096 bytes with @ticket (copied) */
    int timeout_ms;       /* 0: RRPC_CONNECT_TIMEOUT_MS of the context */
    const char *src;      /* NULL: any; the local address to bind, as ?src= */
    uint64_t reserved[4]; /* must be zero */
} rrpc_connect_opts;

/*
 * Starts connecting to @uri with @opts (NULL: all defaults), as rrpc_connect:
 * @fn receives UP, or DOWN with the reason (RRPC_E_TICKET with the server's
 * words in rrpc_ctx_last_error when it refused the ticket; -ETIMEDOUT after
 * @opts->timeout_ms).  On success *ret_conn belongs to the caller until
 * rrpc_conn_close.  Errors: those of rrpc_connect; -EINVAL for a ticket
 * without its length (or longer than 4096 bytes), a negative timeout, a
 * source address given both in @opts and in the URI, or non-zero @reserved.
 */
RRPC_API int rrpc_connect_with(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                               rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn);

/*
 * As rrpc_connect_with, and waits until the connection is up (0) or failed
 * (its reason; nothing is left behind).  Not from a callback
 * (RRPC_E_DEADLOCK).  rrpc_connect_sync and rrpc_connect_ticket are this with
 * a timeout, and a ticket.
 */
RRPC_API int rrpc_connect_with_sync(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                                    rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn);

/*
 * Closes @conn: pending calls fail with RRPC_E_CLOSED and the DOWN event
 * follows, from the loop.  A handle from rrpc_connect* is given back by this
 * call: it is invalid once this returns.  An accepted connection's handle is
 * valid until its DOWN callback returns.  Accepts NULL.
 */
RRPC_API void rrpc_conn_close(rrpc_conn *conn);

/* ---- connection tickets (the broker, <roce_rpc/broker.h>, uses these) -- */

/*
 * Server side: every new connection of @ctx must present a ticket as its
 * first message, and @fn decides: it returns 0 to accept, or a negative code
 * (RRPC_E_TICKET) with a reason for the peer in @why.  It runs on the loop
 * thread before the connection is announced (UP); no handler runs for a
 * connection before its ticket is accepted, and other frames sent before the
 * ticket end the connection with RRPC_E_TICKET.  Without a verifier no ticket
 * is required (a ticket sent anyway is acknowledged and ignored).  Only before
 * the first rrpc_listen.  Errors: -EBUSY (an endpoint exists), -EINVAL.
 */
typedef int (*rrpc_ticket_verify_fn)(void *user, const void *ticket, size_t len, char *why,
                                     size_t whylen);
RRPC_API int rrpc_ctx_require_ticket(rrpc_ctx *ctx, rrpc_ticket_verify_fn fn, void *user);

/* The longest principal rrpc_ctx_ticket_principal takes, in bytes. */
#define RRPC_PRINCIPAL_MAX 127

/*
 * From inside @ctx's rrpc_ticket_verify_fn only: names the principal (the
 * client identity, 1..RRPC_PRINCIPAL_MAX bytes, copied) the ticket being
 * verified belongs to.  Once its ticket is accepted, the connection counts
 * against that principal's cap, RRPC_MAX_CONNS_PER_PRINCIPAL (beyond it the
 * connection is refused with RRPC_E_LIMIT and the reason), and no longer
 * against its address's RRPC_MAX_CONNS_PER_SOURCE, so one principal cannot
 * lock out the other clients of its address.  A verifier that names none
 * keeps the address's cap for all.  Errors: -EINVAL (NULL, empty or too
 * long), -EPERM (not called from the verifier of @ctx), -ENOMEM.
 */
RRPC_API int rrpc_ctx_ticket_principal(rrpc_ctx *ctx, const char *principal);

/*
 * Client side: as rrpc_connect_sync, and presents @ticket (@len bytes, 1..4096,
 * copied) as the connection's first message.  Returns 0 once the server
 * accepted it; RRPC_E_TICKET (the server's reason in rrpc_ctx_last_error)
 * when it refused.
 */
RRPC_API int rrpc_connect_ticket(rrpc_ctx *ctx, const char *uri, const void *ticket, size_t len,
                                 int timeout_ms, rrpc_conn_event_fn fn, void *user,
                                 rrpc_conn **ret_conn);

/* The transport name of @conn ("tcp", "verbs" or "inproc"); static, never NULL. */
RRPC_API const char *rrpc_conn_transport(rrpc_conn *conn);

/*
 * The DSCP actually set on the local side of class @cls of @conn, read back
 * from the socket or queue pair, in *ret_dscp (tcp: from the socket the class
 * travels on; a class whose own socket opens on its first use and was not
 * used yet gives the DSCP that socket will get).  Errors: RRPC_E_BAD_CLASS,
 * RRPC_E_CLOSED, -EOPNOTSUPP when the transport cannot tell.
 */
RRPC_API int rrpc_conn_class_dscp(rrpc_conn *conn, int cls, int *ret_dscp);

/* The application pointer of a connection (initially the @user given to the
 * event callback's registration), and a way to change it. */
RRPC_API void *rrpc_conn_user(rrpc_conn *conn);
RRPC_API void rrpc_conn_set_user(rrpc_conn *conn, void *user);

/* The peer's address as "IP:PORT" in @buf (NUL-terminated, truncated). */
RRPC_API int rrpc_conn_peer(rrpc_conn *conn, char *buf, size_t len);

/*
 * What one connection carried, counted since it was made (all classes
 * together; rrpc_ctx_stats has the figures per class).  Frames are the
 * protocol's messages of any type, their bytes the payload (the 32-byte
 * header not counted); one-sided data moved natively by the NIC is not in
 * them.
 */
typedef struct rrpc_conn_stat {
    uint64_t calls;        /* calls made on it (accepted by rrpc_call) */
    uint64_t calls_ok;     /* answered with status 0 */
    uint64_t calls_failed; /* answered with an error, or failed here */
    uint64_t requests;     /* requests received on it for this context's handlers */
    uint64_t frames_out;   /* frames the transport took */
    uint64_t bytes_out;    /* their payload bytes */
    uint64_t frames_in;    /* frames received */
    uint64_t bytes_in;     /* their payload bytes */
    uint64_t onesided_ops;   /* READs and WRITEs started on it */
    uint64_t onesided_bytes; /* their bytes */
    uint64_t reserved[6];
} rrpc_conn_stat;

/*
 * Copies @conn's counters into *@ret (any thread, under the context's lock;
 * @conn must be a connection the caller still holds: before rrpc_conn_close,
 * or inside its event callback).  Returns 0 or -EINVAL.
 */
RRPC_API int rrpc_conn_stats(rrpc_conn *conn, rrpc_conn_stat *ret);

/* Peers rrpc_ctx_peer_stats tells apart; the connections of any further
 * peer count together under the peer "other". */
#define RRPC_STATS_PEERS 64

/*
 * What the context's connections to one peer carried: @peer is the peer's
 * address without its port ("10.0.0.2", "fd00::2"; the transport's name,
 * "inproc", where it has no address), or "other".  Counted for the
 * connections that came up (all they did, from the moment they were made);
 * the counters of a connection that went down stay with its peer.
 */
typedef struct rrpc_peer_stats {
    char peer[48];
    uint64_t conns;   /* a gauge: its connections up when the snapshot was taken */
    rrpc_conn_stat s; /* their counters summed (rrpc_conn_stat) */
} rrpc_peer_stats;

/*
 * Copies the per-peer counters of @ctx into @ret (room for @n entries; at
 * most RRPC_STATS_PEERS + 1 exist) and their number into *@ret_n, in the
 * order the peers first came up ("other" last).  Any thread.  Returns 0,
 * -EINVAL, or -ENOBUFS when @n is too small (*@ret_n says how many exist;
 * the first @n are copied).
 */
RRPC_API int rrpc_ctx_peer_stats(rrpc_ctx *ctx, rrpc_peer_stats *ret, size_t n, size_t *ret_n);

#ifdef __cplusplus
}
#endif
#endif

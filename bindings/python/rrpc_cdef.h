/* The declarations the Python bindings use: a trimmed copy of
 * include/roce_rpc/{error,context,rpc,memory}.h, as cffi's cdef() reads it
 * (no preprocessor, no RRPC_API).  cffi compiles the module against the real
 * headers, so any mismatch with them is a compile error, and the enum values
 * marked "..." are taken from the headers, not from this file.
 * Keep it in step with include/roce_rpc/ when the public API changes. */

/* ---- error.h ---- */
typedef enum rrpc_errno {
    RRPC_E_PROTO, RRPC_E_VERSION, RRPC_E_NO_METHOD, RRPC_E_BAD_CLASS,
    RRPC_E_TOO_BIG, RRPC_E_ACCESS, RRPC_E_CONN_LOST, RRPC_E_DEADLINE,
    RRPC_E_NO_DEVICE, RRPC_E_URI, RRPC_E_CLOSED,
    RRPC_E_CREDIT, RRPC_E_DEADLOCK, RRPC_E_ARGS, RRPC_E_TRANSPORT,
    RRPC_E_REGION, RRPC_E_TICKET, RRPC_E_LIMIT, RRPC_E_UNKNOWN_HOST,
    RRPC_E_CANCELLED, RRPC_E_GRANT, RRPC_E_METADATA,
    ...
} rrpc_errno;
const char *rrpc_strerror(int code);
const char *rrpc_err_name(int code);

/* ---- context.h ---- */
typedef struct rrpc_ctx rrpc_ctx;
typedef struct rrpc_conn rrpc_conn;
typedef struct rrpc_listener rrpc_listener;

typedef enum rrpc_class {
    RRPC_CLASS_DEFAULT, RRPC_CLASS_CONTROL, RRPC_CLASS_LOW_LATENCY, RRPC_CLASS_BULK, RRPC_CLASS_BACKGROUND, ...
} rrpc_class;
#define RRPC_CLASS_COUNT ...

int rrpc_class_from_name(const char *name);
const char *rrpc_class_name(int cls);
int rrpc_class_set(rrpc_ctx *ctx, int cls, int dscp, int weight, int credits);
int rrpc_class_get(rrpc_ctx *ctx, int cls, int *ret_dscp, int *ret_weight, int *ret_credits);

typedef void (*rrpc_log_fn)(int level, const char *msg, void *user);
void rrpc_ctx_set_log(rrpc_ctx *ctx, int max_level, rrpc_log_fn fn, void *user);

int rrpc_ctx_create(rrpc_ctx **ret_ctx);
void rrpc_ctx_destroy(rrpc_ctx *ctx);
int rrpc_ctx_start_thread(rrpc_ctx *ctx);
int rrpc_ctx_fd(rrpc_ctx *ctx);
int rrpc_ctx_timeout(rrpc_ctx *ctx, int *ret_ms);
int rrpc_ctx_progress(rrpc_ctx *ctx, int timeout_ms);
int rrpc_ctx_wait_until(rrpc_ctx *ctx, int (*start)(void *arg), void *arg, const int *flag,
                        int timeout_ms);
typedef struct rrpc_config rrpc_config;
int rrpc_config_create(rrpc_config **ret_cfg);
int rrpc_config_set(rrpc_config *cfg, const char *name, const char *value);
int rrpc_config_get(const rrpc_config *cfg, const char *name, long *ret_value);
void rrpc_config_destroy(rrpc_config *cfg);
int rrpc_ctx_create_with(const rrpc_config *cfg, rrpc_ctx **ret_ctx);
const char *rrpc_version(void);
#define RRPC_STATS_RTT_BUCKETS 24
#define RRPC_STATS_ERRORS 9
#define RRPC_STATS_PEERS 64
#define RRPC_STATS_CLASS_SLOTS 5
typedef struct rrpc_class_stats {
    uint64_t calls;
    uint64_t calls_ok;
    uint64_t calls_failed;
    uint64_t call_bytes_out;
    uint64_t call_bytes_in;
    uint64_t requests;
    uint64_t onesided_ops;
    uint64_t onesided_bytes;
    uint64_t onesided_failed;
    uint64_t credit_stalls;
    uint64_t credit_wait_ns;
    uint64_t queued_frames;
    uint64_t rtt_us_sum;
    uint64_t rtt_buckets[24];
    uint64_t onesided_us_sum;
    uint64_t onesided_buckets[24];
    uint64_t call_errors[9];
    uint64_t credit_lent;
    uint64_t credit_lends;
    uint64_t credit_lend_refused;
    uint64_t credit_taken_back;
} rrpc_class_stats;
typedef struct rrpc_stats {
    rrpc_class_stats cls[RRPC_STATS_CLASS_SLOTS];
    uint64_t conns_up;
    uint64_t conns_down;
    uint64_t keepalive_losses;
    uint64_t busy_poll_budget_stops;
    uint64_t busy_poll_contended_stops;
    uint64_t loop_thread_wakeups;
    uint64_t loop_takeovers;
    uint64_t qos_pieces_cut;
    uint64_t qos_turns_preempted;
    uint64_t reserved[2];
} rrpc_stats;
int rrpc_ctx_stats(rrpc_ctx *ctx, rrpc_stats *ret);
int rrpc_ctx_stats_text(rrpc_ctx *ctx, char *buf, size_t len, size_t *ret_len);
int rrpc_ctx_metrics_port(rrpc_ctx *ctx);
int rrpc_ctx_require_esp(rrpc_ctx *ctx);
const char *rrpc_stats_error_label(int i);
int rrpc_stats_error_slot(int status);
typedef struct rrpc_conn_stat {
    uint64_t calls;
    uint64_t calls_ok;
    uint64_t calls_failed;
    uint64_t requests;
    uint64_t frames_out;
    uint64_t bytes_out;
    uint64_t frames_in;
    uint64_t bytes_in;
    uint64_t onesided_ops;
    uint64_t onesided_bytes;
    uint64_t reserved[6];
} rrpc_conn_stat;
typedef struct rrpc_peer_stats {
    char peer[48];
    uint64_t conns;
    rrpc_conn_stat s;
} rrpc_peer_stats;
int rrpc_ctx_peer_stats(rrpc_ctx *ctx, rrpc_peer_stats *ret, size_t n, size_t *ret_n);
const char *rrpc_ctx_last_error(rrpc_ctx *ctx);

typedef enum rrpc_conn_event { RRPC_CONN_UP, RRPC_CONN_DOWN, ... } rrpc_conn_event;
typedef void (*rrpc_conn_event_fn)(rrpc_conn *conn, rrpc_conn_event ev, int reason, void *user);

int rrpc_listen(rrpc_ctx *ctx, const char *uri, rrpc_conn_event_fn fn, void *user,
                rrpc_listener **ret_listener);
int rrpc_listener_port(rrpc_listener *l);
void rrpc_listener_close(rrpc_listener *l);
int rrpc_connect_sync(rrpc_ctx *ctx, const char *uri, int timeout_ms,
                      rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn);
typedef struct rrpc_connect_opts {
    const void *ticket;
    size_t ticket_len;
    int timeout_ms;
    const char *src;
    uint64_t reserved[4];
} rrpc_connect_opts;
int rrpc_connect_with(rrpc_ctx *ctx, const char *uri, const rrpc_connect_opts *opts,
                      rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn);
void rrpc_conn_close(rrpc_conn *conn);
int rrpc_connect_ticket(rrpc_ctx *ctx, const char *uri, const void *ticket, size_t len,
                        int timeout_ms, rrpc_conn_event_fn fn, void *user,
                        rrpc_conn **ret_conn);
const char *rrpc_conn_transport(rrpc_conn *conn);
int rrpc_conn_class_dscp(rrpc_conn *conn, int cls, int *ret_dscp);
int rrpc_conn_peer(rrpc_conn *conn, char *buf, size_t len);

/* ---- rpc.h ---- */
typedef struct rrpc_request rrpc_request;
typedef void (*rrpc_handler_fn)(rrpc_request *req, const void *payload, size_t len, void *user);
int rrpc_register(rrpc_ctx *ctx, const char *method, rrpc_handler_fn fn, void *user);
typedef struct rrpc_register_opts {
    uint64_t flags;
    uint64_t reserved[3];
} rrpc_register_opts;
#define RRPC_HANDLER_ON_WORKER ...
#define RRPC_HANDLER_CREDIT_ON_ANSWER ...
int rrpc_register_with(rrpc_ctx *ctx, const char *method, rrpc_handler_fn fn,
                       void *user, const rrpc_register_opts *opts);
int rrpc_unregister(rrpc_ctx *ctx, const char *method);
int rrpc_respond(rrpc_request *req, const void *data, size_t len);
int rrpc_respond_error(rrpc_request *req, int code, const char *msg);
rrpc_conn *rrpc_request_conn(rrpc_request *req);
int rrpc_request_class(rrpc_request *req);
int64_t rrpc_request_remaining_us(rrpc_request *req);
bool rrpc_request_cancelled(rrpc_request *req);
typedef void (*rrpc_cancel_fn)(rrpc_request *req, void *user);
int rrpc_request_on_cancel(rrpc_request *req, rrpc_cancel_fn fn, void *user);

typedef struct rrpc_meta {
    const char *key;
    const void *value;
    size_t len;
} rrpc_meta;
#define RRPC_META_MAX_ENTRIES ...
#define RRPC_META_MAX_KEY ...
#define RRPC_META_MAX_VALUE ...
#define RRPC_META_MAX_BYTES ...
int rrpc_request_meta(rrpc_request *req, const rrpc_meta **ret_meta, size_t *ret_n);
int rrpc_request_set_response_meta(rrpc_request *req, const rrpc_meta *meta, size_t n);
typedef struct rrpc_call_opts {
    int qos_class;
    int deadline_ms;
    uint64_t flags;
    const rrpc_meta *meta;
    uint64_t nmeta;
    uint64_t reserved[1];
} rrpc_call_opts;
#define RRPC_CALL_BORROW ...
typedef struct rrpc_result {
    int status;
    const void *data;
    size_t len;
    const char *message;
    const rrpc_meta *meta;
    size_t nmeta;
} rrpc_result;
typedef void (*rrpc_call_cb)(const rrpc_result *res, void *user);
int rrpc_call(rrpc_conn *conn, const char *method, const void *req, size_t len,
              const rrpc_call_opts *opts, rrpc_call_cb cb, void *user);
int rrpc_call_cancel(rrpc_conn *conn, rrpc_call_cb cb, void *user);
uint64_t rrpc_method_id(const char *method);

/* ---- memory.h ---- */
typedef struct rrpc_region rrpc_region;
#define RRPC_ACCESS_REMOTE_READ ...
#define RRPC_ACCESS_REMOTE_WRITE ...
int rrpc_mem_reg(rrpc_ctx *ctx, void *addr, size_t len, unsigned access, rrpc_region **ret_region);
void rrpc_mem_dereg(rrpc_region *r);
void *rrpc_region_addr(rrpc_region *r);
size_t rrpc_region_len(rrpc_region *r);
typedef struct rrpc_token {
    uint64_t addr;
    uint64_t len;
    uint64_t key;
    uint32_t access;
    uint32_t reserved;
} rrpc_token;
int rrpc_region_token(rrpc_region *r, rrpc_conn *conn, rrpc_token *ret_token);
#define RRPC_TOKEN_SIZE 32
typedef struct rrpc_grant rrpc_grant;
typedef struct rrpc_grant_opts {
    int qos_class;
    unsigned expires_ms;
    uint64_t reserved[3];
} rrpc_grant_opts;
int rrpc_region_grant(rrpc_region *r, rrpc_conn *conn, uint64_t off, uint64_t len,
                      unsigned access, const rrpc_grant_opts *opts, rrpc_grant **ret_grant,
                      rrpc_token *ret_token);
int rrpc_grant_revoke(rrpc_grant *g);
void rrpc_token_encode(const rrpc_token *t, uint8_t out[32]);
int rrpc_token_decode(const void *buf, size_t len, rrpc_token *ret_token);
typedef struct rrpc_op_opts {
    int qos_class;
    int notify;
    uint32_t imm;
    uint64_t reserved[4];
} rrpc_op_opts;
typedef void (*rrpc_op_cb)(int status, void *user);
int rrpc_write(rrpc_conn *conn, rrpc_region *local, size_t local_off,
               const rrpc_token *remote, uint64_t remote_off, size_t len,
               const rrpc_op_opts *opts, rrpc_op_cb cb, void *user);
int rrpc_read(rrpc_conn *conn, rrpc_region *local, size_t local_off,
              const rrpc_token *remote, uint64_t remote_off, size_t len,
              const rrpc_op_opts *opts, rrpc_op_cb cb, void *user);
typedef void (*rrpc_notify_fn)(rrpc_conn *conn, uint32_t imm, void *user);
void rrpc_ctx_set_notify(rrpc_ctx *ctx, rrpc_notify_fn fn, void *user);

/* ---- the Python side of the callbacks (cffi "extern Python") ---- */
extern "Python" {
    void _rrpc_py_handler(rrpc_request *req, const void *payload, size_t len, void *user);
    void _rrpc_py_req_cancel(rrpc_request *req, void *user);
    void _rrpc_py_call_done(const rrpc_result *res, void *user);
    void _rrpc_py_op_done(int status, void *user);
    void _rrpc_py_conn_event(rrpc_conn *conn, rrpc_conn_event ev, int reason, void *user);
    void _rrpc_py_notify(rrpc_conn *conn, uint32_t imm, void *user);
    void _rrpc_py_log(int level, const char *msg, void *user);
}

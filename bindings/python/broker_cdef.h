/* The declarations of include/roce_rpc/broker.h the Python bindings use
 * (read by build_ffi.py after rrpc_cdef.h when the broker library is built;
 * same rules: cffi checks them against the real header). */
#define RRPC_TICKET_INSTANCE_LEN 16
#define RRPC_TICKET_MAX_LEN ...
typedef struct rrpc_broker rrpc_broker;
#define RRPC_BROKER_MAX_ADDRS 16
typedef struct rrpc_broker_opts {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    const char *token;
    const char *server_name;
    int timeout_ms;
    int skew_ms;
    rrpc_log_fn log;
    void *log_user;
    int log_level;
    uint64_t reserved[4];
} rrpc_broker_opts;
int rrpc_broker_open(const char *addr, const rrpc_broker_opts *opts, rrpc_broker **ret_b);
void rrpc_broker_close(rrpc_broker *b);
const char *rrpc_broker_last_error(rrpc_broker *b);
const char *rrpc_broker_principal(rrpc_broker *b);
int rrpc_broker_current(rrpc_broker *b, char *buf, size_t len);
typedef struct rrpc_broker_state {
    char broker[300];
    char registry[16];
    int degraded;
    char why[300];
    uint64_t services;
    uint64_t registrations;
    uint64_t sessions;
    uint64_t reserved[4];
} rrpc_broker_state;
int rrpc_broker_status(rrpc_broker *b, rrpc_broker_state *ret);
int rrpc_broker_gate(rrpc_broker *b, rrpc_ctx *ctx, const char *service);
int rrpc_broker_register(rrpc_broker *b, rrpc_ctx *ctx, const char *service,
                         const char *const *uris, size_t n, unsigned class_mask);
int rrpc_broker_unregister(rrpc_broker *b, const char *service);
typedef struct rrpc_service_endpoint {
    char uri[300];
    unsigned class_mask;
    size_t instance;
} rrpc_service_endpoint;
typedef struct rrpc_service_instance {
    uint8_t id[16];
    uint8_t ticket[...];
    size_t ticket_len;
} rrpc_service_instance;
typedef struct rrpc_service_info {
    size_t n_endpoints;
    rrpc_service_endpoint *endpoints;
    uint8_t ticket[...];
    size_t ticket_len;
    int64_t ticket_expiry_ms;
    size_t n_instances;
    rrpc_service_instance *instances;
} rrpc_service_info;
int rrpc_broker_lookup(rrpc_broker *b, const char *service, rrpc_service_info **ret_info);
void rrpc_service_info_free(rrpc_service_info *info);
int rrpc_connect_service(rrpc_ctx *ctx, rrpc_broker *b, const char *service, int timeout_ms,
                         rrpc_conn_event_fn fn, void *user, rrpc_conn **ret_conn);
typedef struct rrpc_broker_watch rrpc_broker_watch;
#define RRPC_WATCH_ADDED 1
#define RRPC_WATCH_REMOVED 2
#define RRPC_WATCH_MAX_ENDPOINTS 64
typedef struct rrpc_watch_event {
    int type;
    uint8_t instance[16];
    size_t n_endpoints;
    rrpc_service_endpoint endpoints[64];
} rrpc_watch_event;
int rrpc_broker_watch_open(rrpc_broker *b, const char *service, rrpc_broker_watch **ret_w);
int rrpc_broker_watch_next(rrpc_broker_watch *w, int timeout_ms, rrpc_watch_event *ev);
const char *rrpc_broker_watch_last_error(rrpc_broker_watch *w);
void rrpc_broker_watch_close(rrpc_broker_watch *w);
typedef struct rrpc_service rrpc_service;
typedef struct rrpc_service_opts {
    int backoff_min_ms;
    int backoff_max_ms;
    int connect_timeout_ms;
    int wait_ms;
    uint64_t reserved[4];
} rrpc_service_opts;
int rrpc_service_open(rrpc_ctx *ctx, rrpc_broker *b, const char *service,
                      const rrpc_service_opts *opts, rrpc_service **ret_svc);
void rrpc_service_close(rrpc_service *svc);
int rrpc_service_conn(rrpc_service *svc, int wait_ms, rrpc_conn **ret_conn);
void rrpc_service_conn_release(rrpc_service *svc, rrpc_conn *conn);
typedef struct rrpc_service_stat {
    uint64_t attempts;
    uint64_t failures;
    uint64_t connects;
    uint64_t drops;
    int up;
    int last_error;
    int backoff_ms;
} rrpc_service_stat;
int rrpc_service_stats(rrpc_service *svc, rrpc_service_stat *ret);
const char *rrpc_service_last_error(rrpc_service *svc);

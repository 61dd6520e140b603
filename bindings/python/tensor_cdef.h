/* The declarations of include/roce_rpc/tensor.h the Python bindings use
 * (read by build_ffi.py after rrpc_cdef.h; same rules). */
typedef enum rrpc_dtype {
    RRPC_DTYPE_U8, RRPC_DTYPE_I8, RRPC_DTYPE_U16, RRPC_DTYPE_I16, RRPC_DTYPE_U32,
    RRPC_DTYPE_I32, RRPC_DTYPE_U64, RRPC_DTYPE_I64, RRPC_DTYPE_F16, RRPC_DTYPE_BF16,
    RRPC_DTYPE_F32, RRPC_DTYPE_F64, ...
} rrpc_dtype;
size_t rrpc_dtype_size(int dtype);
const char *rrpc_dtype_name(int dtype);
int rrpc_dtype_from_name(const char *name);

#define RRPC_TENSOR_MAX_DIMS 8
typedef struct rrpc_tensor {
    int dtype;
    int ndim;
    int64_t shape[8];
    int64_t strides[8];
    rrpc_region *region;
    size_t offset;
} rrpc_tensor;
int rrpc_tensor_validate(const rrpc_tensor *t);
uint64_t rrpc_tensor_nbytes(const rrpc_tensor *t);

typedef struct rrpc_tensor_server rrpc_tensor_server;
typedef int (*rrpc_tensor_alloc_fn)(rrpc_conn *conn, const char *name,
                                    const rrpc_tensor *incoming, rrpc_tensor *ret_dest,
                                    void *user);
typedef void (*rrpc_tensor_done_fn)(rrpc_conn *conn, const char *name, const rrpc_tensor *dest,
                                    int status, void *user);
int rrpc_tensor_serve(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc, rrpc_tensor_done_fn done,
                      void *user, rrpc_tensor_server **ret_server);
#define RRPC_TENSOR_MAX_BYTES_DEFAULT ...
typedef struct rrpc_tensor_server_opts {
    uint64_t max_bytes;
    uint64_t flags;
    uint64_t reserved[3];
} rrpc_tensor_server_opts;
#define RRPC_TENSOR_SERVE_SENDER_ORDER ...
uint64_t rrpc_tensor_write_count(const rrpc_tensor *src, const rrpc_tensor *dst);
int rrpc_tensor_is_contiguous(const rrpc_tensor *t);
int rrpc_tensor_serve_with(rrpc_ctx *ctx, rrpc_tensor_alloc_fn alloc, rrpc_tensor_done_fn done,
                           void *user, const rrpc_tensor_server_opts *opts,
                           rrpc_tensor_server **ret_server);
uint64_t rrpc_tensor_server_bytes_held(rrpc_tensor_server *srv);
void rrpc_tensor_server_drop_conn(rrpc_tensor_server *srv, rrpc_conn *conn);
void rrpc_tensor_server_close(rrpc_tensor_server *srv);
typedef struct rrpc_tensor_send_opts {
    int qos_class;
    uint64_t flags;
    uint64_t reserved[4];
} rrpc_tensor_send_opts;
int rrpc_tensor_send_with(rrpc_conn *conn, const char *name, const rrpc_tensor *src,
                          const rrpc_tensor_send_opts *opts, rrpc_op_cb cb, void *user);

typedef struct rrpc_kv_pool rrpc_kv_pool;
int rrpc_kv_pool_reg(rrpc_ctx *ctx, void *base, size_t page_size, size_t page_count,
                     rrpc_kv_pool **ret_pool);
void rrpc_kv_pool_dereg(rrpc_kv_pool *pool);
size_t rrpc_kv_pool_page_size(const rrpc_kv_pool *pool);
size_t rrpc_kv_pool_page_count(const rrpc_kv_pool *pool);
rrpc_region *rrpc_kv_pool_region(rrpc_kv_pool *pool);
typedef struct rrpc_kv_token {
    rrpc_token region;
    uint64_t page_size;
    uint64_t page_count;
} rrpc_kv_token;
int rrpc_kv_pool_token(rrpc_kv_pool *pool, rrpc_conn *conn, rrpc_kv_token *ret_token);
#define RRPC_KV_TOKEN_SIZE 48
void rrpc_kv_token_encode(const rrpc_kv_token *t, uint8_t out[48]);
int rrpc_kv_token_decode(const void *buf, size_t len, rrpc_kv_token *ret_token);
typedef struct rrpc_kv_pair {
    uint64_t src;
    uint64_t dst;
} rrpc_kv_pair;
int rrpc_kv_transfer(rrpc_conn *conn, rrpc_kv_pool *src, const rrpc_kv_token *dst,
                     const rrpc_kv_pair *pairs, size_t n, const rrpc_op_opts *opts,
                     rrpc_op_cb cb, void *user, size_t *ret_writes);

extern "Python" {
    int _rrpc_py_tensor_alloc(rrpc_conn *conn, const char *name, const rrpc_tensor *incoming,
                              rrpc_tensor *ret_dest, void *user);
    void _rrpc_py_tensor_done(rrpc_conn *conn, const char *name, const rrpc_tensor *dest,
                              int status, void *user);
}

/* SPDX-License-Identifier: MIT */
/* The core's side of the loadable modules (transport/module.h): finding and
 * loading them, the table of core services a transport module calls, and
 * the verbs transport's slot in the registry. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "transport/module.h"

/* An object of the core, for dladdr. */
static const char core_anchor;

/* The roce_rpc/ directory beside the object that holds the core
 * (libroce_rpc.so, or the program or extension that links it), as dladdr
 * says. */
static void core_dir(char *buf, size_t len)
{
    Dl_info info;
    buf[0] = '\0';
    if (!dladdr(&core_anchor, &info) || !info.dli_fname)
        return;
    char real[PATH_MAX];
    const char *f = realpath(info.dli_fname, real) ? real : info.dli_fname;
    const char *slash = strrchr(f, '/');
    if (!slash)
        return;
    snprintf(buf, len, "%.*s/roce_rpc", (int)(slash - f), f);
}

void rrpci_module_dir(char *buf, size_t len)
{
    const char *env = getenv("RRPC_MODULE_DIR");
    if (env && *env)
        snprintf(buf, len, "%s", env);
    else
        core_dir(buf, len);
}

struct loaded {
    char file[64];
    void *handle;
};
static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static struct loaded modules[4];

void *rrpci_module_entry(const char *what, const char *file, const char *entry, const char *hint,
                         char *why, size_t whylen)
{
    pthread_mutex_lock(&modules_lock);
    void *handle = NULL;
    size_t free_slot = sizeof(modules) / sizeof(modules[0]);
    for (size_t i = 0; i < sizeof(modules) / sizeof(modules[0]); i++) {
        if (modules[i].handle && strcmp(modules[i].file, file) == 0)
            handle = modules[i].handle;
        else if (!modules[i].handle && free_slot == sizeof(modules) / sizeof(modules[0]))
            free_slot = i;
    }
    char dir[PATH_MAX], path[PATH_MAX + 64];
    rrpci_module_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%s", dir[0] ? dir : ".", file);
#ifdef RRPC_MODULE_INSTALL_DIR
    /* A program that links the core statically (libroce_rpc.a) is not
     * beside the modules: then the install's module directory. */
    const char *env = getenv("RRPC_MODULE_DIR");
    if (!handle && !(env && *env) && access(path, F_OK) != 0 &&
        access(RRPC_MODULE_INSTALL_DIR, F_OK) == 0) {
        snprintf(dir, sizeof(dir), "%s", RRPC_MODULE_INSTALL_DIR);
        snprintf(path, sizeof(path), "%s/%s", dir, file);
    }
#endif
    if (!handle) {
        if (!dir[0]) {
            snprintf(why, whylen, "%s needs the module %s, and where the library is cannot be "
                     "told (dladdr): set RRPC_MODULE_DIR to the directory that holds it",
                     what, file);
            goto fail;
        }
        /* RTLD_LOCAL: its dependencies' symbols stay out of the program's
         * namespace; it calls the core only through the services table. */
        handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char *e = dlerror();
            if (access(path, F_OK) != 0)
                snprintf(why, whylen, "%s needs the module %s, which is not there: install it "
                         "with the library (LIBDIR/roce_rpc/), or set RRPC_MODULE_DIR to the "
                         "directory that holds it",
                         what, path);
            else
                snprintf(why, whylen, "%s needs the module %s: %s; install %s", what, path,
                         e ? e : "no reason given", hint);
            goto fail;
        }
        if (free_slot < sizeof(modules) / sizeof(modules[0])) {
            snprintf(modules[free_slot].file, sizeof(modules[free_slot].file), "%s", file);
            modules[free_slot].handle = handle;
        }
        /* No slot left (never with the modules there are): it stays loaded,
         * and a later call gets the same handle from dlopen. */
    }
    void *sym = dlsym(handle, entry);
    if (!sym) {
        snprintf(why, whylen, "%s: the module %s has no entry %s (a module of another release?): "
                 "install the one that came with this library",
                 what, path, entry);
        goto fail;
    }
    pthread_mutex_unlock(&modules_lock);
    return sym;
fail:
    pthread_mutex_unlock(&modules_lock);
    return NULL;
}

/* ---- the services a transport module calls --------------------------------- */

void rrpci_log_text(rrpc_ctx *ctx, int level, const char *text)
{
    rrpci_log(ctx, level, "%s", text);
}

int rrpci_set_error_text(rrpc_ctx *ctx, int code, const char *text)
{
    return rrpci_set_error(ctx, code, "%s", text);
}

#ifdef RRPC_HAVE_VERBS /* the only transport module */
#define SERVICE(ret, name, params, args) .name = name,
#define SERVICE_V(name, params, args) .name = name,
static const struct rrpci_core_services core_services = {
    .abi = RRPCI_MODULE_ABI,
    .size = sizeof(struct rrpci_core_services),
    RRPCI_CORE_SERVICES(SERVICE, SERVICE_V)
};
#undef SERVICE
#undef SERVICE_V
#endif

/* ---- the verbs transport --------------------------------------------------- */

#ifdef RRPC_HAVE_VERBS
/* Defined when the program links the verbs objects themselves (a test of
 * verbs internals): then they are the transport, and nothing is loaded.
 * Hidden: libroce_rpc.so resolves it (to nothing) when it is linked. */
extern const struct rrpci_transport_ops rrpci_verbs_ops
    __attribute__((weak, visibility("hidden")));

#define STR2(x) #x
#define STR(x) STR2(x)
#define VERBS_MODULE "roce_rpc-verbs-" STR(RRPC_SOVERSION) ".so"

static const struct rrpci_transport_ops *verbs_loaded;
#endif

const struct rrpci_transport_ops *rrpci_verbs_transport(char *why, size_t whylen)
{
#ifdef RRPC_HAVE_VERBS
    if (&rrpci_verbs_ops)
        return &rrpci_verbs_ops;
    const struct rrpci_transport_ops *ops = __atomic_load_n(&verbs_loaded, __ATOMIC_ACQUIRE);
    if (ops)
        return ops;
    void *sym = rrpci_module_entry(
        "rdma://", VERBS_MODULE, RRPCI_TRANSPORT_ENTRY_NAME,
        "librdmacm1 and libibverbs1 (rdma-core), and ibverbs-providers for the device's driver",
        why, whylen);
    if (!sym)
        return NULL;
    rrpci_transport_entry_fn entry;
    memcpy(&entry, &sym, sizeof(entry)); /* dlsym's object pointer is the function's */
    char ewhy[256] = "";
    ops = entry(&core_services, ewhy, sizeof(ewhy));
    if (!ops) {
        snprintf(why, whylen, "rdma://: the verbs module %s refused this library: %s", VERBS_MODULE,
                 ewhy);
        return NULL;
    }
    if (strcmp(ops->scheme, "rdma") != 0) {
        snprintf(why, whylen, "rdma://: the verbs module %s offers \"%s\", not rdma", VERBS_MODULE,
                 ops->scheme);
        return NULL;
    }
    /* Several threads may get here at once: each gets the same ops. */
    __atomic_store_n(&verbs_loaded, ops, __ATOMIC_RELEASE);
    return ops;
#else
    snprintf(why, whylen, "this build of libroce_rpc has no verbs transport; install "
             "libibverbs-dev and librdmacm-dev and rebuild (meson setup -Dverbs=enabled), or use "
             "tcp://");
    return NULL;
#endif
}

/* The verbs ops if the transport is there already (built in or loaded),
 * without loading it. */
const struct rrpci_transport_ops *rrpci_verbs_transport_if_loaded(void)
{
#ifdef RRPC_HAVE_VERBS
    if (&rrpci_verbs_ops)
        return &rrpci_verbs_ops;
    return __atomic_load_n(&verbs_loaded, __ATOMIC_ACQUIRE);
#else
    return NULL;
#endif
}

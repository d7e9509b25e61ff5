/* NVML loaded at run time. See nvml.h. */
#include "monitor/nvml.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

/* The few NVML types used, as in nvml.h (stable ABI). */
typedef int nvml_ret;
typedef void *nvml_dev;
typedef struct { unsigned long long total, free, used; } nvml_memory;
/* nvmlProcessInfo_t since the _v2 calls (pid, used, gpu and compute instance). */
typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } nvml_proc_v2;
/* nvmlProcessInfo_v1_t of the unversioned call. */
typedef struct { unsigned pid; unsigned long long used; } nvml_proc_v1;
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

static void *sym(void *dl, const char *a, const char *b) {
    void *p = dlsym(dl, a);
    return p || !b ? p : dlsym(dl, b);
}

typedef int (*fn_void)(void);
typedef int (*fn_count)(unsigned *);
typedef int (*fn_handle)(unsigned, void **);
typedef int (*fn_name)(void *, char *, unsigned);
typedef int (*fn_mem)(void *, void *);
typedef int (*fn_procs)(void *, unsigned *, void *);

int sl__nvml_open(const char *lib, sl__nvml *h) {
    memset(h, 0, sizeof *h);
    void *dl = dlopen(lib ? lib : SL_NVML_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!dl) return SL_ENOENT;
    fn_void init = (fn_void)sym(dl, "nvmlInit_v2", "nvmlInit");
    h->shutdown = (fn_void)sym(dl, "nvmlShutdown", NULL);
    h->count = (fn_count)sym(dl, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    h->handle = (fn_handle)sym(dl, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    h->name = (fn_name)sym(dl, "nvmlDeviceGetName", NULL);
    h->meminfo = (fn_mem)sym(dl, "nvmlDeviceGetMemoryInfo", NULL);
    h->procs = (fn_procs)sym(dl, "nvmlDeviceGetComputeRunningProcesses_v3",
                             "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!h->procs) {
        h->procs = (fn_procs)sym(dl, "nvmlDeviceGetComputeRunningProcesses", NULL);
        h->procs_v1 = 1;
    }
    if (!init || !h->shutdown || !h->count || !h->handle || !h->meminfo || init() != NVML_SUCCESS) {
        dlclose(dl);
        memset(h, 0, sizeof *h);
        return SL_EUNSUPPORTED;
    }
    h->dl = dl;
    return 0;
}

void sl__nvml_close(sl__nvml *h) {
    if (!h || !h->dl) return;
    h->shutdown();
    dlclose(h->dl);
    memset(h, 0, sizeof *h);
}

static void sample_procs(sl__nvml *h, void *d, sl__gpu *g) {
    g->nprocs = 0;
    if (!h->procs) return;
    union {
        nvml_proc_v2 v2[SL_GPU_MAX_PROCS];
        nvml_proc_v1 v1[SL_GPU_MAX_PROCS];
    } buf;
    unsigned n = SL_GPU_MAX_PROCS;
    nvml_ret r = h->procs(d, &n, &buf);
    /* More than SL_GPU_MAX_PROCS: NVML answers INSUFFICIENT_SIZE and fills
     * nothing; the device totals still stand. */
    if (r != NVML_SUCCESS) return;
    if (n > SL_GPU_MAX_PROCS) n = SL_GPU_MAX_PROCS;
    for (unsigned i = 0; i < n; i++) {
        unsigned pid = h->procs_v1 ? buf.v1[i].pid : buf.v2[i].pid;
        unsigned long long u = h->procs_v1 ? buf.v1[i].used : buf.v2[i].used;
        g->procs[i].pid = pid;
        g->procs[i].used = u == NVML_VALUE_NOT_AVAILABLE ? UINT64_MAX : u;
    }
    g->nprocs = n;
}

int sl__nvml_sample(sl__nvml *h, sl__gpu *gpus, unsigned max, unsigned *n) {
    *n = 0;
    unsigned count;
    if (h->count(&count) != NVML_SUCCESS) return SL_EIO;
    for (unsigned i = 0; i < count && *n < max; i++) {
        void *d;
        nvml_memory m;
        if (h->handle(i, &d) != NVML_SUCCESS || h->meminfo(d, &m) != NVML_SUCCESS) continue;
        sl__gpu *g = &gpus[(*n)++];
        memset(g, 0, sizeof *g);
        g->index = i;
        g->total = m.total;
        g->used = m.used;
        g->free = m.free;
        if (!h->name || h->name(d, g->name, sizeof g->name) != NVML_SUCCESS) strcpy(g->name, "GPU");
        g->name[sizeof g->name - 1] = 0;
        sample_procs(h, d, g);
    }
    return 0;
}

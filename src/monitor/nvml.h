/*
 * GPU memory through NVML, loaded at run time with dlopen: a machine without
 * the NVIDIA driver runs `top` all the same, with no GPU section. Private.
 */
#ifndef SL_MONITOR_NVML_H
#define SL_MONITOR_NVML_H

#include <stdint.h>

#define SL_NVML_LIB "libnvidia-ml.so.1"
#define SL_GPU_MAX_PROCS 64

typedef struct sl__gpu_proc {
    unsigned pid;
    uint64_t used;   /* bytes; UINT64_MAX when NVML cannot tell (MIG, containers) */
} sl__gpu_proc;

typedef struct sl__gpu {
    unsigned index;
    char name[96];
    uint64_t total, used, free;
    unsigned nprocs;
    sl__gpu_proc procs[SL_GPU_MAX_PROCS];
} sl__gpu;

/* A loaded NVML: the library handle and its entry points. */
typedef struct sl__nvml {
    void *dl;
    int (*shutdown)(void);
    int (*count)(unsigned *);
    int (*handle)(unsigned, void **);
    int (*name)(void *, char *, unsigned);
    int (*meminfo)(void *, void *);
    int (*procs)(void *, unsigned *, void *); /* _v3 or _v2 (v2 layout), else v1 */
    int procs_v1;
} sl__nvml;

/*
 * Load lib (NULL: SL_NVML_LIB) and initialise NVML into the caller's h. On
 * success h must be closed with sl__nvml_close. SL_ENOENT when the library cannot be
 * loaded, SL_EUNSUPPORTED when it lacks a needed symbol or nvmlInit
 * fails (no driver, no GPU); both mean "no GPU section", not an error.
 */
int sl__nvml_open(const char *lib, sl__nvml *h);
void sl__nvml_close(sl__nvml *h);

/* Fill up to max devices; *n gets how many. 0 or SL_EIO. */
int sl__nvml_sample(sl__nvml *h, sl__gpu *gpus, unsigned max, unsigned *n);

#endif

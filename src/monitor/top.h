/*
 * `sluice top`: one snapshot of a machine's memory as a training job sees
 * it — system memory, the memory cgroup and its limit, PSI, a process tree
 * (PSS, RSS, USS per process), GPU memory, kernel OOM kills, the
 * governors of sluice budgets in it (live limit, ceiling, last moves) — and the
 * warning when usage nears the effective limit. A sl__top keeps the state
 * between samples (the slope). Private: cli/top.c drives it through
 * sluice_monitor.h (monitor.c).
 */
#ifndef SL_MONITOR_TOP_H
#define SL_MONITOR_TOP_H

#include <stdint.h>
#include <stdio.h>

#include "base/mem.h"
#include "base/sys/cgroup.h"
#include "base/sys/procfs.h"
#include "base/sys/psi.h"
#include "cache/cache.h"
#include "monitor/govstatus.h"
#include "monitor/nvml.h"
#include "monitor/oomlog.h"
#include "monitor/proctree.h"
#include "sluice_monitor.h"

#define SL_TOP_MAX_GPUS 16
#define SL_TOP_MAX_OOMS 8
#define SL_TOP_MAX_GOVS 8
#define SL_TOP_MAX_LOADERS 8
#define SL_TOP_MAX_CACHES 8

/* The options are the public header's (sluice_monitor.h). */
typedef sl_top_opts sl__top_opts;

void sl__top_opts_init(sl__top_opts *o);

/* A process tree's totals. */
typedef struct sl__top_tree {
    int root;
    char name[64];
    size_t nprocs, unreadable;
    uint64_t rss, pss, uss, swap_pss;
} sl__top_tree;

typedef struct sl__top {
    sl__top_opts o;
    sl__budget budget;         /* the tool's own memory */
    sl__proctab procs;
    double time;               /* Unix time of the sample */
    sl__meminfo mem;
    int has_cgroup;
    sl__cgroup cg;
    int has_psi;
    sl__psi psi;
    char psi_source[640];
    /* The tree shown: PID mode the tree of o.pid, machine mode the largest. */
    int root_found;
    sl__top_tree tree;
    size_t *members;           /* indexes into procs.v, by PSS, largest first */
    size_t nmembers, members_cap;
    sl__top_tree *trees;       /* machine mode: every tree, by PSS */
    size_t ntrees, trees_cap;
    /* GPU: has_nvml 0 when the library or a GPU is absent. */
    int has_nvml;
    sl__nvml nvml;
    sl__gpu gpus[SL_TOP_MAX_GPUS];
    unsigned ngpus;
    uint64_t gpu_used;
    /* Kernel log: kmsg_readable 0 when /dev/kmsg cannot be read. */
    int kmsg_readable;
    long oom_seen;
    sl__oom_event ooms[SL_TOP_MAX_OOMS];
    /* Governed budgets of the tree's processes (PID mode) or of every
     * process (machine mode), from their status files. */
    sl__gov_status govs[SL_TOP_MAX_GOVS];
    size_t ngovs;
    /* Tuned loaders of the same processes, from their status files. */
    sl__loader_status loaders[SL_TOP_MAX_LOADERS];
    size_t nloaders;
    /* The effective limit: the smaller of MemTotal and the cgroup limit,
     * and the usage measured against it. */
    uint64_t limit, usage;
    int limit_is_cgroup;
    double used_pct;
    int has_slope;
    double slope;              /* bytes/s, smoothed over samples */
    double eta_s;              /* seconds to the limit at the slope; < 0: not rising */
    int warning;
    /* previous sample */
    int have_prev;
    double prev_time;
    uint64_t prev_usage;
    /* Node caches (issue 12): every sample cache segment in /dev/shm. */
    sl__cache_seg caches[SL_TOP_MAX_CACHES];
    size_t ncaches;
} sl__top;

/* 0, or SL_ENOMEM / SL_EINVAL. sl__top_fini releases everything. */
int sl__top_init(sl__top *t, const sl__top_opts *o);
void sl__top_fini(sl__top *t);

/* Take one sample. 0; SL_ENOENT when procroot cannot be read; SL_EBUDGET
 * when the process table outgrows the tool's budget. A PID that is gone
 * is not an error: root_found is 0. */
int sl__top_sample(sl__top *t);

/* One JSON object on one line (no newline). */
void sl__top_json(const sl__top *t, FILE *f);
/* The human view; rows bounds the process rows shown. */
void sl__top_text(const sl__top *t, FILE *f, int rows);
/* Its lines for one tuned loader: workers, slots, the wait the GPU decode
 * held up (with decode=cpu named from SL_TOP_GPU_HELD of the pass on, as
 * Python's GPU_HELD_HINT), the last decisions. */
#define SL_TOP_GPU_HELD 0.10
void sl__top_loader_text(const sl__loader_status *l, FILE *f);

#endif

/*
 * The monitor's one public header: what `sluice top` (cli/top.c) uses of
 * src/monitor/, the readers behind it (process trees, cgroup, PSI, NVML,
 * the kernel log, governors' status files) kept behind an opaque handle.
 *
 * The monitor is a static library of the CLI, not a part of libsluice: it
 * is not in libsluice.so or .a, nor installed, and has no ABI to keep
 * (docs/abi.md): whatever calls it is built with it. Everything else in
 * src/monitor/ is private. Codes are sluice.h's SL_E* values.
 */
#ifndef SLUICE_MONITOR_H
#define SLUICE_MONITOR_H

#include <stddef.h>
#include <stdio.h>

typedef struct sl_top_opts {
    int pid;              /* root of the tree to show; 0: the machine's largest trees */
    double warn_pct;      /* warn above this percent of the effective limit (90) */
    const char *procroot; /* "/proc" */
    const char *nvml_lib; /* NULL: libnvidia-ml.so.1 */
    const char *kmsg;     /* "/dev/kmsg" */
    unsigned max_trees;   /* machine mode: trees listed (8) */
    const char *status_dir; /* where governors publish (base/status.h); NULL: as they do */
} sl_top_opts;

/* The defaults above. */
void sl_top_opts_init(sl_top_opts *o);

/* One snapshot of a machine's memory as a training job sees it, and the
 * state kept between snapshots (the slope). */
typedef struct sl_top sl_top;

/* 0 and *out (sl_top_destroy frees it), or SL_ENOMEM / SL_EINVAL (a
 * warn_pct outside (0, 100], no procroot). */
int sl_top_create(const sl_top_opts *o, sl_top **out);
void sl_top_destroy(sl_top *t);

/* Take one sample. 0; SL_ENOENT when procroot cannot be read; SL_EBUDGET
 * when the process table outgrows the tool's budget. A PID that is gone is
 * not an error: sl_top_root_found says 0. */
int sl_top_sample(sl_top *t);
/* PID mode: 1 when the last sample found o.pid. */
int sl_top_root_found(const sl_top *t);

/* The last sample as one JSON object on one line (no newline). */
void sl_top_json(const sl_top *t, FILE *f);
/* The human view; rows bounds the process rows shown. */
void sl_top_text(const sl_top *t, FILE *f, int rows);

/* Read the JSON lines of log (sl_top_json's, one a line; lines that do not
 * parse are skipped and counted in *skipped) and draw the memory timeline
 * as SVG into out (*points samples). 0; SL_EIO for the log; SL_EEMPTY when
 * no line holds a sample; SL_EBUDGET, SL_ENOMEM. */
int sl_top_plot(FILE *log, FILE *out, size_t *points, size_t *skipped);

#endif

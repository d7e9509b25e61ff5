/*
 * The governors and loaders of other processes, as `sluice top` shows
 * them: read from the status files they publish (base/status.h): a
 * governor's live limit, ceiling, use, last readings and moves; a tuned
 * loader's workers, slots, throughput and the tuner's last decisions
 * (pipeline/tuner.c). Private.
 */
#ifndef SL_MONITOR_GOVSTATUS_H
#define SL_MONITOR_GOVSTATUS_H

#include <stddef.h>
#include <stdint.h>

#define SL_GOV_STATUS_MOVES 8

typedef struct sl__gov_move {
    double t;                /* seconds since its governor started */
    uint64_t old_limit, new_limit;
    char reason[112];
} sl__gov_move;

typedef struct sl__gov_status {
    int pid;
    unsigned id;             /* the governor's number in its process */
    uint64_t start_time;     /* its process's start (clock ticks since boot), as it read it */
    double time;             /* Unix time the file was written */
    double t;                /* seconds since the governor started, then */
    uint64_t limit, ceiling, used, fixed;
    uint64_t container_limit, container_usage, mem_available;
    double psi_some10;
    uint64_t moves;          /* every move it made */
    unsigned nmoves;         /* the last ones, oldest first */
    sl__gov_move move[SL_GOV_STATUS_MOVES];
} sl__gov_status;

/* Parse one status file's text. 0, or SL_EPARSE (not a status file of a
 * version this reader knows). */
int sl__gov_status_parse(const char *text, size_t len, sl__gov_status *out);

#define SL_LOADER_STATUS_EVENTS 8

typedef struct sl__loader_event {
    double t;                /* seconds since the loader's first batch was asked for */
    uint64_t batches;        /* delivered then */
    char what[8];            /* "workers" or "slots" */
    char why[24];            /* the rule (sl_tune_why_name) */
    unsigned from, to;
    char reason[168];
} sl__loader_event;

typedef struct sl__loader_status {
    int pid;
    unsigned id;             /* the status's number in its process */
    uint64_t start_time;
    double time;             /* Unix time the file was written */
    double t;                /* seconds since the loader's first batch was asked for, then */
    char source[160];
    uint64_t samples;
    double samples_per_s, wait_fraction;
    double wait_gpu_fraction; /* of the pass, the wait the GPU decode held up (0 in older files) */
    unsigned workers, workers_active, slots, slots_target;
    double workers_active_mean;
    char decode[8];
    uint64_t gpu_samples, cpu_samples, decisions;
    unsigned nevents;        /* the last ones, oldest first */
    sl__loader_event event[SL_LOADER_STATUS_EVENTS];
} sl__loader_status;

/* Parse one loader status file's text. 0, or SL_EPARSE. */
int sl__loader_status_parse(const char *text, size_t len, sl__loader_status *out);

/*
 * The status files in dir of live writers: a file counts while its writer
 * holds its write lock (base/status.h), which the kernel drops when the
 * writer dies; no /proc is read, so a writer in another PID namespace
 * counts and a stale file of a killed one, whatever process has its pid
 * now, does not. Only regular files of this user count (of any user for
 * root): a file of another user cannot speak for this user's processes.
 * want(ctx, pid) picks the processes by the pid the file names (NULL:
 * all). Up to max into out, ordered by pid and number; returns how many.
 */
size_t sl__gov_status_scan(const char *dir, int (*want)(const void *ctx, int pid), const void *ctx,
                           sl__gov_status *out, size_t max);
/* The same for the loaders' status files. */
size_t sl__loader_status_scan(const char *dir, int (*want)(const void *ctx, int pid), const void *ctx,
                              sl__loader_status *out, size_t max);

#endif

/*
 * procfs readers (for `sluice top` and the governor): smaps_rollup, meminfo,
 * /proc/PID/stat.
 * Each parser takes text (so tests feed sample files); the readers only
 * fetch the text. All sizes are bytes. Private.
 */
#ifndef SL_SYS_PROCFS_H
#define SL_SYS_PROCFS_H

#include <stddef.h>
#include <stdint.h>

/* One process's memory, from /proc/PID/smaps_rollup. */
typedef struct sl__smaps {
    uint64_t rss, pss, pss_anon, pss_file, pss_shmem;
    uint64_t shared_clean, shared_dirty, private_clean, private_dirty;
    uint64_t swap, swap_pss;
} sl__smaps;

/* USS: pages only this process maps (Private_Clean + Private_Dirty). */
static inline uint64_t sl__smaps_uss(const sl__smaps *m) { return m->private_clean + m->private_dirty; }
static inline uint64_t sl__smaps_shared(const sl__smaps *m) { return m->shared_clean + m->shared_dirty; }

/* Parse smaps_rollup (or a full smaps: fields are summed). 0, or SL_EPARSE
 * when neither an Rss nor a Pss line is present. */
int sl__smaps_parse(const char *text, size_t len, sl__smaps *out);

typedef struct sl__meminfo {
    uint64_t total, free, available, swap_total, swap_free, shmem;
} sl__meminfo;

/* Parse /proc/meminfo. 0, or SL_EPARSE without MemTotal. When
 * MemAvailable is absent (kernels before 3.14) it is estimated as
 * MemFree + Cached + Buffers. */
int sl__meminfo_parse(const char *text, size_t len, sl__meminfo *out);

/* Parse /proc/PID/stat: ppid, comm (NUL-terminated, cut to commlen) and
 * start time in clock ticks since boot. The comm may hold spaces and
 * parentheses: the last ')' ends it. 0 or SL_EPARSE. */
int sl__procstat_parse(const char *text, size_t len, int *pid, int *ppid, char *comm,
                       size_t commlen, uint64_t *starttime);

/* Read up to cap-1 bytes of a (proc) file into buf, NUL-terminated; *len
 * gets the byte count. 0, SL_ENOENT (no such file / process gone), SL_EIO
 * (permission denied or read error). */
int sl__read_text(const char *path, char *buf, size_t cap, size_t *len);

/* The smaps_rollup of pid under procroot ("/proc"). Same codes as
 * sl__read_text, plus SL_EPARSE. */
int sl__smaps_read(const char *procroot, int pid, sl__smaps *out);

#endif

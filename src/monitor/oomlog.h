/* Kernel-log OOM-kill events: parsed from /dev/kmsg records or
 * dmesg-style text. Private. */
#ifndef SL_MONITOR_OOMLOG_H
#define SL_MONITOR_OOMLOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl__oom_event {
    double uptime_s;      /* seconds since boot; < 0 when the line had no time */
    double wall;          /* Unix time, 0 when unknown */
    int pid;
    char name[64];
    uint64_t total_vm, anon_rss, file_rss, shmem_rss; /* bytes */
    char constraint[40];  /* CONSTRAINT_NONE, CONSTRAINT_MEMCG, ... ("" when not seen) */
    char memcg[128];      /* task_memcg= of the oom-kill line */
    int memcg_oom;        /* "Memory cgroup out of memory" rather than the global killer */
} sl__oom_event;

enum { SL_OOM_LINE_NONE = 0, SL_OOM_LINE_KILLED = 1, SL_OOM_LINE_CONSTRAINT = 2 };

/*
 * Parse one kernel log line: a /dev/kmsg record ("6,123,4567890,-;text")
 * or dmesg text ("[ 4567.890000] text", or without a time). Fills ev from
 * "Out of memory: Killed process PID (NAME) total-vm:NkB, anon-rss:NkB,
 * file-rss:NkB, shmem-rss:NkB ..." (also "Memory cgroup out of memory:")
 * or from "oom-kill:constraint=C,...,task_memcg=M,task=NAME,pid=PID,...".
 * Returns SL_OOM_LINE_*.
 */
int sl__oom_parse_line(const char *line, sl__oom_event *ev);

/*
 * Scan text (many lines) for kills. An oom-kill constraint line and the
 * "Killed process" line that follows it for the same pid become one event.
 * Keeps the last max events in out (oldest first); returns the number of
 * kills seen (may exceed max).
 */
size_t sl__oom_scan(const char *text, size_t len, sl__oom_event *out, size_t max);

/*
 * Read the kernel ring buffer from /dev/kmsg (non-blocking) and scan it.
 * Returns the number of kills seen, or SL_EIO when it cannot be read (not
 * permitted, or no such device). Times are turned into Unix time.
 */
long sl__oom_read_kmsg(const char *dev, sl__oom_event *out, size_t max);

#endif

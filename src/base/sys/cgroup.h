/*
 * Memory cgroup readers (v2 memory.max/current/events/pressure, v1
 * memory.limit_in_bytes/usage_in_bytes/failcnt/oom_control/stat), a
 * process's cgroup folder for any controller (base/cpus.c reads the
 * cpuset's and the CPU quota on its path; cache/shm.c the memory room on
 * its path), and the walk up such a path. The parsers take text and the
 * readers take a folder, so tests point them at sample files. Private.
 */
#ifndef SL_SYS_CGROUP_H
#define SL_SYS_CGROUP_H

#include <stddef.h>
#include <stdint.h>

#include "base/sys/psi.h"

/* v1 writes "no limit" as a page-rounded 2^63-1; anything from 2^60 on is no limit. */
#define SL_CGROUP_NO_LIMIT ((uint64_t)1 << 60)

typedef struct sl__cgroup {
    int version;          /* 1 or 2 */
    char dir[512];        /* the folder read */
    int has_limit;        /* a limit is set somewhere on the path */
    uint64_t limit;       /* smallest limit on the path (v2) or hierarchical limit (v1) */
    uint64_t current;     /* memory.current, memory.usage_in_bytes */
    uint64_t events_high, events_max, events_oom, events_oom_kill; /* v2 memory.events */
    uint64_t failcnt;     /* v1 memory.failcnt */
    int has_oom_kill;     /* events_oom_kill is known (v2, or v1 oom_control on kernels >= 4.13) */
    int has_pressure;     /* memory.pressure was readable */
    sl__psi pressure;
} sl__cgroup;

/* "max" -> no limit; a number -> its value. 0 or SL_EPARSE. */
int sl__cgroup_parse_limit(const char *text, int *has_limit, uint64_t *limit);

/* Parse "key value" lines (memory.events, memory.stat, oom_control): the
 * value of key, or SL_ENOENT when absent. */
int sl__cgroup_parse_kv(const char *text, size_t len, const char *key, uint64_t *val);

/* Parse /proc/PID/cgroup: the path in the v1 hierarchy of controller ctl
 * ("memory", "cpuset") and the v2 path. Returns a mask: 1 when v1 was
 * found, 2 when v2 was found. */
int sl__cgroup_paths_parse(const char *text, size_t len, const char *ctl, char *v1, size_t v1len, char *v2,
                           size_t v2len);

/* Parse /proc/PID/mountinfo: mount point and mount root of the v1
 * hierarchy of controller ctl and of cgroup2. Returns the same mask as
 * above. */
int sl__cgroup_mounts_parse(const char *text, size_t len, const char *ctl, char *v1mnt, char *v1root,
                            char *v2mnt, char *v2root, size_t cap);

/* Read the cgroup folder dir. For v2, parents up to and including stop
 * (the mount point; NULL: dir only) are read for a smaller memory.max. 0,
 * or SL_ENOENT when the folder lacks the controller's files. */
int sl__cgroup_read_v2(const char *dir, const char *stop, sl__cgroup *out);
int sl__cgroup_read_v1(const char *dir, sl__cgroup *out);

/* Find and read the memory cgroup of process pid (0: self) through
 * procroot ("/proc"). v2 is used when its hierarchy has the memory
 * controller, else v1. 0, or SL_ENOENT when none is found. */
int sl__cgroup_of(const char *procroot, int pid, sl__cgroup *out);

/* The folder of process pid's (0: self) cgroup for controller ctl, found
 * as sl__cgroup_of finds the memory one: v2 where its hierarchy has ctl
 * (*version 2), else ctl's v1 hierarchy (*version 1); and that
 * hierarchy's mount point in mnt (NULL: not wanted), both cap bytes. 0,
 * or SL_ENOENT. */
int sl__cgroup_dir(const char *procroot, int pid, const char *ctl, int *version, char *dir, char *mnt,
                   size_t cap);

/* dir cut to its parent folder: 1, or 0 (dir unchanged) where dir is the
 * mount point mnt or not under it. A limit binds from every folder of
 * the walk: from dir up to mnt, both included. */
int sl__cgroup_up(char *dir, const char *mnt);

/* The least CPUs any CPU quota allows from folder dir up to the mount
 * point mnt (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us),
 * rounded up; 0 where none is set. */
uint32_t sl__cgroup_cpu_quota(const char *dir, const char *mnt, int version);

#endif

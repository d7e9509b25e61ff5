/* The CPUs a rank should use. See cpus.h. */
#define _GNU_SOURCE
#include "base/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/sys/cgroup.h"
#include "base/sys/procfs.h"

uint32_t sl__cpu_share(uint32_t cpus, uint32_t quota, uint32_t local_ranks) {
    if (!cpus) cpus = 1;
    if (quota && quota < cpus) cpus = quota;
    if (!local_ranks) local_ranks = 1;
    uint32_t share = cpus / local_ranks;
    return share ? share : 1;
}

/* This process's affinity mask's CPUs; *inherited set when its parent's
 * mask is the same set (the launcher's, as `taskset -c 0-15 torchrun`
 * gives every rank), clear when the parent's differs (a rank bound by
 * itself or by a wrapper the launcher ran) or cannot be read. */
static uint32_t affinity_cpus(int *inherited) {
    cpu_set_t set, parent;
    *inherited = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        *inherited = sched_getaffinity(getppid(), sizeof parent, &parent) == 0 && CPU_EQUAL(&set, &parent);
        return (uint32_t)CPU_COUNT(&set);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* CPUs the CPU quotas on this process's cgroup path allow (its own
 * folder's and its parents'), rounded up; 0 when unlimited or unknown. */
static uint32_t quota_cpus(void) {
    char dir[1024], mnt[1024];
    int version;
    if (sl__cgroup_dir("/proc", 0, "cpu", &version, dir, mnt, sizeof dir)) return 0;
    return sl__cgroup_cpu_quota(dir, mnt, version);
}

uint32_t sl__local_ranks(void) {
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    char *end = NULL;
    long ranks = lws ? strtol(lws, &end, 10) : 1;
    if (!lws || end == lws || *end || ranks < 1 || ranks > 65536) ranks = 1;
    return (uint32_t)ranks;
}

void sl__cpu_plan(uint32_t mask, uint32_t all, uint32_t quota, uint32_t ranks, uint32_t *cores, uint32_t *node) {
    if (!mask) mask = 1;
    if (all < mask) all = mask;
    if (!ranks) ranks = 1;
    if (mask == all) { /* the ranks run anywhere: they share it */
        *cores = sl__cpu_share(all, quota, ranks);
        *node = ranks > 1 ? sl__cpu_share(all, quota, 1) : 0;
        return;
    }
    uint64_t k = ((uint64_t)ranks * mask + all / 2) / all; /* the ranks with a mask like this one */
    k = k < 1 ? 1 : k > ranks ? ranks : k;
    uint32_t share = mask / (uint32_t)k;
    if (quota && quota / ranks < share) share = quota / ranks;
    *cores = share ? share : 1;
    *node = 0;
}

/* The CPUs of a list such as "0-15,32-47\n" (a cgroup's cpuset); 0 when
 * not such a list. */
static uint32_t list_cpus(const char *p) {
    uint32_t count = 0;
    while (*p && *p != '\n') {
        char *end;
        unsigned long a = strtoul(p, &end, 10), b = a;
        if (end == p) return 0;
        if (*end == '-') {
            p = end + 1;
            b = strtoul(p, &end, 10);
            if (end == p || b < a) return 0;
        }
        count += (uint32_t)(b - a + 1);
        if (*end != ',' && *end && *end != '\n') return 0;
        p = *end == ',' ? end + 1 : end;
    }
    return count;
}

/* The CPUs of this process's cgroup's cpuset (cpuset.cpus.effective in v2,
 * cpuset.effective_cpus in v1); 0 when unreadable. */
static uint32_t cgroup_cpus(void) {
    char dir[1024], path[1100], buf[4096];
    size_t len;
    int version;
    if (sl__cgroup_dir("/proc", 0, "cpuset", &version, dir, NULL, sizeof dir)) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, version == 2 ? "cpuset.cpus.effective" : "cpuset.effective_cpus");
    return sl__read_text(path, buf, sizeof buf, &len) ? 0 : list_cpus(buf);
}

/* The CPUs the job may run on: its cgroup's cpuset, else the online CPUs. */
static uint32_t job_cpus(void) {
    uint32_t n = cgroup_cpus();
    if (!n) {
        long on = sysconf(_SC_NPROCESSORS_ONLN);
        n = on > 0 ? (uint32_t)on : 0;
    }
    return n;
}

void sl__rank_cpus(uint32_t ranks, uint32_t *cores, uint32_t *node) {
    int inherited;
    uint32_t mask = affinity_cpus(&inherited), all = job_cpus();
    if (inherited && mask < all) all = mask; /* the launcher's mask: every rank runs anywhere in it */
    sl__cpu_plan(mask, all, quota_cpus(), ranks ? ranks : sl__local_ranks(), cores, node);
}

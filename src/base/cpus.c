/* The CPUs a rank should use. See cpus.h. */
#define _GNU_SOURCE
#include "base/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

uint32_t sl__cpu_share(uint32_t cpus, uint32_t quota, uint32_t local_ranks) {
    if (!cpus) cpus = 1;
    if (quota && quota < cpus) cpus = quota;
    if (!local_ranks) local_ranks = 1;
    uint32_t share = cpus / local_ranks;
    return share ? share : 1;
}

static uint32_t affinity_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* CPUs the cgroup quota allows, rounded up; 0 when unlimited or unknown. */
static uint32_t quota_cpus(void) {
    long long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r"); /* v2: "max 100000" or "200000 100000" */
    if (f) {
        char q[32];
        if (fscanf(f, "%31s %lld", q, &period) == 2 && q[0] != 'm') quota = atoll(q);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) { /* v1 */
        if (fscanf(f, "%lld", &quota) != 1) quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lld", &period) != 1) period = 0;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0) return 0;
    long long n = (quota + period - 1) / period;
    return n > 0xFFFFFFFLL ? 0 : (uint32_t)n;
}

uint32_t sl__local_ranks(void) {
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    char *end = NULL;
    long ranks = lws ? strtol(lws, &end, 10) : 1;
    if (!lws || end == lws || *end || ranks < 1 || ranks > 65536) ranks = 1;
    return (uint32_t)ranks;
}

uint32_t sl__node_cpus(void) { return sl__cpu_share(affinity_cpus(), quota_cpus(), 1); }

uint32_t sl__local_share_cpus(void) { return sl__cpu_share(affinity_cpus(), quota_cpus(), sl__local_ranks()); }

/* How many CPUs this process should use: its share of the node's cores
 * among the local ranks of a job. Private. */
#ifndef SL_CPUS_H
#define SL_CPUS_H

#include <stdint.h>

/* This rank's share of the CPUs it may run on: the CPUs of its affinity
 * mask (capped by a cgroup CPU quota, cpu.max or cfs_quota_us, rounded
 * up, where one is set), divided by the node's local ranks (env
 * LOCAL_WORLD_SIZE, as torchrun sets it; 1 when unset or not a number),
 * at least 1. Cannot fail. */
uint32_t sl__local_share_cpus(void);

/* The node's CPUs for this process, undivided: the affinity mask capped
 * by a cgroup CPU quota (what the node's local ranks share), at least 1. */
uint32_t sl__node_cpus(void);

/* The node's local ranks: env LOCAL_WORLD_SIZE (torchrun's), 1 when unset
 * or not a number from 1 to 65536. */
uint32_t sl__local_ranks(void);

/* The arithmetic alone: cpus (0: unknown, taken as 1) capped by quota (0:
 * none), divided by local_ranks (0 taken as 1), at least 1. */
uint32_t sl__cpu_share(uint32_t cpus, uint32_t quota, uint32_t local_ranks);

#endif

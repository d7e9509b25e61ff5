/* How many CPUs this process should use: its share of the node's cores
 * among the local ranks of a job. Private. */
#ifndef SL_CPUS_H
#define SL_CPUS_H

#include <stdint.h>

/* The node's local ranks: env LOCAL_WORLD_SIZE (torchrun's), 1 when unset
 * or not a number from 1 to 65536. */
uint32_t sl__local_ranks(void);

/* The arithmetic alone: cpus (0: unknown, taken as 1) capped by quota (0:
 * none), divided by local_ranks (0 taken as 1), at least 1. */
uint32_t sl__cpu_share(uint32_t cpus, uint32_t quota, uint32_t local_ranks);

/* A rank's CPUs among its job's local ranks: *cores, its share, and
 * *node, the CPUs the local ranks split by demand (0: none; base/node.h).
 * mask: its affinity mask's CPUs; all: the CPUs the job may run on (the
 * cgroup's cpuset, else the online CPUs); quota: a cgroup CPU quota (0:
 * none); ranks: the local ranks (0 taken as 1).
 *  - A mask as large as all (the ranks run anywhere): all, capped by the
 *    quota, divided by the ranks; split by demand with more than one.
 *  - A smaller mask is the rank's own (taskset, numactl, a launcher's
 *    binding): about ranks * mask / all ranks have one like it (rounded,
 *    1 to ranks), which divide it; nothing is split by demand, as the
 *    other ranks' CPUs are not this one's. A quota caps the share at
 *    quota / ranks.
 * At least 1 each where set. */
void sl__cpu_plan(uint32_t mask, uint32_t all, uint32_t quota, uint32_t ranks, uint32_t *cores, uint32_t *node);

/* sl__cpu_plan for this process: its affinity mask, its cgroup's cpuset
 * (cpuset.cpus.effective, v2 or v1; else the online CPUs), the least CPU
 * quota on its cgroup's path, and ranks local ranks (0: sl__local_ranks()).
 * A mask its parent has too is the launcher's, which every rank inherited
 * (`taskset -c 0-15 torchrun ...`): the ranks run anywhere in it, so it
 * stands for the job's CPUs. */
void sl__rank_cpus(uint32_t ranks, uint32_t *cores, uint32_t *node);

#endif

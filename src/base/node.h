/*
 * What the loaders of one job on one node share without a server: the
 * job's key, and the node's CPUs split by demand (issue 20, item 3).
 * Private.
 *
 * The CPU share. The tuned loaders of a job's ranks on a node (torchrun's
 * LOCAL_WORLD_SIZE > 1) each publish their demand, in CPUs, in one page of
 * /dev/shm named after the job (sluice-cpus-<uid>-<hash of the job key>):
 * a slot per loader, claimed by a write lock on a byte of the file past
 * its data (F_OFD_SETLK), which the kernel drops when the process dies,
 * however it dies. A slot counts while it holds a demand; a loader that
 * joins, and each one about once a second, clears the demand of every
 * slot whose lock nobody holds (asked with F_OFD_GETLK, never /proc). The
 * file goes with its last loader: opening
 * and closing take a lock on another byte (F_OFD_SETLKW, moments long), so
 * a loader that opens the name while the last one unlinks it sees the
 * link count 0 and opens again. Files of another user, links and other
 * kinds of files are never opened. A demand is clamped to the node's CPUs
 * when read: whatever a slot holds only weighs a split.
 *
 * Threads: a share's slot is written by its loader's tuner (under the
 * engine's lock), the demands read likewise; dead slots are cleared by
 * one thread at a time outside any lock (sl__cpushare_refresh). The
 * demands are atomics in the shared page.
 */
#ifndef SL_BASE_NODE_H
#define SL_BASE_NODE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The job's key on this node: env TORCHELASTIC_RUN_ID, else
 * MASTER_ADDR:MASTER_PORT, else SLUICE_CACHE_JOB, else the parent pid (the
 * launcher), with the user's id. Shared by the node cache's segment name
 * and the CPU share. */
void sl__node_job_key(char *out, size_t len);

#define SL_CPUSHARE_SLOTS 64

typedef struct sl__cpushare {
    int fd;
    void *map;               /* the page; NULL: not shared (a zeroed struct is not shared) */
    uint32_t slot;           /* ours */
    uint32_t cpus;           /* the node's: what the demands split */
} sl__cpushare;

static inline int sl__cpushare_on(const sl__cpushare *s) { return s->map != NULL; }

/* Join the job's share of the node's cpus: 0, or SL_ESYS (then nothing
 * is shared: the caller runs on its own share). */
int sl__cpushare_open(sl__cpushare *s, uint32_t cpus);
/* Leave it; the last loader out removes the file. */
void sl__cpushare_close(sl__cpushare *s);
/* In a child of fork(): let the inherited page and descriptor go, touch
 * nothing else (the parent's slot stays the parent's). */
void sl__cpushare_forget(sl__cpushare *s);
/* Our demand, in CPUs (0: none yet: not counted). */
void sl__cpushare_set(sl__cpushare *s, double cpus);
/* The slots' demands, summed (ours included), and how many have one. */
double sl__cpushare_total(const sl__cpushare *s, uint32_t *loaders);
/* Clear the demands of slots whose loaders are gone (a system call a slot
 * with a demand). */
void sl__cpushare_refresh(sl__cpushare *s);

#endif

/*
 * The process table and process trees for `sluice top`: every process's
 * parent and name from /proc/PID/stat, its memory from smaps_rollup, and
 * the trees they form. Memory comes from the caller's budget. Private.
 */
#ifndef SL_MONITOR_PROCTREE_H
#define SL_MONITOR_PROCTREE_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "base/sys/procfs.h"

typedef struct sl__proc {
    int pid, ppid;
    int root;           /* the tree this process belongs to (machine mode), 0 for kernel threads */
    int status;         /* smaps: 0 read, SL_EIO unreadable (another user's), SL_ENOENT gone, 1 not read */
    char name[64];
    sl__smaps m;
} sl__proc;

/* Processes, sorted by pid. v is budgeted under SL_MEM_OTHER. */
typedef struct sl__proctab {
    sl__budget *b;
    sl__proc *v;
    size_t n, cap;
} sl__proctab;

/* Read every /proc/PID/stat under procroot into t (emptied first).
 * 0, SL_ENOENT (no procroot), SL_EBUDGET / SL_ENOMEM. */
int sl__proctab_scan(sl__proctab *t, const char *procroot);
void sl__proctab_free(sl__proctab *t);
/* Index of pid in t, or -1. */
long sl__proctab_find(const sl__proctab *t, int pid);

/*
 * Mark the members of the tree rooted at pid: sets member[i] = 1 for pid
 * and every descendant (member has t->n entries, zeroed by the caller).
 * Returns the member count (0 when pid is not in the table).
 */
size_t sl__proctab_tree(const sl__proctab *t, int pid, unsigned char *member);

/*
 * Machine mode: set each process's root to its ancestor just below init
 * (pid 1; a child of pid 0 that is not kthreadd is its own root). Kernel
 * threads get root 0.
 */
void sl__proctab_roots(sl__proctab *t);

/* Read smaps_rollup for process i (status set as above). */
void sl__proctab_read_mem(sl__proctab *t, size_t i, const char *procroot);

#endif

/*
 * The governor: moves a root budget's live limit to keep the process
 * tree's memory cgroup (and the machine) under its limit minus a margin.
 * A thread owned by the shared budget samples every period; the decision
 * itself is a pure function of the readings (sl__gov_decide), tested on
 * its own.
 *
 * Policy (for room = what the cgroup and the machine still allow, read as
 * cgroup limit - margin - working set, and MemAvailable - margin):
 *  - the limit the budget may hold is used + room, clamped to
 *    [fixed, ceiling]: we may grow by what is left, and must shrink by
 *    what is over (our accounted bytes bound our resident bytes, so
 *    shrinking used by x frees at most x; repeated each period until the
 *    cgroup is under);
 *  - down at once; an oom/max event (v2 memory.events, v1 failcnt or
 *    oom_kill) or PSI "some" avg10 at or over psi_high sheds an eighth of
 *    the limit more (at most once a second for PSI, a lagging average);
 *  - up slowly: only when the room exceeds the limit by a hysteresis band
 *    (2% of the ceiling, at least 16 MiB) for grow_after, then by at most
 *    a sixteenth of the ceiling a period.
 */
#ifndef SL_GOVERNOR_H
#define SL_GOVERNOR_H

#include <stdint.h>

#include "base/mem.h"
#include "sluice.h"

/* One sample of the world. */
typedef struct sl__gov_reading {
    int has_cgroup_limit;
    uint64_t cg_limit;       /* the cgroup's effective limit */
    uint64_t cg_ws;          /* its working set: usage - inactive file cache */
    uint64_t cg_events;      /* oom + oom_kill + max events (v2) or failcnt + oom_kill (v1), cumulative */
    int has_psi;
    double psi_some10;       /* the cgroup's memory.pressure, else /proc/pressure/memory */
    int has_available;
    uint64_t mem_available;
} sl__gov_reading;

/* What the decision remembers between samples. */
typedef struct sl__gov_state {
    uint64_t margin;         /* resolved margin (0: from the first limit seen) */
    uint64_t last_events;
    int have_events;
    uint64_t room_since_ns;  /* room above the band since then (0: none) */
    uint64_t last_psi_ns;    /* last PSI-driven shrink */
} sl__gov_state;

/* The budget's numbers the decision needs. */
typedef struct sl__gov_budget {
    uint64_t limit, ceiling, fixed, used;
} sl__gov_budget;

/* The limit to set now (== b->limit: no move), with the reason. */
uint64_t sl__gov_decide(const sl_governor_opts *o, sl__gov_state *st, const sl__gov_budget *b,
                        const sl__gov_reading *r, uint64_t now_ns, char *reason, size_t rlen);

/* Read the world: the cgroup of dir (NULL: this process's own), PSI,
 * MemAvailable. Never fails: what cannot be read is marked absent. */
void sl__gov_read(const char *dir, sl__gov_reading *r);

typedef struct sl__governor sl__governor;
/* The governor thread's stack, counted in its budget's fixed part. */
#define SL_GOVERNOR_STACK ((size_t)256 << 10)

/* Start the governor thread on root b. 0, SL_ENOMEM, SL_ESYS. */
int sl__governor_start(sl__budget *b, const sl_governor_opts *o, sl__governor **out);
/* Stop and free. NULL is ignored. */
void sl__governor_stop(sl__governor *g);
/* In a child of fork() only: free this process's copy of g. Its thread,
 * its lock and its status file are the parent's: nothing is joined,
 * destroyed or removed. NULL is ignored. */
void sl__governor_forget(sl__governor *g);
/* Its readings and moves into st. */
void sl__governor_stats(sl__governor *g, sl_budget_info *st);
/* Events from first on into out, an array of max events elem_size bytes
 * apart (the caller's sl_budget_event); returns how many. */
size_t sl__governor_events(sl__governor *g, uint64_t first, void *out, size_t max, size_t elem_size);

#endif

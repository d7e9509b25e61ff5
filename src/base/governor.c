/* The governor. See governor.h for the policy. */
#include "base/governor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/abi.h"
#include "base/status.h"
#include "base/sys/cgroup.h"
#include "base/sys/procfs.h"
#include "base/sys/psi.h"
#include "base/thread.h"
#include "base/util.h"

#define MIB ((uint64_t)1 << 20)
#define EVENTS 256 /* the ring keeps the last this many moves */
#define PUBLISHED 8 /* moves in the status file */
#define PUBLISH_NS 1000000000ull /* the status file is rewritten at least this often */

void sl_governor_opts_init_sized(sl_governor_opts *o, size_t struct_size) {
    sl_governor_opts d;
    memset(&d, 0, sizeof d);
    d.period_ms = 100;
    d.grow_after_ms = 1000;
    d.psi_high = 10.0;
    sl__abi_out(o, struct_size, &d, sizeof d);
}

/* ---- the decision ------------------------------------------------------------ */

static uint64_t sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* used + (allowed - held), as a limit; allowed/held are the cgroup's (or
 * the machine's) bounds. Saturates at 0. */
static uint64_t with_room(uint64_t used, uint64_t allowed, uint64_t held) {
    return allowed >= held ? used + (allowed - held) : sub0(used, held - allowed);
}

uint64_t sl__gov_decide(const sl_governor_opts *o, sl__gov_state *st, const sl__gov_budget *b,
                        const sl__gov_reading *r, uint64_t now_ns, char *reason, size_t rlen) {
    char x[32], y[32], z[32];
    if (!st->margin)
        st->margin = o->margin ? o->margin : SL_MAX(64 * MIB, (r->has_cgroup_limit ? r->cg_limit : r->mem_available) / 20);
    uint64_t want = b->ceiling;
    const char *why = "room";
    if (r->has_cgroup_limit) {
        want = with_room(b->used, sub0(r->cg_limit, st->margin), r->cg_ws);
        sl__msg(reason, rlen, "cgroup working set %s of limit %s (margin %s)", sl__fmt_bytes(r->cg_ws, x, sizeof x),
                sl__fmt_bytes(r->cg_limit, y, sizeof y), sl__fmt_bytes(st->margin, z, sizeof z));
        why = NULL;
    }
    if (r->has_available) {
        uint64_t sys = b->used + sub0(r->mem_available, st->margin);
        if (sys < want) {
            want = sys;
            sl__msg(reason, rlen, "MemAvailable %s (margin %s)", sl__fmt_bytes(r->mem_available, x, sizeof x),
                    sl__fmt_bytes(st->margin, y, sizeof y));
            why = NULL;
        }
    }
    if (why) sl__msg(reason, rlen, "%s", why);
    int event = st->have_events && r->cg_events > st->last_events;
    st->last_events = r->cg_events;
    st->have_events = 1;
    uint64_t shed = b->limit - b->limit / 8;
    if (event && shed < want) {
        want = shed;
        sl__msg(reason, rlen, "cgroup hit its limit (oom/max events), working set %s", sl__fmt_bytes(r->cg_ws, x, sizeof x));
    }
    if (r->has_psi && r->psi_some10 >= o->psi_high && shed < want &&
        (!st->last_psi_ns || now_ns - st->last_psi_ns >= 1000000000ull)) {
        want = shed;
        st->last_psi_ns = now_ns;
        sl__msg(reason, rlen, "memory pressure: PSI some avg10 %.1f%%", r->psi_some10);
    }
    want = SL_MAX(SL_MIN(want, b->ceiling), b->fixed);
    if (want < b->limit) { /* down at once */
        st->room_since_ns = 0;
        return want;
    }
    uint64_t band = SL_MAX(16 * MIB, b->ceiling / 50);
    if (want <= b->limit || (want < b->ceiling && want <= b->limit + band)) { /* within the band */
        st->room_since_ns = 0;
        return b->limit;
    }
    if (!st->room_since_ns) st->room_since_ns = now_ns;
    if (now_ns - st->room_since_ns < (uint64_t)o->grow_after_ms * 1000000u) return b->limit;
    uint64_t step = SL_MAX(16 * MIB, b->ceiling / 16);
    uint64_t up = SL_MIN(want, b->limit + step);
    char w[32];
    sl__msg(reason, rlen, "room for %s held %.1f s: up by at most %s", sl__fmt_bytes(want, w, sizeof w),
            (double)(now_ns - st->room_since_ns) / 1e9, sl__fmt_bytes(step, x, sizeof x));
    return up;
}

/* ---- readings ------------------------------------------------------------------ */

static uint64_t inactive_file(const char *dir, int version) {
    char path[600], buf[8192];
    size_t len;
    uint64_t v = 0;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    if (sl__read_text(path, buf, sizeof buf, &len) == 0)
        sl__cgroup_parse_kv(buf, len, version == 1 ? "total_inactive_file" : "inactive_file", &v);
    return v;
}

static void read_cgroup(const char *dir, sl__gov_reading *r, sl__psi *psi, int *has_psi) {
    sl__cgroup cg;
    int rc;
    if (dir) {
        char probe[600];
        snprintf(probe, sizeof probe, "%s/memory.current", dir);
        FILE *f = fopen(probe, "r");
        if (f) fclose(f);
        rc = f ? sl__cgroup_read_v2(dir, NULL, &cg) : sl__cgroup_read_v1(dir, &cg);
    } else {
        rc = sl__cgroup_of("/proc", 0, &cg);
    }
    if (rc) return;
    r->has_cgroup_limit = cg.has_limit && cg.limit < SL_CGROUP_NO_LIMIT;
    r->cg_limit = cg.limit;
    r->cg_ws = sub0(cg.current, inactive_file(cg.dir, cg.version));
    r->cg_events = cg.version == 2 ? cg.events_max + cg.events_oom + cg.events_oom_kill
                                   : cg.failcnt + cg.events_oom_kill;
    if (cg.has_pressure) {
        *psi = cg.pressure;
        *has_psi = 1;
    }
}

void sl__gov_read(const char *dir, sl__gov_reading *r) {
    memset(r, 0, sizeof *r);
    sl__psi psi;
    int has_psi = 0;
    read_cgroup(dir, r, &psi, &has_psi);
    char buf[4096];
    size_t len;
    if (!has_psi && sl__read_text("/proc/pressure/memory", buf, sizeof buf, &len) == 0 &&
        sl__psi_parse(buf, len, &psi) == 0)
        has_psi = 1;
    if (has_psi && psi.some.present) {
        r->has_psi = 1;
        r->psi_some10 = psi.some.avg10;
    }
    sl__meminfo mi;
    if (sl__read_text("/proc/meminfo", buf, sizeof buf, &len) == 0 && sl__meminfo_parse(buf, len, &mi) == 0) {
        r->has_available = 1;
        r->mem_available = mi.available;
    }
}

/* ---- the governor ------------------------------------------------------------------ */

struct sl__governor {
    sl__budget *b;
    sl_governor_opts o;
    char dir[512];          /* o.cgroup_dir, copied */
    pthread_t thread;
    pthread_mutex_t mu;     /* stop, the last reading, the events */
    pthread_cond_t cv;
    int stop;
    uint64_t t0_ns;
    sl__gov_state st;       /* the decision's memory (the thread's only, after start) */
    sl__gov_reading last;
    uint64_t moves;
    sl_budget_event ev[EVENTS];
    uint64_t nev;           /* events ever made; the ring holds the last EVENTS */
    /* the status file for `sluice top` (the thread's only, after start) */
    sl__status status;
    uint64_t published_ns, published_nev, published_limit, published_ceiling;
};

static void log_move(sl__governor *g, uint64_t now, uint64_t old, uint64_t nu, const sl__gov_reading *r,
                     const char *reason) {
    pthread_mutex_lock(&g->mu);
    sl_budget_event *e = &g->ev[g->nev % EVENTS];
    e->t = (double)(now - g->t0_ns) / 1e9;
    e->old_limit = old;
    e->new_limit = nu;
    e->container_limit = r->has_cgroup_limit ? r->cg_limit : 0;
    e->container_usage = r->cg_ws;
    e->mem_available = r->mem_available;
    snprintf(e->reason, sizeof e->reason, "%s", reason);
    g->nev++;
    g->moves++;
    pthread_mutex_unlock(&g->mu);
}

/* ---- the status file ------------------------------------------------------------ */

/* The budget's limit, ceiling and use, the last readings and moves. */
static void publish(sl__governor *g, uint64_t now) {
    char buf[12288];
    sl__stext t = {buf, 0, sizeof buf};
    typedef unsigned long long ull;
    sl__budget *b = g->b;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    sl__stext_put(&t, "{\"version\":%d,\"pid\":%ld,\"start_time\":%llu,\"id\":%u,\"time\":%.3f,\"t\":%.3f,",
        SL_STATUS_VERSION, g->status.pid, (ull)g->status.start_time, g->status.id,
        (double)wall.tv_sec + (double)wall.tv_nsec / 1e9, (double)(now - g->t0_ns) / 1e9);
    g->published_limit = atomic_load(&b->limit);
    g->published_ceiling = atomic_load(&b->ceiling);
    sl__stext_put(&t, "\"limit_bytes\":%llu,\"ceiling_bytes\":%llu,\"used_bytes\":%llu,\"fixed_bytes\":%llu,",
        (ull)g->published_limit, (ull)g->published_ceiling, (ull)atomic_load(&b->used), (ull)atomic_load(&b->fixed));
    pthread_mutex_lock(&g->mu);
    const sl__gov_reading *r = &g->last;
    sl__stext_put(&t, "\"container_limit_bytes\":%llu,\"container_usage_bytes\":%llu,\"mem_available_bytes\":%llu,"
        "\"psi_some_avg10\":%.2f,\"moves\":%llu,\"events\":[",
        (ull)(r->has_cgroup_limit ? r->cg_limit : 0), (ull)r->cg_ws, (ull)r->mem_available, r->psi_some10,
        (ull)g->moves);
    uint64_t from = g->nev > PUBLISHED ? g->nev - PUBLISHED : 0;
    for (uint64_t i = from; i < g->nev; i++) {
        const sl_budget_event *e = &g->ev[i % EVENTS];
        sl__stext_put(&t, "%s{\"t\":%.3f,\"old_limit_bytes\":%llu,\"new_limit_bytes\":%llu,\"reason\":",
                      i > from ? "," : "", e->t, (ull)e->old_limit, (ull)e->new_limit);
        sl__stext_str(&t, e->reason);
        sl__stext_put(&t, "}");
    }
    g->published_nev = g->nev;
    pthread_mutex_unlock(&g->mu);
    sl__stext_put(&t, "]}\n");
    sl__status_write(&g->status, buf, t.len);
    g->published_ns = now;
}

/* ---- the thread ------------------------------------------------------------------ */

static void step(sl__governor *g) {
    sl__gov_reading r;
    sl__gov_read(g->dir[0] ? g->dir : NULL, &r);
    uint64_t now = sl__now_ns();
    /* "fixed" to the governor: the lowest it may go, the fixed parts plus
     * one sample's room (mem.h, sl__budget_set_room) */
    sl__gov_budget gb = {atomic_load(&g->b->limit), atomic_load(&g->b->ceiling), sl__budget_floor(g->b),
                         atomic_load(&g->b->used)};
    char reason[112] = "";
    uint64_t want = sl__gov_decide(&g->o, &g->st, &gb, &r, now, reason, sizeof reason);
    pthread_mutex_lock(&g->mu);
    g->last = r;
    pthread_mutex_unlock(&g->mu);
    if (want != gb.limit && sl__budget_set_limit(g->b, want, 0, NULL, 0) == 0)
        log_move(g, now, gb.limit, atomic_load(&g->b->limit), &r, reason);
    /* at once for a move (the user's too), else once a second for the use */
    if (g->nev != g->published_nev || atomic_load(&g->b->limit) != g->published_limit ||
        atomic_load(&g->b->ceiling) != g->published_ceiling || now - g->published_ns >= PUBLISH_NS)
        publish(g, now);
}

static void *governor_main(void *arg) {
    sl__governor *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        uint64_t until = sl__now_ns() + (uint64_t)g->o.period_ms * 1000000u;
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        while (!g->stop && sl__now_ns() < until) pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (g->stop) break;
        pthread_mutex_unlock(&g->mu);
        step(g);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int sl__governor_start(sl__budget *b, const sl_governor_opts *o, sl__governor **out) {
    sl__governor *g = calloc(1, sizeof *g);
    if (!g) return SL_ENOMEM;
    g->b = b;
    if (o) g->o = *o;
    else sl_governor_opts_init(&g->o);
    if (!g->o.period_ms) g->o.period_ms = 100;
    if (g->o.cgroup_dir) snprintf(g->dir, sizeof g->dir, "%s", g->o.cgroup_dir);
    g->o.cgroup_dir = NULL;
    g->t0_ns = sl__now_ns();
    sl__status_open(&g->status); /* no folder: nothing published, the governor runs all the same */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    step(g); /* the first move before anyone sizes against the ceiling */
    if (sl__thread_start(&g->thread, governor_main, g, SL_GOVERNOR_STACK, "sl-governor")) {
        sl__status_close(&g->status);
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return SL_ESYS;
    }
    *out = g;
    return 0;
}

void sl__governor_stop(sl__governor *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    sl__status_close(&g->status);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void sl__governor_forget(sl__governor *g) { free(g); }

void sl__governor_stats(sl__governor *g, sl_budget_info *st) {
    pthread_mutex_lock(&g->mu);
    st->governor = 1;
    st->governor_moves = g->moves;
    st->container_limit = g->last.has_cgroup_limit ? g->last.cg_limit : 0;
    st->container_usage = g->last.cg_ws;
    st->mem_available = g->last.mem_available;
    st->psi_some_avg10 = g->last.psi_some10;
    pthread_mutex_unlock(&g->mu);
}

size_t sl__governor_events(sl__governor *g, uint64_t first, void *out, size_t max, size_t elem_size) {
    pthread_mutex_lock(&g->mu);
    uint64_t oldest = g->nev > EVENTS ? g->nev - EVENTS : 0;
    if (first < oldest) first = oldest;
    size_t n = 0;
    for (uint64_t i = first; i < g->nev && n < max; i++, n++)
        sl__abi_out((char *)out + n * elem_size, elem_size, &g->ev[i % EVENTS], sizeof g->ev[0]);
    pthread_mutex_unlock(&g->mu);
    return n;
}

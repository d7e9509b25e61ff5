/* `sluice top` snapshots. See top.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include "monitor/top.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "base/util.h"
#include "monitor/json.h"
#include "sluice.h"

/* The tool's own memory: a process table of 100k processes fits. */
#define SL_TOP_BUDGET ((uint64_t)64 << 20)

void sl__top_opts_init(sl__top_opts *o) {
    memset(o, 0, sizeof *o);
    o->warn_pct = 90;
    o->procroot = "/proc";
    o->kmsg = "/dev/kmsg";
    o->max_trees = 8;
}

int sl__top_init(sl__top *t, const sl__top_opts *o) {
    memset(t, 0, sizeof *t);
    t->o = *o;
    if (o->warn_pct <= 0 || o->warn_pct > 100 || !o->procroot) return SL_EINVAL;
    int rc = sl__budget_init(&t->budget, SL_TOP_BUDGET);
    if (rc) return rc;
    t->procs.b = &t->budget;
    t->has_nvml = sl__nvml_open(o->nvml_lib, &t->nvml) == 0;
    return 0;
}

void sl__top_fini(sl__top *t) {
    if (t->has_nvml) sl__nvml_close(&t->nvml);
    sl__proctab_free(&t->procs);
    sl__free(&t->budget, t->members);
    sl__free(&t->budget, t->trees);
    sl__budget_fini(&t->budget);
    memset(t, 0, sizeof *t);
}

/* Make room for n entries of size sz in *v (cap in *cap), growing by doubling. */
static int reserve(sl__budget *b, void **v, size_t *cap, size_t n, size_t sz) {
    if (n <= *cap) return 0;
    if (n < *cap * 2) n = *cap * 2;
    uint64_t bytes;
    if (sl__mul(n, sz, &bytes) || bytes > SIZE_MAX) return SL_EOVERFLOW;
    void *p = sl__realloc(b, *v, (size_t)bytes, SL_MEM_OTHER);
    if (!p) return SL_EBUDGET;
    *v = p;
    *cap = n;
    return 0;
}

static int by_pss_desc(const void *a, const void *b, void *ctx) {
    const sl__proctab *pt = ctx;
    uint64_t x = pt->v[*(const size_t *)a].m.pss, y = pt->v[*(const size_t *)b].m.pss;
    return (x < y) - (x > y);
}
static int tree_by_pss_desc(const void *a, const void *b) {
    uint64_t x = ((const sl__top_tree *)a)->pss, y = ((const sl__top_tree *)b)->pss;
    return (x < y) - (x > y);
}

static void add_proc(sl__top_tree *tr, const sl__proc *p) {
    tr->nprocs++;
    if (p->status == SL_EIO) tr->unreadable++;
    tr->rss += p->m.rss;
    tr->pss += p->m.pss;
    tr->uss += sl__smaps_uss(&p->m);
    tr->swap_pss += p->m.swap_pss;
}

/* PID mode: members = the tree of o.pid, with memory read. */
static int sample_tree(sl__top *t) {
    sl__proctab *pt = &t->procs;
    unsigned char *member = sl__calloc(&t->budget, pt->n ? pt->n : 1, 1, SL_MEM_OTHER);
    if (!member) return SL_EBUDGET;
    size_t n = sl__proctab_tree(pt, t->o.pid, member);
    int rc = reserve(&t->budget, (void **)&t->members, &t->members_cap, n ? n : 1, sizeof(size_t));
    if (rc) {
        sl__free(&t->budget, member);
        return rc;
    }
    memset(&t->tree, 0, sizeof t->tree);
    t->nmembers = 0;
    for (size_t i = 0; i < pt->n; i++) {
        if (!member[i]) continue;
        sl__proctab_read_mem(pt, i, t->o.procroot);
        if (pt->v[i].status == SL_ENOENT) continue; /* exited since the scan */
        t->members[t->nmembers++] = i;
        add_proc(&t->tree, &pt->v[i]);
    }
    sl__free(&t->budget, member);
    t->root_found = t->nmembers > 0;
    long r = sl__proctab_find(pt, t->o.pid);
    t->tree.root = t->o.pid;
    if (r >= 0) memcpy(t->tree.name, pt->v[r].name, sizeof t->tree.name);
    return 0;
}

/* Machine mode: every process's memory, trees below init, the largest shown. */
static int sample_machine(sl__top *t) {
    sl__proctab *pt = &t->procs;
    sl__proctab_roots(pt);
    t->ntrees = 0;
    for (size_t i = 0; i < pt->n; i++) {
        sl__proc *p = &pt->v[i];
        if (!p->root) continue;
        sl__proctab_read_mem(pt, i, t->o.procroot);
        if (p->status == SL_ENOENT) continue;
        /* Trees are few; a linear search keeps this simple. */
        size_t k = 0;
        while (k < t->ntrees && t->trees[k].root != p->root) k++;
        if (k == t->ntrees) {
            int rc = reserve(&t->budget, (void **)&t->trees, &t->trees_cap, t->ntrees + 1, sizeof *t->trees);
            if (rc) return rc;
            memset(&t->trees[k], 0, sizeof t->trees[k]);
            t->trees[k].root = p->root;
            long r = sl__proctab_find(pt, p->root);
            if (r >= 0) memcpy(t->trees[k].name, pt->v[r].name, sizeof t->trees[k].name);
            t->ntrees++;
        }
        add_proc(&t->trees[k], p);
    }
    qsort(t->trees, t->ntrees, sizeof *t->trees, tree_by_pss_desc);
    /* Members of the largest tree, for the process rows. */
    memset(&t->tree, 0, sizeof t->tree);
    t->nmembers = 0;
    t->root_found = t->ntrees > 0;
    if (!t->ntrees) return 0;
    t->tree = t->trees[0];
    int rc = reserve(&t->budget, (void **)&t->members, &t->members_cap, t->tree.nprocs ? t->tree.nprocs : 1, sizeof(size_t));
    if (rc) return rc;
    for (size_t i = 0; i < pt->n && t->nmembers < t->tree.nprocs; i++)
        if (pt->v[i].root == t->tree.root && pt->v[i].status != SL_ENOENT) t->members[t->nmembers++] = i;
    return 0;
}

static int in_members(const sl__top *t, unsigned pid) {
    for (size_t i = 0; i < t->nmembers; i++)
        if ((unsigned)t->procs.v[t->members[i]].pid == pid) return 1;
    return 0;
}

static int want_member(const void *ctx, int pid) { return in_members(ctx, (unsigned)pid); }

/* The status files of governed budgets and tuned loaders: of the tree's
 * processes (PID mode), of every live process (machine mode). */
static void sample_governors(sl__top *t) {
    char dir[512];
    const char *d = t->o.status_dir;
    if (!d && sl__status_dir(dir, sizeof dir) == 0) d = dir;
    int (*want)(const void *, int) = t->o.pid > 0 ? want_member : NULL;
    t->ngovs = d ? sl__gov_status_scan(d, want, t, t->govs, SL_TOP_MAX_GOVS) : 0;
    t->nloaders = d ? sl__loader_status_scan(d, want, t, t->loaders, SL_TOP_MAX_LOADERS) : 0;
}

static void sample_limit(sl__top *t) {
    t->limit = t->mem.total;
    t->usage = t->mem.total - t->mem.available;
    t->limit_is_cgroup = 0;
    if (t->has_cgroup && t->cg.has_limit && t->cg.limit < t->mem.total) {
        t->limit = t->cg.limit;
        t->usage = t->cg.current;
        t->limit_is_cgroup = 1;
    }
    t->used_pct = t->limit ? 100.0 * (double)t->usage / (double)t->limit : 0;
    /* Slope of usage, smoothed (half weight on the newest interval), and
     * the time left at that slope. */
    if (t->have_prev && t->time > t->prev_time) {
        double s = ((double)t->usage - (double)t->prev_usage) / (t->time - t->prev_time);
        t->slope = t->has_slope ? 0.5 * t->slope + 0.5 * s : s;
        t->has_slope = 1;
    }
    t->eta_s = -1;
    if (t->has_slope && t->slope > 0 && t->usage < t->limit) t->eta_s = (double)(t->limit - t->usage) / t->slope;
    else if (t->usage >= t->limit) t->eta_s = 0;
    t->warning = t->used_pct >= t->o.warn_pct;
    t->have_prev = 1;
    t->prev_time = t->time;
    t->prev_usage = t->usage;
}

int sl__top_sample(sl__top *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    t->time = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    char path[512], buf[8192];
    size_t len;
    snprintf(path, sizeof path, "%s/meminfo", t->o.procroot);
    if (sl__read_text(path, buf, sizeof buf, &len) || sl__meminfo_parse(buf, len, &t->mem))
        memset(&t->mem, 0, sizeof t->mem);
    /* The cgroup of the watched process (its limit is the one that kills it). */
    t->has_cgroup = sl__cgroup_of(t->o.procroot, t->o.pid, &t->cg) == 0;
    if (t->has_cgroup && t->cg.has_pressure) {
        t->has_psi = 1;
        t->psi = t->cg.pressure;
        snprintf(t->psi_source, sizeof t->psi_source, "%s/memory.pressure", t->cg.dir);
    } else {
        snprintf(path, sizeof path, "%s/pressure/memory", t->o.procroot);
        t->has_psi = sl__read_text(path, buf, sizeof buf, &len) == 0 && sl__psi_parse(buf, len, &t->psi) == 0;
        snprintf(t->psi_source, sizeof t->psi_source, "%s", path);
    }
    int rc = sl__proctab_scan(&t->procs, t->o.procroot);
    if (rc) return rc;
    rc = t->o.pid > 0 ? sample_tree(t) : sample_machine(t);
    if (rc) return rc;
    if (t->nmembers > 1) qsort_r(t->members, t->nmembers, sizeof *t->members, by_pss_desc, &t->procs);
    t->ngpus = 0;
    t->gpu_used = 0;
    if (t->has_nvml && sl__nvml_sample(&t->nvml, t->gpus, SL_TOP_MAX_GPUS, &t->ngpus) == 0)
        for (unsigned i = 0; i < t->ngpus; i++) t->gpu_used += t->gpus[i].used;
    long seen = t->o.kmsg ? sl__oom_read_kmsg(t->o.kmsg, t->ooms, SL_TOP_MAX_OOMS) : SL_EIO;
    t->kmsg_readable = seen >= 0;
    t->oom_seen = seen >= 0 ? seen : 0;
    sample_governors(t);
    sample_limit(t);
    t->ncaches = sl__cache_shm_list(t->caches, SL_TOP_MAX_CACHES);
    return 0;
}

/* ---- output ------------------------------------------------------------ */

static void json_tree(const sl__top_tree *tr, FILE *f) {
    fprintf(f, "\"root_pid\":%d,\"name\":", tr->root);
    sl__json_str(f, tr->name);
    fprintf(f, ",\"nprocs\":%zu,\"unreadable\":%zu,\"pss_bytes\":%llu,\"rss_bytes\":%llu,\"uss_bytes\":%llu,\"swap_pss_bytes\":%llu",
            tr->nprocs, tr->unreadable, (unsigned long long)tr->pss, (unsigned long long)tr->rss,
            (unsigned long long)tr->uss, (unsigned long long)tr->swap_pss);
}

typedef unsigned long long ull;

/* The node caches: ,"node_caches":[...] */
static void json_caches(const sl__top *t, FILE *f) {
    fputs(",\"node_caches\":[", f);
    for (size_t i = 0; i < t->ncaches; i++) {
        const sl__cache_seg *c = &t->caches[i];
        fprintf(f, "%s{\"name\":", i ? "," : "");
        sl__json_str(f, c->name);
        fprintf(f, ",\"segment_bytes\":%llu,\"resident_bytes\":%llu,\"capacity_bytes\":%llu,\"cached_bytes\":%llu"
                   ",\"entries\":%llu,\"hits\":%llu,\"misses\":%llu,\"evictions\":%llu,\"storage_bytes_read\":%llu,"
                   "\"pids\":[",
                (ull)c->segment_bytes, (ull)c->resident_bytes, (ull)c->capacity, (ull)c->bytes, (ull)c->entries,
                (ull)c->hits, (ull)c->misses, (ull)c->evictions, (ull)c->storage_bytes_read);
        for (uint32_t j = 0; j < c->processes; j++) fprintf(f, "%s%d", j ? "," : "", c->pids[j]);
        fputs("]}", f);
    }
    fputc(']', f);
}

static void json_system(const sl__top *t, FILE *f) {
    fprintf(f, ",\"system\":{\"total_bytes\":%llu,\"available_bytes\":%llu,\"free_bytes\":%llu,\"swap_total_bytes\":%llu,\"swap_free_bytes\":%llu}",
            (ull)t->mem.total, (ull)t->mem.available, (ull)t->mem.free, (ull)t->mem.swap_total, (ull)t->mem.swap_free);
}

static void json_cgroup(const sl__top *t, FILE *f) {
    fputs(",\"cgroup\":", f);
    if (!t->has_cgroup) {
        fputs("null", f);
        return;
    }
    const sl__cgroup *c = &t->cg;
    fprintf(f, "{\"version\":%d,\"path\":", c->version);
    sl__json_str(f, c->dir);
    fputs(",\"limit_bytes\":", f);
    if (c->has_limit) fprintf(f, "%llu", (ull)c->limit);
    else fputs("null", f);
    fprintf(f, ",\"current_bytes\":%llu", (ull)c->current);
    if (c->version == 2)
        fprintf(f, ",\"events\":{\"high\":%llu,\"max\":%llu,\"oom\":%llu,\"oom_kill\":%llu}", (ull)c->events_high,
                (ull)c->events_max, (ull)c->events_oom, (ull)c->events_oom_kill);
    else fprintf(f, ",\"failcnt\":%llu", (ull)c->failcnt);
    fputs(",\"oom_kill\":", f);
    if (c->has_oom_kill) fprintf(f, "%llu", (ull)c->events_oom_kill);
    else fputs("null", f);
    fputc('}', f);
}

static void json_psi(const sl__top *t, FILE *f) {
    fputs(",\"psi\":", f);
    if (!t->has_psi) {
        fputs("null", f);
        return;
    }
    fputs("{\"source\":", f);
    sl__json_str(f, t->psi_source);
    fprintf(f, ",\"some_avg10\":%.2f,\"some_avg60\":%.2f,\"some_total_us\":%llu", t->psi.some.avg10,
            t->psi.some.avg60, (ull)t->psi.some.total_us);
    if (t->psi.full.present)
        fprintf(f, ",\"full_avg10\":%.2f,\"full_avg60\":%.2f,\"full_total_us\":%llu", t->psi.full.avg10,
                t->psi.full.avg60, (ull)t->psi.full.total_us);
    fputc('}', f);
}

static void json_limit(const sl__top *t, FILE *f) {
    fprintf(f, ",\"limit\":{\"bytes\":%llu,\"source\":\"%s\",\"usage_bytes\":%llu,\"used_pct\":%.2f,\"warn_pct\":%.1f,\"warning\":%s,\"slope_bytes_per_s\":",
            (ull)t->limit, t->limit_is_cgroup ? "cgroup" : "memory", (ull)t->usage, t->used_pct, t->o.warn_pct,
            t->warning ? "true" : "false");
    if (t->has_slope) fprintf(f, "%.0f", t->slope);
    else fputs("null", f);
    fputs(",\"eta_s\":", f);
    if (t->eta_s >= 0) fprintf(f, "%.1f", t->eta_s);
    else fputs("null", f);
    fputc('}', f);
}

/* The tree shown and its processes; machine mode, the largest trees too. */
static void json_trees(const sl__top *t, FILE *f) {
    fputs(",\"tree\":", f);
    if (t->root_found) {
        fputc('{', f);
        json_tree(&t->tree, f);
        fputs(",\"processes\":[", f);
        for (size_t i = 0; i < t->nmembers; i++) {
            const sl__proc *p = &t->procs.v[t->members[i]];
            fprintf(f, "%s{\"pid\":%d,\"ppid\":%d,\"name\":", i ? "," : "", p->pid, p->ppid);
            sl__json_str(f, p->name);
            fprintf(f, ",\"readable\":%s,\"rss_bytes\":%llu,\"pss_bytes\":%llu,\"uss_bytes\":%llu,\"shared_bytes\":%llu,\"private_bytes\":%llu,\"swap_bytes\":%llu}",
                    p->status == 0 ? "true" : "false", (ull)p->m.rss, (ull)p->m.pss, (ull)sl__smaps_uss(&p->m),
                    (ull)sl__smaps_shared(&p->m), (ull)sl__smaps_uss(&p->m), (ull)p->m.swap);
        }
        fputs("]}", f);
    } else {
        fputs("null", f);
    }
    if (t->o.pid > 0) return;
    fputs(",\"trees\":[", f);
    size_t n = t->ntrees < t->o.max_trees ? t->ntrees : t->o.max_trees;
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",{" : "{", f);
        json_tree(&t->trees[i], f);
        fputc('}', f);
    }
    fputc(']', f);
}

static void json_gpus(const sl__top *t, FILE *f) {
    if (!t->has_nvml) return;
    fprintf(f, ",\"gpu_used_bytes\":%llu,\"gpus\":[", (ull)t->gpu_used);
    for (unsigned i = 0; i < t->ngpus; i++) {
        const sl__gpu *g = &t->gpus[i];
        fprintf(f, "%s{\"index\":%u,\"name\":", i ? "," : "", g->index);
        sl__json_str(f, g->name);
        fprintf(f, ",\"total_bytes\":%llu,\"used_bytes\":%llu,\"free_bytes\":%llu,\"processes\":[", (ull)g->total,
                (ull)g->used, (ull)g->free);
        for (unsigned j = 0; j < g->nprocs; j++) {
            fprintf(f, "%s{\"pid\":%u,\"used_bytes\":", j ? "," : "", g->procs[j].pid);
            if (g->procs[j].used == UINT64_MAX) fputs("null", f);
            else fprintf(f, "%llu", (ull)g->procs[j].used);
            fprintf(f, ",\"in_tree\":%s}", in_members(t, g->procs[j].pid) ? "true" : "false");
        }
        fputs("]}", f);
    }
    fputc(']', f);
}

/* The governed budgets seen, each with its last moves. */
static void json_governors(const sl__top *t, FILE *f) {
    fputs(",\"governors\":[", f);
    for (size_t i = 0; i < t->ngovs; i++) {
        const sl__gov_status *g = &t->govs[i];
        fprintf(f, "%s{\"pid\":%d,\"id\":%u,\"age_s\":%.1f,\"limit_bytes\":%llu,\"ceiling_bytes\":%llu,"
                "\"used_bytes\":%llu,\"fixed_bytes\":%llu,\"container_limit_bytes\":%llu,"
                "\"container_usage_bytes\":%llu,\"mem_available_bytes\":%llu,\"psi_some_avg10\":%.2f,\"moves\":%llu,"
                "\"last_moves\":[",
                i ? "," : "", g->pid, g->id, t->time - g->time, (ull)g->limit, (ull)g->ceiling, (ull)g->used,
                (ull)g->fixed, (ull)g->container_limit, (ull)g->container_usage, (ull)g->mem_available,
                g->psi_some10, (ull)g->moves);
        for (unsigned j = 0; j < g->nmoves; j++) {
            const sl__gov_move *m = &g->move[j];
            fprintf(f, "%s{\"t\":%.3f,\"old_limit_bytes\":%llu,\"new_limit_bytes\":%llu,\"reason\":", j ? "," : "",
                    m->t, (ull)m->old_limit, (ull)m->new_limit);
            sl__json_str(f, m->reason);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputc(']', f);
}

/* The tuned loaders seen: workers and slots, throughput, the tuner's last decisions. */
static void json_loaders(const sl__top *t, FILE *f) {
    fputs(",\"loaders\":[", f);
    for (size_t i = 0; i < t->nloaders; i++) {
        const sl__loader_status *l = &t->loaders[i];
        fprintf(f, "%s{\"pid\":%d,\"id\":%u,\"age_s\":%.1f,\"source\":", i ? "," : "", l->pid, l->id,
                t->time - l->time);
        sl__json_str(f, l->source);
        fprintf(f, ",\"samples\":%llu,\"samples_per_s\":%.1f,\"consumer_wait_fraction\":%.4f,\"workers\":%u,"
                   "\"workers_active\":%u,\"workers_active_mean\":%.3f,\"slots\":%u,\"slots_target\":%u,"
                   "\"decode\":\"%s\",\"gpu_samples\":%llu,\"cpu_samples\":%llu,"
                   "\"pass_consumer_wait_gpu_fraction\":%.4f,\"decisions\":%llu,\"last_decisions\":[",
                (ull)l->samples, l->samples_per_s, l->wait_fraction, l->workers, l->workers_active,
                l->workers_active_mean, l->slots, l->slots_target, l->decode, (ull)l->gpu_samples,
                (ull)l->cpu_samples, l->wait_gpu_fraction, (ull)l->decisions);
        for (unsigned j = 0; j < l->nevents; j++) {
            const sl__loader_event *e = &l->event[j];
            fprintf(f, "%s{\"t\":%.3f,\"batches\":%llu,\"what\":\"%s\",\"why\":\"%s\",\"from\":%u,\"to\":%u,"
                       "\"reason\":",
                    j ? "," : "", e->t, (ull)e->batches, e->what, e->why, e->from, e->to);
            sl__json_str(f, e->reason);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputc(']', f);
}

static void json_ooms(const sl__top *t, FILE *f) {
    fprintf(f, ",\"oom_kills\":{\"readable\":%s,\"count\":%ld,\"events\":[", t->kmsg_readable ? "true" : "false",
            t->oom_seen);
    size_t no = (size_t)t->oom_seen < SL_TOP_MAX_OOMS ? (size_t)t->oom_seen : SL_TOP_MAX_OOMS;
    for (size_t i = 0; i < no; i++) {
        const sl__oom_event *e = &t->ooms[i];
        fprintf(f, "%s{\"pid\":%d,\"name\":", i ? "," : "", e->pid);
        sl__json_str(f, e->name);
        fprintf(f, ",\"uptime_s\":%.3f,\"time\":", e->uptime_s);
        if (e->wall > 0) fprintf(f, "%.3f", e->wall);
        else fputs("null", f);
        fprintf(f, ",\"anon_rss_bytes\":%llu,\"file_rss_bytes\":%llu,\"shmem_rss_bytes\":%llu,\"total_vm_bytes\":%llu,\"constraint\":",
                (ull)e->anon_rss, (ull)e->file_rss, (ull)e->shmem_rss, (ull)e->total_vm);
        sl__json_str(f, e->constraint);
        fputs(",\"memcg\":", f);
        sl__json_str(f, e->memcg);
        fputc('}', f);
    }
    fputs("]}", f);
}

void sl__top_json(const sl__top *t, FILE *f) {
    fprintf(f, "{\"time\":%.3f,\"pid\":", t->time);
    if (t->o.pid > 0) fprintf(f, "%d", t->o.pid);
    else fputs("null", f);
    json_system(t, f);
    json_cgroup(t, f);
    json_psi(t, f);
    json_limit(t, f);
    json_trees(t, f);
    json_gpus(t, f);
    json_governors(t, f);
    json_loaders(t, f);
    json_ooms(t, f);
    json_caches(t, f);
    fputc('}', f);
}

static const char *fb(uint64_t n, char *buf) { return sl__fmt_bytes(n, buf, 24); }

static void fmt_eta(double s, char *buf, size_t len) {
    if (s < 0) snprintf(buf, len, "not rising");
    else if (s < 120) snprintf(buf, len, "%.0f s", s);
    else if (s < 7200) snprintf(buf, len, "%.0f min", s / 60);
    else snprintf(buf, len, "%.1f h", s / 3600);
}

/* Each governed budget: its limit against its ceiling, its last moves. */
static void text_governors(const sl__top *t, FILE *f) {
    char a[24], b[24], c[24], d[24];
    for (size_t i = 0; i < t->ngovs; i++) {
        const sl__gov_status *g = &t->govs[i];
        fprintf(f, "budget  pid %d #%u governed: limit %s of ceiling %s  used %s  fixed %s  %llu moves\n", g->pid,
                g->id, fb(g->limit, a), fb(g->ceiling, b), fb(g->used, c), fb(g->fixed, d), (ull)g->moves);
        for (unsigned j = g->nmoves > 3 ? g->nmoves - 3 : 0; j < g->nmoves; j++) {
            const sl__gov_move *m = &g->move[j];
            fprintf(f, "  %8.1f s  %s -> %s  %s\n", m->t, fb(m->old_limit, a), fb(m->new_limit, b), m->reason);
        }
    }
}

void sl__top_loader_text(const sl__loader_status *l, FILE *f) {
    fprintf(f, "loader  pid %d #%u %s: %u of %u workers active (%.2f on average), %u slots in use of %u live, %.0f samples/s, "
               "waited %.0f%%, decode %s, %llu decisions\n",
            l->pid, l->id, l->source, l->workers_active, l->workers, l->workers_active_mean, l->slots_target, l->slots,
            l->samples_per_s, 100 * l->wait_fraction, l->decode, (ull)l->decisions);
    if (l->wait_gpu_fraction >= 0.005) /* the consumer's wait the GPU decode held up */
        fprintf(f, "  of this pass, %.0f%% waiting on the GPU decode (it finished those batches last)\n",
                100 * l->wait_gpu_fraction);
    if (l->wait_gpu_fraction >= SL_TOP_GPU_HELD) /* Python's PerformanceWarning says the same */
        fprintf(f, "  the model leaves the GPU too little to decode with: where the CPU workers keep up (sluice bench "
                   "--decode cpu), decode=cpu feeds it without the GPU (docs/gpu.md, \"Which decode for which model\")\n");
    for (unsigned j = l->nevents > 3 ? l->nevents - 3 : 0; j < l->nevents; j++) {
        const sl__loader_event *e = &l->event[j];
        fprintf(f, "  %8.1f s  %s %u -> %u  %s\n", e->t, e->what, e->from, e->to, e->reason);
    }
}

/* Each tuned loader: its workers and slots, the last decisions. */
static void text_loaders(const sl__top *t, FILE *f) {
    for (size_t i = 0; i < t->nloaders; i++) sl__top_loader_text(&t->loaders[i], f);
}

void sl__top_text(const sl__top *t, FILE *f, int rows) {
    char a[24], b[24], c[24], d[24], e[24];
    time_t now = (time_t)t->time;
    struct tm tm;
    localtime_r(&now, &tm);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", &tm);
    if (t->o.pid > 0) fprintf(f, "sluice top  pid %d (%s)  %s\n", t->o.pid, t->root_found ? t->tree.name : "gone", when);
    else fprintf(f, "sluice top  whole machine  %s\n", when);
    fprintf(f, "memory  total %s  available %s  swap %s used of %s\n", fb(t->mem.total, a), fb(t->mem.available, b),
            fb(t->mem.swap_total - t->mem.swap_free, c), fb(t->mem.swap_total, d));
    if (t->has_cgroup) {
        const sl__cgroup *cg = &t->cg;
        fprintf(f, "cgroup  v%d %s  limit %s  usage %s", cg->version, cg->dir, cg->has_limit ? fb(cg->limit, a) : "none",
                fb(cg->current, b));
        if (cg->version == 2) fprintf(f, "  events max %llu oom %llu", (unsigned long long)cg->events_max, (unsigned long long)cg->events_oom);
        else fprintf(f, "  failcnt %llu", (unsigned long long)cg->failcnt);
        if (cg->has_oom_kill) fprintf(f, "  oom_kill %llu", (unsigned long long)cg->events_oom_kill);
        fputc('\n', f);
    } else {
        fprintf(f, "cgroup  (no memory cgroup found)\n");
    }
    char eta[32];
    fmt_eta(t->eta_s, eta, sizeof eta);
    fprintf(f, "limit   %s (%s)  used %s = %.1f%%", fb(t->limit, a), t->limit_is_cgroup ? "cgroup" : "memory",
            fb(t->usage, b), t->used_pct);
    if (t->has_slope) fprintf(f, "  slope %s%s/s  limit in %s", t->slope < 0 ? "-" : "+",
                              fb((uint64_t)(t->slope < 0 ? -t->slope : t->slope), c), eta);
    fputc('\n', f);
    if (t->has_psi)
        fprintf(f, "PSI     some %.2f%%  full %.2f%% (avg10)  %s\n", t->psi.some.avg10, t->psi.full.avg10, t->psi_source);
    else fprintf(f, "PSI     (not available)\n");
    if (t->root_found) {
        fprintf(f, "tree    %d (%s)  %zu processes  PSS %s  RSS %s  USS %s\n", t->tree.root, t->tree.name,
                t->tree.nprocs, fb(t->tree.pss, a), fb(t->tree.rss, b), fb(t->tree.uss, c));
        fprintf(f, "  %7s %7s %-16s %10s %10s %10s %10s %10s\n", "PID", "PPID", "NAME", "RSS", "PSS", "USS", "SHARED", "SWAP");
        int shown = 0;
        for (size_t i = 0; i < t->nmembers && shown < rows; i++, shown++) {
            const sl__proc *p = &t->procs.v[t->members[i]];
            if (p->status) {
                fprintf(f, "  %7d %7d %-16.16s %10s\n", p->pid, p->ppid, p->name, "(unreadable)");
                continue;
            }
            fprintf(f, "  %7d %7d %-16.16s %10s %10s %10s %10s %10s\n", p->pid, p->ppid, p->name, fb(p->m.rss, a),
                    fb(p->m.pss, b), fb(sl__smaps_uss(&p->m), c), fb(sl__smaps_shared(&p->m), d), fb(p->m.swap, e));
        }
        if (t->nmembers > (size_t)shown) fprintf(f, "  ... %zu more\n", t->nmembers - (size_t)shown);
        if (t->tree.unreadable)
            fprintf(f, "  note: %zu processes' smaps_rollup unreadable (other users): not counted\n", t->tree.unreadable);
    } else if (t->o.pid > 0) {
        fprintf(f, "tree    pid %d not found\n", t->o.pid);
    }
    if (t->o.pid <= 0 && t->ntrees > 1) {
        fprintf(f, "largest trees by PSS:\n");
        size_t n = t->ntrees < t->o.max_trees ? t->ntrees : t->o.max_trees;
        for (size_t i = 0; i < n; i++)
            fprintf(f, "  %7d %-16.16s %4zu procs  PSS %10s  RSS %10s%s\n", t->trees[i].root, t->trees[i].name,
                    t->trees[i].nprocs, fb(t->trees[i].pss, a), fb(t->trees[i].rss, b),
                    t->trees[i].unreadable ? "  (some unreadable)" : "");
    }
    for (unsigned i = 0; i < t->ngpus; i++) {
        const sl__gpu *g = &t->gpus[i];
        fprintf(f, "GPU %u   %s  used %s of %s", g->index, g->name, fb(g->used, a), fb(g->total, b));
        for (unsigned j = 0; j < g->nprocs; j++) {
            if (g->procs[j].used == UINT64_MAX) fprintf(f, "  [%u: ?]", g->procs[j].pid);
            else fprintf(f, "  [%u%s: %s]", g->procs[j].pid, in_members(t, g->procs[j].pid) ? "*" : "", fb(g->procs[j].used, c));
        }
        fputc('\n', f);
    }
    text_governors(t, f);
    text_loaders(t, f);
    if (!t->kmsg_readable) fprintf(f, "OOM     kernel log not readable\n");
    else if (!t->oom_seen) fprintf(f, "OOM     no kills in the kernel log\n");
    else {
        fprintf(f, "OOM     %ld kills in the kernel log; latest:\n", t->oom_seen);
        size_t no = (size_t)t->oom_seen < SL_TOP_MAX_OOMS ? (size_t)t->oom_seen : SL_TOP_MAX_OOMS;
        for (size_t i = no > 3 ? no - 3 : 0; i < no; i++) {
            const sl__oom_event *ev = &t->ooms[i];
            char ts[32] = "?";
            if (ev->wall > 0) {
                time_t w = (time_t)ev->wall;
                struct tm wt;
                localtime_r(&w, &wt);
                strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &wt);
            }
            fprintf(f, "  %s  pid %d (%s)  anon-rss %s  file-rss %s%s%s\n", ts, ev->pid, ev->name, fb(ev->anon_rss, a),
                    fb(ev->file_rss, b), ev->constraint[0] ? "  " : "", ev->constraint);
        }
    }
    for (size_t i = 0; i < t->ncaches; i++) {
        const sl__cache_seg *cs = &t->caches[i];
        uint64_t looks = cs->hits + cs->misses;
        fprintf(f, "cache   %s  /dev/shm %s (resident %s)  holds %s of %s, %llu entries  hits %.1f%%  %u process%s",
                cs->name, fb(cs->segment_bytes, a), fb(cs->resident_bytes, b), fb(cs->bytes, c), fb(cs->capacity, d),
                (unsigned long long)cs->entries, looks ? 100.0 * (double)cs->hits / (double)looks : 0.0,
                cs->processes, cs->processes == 1 ? "" : "es");
        for (uint32_t j = 0; j < cs->processes; j++) fprintf(f, "%s%d", j ? "," : " ", cs->pids[j]);
        fputc('\n', f);
    }
    if (t->warning)
        fprintf(f, "WARNING usage %s is %.1f%% of the %s limit %s (warn at %.0f%%); at the current slope the limit is reached in %s\n",
                fb(t->usage, a), t->used_pct, t->limit_is_cgroup ? "cgroup" : "memory", fb(t->limit, b), t->o.warn_pct,
                t->has_slope ? eta : "(need a second sample)");
}

/* Process table and trees. See proctree.h. */
#include "monitor/proctree.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "sluice.h"

static int by_pid(const void *a, const void *b) {
    int x = ((const sl__proc *)a)->pid, y = ((const sl__proc *)b)->pid;
    return (x > y) - (x < y);
}

static int grow(sl__proctab *t) {
    size_t cap = t->cap ? t->cap * 2 : 512;
    uint64_t bytes;
    if (cap < t->cap || sl__mul(cap, sizeof(sl__proc), &bytes) || bytes > SIZE_MAX) return SL_EOVERFLOW;
    sl__proc *v = sl__realloc(t->b, t->v, (size_t)bytes, SL_MEM_OTHER);
    if (!v) return SL_EBUDGET;
    t->v = v;
    t->cap = cap;
    return 0;
}

int sl__proctab_scan(sl__proctab *t, const char *procroot) {
    t->n = 0;
    DIR *d = opendir(procroot);
    if (!d) return SL_ENOENT;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[300], buf[1024];
        size_t len;
        snprintf(path, sizeof path, "%s/%ld/stat", procroot, pid);
        if (sl__read_text(path, buf, sizeof buf, &len)) continue; /* exited meanwhile */
        if (t->n == t->cap && (rc = grow(t)) != 0) break;
        sl__proc *p = &t->v[t->n];
        memset(p, 0, sizeof *p);
        if (sl__procstat_parse(buf, len, &p->pid, &p->ppid, p->name, sizeof p->name, NULL)) continue;
        p->status = 1;
        t->n++;
    }
    closedir(d);
    if (t->n) qsort(t->v, t->n, sizeof *t->v, by_pid);
    return rc;
}

void sl__proctab_free(sl__proctab *t) {
    sl__free(t->b, t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}

long sl__proctab_find(const sl__proctab *t, int pid) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].pid == pid) return (long)mid;
        if (t->v[mid].pid < pid) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

size_t sl__proctab_tree(const sl__proctab *t, int pid, unsigned char *member) {
    long r = sl__proctab_find(t, pid);
    if (r < 0) return 0;
    member[r] = 1;
    size_t count = 1;
    /* Passes until nothing changes: each pass adds at least one level, and
     * trees are shallow (trainer -> workers -> helpers). */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < t->n; i++) {
            if (member[i]) continue;
            long p = sl__proctab_find(t, t->v[i].ppid);
            if (p >= 0 && member[p]) {
                member[i] = 1;
                count++;
                changed = 1;
            }
        }
    }
    return count;
}

void sl__proctab_roots(sl__proctab *t) {
    for (size_t i = 0; i < t->n; i++) {
        sl__proc *p = &t->v[i];
        if (p->pid == 2 || p->ppid == 2) {
            p->root = 0; /* kernel thread */
            continue;
        }
        /* Walk up while the parent is below init; a loop guard of n steps
         * covers a table read while processes were re-parented. */
        const sl__proc *q = p;
        for (size_t steps = 0; steps < t->n && q->ppid > 1; steps++) {
            long j = sl__proctab_find(t, q->ppid);
            if (j < 0) break;
            q = &t->v[j];
        }
        p->root = q->pid;
    }
}

void sl__proctab_read_mem(sl__proctab *t, size_t i, const char *procroot) {
    sl__proc *p = &t->v[i];
    p->status = sl__smaps_read(procroot, p->pid, &p->m);
    if (p->status) memset(&p->m, 0, sizeof p->m);
}

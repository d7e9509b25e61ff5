/* Governor status files, read for `sluice top`. See govstatus.h. */
#include "monitor/govstatus.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "base/sys/procfs.h"
#include "monitor/json.h"
#include "sluice.h"

static uint64_t num(const char *s, size_t len, const char *path, int *bad) {
    double v = 0;
    if (sl__json_number(s, len, path, &v) || v < 0) *bad = 1;
    return (uint64_t)v;
}

static void parse_moves(const char *text, size_t len, sl__gov_status *o) {
    char path[64];
    double v;
    for (unsigned i = 0; i < SL_GOV_STATUS_MOVES; i++) {
        sl__gov_move *m = &o->move[i];
        int bad = 0;
        snprintf(path, sizeof path, "events.%u.t", i);
        if (sl__json_number(text, len, path, &v)) break;
        m->t = v;
        snprintf(path, sizeof path, "events.%u.old_limit_bytes", i);
        m->old_limit = num(text, len, path, &bad);
        snprintf(path, sizeof path, "events.%u.new_limit_bytes", i);
        m->new_limit = num(text, len, path, &bad);
        snprintf(path, sizeof path, "events.%u.reason", i);
        if (sl__json_string(text, len, path, m->reason, sizeof m->reason)) m->reason[0] = 0;
        if (bad) break;
        o->nmoves = i + 1;
    }
}

int sl__gov_status_parse(const char *text, size_t len, sl__gov_status *o) {
    memset(o, 0, sizeof *o);
    int bad = 0;
    if (num(text, len, "version", &bad) != SL_STATUS_VERSION || bad) return SL_EPARSE;
    o->pid = (int)num(text, len, "pid", &bad);
    o->id = (unsigned)num(text, len, "id", &bad);
    o->start_time = num(text, len, "start_time", &bad);
    if (sl__json_number(text, len, "time", &o->time) || sl__json_number(text, len, "t", &o->t)) bad = 1;
    o->limit = num(text, len, "limit_bytes", &bad);
    o->ceiling = num(text, len, "ceiling_bytes", &bad);
    o->used = num(text, len, "used_bytes", &bad);
    o->fixed = num(text, len, "fixed_bytes", &bad);
    o->container_limit = num(text, len, "container_limit_bytes", &bad);
    o->container_usage = num(text, len, "container_usage_bytes", &bad);
    o->mem_available = num(text, len, "mem_available_bytes", &bad);
    if (sl__json_number(text, len, "psi_some_avg10", &o->psi_some10)) bad = 1;
    o->moves = num(text, len, "moves", &bad);
    if (bad || o->pid <= 0) return SL_EPARSE;
    parse_moves(text, len, o);
    return 0;
}

/* Does pid run under procroot, started at start_time, owned by uid? */
static int writer_alive(const char *procroot, int pid, uint64_t start_time, uid_t uid) {
    char path[600], buf[1024], comm[64];
    size_t n;
    int p, pp;
    uint64_t st;
    struct stat sb;
    snprintf(path, sizeof path, "%s/%d", procroot, pid);
    if (stat(path, &sb) != 0 || sb.st_uid != uid) return 0;
    snprintf(path, sizeof path, "%s/%d/stat", procroot, pid);
    if (sl__read_text(path, buf, sizeof buf, &n) || sl__procstat_parse(buf, n, &p, &pp, comm, sizeof comm, &st))
        return 0;
    return st == start_time;
}

/* One file of dir, if it is a live status of a wanted process. */
static int read_one(const char *dir, const char *name, const char *procroot,
                    int (*want)(const void *ctx, int pid), const void *ctx, sl__gov_status *o) {
    char path[1024], text[16384];
    int pid;
    unsigned id;
    char tail[8];
    if (sscanf(name, SL_STATUS_PREFIX "%d-%u.%7s", &pid, &id, tail) != 3 || strcmp(tail, "json")) return 0;
    if (want && !want(ctx, pid)) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    size_t len;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sl__read_text(path, text, sizeof text, &len)) return 0;
    if (sl__gov_status_parse(text, len, o) || o->pid != pid || o->id != id) return 0;
    return writer_alive(procroot, pid, o->start_time, sb.st_uid);
}

static int by_pid_id(const void *a, const void *b) {
    const sl__gov_status *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

size_t sl__gov_status_scan(const char *dir, const char *procroot, int (*want)(const void *ctx, int pid),
                           const void *ctx, sl__gov_status *out, size_t max) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d)))
        if (!strncmp(e->d_name, SL_STATUS_PREFIX, strlen(SL_STATUS_PREFIX)) &&
            read_one(dir, e->d_name, procroot, want, ctx, &out[n]))
            n++;
    closedir(d);
    qsort(out, n, sizeof *out, by_pid_id);
    return n;
}

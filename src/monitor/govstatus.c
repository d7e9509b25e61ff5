/* Governors' and loaders' status files, read for `sluice top`. See govstatus.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_GETLK, qsort_r */
#endif
#include "monitor/govstatus.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "monitor/json.h"
#include "sluice.h"

static uint64_t num(const char *s, size_t len, const char *path, int *bad) {
    double v = 0;
    if (sl__json_number(s, len, path, &v) || v < 0) *bad = 1;
    return (uint64_t)v;
}

/* The fields every status file starts with (base/status.h): its writer's
 * pid, id and process start, when it was written; bad set when one is not
 * there. */
static void head(const char *text, size_t len, int *pid, unsigned *id, uint64_t *start_time, double *time,
                 double *t, int *bad) {
    *pid = (int)num(text, len, "pid", bad);
    *id = (unsigned)num(text, len, "id", bad);
    *start_time = num(text, len, "start_time", bad);
    if (sl__json_number(text, len, "time", time) || sl__json_number(text, len, "t", t)) *bad = 1;
}

/* Field key of event i of a status (events.I.KEY): a number >= 0 (bad
 * set when it is not), a string ("" when absent: 1), the time (1 when
 * absent: the events end). */
static uint64_t ev_num(const char *text, size_t len, unsigned i, const char *key, int *bad) {
    char path[64];
    snprintf(path, sizeof path, "events.%u.%s", i, key);
    return num(text, len, path, bad);
}

static int ev_str(const char *text, size_t len, unsigned i, const char *key, char *out, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "events.%u.%s", i, key);
    if (sl__json_string(text, len, path, out, cap) == 0) return 0;
    out[0] = 0;
    return 1;
}

static int ev_time(const char *text, size_t len, unsigned i, double *t) {
    char path[64];
    snprintf(path, sizeof path, "events.%u.t", i);
    return sl__json_number(text, len, path, t) != 0;
}

static void parse_moves(const char *text, size_t len, sl__gov_status *o) {
    for (unsigned i = 0; i < SL_GOV_STATUS_MOVES; i++) {
        sl__gov_move *m = &o->move[i];
        int bad = 0;
        if (ev_time(text, len, i, &m->t)) break;
        m->old_limit = ev_num(text, len, i, "old_limit_bytes", &bad);
        m->new_limit = ev_num(text, len, i, "new_limit_bytes", &bad);
        ev_str(text, len, i, "reason", m->reason, sizeof m->reason);
        if (bad) break;
        o->nmoves = i + 1;
    }
}

int sl__gov_status_parse(const char *text, size_t len, sl__gov_status *o) {
    memset(o, 0, sizeof *o);
    int bad = 0;
    if (num(text, len, "version", &bad) != SL_STATUS_VERSION || bad) return SL_EPARSE;
    head(text, len, &o->pid, &o->id, &o->start_time, &o->time, &o->t, &bad);
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

/* Does its writer hold fd's file's write lock (base/status.h)? Only the
 * owner can take it (the file is not writable by others; a read lock
 * another user takes is not this). An error asking counts as held. */
static int write_locked(int fd) {
    struct flock l;
    memset(&l, 0, sizeof l); /* l_pid must be 0 for OFD locks */
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_GETLK, &l) != 0 || l.l_type == F_WRLCK;
}

/* The text (NUL-terminated, at most len - 1 bytes) of the status file at
 * path, when its writer lives: 1, or 0 for a file that is not a regular
 * file of this user (of any user for root), or whose writer is gone. The
 * name may be replaced between the open and the lock's check by a newer
 * write, whose writer lives: then it is asked again of the new file.
 * Whether the name still holds the file asked is compared while fd keeps
 * that file open: once closed, its inode may be freed, and the writer's
 * next file may get its number (ext4 hands a freed one out again at once)
 * and be taken for it. */
static int read_live(const char *path, char *text, size_t len) {
    for (int tries = 0; tries < 16; tries++) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) return 0;
        struct stat sb, now;
        ssize_t n = -1;
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_uid == geteuid() || geteuid() == 0))
            do n = pread(fd, text, len - 1, 0);
            while (n < 0 && errno == EINTR);
        int live = n >= 0 && write_locked(fd);
        int same = n >= 0 && !live && (stat(path, &now) != 0 || (now.st_ino == sb.st_ino && now.st_dev == sb.st_dev));
        close(fd);
        if (n < 0) return 0;
        if (live) {
            text[n] = 0;
            return 1;
        }
        if (same) return 0; /* still at the name (or gone from it), unlocked: its writer is gone */
    }
    return 0; /* replaced 16 times while asked: too busy to read now */
}

/* ---- loaders' status files (pipeline/tuner.c writes them) --------------------- */

static void parse_events(const char *text, size_t len, sl__loader_status *o) {
    for (unsigned i = 0; i < SL_LOADER_STATUS_EVENTS; i++) {
        sl__loader_event *e = &o->event[i];
        int bad = 0;
        if (ev_time(text, len, i, &e->t)) break;
        e->batches = ev_num(text, len, i, "batches", &bad);
        e->from = (unsigned)ev_num(text, len, i, "from", &bad);
        e->to = (unsigned)ev_num(text, len, i, "to", &bad);
        bad |= ev_str(text, len, i, "what", e->what, sizeof e->what);
        ev_str(text, len, i, "why", e->why, sizeof e->why);
        ev_str(text, len, i, "reason", e->reason, sizeof e->reason);
        if (bad) break;
        o->nevents = i + 1;
    }
}

int sl__loader_status_parse(const char *text, size_t len, sl__loader_status *o) {
    memset(o, 0, sizeof *o);
    int bad = 0;
    char kind[16];
    if (num(text, len, "version", &bad) != SL_STATUS_VERSION || bad ||
        sl__json_string(text, len, "kind", kind, sizeof kind) || strcmp(kind, "loader"))
        return SL_EPARSE;
    head(text, len, &o->pid, &o->id, &o->start_time, &o->time, &o->t, &bad);
    if (sl__json_string(text, len, "source", o->source, sizeof o->source)) o->source[0] = 0;
    o->samples = num(text, len, "samples", &bad);
    if (sl__json_number(text, len, "samples_per_s", &o->samples_per_s) ||
        sl__json_number(text, len, "consumer_wait_fraction", &o->wait_fraction) ||
        sl__json_number(text, len, "workers_active_mean", &o->workers_active_mean))
        bad = 1;
    o->workers = (unsigned)num(text, len, "workers", &bad);
    o->workers_active = (unsigned)num(text, len, "workers_active", &bad);
    o->slots = (unsigned)num(text, len, "slots", &bad);
    o->slots_target = (unsigned)num(text, len, "slots_target", &bad);
    if (sl__json_string(text, len, "decode", o->decode, sizeof o->decode)) bad = 1;
    o->gpu_samples = num(text, len, "gpu_samples", &bad);
    o->cpu_samples = num(text, len, "cpu_samples", &bad);
    o->decisions = num(text, len, "decisions", &bad);
    if (sl__json_number(text, len, "pass_consumer_wait_gpu_fraction", &o->wait_gpu_fraction))
        o->wait_gpu_fraction = 0; /* a file from a library before the key */
    if (bad || o->pid <= 0) return SL_EPARSE;
    parse_events(text, len, o);
    return 0;
}

/* ---- scanning a folder -------------------------------------------------------- */

/* What a kind of status file is: its name's prefix, its parser, and its
 * parsed struct (size), whose pid and id key says whose it is. */
typedef struct status_kind {
    const char *prefix;
    size_t size;
    int (*parse)(const char *text, size_t len, void *out);
    void (*key)(const void *st, int *pid, unsigned *id);
} status_kind;

/* One file of dir, if it is a live status of a wanted process. */
static int read_one(const status_kind *k, const char *dir, const char *name,
                    int (*want)(const void *ctx, int pid), const void *ctx, void *o) {
    char path[1024], text[16384], fmt[64];
    int pid, got_pid;
    unsigned id, got_id;
    char tail[8];
    snprintf(fmt, sizeof fmt, "%s%%d-%%u.%%7s", k->prefix);
    if (sscanf(name, fmt, &pid, &id, tail) != 3 || strcmp(tail, "json")) return 0;
    if (want && !want(ctx, pid)) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!read_live(path, text, sizeof text) || k->parse(text, strlen(text), o)) return 0;
    k->key(o, &got_pid, &got_id);
    return got_pid == pid && got_id == id;
}

static int by_pid_id(const void *a, const void *b, void *kind) {
    const status_kind *k = kind;
    int pa, pb;
    unsigned ia, ib;
    k->key(a, &pa, &ia);
    k->key(b, &pb, &ib);
    if (pa != pb) return pa < pb ? -1 : 1;
    return (ia > ib) - (ia < ib);
}

static size_t scan(const status_kind *k, const char *dir, int (*want)(const void *ctx, int pid), const void *ctx,
                   void *out, size_t max) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d)))
        if (!strncmp(e->d_name, k->prefix, strlen(k->prefix)) &&
            read_one(k, dir, e->d_name, want, ctx, (char *)out + n * k->size))
            n++;
    closedir(d);
    qsort_r(out, n, k->size, by_pid_id, (void *)k);
    return n;
}

static int gov_parse(const char *text, size_t len, void *out) { return sl__gov_status_parse(text, len, out); }
static void gov_key(const void *st, int *pid, unsigned *id) {
    const sl__gov_status *g = st;
    *pid = g->pid, *id = g->id;
}
static int loader_parse(const char *text, size_t len, void *out) { return sl__loader_status_parse(text, len, out); }
static void loader_key(const void *st, int *pid, unsigned *id) {
    const sl__loader_status *l = st;
    *pid = l->pid, *id = l->id;
}

size_t sl__gov_status_scan(const char *dir, int (*want)(const void *ctx, int pid), const void *ctx,
                           sl__gov_status *out, size_t max) {
    static const status_kind k = {SL_STATUS_PREFIX, sizeof(sl__gov_status), gov_parse, gov_key};
    return scan(&k, dir, want, ctx, out, max);
}

size_t sl__loader_status_scan(const char *dir, int (*want)(const void *ctx, int pid), const void *ctx,
                              sl__loader_status *out, size_t max) {
    static const status_kind k = {SL_STATUS_LOADER_PREFIX, sizeof(sl__loader_status), loader_parse, loader_key};
    return scan(&k, dir, want, ctx, out, max);
}

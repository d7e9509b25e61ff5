/* Cgroup readers. See cgroup.h. */
#include "base/sys/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/sys/procfs.h"
#include "base/sys/text.h"
#include "sluice.h"

int sl__cgroup_parse_limit(const char *text, int *has_limit, uint64_t *limit) {
    while (*text == ' ') text++;
    if (!strncmp(text, "max", 3)) {
        *has_limit = 0;
        *limit = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || errno) return SL_EPARSE;
    if (*end && *end != '\n' && *end != ' ') return SL_EPARSE;
    *has_limit = v < SL_CGROUP_NO_LIMIT;
    *limit = *has_limit ? v : 0;
    return 0;
}

int sl__cgroup_parse_kv(const char *text, size_t len, const char *key, uint64_t *val) {
    char line[256];
    size_t pos = 0, kl = strlen(key);
    while (sl__next_line(text, len, &pos, line, sizeof line)) {
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            char *end;
            unsigned long long v = strtoull(line + kl + 1, &end, 10);
            if (end == line + kl + 1) return SL_EPARSE;
            *val = v;
            return 0;
        }
    }
    return SL_ENOENT;
}

static void copy(char *dst, size_t cap, const char *src, size_t n) {
    if (!cap) return;
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

int sl__cgroup_paths_parse(const char *text, size_t len, const char *ctl, char *v1, size_t v1len, char *v2,
                           size_t v2len) {
    int mask = 0;
    char line[1024];
    size_t pos = 0;
    while (sl__next_line(text, len, &pos, line, sizeof line)) {
        /* hierarchy-ID:controller-list:path */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        const char *path = c2 + 1;
        if (!strncmp(line, "0:", 2) && c2 == c1 + 1) {
            copy(v2, v2len, path, strlen(path));
            mask |= 2;
            continue;
        }
        /* v1: controllers are comma-separated ("cpu,cpuacct") */
        *c2 = 0;
        char *save = NULL;
        for (char *tok = strtok_r(c1 + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (!strcmp(tok, ctl)) {
                copy(v1, v1len, path, strlen(path));
                mask |= 1;
            }
        }
    }
    return mask;
}

int sl__cgroup_mounts_parse(const char *text, size_t len, const char *ctl, char *v1mnt, char *v1root,
                            char *v2mnt, char *v2root, size_t cap) {
    int mask = 0;
    char line[1024];
    size_t pos = 0;
    while (sl__next_line(text, len, &pos, line, sizeof line)) {
        /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
        char *f[6] = {0};
        char *save = NULL, *tok = strtok_r(line, " ", &save);
        int i = 0;
        for (; tok && i < 6; tok = strtok_r(NULL, " ", &save)) f[i++] = tok;
        if (i < 6) continue;
        while (tok && strcmp(tok, "-") != 0) tok = strtok_r(NULL, " ", &save);
        if (!tok) continue;
        char *fstype = strtok_r(NULL, " ", &save);
        char *source = fstype ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source ? strtok_r(NULL, " ", &save) : NULL;
        if (!fstype) continue;
        if (!strcmp(fstype, "cgroup2") && !(mask & 2)) {
            copy(v2mnt, cap, f[4], strlen(f[4]));
            copy(v2root, cap, f[3], strlen(f[3]));
            mask |= 2;
        } else if (!strcmp(fstype, "cgroup") && super && !(mask & 1)) {
            for (char *s2 = NULL, *o = strtok_r(super, ",", &s2); o; o = strtok_r(NULL, ",", &s2)) {
                if (!strcmp(o, ctl)) {
                    copy(v1mnt, cap, f[4], strlen(f[4]));
                    copy(v1root, cap, f[3], strlen(f[3]));
                    mask |= 1;
                }
            }
        }
    }
    return mask;
}

/* Read dir/name into buf. */
static int read_in(const char *dir, const char *name, char *buf, size_t cap, size_t *len) {
    char path[700];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return SL_EINVAL;
    return sl__read_text(path, buf, cap, len);
}

static void read_pressure(const char *dir, sl__cgroup *out) {
    char buf[512];
    size_t len;
    out->has_pressure = read_in(dir, "memory.pressure", buf, sizeof buf, &len) == 0 &&
                        sl__psi_parse(buf, len, &out->pressure) == 0;
}

int sl__cgroup_read_v2(const char *dir, const char *stop, sl__cgroup *out) {
    memset(out, 0, sizeof *out);
    out->version = 2;
    copy(out->dir, sizeof out->dir, dir, strlen(dir));
    char buf[2048];
    size_t len;
    uint64_t v;
    int lim;
    /* The root cgroup has memory.current only on some kernels, and no
     * memory.max: current is what marks a readable memory cgroup. */
    if (read_in(dir, "memory.current", buf, sizeof buf, &len)) return SL_ENOENT;
    if (sl__cgroup_parse_limit(buf, &lim, &out->current) || !lim) return SL_EPARSE;
    if (read_in(dir, "memory.events", buf, sizeof buf, &len) == 0) {
        if (!sl__cgroup_parse_kv(buf, len, "high", &v)) out->events_high = v;
        if (!sl__cgroup_parse_kv(buf, len, "max", &v)) out->events_max = v;
        if (!sl__cgroup_parse_kv(buf, len, "oom", &v)) out->events_oom = v;
        if (!sl__cgroup_parse_kv(buf, len, "oom_kill", &v)) out->events_oom_kill = v, out->has_oom_kill = 1;
    }
    read_pressure(dir, out);
    /* The effective limit is the smallest memory.max from here up to the
     * mount point, included: the hierarchy's root has none, but inside a
     * cgroup namespace the mount point is the container's own cgroup. */
    char cur[512];
    copy(cur, sizeof cur, dir, strlen(dir));
    do {
        if (read_in(cur, "memory.max", buf, sizeof buf, &len) == 0 &&
            sl__cgroup_parse_limit(buf, &lim, &v) == 0 && lim) {
            if (!out->has_limit || v < out->limit) out->limit = v;
            out->has_limit = 1;
        }
    } while (stop && sl__cgroup_up(cur, stop));
    return 0;
}

int sl__cgroup_up(char *dir, const char *mnt) {
    size_t ml = strlen(mnt);
    while (ml > 1 && mnt[ml - 1] == '/') ml--;
    if (strlen(dir) <= ml || strncmp(dir, mnt, ml) || dir[ml] != '/') return 0;
    *strrchr(dir, '/') = 0; /* at dir + ml or past it */
    return 1;
}

/* ceil(quota / period) of a folder's CPU limit; 0 where none is set. */
static uint32_t folder_quota(const char *dir, int version) {
    char buf[128];
    size_t len;
    long long quota = -1, period = 0;
    if (version == 2) { /* "max 100000" or "200000 100000" */
        char q[32];
        if (read_in(dir, "cpu.max", buf, sizeof buf, &len) == 0 && sscanf(buf, "%31s %lld", q, &period) == 2 &&
            q[0] != 'm')
            quota = atoll(q);
    } else if (read_in(dir, "cpu.cfs_quota_us", buf, sizeof buf, &len) == 0) { /* -1: none */
        quota = atoll(buf);
        if (read_in(dir, "cpu.cfs_period_us", buf, sizeof buf, &len) == 0) period = atoll(buf);
    }
    if (quota <= 0 || period <= 0) return 0;
    long long n = quota / period + (quota % period != 0);
    return n > 0xFFFFFFFLL ? 0 : (uint32_t)n;
}

uint32_t sl__cgroup_cpu_quota(const char *dir, const char *mnt, int version) {
    char cur[1024];
    uint32_t least = 0;
    copy(cur, sizeof cur, dir, strlen(dir));
    do {
        uint32_t n = folder_quota(cur, version);
        if (n && (!least || n < least)) least = n;
    } while (sl__cgroup_up(cur, mnt));
    return least;
}

int sl__cgroup_read_v1(const char *dir, sl__cgroup *out) {
    memset(out, 0, sizeof *out);
    out->version = 1;
    copy(out->dir, sizeof out->dir, dir, strlen(dir));
    char buf[8192];
    size_t len;
    uint64_t v;
    int lim;
    if (read_in(dir, "memory.usage_in_bytes", buf, sizeof buf, &len)) return SL_ENOENT;
    if (sl__cgroup_parse_limit(buf, &lim, &out->current) || !lim) return SL_EPARSE;
    if (read_in(dir, "memory.limit_in_bytes", buf, sizeof buf, &len) == 0 &&
        sl__cgroup_parse_limit(buf, &lim, &v) == 0 && lim) {
        out->has_limit = 1;
        out->limit = v;
    }
    /* A parent's limit binds too: memory.stat states the smallest one. */
    if (read_in(dir, "memory.stat", buf, sizeof buf, &len) == 0 &&
        sl__cgroup_parse_kv(buf, len, "hierarchical_memory_limit", &v) == 0 && v < SL_CGROUP_NO_LIMIT) {
        if (!out->has_limit || v < out->limit) out->limit = v;
        out->has_limit = 1;
    }
    if (read_in(dir, "memory.failcnt", buf, sizeof buf, &len) == 0)
        out->failcnt = strtoull(buf, NULL, 10);
    if (read_in(dir, "memory.oom_control", buf, sizeof buf, &len) == 0 &&
        sl__cgroup_parse_kv(buf, len, "oom_kill", &v) == 0) {
        out->events_oom_kill = v;
        out->has_oom_kill = 1;
    }
    read_pressure(dir, out);
    return 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* mnt + (path less the mount's root), walked up to the mount point until
 * the folder exists (in a cgroup namespace the path may not be visible). */
static void join(char *out, size_t cap, const char *mnt, const char *root, const char *path) {
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0 && !strncmp(path, root, rl) && (path[rl] == '/' || !path[rl])) path += rl;
    snprintf(out, cap, "%s%s", mnt, strcmp(path, "/") ? path : "");
    size_t ml = strlen(mnt);
    while (!is_dir(out) && strlen(out) > ml) {
        char *slash = strrchr(out, '/');
        if (!slash || (size_t)(slash - out) < ml) break;
        *slash = 0;
    }
}

/* Where pid's cgroup is for controller ctl: its v1 hierarchy's path and
 * mount, and the v2 ones (have: the mask of sl__cgroup_paths_parse, both
 * files read). */
typedef struct where {
    char v1[512], v2[512], v1mnt[512], v1root[512], v2mnt[512], v2root[512];
    int have;
} where;

static int locate(const char *procroot, int pid, const char *ctl, where *w) {
    char path[256], buf[16384], who[32];
    size_t len;
    *w = (where){.have = 0};
    if (pid > 0) snprintf(who, sizeof who, "%d", pid);
    else snprintf(who, sizeof who, "self");
    snprintf(path, sizeof path, "%s/%s/cgroup", procroot, who);
    if (sl__read_text(path, buf, sizeof buf, &len)) return SL_ENOENT;
    w->have = sl__cgroup_paths_parse(buf, len, ctl, w->v1, sizeof w->v1, w->v2, sizeof w->v2);
    snprintf(path, sizeof path, "%s/%s/mountinfo", procroot, who);
    if (sl__read_text(path, buf, sizeof buf, &len)) return SL_ENOENT;
    w->have &= sl__cgroup_mounts_parse(buf, len, ctl, w->v1mnt, w->v1root, w->v2mnt, w->v2root, sizeof w->v1mnt);
    return 0;
}

/* Whether the v2 hierarchy mounted at mnt has controller ctl (its root's
 * cgroup.controllers lists it). */
static int v2_has(const char *mnt, const char *ctl) {
    char list[256];
    size_t len;
    if (read_in(mnt, "cgroup.controllers", list, sizeof list, &len)) return 0;
    char *save = NULL; /* a whole word: "cpu" is not "cpuset" */
    for (char *w = strtok_r(list, " \n", &save); w; w = strtok_r(NULL, " \n", &save))
        if (!strcmp(w, ctl)) return 1;
    return 0;
}

int sl__cgroup_of(const char *procroot, int pid, sl__cgroup *out) {
    where w;
    if (locate(procroot, pid, "memory", &w)) return SL_ENOENT;
    char dir[1024];
    if ((w.have & 2) && v2_has(w.v2mnt, "memory")) {
        join(dir, sizeof dir, w.v2mnt, w.v2root, w.v2);
        if (sl__cgroup_read_v2(dir, w.v2mnt, out) == 0) return 0;
    }
    if (w.have & 1) {
        join(dir, sizeof dir, w.v1mnt, w.v1root, w.v1);
        if (sl__cgroup_read_v1(dir, out) == 0) {
            /* Hybrid hierarchies keep PSI in the v2 tree only. */
            if (!out->has_pressure && (w.have & 2)) {
                join(dir, sizeof dir, w.v2mnt, w.v2root, w.v2);
                read_pressure(dir, out);
            }
            return 0;
        }
    }
    return SL_ENOENT;
}

int sl__cgroup_dir(const char *procroot, int pid, const char *ctl, int *version, char *dir, char *mnt,
                   size_t cap) {
    where w;
    if (locate(procroot, pid, ctl, &w)) return SL_ENOENT;
    if ((w.have & 2) && v2_has(w.v2mnt, ctl)) {
        join(dir, cap, w.v2mnt, w.v2root, w.v2);
        if (mnt) copy(mnt, cap, w.v2mnt, strlen(w.v2mnt));
        *version = 2;
        return 0;
    }
    if (w.have & 1) {
        join(dir, cap, w.v1mnt, w.v1root, w.v1);
        if (mnt) copy(mnt, cap, w.v1mnt, strlen(w.v1mnt));
        *version = 1;
        return 0;
    }
    return SL_ENOENT;
}

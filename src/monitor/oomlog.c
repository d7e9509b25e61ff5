/* Kernel-log OOM-kill parser. See oomlog.h. */
#include "monitor/oomlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sys/text.h"
#include "sluice.h"

/* "key:NkB" anywhere in s, in bytes. */
static uint64_t kb_after(const char *s, const char *key) {
    const char *p = strstr(s, key);
    if (!p) return 0;
    unsigned long long v = strtoull(p + strlen(key), NULL, 10);
    return v > UINT64_MAX / 1024 ? UINT64_MAX : v * 1024;
}

/* Value of "key=" in a comma-separated list, copied into out. */
static int kv_after(const char *s, const char *key, char *out, size_t cap) {
    const char *p = s;
    size_t kl = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        if ((p == s || p[-1] == ',' || p[-1] == ':' || p[-1] == ' ') && p[kl] == '=') break;
        p += kl;
    }
    if (!p) return 0;
    p += kl + 1;
    size_t n = strcspn(p, ", \n");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
    return 1;
}

/* Strip the record header; sets *uptime (or -1) and returns the text. */
static const char *message_of(const char *line, double *uptime) {
    *uptime = -1;
    const char *semi = strchr(line, ';');
    /* kmsg: "pri,seq,usec,flags[,...];text" with digits and commas before ';' */
    if (semi && strspn(line, "0123456789,-cd+") >= (size_t)(semi - line) - 1 && semi - line < 64) {
        const char *c1 = strchr(line, ',');
        const char *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
        if (c2 && c2 < semi) *uptime = (double)strtoull(c2 + 1, NULL, 10) / 1e6;
        return semi + 1;
    }
    const char *s = line;
    while (*s == ' ') s++;
    if (*s == '[') {
        char *end;
        double t = strtod(s + 1, &end);
        if (end != s + 1 && *end == ']') {
            *uptime = t;
            s = end + 1;
            while (*s == ' ') s++;
        }
    }
    return s;
}

int sl__oom_parse_line(const char *line, sl__oom_event *ev) {
    double up;
    const char *m = message_of(line, &up);
    const char *k = strstr(m, "Killed process ");
    if (k && (strstr(m, "Out of memory") || strstr(m, "out of memory"))) {
        memset(ev, 0, sizeof *ev);
        ev->uptime_s = up;
        ev->memcg_oom = strstr(m, "Memory cgroup out of memory") != NULL;
        char *end;
        ev->pid = (int)strtol(k + 15, &end, 10);
        if (end == k + 15) return SL_OOM_LINE_NONE;
        const char *open = strchr(end, '(');
        /* The name may hold ')' itself: it ends at the last ')' before " total-vm". */
        const char *tv = strstr(end, "total-vm:");
        const char *close = NULL;
        for (const char *q = open; q && (!tv || q < tv); q = strchr(q + 1, ')')) close = q;
        if (open && close && close > open) {
            size_t n = (size_t)(close - open - 1);
            if (n >= sizeof ev->name) n = sizeof ev->name - 1;
            memcpy(ev->name, open + 1, n);
            ev->name[n] = 0;
        }
        ev->total_vm = kb_after(m, "total-vm:");
        ev->anon_rss = kb_after(m, "anon-rss:");
        ev->file_rss = kb_after(m, "file-rss:");
        ev->shmem_rss = kb_after(m, "shmem-rss:");
        return SL_OOM_LINE_KILLED;
    }
    const char *o = strstr(m, "oom-kill:");
    if (o) {
        memset(ev, 0, sizeof *ev);
        ev->uptime_s = up;
        o += 9;
        kv_after(o, "constraint", ev->constraint, sizeof ev->constraint);
        kv_after(o, "task_memcg", ev->memcg, sizeof ev->memcg);
        kv_after(o, "task", ev->name, sizeof ev->name);
        char pid[24];
        if (!kv_after(o, "pid", pid, sizeof pid)) return SL_OOM_LINE_NONE;
        ev->pid = atoi(pid);
        return SL_OOM_LINE_CONSTRAINT;
    }
    return SL_OOM_LINE_NONE;
}

/* Joins each constraint line with the kill line that follows it and keeps
 * the last max kills (oldest first). */
typedef struct collector {
    sl__oom_event pend;
    int have_pend;
    size_t seen;
    sl__oom_event *out;
    size_t max;
} collector;

static void feed(collector *c, const char *line) {
    sl__oom_event ev;
    int kind = sl__oom_parse_line(line, &ev);
    if (kind == SL_OOM_LINE_CONSTRAINT) {
        c->pend = ev;
        c->have_pend = 1;
    } else if (kind == SL_OOM_LINE_KILLED) {
        if (c->have_pend && c->pend.pid == ev.pid) {
            memcpy(ev.constraint, c->pend.constraint, sizeof ev.constraint);
            memcpy(ev.memcg, c->pend.memcg, sizeof ev.memcg);
        }
        c->have_pend = 0;
        if (c->max) {
            if (c->seen >= c->max) memmove(c->out, c->out + 1, (c->max - 1) * sizeof *c->out);
            c->out[c->seen < c->max ? c->seen : c->max - 1] = ev;
        }
        c->seen++;
    }
}

size_t sl__oom_scan(const char *text, size_t len, sl__oom_event *out, size_t max) {
    collector c = {.out = out, .max = max};
    size_t pos = 0;
    char line[1024];
    while (sl__next_line(text, len, &pos, line, sizeof line)) feed(&c, line);
    return c.seen;
}

long sl__oom_read_kmsg(const char *dev, sl__oom_event *out, size_t max) {
    int fd = open(dev, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return SL_EIO;
    /* One record per read, parsed at once: the ring buffer is never held. */
    collector c = {.out = out, .max = max};
    char rec[8192];
    for (;;) {
        ssize_t r = read(fd, rec, sizeof rec - 1);
        if (r < 0) {
            if (errno == EINTR || errno == EPIPE) continue; /* EPIPE: records overwritten */
            break;                                         /* EAGAIN: end of the buffer */
        }
        if (r == 0) break;
        rec[r] = 0;
        char *nl = strchr(rec, '\n');
        if (nl) *nl = 0; /* continuation lines (" KEY=...") are not needed */
        feed(&c, rec);
    }
    close(fd);
    /* Boot-relative times -> Unix time. */
    struct timespec rt, bt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_BOOTTIME, &bt);
    double boot = (double)rt.tv_sec + rt.tv_nsec / 1e9 - ((double)bt.tv_sec + bt.tv_nsec / 1e9);
    size_t n = c.seen < max ? c.seen : max;
    for (size_t i = 0; i < n; i++)
        if (out[i].uptime_s >= 0) out[i].wall = boot + out[i].uptime_s;
    return (long)c.seen;
}

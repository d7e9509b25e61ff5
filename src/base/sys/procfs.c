/* procfs parsers and readers. See procfs.h. */
#include "base/sys/procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/text.h"
#include "sluice.h"

/* Value in kB of a "Key:   1234 kB" line, in bytes; returns 0 and leaves *v
 * untouched when the line does not start with key. */
static int kb_field(const char *line, const char *key, uint64_t *v) {
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) != 0 || line[kl] != ':') return 0;
    const char *p = line + kl + 1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(p, &end, 10);
    if (end == p || errno) return 0;
    while (*end == ' ' || *end == '\t') end++;
    /* Every size in these files is in kB; a bare number is bytes (never
     * seen in practice, but do not scale it). */
    if (end[0] == 'k' && end[1] == 'B') {
        if (n > UINT64_MAX / 1024) return 0;
        n *= 1024;
    }
    *v += n;
    return 1;
}

int sl__smaps_parse(const char *text, size_t len, sl__smaps *out) {
    memset(out, 0, sizeof *out);
    int seen = 0;
    char line[256];
    size_t pos = 0;
    while (sl__next_line(text, len, &pos, line, sizeof line)) {
        seen |= kb_field(line, "Rss", &out->rss);
        seen |= kb_field(line, "Pss", &out->pss);
        kb_field(line, "Pss_Anon", &out->pss_anon);
        kb_field(line, "Pss_File", &out->pss_file);
        kb_field(line, "Pss_Shmem", &out->pss_shmem);
        kb_field(line, "Shared_Clean", &out->shared_clean);
        kb_field(line, "Shared_Dirty", &out->shared_dirty);
        kb_field(line, "Private_Clean", &out->private_clean);
        kb_field(line, "Private_Dirty", &out->private_dirty);
        kb_field(line, "Swap", &out->swap);
        kb_field(line, "SwapPss", &out->swap_pss);
    }
    return seen ? 0 : SL_EPARSE;
}

int sl__meminfo_parse(const char *text, size_t len, sl__meminfo *out) {
    memset(out, 0, sizeof *out);
    int have_total = 0, have_avail = 0;
    uint64_t cached = 0, buffers = 0;
    char line[256];
    size_t pos = 0;
    while (sl__next_line(text, len, &pos, line, sizeof line)) {
        have_total |= kb_field(line, "MemTotal", &out->total);
        kb_field(line, "MemFree", &out->free);
        have_avail |= kb_field(line, "MemAvailable", &out->available);
        kb_field(line, "SwapTotal", &out->swap_total);
        kb_field(line, "SwapFree", &out->swap_free);
        kb_field(line, "Shmem", &out->shmem);
        kb_field(line, "Cached", &cached);
        kb_field(line, "Buffers", &buffers);
    }
    if (!have_total) return SL_EPARSE;
    if (!have_avail) out->available = out->free + cached + buffers;
    if (out->available > out->total) out->available = out->total;
    return 0;
}

int sl__procstat_parse(const char *text, size_t len, int *pid, int *ppid, char *comm,
                       size_t commlen, uint64_t *starttime) {
    char buf[1024];
    size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
    memcpy(buf, text, n);
    buf[n] = 0;
    char *open = strchr(buf, '(');
    char *close = strrchr(buf, ')');
    if (!open || !close || close < open || close[1] != ' ') return SL_EPARSE;
    char *end;
    long p = strtol(buf, &end, 10);
    if (end == buf || p <= 0) return SL_EPARSE;
    if (pid) *pid = (int)p;
    if (comm && commlen) {
        size_t cl = (size_t)(close - open - 1);
        if (cl >= commlen) cl = commlen - 1;
        memcpy(comm, open + 1, cl);
        comm[cl] = 0;
    }
    /* After ") ": field 3 state, 4 ppid, ..., 22 starttime. */
    char *s = close + 2;
    int field = 3;
    long pp = -1;
    unsigned long long st = 0;
    while (*s && field <= 22) {
        if (field == 4) pp = strtol(s, NULL, 10);
        if (field == 22) st = strtoull(s, NULL, 10);
        char *sp = strchr(s, ' ');
        if (!sp) break;
        s = sp + 1;
        field++;
    }
    if (pp < 0) return SL_EPARSE;
    if (ppid) *ppid = (int)pp;
    if (starttime) *starttime = st;
    return 0;
}

int sl__read_text(const char *path, char *buf, size_t cap, size_t *len) {
    *len = 0;
    if (cap) buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return (errno == ENOENT || errno == ESRCH || errno == ENOTDIR) ? SL_ENOENT : SL_EIO;
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            /* A process that exits between open and read gives ESRCH. */
            return e == ESRCH ? SL_ENOENT : SL_EIO;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *len = got;
    return 0;
}

int sl__smaps_read(const char *procroot, int pid, sl__smaps *out) {
    char path[256], buf[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/%d/smaps_rollup", procroot, pid);
    int rc = sl__read_text(path, buf, sizeof buf, &len);
    if (rc) return rc;
    /* A kernel thread (or a zombie) has an empty rollup: no memory. */
    if (len == 0) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    return sl__smaps_parse(buf, len, out);
}

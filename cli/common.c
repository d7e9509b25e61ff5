#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"

/* snprintf into err when there is one. */
static void msg(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msg(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

void sl_cli_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

static uint64_t status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            unsigned long long kb;
            if (sscanf(line + n + 1, "%llu", &kb) == 1) v = kb * 1024;
            break;
        }
    fclose(f);
    return v;
}

uint64_t sl_cli_rss_bytes(void) { return status_kb("VmRSS"); }
uint64_t sl_cli_peak_rss_bytes(void) { return status_kb("VmHWM"); }

double sl_cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a regular file";
}

int sl_cli_open_file(const char *path, uint64_t max, int *fd, uint64_t *size, char *err, size_t errlen) {
    *fd = -1;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (f < 0) {
        int e = errno;
        if (e == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a socket */
            msg(err, errlen, "%s is %s, not a regular file", path, file_kind(st.st_mode));
        else
            msg(err, errlen, "cannot open %s: %s", path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? SL_ENOENT : SL_EIO;
    }
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        msg(err, errlen, "cannot stat %s: %s", path, strerror(e));
        return SL_EIO;
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        msg(err, errlen, "%s is %s, not a regular file", path, file_kind(st.st_mode));
        return SL_EIO;
    }
    if ((uint64_t)st.st_size > max) {
        close(f);
        msg(err, errlen, "%s is %llu bytes, over the limit of %llu", path, (unsigned long long)st.st_size,
                (unsigned long long)max);
        return SL_ELIMIT;
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return 0;
}

int sl_cli_read_fd(int fd, void *buf, uint64_t size, char *err, size_t errlen) {
    uint64_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, (char *)buf + got, (size_t)(size - got < ((uint64_t)1 << 30) ? size - got : (uint64_t)1 << 30), (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            msg(err, errlen, "read failed after %llu of %llu bytes: %s", (unsigned long long)got,
                    (unsigned long long)size, r < 0 ? strerror(errno) : "the file shrank");
            return SL_EIO;
        }
        got += (uint64_t)r;
    }
    return 0;
}

int sl_cli_read_file(const char *path, uint64_t max, unsigned char **data, size_t *len, char *err, size_t errlen) {
    int fd;
    uint64_t size;
    int rc = sl_cli_open_file(path, max, &fd, &size, err, errlen);
    if (rc) return rc;
    unsigned char *b = size < SIZE_MAX ? malloc(size ? (size_t)size : 1) : NULL;
    if (!b) {
        close(fd);
        msg(err, errlen, "no memory for the %llu bytes of %s", (unsigned long long)size, path);
        return SL_ENOMEM;
    }
    rc = sl_cli_read_fd(fd, b, size, err, errlen);
    close(fd);
    if (rc) {
        free(b);
        return rc;
    }
    *data = b;
    *len = (size_t)size;
    return 0;

}

char *sl_cli_read_text(const char *path, size_t max) {
    unsigned char *data;
    size_t len;
    int rc = sl_cli_read_file(path, max, &data, &len, NULL, 0);
    if (rc) {
        errno = rc == SL_ELIMIT ? EFBIG : rc == SL_ENOENT ? ENOENT : rc == SL_ENOMEM ? ENOMEM : EINVAL;
        return NULL;
    }
    char *t = realloc(data, len + 1);
    if (!t) {
        free(data);
        errno = ENOMEM;
        return NULL;
    }
    t[len] = 0;
    return t;
}

int sl_cli_whole(const char *cmd, const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "sluice %s: %s takes a whole number from %llu to %llu, not '%s'\n", cmd, flag,
                (unsigned long long)lo, (unsigned long long)hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

char *sl_cli_read_fields(const char *cmd, const char *path) {
    char *text = sl_cli_read_text(path, (size_t)1 << 20);
    if (!text)
        fprintf(stderr, "sluice %s: --fields %s: %s\n", cmd, path,
                errno == EFBIG ? "larger than 1 MiB" : errno == EINVAL ? "not a regular file" : strerror(errno));
    return text;
}

const char *sl_cli_reason(int rc, const char *err, char *buf, size_t len) {
    const char *code = sl_strerror(rc);
    if (!err || !err[0]) snprintf(buf, len, "%s", code);
    else if (strstr(err, code)) snprintf(buf, len, "%s", err);
    else snprintf(buf, len, "%s: %s", code, err);
    return buf;
}

void sl_cli_error(const char *cmd, int rc, const char *err) {
    char buf[1200];
    fprintf(stderr, "sluice %s: %s\n", cmd, sl_cli_reason(rc, err, buf, sizeof buf));
}

/* ---- unknown flags ------------------------------------------------------------ */

#define WORD_MAX 48 /* longer words are compared by their first WORD_MAX characters */

/* word without its leading dashes, lower case, '_' as '-', into out. */
static size_t fold(const char *word, char out[WORD_MAX + 1]) {
    while (*word == '-') word++;
    size_t n = 0;
    for (; *word && n < WORD_MAX; word++) {
        char c = *word == '_' ? '-' : *word;
        out[n++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    out[n] = 0;
    return n;
}

/* Edits (insert, delete, substitute, swap two adjacent) from a to b. */
static int distance(const char *a, size_t na, const char *b, size_t nb) {
    int d[WORD_MAX + 1][WORD_MAX + 1];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

const char *sl_cli_closest(const char *word, const char *const *cands, const char *const *more) {
    char w[WORD_MAX + 1], c[WORD_MAX + 1];
    size_t nw = fold(word, w);
    const char *best = NULL, *prefix_of = NULL;
    int best_d = INT32_MAX, prefixes = 0;
    for (const char *const *list = cands; list; list = list == cands ? more : NULL)
        for (const char *const *p = list; *p; p++) {
            size_t nc = fold(*p, c);
            int d = distance(w, nw, c, nc);
            if (d < best_d) best_d = d, best = *p;
            if (nw >= 3 && nw < nc && !strncmp(c, w, nw)) prefixes++, prefix_of = *p;
        }
    if (best && best_d > 0 && (best_d <= 2 || (size_t)best_d * 3 <= nw)) return best;
    return prefixes == 1 ? prefix_of : NULL;
}

/* What PyTorch's DataLoader (and habit) call options sluice has under
 * another name: the flag to suggest, or a sentence when there is no such
 * flag. A hint is given only by a command that has `flag`. */
static const struct {
    const char *name, *flag, *hint;
} habits[] = {
    {"shuffle", "--no-shuffle",
     "sluice shuffles by default (a seeded order: --seed S); --no-shuffle keeps the dataset's order"},
    {"batchsize", "--batch", NULL},
    {"batch-size", "--batch", NULL},
    {"bs", "--batch", NULL},
    {"num-workers", "--workers", NULL},
    {"nworkers", "--workers", NULL},
    {"threads", "--workers", NULL},
    {"prefetch-factor", "--prefetch", NULL},
    {"num-epochs", "--epochs", NULL},
    {"max-steps", "--batches", NULL},
    {"steps", "--batches", NULL},
    {"memory", "--budget", NULL},
    {"mem", "--budget", NULL},
};

int sl_cli_flag_known(const char *flag, const char *const *known, const char *const *more) {
    for (const char *const *list = known; list; list = list == known ? more : NULL)
        for (const char *const *p = list; *p; p++)
            if (!strcmp(*p, flag)) return 1;
    return 0;
}

void sl_cli_unknown_flag(const char *cmd, const char *flag, const char *const *known, const char *const *more) {
    char w[WORD_MAX + 1];
    fold(flag, w);
    for (size_t i = 0; i < sizeof habits / sizeof habits[0]; i++) {
        if (strcmp(w, habits[i].name) || !sl_cli_flag_known(habits[i].flag, known, more)) continue;
        if (habits[i].hint) fprintf(stderr, "sluice %s: unknown option %s: %s\n", cmd, flag, habits[i].hint);
        else fprintf(stderr, "sluice %s: unknown option %s: did you mean %s?\n", cmd, flag, habits[i].flag);
        return;
    }
    const char *near = sl_cli_closest(flag, known, more);
    if (near) fprintf(stderr, "sluice %s: unknown option %s: did you mean %s?\n", cmd, flag, near);
    else fprintf(stderr, "sluice %s: unknown option %s\n", cmd, flag);
}

int sl_cli_path_join(char *buf, size_t len, const char *dir, const char *name) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "shards//" -> "shards"; "/" stays */
    int w = snprintf(buf, len, "%.*s%s%s", (int)n, dir, n == 0 || dir[n - 1] == '/' ? "" : "/", name);
    return w < 0 || (size_t)w >= len ? -1 : 0;
}

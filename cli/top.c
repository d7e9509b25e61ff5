/*
 * sluice top [PID] [--interval S] [--warn PCT] [--once] [--json] [--log FILE]
 *            [--count N] [--rows N] [--nvml-lib NAME]
 * sluice top --plot OUT.svg (--log FILE | FILE)
 *
 * Memory of a training job as the kernel sees it: system memory, the memory
 * cgroup and the effective limit, PSI, the process tree's PSS/RSS/USS, GPU
 * memory, kernel OOM kills, the governors of sluice budgets, and a warning
 * with the time left at the current slope. The work is in src/monitor/, reached
 * through its one public header; this file parses flags and loops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "sluice.h"
#include "sluice_monitor.h"

static const char *const flags[] = {"--interval", "--warn", "--once", "--json", "--log",
                                    "--count", "--rows", "--plot", "--nvml-lib", "--help", NULL};

static void usage(FILE *f) {
    fputs("usage: sluice top [PID] [--interval S] [--warn PCT] [--once] [--json] [--log FILE]\n"
          "                  [--count N] [--rows N] [--nvml-lib NAME]\n"
          "       sluice top --plot OUT.svg (--log FILE | FILE)\n"
          "  PID          root of the process tree to watch (a trainer and its workers);\n"
          "               without it, the machine's largest process trees by PSS\n"
          "  --interval S seconds between samples (1)\n"
          "  --warn PCT   warn when usage passes PCT% of the effective limit (90)\n"
          "  --once       one sample, then exit\n"
          "  --json       JSON (one object a line) instead of the table\n"
          "  --log FILE   append each sample to FILE as a JSON line\n"
          "  --count N    stop after N samples\n"
          "  --rows N     process rows shown (20)\n"
          "  --nvml-lib   NVML library to load (libnvidia-ml.so.1)\n"
          "  --plot OUT   draw the memory timeline of a log as SVG, then exit\n"
          "Governed sluice budgets of the watched processes are shown from their status\n"
          "files in $SLUICE_STATUS_DIR, else /dev/shm, else $XDG_RUNTIME_DIR.\n",
          f);
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v == v)) return -1;
    *out = v;
    return 0;
}

/* Where the SVG goes: a regular file (or a new one) is written beside its
 * name and renamed into place once complete, so a failed plot leaves no
 * partial or empty file; anything else (/dev/stdout, a pipe) is written in
 * place. Returns the stream, or NULL with errno. */
static FILE *open_out(const char *svg_path, char *tmp, size_t tmplen) {
    struct stat st;
    tmp[0] = 0;
    if (stat(svg_path, &st) == 0 && !S_ISREG(st.st_mode)) return fopen(svg_path, "w");
    if ((size_t)snprintf(tmp, tmplen, "%s.tmpXXXXXX", svg_path) >= tmplen) {
        tmp[0] = 0;
        errno = ENAMETOOLONG;
        return NULL;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        tmp[0] = 0;
        return NULL;
    }
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        tmp[0] = 0;
        errno = e;
    }
    return f;
}

static int plot(const char *log_path, const char *svg_path) {
    FILE *in = fopen(log_path, "r");
    if (!in) {
        fprintf(stderr, "sluice top: cannot read %s: %s\n", log_path, strerror(errno));
        return 1;
    }
    char tmp[4096];
    FILE *out = open_out(svg_path, tmp, sizeof tmp);
    if (!out) {
        fprintf(stderr, "sluice top: cannot write %s: %s\n", svg_path, strerror(errno));
        fclose(in);
        return 1;
    }
    size_t points = 0, skipped = 0;
    int rc = sl_top_plot(in, out, &points, &skipped);
    fclose(in);
    errno = 0;
    int werr = fflush(out) != 0 || ferror(out) ? (errno ? errno : EIO) : 0;
    if (fclose(out) != 0 && !werr) werr = errno ? errno : EIO;
    if (!rc && !werr && tmp[0] && rename(tmp, svg_path) != 0) werr = errno;
    if (rc || werr) {
        if (tmp[0]) unlink(tmp);
        if (werr && rc != SL_EIO)
            fprintf(stderr, "sluice top: cannot write %s: %s\n", svg_path, strerror(werr));
        else
            fprintf(stderr, "sluice top: plot %s from %s: %s\n", svg_path, log_path,
                    rc == SL_EEMPTY ? "the log holds no sample" : rc == SL_EIO ? "cannot read the log" : sl_strerror(rc));
        return 1;
    }
    fprintf(stderr, "sluice top: %s: %zu samples%s\n", svg_path, points, skipped ? " (some lines skipped)" : "");
    return 0;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

int sl_cli_top(int argc, char **argv) {
    sl_top_opts o;
    sl_top_opts_init(&o);
    double interval = 1;
    int once = 0, json = 0, rows = 20;
    long count = -1;
    const char *log_path = NULL, *plot_path = NULL, *positional = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int need = 0;
        if (!strcmp(a, "--once")) once = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--interval")) {
            need = 1;
            if (v && (parse_double(v, &interval) || interval < 0.05 || interval > 86400)) {
                fprintf(stderr, "sluice top: --interval takes seconds from 0.05 to 86400, not %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--warn")) {
            need = 1;
            if (v && (parse_double(v, &o.warn_pct) || o.warn_pct <= 0 || o.warn_pct > 100)) {
                fprintf(stderr, "sluice top: --warn takes a percent in (0, 100], not %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--count") || !strcmp(a, "--rows")) {
            need = 1;
            char *end;
            long n = v ? strtol(v, &end, 10) : 0;
            if (v && (*end || n < 1 || n > 100000000)) {
                fprintf(stderr, "sluice top: %s takes a positive count, not %s\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--count")) count = n;
            else rows = (int)n;
        } else if (!strcmp(a, "--log")) need = 1, log_path = v;
        else if (!strcmp(a, "--plot")) need = 1, plot_path = v;
        else if (!strcmp(a, "--nvml-lib")) need = 1, o.nvml_lib = v;
        else if (a[0] == '-') {
            sl_cli_unknown_flag("top", a, flags, NULL);
            usage(stderr);
            return 2;
        } else if (!positional) positional = a;
        else {
            fprintf(stderr, "sluice top: one PID (or one log file with --plot), not %s too\n", a);
            return 2;
        }
        if (need) {
            if (!v) {
                fprintf(stderr, "sluice top: %s needs a value\n", a);
                return 2;
            }
            i++;
        }
    }
    if (plot_path) {
        const char *from = log_path ? log_path : positional;
        if (!from) {
            fprintf(stderr, "sluice top: --plot needs a log: --log FILE or FILE\n");
            return 2;
        }
        return plot(from, plot_path);
    }
    if (positional) {
        char *end;
        long pid = strtol(positional, &end, 10);
        if (*end || pid <= 0 || pid > 0x3fffffff) {
            fprintf(stderr, "sluice top: not a PID: %s\n", positional);
            return 2;
        }
        o.pid = (int)pid;
    }
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "a"))) {
        fprintf(stderr, "sluice top: cannot append to %s: %s\n", log_path, strerror(errno));
        return 1;
    }
    sl_top *t;
    int rc = sl_top_create(&o, &t);
    if (rc) {
        fprintf(stderr, "sluice top: %s\n", sl_strerror(rc));
        if (log) fclose(log);
        return 1;
    }
    int tty = !json && isatty(STDOUT_FILENO);
    int status = 0;
    if (once) count = 1;
    for (long n = 0; count < 0 || n < count; n++) {
        double start = sl_cli_now_s();
        rc = sl_top_sample(t);
        if (rc) {
            fprintf(stderr, "sluice top: sampling failed: %s\n", sl_strerror(rc));
            status = 1;
            break;
        }
        if (o.pid > 0 && !sl_top_root_found(t)) {
            fprintf(stderr, "sluice top: no process %d%s\n", o.pid, n ? " (it exited)" : "");
            status = n ? 0 : 1;
            break;
        }
        if (log) {
            sl_top_json(t, log);
            fputc('\n', log);
            fflush(log);
        }
        if (json) {
            sl_top_json(t, stdout);
            fputc('\n', stdout);
        } else {
            /* On a terminal: home, the view, then clear what is left below. */
            if (tty) fputs(n ? "\033[H" : "\033[H\033[2J", stdout);
            sl_top_text(t, stdout, rows);
            if (tty) fputs("\033[J", stdout);
            else if (count != 1) fputc('\n', stdout);
        }
        fflush(stdout);
        if (count >= 0 && n + 1 >= count) break;
        sleep_s(interval - (sl_cli_now_s() - start));
    }
    sl_top_destroy(t);
    if (log && fclose(log)) {
        fprintf(stderr, "sluice top: writing %s failed\n", log_path);
        status = 1;
    }
    return status;
}

/* Timeline SVG writer. See svg.h. */
#include "monitor/svg.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/util.h"
#include "monitor/json.h"
#include "sluice.h"

enum { S_PSS, S_USAGE, S_LIMIT, S_WARN, S_GPU, S_N };
static const char *const s_name[S_N] = {"tree PSS", "usage", "limit", "warn", "GPU memory used"};
static const char *const s_color[S_N] = {"#1f77b4", "#7f7f7f", "#d62728", "#ff7f0e", "#2ca02c"};

typedef struct point {
    double t;
    double v[S_N]; /* NAN where the line did not hold it */
} point;

/* Read one line into *buf (grown from b as needed). 1 with a line, 0 at EOF. */
static int read_line(FILE *f, sl__budget *b, char **buf, size_t *cap, size_t *len, int *err) {
    *len = 0;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (*len + 1 >= *cap) {
            size_t nc = *cap ? *cap * 2 : 4096;
            if (nc > ((size_t)16 << 20)) { /* a 16 MiB line is not a top sample */
                *err = SL_ELIMIT;
                return 0;
            }
            char *p = sl__realloc(b, *buf, nc, SL_MEM_OTHER);
            if (!p) {
                *err = SL_EBUDGET;
                return 0;
            }
            *buf = p;
            *cap = nc;
        }
        (*buf)[(*len)++] = (char)c;
    }
    if (*buf) (*buf)[*len] = 0;
    return c != EOF || *len > 0;
}

static double get(const char *s, size_t n, const char *path) {
    double v;
    return sl__json_number(s, n, path, &v) == 0 ? v : NAN;
}

static double ymap(double v, double ymax, double top, double h) { return top + h - v / ymax * h; }

int sl__svg_timeline(FILE *log, FILE *out, sl__budget *b, size_t *points, size_t *skipped) {
    *points = *skipped = 0;
    char *line = NULL;
    size_t cap = 0, len, n = 0, pcap = 0;
    point *pts = NULL;
    int err = 0;
    while (read_line(log, b, &line, &cap, &len, &err)) {
        double t = get(line, len, "time");
        if (isnan(t)) {
            if (len) (*skipped)++;
            continue;
        }
        if (n == pcap) {
            size_t nc = pcap ? pcap * 2 : 1024;
            uint64_t bytes;
            if (sl__mul(nc, sizeof *pts, &bytes) || bytes > SIZE_MAX) {
                err = SL_EOVERFLOW;
                break;
            }
            point *np = sl__realloc(b, pts, (size_t)bytes, SL_MEM_OTHER);
            if (!np) {
                err = SL_EBUDGET;
                break;
            }
            pts = np;
            pcap = nc;
        }
        point *p = &pts[n++];
        p->t = t;
        p->v[S_PSS] = get(line, len, "tree.pss_bytes");
        p->v[S_USAGE] = get(line, len, "limit.usage_bytes");
        p->v[S_LIMIT] = get(line, len, "limit.bytes");
        double w = get(line, len, "limit.warn_pct");
        p->v[S_WARN] = isnan(w) || isnan(p->v[S_LIMIT]) ? NAN : p->v[S_LIMIT] * w / 100;
        p->v[S_GPU] = get(line, len, "gpu_used_bytes");
    }
    sl__free(b, line);
    if (!err && ferror(log)) err = SL_EIO;
    if (!err && n == 0) err = SL_EEMPTY;
    if (err) {
        sl__free(b, pts);
        return err;
    }
    double t0 = pts[0].t, t1 = pts[n - 1].t, ymax = 0;
    for (size_t i = 0; i < n; i++)
        for (int s = 0; s < S_N; s++)
            if (!isnan(pts[i].v[s]) && pts[i].v[s] > ymax) ymax = pts[i].v[s];
    if (ymax <= 0) ymax = 1;
    ymax *= 1.05;
    double span = t1 > t0 ? t1 - t0 : 1;
    const double W = 960, H = 480, L = 90, R = 20, T = 40, B = 60, pw = W - L - R, ph = H - T - B;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">sluice top: memory over %.0f s (%zu samples)</text>\n", L, span, n);
    /* Axes with 5 ticks each. */
    fprintf(out, "<g stroke=\"#ccc\">\n");
    for (int i = 0; i <= 5; i++) {
        double y = T + ph - ph * i / 5;
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, y, L + pw, y);
    }
    fprintf(out, "</g>\n");
    for (int i = 0; i <= 5; i++) {
        char lab[24];
        double y = T + ph - ph * i / 5;
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 6, y + 4,
                sl__fmt_bytes((uint64_t)(ymax * i / 5), lab, sizeof lab));
        double x = L + pw * i / 5;
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f s</text>\n", x, T + ph + 18, span * i / 5);
    }
    fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T + ph, L + pw, T + ph);
    fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, T + ph);
    /* One polyline a series; a missing value breaks the line. */
    int legend = 0;
    for (int s = 0; s < S_N; s++) {
        int open = 0, any = 0;
        for (size_t i = 0; i < n; i++) {
            double v = pts[i].v[s];
            if (isnan(v)) {
                if (open) fputs("\"/>\n", out);
                open = 0;
                continue;
            }
            if (!open)
                fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", s_color[s],
                        s == S_WARN ? " stroke-dasharray=\"6,4\"" : "");
            open = any = 1;
            fprintf(out, "%.1f,%.1f ", L + pw * (pts[i].t - t0) / span, ymap(v, ymax, T, ph));
        }
        if (open) fputs("\"/>\n", out);
        if (any) {
            double y = H - 22;
            double x = L + 170 * legend++;
            fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"3\"/>", x, y, x + 20, y, s_color[s]);
            fprintf(out, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", x + 26, y + 4, s_name[s]);
        }
    }
    fputs("</svg>\n", out);
    sl__free(b, pts);
    *points = n;
    return ferror(out) ? SL_EIO : 0;
}

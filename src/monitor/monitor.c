/* The monitor's public calls (sluice_monitor.h) over top.c and svg.c. */
#include <stdlib.h>

#include "base/mem.h"
#include "monitor/svg.h"
#include "monitor/top.h"
#include "sluice.h"
#include "sluice_monitor.h"

/* What sl_top_plot may hold while it draws: the points of a long log. */
#define SL_PLOT_BUDGET ((uint64_t)256 << 20)

struct sl_top {
    sl__top t;
};

void sl_top_opts_init(sl_top_opts *o) { sl__top_opts_init(o); }

int sl_top_create(const sl_top_opts *o, sl_top **out) {
    *out = NULL;
    sl_top *t = malloc(sizeof *t);
    if (!t) return SL_ENOMEM;
    int rc = sl__top_init(&t->t, o);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void sl_top_destroy(sl_top *t) {
    if (!t) return;
    sl__top_fini(&t->t);
    free(t);
}

int sl_top_sample(sl_top *t) { return sl__top_sample(&t->t); }
int sl_top_root_found(const sl_top *t) { return t->t.root_found; }
void sl_top_json(const sl_top *t, FILE *f) { sl__top_json(&t->t, f); }
void sl_top_text(const sl_top *t, FILE *f, int rows) { sl__top_text(&t->t, f, rows); }

int sl_top_plot(FILE *log, FILE *out, size_t *points, size_t *skipped) {
    sl__budget b;
    int rc = sl__budget_init(&b, SL_PLOT_BUDGET);
    if (rc) return rc;
    rc = sl__svg_timeline(log, out, &b, points, skipped);
    sl__budget_fini(&b);
    return rc;
}

/*
 * test_abi's old side: a program built against 0.1's header (sluice-0.1.h,
 * kept byte for byte), linked against the library built now as a 0.1
 * program would be: every call below binds to the symbol 0.1's header
 * names, and every struct has 0.1's layout. Each function reports what it
 * read (report.h) for test_abi.c, built against today's header, to compare
 * with what it reads itself from the same objects.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fields_0_1.h"
#include "report.h"
#include "sluice-0.1.h"

#if SL_VERSION_NUMBER != 100
#error "old_0_1.c must be built against 0.1's header"
#endif

#define RD_MEM_COUNT(s) SL_MEM__COUNT
#include "reads.inc"

/* ---- layout ---------------------------------------------------------------- */

void abi01_layout(abi_report *r) {
#define XS(T) abi_u(r, sizeof(T), #T ".sizeof");
#define X(T, f) abi_field(r, #T, #f, offsetof(T, f), sizeof(((T *)0)->f), __alignof__(((T *)0)->f));
#define XR(T, f, now) X(T, f)
    SL_ABI_STRUCTS_0_1
#undef X
#define XE(f) abi_field(r, "recipe_0_1", #f, offsetof(sl_image_recipe, f), sizeof(((sl_image_recipe *)0)->f), \
                        __alignof__(((sl_image_recipe *)0)->f));
    abi_u(r, sizeof(sl_image_recipe), "recipe_0_1.sizeof");
    SL_ABI_RECIPE_0_1
#undef XE
#undef XR
#undef XS
}

/* ---- a loader -------------------------------------------------------------- */

/* The loader both sides make (set_config), with 0.1's way to ask for a
 * recipe: the fields of the embedded cfg.recipe. */
static void config_0_1(sl_config *cfg, const char *root, void *shared_budget) {
    sl_config_init(cfg);
    set_config(cfg, root, shared_budget);
    set_recipe(&cfg->recipe);
}

int abi01_loader_create(const char *root, void *shared_budget, void **ld, char *err, size_t errlen) {
    sl_config cfg;
    config_0_1(&cfg, root, shared_budget);
    sl_loader *l = NULL;
    int rc = sl_loader_create(&cfg, &l, err, errlen);
    *ld = l;
    return rc;
}

void abi01_loader_destroy(void *ld) { sl_loader_destroy(ld); }

int abi01_next(void *ld, void **batch) {
    sl_batch *b = NULL;
    int rc = sl_loader_next(ld, &b);
    *batch = b;
    return rc;
}

void abi01_release(void *ld, void *batch) { sl_loader_release(ld, batch); }

void abi01_batch(void *batch, abi_report *r) { rd_batch(batch, r); }

int abi01_stats(void *ld, abi_report *r) {
    sl_stats st;
    memset(&st, 0xA5, sizeof st);
    int rc = sl_loader_stats(ld, &st);
    if (!rc) rd_stats(ld, &st, r);
    return rc;
}

void abi01_errors(void *ld, abi_report *r) {
    sl_error_record recs[16];
    memset(recs, 0xA5, sizeof recs);
    size_t n = sl_loader_errors(ld, 0, recs, 16);
    abi_u(r, n, "errors.count");
    for (size_t k = 0; k < n; k++) rd_record(r, "errors", k, &recs[k]);
    /* from the second on: first counts records */
    n = sl_loader_errors(ld, 1, recs, 16);
    abi_u(r, n, "errors_from_1.count");
    for (size_t k = 0; k < n; k++) rd_record(r, "errors_from_1", k, &recs[k]);
    sl_error_record last;
    int rc = sl_loader_last_error(ld, &last);
    abi_i(r, rc, "last_error.rc");
    if (!rc) rd_record(r, "last_error", 0, &last);
}

int abi01_get_state(void *ld, abi_report *r) {
    sl_state st;
    memset(&st, 0xA5, sizeof st);
    int rc = sl_loader_get_state(ld, &st);
    if (!rc) rd_state(&st, r);
    return rc;
}

/* Take the state, deliver one batch, set the state back, deliver again:
 * both deliveries are the same batch. 0, or a code; -1000 when the two
 * differ. */
int abi01_resume(void *ld) {
    sl_state st;
    int rc = sl_loader_get_state(ld, &st);
    if (rc) return rc;
    sl_batch *b;
    if ((rc = sl_loader_next(ld, &b))) return rc;
    uint64_t sum = sl_batch_checksum(b), index = sl_batch_index(b);
    sl_loader_release(ld, b);
    if ((rc = sl_loader_set_state(ld, &st))) return rc;
    if ((rc = sl_loader_next(ld, &b))) return rc;
    int same = sl_batch_checksum(b) == sum && sl_batch_index(b) == index;
    sl_loader_release(ld, b);
    /* a state the loader cannot be at is refused */
    st.batch = 1000000;
    if (sl_loader_set_state(ld, &st) != SL_ESTATE) return -1001;
    return same ? 0 : -1000;
}

int abi01_plan(const char *root, abi_report *r, char *err, size_t errlen) {
    sl_config cfg;
    config_0_1(&cfg, root, NULL);
    sl_plan p;
    memset(&p, 0xA5, sizeof p);
    int rc = sl_loader_plan(&cfg, &p, err, errlen);
    if (!rc) rd_plan(&p, r);
    return rc;
}

/* ---- images ---------------------------------------------------------------- */

void abi01_decode_opts(abi_report *r) {
    sl_decode_opts o;
    memset(&o, 0xA5, sizeof o);
    sl_decode_opts_init(&o);
    rd_decode_opts(r, &o, &o.recipe);
    abi_i(r, o.struct_size == sizeof o, "decode_opts.struct_size_is_sizeof"); /* each caller's own */
}

static void bad_recipe(sl_decode_opts *o) { o->recipe.height = 0; /* width without height */ }

int abi01_image(const void *data, size_t len, abi_report *r) {
    sl_image_info info;
    memset(&info, 0xA5, sizeof info);
    int rc = sl_image_probe(data, len, &info);
    if (rc) return rc;
    rd_image_info(&info, r);
    /* a train decode with 0.1's embedded recipe */
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_TRAIN;
    o.size = 32;
    o.seed = 3, o.index = 11;
    set_recipe(&o.recipe);
    return rd_image(data, len, &o, bad_recipe, r);
}

/* ---- video ----------------------------------------------------------------- */

void abi01_video_opts(abi_report *r) {
    sl_video_opts o;
    memset(&o, 0xA5, sizeof o);
    sl_video_opts_init(&o);
    rd_video_opts(&o, r);
}

int abi01_video(const char *path, abi_report *r) {
    sl_video_opts o;
    rd_clip_opts(&o);
    sl_video_info info;
    memset(&info, 0xA5, sizeof info);
    char err[256] = "";
    int rc = sl_video_probe(path, &o, &info, err, sizeof err);
    abi_i(r, rc, "video.probe.rc");
    abi_s(r, err, "video.probe.reason");
    if (rc) return rc;
    rd_video_info(&info, r);
    static unsigned char out[4 * 3 * 16 * 16];
    int64_t frames[4];
    sl_video_clip clip;
    memset(&clip, 0xA5, sizeof clip);
    clip.frame_index = frames;
    if ((rc = sl_video_decode(path, &o, out, sizeof out, &clip, err, sizeof err))) return rc;
    rd_clip(out, sizeof out, &clip, r);
    /* a limit: SL_ELIMIT, the same reason */
    o.max_frames = 2;
    rc = sl_video_probe(path, &o, &info, err, sizeof err);
    abi_i(r, rc, "video.limit.rc");
    abi_s(r, err, "video.limit.reason");
    return 0;
}

/* ---- budgets --------------------------------------------------------------- */

void abi01_governor_opts(abi_report *r) {
    sl_governor_opts o;
    memset(&o, 0xA5, sizeof o);
    sl_governor_opts_init(&o);
    rd_governor_opts(&o, r);
}

/* A governor that samples cgroup_dir once as it starts and then not for a
 * day: its readings stay as they were while both sides look. */
int abi01_budget_govern(void *budget, const char *cgroup_dir, char *err, size_t errlen) {
    sl_governor_opts o;
    sl_governor_opts_init(&o);
    o.period_ms = 86400000;
    o.margin = 64u << 20;
    o.cgroup_dir = cgroup_dir;
    return sl_budget_govern(budget, &o, err, errlen);
}

int abi01_budget(void *budget, abi_report *r) {
    sl_budget_info s;
    memset(&s, 0xA5, sizeof s);
    int rc = sl_budget_stats(budget, &s);
    if (rc) return rc;
    rd_budget(&s, r);
    sl_budget_event ev[8];
    memset(ev, 0xA5, sizeof ev);
    size_t n = sl_budget_events(budget, 0, ev, 8);
    abi_u(r, n, "events.count");
    for (size_t k = 0; k < n; k++) rd_event(&ev[k], k, r);
    return 0;
}

/* ---- sources --------------------------------------------------------------- */

int abi01_source(const char *manifest, abi_report *r, char *err, size_t errlen) {
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = manifest;
    cfg.budget = 16u << 20;
    sl_source *s;
    int rc = sl_source_open(&cfg, &s, err, errlen);
    if (rc) return rc;
    rd_source(s, r);
    sl_source_close(s);
    return 0;
}

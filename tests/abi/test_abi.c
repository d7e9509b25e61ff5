/*
 * The ABI test (docs/abi.md). One program, two headers: old_0_1.c is built
 * against 0.1's header (sluice-0.1.h, kept byte for byte), this file
 * against today's, and both are linked against libsluice.so as it is
 * built now, as a program built for 0.1 would run against it.
 *
 *  - layout: every field of 0.1's structs sits where 0.1 put it, with its
 *    size; fields added since lie past 0.1's size; nothing is missing
 *    (the fields of each struct tile it).
 *  - old_*: the 0.1 side drives the library (a loader with a recipe,
 *    stats with memory categories, error records, the state and a resume,
 *    plan, images, video, a governed budget and its events, sources) and
 *    every value it reads equals what this side reads from the same
 *    objects through today's calls. Values that move with time (seconds,
 *    rates) are read here before and after and must lie between.
 *  - new_header_old_library: a program built against today's header
 *    (probe_new.c) runs against the 0.1 library, built here from git.
 *  - exports: libsluice.so exports exactly the header's SL_API functions,
 *    every one of 0.1's among them.
 *  - cli_public_only: cli/ includes sluice.h, its own headers and, in
 *    top.c, the monitor's public header; it names nothing private.
 */
#include "fixture.h" /* first: its _GNU_SOURCE */

#include <dirent.h>
#include <math.h>
#include <stddef.h>

#include "bigimg.h"
#include "base/abi.h"
#include "fields_0_1.h"
#include "report.h"

#define MIB ((uint64_t)1 << 20)

/* ---- comparing reports ------------------------------------------------------ */

static int between(double x, double a, double b) { return (x >= a && x <= b) || (x >= b && x <= a); }

/* Every value in old is in a under its key and equal; with b (a second
 * reading of today's side after old's) a number may lie between a and b. */
static void same(const abi_report *old, const abi_report *a, const abi_report *b, const char *what) {
    if (old->n == 0) SL_FAIL("%s: the 0.1 side read nothing", what);
    for (size_t i = 0; i < old->n; i++) {
        const abi_val *o = &old->v[i], *x = abi_get(a, o->key), *y = b ? abi_get(b, o->key) : NULL;
        if (!x) SL_FAIL("%s: %s read by the 0.1 side, not by today's", what, o->key);
        if (x->kind != o->kind) SL_FAIL("%s: %s kinds %c and %c", what, o->key, o->kind, x->kind);
        if (!y) y = x;
        int ok = o->kind == 'u'   ? between((double)o->u, (double)x->u, (double)y->u) && (x != y || o->u == x->u)
                 : o->kind == 'i' ? o->i >= (x->i < y->i ? x->i : y->i) && o->i <= (x->i > y->i ? x->i : y->i)
                 : o->kind == 'd' ? between(o->d, x->d, y->d) || (isnan(o->d) && isnan(x->d))
                                  : !strcmp(o->s, x->s) || !strcmp(o->s, y->s);
        if (!ok) {
            if (o->kind == 's') SL_FAIL("%s: %s is \"%s\" through 0.1, \"%s\" now", what, o->key, o->s, x->s);
            SL_FAIL("%s: %s is %.17g through 0.1, %.17g (then %.17g) now", what, o->key,
                    o->kind == 'u' ? (double)o->u : o->kind == 'i' ? (double)o->i : o->d,
                    x->kind == 'u' ? (double)x->u : x->kind == 'i' ? (double)x->i : x->d,
                    y->kind == 'u' ? (double)y->u : y->kind == 'i' ? (double)y->i : y->d);
        }
    }
}

static uint64_t u_of(const abi_report *r, const char *key) {
    const abi_val *v = abi_get(r, key);
    if (!v) SL_FAIL("no %s", key);
    return v->kind == 'i' ? (uint64_t)v->i : v->u;
}

/* ---- layout ----------------------------------------------------------------- */

/* The fields added since 0.1, in order, at the end of their structs. */
#define SL_ABI_APPENDED                                                                                              \
    A(sl_config, recipe)                                                                                             \
    A(sl_decode_opts, recipe)                                                                                        \
    A(sl_decode_opts, crop_group)                                                                                    \
    A(sl_video_opts, crop_group)                                                                                     \
    A(sl_stats, mem_count)                                                                                           \
    A(sl_stats, mem)                                                                                                 \
    A(sl_stats, mem_peak)                                                                                            \
    A(sl_budget_info, mem_count)                                                                                     \
    A(sl_budget_info, mem)                                                                                           \
    A(sl_budget_info, mem_peak)                                                                                      \
    A(sl_config, order_begin)                                                                                        \
    A(sl_config, order_end)                                                                                          \
    A(sl_state, pad)                                                                                                 \
    A(sl_state, span_begin)                                                                                          \
    A(sl_state, span_end)                                                                                            \
    A(sl_state, gone_count)                                                                                          \
    A(sl_state, gone)                                                                                                \
    A(sl_config, gpu_engines)                                                                                        \
    A(sl_stats, gpu_hw_s)                                                                                            \
    A(sl_stats, gpu_hybrid_s)                                                                                        \
    A(sl_stats, gpu_resize_s)                                                                                        \
    A(sl_stats, gpu_copy_s)                                                                                          \
    A(sl_stats, gpu_hw_calls)                                                                                        \
    A(sl_stats, gpu_hw_failed_calls)                                                                                 \
    A(sl_stats, gpu_engines)                                                                                         \
    A(sl_config, workers_max)                                                                                        \
    A(sl_stats, tuner)                                                                                               \
    A(sl_stats, workers_active)                                                                                      \
    A(sl_stats, workers_active_mean)                                                                                 \
    A(sl_stats, slots_target)                                                                                        \
    A(sl_stats, tuner_decisions)                                                                                     \
    A(sl_stats, pass_seconds)                                                                                        \
    A(sl_stats, pass_consumer_wait_s)                                                                                \
    A(sl_stats, pass_consumer_cpu_s)                                                                                 \
    A(sl_stats, pass_gpu_samples)                                                                                    \
    A(sl_stats, pass_cpu_samples)                                                                                    \
    A(sl_stats, node_cpus)                                                                                           \
    A(sl_stats, node_loaders)                                                                                        \
    A(sl_stats, node_demand)                                                                                         \
    A(sl_stats, demand)                                                                                              \
    A(sl_config, io_requests)                                                                                        \
    A(sl_config, io_timeout_ms)                                                                                      \
    A(sl_config, io_retries)                                                                                         \
    A(sl_config, io_hedge)                                                                                           \
    A(sl_config, io_readahead)                                                                                       \
    A(sl_stats, net_bytes)                                                                                           \
    A(sl_stats, net_requests)                                                                                        \
    A(sl_stats, net_retries)                                                                                         \
    A(sl_stats, net_hedges)                                                                                          \
    A(sl_stats, net_timeouts)                                                                                        \
    A(sl_stats, net_failures)                                                                                        \
    A(sl_stats, net_inflight)                                                                                        \
    A(sl_stats, net_inflight_peak)                                                                                   \
    A(sl_stats, readahead_started)                                                                                   \
    A(sl_stats, readahead_hits)                                                                                      \
    A(sl_stats, readahead_dropped)                                                                                   \
    A(sl_stats, readahead_bytes)                                                                                     \
    A(sl_stats, pass_consumer_wait_gpu_s)                                                                            \
    A(sl_stats, pass_consumer_wait_cpu_s)                                                                            \
    A(sl_stats, gpu_thread_route_s)                                                                                  \
    A(sl_stats, gpu_thread_hybrid_s)                                                                                 \
    A(sl_stats, gpu_thread_hw_s)                                                                                     \
    A(sl_stats, gpu_thread_launch_s)                                                                                 \
    A(sl_stats, gpu_thread_wait_s)                                                                                   \
    A(sl_stats, gpu_hw_calls_unpipelined)                                                                            \
    A(sl_stats, gpu_hw_mode_switches)                                                                                \
    A(sl_stats, gpu_hw_us_pipelined)                                                                                 \
    A(sl_stats, gpu_hw_us_unpipelined)

static void layout_now(abi_report *r) {
#define XS(T) abi_u(r, sizeof(T), #T ".sizeof");
#define X(T, f) abi_field(r, #T, #f, offsetof(T, f), sizeof(((T *)0)->f), __alignof__(((T *)0)->f));
#define XR(T, f, now) \
    abi_field(r, #T, #f, offsetof(T, now), sizeof(((T *)0)->now), __alignof__(((T *)0)->now));
    SL_ABI_STRUCTS_0_1
#define XE(f) abi_field(r, "recipe_0_1", #f, offsetof(sl__recipe_0_1, f), sizeof(((sl__recipe_0_1 *)0)->f), \
                        __alignof__(((sl__recipe_0_1 *)0)->f));
    abi_u(r, sizeof(sl__recipe_0_1), "recipe_0_1.sizeof");
    SL_ABI_RECIPE_0_1
#define A(T, f) abi_field(r, #T, "+" #f, offsetof(T, f), sizeof(((T *)0)->f), __alignof__(((T *)0)->f));
    SL_ABI_APPENDED
#undef A
#undef XE
#undef X
#undef XR
#undef XS
}

/* The fields of type T in r (keys T.<field>.offset), in order, must tile
 * it: each starts where the one before ended, rounded up to its
 * alignment, and the struct ends where the last one did, rounded up to the
 * largest alignment. A field left out of a list leaves a hole. */
static void tiles(const abi_report *r, const char *T, uint64_t size) {
    char prefix[80];
    snprintf(prefix, sizeof prefix, "%s.", T);
    uint64_t end = 0, maxalign = 1;
    int n = 0;
    for (size_t i = 0; i < r->n; i++) {
        const char *k = r->v[i].key;
        size_t kl = strlen(k);
        if (strncmp(k, prefix, strlen(prefix)) || kl < 7 || strcmp(k + kl - 7, ".offset")) continue;
        char base[80];
        snprintf(base, sizeof base, "%.*s", (int)(kl - 7), k);
        char key[96];
        snprintf(key, sizeof key, "%s.size", base);
        uint64_t off = r->v[i].u, sz = u_of(r, key);
        snprintf(key, sizeof key, "%s.align", base);
        uint64_t al = u_of(r, key);
        uint64_t want = (end + al - 1) / al * al;
        if (off != want) SL_FAIL("%s: %s at %llu, the field before ends at %llu (aligned: %llu)", T, base,
                                 (unsigned long long)off, (unsigned long long)end, (unsigned long long)want);
        end = off + sz;
        if (al > maxalign) maxalign = al;
        n++;
    }
    if (!n) SL_FAIL("%s: no fields", T);
    if ((end + maxalign - 1) / maxalign * maxalign != size)
        SL_FAIL("%s: its fields end at %llu, it is %llu bytes", T, (unsigned long long)end, (unsigned long long)size);
}

TEST(layout) {
    abi_report *old = abi_new(), *now = abi_new();
    abi01_layout(old);
    layout_now(now);
    /* 0.1's structs: every field in place, nothing missing */
#define XS(T) tiles(old, #T, u_of(old, #T ".sizeof"));
#define X(T, f)
#define XR(T, f, now)
    SL_ABI_STRUCTS_0_1
    tiles(old, "recipe_0_1", u_of(old, "recipe_0_1.sizeof"));
    for (size_t i = 0; i < old->n; i++) {
        const abi_val *o = &old->v[i], *x = abi_get(now, o->key);
        if (strstr(o->key, ".sizeof")) continue;
        if (!x || x->u != o->u) SL_FAIL("%s: %llu in 0.1, %llu now", o->key, (unsigned long long)o->u,
                                        x ? (unsigned long long)x->u : 0ull);
    }
    CHECK_EQ(u_of(now, "recipe_0_1.sizeof"), u_of(old, "recipe_0_1.sizeof"));
    /* today's structs: 0.1's fields and the appended ones tile them, and
     * every appended field lies past 0.1's size */
#undef XS
#define XS(T) tiles(now, #T, sizeof(T));
    SL_ABI_STRUCTS_0_1
#undef XS
#undef X
#undef XR
#define A(T, f)                                                                                      \
    if (offsetof(T, f) < u_of(old, #T ".sizeof"))                                                    \
        SL_FAIL(#T "." #f " (added after 0.1) at %zu, inside 0.1's %llu bytes", offsetof(T, f),      \
                (unsigned long long)u_of(old, #T ".sizeof"));
    SL_ABI_APPENDED
#undef A
    /* the 0.1 sizes the library passes for 0.1's calls (base/abi.h) are
     * 0.1's structs, less their tail padding */
#define END01(T, size) CHECK_EQ((u_of(old, #T ".sizeof") + 7) / 8, ((size) + 7) / 8)
    END01(sl_config, SL__SIZE_0_1_CONFIG);
    END01(sl_decode_opts, SL__SIZE_0_1_DECODE_OPTS);
    END01(sl_stats, SL__SIZE_0_1_STATS);
    END01(sl_error_record, SL__SIZE_0_1_ERROR_RECORD);
    END01(sl_state, SL__SIZE_0_1_STATE);
    END01(sl_image_info, SL__SIZE_0_1_IMAGE_INFO);
    END01(sl_video_opts, SL__SIZE_0_1_VIDEO_OPTS);
    END01(sl_video_info, SL__SIZE_0_1_VIDEO_INFO);
    END01(sl_video_clip, SL__SIZE_0_1_VIDEO_CLIP);
    END01(sl_budget_info, SL__SIZE_0_1_BUDGET_INFO);
    END01(sl_governor_opts, SL__SIZE_0_1_GOVERNOR_OPTS);
    END01(sl_budget_event, SL__SIZE_0_1_BUDGET_EVENT);
    END01(sl_value, SL__SIZE_0_1_VALUE);
#undef END01
    abi_free(old);
    abi_free(now);
}

/* ---- today's side of each reading --------------------------------------------- */

#define RD_MEM_COUNT(s) (s).mem_count
#include "reads.inc"

/* The loader both sides make, the recipe through today's pointer. */
static void recipe_now(sl_image_recipe *r) {
    sl_image_recipe_init(r);
    set_recipe(r);
}

static void config_now(sl_config *cfg, sl_image_recipe *r, const char *root) {
    sl_config_init(cfg);
    set_config(cfg, root, NULL);
    recipe_now(r);
    cfg->recipe = r;
}

static void stats_now(sl_loader *ld, abi_report *r) {
    /* a caller built against a newer header: its struct is larger, and
     * what this library does not know reads 0 */
    struct {
        sl_stats st;
        uint64_t newer[4];
    } big;
    memset(&big, 0xA5, sizeof big);
    CHECK_OK(sl_loader_stats_sized(ld, &big.st, sizeof big));
    for (int k = 0; k < 4; k++) CHECK_EQ(big.newer[k], 0);
    const sl_stats *st = &big.st;
    CHECK_EQ(st->mem_count, sl_mem_category_count());
    CHECK(st->mem_count >= 7 && st->mem_count <= SL_MEM_CAPACITY);
    for (uint32_t c = st->mem_count; c < SL_MEM_CAPACITY; c++) CHECK_EQ(st->mem[c] | st->mem_peak[c], 0);
    CHECK(memcmp(st->reserved_0_1_mem, st->mem, sizeof st->reserved_0_1_mem) == 0);
    CHECK(memcmp(st->reserved_0_1_mem_peak, st->mem_peak, sizeof st->reserved_0_1_mem_peak) == 0);
    rd_stats(ld, st, r);
}

static void errors_now(sl_loader *ld, abi_report *r) {
    sl_error_record recs[16];
    size_t n = sl_loader_errors(ld, 0, recs, 16);
    abi_u(r, n, "errors.count");
    for (size_t k = 0; k < n; k++) rd_record(r, "errors", k, &recs[k]);
    /* a newer caller's stride: each element filled to its size, zeros past ours */
    struct wide {
        sl_error_record rec;
        uint64_t newer[3];
    } wide[16];
    memset(wide, 0xA5, sizeof wide);
    size_t m = sl_loader_errors_sized(ld, 1, &wide[0].rec, 16, sizeof wide[0]);
    abi_u(r, m, "errors_from_1.count");
    for (size_t k = 0; k < m; k++) {
        rd_record(r, "errors_from_1", k, &wide[k].rec);
        CHECK_EQ(wide[k].newer[0] | wide[k].newer[1] | wide[k].newer[2], 0);
    }
    CHECK(m == 16 || wide[m].newer[0] == 0xA5A5A5A5A5A5A5A5ull); /* nothing past the count */
    sl_error_record last;
    int rc = sl_loader_last_error(ld, &last);
    abi_i(r, rc, "last_error.rc");
    if (!rc) rd_record(r, "last_error", 0, &last);
}

/* ---- a loader ------------------------------------------------------------------ */

/* One epoch of a loader made through today's header: its checksums. */
static size_t epoch_sums(const sl_config *cfg, uint64_t *sums, size_t max) {
    sl_loader *ld = fx_open(cfg);
    sl_batch *b;
    size_t n = 0;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        if (n < max) sums[n] = sl_batch_checksum(b);
        n++;
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    sl_loader_destroy(ld);
    return n;
}

TEST(old_loader) {
    fx_dataset *d = fx_new(12, 2, 64, 128);
    void *vld;
    char err[512] = "";
    if (abi01_loader_create(d->root, NULL, &vld, err, sizeof err)) SL_FAIL("0.1 create: %s", err);
    sl_loader *ld = vld;
    /* an epoch through the 0.1 side; each batch read by both */
    uint64_t sums[16];
    size_t nb = 0;
    void *b;
    int rc;
    while ((rc = abi01_next(ld, &b)) == 0) {
        abi_report *o = abi_new(), *n = abi_new();
        abi01_batch(b, o);
        rd_batch(b, n);
        same(o, n, NULL, "batch");
        /* 0.1's embedded recipe was read: 24 x 40 */
        CHECK_EQ(u_of(n, "field.0.shape.2"), 24);
        CHECK_EQ(u_of(n, "field.0.shape.3"), 40);
        if (nb < 16) sums[nb] = u_of(n, "batch.checksum");
        nb++;
        abi01_release(ld, b);
        abi_free(o);
        abi_free(n);
    }
    CHECK_EQ(rc, SL_EEND);
    /* the same loader through today's header, the recipe through its
     * pointer: the same bytes */
    sl_config cfg;
    sl_image_recipe rec;
    config_now(&cfg, &rec, d->root);
    uint64_t now[16];
    CHECK_EQ(epoch_sums(&cfg, now, 16), nb);
    CHECK(memcmp(sums, now, (nb < 16 ? nb : 16) * sizeof sums[0]) == 0);
    rec.interpolation = SL_INTERP_BILINEAR; /* and the recipe matters */
    epoch_sums(&cfg, now, 16);
    CHECK(memcmp(sums, now, sizeof sums[0]) != 0);
    /* stats, once every slot is filled and the workers wait */
    bx_fill_slots(ld);
    abi_report *o = abi_new(), *n1 = abi_new(), *n2 = abi_new();
    stats_now(ld, n1);
    CHECK_OK(abi01_stats(ld, o));
    stats_now(ld, n2);
    same(o, n1, n2, "stats");
    CHECK(u_of(n1, "stats.errors") == 2 && u_of(n1, "stats.mem.batches") > 0 && u_of(n1, "stats.mem.index") > 0);
    abi_free(o), abi_free(n1), abi_free(n2);
    /* error records, from the first and from the second, and the last one */
    o = abi_new(), n1 = abi_new();
    abi01_errors(ld, o);
    errors_now(ld, n1);
    same(o, n1, NULL, "errors");
    CHECK_EQ(u_of(n1, "errors.count"), 2);
    abi_free(o), abi_free(n1);
    /* the state; a resume through 0.1's calls */
    o = abi_new(), n1 = abi_new();
    CHECK_OK(abi01_get_state(ld, o));
    sl_state st;
    CHECK_OK(sl_loader_get_state(ld, &st));
    rd_state(&st, n1);
    same(o, n1, NULL, "state");
    CHECK_EQ(st.epoch, 1);
    CHECK_OK(abi01_resume(ld));
    abi_free(o), abi_free(n1);
    /* a state from a newer library that sets a field this one does not
     * know is refused; one that does not is taken */
    struct {
        sl_state st;
        uint64_t newer[2];
    } big;
    memset(&big, 0, sizeof big);
    CHECK_OK(sl_loader_get_state(ld, &big.st));
    big.newer[0] = 3;
    CHECK_EQ(sl_loader_set_state_sized(ld, &big.st, sizeof big), SL_EUNSUPPORTED);
    big.newer[0] = 0;
    CHECK_OK(sl_loader_set_state_sized(ld, &big.st, sizeof big));
    CHECK_EQ(sl_loader_set_state_sized(ld, &big.st, 16), SL_EINVAL);
    /* plan */
    o = abi_new(), n1 = abi_new();
    CHECK_OK(abi01_plan(d->root, o, err, sizeof err));
    sl_plan p;
    if (sl_loader_plan(&cfg, &p, err, sizeof err)) SL_FAIL("plan: %s", err);
    rd_plan(&p, n1);
    same(o, n1, NULL, "plan");
    abi_free(o), abi_free(n1);
    abi01_loader_destroy(ld);
    free(d);
}

/* ---- images ---------------------------------------------------------------------- */

static sl_image_recipe image_recipe; /* what image options point at */
static void bad_recipe(sl_decode_opts *o) { image_recipe.height = 0; /* width without height */ }

TEST(old_images) {
    /* the defaults 0.1's init writes, and today's */
    abi_report *o = abi_new(), *n = abi_new();
    abi01_decode_opts(o);
    sl_decode_opts d;
    sl_decode_opts_init(&d);
    CHECK(d.recipe == NULL);
    sl_image_recipe none;
    sl_image_recipe_init(&none);
    rd_decode_opts(n, &d, &none);
    abi_i(n, d.struct_size == sizeof d, "decode_opts.struct_size_is_sizeof");
    same(o, n, NULL, "decode_opts");
    abi_free(o), abi_free(n);
    /* probe, check, decode and crop under 0.1's embedded recipe and under
     * today's pointer: the same */
    unsigned long len;
    unsigned char *j = fx_jpeg_bytes(120, 90, 4, 0, 90, &len);
    o = abi_new(), n = abi_new();
    CHECK_OK(abi01_image(j, len, o));
    sl_image_info info;
    CHECK_OK(sl_image_probe(j, len, &info));
    rd_image_info(&info, n);
    sl_decode_opts_init(&d);
    d.preset = SL_PRESET_TRAIN;
    d.size = 32;
    d.seed = 3, d.index = 11;
    recipe_now(&image_recipe);
    d.recipe = &image_recipe;
    CHECK_OK(rd_image(j, len, &d, bad_recipe, n));
    same(o, n, NULL, "image");
    CHECK_EQ(u_of(n, "image.height"), 24);
    CHECK_EQ(u_of(n, "image.width"), 40);
    CHECK_EQ(u_of(n, "image.bad.rc"), (uint64_t)SL_EINVAL);
    abi_free(o), abi_free(n);
    /* an options struct from a newer header: zeros past ours taken, a set
     * field refused */
    struct {
        sl_decode_opts o;
        uint64_t newer;
    } big;
    memset(&big, 0, sizeof big);
    sl_decode_opts_init_sized(&big.o, sizeof big);
    CHECK_EQ(big.o.struct_size, sizeof big);
    big.o.preset = SL_PRESET_VAL;
    big.o.size = 16;
    uint32_t w, h, c;
    char err[256] = "";
    CHECK_OK(sl_image_check(j, len, &big.o, &w, &h, &c, err, sizeof err));
    big.newer = 1;
    CHECK_EQ(sl_image_check(j, len, &big.o, &w, &h, &c, err, sizeof err), SL_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "newer header");
    /* a recipe without struct_size (a compound literal that forgot it) */
    sl_image_recipe lit = {.height = 8, .width = 8};
    sl_decode_opts_init(&d);
    d.preset = SL_PRESET_VAL;
    d.recipe = &lit;
    CHECK_EQ(sl_image_check(j, len, &d, &w, &h, &c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "sl_image_recipe_init");
    free(j);
}

/* ---- video ------------------------------------------------------------------------ */

static void video_now(const char *path, abi_report *r) {
    sl_video_opts o;
    rd_clip_opts(&o);
    sl_video_info info;
    char err[256] = "";
    int rc = sl_video_probe(path, &o, &info, err, sizeof err);
    abi_i(r, rc, "video.probe.rc");
    abi_s(r, err, "video.probe.reason");
    if (rc) return;
    rd_video_info(&info, r);
    /* a clip struct from a newer header: filled, zeros past ours, its
     * frame_index (an input) kept */
    static unsigned char out[4 * 3 * 16 * 16];
    int64_t frames[4];
    struct {
        sl_video_clip clip;
        uint64_t newer;
    } big;
    memset(&big, 0xA5, sizeof big);
    big.clip.frame_index = frames;
    CHECK_OK(sl_video_decode_sized(path, &o, sizeof o, out, sizeof out, &big.clip, sizeof big, err, sizeof err));
    CHECK_EQ(big.newer, 0);
    CHECK(big.clip.frame_index == frames);
    rd_clip(out, sizeof out, &big.clip, r);
    o.max_frames = 2;
    rc = sl_video_probe(path, &o, &info, err, sizeof err);
    abi_i(r, rc, "video.limit.rc");
    abi_s(r, err, "video.limit.reason");
}

TEST(old_video) {
    abi_report *o = abi_new(), *n = abi_new();
    abi01_video_opts(o);
    sl_video_opts vo;
    sl_video_opts_init(&vo);
    rd_video_opts(&vo, n);
    same(o, n, NULL, "video_opts");
    abi_free(o), abi_free(n);
    /* a clip: probe, decode with the frames taken; without FFmpeg both
     * sides get the same refusal */
    char dir[64] = "/tmp/sl_abi_video_XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL);
    fx_track(dir);
    snprintf(path, sizeof path, "%s/clip.mp4", dir);
    int have_clip = 0;
    if (!strstr(sl_build_info(), "video=off") && system("command -v ffmpeg >/dev/null 2>&1") == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "ffmpeg -nostdin -v error -y -f lavfi -i testsrc=size=64x48:rate=10 -frames:v 30 "
                 "-pix_fmt yuv420p %s",
                 path);
        have_clip = system(cmd) == 0;
    }
    if (!have_clip) {
        printf("no FFmpeg build or no ffmpeg CLI: the clip part compares refusals only\n");
        fx_write(path, "not a video", 11);
    }
    o = abi_new(), n = abi_new();
    int rc = abi01_video(path, o);
    video_now(path, n);
    same(o, n, NULL, "video");
    if (have_clip) {
        CHECK_OK(rc);
        CHECK_EQ(u_of(n, "video.limit.rc"), (uint64_t)SL_ELIMIT);
    } else {
        CHECK(rc < 0);
    }
    abi_free(o), abi_free(n);
    /* options from a newer header with a field set: refused */
    struct {
        sl_video_opts o;
        uint64_t newer;
    } big;
    memset(&big, 0, sizeof big);
    sl_video_opts_init_sized(&big.o, sizeof big);
    big.newer = 9;
    sl_video_info info;
    char err[256] = "";
    CHECK_EQ(sl_video_probe_sized(path, &big.o, sizeof big, &info, sizeof info, err, sizeof err), SL_EUNSUPPORTED);
}

/* ---- budgets ------------------------------------------------------------------------ */

static void budget_now(sl_budget *b, abi_report *r) {
    struct {
        sl_budget_info s;
        uint64_t newer[2];
    } big;
    memset(&big, 0xA5, sizeof big);
    CHECK_OK(sl_budget_stats_sized(b, &big.s, sizeof big));
    CHECK_EQ(big.newer[0] | big.newer[1], 0);
    CHECK_EQ(big.s.mem_count, sl_mem_category_count());
    CHECK(memcmp(big.s.reserved_0_1_mem, big.s.mem, sizeof big.s.reserved_0_1_mem) == 0);
    CHECK(memcmp(big.s.reserved_0_1_mem_peak, big.s.mem_peak, sizeof big.s.reserved_0_1_mem_peak) == 0);
    rd_budget(&big.s, r);
    /* events with a newer caller's stride */
    struct wide {
        sl_budget_event e;
        uint64_t newer;
    } ev[8];
    memset(ev, 0xA5, sizeof ev);
    size_t n = sl_budget_events_sized(b, 0, &ev[0].e, 8, sizeof ev[0]);
    abi_u(r, n, "events.count");
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ(ev[k].newer, 0);
        rd_event(&ev[k].e, k, r);
    }
}

static void put_file(const char *dir, const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    fx_write(p, text, strlen(text));
}

TEST(old_budget) {
    abi_report *o = abi_new(), *n = abi_new();
    abi01_governor_opts(o);
    sl_governor_opts go;
    sl_governor_opts_init(&go);
    rd_governor_opts(&go, n);
    same(o, n, NULL, "governor_opts");
    abi_free(o), abi_free(n);
    /* a cgroup of 1 GiB using 800 MiB: the governor's first sample (made
     * as it starts) lowers the limit, an event */
    char cg[64] = "/tmp/sl_abi_cg_XXXXXX", err[512] = "";
    CHECK(mkdtemp(cg) != NULL);
    fx_track(cg);
    put_file(cg, "memory.max", "1073741824\n");
    put_file(cg, "memory.current", "838860800\n");
    put_file(cg, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
    put_file(cg, "memory.stat", "anon 0\ninactive_file 0\n");
    sl_budget *b;
    CHECK_OK(sl_budget_create(512 * MIB, &b));
    if (abi01_budget_govern(b, cg, err, sizeof err)) SL_FAIL("0.1 govern: %s", err);
    /* a loader of the 0.1 side draws on it */
    fx_dataset *d = fx_new(8, 1, 64, 96);
    void *vld;
    if (abi01_loader_create(d->root, b, &vld, err, sizeof err)) SL_FAIL("0.1 create: %s", err);
    bx_fill_slots(vld);
    abi_report *n1 = abi_new(), *n2 = abi_new();
    o = abi_new();
    budget_now(b, n1);
    CHECK_OK(abi01_budget(b, o));
    budget_now(b, n2);
    same(o, n1, n2, "budget");
    CHECK(u_of(n1, "events.count") >= 1);
    CHECK(u_of(n1, "budget.limit") < 512 * MIB);
    CHECK_EQ(u_of(n1, "budget.loaders"), 1);
    abi_free(o), abi_free(n1), abi_free(n2);
    abi01_loader_destroy(vld);
    /* options from a newer header with a field set: refused */
    struct {
        sl_governor_opts o;
        uint64_t newer;
    } big;
    memset(&big, 0, sizeof big);
    sl_governor_opts_init_sized(&big.o, sizeof big);
    big.newer = 1;
    sl_budget *b2;
    CHECK_OK(sl_budget_create(64 * MIB, &b2));
    CHECK_EQ(sl_budget_govern_sized(b2, &big.o, sizeof big, err, sizeof err), SL_EUNSUPPORTED);
    sl_budget_destroy(b2);
    sl_budget_destroy(b);
    free(d);
}

/* ---- sources ------------------------------------------------------------------------ */

TEST(old_source) {
    fx_opts fo;
    fx_defaults(&fo);
    fo.images = 6, fo.corrupt = 1, fo.min_side = 64, fo.max_side = 80, fo.manifest = 1;
    fx_dataset *d = calloc(1, sizeof *d);
    fx_make(&fo, d);
    abi_report *o = abi_new(), *n = abi_new();
    char err[512] = "";
    if (abi01_source(d->manifest, o, err, sizeof err)) SL_FAIL("0.1 source: %s", err);
    sl_config cfg;
    sl_config_init(&cfg);
    cfg.source = d->manifest;
    cfg.budget = 16u << 20;
    sl_source *s;
    if (sl_source_open(&cfg, &s, err, sizeof err)) SL_FAIL("source: %s", err);
    rd_source(s, n);
    sl_source_close(s);
    same(o, n, NULL, "source");
    CHECK_EQ(u_of(n, "source.len"), 7);
    abi_free(o), abi_free(n);
    free(d);
}

/* ---- exports ------------------------------------------------------------------------ */

typedef struct names {
    char (*v)[64];
    size_t n, cap;
} names;

static void names_add(names *s, const char *name, size_t len) {
    for (size_t i = 0; i < s->n; i++)
        if (strlen(s->v[i]) == len && !strncmp(s->v[i], name, len)) return;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 128;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        CHECK(s->v != NULL);
    }
    snprintf(s->v[s->n++], sizeof s->v[0], "%.*s", (int)len, name);
}

static int names_has(const names *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], name)) return 1;
    return 0;
}

/* The functions a header declares SL_API: the name before the first '('
 * after each "SL_API". */
static void header_api(const char *path, names *out) {
    char *text = fx_read_text(path);
    if (!text) SL_FAIL("cannot read %s", path);
    for (const char *p = text; (p = strstr(p, "SL_API ")); p++) {
        const char *paren = strchr(p, '(');
        if (!paren) break;
        const char *e = paren;
        while (e > p && (e[-1] == ' ')) e--;
        const char *s = e;
        while (s > p && (s[-1] == '_' || (s[-1] >= 'a' && s[-1] <= 'z') || (s[-1] >= '0' && s[-1] <= '9'))) s--;
        if (e > s && strncmp(s, "__attribute__", 13)) names_add(out, s, (size_t)(e - s));
    }
    free(text);
}

TEST(exports) {
    const char *src = getenv("SL_SRC"), *build = getenv("SL_BUILD");
    CHECK(src && build);
    names now = {0}, v01 = {0}, dyn = {0};
    char path[512], cmd[700], line[512];
    snprintf(path, sizeof path, "%s/include/sluice.h", src);
    header_api(path, &now);
    snprintf(path, sizeof path, "%s/tests/abi/sluice-0.1.h", src);
    header_api(path, &v01);
    CHECK(now.n > 60 && v01.n > 60);
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/libsluice.so", build);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    while (fgets(line, sizeof line, p)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) continue;
        names_add(&dyn, name, strlen(name));
        if (!names_has(&now, name)) SL_FAIL("libsluice.so exports %s (type %s), which sluice.h does not declare", name, type);
    }
    CHECK_EQ(pclose(p), 0);
    for (size_t i = 0; i < now.n; i++)
        if (!names_has(&dyn, now.v[i])) SL_FAIL("sluice.h declares %s, which libsluice.so does not export", now.v[i]);
    for (size_t i = 0; i < v01.n; i++)
        if (!names_has(&dyn, v01.v[i])) SL_FAIL("0.1's %s is no longer exported", v01.v[i]);
    printf("%zu symbols exported, %zu of them 0.1's\n", dyn.n, v01.n);
    /* the version the library reports is the header's */
    CHECK_EQ(sl_version_number(), SL_VERSION_NUMBER);
    CHECK(!strncmp(sl_version(), SL_VERSION_STRING, strlen(SL_VERSION_STRING)));
    free(now.v), free(v01.v), free(dyn.v);
}

/* ---- the CLI's front door -------------------------------------------------------------- */

TEST(cli_public_only) {
    const char *src = getenv("SL_SRC");
    CHECK(src != NULL);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cli", src);
    DIR *dp = opendir(dir);
    CHECK(dp != NULL);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(dp))) {
        size_t l = strlen(e->d_name);
        if (l < 3 || (strcmp(e->d_name + l - 2, ".c") && strcmp(e->d_name + l - 2, ".h"))) continue;
        char path[800];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *text = fx_read_text(path);
        CHECK(text != NULL);
        files++;
        if (strstr(text, "sl__")) SL_FAIL("cli/%s names a private sl__ symbol", e->d_name);
        for (const char *p = text; (p = strstr(p, "#include \"")); p++) {
            const char *name = p + 10, *q = strchr(name, '"');
            CHECK(q != NULL);
            char inc[256], own[800];
            snprintf(inc, sizeof inc, "%.*s", (int)(q - name), name);
            snprintf(own, sizeof own, "%s/%s", dir, inc);
            int ok = !strcmp(inc, "sluice.h") || (!strcmp(inc, "sluice_monitor.h") && !strcmp(e->d_name, "top.c")) ||
                     (!strchr(inc, '/') && access(own, F_OK) == 0);
            if (!ok) SL_FAIL("cli/%s includes \"%s\": the CLI sees sluice.h, its own headers and, in top.c, "
                             "sluice_monitor.h", e->d_name, inc);
        }
        free(text);
    }
    closedir(dp);
    CHECK(files > 10);
    /* and the build gives it no more: no src/ on its include path */
    const char *build = getenv("SL_BUILD");
    char flags[700];
    snprintf(flags, sizeof flags, "%s/CMakeFiles/sluice_cli.dir/flags.make", build ? build : ".");
    char *text = fx_read_text(flags);
    if (!text) {
        printf("no %s (not a Makefile build): the include path is not checked\n", flags);
        return;
    }
    char bad[600];
    snprintf(bad, sizeof bad, "-I%s/src ", src);
    const char *inc = strstr(text, "C_INCLUDES");
    CHECK(inc != NULL);
    char line[2048];
    snprintf(line, sizeof line, "%.*s ", (int)strcspn(inc, "\n"), inc);
    if (strstr(line, bad)) SL_FAIL("the CLI is built with %s: %s", bad, line);
    free(text);
}

/* ---- today's header against the 0.1 library ----------------------------------------------- */

/* Run cmd, its output into out (cap bytes); its exit status. */
static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The value of "key=" in probe output, as a string (static buffer). */
static const char *field_of(const char *out, const char *key) {
    static char v[256];
    char k[128];
    snprintf(k, sizeof k, "\n%s=", key);
    const char *p = strstr(out, k);
    if (!p) SL_FAIL("probe output has no %s:\n%s", key, out);
    p += strlen(k);
    snprintf(v, sizeof v, "%.*s", (int)strcspn(p, "\n"), p);
    return v;
}

TEST(new_header_old_library) {
    const char *src = getenv("SL_SRC"), *build = getenv("SL_BUILD");
    CHECK(src && build);
    static char out[1 << 16];
    char cmd[2048];
    /* the 0.1 library, from the repository's history (built once per build folder) */
    snprintf(cmd, sizeof cmd, "%s/tests/abi/build_0_1.sh %s %s/abi-0.1 2>&1", src, src, build);
    int st = run(cmd, out, sizeof out);
    if (st == 77) {
        printf("skipped: %s", out);
        return;
    }
    if (st) SL_FAIL("building the 0.1 library failed (%d):\n%s", st, out);
    fx_dataset *d = fx_new(10, 1, 64, 96);
    /* the probe against today's library, then against 0.1's */
    static char now[1 << 16], old[1 << 16];
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s %s/abi_probe %s 2>&1", build, build, d->root);
    if (run(cmd, now, sizeof now)) SL_FAIL("probe against today's library:\n%s", now);
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s/abi-0.1/build %s/abi_probe %s 2>&1", build, build, d->root);
    if (run(cmd, old, sizeof old)) SL_FAIL("probe against the 0.1 library:\n%s", old);
    printf("today's library:\n%s\n0.1's library:\n%s", now, old);
    CHECK_EQ(atoi(field_of(now, "version")), SL_VERSION_NUMBER);
    CHECK_EQ(atoi(field_of(old, "version")), 100);
    /* what the sampler and the schema decide is the same through both */
    static const char *const keys[] = {"dataset_size", "len", "num_samples", "batches", "samples", "errors",
                                       "fields", "state", "plan", "info"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char a[256];
        snprintf(a, sizeof a, "%s", field_of(now, keys[i]));
        if (strcmp(a, field_of(old, keys[i]))) SL_FAIL("%s: \"%s\" with today's library, \"%s\" with 0.1's", keys[i], a,
                                                        field_of(old, keys[i]));
    }
    free(d);
}

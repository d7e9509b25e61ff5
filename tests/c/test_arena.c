/*
 * The decode arena (src/base/arena.c) and what draws on it: blocks,
 * coalescing, the extent bound, realloc, calloc over reused memory,
 * reserve and trim, ASan still seeing overflows inside it; libjpeg's
 * replaced memory manager (src/format/jpeg_mem.c): every large layout
 * decodes inside the bound planned from its header, every cap below the
 * need fails cleanly with SL_EBUDGET and leaves nothing behind.
 */
#define _GNU_SOURCE
#include <sys/wait.h>
#include <unistd.h>

#include "bigimg.h"
#include "base/arena.h"
#include "format/decode.h"
#include "ops/ops.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

static sl__arena fresh(size_t bytes) {
    sl__arena a;
    sl__arena_init(&a);
    CHECK_OK(sl__arena_reserve(&a, bytes));
    return a;
}

TEST(arena_blocks_coalesce_and_top_falls_back) {
    sl__arena a = fresh(1 << 20);
    uint8_t *p = sl__arena_alloc(&a, 100), *q = sl__arena_alloc(&a, 1000), *r = sl__arena_alloc(&a, 50);
    CHECK(p && q && r);
    CHECK_EQ((uintptr_t)p % SL_ARENA_ALIGN, 0);
    CHECK_EQ((uintptr_t)q % SL_ARENA_ALIGN, 0);
    CHECK(p < q && q < r);
    size_t top3 = a.top;
    CHECK_EQ(a.live, 3);
    sl__arena_free(&a, q); /* a hole: top stays */
    CHECK_EQ(a.top, top3);
    uint8_t *s = sl__arena_alloc(&a, 500); /* fits the hole: first fit */
    CHECK(s == q);
    CHECK_EQ(a.top, top3);
    sl__arena_free(&a, s);
    sl__arena_free(&a, r); /* the end block: top falls back past the hole too */
    CHECK_LE(a.top, (size_t)(q - a.base));
    CHECK(a.free == NULL);
    sl__arena_free(&a, p);
    CHECK_EQ(a.top, 0);
    CHECK_EQ(a.live, 0);
    sl__arena_free(&a, NULL);
    sl__arena_fini(&a);
}

TEST(arena_limit_refuses_and_extent_never_passes_it) {
    sl__arena a = fresh(64 << 10);
    CHECK_EQ(a.limit, 64 << 10);
    void *blocks[200];
    int n = 0;
    while (n < 200 && (blocks[n] = sl__arena_alloc(&a, 1000)) != NULL) n++;
    CHECK(n > 50 && n < 200);
    CHECK_LE(a.top, a.limit);
    CHECK(sl__arena_alloc(&a, 1000) == NULL); /* refused, nothing changed */
    CHECK(sl__arena_alloc(&a, SIZE_MAX) == NULL);
    CHECK(sl__arena_alloc(&a, SIZE_MAX / 2) == NULL);
    CHECK(sl__arena_calloc(&a, SIZE_MAX / 2, 4) == NULL); /* count x size overflows */
    CHECK_EQ(a.live, (size_t)n);
    for (int i = 0; i < n; i += 2) sl__arena_free(&a, blocks[i]);
    CHECK(sl__arena_alloc(&a, 1000) != NULL); /* a freed block is reused */
    CHECK(sl__arena_alloc(&a, 5000) == NULL);  /* holes of 1000 do not add up */
    CHECK_LE(a.top, a.limit);
    sl__arena_fini(&a);
}

TEST(arena_realloc_in_place_absorbing_and_moving) {
    sl__arena a = fresh(1 << 20);
    uint8_t *p = sl__arena_alloc(&a, 100);
    memset(p, 7, 100);
    uint8_t *p2 = sl__arena_realloc(&a, p, 5000); /* the end block grows in place */
    CHECK(p2 == p);
    for (int i = 0; i < 100; i++) CHECK_EQ(p2[i], 7);
    uint8_t *q = sl__arena_alloc(&a, 64), *r = sl__arena_alloc(&a, 4000), *t = sl__arena_alloc(&a, 16);
    CHECK(q && r && t);
    memset(q, 9, 64);
    sl__arena_free(&a, r);
    uint8_t *q2 = sl__arena_realloc(&a, q, 3000); /* absorbs the free neighbour */
    CHECK(q2 == q);
    for (int i = 0; i < 64; i++) CHECK_EQ(q2[i], 9);
    uint8_t *q3 = sl__arena_realloc(&a, q2, 100000); /* must move; contents follow */
    CHECK(q3 != NULL && q3 != q2);
    for (int i = 0; i < 64; i++) CHECK_EQ(q3[i], 9);
    CHECK(sl__arena_realloc(&a, q3, 2 << 20) == NULL); /* over the limit: the old block stays */
    for (int i = 0; i < 64; i++) CHECK_EQ(q3[i], 9);
    uint8_t *q4 = sl__arena_realloc(&a, q3, 10); /* shrinking keeps the block */
    CHECK(q4 == q3);
    uint8_t *n = sl__arena_realloc(&a, NULL, 10);
    CHECK(n != NULL);
    sl__arena_free(&a, n);
    sl__arena_free(&a, q4);
    sl__arena_free(&a, t);
    sl__arena_free(&a, p2);
    CHECK_EQ(a.top, 0);
    CHECK_EQ(a.live, 0);
    sl__arena_fini(&a);
}

TEST(arena_calloc_zeroes_reused_memory) {
    sl__arena a = fresh(1 << 20);
    uint8_t *p = sl__arena_alloc(&a, 300000);
    memset(p, 0xAB, 300000);
    sl__arena_free(&a, p);
    uint8_t *z = sl__arena_calloc(&a, 1000, 400); /* overlaps the dirty part and fresh pages */
    CHECK(z != NULL);
    for (size_t i = 0; i < 400000; i++)
        if (z[i]) SL_FAIL("byte %zu is %u after calloc", i, z[i]);
    sl__arena_free(&a, z);
    sl__arena_fini(&a);
}

TEST(arena_reserve_and_trim) {
    sl__arena a;
    sl__arena_init(&a);
    CHECK(sl__arena_alloc(&a, 10) == NULL); /* nothing mapped */
    CHECK_OK(sl__arena_reserve(&a, 100000));
    CHECK_EQ(a.mapped, sl__arena_cost(100000));
    CHECK_LE(a.limit, 100000); /* whole pages inside what was counted */
    void *p = sl__arena_alloc(&a, 10);
    CHECK_EQ(sl__arena_reserve(&a, 1 << 20), SL_ESTATE); /* a live block: refused */
    sl__arena_trim(&a, 0);                               /* and trim leaves it alone */
    CHECK_EQ(a.mapped, sl__arena_cost(100000));
    sl__arena_free(&a, p);
    CHECK_OK(sl__arena_reserve(&a, 4 << 20)); /* grows (may move: it is empty) */
    CHECK_EQ(a.mapped, 4 << 20);
    void *big = sl__arena_alloc(&a, 3 << 20);
    memset(big, 1, 3 << 20);
    sl__arena_free(&a, big);
    sl__arena_trim(&a, (1 << 20) + 100); /* to whole pages under the bytes kept counted */
    CHECK_EQ(a.mapped, 1 << 20);
    CHECK_LE(a.limit, 1 << 20);
    CHECK_LE(a.dirty, 1 << 20);
    CHECK_OK(sl__arena_reserve(&a, 8192)); /* reserve sets the length either way */
    CHECK_EQ(a.mapped, 8192);
    sl__arena_trim(&a, 0);
    CHECK(a.base == NULL);
    CHECK_EQ(a.mapped, 0);
    sl__arena_fini(&a);
}

/* Random allocs, reallocs and frees: every block keeps its bytes, the
 * extent never passes the limit, and everything freed leaves an empty
 * arena. */
TEST(arena_stress_keeps_contents_and_bound) {
    sl__arena a = fresh(4 << 20);
    enum { N = 256 };
    uint8_t *blk[N] = {0};
    size_t len[N] = {0};
    uint64_t s = 42;
    for (int step = 0; step < 200000; step++) {
        s = fx_mix(s);
        int i = (int)(s % N);
        size_t want = (size_t)((s >> 16) % ((s >> 40) % 4 == 0 ? 200000 : 2000));
        if (blk[i]) {
            for (size_t k = 0; k < len[i]; k += 97) CHECK_EQ(blk[i][k], (uint8_t)(i + k));
            if ((s >> 8) & 1) {
                sl__arena_free(&a, blk[i]);
                blk[i] = NULL;
                continue;
            }
            uint8_t *r = sl__arena_realloc(&a, blk[i], want);
            if (!r) continue;
            blk[i] = r;
        } else if (!(blk[i] = sl__arena_alloc(&a, want))) {
            continue;
        }
        len[i] = want;
        for (size_t k = 0; k < want; k++) blk[i][k] = (uint8_t)(i + k);
        CHECK_LE(a.top, a.limit);
    }
    for (int i = 0; i < N; i++) sl__arena_free(&a, blk[i]);
    CHECK_EQ(a.top, 0);
    CHECK_EQ(a.live, 0);
    CHECK(a.free == NULL);
    sl__arena_fini(&a);
}

/* Under ASan a write one byte past a block, or into a freed one, inside
 * the arena's own mapping is still reported. */
static int child_dies(void (*fn)(void)) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
static void overflow_by_one(void) {
    sl__arena a = fresh(1 << 20);
    volatile uint8_t *p = sl__arena_alloc(&a, 100);
    sl__arena_alloc(&a, 100);
    p[100] = 1;
}
static void use_after_free(void) {
    sl__arena a = fresh(1 << 20);
    volatile uint8_t *p = sl__arena_alloc(&a, 100);
    sl__arena_alloc(&a, 100);
    sl__arena_free(&a, (void *)p);
    p[10] = 1;
}
static void in_bounds(void) {
    sl__arena a = fresh(1 << 20);
    volatile uint8_t *p = sl__arena_alloc(&a, 100);
    p[99] = 1;
    sl__arena_free(&a, (void *)p);
    sl__arena_fini(&a);
}

TEST(arena_asan_sees_overflow_and_use_after_free) {
#ifdef HAVE_ASAN
    CHECK(!child_dies(in_bounds));
    CHECK(child_dies(overflow_by_one));
    CHECK(child_dies(use_after_free));
#else
    printf("not an ASan build: nothing to check here (make test-asan runs it)\n");
    (void)child_dies, (void)overflow_by_one, (void)use_after_free, (void)in_bounds;
#endif
}

/* ---- decoders on the arena ---------------------------------------------------- */

/* Decode with a quota of `counted` bytes; the arena's peak is returned in
 * *peak, and the next quota call proves nothing was left live. */
static int decode_with(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
                       const sl__plan *p, uint64_t counted, uint8_t *out, uint64_t *peak) {
    sl__quota q;
    char reason[256] = "";
    CHECK_OK(sl__decoder_quota(d, counted, &q, reason, sizeof reason));
    int rc = sl__run(d, data, len, info, p, &q, out, reason, sizeof reason);
    if (peak) *peak = sl__decoder_peak(d);
    CHECK_EQ(q.arena->live, 0);
    if (rc == SL_EBUDGET) CHECK(strlen(reason) > 0);
    return rc;
}

static void plan_for(const uint8_t *data, size_t len, int preset, uint64_t index, sl_image_info *info, sl__plan *p) {
    char reason[256];
    CHECK_OK(sl__probe(data, len, info, reason, sizeof reason));
    sl__recipe rcp;
    CHECK_OK(sl__recipe_make(preset, 224, NULL, 0, 0, &rcp, reason, sizeof reason));
    sl__plan_params pp = {&rcp, 7, 0, index, NULL};
    CHECK_OK(sl__plan_sample(info, &pp, p, reason, sizeof reason));
}

TEST(jpeg_layouts_decode_inside_their_planned_bound) {
    struct {
        uint32_t w, h;
        int layout;
    } cases[] = {{3000, 2000, BX_PROGRESSIVE_444}, {2000, 3000, BX_MULTISCAN_444}, {3000, 2000, BX_BASELINE_420},
                 {1999, 1001, BX_GRAY_PROGRESSIVE}, {17, 9, BX_PROGRESSIVE_444},     {1, 1, BX_MULTISCAN_444}};
    int presets[] = {SL_PRESET_TRAIN, SL_PRESET_VAL, SL_TRANSFORM_NONE};
    sl__decoder *d = sl__decoder_new();
    CHECK(d != NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned long len;
        unsigned char *jpg = bx_jpeg(cases[c].w, cases[c].h, cases[c].layout, c, &len);
        for (size_t k = 0; k < 3; k++) {
            if (presets[k] == SL_PRESET_VAL && (cases[c].w < 224 || cases[c].h < 224)) continue;
            sl_image_info info;
            sl__plan p;
            plan_for(jpg, len, presets[k], c, &info, &p);
            if (cases[c].layout != BX_BASELINE_420) CHECK(info.progressive); /* multi-scan: buffered like one */
            uint8_t *out = malloc((size_t)p.out_w * p.out_h * p.channels);
            uint64_t peak;
            int rc = decode_with(d, jpg, len, &info, &p, p.mem + SL_DECODER_SELF, out, &peak);
            if (rc) SL_FAIL("case %zu preset %d: %s", c, presets[k], sl_strerror(rc));
            printf("%ux%u layout %d preset %d: arena peak %llu of planned %llu (%.3f)\n", cases[c].w, cases[c].h,
                   cases[c].layout, presets[k], (unsigned long long)peak, (unsigned long long)p.mem,
                   (double)peak / (double)p.mem);
            CHECK_LE(peak, p.mem);
            free(out);
        }
        free(jpg);
    }
    sl__decoder_free(d);
}

/* Allocation failure at every point: caps from nothing up to the need. Each
 * decode either succeeds with the same bytes as an unbounded one or fails
 * with SL_EBUDGET, and leaves the arena empty. */
TEST(jpeg_every_cap_below_the_need_fails_cleanly) {
    unsigned long len;
    unsigned char *jpg = bx_jpeg(640, 480, BX_PROGRESSIVE_444, 3, &len);
    sl_image_info info;
    sl__plan p;
    plan_for(jpg, len, SL_PRESET_TRAIN, 5, &info, &p);
    size_t out_n = (size_t)p.out_w * p.out_h * p.channels;
    uint8_t *ref = malloc(out_n), *out = malloc(out_n);
    sl__decoder *d = sl__decoder_new();
    uint64_t peak;
    CHECK_OK(decode_with(d, jpg, len, &info, &p, p.mem + SL_DECODER_SELF, ref, &peak));
    int ok = 0, refused = 0;
    for (uint64_t cap = 0; cap < peak + 8192; cap += 4096) {
        int rc = decode_with(d, jpg, len, &info, &p, SL_DECODER_SELF + cap, out, NULL);
        if (rc == 0) {
            CHECK(memcmp(out, ref, out_n) == 0);
            ok++;
        } else {
            CHECK_EQ(rc, SL_EBUDGET);
            refused++;
        }
    }
    CHECK(ok > 0 && refused > 0);
    CHECK_OK(decode_with(d, jpg, len, &info, &p, p.mem + SL_DECODER_SELF, out, NULL)); /* still usable */
    CHECK(memcmp(out, ref, out_n) == 0);
    sl__decoder_free(d);
    free(ref);
    free(out);
    free(jpg);
}

TEST(decoder_trim_unmaps_what_is_given_back) {
    unsigned long len;
    unsigned char *jpg = bx_jpeg(1500, 1000, BX_PROGRESSIVE_444, 4, &len);
    sl_image_info info;
    sl__plan p;
    plan_for(jpg, len, SL_PRESET_TRAIN, 1, &info, &p);
    uint8_t *out = malloc((size_t)p.out_w * p.out_h * p.channels);
    sl__decoder *d = sl__decoder_new();
    uint64_t peak, rss0 = bx_rss();
    CHECK_OK(decode_with(d, jpg, len, &info, &p, p.mem + SL_DECODER_SELF, out, &peak));
    CHECK(peak > (8u << 20)); /* whole-image coefficients were touched */
    CHECK(bx_rss() > rss0 + (4u << 20));
    sl__decoder_trim(d, SL_DECODER_SELF + (256 << 10));
    CHECK_LE(bx_rss(), rss0 + (3u << 20)); /* the pages went back with the mapping (ASan: its shadow stays) */
    sl__quota q;
    char reason[128];
    CHECK_OK(sl__decoder_quota(d, SL_DECODER_SELF + (256 << 10), &q, reason, sizeof reason));
    CHECK_EQ(sl__decoder_quota(d, SL_DECODER_SELF / 2, &q, reason, sizeof reason), SL_EBUDGET);
    sl__decoder_free(d);
    free(out);
    free(jpg);
}

/*
 * Arrays: .npy headers and raw declarations (format/array.h), the array
 * ops and their windowed read (ops/array.h).
 *
 * Round trips against numpy: gen_arrays.py (run here, into a temporary
 * folder) writes every numeric dtype in C and Fortran order, both byte
 * orders, format versions 1-3, odd shapes, and the expected bytes; casts
 * to every dtype by the documented rules. Crops are checked against the
 * full read (itself checked against numpy), crop groups by sharp = blur +
 * 1 holding in every crop, points by their rows. Hostile headers are
 * built here, one case per way to refuse them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "files.h"
#include "fixture.h"
#include "base/util.h"
#include "format/array.h"
#include "ops/array.h"

typedef unsigned long long ull;

/* ---- files ---------------------------------------------------------------------- */

static char gen_dir[512];

/* The numpy-made files: made once into the build's test-data folder,
 * named after gen_arrays.py's mtime, and shared by every case (each its
 * own process). Made in a temporary folder renamed into place: cases
 * running in parallel never see half a set, and a set in place is never
 * moved (a second maker's rename fails; it uses the first one's). */
static const char *gen(void) {
    if (gen_dir[0]) return gen_dir;
    const char *src = getenv("SL_SRC"), *data = getenv("SL_TEST_DATA");
    char script[512], stamp[600], tmp[600], cmd[700];
    snprintf(script, sizeof script, "%s/tests/c/gen_arrays.py", src ? src : ".");
    struct stat st;
    if (stat(script, &st) != 0) SL_FAIL("%s: %s (is SL_SRC set?)", script, strerror(errno));
    data = data ? data : "/tmp/sl_test_data";
    mkdir(data, 0755);
    snprintf(gen_dir, sizeof gen_dir, "%s/arrays-%lld", data, (long long)st.st_mtime);
    snprintf(stamp, sizeof stamp, "%s/cases.txt", gen_dir);
    if (stat(stamp, &st) == 0) return gen_dir;
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", gen_dir);
    if (!mkdtemp(tmp)) SL_FAIL("mkdtemp %s: %s", tmp, strerror(errno));
    run_python("tests/c/gen_arrays.py", tmp);
    if (rename(tmp, gen_dir) != 0) { /* another case made it first */
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        CHECK(system(cmd) == 0);
    }
    if (stat(stamp, &st) != 0) SL_FAIL("%s missing after generating", stamp);
    return gen_dir;
}

typedef struct file {
    uint8_t *p;
    size_t n;
} file;

static file slurp(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", gen(), name);
    file f = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) SL_FAIL("open %s: %s", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    f.n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f.p = malloc(f.n + 1);
    CHECK(f.n == 0 || fread(f.p, 1, f.n, fp) == f.n);
    fclose(fp);
    return f;
}

/* A generated file as a sample (or bytes: open_bytes). */
static sl__sample_file open_gen(const char *name) { return open_sample(gen(), name); }

static sl__sample_file open_bytes(const void *p, size_t n, uint64_t at) {
    int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
    CHECK(fd >= 0);
    static const uint8_t junk[4096];
    if (at) CHECK_EQ(pwrite(fd, junk, (size_t)at, 0), (ssize_t)at); /* the sample sits at an offset */
    CHECK_EQ(pwrite(fd, p, n, (off_t)at), (ssize_t)n);
    return (sl__sample_file){.fd = fd, .offset = at, .size = n};
}

/* Header of f by pread (and, for whole small files, by memory: the same). */
static int header(const sl__sample_file *f, sl__array_info *a, char *why) {
    why[0] = 0;
    int rc = sl__npy_read_header(f->fd, f->offset, f->size, a, why, 256);
    if (rc) CHECK(why[0] != 0);
    return rc;
}

/* Read f with spec (rng seeded by index) into a malloc'd buffer. */
static uint8_t *read_spec(const sl__sample_file *f, const sl__array_info *a, const sl__array_spec *spec,
                          uint64_t index, sl__array_plan *plan, uint64_t *len) {
    sl__array_shape shape;
    char why[256];
    CHECK_OK(sl__array_out_shape(spec, a, &shape, why, sizeof why));
    sl__rng rng;
    sl__rng_init(&rng, 42, 0, index);
    int rc = sl__array_plan_sample(a, spec, &shape, &rng, plan, why, sizeof why);
    if (rc) SL_FAIL("plan: %s", why);
    uint8_t *out = malloc(shape.bytes + 1);
    sl__quota q = {plan->scratch, 0, 0, 0};
    rc = sl__array_read(f, a, plan, &q, out, len, why, sizeof why);
    if (rc) SL_FAIL("read: %s (%s)", why, sl_strerror(rc));
    CHECK_EQ(q.used, 0);
    CHECK_LE(q.peak, plan->scratch);
    return out;
}

/* ---- round trips against numpy -------------------------------------------------- */

TEST(npy_roundtrip_every_dtype_order_version) {
    file cases = slurp("cases.txt");
    cases.p[cases.n] = 0;
    int n = 0;
    for (char *line = strtok((char *)cases.p, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], expected[128];
        int code, fortran, swap, ndim, used;
        uint64_t dims[8] = {0};
        CHECK_EQ(sscanf(line, "%127s %d %d %d %d%n", name, &code, &fortran, &swap, &ndim, &used), 5);
        char *rest = line + used;
        for (int i = 0; i < ndim; i++) dims[i] = strtoull(rest, &rest, 10);
        CHECK_EQ(sscanf(rest, "%127s", expected), 1);

        sl__sample_file f = open_gen(name);
        sl__array_info a, m;
        char why[256];
        CHECK_OK(header(&f, &a, why));
        file whole = slurp(name);
        CHECK_OK(sl__npy_parse(whole.p, whole.n, whole.n, &m, why, sizeof why));
        CHECK(memcmp(&a, &m, sizeof a) == 0); /* pread and memory agree */
        if (a.dtype != code || a.fortran != fortran || a.swap != swap || (int)a.ndim != ndim)
            SL_FAIL("%s: dtype %d fortran %d swap %d ndim %u", name, a.dtype, a.fortran, a.swap, a.ndim);
        for (int i = 0; i < ndim; i++) CHECK_EQ(a.shape[i], dims[i]);
        CHECK_EQ(a.data_offset + a.data_bytes, f.size);

        sl__array_spec spec = {0};
        sl__array_plan plan;
        uint8_t *out = read_spec(&f, &a, &spec, 0, &plan, NULL);
        file want = slurp(expected);
        CHECK_EQ(plan.out.bytes, want.n);
        if (memcmp(out, want.p, want.n)) SL_FAIL("%s: the data differs from numpy's", name);
        free(out), free(want.p), free(whole.p);
        close(f.fd);
        n++;
    }
    CHECK_EQ(n, 12 * 2 * 2 * 3 + 5);
    free(cases.p);
}

TEST(casts_follow_the_rules) {
    const int codes[] = {SL_DTYPE_UINT8, SL_DTYPE_INT64, SL_DTYPE_FLOAT32, SL_DTYPE_INT8, SL_DTYPE_INT16, SL_DTYPE_INT32,
                         SL_DTYPE_UINT16, SL_DTYPE_UINT32, SL_DTYPE_UINT64, SL_DTYPE_FLOAT16, SL_DTYPE_FLOAT64, SL_DTYPE_BOOL};
    for (int i = 0; i < 12; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s_C_le_v1.npy", sl_dtype_name(codes[i]));
        sl__sample_file f = open_gen(name);
        sl__array_info a;
        char why[256];
        CHECK_OK(header(&f, &a, why));
        for (int j = 0; j < 12; j++) {
            sl__array_spec spec = {0};
            spec.dtype = codes[j];
            sl__array_plan plan;
            uint8_t *out = read_spec(&f, &a, &spec, 0, &plan, NULL);
            snprintf(name, sizeof name, "cast_%s_%s.bin", sl_dtype_name(codes[i]), sl_dtype_name(codes[j]));
            file want = slurp(name);
            CHECK_EQ(plan.out.bytes, want.n);
            size_t sz = sl_dtype_size(codes[j]);
            for (size_t k = 0; k < want.n; k += sz) {
                if (memcmp(out + k, want.p + k, sz) == 0) continue;
                /* NaN to float: any NaN is the same NaN */
                if (codes[j] == SL_DTYPE_FLOAT32) {
                    float x, y;
                    memcpy(&x, out + k, 4), memcpy(&y, want.p + k, 4);
                    if (isnan(x) && isnan(y)) continue;
                } else if (codes[j] == SL_DTYPE_FLOAT64) {
                    double x, y;
                    memcpy(&x, out + k, 8), memcpy(&y, want.p + k, 8);
                    if (isnan(x) && isnan(y)) continue;
                } else if (codes[j] == SL_DTYPE_FLOAT16) {
                    uint16_t x, y;
                    memcpy(&x, out + k, 2), memcpy(&y, want.p + k, 2);
                    if ((x & 0x7C00) == 0x7C00 && (x & 0x3FF) && (y & 0x7C00) == 0x7C00 && (y & 0x3FF)) continue;
                }
                SL_FAIL("%s: element %zu differs", name, k / sz);
            }
            free(out), free(want.p);
        }
        close(f.fd);
    }
}

TEST(raw_against_numpy) {
    sl__sample_file f = open_gen("raw_i16_be.bin");
    int64_t shape[2] = {-1, 7};
    sl__array_info a;
    char why[256];
    CHECK_OK(sl__raw_info(SL_DTYPE_INT16, 1, shape, 2, f.size, &a, why, sizeof why));
    CHECK_EQ(a.shape[0], 6);
    CHECK_EQ(a.swap, 1);
    sl__array_spec spec = {0};
    sl__array_plan plan;
    uint8_t *out = read_spec(&f, &a, &spec, 0, &plan, NULL);
    file want = slurp("raw_i16_native.bin");
    CHECK_EQ(plan.out.bytes, want.n);
    CHECK(memcmp(out, want.p, want.n) == 0);
    free(out), free(want.p);
    close(f.fd);
}

/* ---- crops -------------------------------------------------------------------------- */

/* out (h x w window of an HWC/CHW float32 array) equals full at the plan's start. */
static void check_window(const float *full, const float *out, const sl__array_info *a, const sl__array_plan *p) {
    uint64_t D0 = a->shape[0], D1 = a->shape[1], D2 = a->shape[2];
    (void)D0;
    for (uint64_t i = 0; i < p->take[0]; i++)
        for (uint64_t j = 0; j < p->take[1]; j++)
            for (uint64_t k = 0; k < p->take[2]; k++) {
                float want = full[((i + p->start[0]) * D1 + j + p->start[1]) * D2 + k + p->start[2]];
                float got = out[(i * p->out.shape[1] + j) * p->out.shape[2] + k];
                if (memcmp(&want, &got, 4)) SL_FAIL("window element (%llu, %llu, %llu) differs", (ull)i, (ull)j, (ull)k);
            }
}


/* The HWC crop of the same full read: element (i, j, k) of the window. */
static void check_window_hwc(const float *full, const float *out, const sl__array_info *a, const sl__array_plan *p) {
    for (uint64_t i = 0; i < p->take[0]; i++)
        for (uint64_t j = 0; j < p->take[1]; j++)
            for (uint64_t k = 0; k < 3; k++)
                CHECK(out[(i * p->take[1] + j) * 3 + k] == full[((i + p->start[0]) * a->shape[1] + j + p->start[1]) * 3 + k]);
}

TEST(crop_equals_slice_of_full_read_both_strategies) {
    sl__sample_file f = open_gen("voxel_chw.npy");
    sl__array_info a;
    char why[256];
    CHECK_OK(header(&f, &a, why));
    sl__array_spec full_spec = {0};
    sl__array_plan fp;
    float *full = (float *)read_spec(&f, &a, &full_spec, 0, &fp, NULL);
    sl__array_spec spec = {.layout = "CHW", .crop = {16, 24}};
    /* HWC: C folds into rows of W x C elements */
    sl__sample_file fh = open_gen("pair_blur.npy");
    sl__array_info ah;
    CHECK_OK(header(&fh, &ah, why));
    float *fullh = (float *)read_spec(&fh, &ah, &full_spec, 0, &fp, NULL);
    sl__array_spec hwc = {.layout = "HWC", .crop = {9, 13}};
    for (uint64_t idx = 0; idx < 10; idx++) {
        sl__array_plan p;
        float *out = (float *)read_spec(&fh, &ah, &hwc, idx, &p, NULL);
        check_window_hwc(fullh, out, &ah, &p);
        p.coalesce = !p.coalesce;
        sl__quota q = {SL_ARRAY_CHUNK + 64, 0, 0, 0};
        CHECK_OK(sl__array_read(&fh, &ah, &p, &q, out, NULL, why, sizeof why));
        check_window_hwc(fullh, out, &ah, &p);
        free(out);
    }
    free(fullh);
    close(fh.fd);
    for (uint64_t idx = 0; idx < 20; idx++) {
        sl__array_plan p;
        float *out = (float *)read_spec(&f, &a, &spec, idx, &p, NULL);
        CHECK_EQ(p.out.shape[0], 4);
        CHECK_EQ(p.out.shape[1], 16);
        CHECK_EQ(p.out.shape[2], 24);
        CHECK(p.start[1] + 16 <= 40 && p.start[2] + 24 <= 50);
        check_window(full, out, &a, &p);
        /* the other read strategy gives the same bytes */
        p.coalesce = !p.coalesce;
        float *again = malloc(p.out.bytes);
        sl__quota q = {SL_ARRAY_CHUNK + 64, 0, 0, 0};
        CHECK_OK(sl__array_read(&f, &a, &p, &q, again, NULL, why, sizeof why));
        CHECK(memcmp(out, again, p.out.bytes) == 0);
        free(out), free(again);
    }
    /* center crop: (40-16)/2 = 12, (50-23)/2 = 13.5 -> 14 (half to even) */
    sl__array_spec cc = {.layout = "CHW", .center_crop = {16, 23}};
    sl__array_plan p;
    float *out = (float *)read_spec(&f, &a, &cc, 0, &p, NULL);
    CHECK_EQ(p.start[1], 12);
    CHECK_EQ(p.start[2], 14);
    check_window(full, out, &a, &p);
    free(out), free(full);
    close(f.fd);
}

TEST(crop_of_fortran_and_swapped_arrays) {
    const char *names[] = {"float32_F_le_v1.npy", "float32_C_be_v2.npy", "float32_F_be_v3.npy"};
    sl__sample_file ref = open_gen("float32_C_le_v1.npy");
    sl__array_info ra;
    char why[256];
    CHECK_OK(header(&ref, &ra, why));
    sl__array_spec none = {0};
    sl__array_plan fp;
    float *full = (float *)read_spec(&ref, &ra, &none, 0, &fp, NULL);
    for (int i = 0; i < 3; i++) {
        sl__sample_file f = open_gen(names[i]);
        sl__array_info a;
        CHECK_OK(header(&f, &a, why));
        sl__array_spec spec = {.layout = "HWC", .crop = {2, 3}};
        for (uint64_t idx = 0; idx < 6; idx++) {
            sl__array_plan p;
            float *out = (float *)read_spec(&f, &a, &spec, idx, &p, NULL);
            check_window(full, out, &ra, &p);
            free(out);
        }
        close(f.fd);
    }
    free(full);
    close(ref.fd);
}

TEST(crop_group_keeps_pairs_aligned) {
    sl__sample_file fb = open_gen("pair_blur.npy"), fs = open_gen("pair_sharp.npy"), fv = open_gen("voxel_chw.npy");
    sl__array_info ab, as, av;
    char why[256];
    CHECK_OK(header(&fb, &ab, why));
    CHECK_OK(header(&fs, &as, why));
    CHECK_OK(header(&fv, &av, why));
    sl__array_spec hwc = {.layout = "HWC", .crop = {16, 16}}, chw = {.layout = "CHW", .crop = {16, 16}};
    for (uint64_t idx = 0; idx < 50; idx++) {
        /* each field gets a copy of the group's generator, seeded alike */
        sl__array_plan pb, ps, pv;
        float *b = (float *)read_spec(&fb, &ab, &hwc, idx, &pb, NULL);
        float *s = (float *)read_spec(&fs, &as, &hwc, idx, &ps, NULL);
        float *v = (float *)read_spec(&fv, &av, &chw, idx, &pv, NULL);
        CHECK_EQ(pb.start[0], ps.start[0]);
        CHECK_EQ(pb.start[1], ps.start[1]);
        CHECK_EQ(pv.start[1], pb.start[0]); /* the same H x W: the same window in another layout */
        CHECK_EQ(pv.start[2], pb.start[1]);
        for (uint64_t k = 0; k < pb.out.bytes / 4; k++)
            if (s[k] != b[k] + 1.0f) SL_FAIL("sample %llu element %llu: sharp %g, blur %g", (ull)idx, (ull)k, s[k], b[k]);
        free(b), free(s), free(v);
    }
    close(fb.fd), close(fs.fd), close(fv.fd);
}

TEST(read_into_slot_offsets) {
    /* a sequence: element i at dst + i * bytes, no alignment */
    sl__sample_file f = open_gen("pair_blur.npy");
    sl__array_info a;
    char why[256];
    CHECK_OK(header(&f, &a, why));
    sl__array_spec spec = {.layout = "HWC", .crop = {8, 8}, .dtype = SL_DTYPE_FLOAT64};
    sl__array_shape shape;
    CHECK_OK(sl__array_out_shape(&spec, &a, &shape, why, sizeof why));
    uint8_t *slot = malloc(3 * shape.bytes + 1), *one;
    for (uint64_t i = 0; i < 3; i++) {
        sl__rng rng;
        sl__rng_init(&rng, 42, 0, i);
        sl__array_plan p;
        CHECK_OK(sl__array_plan_sample(&a, &spec, &shape, &rng, &p, why, sizeof why));
        sl__quota q = {p.scratch, 0, 0, 0};
        CHECK_OK(sl__array_read(&f, &a, &p, &q, slot + 1 + i * shape.bytes, NULL, why, sizeof why));
    }
    for (uint64_t i = 0; i < 3; i++) {
        sl__array_plan p;
        one = read_spec(&f, &a, &spec, i, &p, NULL);
        CHECK(memcmp(one, slot + 1 + i * shape.bytes, shape.bytes) == 0);
        free(one);
    }
    free(slot);
    close(f.fd);
}

/* ---- points ----------------------------------------------------------------------------- */

TEST(points_are_sorted_distinct_rows) {
    sl__sample_file f = open_gen("raw_rows_f32.bin");
    f.offset = 0;
    int64_t shape[2] = {-1, 4};
    sl__array_info a;
    char why[256];
    CHECK_OK(sl__raw_info(SL_DTYPE_FLOAT32, 0, shape, 2, f.size, &a, why, sizeof why));
    CHECK_EQ(a.shape[0], 1000);
    sl__array_spec spec = {.points = 300};
    uint64_t counts[1000] = {0};
    for (uint64_t idx = 0; idx < 200; idx++) {
        sl__array_plan p;
        uint64_t len = 0;
        float *out = (float *)read_spec(&f, &a, &spec, idx, &p, &len);
        CHECK_EQ(len, 300);
        CHECK_EQ(p.out.shape[0], 300);
        int64_t prev = -1;
        for (int r = 0; r < 300; r++) {
            int64_t row = (int64_t)out[r * 4] / 4;
            for (int c = 0; c < 4; c++) CHECK_EQ(out[r * 4 + c], (float)(row * 4 + c)); /* a whole row of the scan */
            CHECK(row > prev); /* file order, no repeats */
            prev = row;
            counts[row]++;
        }
        free(out);
    }
    /* uniform: each row taken 200 * 300 / 1000 = 60 times on average */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 1000; i++) lo = SL_MIN(lo, counts[i]), hi = SL_MAX(hi, counts[i]);
    CHECK(lo >= 25 && hi <= 100);
    close(f.fd);
}

TEST(points_pad_short_scans_and_fortran) {
    sl__sample_file f = open_gen("raw_rows_f32.bin");
    int64_t shape[2] = {-1, 4};
    sl__array_info a;
    char why[256];
    CHECK_OK(sl__raw_info(SL_DTYPE_FLOAT32, 0, shape, 2, 10 * 16, &a, why, sizeof why)); /* the first 10 rows */
    f.size = 10 * 16;
    sl__array_spec spec = {.points = 16};
    sl__array_plan p;
    uint64_t len;
    float *out = (float *)read_spec(&f, &a, &spec, 3, &p, &len);
    CHECK_EQ(len, 10);
    CHECK_EQ(p.subset, 0);
    for (int i = 0; i < 16 * 4; i++) CHECK_EQ(out[i], i < 40 ? (float)i : 0.0f);
    free(out);
    close(f.fd);
    /* a Fortran-order (R, 4) array: the subset runs along the inner storage axis */
    sl__sample_file ff = open_gen("int32_F_le_v1.npy"), fc = open_gen("int32_C_le_v1.npy");
    sl__array_info af, ac;
    CHECK_OK(header(&ff, &af, why));
    CHECK_OK(header(&fc, &ac, why));
    sl__array_spec two = {.points = 2};
    sl__array_plan pf, pc;
    uint8_t *of = read_spec(&ff, &af, &two, 5, &pf, &len), *oc = read_spec(&fc, &ac, &two, 5, &pc, &len);
    CHECK_EQ(len, 2);
    CHECK(memcmp(of, oc, pf.out.bytes) == 0);
    free(of), free(oc);
    close(ff.fd), close(fc.fd);
}

/* ---- hostile .npy headers ---------------------------------------------------------------- */

/* A v1 file: header dict text (padded with spaces to 64 bytes, '\n'),
 * then data_bytes of zeros. */
static file npy_v1(const char *dict, size_t data_bytes) {
    size_t dl = strlen(dict), hl = (10 + dl + 1 + 63) / 64 * 64 - 10;
    file f = {calloc(1, 10 + hl + data_bytes + 1), 10 + hl + data_bytes};
    memcpy(f.p, "\x93NUMPY\x01\x00", 8);
    f.p[8] = (uint8_t)hl, f.p[9] = (uint8_t)(hl >> 8);
    memset(f.p + 10, ' ', hl);
    memcpy(f.p + 10, dict, dl);
    f.p[10 + hl - 1] = '\n';
    return f;
}

/* Parse from memory and through pread: the same code and reason. */
static int parse_both(const file *f, const char *reason_part) {
    sl__array_info a;
    char why[256], why2[256];
    why[0] = 0;
    int rc = sl__npy_parse(f->p, f->n, f->n, &a, why, sizeof why);
    sl__sample_file sf = open_bytes(f->p, f->n, 100);
    int rc2 = header(&sf, &a, why2);
    close(sf.fd);
    CHECK_EQ(rc2, rc);
    if (rc) {
        CHECK(strcmp(why, why2) == 0);
        CHECK_STR_CONTAINS(why, reason_part);
    }
    return rc;
}

static int hostile(const char *dict, size_t data, const char *reason_part) {
    file f = npy_v1(dict, data);
    int rc = parse_both(&f, reason_part);
    free(f.p);
    return rc;
}

TEST(npy_hostile_headers) {
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", 64,
                     "needs 4398046511104 bytes of data (1099511627776 elements of 4 bytes), the file holds 64 (truncated)"),
             SL_ECORRUPT); /* 2^40 elements: an error, never an allocation */
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", 0,
                     "overflows 64 bits"), SL_EOVERFLOW);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -2), }", 0, "negative dimension"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), ", 24, "not closed"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order' False, 'shape': (3,)}", 12, "expected ':'"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<q4', 'fortran_order': False, 'shape': (3,)}", 12, "not one of b1"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f16', 'fortran_order': False, 'shape': (3,)}", 48, "not one of b1"), SL_EUNSUPPORTED);
    CHECK_EQ(hostile("{'descr': '<c8', 'fortran_order': False, 'shape': (3,)}", 24, "complex"), SL_EUNSUPPORTED);
    CHECK_EQ(hostile("{'descr': '<U8', 'fortran_order': False, 'shape': (3,)}", 96, "string"), SL_EUNSUPPORTED);
    CHECK_EQ(hostile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}", 12, "structured"),
             SL_EUNSUPPORTED);
    CHECK_EQ(hostile("{'descr': '|f4', 'fortran_order': False, 'shape': (3,)}", 12, "not one of"), SL_EUNSUPPORTED);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 8, "(truncated)"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 16, "(trailing bytes)"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", 12, "is not a tuple"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", 12, "neither True nor False"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'shape': (3,)}", 12, "lacks 'fortran_order'"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", 12, "repeated key"),
             SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", 12, "unexpected key"),
             SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4, "more than 8"),
             SL_EUNSUPPORTED);
    CHECK_EQ(hostile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", 12, "other than padding"), SL_ECORRUPT);
    CHECK_EQ(hostile("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (3,)}", 12, "escape"), SL_ECORRUPT);
    CHECK_EQ(hostile("['descr']", 0, "does not start with a dict"), SL_ECORRUPT);
    /* accepted: numpy's own variants */
    CHECK_OK(hostile("{\"descr\": \"<f4\", \"shape\": (3L, 2L), \"fortran_order\": True}", 24, ""));
    CHECK_OK(hostile("{'descr': 'u1', 'fortran_order': False, 'shape': ()}", 1, ""));
}

TEST(npy_hostile_prelude) {
    file f = npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12);
    f.p[8] = 0xFF, f.p[9] = 0xFF; /* header_len 65535: past the end */
    CHECK_EQ(parse_both(&f, "header length 65535 runs past the end"), SL_ECORRUPT);
    f.p[6] = 4; /* version 4.0 */
    CHECK_EQ(parse_both(&f, "version 4.0"), SL_EUNSUPPORTED);
    f.p[0] = 'X';
    CHECK_EQ(parse_both(&f, "not an .npy file"), SL_EFORMAT);
    f.n = 8;
    f.p[0] = 0x93;
    CHECK_EQ(parse_both(&f, "truncated in its prelude"), SL_ECORRUPT);
    free(f.p);
    /* v2: header_len over the 1 MiB cap */
    uint8_t v2[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0x20, 0};
    file g = {v2, sizeof v2};
    CHECK_EQ(parse_both(&g, "npy header of 2097152 bytes (limit 1048576)"), SL_ELIMIT);
}

TEST(npy_long_headers) {
    /* a v2 header of 100 KiB: the dict, then padding read in steps */
    const char *dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }";
    size_t hl = 100 << 10;
    file f = {calloc(1, 12 + hl + 12), 12 + hl + 12};
    memcpy(f.p, "\x93NUMPY\x02\x00", 8);
    f.p[8] = (uint8_t)hl, f.p[9] = (uint8_t)(hl >> 8), f.p[10] = (uint8_t)(hl >> 16);
    memset(f.p + 12, ' ', hl);
    memcpy(f.p + 12, dict, strlen(dict));
    CHECK_OK(parse_both(&f, ""));
    f.p[12 + 50000] = 'x'; /* not padding, deep in the header */
    CHECK_EQ(parse_both(&f, "other than padding"), SL_ECORRUPT);
    /* a dict that does not end within 4 KiB: refused by the pread path */
    memset(f.p + 12, ' ', hl);
    memcpy(f.p + 12, "{'descr': '<i2', ", 17);
    memcpy(f.p + 12 + 6000, "'fortran_order': False, 'shape': (2, 3), }", 42);
    sl__array_info a;
    char why[256];
    sl__sample_file sf = open_bytes(f.p, f.n, 0);
    CHECK_EQ(header(&sf, &a, why), SL_ELIMIT);
    CHECK_STR_CONTAINS(why, "does not end within its first 4096 bytes");
    close(sf.fd);
    free(f.p);
}

TEST(raw_declarations) {
    sl__array_info a;
    char why[256];
    int64_t s1[2] = {-1, 4};
    CHECK_EQ(sl__raw_info(SL_DTYPE_FLOAT32, 0, s1, 2, 16 * 10 + 4, &a, why, sizeof why), SL_ECORRUPT);
    CHECK_STR_CONTAINS(why, "not a whole number of 16-byte rows (4 left over)");
    int64_t s2[2] = {-1, -1};
    CHECK_EQ(sl__raw_info(SL_DTYPE_FLOAT32, 0, s2, 2, 64, &a, why, sizeof why), SL_EINVAL);
    int64_t s3[2] = {-1, 0};
    CHECK_EQ(sl__raw_info(SL_DTYPE_FLOAT32, 0, s3, 2, 0, &a, why, sizeof why), SL_EINVAL);
    CHECK_STR_CONTAINS(why, "beside a zero dimension");
    int64_t s4[2] = {3, 4};
    CHECK_EQ(sl__raw_info(SL_DTYPE_FLOAT32, 0, s4, 2, 40, &a, why, sizeof why), SL_ECORRUPT);
    CHECK_STR_CONTAINS(why, "needs 48 bytes");
    CHECK_OK(sl__raw_info(SL_DTYPE_FLOAT32, 0, s4, 2, 48, &a, why, sizeof why));
    int64_t s5[1] = {-3};
    CHECK_EQ(sl__raw_info(SL_DTYPE_FLOAT32, 0, s5, 1, 48, &a, why, sizeof why), SL_EINVAL);
    CHECK_EQ(sl__raw_info(99, 0, s4, 2, 48, &a, why, sizeof why), SL_EINVAL);
    int64_t s6[3] = {-1, (int64_t)1 << 31, (int64_t)1 << 31};
    CHECK_EQ(sl__raw_info(SL_DTYPE_FLOAT64, 0, s6, 3, 0, &a, why, sizeof why), SL_EOVERFLOW);
    CHECK_STR_CONTAINS(why, "overflows");
    int64_t s7[2] = {-1, 4}; /* an empty file: zero rows */
    CHECK_OK(sl__raw_info(SL_DTYPE_FLOAT32, 0, s7, 2, 0, &a, why, sizeof why));
    CHECK_EQ(a.shape[0], 0);
}

/* ---- samples that do not fit the field --------------------------------------------------- */

TEST(plan_refuses_misfits) {
    sl__sample_file f = open_gen("pair_blur.npy");
    sl__array_info a, b;
    char why[256];
    CHECK_OK(header(&f, &a, why));
    close(f.fd);
    sl__array_spec spec = {.layout = "HWC", .crop = {16, 16}};
    sl__array_shape field;
    CHECK_OK(sl__array_out_shape(&spec, &a, &field, why, sizeof why));
    sl__rng rng;
    sl__rng_init(&rng, 1, 2, 3);
    sl__array_plan p;
    b = a;
    b.shape[2] = 4; /* 4 channels where the field has 3 */
    CHECK_EQ(sl__array_plan_sample(&b, &spec, &field, &rng, &p, why, sizeof why), SL_EINVAL);
    CHECK_STR_CONTAINS(why, "array of shape (40, 50, 4) does not fit the field's (16, 16, 3): larger than the field (axis 2)");
    b = a;
    b.shape[1] = 10;
    CHECK_EQ(sl__array_plan_sample(&b, &spec, &field, &rng, &p, why, sizeof why), SL_EINVAL);
    CHECK_STR_CONTAINS(why, "crop 16x16 is larger than the array's 40x10");
    b = a;
    b.dtype = SL_DTYPE_FLOAT64;
    CHECK_EQ(sl__array_plan_sample(&b, &spec, &field, &rng, &p, why, sizeof why), SL_EINVAL);
    CHECK_STR_CONTAINS(why, "dtype float64 differs from the field's float32");
    b = a;
    b.ndim = 2;
    CHECK_EQ(sl__array_plan_sample(&b, &spec, &field, &rng, &p, why, sizeof why), SL_EINVAL);
    /* without a crop, another size is refused; with a pad it is padded */
    sl__array_spec none = {0}, pad = {.pad_ndim = 3, .pad = {48, 64, 3}};
    CHECK_OK(sl__array_out_shape(&none, &a, &field, why, sizeof why));
    b = a;
    b.shape[0] = 39;
    CHECK_EQ(sl__array_plan_sample(&b, &none, &field, &rng, &p, why, sizeof why), SL_EINVAL);
    CHECK_STR_CONTAINS(why, "smaller than the field (no pad) (axis 0)");
    CHECK_OK(sl__array_out_shape(&pad, &a, &field, why, sizeof why));
    CHECK_OK(sl__array_plan_sample(&b, &pad, &field, &rng, &p, why, sizeof why));
    b.shape[1] = 65;
    CHECK_EQ(sl__array_plan_sample(&b, &pad, &field, &rng, &p, why, sizeof why), SL_EINVAL);
    /* inconsistent specs */
    sl__array_spec bad1 = {.layout = "HW", .crop = {4, 4}}, bad2 = {.layout = "CHC", .crop = {4, 4}},
                   bad3 = {.layout = "HWC", .crop = {4, 4}, .points = 3}, bad4 = {.layout = "HWC", .crop = {4, 4},
                   .center_crop = {2, 2}}, bad5 = {.pad_ndim = 2}, bad6 = {.dtype = 77};
    const sl__array_spec *bad[] = {&bad1, &bad2, &bad3, &bad4, &bad5, &bad6};
    for (int i = 0; i < 6; i++) CHECK_EQ(sl__array_out_shape(bad[i], &a, &field, why, sizeof why), SL_EINVAL);
}

TEST(pad_fills_zeros_at_the_end) {
    sl__sample_file f = open_gen("raw_i16_native.bin");
    int64_t shape[2] = {6, 7};
    sl__array_info a;
    char why[256];
    CHECK_OK(sl__raw_info(SL_DTYPE_INT16, 0, shape, 2, f.size, &a, why, sizeof why));
    sl__array_spec none = {0}, pad = {.pad_ndim = 2, .pad = {8, 9}};
    sl__array_plan p0, p1;
    int16_t *full = (int16_t *)read_spec(&f, &a, &none, 0, &p0, NULL);
    int16_t *out = (int16_t *)read_spec(&f, &a, &pad, 0, &p1, NULL);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 9; j++) CHECK_EQ(out[i * 9 + j], i < 6 && j < 7 ? full[i * 7 + j] : 0);
    free(full), free(out);
    close(f.fd);
}

TEST(read_errors) {
    sl__sample_file f = open_gen("pair_blur.npy");
    sl__array_info a;
    char why[256];
    CHECK_OK(header(&f, &a, why));
    sl__array_spec spec = {.layout = "HWC", .crop = {16, 16}, .dtype = SL_DTYPE_FLOAT16};
    sl__array_shape field;
    CHECK_OK(sl__array_out_shape(&spec, &a, &field, why, sizeof why));
    sl__rng rng;
    sl__rng_init(&rng, 1, 2, 3);
    sl__array_plan p;
    CHECK_OK(sl__array_plan_sample(&a, &spec, &field, &rng, &p, why, sizeof why));
    uint8_t *out = malloc(field.bytes);
    sl__quota small = {p.scratch / 2, 0, 0, 0};
    CHECK_EQ(sl__array_read(&f, &a, &p, &small, out, NULL, why, sizeof why), SL_EBUDGET);
    CHECK_STR_CONTAINS(why, "scratch bytes");
    CHECK_EQ(small.used, 0);
    /* the file shrank after its header was read */
    file whole = slurp("pair_blur.npy");
    sl__sample_file cut = open_bytes(whole.p, (size_t)a.data_offset + 100, 0);
    cut.size = whole.n;
    sl__quota q = {p.scratch, 0, 0, 0};
    CHECK_EQ(sl__array_read(&cut, &a, &p, &q, out, NULL, why, sizeof why), SL_EIO);
    CHECK_STR_CONTAINS(why, "shorter than its header says");
    CHECK_EQ(q.used, 0);
    /* a plan for another file */
    cut.size = 100;
    CHECK_EQ(sl__array_read(&cut, &a, &p, &q, out, NULL, why, sizeof why), SL_EINVAL);
    close(cut.fd), close(f.fd);
    free(out), free(whole.p);
}

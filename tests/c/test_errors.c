/* ctest: tsan */
/*
 * Every SL_E* code the public API can return, provoked for real: bad
 * configurations, missing and empty sources, bad manifests, bad samples (as
 * loader error records and through sl_image_decode), budgets too small now
 * or ever, a consumer holding every slot, the raise policy, the end of an
 * epoch, mismatched saved states, size overflow, allocation failure
 * (sl__mem_fail_after) and thread creation failure (a child process with
 * RLIMIT_NPROC 0). Plus sl_strerror for each.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/mem.h"
#include "budget_fixture.h"
#include "dataset.h"
#include "records.h"
#include "run.h"

static const int all_codes[] = {SL_EINVAL, SL_ENOMEM,     SL_EBUDGET, SL_ENOENT, SL_EIO,     SL_EEMPTY,
                                SL_EPARSE, SL_EFORMAT,    SL_ECORRUPT, SL_ELIMIT, SL_EUNSUPPORTED, SL_EHELD,
                                SL_ESAMPLE, SL_EEND,      SL_ESTATE,  SL_EOVERFLOW, SL_ESYS,  SL_ETIMEDOUT,
                                SL_EERRORS, SL_EAGAIN};

/* sl_loader_create must fail with code; returns the message. */
static const char *create_fails(const sl_config *c, int code) {
    static char err[512];
    err[0] = 0;
    sl_loader *ld = (sl_loader *)1;
    int rc = sl_loader_create(c, &ld, err, sizeof err);
    if (rc != code) {
        if (rc == 0) sl_loader_destroy(ld);
        SL_FAIL("sl_loader_create: %d (%s), expected %s; message: %s", rc, sl_strerror(rc), sl_strerror(code), err);
    }
    CHECK(ld == NULL);
    CHECK(err[0] != 0);
    return err;
}

/* Epoch 0 run to its end: its error records, each sample at most once
 * (up to max; workers may have begun epoch 1: left out). */
static size_t epoch_errors(sl_loader *ld, sl_error_record *out, size_t max) {
    fx_finish_epoch(ld);
    return fx_records(ld, 0, 1, out, max);
}

/* A real JPEG with its SOF0 marker changed: lossless (SOF3) or 12-bit. */
static unsigned char *patched_jpeg(int what, unsigned long *len) {
    unsigned char *j = fx_jpeg_bytes(64, 48, 3, 0, 90, len);
    size_t i = fx_jpeg_marker(j, *len, 0xC0);
    if (what == 0) j[i + 1] = 0xC3; /* lossless */
    else j[i + 4] = 12;             /* sample precision */
    return j;
}

/* ---- SL_EINVAL ---------------------------------------------------------------- */

TEST(einval_config_fields) {
    fx_dataset *d = fx_new(8, 0, 64, 96);
    sl_config c;
#define BAD(field_expr, part)                                                                            \
    do {                                                                                                 \
        fx_config(&c, d->root);                                                                          \
        field_expr;                                                                                      \
        const char *m = create_fails(&c, SL_EINVAL);                                                     \
        CHECK_STR_CONTAINS(m, part);                                                                     \
    } while (0)
    BAD(c.source = NULL, "source");
    BAD(c.source = "", "source");
    BAD(c.batch_size = 0, "batch_size");
    BAD(c.batch_size = (1u << 20) + 1, "batch_size");
    BAD(c.size = 0, "size");
    BAD(c.size = 16385, "size");
    BAD(c.preset = 7, "preset");
    BAD(c.world_size = 0, "world_size");
    BAD((c.world_size = 2, c.rank = 2), "rank");
    BAD(c.on_error = 5, "on_error");
    BAD(c.workers = 5000, "workers");
    BAD(c.prefetch = 5000, "prefetch");
    BAD(c.min_slots = 5000, "min_slots");
    BAD(c.budget = 0, "budget");
    BAD(c.flags = 1u << 9, "flags");
    BAD(c.max_error_records = (1u << 20) + 1, "max_error_records");
#undef BAD
    /* NULL arguments */
    sl_loader *ld = NULL;
    CHECK_EQ(sl_loader_create(NULL, &ld, NULL, 0), SL_EINVAL);
    fx_config(&c, d->root);
    CHECK_EQ(sl_loader_create(&c, NULL, NULL, 0), SL_EINVAL);
    sl_batch *b;
    CHECK_EQ(sl_loader_next(NULL, &b), SL_EINVAL);
    CHECK_EQ(sl_loader_set_epoch(NULL, 0), SL_EINVAL);
    sl_stats st;
    CHECK_EQ(sl_loader_stats(NULL, &st), SL_EINVAL);
    sl_state s;
    CHECK_EQ(sl_loader_get_state(NULL, &s), SL_EINVAL);
    CHECK_EQ(sl_loader_set_state(NULL, &s), SL_EINVAL);
    uint64_t v;
    CHECK_EQ(sl_parse_size("lots", &v), SL_EINVAL);
    CHECK_EQ(sl_parse_size("12Q", &v), SL_EINVAL);
    CHECK_EQ(sl_parse_size(NULL, &v), SL_EINVAL);
    /* a loader: bad field index and name, NULL out */
    ld = fx_open(&c);
    CHECK_EQ(sl_loader_next(ld, NULL), SL_EINVAL);
    CHECK_OK(sl_loader_next(ld, &b));
    sl_field f;
    CHECK_EQ(sl_batch_field(b, 3, &f), SL_EINVAL);
    CHECK_EQ(sl_batch_field(b, -1, &f), SL_EINVAL);
    CHECK_EQ(sl_batch_find(b, "pixels", &f), SL_EINVAL);
    CHECK_EQ(sl_batch_find(b, NULL, &f), SL_EINVAL);
    void *base;
    size_t len;
    CHECK_EQ(sl_loader_slot_region(ld, NULL, &len), SL_EINVAL);
    CHECK_OK(sl_loader_slot_region(ld, &base, &len));
    CHECK(len > 0);
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
    /* sl_image_decode into a buffer too small */
    unsigned long jl;
    unsigned char *j = fx_jpeg_bytes(64, 48, 1, 0, 90, &jl);
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_VAL;
    o.size = 32;
    uint8_t out[16];
    char err[256] = "";
    CHECK_EQ(sl_image_decode(j, jl, &o, out, sizeof out, err, sizeof err), SL_EINVAL);
    CHECK(err[0] != 0);
    free(j);
    free(d);
}

/* ---- SL_ENOENT, SL_EIO ------------------------------------------------------- */

TEST(enoent_missing_source) {
    sl_config c;
    fx_config(&c, "/nonexistent/sluice/data");
    CHECK_STR_CONTAINS(create_fails(&c, SL_ENOENT), "/nonexistent/sluice/data");
    fx_config(&c, "/nonexistent/sluice/list.csv");
    create_fails(&c, SL_ENOENT);
    fx_config(&c, "/nonexistent/sluice/list.jsonl");
    create_fails(&c, SL_ENOENT);
}

/* A manifest row naming a missing file (SL_ENOENT) and one naming a
 * folder (SL_EIO, not a regular file) are error records; the rest loads. */
TEST(enoent_eio_sample_records) {
    fx_opts o;
    fx_defaults(&o);
    o.images = 6;
    o.manifest = 1;
    fx_dataset *d = fx_new_opts(&o);
    FILE *f = fopen(d->manifest, "a");
    CHECK(f != NULL);
    const char *base = strrchr(d->root, '/') + 1;
    fprintf(f, "%s/c00/missing.jpg,0\n%s/c01,1\n", base, base); /* a file that is not there; a folder */
    CHECK_EQ(fclose(f), 0);
    sl_config c;
    fx_config(&c, d->manifest);
    sl_loader *ld = fx_open(&c);
    CHECK_EQ(sl_loader_dataset_size(ld), 8);
    sl_error_record r[8];
    size_t n = epoch_errors(ld, r, 8);
    CHECK_EQ(n, 2);
    const sl_error_record *m = fx_record_for(ld, r, n, "c00/missing.jpg");
    CHECK_EQ(m->code, SL_ENOENT);
    const sl_error_record *dir = fx_record_for(ld, r, n, "/c01");
    CHECK_EQ(dir->code, SL_EIO);
    CHECK_STR_CONTAINS(dir->reason, "directory");
    CHECK(strcmp(sl_strerror(SL_EIO), sl_strerror(SL_ENOENT)) != 0);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- SL_EEMPTY --------------------------------------------------------------- */

TEST(eempty) {
    char dir[256];
    fx_empty_dir(dir, sizeof dir);
    sl_config c;
    fx_config(&c, dir);
    create_fails(&c, SL_EEMPTY); /* no class folders */
    char cls[300];
    snprintf(cls, sizeof cls, "%s/cat", dir);
    CHECK_EQ(mkdir(cls, 0755), 0);
    create_fails(&c, SL_EEMPTY); /* a class folder without images */
    /* fewer samples than one batch with drop_last */
    fx_dataset *d = fx_new(5, 0, 64, 96);
    fx_config(&c, d->root);
    c.batch_size = 8;
    c.drop_last = 1;
    CHECK_STR_CONTAINS(create_fails(&c, SL_EEMPTY), "drop_last");
    /* more ranks than samples with drop_last: a rank gets nothing */
    c.batch_size = 1;
    c.world_size = 6;
    c.rank = 5;
    create_fails(&c, SL_EEMPTY);
    c.drop_last = 0; /* without drop_last the rank pads by wrapping: fine */
    sl_loader_destroy(fx_open(&c));
    free(d);
}

/* ---- SL_EPARSE ----------------------------------------------------------------- */

TEST(eparse_bad_manifest) {
    char dir[256];
    fx_empty_dir(dir, sizeof dir);
    const char *bad[][2] = {
        {"a.csv", "path,label\n\"unterminated,0\n"},
        {"b.csv", "path,label\nx.jpg,notanumber\n"},
        {"c.jsonl", "{\"path\": \"x.jpg\", \"label\": 1}\n{\"path\": \n"},
        {"d.jsonl", "[1, 2, 3]\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fx_put(dir, bad[i][0], bad[i][1], strlen(bad[i][1]));
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, bad[i][0]);
        sl_config c;
        fx_config(&c, path);
        const char *m = create_fails(&c, SL_EPARSE);
        CHECK_STR_CONTAINS(m, "line");
    }
}

/* ---- bad samples: SL_EFORMAT, SL_ECORRUPT, SL_ELIMIT, SL_EUNSUPPORTED ------ */

TEST(sample_codes_via_image_decode) {
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_VAL;
    o.size = 32;
    uint8_t out[3 * 32 * 32];
    char err[256];
    /* EFORMAT: neither JPEG nor PNG, and empty */
    const char text[] = "GIF89a, or rather just text";
    CHECK_EQ(sl_image_decode(text, sizeof text, &o, out, sizeof out, err, sizeof err), SL_EFORMAT);
    CHECK_EQ(sl_image_decode(text, 0, &o, out, sizeof out, err, sizeof err), SL_EFORMAT);
    sl_image_info info;
    CHECK_EQ(sl_image_probe(text, sizeof text, &info), SL_EFORMAT);
    /* ECORRUPT: a JPEG cut right after its headers */
    unsigned long jl;
    unsigned char *j = fx_jpeg_bytes(200, 150, 5, 0, 90, &jl);
    size_t sos = fx_jpeg_marker(j, jl, 0xDA);
    err[0] = 0;
    CHECK_EQ(sl_image_decode(j, sos + 30, &o, out, sizeof out, err, sizeof err), SL_ECORRUPT);
    CHECK(err[0] != 0);
    /* ELIMIT: pixels and bytes */
    o.max_pixels = 200 * 150 - 1;
    err[0] = 0;
    CHECK_EQ(sl_image_decode(j, jl, &o, out, sizeof out, err, sizeof err), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "pixels");
    o.max_pixels = 0;
    o.max_bytes = jl - 1;
    CHECK_EQ(sl_image_decode(j, jl, &o, out, sizeof out, err, sizeof err), SL_ELIMIT);
    o.max_bytes = 0;
    CHECK_OK(sl_image_decode(j, jl, &o, out, sizeof out, err, sizeof err));
    free(j);
    /* EUNSUPPORTED: lossless and 12-bit JPEG */
    for (int what = 0; what < 2; what++) {
        unsigned char *p = patched_jpeg(what, &jl);
        err[0] = 0;
        CHECK_EQ(sl_image_decode(p, jl, &o, out, sizeof out, err, sizeof err), SL_EUNSUPPORTED);
        CHECK_STR_CONTAINS(err, what == 0 ? "lossless" : "bit");
        free(p);
    }
}

TEST(sample_codes_as_records) {
    fx_dataset *d = fx_new(6, 0, 64, 96);
    const char text[] = "not an image at all";
    fx_put(d->root, "c00/text.jpg", text, sizeof text);
    unsigned long jl;
    unsigned char *j = fx_jpeg_bytes(200, 150, 5, 0, 90, &jl);
    size_t sos = fx_jpeg_marker(j, jl, 0xDA);
    fx_put(d->root, "c00/cut.jpg", j, sos + 30);
    free(j);
    j = fx_jpeg_bytes(400, 300, 6, 0, 90, &jl); /* over max_pixels below */
    fx_put(d->root, "c01/big.jpg", j, jl);
    free(j);
    j = patched_jpeg(0, &jl);
    fx_put(d->root, "c01/lossless.jpg", j, jl);
    free(j);
    j = patched_jpeg(1, &jl);
    fx_put(d->root, "c02/twelve.jpg", j, jl);
    free(j);
    sl_config c;
    fx_config(&c, d->root);
    c.max_pixels = 300 * 300;
    sl_loader *ld = fx_open(&c);
    sl_error_record r[16];
    size_t n = epoch_errors(ld, r, 16);
    CHECK_EQ(n, 5);
    CHECK_EQ(fx_record_for(ld, r, n, "c00/text.jpg")->code, SL_EFORMAT);
    CHECK_EQ(fx_record_for(ld, r, n, "c00/cut.jpg")->code, SL_ECORRUPT);
    CHECK_EQ(fx_record_for(ld, r, n, "c01/big.jpg")->code, SL_ELIMIT);
    CHECK_STR_CONTAINS(fx_record_for(ld, r, n, "c01/big.jpg")->reason, "max_pixels");
    CHECK_EQ(fx_record_for(ld, r, n, "c01/lossless.jpg")->code, SL_EUNSUPPORTED);
    CHECK_EQ(fx_record_for(ld, r, n, "c02/twelve.jpg")->code, SL_EUNSUPPORTED);
    for (size_t i = 0; i < n; i++) CHECK(r[i].reason[0] != 0);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- SL_EBUDGET ------------------------------------------------------------------ */


TEST(ebudget_below_minimum) {
    fx_dataset *d = fx_new(6, 0, 64, 96);
    sl_config c;
    fx_config(&c, d->root);
    c.budget = 1u << 20;
    const char *m = create_fails(&c, SL_EBUDGET);
    CHECK_STR_CONTAINS(m, "minimum");
    CHECK_STR_CONTAINS(m, "1.0 MiB");
    /* tiny budgets fail with a message too, whichever allocation it stops */
    for (uint64_t b = 1; b < (1u << 20); b = b * 4 + 1) {
        c.budget = b;
        create_fails(&c, SL_EBUDGET);
    }
    free(d);
}

/* A sample whose scratch is over the per-sample room (a quarter of the
 * budget): an SL_EBUDGET error record at once (never a wait), the others
 * load. One such file in 31 is not "ordinary" (create accepts the budget). */
TEST(ebudget_sample_never_fits) {
    fx_dataset *d = fx_new(30, 0, 64, 96);
    unsigned long jl;
    unsigned char *j = fx_jpeg_bytes(1280, 960, 9, 1, 98, &jl); /* noise: megabytes, over a quarter of the minimum budget */
    CHECK(jl > (1u << 20));
    fx_put(d->root, "c01/huge_file.jpg", j, jl);
    free(j);
    sl_config c;
    fx_config(&c, d->root);
    c.budget = fx_min_budget(c);
    sl_loader *ld = fx_open(&c);
    sl_error_record r[4];
    size_t n = epoch_errors(ld, r, 4);
    for (size_t i = 0; i < n; i++)
        if (n != 1) fprintf(stderr, "record: sample %llu %s: %s\n", (unsigned long long)r[i].index, sl_strerror(r[i].code), r[i].reason);
    CHECK_EQ(n, 1);
    const sl_error_record *e = fx_record_for(ld, r, n, "c01/huge_file.jpg");
    CHECK_EQ(e->code, SL_EBUDGET);
    CHECK_STR_CONTAINS(e->reason, "scratch");
    CHECK_STR_CONTAINS(e->reason, "a quarter of the budget");
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.samples, 30);
    CHECK_LE(st.peak_accounted_bytes, c.budget);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- SL_EHELD, SL_ESAMPLE, SL_EEND --------------------------------------------- */

TEST(eheld_eend) {
    fx_dataset *d = fx_new(10, 0, 64, 96);
    sl_config c;
    fx_config(&c, d->root);
    c.prefetch = 2;
    sl_loader *ld = fx_open(&c);
    sl_batch *a, *b, *x;
    CHECK_OK(sl_loader_next(ld, &a));
    CHECK_OK(sl_loader_next(ld, &b));
    CHECK_EQ(sl_loader_next(ld, &x), SL_EHELD);
    sl_loader_release(ld, a);
    CHECK_OK(sl_loader_next(ld, &a)); /* batch 2 of 3 */
    CHECK_EQ(sl_batch_len(a), 2);
    sl_loader_release(ld, a);
    sl_loader_release(ld, b);
    CHECK_EQ(sl_loader_next(ld, &x), SL_EEND);
    CHECK(x == NULL);
    CHECK_OK(sl_loader_next(ld, &x)); /* the next epoch */
    CHECK_EQ(sl_batch_epoch(x), 1);
    sl_loader_release(ld, x);
    sl_loader_destroy(ld);
    free(d);
}

TEST(esample_raise) {
    fx_dataset *d = fx_new(7, 1, 64, 96);
    sl_config c;
    fx_config(&c, d->root);
    c.on_error = SL_ON_ERROR_RAISE;
    c.shuffle = 0;
    sl_loader *ld = fx_open(&c);
    int codes[3];
    for (int i = 0; i < 3; i++) {
        sl_batch *b = NULL;
        codes[i] = sl_loader_next(ld, &b);
        sl_loader_release(ld, b);
    }
    /* the bad file sits at index 4: batch 1 fails, then the epoch ends */
    CHECK_EQ(d->kind[4], FX_TRUNCATED);
    CHECK_EQ(codes[0], 0);
    CHECK_EQ(codes[1], SL_ESAMPLE);
    CHECK_EQ(codes[2], SL_EEND);
    sl_error_record r;
    CHECK_EQ(sl_loader_errors(ld, 0, &r, 1), 1);
    CHECK_EQ(r.index, 4);
    CHECK_EQ(r.code, SL_ECORRUPT);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- SL_ESTATE ------------------------------------------------------------------- */

TEST(estate_mismatched_state) {
    fx_dataset *d = fx_new(12, 0, 64, 96);
    sl_config c;
    fx_config(&c, d->root);
    c.seed = 3;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    sl_loader_release(ld, b);
    sl_state good;
    CHECK_OK(sl_loader_get_state(ld, &good));
    CHECK_OK(sl_loader_set_state(ld, &good));
    sl_state s;
#define MISMATCH(expr)                                  \
    do {                                                \
        s = good;                                       \
        expr;                                           \
        CHECK_EQ(sl_loader_set_state(ld, &s), SL_ESTATE); \
    } while (0)
    MISMATCH(s.version = 99);
    MISMATCH(s.seed = 4);
    MISMATCH(s.dataset_size = 13);
    MISMATCH(s.batch_size = 3);
    MISMATCH(s.world_size = 2);
    MISMATCH(s.rank = 1);
    MISMATCH(s.flags ^= 1);  /* shuffle */
    MISMATCH(s.flags ^= 2);  /* drop_last */
    MISMATCH(s.batch = 4);   /* past the epoch's 3 batches */
    MISMATCH(s.tail = 13);   /* past the rank's samples */
    MISMATCH((s.batch = 2, s.tail = 7)); /* tail below the batch's start */
#undef MISMATCH
    /* the loader is unharmed: the good state still resumes */
    CHECK_OK(sl_loader_set_state(ld, &good));
    CHECK_OK(sl_loader_next(ld, &b));
    CHECK_EQ(sl_batch_index(b), 1);
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- SL_EOVERFLOW -------------------------------------------------------------- */

/* The configuration cannot overflow the batch size computation (batch <=
 * 2^20, size <= 16384: at most 2^20 * 4 * 2^28 bytes, far below 2^64; such
 * a batch is SL_EBUDGET), so the public overflow is size parsing. */
TEST(eoverflow) {
    uint64_t v = 0;
    CHECK_EQ(sl_parse_size("20000000T", &v), SL_EOVERFLOW);
    CHECK_EQ(sl_parse_size("18446744073709551616", &v), SL_EOVERFLOW);
    CHECK_OK(sl_parse_size("16777215T", &v)); /* just below 2^64 */
    CHECK_EQ(v, 16777215ull << 40);
    fx_dataset *d = fx_new(4, 0, 64, 96);
    sl_config c;
    fx_config(&c, d->root);
    c.batch_size = 1u << 20;
    c.size = 16384;
    c.flags = SL_FLAG_KEEP_ALPHA;
    CHECK_STR_CONTAINS(create_fails(&c, SL_EBUDGET), "minimum");
    free(d);
}

/* ---- SL_ENOMEM ------------------------------------------------------------------ */

/* Every allocation sl_loader_create makes, failed in turn with a budget
 * far larger than needed: the budget is never the reason, so the code must
 * be SL_ENOMEM, with nothing leaked (ASan) and a message. */
TEST(enomem_create_injection) {
    fx_dataset *d = fx_new(6, 0, 64, 96);
    sl_config c;
    fx_config(&c, d->root);
    c.budget = 1ull << 30;
    sl_loader_destroy(bf_open_failing_each_alloc(&c, NULL));
    free(d);
}

/* The system refusing a worker's grown read buffer for a moment is not the
 * sample's fault: waited out and retried (worker.c), the sample is
 * delivered and nothing is recorded. */
TEST(enomem_sample_retried) {
    fx_dataset *d = fx_new(3, 0, 64, 96);
    unsigned long jl;
    unsigned char *j = fx_jpeg_bytes(640, 480, 9, 1, 98, &jl);
    CHECK(jl > (300u << 10));
    fx_put(d->root, "c02/zz_big.jpg", j, jl); /* the last sample */
    free(j);
    sl_config c;
    fx_config(&c, d->root);
    c.shuffle = 0;
    c.workers = 1;
    c.batch_size = 1;
    c.prefetch = 1;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    for (int i = 0; i < 3; i++) { /* the small ones; the worker then waits for the slot */
        CHECK_OK(sl_loader_next(ld, &b));
        sl_loader_release(ld, b);
    }
    sl__mem_fail_after(0); /* the big sample's buffer, if the worker had not grown it yet */
    CHECK_OK(sl_loader_next(ld, &b));
    sl__mem_fail_after(-1);
    CHECK_EQ(sl_batch_len(b), 1);
    sl_loader_release(ld, b);
    CHECK_EQ(sl_loader_next(ld, &b), SL_EEND);
    sl_error_record r[2];
    CHECK_EQ(sl_loader_errors(ld, 0, r, 2), 0);
    sl_loader_destroy(ld);
    free(d);
}

/* ---- SL_ESYS ------------------------------------------------------------------- */

/* Thread creation refused: a child process drops to an unprivileged user
 * (when root) and sets RLIMIT_NPROC to 0, so pthread_create fails with
 * EAGAIN; create must return SL_ESYS, join the workers it started and free
 * everything. */
TEST(esys_thread_creation) {
    fx_dataset *d = fx_new(4, 0, 64, 96);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0) {
            if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
        }
        struct rlimit rl = {0, 0};
        if (setrlimit(RLIMIT_NPROC, &rl) != 0) _exit(78);
        sl_config c;
        fx_config(&c, d->root);
        c.workers = 3;
        sl_loader *ld = NULL;
        char err[512] = "";
        int rc = sl_loader_create(&c, &ld, err, sizeof err);
        if (rc != SL_ESYS) {
            fprintf(stderr, "child: %s (%s)\n", sl_strerror(rc), err);
            _exit(1);
        }
        if (!strstr(err, "thread")) _exit(2);
        _exit(0); /* _exit: the parent's fixture cleanup must not run here */
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78) {
        fprintf(stderr, "skipped: cannot drop privileges or set RLIMIT_NPROC here\n");
        free(d);
        return;
    }
    CHECK_EQ(WEXITSTATUS(status), 0);
    free(d);
}

/* ---- sl_strerror ------------------------------------------------------------------ */

TEST(strerror_every_code) {
    size_t n = sizeof all_codes / sizeof *all_codes;
    CHECK_EQ(n, 20);
    for (size_t i = 0; i < n; i++) {
        const char *s = sl_strerror(all_codes[i]);
        CHECK(s != NULL && s[0] != 0);
        CHECK(strcmp(s, "unknown error") != 0);
        for (size_t k = 0; k < i; k++) CHECK(strcmp(s, sl_strerror(all_codes[k])) != 0);
    }
    CHECK(strcmp(sl_strerror(SL_OK), "success") == 0);
    CHECK(strcmp(sl_strerror(1), "unknown error") == 0);
    CHECK(strcmp(sl_strerror(-21), "unknown error") == 0);
    CHECK(sl_version() != NULL && strstr(sl_version(), SL_VERSION_STRING) == sl_version());
    CHECK_EQ(sl_version_number(), SL_VERSION_NUMBER);
}

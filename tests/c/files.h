/*
 * Test helpers for file-backed samples, header-only: a generated file as
 * an sl__sample_file, and opening a source with every allocation failing
 * in turn.
 */
#ifndef SL_TEST_FILES_H
#define SL_TEST_FILES_H

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "base/mem.h"
#include "source/source.h"

/* dir/rel opened read-only, offset 0, its whole size. */
static __attribute__((unused)) sl__sample_file open_sample(const char *dir, const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    sl__sample_file f = {.fd = open(path, O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) SL_FAIL("open %s: %s", path, strerror(errno));
    struct stat st;
    CHECK(fstat(f.fd, &st) == 0);
    f.size = (uint64_t)st.st_size;
    return f;
}

/* Open path as a source (with columns req, or none) with allocation n
 * failing, for n = 0, 1, ... until it succeeds (with want_count samples):
 * every failure must be SL_ENOMEM or SL_EBUDGET with a reason, and leave
 * nothing counted. */
static __attribute__((unused)) void fail_each_alloc_cols(const char *path, uint32_t threads, const sl__colreq *req,
                                                         uint32_t nreq, uint64_t want_count) {
    int done = 0;
    for (long n = 0; n < 100000 && !done; n++) {
        sl__budget b;
        sl__budget_init(&b, (uint64_t)64 << 20);
        sl__source *s = NULL;
        char err[512] = "";
        sl__mem_fail_after(n);
        int rc = sl__source_open_cols(&b, path, threads, req, nreq, &s, err, sizeof err);
        sl__mem_fail_after(-1);
        if (rc == 0) {
            CHECK_EQ(sl__source_count(s), want_count);
            sl__source_close(s);
            done = 1;
            if (n < 3) SL_FAIL("open of %s succeeded after only %ld allocations", path, n);
        } else {
            if (rc != SL_ENOMEM && rc != SL_EBUDGET) SL_FAIL("n=%ld: rc %d (%s): %s", n, rc, sl_strerror(rc), err);
            CHECK(s == NULL);
            CHECK(err[0] != 0);
        }
        if (atomic_load(&b.used) != 0) SL_FAIL("n=%ld: %llu bytes still counted", n, (unsigned long long)b.used);
        sl__budget_fini(&b);
    }
    CHECK(done);
}

static __attribute__((unused)) void fail_each_alloc(const char *path, uint32_t threads, uint64_t want_count) {
    fail_each_alloc_cols(path, threads, NULL, 0, want_count);
}

#endif

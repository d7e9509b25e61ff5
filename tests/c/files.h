/*
 * Test helpers for file-backed samples, header-only: a generated file as
 * an sl__sample_file, and the Python generators (tests/c/gen_arrays.py,
 * tools/make_demo_fields.py) run into a folder.
 */
#ifndef SL_TEST_FILES_H
#define SL_TEST_FILES_H

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "source/source.h"

/* dir/rel opened read-only, offset 0, its whole size. */
static __attribute__((unused)) sl__sample_file open_sample(const char *dir, const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    sl__sample_file f = {open(path, O_RDONLY | O_CLOEXEC), 0, 0};
    if (f.fd < 0) SL_FAIL("open %s: %s", path, strerror(errno));
    struct stat st;
    CHECK(fstat(f.fd, &st) == 0);
    f.size = (uint64_t)st.st_size;
    return f;
}

/* python3 $SL_SRC/script args; the case fails if it does. */
static __attribute__((unused)) void run_python(const char *script, const char *args) {
    const char *src = getenv("SL_SRC");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 %s/%s %s", src ? src : ".", script, args);
    if (system(cmd) != 0) SL_FAIL("%s failed (python3 with numpy and Pillow is needed)", cmd);
}

#endif

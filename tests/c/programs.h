/*
 * The project's own programs from tests, header-only: the sluice CLI of
 * this build, a python3 script of the source tree, and the fields demo
 * data that tools/make_demo_fields.py makes.
 */
#ifndef SL_TEST_PROGRAMS_H
#define SL_TEST_PROGRAMS_H

#include "dataset.h" /* first: it defines _GNU_SOURCE */

#include <sys/wait.h>

/* Run `sluice ARGS` (the CLI in $SL_BUILD, else build/) through the shell,
 * capture its stdout (at most cap-1 bytes; add 2>&1 to ARGS for stderr
 * too); returns its exit status, -1 if it did not exit. */
FX_FN int fx_sluice(const char *args, char *out, size_t cap) {
    const char *build = getenv("SL_BUILD");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/sluice' %s", build ? build : "build", args);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* python3 $SL_SRC/script args; the case fails if it does. */
FX_FN void run_python(const char *script, const char *args) {
    const char *src = getenv("SL_SRC");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 %s/%s %s", src ? src : ".", script, args);
    if (system(cmd) != 0) SL_FAIL("%s failed (python3 with numpy and Pillow is needed)", cmd);
}

/* The fields demo data (tools/make_demo_fields.py ARGS) made once per
 * process into a temporary folder, removed at exit: its path. */
FX_FN const char *fx_demo_fields(const char *args) {
    static char dir[256];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "/tmp/sl_demo_fields_XXXXXX");
    if (!mkdtemp(dir)) SL_FAIL("mkdtemp: %s", strerror(errno));
    fx_track(dir);
    char a[512];
    snprintf(a, sizeof a, "%s %s 2>/dev/null", dir, args);
    run_python("tools/make_demo_fields.py", a);
    return dir;
}

#endif

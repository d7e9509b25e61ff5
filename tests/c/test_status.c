/* ctest: tsan */
/*
 * Status files for `sluice top` (src/base/status.c) in /dev/shm, a folder
 * every user may write: a link planted at a status file's name, or at the
 * temporary name an older writer used, is never followed; the name ends
 * up a regular file holding what was written, and the link's target is
 * untouched.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "check.h"
#include "sluice.h"

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    CHECK(fputs(text, f) >= 0);
    CHECK_OK(fclose(f));
}

static void expect_text(const char *path, const char *text) {
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (strcmp(buf, text) != 0) SL_FAIL("%s holds \"%s\", not \"%s\"", path, buf, text);
}

TEST(planted_links_not_followed) {
    unsetenv("SLUICE_STATUS_DIR"); /* the default: /dev/shm where there is one */
    sl__status s;
    CHECK_OK(sl__status_open(&s));
    printf("status file %s\n", s.path);
    char victim[] = "/tmp/sl_status_victim_XXXXXX", other[] = "/tmp/sl_status_other_XXXXXX", tmp[700];
    int a = mkstemp(victim), b = mkstemp(other);
    CHECK(a >= 0 && b >= 0);
    close(a), close(b);
    put(victim, "victim"), put(other, "other");
    snprintf(tmp, sizeof tmp, "%s.tmp", s.path); /* the temporary name writers used before */
    CHECK_OK(symlink(victim, s.path));
    CHECK_OK(symlink(other, tmp));
    const char *text = "{\"status\": 1}";
    CHECK_OK(sl__status_write(&s, text, strlen(text)));
    struct stat st;
    CHECK_OK(lstat(s.path, &st));
    CHECK(S_ISREG(st.st_mode));
    expect_text(s.path, text);
    expect_text(victim, "victim");
    expect_text(other, "other");
    CHECK_OK(lstat(tmp, &st));
    CHECK(S_ISLNK(st.st_mode)); /* left alone */
    /* written again over a link planted after the first write */
    CHECK_OK(unlink(s.path));
    CHECK_OK(symlink(victim, s.path));
    CHECK_OK(sl__status_write(&s, "2", 1));
    CHECK_OK(lstat(s.path, &st));
    CHECK(S_ISREG(st.st_mode));
    expect_text(s.path, "2");
    expect_text(victim, "victim");
    sl__status_close(&s);
    CHECK(access(s.path, F_OK) != 0);
    CHECK_OK(unlink(tmp));
    CHECK_OK(unlink(victim));
    CHECK_OK(unlink(other));
}

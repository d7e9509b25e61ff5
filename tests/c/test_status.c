/* ctest: tsan */
/*
 * Status files for `sluice top` (src/base/status.c) in /dev/shm, a folder
 * every user may write: a link planted at a status file's name, or at the
 * temporary name an older writer used, is never followed; the name ends
 * up a regular file holding what was written, and the link's target is
 * untouched.
 *
 * Whether a file's writer lives is judged by its lock, which the kernel
 * drops at the writer's death (monitor/govstatus.c reads it): a writer
 * killed with SIGKILL is gone at once, though its file stays; a writer in
 * another PID namespace is live; a file rewritten many times over while it
 * is read never looks gone; a child of fork() does not keep a dead
 * parent's file live.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/status.h"
#include "check.h"
#include "monitor/govstatus.h"
#include "procs.h"
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

/* ---- liveness -------------------------------------------------------------------- */

/* A status directory of this test's own, as SLUICE_STATUS_DIR. */
static void status_dir(char dir[64]) {
    snprintf(dir, 64, "/tmp/sl_status_live_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    setenv("SLUICE_STATUS_DIR", dir, 1);
}

static void rm_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

/* A status as a governor writes it (what sl__gov_status_parse reads), with limit n. */
static void publish(sl__status *s, uint64_t n) {
    char text[512];
    int len = snprintf(text, sizeof text,
                       "{\"version\":%d,\"pid\":%ld,\"start_time\":%llu,\"id\":%u,\"time\":1,\"t\":1,"
                       "\"limit_bytes\":%llu,\"ceiling_bytes\":1,\"used_bytes\":1,\"fixed_bytes\":1,"
                       "\"container_limit_bytes\":0,\"container_usage_bytes\":0,\"mem_available_bytes\":0,"
                       "\"psi_some_avg10\":0,\"moves\":0,\"events\":[]}",
                       SL_STATUS_VERSION, s->pid, (unsigned long long)s->start_time, s->id, (unsigned long long)n);
    CHECK_OK(sl__status_write(s, text, (size_t)len));
}

/* SIGKILL a child and reap it. */
static void kill_child(pid_t pid) {
    CHECK_OK(kill(pid, SIGKILL));
    CHECK_EQ(waitpid(pid, NULL, 0), pid);
}

/* A child that publishes a status of limit 1 in SLUICE_STATUS_DIR, then
 * waits (rewrite 0) or rewrites it with limit 2, 3, ... as fast as it
 * can, until killed (it dies with this process too). Returns once it has
 * published. */
static pid_t start_writer(int rewrite) {
    int up[2];
    CHECK_OK(pipe(up));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with the test, should it fail first */
        sl__status s;
        if (sl__status_open(&s)) _exit(91);
        publish(&s, 1);
        put_byte(up[1], 'r');
        for (uint64_t n = 2;; n++)
            if (rewrite) publish(&s, n);
            else pause();
    }
    close(up[1]);
    CHECK_EQ(get_byte(up[0]), 'r');
    close(up[0]);
    return pid;
}

/* The live statuses in dir. */
static size_t scan(const char *dir, sl__gov_status *out, size_t max) {
    return sl__gov_status_scan(dir, NULL, NULL, out, max);
}

static size_t files_in(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '^sluice-gov-.*json$'", dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    unsigned n = 0;
    CHECK_EQ(fscanf(p, "%u", &n), 1);
    pclose(p);
    return n;
}

/* A child publishes a status and waits (its pipe's 'r' says it did), then
 * dies by SIGKILL, its file left behind: shown live before, gone after,
 * without anyone reading /proc. */
TEST(writer_killed_is_gone) {
    char dir[64];
    status_dir(dir);
    pid_t pid = start_writer(0);
    sl__gov_status st[4];
    CHECK_EQ(scan(dir, st, 4), 1);
    CHECK_EQ(st[0].pid, pid);
    CHECK_EQ(st[0].limit, 1);
    kill_child(pid);
    CHECK_EQ(files_in(dir), 1); /* no exit handler ran: the file stays, unlocked */
    CHECK_EQ(scan(dir, st, 4), 0);
    rm_dir(dir);
}

/* The writer in its namespace: publishes ('r'), waits for 'g', closes ('c'). */
static void namespace_writer(void *arg) {
    const int *fd = arg; /* up's write end, down's read end, and the ends it closes */
    close(fd[2]);
    close(fd[3]); /* down's write end: the end of down when the test ends, however */
    sl__status s;
    if (getpid() != 1 || sl__status_open(&s)) _exit(91);
    publish(&s, 7);
    put_byte(fd[0], 'r');
    if (get_byte(fd[1]) != 'g') _exit(92);
    sl__status_close(&s);
    put_byte(fd[0], 'c');
    _exit(0);
}

/* A writer in a PID namespace of its own (pid 1 there; its file names pid
 * 1, which is init here) is live while it runs, and gone once it closed
 * the status. Needs root (CI is root): skipped with the reason elsewhere. */
TEST(writer_in_another_pid_namespace_is_live) {
    char dir[64];
    status_dir(dir);
    int up[2], down[2];
    CHECK_OK(pipe(up));
    CHECK_OK(pipe(down));
    int fds[4] = {up[1], down[0], up[0], down[1]};
    pid_t pid = fork_in_pid_namespace(0, up[1], namespace_writer, fds); /* unshare --pid --fork */
    CHECK(pid >= 0);
    close(up[1]);
    char first = first_report(up[0], pid);
    if (!first) {
        rm_dir(dir);
        return;
    }
    CHECK_EQ(first, 'r');
    sl__gov_status st[4];
    CHECK_EQ(scan(dir, st, 4), 1);
    CHECK_EQ(st[0].pid, 1); /* its own namespace's pid, not one of ours */
    CHECK_EQ(st[0].limit, 7);
    put_byte(down[1], 'g');
    CHECK_EQ(get_byte(up[0]), 'c');
    CHECK_EQ(scan(dir, st, 4), 0);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    rm_dir(dir);
}

/* A writer rewrites its file as fast as it can (each write a new file
 * renamed over the last, the last's lock let go) while this process reads
 * it: every read finds it live, with a value the writer wrote, until the
 * writer has replaced the file 1000 times during the reads. */
TEST(live_while_rewritten) {
    char dir[64];
    status_dir(dir);
    pid_t pid = start_writer(1);
    uint64_t last = 0;
    int reads = 0;
    for (; reads < 200 || last < 1000; reads++) {
        sl__gov_status st[4];
        if (scan(dir, st, 4) != 1) SL_FAIL("read %d: the writer's file was not live", reads);
        CHECK(st[0].limit >= last); /* never an older file */
        last = st[0].limit;
    }
    printf("%d reads while the writer made %llu writes\n", reads, (unsigned long long)last);
    kill_child(pid);
    sl__gov_status st[4];
    CHECK_EQ(scan(dir, st, 4), 0);
    rm_dir(dir);
}

/* A child of fork() of a writer does not keep the parent's file live: the
 * parent (a child of the test) publishes, forks a grandchild that waits,
 * and is killed; its file is gone while the grandchild lives. */
TEST(forked_child_does_not_keep_it_live) {
    char dir[64];
    status_dir(dir);
    int up[2], down[2];
    CHECK_OK(pipe(up));
    CHECK_OK(pipe(down));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]); /* so that the grandchild sees the end of down when this test ends, however */
        sl__status s;
        if (sl__status_open(&s)) _exit(91);
        publish(&s, 5);
        pid_t child = fork();
        if (child == 0) { /* holds every descriptor it was given, until told */
            put_byte(up[1], 'c');
            get_byte(down[0]);
            _exit(0);
        }
        if (child < 0) _exit(92);
        for (;;) pause();
    }
    close(down[0]);
    CHECK_EQ(get_byte(up[0]), 'c');
    sl__gov_status st[4];
    CHECK_EQ(scan(dir, st, 4), 1);
    kill_child(pid);
    CHECK_EQ(scan(dir, st, 4), 0); /* the grandchild still runs */
    put_byte(down[1], 'g');
    close(up[1]);
    CHECK_EQ(get_byte(up[0]), 0); /* the grandchild is gone: every write end closed */
    rm_dir(dir);
}

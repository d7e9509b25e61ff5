/* ctest: tsan */
/*
 * The C harness's watchdog (check.h): a case still running after
 * SL_TEST_WATCHDOG seconds says which case it is and prints every
 * thread's stack (through gdb, where it is installed) before ctest's
 * timeout kills it and keeps nothing. Checked on a case made to hang as a
 * real one would: the case's thread waiting on a library thread (started
 * through base/thread.h, so SIGALRM is blocked there) that never returns.
 */
#include "fixture.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "base/thread.h"
#include "procs.h"

static void *wait_forever(void *arg) {
    (void)arg;
    for (;;) pause(); /* SIGALRM is blocked here: the alarm is for the case's thread */
    return NULL;
}

/* The hung case: returns at once unless SL_TEST_HANG=1 (as in ctest's own
 * run of it); with it, joins a thread that never ends. */
TEST(hangs_when_asked) {
    const char *v = getenv("SL_TEST_HANG");
    if (!v || strcmp(v, "1")) return;
    pthread_t t;
    CHECK_EQ(sl__thread_start(&t, wait_forever, NULL, 0, "sl-hung"), 0);
    pthread_join(t, NULL);
}

TEST(watchdog_names_a_hung_case_and_prints_its_stacks) {
    char out[] = "/tmp/sl-watchdog-XXXXXX";
    int fd = mkstemp(out);
    CHECK(fd >= 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("SL_TEST_WATCHDOG", "1", 1);
        setenv("SL_TEST_HANG", "1", 1);
        execl("/proc/self/exe", "test_harness", "hangs_when_asked", (char *)NULL);
        _exit(127);
    }
    /* gdb attaches and walks every thread in a few seconds; 120 s bounds a
     * watchdog that never fires (the case would hang this one too) */
    int status = wait_child_status(pid, 120);
    char text[65536];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unlink(out);
    CHECK(n >= 0);
    text[n] = 0;
    printf("the hung case's output:\n%s\n", text);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGABRT);
    CHECK_STR_CONTAINS(text, "watchdog: test case hangs_when_asked is still running");
    char gdb[512];
    if (!sl_on_path("gdb", gdb, sizeof gdb)) {
        CHECK_STR_CONTAINS(text, "no gdb on PATH");
    } else if (strstr(text, "ptrace: Operation not permitted")) {
        printf("gdb may not attach here (ptrace refused): the stacks are not checked\n");
    } else { /* both threads' stacks: the case's, in its join, and the library thread's */
        CHECK_STR_CONTAINS(text, "sl-hung");
        CHECK_STR_CONTAINS(text, "#0 ");
    }
}

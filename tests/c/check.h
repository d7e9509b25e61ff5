/*
 * Minimal test harness. A test file holds cases written
 *     TEST(name) { ... }
 * at the start of a line; CMake registers each case as its own ctest test
 * (own process, timeout), running `test_file name`. Checks print both sides
 * and never vanish under NDEBUG. stdout is line-buffered, so what a case
 * printed survives its end however it ends.
 *
 * The watchdog: ctest kills a case past its TIMEOUT and keeps nothing of a
 * hung one but its name. With SL_TEST_WATCHDOG=N in the environment (CMake
 * sets it 30 s under the timeout) SIGALRM fires after N s on the case's
 * thread (the library's threads block it: base/thread.h). Its handler says
 * which case hung, prints every thread's stack through gdb where gdb is
 * installed, and aborts.
 */
#ifndef SL_CHECK_H
#define SL_CHECK_H

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*sl_test_fn)(void);
struct sl_test_case {
    const char *name;
    sl_test_fn fn;
};
#define SL_MAX_CASES 128
static struct sl_test_case sl_cases[SL_MAX_CASES];
static int sl_ncases;

#define TEST(name)                                                                   \
    static void test_##name(void);                                                   \
    __attribute__((constructor)) static void reg_##name(void) {                      \
        if (sl_ncases < SL_MAX_CASES) sl_cases[sl_ncases++] = (struct sl_test_case){#name, test_##name}; \
    }                                                                                \
    static void test_##name(void)

#define SL_FAIL(...)                                                                 \
    do {                                                                             \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                              \
        fprintf(stderr, __VA_ARGS__);                                                \
        fprintf(stderr, "\n");                                                       \
        exit(1);                                                                     \
    } while (0)

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) SL_FAIL("CHECK(%s) failed", #cond);                             \
    } while (0)

#define CHECK_EQ(a, b)                                                               \
    do {                                                                             \
        long long va_ = (long long)(a), vb_ = (long long)(b);                        \
        if (va_ != vb_) SL_FAIL("CHECK_EQ(%s, %s): %lld != %lld", #a, #b, va_, vb_); \
    } while (0)

#define CHECK_LE(a, b)                                                               \
    do {                                                                             \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b); \
        if (!(va_ <= vb_)) SL_FAIL("CHECK_LE(%s, %s): %llu > %llu", #a, #b, va_, vb_); \
    } while (0)

/* rc must be 0; prints sl_strerror otherwise. */
#define CHECK_OK(expr)                                                               \
    do {                                                                             \
        int rc_ = (expr);                                                            \
        if (rc_ != 0) SL_FAIL("%s returned %d (%s)", #expr, rc_, sl_strerror(rc_));  \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                              \
    do {                                                                             \
        const char *h_ = (hay), *n_ = (needle);                                      \
        if (!h_ || !strstr(h_, n_)) SL_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)

/* ---- the watchdog: only async-signal-safe calls in the handler ---- */
extern char **environ;
static const char *sl_wd_case = "";
static char sl_wd_gdb[512], sl_wd_pid[24]; /* found before the case runs: the handler only execs */

static void sl_wd_say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void sl_wd_fire(int sig) {
    (void)sig;
    sl_wd_say("\nwatchdog: test case ");
    sl_wd_say(sl_wd_case);
    sl_wd_say(" is still running (SL_TEST_WATCHDOG); every thread's stack:\n");
    if (sl_wd_gdb[0]) {
        pid_t p = fork();
        if (p == 0) {
            dup2(2, 1);
            char *args[] = {sl_wd_gdb, "-batch", "-nx", "-p", sl_wd_pid, "-ex", "thread apply all bt", NULL};
            execve(sl_wd_gdb, args, environ);
            _exit(127);
        }
        if (p > 0) waitpid(p, NULL, 0);
    } else {
        sl_wd_say("(no gdb on PATH: no stacks)\n");
    }
    signal(SIGABRT, SIG_DFL);
    abort();
}

/* The program name found first on PATH, executable, into out: 1, or 0 (out empty). */
static int sl_on_path(const char *name, char *out, size_t len) {
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(out, len, "%.*s/%s", (int)n, path, name);
        if (!access(out, X_OK)) return 1;
        path += n + (path[n] == ':');
    }
    out[0] = 0;
    return 0;
}

/* Arm the watchdog for case name if SL_TEST_WATCHDOG asks. */
static void sl_wd_arm(const char *name) {
    const char *v = getenv("SL_TEST_WATCHDOG");
    long secs = v ? strtol(v, NULL, 10) : 0;
    if (secs <= 0) return;
    sl_wd_case = name;
    snprintf(sl_wd_pid, sizeof sl_wd_pid, "%ld", (long)getpid());
    sl_on_path("gdb", sl_wd_gdb, sizeof sl_wd_gdb);
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* Yama: gdb is our child, not our parent */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = sl_wd_fire;
    sigaction(SIGALRM, &sa, NULL);
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
    alarm((unsigned)secs);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        for (int i = 0; i < sl_ncases; i++) printf("%s\n", sl_cases[i].name);
        return 0;
    }
    for (int i = 0; i < sl_ncases; i++) {
        if (strcmp(sl_cases[i].name, argv[1]) == 0) {
            sl_wd_arm(sl_cases[i].name);
            sl_cases[i].fn();
            return 0;
        }
    }
    fprintf(stderr, "no test case %s\n", argv[1]);
    return 2;
}

#endif

/*
 * fork() with a running loader (issue 9). In the child the workers do not
 * exist and any lock they held at the fork stays held: every call on an
 * inherited loader must return SL_ESTATE at once, destroy must free only
 * the child's copy, and nothing may hang. A loader made after the fork
 * works. Not under TSan (which does not follow a multi-threaded fork).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "fixture.h"
#include "sluice.h"

/* Wait for pid at most secs; a child still running then is killed and the
 * test fails: a hang is the bug this file looks for. */
static int wait_child(pid_t pid, int secs) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    for (int i = 0; i < secs * 100; i++) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    SL_FAIL("the child hung for %d s", secs);
}

/* GCC 12's libasan has no fork handler for its allocator: a child that
 * allocates deadlocks in malloc when a parent thread was inside malloc at
 * the fork (seen: a size class's lock held by a worker's decode). Under
 * ASan, fork only once the workers are idle (every slot decoded, and a
 * moment for the last commit to settle); plain builds fork while they run,
 * which is what the library must survive. */
static void quiesce_for_asan(sl_loader *ld) {
#if defined(__SANITIZE_ADDRESS__)
    struct timespec ts = {0, 5 * 1000 * 1000};
    sl_stats st;
    do {
        nanosleep(&ts, NULL);
        CHECK_OK(sl_loader_stats(ld, &st));
    } while (st.slots_ready + st.slots_held < st.slots);
    ts.tv_nsec = 100 * 1000 * 1000;
    nanosleep(&ts, NULL);
#else
    (void)ld;
#endif
}

/* In the child: every call on the inherited loader, at once. */
static int child_calls(sl_loader *ld, sl_batch *held) {
    int bad = 0;
#define EXPECT(expr, code)                                                                            \
    do {                                                                                              \
        int rc_ = (expr);                                                                             \
        if (rc_ != (code)) {                                                                          \
            fprintf(stderr, "child: %s returned %d, expected %d\n", #expr, rc_, code);                \
            bad = 1;                                                                                  \
        }                                                                                             \
    } while (0)
    sl_batch *b = (sl_batch *)1;
    EXPECT(sl_loader_next(ld, &b), SL_ESTATE);
    if (b != NULL) bad = 1;
    EXPECT(sl_loader_next_timeout(ld, &b, 1000), SL_ESTATE);
    EXPECT(sl_loader_set_epoch(ld, 5), SL_ESTATE);
    sl_state st;
    EXPECT(sl_loader_get_state(ld, &st), SL_ESTATE);
    EXPECT(sl_loader_set_state(ld, &st), SL_ESTATE);
    sl_stats s;
    EXPECT(sl_loader_stats(ld, &s), SL_ESTATE);
    sl_error_record e;
    EXPECT(sl_loader_last_error(ld, &e), SL_ESTATE);
    EXPECT((int)sl_loader_errors(ld, 0, &e, 1), 0);
    char why[400];
    EXPECT(sl_loader_poisoned(ld, why, sizeof why), SL_ESTATE);
    char pid[32];
    snprintf(pid, sizeof pid, "this is process %ld", (long)getpid());
    if (!strstr(why, "fork()") || !strstr(why, pid) || !strstr(why, "create a new loader after the fork")) {
        fprintf(stderr, "child: poisoned says: %s\n", why);
        bad = 1;
    }
    /* immutable facts still answer */
    if (sl_loader_len(ld) == 0) bad = 1;
    sl_loader_release(ld, held); /* nothing to give back in the child */
    sl_loader_destroy(ld);       /* the child's copy only */
    return bad;
#undef EXPECT
}

TEST(fork_child_gets_estate_never_hangs) {
    fx_dataset *d = fx_new(200, 0, 96, 400);
    sl_config c;
    sl_config_init(&c);
    c.source = d->root;
    c.batch_size = 4;
    c.size = 64;
    c.workers = 4;
    c.budget = 64u << 20;
    sl_loader *ld = fx_open(&c);
    sl_batch *held;
    CHECK_OK(sl_loader_next(ld, &held));
    /* fork again and again while the workers fill slots: some forks find
     * a lock taken (the loader's, the budget's, malloc's) */
    for (int i = 0; i < 20; i++) {
        sl_batch *b;
        if (i % 2) {
            CHECK_OK(sl_loader_next(ld, &b));
            sl_loader_release(ld, b);
        }
        quiesce_for_asan(ld);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child_calls(ld, held));
        CHECK_EQ(wait_child(pid, 20), 0);
    }
    /* the parent's loader is untouched */
    sl_loader_release(ld, held);
    sl_batch *b;
    int rc, n = 0;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        n++;
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    CHECK(n > 0);
    CHECK_EQ(sl_loader_poisoned(ld, NULL, 0), 0);
    sl_loader_destroy(ld);
    free(d);
}

/* A loader made in the child after the fork is a loader like any other. */
TEST(fork_child_makes_its_own_loader) {
    fx_dataset *d = fx_new(24, 0, 48, 96);
    sl_config c;
    sl_config_init(&c);
    c.source = d->root;
    c.batch_size = 8;
    c.size = 32;
    c.workers = 2;
    c.budget = 32u << 20;
    sl_loader *ld = fx_open(&c);
    quiesce_for_asan(ld);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sl_loader_destroy(ld);
        sl_loader *own = NULL;
        if (sl_loader_create(&c, &own, NULL, 0)) _exit(2);
        sl_batch *b;
        int rc, n = 0;
        while ((rc = sl_loader_next(own, &b)) == 0) {
            n += (int)sl_batch_len(b);
            sl_loader_release(own, b);
        }
        sl_loader_destroy(own);
        _exit(rc == SL_EEND && n == 24 ? 0 : 1);
    }
    CHECK_EQ(wait_child(pid, 60), 0);
    sl_loader_destroy(ld);
    free(d);
}

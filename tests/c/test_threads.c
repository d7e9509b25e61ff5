/* ctest: tsan */
/*
 * One thread policy for every handle (base/thread.h): a thread the library
 * starts blocks every asynchronous signal and no synchronous one, carries
 * its name, has the stack its owner counts, and the caller's mask is left
 * as it was. Read from the kernel: /proc/self/task/<tid>/status (SigBlk)
 * and comm. Each kind of handle is checked: a loader's workers, a shared
 * budget's governor (the GPU stage's thread: test_gpu_loader), and the
 * library's sources hold no other pthread_create than the helper's.
 */
#include "threads.h" /* first: fixture.h defines _GNU_SOURCE */

#include <pthread.h>

#include "base/thread.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TX_SANITIZED 1
#else
#define TX_SANITIZED 0
#endif

/* What a thread saw of itself. */
typedef struct self_view {
    tx_thread t;
    size_t stack;
} self_view;

static void *look_at_self(void *arg) {
    self_view *v = arg;
    CHECK_OK(tx_read((long)gettid(), &v->t));
    pthread_attr_t a;
    CHECK_EQ(pthread_getattr_np(pthread_self(), &a), 0);
    CHECK_EQ(pthread_attr_getstacksize(&a, &v->stack), 0);
    pthread_attr_destroy(&a);
    return NULL;
}

/* The caller's mask, as the kernel has it. */
static uint64_t own_mask(void) {
    tx_thread me;
    CHECK_OK(tx_read((long)gettid(), &me));
    return me.blocked;
}

TEST(thread_start_blocks_async_signals_names_and_sizes) {
    /* a caller that blocks SIGUSR2 only: it keeps exactly that */
    sigset_t usr2, before;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    CHECK_EQ(pthread_sigmask(SIG_SETMASK, &usr2, &before), 0);
    uint64_t caller = own_mask();
    CHECK_EQ(caller, (uint64_t)1 << (SIGUSR2 - 1));
    self_view v;
    pthread_t t;
    size_t stack = (size_t)256 << 10;
    CHECK_EQ(sl__thread_start(&t, look_at_self, &v, stack, "sl-a-name-longer-than-fifteen"), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    tx_check_policy(&v.t);
    CHECK(!strcmp(v.t.name, "sl-a-name-longe")); /* cut to the kernel's 15 characters */
    /* the size asked (TSan's runtime adds its own room to every stack) */
    if (v.stack < stack || (!TX_SANITIZED && v.stack >= stack + ((size_t)64 << 10)))
        SL_FAIL("stack %zu for %zu asked", v.stack, stack);
    CHECK_EQ(own_mask(), caller); /* the caller's mask, put back */
    /* no stack asked: the system's default; no name asked: the process's */
    CHECK_EQ(sl__thread_start(&t, look_at_self, &v, 0, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    tx_check_policy(&v.t);
    CHECK(strncmp(v.t.name, "sl-", 3) != 0);
    CHECK_EQ(own_mask(), caller);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
}

/* A governed shared budget and a loader on it: every thread they started
 * is named and follows the policy, and they started no other. */
TEST(every_handle_thread_blocks_async_signals) {
    /* a sanitizer's runtime starts its helper thread with the process's
     * first thread: let that be this one, before the snapshot */
    pthread_t first;
    self_view v;
    CHECK_EQ(pthread_create(&first, NULL, look_at_self, &v), 0);
    CHECK_EQ(pthread_join(first, NULL), 0);
    tx_thread was[512];
    int nwas = tx_threads(was, 512);
    fx_dataset *d = fx_new(24, 0, 64, 200);
    sl_budget *b;
    sl_config c;
    sl_loader *ld = tx_governed_loader(d, 100, 3, &b, &c);
    sl_batch *bt;
    CHECK_OK(sl_loader_next(ld, &bt)); /* the workers ran */
    sl_loader_release(ld, bt);
    CHECK_EQ(tx_check_named("sl-worker-"), 3);
    CHECK_EQ(tx_check_named("sl-governor"), 1);
    tx_thread now[512];
    int n = tx_threads(now, 512);
    for (int i = 0; i < n; i++) {
        int old = 0;
        for (int k = 0; k < nwas && !old; k++) old = was[k].tid == now[i].tid;
        if (!old && strncmp(now[i].name, "sl-", 3))
            SL_FAIL("thread %ld (%s) started by a handle did not come through sl__thread_start", now[i].tid,
                    now[i].name);
    }
    sl_loader_destroy(ld);
    sl_budget_destroy(b);
    CHECK_EQ(tx_check_named("sl-"), 0); /* joined */
    free(d);
}

/* "Every thread the library starts": no pthread_create in src/ but the
 * helper's own. */
TEST(library_starts_threads_only_through_the_helper) {
    const char *src = getenv("SL_SRC");
    if (!src) SL_FAIL("SL_SRC is not set (ctest sets it)");
    char cmd[1024], out[4096] = "";
    snprintf(cmd, sizeof cmd, "grep -rln --include='*.c' 'pthread_create *(' '%s/src' | grep -v '/src/base/thread.c$'",
             src);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    pclose(p);
    if (got) SL_FAIL("pthread_create outside base/thread.c (use sl__thread_start):\n%s", out);
}

/*
 * The threads of this process as the kernel sees them, header-only:
 * name (comm) and blocked signals (SigBlk) of /proc/self/task/<tid>, and
 * the check that a thread follows the library's signal policy
 * (base/thread.h): every asynchronous signal blocked, no synchronous one.
 */
#ifndef SL_TEST_THREADS_H
#define SL_TEST_THREADS_H

#include "fixture.h" /* first: it defines _GNU_SOURCE */

#include <dirent.h>
#include <signal.h>

typedef struct tx_thread {
    long tid;
    char name[32];
    uint64_t blocked; /* bit s-1 for signal s */
} tx_thread;

/* Read /proc/self/task/<tid>/{comm,status} into t; 0, or -1 when the
 * thread ended meanwhile. */
FX_FN int tx_read(long tid, tx_thread *t) {
    char path[96], buf[4096];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (!fgets(t->name, sizeof t->name, f)) t->name[0] = 0;
    fclose(f);
    t->name[strcspn(t->name, "\n")] = 0;
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    if (!(f = fopen(path, "r"))) return -1;
    int found = 0;
    while (fgets(buf, sizeof buf, f))
        if (sscanf(buf, "SigBlk: %" SCNx64, &t->blocked) == 1) found = 1;
    fclose(f);
    if (!found) SL_FAIL("no SigBlk line for thread %ld", tid);
    return 0;
}

/* The state letter of a /proc stat file, a process's (/proc/PID/stat) or
 * a thread's (R running, S sleeping, Z zombie, ...; 0: it ended, before
 * or while the file was read). */
FX_FN char tx_stat_state(const char *path) {
    char buf[512];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    if (n == 0) return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* after the name, which may hold anything */
    CHECK(p && p[1] == ' ');
    return p[2];
}

/* The state letter of thread tid of this process (0: it ended). */
FX_FN char tx_state(long tid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    return tx_stat_state(path);
}

/* Every thread of the process now: how many (at most max in out). */
FX_FN int tx_threads(tx_thread *out, int max) {
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] == '.') continue;
        if (tx_read(strtol(e->d_name, NULL, 10), &out[n]) == 0) n++;
    }
    closedir(d);
    return n;
}

FX_FN int tx_blocks(const tx_thread *t, int sig) { return (int)((t->blocked >> (sig - 1)) & 1); }

/* t blocks every asynchronous signal and no synchronous one. */
FX_FN void tx_check_policy(const tx_thread *t) {
    static const int async[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2,
                                SIGWINCH, SIGVTALRM, SIGPROF, SIGIO, SIGURG, SIGTSTP, SIGCONT};
    static const int sync[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof async / sizeof async[0]; i++)
        if (!tx_blocks(t, async[i]))
            SL_FAIL("thread %ld (%s) does not block signal %d (%s): SigBlk %016" PRIx64, t->tid, t->name, async[i],
                    strsignal(async[i]), t->blocked);
    if (!tx_blocks(t, SIGRTMIN) || !tx_blocks(t, SIGRTMAX))
        SL_FAIL("thread %ld (%s) does not block the real-time signals: SigBlk %016" PRIx64, t->tid, t->name,
                t->blocked);
    for (size_t i = 0; i < sizeof sync / sizeof sync[0]; i++)
        if (tx_blocks(t, sync[i]))
            SL_FAIL("thread %ld (%s) blocks the synchronous signal %d (%s)", t->tid, t->name, sync[i],
                    strsignal(sync[i]));
}

/* Check every thread whose name starts with prefix; returns how many. */
FX_FN int tx_check_named(const char *prefix) {
    tx_thread t[512];
    int n = tx_threads(t, 512), found = 0;
    for (int i = 0; i < n; i++)
        if (!strncmp(t[i].name, prefix, strlen(prefix))) {
            tx_check_policy(&t[i]);
            found++;
        }
    return found;
}

/* The handles whose threads these tests look at: a 64 MiB shared budget
 * with its governor (sampling every period_ms) in *b, and a loader of
 * `workers` workers on it over d, made from *c (filled here). */
FX_FN sl_loader *tx_governed_loader(const fx_dataset *d, uint32_t period_ms, uint32_t workers, sl_budget **b,
                                    sl_config *c) {
    CHECK_OK(sl_budget_create(64u << 20, b));
    sl_governor_opts o;
    sl_governor_opts_init(&o);
    o.period_ms = period_ms;
    char err[512] = "";
    if (sl_budget_govern(*b, &o, err, sizeof err)) SL_FAIL("govern: %s", err);
    sl_config_init(c);
    c->source = d->root;
    c->batch_size = 4;
    c->size = 48;
    c->workers = workers;
    c->shared_budget = *b;
    return fx_open(c);
}

#endif

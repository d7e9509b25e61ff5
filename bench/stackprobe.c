/*
 * Native stacks of a thread caught asleep, for bench/offcpu.py (the GPU host has no debugger and
 * no perf). Preloaded into the measured process (LD_PRELOAD, with STACKPROBE_OUT=FILE set): it
 * installs a SIGUSR2 handler that records the interrupted thread's native stack (backtrace(3)
 * unwinds through the signal frame) into a static table; at exit it writes one line a sample,
 * "tid<TAB>frame;frame;..." innermost first, each frame "library:symbol+0xoff" (the nearest
 * exported symbol, so read it with care inside stripped libraries) or "library+0xoff". offcpu.py
 * sends the signal to one thread with tgkill while that thread sleeps in a futex, so the table says
 * whose lock it waits for: the CUDA driver's (libcuda), PyTorch's (libc10*, libtorch*), glibc's.
 *
 *   cc -O2 -shared -fPIC -o /tmp/stackprobe.so bench/stackprobe.c -ldl
 *
 * A sample's slot is taken with an atomic add, so handlers on several threads do not collide;
 * samples past MAX_SAMPLES are dropped. sluice's threads block asynchronous signals (base/thread.c),
 * so while the probe is on, pthread_sigmask here leaves SIGUSR2 out of every mask it sets: its
 * threads (the GPU engine's `sl-gpu`, the workers) can be probed too.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_FRAMES 48
#define MAX_SAMPLES 8192

static void *frames[MAX_SAMPLES][MAX_FRAMES];
static int depth[MAX_SAMPLES];
static long tids[MAX_SAMPLES];
static int nsamples;
static const char *out_path;

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)si, (void)uc;
    int i = __atomic_fetch_add(&nsamples, 1, __ATOMIC_RELAXED);
    if (i >= MAX_SAMPLES) return;
    tids[i] = syscall(SYS_gettid);
    depth[i] = backtrace(frames[i], MAX_FRAMES);
}

__attribute__((constructor)) static void probe_init(void) {
    out_path = getenv("STACKPROBE_OUT");
    if (!out_path || !*out_path) return;
    void *warm[2];
    backtrace(warm, 2); /* loads the unwinder now, not inside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
}

/* Interposed (LD_PRELOAD): the caller's mask, less SIGUSR2 while the probe is on. */
int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    static int (*real)(int, const sigset_t *, sigset_t *);
    if (!real) real = (int (*)(int, const sigset_t *, sigset_t *))dlsym(RTLD_NEXT, "pthread_sigmask");
    if (!real) return 38; /* ENOSYS */
    if (!set || !out_path || !*out_path || how == SIG_UNBLOCK) return real(how, set, old);
    sigset_t mine = *set;
    sigdelset(&mine, SIGUSR2);
    return real(how, &mine, old);
}

static void frame_name(void *pc, char *buf, size_t len) {
    Dl_info di;
    /* pc - 1: a return address may be the first byte of the next function */
    if (!dladdr((char *)pc - 1, &di) || !di.dli_fname) {
        snprintf(buf, len, "?%p", pc);
        return;
    }
    const char *lib = strrchr(di.dli_fname, '/');
    lib = lib ? lib + 1 : di.dli_fname;
    if (di.dli_sname && di.dli_saddr)
        snprintf(buf, len, "%s:%s+0x%lx", lib, di.dli_sname, (unsigned long)((char *)pc - (char *)di.dli_saddr));
    else
        snprintf(buf, len, "%s+0x%lx", lib, (unsigned long)((char *)pc - (char *)di.dli_fbase));
}

__attribute__((destructor)) static void probe_dump(void) {
    if (!out_path || !*out_path) return;
    signal(SIGUSR2, SIG_IGN);
    FILE *f = fopen(out_path, "w");
    if (!f) return;
    int n = nsamples < MAX_SAMPLES ? nsamples : MAX_SAMPLES;
    char name[512];
    for (int i = 0; i < n; i++) {
        fprintf(f, "%ld\t", tids[i]);
        for (int k = 2; k < depth[i]; k++) { /* 0: the handler, 1: the signal trampoline */
            frame_name(frames[i][k], name, sizeof name);
            fprintf(f, "%s%s", k > 2 ? ";" : "", name);
        }
        fputc('\n', f);
    }
    fclose(f);
}

/* Status files for `sluice top`. See status.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* F_OFD_SETLK */
#endif
#include "base/status.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sys/procfs.h"
#include "sluice.h"

/* Open statuses, for the exit and fork handlers, and their descriptors
 * (lock: reg_mu). */
#define SL_STATUS_MAX 64
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sl__status *reg[SL_STATUS_MAX];
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static _Atomic unsigned next_id;

static void remove_at_exit(void) {
    /* a child of fork() may find the lock held by a parent's thread that
     * is not here: try for a while, never hang the exit */
    int locked = 0;
    for (int i = 0; i < 100 && !(locked = pthread_mutex_trylock(&reg_mu) == 0); i++) usleep(100);
    if (!locked) return;
    for (int i = 0; i < SL_STATUS_MAX; i++)
        if (reg[i] && reg[i]->pid == (long)getpid()) unlink(reg[i]->path); /* not a parent's, after fork() */
    pthread_mutex_unlock(&reg_mu);
}

/* fork(): the list is held across it, so the child's copy is whole. The
 * child closes its copies of the descriptors, whose locks would otherwise
 * keep a dead parent's files looking live, and forgets the parent's files,
 * which are not its to remove. */
static void before_fork(void) { pthread_mutex_lock(&reg_mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&reg_mu); }
static void after_fork_child(void) {
    for (int i = 0; i < SL_STATUS_MAX; i++)
        if (reg[i] && reg[i]->fd >= 0) {
            close(reg[i]->fd);
            reg[i]->fd = -1;
        }
    memset(reg, 0, sizeof reg);
    pthread_mutex_unlock(&reg_mu);
}

static void install_handler(void) {
    atexit(remove_at_exit);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static int is_dir(const char *p) {
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int sl__status_dir(char *out, size_t len) {
    const char *env = getenv("SLUICE_STATUS_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
    const char *d = env && *env ? env : is_dir("/dev/shm") ? "/dev/shm" : xdg;
    if (!is_dir(d) || (size_t)snprintf(out, len, "%s", d) >= len) return SL_ENOENT;
    return 0;
}

static int self_start_time(uint64_t *st) {
    char buf[1024], comm[64];
    size_t n;
    int pid, ppid;
    if (sl__read_text("/proc/self/stat", buf, sizeof buf, &n)) return SL_ENOENT;
    return sl__procstat_parse(buf, n, &pid, &ppid, comm, sizeof comm, st) ? SL_ENOENT : 0;
}

int sl__status_open(sl__status *s) { return sl__status_open_named(s, SL_STATUS_PREFIX); }

int sl__status_open_named(sl__status *s, const char *prefix) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    char dir[512];
    if (sl__status_dir(dir, sizeof dir) || self_start_time(&s->start_time)) return SL_ENOENT;
    s->pid = (long)getpid();
    s->id = atomic_fetch_add(&next_id, 1) + 1;
    if ((size_t)snprintf(s->path, sizeof s->path, "%s/%s%ld-%u.json", dir, prefix, s->pid, s->id) >=
        sizeof s->path)
        return SL_ENOENT;
    pthread_once(&reg_once, install_handler);
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < SL_STATUS_MAX && !s->on; i++)
        if (!reg[i]) {
            reg[i] = s;
            s->on = 1;
        }
    pthread_mutex_unlock(&reg_mu);
    return s->on ? 0 : SL_ENOENT; /* more than SL_STATUS_MAX at once: not published */
}

/* A fresh file beside path, made here and nowhere else: created
 * exclusively (O_EXCL) and never through a link (O_NOFOLLOW), under a name
 * no other writer uses (pid, status and a per-write count), tried again
 * under the next count if a file of that name is in the way. The
 * descriptor, or -1. */
static int open_fresh(const sl__status *s, char *tmp, size_t len) {
    static _Atomic unsigned serial;
    for (int attempt = 0; attempt < 16; attempt++) {
        snprintf(tmp, len, "%s.%ld.%u.tmp", s->path, (long)getpid(), atomic_fetch_add(&serial, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

/* The write lock on the whole of fd's file that says its writer lives. */
static int lock_file(int fd) {
    struct flock l;
    memset(&l, 0, sizeof l); /* l_pid must be 0 for OFD locks */
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    return fcntl(fd, F_OFD_SETLK, &l);
}

/* Written whole into a fresh file, locked, then renamed over the name: a
 * reader never sees half of one, the file at the name is always a locked
 * one while this process lives, and whatever was planted at the name (a
 * link to another file) is replaced, never followed. */
int sl__status_write(sl__status *s, const char *text, size_t len) {
    if (!s->on) return 0;
    char tmp[680];
    int fd = open_fresh(s, tmp, sizeof tmp);
    if (fd < 0) return SL_EIO;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (done != len || lock_file(fd) != 0 || rename(tmp, s->path) != 0) {
        unlink(tmp);
        close(fd);
        return SL_EIO;
    }
    pthread_mutex_lock(&reg_mu); /* a fork() never copies the swap half done */
    int old = s->fd;
    s->fd = fd;
    pthread_mutex_unlock(&reg_mu);
    if (old >= 0) close(old); /* its file is no longer at the name */
    return 0;
}

void sl__status_close(sl__status *s) {
    if (!s->on) return;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < SL_STATUS_MAX; i++)
        if (reg[i] == s) reg[i] = NULL;
    int fd = s->fd;
    s->fd = -1;
    pthread_mutex_unlock(&reg_mu);
    unlink(s->path); /* then the lock goes: the file is never at the name unlocked */
    if (fd >= 0) close(fd);
    s->on = 0;
}

void sl__stext_put(sl__stext *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n > 0) t->len = t->len + (size_t)n < t->cap - 1 ? t->len + (size_t)n : t->cap - 1;
}

void sl__stext_str(sl__stext *t, const char *s) {
    sl__stext_put(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sl__stext_put(t, "\\%c", c);
        else if (c < 0x20) sl__stext_put(t, "\\u%04x", c);
        else sl__stext_put(t, "%c", c);
    }
    sl__stext_put(t, "\"");
}

/*
 * Status files: what a process publishes for `sluice top`, another process,
 * to read: a governor's live limit, ceiling, use and its last moves with
 * their reasons (governor.c writes the text), a tuned loader's workers,
 * slots and the tuner's last decisions (pipeline/tuner.c);
 * monitor/govstatus.c reads both.
 *
 * Where: <dir>/sluice-gov-<pid>-<n>.json (sluice-loader-... for a loader),
 * dir = $SLUICE_STATUS_DIR, else
 * /dev/shm, else $XDG_RUNTIME_DIR (the first that is a folder). The file is
 * written whole into a fresh file (created with O_EXCL | O_NOFOLLOW under
 * a name of this process's) and renamed over the name, so a reader never
 * sees half of one and a link planted at either name is never followed.
 *
 * Liveness is a fact the kernel holds: the writer takes an open file
 * description lock (F_OFD_SETLK, a write lock on the whole file) on each
 * fresh file before renaming it into place, and keeps it (its descriptor
 * open) until the next file has replaced it or the status is closed; the
 * kernel drops it when the writer dies, however it dies. So the file at
 * the name is locked exactly while its writer lives: a reader asks with
 * F_OFD_GETLK (monitor/govstatus.c), never /proc, so a writer in another
 * PID namespace, or a pid reused after a writer was killed, is judged
 * right. A child of fork() closes its copies of the descriptors (a lock is
 * its description's, which the child would otherwise keep alive), and
 * leaves the parent's files alone.
 *
 * Removed when the writer closes it, and at the process's exit for those
 * still open (an atexit handler); a file left by a killed writer is
 * unlocked, so readers leave it out. It still names the process's start
 * time (/proc/self/stat), for people reading it.
 *
 * Threads: a sl__status belongs to one writer thread; the process-wide
 * list of open files (for the exit and fork handlers) and each status's
 * descriptor (swapped by a write, closed in a forked child) are under
 * reg_mu.
 */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include <stddef.h>
#include <stdint.h>

#define SL_STATUS_PREFIX "sluice-gov-"
#define SL_STATUS_LOADER_PREFIX "sluice-loader-" /* a loader's tuner (pipeline/tuner.c) */
#define SL_STATUS_VERSION 1

typedef struct sl__status {
    char path[600];
    uint64_t start_time; /* this process's start, in clock ticks since boot */
    long pid;            /* the process that opened it */
    unsigned id;         /* n of the name: one per status opened in this process */
    int on;              /* registered for removal at exit */
    int fd;              /* the file at path, write-locked while published (-1: none yet) */
} sl__status;

/* The folder status files go in (see above): 0, or SL_ENOENT when there
 * is none (then nothing is published). */
int sl__status_dir(char *out, size_t len);

/* Claim a file name for this process and register it for removal at exit.
 * Nothing is written yet. 0, or SL_ENOENT (no folder, or the process's
 * start time cannot be read: nothing will be published). */
int sl__status_open(sl__status *s);
/* The same under another name prefix (SL_STATUS_LOADER_PREFIX). */
int sl__status_open_named(sl__status *s, const char *prefix);

/* Replace the file's content with text[0..len): a fresh file, locked, then
 * renamed over the name; the one it replaced is let go. 0 or SL_EIO. A
 * status that did not open is ignored (0). */
int sl__status_write(sl__status *s, const char *text, size_t len);

/* Remove the file, let its lock go and forget it. Takes a status that did
 * not open. */
void sl__status_close(sl__status *s);

/* A status file's text, built in a caller's buffer: put appends like
 * printf (cut at the end of the buffer, always NUL-terminated), put_str a
 * JSON string (quotes, backslashes and control characters escaped). */
typedef struct sl__stext {
    char *p;
    size_t len, cap;
} sl__stext;
void sl__stext_put(sl__stext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sl__stext_str(sl__stext *t, const char *s);

#endif

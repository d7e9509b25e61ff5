/*
 * Status files: what a process publishes for `sluice top`, another process,
 * to read. Today the governor's: live limit, ceiling, use and its last
 * moves with their reasons (governor.c writes the text; monitor/govstatus.c
 * reads it).
 *
 * Where: <dir>/sluice-gov-<pid>-<n>.json, dir = $SLUICE_STATUS_DIR, else
 * /dev/shm, else $XDG_RUNTIME_DIR (the first that is a folder). The file is
 * written whole into a fresh file (created with O_EXCL | O_NOFOLLOW under
 * a name of this process's) and renamed over the name, so a reader never
 * sees half of one and a link planted at either name is never followed.
 * It names the process's start time (/proc/self/stat), so a
 * reader can tell a live writer from a stale file whose pid was reused
 * (a process killed before it could remove its files). Removed when the
 * writer closes it, and at the process's exit for those still open (an
 * atexit handler, which leaves alone the files of a parent after fork()).
 *
 * Threads: a sl__status belongs to one writer thread; the process-wide
 * list of open files (for the exit handler) has its own lock.
 */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include <stddef.h>
#include <stdint.h>

#define SL_STATUS_PREFIX "sluice-gov-"
#define SL_STATUS_VERSION 1

typedef struct sl__status {
    char path[600];
    uint64_t start_time; /* this process's start, in clock ticks since boot */
    long pid;            /* the process that opened it */
    unsigned id;         /* n of the name: one per status opened in this process */
    int on;              /* registered for removal at exit */
} sl__status;

/* The folder status files go in (see above): 0, or SL_ENOENT when there
 * is none (then nothing is published). */
int sl__status_dir(char *out, size_t len);

/* Claim a file name for this process and register it for removal at exit.
 * Nothing is written yet. 0, or SL_ENOENT (no folder, or the process's
 * start time cannot be read: nothing will be published). */
int sl__status_open(sl__status *s);

/* Replace the file's content with text[0..len). 0 or SL_EIO. A status
 * that did not open is ignored (0). */
int sl__status_write(sl__status *s, const char *text, size_t len);

/* Remove the file and forget it. Takes a status that did not open. */
void sl__status_close(sl__status *s);

#endif

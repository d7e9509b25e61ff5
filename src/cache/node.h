/*
 * The node cache as other folders name and see it: a segment's name for a
 * dataset and job, and the segments in /dev/shm read from outside (sluice
 * top). Implemented by shm.c, which owns the segments; cache.h includes
 * this header for the folder's users.
 */
#ifndef SL_CACHE_NODE_H
#define SL_CACHE_NODE_H

#include <stddef.h>
#include <stdint.h>

/* The node cache's segment name for a dataset and job: "/sluice-cache-"
 * + a hash of (the source's real path, size, mtime, inode, or a URL source's
 * name, whose version the caller puts in variant; seed; variant,
 * e.g. "encoded" or the decode settings) + a hash of the job key
 * (base/node.h, sl__node_job_key: env TORCHELASTIC_RUN_ID, else
 * MASTER_ADDR:MASTER_PORT, else SLUICE_CACHE_JOB, else the parent pid: the
 * launcher). Returns 0, or
 * SL_ENOENT when source cannot be read (with a sentence). */
int sl__cache_shm_name(char *out, size_t len, const char *source, uint64_t seed, const char *variant,
                       char *err, size_t errlen);

/* A node cache seen from outside (sluice top): its segment read-only,
 * without its lock (a snapshot: counts may be mid-update). */
#define SL_CACHE_SEG_PIDS 16
typedef struct sl__cache_seg {
    char name[72];              /* "/sluice-cache-..." */
    uint64_t segment_bytes;     /* the segment's size (its limit) */
    uint64_t resident_bytes;    /* pages allocated in /dev/shm now */
    uint64_t capacity, bytes, entries;
    uint64_t hits, misses, evictions, storage_bytes_read;
    uint32_t processes;         /* live processes attached (the first SL_CACHE_SEG_PIDS in pids) */
    int32_t pids[SL_CACHE_SEG_PIDS];
} sl__cache_seg;

/* Every node cache segment in /dev/shm, up to max: how many were filled.
 * Never fails (an unreadable segment is left out). */
size_t sl__cache_shm_list(sl__cache_seg *out, size_t max);

#endif

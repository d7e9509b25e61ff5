/*
 * Remote data (remote.c; docs/remote.md): listing an s3:// prefix, a
 * manifest's text, indexing a remote shard (through windows of ranged
 * reads, or the node's record of an earlier scan), and opening a remote
 * file. The requests go through the source's I/O engine (io/engine.h, s->io);
 * what a URL names is source.c's to decide.
 */
#ifndef SL_SOURCE_REMOTE_H
#define SL_SOURCE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "io/object.h"
#include "source/index.h"
#include "source/tar.h"
#include "source/wds.h"

/* The shards under an s3:// prefix (ListObjectsV2): add(ctx, name, len)
 * for each .tar object directly under it, in S3's order (bytes). A prefix
 * that also holds subfolders is refused (an ImageFolder layout over S3 is
 * not read: pack it into shards, or write a manifest). */
int sl__remote_list_shards(sl__source *s, const char *prefix, int (*add)(void *ctx, const char *name, size_t len),
                           void *ctx, char *err, size_t errlen);
/* Mix object o's size and ETag into s->version. */
void sl__remote_note_version(sl__source *s, const sl__obj *o);
/* A manifest's whole text from its URL (counted under SL_MEM_INDEX, a NUL
 * after it). Errors name the URL, the status and what to do. */
int sl__remote_text(sl__source *s, const char *url, char **text, uint64_t *size, char *err, size_t errlen);
/* Index one remote shard (its samples to emit, as sl__wds_scan emits them):
 * from the node's record of an earlier scan of this version when there is
 * one (remote.c, "records"), else by a scan through windows of ranged
 * reads (SL__SCAN_WINDOW bytes, two of them counted under SL_MEM_INDEX
 * while it runs; the next fetched while the scanner works on this one when
 * the reads run in order, a header past a large member fetched alone),
 * recorded for the next time (with sl__wds_scan's checks: the end block,
 * the trailer). *read / *rctx are set, before any sample is emitted, to the
 * reader emit may read labels through; *st as sl__wds_scan sets it. o: the shard's
 * size and ETag when known (sl__remote_stat_all: its record's name); set
 * to the version indexed (reads of its members then ask for it). The
 * scanner's reasons come back as they are ("tar: ..."). */
#define SL__SCAN_WINDOW ((uint64_t)4 << 20)
typedef struct sl__scan_rd sl__scan_rd;
int sl__remote_index_shard(sl__source *s, const char *name, sl__obj *o, sl__wds_sample_fn emit, void *ctx,
                           sl__tar_read_fn *read, void **rctx, sl__wds_stats *st, char *err, size_t errlen);
/* Records are kept (SLUICE_INDEX_CACHE is not "off" and its folder can be made). */
int sl__remote_records_on(void);
/* Sizes and ETags of n objects, all asked at once: objs[i].size, .etag. 0,
 * or the first failure with create's sentence. */
int sl__remote_stat_all(sl__source *s, sl__obj *objs, const char *const *names, uint32_t n, char *err,
                        size_t errlen);
/* Open the remote file name (a full URL) as f: one request (its size and
 * version); the object is then f->obj, freed by sl__sample_close. Codes as
 * sl__source_open_file, the reason the HTTP status or curl's error. */
int sl__remote_open(const sl__source *s, const char *name, sl__sample_file *f, char *reason, size_t rlen);
/* Free what sl__remote_open allocated (f->own). */
void sl__remote_close(sl__sample_file *f);

#endif

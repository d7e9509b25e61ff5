/*
 * Sources: where samples come from. A source is an immutable index built
 * once at open (all its memory counted under SL_MEM_INDEX) and read by any
 * number of workers concurrently without locks.
 *
 *  - folder: ImageFolder layout (class folders, labels by sorted class
 *    name, files found recursively and ordered as torchvision orders them,
 *    torchvision's image extensions, case-insensitive). If the folder has a
 *    `train/` subfolder it is used instead (the layout make_imagenet_like.py
 *    writes).
 *  - manifest: `.csv` (`path,label`, optional header line, RFC 4180
 *    quoting) or `.jsonl` (one object per line with "path" and "label");
 *    paths relative to the manifest's folder unless absolute.
 *  - table (a schema asks for named values): `.jsonl` rows whose keys name
 *    the values (a path, a list of paths, an integer, numbers); only the
 *    keys the schema asks for are indexed.
 *  - remote (docs/remote.md): a path that is an s3://, http:// or https://
 *    URL names shards (a .tar, a brace pattern, an s3:// prefix holding
 *    .tar objects) or a manifest; a manifest's relative paths resolve
 *    against its URL, and any manifest may name URLs. Such a source owns an
 *    I/O engine (io/engine.h) for its life; its samples are read by ranged
 *    GETs.
 *
 * Values. A sample has values in columns. Opened without columns, a source
 * has two: SL__COL_FILE (the sample's file) and SL__COL_LABEL (its integer
 * label). Opened with column requests (sl__source_open_cols), column k
 * answers request k.
 */
#ifndef SL_SOURCE_H
#define SL_SOURCE_H

#include <stdint.h>

#include "base/mem.h"
#include "io/engine.h"
#include "io/object.h"
#include "source/types.h"

/* Index path. threads: how many threads may scan folders (0 = 1). On
 * failure returns SL_ENOENT, SL_EPARSE, SL_EEMPTY, SL_EBUDGET, ... and a
 * sentence in err. */
int sl__source_open(sl__budget *b, const char *path, uint32_t threads, sl__source **out, char *err,
                    size_t errlen);
void sl__source_close(sl__source *s);

uint64_t sl__source_count(const sl__source *s);
uint32_t sl__source_num_classes(const sl__source *s); /* 0 for manifests */
int64_t sl__source_label(const sl__source *s, uint64_t i);
/* Full path of sample i into buf: its length, or SL_EOVERFLOW. */
int sl__source_path(const sl__source *s, uint64_t i, char *buf, size_t len);

/* Open path as a table of the requested columns (jsonl manifests), or, for
 * a folder or a path,label manifest, map the requests onto its file and
 * label (at most one SL__VAL_FILE and one SL__VAL_INT request). Errors as
 * sl__source_open; a request no source key answers is SL_EINVAL naming
 * the key. */
int sl__source_open_cols(sl__budget *b, const char *path, uint32_t threads, const sl__colreq *req, uint32_t nreq,
                         sl__source **out, char *err, size_t errlen);
/* The same with the I/O engine's options for remote data (NULL: the
 * defaults). A remote source's engine is started here (its reserve counted
 * in b) and stopped by sl__source_close. */
int sl__source_open_io(sl__budget *b, const char *path, uint32_t threads, const sl__colreq *req, uint32_t nreq,
                       const sl__io_opts *io, sl__source **out, char *err, size_t errlen);
/* A remote source's version: a hash of its objects' sizes and ETags (the
 * shards', or the manifest's), 0 for a local source (the node cache names
 * its segment by it: a dataset replaced under the same URL gets another). */
uint64_t sl__source_version(const sl__source *s);
/* The source's I/O engine (NULL: every value is local). */
sl__io *sl__source_io(const sl__source *s);
/* Fail every remote read in flight or to come at once (a loader stopping:
 * its workers return instead of waiting out a slow server). */
void sl__source_cancel_io(sl__source *s);

/* The value of sample i in column col: its type, and for lists how many
 * elements (*count); for SL__VAL_INT the integer (*ival). 0 or SL_EINVAL. */
int sl__source_value(const sl__source *s, uint64_t i, uint32_t col, int *type, uint32_t *count, int64_t *ival);
/* Numbers [first, first+n) of an SL__VAL_NUMBERS (or INT) value into out
 * (those that exist): how many the value has in all, or SL_EINVAL. */
int sl__source_numbers(const sl__source *s, uint64_t i, uint32_t col, uint32_t first, double *out, uint32_t n);

/* Open sample i and learn its size without reading it. SL_ENOENT/SL_EIO
 * with a reason; SL_EAGAIN for a failure of the moment (out of file
 * descriptors, EAGAIN, ENOMEM: the caller waits and retries). Never
 * blocks: opened O_NONBLOCK, and anything but a regular file is SL_EIO. */
int sl__source_open_sample(const sl__source *s, uint64_t i, sl__sample_file *f, char *reason,
                           size_t rlen);
/* Open element elem (0 for a single file) of the file value in column col
 * of sample i. */
int sl__source_open_file(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, sl__sample_file *f,
                         char *reason, size_t rlen);
/* Where that file is when it is remote, without a request: 1 with *obj and
 * its bytes [*off, *off + *size) (a remote shard's member), 2 with its URL
 * in name (a manifest's file: size unknown until read), 0 when it is local;
 * SL_EINVAL / SL_EOVERFLOW. */
int sl__source_remote(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, const sl__obj **obj,
                      uint64_t *off, uint64_t *size, char *name, size_t len);
/* Full path of that file into buf: its length, or SL_EOVERFLOW/SL_EINVAL. */
int sl__source_file_path(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, char *buf, size_t len);

/* Read all f->size bytes into buf: 0, or SL_EIO (short read, error), or
 * SL_EAGAIN (EAGAIN, ENOMEM: retry later); remote: SL_ENOENT (the object
 * is gone) or SL_EIO with the HTTP status or curl's error, after the
 * engine's retries. */
int sl__sample_read(const sl__sample_file *f, void *buf, char *reason, size_t rlen);
/* Read exactly n bytes at off, an offset in f's file or object (as
 * pread's; f->offset is where the sample's bytes begin): 0 or an error as
 * sl__sample_read ("shorter than its size" when the file ends first). */
int sl__sample_pread(const sl__sample_file *f, void *buf, uint64_t n, uint64_t off, char *reason, size_t rlen);
/* 1 while f holds an open file or object. */
static inline int sl__sample_is_open(const sl__sample_file *f) { return f->fd >= 0 || f->obj != NULL; }
/* Close f (a closed or zeroed-and-fd -1 one too). */
void sl__sample_close(sl__sample_file *f);
/* 1 if the source's folder was removed since it was opened (a sample that
 * is not found then tells of the dataset, not of one file). */
int sl__source_gone(const sl__source *s);

#endif

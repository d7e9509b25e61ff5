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
 */
#ifndef SL_SOURCE_H
#define SL_SOURCE_H

#include <stdint.h>

#include "../base/mem.h"

typedef struct sl__source sl__source;

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

/* An opened sample: bytes [offset, offset+size) of fd. */
typedef struct sl__sample_file {
    int fd;
    uint64_t offset;
    uint64_t size;
} sl__sample_file;

/* Open sample i and learn its size without reading it. SL_ENOENT/SL_EIO
 * with a reason; SL_EAGAIN for a failure of the moment (out of file
 * descriptors, EAGAIN, ENOMEM: the caller waits and retries). Never
 * blocks: opened O_NONBLOCK, and anything but a regular file is SL_EIO. */
int sl__source_open_sample(const sl__source *s, uint64_t i, sl__sample_file *f, char *reason,
                           size_t rlen);
/* Read all f->size bytes into buf: 0, or SL_EIO (short read, error), or
 * SL_EAGAIN (EAGAIN, ENOMEM: retry later). */
int sl__sample_read(const sl__sample_file *f, void *buf, char *reason, size_t rlen);
void sl__sample_close(sl__sample_file *f);
/* 1 if the source's folder was removed since it was opened (a sample that
 * is not found then tells of the dataset, not of one file). */
int sl__source_gone(const sl__source *s);

/* Manifest parsers, exposed for fuzzing: parse text of len bytes; calls
 * add(ctx, path, path_len, label) per row. 0 or SL_EPARSE with err naming
 * the line. */
typedef int (*sl__manifest_row_fn)(void *ctx, const char *path, size_t path_len, int64_t label);
int sl__manifest_parse_csv(const char *text, size_t len, sl__manifest_row_fn add, void *ctx,
                           char *err, size_t errlen);
int sl__manifest_parse_jsonl(const char *text, size_t len, sl__manifest_row_fn add, void *ctx,
                             char *err, size_t errlen);

#endif

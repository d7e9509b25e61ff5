/*
 * Tar shard sources (shards.c; the WebDataset layout): the shards' members
 * grouped into samples, their values in a table.
 */
#ifndef SL_SOURCE_SHARDS_H
#define SL_SOURCE_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "io/object.h"
#include "source/index.h"

/* What path names: SL__SHARDS_FILE (a .tar
 * file), _FOLDER (a folder with .tar files at its top and no subfolder
 * holding images or videos), _PATTERN (a brace pattern naming no existing
 * file), 0 (not shards), or SL_EINVAL with a reason (a folder holding both
 * shards and folders of images: two datasets in one). */
enum { SL__SHARDS_FILE = 1, SL__SHARDS_FOLDER, SL__SHARDS_PATTERN };
int sl__shards_form(const char *path, char *err, size_t errlen);
/* Scan the shards of path (form above) into s->shards and s->tab, one
 * column per request (req NULL: the image and the label, WebDataset's
 * "jpg;jpeg;png;webp" and "cls"). Errors as sl__source_open, naming the
 * shard and the sample. On failure s holds what was built (freed by
 * sl__source_close). */
int sl__shards_index(sl__source *s, const char *path, int form, const sl__colreq *req, uint32_t nreq, char *err,
                     size_t errlen);
void sl__shards_free(sl__budget *b, sl__shards *h);
/* Open the member of (i, col): a descriptor of its own (the caller closes
 * it), its offset and size. SL_EINVAL (not a file column), SL_ENOENT /
 * SL_EIO (the shard cannot be opened), SL_EAGAIN (out of descriptors for
 * the moment) with a reason. */
int sl__shards_open_file(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, sl__sample_file *f,
                         char *reason, size_t rlen);
/* A remote shard's member of (i, col): its shard's object and its bytes.
 * 0 or SL_EINVAL. */
int sl__shards_remote(const sl__source *s, uint64_t i, uint32_t col, const sl__obj **obj, uint64_t *off,
                      uint64_t *size);
/* "SHARD:PREFIX" of sample i, with ".KEY" of column col (col >= 0) into
 * buf: its length, or SL_EOVERFLOW / SL_EINVAL. */
int sl__shards_path(const sl__source *s, uint64_t i, int col, char *buf, size_t len);
/* Shard descriptors held open. */
uint32_t sl__shards_open_fds(const sl__source *s);

#endif

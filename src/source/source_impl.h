/*
 * Source internals shared by source.c (dispatch, lookup, sample I/O),
 * folder.c (ImageFolder indexing) and manifest.c (CSV/JSONL). Private to
 * src/source/.
 *
 * Layout of an index: a source is a list of chunks (one per class for a
 * folder, one for a manifest). A chunk owns one byte arena holding every
 * name it knows (file names, directory paths) and two arrays of 16-byte
 * records pointing into it, so a million samples cost a handful of
 * allocations, not a million. All of it is counted under SL_MEM_INDEX.
 */
#ifndef SL_SOURCE_IMPL_H
#define SL_SOURCE_IMPL_H

#include <limits.h>
#include <stdint.h>

#include "source/source.h"

/* A name in a chunk's arena: bytes [off, off+len). For a sample, dir is the
 * index of its directory in the chunk's dirs (SL__DIR_NONE: the name is an
 * absolute path used as is). For a directory, dir is scratch for sorting. */
typedef struct sl__rec {
    uint64_t off;
    uint32_t len;
    uint32_t dir;
} sl__rec;
_Static_assert(sizeof(sl__rec) == 16, "sl__rec is 16 bytes");

#define SL__DIR_NONE UINT32_MAX

/* Growable arrays in one chunk. Invariant once indexed: recs are in sample
 * order; dirs[recs[k].dir] is the folder path (relative to the source's
 * base) of sample k; labels (manifests only, else NULL) has nrec entries. */
typedef struct sl__chunk {
    char *arena;
    uint64_t arena_len, arena_cap;
    sl__rec *recs;
    uint64_t nrec, rec_cap;
    sl__rec *dirs;
    uint64_t ndir, dir_cap;
    int64_t *labels;
    uint64_t label_cap;
    int64_t label; /* folder: the class index of every sample here */
    uint64_t first; /* global index of recs[0] */
} sl__chunk;

enum { SL__KIND_FOLDER = 1, SL__KIND_CSV = 2, SL__KIND_JSONL = 3, SL__KIND_TABLE = 4, SL__KIND_TAR = 5 };

#define SL__MAX_COLS 64 /* columns a source can be asked for */

/* A table of values (schema sources): vals[row * ncols + col] is a record
 * into arena, by the column's type:
 *   FILE     bytes [off, off+len) are the path; dir 0 (relative to the
 *            source's base) or SL__DIR_NONE (absolute)
 *   FILES    bytes [off, off + len * 16) hold len FILE records (8-aligned)
 *   INT      off holds the int64's bits; len 0
 *   NUMBERS  bytes [off, off + len * 8) hold len doubles (8-aligned)
 * Immutable once indexed; read by any number of threads without locks. */
typedef struct sl__table {
    char *arena;
    uint64_t arena_len, arena_cap;
    sl__rec *vals;
    uint64_t nvals, val_cap;
    uint32_t ncols;
    int *types;       /* ncols: SL__VAL_* */
    uint64_t nrows;
} sl__table;

typedef struct sl__shards sl__shards; /* shards.c */

struct sl__source {
    sl__budget *b;
    int kind;
    int basefd;        /* O_PATH descriptor of base: samples open relative to it */
    char *base;        /* display prefix of every relative path ("" = cwd) */
    size_t base_len;
    sl__chunk *chunks; /* nchunks, in sample order; folder: index = label */
    uint32_t nchunks;
    uint32_t num_classes;
    uint64_t count;
    sl__table *tab;    /* SL__KIND_TABLE, SL__KIND_TAR (values of the members) */
    sl__shards *shards;/* SL__KIND_TAR */
    uint32_t ncols;    /* columns requested (0: the legacy file + label) */
    uint8_t colmap[SL__MAX_COLS]; /* legacy kinds opened with requests: column -> SL__COL_* */
    int media;         /* folder: SL__MEDIA_IMAGE (default) or SL__MEDIA_VIDEO, set before indexing */
};

/* Appends; each returns 0 or SL_EBUDGET/SL_ENOMEM (chunk unchanged). */
int sl__chunk_put(sl__budget *b, sl__chunk *c, const char *p, size_t n, uint64_t *off);
int sl__chunk_add_rec(sl__budget *b, sl__chunk *c, uint64_t off, uint32_t len, uint32_t dir);
int sl__chunk_add_dir(sl__budget *b, sl__chunk *c, uint64_t off, uint32_t len, uint32_t parent);
int sl__chunk_add_label(sl__budget *b, sl__chunk *c, int64_t label);
/* Give back the slack of grown arrays (copies only when it is worth it). */
int sl__chunk_shrink(sl__budget *b, sl__chunk *c);
void sl__chunk_free(sl__budget *b, sl__chunk *c);

/* Sort n records by (dir if by_dir, then name bytes, shorter first on a
 * tie): byte order, as Python sorts str for UTF-8 names. In place, no
 * allocation, O(n log n) worst case. */
void sl__recs_sort(sl__rec *r, uint64_t n, const char *arena, int by_dir);

/* Decimal int64 in [s, s+n): optional sign, spaces and tabs around it
 * allowed. 0, or -1 (not such a number, or out of range). */
int sl__parse_int(const char *s, size_t n, int64_t *out);

/* One CSV record (RFC 4180) of text[0, n) from *pos, blank lines skipped
 * first: its fields decoded one after another into buf (cap bytes), field
 * k at buf[f[k].off, + f[k].len) (trunc: cut short by cap), at most maxf
 * stored and all of them counted in *nf. *line counts lines (records may
 * span several); *rec_line is the record's first. 0 (a record), 1 (no more
 * records), or SL_EPARSE with err "line N: ...". (manifest.c) */
typedef struct sl__csv_field {
    size_t off, len;
    int trunc;
} sl__csv_field;
int sl__csv_record(const char *t, size_t n, size_t *pos, uint64_t *line, uint64_t *rec_line, sl__csv_field *f,
                   uint32_t maxf, uint32_t *nf, char *buf, size_t cap, char *err, size_t errlen);

/* 1 for an errno of the moment, not of the file (out of descriptors,
 * EAGAIN, ENOMEM...): the caller returns SL_EAGAIN, the worker retries. */
int sl__transient(int e);

/* SL_EBUDGET if want bytes more would pass the budget, else SL_ENOMEM. */
int sl__nomem_code(const sl__budget *b, uint64_t want);
/* For an index that ran out of room, into buf: "the index holds 12.0 MiB
 * of a 16.0 MiB budget", and when done of total (bytes, shards) are known,
 * ", 41% through: about 29 MiB for all of it". Returns buf. */
const char *sl__index_room(const sl__budget *b, uint64_t done, uint64_t total, char *buf, size_t len);

/* Index a folder / parse a manifest into s (s->b set, base not yet). On
 * failure s holds whatever was built; sl__source_close frees it. */
int sl__folder_index(sl__source *s, const char *root, uint32_t threads, char *err, size_t errlen);
int sl__manifest_index(sl__source *s, const char *path, int kind, char *err, size_t errlen);
/* Index a manifest's requested keys into s->tab (table.c): a .jsonl
 * (kind SL__KIND_JSONL) by its rows' keys, a .csv (SL__KIND_CSV) by its
 * header's names. A .csv whose first row is a path,label row (two fields,
 * an integer second) has no header: it is indexed as a path,label
 * manifest instead (s->tab stays NULL). s->kind is set to what was built. */
int sl__table_index(sl__source *s, const char *path, int kind, const sl__colreq *req, uint32_t nreq, char *err,
                    size_t errlen);
/* A table of ncols columns (types to be set by the caller), empty. 0 or
 * SL_EBUDGET/SL_ENOMEM. */
int sl__table_new(sl__budget *b, uint32_t ncols, sl__table **out);
/* Append n bytes to t's arena (8-aligned when align): their offset in *off.
 * 0, or SL_EOVERFLOW/SL_EBUDGET/SL_ENOMEM (the table unchanged). */
int sl__table_put(sl__budget *b, sl__table *t, const void *src, size_t n, int align, uint64_t *off);
/* Append one value record (row-major: a row's ncols records in turn). */
int sl__table_add(sl__budget *b, sl__table *t, sl__rec r);
/* Give back the arrays' unused capacity once the table is complete. */
void sl__table_shrink(sl__budget *b, sl__table *t);
void sl__table_free(sl__budget *b, sl__table *t);
/* The record of (row, col) and the column's type. */
static inline const sl__rec *sl__table_at(const sl__table *t, uint64_t row, uint32_t col) {
    return &t->vals[row * t->ncols + col];
}

/* Tar shard sources (shards.c). What path names: SL__SHARDS_FILE (a .tar
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
/* "SHARD:PREFIX" of sample i, with ".KEY" of column col (col >= 0) into
 * buf: its length, or SL_EOVERFLOW / SL_EINVAL. */
int sl__shards_path(const sl__source *s, uint64_t i, int col, char *buf, size_t len);
/* Shard descriptors held open. */
uint32_t sl__shards_open_fds(const sl__source *s);

#endif

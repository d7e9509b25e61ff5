/*
 * A source's index, private to src/source/: what every indexer (folder.c,
 * manifest.c, table.c, shards.c) builds and source.c reads, and the
 * storage they build it with.
 *
 * Layout of an index: a source is a list of chunks (one per class for a
 * folder, one for a manifest). A chunk owns one byte arena holding every
 * name it knows (file names, directory paths) and two arrays of 16-byte
 * records pointing into it, so a million samples cost a handful of
 * allocations, not a million. All of it is counted under SL_MEM_INDEX.
 * Schema sources hold their values in a table (table.h), tar shards their
 * members' places too (shards.h).
 */
#ifndef SL_SOURCE_INDEX_H
#define SL_SOURCE_INDEX_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "io/engine.h"
#include "source/types.h"

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

typedef struct sl__table sl__table;   /* table.h */
typedef struct sl__shards sl__shards; /* shards.h */

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
    sl__io *io;        /* remote values (remote.c): the engine, or NULL */
    uint64_t version;  /* a remote source's objects' sizes and ETags, hashed (sl__source_version) */
    uint64_t records_used; /* remote shards indexed from the node's records (remote.c) */
    int url_base;      /* base is a manifest's URL: relative paths resolve against it */
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

/* 1 for an errno of the moment, not of the file (out of descriptors,
 * EAGAIN, ENOMEM...): the caller returns SL_EAGAIN, the worker retries. */
int sl__transient(int e);

/* SL_EBUDGET if want bytes more would pass the budget, else SL_ENOMEM. */
int sl__nomem_code(const sl__budget *b, uint64_t want);
/* For an index that ran out of room, into buf: "the index holds 12.0 MiB
 * of a 16.0 MiB budget", and when done of total (bytes, shards) are known,
 * ", 41% through: about 29 MiB for all of it". Returns buf. */
const char *sl__index_room(const sl__budget *b, uint64_t done, uint64_t total, char *buf, size_t len);

#endif

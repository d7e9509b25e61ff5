/*
 * Tables of values, the index of schema sources (table.c): a .jsonl
 * manifest's requested keys, a .csv's header's columns, and the members
 * of tar shards (shards.c fills one too).
 */
#ifndef SL_SOURCE_TABLE_H
#define SL_SOURCE_TABLE_H

#include <stdint.h>

#include "base/mem.h"
#include "source/index.h"

/* A table of values (schema sources): vals[row * ncols + col] is a record
 * into arena, by the column's type:
 *   FILE     bytes [off, off+len) are the path; dir 0 (relative to the
 *            source's base) or SL__DIR_NONE (absolute)
 *   FILES    bytes [off, off + len * 16) hold len FILE records (8-aligned)
 *   INT      off holds the int64's bits; len 0
 *   NUMBERS  bytes [off, off + len * 8) hold len doubles (8-aligned)
 * Immutable once indexed; read by any number of threads without locks. */
struct sl__table {
    char *arena;
    uint64_t arena_len, arena_cap;
    sl__rec *vals;
    uint64_t nvals, val_cap;
    uint32_t ncols;
    int *types;       /* ncols: SL__VAL_* */
    uint64_t nrows;
};

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

#endif

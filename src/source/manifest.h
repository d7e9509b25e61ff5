/*
 * Manifests (manifest.c): path,label rows in CSV or JSONL, and the CSV
 * record reader tables share.
 */
#ifndef SL_SOURCE_MANIFEST_H
#define SL_SOURCE_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "source/index.h"

/* Parse the path,label manifest at path (kind SL__KIND_CSV or
 * SL__KIND_JSONL) into s (s->b set, base not yet). On failure s holds
 * whatever was built; sl__source_close frees it. */
int sl__manifest_index(sl__source *s, const char *path, int kind, char *err, size_t errlen);

/* One CSV record (RFC 4180) of text[0, n) from *pos, blank lines skipped
 * first: its fields decoded one after another into buf (cap bytes), field
 * k at buf[f[k].off, + f[k].len) (trunc: cut short by cap), at most maxf
 * stored and all of them counted in *nf. *line counts lines (records may
 * span several); *rec_line is the record's first. 0 (a record), 1 (no more
 * records), or SL_EPARSE with err "line N: ...". */
typedef struct sl__csv_field {
    size_t off, len;
    int trunc;
} sl__csv_field;
int sl__csv_record(const char *t, size_t n, size_t *pos, uint64_t *line, uint64_t *rec_line, sl__csv_field *f,
                   uint32_t maxf, uint32_t *nf, char *buf, size_t cap, char *err, size_t errlen);

/* Manifest parsers, exposed for fuzzing: parse text of len bytes; calls
 * add(ctx, path, path_len, label) per row. 0 or SL_EPARSE with err naming
 * the line. */
typedef int (*sl__manifest_row_fn)(void *ctx, const char *path, size_t path_len, int64_t label);
int sl__manifest_parse_csv(const char *text, size_t len, sl__manifest_row_fn add, void *ctx,
                           char *err, size_t errlen);
int sl__manifest_parse_jsonl(const char *text, size_t len, sl__manifest_row_fn add, void *ctx,
                             char *err, size_t errlen);

#endif

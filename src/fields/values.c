/*
 * sl_source: a dataset's samples and raw values through the public API
 * (include/sluice.h), for tools such as `sluice pack`: the schema parsed
 * as a loader parses it (schema.c), the source indexed with the same
 * column requests, values and file bytes handed out as they are. Nothing
 * is decoded. The index lives in the source's own budget.
 */
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/util.h"
#include "fields/field.h"
#include "ops/ops.h"

_Static_assert((int)SL_VALUE_FILE == (int)SL__VAL_FILE && (int)SL_VALUE_FILES == (int)SL__VAL_FILES &&
                   (int)SL_VALUE_INT == (int)SL__VAL_INT && (int)SL_VALUE_NUMBERS == (int)SL__VAL_NUMBERS,
               "public value types are the source's");

struct sl_source {
    sl__budget budget;
    sl__schema sc;
    sl__source *src;
    uint32_t n;                             /* values per sample */
    const sl__field *val[SL__MAX_FIELDS];  /* value k: its field (col = k) */
};

int sl_source_open(const sl_config *cfg, sl_source **out, char *err, size_t errlen) {
    if (!cfg || !out) return SL_EINVAL;
    *out = NULL;
    sl_config c;
    sl_image_recipe recipe;
    int rc = sl__config_import(&c, &recipe, cfg, err, errlen);
    if (rc) return rc;
    if (!c.source) {
        sl__msg(err, errlen, "sl_config: set source");
        return SL_EINVAL;
    }
    sl_source *s = calloc(1, sizeof *s);
    if (!s) return SL_ENOMEM;
    rc = sl__budget_init(&s->budget, c.budget ? c.budget : (uint64_t)512 << 20);
    if (rc) {
        free(s);
        return rc;
    }
    sl__colreq req[SL__MAX_FIELDS];
    rc = sl__schema_parse(&c, &s->sc, err, errlen);
    uint32_t nreq = rc ? 0 : sl__schema_columns(&s->sc, req);
    if (!rc)
        rc = sl__source_open_cols(&s->budget, c.source, 1, c.fields ? req : NULL, c.fields ? nreq : 0, &s->src, err,
                                  errlen);
    if (rc) {
        sl_source_close(s);
        return rc;
    }
    for (uint32_t i = 0; i < s->sc.nfields; i++)
        if (s->sc.fields[i].col >= 0) s->val[s->n++] = &s->sc.fields[i];
    *out = s;
    return 0;
}

void sl_source_close(sl_source *s) {
    if (!s) return;
    sl__source_close(s->src);
    sl__schema_fini(&s->sc);
    sl__budget_fini(&s->budget);
    free(s);
}

uint64_t sl_source_len(const sl_source *s) { return s ? sl__source_count(s->src) : 0; }
int sl_source_num_values(const sl_source *s) { return s ? (int)s->n : 0; }

int sl_source_value_sized(const sl_source *s, uint64_t i, int k, sl_value *out, size_t out_size) {
    if (!s || !out || !out_size || k < 0 || (uint32_t)k >= s->n) return SL_EINVAL;
    const sl__field *f = s->val[k];
    sl_value v;
    memset(&v, 0, sizeof v);
    v.name = f->name;
    v.kind = f->kind->id;
    int rc = sl__source_value(s->src, i, (uint32_t)f->col, &v.type, &v.count, &v.ival);
    sl__abi_out(out, out_size, &v, sizeof v);
    return rc;
}

int sl_source_numbers(const sl_source *s, uint64_t i, int k, uint32_t first, double *out, uint32_t n) {
    if (!s || k < 0 || (uint32_t)k >= s->n || (n && !out)) return SL_EINVAL;
    return sl__source_numbers(s->src, i, (uint32_t)s->val[k]->col, first, out, n);
}

/* Open file elem of value k of sample i. */
static int open_file(const sl_source *s, uint64_t i, int k, uint32_t elem, sl__sample_file *f, char *err,
                     size_t errlen) {
    f->fd = -1;
    if (!s || k < 0 || (uint32_t)k >= s->n) {
        sl__msg(err, errlen, "value %d out of range", k);
        return SL_EINVAL;
    }
    char reason[SL_REASON_MAX], path[SL_PATH_MAX];
    int rc = sl__source_open_file(s->src, i, (uint32_t)s->val[k]->col, elem, f, reason, sizeof reason);
    if (rc && sl__source_file_path(s->src, i, (uint32_t)s->val[k]->col, elem, path, sizeof path) >= 0)
        sl__msg(err, errlen, "sample %llu, %s (%s): %s", (unsigned long long)i, s->val[k]->name, path, reason);
    else if (rc)
        sl__msg(err, errlen, "sample %llu, %s: %s", (unsigned long long)i, s->val[k]->name, reason);
    return rc;
}

int sl_source_file(const sl_source *s, uint64_t i, int k, uint32_t elem, uint64_t *size, char *name,
                   size_t namelen, char *err, size_t errlen) {
    sl__sample_file f;
    int rc = open_file(s, i, k, elem, &f, err, errlen);
    if (rc) return rc;
    if (size) *size = f.size;
    sl__sample_close(&f);
    if (name && namelen && sl__source_file_path(s->src, i, (uint32_t)s->val[k]->col, elem, name, namelen) < 0) {
        sl__msg(err, errlen, "sample %llu, %s: its name is longer than %zu bytes", (unsigned long long)i,
                s->val[k]->name, namelen);
        return SL_EOVERFLOW;
    }
    return 0;
}

int64_t sl_source_read(const sl_source *s, uint64_t i, int k, uint32_t elem, void *buf, size_t len, char *err,
                       size_t errlen) {
    sl__sample_file f;
    int rc = open_file(s, i, k, elem, &f, err, errlen);
    if (rc) return rc;
    char reason[SL_REASON_MAX];
    if (f.size > len || f.size > INT64_MAX) {
        sl__msg(err, errlen, "sample %llu, %s: %llu bytes do not fit a buffer of %zu", (unsigned long long)i,
                s->val[k]->name, (unsigned long long)f.size, len);
        rc = SL_EOVERFLOW;
    } else if ((rc = sl__sample_read(&f, buf, reason, sizeof reason))) {
        sl__msg(err, errlen, "sample %llu, %s: %s", (unsigned long long)i, s->val[k]->name, reason);
    }
    int64_t n = rc ? rc : (int64_t)f.size;
    sl__sample_close(&f);
    return n;
}

/*
 * The sequence kind: a list of files of one kind (the "of" options),
 * loaded one by one and stacked on a new leading axis: [length, ...] where
 * the element's output is [...]. Its "length" is the option, or the first
 * sample's list length; a sample with another count is an error record (a
 * fixed slot cannot hold a longer list, and padding a shorter one would
 * hide missing data). When the element has "<name>_len" (arrays with
 * "points"), the sequence's is int64 [length], one per element.
 */
#include <string.h>

#include "base/util.h"
#include "fields/field.h"
#include "fields/kind_util.h"

static int seq_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    (void)cfg;
    static const char *const allowed[] = {"of", "length", NULL};
    uint64_t n = 0;
    int rc;
    if ((rc = sl__opts_only(f, opts, allowed, err, errlen)) ||
        (rc = sl__opt_uint(f, opts, "length", 1, 1u << 16, &n, err, errlen)))
        return rc;
    f->count = (uint32_t)n;
    return 0;
}

/* The element is parsed by then (schema.c): shape = [length] + element's. */
static int seq_resolve(sl__field *f, const sl__source *src, char *err, size_t errlen) {
    const sl__field *e = f->of;
    if (!f->count) {
        int type;
        uint32_t count;
        int64_t iv;
        if (sl__source_value(src, 0, (uint32_t)f->col, &type, &count, &iv) || type != SL__VAL_FILES) {
            sl__msg(err, errlen, "field \"%s\": the first sample has no list of files", f->name);
            return SL_EINVAL;
        }
        f->count = count;
    }
    if (e->ndim + 1 > SL_MAX_DIMS - 1) {
        sl__msg(err, errlen, "field \"%s\": a sequence of %u-d elements has too many dimensions", f->name, e->ndim);
        return SL_EINVAL;
    }
    f->dtype = e->dtype;
    f->ndim = e->ndim + 1;
    f->shape[0] = f->count;
    memcpy(f->shape + 1, e->shape, e->ndim * sizeof e->shape[0]);
    f->has_len = e->has_len;
    f->len_count = e->has_len ? f->count : 0;
    return 0;
}

static int seq_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    const sl__field *e = f->of;
    int type;
    uint32_t count;
    int64_t iv;
    int rc = sl__source_value(L->src, L->index, (uint32_t)f->col, &type, &count, &iv);
    if (rc) return rc;
    if (count != f->count) {
        sl__msg(reason, rlen, "a list of %u files; the sequence's length is %u", count, f->count);
        return SL_EINVAL;
    }
    for (uint32_t k = 0; k < count; k++) {
        L->elem = k;
        rc = e->kind->load(L, e, dst + (uint64_t)k * e->sample_bytes, len ? len + k : NULL, reason, rlen);
        if (rc) {
            char tmp[SL_REASON_MAX];
            snprintf(tmp, sizeof tmp, "%s", reason);
            sl__msg(reason, rlen, "element %u: %s", k, tmp);
            break;
        }
    }
    L->elem = 0;
    return rc;
}

static int seq_fixed_output(const sl__field *f) {
    return f->of->kind->fixed_output && f->of->kind->fixed_output(f->of);
}

const sl__kind sl__kind_sequence = {.name = "sequence", .id = SL_KIND_SEQUENCE, .value_type = SL__VAL_FILES,
                                    .media = SL__MEDIA_IMAGE, .parse = seq_parse, .resolve = seq_resolve,
                                    .load = seq_load, .fixed_output = seq_fixed_output};

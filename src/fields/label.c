/*
 * Literal kinds: values the source holds itself, no file read.
 *   label   int64 [] — an integer (a folder's class index, a manifest's label)
 *   target  float32 [length] — a fixed number of numbers ("length"
 *           required), for regression targets; a row with another count,
 *           or a number outside float32's range (it would be an infinity),
 *           is an error record
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "base/util.h"
#include "fields/field.h"
#include "fields/kind_util.h"

static int label_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    (void)cfg;
    static const char *const allowed[] = {NULL};
    int rc = sl__opts_only(f, opts, allowed, err, errlen);
    if (rc) return rc;
    f->dtype = SL_DTYPE_INT64;
    f->ndim = 0;
    return 0;
}

static int label_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    (void)len;
    int type;
    uint32_t count;
    int64_t v;
    int rc = sl__source_value(L->src, L->index, (uint32_t)f->col, &type, &count, &v);
    if (rc || type != SL__VAL_INT) {
        sl__msg(reason, rlen, "no integer label");
        return rc ? rc : SL_EINVAL;
    }
    memcpy(dst, &v, 8);
    return 0;
}

const sl__kind sl__kind_label = {.name = "label", .id = SL_KIND_LABEL, .value_type = SL__VAL_INT, .parse = label_parse,
                                 .load = label_load};

static int target_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    (void)cfg;
    static const char *const allowed[] = {"length", NULL};
    uint64_t n = 0;
    int rc;
    if ((rc = sl__opts_only(f, opts, allowed, err, errlen)) ||
        (rc = sl__opt_uint(f, opts, "length", 1, 1u << 20, &n, err, errlen)))
        return rc;
    if (!n) {
        sl__msg(err, errlen, "field \"%s\": a target needs \"length\": how many numbers a sample has", f->name);
        return SL_EINVAL;
    }
    f->count = (uint32_t)n;
    f->dtype = SL_DTYPE_FLOAT32;
    f->ndim = 1;
    f->shape[0] = (int64_t)n;
    return 0;
}

static int target_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    (void)len;
    int type;
    uint32_t count;
    int64_t iv;
    int rc = sl__source_value(L->src, L->index, (uint32_t)f->col, &type, &count, &iv);
    if (rc) return rc;
    if (count != f->count) {
        sl__msg(reason, rlen, "target has %u numbers, the schema's length is %u", count, f->count);
        return SL_EINVAL;
    }
    float *out = (float *)dst;
    double run[256];
    for (uint32_t at = 0; at < count; at += 256) {
        uint32_t k = SL_MIN(256u, count - at);
        if ((rc = sl__source_numbers(L->src, L->index, (uint32_t)f->col, at, run, k)) < 0) return rc;
        for (uint32_t j = 0; j < k; j++) {
            out[at + j] = (float)run[j];
            if (!isfinite(out[at + j])) { /* 3.4e39: finite as a double, not as a float32 */
                sl__msg(reason, rlen, "target number %u is %.6g, outside float32's range (+-%.6g)", at + j, run[j],
                        (double)FLT_MAX);
                return SL_EINVAL;
            }
        }
    }
    return 0;
}

const sl__kind sl__kind_target = {.name = "target", .id = SL_KIND_TARGET, .value_type = SL__VAL_NUMBERS,
                                  .parse = target_parse, .load = target_load};

/*
 * The array kind: an `.npy` file (versions 1-3, any numeric dtype, either
 * byte order, C or Fortran order) or a raw file of declared dtype and
 * shape, read only as far as its window (format/array.h for the headers,
 * ops/array.h for the ops and the read), straight into the slot: native
 * byte order, C order, the field's dtype and fixed shape.
 *
 * Options:
 *   "format"       "npy" or "raw"; absent: raw when "shape" is given, else npy
 *   "dtype"        npy: the output dtype (a cast); raw: the stored dtype (required)
 *   "cast"         the output dtype, for either format (npy: instead of "dtype")
 *   "shape"        raw: the stored C-order shape, one -1 for the free axis
 *   "byte_order"   raw: "little" (default) or "big"
 *   "layout"       a letter per axis ("HWC", "CHW"): where crops find H and W
 *   "crop"         [h, w]: a random window (crop_group: the same for the group)
 *   "center_crop"  [h, w]: the centre window
 *   "pad"          the output shape: zeros at the end of each axis
 *   "points"       N rows of axis 0: a random subset, or all rows then zeros;
 *                  adds int64 "<name>_len" (the valid rows)
 *   "max_bytes"    file size limit (default 4 GiB: only the window is read,
 *                  so the file's size costs no memory; a sanity bound)
 * The output shape is fixed at resolve from the options and the first
 * sample's header (sl__array_out_shape); a later sample that does not fit
 * it is an error record naming both shapes, never a resize.
 *
 * Memory: the header is read on the stack; the read's scratch (a window of
 * at most 1 MiB, the subset's bitmap) is reserved from the budget through
 * the worker's scratch before reading, and given back by the read.
 */
#include <string.h>

#include "base/util.h"
#include "fields/field.h"
#include "fields/kind_util.h"
#include "format/array.h"
#include "ops/array.h"

#define ARRAY_DEFAULT_MAX_BYTES ((uint64_t)4 << 30)

typedef __typeof__(((sl__field *)0)->u.array) array_opts;

/* A dtype by its name ("float32", "uint8", ...): SL_DTYPE_*, or absent. */
static int opt_dtype(const sl__field *f, json_t *o, const char *key, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    for (int d = SL_DTYPE_UINT8; json_is_string(v) && d <= SL_DTYPE_BOOL; d++)
        if (!strcmp(json_string_value(v), sl_dtype_name(d))) {
            *out = d;
            return 0;
        }
    sl__msg(err, errlen,
            "field \"%s\": \"%s\" must be a dtype name (bool, int8, uint8, int16, uint16, int32, uint32, int64, "
            "uint64, float16, float32, float64)",
            f->name, key);
    return SL_EINVAL;
}

/* A list of 1..max integers in [lo, 2^40]: their count in *n, or absent
 * (*n unchanged). */
static int opt_ints(const sl__field *f, json_t *o, const char *key, int64_t lo, uint32_t max, int64_t *out,
                    uint32_t *n, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    size_t len = json_is_array(v) ? json_array_size(v) : 0;
    for (size_t i = 0; i < len && len <= max; i++) {
        json_t *e = json_array_get(v, i);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : lo - 1;
        if (x < lo || x > ((json_int_t)1 << 40)) len = 0;
        else out[i] = x;
    }
    if (len == 0 || len > max) {
        sl__msg(err, errlen, "field \"%s\": \"%s\" must be a list of 1 to %u integers, each %s", f->name, key, max,
                lo < 0 ? "-1 (one free axis) or more" : lo == 0 ? ">= 0" : ">= 1");
        return SL_EINVAL;
    }
    *n = (uint32_t)len;
    return 0;
}

/* "crop" / "center_crop": [h, w] */
static int opt_hw(const sl__field *f, json_t *o, const char *key, uint64_t hw[2], char *err, size_t errlen) {
    int64_t v[2];
    uint32_t n = 0;
    int rc = opt_ints(f, o, key, 1, 2, v, &n, err, errlen);
    if (rc || n == 0) return rc;
    if (n != 2) {
        sl__msg(err, errlen, "field \"%s\": \"%s\" must be [height, width]", f->name, key);
        return SL_EINVAL;
    }
    hw[0] = (uint64_t)v[0], hw[1] = (uint64_t)v[1];
    return 0;
}

static int opt_layout(const sl__field *f, json_t *o, sl__array_spec *spec, char *err, size_t errlen) {
    json_t *v = json_object_get(o, "layout");
    if (!v) return 0;
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    size_t n = strlen(s);
    int ok = n >= 1 && n <= SL_ARRAY_MAX_DIMS;
    for (size_t i = 0; i < n && ok; i++) ok = s[i] >= 'A' && s[i] <= 'Z' && !memchr(s, s[i], i);
    if (!ok) {
        sl__msg(err, errlen, "field \"%s\": \"layout\" must be 1 to %d distinct capital letters, one per axis (\"HWC\")",
                f->name, SL_ARRAY_MAX_DIMS);
        return SL_EINVAL;
    }
    memcpy(spec->layout, s, n + 1);
    return 0;
}

/* format, dtype / cast, shape, byte_order: what the file holds. */
static int parse_format(sl__field *f, json_t *o, array_opts *a, char *err, size_t errlen) {
    static const char *const formats[] = {"npy", "raw", NULL}, *const orders[] = {"little", "big", NULL};
    int format = json_object_get(o, "shape") ? 1 : 0, dtype = 0, cast = 0, rc;
    if ((rc = sl__opt_enum(f, o, "format", formats, &format, err, errlen)) ||
        (rc = opt_dtype(f, o, "dtype", &dtype, err, errlen)) || (rc = opt_dtype(f, o, "cast", &cast, err, errlen)) ||
        (rc = sl__opt_enum(f, o, "byte_order", orders, &a->raw_big, err, errlen)) ||
        (rc = opt_ints(f, o, "shape", -1, SL_ARRAY_MAX_DIMS, a->raw_shape, &a->raw_ndim, err, errlen)))
        return rc;
    a->raw = format == 1;
    if (a->raw && (!dtype || !a->raw_ndim)) {
        sl__msg(err, errlen, "field \"%s\": a raw array needs \"dtype\" (stored) and \"shape\" (-1 for one free axis)",
                f->name);
        return SL_EINVAL;
    }
    if (!a->raw && (a->raw_ndim || json_object_get(o, "byte_order"))) {
        sl__msg(err, errlen, "field \"%s\": \"shape\" and \"byte_order\" describe raw files (an .npy header says both)",
                f->name);
        return SL_EINVAL;
    }
    if (!a->raw && dtype && cast) {
        sl__msg(err, errlen, "field \"%s\": \"dtype\" and \"cast\" both cast an .npy array: give one", f->name);
        return SL_EINVAL;
    }
    a->raw_dtype = a->raw ? dtype : 0;
    a->spec.dtype = a->raw ? cast : (cast ? cast : dtype);
    return 0;
}

static int array_parse(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen) {
    (void)cfg;
    static const char *const allowed[] = {"format", "dtype", "cast", "shape", "byte_order", "layout", "crop",
                                          "center_crop", "pad", "points", "max_bytes", NULL};
    json_t *o = opts;
    array_opts *a = &f->u.array;
    sl__array_spec *s = &a->spec;
    int64_t pad[SL_ARRAY_MAX_DIMS];
    uint64_t points = 0, max_bytes = ARRAY_DEFAULT_MAX_BYTES;
    int rc;
    if ((rc = sl__opts_only(f, o, allowed, err, errlen)) || (rc = parse_format(f, o, a, err, errlen)) ||
        (rc = opt_layout(f, o, s, err, errlen)) || (rc = opt_hw(f, o, "crop", s->crop, err, errlen)) ||
        (rc = opt_hw(f, o, "center_crop", s->center_crop, err, errlen)) ||
        (rc = opt_ints(f, o, "pad", 1, SL_ARRAY_MAX_DIMS, pad, &s->pad_ndim, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "points", 1, (uint64_t)1 << 32, &points, err, errlen)) ||
        (rc = sl__opt_uint(f, o, "max_bytes", 0, UINT64_MAX >> 1, &max_bytes, err, errlen)))
        return rc;
    for (uint32_t i = 0; i < s->pad_ndim; i++) s->pad[i] = (uint64_t)pad[i];
    s->points = points;
    a->max_bytes = max_bytes;
    /* the spec's own consistency (crop with a layout, crop with points, ...)
     * is checked against the first sample's rank at resolve */
    f->has_len = points != 0;
    f->len_count = points != 0;
    return 0;
}

/* The header of the array in sf: .npy parsed, raw declared and sized. */
static int array_header(const array_opts *a, const sl__sample_file *sf, sl__array_info *info, char *reason,
                        size_t rlen) {
    if (a->raw) return sl__raw_info(a->raw_dtype, a->raw_big, a->raw_shape, a->raw_ndim, sf->size, info, reason, rlen);
    return sl__npy_read_header_file(sf, info, reason, rlen);
}

/* The output from the options and the first sample's header. */
static int array_resolve(sl__field *f, const sl__source *src, char *err, size_t errlen) {
    array_opts *a = &f->u.array;
    char why[160];
    sl__sample_file sf;
    sl__array_info info;
    int rc = sl__source_open_file(src, 0, (uint32_t)f->col, 0, &sf, why, sizeof why);
    if (!rc) {
        rc = array_header(a, &sf, &info, why, sizeof why);
        if (!rc) rc = sl__array_out_shape(&a->spec, &info, &a->out, why, sizeof why);
        sl__sample_close(&sf);
    }
    if (!rc && a->out.ndim > SL_MAX_DIMS - 1) {
        snprintf(why, sizeof why, "%u axes, at most %d", a->out.ndim, SL_MAX_DIMS - 1);
        rc = SL_EINVAL;
    }
    if (rc) {
        sl__msg(err, errlen, "field \"%s\": its shape comes from the first sample, which cannot give it: %s", f->name,
                why);
        return rc;
    }
    f->dtype = a->out.dtype;
    f->ndim = a->out.ndim;
    for (uint32_t i = 0; i < f->ndim; i++) f->shape[i] = (int64_t)a->out.shape[i];
    return 0;
}

static int array_load(sl__load *L, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen) {
    const array_opts *a = &f->u.array;
    sl__sample_file sf;
    int rc = sl__source_open_file(L->src, L->index, (uint32_t)f->col, L->elem, &sf, reason, rlen);
    if (rc) return rc;
    sl__array_info info;
    sl__array_plan plan;
    sl__rng r;
    uint64_t rows = 0;
    int lost;
    if ((rc = sl__check_bytes(sf.size, a->max_bytes, reason, rlen))) goto out;
    if ((rc = array_header(a, &sf, &info, reason, rlen))) goto out;
    sl__rng_init(&r, L->seed ^ f->stream, L->epoch, L->index); /* the crop group's numbers */
    if ((rc = sl__array_plan_sample(&info, &a->spec, &a->out, &r, &plan, reason, rlen))) goto out;
    if ((rc = sl__scratch_reserve(L->scratch, 0, plan.scratch, &lost, reason, rlen))) goto out;
    sl__quota q = {sl__scratch_dec_room(L->scratch), 0, 0, 0};
    rc = sl__array_read(&sf, &info, &plan, &q, dst, &rows, reason, rlen);
    if (!rc && len) *len = (int64_t)rows;
out:
    sl__sample_close(&sf);
    return rc;
}

/* For the admission check at create: the scratch this sample's read asks
 * for in any epoch (the window buffer and the subset's bitmap do not
 * depend on where the window falls), from its header. */
static int array_admit(sl__load *L, const sl__field *f, uint64_t *need, char *what, size_t wlen) {
    const array_opts *a = &f->u.array;
    sl__sample_file sf;
    if (sl__source_open_file(L->src, L->index, (uint32_t)f->col, L->elem, &sf, NULL, 0)) return 0;
    sl__array_info info;
    sl__array_plan plan;
    sl__rng r;
    sl__rng_init(&r, L->seed ^ f->stream, 0, L->index);
    int ok = sl__check_bytes(sf.size, a->max_bytes, NULL, 0) == 0 && array_header(a, &sf, &info, NULL, 0) == 0 &&
             sl__array_plan_sample(&info, &a->spec, &a->out, &r, &plan, NULL, 0) == 0;
    if (ok) {
        *need = sl__scratch_growth(L->scratch, 0, plan.scratch);
        sl__msg(what, wlen, "%u-d %s array of %llu bytes", info.ndim, sl_dtype_name(info.dtype),
                (unsigned long long)info.data_bytes);
    }
    sl__sample_close(&sf);
    return ok;
}

/* The output depends on the file alone (no random window, no random
 * subset of points): the sample cache may hold it (cache_what decoded). */
static int array_fixed_output(const sl__field *f) {
    const sl__array_spec *s = &f->u.array.spec;
    return !s->crop[0] && !s->crop[1] && !s->points;
}

const sl__kind sl__kind_array = {.name = "array", .id = SL_KIND_ARRAY, .value_type = SL__VAL_FILE,
                                 .media = SL__MEDIA_IMAGE, .parse = array_parse, .resolve = array_resolve,
                                 .load = array_load, .admit = array_admit, .fixed_output = array_fixed_output};

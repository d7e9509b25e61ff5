/* Option reading shared by the kinds. */
#include "fields/kind_util.h"

#include <string.h>

#include "base/util.h"

int sl__opts_only(const sl__field *f, json_t *o, const char *const *allowed, char *err, size_t errlen) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        (void)v;
        if (!strcmp(key, "kind") || !strcmp(key, "key") || !strcmp(key, "crop_group")) continue;
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(key, *a);
        if (!ok) {
            char list[256] = "";
            size_t n = 0;
            for (const char *const *a = allowed; *a && n < sizeof list; a++)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", *a);
            sl__msg(err, errlen, "field \"%s\": unknown option \"%.40s\" for kind %s (options: kind, key, crop_group%s%s)",
                    f->name, key, f->kind->name, n ? ", " : "", list);
            return SL_EINVAL;
        }
    }
    return 0;
}

int sl__opt_uint(const sl__field *f, json_t *o, const char *key, uint64_t lo, uint64_t hi, uint64_t *out, char *err,
                 size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    if (!json_is_integer(v) || x < 0 || (uint64_t)x < lo || (uint64_t)x > hi) {
        sl__msg(err, errlen, "field \"%s\": \"%s\" must be an integer in %llu..%llu", f->name, key,
                (unsigned long long)lo, (unsigned long long)hi);
        return SL_EINVAL;
    }
    *out = (uint64_t)x;
    return 0;
}

int sl__opt_bool(const sl__field *f, json_t *o, const char *key, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) {
        sl__msg(err, errlen, "field \"%s\": \"%s\" must be true or false", f->name, key);
        return SL_EINVAL;
    }
    *out = json_is_true(v);
    return 0;
}

int sl__opt_enum(const sl__field *f, json_t *o, const char *key, const char *const *names, int *out, char *err,
                 size_t errlen) {
    json_t *v = json_object_get(o, key);
    if (!v) return 0;
    if (json_is_string(v))
        for (int i = 0; names[i]; i++)
            if (!strcmp(json_string_value(v), names[i])) {
                *out = i;
                return 0;
            }
    char list[160] = "";
    size_t n = 0;
    for (int i = 0; names[i] && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", i ? ", " : "", names[i]);
    sl__msg(err, errlen, "field \"%s\": \"%s\" must be one of %s", f->name, key, list);
    return SL_EINVAL;
}

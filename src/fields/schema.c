/*
 * The schema: the user's JSON object of named fields, parsed strictly
 * (an unknown kind or option is an error naming the field, so a typo never
 * becomes a silently ignored option).
 *
 *   {"image": {"kind": "image", "preset": "train", "size": 224},
 *    "label": {"kind": "label"}}
 *
 * Options every kind takes: "kind" (required), "key" (the source key of
 * its value, ';'-separated alternatives; default: the kind's usual keys,
 * see default_key) and "crop_group" (fields of one group draw the same
 * random numbers, so paired data is cropped alike; default: the field's
 * own name). Fields keep the order given.
 */
#include <jansson.h>
#include <string.h>

#include "base/util.h"
#include "fields/field.h"
#include "fields/kind_util.h"

static const sl__kind *const kinds[] = {&sl__kind_image, &sl__kind_label, &sl__kind_target, &sl__kind_sequence,
                                        &sl__kind_video, &sl__kind_array};

const sl__kind *sl__kind_find(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *sl__kind_names(void) { return "image, label, target, sequence, video, array"; }

/* Where a kind's value is looked for when the field names no key: its own
 * name first, then the keys sources use for it (a folder's file, a
 * path,label manifest's path, WebDataset extensions). */
static void default_key(sl__field *f) {
    const char *more = "";
    switch (f->kind->id) {
    case SL_KIND_IMAGE: more = ";path;file;jpg;jpeg;png;webp"; break;
    case SL_KIND_VIDEO: more = ";path;file;mp4;avi;mkv;webm;mov"; break;
    case SL_KIND_LABEL: more = ";label;cls"; break;
    case SL_KIND_ARRAY: more = ";npy"; break;
    default: break;
    }
    snprintf(f->key, sizeof f->key, "%s%s", f->name, more);
}

static int valid_name(const char *n) {
    size_t len = strlen(n);
    if (len == 0 || len >= SL__NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return 0;
    }
    return strcmp(n, "index") != 0;
}

int sl__field_size(sl__field *f) {
    uint64_t n = sl_dtype_size(f->dtype);
    for (uint32_t d = 0; d < f->ndim; d++)
        if (f->shape[d] <= 0 || sl__mul(n, (uint64_t)f->shape[d], &n)) return SL_EOVERFLOW;
    if (n == 0 || n > ((uint64_t)1 << 40)) return SL_EOVERFLOW;
    f->sample_bytes = n;
    return 0;
}

/* Parse one field: name, and its options object. elem: a sequence's element. */
int sl__field_parse(sl__schema *sc, sl__field *f, const char *name, json_t *o, const sl_config *cfg, char *err,
                    size_t errlen) {
    memset(f, 0, sizeof *f);
    f->col = -1;
    snprintf(f->name, sizeof f->name, "%s", name);
    if (!json_is_object(o)) {
        sl__msg(err, errlen, "field \"%s\": its value must be an object of options", name);
        return SL_EINVAL;
    }
    json_t *k = json_object_get(o, "kind");
    if (!json_is_string(k)) {
        sl__msg(err, errlen, "field \"%s\": \"kind\" (one of %s) is required", name, sl__kind_names());
        return SL_EINVAL;
    }
    if (!(f->kind = sl__kind_find(json_string_value(k)))) {
        sl__msg(err, errlen, "field \"%s\": unknown kind \"%s\" (known: %s)", name, json_string_value(k),
                sl__kind_names());
        return SL_EINVAL;
    }
    const char *group = name;
    json_t *g = json_object_get(o, "crop_group");
    if (g) {
        if (!json_is_string(g) || !json_string_length(g)) {
            sl__msg(err, errlen, "field \"%s\": \"crop_group\" must be a non-empty string", name);
            return SL_EINVAL;
        }
        group = json_string_value(g);
    }
    f->stream = sl__rng_stream(group);
    json_t *key = json_object_get(o, "key");
    if (key) {
        if (!json_is_string(key) || !json_string_length(key) || json_string_length(key) >= sizeof f->key) {
            sl__msg(err, errlen, "field \"%s\": \"key\" must be a non-empty string under %zu bytes", name,
                    sizeof f->key);
            return SL_EINVAL;
        }
        snprintf(f->key, sizeof f->key, "%s", json_string_value(key));
    } else {
        default_key(f);
    }
    (void)sc;
    return f->kind->parse(f, o, cfg, err, errlen);
}

static int parse_json(const sl_config *cfg, sl__schema *sc, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_loads(cfg->fields, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        sl__msg(err, errlen, "fields: not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return SL_EINVAL;
    }
    int rc = 0;
    if (!json_is_object(root) || json_object_size(root) == 0) {
        sl__msg(err, errlen, "fields: must be a JSON object naming at least one field");
        rc = SL_EINVAL;
    } else if (json_object_size(root) > SL__MAX_FIELDS) {
        sl__msg(err, errlen, "fields: %zu fields, at most %d", json_object_size(root), SL__MAX_FIELDS);
        rc = SL_EINVAL;
    }
    const char *name;
    json_t *o;
    json_object_foreach(root, name, o) {
        if (rc) break;
        if (!valid_name(name)) {
            sl__msg(err, errlen,
                    "fields: \"%.64s\" is not a field name (1-63 letters, digits, '_', '.', '-'; \"index\" is taken)",
                    name);
            rc = SL_EINVAL;
            break;
        }
        sl__field *f = &sc->fields[sc->nfields];
        rc = sl__field_parse(sc, f, name, o, cfg, err, errlen);
        if (rc == 0 && f->kind->id == SL_KIND_SEQUENCE) {
            /* its element: the "of" object, a field of its own */
            json_t *of = json_object_get(o, "of");
            if (sc->nelems >= SL__MAX_FIELDS) {
                sl__msg(err, errlen, "field \"%s\": too many sequences", name);
                rc = SL_EINVAL;
            } else if (!of) {
                sl__msg(err, errlen, "field \"%s\": a sequence needs \"of\": the options of its elements", name);
                rc = SL_EINVAL;
            } else {
                sl__field *e = &sc->elems[sc->nelems++];
                rc = sl__field_parse(sc, e, name, of, cfg, err, errlen);
                if (!rc && (e->kind->id == SL_KIND_SEQUENCE || !e->kind->load || e->kind->value_type != SL__VAL_FILE)) {
                    sl__msg(err, errlen, "field \"%s\": a sequence's elements must be files of one kind (not %s)", name,
                            e->kind->name);
                    rc = SL_EINVAL;
                }
                f->of = e;
                if (!rc) e->stream = f->stream;
            }
        }
        sc->nfields++;
    }
    json_decref(root);
    return rc;
}

int sl__schema_parse(const sl_config *cfg, sl__schema *sc, char *err, size_t errlen) {
    memset(sc, 0, sizeof *sc);
    if (cfg->fields) return parse_json(cfg, sc, err, errlen);
    /* the default: the sample's file as an image with cfg's preset and size, and its label */
    const char *dflt = "{\"image\": {\"kind\": \"image\"}, \"label\": {\"kind\": \"label\"}}";
    sl_config c = *cfg;
    c.fields = dflt;
    return parse_json(&c, sc, err, errlen);
}

uint32_t sl__schema_columns(sl__schema *sc, sl__colreq *req) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < sc->nfields; i++) {
        sl__field *f = &sc->fields[i];
        if (!f->kind->value_type) continue;
        f->col = (int)n;
        req[n].key = f->key;
        req[n].type = f->kind->value_type;
        req[n].media = f->of ? f->of->kind->media : f->kind->media;
        if (f->of) f->of->col = f->col;
        n++;
    }
    return n;
}

int sl__schema_resolve(sl__schema *sc, const sl__source *src, char *err, size_t errlen) {
    for (uint32_t i = 0; i < sc->nfields; i++) {
        sl__field *f = &sc->fields[i];
        int rc;
        if (f->of && f->of->kind->resolve && (rc = f->of->kind->resolve(f->of, src, err, errlen))) return rc;
        if (f->of && sl__field_size(f->of)) {
            sl__msg(err, errlen, "field \"%s\": its elements' size overflows (or is empty)", f->name);
            return SL_EOVERFLOW;
        }
        if (f->kind->resolve && (rc = f->kind->resolve(f, src, err, errlen))) return rc;
        if (sl__field_size(f)) {
            sl__msg(err, errlen, "field \"%s\": its output size overflows (or is empty)", f->name);
            return SL_EOVERFLOW;
        }
    }
    return 0;
}

void sl__schema_fini(sl__schema *sc) { memset(sc, 0, sizeof *sc); }

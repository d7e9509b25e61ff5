/* Option reading shared by the kinds: strict, with errors naming the field. */
#ifndef SL_KIND_UTIL_H
#define SL_KIND_UTIL_H

#include <jansson.h>
#include <stdint.h>

#include "fields/field.h"

/* Every key of o must be "kind", "key", "crop_group" or one of allowed
 * (NULL-terminated). SL_EINVAL naming the first other key. */
int sl__opts_only(const sl__field *f, json_t *o, const char *const *allowed, char *err, size_t errlen);
/* Optional unsigned integer option in [lo, hi]: *out unchanged when absent. */
int sl__opt_uint(const sl__field *f, json_t *o, const char *key, uint64_t lo, uint64_t hi, uint64_t *out, char *err,
                 size_t errlen);
/* Optional boolean option. */
int sl__opt_bool(const sl__field *f, json_t *o, const char *key, int *out, char *err, size_t errlen);
/* Optional string option that must be one of names (NULL-terminated): its
 * index in *out; unchanged when absent. */
int sl__opt_enum(const sl__field *f, json_t *o, const char *key, const char *const *names, int *out, char *err,
                 size_t errlen);
/* Parse one field (schema.c): used for a sequence's "of". */
int sl__field_parse(sl__schema *sc, sl__field *f, const char *name, json_t *o, const sl_config *cfg, char *err,
                    size_t errlen);

#endif

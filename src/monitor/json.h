/* Just enough JSON for `sluice top`: writing strings escaped, and reading
 * numbers back from its own log lines by path. Private. */
#ifndef SL_MONITOR_JSON_H
#define SL_MONITOR_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Write s as a JSON string (quotes included). */
void sl__json_str(FILE *f, const char *s);

/*
 * The number at path in the JSON text s[0..len): keys separated by '.',
 * an array element as a decimal key ("gpus.0.used_bytes"). 0 and *out
 * set; SL_ENOENT when absent or null; SL_EPARSE when s is not valid JSON
 * along the way.
 */
int sl__json_number(const char *s, size_t len, const char *path, double *out);

/* The string at path, unescaped into out (cut to cap - 1 bytes, always
 * NUL-terminated when cap > 0; \u escapes past ASCII become '?'). 0,
 * SL_ENOENT (absent, or not a string), SL_EPARSE. */
int sl__json_string(const char *s, size_t len, const char *path, char *out, size_t cap);

#endif

/* Line iteration over text held in memory, for the /proc, cgroup and PSI parsers. Private. */
#ifndef SL_SYS_TEXT_H
#define SL_SYS_TEXT_H

#include <stddef.h>
#include <string.h>

/*
 * Copy the line starting at *pos (without its '\n') into out, cut to cap-1
 * bytes and NUL-terminated, and move *pos past it. Returns 0 at the end of
 * text, 1 otherwise. cap must be at least 1.
 */
static inline int sl__next_line(const char *text, size_t len, size_t *pos, char *out, size_t cap) {
    if (*pos >= len) return 0;
    const char *s = text + *pos;
    const char *nl = memchr(s, '\n', len - *pos);
    size_t n = nl ? (size_t)(nl - s) : len - *pos;
    size_t c = n < cap - 1 ? n : cap - 1;
    memcpy(out, s, c);
    out[c] = 0;
    *pos += n + 1;
    return 1;
}

#endif

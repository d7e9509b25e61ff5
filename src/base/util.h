/* Small helpers shared by every layer: overflow-checked arithmetic, time,
 * bounded string formatting. Private. */
#ifndef SL_UTIL_H
#define SL_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "sluice.h"

#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SL_UNUSED(x) (void)(x)

/* *r = a * b; returns 0, or SL_EOVERFLOW (then *r is unspecified). */
static inline int sl__mul(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_mul_overflow(a, b, r) ? SL_EOVERFLOW : 0;
}
static inline int sl__add(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_add_overflow(a, b, r) ? SL_EOVERFLOW : 0;
}

static inline uint64_t sl__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* snprintf into buf if buf is not NULL; always NUL-terminates. */
static inline void sl__msg(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void sl__msg(char *buf, size_t len, const char *fmt, ...) {
    if (!buf || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* "38.5 MiB" into buf (len >= 16). */
const char *sl__fmt_bytes(uint64_t n, char *buf, size_t len);

#endif

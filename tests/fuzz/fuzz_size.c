/*
 * Fuzz the size parser (sl_parse_size_msg), the one rule every front end
 * uses for "512M", "1.5GiB", ...: it may not crash or read past the string;
 * it succeeds with 0 or fails with SL_EINVAL / SL_EOVERFLOW, a message and
 * *out untouched; a plain decimal it takes equals strtoull's value; a
 * result it takes parses again the same after appending "B" (bytes).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define MAX_INPUT 256

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > MAX_INPUT) return 0;
    char s[MAX_INPUT + 2], err[128];
    memcpy(s, data, size);
    s[size] = 0;
    uint64_t v = 0x5a5a5a5a5a5a5a5aull;
    memset(err, 0x7f, sizeof err);
    int rc = sl_parse_size_msg(s, &v, err, sizeof err);
    if (rc != 0) {
        if ((rc != SL_EINVAL && rc != SL_EOVERFLOW) || v != 0x5a5a5a5a5a5a5a5aull) abort();
        if (!memchr(err, 0, sizeof err) || err[0] == 0) abort();
        return 0;
    }
    if (all_digits(s)) {
        errno = 0;
        unsigned long long want = strtoull(s, NULL, 10);
        if (errno || want != v) abort();
    }
    if (size < MAX_INPUT && strlen(s) == size && all_digits(s)) {
        uint64_t again;
        s[size] = 'B';
        s[size + 1] = 0;
        if (sl_parse_size(s, &again) || again != v) abort();
    }
    return 0;
}

/* The growth protocol's copies (base/abi.h, docs/abi.md). */
#include "base/abi.h"

#include <stdint.h>
#include <string.h>

#include "base/util.h"

int sl__abi_in(void *dst, size_t our_size, const void *src, size_t size, size_t min, const char *what,
               const char *fix, char *err, size_t errlen) {
    if (size < min) {
        sl__msg(err, errlen, "%s of %zu bytes, fewer than any header gave it (this library knows %zu to %zu): %s",
                what, size, min, our_size, fix);
        return SL_EINVAL;
    }
    if (size > our_size) {
        const unsigned char *tail = (const unsigned char *)src + our_size;
        for (size_t i = 0; i < size - our_size; i++)
            if (tail[i]) {
                sl__msg(err, errlen,
                        "%s: byte %zu is set, past the %zu bytes this library (%s) knows: the caller sets a "
                        "field of a newer header (%zu bytes); it needs a newer libsluice",
                        what, our_size + i, our_size, SL_VERSION_STRING, size);
                return SL_EUNSUPPORTED;
            }
    }
    memcpy(dst, src, SL_MIN(size, our_size));
    return 0;
}

void sl__abi_out(void *dst, size_t size, const void *src, size_t our_size) {
    memcpy(dst, src, SL_MIN(size, our_size));
    if (size > our_size) memset((unsigned char *)dst + our_size, 0, size - our_size);
}

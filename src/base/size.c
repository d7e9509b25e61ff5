/*
 * Sizes written by people: "512M", "2G", "1.5GiB", "1000".
 *
 * One rule for the library, the CLI and Python (they all call this):
 *   NUMBER [UNIT]   NUMBER = digits, optionally "." digits
 *   UNIT = B | K | M | G | T, each optionally followed by "i" or "iB"
 *          (case-insensitive): powers of 1024.
 * Decimal units ("GB", "MB", "kB": 10^9, 10^6, 10^3 bytes elsewhere) are
 * refused, not guessed: "2GB" says "did you mean 2G (GiB, powers of 1024)?".
 * A fraction needs a unit ("1.5G"); bytes are whole. The result is exact
 * (integer arithmetic; fractions of a byte are dropped) and must fit in
 * 64 bits.
 */
#include <ctype.h>
#include <string.h>

#include "base/util.h"
#include "sluice.h"

/* The power of 1024 a unit letter names (1 for 'B'), or 0 for none. */
static uint64_t unit_multiplier(char c) {
    switch (toupper((unsigned char)c)) {
    case 'B': return 1;
    case 'K': return 1ull << 10;
    case 'M': return 1ull << 20;
    case 'G': return 1ull << 30;
    case 'T': return 1ull << 40;
    default: return 0;
    }
}

/* Length of the unit at u ("G", "Gi", "GiB", "B"), or 0 when u is not one
 * (then *decimal says whether it is a decimal unit such as "GB"). */
static size_t unit_length(const char *u, int *decimal) {
    *decimal = 0;
    if (!unit_multiplier(u[0])) return 0;
    if (toupper((unsigned char)u[0]) == 'B') return 1;
    if (u[1] == 'i' || u[1] == 'I') return (u[2] == 'B' || u[2] == 'b') ? 3 : 2;
    if (u[1] == 'B' || u[1] == 'b') {
        *decimal = 1;
        return 0;
    }
    return 1;
}

/* Whole part and fraction digits of a number at s; returns the characters
 * read (0 when s does not start with a digit), SIZE_MAX on overflow. */
static size_t parse_number(const char *s, uint64_t *whole, uint64_t *frac, unsigned *frac_digits) {
    size_t i = 0;
    *whole = *frac = 0;
    *frac_digits = 0;
    if (!isdigit((unsigned char)s[0])) return 0;
    for (; isdigit((unsigned char)s[i]); i++)
        if (sl__mul(*whole, 10, whole) || sl__add(*whole, (uint64_t)(s[i] - '0'), whole)) return SIZE_MAX;
    if (s[i] != '.') return i;
    if (!isdigit((unsigned char)s[i + 1])) return i; /* "5." : the '.' is junk, reported by the caller */
    for (i++; isdigit((unsigned char)s[i]); i++)
        if (*frac_digits < 19) { /* finer than 10^-19 cannot change a 64-bit result */
            *frac = *frac * 10 + (uint64_t)(s[i] - '0');
            (*frac_digits)++;
        }
    return i;
}

int sl_parse_size_msg(const char *s, uint64_t *out, char *errbuf, size_t errlen) {
    if (!s || !out) {
        sl__msg(errbuf, errlen, "no size given");
        return SL_EINVAL;
    }
    const char *p = s;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '-') {
        sl__msg(errbuf, errlen, "size '%s' is negative: a size is a number of bytes >= 0", s);
        return SL_EINVAL;
    }
    uint64_t whole, frac;
    unsigned frac_digits;
    size_t n = parse_number(p, &whole, &frac, &frac_digits);
    if (n == SIZE_MAX) {
        sl__msg(errbuf, errlen, "size '%s' does not fit in 64 bits", s);
        return SL_EOVERFLOW;
    }
    if (n == 0) {
        sl__msg(errbuf, errlen,
                "'%s' is not a size: give a number with an optional K, M, G or T suffix (powers of 1024), e.g. 512M", s);
        return SL_EINVAL;
    }
    const char *u = p + n, *num_end = u;
    int decimal;
    size_t ulen = unit_length(u, &decimal);
    if (decimal) {
        sl__msg(errbuf, errlen, "size '%s': did you mean %.*s%c (%ciB, powers of 1024)? Decimal units such as %c%c are not taken",
                s, (int)(num_end - p), p, toupper((unsigned char)u[0]), toupper((unsigned char)u[0]),
                toupper((unsigned char)u[0]), u[1]);
        return SL_EINVAL;
    }
    uint64_t mul = ulen ? unit_multiplier(u[0]) : 1;
    const char *end = u + ulen;
    while (isspace((unsigned char)*end)) end++;
    if (*end) {
        sl__msg(errbuf, errlen, "'%s' is not a size: unexpected '%s' (suffixes: K, M, G, T, powers of 1024; e.g. 512M)", s,
                u + ulen);
        return SL_EINVAL;
    }
    if (frac_digits && mul == 1) {
        sl__msg(errbuf, errlen, "size '%s' is a fraction of a byte: give whole bytes, or a unit (1.5G)", s);
        return SL_EINVAL;
    }
    uint64_t bytes, part = 0;
    if (sl__mul(whole, mul, &bytes)) {
        sl__msg(errbuf, errlen, "size '%s' does not fit in 64 bits", s);
        return SL_EOVERFLOW;
    }
    if (frac_digits) { /* floor(0.frac * mul), exactly: frac < 10^19, mul <= 2^40 */
        unsigned __int128 scale = 1;
        for (unsigned i = 0; i < frac_digits; i++) scale *= 10;
        part = (uint64_t)(((unsigned __int128)frac * mul) / scale);
    }
    if (sl__add(bytes, part, &bytes)) {
        sl__msg(errbuf, errlen, "size '%s' does not fit in 64 bits", s);
        return SL_EOVERFLOW;
    }
    *out = bytes;
    return 0;
}

int sl_parse_size(const char *s, uint64_t *out) { return sl_parse_size_msg(s, out, NULL, 0); }

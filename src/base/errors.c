/* Error names, version number, size parsing: the small public helpers. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "sluice.h"
#include "util.h"

const char *sl_strerror(int code) {
    switch (code) {
    case SL_OK: return "success";
    case SL_EINVAL: return "invalid argument";
    case SL_ENOMEM: return "out of memory";
    case SL_EBUDGET: return "memory budget exceeded";
    case SL_ENOENT: return "no such file or folder";
    case SL_EIO: return "read error";
    case SL_EEMPTY: return "dataset is empty";
    case SL_EPARSE: return "manifest syntax error";
    case SL_EFORMAT: return "unsupported file format";
    case SL_ECORRUPT: return "corrupt data";
    case SL_ELIMIT: return "sample exceeds a limit";
    case SL_EUNSUPPORTED: return "not supported by this build";
    case SL_EHELD: return "all batch slots are held by the consumer";
    case SL_ESAMPLE: return "a sample failed (on_error=raise)";
    case SL_EEND: return "end of epoch";
    case SL_ESTATE: return "invalid state";
    case SL_EOVERFLOW: return "size overflow";
    case SL_ESYS: return "system call failed";
    default: return "unknown error";
    }
}

unsigned sl_version_number(void) { return SL_VERSION_NUMBER; }

const char *sl_mem_category_name(int c) {
    static const char *names[SL_MEM__COUNT] = {"index", "batches", "scratch", "decoder", "other", "cache"};
    return c >= 0 && c < SL_MEM__COUNT ? names[c] : "unknown";
}

int sl_parse_size(const char *s, uint64_t *out) {
    if (!s || !out) return SL_EINVAL;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return SL_EINVAL;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return SL_EINVAL;
    uint64_t mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ull << 10; end++; break;
    case 'M': mul = 1ull << 20; end++; break;
    case 'G': mul = 1ull << 30; end++; break;
    case 'T': mul = 1ull << 40; end++; break;
    default: break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (mul > 1 && (*end == 'B' || *end == 'b')) end++;
    else if (mul == 1 && (*end == 'B' || *end == 'b')) end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return SL_EINVAL;
    double r = v * (double)mul;
    if (r >= 18446744073709551615.0) return SL_EOVERFLOW;
    *out = (uint64_t)r;
    return 0;
}

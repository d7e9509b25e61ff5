/* Error names, version number: the small public helpers (sizes: size.c). */
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
    static const char *names[SL_MEM__COUNT] = {"index", "batches", "scratch", "decoder", "other"};
    return c >= 0 && c < SL_MEM__COUNT ? names[c] : "unknown";
}

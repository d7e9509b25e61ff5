/* Error names, version number: the small public helpers (sizes: size.c). */
#include "base/mem.h"
#include "base/util.h"
#include "sluice.h"

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
    case SL_ETIMEDOUT: return "no batch ready in the time given";
    case SL_EERRORS: return "too many samples failed";
    case SL_EAGAIN: return "transient system condition (retry)";
    default: return "unknown error";
    }
}

unsigned sl_version_number(void) { return SL_VERSION_NUMBER; }

const char *sl_mem_category_name(int c) {
    static const char *names[SL_MEM__COUNT] = {"index", "batches", "scratch", "decoder", "other", "pinned", "cache",
                                               "gpu_host", "io"};
    return c >= 0 && c < SL_MEM__COUNT ? names[c] : "unknown";
}

int sl_mem_category_count(void) { return SL_MEM__COUNT; }

size_t sl_dtype_size(int dtype) {
    switch (dtype) {
    case SL_DTYPE_UINT8: case SL_DTYPE_INT8: case SL_DTYPE_BOOL: return 1;
    case SL_DTYPE_INT16: case SL_DTYPE_UINT16: case SL_DTYPE_FLOAT16: return 2;
    case SL_DTYPE_INT32: case SL_DTYPE_UINT32: case SL_DTYPE_FLOAT32: return 4;
    case SL_DTYPE_INT64: case SL_DTYPE_UINT64: case SL_DTYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *sl_dtype_name(int dtype) {
    switch (dtype) {
    case SL_DTYPE_UINT8: return "uint8";
    case SL_DTYPE_INT8: return "int8";
    case SL_DTYPE_BOOL: return "bool";
    case SL_DTYPE_INT16: return "int16";
    case SL_DTYPE_UINT16: return "uint16";
    case SL_DTYPE_FLOAT16: return "float16";
    case SL_DTYPE_INT32: return "int32";
    case SL_DTYPE_UINT32: return "uint32";
    case SL_DTYPE_FLOAT32: return "float32";
    case SL_DTYPE_INT64: return "int64";
    case SL_DTYPE_UINT64: return "uint64";
    case SL_DTYPE_FLOAT64: return "float64";
    default: return "unknown";
    }
}

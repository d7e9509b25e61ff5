/*
 * Arrays: what a file holds, from its header alone. `.npy` (versions 1, 2
 * and 3) is parsed strictly; `raw` files carry no header, so their dtype
 * and shape are declared by the schema and checked against the file size.
 * Nothing here allocates: the result is a fixed-size sl__array_info that
 * ops/array.h plans and reads from, and every size in it has been checked
 * (products overflow-checked, data bytes equal to the bytes present), so
 * a header that claims 2^40 elements is an error before any allocation.
 */
#ifndef SL_ARRAY_H
#define SL_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "source/source.h"

#define SL_ARRAY_MAX_DIMS 8
#define SL_NPY_MAX_HEADER ((uint32_t)1 << 20) /* header_len above this: SL_ELIMIT */
#define SL_NPY_DICT_MAX 4096                  /* the dict must end within the first 4 KiB */

typedef struct sl__array_info {
    int dtype;            /* SL_DTYPE_* */
    uint32_t itemsize;    /* bytes per element */
    int swap;             /* stored in the other byte order than this host's */
    int fortran;          /* column-major: the first axis varies fastest */
    uint32_t ndim;        /* 0 (a scalar) .. SL_ARRAY_MAX_DIMS */
    uint64_t shape[SL_ARRAY_MAX_DIMS]; /* logical (numpy) order */
    uint64_t count;       /* elements: the product of shape (1 for 0-d) */
    uint64_t data_offset; /* bytes from the start of the file to the data */
    uint64_t data_bytes;  /* count * itemsize == file size - data_offset */
} sl__array_info;

/*
 * Parse an .npy file whose first len bytes are data (len may be the whole
 * file; it must at least hold the header) and whose total size is
 * file_size. The header:
 *   magic "\x93NUMPY", version 1.0 (u16 header length), 2.0 or 3.0 (u32),
 *   then a Python dict literal with exactly the keys 'descr' (a numeric
 *   dtype string: [<>|=]? then b1, i1-i8, u1-u8 or f2-f8; complex,
 *   strings, objects and structured dtypes are SL_EUNSUPPORTED),
 *   'fortran_order' (True/False) and 'shape' (a tuple of non-negative
 *   ints: "()", "(3,)", "(2, 3)"; at most SL_ARRAY_MAX_DIMS), in any
 *   order, an optional trailing comma; then only whitespace.
 * The data must follow the header exactly: count * itemsize equal to the
 * bytes after it (fewer: truncated; more: trailing bytes; both
 * SL_ECORRUPT). Returns 0, or SL_EFORMAT (not .npy), SL_ECORRUPT,
 * SL_EUNSUPPORTED, SL_ELIMIT, SL_EOVERFLOW, SL_EINVAL (len shorter than
 * the header), each with a reason naming the numbers.
 */
int sl__npy_parse(const uint8_t *data, size_t len, uint64_t file_size, sl__array_info *out, char *reason,
                  size_t rlen);

/* The same for bytes [offset, offset + size) of fd, read with pread: the
 * first SL_NPY_DICT_MAX bytes into a stack buffer, the rest of a longer
 * header (padding) checked in steps of that size. Adds SL_EIO. The info's
 * data_offset is relative to offset. */
int sl__npy_read_header(int fd, uint64_t offset, uint64_t size, sl__array_info *out, char *reason,
                        size_t rlen);
/* The same for an opened sample (a local file or a remote object). */
int sl__npy_read_header_file(const sl__sample_file *f, sl__array_info *out, char *reason, size_t rlen);

/* A raw file of file_size bytes holding a C-order array of dtype (stored
 * big-endian if big_endian) and shape[ndim], where at most one entry may
 * be -1 (the free axis, sized from the file): 0, or SL_EINVAL (bad
 * declaration: a dim below -1, two free axes, a free axis beside a zero
 * dim) / SL_ECORRUPT (the file is not a whole number of rows, or not the
 * declared size) with a reason. */
int sl__raw_info(int dtype, int big_endian, const int64_t *shape, uint32_t ndim, uint64_t file_size,
                 sl__array_info *out, char *reason, size_t rlen);

#endif

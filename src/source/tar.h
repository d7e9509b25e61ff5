/*
 * Tar shards (the WebDataset layout): a member index built by scanning
 * headers (tar.c; members grouped into samples and brace patterns for
 * shard lists are source/wds.h). Reading a member afterwards is one pread
 * at its offset (sl__sample_file {fd, offset, size}).
 *
 * The scanner is our own parser, written for hostile input:
 *  - formats: POSIX ustar (name + prefix), pax extended headers ('x': the
 *    keys `path` and `size` are honoured, others skipped; 'g' global
 *    headers are checked for syntax and ignored: they never rename or
 *    resize a member), GNU long names ('L') and long link names ('K',
 *    skipped: links are not members), GNU and v7 headers. Numeric fields
 *    in octal or GNU base-256. Every header's checksum is verified
 *    (unsigned sum, or the historic signed sum).
 *  - members: regular files ('0', NUL, '7') are reported; links,
 *    directories, devices and FIFOs ('1'-'6') are skipped without data (as
 *    Python's tarfile reads them); unknown types are skipped over their
 *    data; GNU sparse members ('S', or pax GNU.sparse.* keys) are refused
 *    (SL_EUNSUPPORTED): their stored bytes are not the file's bytes.
 *  - bounds: every size and offset is overflow-checked and must lie inside
 *    the file; a member running past the end is SL_ECORRUPT (truncated
 *    shard). Members cannot overlap: each header follows the previous
 *    member's padded data. The archive ends at the first all-zero block,
 *    or at end of file on a block boundary.
 *  - names are normalised, never trusted: leading "./", empty and "."
 *    components are dropped ("./a//b/./c.jpg" -> "a/b/c.jpg"); a name that
 *    is absolute, holds a ".." component or a NUL byte, is empty, ends in
 *    "/", or is longer than SL_TAR_NAME_MAX is refused (SL_ECORRUPT, or
 *    SL_ELIMIT for the length) and the scan stops. Names are only ever
 *    keys; nothing is opened by them.
 * The scanner allocates nothing (buffers on the stack, under 16 KiB).
 */
#ifndef SL_TAR_H
#define SL_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"

#define SL_TAR_NAME_MAX 4096 /* bytes of a normalised member name */

/* A regular member: name[0, name_len) (NUL-terminated, normalised), its
 * data at bytes [offset, offset + size) of the shard, its (first) header
 * at header_offset. */
typedef struct sl__tar_member {
    const char *name;
    size_t name_len;
    uint64_t header_offset;
    uint64_t offset;
    uint64_t size;
} sl__tar_member;

/* Called once per regular member, in archive order. Return 0 to go on;
 * anything else stops the scan and is returned (write a reason into err). */
typedef int (*sl__tar_member_fn)(void *ctx, const sl__tar_member *m, char *err, size_t errlen);

/* Scan the tar archive of file_size bytes in fd (pread; the file offset is
 * not used). Returns 0, or SL_ECORRUPT / SL_ELIMIT / SL_EUNSUPPORTED /
 * SL_EIO (with a sentence in err naming the header offset), or the
 * callback's code. On failure, members already reported lie wholly inside
 * the file and stay valid: the caller decides whether to keep them.
 * *end_block (may be NULL): the offset of the all-zero block that ended the
 * archive, or UINT64_MAX when the file ended first (on a block boundary:
 * accepted here, as tar and Python's tarfile accept it; a shard reader
 * calls it cut short, see sl__wds_scan). */
int sl__tar_scan(int fd, uint64_t file_size, sl__tar_member_fn add, void *ctx, uint64_t *end_block, char *err,
                 size_t errlen);
/* The same through a reader: read(rctx, off, buf, n, ...) fills exactly n
 * bytes at off (0) or fails with a code and a sentence (a remote shard's
 * windows). sl__tar_pread is the reader of a descriptor (rctx: an int *). */
typedef int (*sl__tar_read_fn)(void *rctx, uint64_t off, void *buf, size_t n, char *err, size_t errlen);
int sl__tar_scan_read(sl__tar_read_fn read, void *rctx, uint64_t size, sl__tar_member_fn add, void *ctx,
                      uint64_t *end_block, char *err, size_t errlen);
int sl__tar_pread(void *fdp, uint64_t off, void *buf, size_t n, char *err, size_t errlen);
/* The same over an archive in memory (fuzzing, tests). */
int sl__tar_scan_mem(const uint8_t *data, size_t len, sl__tar_member_fn add, void *ctx, char *err,
                     size_t errlen);

#endif

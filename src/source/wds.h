/*
 * WebDataset over tar shards (wds.c): members grouped into samples, a
 * shard's own checks (end-of-archive block, the trailer `sluice pack`
 * writes), and brace patterns for shard lists. The members come from the
 * tar scanner (source/tar.h).
 */
#ifndef SL_WDS_H
#define SL_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "source/tar.h"

/* ---- WebDataset samples ---------------------------------------------------
 *
 * A member's name splits at the first dot of its file part (after the last
 * '/'): the sample prefix is what comes before ("dir/000123"), the key what
 * comes after, lowercased as WebDataset does ("000123.Blur.npy" -> key
 * "blur.npy"). A name whose file part has no dot, starts with one
 * ("._000123.jpg") or ends with its first one ("000123.") has no key:
 * WebDataset drops the first two kinds (an empty key could name no field),
 * and we drop all three (counted in sl__wds_grouper.skipped).
 *
 * Consecutive members with the same prefix form one sample. A prefix that
 * comes back after other samples is refused (SL_ECORRUPT): WebDataset
 * requires a sample's members to be contiguous, and would silently yield
 * two half samples. A key twice in one sample is refused too (WebDataset
 * raises on it).
 */
#define SL_WDS_MAX_MEMBERS 64 /* members (keys) in one sample */
#define SL_WDS_KEY_MAX 128    /* bytes of one key */

typedef struct sl__wds_member {
    const char *key; /* NUL-terminated, lowercased */
    size_t key_len;
    uint64_t offset, size;
} sl__wds_member;

/* One sample: prefix[0, prefix_len) (NUL-terminated) and its n >= 1
 * members in archive order. Pointers are valid during the call only.
 * Return 0 to go on; anything else stops (with a reason in err). */
typedef int (*sl__wds_sample_fn)(void *ctx, const char *prefix, size_t prefix_len,
                                 const sl__wds_member *m, uint32_t n, char *err, size_t errlen);

/* Split name[0, len): 0 with *prefix_len and *key_off (key = name +
 * key_off, to len), or -1 when the name has no key. */
int sl__wds_split(const char *name, size_t len, size_t *prefix_len, size_t *key_off);

/* Streaming grouper: feed it members (sl__wds_group_add is an
 * sl__tar_member_fn), then finish. The set of prefixes seen (for the
 * contiguity check) is kept in budget b under SL_MEM_INDEX and freed by
 * sl__wds_group_free; the grouper itself is ~14 KiB, caller-owned. */
typedef struct sl__wds_grouper {
    sl__budget *b;
    sl__wds_sample_fn emit;
    void *ctx;
    uint64_t samples, skipped;
    /* the sample being gathered */
    char prefix[SL_TAR_NAME_MAX + 1];
    size_t prefix_len;
    uint32_t n;
    sl__wds_member m[SL_WDS_MAX_MEMBERS];
    char keys[SL_WDS_MAX_MEMBERS][SL_WDS_KEY_MAX + 1];
    /* prefixes of finished samples: an arena of NUL-terminated names and
     * an open-addressing table of (arena offset + 1), 0 = empty */
    char *arena;
    uint64_t arena_len, arena_cap;
    uint64_t *table;
    uint64_t table_cap, table_used;
} sl__wds_grouper;

void sl__wds_group_init(sl__wds_grouper *g, sl__budget *b, sl__wds_sample_fn emit, void *ctx);
int sl__wds_group_add(void *grouper, const sl__tar_member *m, char *err, size_t errlen);
/* Emit the last sample. 0 or the callback's / a budget code. */
int sl__wds_group_finish(sl__wds_grouper *g, char *err, size_t errlen);
void sl__wds_group_free(sl__wds_grouper *g);

/* The shard trailer: a last member named SL_WDS_TRAILER holding one line,
 *   {"sluice_shard": 1, "samples": N, "bytes": B}
 * N the samples before it, B the bytes before its header (every other
 * member). `sluice pack` writes it; WebDataset readers skip it (a top-level
 * name that starts and ends with "__" is their metadata), and so does the
 * grouper (no key). A reader that finds one checks both numbers, so a
 * shard that lost samples (cut short and mended with zero blocks, or
 * edited) is refused rather than read as a smaller one. */
#define SL_WDS_TRAILER "__sluice_shard__"
#define SL_WDS_TRAILER_MAX 512 /* bytes of its line */

typedef struct sl__wds_stats {
    uint64_t samples, skipped; /* samples emitted; members without a key (the trailer's not counted) */
    int trailer;               /* 1: the shard ended with a trailer, and it matched */
} sl__wds_stats;

/* Scan one shard and emit its samples: init + sl__tar_scan + finish +
 * free, then the shard's own checks: it must end with tar's end-of-archive
 * block (a shard whose file stops on a block boundary without one was cut
 * short: an interrupted write or copy; tar and Python's tarfile read it
 * as a smaller archive), and a trailer, when there is one, must be the
 * last member and agree (above). Returns 0 or the first error, SL_ECORRUPT
 * for those (members of samples emitted before it are valid; see
 * sl__tar_scan). *st: the counts (may be NULL). */
int sl__wds_scan(int fd, uint64_t file_size, sl__budget *b, sl__wds_sample_fn emit, void *ctx, sl__wds_stats *st,
                 char *err, size_t errlen);
/* The same through a reader (sl__tar_scan_read); tap (may be NULL) sees
 * every member handed to the grouper, in order, before the grouper does
 * (a remote shard's record of its scan: replaying them through
 * sl__wds_group_add groups the shard again without reading it). */
int sl__wds_scan_read(sl__tar_read_fn read, void *rctx, uint64_t size, sl__budget *b, sl__wds_sample_fn emit,
                      void *ctx, sl__tar_member_fn tap, void *tap_ctx, sl__wds_stats *st, char *err, size_t errlen);

/* ---- shard lists -----------------------------------------------------------
 *
 * Brace patterns as the WebDataset tools (and bash) expand them:
 * "train-{000000..000099}.tar" gives train-000000.tar ... train-000099.tar;
 * "{a,b}-{0..2}.tar" gives a-0 a-1 a-2 b-0 b-1 b-2 (the leftmost brace
 * varies slowest). A range {A..B} counts up or down; it is zero-padded to
 * the wider of A and B when either is written with a leading zero.
 * Unbalanced or nested braces, a range endpoint that is not a decimal
 * number below 10^18, more than SL_BRACE_MAX names in all, or a name
 * longer than SL_TAR_NAME_MAX are SL_EPARSE / SL_ELIMIT with a reason,
 * before any name is emitted. A pattern with no brace yields itself.
 */
#define SL_BRACE_MAX 1000000

typedef int (*sl__brace_fn)(void *ctx, const char *name, size_t len);
/* Calls emit once per name in order; returns 0, an error above, or the
 * callback's nonzero code (stopping there). Allocates nothing. */
int sl__brace_expand(const char *pattern, sl__brace_fn emit, void *ctx, char *err, size_t errlen);

#endif

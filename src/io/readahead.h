/*
 * Read-ahead (readahead.c): remote files fetched before a worker asks for
 * them (see readahead.c's head), their buffers counted under SL_MEM_IO and
 * held under a cap, their reads through an engine (engine.h). What to read
 * ahead, along the sampler's order, is pipeline/readahead.c's.
 *
 * Keys are the caller's (a sample and its field); t is the file's time in
 * the order, used to drop what was passed by.
 */
#ifndef SL_IO_READAHEAD_H
#define SL_IO_READAHEAD_H

#include <stdint.h>

#include "base/mem.h"
#include "io/engine.h"
#include "io/object.h"

typedef struct sl__ra sl__ra;
typedef struct sl__ra_entry sl__ra_entry;

/* What a table of `entries` records costs in the budget. */
uint64_t sl__ra_table_bytes(uint32_t entries);
/* A table of `entries` records (counted under SL_MEM_IO) whose buffers
 * together stay under cap bytes; reads go through io. 0 or SL_EBUDGET. */
int sl__ra_new(sl__budget *b, sl__io *io, uint32_t entries, uint64_t cap, sl__ra **out);
/* Drop every entry (reads in flight abandoned) and free the table. */
void sl__ra_free(sl__ra *ra);
/* In a child of fork(): give back the memory only (the reads were the
 * parent's engine's). */
void sl__ra_forget(sl__ra *ra);
/* Start reading the file of key: [off, off + size) of obj, or (obj NULL)
 * the whole object name of unknown size. 0 started, 1 on its way already,
 * SL_EBUDGET no record or no room under cap (the caller stops for now). */
int sl__ra_start(sl__ra *ra, uint64_t key, uint64_t t, const sl__obj *obj, const char *name, uint64_t off,
                 uint64_t size);
/* The entry of key, its read finished: 1 (release it after use), or 0 (no
 * such entry, or its read failed: read the file yourself). */
int sl__ra_take(sl__ra *ra, uint64_t key, sl__ra_entry **e);
/* A taken entry's bytes. */
const uint8_t *sl__ra_data(const sl__ra_entry *e, uint64_t *size);
void sl__ra_release(sl__ra *ra, sl__ra_entry *e);
/* Drop the entries not taken whose time lies outside [lo, hi]. */
void sl__ra_drop(sl__ra *ra, uint64_t lo, uint64_t hi);
/* Reads started, taken (hits) and dropped unread since creation; bytes held now (may be NULL). */
void sl__ra_stats(const sl__ra *ra, uint64_t *started, uint64_t *hits, uint64_t *dropped, uint64_t *held);

#endif

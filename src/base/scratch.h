/*
 * A worker's scratch: the memory one thread borrows from the budget to
 * load a sample, beyond the sample's slot in a batch.
 *
 * A scratch holds a baseline for life (a read buffer of read_base bytes and
 * dec_base bytes of decoder room, counted at init and fixed by the loader)
 * and growth taken for one sample at a time: a larger read buffer (a
 * private mapping, so giving it back returns the pages at once) and more
 * decoder room. Growth is taken with try-requests; when the budget refuses,
 * the scratch gives back everything it grew and waits, first come first
 * served, for the whole need at once (sl__budget_wait). A waiter therefore
 * holds nothing it could give back, so waits cannot deadlock. The owner
 * gives growth back after each sample when someone waits, and always
 * before it goes idle (sl__scratch_drop).
 *
 * One thread owns a scratch; nothing here locks.
 */
#ifndef SL_SCRATCH_H
#define SL_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"

typedef struct sl__scratch {
    sl__budget *b;
    uint8_t *rbase;      /* baseline read buffer (fixed) */
    size_t rbase_cap;
    uint64_t dec_base;   /* baseline decoder room (counted as SL_MEM_DECODER) */
    uint8_t *rbig;       /* grown read buffer (prepaid from grow_read) */
    size_t rbig_cap;
    uint64_t grow_read;  /* bytes counted for rbig (SL_MEM_SCRATCH) */
    uint64_t grow_dec;   /* decoder room beyond the baseline (SL_MEM_DECODER) */
    uint64_t cap;        /* the most growth one sample may take (0: no cap), a rule that
                            depends only on the sample and the configuration */
    /* Called before decoder room is given back, so the memory behind it
     * (the decoder's arena) is unmapped first: resident memory never
     * outgrows what is counted. May be NULL. */
    void (*trim)(void *ctx);
    void *trim_ctx;
} sl__scratch;

/* Take the baseline from b. 0, or SL_EBUDGET (the budget cannot hold it)
 * / SL_ENOMEM (the system refused); s is then empty. */
int sl__scratch_init(sl__scratch *s, sl__budget *b, size_t read_base, uint64_t dec_base);
/* Give everything back (growth and baseline). Takes an empty scratch. */
void sl__scratch_fini(sl__scratch *s);
/* Give the growth back; the baseline stays. */
void sl__scratch_drop(sl__scratch *s);

/* Make the buffers hold a read of `read` bytes and a decode needing `dec`
 * bytes of decoder room in all (baseline included). *lost = 1 when the
 * read buffer was replaced (bytes read into it before are gone). May wait
 * for budget. 0, or SL_EBUDGET (the growth is over s->cap, or can never
 * fit: reason says by how much), SL_ESTATE (the budget closed while
 * waiting), SL_ENOMEM. */
int sl__scratch_reserve(sl__scratch *s, uint64_t read, uint64_t dec, int *lost, char *reason, size_t rlen);
/* The growth (beyond the baseline) a reserve of (read, dec) takes. */
uint64_t sl__scratch_growth(const sl__scratch *s, uint64_t read, uint64_t dec);
/* The buffer that holds a read of `read` bytes after a reserve of it. */
uint8_t *sl__scratch_buf(sl__scratch *s, uint64_t read);
/* Decoder room held now: baseline + growth. */
static inline uint64_t sl__scratch_dec_room(const sl__scratch *s) { return s->dec_base + s->grow_dec; }

#endif

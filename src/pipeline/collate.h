/*
 * Collate: where each output of a sample lives in a batch slot.
 *
 * A slot is one block carved from the loader's region. For every output
 * (each schema field, "<f>_len" for fields that have one, then "index") it
 * holds batch_size samples back to back, [B, ...], then the bookkeeping:
 * a hash per position, ok/err flags, a reason string per position, and the
 * refill rounds' holes (uint32 per position).
 * Every offset is 64-byte aligned. The layout is fixed at create from the
 * schema, so a slot's size is known before any sample is read, and a
 * batch's fields are zero-copy views of its slot.
 */
#ifndef SL_COLLATE_H
#define SL_COLLATE_H

#include <stdint.h>

#include "fields/field.h"
#include "sluice.h"

#define SL__MAX_OUTPUTS (2 * SL__MAX_FIELDS + 1)

typedef struct sl__output {
    char name[SL__NAME_MAX + 4]; /* the field's name, "<f>_len", "index" */
    int kind;                    /* SL_KIND_* of the field it comes from */
    int dtype;
    uint32_t ndim;               /* per sample */
    int64_t shape[SL_MAX_DIMS - 1];
    uint64_t sample_bytes;
    uint64_t offset;             /* of position 0 in a slot */
    int device;                  /* delivered from device memory (GPU decode): the slot's
                                    copy is only where CPU workers decode before the upload,
                                    so moves and hashes leave it out */
} sl__output;

typedef struct sl__layout {
    sl__output out[SL__MAX_OUTPUTS];
    uint32_t nout;
    uint32_t field_out[SL__MAX_FIELDS]; /* schema field -> its output */
    uint32_t len_out[SL__MAX_FIELDS];   /* schema field -> its "<f>_len" output (0: none) */
    uint32_t index_out;
    uint32_t B;
    uint64_t sample_bytes;       /* every output of one sample */
    uint64_t off_hash, off_ok, off_err, off_reasons, off_rf_hole;
    uint64_t stride;             /* one slot, bookkeeping included */
} sl__layout;

/* Lay out slots of B samples for schema sc. 0 or SL_EOVERFLOW. */
int sl__layout_build(sl__layout *L, const sl__schema *sc, uint32_t B);

/* Position j of output k in the slot at base. */
static inline uint8_t *sl__layout_at(const sl__layout *L, uint8_t *base, uint32_t k, uint32_t j) {
    return base + L->out[k].offset + (uint64_t)j * L->out[k].sample_bytes;
}
/* Move the sample at position a to position b of a slot (every host
 * output; a device output is moved by the caller). */
void sl__layout_move(const sl__layout *L, uint8_t *base, uint32_t a, uint32_t b);
/* Hash of position j's host outputs (index and device outputs excluded). */
uint64_t sl__layout_hash(const sl__layout *L, uint8_t *base, uint32_t j);
/* The public view of output k of a slot holding n samples. */
void sl__layout_field(const sl__layout *L, uint8_t *base, uint32_t k, uint32_t n, sl_field *f);

#endif

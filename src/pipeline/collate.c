/* Collate: the slot layout from the schema (see collate.h). */
#include "pipeline/collate.h"

#include <string.h>

#include "base/hash.h"
#include "base/util.h"

#define SLOT_ALIGN 64

static int add_bytes(uint64_t *at, uint64_t n) {
    uint64_t end;
    if (sl__add(*at, n, &end) || sl__add(end, SLOT_ALIGN - 1, &end)) return SL_EOVERFLOW;
    *at = end / SLOT_ALIGN * SLOT_ALIGN;
    return 0;
}

static sl__output *add_output(sl__layout *L, const char *name, const char *suffix, int kind, int dtype) {
    sl__output *o = &L->out[L->nout++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s%s", name, suffix);
    o->kind = kind;
    o->dtype = dtype;
    return o;
}

int sl__layout_build(sl__layout *L, const sl__schema *sc, uint32_t B) {
    memset(L, 0, sizeof *L);
    L->B = B;
    for (uint32_t i = 0; i < sc->nfields; i++) {
        const sl__field *f = &sc->fields[i];
        sl__output *o = add_output(L, f->name, "", f->kind->id, f->dtype);
        o->ndim = f->ndim;
        memcpy(o->shape, f->shape, sizeof o->shape);
        o->sample_bytes = f->sample_bytes;
        L->field_out[i] = L->nout - 1;
    }
    for (uint32_t i = 0; i < sc->nfields; i++) {
        const sl__field *f = &sc->fields[i];
        if (!f->has_len) continue;
        sl__output *o = add_output(L, f->name, "_len", SL_KIND_LENGTH, SL_DTYPE_INT64);
        o->ndim = f->len_count > 1 || f->kind->id == SL_KIND_SEQUENCE ? 1 : 0;
        o->shape[0] = f->len_count;
        o->sample_bytes = (uint64_t)(f->len_count ? f->len_count : 1) * 8;
        L->len_out[i] = L->nout - 1;
    }
    sl__output *ix = add_output(L, "index", "", SL_KIND_INDEX, SL_DTYPE_INT64);
    ix->sample_bytes = 8;
    L->index_out = L->nout - 1;

    uint64_t at = 0, n;
    for (uint32_t k = 0; k < L->nout; k++) {
        L->out[k].offset = at;
        if (sl__add(L->sample_bytes, L->out[k].sample_bytes, &L->sample_bytes) ||
            sl__mul(B, L->out[k].sample_bytes, &n) || add_bytes(&at, n))
            return SL_EOVERFLOW;
    }
    L->off_hash = at;
    if (add_bytes(&at, (uint64_t)B * 8)) return SL_EOVERFLOW;
    L->off_ok = at;
    if (add_bytes(&at, B)) return SL_EOVERFLOW;
    L->off_err = at;
    if (add_bytes(&at, B)) return SL_EOVERFLOW;
    L->off_reasons = at;
    if (add_bytes(&at, (uint64_t)B * SL_REASON_MAX)) return SL_EOVERFLOW;
    L->off_rf_hole = at;
    if (add_bytes(&at, (uint64_t)B * 4)) return SL_EOVERFLOW;
    L->stride = at;
    return 0;
}

void sl__layout_move(const sl__layout *L, uint8_t *base, uint32_t a, uint32_t b) {
    for (uint32_t k = 0; k < L->nout; k++)
        if (!L->out[k].device) memcpy(sl__layout_at(L, base, k, b), sl__layout_at(L, base, k, a), L->out[k].sample_bytes);
    uint64_t *hash = (uint64_t *)(base + L->off_hash);
    hash[b] = hash[a];
    base[L->off_ok + b] = 1;
    base[L->off_ok + a] = 0;
}

uint64_t sl__layout_hash(const sl__layout *L, uint8_t *base, uint32_t j) {
    uint64_t h = 0;
    for (uint32_t k = 0; k < L->nout; k++)
        if (k != L->index_out && !L->out[k].device) h = sl__hash64(sl__layout_at(L, base, k, j), L->out[k].sample_bytes, h);
    return h;
}

void sl__layout_field(const sl__layout *L, uint8_t *base, uint32_t k, uint32_t n, sl_field *f) {
    const sl__output *o = &L->out[k];
    memset(f, 0, sizeof *f);
    f->name = o->name;
    f->data = base + o->offset;
    f->dtype = o->dtype;
    f->kind = o->kind;
    f->ndim = (int)o->ndim + 1;
    f->shape[0] = n;
    int64_t stride = (int64_t)sl_dtype_size(o->dtype);
    for (int d = (int)o->ndim; d >= 1; d--) {
        f->shape[d] = o->shape[d - 1];
        f->strides[d] = stride;
        stride *= o->shape[d - 1];
    }
    f->strides[0] = (int64_t)o->sample_bytes;
    f->nbytes = (uint64_t)n * o->sample_bytes;
    f->device_type = SL_DEVICE_CPU; /* the loader points device outputs at device memory */
}

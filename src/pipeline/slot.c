/* A batch slot's block and its commit's failures (see slot.h). */
#include "pipeline/slot.h"

#include <stdio.h>
#include <string.h>

void sl__slot_carve(sl_batch *s, sl_loader *ld, uint32_t id, const sl__layout *L, uint8_t *base) {
    s->ld = ld;
    s->id = id;
    s->base = base;
    s->hash = (uint64_t *)(base + L->off_hash);
    s->ok = base + L->off_ok;
    s->err = base + L->off_err;
    s->reasons = (char *)(base + L->off_reasons);
    s->rf_hole = (uint32_t *)(base + L->off_rf_hole);
}

void sl__slot_clear(sl_batch *s, uint32_t B) {
    memset(s->ok, 0, B);
    memset(s->err, 0, B);
}

uint64_t sl__slot_index(const sl_batch *s, const sl__layout *L, uint32_t j) {
    int64_t v;
    memcpy(&v, sl__layout_at(L, s->base, L->index_out, j), 8);
    return (uint64_t)v;
}

void sl__slot_move(sl_batch *s, const sl__layout *L, sl__gstage *g, uint32_t a, uint32_t b) {
    sl__layout_move(L, s->base, a, b);
    sl__gstage_move(g, s->id, a, b); /* the device copy of a GPU-decoded field */
}

void sl__slot_commit(sl_batch *s, uint64_t cno) {
    s->cno = cno;
    s->nerr = 0;
}

void sl__slot_fail(sl_batch *s, sl__errlog *log, uint64_t index, int code, const char *reason) {
    s->nerr++;
    sl__errlog_add(log, s->cno, s->epoch, index, code, reason);
    /* the newest one of the batch, kept whatever max_error_records says */
    s->last_err.index = index;
    s->last_err.epoch = s->epoch;
    s->last_err.code = code;
    snprintf(s->last_err.reason, sizeof s->last_err.reason, "%s", reason && *reason ? reason : sl_strerror(code));
}

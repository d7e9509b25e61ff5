/* A worker's scratch: see scratch.h for the wait protocol. */
#include "base/scratch.h"

#include <string.h>

#include "base/util.h"

int sl__scratch_init(sl__scratch *s, sl__budget *b, size_t read_base, uint64_t dec_base) {
    memset(s, 0, sizeof *s);
    s->b = b;
    s->rbase = sl__alloc(b, read_base, SL_MEM_SCRATCH);
    int rc = sl__budget_try(b, dec_base, SL_MEM_DECODER);
    if (!s->rbase || rc) {
        /* the budget is to blame only for a refused reservation, or a read
         * buffer it could not hold; otherwise the system refused */
        uint64_t used = atomic_load(&b->used);
        int code = rc ? SL_EBUDGET : !s->rbase && used + sl__alloc_cost(read_base) > b->limit ? SL_EBUDGET : SL_ENOMEM;
        if (rc == 0) sl__budget_release(b, dec_base, SL_MEM_DECODER);
        sl__free(b, s->rbase);
        memset(s, 0, sizeof *s);
        return code;
    }
    s->rbase_cap = read_base;
    s->dec_base = dec_base;
    return 0;
}

void sl__scratch_drop(sl__scratch *s) {
    if (s->grow_dec && s->trim) s->trim(s->trim_ctx);
    if (s->rbig) sl__unmap_prepaid(s->rbig, s->rbig_cap);
    s->rbig = NULL;
    s->rbig_cap = 0;
    sl__budget_release(s->b, s->grow_read, SL_MEM_SCRATCH);
    sl__budget_release(s->b, s->grow_dec, SL_MEM_DECODER);
    s->grow_read = s->grow_dec = 0;
}

void sl__scratch_fini(sl__scratch *s) {
    if (!s->b) return;
    sl__scratch_drop(s);
    sl__budget_release(s->b, s->dec_base, SL_MEM_DECODER);
    sl__free(s->b, s->rbase);
    memset(s, 0, sizeof *s);
}

uint8_t *sl__scratch_buf(sl__scratch *s, uint64_t read) { return read > s->rbase_cap ? s->rbig : s->rbase; }

/* Replace the big read buffer with a mapping of `read` bytes whose cost
 * (rneed) is already counted. */
static int remap(sl__scratch *s, uint64_t read, uint64_t rneed, char *reason, size_t rlen) {
    void *m = sl__map_prepaid((size_t)read);
    if (!m) {
        sl__msg(reason, rlen, "the system refused %llu bytes", (unsigned long long)rneed);
        return SL_ENOMEM;
    }
    if (s->rbig) sl__unmap_prepaid(s->rbig, s->rbig_cap);
    s->rbig = m;
    s->rbig_cap = (size_t)rneed;
    return 0;
}

uint64_t sl__scratch_growth(const sl__scratch *s, uint64_t read, uint64_t dec) {
    uint64_t r = read > s->rbase_cap ? sl__map_cost((size_t)SL_MIN(read, SIZE_MAX / 2)) : 0;
    uint64_t d = dec > s->dec_base ? dec - s->dec_base : 0, g;
    return sl__add(r, d, &g) ? UINT64_MAX : g;
}

int sl__scratch_reserve(sl__scratch *s, uint64_t read, uint64_t dec, int *lost, char *reason, size_t rlen) {
    sl__budget *b = s->b;
    if (read > SIZE_MAX / 2) {
        sl__msg(reason, rlen, "a read of %llu bytes overflows", (unsigned long long)read);
        return SL_EOVERFLOW;
    }
    uint64_t rneed = read > s->rbase_cap ? sl__map_cost((size_t)read) : 0;
    uint64_t dneed = dec > s->dec_base ? dec - s->dec_base : 0;
    *lost = 0;
    if (s->cap && sl__scratch_growth(s, read, dec) > s->cap) {
        char x[32], y[32];
        sl__msg(reason, rlen, "needs %s of scratch, over the %s a sample may have (a quarter of the budget)",
                sl__fmt_bytes(sl__scratch_growth(s, read, dec), x, sizeof x), sl__fmt_bytes(s->cap, y, sizeof y));
        return SL_EBUDGET;
    }
    if (rneed <= s->grow_read && dneed <= s->grow_dec) return 0;
    uint64_t dr = rneed > s->grow_read ? rneed - s->grow_read : 0;
    uint64_t dd = dneed > s->grow_dec ? dneed - s->grow_dec : 0;
    if (sl__budget_try(b, dr, SL_MEM_SCRATCH) == 0) {
        if (sl__budget_try(b, dd, SL_MEM_DECODER) == 0) {
            if (dr) {
                int rc = remap(s, read, rneed, reason, rlen);
                if (rc) {
                    sl__budget_release(b, dr, SL_MEM_SCRATCH);
                    sl__budget_release(b, dd, SL_MEM_DECODER);
                    return rc;
                }
                *lost = 1;
            }
            s->grow_read += dr;
            s->grow_dec += dd;
            return 0;
        }
        sl__budget_release(b, dr, SL_MEM_SCRATCH);
    }
    /* Pressure: give everything back, then wait for the whole need. */
    sl__scratch_drop(s);
    *lost = 1;
    uint64_t total = rneed + dneed;
    int rc = sl__budget_wait(b, total, SL_MEM_SCRATCH);
    if (rc) {
        char x[32], y[32];
        if (rc == SL_EBUDGET)
            sl__msg(reason, rlen, "needs %s of scratch; the budget leaves %s beyond its fixed part",
                    sl__fmt_bytes(total + s->dec_base, x, sizeof x), sl__fmt_bytes(sl__budget_headroom(b), y, sizeof y));
        else
            sl__msg(reason, rlen, "loader closing");
        return rc;
    }
    sl__budget_recat(b, dneed, SL_MEM_SCRATCH, SL_MEM_DECODER);
    if (rneed && (rc = remap(s, read, rneed, reason, rlen))) {
        sl__budget_release(b, rneed, SL_MEM_SCRATCH);
        sl__budget_release(b, dneed, SL_MEM_DECODER);
        return rc;
    }
    s->grow_read = rneed;
    s->grow_dec = dneed;
    return 0;
}

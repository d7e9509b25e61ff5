/*
 * A loader's error records in tests, header-only: those of some epochs,
 * each (sample, epoch) checked to be recorded once, and the record of a
 * file named by the end of its path.
 */
#ifndef SL_TEST_RECORDS_H
#define SL_TEST_RECORDS_H

#include <stdint.h>
#include <string.h>

#include "sluice.h"

#include "check.h"

#define FX_MAX_RECORDS 256

/* The error records of epochs [lo, hi): workers may have begun a later
 * epoch, whose records are left out. Each (sample, epoch) must be recorded
 * at most once: a sample the committer takes as a refill may also have
 * been decoded by a worker for a batch opened ahead, and must still be
 * recorded once (this caught such duplicates). The first max records are
 * copied to out (out NULL: only counted); returns how many were copied
 * (counted), at most max. */
static __attribute__((unused)) size_t fx_records(sl_loader *ld, uint64_t lo, uint64_t hi, sl_error_record *out,
                                                 size_t max) {
    sl_error_record e[FX_MAX_RECORDS];
    size_t n = sl_loader_errors(ld, 0, e, FX_MAX_RECORDS), count = 0;
    for (size_t i = 0; i < n && count < max; i++) {
        if (e[i].epoch < lo || e[i].epoch >= hi) continue;
        for (size_t j = 0; j < i; j++)
            if (e[j].index == e[i].index && e[j].epoch == e[i].epoch)
                SL_FAIL("sample %llu recorded twice in epoch %llu", (unsigned long long)e[i].index,
                        (unsigned long long)e[i].epoch);
        if (out) out[count] = e[i];
        count++;
    }
    return count;
}

/* The record among r[0 .. n) of the sample whose path ends with name (the
 * case fails if there is none). */
static __attribute__((unused)) const sl_error_record *fx_record_for(sl_loader *ld, const sl_error_record *r, size_t n,
                                                                    const char *name) {
    for (size_t i = 0; i < n; i++) {
        char buf[1024];
        const char *p = sl_loader_sample_path(ld, r[i].index, buf, sizeof buf);
        CHECK(p != NULL);
        size_t pl = strlen(p), nl = strlen(name);
        if (pl >= nl && !strcmp(p + pl - nl, name)) return &r[i];
    }
    SL_FAIL("no error record for %s", name);
}

#endif

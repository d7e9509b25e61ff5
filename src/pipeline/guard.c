/*
 * The guard on failures, and poisoning.
 *
 * A loader is poisoned by what makes going on pointless or wrong: more
 * failures than cfg.max_error_rate allows, an epoch in which every sample
 * failed, the dataset folder removed under it (and, in a child of fork(),
 * everything inherited: registry.c). The call that finds it returns the
 * code (SL_EERRORS, SL_ENOENT); later calls return SL_ESTATE;
 * sl_loader_poisoned() gives the code and the sentence.
 *
 * The guard judges every sample as the committer settles it, not only
 * delivered batches: after each commit pass (a batch's nominal positions,
 * then each refill round), with the failures recorded so far and the
 * samples decoded, in commit order. An epoch of nothing but failures used
 * to be read whole before its first batch was committed (every hole
 * refilled from the tail: 20,000 corrupt files read, 21 GB); now the pass
 * that passes the rate stops it, within a batch and a round of the first
 * SL_ERROR_RATE_MIN_TRIED samples. It trips when
 *   - more than max_error_rate of the samples tried failed, from
 *     SL_ERROR_RATE_MIN_TRIED samples on (max_error_rate < 1);
 *   - none of the first SL_GUARD_NONE_DECODED samples tried in an epoch
 *     decoded (even with max_error_rate 1: the bound on reading a dataset
 *     that holds nothing loadable);
 * and, at delivery, when an epoch ends with every sample failed.
 * Commit order is the serial rule's (refill.c), so where it trips depends
 * on the data and the configuration, never on timing or the worker count.
 * The batch it trips on is marked: batches before it are delivered, it is
 * not, and no work starts after it.
 */
#include <string.h>

#include "base/util.h"
#include "pipeline/loader_impl.h"

/* Samples tried in an epoch without one decoded that stop the loader
 * whatever max_error_rate says. */
#define SL_GUARD_NONE_DECODED 1000

typedef unsigned long long ull;

/* Append "; first failures: PATH: REASON; ..." (up to 3 kept records)
 * to buf. errmu is taken inside mu (lock order mu, then errmu). */
static void append_first_failures(sl_loader *ld, char *buf, size_t len) {
    size_t at = strlen(buf);
    pthread_mutex_lock(&ld->errmu);
    uint32_t n = SL_MIN(ld->nerrs_kept, 3u);
    for (uint32_t i = 0; i < n && at + 1 < len; i++) {
        const sl_error_record *r = &ld->errs[i].rec;
        char path[SL_PATH_MAX];
        if (sl__source_path(ld->src, r->index, path, sizeof path) < 0)
            snprintf(path, sizeof path, "sample %llu", (ull)r->index);
        int w = snprintf(buf + at, len - at, "%s%.200s: %s", i ? "; " : "; first failures: ", path, r->reason);
        if (w < 0 || (size_t)w >= len - at) break; /* full: the sentence ends cut */
        at += (size_t)w;
    }
    pthread_mutex_unlock(&ld->errmu);
}

static int poison(sl_loader *ld, int code) {
    ld->poisoned = code;
    pthread_cond_broadcast(&ld->cv_ready);
    return code;
}

int sl__guard_pass(sl_loader *ld, sl_batch *s, int last) {
    uint64_t good = 0;
    for (uint32_t j = 0; j < SL_MAX(s->nominal, (uint32_t)ld->B); j++) good += s->ok[j];
    if (s->epoch != ld->g_epoch) {
        ld->g_epoch = s->epoch;
        ld->g_epoch_good = ld->g_epoch_failed = 0;
    }
    uint64_t failed = ld->g_failed + s->nerr, tried = failed + ld->g_good + good;
    uint64_t e_failed = ld->g_epoch_failed + s->nerr, e_good = ld->g_epoch_good + good;
    double rate = ld->cfg.max_error_rate;
    char *why = ld->trip_why;
    size_t len = sizeof ld->trip_why;
    if (tried >= SL_ERROR_RATE_MIN_TRIED && rate < 1 && (double)failed > rate * (double)tried) {
        sl__msg(why, len, "%llu of %llu samples tried failed (%.1f%%), over max_error_rate %.1f%%", (ull)failed,
                (ull)tried, 100.0 * (double)failed / (double)tried, 100.0 * rate);
        s->tripped = 1;
    } else if (e_good == 0 && e_failed >= SL_GUARD_NONE_DECODED) {
        sl__msg(why, len, "the first %llu samples tried in epoch %llu all failed, none decoded", (ull)e_failed,
                (ull)s->epoch);
        s->tripped = 1;
    }
    if (last || s->tripped) {
        ld->g_good += good, ld->g_failed += s->nerr;
        ld->g_epoch_good = e_good, ld->g_epoch_failed = e_failed;
    }
    return s->tripped;
}

void sl__guard_reset(sl_loader *ld, uint64_t epoch) {
    ld->tripped = 0;
    ld->g_good = ld->good_seen, ld->g_failed = ld->nerrs_seen;
    ld->g_epoch = epoch;
    ld->g_epoch_good = ld->g_epoch_failed = 0;
}

int sl__guard_check(sl_loader *ld, const sl_batch *s) {
    char *why = ld->poison_why;
    size_t len = sizeof ld->poison_why;
    if (s->tripped) {
        sl__msg(why, len, "%s", ld->trip_why);
    } else if (s->final && ld->epoch_good == 0 && ld->epoch_errors > 0) {
        sl__msg(why, len, "every sample tried in epoch %llu failed (%llu failures, none decoded)", (ull)s->epoch,
                (ull)ld->epoch_errors);
    } else {
        return 0;
    }
    append_first_failures(ld, why, len);
    return poison(ld, SL_EERRORS);
}

int sl__poison_vanished(sl_loader *ld) {
    sl__msg(ld->poison_why, sizeof ld->poison_why,
            "the dataset folder %s was removed while the loader ran (after %llu batches)", ld->source_path,
            (ull)ld->batches_out);
    return poison(ld, SL_ENOENT);
}

/*
 * The guard on failures, and poisoning.
 *
 * A loader is poisoned by what makes going on pointless or wrong: more
 * failures than cfg.max_error_rate allows, an epoch in which every sample
 * failed, the dataset folder removed under it (and, in a child of fork(),
 * everything inherited: base/fork.h). The call that finds it returns the
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
#include "pipeline/guard.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"

/* Samples tried in an epoch without one decoded that stop the loader
 * whatever max_error_rate says. */
#define SL_GUARD_NONE_DECODED 1000

typedef unsigned long long ull;

void sl__guard_init(sl__guard *g, double max_rate) {
    memset(g, 0, sizeof *g);
    g->max_rate = max_rate;
}

int sl__guard_pass(sl__guard *g, uint64_t epoch, uint32_t nerr, uint64_t good, int last) {
    if (epoch != g->g_epoch) {
        g->g_epoch = epoch;
        g->g_epoch_good = g->g_epoch_failed = 0;
    }
    uint64_t failed = g->g_failed + nerr, tried = failed + g->g_good + good;
    uint64_t e_failed = g->g_epoch_failed + nerr, e_good = g->g_epoch_good + good;
    double rate = g->max_rate;
    char *why = g->trip_why;
    size_t len = sizeof g->trip_why;
    int tripped = 0;
    if (tried >= SL_ERROR_RATE_MIN_TRIED && rate < 1 && (double)failed > rate * (double)tried) {
        sl__msg(why, len, "%llu of %llu samples tried failed (%.1f%%), over max_error_rate %.1f%%", (ull)failed,
                (ull)tried, 100.0 * (double)failed / (double)tried, 100.0 * rate);
        tripped = 1;
    } else if (e_good == 0 && e_failed >= SL_GUARD_NONE_DECODED) {
        sl__msg(why, len, "the first %llu samples tried in epoch %llu all failed, none decoded", (ull)e_failed,
                (ull)epoch);
        tripped = 1;
    }
    if (last || tripped) {
        g->g_good += good, g->g_failed += nerr;
        g->g_epoch_good = e_good, g->g_epoch_failed = e_failed;
    }
    return tripped;
}

void sl__guard_reset(sl__guard *g, uint64_t epoch) {
    g->g_good = g->good_seen, g->g_failed = g->failed_seen;
    g->g_epoch = epoch;
    g->g_epoch_good = g->g_epoch_failed = 0;
}

void sl__guard_count(sl__guard *g, uint32_t nerr, uint32_t good, const sl_error_record *last) {
    g->failed_seen += nerr;
    g->epoch_errors += nerr;
    if (nerr) {
        g->last_err = *last;
        g->has_last_err = 1;
    }
    g->good_seen += good;
    g->epoch_good += good;
}

void sl__guard_epoch_end(sl__guard *g) { g->epoch_good = g->epoch_errors = 0; }

/* Append "; first failures: PATH: REASON; ..." (up to 3 kept records)
 * to buf. */
static void append_first_failures(sl__errlog *log, const sl__source *src, char *buf, size_t len) {
    size_t at = strlen(buf);
    sl_error_record first[3];
    uint32_t n = sl__errlog_head(log, first, 3);
    for (uint32_t i = 0; i < n && at + 1 < len; i++) {
        const sl_error_record *r = &first[i];
        char path[SL_PATH_MAX];
        if (sl__source_path(src, r->index, path, sizeof path) < 0)
            snprintf(path, sizeof path, "sample %llu", (ull)r->index);
        int w = snprintf(buf + at, len - at, "%s%.200s: %s", i ? "; " : "; first failures: ", path, r->reason);
        if (w < 0 || (size_t)w >= len - at) break; /* full: the sentence ends cut */
        at += (size_t)w;
    }
}

int sl__guard_check(sl__guard *g, sl__errlog *log, const sl__source *src, uint64_t epoch, int final, int tripped) {
    char *why = g->why;
    size_t len = sizeof g->why;
    if (tripped) {
        sl__msg(why, len, "%s", g->trip_why);
    } else if (final && g->epoch_good == 0 && g->epoch_errors > 0) {
        sl__msg(why, len, "every sample tried in epoch %llu failed (%llu failures, none decoded)", (ull)epoch,
                (ull)g->epoch_errors);
    } else {
        return 0;
    }
    append_first_failures(log, src, why, len);
    g->poisoned = SL_EERRORS;
    return SL_EERRORS;
}

int sl__guard_vanished(sl__guard *g, const char *path, uint64_t batches) {
    sl__msg(g->why, sizeof g->why, "the dataset folder %s was removed while the loader ran (after %llu batches)", path,
            (ull)batches);
    g->poisoned = SL_ENOENT;
    return SL_ENOENT;
}

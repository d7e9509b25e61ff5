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
 * The guard counts batches as they are delivered (or dropped under
 * on_error=raise): failures recorded at their commit, samples decoded. So
 * where it trips depends on the data and the configuration, never on
 * timing or the worker count. The batch it trips on is not delivered.
 */
#include <string.h>

#include "base/util.h"
#include "pipeline/loader_impl.h"

/* Append "; first failures: PATH: REASON; ..." (up to 3 kept records)
 * to buf. errmu is taken inside mu (lock order mu, then errmu). */
static void append_first_failures(sl_loader *ld, char *buf, size_t len) {
    size_t at = strlen(buf);
    pthread_mutex_lock(&ld->errmu);
    uint32_t n = SL_MIN(ld->nerrs_kept, 3u);
    for (uint32_t i = 0; i < n && at + 1 < len; i++) {
        const sl_error_record *r = &ld->errs[i].rec;
        char path[256];
        if (sl__source_path(ld->src, r->index, path, sizeof path) < 0)
            snprintf(path, sizeof path, "sample %llu", (unsigned long long)r->index);
        int w = snprintf(buf + at, len - at, "%s%s: %s", i ? "; " : "; first failures: ", path, r->reason);
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

int sl__guard_check(sl_loader *ld, const sl_batch *s) {
    uint64_t failed = ld->nerrs_seen, tried = ld->good_seen + failed;
    double rate = ld->cfg.max_error_rate;
    char *why = ld->poison_why;
    size_t len = sizeof ld->poison_why;
    if (s->final && ld->epoch_good == 0 && ld->epoch_errors > 0) {
        sl__msg(why, len, "every sample tried in epoch %llu failed (%llu failures, none decoded)",
                (unsigned long long)s->epoch, (unsigned long long)ld->epoch_errors);
    } else if (tried >= SL_ERROR_RATE_MIN_TRIED && rate < 1 && (double)failed > rate * (double)tried) {
        sl__msg(why, len, "%llu of %llu samples tried failed (%.1f%%), over max_error_rate %.1f%%",
                (unsigned long long)failed, (unsigned long long)tried, 100.0 * (double)failed / (double)tried,
                100.0 * rate);
    } else {
        return 0;
    }
    append_first_failures(ld, why, len);
    return poison(ld, SL_EERRORS);
}

int sl__poison_vanished(sl_loader *ld) {
    sl__msg(ld->poison_why, sizeof ld->poison_why,
            "the dataset folder %s was removed while the loader ran (after %llu batches)", ld->source_path,
            (unsigned long long)ld->batches_out);
    return poison(ld, SL_ENOENT);
}

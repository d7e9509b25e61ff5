/*
 * Admission: which samples the budget can ever hold (admit.c says the
 * rule). Owns no state.
 */
#ifndef SL_PIPELINE_ADMIT_H
#define SL_PIPELINE_ADMIT_H

#include <stddef.h>

#include "pipeline/config.h"
#include "pipeline/worker.h"

/* At create (no worker running): read the headers of up to 32 samples
 * spread evenly over the dataset and refuse (SL_EBUDGET with the numbers)
 * when more than a tenth would need more than c->sample_cap (each file
 * field's kind bounds its need, sl__kind.admit). Uses w's scratch (a
 * worker not running yet). Unreadable or undecodable headers are left
 * out. */
int sl__admit_check(const sl__conf *c, sl__worker *w, char *err, size_t errlen);

#endif

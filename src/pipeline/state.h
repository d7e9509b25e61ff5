/*
 * The iteration state (state.c says what resuming one means): reading it
 * whatever its version, where it puts a loader, and the merge of every
 * rank's. Owns no state: set and get go through the engine, which holds
 * the position and the resumed epoch's span.
 */
#ifndef SL_PIPELINE_STATE_H
#define SL_PIPELINE_STATE_H

#include <stddef.h>

#include "pipeline/config.h"
#include "pipeline/engine.h"
#include "sluice.h"

/* sl_loader_check_state_sized's work (the loader checked its handle):
 * 0, or the code with why. */
int sl__state_check(const sl__conf *conf, const sl_state *st, size_t st_size, char *why, size_t len);
/* sl_loader_set_state_sized's: the state read, checked and resumed (a
 * span's gone list copied into the budget, for the engine to keep). */
int sl__state_set(const sl__conf *conf, sl__engine *e, const sl_state *st, size_t st_size);
/* sl_loader_get_state_sized's. */
int sl__state_get(const sl__conf *conf, sl__engine *e, sl_state *out, size_t out_size);

#endif

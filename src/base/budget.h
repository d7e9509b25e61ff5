/*
 * The shared budget behind the public sl_budget handle: a root sl__budget,
 * a reference count (the user's and one per loader) and, when asked, its
 * governor thread. Loaders attach their own budget as a child of the core.
 */
#ifndef SL_BUDGET_H
#define SL_BUDGET_H

#include "base/mem.h"
#include "sluice.h"

/* The root a loader's budget attaches to. */
sl__budget *sl__shared_core(sl_budget *b);
/* A loader takes a reference while it lives, and drops it at destroy. */
void sl__shared_ref(sl_budget *b);
void sl__shared_unref(sl_budget *b);

#endif

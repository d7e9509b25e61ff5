/* The extension's shared-budget type (_budget.c), for _sluice.c. */
#ifndef SL_PY_BUDGET_H
#define SL_PY_BUDGET_H

#include <Python.h>

#include "sluice.h"

/* Add _Budget to module m; errors of SL_EBUDGET raise budget_error. -1 on failure. */
int sl_py_budget_add(PyObject *m, PyObject *budget_error);
/* O& converter: a _Budget (its sl_budget) or None (NULL). */
int sl_py_budget_conv(PyObject *o, void *out);

#endif

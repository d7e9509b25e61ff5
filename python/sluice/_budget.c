/*
 * _sluice._Budget: a shared budget (sl_budget) for several loaders, with
 * live limits and the governor. The Python layer (sluice.Budget) checks
 * arguments; this file maps the C API one to one. The object holds one
 * reference on the sl_budget; each loader made with it holds its own, so
 * close() or garbage collection never pulls the budget from under a
 * running loader.
 *
 * fork(): a budget inherited by a child of fork() refuses every call
 * (RuntimeError with the library's sentence: create the budget after the
 * fork), a Loader on it is refused the same way, and close() or garbage
 * collection frees the child's copy only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_budget.h"

typedef struct {
    PyObject_HEAD
    sl_budget *b;
} BudgetObject;

static PyObject *budget_error; /* sluice.BudgetError */

static PyObject *raise_rc(int rc, const char *what, const char *detail) {
    PyObject *type = rc == SL_EBUDGET ? budget_error : rc == SL_EINVAL ? PyExc_ValueError
                     : rc == SL_ESTATE ? PyExc_RuntimeError
                     : rc == SL_ENOENT ? PyExc_FileNotFoundError : rc == SL_ENOMEM ? PyExc_MemoryError
                                                                                   : PyExc_OSError;
    PyErr_Format(type, "%s: %s", what, detail && *detail ? detail : sl_strerror(rc));
    return NULL;
}

/* _Budget(limit: int, governor: bool, auto: bool, margin: int, period_ms: int,
 *         grow_after_ms: int, cgroup_dir: str|None) */
static int Budget_init(BudgetObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"limit", "governor", "auto", "margin", "period_ms", "grow_after_ms", "cgroup_dir", NULL};
    unsigned long long limit = 0, margin = 0;
    unsigned int period = 0, grow_after = 0;
    int governor = 0, automatic = 0;
    const char *dir = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "K|$ppKIIz", kwlist, &limit, &governor, &automatic, &margin, &period,
                                     &grow_after, &dir))
        return -1;
    if (self->b) {
        PyErr_SetString(PyExc_RuntimeError, "_Budget.__init__ called twice");
        return -1;
    }
    sl_governor_opts o;
    sl_governor_opts_init(&o);
    o.margin = margin;
    if (period) o.period_ms = period;
    if (grow_after) o.grow_after_ms = grow_after;
    o.cgroup_dir = dir;
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (automatic) {
        rc = sl_budget_create_auto(&o, &self->b, err, sizeof err);
    } else {
        rc = sl_budget_create(limit, &self->b);
        if (rc == 0 && governor && (rc = sl_budget_govern(self->b, &o, err, sizeof err))) {
            sl_budget_destroy(self->b);
            self->b = NULL;
        }
    }
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_rc(rc, "cannot create the budget", err);
        return -1;
    }
    return 0;
}

static void Budget_dealloc(BudgetObject *self) {
    sl_budget_destroy(self->b);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 0 if the budget can be used here, else -1 with an exception set. */
static int open_check(BudgetObject *self) {
    if (!self->b) {
        PyErr_SetString(PyExc_ValueError, "the budget is closed");
        return -1;
    }
    char why[512];
    if (sl_budget_poisoned(self->b, why, sizeof why) == 0) return 0;
    PyErr_SetString(PyExc_RuntimeError, why); /* inherited across fork() */
    return -1;
}

static PyObject *Budget_close(BudgetObject *self, PyObject *unused) {
    sl_budget *b = self->b;
    self->b = NULL;
    Py_BEGIN_ALLOW_THREADS
    sl_budget_destroy(b); /* a governor thread is joined here when this was the last reference */
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Budget_set_limit(BudgetObject *self, PyObject *arg) {
    if (open_check(self)) return NULL;
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS /* consumers give back on this thread */
    rc = sl_budget_set_limit(self->b, v, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) return raise_rc(rc, "cannot set the limit", err);
    Py_RETURN_NONE;
}

static int put(PyObject *d, const char *k, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return rc;
}
#define U64(x) PyLong_FromUnsignedLongLong((unsigned long long)(x))

static PyObject *u64_list(const uint64_t *v, uint32_t n) {
    PyObject *l = PyList_New(n);
    for (uint32_t i = 0; l && i < n; i++) {
        PyObject *x = U64(v[i]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *Budget_stats(BudgetObject *self, PyObject *unused) {
    if (open_check(self)) return NULL;
    sl_budget_info s;
    sl_budget_stats(self->b, &s);
    PyObject *d = PyDict_New(), *mem = PyDict_New(), *peak = PyDict_New();
    if (!d || !mem || !peak) goto fail;
    for (int c = 0; c < (int)s.mem_count; c++)
        if (put(mem, sl_mem_category_name(c), U64(s.mem[c])) || put(peak, sl_mem_category_name(c), U64(s.mem_peak[c])))
            goto fail;
    uint32_t n = s.loaders < SL_BUDGET_STATS_LOADERS ? s.loaders : SL_BUDGET_STATS_LOADERS;
    if (put(d, "limit", U64(s.limit)) || put(d, "ceiling", U64(s.ceiling)) || put(d, "used", U64(s.used)) ||
        put(d, "peak", U64(s.peak)) || put(d, "fixed", U64(s.fixed)) || put(d, "wait_s", PyFloat_FromDouble(s.wait_s)) ||
        put(d, "waiters", U64(s.waiters)) || put(d, "loaders", U64(s.loaders)) ||
        put(d, "loader_used", u64_list(s.loader_used, n)) || put(d, "loader_peak", u64_list(s.loader_peak, n)) ||
        put(d, "loader_fixed", u64_list(s.loader_fixed, n)) || put(d, "governor", PyBool_FromLong(s.governor)) ||
        put(d, "governor_moves", U64(s.governor_moves)) || put(d, "container_limit", U64(s.container_limit)) ||
        put(d, "container_usage", U64(s.container_usage)) || put(d, "mem_available", U64(s.mem_available)) ||
        put(d, "psi_some_avg10", PyFloat_FromDouble(s.psi_some_avg10)))
        goto fail;
    if (PyDict_SetItemString(d, "mem", mem) || PyDict_SetItemString(d, "mem_peak", peak)) goto fail;
    Py_DECREF(mem);
    Py_DECREF(peak);
    return d;
fail:
    Py_XDECREF(d);
    Py_XDECREF(mem);
    Py_XDECREF(peak);
    return NULL;
}

static PyObject *Budget_events(BudgetObject *self, PyObject *args) {
    unsigned long long first = 0;
    if (!PyArg_ParseTuple(args, "|K", &first) || open_check(self)) return NULL;
    PyObject *l = PyList_New(0);
    sl_budget_event ev[64];
    size_t n;
    while (l && (n = sl_budget_events(self->b, first, ev, 64)) > 0) {
        for (size_t i = 0; i < n; i++) {
            PyObject *d = PyDict_New();
            if (!d || put(d, "t", PyFloat_FromDouble(ev[i].t)) || put(d, "old_limit", U64(ev[i].old_limit)) ||
                put(d, "new_limit", U64(ev[i].new_limit)) || put(d, "container_limit", U64(ev[i].container_limit)) ||
                put(d, "container_usage", U64(ev[i].container_usage)) ||
                put(d, "mem_available", U64(ev[i].mem_available)) ||
                put(d, "reason", PyUnicode_FromString(ev[i].reason)) || PyList_Append(l, d)) {
                Py_XDECREF(d);
                Py_CLEAR(l);
                return NULL;
            }
            Py_DECREF(d);
        }
        first += n;
    }
    return l;
}

static PyObject *Budget_get_closed(BudgetObject *self, void *unused) { return PyBool_FromLong(self->b == NULL); }

static PyMethodDef Budget_methods[] = {
    {"close", (PyCFunction)Budget_close, METH_NOARGS, "Drop this reference (loaders keep theirs)."},
    {"set_limit", (PyCFunction)Budget_set_limit, METH_O, "sl_budget_set_limit(bytes)."},
    {"stats", (PyCFunction)Budget_stats, METH_NOARGS, "sl_budget_stats() as a dict."},
    {"events", (PyCFunction)Budget_events, METH_VARARGS, "The governor's moves from event `first` on."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Budget_getset[] = {
    {"closed", (getter)Budget_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BudgetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sluice._sluice._Budget",
    .tp_basicsize = sizeof(BudgetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Budget_init,
    .tp_dealloc = (destructor)Budget_dealloc,
    .tp_methods = Budget_methods,
    .tp_getset = Budget_getset,
};

int sl_py_budget_add(PyObject *m, PyObject *budget_error_type) {
    budget_error = budget_error_type;
    if (PyType_Ready(&BudgetType) < 0) return -1;
    return PyModule_AddObjectRef(m, "_Budget", (PyObject *)&BudgetType);
}

int sl_py_budget_conv(PyObject *o, void *out) {
    sl_budget **b = out;
    if (o == Py_None) {
        *b = NULL;
        return 1;
    }
    if (!PyObject_TypeCheck(o, &BudgetType)) {
        PyErr_Format(PyExc_TypeError, "shared_budget must be a _Budget, got %s", Py_TYPE(o)->tp_name);
        return 0;
    }
    if (!((BudgetObject *)o)->b) {
        PyErr_SetString(PyExc_ValueError, "the budget is closed");
        return 0;
    }
    *b = ((BudgetObject *)o)->b;
    return 1;
}

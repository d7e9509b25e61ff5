/*
 * sluice._sluice — the CPython extension, written against the public C API
 * (include/sluice.h) only.
 *
 * Objects and ownership
 *   _Loader  owns one sl_loader. It is destroyed when the object dies, or on
 *            close() — but never while a Batch still holds a slot or while a
 *            thread is inside a GIL-released call: close() then only marks it
 *            closing and the last of those destroys it (maybe_destroy).
 *   _Batch   owns one sl_batch (a slot) and a strong reference to its
 *            _Loader. Its death gives the slot back (sl_loader_release).
 *   Field    a zero-copy view of one field of a batch; holds a strong
 *            reference to its _Batch. Buffers exported through the buffer
 *            protocol hold the Field (view->obj); DLPack capsules and the
 *            tensors made from them hold it through the managed tensor's
 *            manager context. So the slot returns to the pool exactly when
 *            the last view of it dies.
 *
 * Threads: every field of _Loader is read and written with the GIL held.
 * The GIL is released around sl_loader_create/next/set_epoch/set_state/
 * destroy and sl_image_decode; while released, `busy` is set so that no
 * other thread can destroy the loader or enter it concurrently.
 *
 * Signals: next() waits in slices of NEXT_SLICE_MS (sl_loader_next_timeout)
 * and runs Python's signal handlers between them, so Ctrl-C raises
 * KeyboardInterrupt while it waits. A batch taken just as a handler raises
 * is kept in `stash` (with the state before it) and is what the next call
 * returns, so an interrupted next() loses nothing and get_state() counts
 * only batches handed to Python.
 *
 * fork(): in a child, the C library refuses every call on a loader made in
 * the parent (SL_ESTATE); this layer raises RuntimeError with the
 * library's sentence, and dealloc frees only the child's copy.
 *
 * The exception types are created once at module initialisation and never
 * change afterwards; they are the only file-level objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_budget.h"
#include "sluice.h"

/* ---- DLPack (https://dmlc.github.io/dlpack), ABI version 1.0 ----------- */
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
enum { kDLCPU = 1 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 };

/* ---- exceptions --------------------------------------------------------- */
/* Set once in PyInit__sluice, read-only afterwards. */
static PyObject *BudgetError;    /* SL_EBUDGET: ValueError and MemoryError */
static PyObject *DecodeError;    /* format/corrupt/limit/unsupported: ValueError */
static PyObject *SampleError;    /* SL_ESAMPLE: RuntimeError */
static PyObject *SlotsHeldError; /* SL_EHELD: RuntimeError */
static PyObject *ErrorRateError; /* SL_EERRORS: RuntimeError */

static const char *code_name(int code) {
    switch (code) {
    case SL_OK: return "SL_OK";
    case SL_EINVAL: return "SL_EINVAL";
    case SL_ENOMEM: return "SL_ENOMEM";
    case SL_EBUDGET: return "SL_EBUDGET";
    case SL_ENOENT: return "SL_ENOENT";
    case SL_EIO: return "SL_EIO";
    case SL_EEMPTY: return "SL_EEMPTY";
    case SL_EPARSE: return "SL_EPARSE";
    case SL_EFORMAT: return "SL_EFORMAT";
    case SL_ECORRUPT: return "SL_ECORRUPT";
    case SL_ELIMIT: return "SL_ELIMIT";
    case SL_EUNSUPPORTED: return "SL_EUNSUPPORTED";
    case SL_EHELD: return "SL_EHELD";
    case SL_ESAMPLE: return "SL_ESAMPLE";
    case SL_EEND: return "SL_EEND";
    case SL_ESTATE: return "SL_ESTATE";
    case SL_EOVERFLOW: return "SL_EOVERFLOW";
    case SL_ESYS: return "SL_ESYS";
    case SL_ETIMEDOUT: return "SL_ETIMEDOUT";
    case SL_EERRORS: return "SL_EERRORS";
    case SL_EAGAIN: return "SL_EAGAIN";
    default: return "SL_E?";
    }
}

static PyObject *exc_type(int code) {
    switch (code) {
    case SL_EINVAL: case SL_EEMPTY: case SL_EPARSE: return PyExc_ValueError;
    case SL_ENOMEM: return PyExc_MemoryError;
    case SL_EBUDGET: return BudgetError;
    case SL_ENOENT: return PyExc_FileNotFoundError;
    case SL_EIO: case SL_ESYS: case SL_EAGAIN: return PyExc_OSError;
    case SL_EERRORS: return ErrorRateError;
    case SL_EFORMAT: case SL_ECORRUPT: case SL_ELIMIT: case SL_EUNSUPPORTED: return DecodeError;
    case SL_EHELD: return SlotsHeldError;
    case SL_ESAMPLE: return SampleError;
    case SL_EOVERFLOW: return PyExc_OverflowError;
    default: return PyExc_RuntimeError; /* SL_ESTATE and unknown codes */
    }
}

/* Raise type with message "what: detail (SL_EXXX: strerror)" ("(SL_EXXX)" when
 * detail says strerror already) and attributes
 * code (int) and code_name. detail may be NULL or empty. Returns NULL. */
static PyObject *raise_as(PyObject *type, int code, const char *what, const char *detail) {
    PyObject *msg;
    if (detail && detail[0] && strstr(detail, sl_strerror(code))) /* the reason said once */
        msg = PyUnicode_FromFormat("%s: %s (%s)", what, detail, code_name(code));
    else if (detail && detail[0])
        msg = PyUnicode_FromFormat("%s: %s (%s: %s)", what, detail, code_name(code), sl_strerror(code));
    else
        msg = PyUnicode_FromFormat("%s (%s: %s)", what, code_name(code), sl_strerror(code));
    if (!msg) return NULL;
    PyObject *exc = PyObject_CallOneArg(type, msg);
    Py_DECREF(msg);
    if (!exc) return NULL;
    PyObject *c = PyLong_FromLong(code);
    PyObject *n = PyUnicode_FromString(code_name(code));
    if (!c || !n || PyObject_SetAttrString(exc, "code", c) < 0 ||
        PyObject_SetAttrString(exc, "code_name", n) < 0) {
        Py_XDECREF(c);
        Py_XDECREF(n);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(c);
    Py_DECREF(n);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_code(int code, const char *what, const char *detail) {
    return raise_as(exc_type(code), code, what, detail);
}

/* ---- small converters ---------------------------------------------------- */
static int conv_u64(PyObject *o, void *out) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "expected an int, got %.100s", Py_TYPE(o)->tp_name);
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *(uint64_t *)out = v;
    return 1;
}

static int conv_u32(PyObject *o, void *out) {
    uint64_t v;
    if (!conv_u64(o, &v)) return 0;
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%llu does not fit in 32 bits", (unsigned long long)v);
        return 0;
    }
    *(uint32_t *)out = (uint32_t)v;
    return 1;
}

/* recipe: a dict whose keys are sl_image_recipe's field names (height,
 * width, interpolation, scale_min, scale_max, ratio_min, ratio_max, hflip,
 * crop_pct, resize); missing keys stay 0 (the default). The library checks
 * the values; this checks only types and names. 0, or -1 with an exception. */
static int recipe_from_dict(PyObject *d, sl_image_recipe *r) {
    sl_image_recipe_init(r);
    if (!d || d == Py_None) return 0;
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "recipe must be a dict, got %.100s", Py_TYPE(d)->tp_name);
        return -1;
    }
    static const struct { const char *name; char kind; size_t off; } fields[] = {
        {"height", 'u', offsetof(sl_image_recipe, height)},
        {"width", 'u', offsetof(sl_image_recipe, width)},
        {"resize", 'u', offsetof(sl_image_recipe, resize)},
        {"interpolation", 'i', offsetof(sl_image_recipe, interpolation)},
        {"scale_min", 'd', offsetof(sl_image_recipe, scale_min)},
        {"scale_max", 'd', offsetof(sl_image_recipe, scale_max)},
        {"ratio_min", 'd', offsetof(sl_image_recipe, ratio_min)},
        {"ratio_max", 'd', offsetof(sl_image_recipe, ratio_max)},
        {"hflip", 'd', offsetof(sl_image_recipe, hflip)},
        {"crop_pct", 'd', offsetof(sl_image_recipe, crop_pct)},
    };
    const size_t nf = sizeof fields / sizeof fields[0];
    size_t found = 0;
    for (size_t i = 0; i < nf; i++) {
        PyObject *v = PyDict_GetItemString(d, fields[i].name); /* borrowed */
        if (!v) continue;
        found++;
        char *at = (char *)r + fields[i].off;
        if (fields[i].kind == 'u') {
            if (!conv_u32(v, at)) return -1;
        } else if (fields[i].kind == 'i') {
            long x = PyLong_AsLong(v);
            if (x == -1 && PyErr_Occurred()) return -1;
            if (x < INT32_MIN || x > INT32_MAX) {
                PyErr_Format(PyExc_OverflowError, "recipe %s %ld out of range", fields[i].name, x);
                return -1;
            }
            *(int *)at = (int)x;
        } else {
            double x = PyFloat_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) return -1;
            *(double *)at = x;
        }
    }
    if (found != (size_t)PyDict_Size(d)) {
        PyErr_SetString(PyExc_ValueError, "recipe has a key that is not a field of sl_image_recipe");
        return -1;
    }
    return 0;
}

/* Add key = value (a new reference, stolen) to d. -1 if value is NULL or
 * the insert failed. */
static int dict_put(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}
#define PUT_U64(d, k, v) dict_put((d), (k), PyLong_FromUnsignedLongLong((unsigned long long)(v)))
#define PUT_F(d, k, v) dict_put((d), (k), PyFloat_FromDouble((double)(v)))
#define PUT_S(d, k, v) dict_put((d), (k), PyUnicode_FromString(v))

/* ---- _Loader ------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    sl_loader *ld;     /* NULL before create and after destroy */
    PyObject *source;  /* bytes: cfg.source, kept for the loader's life */
    Py_ssize_t held;   /* _Batch objects alive (slots held by Python) */
    int busy;          /* a thread is inside a GIL-released call on ld */
    int closing;       /* close() asked: destroy once held == 0 and !busy */
    uint64_t max_error_records;
    sl_batch *stash;   /* a batch taken but not handed over (a signal raised): next() returns it */
    sl_state stash_state; /* the state before the stashed batch */
} LoaderObject;

typedef struct {
    PyObject_HEAD
    LoaderObject *loader; /* strong: keeps ld alive while the slot is held */
    sl_batch *b;          /* owned: released in dealloc */
    uint32_t len;
    uint64_t epoch, index, checksum;
} BatchObject;

typedef struct {
    PyObject_HEAD
    BatchObject *batch;  /* strong: the slot this view points into */
    sl_field f;          /* copied; f.data points into the slot */
    Py_ssize_t shape[SL_MAX_DIMS], strides[SL_MAX_DIMS];
    char name[80];
} FieldObject;

static PyTypeObject LoaderType, BatchType, FieldType;

/* Give a stashed batch back (it was never handed to Python). */
static void drop_stash(LoaderObject *self) {
    if (self->stash && self->ld) sl_loader_release(self->ld, self->stash);
    self->stash = NULL;
}

/* Destroy the loader if close() was asked and nothing uses it any more. */
static void maybe_destroy(LoaderObject *self) {
    if (!self->ld || !self->closing || self->held > 0 || self->busy) return;
    drop_stash(self);
    sl_loader *ld = self->ld;
    self->ld = NULL;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    sl_loader_destroy(ld);
    Py_END_ALLOW_THREADS
    self->busy = 0;
}

/* 0 if the loader can be entered now, else -1 with an exception set. */
static int loader_enter_check(LoaderObject *self) {
    if (!self->ld || self->closing) {
        PyErr_SetString(PyExc_ValueError, "the loader is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the loader is in use by another thread (one consumer thread per loader)");
        return -1;
    }
    return 0;
}

static int Loader_init(LoaderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"source", "batch_size", "size", "preset", "shuffle", "seed",
                             "drop_last", "rank", "world_size", "workers", "prefetch",
                             "min_slots", "budget", "on_error", "max_pixels", "max_bytes",
                             "flags", "max_error_records", "fields", "recipe", "max_scans", "max_error_rate", "shared_budget",
                             /* issue 12: the sample cache */
                             "cache", "cache_share", "cache_what", "local_rank", "local_world_size",
                             /* GPU decode (issue 13) */
                             "decode", "gpu_device", "gpu_budget", "gpu_max_pixels", "gpu_staging", "worker_nice",
                             /* an order range (issue 22) */
                             "order_begin", "order_end", "gpu_engines",
                             /* the tuner (issue 20) */
                             "workers_max",
                             /* remote sources (issue 21) */
                             "io_requests", "io_timeout_ms", "io_retries", "io_hedge", "io_readahead",
                             NULL};
    sl_config cfg;
    sl_config_init(&cfg);
    sl_image_recipe r; /* what cfg.recipe points at; sl_loader_create copies it */
    PyObject *source = NULL, *recipe = NULL;
    const char *fields = NULL;
    int preset = cfg.preset, shuffle = cfg.shuffle, drop_last = cfg.drop_last,
        on_error = cfg.on_error;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O&|$O&O&ipO&pO&O&O&O&O&O&iO&O&O&O&zOO&dO&O&iiO&O&iiO&O&O&iO&O&O&O&O&O&O&iO&", kwlist,
            PyUnicode_FSConverter, &source,
            conv_u32, &cfg.batch_size, conv_u32, &cfg.size, &preset, &shuffle, conv_u64,
            &cfg.seed, &drop_last, conv_u32, &cfg.rank, conv_u32, &cfg.world_size, conv_u32,
            &cfg.workers, conv_u32, &cfg.prefetch, conv_u32, &cfg.min_slots, conv_u64,
            &cfg.budget, &on_error, conv_u64, &cfg.max_pixels, conv_u64, &cfg.max_bytes,
            conv_u32, &cfg.flags, conv_u32, &cfg.max_error_records, &fields, &recipe, conv_u32, &cfg.max_scans,
            &cfg.max_error_rate, sl_py_budget_conv, &cfg.shared_budget, conv_u64, &cfg.cache, &cfg.cache_share,
            &cfg.cache_what, conv_u32, &cfg.local_rank, conv_u32, &cfg.local_world_size, &cfg.decode,
            &cfg.gpu_device, conv_u64, &cfg.gpu_budget, conv_u64, &cfg.gpu_max_pixels, conv_u64, &cfg.gpu_staging,
            &cfg.worker_nice, conv_u64, &cfg.order_begin, conv_u64, &cfg.order_end, conv_u32, &cfg.gpu_engines,
            conv_u32, &cfg.workers_max, conv_u32, &cfg.io_requests, conv_u32, &cfg.io_timeout_ms, conv_u32,
            &cfg.io_retries, &cfg.io_hedge, conv_u64, &cfg.io_readahead))
        return -1;
    if (recipe_from_dict(recipe, &r) < 0) {
        Py_DECREF(source);
        return -1;
    }
    cfg.recipe = &r;
    if (self->ld || self->source) {
        Py_DECREF(source);
        PyErr_SetString(PyExc_RuntimeError, "_Loader.__init__ called twice");
        return -1;
    }
    self->source = source; /* owned; cfg.source points into it */
    cfg.source = PyBytes_AS_STRING(source);
    cfg.preset = preset;
    cfg.shuffle = shuffle;
    cfg.drop_last = drop_last;
    cfg.on_error = on_error;
    cfg.fields = fields; /* copied by sl_loader_create */
    self->max_error_records = cfg.max_error_records;

    char err[512] = "";
    sl_loader *ld = NULL;
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_loader_create(&cfg, &ld, err, sizeof err);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0) {
        raise_code(rc, "cannot create the loader", err);
        return -1;
    }
    self->ld = ld;
    return 0;
}

static void Loader_dealloc(LoaderObject *self) {
    /* No _Batch is alive (each holds a reference), and no thread is inside. */
    self->closing = 1;
    self->held = 0;
    self->busy = 0;
    maybe_destroy(self);
    Py_CLEAR(self->source);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Loader_close(LoaderObject *self, PyObject *unused) {
    self->closing = 1;
    maybe_destroy(self);
    Py_RETURN_NONE;
}

/* Raise for code from a call on the loader, with the library's sentence
 * when the loader is poisoned (the guard, a vanished source, fork()). */
static PyObject *raise_loader(LoaderObject *self, int code, const char *what) {
    char why[400] = "";
    int poison = self->ld ? sl_loader_poisoned(self->ld, why, sizeof why) : 0;
    if (poison == 0 || !why[0]) return raise_code(code, what, NULL);
    return raise_code(code, what, why);
}

/* Raise SampleError for the batch sl_loader_next just dropped, with its
 * newest failure's index, path, reason (sl_loader_last_error: kept even
 * once max_error_records are kept). */
static PyObject *raise_sample_error(LoaderObject *self) {
    sl_error_record rec;
    char buf[SL_PATH_MAX];
    const char *path = NULL;
    int have = sl_loader_last_error(self->ld, &rec) == 0;
    if (have) path = sl_loader_sample_path(self->ld, rec.index, buf, sizeof buf);
    if (!have)
        return raise_code(SL_ESAMPLE,
                          "a sample of this batch failed; the batch was dropped and the next "
                          "iteration goes on with the one after (see errors())",
                          NULL);
    char what[4600];
    snprintf(what, sizeof what,
             "sample %llu (%s) failed in epoch %llu: %s [%s]; the batch was dropped and the next "
             "iteration goes on with the one after",
             (unsigned long long)rec.index, path ? path : "?", (unsigned long long)rec.epoch,
             rec.reason, code_name(rec.code));
    raise_code(SL_ESAMPLE, what, NULL);
    /* Attach the record to the exception instance. */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value) {
        PyObject *o;
        if ((o = PyLong_FromUnsignedLongLong(rec.index))) {
            PyObject_SetAttrString(value, "index", o);
            Py_DECREF(o);
        }
        if ((o = path ? PyUnicode_DecodeFSDefault(path) : Py_NewRef(Py_None))) {
            PyObject_SetAttrString(value, "path", o);
            Py_DECREF(o);
        }
        if ((o = PyUnicode_DecodeUTF8(rec.reason, (Py_ssize_t)strnlen(rec.reason, sizeof rec.reason),
                                      "replace"))) {
            PyObject_SetAttrString(value, "reason", o);
            Py_DECREF(o);
        }
        if ((o = PyUnicode_FromString(code_name(rec.code)))) {
            PyObject_SetAttrString(value, "sample_code", o);
            Py_DECREF(o);
        }
        PyErr_Clear();
    }
    PyErr_Restore(type, value, tb);
    return NULL;
}

#define NEXT_SLICE_MS 20

/* Wait for the next batch in slices, running signal handlers between them
 * and once more after a batch arrived (the batch is stashed meanwhile, so
 * a handler that raises loses nothing). Returns the code; *b on 0; -100
 * with a Python exception set. */
static int next_waiting(LoaderObject *self, sl_batch **b) {
    for (;;) {
        if (self->stash) {
            *b = self->stash;
            self->stash = NULL;
            return 0;
        }
        sl_state before;
        int have_before = sl_loader_get_state(self->ld, &before) == 0;
        int rc;
        do {
            self->busy = 1;
            Py_BEGIN_ALLOW_THREADS
            rc = sl_loader_next_timeout(self->ld, b, NEXT_SLICE_MS);
            Py_END_ALLOW_THREADS
            self->busy = 0;
            if (rc == SL_ETIMEDOUT && PyErr_CheckSignals() < 0) return -100;
            if (!self->ld || self->closing) { /* a handler closed it */
                PyErr_SetString(PyExc_ValueError, "the loader was closed while next() waited");
                return -100;
            }
        } while (rc == SL_ETIMEDOUT);
        if (rc != 0) return rc;
        self->stash = *b; /* until the handlers ran */
        if (have_before) self->stash_state = before;
        else sl_loader_get_state(self->ld, &self->stash_state);
        if (PyErr_CheckSignals() < 0) return -100;
        /* a handler may have reset the loader (set_epoch drops the stash): look again */
    }
}

/* next() -> _Batch, or None at the end of the epoch. */
static PyObject *Loader_next(LoaderObject *self, PyObject *unused) {
    if (loader_enter_check(self) < 0) return NULL;
    BatchObject *bo = PyObject_New(BatchObject, &BatchType);
    if (!bo) return NULL;
    bo->loader = NULL;
    bo->b = NULL;
    sl_batch *b = NULL;
    int rc = next_waiting(self, &b);
    if (rc == -100) {
        Py_DECREF(bo);
        maybe_destroy(self);
        return NULL;
    }
    if (rc < 0) {
        Py_DECREF(bo);
        PyObject *res = NULL;
        if (rc == SL_EEND) {
            res = Py_NewRef(Py_None);
        } else if (rc == SL_EHELD) {
            sl_stats st;
            char what[256];
            unsigned slots = sl_loader_stats(self->ld, &st) == 0 ? st.slots : 0;
            snprintf(what, sizeof what,
                     "all %u batch slots are held by views of earlier batches; drop references "
                     "to them (del batch, or the arrays/tensors made from its fields) or raise "
                     "prefetch/budget",
                     slots);
            raise_code(rc, what, NULL);
        } else if (rc == SL_ESAMPLE) {
            raise_sample_error(self);
        } else {
            raise_loader(self, rc, "cannot get the next batch");
        }
        maybe_destroy(self);
        return res;
    }
    bo->b = b;
    bo->loader = (LoaderObject *)Py_NewRef((PyObject *)self);
    bo->len = sl_batch_len(b);
    bo->epoch = sl_batch_epoch(b);
    bo->index = sl_batch_index(b);
    bo->checksum = sl_batch_checksum(b);
    self->held++;
    return (PyObject *)bo;
}

static PyObject *Loader_set_epoch(LoaderObject *self, PyObject *arg) {
    uint64_t epoch;
    if (!conv_u64(arg, &epoch)) return NULL;
    if (loader_enter_check(self) < 0) return NULL;
    drop_stash(self);
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_loader_set_epoch(self->ld, epoch);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0) return raise_loader(self, rc, "set_epoch failed");
    Py_RETURN_NONE;
}

static int loader_open_check(LoaderObject *self) {
    if (!self->ld || self->closing) {
        PyErr_SetString(PyExc_ValueError, "the loader is closed");
        return -1;
    }
    return 0;
}

static PyObject *Loader_len(LoaderObject *self, PyObject *unused) {
    if (loader_open_check(self) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(sl_loader_len(self->ld));
}

static PyObject *Loader_num_samples(LoaderObject *self, PyObject *unused) {
    if (loader_open_check(self) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(sl_loader_num_samples(self->ld));
}

static PyObject *Loader_dataset_size(LoaderObject *self, PyObject *unused) {
    if (loader_open_check(self) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(sl_loader_dataset_size(self->ld));
}

static PyObject *Loader_sample_path(LoaderObject *self, PyObject *arg) {
    uint64_t index;
    if (!conv_u64(arg, &index)) return NULL;
    if (loader_open_check(self) < 0) return NULL;
    char buf[SL_PATH_MAX];
    const char *p = sl_loader_sample_path(self->ld, index, buf, sizeof buf);
    if (!p) Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(p);
}

static PyObject *Loader_slot_region(LoaderObject *self, PyObject *unused) {
    if (loader_open_check(self) < 0) return NULL;
    void *base = NULL;
    size_t len = 0;
    int rc = sl_loader_slot_region(self->ld, &base, &len);
    if (rc < 0) return raise_code(rc, "slot_region failed", NULL);
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)base, (unsigned long long)len);
}

/* The tuner's last decisions as a list of dicts, oldest first (NULL with
 * an exception). */
static PyObject *tuner_log(const sl_loader *ld) {
    sl_tuner_decision log[SL_TUNER_LOG];
    size_t n = sl_loader_tuner_log(ld, log, SL_TUNER_LOG);
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        const sl_tuner_decision *r = &log[i];
        PyObject *e = Py_BuildValue("{sKsdsKsssssIsIss}", "seq", (unsigned long long)r->seq, "t", r->t, "batches",
                                    (unsigned long long)r->batches, "what",
                                    r->what == SL_TUNE_WORKERS ? "workers" : "slots", "why", sl_tune_why_name(r->why),
                                    "from", (unsigned)r->from, "to", (unsigned)r->to, "reason", r->reason);
        if (!e || PyList_Append(list, e) < 0) Py_CLEAR(list);
        Py_XDECREF(e);
    }
    return list;
}

static PyObject *Loader_stats(LoaderObject *self, PyObject *unused) {
    if (loader_open_check(self) < 0) return NULL;
    sl_stats st;
    int rc = sl_loader_stats(self->ld, &st);
    if (rc < 0) return raise_loader(self, rc, "stats failed");
    PyObject *d = PyDict_New(), *mem = PyDict_New(), *peak = PyDict_New();
    if (!d || !mem || !peak) goto fail;
    for (int c = 0; c < (int)st.mem_count; c++) {
        if (PUT_U64(mem, sl_mem_category_name(c), st.mem[c]) < 0 ||
            PUT_U64(peak, sl_mem_category_name(c), st.mem_peak[c]) < 0)
            goto fail;
    }
    if (PUT_U64(d, "samples", st.samples) < 0 || PUT_U64(d, "batches", st.batches) < 0 ||
        PUT_U64(d, "errors", st.errors) < 0 || PUT_U64(d, "epoch", st.epoch) < 0 ||
        PUT_F(d, "seconds", st.seconds) < 0 || PUT_F(d, "samples_per_s", st.samples_per_s) < 0 ||
        PUT_F(d, "consumer_wait_s", st.consumer_wait_s) < 0 ||
        PUT_F(d, "consumer_wait_fraction", st.seconds > 0 ? st.consumer_wait_s / st.seconds : 0.0) < 0 ||
        PUT_F(d, "worker_busy_s", st.worker_busy_s) < 0 ||
        PUT_F(d, "worker_idle_s", st.worker_idle_s) < 0 ||
        PUT_F(d, "budget_wait_s", st.budget_wait_s) < 0 || PUT_U64(d, "workers", st.workers) < 0 ||
        PUT_U64(d, "slots", st.slots) < 0 || PUT_U64(d, "slots_held", st.slots_held) < 0 ||
        PUT_U64(d, "slots_ready", st.slots_ready) < 0 ||
        PUT_U64(d, "budget_bytes", st.budget_bytes) < 0 ||
        PUT_U64(d, "accounted_bytes", st.accounted_bytes) < 0 ||
        PUT_U64(d, "peak_accounted_bytes", st.peak_accounted_bytes) < 0 ||
        PUT_F(d, "budget_used_fraction",
              st.budget_bytes ? (double)st.accounted_bytes / (double)st.budget_bytes : 0.0) < 0 ||
        PUT_U64(d, "fixed_bytes", st.fixed_bytes) < 0 ||
        dict_put(d, "memory", Py_NewRef(mem)) < 0 ||
        dict_put(d, "memory_peak", Py_NewRef(peak)) < 0 ||
        PUT_U64(d, "cache_hits", st.cache_hits) < 0 ||
        PUT_U64(d, "cache_misses", st.cache_misses) < 0 ||
        PUT_F(d, "cache_hit_rate", st.cache_hit_rate) < 0 || PUT_U64(d, "cache_bytes", st.cache_bytes) < 0 ||
        PUT_U64(d, "cache_capacity", st.cache_capacity) < 0 || PUT_U64(d, "cache_entries", st.cache_entries) < 0 ||
        PUT_U64(d, "cache_evictions", st.cache_evictions) < 0 || PUT_U64(d, "cache_shared", st.cache_shared) < 0 ||
        PUT_U64(d, "cache_processes", st.cache_processes) < 0 ||
        PUT_U64(d, "storage_bytes_read", st.storage_bytes_read) < 0 ||
        PUT_F(d, "index_seconds", st.index_seconds) < 0 ||
        PUT_U64(d, "dataset_size", sl_loader_dataset_size(self->ld)) < 0 ||
        PUT_U64(d, "samples_per_epoch", sl_loader_num_samples(self->ld)) < 0 ||
        PUT_U64(d, "batches_per_epoch", sl_loader_len(self->ld)) < 0 ||
        PUT_U64(d, "batches_alive_in_python", (uint64_t)self->held) < 0 ||
        dict_put(d, "decode", PyUnicode_FromString(st.decode == SL_DECODE_GPU ? "gpu" : "cpu")) < 0 ||
        dict_put(d, "decode_reason", PyUnicode_FromString(st.decode_reason)) < 0 ||
        PUT_U64(d, "gpu_samples", st.gpu_samples) < 0 || PUT_U64(d, "cpu_samples", st.cpu_samples) < 0 ||
        PUT_U64(d, "gpu_handed_back", st.gpu_handed_back) < 0 ||
        PUT_U64(d, "gpu_pool_bytes", st.gpu_pool_bytes) < 0 || PUT_U64(d, "gpu_pool_peak", st.gpu_pool_peak) < 0 ||
        PUT_U64(d, "gpu_batch_bytes", st.gpu_batch_bytes) < 0 ||
        PUT_U64(d, "gpu_pinned_bytes", st.gpu_pinned_bytes) < 0 ||
        PUT_U64(d, "gpu_staging_peak", st.gpu_staging_peak) < 0 || PUT_F(d, "gpu_rate", st.gpu_rate) < 0 ||
        PUT_F(d, "cpu_rate", st.cpu_rate) < 0 ||
        dict_put(d, "gpu_device_name", PyUnicode_FromString(st.gpu_device_name)) < 0 ||
        PUT_U64(d, "gpu_engines", st.gpu_engines) < 0 || PUT_F(d, "gpu_hw_s", st.gpu_hw_s) < 0 ||
        PUT_F(d, "gpu_thread_route_s", st.gpu_thread_route_s) < 0 ||
        PUT_F(d, "gpu_thread_hybrid_s", st.gpu_thread_hybrid_s) < 0 ||
        PUT_F(d, "gpu_thread_hw_s", st.gpu_thread_hw_s) < 0 ||
        PUT_F(d, "gpu_thread_launch_s", st.gpu_thread_launch_s) < 0 ||
        PUT_F(d, "gpu_thread_wait_s", st.gpu_thread_wait_s) < 0 ||
        PUT_F(d, "gpu_hybrid_s", st.gpu_hybrid_s) < 0 || PUT_F(d, "gpu_resize_s", st.gpu_resize_s) < 0 ||
        PUT_F(d, "gpu_copy_s", st.gpu_copy_s) < 0 || PUT_U64(d, "gpu_hw_calls", st.gpu_hw_calls) < 0 ||
        PUT_U64(d, "gpu_hw_failed_calls", st.gpu_hw_failed_calls) < 0 ||
        PUT_U64(d, "gpu_hw_calls_unpipelined", st.gpu_hw_calls_unpipelined) < 0 ||
        PUT_U64(d, "gpu_hw_mode_switches", st.gpu_hw_mode_switches) < 0 ||
        PUT_F(d, "gpu_hw_us_pipelined", st.gpu_hw_us_pipelined) < 0 ||
        PUT_F(d, "gpu_hw_us_unpipelined", st.gpu_hw_us_unpipelined) < 0)
        goto fail;
    /* remote sources (issue 21) */
    if (PUT_U64(d, "net_bytes", st.net_bytes) < 0 || PUT_U64(d, "net_requests", st.net_requests) < 0 ||
        PUT_U64(d, "net_retries", st.net_retries) < 0 || PUT_U64(d, "net_hedges", st.net_hedges) < 0 ||
        PUT_U64(d, "net_timeouts", st.net_timeouts) < 0 || PUT_U64(d, "net_failures", st.net_failures) < 0 ||
        PUT_U64(d, "net_inflight", st.net_inflight) < 0 || PUT_U64(d, "net_inflight_peak", st.net_inflight_peak) < 0 ||
        PUT_U64(d, "readahead_started", st.readahead_started) < 0 ||
        PUT_U64(d, "readahead_hits", st.readahead_hits) < 0 ||
        PUT_U64(d, "readahead_dropped", st.readahead_dropped) < 0 ||
        PUT_U64(d, "readahead_bytes", st.readahead_bytes) < 0)
        goto fail;
    /* elastic batch slots (mem2: issue 8 item 3) */
    if (PUT_U64(d, "slots_retired", st.slots_retired) < 0 || PUT_U64(d, "slots_min", st.slots_min) < 0 ||
        PUT_U64(d, "slot_retirements", st.slot_retirements) < 0 ||
        PUT_U64(d, "slot_reactivations", st.slot_reactivations) < 0)
        goto fail;
    /* the tuner (docs/tuner.md) */
    if (dict_put(d, "tuner", PyBool_FromLong(st.tuner)) < 0 || PUT_U64(d, "workers_active", st.workers_active) < 0 ||
        PUT_F(d, "workers_active_mean", st.workers_active_mean) < 0 ||
        PUT_U64(d, "slots_target", st.slots_target) < 0 || PUT_U64(d, "tuner_decisions", st.tuner_decisions) < 0 ||
        PUT_F(d, "pass_seconds", st.pass_seconds) < 0 ||
        PUT_F(d, "pass_consumer_wait_s", st.pass_consumer_wait_s) < 0 ||
        PUT_F(d, "pass_consumer_wait_fraction",
              st.pass_seconds > 0 ? st.pass_consumer_wait_s / st.pass_seconds : 0.0) < 0 ||
        PUT_F(d, "pass_consumer_wait_gpu_s", st.pass_consumer_wait_gpu_s) < 0 ||
        PUT_F(d, "pass_consumer_wait_gpu_fraction",
              st.pass_seconds > 0 ? st.pass_consumer_wait_gpu_s / st.pass_seconds : 0.0) < 0 ||
        PUT_F(d, "pass_consumer_wait_cpu_s", st.pass_consumer_wait_cpu_s) < 0 ||
        PUT_F(d, "pass_consumer_wait_cpu_fraction",
              st.pass_seconds > 0 ? st.pass_consumer_wait_cpu_s / st.pass_seconds : 0.0) < 0 ||
        PUT_F(d, "pass_consumer_cpu_s", st.pass_consumer_cpu_s) < 0 ||
        PUT_U64(d, "pass_gpu_samples", st.pass_gpu_samples) < 0 ||
        PUT_U64(d, "pass_cpu_samples", st.pass_cpu_samples) < 0 || PUT_U64(d, "node_cpus", st.node_cpus) < 0 ||
        PUT_U64(d, "node_loaders", st.node_loaders) < 0 || PUT_F(d, "node_demand", st.node_demand) < 0 ||
        PUT_F(d, "demand", st.demand) < 0 || dict_put(d, "tuner_log", tuner_log(self->ld)) < 0)
        goto fail;
    Py_DECREF(mem);
    Py_DECREF(peak);
    return d;
fail:
    Py_XDECREF(d);
    Py_XDECREF(mem);
    Py_XDECREF(peak);
    return NULL;
}

/* errors(first=0, max=-1) -> list of dicts. */
static PyObject *Loader_errors(LoaderObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"first", "max", NULL};
    Py_ssize_t first = 0, max = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nn", kwlist, &first, &max)) return NULL;
    if (first < 0) {
        PyErr_SetString(PyExc_ValueError, "errors(): first must be >= 0");
        return NULL;
    }
    if (loader_open_check(self) < 0) return NULL;
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    sl_error_record recs[64];
    size_t at = (size_t)first;
    char buf[SL_PATH_MAX];
    for (;;) {
        size_t want = 64;
        if (max >= 0) {
            size_t left = (size_t)max - (size_t)PyList_GET_SIZE(list);
            if (left == 0) break;
            if (left < want) want = left;
        }
        size_t n = sl_loader_errors(self->ld, at, recs, want);
        for (size_t i = 0; i < n; i++) {
            const sl_error_record *r = &recs[i];
            const char *p = sl_loader_sample_path(self->ld, r->index, buf, sizeof buf);
            PyObject *d = PyDict_New();
            if (!d) goto fail;
            if (PUT_U64(d, "index", r->index) < 0 || PUT_U64(d, "epoch", r->epoch) < 0 ||
                dict_put(d, "path", p ? PyUnicode_DecodeFSDefault(p) : Py_NewRef(Py_None)) < 0 ||
                dict_put(d, "code", PyLong_FromLong(r->code)) < 0 ||
                PUT_S(d, "code_name", code_name(r->code)) < 0 ||
                dict_put(d, "reason",
                         PyUnicode_DecodeUTF8(r->reason, (Py_ssize_t)strnlen(r->reason, sizeof r->reason),
                                              "replace")) < 0 ||
                PyList_Append(list, d) < 0) {
                Py_DECREF(d);
                goto fail;
            }
            Py_DECREF(d);
        }
        at += n;
        if (n < want) break;
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

/* ---- iteration states as dicts ------------------------------------------ */

/* st as the dict state_dict() returns: ints, and gone as a list of ints. */
static PyObject *state_to_dict(const sl_state *s) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (PUT_U64(d, "version", s->version) < 0 || PUT_U64(d, "seed", s->seed) < 0 ||
        PUT_U64(d, "epoch", s->epoch) < 0 || PUT_U64(d, "batch", s->batch) < 0 ||
        PUT_U64(d, "tail", s->tail) < 0 || PUT_U64(d, "dataset_size", s->dataset_size) < 0 ||
        PUT_U64(d, "rank", s->rank) < 0 || PUT_U64(d, "world_size", s->world_size) < 0 ||
        PUT_U64(d, "batch_size", s->batch_size) < 0 || PUT_U64(d, "flags", s->flags) < 0 ||
        PUT_U64(d, "pad", s->pad) < 0 || PUT_U64(d, "span_begin", s->span_begin) < 0 ||
        PUT_U64(d, "span_end", s->span_end) < 0)
        goto fail;
    if (s->gone_count > (uint64_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "state_dict: the gone list does not fit a list");
        goto fail;
    }
    PyObject *gone = PyList_New((Py_ssize_t)s->gone_count);
    if (!gone) goto fail;
    for (uint64_t i = 0; i < s->gone_count; i++) {
        PyObject *v = PyLong_FromUnsignedLong(s->gone[i]);
        if (!v) {
            Py_DECREF(gone);
            goto fail;
        }
        PyList_SET_ITEM(gone, (Py_ssize_t)i, v);
    }
    if (dict_put(d, "gone", gone) < 0) goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static int state_get(PyObject *d, const char *key, int bits32, void *out) {
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v) {
        PyErr_Format(PyExc_ValueError, "load_state_dict: missing key '%s'", key);
        return -1;
    }
    if (PyBool_Check(v) || !PyIndex_Check(v)) { /* ints and integers like numpy's (__index__) */
        PyErr_Format(PyExc_TypeError, "load_state_dict: '%s' must be an int, got %.100s", key,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(v);
    if (!i) return -1;
    int ok = bits32 ? conv_u32(i, out) : conv_u64(i, out);
    Py_DECREF(i);
    if (!ok) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "load_state_dict: '%s' is out of range", key);
        return -1;
    }
    return 0;
}

/* A state_dict() dict into *s; version 2's gone list into *gone (PyMem,
 * the caller frees it; NULL when empty). 0, or -1 with an exception. */
static int state_from_dict(PyObject *d, sl_state *s, uint32_t **gone) {
    memset(s, 0, sizeof *s);
    *gone = NULL;
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "a state is a dict, got %.100s", Py_TYPE(d)->tp_name);
        return -1;
    }
    if (state_get(d, "version", 0, &s->version) < 0 || state_get(d, "seed", 0, &s->seed) < 0 ||
        state_get(d, "epoch", 0, &s->epoch) < 0 || state_get(d, "batch", 0, &s->batch) < 0 ||
        state_get(d, "tail", 0, &s->tail) < 0 || state_get(d, "dataset_size", 0, &s->dataset_size) < 0 ||
        state_get(d, "rank", 1, &s->rank) < 0 || state_get(d, "world_size", 1, &s->world_size) < 0 ||
        state_get(d, "batch_size", 1, &s->batch_size) < 0 || state_get(d, "flags", 1, &s->flags) < 0)
        return -1;
    if (s->version < 2) return 0; /* version 1: no span (the library reads it so) */
    if (state_get(d, "pad", 0, &s->pad) < 0 || state_get(d, "span_begin", 0, &s->span_begin) < 0 ||
        state_get(d, "span_end", 0, &s->span_end) < 0)
        return -1;
    PyObject *list = PyDict_GetItemString(d, "gone"); /* borrowed */
    if (!list) {
        PyErr_SetString(PyExc_ValueError, "load_state_dict: missing key 'gone'");
        return -1;
    }
    PyObject *seq = PySequence_Fast(list, "load_state_dict: 'gone' must be a list of ints");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((uint64_t)n > s->dataset_size) { /* never more than the order holds: refuse before allocating */
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "load_state_dict: 'gone' lists %zd positions of an order of %llu", n,
                     (unsigned long long)s->dataset_size);
        return -1;
    }
    uint32_t *g = n ? PyMem_Malloc((size_t)n * sizeof *g) : NULL;
    if (n && !g) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i), *x = NULL;
        uint32_t u;
        if (PyBool_Check(v) || !PyIndex_Check(v) || !(x = PyNumber_Index(v)) || !conv_u32(x, &u)) {
            Py_XDECREF(x);
            Py_DECREF(seq);
            PyMem_Free(g);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "load_state_dict: 'gone'[%zd] is not a position (an int below 2^32)", i);
            return -1;
        }
        Py_DECREF(x);
        g[i] = u;
    }
    Py_DECREF(seq);
    s->gone_count = (uint64_t)n;
    s->gone = g;
    *gone = g;
    return 0;
}

static PyObject *Loader_get_state(LoaderObject *self, PyObject *unused) {
    if (loader_open_check(self) < 0) return NULL;
    sl_state s;
    int rc = 0;
    if (self->stash) s = self->stash_state; /* the stashed batch was never handed over */
    else rc = sl_loader_get_state(self->ld, &s);
    if (rc < 0) return raise_loader(self, rc, "state_dict failed");
    /* gone is copied at once: the list is the loader's, freed at the second
     * set_state after this one, which cannot begin while this holds the GIL */
    return state_to_dict(&s);
}

static PyObject *Loader_set_state(LoaderObject *self, PyObject *d) {
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "load_state_dict expects a dict, got %.100s", Py_TYPE(d)->tp_name);
        return NULL;
    }
    sl_state s;
    uint32_t *gone;
    if (state_from_dict(d, &s, &gone) < 0) return NULL;
    if (loader_enter_check(self) < 0) {
        PyMem_Free(gone);
        return NULL;
    }
    char why[1024] = "";
    if (sl_loader_poisoned(self->ld, why, sizeof why)) {
        PyMem_Free(gone);
        return raise_loader(self, SL_ESTATE, "load_state_dict failed");
    }
    drop_stash(self);
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_loader_set_state(self->ld, &s);
    if (rc == SL_ESTATE) sl_loader_check_state(self->ld, &s, why, sizeof why);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyMem_Free(gone);
    if (rc == SL_ESTATE) /* the library's sentence names what differs, with both values */
        return raise_as(PyExc_ValueError, rc, "load_state_dict",
                        why[0] ? why : "the state does not fit this loader");
    if (rc < 0) return raise_code(rc, "load_state_dict failed", NULL);
    Py_RETURN_NONE;
}

/* _merge_states([state, ...] in rank order) -> the merged state (sl_state_merge). */
static PyObject *mod_merge_states(PyObject *mod, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "merge_states expects a list of the ranks' state_dict()s");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *res = NULL;
    sl_state *st = PyMem_Calloc(n ? (size_t)n : 1, sizeof *st);
    const sl_state **ptr = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ptr);
    uint32_t **gones = PyMem_Calloc(n ? (size_t)n : 1, sizeof *gones), *out_gone = NULL;
    if (!st || !ptr || !gones) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (state_from_dict(PySequence_Fast_GET_ITEM(seq, i), &st[i], &gones[i]) < 0) goto done;
        ptr[i] = &st[i];
    }
    sl_state m;
    char why[640] = "";
    uint64_t cap = 0;
    int rc;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        rc = sl_state_merge(ptr, (size_t)n, &m, out_gone, cap, why, sizeof why);
        Py_END_ALLOW_THREADS
        if (rc != SL_EOVERFLOW || out_gone) break;
        cap = m.gone_count; /* the room it needs, then once more */
        if (cap > (uint64_t)PY_SSIZE_T_MAX / sizeof *out_gone ||
            !(out_gone = PyMem_Malloc((size_t)cap * sizeof *out_gone))) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (rc == SL_ESTATE || rc == SL_EINVAL) raise_as(PyExc_ValueError, rc, "merge_states", why);
    else if (rc < 0) raise_code(rc, "merge_states failed", why);
    else res = state_to_dict(&m);
done:
    for (Py_ssize_t i = 0; gones && i < n; i++) PyMem_Free(gones[i]);
    PyMem_Free(gones);
    PyMem_Free(ptr);
    PyMem_Free(st);
    PyMem_Free(out_gone);
    Py_DECREF(seq);
    return res;
}

static PyObject *Loader_get_closed(LoaderObject *self, void *unused) {
    return PyBool_FromLong(!self->ld || self->closing);
}

static PyObject *Loader_get_held(LoaderObject *self, void *unused) {
    return PyLong_FromSsize_t(self->held);
}

static PyMethodDef Loader_methods[] = {
    {"next", (PyCFunction)Loader_next, METH_NOARGS,
     "next() -> _Batch, or None at the end of the epoch (the next call starts the next one)."},
    {"close", (PyCFunction)Loader_close, METH_NOARGS,
     "Stop the workers and free the loader once no batch is held any more."},
    {"set_epoch", (PyCFunction)Loader_set_epoch, METH_O, "Restart iteration at the start of epoch."},
    {"len", (PyCFunction)Loader_len, METH_NOARGS, "Batches per epoch for this rank."},
    {"num_samples", (PyCFunction)Loader_num_samples, METH_NOARGS, "Samples per epoch for this rank."},
    {"dataset_size", (PyCFunction)Loader_dataset_size, METH_NOARGS, "Samples in the dataset."},
    {"sample_path", (PyCFunction)Loader_sample_path, METH_O, "Path of dataset sample i, or None."},
    {"slot_region", (PyCFunction)Loader_slot_region, METH_NOARGS,
     "(address, length) of the one region every batch slot is carved from."},
    {"stats", (PyCFunction)Loader_stats, METH_NOARGS, "Counters, timings and memory as a dict."},
    {"errors", (PyCFunction)(void (*)(void))Loader_errors, METH_VARARGS | METH_KEYWORDS,
     "errors(first=0, max=-1) -> list of error-record dicts."},
    {"get_state", (PyCFunction)Loader_get_state, METH_NOARGS, "Iteration state as a dict of ints."},
    {"set_state", (PyCFunction)Loader_set_state, METH_O, "Resume from get_state()'s dict."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Loader_getset[] = {
    {"closed", (getter)Loader_get_closed, NULL, "True once close() was called.", NULL},
    {"held", (getter)Loader_get_held, NULL, "Batches alive in Python.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice._sluice._Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)Loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Low-level loader: one sl_loader. Use sluice.Loader.",
    .tp_methods = Loader_methods,
    .tp_getset = Loader_getset,
    .tp_init = (initproc)Loader_init,
    .tp_new = PyType_GenericNew,
};

/* ---- _Batch -------------------------------------------------------------- */
static void Batch_dealloc(BatchObject *self) {
    LoaderObject *lo = self->loader;
    if (lo) {
        /* lo->ld is alive: destruction waits for held == 0. */
        if (self->b && lo->ld) sl_loader_release(lo->ld, self->b);
        lo->held--;
        maybe_destroy(lo);
        self->loader = NULL;
        Py_DECREF(lo);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *field_new(BatchObject *batch, const sl_field *f) {
    if (f->ndim < 0 || f->ndim > SL_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "field '%s' has %d dimensions (at most %d supported)",
                     f->name ? f->name : "?", f->ndim, SL_MAX_DIMS);
        return NULL;
    }
    FieldObject *fo = PyObject_New(FieldObject, &FieldType);
    if (!fo) return NULL;
    fo->batch = (BatchObject *)Py_NewRef((PyObject *)batch);
    fo->f = *f;
    snprintf(fo->name, sizeof fo->name, "%s", f->name ? f->name : "");
    fo->f.name = fo->name;
    for (int i = 0; i < SL_MAX_DIMS; i++) {
        fo->shape[i] = i < f->ndim ? (Py_ssize_t)f->shape[i] : 0;
        fo->strides[i] = i < f->ndim ? (Py_ssize_t)f->strides[i] : 0;
    }
    return (PyObject *)fo;
}

/* fields() -> dict name -> Field (views of this batch's slot). */
static PyObject *Batch_fields(BatchObject *self, PyObject *unused) {
    int n = sl_batch_num_fields(self->b);
    if (n < 0) return raise_code(n, "cannot read the batch's fields", NULL);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < n; i++) {
        sl_field f;
        int rc = sl_batch_field(self->b, i, &f);
        if (rc < 0) {
            Py_DECREF(d);
            return raise_code(rc, "cannot read a batch field", NULL);
        }
        PyObject *fo = field_new(self, &f);
        if (!fo || PyDict_SetItemString(d, f.name ? f.name : "", fo) < 0) {
            Py_XDECREF(fo);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(fo);
    }
    return d;
}

static PyObject *Batch_get_len(BatchObject *self, void *u) { return PyLong_FromUnsignedLong(self->len); }
static PyObject *Batch_get_epoch(BatchObject *self, void *u) { return PyLong_FromUnsignedLongLong(self->epoch); }
static PyObject *Batch_get_index(BatchObject *self, void *u) { return PyLong_FromUnsignedLongLong(self->index); }
static PyObject *Batch_get_checksum(BatchObject *self, void *u) { return PyLong_FromUnsignedLongLong(self->checksum); }

static PyMethodDef Batch_methods[] = {
    {"fields", (PyCFunction)Batch_fields, METH_NOARGS, "dict name -> Field (zero-copy views)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Batch_getset[] = {
    {"size", (getter)Batch_get_len, NULL, "Samples in this batch.", NULL},
    {"epoch", (getter)Batch_get_epoch, NULL, "Epoch of this batch.", NULL},
    {"index", (getter)Batch_get_index, NULL, "Batch number within the epoch.", NULL},
    {"checksum", (getter)Batch_get_checksum, NULL, "Hash of the samples (checksum=True), else 0.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice._sluice._Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch slot held by Python; released when the last view dies.",
    .tp_methods = Batch_methods,
    .tp_getset = Batch_getset,
};

/* ---- Field: buffer protocol and DLPack ------------------------------------ */
static void Field_dealloc(FieldObject *self) {
    Py_CLEAR(self->batch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The struct-module format and DLPack type of each dtype. */
static const struct {
    int dtype;
    const char *format;
    uint8_t dl_code, bits;
} dtypes[] = {
    {SL_DTYPE_UINT8, "B", kDLUInt, 8},     {SL_DTYPE_INT8, "b", kDLInt, 8},
    {SL_DTYPE_BOOL, "?", kDLBool, 8},      {SL_DTYPE_INT16, "h", kDLInt, 16},
    {SL_DTYPE_UINT16, "H", kDLUInt, 16},   {SL_DTYPE_FLOAT16, "e", kDLFloat, 16},
    {SL_DTYPE_INT32, "i", kDLInt, 32},     {SL_DTYPE_UINT32, "I", kDLUInt, 32},
    {SL_DTYPE_FLOAT32, "f", kDLFloat, 32}, {SL_DTYPE_INT64, "q", kDLInt, 64},
    {SL_DTYPE_UINT64, "Q", kDLUInt, 64},   {SL_DTYPE_FLOAT64, "d", kDLFloat, 64},
};

static int dtype_entry(int dtype) {
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
        if (dtypes[i].dtype == dtype) return (int)i;
    return -1;
}

static const char *field_format(int dtype, Py_ssize_t *itemsize) {
    int e = dtype_entry(dtype);
    *itemsize = e < 0 ? 0 : dtypes[e].bits / 8;
    return e < 0 ? NULL : dtypes[e].format;
}

static int field_is_c_contiguous(const FieldObject *self, Py_ssize_t itemsize) {
    Py_ssize_t expect = itemsize;
    for (int i = self->f.ndim - 1; i >= 0; i--) {
        if (self->shape[i] > 1 && self->strides[i] != expect) return 0;
        expect *= self->shape[i];
    }
    return 1;
}

/* Writable views: the batch belongs to the consumer until it is released,
 * so in-place work on it (normalising, say) is allowed. */
static int Field_getbuffer(FieldObject *self, Py_buffer *view, int flags) {
    if (self->f.device_type != kDLCPU) {
        PyErr_Format(PyExc_BufferError,
                     "field '%s' lives in GPU memory (decode='gpu'): take it with DLPack (torch.from_dlpack), "
                     "not as a host buffer", self->name);
        return -1;
    }
    Py_ssize_t itemsize;
    const char *fmt = field_format(self->f.dtype, &itemsize);
    if (!fmt) {
        PyErr_Format(PyExc_BufferError, "field '%s' has an unknown dtype %d", self->name, self->f.dtype);
        return -1;
    }
    int contiguous = field_is_c_contiguous(self, itemsize);
    if (!(flags & PyBUF_STRIDES) && !contiguous) {
        PyErr_SetString(PyExc_BufferError, "field is not C-contiguous: ask for a strided buffer");
        return -1;
    }
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && self->f.ndim > 1) {
        PyErr_SetString(PyExc_BufferError, "field is C-ordered, not Fortran-ordered");
        return -1;
    }
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !contiguous) {
        PyErr_SetString(PyExc_BufferError, "field is not C-contiguous");
        return -1;
    }
    view->buf = self->f.data;
    view->obj = Py_NewRef((PyObject *)self);
    view->len = (Py_ssize_t)self->f.nbytes;
    view->readonly = 0;
    view->itemsize = itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
    view->ndim = self->f.ndim;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs Field_as_buffer = {(getbufferproc)Field_getbuffer, NULL};

/* Everything one exported DLPack tensor needs; freed by its deleter. */
typedef struct {
    union {
        DLManagedTensor classic;
        DLManagedTensorVersioned versioned;
    } u;               /* first: the deleter gets a pointer to it */
    int64_t shape[SL_MAX_DIMS], strides[SL_MAX_DIMS];
    PyObject *owner;   /* the Field: keeps the slot alive */
} dl_holder;

static void dl_holder_free(dl_holder *h) {
    if (!h) return;
    if (!Py_IsInitialized()) return; /* interpreter gone: leak rather than crash */
    /* Consumers may call the deleter from any thread, without the GIL. */
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(h->owner);
    PyMem_RawFree(h);
    PyGILState_Release(g);
}

static void dl_deleter_classic(DLManagedTensor *m) { dl_holder_free((dl_holder *)(void *)m); }
static void dl_deleter_versioned(DLManagedTensorVersioned *m) { dl_holder_free((dl_holder *)(void *)m); }

static void capsule_dtor_classic(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "used_dltensor")) return; /* a consumer owns it */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
    else PyErr_WriteUnraisable(cap);
    PyErr_Restore(t, v, tb);
}

static void capsule_dtor_versioned(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "used_dltensor_versioned")) return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
    else PyErr_WriteUnraisable(cap);
    PyErr_Restore(t, v, tb);
}

static PyObject *Field_dlpack(FieldObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", kwlist, &stream, &max_version, &dl_device,
                                     &copy))
        return NULL;
    int on_cuda = self->f.device_type == SL_DEVICE_CUDA;
    if (stream != Py_None && !on_cuda) {
        int overflow = 0;
        long v = PyLong_Check(stream) ? PyLong_AsLongAndOverflow(stream, &overflow) : 0;
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (!PyLong_Check(stream) || overflow || v != -1) {
            PyErr_SetString(PyExc_BufferError, "__dlpack__: a CPU tensor takes stream=None (or -1)");
            return NULL;
        }
    } /* device memory: complete when the batch was delivered, readable from any stream */
    if (dl_device != Py_None) {
        int type = 0, id = 0;
        if (!PyTuple_Check(dl_device) || PyTuple_GET_SIZE(dl_device) != 2) {
            PyErr_Format(PyExc_TypeError, "__dlpack__: dl_device must be a (device_type, device_id) tuple, got %R",
                         dl_device);
            return NULL;
        }
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id)) return NULL;
        if (type != self->f.device_type || id != self->f.device_id) {
            PyErr_Format(PyExc_BufferError, "__dlpack__: this field lives on device (%d, %d), not (%d, %d)",
                         self->f.device_type, self->f.device_id, type, id);
            return NULL;
        }
    }
    if (copy != Py_None && PyObject_IsTrue(copy) == 1) {
        PyErr_SetString(PyExc_BufferError,
                        "__dlpack__: sluice fields are zero-copy views; copy=True is not supported");
        return NULL;
    }
    int versioned = 0;
    if (max_version != Py_None) {
        long major = 0, minor = 0;
        if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2) {
            PyErr_Format(PyExc_TypeError, "__dlpack__: max_version must be a (major, minor) tuple of ints, got %R",
                         max_version);
            return NULL;
        }
        if (!PyArg_ParseTuple(max_version, "ll", &major, &minor)) return NULL;
        versioned = major >= 1;
    }
    int e = dtype_entry(self->f.dtype);
    if (e < 0) {
        PyErr_Format(PyExc_BufferError, "field '%s' has an unknown dtype %d", self->name, self->f.dtype);
        return NULL;
    }
    uint8_t code = dtypes[e].dl_code, bits = dtypes[e].bits;
    dl_holder *h = PyMem_RawCalloc(1, sizeof *h);
    if (!h) return PyErr_NoMemory();
    int64_t itemsize = bits / 8;
    for (int i = 0; i < self->f.ndim; i++) {
        h->shape[i] = self->f.shape[i];
        h->strides[i] = self->f.strides[i] / itemsize;
    }
    DLTensor *t = versioned ? &h->u.versioned.dl_tensor : &h->u.classic.dl_tensor;
    t->data = self->f.data;
    t->device.device_type = self->f.device_type; /* SL_DEVICE_* are DLPack's codes */
    t->device.device_id = self->f.device_id;
    t->ndim = self->f.ndim;
    t->dtype.code = code;
    t->dtype.bits = bits;
    t->dtype.lanes = 1;
    t->shape = h->shape;
    t->strides = h->strides;
    t->byte_offset = 0;
    h->owner = Py_NewRef((PyObject *)self);
    PyObject *cap;
    if (versioned) {
        h->u.versioned.version.major = 1;
        h->u.versioned.version.minor = 0;
        h->u.versioned.manager_ctx = h;
        h->u.versioned.deleter = dl_deleter_versioned;
        h->u.versioned.flags = 0;
        cap = PyCapsule_New(&h->u.versioned, "dltensor_versioned", capsule_dtor_versioned);
    } else {
        h->u.classic.manager_ctx = h;
        h->u.classic.deleter = dl_deleter_classic;
        cap = PyCapsule_New(&h->u.classic, "dltensor", capsule_dtor_classic);
    }
    if (!cap) {
        Py_DECREF(h->owner);
        PyMem_RawFree(h);
        return NULL;
    }
    return cap;
}

static PyObject *Field_dlpack_device(FieldObject *self, PyObject *unused) {
    return Py_BuildValue("(ii)", self->f.device_type, self->f.device_id);
}

static PyObject *Field_get_shape(FieldObject *self, void *u) {
    PyObject *t = PyTuple_New(self->f.ndim);
    if (!t) return NULL;
    for (int i = 0; i < self->f.ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(self->shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *Field_get_strides(FieldObject *self, void *u) {
    PyObject *t = PyTuple_New(self->f.ndim);
    if (!t) return NULL;
    for (int i = 0; i < self->f.ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(self->strides[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *Field_get_dtype(FieldObject *self, void *u) { return PyUnicode_FromString(sl_dtype_name(self->f.dtype)); }

static PyObject *Field_get_name(FieldObject *self, void *u) { return PyUnicode_FromString(self->name); }
static PyObject *Field_get_kind(FieldObject *self, void *u) {
    static const char *const names[] = {"?", "image", "array", "sequence", "video", "label", "target", "index", "length"};
    int k = self->f.kind;
    return PyUnicode_FromString(k > 0 && k < (int)(sizeof names / sizeof *names) ? names[k] : "?");
}
static PyObject *Field_get_nbytes(FieldObject *self, void *u) { return PyLong_FromUnsignedLongLong(self->f.nbytes); }
static PyObject *Field_get_ndim(FieldObject *self, void *u) { return PyLong_FromLong(self->f.ndim); }
static PyObject *Field_get_ptr(FieldObject *self, void *u) {
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->f.data);
}
static PyObject *Field_get_batch(FieldObject *self, void *u) { return Py_NewRef((PyObject *)self->batch); }
static PyObject *Field_get_device(FieldObject *self, void *u) {
    if (self->f.device_type == SL_DEVICE_CUDA) return PyUnicode_FromFormat("cuda:%d", self->f.device_id);
    return PyUnicode_FromString("cpu");
}

static Py_ssize_t Field_length(FieldObject *self) { return self->f.ndim > 0 ? self->shape[0] : 0; }

static PyObject *Field_repr(FieldObject *self) {
    PyObject *shape = Field_get_shape(self, NULL);
    PyObject *dtype = Field_get_dtype(self, NULL);
    PyObject *r = NULL;
    if (shape && dtype)
        r = PyUnicode_FromFormat("<sluice.Field '%s' %U shape=%R>", self->name, dtype, shape);
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    return r;
}

static PyMethodDef Field_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))Field_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule."},
    {"__dlpack_device__", (PyCFunction)Field_dlpack_device, METH_NOARGS,
     "(kDLCPU, 0), or (kDLCUDA, device) for a field the GPU decoded into device memory"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Field_getset[] = {
    {"name", (getter)Field_get_name, NULL, "Field name.", NULL},
    {"kind", (getter)Field_get_kind, NULL, "The schema kind it comes from: image, array, sequence, video, label, "
     "target, index, length.", NULL},
    {"shape", (getter)Field_get_shape, NULL, "Shape tuple.", NULL},
    {"strides", (getter)Field_get_strides, NULL, "Strides in bytes.", NULL},
    {"dtype", (getter)Field_get_dtype, NULL, "'uint8', 'int64' or 'float32'.", NULL},
    {"ndim", (getter)Field_get_ndim, NULL, "Number of dimensions.", NULL},
    {"nbytes", (getter)Field_get_nbytes, NULL, "Bytes spanned.", NULL},
    {"ptr", (getter)Field_get_ptr, NULL, "Address of the first element (inside the slot).", NULL},
    {"batch", (getter)Field_get_batch, NULL, "The _Batch this field views.", NULL},
    {"device", (getter)Field_get_device, NULL, "'cpu', or 'cuda:N' for device memory (GPU decode).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Field_as_sequence = {.sq_length = (lenfunc)Field_length};

static PyTypeObject FieldType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice.Field",
    .tp_basicsize = sizeof(FieldObject),
    .tp_dealloc = (destructor)Field_dealloc,
    .tp_repr = (reprfunc)Field_repr,
    .tp_as_sequence = &Field_as_sequence,
    .tp_as_buffer = &Field_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zero-copy view of one field of a batch slot (buffer protocol and DLPack).",
    .tp_methods = Field_methods,
    .tp_getset = Field_getset,
};

/* ---- module functions ----------------------------------------------------- */
static PyObject *mod_version(PyObject *m, PyObject *unused) { return PyUnicode_FromString(sl_version()); }
static PyObject *mod_build_info(PyObject *m, PyObject *unused) { return PyUnicode_FromString(sl_build_info()); }

static PyObject *mod_strerror(PyObject *m, PyObject *arg) {
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(sl_strerror(code));
}

static PyObject *mod_code_name(PyObject *m, PyObject *arg) {
    int code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(code_name(code));
}

static PyObject *mod_mem_categories(PyObject *m, PyObject *unused) {
    int n = sl_mem_category_count();
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int c = 0; c < n; c++) {
        PyObject *s = PyUnicode_FromString(sl_mem_category_name(c));
        if (!s) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, c, s);
    }
    return l;
}

static PyObject *mod_parse_size(PyObject *m, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "parse_size expects a str like '512M', got %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) return NULL;
    uint64_t v;
    char why[256];
    int rc = sl_parse_size_msg(s, &v, why, sizeof why);
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *mod_probe_image(PyObject *m, PyObject *arg) {
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    sl_image_info info;
    char err[256] = "";
    int rc = sl_image_probe(buf.buf, (size_t)buf.len, &info);
    if (rc < 0) { /* the same probe, for its reason */
        sl_decode_opts o;
        sl_decode_opts_init(&o);
        sl_image_check(buf.buf, (size_t)buf.len, &o, NULL, NULL, NULL, err, sizeof err);
    }
    PyBuffer_Release(&buf);
    if (rc < 0) return raise_code(rc, "cannot probe the image", err);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    const char *fmt = info.format == SL_FORMAT_JPEG   ? "jpeg"
                      : info.format == SL_FORMAT_PNG  ? "png"
                      : info.format == SL_FORMAT_WEBP ? "webp"
                                                      : "unknown";
    if (PUT_U64(d, "width", info.width) < 0 || PUT_U64(d, "height", info.height) < 0 ||
        PUT_U64(d, "channels", info.channels) < 0 || PUT_S(d, "format", fmt) < 0 ||
        dict_put(d, "progressive", PyBool_FromLong(info.progressive)) < 0 ||
        dict_put(d, "orientation", PyLong_FromLong(info.orientation)) < 0 ||
        dict_put(d, "bit_depth", PyLong_FromLong(info.bit_depth)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* _decode_image(data, preset, size, seed, epoch, index, flags, max_pixels,
 * max_bytes, recipe, max_scans, crop_group) -> (bytearray, shape). preset -1:
 * full image, HWC; else CHW. max_pixels / max_bytes None: the library
 * defaults; recipe: a dict (recipe_from_dict); max_scans 0: the default;
 * crop_group None: "image". */
static PyObject *mod_decode_image(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"data", "preset", "size", "seed", "epoch", "index", "flags",
                             "max_pixels", "max_bytes", "recipe", "max_scans", "crop_group", NULL};
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    sl_image_recipe r;
    o.recipe = &r;
    Py_buffer buf;
    int preset = SL_TRANSFORM_NONE;
    PyObject *max_pixels = Py_None, *max_bytes = Py_None, *recipe = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|iO&O&O&O&O&OOOO&z", kwlist, &buf, &preset, conv_u32,
                                     &o.size, conv_u64, &o.seed, conv_u64, &o.epoch, conv_u64,
                                     &o.index, conv_u32, &o.flags, &max_pixels, &max_bytes, &recipe,
                                     conv_u32, &o.max_scans, &o.crop_group))
        return NULL;
    o.preset = preset;
    if ((max_pixels != Py_None && !conv_u64(max_pixels, &o.max_pixels)) ||
        (max_bytes != Py_None && !conv_u64(max_bytes, &o.max_bytes)) || recipe_from_dict(recipe, &r) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    uint32_t w = 0, h = 0, c = 0;
    char err[256] = "";
    int rc = sl_image_check(buf.buf, (size_t)buf.len, &o, &w, &h, &c, err, sizeof err);
    if (rc < 0) {
        /* decode once more for the reason (it stops where the size did) */
        sl_image_decode(buf.buf, (size_t)buf.len, &o, NULL, 0, err, sizeof err);
        PyBuffer_Release(&buf);
        return raise_code(rc, "cannot decode the image", err);
    }
    uint64_t n = (uint64_t)w * h; /* both < 2^32: fits */
    if (n > (uint64_t)PY_SSIZE_T_MAX / (c ? c : 1)) {
        PyBuffer_Release(&buf);
        return raise_code(SL_EOVERFLOW, "cannot decode the image", "output too large");
    }
    n *= c;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!out) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = sl_image_decode(buf.buf, (size_t)buf.len, &o, PyByteArray_AS_STRING(out), (size_t)n, err, sizeof err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc < 0) {
        Py_DECREF(out);
        return raise_code(rc, "cannot decode the image", err);
    }
    if (preset == SL_TRANSFORM_NONE)
        return Py_BuildValue("(N(III))", out, h, w, c);
    return Py_BuildValue("(N(III))", out, c, h, w);
}

static PyObject *mod_train_crop(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"width", "height", "seed", "epoch", "index", "recipe", "crop_group", NULL};
    uint32_t w, h;
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    o.preset = SL_PRESET_TRAIN;
    sl_image_recipe r;
    o.recipe = &r;
    PyObject *recipe = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O&|O&O&O&Oz", kwlist, conv_u32, &w, conv_u32, &h,
                                     conv_u64, &o.seed, conv_u64, &o.epoch, conv_u64, &o.index, &recipe,
                                     &o.crop_group))
        return NULL;
    if (recipe_from_dict(recipe, &r) < 0) return NULL;
    uint32_t box[4];
    int flip = 0;
    int rc = sl_image_recipe_crop(w, h, &o, box, &flip);
    if (rc < 0) return raise_code(rc, "train_crop failed", "bad size or recipe");
    return Py_BuildValue("(IIIIN)", box[0], box[1], box[2], box[3], PyBool_FromLong(flip));
}

/* _decode_video(path, frames, stride, fps, size, preset, short_clip, seed,
 * epoch, index, max_pixels, max_frames, max_bytes, max_seconds, codecs, crop_group)
 * -> (bytearray, (T, 3, size, size), {frames, box, flip, scaled, window}). Limits None: the
 * library defaults; codecs None: the default allow-list. */
static int video_opts_parse(PyObject *args, PyObject *kw, sl_video_opts *o, PyObject **path, PyObject **codecs) {
    static char *kwlist[] = {"path", "frames", "stride", "fps", "size", "preset", "short_clip", "seed", "epoch",
                             "index", "max_pixels", "max_frames", "max_bytes", "max_seconds", "codecs",
                             "crop_group", NULL};
    PyObject *lim[3] = {Py_None, Py_None, Py_None};
    double max_seconds = 0;
    sl_video_opts_init(o);
    *codecs = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&O&dO&iiO&O&O&OOOdOz", kwlist, PyUnicode_FSConverter, path,
                                     conv_u32, &o->frames, conv_u32, &o->stride, &o->fps, conv_u32, &o->size,
                                     &o->preset, &o->short_clip, conv_u64, &o->seed, conv_u64, &o->epoch, conv_u64,
                                     &o->index, &lim[0], &lim[1], &lim[2], &max_seconds, codecs, &o->crop_group))
        return 0;
    uint64_t *dst[3] = {&o->max_pixels, &o->max_frames, &o->max_bytes};
    for (int i = 0; i < 3; i++)
        if (lim[i] != Py_None && !conv_u64(lim[i], dst[i])) return 0;
    o->max_seconds = max_seconds;
    if (*codecs != Py_None && !(o->codecs = PyUnicode_AsUTF8(*codecs))) return 0;
    return 1;
}

static PyObject *mod_decode_video(PyObject *m, PyObject *args, PyObject *kw) {
    sl_video_opts o;
    PyObject *path = NULL, *codecs;
    if (!video_opts_parse(args, kw, &o, &path, &codecs)) {
        Py_XDECREF(path);
        return NULL;
    }
    if (o.frames == 0 || o.frames > 512 || o.size == 0 || o.size > 4096) {
        Py_DECREF(path);
        return raise_code(SL_EINVAL, "cannot decode the video", "frames 1..512 and size 1..4096");
    }
    Py_ssize_t n = (Py_ssize_t)o.frames * 3 * o.size * o.size;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n);
    int64_t idx[512];
    sl_video_clip clip = {.frame_index = idx};
    char err[256] = "";
    int rc = SL_ENOMEM;
    if (out) {
        Py_BEGIN_ALLOW_THREADS
        rc = sl_video_decode(PyBytes_AS_STRING(path), &o, PyByteArray_AS_STRING(out), (size_t)n, &clip, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(path);
    if (!out) return NULL;
    if (rc < 0) {
        Py_DECREF(out);
        return raise_code(rc, "cannot decode the video", err);
    }
    PyObject *frames = PyList_New(o.frames);
    for (uint32_t k = 0; frames && k < o.frames; k++) {
        PyObject *v = PyLong_FromLongLong(idx[k]);
        if (!v) Py_CLEAR(frames);
        else PyList_SET_ITEM(frames, k, v);
    }
    if (!frames) {
        Py_DECREF(out);
        return NULL;
    }
    return Py_BuildValue("(N(IIII){sNs(IIII)sNs(II)s(II)})", out, o.frames, 3u, o.size, o.size, "frames", frames,
                         "box", clip.box[0], clip.box[1], clip.box[2], clip.box[3], "flip",
                         PyBool_FromLong(clip.flip), "scaled", clip.scaled_w, clip.scaled_h, "window", clip.win_x,
                         clip.win_y);
}

static PyObject *mod_probe_video(PyObject *m, PyObject *args, PyObject *kw) {
    sl_video_opts o;
    PyObject *path = NULL, *codecs;
    if (!video_opts_parse(args, kw, &o, &path, &codecs)) {
        Py_XDECREF(path);
        return NULL;
    }
    sl_video_info info;
    char err[256] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_video_probe(PyBytes_AS_STRING(path), &o, &info, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (rc < 0) return raise_code(rc, "cannot read the video", err);
    return Py_BuildValue("{sIsIsisdsdsLss}", "width", info.width, "height", info.height, "rotation", info.rotation,
                         "fps", info.fps, "duration", info.duration, "frames", (long long)info.frames, "codec",
                         info.codec);
}

static PyMethodDef module_methods[] = {
    {"version", mod_version, METH_NOARGS, "sl_version(): the library actually loaded."},
    {"build_info", mod_build_info, METH_NOARGS, "sl_build_info(): 'key=value;...' of what this build decodes."},
    {"strerror", mod_strerror, METH_O, "sl_strerror(code)."},
    {"code_name", mod_code_name, METH_O, "'SL_EXXX' for a code."},
    {"mem_categories", mod_mem_categories, METH_NOARGS, "Memory category names, by index."},
    {"parse_size", mod_parse_size, METH_O, "sl_parse_size('512M') -> int."},
    {"probe_image", mod_probe_image, METH_O, "probe_image(bytes) -> dict (header only)."},
    {"_decode_image", (PyCFunction)(void (*)(void))mod_decode_image, METH_VARARGS | METH_KEYWORDS,
     "_decode_image(data, preset, size, seed, epoch, index, flags, max_pixels, max_bytes, recipe, max_scans, "
     "crop_group)"
     " -> (bytearray, shape)"},
    {"_decode_video", (PyCFunction)(void (*)(void))mod_decode_video, METH_VARARGS | METH_KEYWORDS,
     "_decode_video(path, frames, stride, fps, size, preset, short_clip, seed, epoch, index, ...) -> (bytearray, shape, frames)"},
    {"_probe_video", (PyCFunction)(void (*)(void))mod_probe_video, METH_VARARGS | METH_KEYWORDS,
     "_probe_video(path, ...limits) -> dict (headers only)"},
    {"_merge_states", mod_merge_states, METH_O, "_merge_states([state, ...] in rank order) -> merged state."},
    {"train_crop", (PyCFunction)(void (*)(void))mod_train_crop, METH_VARARGS | METH_KEYWORDS,
     "train_crop(width, height, seed=0, epoch=0, index=0, recipe=None) -> (x, y, w, h, flip)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_sluice", "CPython binding of libsluice (include/sluice.h).", -1,
    module_methods, NULL, NULL, NULL, NULL};

static int add_int(PyObject *m, const char *name, long v) { return PyModule_AddIntConstant(m, name, v); }

PyMODINIT_FUNC PyInit__sluice(void) {
    if (PyType_Ready(&LoaderType) < 0 || PyType_Ready(&BatchType) < 0 || PyType_Ready(&FieldType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    PyObject *bases = NULL;
    if (!BudgetError) {
        bases = PyTuple_Pack(2, PyExc_ValueError, PyExc_MemoryError);
        if (!bases) goto fail;
        BudgetError = PyErr_NewExceptionWithDoc(
            "sluice.BudgetError",
            "The memory budget cannot hold this (SL_EBUDGET); the message states the minimum. "
            "A ValueError (a bad budget argument) and a MemoryError.",
            bases, NULL);
        Py_CLEAR(bases);
        DecodeError = PyErr_NewExceptionWithDoc(
            "sluice.DecodeError", "An image could not be decoded: not JPEG/PNG, corrupt, over a limit, unsupported.",
            PyExc_ValueError, NULL);
        SampleError = PyErr_NewExceptionWithDoc(
            "sluice.SampleError", "on_error='raise': a sample failed and its batch was dropped.",
            PyExc_RuntimeError, NULL);
        SlotsHeldError = PyErr_NewExceptionWithDoc(
            "sluice.SlotsHeldError", "The consumer holds every batch slot (SL_EHELD).", PyExc_RuntimeError, NULL);
        ErrorRateError = PyErr_NewExceptionWithDoc(
            "sluice.ErrorRateError",
            "Too many samples failed (more than max_error_rate of those tried, or every sample of an epoch): "
            "the loader stopped; the message names the rate and the first failures (SL_EERRORS).",
            PyExc_RuntimeError, NULL);
        if (!BudgetError || !DecodeError || !SampleError || !SlotsHeldError || !ErrorRateError) goto fail;
    }
    if (PyModule_AddObjectRef(m, "_Loader", (PyObject *)&LoaderType) < 0 ||
        PyModule_AddObjectRef(m, "_Batch", (PyObject *)&BatchType) < 0 ||
        PyModule_AddObjectRef(m, "Field", (PyObject *)&FieldType) < 0 ||
        PyModule_AddObjectRef(m, "BudgetError", BudgetError) < 0 ||
        PyModule_AddObjectRef(m, "DecodeError", DecodeError) < 0 ||
        PyModule_AddObjectRef(m, "SampleError", SampleError) < 0 ||
        PyModule_AddObjectRef(m, "SlotsHeldError", SlotsHeldError) < 0 ||
        PyModule_AddObjectRef(m, "ErrorRateError", ErrorRateError) < 0 ||
        sl_py_budget_add(m, BudgetError) < 0)
        goto fail;
    if (add_int(m, "PRESET_TRAIN", SL_PRESET_TRAIN) < 0 || add_int(m, "PRESET_VAL", SL_PRESET_VAL) < 0 ||
        add_int(m, "TRANSFORM_NONE", SL_TRANSFORM_NONE) < 0 ||
        add_int(m, "ON_ERROR_SKIP", SL_ON_ERROR_SKIP) < 0 || add_int(m, "ON_ERROR_RAISE", SL_ON_ERROR_RAISE) < 0 ||
        add_int(m, "FLAG_CHECKSUM", SL_FLAG_CHECKSUM) < 0 || add_int(m, "FLAG_EXIF", SL_FLAG_EXIF) < 0 ||
        add_int(m, "FLAG_KEEP_ALPHA", SL_FLAG_KEEP_ALPHA) < 0 || add_int(m, "FLAG_FAST", SL_FLAG_FAST) < 0 ||
        add_int(m, "INTERP_BILINEAR", SL_INTERP_BILINEAR) < 0 || add_int(m, "INTERP_BICUBIC", SL_INTERP_BICUBIC) < 0 ||
        add_int(m, "STATE_VERSION", SL_STATE_VERSION) < 0 ||
        add_int(m, "CACHE_PRIVATE", SL_CACHE_PRIVATE) < 0 || add_int(m, "CACHE_NODE", SL_CACHE_NODE) < 0 ||
        add_int(m, "CACHE_ENCODED", SL_CACHE_ENCODED) < 0 || add_int(m, "CACHE_DECODED", SL_CACHE_DECODED) < 0 ||
        PyModule_AddStringConstant(m, "HEADER_VERSION", SL_VERSION_STRING) < 0)
        goto fail;
    return m;
fail:
    Py_XDECREF(bases);
    Py_DECREF(m);
    return NULL;
}

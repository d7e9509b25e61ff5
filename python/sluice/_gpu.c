/*
 * sluice._gpu: the GPU decode engine (src/gpu) from Python, for the
 * prototype GPU path, its benchmark and its tests, until the loader's
 * scheduler drives the engine itself.
 *
 *   available()                    -> (bool, reason)
 *   Engine(device=0, gpu_budget=512M, pinned_bytes=96M, max_batch=256, flags=0, hint_w=0, hint_h=0,
 *          max_pixels=0)           flags: NO_HARDWARE, NO_HYBRID, NO_ROI, LOW_PRIORITY, HIGH_PRIORITY,
 *                                  HW_PIPELINED, HW_UNPIPELINED (one of nvJPEG's hardware modes alone)
 *   Engine.submit(blobs, indices, positions, dst, stride, preset, size, seed, epoch)
 *       plans every sample with the CPU path's code (probe, limits, plan),
 *       issues the ones the GPU can take; returns [(status, reason)]:
 *       0 the GPU writes it (valid after wait()), 1 the CPU must decode it.
 *       What found no room in the device pool (SL_GPU_AGAIN) is decoded
 *       again within submit, after the call before it is done.
 *   Engine.wait()                  the batch in flight is done (GIL released)
 *   Engine.stats() -> dict,  Engine.close()
 *   stats_of_nothing() -> Engine.stats()'s dict with every field zero
 *   split(eligible, gpu_rate, cpu_rate, gpu_queued, cpu_queued, gpu_only) -> bytes
 *
 * The blobs (any buffer objects) are held from submit() until wait().
 *
 * Video clips on the GPU (src/gpu/video.c), for its tests and benchmark:
 *   video_available()              -> (bool, reason)
 *   VideoEngine(device=0, pool_bytes=256M, sessions=4, session_cap=256M, keep=True)
 *   VideoEngine.clip(path, dst, frames=16, stride=2, size=112, preset="train", seed=0, epoch=0,
 *                    index=0, wait=True) -> (status, reason)
 *       probes and plans the clip with the CPU path's code and decodes it on the GPU into
 *       device memory at dst (GIL released); status 0 done, 1 for the CPU (reason says why)
 *   VideoEngine.stats() -> dict, VideoEngine.close()
 *   video_reference(path, frames=16, ...) -> bytes   the same clip by the GPU path's
 *       arithmetic on the CPU (ops/yuv.c): what the GPU writes, byte for byte
 *   video_device_bound(path) -> int  NVDEC's device bytes for the stream at most
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/util.h"
#include "gpu/engine.h"
#include "gpu/split.h"
#include "gpu/video.h"
#include "ops/ops.h"

typedef struct {
    PyObject_HEAD
    sl__budget host;
    int host_ok;
    sl__gpu_engine *e;
    uint32_t max_batch;
    Py_buffer *views;   /* max_batch; the blobs of the batch in flight */
    uint32_t nviews;
    const uint8_t **data;
    size_t *len;
    sl__gpu_item *items;
    int *status;
    char (*reasons)[SL_GPU_REASON];
    uint32_t *which;    /* item k is sample which[k] of the submit */
    int *final;         /* by sample of the submit: its status */
    char (*final_reasons)[SL_GPU_REASON];
    uint8_t *planned;   /* by sample: went to the engine */
} EngineObject;

static void release_views(EngineObject *self) {
    for (uint32_t i = 0; i < self->nviews; i++) PyBuffer_Release(&self->views[i]);
    self->nviews = 0;
}

static void engine_close_impl(EngineObject *self) {
    if (self->e) {
        sl__gpu_engine *e = self->e;
        self->e = NULL;
        Py_BEGIN_ALLOW_THREADS
        sl__gpu_engine_free(e);
        Py_END_ALLOW_THREADS
    }
    release_views(self);
    PyMem_Free(self->views);
    PyMem_Free(self->data);
    PyMem_Free(self->len);
    PyMem_Free(self->items);
    PyMem_Free(self->status);
    PyMem_Free(self->reasons);
    PyMem_Free(self->which);
    PyMem_Free(self->final);
    PyMem_Free(self->final_reasons);
    PyMem_Free(self->planned);
    self->views = NULL, self->data = NULL, self->len = NULL, self->items = NULL;
    self->status = NULL, self->reasons = NULL, self->which = NULL;
    self->final = NULL, self->final_reasons = NULL, self->planned = NULL;
    if (self->host_ok) {
        sl__budget_fini(&self->host);
        self->host_ok = 0;
    }
}

static int engine_init(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"device", "gpu_budget", "pinned_bytes", "max_batch", "flags", "hint_w", "hint_h",
                             "max_pixels", NULL};
    int device = 0;
    unsigned long long gpu_budget = 512ull << 20, pinned = 96ull << 20;
    unsigned long long max_pixels = 0;
    unsigned max_batch = 256, flags = 0, hint_w = 0, hint_h = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iKKIIIIK", kwlist, &device, &gpu_budget, &pinned, &max_batch, &flags,
                                     &hint_w, &hint_h, &max_pixels))
        return -1;
    engine_close_impl(self);
    /* the engine's host memory: the pinned pool and its tables */
    if (sl__budget_init(&self->host, pinned + (64ull << 20))) {
        PyErr_SetString(PyExc_OSError, "sluice._gpu: budget init failed");
        return -1;
    }
    self->host_ok = 1;
    sl__gpu_config cfg = {device, gpu_budget, pinned, max_batch, hint_w, hint_h, flags, max_pixels, 0};
    char err[300] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl__gpu_engine_new(&cfg, &self->host, &self->e, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_Format(rc == SL_EUNSUPPORTED ? PyExc_RuntimeError : PyExc_ValueError, "GPU engine: %s (%s)", err,
                     sl_strerror(rc));
        engine_close_impl(self);
        return -1;
    }
    self->max_batch = max_batch;
    self->views = PyMem_Calloc(max_batch, sizeof *self->views);
    self->data = PyMem_Calloc(max_batch, sizeof *self->data);
    self->len = PyMem_Calloc(max_batch, sizeof *self->len);
    self->items = PyMem_Calloc(max_batch, sizeof *self->items);
    self->status = PyMem_Calloc(max_batch, sizeof *self->status);
    self->reasons = PyMem_Calloc(max_batch, sizeof *self->reasons);
    self->which = PyMem_Calloc(max_batch, sizeof *self->which);
    self->final = PyMem_Calloc(max_batch, sizeof *self->final);
    self->final_reasons = PyMem_Calloc(max_batch, sizeof *self->final_reasons);
    self->planned = PyMem_Calloc(max_batch, sizeof *self->planned);
    if (!self->views || !self->data || !self->len || !self->items || !self->status || !self->reasons || !self->which ||
        !self->final || !self->final_reasons || !self->planned) {
        engine_close_impl(self);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void engine_dealloc(EngineObject *self) {
    engine_close_impl(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int open_check(EngineObject *self) {
    if (!self->e) {
        PyErr_SetString(PyExc_ValueError, "the GPU engine is closed");
        return -1;
    }
    return 0;
}

/* Plan sample k of the submit with the CPU path's code; 0 (item set) or
 * a reason in why. */
static int plan_one(const uint8_t *d, size_t n, int preset, unsigned size, unsigned long long seed,
                    unsigned long long epoch, unsigned long long index, uint32_t pos, sl__gpu_item *it, char *why,
                    size_t wl) {
    sl_image_info info;
    sl__plan p;
    sl__recipe rcp;
    int rc = sl__recipe_make(preset, size, NULL, 0, 0, &rcp, why, wl);
    if (rc) return rc;
    sl__plan_params pp = {&rcp, seed, epoch, index, NULL};
    if ((rc = sl__check_bytes(n, 64ull << 20, why, wl)) || (rc = sl__probe(d, n, &info, why, wl)) ||
        (rc = sl__check_pixels(&info, 1ull << 26, why, wl)) || (rc = sl__plan_sample(&info, &pp, &p, why, wl)))
        return rc;
    return sl__gpu_item_from_plan(&p, &info, pos, it, why, wl);
}

static PyObject *engine_submit(EngineObject *self, PyObject *args) {
    PyObject *blobs, *indices, *positions;
    unsigned long long dst, stride, seed, epoch;
    int preset;
    unsigned size;
    if (!PyArg_ParseTuple(args, "OOOKKiIKK", &blobs, &indices, &positions, &dst, &stride, &preset, &size, &seed,
                          &epoch))
        return NULL;
    if (open_check(self)) return NULL;
    if (self->nviews) {
        PyErr_SetString(PyExc_RuntimeError, "a batch is in flight: wait() first");
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(blobs);
    if (n < 0) return NULL;
    if (n > self->max_batch || PySequence_Size(indices) != n || PySequence_Size(positions) != n) {
        PyErr_Format(PyExc_ValueError, "submit: %zd blobs (at most %u), with as many indices and positions", n,
                     self->max_batch);
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    uint32_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_GetItem(blobs, i), *ix = PySequence_GetItem(indices, i),
                 *ps = PySequence_GetItem(positions, i);
        unsigned long long index = ix ? PyLong_AsUnsignedLongLong(ix) : 0;
        unsigned long pos = ps ? PyLong_AsUnsignedLong(ps) : 0;
        Py_XDECREF(ix);
        Py_XDECREF(ps);
        int bad = !b || PyErr_Occurred() || PyObject_GetBuffer(b, &self->views[self->nviews], PyBUF_SIMPLE);
        Py_XDECREF(b);
        if (bad) {
            Py_DECREF(out);
            release_views(self);
            return NULL;
        }
        Py_buffer *v = &self->views[self->nviews++];
        char why[SL_GPU_REASON] = "";
        int rc = plan_one(v->buf, (size_t)v->len, preset, size, seed, epoch, index, (uint32_t)pos, &self->items[m],
                          why, sizeof why);
        PyList_SET_ITEM(out, i, Py_BuildValue("(is)", rc ? SL_GPU_CPU : SL_GPU_DONE, why));
        self->planned[i] = rc == 0;
        if (!rc) {
            self->data[m] = v->buf, self->len[m] = (size_t)v->len, self->which[m] = (uint32_t)i;
            m++;
        }
    }
    /* the call; what found no room is submitted again once it is done (which, as the engine
     * promises, moves on: the first of such a call gets room or the CPU) */
    int rc = 0;
    uint32_t left = m;
    char err[200] = "";
    Py_BEGIN_ALLOW_THREADS
    while (left && !rc) {
        rc = sl__gpu_decode_batch(self->e, left, self->data, self->len, self->items, dst, stride, self->status,
                                  self->reasons);
        uint32_t again = 0;
        for (uint32_t k = 0; k < left && !rc; k++) {
            if (self->status[k] == SL_GPU_AGAIN) {
                self->data[again] = self->data[k], self->len[again] = self->len[k];
                self->items[again] = self->items[k], self->which[again] = self->which[k];
                again++;
            } else {
                self->final[self->which[k]] = self->status[k];
                memcpy(self->final_reasons[self->which[k]], self->reasons[k], SL_GPU_REASON);
            }
        }
        if (!rc && again) rc = sl__gpu_wait(self->e, err, sizeof err);
        left = again;
    }
    Py_END_ALLOW_THREADS
    if (rc) {
        sl__gpu_wait(self->e, NULL, 0);
        release_views(self);
        Py_DECREF(out);
        PyErr_Format(PyExc_RuntimeError, "GPU decode: %s %s", sl_strerror(rc), err);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!self->planned[i]) continue;
        PyObject *t = Py_BuildValue("(is)", self->final[i], self->final_reasons[i]);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SetItem(out, i, t);
    }
    return out;
}

static PyObject *engine_wait(EngineObject *self, PyObject *unused) {
    if (open_check(self)) return NULL;
    char err[200] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl__gpu_wait(self->e, err, sizeof err);
    Py_END_ALLOW_THREADS
    release_views(self);
    if (rc) {
        PyErr_Format(PyExc_RuntimeError, "GPU engine: %s", err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Engine.stats()'s fields: name, where in sl__gpu_stats, and its type, the
 * size checked at build time (a Py_BuildValue format that had drifted one
 * unit from its arguments read an integer as a string: a segfault on the
 * GPU host). */
typedef struct stat_field {
    const char *name;
    size_t off;
    char type; /* 'K' uint64, 'L' int64, 'I' uint32, 'd' double, 's' char array */
} stat_field;
#define SIZE_IS(f, n) (0 * sizeof(char[sizeof(((sl__gpu_stats *)0)->f) == (n) ? 1 : -1]))
#define U64(f) {#f, offsetof(sl__gpu_stats, f) + SIZE_IS(f, 8), 'K'}
#define I64(f) {#f, offsetof(sl__gpu_stats, f) + SIZE_IS(f, 8), 'L'}
#define U32(f) {#f, offsetof(sl__gpu_stats, f) + SIZE_IS(f, 4), 'I'}
#define DBL(f) {#f, offsetof(sl__gpu_stats, f) + SIZE_IS(f, sizeof(double)), 'd'}
#define STR(f) {#f, offsetof(sl__gpu_stats, f) + SIZE_IS(f[0], 1), 's'}
static const stat_field stat_fields[] = {
    U64(device_pool_bytes), U64(device_used),     U64(device_peak),      U64(pinned_pool_bytes),
    U64(pinned_used),       U64(pinned_peak),     U64(staging_used),     U64(staging_peak),
    U64(pool_refusals),     U64(samples_hw),      U64(samples_hybrid),   U64(samples_cpu),
    U64(samples_again),     U64(batches),         U64(hw_calls),         U64(hw_failed_calls),
    DBL(busy_s),            DBL(rate),            DBL(gpu_hybrid_s),     DBL(gpu_hw_s),
    DBL(gpu_resize_s),      U32(hw_engines),      U32(hw_cores),         STR(device_name),
    STR(backends),          STR(kernels),         I64(host_rss_context), I64(host_rss_kernels),
    I64(host_rss_pinned),   I64(host_rss_nvjpeg), I64(host_rss_warmup),  DBL(thread_route_s),
    DBL(thread_hybrid_s),   DBL(thread_hw_s),     DBL(thread_launch_s),  DBL(thread_wait_s),
    U64(hw_calls_unpipelined), U64(hw_mode_switches), DBL(hw_us_pipelined), DBL(hw_us_unpipelined)};
#undef SIZE_IS
#undef U64
#undef I64
#undef U32
#undef DBL
#undef STR

static PyObject *stat_value(const sl__gpu_stats *s, const stat_field *f) {
    const char *p = (const char *)s + f->off;
    uint64_t u;
    int64_t i;
    uint32_t w;
    double d;
    switch (f->type) {
    case 'K': memcpy(&u, p, sizeof u); return PyLong_FromUnsignedLongLong(u);
    case 'L': memcpy(&i, p, sizeof i); return PyLong_FromLongLong(i);
    case 'I': memcpy(&w, p, sizeof w); return PyLong_FromUnsignedLong(w);
    case 'd': memcpy(&d, p, sizeof d); return PyFloat_FromDouble(d);
    default: return PyUnicode_DecodeUTF8(p, (Py_ssize_t)strnlen(p, 192), "replace");
    }
}

/* The stats as a dict, with the host budget's pinned bytes. */
static PyObject *stats_dict(const sl__gpu_stats *s, uint64_t host_pinned) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (size_t k = 0; k < sizeof stat_fields / sizeof stat_fields[0]; k++) {
        PyObject *v = stat_value(s, &stat_fields[k]);
        if (!v || PyDict_SetItemString(d, stat_fields[k].name, v)) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    PyObject *v = PyLong_FromUnsignedLongLong(host_pinned);
    if (!v || PyDict_SetItemString(d, "host_pinned_bytes", v)) {
        Py_XDECREF(v);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(v);
    return d;
}

static PyObject *engine_stats(EngineObject *self, PyObject *unused) {
    if (open_check(self)) return NULL;
    sl__gpu_stats s;
    sl__gpu_engine_stats(self->e, &s);
    return stats_dict(&s, (uint64_t)atomic_load(&self->host.cat[SL_MEM_PINNED]));
}

/* stats_of_nothing() -> Engine.stats()'s dict of an engine that did nothing
 * (every field zero): its fields and their types, where no GPU is. */
static PyObject *gpu_stats_of_nothing(PyObject *m, PyObject *unused) {
    sl__gpu_stats s;
    memset(&s, 0, sizeof s);
    return stats_dict(&s, 0);
}

static PyObject *engine_close(EngineObject *self, PyObject *unused) {
    engine_close_impl(self);
    Py_RETURN_NONE;
}

static PyMethodDef engine_methods[] = {
    {"submit", (PyCFunction)engine_submit, METH_VARARGS,
     "submit(blobs, indices, positions, dst, stride, preset, size, seed, epoch) -> [(status, reason)]"},
    {"wait", (PyCFunction)engine_wait, METH_NOARGS, "Wait for the batch in flight."},
    {"stats", (PyCFunction)engine_stats, METH_NOARGS, "Pools, sample counts per backend, measured rate."},
    {"close", (PyCFunction)engine_close, METH_NOARGS, "Release everything (waits for the batch in flight)."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sluice._gpu.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The GPU decode engine (nvJPEG + resize kernels) on one device.",
    .tp_methods = engine_methods,
    .tp_init = (initproc)engine_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *gpu_available(PyObject *m, PyObject *unused) {
    char why[256] = "";
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = sl__gpu_available(why, sizeof why);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, why);
}

static PyObject *gpu_split(PyObject *m, PyObject *args) {
    Py_buffer elig;
    double g, c, gq, cq;
    int only;
    if (!PyArg_ParseTuple(args, "y*ddddp", &elig, &g, &c, &gq, &cq, &only)) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, elig.len);
    if (out) {
        sl__split_in in = {(uint32_t)elig.len, elig.buf, g, c, gq, cq, only};
        sl__gpu_split(&in, (uint8_t *)PyBytes_AS_STRING(out));
    }
    PyBuffer_Release(&elig);
    return out;
}

/* ---- video clips ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    sl__budget host;
    int host_ok;
    sl__gpu_video *v;
} VideoEngineObject;

static void video_close_impl(VideoEngineObject *self) {
    if (self->v) {
        sl__gpu_video *v = self->v;
        self->v = NULL;
        Py_BEGIN_ALLOW_THREADS
        sl__gpu_video_free(v);
        Py_END_ALLOW_THREADS
    }
    if (self->host_ok) {
        sl__budget_fini(&self->host);
        self->host_ok = 0;
    }
}

static int video_init(VideoEngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"device", "pool_bytes", "sessions", "session_cap", "keep", NULL};
    int device = 0, keep = 1;
    unsigned long long pool = 256ull << 20, cap = 256ull << 20;
    unsigned sessions = 4;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iKIKp", kwlist, &device, &pool, &sessions, &cap, &keep)) return -1;
    video_close_impl(self);
    if (sl__budget_init(&self->host, 1ull << 30)) { /* tables and kept decoders */
        PyErr_SetString(PyExc_OSError, "sluice._gpu: budget init failed");
        return -1;
    }
    self->host_ok = 1;
    sl__gpu_video_config cfg = {device, pool, sessions, cap, keep};
    char err[300] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl__gpu_video_new(&cfg, &self->host, &self->v, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_Format(rc == SL_EUNSUPPORTED ? PyExc_RuntimeError : PyExc_ValueError, "GPU video engine: %s (%s)", err,
                     sl_strerror(rc));
        video_close_impl(self);
        return -1;
    }
    return 0;
}

static void video_dealloc(VideoEngineObject *self) {
    video_close_impl(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The clip options of the single-clip calls from Python's arguments. */
static int clip_opts(sl_video_opts *o, unsigned frames, unsigned stride, unsigned size, const char *preset,
                     unsigned long long seed, unsigned long long epoch, unsigned long long index) {
    sl_video_opts_init(o);
    o->frames = frames, o->stride = stride, o->size = size;
    o->seed = seed, o->epoch = epoch, o->index = index;
    if (!strcmp(preset, "train")) o->preset = SL_PRESET_TRAIN;
    else if (!strcmp(preset, "val")) o->preset = SL_PRESET_VAL;
    else {
        PyErr_Format(PyExc_ValueError, "preset %s: train or val", preset);
        return -1;
    }
    return 0;
}

#define CLIP_KW "path", "frames", "stride", "size", "preset", "seed", "epoch", "index"

static PyObject *video_clip(VideoEngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "dst", "frames", "stride", "size", "preset", "seed", "epoch", "index", "wait", NULL};
    const char *path, *preset = "train";
    unsigned long long dst, seed = 0, epoch = 0, index = 0;
    unsigned frames = 16, stride = 2, size = 112;
    int wait = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sK|IIIsKKKp", kwlist, &path, &dst, &frames, &stride, &size, &preset,
                                     &seed, &epoch, &index, &wait))
        return NULL;
    if (!self->v) {
        PyErr_SetString(PyExc_ValueError, "the GPU video engine is closed");
        return NULL;
    }
    sl_video_opts o;
    if (clip_opts(&o, frames, stride, size, preset, seed, epoch, index)) return NULL;
    char why[300] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    sl__sample_file f;
    sl__video_info vi;
    sl__clip_plan *p = PyMem_RawMalloc(sizeof *p);
    rc = p ? sl__clip_file(path, &o, &f, &vi, p, why, sizeof why) : SL_ENOMEM;
    if (rc == 0) {
        sl__quota q = {p->quota + (1ull << 20), 0, 0, 0}; /* + the GPU path's clip state */
        rc = sl__gpu_video_clip(self->v, &f, &vi, p, &q, NULL, wait, dst, why, sizeof why);
        close(f.fd);
    }
    PyMem_RawFree(p);
    Py_END_ALLOW_THREADS
    if (rc && rc != SL_EUNSUPPORTED && rc != SL_EIO) {
        PyErr_Format(PyExc_ValueError, "%s: %s (%s)", path, why, sl_strerror(rc));
        return NULL;
    }
    return Py_BuildValue("(is)", rc ? SL_GPU_CPU : SL_GPU_DONE, why);
}

static PyObject *video_stats(VideoEngineObject *self, PyObject *unused) {
    if (!self->v) {
        PyErr_SetString(PyExc_ValueError, "the GPU video engine is closed");
        return NULL;
    }
    sl__gpu_video_stats s;
    sl__gpu_video_stats_get(self->v, &s);
    return Py_BuildValue("{sKsKsKsKsIsKsKsKsKsKsKsKsKsKsKsKsKsKsssK}", "pool_bytes", s.pool_bytes, "pool_used", s.pool_used,
                         "pool_peak", s.pool_peak, "session_cap", s.session_cap, "sessions", s.sessions, "clips",
                         s.clips, "frames", s.frames, "to_cpu", s.to_cpu, "decoders", s.decoders, "reused", s.reused,
                         "soft_resets", s.soft_resets, "flushes", s.flushes, "waits", s.waits,
                         "wait_ns", s.wait_ns, "decode_ns", s.decode_ns, "sink_ns", s.sink_ns, "syncs", s.syncs, "surface_bytes", s.surface_bytes, "device_name", s.device_name,
                         "host_decoder_bytes", (unsigned long long)atomic_load(&self->host.cat[SL_MEM_DECODER]));
}

static PyObject *video_close(VideoEngineObject *self, PyObject *unused) {
    video_close_impl(self);
    Py_RETURN_NONE;
}

static PyMethodDef video_methods[] = {
    {"clip", (PyCFunction)(void (*)(void))video_clip, METH_VARARGS | METH_KEYWORDS,
     "clip(path, dst, frames=16, stride=2, size=112, preset='train', seed=0, epoch=0, index=0, wait=True) "
     "-> (status, reason)"},
    {"stats", (PyCFunction)video_stats, METH_NOARGS, "Pool, sessions, decoders created and kept, clips."},
    {"close", (PyCFunction)video_close, METH_NOARGS, "Release every session, decoder and the pool."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject VideoEngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sluice._gpu.VideoEngine",
    .tp_basicsize = sizeof(VideoEngineObject),
    .tp_dealloc = (destructor)video_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Video clips on the GPU (NVDEC + conversion and resize kernels) on one device.",
    .tp_methods = video_methods,
    .tp_init = (initproc)video_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *video_available(PyObject *m, PyObject *unused) {
    char why[256] = "";
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = sl__gpu_video_available(why, sizeof why);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, why);
}

static PyObject *video_reference(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {CLIP_KW, NULL};
    const char *path, *preset = "train";
    unsigned long long seed = 0, epoch = 0, index = 0;
    unsigned frames = 16, stride = 2, size = 112;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|IIIsKKK", kwlist, &path, &frames, &stride, &size, &preset, &seed,
                                     &epoch, &index))
        return NULL;
    sl_video_opts o;
    if (clip_opts(&o, frames, stride, size, preset, seed, epoch, index)) return NULL;
    char why[300] = "";
    sl__sample_file f;
    sl__video_info vi;
    sl__clip_plan *p = PyMem_RawMalloc(sizeof *p);
    int rc = p ? sl__clip_file(path, &o, &f, &vi, p, why, sizeof why) : SL_ENOMEM;
    PyObject *out = NULL;
    if (rc == 0) {
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)p->out_bytes);
        sl__quota q = {p->quota, 0, 0, 0};
        sl__clip_ref ref;
        rc = out ? sl__clip_ref_init(&ref, &vi, p, &q, (uint8_t *)PyBytes_AS_STRING(out), why, sizeof why) : SL_ENOMEM;
        if (rc == 0) {
            q.cap += ref.mem;
            Py_BEGIN_ALLOW_THREADS
            rc = sl__video_decode_into(&f, &vi, p, &q, NULL, NULL, &ref.sink, why, sizeof why);
            Py_END_ALLOW_THREADS
        }
        close(f.fd);
    }
    PyMem_RawFree(p);
    if (rc) {
        Py_XDECREF(out);
        PyErr_Format(PyExc_ValueError, "%s: %s (%s)", path, why, sl_strerror(rc));
        return NULL;
    }
    return out;
}

static PyObject *video_device_bound(PyObject *m, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    sl_video_opts o;
    sl_video_opts_init(&o);
    char why[300] = "";
    sl__sample_file f;
    sl__video_info vi;
    sl__clip_plan *p = PyMem_RawMalloc(sizeof *p);
    int rc = p ? sl__clip_file(path, &o, &f, &vi, p, why, sizeof why) : SL_ENOMEM;
    PyMem_RawFree(p);
    if (rc) {
        PyErr_Format(PyExc_ValueError, "%s: %s (%s)", path, why, sl_strerror(rc));
        return NULL;
    }
    close(f.fd);
    return PyLong_FromUnsignedLongLong(sl__video_hw_device_bound(&vi));
}

static PyMethodDef module_methods[] = {
    {"available", gpu_available, METH_NOARGS, "available() -> (bool, reason)"},
    {"video_available", video_available, METH_NOARGS, "video_available() -> (bool, reason)"},
    {"video_reference", (PyCFunction)(void (*)(void))video_reference, METH_VARARGS | METH_KEYWORDS,
     "video_reference(path, frames=16, stride=2, size=112, preset='train', seed=0, epoch=0, index=0) -> bytes"},
    {"video_device_bound", video_device_bound, METH_VARARGS, "video_device_bound(path) -> int"},
    {"split", gpu_split, METH_VARARGS, "split(eligible, gpu_rate, cpu_rate, gpu_queued, cpu_queued, gpu_only) -> bytes"},
    {"stats_of_nothing", gpu_stats_of_nothing, METH_NOARGS, "Engine.stats()'s dict with every field zero"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sluice._gpu", "The GPU decode engine.", -1,
                                    module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__gpu(void) {
    if (PyType_Ready(&EngineType) < 0 || PyType_Ready(&VideoEngineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&EngineType);
    Py_INCREF(&VideoEngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0 ||
        PyModule_AddObject(m, "VideoEngine", (PyObject *)&VideoEngineType) < 0 ||
        PyModule_AddIntConstant(m, "DONE", SL_GPU_DONE) < 0 || PyModule_AddIntConstant(m, "CPU", SL_GPU_CPU) < 0 ||
        PyModule_AddIntConstant(m, "LOW_PRIORITY", SL_GPU_LOW_PRIORITY) < 0 ||
        PyModule_AddIntConstant(m, "HIGH_PRIORITY", SL_GPU_HIGH_PRIORITY) < 0 ||
        PyModule_AddIntConstant(m, "NO_HARDWARE", SL_GPU_NO_HARDWARE) < 0 ||
        PyModule_AddIntConstant(m, "NO_HYBRID", SL_GPU_NO_HYBRID) < 0 ||
        PyModule_AddIntConstant(m, "NO_ROI", SL_GPU_NO_ROI) < 0 ||
        PyModule_AddIntConstant(m, "HW_PIPELINED", SL_GPU_HW_PIPELINED) < 0 ||
        PyModule_AddIntConstant(m, "HW_UNPIPELINED", SL_GPU_HW_UNPIPELINED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

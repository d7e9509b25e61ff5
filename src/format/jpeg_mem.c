/*
 * libjpeg's memory manager on the decode quota. See jpeg_mem.h.
 *
 * Alignment: libjpeg-turbo aligns objects to 32 bytes (ALIGN_SIZE, for its
 * SIMD code), rounds every object up to that and rows of sample arrays up
 * to twice that, and its SIMD routines may touch the rounded tail. Here
 * objects start on 32 bytes (placed inside 16-aligned arena blocks) and
 * every size is rounded up to 64, so both hold (and under ASan the tail
 * it may touch is not poisoned).
 */
#include "format/jpeg_mem.h"

#include <jerror.h>
#include <stdint.h>
#include <string.h>

#include "base/util.h"

#define ALIGN 64                         /* object sizes are rounded to this */
#define OBJ_ALIGN 32                     /* objects start on this */
#define SMALL_MAX ((size_t)2048)      /* objects up to this share chunks */
#define SMALL_CHUNK ((size_t)16 << 10)
#define MAX_OBJECT ((size_t)1000000000) /* libjpeg's MAX_ALLOC_CHUNK */

/* Each image-pool block starts with this link; its object follows, at
 * the next OBJ_ALIGN boundary. */
struct sl__jpeg_block {
    sl__jpeg_block *next;
    void *pad;
};

/* Virtual arrays: always whole in memory. */
struct jvirt_sarray_control {
    JSAMPARRAY mem;
    JDIMENSION rows, samplesperrow, maxaccess;
    struct jvirt_sarray_control *next;
};
struct jvirt_barray_control {
    JBLOCKARRAY mem;
    JDIMENSION rows, blocksperrow, maxaccess;
    struct jvirt_barray_control *next;
};

static sl__jpeg_mm *mm_of(j_common_ptr c) { return (sl__jpeg_mm *)c->mem; }

static void oom(j_common_ptr c, int which) { ERREXIT1(c, JERR_OUT_OF_MEMORY, which); }

static size_t round_up(j_common_ptr c, size_t n) {
    if (n > MAX_OBJECT) oom(c, 7);
    return n == 0 ? ALIGN : (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* A new image-pool block of n bytes (a multiple of ALIGN), zeroed if asked. */
static void *block(j_common_ptr c, size_t n, int zero) {
    sl__jpeg_mm *m = mm_of(c);
    if (!m->q) oom(c, 100); /* no decode bound: nothing may be allocated */
    size_t total = sizeof(sl__jpeg_block) + n + OBJ_ALIGN; /* n <= MAX_OBJECT: no overflow */
    sl__jpeg_block *b = zero ? sl__quota_calloc(m->q, 1, total) : sl__quota_alloc(m->q, total);
    if (!b) oom(c, 101); /* over the sample's quota */
    b->next = m->blocks;
    m->blocks = b;
    uintptr_t p = (uintptr_t)(b + 1);
    return (void *)((p + OBJ_ALIGN - 1) & ~(uintptr_t)(OBJ_ALIGN - 1));
}

/* The permanent pool is libjpeg's own: call its manager as itself. */
#define FORWARD(c, m, call)          \
    do {                             \
        (c)->mem = (m)->orig;        \
        call;                        \
        (c)->mem = &(m)->pub;        \
    } while (0)

static void check_pool(j_common_ptr c, int pool) {
    if (pool != JPOOL_IMAGE) ERREXIT1(c, JERR_BAD_POOL_ID, pool);
}

/* An object of n bytes; small ones share chunks. */
static void *alloc_object(j_common_ptr c, int pool, size_t n, int large) {
    sl__jpeg_mm *m = mm_of(c);
    void *p;
    if (pool == JPOOL_PERMANENT) {
        FORWARD(c, m, p = large ? m->orig->alloc_large(c, pool, n) : m->orig->alloc_small(c, pool, n));
        return p;
    }
    check_pool(c, pool);
    n = round_up(c, n);
    if (large || n > SMALL_MAX) return block(c, n, 0);
    if (m->small_left < n) {
        m->small = block(c, SMALL_CHUNK, 0);
        m->small_left = SMALL_CHUNK;
    }
    p = m->small;
    m->small += n;
    m->small_left -= n;
    return p;
}

static void *alloc_small(j_common_ptr c, int pool, size_t n) { return alloc_object(c, pool, n, 0); }
static void *alloc_large(j_common_ptr c, int pool, size_t n) { return alloc_object(c, pool, n, 1); }

/* rows x row_bytes in one block, and the row pointers. */
static void *alloc_rows(j_common_ptr c, int pool, size_t row_bytes, JDIMENSION rows, int zero) {
    uint64_t total;
    if (sl__mul(row_bytes, rows, &total) || total > MAX_OBJECT) oom(c, 9);
    uint8_t **ptrs = alloc_small(c, pool, (size_t)rows * sizeof(void *));
    uint8_t *data = block(c, round_up(c, (size_t)total), zero);
    for (JDIMENSION i = 0; i < rows; i++) ptrs[i] = data + (size_t)i * row_bytes;
    return ptrs;
}

static JSAMPARRAY alloc_sarray(j_common_ptr c, int pool, JDIMENSION samples, JDIMENSION rows) {
    sl__jpeg_mm *m = mm_of(c);
    if (pool == JPOOL_PERMANENT) {
        JSAMPARRAY r;
        FORWARD(c, m, r = m->orig->alloc_sarray(c, pool, samples, rows));
        return r;
    }
    check_pool(c, pool);
    return alloc_rows(c, pool, round_up(c, (size_t)samples * sizeof(JSAMPLE)), rows, 0);
}

static JBLOCKARRAY alloc_barray(j_common_ptr c, int pool, JDIMENSION blocks, JDIMENSION rows) {
    sl__jpeg_mm *m = mm_of(c);
    if (pool == JPOOL_PERMANENT) {
        JBLOCKARRAY r;
        FORWARD(c, m, r = m->orig->alloc_barray(c, pool, blocks, rows));
        return r;
    }
    check_pool(c, pool);
    if (blocks > MAX_OBJECT / sizeof(JBLOCK)) oom(c, 9);
    return alloc_rows(c, pool, (size_t)blocks * sizeof(JBLOCK), rows, 0);
}

static jvirt_sarray_ptr request_virt_sarray(j_common_ptr c, int pool, boolean pre_zero, JDIMENSION samples,
                                            JDIMENSION rows, JDIMENSION maxaccess) {
    sl__jpeg_mm *m = mm_of(c);
    check_pool(c, pool); /* virtual arrays live for one image only */
    (void)pre_zero;      /* every array is zeroed: see realize */
    struct jvirt_sarray_control *v = alloc_small(c, pool, sizeof *v);
    *v = (struct jvirt_sarray_control){NULL, rows, samples, maxaccess, m->vs};
    m->vs = v;
    return v;
}

static jvirt_barray_ptr request_virt_barray(j_common_ptr c, int pool, boolean pre_zero, JDIMENSION blocks,
                                            JDIMENSION rows, JDIMENSION maxaccess) {
    sl__jpeg_mm *m = mm_of(c);
    check_pool(c, pool);
    (void)pre_zero;
    struct jvirt_barray_control *v = alloc_small(c, pool, sizeof *v);
    *v = (struct jvirt_barray_control){NULL, rows, blocks, maxaccess, m->vb};
    m->vb = v;
    return v;
}

/* Whole arrays, zeroed whatever pre_zero says: arena memory is reused, and
 * a corrupt file that reads rows it never wrote must see zeros, not the
 * last sample's pixels (libjpeg's own manager would refuse the access). */
static void realize_virt_arrays(j_common_ptr c) {
    sl__jpeg_mm *m = mm_of(c);
    for (struct jvirt_sarray_control *v = m->vs; v; v = v->next)
        if (!v->mem) v->mem = alloc_rows(c, JPOOL_IMAGE, round_up(c, v->samplesperrow), v->rows, 1);
    for (struct jvirt_barray_control *v = m->vb; v; v = v->next) {
        if (v->blocksperrow > MAX_OBJECT / sizeof(JBLOCK)) oom(c, 9);
        if (!v->mem) v->mem = alloc_rows(c, JPOOL_IMAGE, (size_t)v->blocksperrow * sizeof(JBLOCK), v->rows, 1);
    }
}

static JSAMPARRAY access_virt_sarray(j_common_ptr c, jvirt_sarray_ptr v, JDIMENSION start, JDIMENSION n,
                                     boolean writable) {
    (void)writable;
    if (!v->mem || (uint64_t)start + n > v->rows || n > v->maxaccess) ERREXIT(c, JERR_BAD_VIRTUAL_ACCESS);
    return v->mem + start;
}

static JBLOCKARRAY access_virt_barray(j_common_ptr c, jvirt_barray_ptr v, JDIMENSION start, JDIMENSION n,
                                      boolean writable) {
    (void)writable;
    if (!v->mem || (uint64_t)start + n > v->rows || n > v->maxaccess) ERREXIT(c, JERR_BAD_VIRTUAL_ACCESS);
    return v->mem + start;
}

/* Free the image pool, newest block first (so the arena's top falls back). */
static void free_image(sl__jpeg_mm *m) {
    while (m->blocks) {
        sl__jpeg_block *b = m->blocks;
        m->blocks = b->next;
        sl__quota_free(m->q, b);
    }
    m->small = NULL;
    m->small_left = 0;
    m->vs = NULL;
    m->vb = NULL;
}

static void free_pool(j_common_ptr c, int pool) {
    sl__jpeg_mm *m = mm_of(c);
    if (pool == JPOOL_PERMANENT) {
        FORWARD(c, m, m->orig->free_pool(c, pool));
        return;
    }
    check_pool(c, pool);
    free_image(m);
}

static void self_destruct(j_common_ptr c) {
    sl__jpeg_mm *m = mm_of(c);
    if (m->q) free_image(m);
    c->mem = m->orig;
    m->orig->self_destruct(c); /* frees libjpeg's pools and manager; c->mem = NULL */
}

void sl__jpeg_mm_install(sl__jpeg_mm *m, j_common_ptr c) {
    memset(m, 0, sizeof *m);
    m->orig = c->mem;
    m->pub = *c->mem; /* max_memory_to_use, max_alloc_chunk: unused here */
    m->pub.alloc_small = alloc_small;
    m->pub.alloc_large = alloc_large;
    m->pub.alloc_sarray = alloc_sarray;
    m->pub.alloc_barray = alloc_barray;
    m->pub.request_virt_sarray = request_virt_sarray;
    m->pub.request_virt_barray = request_virt_barray;
    m->pub.realize_virt_arrays = realize_virt_arrays;
    m->pub.access_virt_sarray = access_virt_sarray;
    m->pub.access_virt_barray = access_virt_barray;
    m->pub.free_pool = free_pool;
    m->pub.self_destruct = self_destruct;
    c->mem = &m->pub;
}

void sl__jpeg_mm_bind(sl__jpeg_mm *m, j_common_ptr c, sl__quota *q) {
    c->mem = &m->pub;
    m->q = q;
}

void sl__jpeg_mm_unbind(sl__jpeg_mm *m, j_common_ptr c) {
    c->mem = &m->pub;
    if (m->q) free_image(m);
    m->q = NULL;
}

/*
 * The loader's read-ahead of remote files (readahead.h; io/readahead.c is
 * the table; docs/remote.md): the sampler knows the order, so the files of
 * the samples after the one a worker just claimed are fetched while the
 * workers decode, by as many requests as the engine keeps in flight,
 * whatever the worker count.
 *
 * Which files: the whole-file values a worker reads through the sample
 * cache's path (sl__fileval: image fields), of remote sources only; a file
 * the cache holds is not fetched. Keys are sample * nfields + field.
 *
 * How far: the claims' cursor runs ahead of the latest claim up to the
 * table's free records and its byte cap (cfg.io_readahead), never past the
 * epoch's tail (positions there are refills). A jump of the order (a new
 * epoch, set_epoch, set_state: a new generation) drops what was read ahead
 * and not taken; entries whose sample went by without being taken (a
 * refill took another) are dropped by time.
 *
 * Budget: the cap and the table are kept free of the pipeline at create
 * (sl__rahead_reserve, beside a private cache's capacity), and buffers are
 * taken with try-requests, so read-ahead never competes with a worker's
 * growth and never waits.
 */
#include "io/engine.h"
#include "io/object.h"
#include "io/url.h"
#include "pipeline/readahead.h"

#include <string.h>

#include "base/util.h"

#define RA_MAX_CAP ((uint64_t)256 << 20)

static int remote_source(const sl__conf *c) { return sl__source_io(c->src) != NULL; }

/* The fields read ahead: image fields (their files go through sl__fileval). */
static int ra_field(const sl__field *f) { return f->kind->id == SL_KIND_IMAGE && f->kind->value_type == SL__VAL_FILE; }

static uint32_t entries_for(const sl__conf *c) {
    uint32_t req = c->cfg.io_requests ? c->cfg.io_requests : SL__IO_REQUESTS;
    return SL_MIN(2 * req + 2 * c->nworkers, 2048u);
}

static uint64_t cap_for(const sl__conf *c) {
    if (c->cfg.io_readahead == SL_READAHEAD_OFF) return 0;
    if (c->cfg.io_readahead) return c->cfg.io_readahead;
    return SL_MIN(c->cfg.budget / 16, RA_MAX_CAP);
}

uint64_t sl__rahead_reserve(const sl__conf *c) {
    if (!remote_source(c) || !cap_for(c)) return 0;
    int any = 0;
    for (uint32_t i = 0; i < c->schema.nfields; i++) any |= ra_field(&c->schema.fields[i]);
    return any ? cap_for(c) + sl__ra_table_bytes(entries_for(c)) : 0;
}

int sl__rahead_create(sl__rahead *r, const sl__conf *conf, const sl__lcache *cache, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->conf = conf;
    r->cache = cache;
    if (!sl__rahead_reserve(conf)) return 0;
    for (uint32_t i = 0; i < conf->schema.nfields; i++) r->field[i] = (uint8_t)ra_field(&conf->schema.fields[i]);
    r->entries = entries_for(conf);
    int rc = sl__ra_new(conf->budget, sl__source_io(conf->src), r->entries, cap_for(conf), &r->ra);
    if (rc) sl__msg(err, errlen, "read-ahead: no room for its table (%s)", sl_strerror(rc));
    return rc;
}

void sl__rahead_destroy(sl__rahead *r, int in_child) {
    if (in_child) sl__ra_forget(r->ra);
    else sl__ra_free(r->ra);
    r->ra = NULL;
}

int sl__rahead_plan(sl__rahead *r, uint64_t gen, uint64_t epoch, uint64_t pos, uint64_t tail, const uint32_t *seq,
                    sl__rahead_todo *todo) {
    if (!r->ra) return 0;
    todo->n = 0;
    todo->jump = 0;
    if (r->gen != gen || r->epoch != epoch) {
        todo->jump = r->gen != gen; /* set_epoch / set_state: what was read ahead is another order's */
        r->gen = gen;
        r->epoch = epoch;
        r->next = pos + 1;
    }
    if (r->next <= pos) r->next = pos + 1;
    const sl__sampler *sp = &r->conf->sampler;
    todo->now = sl__sampler_time(sp, epoch, pos);
    while (r->next < tail && todo->n < SL__RAHEAD_STEP && r->next <= pos + r->entries) {
        todo->sample[todo->n] = seq[r->next];
        todo->t[todo->n] = sl__sampler_time(sp, epoch, r->next);
        todo->n++;
        r->next++;
    }
    return 1;
}

void sl__rahead_issue(sl__rahead *r, const sl__rahead_todo *todo) {
    if (!r->ra) return;
    const sl__conf *c = r->conf;
    /* what the order passed by (a margin for claims still on their way to the file) */
    uint64_t margin = (uint64_t)(2 * c->nworkers + c->B) * c->sampler.world;
    if (todo->jump) sl__ra_drop(r->ra, UINT64_MAX, 0);
    else sl__ra_drop(r->ra, todo->now > margin ? todo->now - margin : 0, UINT64_MAX);
    char name[SL__URL_MAX];
    uint32_t nf = c->schema.nfields;
    const sl__lcache *lc = r->cache;
    for (uint32_t k = 0; k < todo->n; k++) {
        uint64_t sample = todo->sample[k];
        for (uint32_t i = 0; i < nf; i++) {
            if (!r->field[i]) continue;
            const sl__field *f = &c->schema.fields[i];
            if (lc->cache && lc->mode[i] == SL__CM_FILES &&
                sl__cache_holds(lc->cache, (uint32_t)(sample * lc->keys_per_sample) + lc->key[i]))
                continue;
            const sl__obj *obj = NULL;
            uint64_t off = 0, size = 0;
            int where = sl__source_remote(c->src, sample, (uint32_t)f->col, 0, &obj, &off, &size, name, sizeof name);
            if (where <= 0) continue; /* local, or not a file */
            if (size > c->cfg.max_bytes) continue; /* the worker refuses it unread */
            int rc = sl__ra_start(r->ra, sample * nf + i, todo->t[k], where == 1 ? obj : NULL, name, off, size);
            if (rc == SL_EBUDGET) return; /* the table is full: the next claims go on from here */
        }
    }
}

void sl__rahead_field(const sl__rahead *r, sl__load *L, uint32_t i) {
    L->ra = r->ra && r->field[i] && !L->elem ? r->ra : NULL;
    L->ra_key = L->index * r->conf->schema.nfields + i;
}

void sl__rahead_stats(const sl__rahead *r, sl_stats *o) {
    sl__io_stats io;
    sl__io_stats_get(sl__source_io(r->conf->src), &io);
    o->net_bytes = io.bytes;
    o->net_requests = io.requests;
    o->net_retries = io.retries;
    o->net_hedges = io.hedges;
    o->net_timeouts = io.timeouts;
    o->net_failures = io.failures;
    o->net_inflight = io.inflight;
    o->net_inflight_peak = io.inflight_peak;
    uint64_t held = 0;
    sl__ra_stats(r->ra, &o->readahead_started, &o->readahead_hits, &o->readahead_dropped, &held);
    o->readahead_bytes = held;
}

/*
 * Fields: how one named value of a sample goes from its source value to its
 * place in a batch slot (DESIGN.md, "Samples with fields").
 *
 * A schema (schema.c) is the list of fields parsed from the JSON the user
 * gives, each of a kind. A kind (image.c, label.c, sequence.c, ...) knows
 * its options, its output — dtype and per-sample shape, fixed at create so
 * slot sizes are known before any sample is read — and how to load the
 * field for one sample: source value -> format (probe, header, limits
 * before any allocation) -> ops -> straight into the slot.
 *
 * Layering: fields use base/, source/, format/ and ops/; the pipeline
 * drives them and holds no format knowledge.
 */
#ifndef SL_FIELD_H
#define SL_FIELD_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/scratch.h"
#include "cache/cache.h"
#include "format/decode.h"
#include "io/readahead.h"
#include "ops/array.h"
#include "ops/ops.h"
#include "sluice.h"
#include "source/source.h"

#define SL__NAME_MAX 64
#define SL_REASON_MAX 116 /* sizeof(sl_error_record.reason) */
#define SL__MAX_FIELDS 32

typedef struct sl__field sl__field;
typedef struct sl__kind sl__kind;

/* A loader's counts of file reads, updated by any worker. */
typedef struct sl__fileio {
    _Atomic uint64_t hits, misses; /* cache lookups of file values */
    _Atomic uint64_t storage;      /* bytes read from storage by sl__fileval */
} sl__fileio;

struct sl__field {
    char name[SL__NAME_MAX];
    char key[2 * SL__NAME_MAX]; /* the source key(s) of its value, ';'-separated alternatives */
    const sl__kind *kind;
    int col;                    /* its column in the source (-1: none) */
    uint64_t stream;            /* randomness stream: from crop_group, else the name */
    /* output, per sample */
    int dtype;                  /* SL_DTYPE_* */
    uint32_t ndim;
    int64_t shape[SL_MAX_DIMS - 1];
    uint64_t sample_bytes;
    int has_len;                /* also emits int64 "<name>_len" ... */
    uint32_t len_count;         /* ... of len_count values a sample (1; a sequence's: its length) */
    /* kind options */
    sl__recipe recipe;          /* image: preset, output size, crop/resize options (ops.h) */
    uint32_t count;             /* target: numbers; sequence: elements (0: from the first sample) */
    sl__field *of;              /* sequence: its element (owned by the schema) */
    union {                     /* the other kinds' options (plain data: nothing to free) */
        struct {
            sl__clip_spec spec;
            sl__video_limits lim;
            char codecs[256];
        } video;
        struct {                /* array.c */
            sl__array_spec spec;    /* ops: layout, crop, center_crop, pad, points, output dtype */
            sl__array_shape out;    /* the output, fixed at resolve from the first sample */
            int raw;                /* 1: a raw file of dtype raw_dtype and shape raw_shape */
            int raw_dtype, raw_big;
            uint32_t raw_ndim;
            int64_t raw_shape[SL_ARRAY_MAX_DIMS];
            uint64_t max_bytes;     /* file size limit (0: none) */
        } array;
    } u;
};

/* Where a kind may hand a planned image instead of decoding it (the
 * loader's GPU stage, pipeline/gpustage.c). offer returns 1 when it takes
 * the sample: the field's output is then written by someone else and the
 * kind returns 0 without decoding; 0: decode here. data is valid only
 * during the call (the taker copies what it keeps). */
typedef struct sl__defer {
    int (*offer)(struct sl__defer *d, const sl__field *f, const uint8_t *data, size_t len, const sl_image_info *info,
                 const sl__plan *plan);
    /* The video kind's planned clip (probed, planned, its plan.mem
     * reserved, q its quota): 1 when it was decoded into the field's
     * device memory (the kind writes nothing), 0: decode here, or
     * SL_ESTATE (cancelled). May be NULL. */
    int (*clip)(struct sl__defer *d, const sl__field *f, const sl__sample_file *sf, const sl__video_info *info,
                const sl__clip_plan *plan, sl__quota *q);
} sl__defer;

/* One sample being loaded by one worker: what a kind's load may use. */
typedef struct sl__load {
    const sl__source *src;
    sl__scratch *scratch;       /* the worker's buffers and decoder room */
    sl__decoder *dec;           /* the worker's image decoder state */
    const _Atomic int *cancel;  /* non-zero: give up (loader closing) */
    uint64_t seed, epoch, index;
    uint64_t max_bytes, max_pixels;
    uint32_t elem;              /* element of a list value (sequences) */
    /* The sample cache (issue 12; all zero: none). A file value's key is
     * key + elem; kinds read files through sl__fileval, which looks the
     * key up at time now and offers what it reads from storage. */
    sl__cache *cache;           /* NULL: read from storage only */
    uint64_t now;               /* the sample's time in the global order (sampler.h) */
    uint32_t key;               /* this field's first key (the worker sets it per field) */
    sl__fileio *io;             /* the loader's counters (may be NULL) */
    sl__defer *defer;           /* NULL, or offered each planned image and clip (image, video kinds) */
    /* Read-ahead of remote files (pipeline/readahead.c): NULL, or the table
     * sl__fileval takes this field's file from, under ra_key. */
    sl__ra *ra;
    uint64_t ra_key;
} sl__load;

struct sl__kind {
    const char *name;           /* the schema's "kind" */
    int id;                     /* SL_KIND_* */
    int value_type;             /* SL__VAL_* it asks the source for (0: none) */
    int media;                  /* SL__MEDIA_* of its files (what a folder indexes) */
    /* Read the kind's options from the JSON object opts (a jansson json_t;
     * unknown keys are an error) and set f's output. err names the field. */
    int (*parse)(sl__field *f, void *opts, const sl_config *cfg, char *err, size_t errlen);
    /* After the source is indexed: settle what the options left to the
     * data (e.g. a sequence's length from the first sample). May be NULL. */
    int (*resolve)(sl__field *f, const sl__source *src, char *err, size_t errlen);
    /* Load f of sample ld->index into dst (f->sample_bytes bytes); *len is
     * the "<name>_len" output when f->has_len. 0 or SL_E* with a reason. */
    int (*load)(sl__load *ld, const sl__field *f, uint8_t *dst, int64_t *len, char *reason, size_t rlen);
    /* At create, for the admission check (pipeline/admit.c): the scratch
     * growth sample ld->index's value of f can ask for in any epoch, from
     * its header (*need), and what it is ("3000x2000, progressive") in
     * what. 1 when known; 0 when the header cannot be read or the sample
     * is over a limit (no budget changes its fate). May be NULL. */
    int (*admit)(sl__load *ld, const sl__field *f, uint64_t *need, char *what, size_t wlen);
    /* 1 when f's output depends on its file(s) alone, not on the seed,
     * epoch or index (no random op): cache_what="decoded" may then cache
     * the output itself. May be NULL (never). */
    int (*fixed_output)(const sl__field *f);
};

/* ---- file values through the sample cache (fileval.c) ----------------------
 * A file value of one sample (column f->col, element L->elem), whole: from
 * the cache when L->cache holds it, else from storage, offered to the cache
 * once read (whatever its decode does later: bytes that fail to decode are
 * cached and fail again the same way; a failed read caches nothing; a
 * file read ahead counts as read from storage). Open
 * it, check v->size against the limits, reserve the read buffer for
 * v->size bytes (the same with and without a hit, so the per-sample room
 * rule does not depend on the cache), read, decode, close. */
typedef struct sl__fileval {
    sl__sample_file sf;   /* storage: opened on a miss (fd -1 on a hit) */
    sl__ra_entry *ra;     /* read ahead: its bytes, released at close (NULL: none) */
    uint64_t size;        /* the value's bytes */
    int hit;              /* 1: the cache holds it, pinned until close */
    int offered;          /* read from storage and offered to the cache already */
    sl__cache_ref ref;
} sl__fileval;

/* Look the value up, or open its file. 0 (v to close), or the open's
 * failure (SL_ENOENT, SL_EIO, SL_EAGAIN) with a reason; v holds nothing
 * then. */
int sl__fileval_open(sl__load *L, const sl__field *f, sl__fileval *v, char *reason, size_t rlen);
/* The value's bytes: *data points into buf (v->size bytes, which the
 * caller reserved), or at a private cache's copy, valid until close. May
 * be called again (after the read buffer moved). 0, or a read's failure
 * (SL_EIO, SL_EAGAIN) with a reason. */
int sl__fileval_read(sl__load *L, sl__fileval *v, uint8_t *buf, const uint8_t **data, char *reason, size_t rlen);
/* Release the pin or close the file. */
void sl__fileval_close(sl__load *L, sl__fileval *v);

/* The kinds built in: image, label, target, sequence (and array, video
 * where built). NULL for an unknown name. */
const sl__kind *sl__kind_find(const char *name);
const char *sl__kind_names(void); /* "image, label, ..." for messages */

extern const sl__kind sl__kind_image, sl__kind_label, sl__kind_target, sl__kind_sequence, sl__kind_video,
    sl__kind_array;

/* The image recipe options of a field's JSON object (preset, size, scale,
 * ratio, hflip, crop_pct, resize; interpolation, exif, keep_alpha, fast,
 * max_scans where present), unset ones from cfg, resolved into *out. For
 * the kinds that crop like images (image, video). default_size: the
 * output side when the field gives no "size" (0: the loader's cfg->size,
 * and its recipe's height and width). */
int sl__recipe_opts(const sl__field *f, void *opts, const sl_config *cfg, uint32_t default_size, sl__recipe *out,
                    char *err, size_t errlen);

/* The schema: fields in the order given. */
typedef struct sl__schema {
    sl__field fields[SL__MAX_FIELDS];
    uint32_t nfields;
    sl__field elems[SL__MAX_FIELDS]; /* sequence elements */
    uint32_t nelems;
} sl__schema;

/* Parse cfg->fields (JSON), or build the default schema ("image" from the
 * sample's file with cfg's preset and size, "label") when it is NULL.
 * Errors: SL_EINVAL with a sentence naming the field and the option. */
int sl__schema_parse(const sl_config *cfg, sl__schema *sc, char *err, size_t errlen);
/* The column requests for the source, one per field that has a value;
 * sets each field's col. Returns how many (<= SL__MAX_FIELDS). */
uint32_t sl__schema_columns(sl__schema *sc, sl__colreq *req);
/* Run every kind's resolve and compute sample_bytes. */
int sl__schema_resolve(sl__schema *sc, const sl__source *src, char *err, size_t errlen);
void sl__schema_fini(sl__schema *sc);
/* Set f->sample_bytes from dtype and shape: 0 or SL_EOVERFLOW. */
int sl__field_size(sl__field *f);

#endif

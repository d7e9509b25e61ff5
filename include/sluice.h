/*
 * sluice — a budgeted, deterministic data loader for deep-learning training.
 *
 * The one public header of libsluice. Everything here is stable API; all
 * other headers are private.
 *
 * Conventions
 *  - Errors are negative SL_E* return values; sl_strerror() names them.
 *    There is no global error state. A loader that hit a fatal error is
 *    poisoned: the call that found it returns the error, later calls
 *    return SL_ESTATE, and sl_loader_poisoned() says why. What poisons a
 *    loader: the failure-rate guard (SL_EERRORS), a dataset folder removed
 *    while the loader runs (SL_ENOENT), and fork() (in the child, every
 *    loader inherited from the parent is unusable: SL_ESTATE).
 *  - Every byte the library holds is counted against the loader's budget
 *    (cfg.budget). When the budget is full, workers wait; nothing grows.
 *  - Handles are opaque. Buffers handed to the caller (batch fields) belong
 *    to the loader and stay valid until the batch is released.
 *  - Every struct crosses the API with the size its caller was built with,
 *    so a program built against an older header keeps working with a newer
 *    library (docs/abi.md has the rules): a struct the caller fills is
 *    initialised by a sized _init (sl_config_init and the like are macros
 *    passing sizeof), and it carries struct_size or the call takes its
 *    size; a call that fills a struct or an array takes the caller's size
 *    (the _sized functions; the plain names are macros passing sizeof).
 *    Fields are only appended; a field never moves.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SL_API __attribute__((visibility("default")))
#else
#define SL_API
#endif

#define SL_VERSION_MAJOR 0
#define SL_VERSION_MINOR 2
#define SL_VERSION_PATCH 0
#define SL_VERSION_STRING "0.2.0"
#define SL_VERSION_NUMBER (SL_VERSION_MAJOR * 10000 + SL_VERSION_MINOR * 100 + SL_VERSION_PATCH)

/* Runtime version, e.g. "0.2.0 (jpeg 62, png)": the library actually loaded,
 * and its SL_VERSION_NUMBER (200 for 0.2.0). A caller that may run against
 * an older library than its header asks this before using a field or a call
 * added later (each one's comment names the version that added it). */
SL_API const char *sl_version(void);
SL_API unsigned sl_version_number(void);
/* What this build decodes, as "key=value;..." with the keys version, jpeg,
 * png, webp, video, nvjpeg, remote (0.2) in that order; a part not built in says
 * "off" (nvjpeg, when built: the library found at run time, or "not
 * loadable"; remote: libcurl for s3:// and http(s):// sources).
 * E.g. "version=0.2.0;jpeg=libjpeg-turbo 2.1.5 (libjpeg API 62);png=libspng
 * 0.7.3;webp=off;video=off;nvjpeg=off;remote=off". Static, never NULL,
 * thread-safe. */
SL_API const char *sl_build_info(void);

/* ---- errors ------------------------------------------------------------ */
enum {
    SL_OK = 0,
    SL_EINVAL = -1,       /* invalid argument or configuration */
    SL_ENOMEM = -2,       /* the system refused memory */
    SL_EBUDGET = -3,      /* the budget cannot hold this, now or ever */
    SL_ENOENT = -4,       /* no such file or folder */
    SL_EIO = -5,          /* read failed */
    SL_EEMPTY = -6,       /* dataset holds no sample (or less than a batch with drop_last) */
    SL_EPARSE = -7,       /* manifest syntax error */
    SL_EFORMAT = -8,      /* file is not in a supported format */
    SL_ECORRUPT = -9,     /* decoder rejected the data (corrupt or truncated) */
    SL_ELIMIT = -10,      /* sample exceeds a configured limit (pixels, bytes) */
    SL_EUNSUPPORTED = -11,/* format variant or feature not built in */
    SL_EHELD = -12,       /* the consumer holds every batch slot */
    SL_ESAMPLE = -13,     /* on_error=raise: a sample failed (see sl_loader_errors) */
    SL_EEND = -14,        /* end of epoch (not a failure) */
    SL_ESTATE = -15,      /* wrong state: poisoned handle, mismatched saved state */
    SL_EOVERFLOW = -16,   /* size arithmetic would overflow */
    SL_ESYS = -17,        /* a system call failed (thread creation, ...) */
    SL_ETIMEDOUT = -18,   /* sl_loader_next_timeout: no batch within the time given (not a failure) */
    SL_EERRORS = -19,     /* too many samples failed (max_error_rate, or a whole epoch): the loader
                             stops (poisoned); sl_loader_poisoned says which and names the first ones */
    SL_EAGAIN = -20       /* a transient system condition (out of file descriptors, interrupted,
                             no memory for a moment): waited out and retried, never a data error */
};

/* Static string naming code (never NULL). */
SL_API const char *sl_strerror(int code);

/* ---- configuration ----------------------------------------------------- */
enum { SL_PRESET_TRAIN = 0, SL_PRESET_VAL = 1 };
enum { SL_ON_ERROR_SKIP = 0, SL_ON_ERROR_RAISE = 1 };

/* cfg.flags */
#define SL_FLAG_CHECKSUM   (1u << 0) /* hash every delivered sample (sl_batch_checksum) */
#define SL_FLAG_EXIF       (1u << 1) /* apply EXIF orientation (default: ignored, as Pillow) */
#define SL_FLAG_KEEP_ALPHA (1u << 2) /* 4 output channels, RGBA (alpha 255 where none) */
/* JPEG DCT-domain downscaling all the way to the output size: fewer
 * instructions a sample on large images (up to 2x), but no longer within
 * 1.0 of Pillow (both measured in docs/images.md). Without it, DCT scaling
 * is used only where an antialiased resize of at least 3x still follows. */
#define SL_FLAG_FAST       (1u << 3)

/* ---- image recipes ------------------------------------------------------ */
enum { SL_INTERP_BILINEAR = 0, SL_INTERP_BICUBIC = 1 }; /* Pillow-exact, antialiased */
#define SL_HFLIP_NEVER (-1.0) /* recipe.hflip: never flip (0 means the default 0.5) */

/*
 * How a decoded image becomes the output, beyond preset and size. Every
 * field's zero is the default, so a recipe fresh from sl_image_recipe_init
 * is the classic preset (torchvision RandomResizedCrop + flip 0.5;
 * Resize(size*256/224) + CenterCrop). Reached through a pointer
 * (sl_config.recipe, sl_decode_opts.recipe), so it grows on its own.
 * Checked when the loader is created (SL_EINVAL with a reason) and by
 * sl_image_output_size / sl_image_decode.
 */
typedef struct sl_image_recipe {
    size_t struct_size;         /* sizeof(sl_image_recipe) as the caller was built: set by
                                   sl_image_recipe_init (0.2) */
    uint32_t height, width;     /* output size; 0, 0: size x size. Both or neither */
    int interpolation;          /* SL_INTERP_BILINEAR (0) or SL_INTERP_BICUBIC */
    double scale_min, scale_max;/* train: area fraction range, 0 < min <= max <= 1 (0, 0: 0.08, 1) */
    double ratio_min, ratio_max;/* train: w/h range, 0 < min <= max (0, 0: 3/4, 4/3) */
    double hflip;               /* train: flip probability in (0, 1]; 0: 0.5; SL_HFLIP_NEVER: never */
    double crop_pct;            /* val: resize to floor(size / crop_pct), then centre crop
                                   (timm), 0 < crop_pct <= 1; 0: 224/256 (the classic 256 -> 224) */
    uint32_t resize;            /* val: torchvision Resize(resize) + CenterCrop; >= the output's
                                   sides; 0: from crop_pct. Not with crop_pct */
} sl_image_recipe;

/* Zero every field (the classic presets) and record the caller's
 * sizeof(sl_image_recipe). (0.2) */
SL_API void sl_image_recipe_init_sized(sl_image_recipe *r, size_t struct_size);
#define sl_image_recipe_init(r) sl_image_recipe_init_sized((r), sizeof *(r))

typedef struct sl_config {
    size_t struct_size;   /* sizeof(sl_config) as the caller was built: set by sl_config_init */
    const char *source;   /* image folder (ImageFolder layout) or manifest .csv/.jsonl */
    uint32_t batch_size;  /* samples per batch (256) */
    uint32_t size;        /* output height = width in pixels (224) */
    int preset;           /* SL_PRESET_TRAIN or SL_PRESET_VAL (train) */
    int shuffle;          /* new seeded permutation each epoch (1) */
    uint64_t seed;        /* seeds permutation and augmentation (0) */
    int drop_last;        /* drop uneven rank tail and last short batch (0) */
    uint32_t rank;        /* this process's rank (0) */
    uint32_t world_size;  /* number of ranks (1) */
    uint32_t workers;     /* decode threads, a fixed count; 0 = SL_WORKERS_AUTO: the tuner moves how
                             many take work, from 1 up to workers_max (docs/tuner.md) */
    uint32_t prefetch;    /* batch slots (in flight + held); 0 = as the budget allows, at most 4
                             (with SL_WORKERS_AUTO the tuner moves how many are in use) */
    uint32_t min_slots;   /* refuse a budget that holds fewer slots; slots past it are
                             elastic, retired under a lowered limit (1) */
    uint64_t budget;      /* bytes for everything the loader holds (512 MiB) */
    int on_error;         /* SL_ON_ERROR_SKIP or SL_ON_ERROR_RAISE (skip) */
    uint64_t max_pixels;  /* per-sample pixel limit, from the header (64 Mpx = 2^26; 0 = the default;
                             UINT64_MAX: none). The same meaning in every struct with a max_pixels */
    uint64_t max_bytes;   /* per-sample encoded-size limit (64 MiB; 0 = the default) */
    uint32_t flags;       /* SL_FLAG_* */
    uint32_t max_error_records; /* error records kept (1000); later ones only counted */
    const char *fields;   /* the schema: a JSON object of named fields (DESIGN.md,
                             docs/fields.md); NULL: "image" + "label" (+ "index") with
                             preset and size above */
    /* -- appended; zero keeps the behaviour of callers that predate them -- */
    uint64_t reserved_0_1_recipe[9]; /* where 0.1's header embedded the recipe (72 bytes): read
                                        for callers built against it, ignored for the others */
    uint32_t max_scans;     /* JPEG scans a file may have (64); more: SL_ELIMIT before decoding */
    /* Stop the loader (SL_EERRORS, poisoned) once more than this fraction
     * of the samples tried failed (judged as each is settled, in the order
     * batches are committed), checked from SL_ERROR_RATE_MIN_TRIED samples
     * on; an epoch whose first 1,000 samples all failed, or in which every
     * sample failed, stops it whatever the rate. 0.1; 1 = never; 0 = at the
     * first failure once the minimum was tried. */
    double max_error_rate;
    struct sl_budget *shared_budget; /* draw on this shared budget (sl_budget_create) instead of
                                        a private one of cfg.budget bytes, which is then ignored;
                                        the loader holds a reference (NULL: private, as before) */
    /* The sample cache (docs/cache.md). One copy for every worker; evicts
     * the entry whose next use is farthest (the sampler knows the order).
     * Delivered bytes are the same with and without it. */
    uint64_t cache;          /* bytes (values and index; 0: no cache). SL_CACHE_PRIVATE: a part of the
                                budget, which must hold it beside the pipeline's minimum; SL_CACHE_NODE:
                                the node's /dev/shm segment, outside every rank's budget */
    int cache_share;         /* SL_CACHE_PRIVATE (0) or SL_CACHE_NODE: one cache for the node's ranks */
    int cache_what;          /* SL_CACHE_ENCODED (0): file bytes; SL_CACHE_DECODED: a field's output
                                where it depends on the file alone (val images, val clips, arrays
                                without a random crop or points), file bytes for the others */
    uint32_t local_rank;       /* SL_CACHE_NODE: this rank's place among its node's ranks, which are */
    uint32_t local_world_size; /* ranks [rank - local_rank, + local_world_size); 0: from the environment
                                  (torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE), else the whole world.
                                  With SL_WORKERS_AUTO, local ranks share the node's CPUs by demand */
    /* GPU decode (docs/gpu.md). With SL_DECODE_GPU, PREFER_GPU or AUTO the
     * loader's scheduler feeds the nvJPEG engine beside the CPU workers and
     * the image field's batch lives in device memory (sl_field.device_type
     * SL_DEVICE_CUDA); sl_stats says which engine decodes and why. Zero:
     * the CPU workers only, host batches, as before. */
    int decode;              /* SL_DECODE_CPU (0), SL_DECODE_PREFER_GPU, SL_DECODE_GPU or SL_DECODE_AUTO */
    int gpu_device;          /* CUDA device ordinal (0) */
    uint64_t gpu_budget;     /* device bytes: the engine's pool + the device batch slots (0: 512 MiB) */
    uint64_t gpu_max_pixels; /* larger images go to the CPU workers (0: 2^22, docs/gpu.md) */
    uint64_t gpu_staging;    /* pinned host bytes for encoded samples queued for the GPU, in the
                                budget (SL_MEM_PINNED) and its minimum working set (0: 64 MiB,
                                at most budget / 8) */
    /* The CPU workers' priority below the process's, a nice increment
     * 0..19 (10; 19 at most in all). Under CPU contention the threads that
     * feed the GPU, the training loop and the GPU engine, run first; an
     * idle CPU still goes to the workers. */
    int worker_nice;
    /* Appended (0.2). */
    const sl_image_recipe *recipe; /* how images are cropped and resized (sl_image_recipe_init); NULL:
                                      the classic presets. Copied by create, plan and sl_source_open */
    /* An order range (0.2). The loader runs over positions [order_begin,
     * order_end) of every epoch's seeded global order (the permutation of
     * the whole dataset by seed and epoch; without shuffle, indices
     * order_begin .. order_end - 1), shared by its ranks as a whole epoch
     * would be. A bad sample is refilled from the range's own end. 0, 0:
     * the whole order. A Ray Data read task's lease (docs/engine.md). */
    uint64_t order_begin, order_end;
    /* GPU decode engines (0.2): each its own nvJPEG state, stream and GPU thread, with an equal share
     * of gpu_budget's pool, so one's host work overlaps another's GPU work (two reached 20.8k
     * images/s against one's 15-17k on an H200, docs/gpu.md). 1..4; 0: 1. Which engine decodes a
     * sample does not change its bytes. */
    uint32_t gpu_engines;
    /* SL_WORKERS_AUTO (workers = 0) (0.2): the most workers the tuner runs, its ceiling. 0: this
     * rank's share of the CPUs it may run on (the affinity mask, capped by a cgroup CPU quota,
     * divided by LOCAL_WORLD_SIZE), at most as many as the budget holds (at least 1;
     * docs/memory.md). Ignored with a fixed workers count. */
    uint32_t workers_max;
    /* Appended (0.2): remote sources, s3:// and http(s):// URLs
     * (docs/remote.md). Zero: the defaults. */
    uint32_t io_requests;    /* HTTP requests in flight at once, sized apart from the workers (64) */
    uint32_t io_timeout_ms;  /* an attempt that receives nothing this long is retried (30000) */
    uint32_t io_retries;     /* attempts after the first for 5xx, SlowDown, resets, bodies cut short (8) */
    int io_hedge;            /* 0: a duplicate request for a read much slower than the others (default);
                                -1: never */
    uint64_t io_readahead;   /* bytes of files read ahead along the order, kept free of the pipeline
                                in the budget (0: budget / 16, at most 256 MiB; SL_READAHEAD_OFF: none) */
} sl_config;
#define SL_READAHEAD_OFF UINT64_MAX
/* cfg.workers = SL_WORKERS_AUTO: the loader starts workers_max threads and
 * a tuner, driven by the consumer, decides how many of them take work and
 * how many batch slots are in use (unless cfg.prefetch fixes them), inside
 * the budget: the consumer's wait in sl_loader_next wakes a parked worker
 * (or a slot), workers idle while every slot is ready park one, and a
 * consumer thread busy on the CPU keeps a core to itself. The delivered
 * bytes never depend on it (docs/tuner.md). A count fixes the workers. */
#define SL_WORKERS_AUTO 0u
enum { SL_CACHE_PRIVATE = 0, SL_CACHE_NODE = 1 };
enum { SL_CACHE_ENCODED = 0, SL_CACHE_DECODED = 1 };
/* cfg.decode. GPU: every sample the GPU engine can take goes to it (which
 * engine decodes a sample is a rule of the sample, so the bytes repeat for
 * any worker count, timing and load); create fails (SL_EUNSUPPORTED,
 * SL_EBUDGET, with the reason and the numbers) where the GPU cannot
 * decode. PREFER_GPU: the same where the engine can run here and an image
 * field is one it decodes (baseline JPEGs, train/val presets, bilinear,
 * RGB) and the budget holds it, else the CPU workers, saying why
 * (sl_stats.decode_reason) (0.2). AUTO: the GPU engine beside the CPU
 * workers, split by their measured rates: fastest where both are busy,
 * but which engine decodes a sample depends on timing, so the pixels do
 * not repeat exactly; else the CPU workers, as PREFER_GPU. */
enum { SL_DECODE_CPU = 0, SL_DECODE_AUTO = 1, SL_DECODE_GPU = 2, SL_DECODE_PREFER_GPU = 3 };
#define SL_ERROR_RATE_MIN_TRIED 100

/* Fill cfg with the defaults above (source NULL, fields NULL, recipe NULL)
 * and record the caller's sizeof(sl_config). */
SL_API void sl_config_init_sized(sl_config *cfg, size_t struct_size);
#define sl_config_init(cfg) sl_config_init_sized((cfg), sizeof *(cfg))

/* ---- memory categories (stats) -----------------------------------------
 * Stats report memory by category in arrays of SL_MEM_CAPACITY entries, of
 * which the first mem_count are filled (sl_stats, sl_budget_info). A new
 * category takes the next number; the capacity never changes. */
enum {
    SL_MEM_INDEX = 0,   /* dataset index, sample order */
    SL_MEM_BATCHES = 1, /* batch slots */
    SL_MEM_SCRATCH = 2, /* per-worker read and pixel buffers */
    SL_MEM_DECODER = 3, /* decoder-internal memory (reserved from headers) */
    SL_MEM_OTHER = 4,   /* error records, bookkeeping */
    SL_MEM_PINNED = 5,  /* page-locked staging for GPU decode (host memory; device memory has its own gpu budget) */
    SL_MEM_CACHE = 6,   /* sample cache: values and index (a node cache's segment is not in any rank's budget) */
    SL_MEM_GPU_HOST = 7, /* host memory the GPU engine's libraries hold (CUDA driver, nvJPEG, NVRTC), measured
                            at create as the process's resident growth (docs/gpu.md) (0.2) */
    SL_MEM_IO = 8        /* remote reads (s3://, http(s)://): request slots and libcurl's state, read-ahead (0.2) */
};
#define SL_MEM_CAPACITY 16 /* (0.2) */
/* "index", "batches", ...; "unknown" for a number this library does not count. */
SL_API const char *sl_mem_category_name(int category);
/* Categories this library counts (8 in 0.2): mem_count of its stats. (0.2) */
SL_API int sl_mem_category_count(void);

/* ---- loader ------------------------------------------------------------ */
typedef struct sl_loader sl_loader;
typedef struct sl_batch sl_batch;

/*
 * Index the source, size the pipeline against the budget, start the
 * workers. On success *out owns the loader (sl_loader_destroy). On failure
 * returns a negative code and, if errbuf is not NULL, a sentence saying
 * why (for SL_EBUDGET it states the minimum budget). Workers are running
 * when this returns; they block every asynchronous signal, so signals go
 * to the caller's threads.
 *
 * Per-sample room. One sample may grow its worker's scratch (read buffer
 * and decoder memory beyond the worker's fixed baseline) by at most a
 * quarter of the budget; a sample that needs more is an SL_EBUDGET error
 * record. The rule depends only on the sample and the configuration (never
 * on the worker count or timing), and create keeps that quarter free of
 * the fixed part, so a sample within it always gets its room (it may
 * wait). Create also reads the headers of up to 32 samples spread evenly
 * over the dataset and refuses (SL_EBUDGET, with the numbers) a budget
 * under which more than a tenth of them would be refused.
 */
SL_API int sl_loader_create(const sl_config *cfg, sl_loader **out, char *errbuf, size_t errlen);

/* Stop workers and free everything. Batches not yet released become
 * invalid; releasing one afterwards is safe and does nothing (live loaders
 * are kept in a process-wide registry). In a child of fork() it frees this
 * process's copy only, touching no lock the parent's threads may have held:
 * it never blocks. NULL is ignored. */
SL_API void sl_loader_destroy(sl_loader *ld);

/*
 * Next batch in sampler order, blocking until it is ready. Returns 0 and
 * sets *out (the caller holds the batch until sl_loader_release), or:
 *   SL_EEND    the epoch is over; the next call starts epoch+1.
 *   SL_EHELD   the consumer holds every slot: release one first.
 *   SL_ESAMPLE on_error=raise and a sample of this batch failed; the batch
 *              is dropped and the next call goes on with the one after.
 *   SL_ESTATE  the loader is poisoned.
 */
SL_API int sl_loader_next(sl_loader *ld, sl_batch **out);

/*
 * sl_loader_next waiting at most timeout_ms (0: do not wait). Returns what
 * sl_loader_next returns, or SL_ETIMEDOUT when no batch was ready in time:
 * then nothing was consumed and the next call returns the batch that was
 * awaited (so a caller can wait in slices and look at signals between
 * them). Also SL_EERRORS (the failure-rate guard tripped on this batch,
 * which is not delivered) and the poisoning code of a vanished source.
 */
SL_API int sl_loader_next_timeout(sl_loader *ld, sl_batch **out, uint32_t timeout_ms);

/* Give a batch back to the pool. NULL is ignored; so is a batch of a
 * loader already destroyed, and any call in a child of fork(). */
SL_API void sl_loader_release(sl_loader *ld, sl_batch *b);

/* 0 if ld is usable; otherwise the code that poisoned it (SL_EERRORS,
 * SL_ENOENT for a vanished source, SL_ESTATE in a child of fork()) and, if
 * why is not NULL, a sentence naming the numbers. Never blocks. */
SL_API int sl_loader_poisoned(const sl_loader *ld, char *why, size_t len);

/* Restart iteration at the start of epoch. Batches held stay valid. */
SL_API int sl_loader_set_epoch(sl_loader *ld, uint64_t epoch);

/* Nominal batches per epoch for this rank, and samples per epoch for this rank. */
SL_API uint64_t sl_loader_len(const sl_loader *ld);
SL_API uint64_t sl_loader_num_samples(const sl_loader *ld);
/* Samples in the whole dataset, and number of classes (0 for manifests without classes). */
SL_API uint64_t sl_loader_dataset_size(const sl_loader *ld);

/* Path of dataset sample index written into buf (returned), or NULL (no
 * such sample, or len too small). A buffer of SL_PATH_MAX bytes holds every
 * path: a shard's path, ':' and a member name of up to 4096 bytes, or a
 * manifest's folder and a row's path of up to PATH_MAX. */
#define SL_PATH_MAX 8448 /* (0.2) */
SL_API const char *sl_loader_sample_path(const sl_loader *ld, uint64_t index, char *buf, size_t len);

/*
 * The one region all batch slots are carved from (for pinning it with
 * cudaHostRegister and the like). Fixed for the loader's lifetime. Pinned
 * pages cannot be given back, so from this call on the loader's slots are
 * fixed in the budget: slots retired under a lowered limit come back first
 * (SL_EBUDGET if the budget cannot hold them now) and none is retired
 * again. SL_ESTATE in a child of fork().
 */
SL_API int sl_loader_slot_region(const sl_loader *ld, void **base, size_t *len);

/* ---- batches ----------------------------------------------------------- */
enum {
    SL_DTYPE_UINT8 = 1, SL_DTYPE_INT64 = 2, SL_DTYPE_FLOAT32 = 3,
    SL_DTYPE_INT8 = 4, SL_DTYPE_INT16 = 5, SL_DTYPE_UINT16 = 6, SL_DTYPE_INT32 = 7,
    SL_DTYPE_UINT32 = 8, SL_DTYPE_UINT64 = 9, SL_DTYPE_FLOAT16 = 10, SL_DTYPE_FLOAT64 = 11,
    SL_DTYPE_BOOL = 12
};
/* Bytes per element of a dtype (0 for an unknown one) and its name ("float32"). */
SL_API size_t sl_dtype_size(int dtype);
SL_API const char *sl_dtype_name(int dtype);

#define SL_MAX_DIMS 8

typedef struct sl_field {
    const char *name;    /* the schema's field name; "index" (and "<f>_len") added */
    void *data;          /* inside the batch slot; valid until release */
    int dtype;           /* SL_DTYPE_* */
    int ndim;            /* 1 + the sample's dimensions */
    int64_t shape[SL_MAX_DIMS];
    int64_t strides[SL_MAX_DIMS];  /* in bytes, C order */
    uint64_t nbytes;
    int kind;            /* SL_KIND_* of the field it comes from */
    /* -- appended; filled only for callers built with it (the sized calls) -- */
    int device_type;     /* where data lives, as DLPack's DLDeviceType: SL_DEVICE_CPU (host
                            memory) or SL_DEVICE_CUDA (device memory of the GPU decode engine) */
    int device_id;       /* the CUDA device ordinal (0 for host memory) */
} sl_field;
enum { SL_DEVICE_CPU = 1, SL_DEVICE_CUDA = 2 }; /* DLPack's kDLCPU, kDLCUDA */

/* Field kinds (the schema's "kind"). */
enum {
    SL_KIND_IMAGE = 1, SL_KIND_ARRAY = 2, SL_KIND_SEQUENCE = 3, SL_KIND_VIDEO = 4,
    SL_KIND_LABEL = 5, SL_KIND_TARGET = 6, SL_KIND_INDEX = 7, SL_KIND_LENGTH = 8
};

/* Fields in schema order, then "<f>_len" for each field with "points", then
 * "index" int64 [n] (dataset sample index). Without a schema: 0 "image"
 * uint8 [n, C, height, width] (CHW, RGB; size x size unless
 * the recipe sets height and width), 1 "label" int64 [n], 2 "index". */
SL_API int sl_batch_num_fields(const sl_batch *b);
/* Fill the first out_size bytes of *out (the macros pass sizeof): a caller
 * built before sl_field grew device_type gets what it knows. A device
 * field's data is device memory, complete when the batch is delivered
 * (readable from any stream) and valid until release. */
SL_API int sl_batch_field_sized(const sl_batch *b, int i, sl_field *out, size_t out_size);
SL_API int sl_batch_find_sized(const sl_batch *b, const char *name, sl_field *out, size_t out_size);
SL_API int sl_batch_field(const sl_batch *b, int i, sl_field *out); /* the fields before device_type */
SL_API int sl_batch_find(const sl_batch *b, const char *name, sl_field *out);
#define sl_batch_field(b, i, out) sl_batch_field_sized((b), (i), (out), sizeof *(out))
#define sl_batch_find(b, name, out) sl_batch_find_sized((b), (name), (out), sizeof *(out))
SL_API uint32_t sl_batch_len(const sl_batch *b);       /* samples in this batch */
SL_API uint64_t sl_batch_epoch(const sl_batch *b);
SL_API uint64_t sl_batch_index(const sl_batch *b);     /* batch number within the epoch */
/* Hash of this batch's samples (bytes and labels, in order) when
 * SL_FLAG_CHECKSUM is set; 0 otherwise. */
SL_API uint64_t sl_batch_checksum(const sl_batch *b);

/* ---- stats ------------------------------------------------------------- */
typedef struct sl_stats {
    uint64_t samples;          /* delivered to the consumer */
    uint64_t batches;          /* delivered to the consumer */
    uint64_t errors;           /* samples that failed, in delivered batches (all epochs) */
    uint64_t epoch;            /* epoch of the next batch */
    double seconds;            /* since the first sl_loader_next */
    double samples_per_s;
    double consumer_wait_s;    /* time sl_loader_next spent waiting */
    double worker_busy_s;      /* summed over workers: reading and decoding */
    double worker_idle_s;      /* summed over workers: waiting for a free slot */
    double budget_wait_s;      /* summed over workers: waiting for budget */
    uint32_t workers;
    uint32_t slots;            /* batch slots live (carved, less those retired) */
    uint32_t slots_held;       /* held by the consumer now */
    uint32_t slots_ready;      /* decoded, waiting for the consumer */
    uint64_t budget_bytes;
    uint64_t accounted_bytes;  /* now */
    uint64_t peak_accounted_bytes;
    uint64_t fixed_bytes;      /* held for life (index, min_slots slots, worker baselines) */
    uint64_t reserved_0_1_mem[7], reserved_0_1_mem_peak[7]; /* 0.1's mem, mem_peak: the first 7
                                  categories, for callers built against 0.1 (read mem below) */
    uint64_t cache_hits, cache_misses; /* sample cache lookups */
    double index_seconds;      /* time to index the source */
    /* sample cache (appended; 0 without a cache). For a node cache these
     * are the node's: every rank reports the same segment. */
    uint64_t cache_bytes;        /* value bytes held now */
    uint64_t cache_capacity;     /* value bytes allowed now */
    uint64_t cache_evictions;
    uint64_t storage_bytes_read; /* bytes read from storage (misses and uncached reads) */
    /* Elastic batch slots. Slots past min_slots are counted but not fixed:
     * a lowered limit retires free ones (their pages go back), a grown one
     * brings them back. */
    uint32_t slots_retired;      /* retired now: slots + slots_retired = slots carved */
    uint32_t slots_min;          /* never retired (min_slots) */
    uint64_t slot_retirements;   /* slots retired since create */
    uint64_t slot_reactivations; /* slots brought back since create */
    /* cache_hits, cache_misses and storage_bytes_read above count this
     * loader's own lookups and reads (storage_bytes_read with or without a
     * cache: the files the image kind reads whole). */
    double cache_hit_rate;       /* cache_hits / (cache_hits + cache_misses), 0 before any lookup */
    uint64_t cache_entries;      /* values held now (the node's for a node cache) */
    uint32_t cache_shared;       /* 1: a node cache */
    uint32_t cache_processes;    /* processes attached to it now (1 for a private cache) */
    /* GPU decode (zero on the CPU path but decode_reason) */
    int decode;                  /* SL_DECODE_CPU or SL_DECODE_GPU: what create chose */
    char decode_reason[160];     /* why, e.g. "cfg.decode=auto: nvJPEG (libnvjpeg) not found (...)" */
    uint64_t gpu_samples;        /* image samples decoded by the GPU engine (all epochs, delivered or not) */
    uint64_t cpu_samples;        /* image samples decoded by the CPU workers, handed back ones included */
    uint64_t gpu_handed_back;    /* taken by the GPU, given back to the CPU (engine's refusals, errors) */
    uint64_t gpu_pool_bytes;     /* the engine's device pool (constant) */
    uint64_t gpu_pool_peak;      /* its high-water mark */
    uint64_t gpu_batch_bytes;    /* device memory of the batch slots (constant) */
    uint64_t gpu_pinned_bytes;   /* pinned host memory (staging + nvJPEG's), in mem[SL_MEM_PINNED] */
    uint64_t gpu_staging_peak;   /* most staging bytes queued for the GPU at once */
    double gpu_rate;             /* GPU samples/s while busy (moving average) */
    double cpu_rate;             /* CPU workers' image samples/s, all workers busy (moving average) */
    char gpu_device_name[64];
    /* Memory by category (0.2): entries [0, mem_count) of SL_MEM_CAPACITY. */
    uint32_t mem_count;
    uint64_t mem[SL_MEM_CAPACITY];      /* accounted now, by category (SL_MEM_*) */
    uint64_t mem_peak[SL_MEM_CAPACITY]; /* peak, by category */
    /* GPU decode: where the GPU's time went (0.2), seconds summed over the engines' calls: their
     * hardware decode, hybrid decode and resize phases (GPU time between stream events), and the
     * copies the workers and the committer made (CPU-decoded images up, compaction, checksums
     * back: wall time of each copy on its stream) */
    double gpu_hw_s, gpu_hybrid_s, gpu_resize_s, gpu_copy_s;
    uint64_t gpu_hw_calls, gpu_hw_failed_calls; /* batched hardware calls; those that failed (bisected) */
    uint32_t gpu_engines;                        /* engines decoding */
    /* The tuner (SL_WORKERS_AUTO, docs/tuner.md) (0.2). A pass runs from the first
     * sl_loader_next after create, an epoch's end (SL_EEND) or a reset (set_epoch, set_state)
     * to the epoch's end (or now). Without the tuner: workers_active = workers, slots_target =
     * slots. */
    uint32_t tuner;              /* 1: the tuner moves the workers (and the slots unless prefetch is set) */
    uint32_t workers_active;     /* workers taking work now; the others are parked (no CPU) */
    double workers_active_mean;  /* workers taking work over the pass, weighted by time */
    uint32_t slots_target;       /* batch slots the tuner lets be in use (filling, ready, held) */
    uint64_t tuner_decisions;    /* decisions since create; the last ones: sl_loader_tuner_log */
    double pass_seconds;         /* the pass's length so far */
    double pass_consumer_wait_s; /* of it, time sl_loader_next spent waiting */
    double pass_consumer_cpu_s;  /* the consumer's thread's CPU time between its sl_loader_next calls
                                    (CLOCK_THREAD_CPUTIME_ID; calls from one thread) */
    uint64_t pass_gpu_samples;   /* the split over the pass: image samples the GPU engine decoded, */
    uint64_t pass_cpu_samples;   /* and the CPU workers (GPU decode only) */
    /* The node's CPUs shared by demand among its ranks' tuned loaders (local ranks > 1; all 0
     * otherwise): the node's CPUs, its loaders with a demand, their demand summed and this
     * loader's (CPUs), as of the tuner's last window. */
    uint32_t node_cpus, node_loaders;
    double node_demand, demand;
    /* Remote sources (appended, 0.2; 0 for local ones): the I/O engine's
     * counts since create, indexing included, and the read-ahead's. */
    uint64_t net_bytes;          /* body bytes received (fetched over the network) */
    uint64_t net_requests;       /* HTTP requests sent (retries and hedges included) */
    uint64_t net_retries;        /* attempts repeated after a retryable failure */
    uint64_t net_hedges;         /* duplicate requests for slow reads */
    uint64_t net_timeouts;       /* attempts given up for receiving nothing (io_timeout_ms) */
    uint64_t net_failures;       /* reads that failed for good (each an error record, or create's error) */
    uint32_t net_inflight;       /* requests in flight now */
    uint32_t net_inflight_peak;
    uint64_t readahead_started;  /* files read ahead */
    uint64_t readahead_hits;     /* ... taken by a worker */
    uint64_t readahead_dropped;  /* ... dropped unread (the order jumped, or a refill took another) */
    uint64_t readahead_bytes;    /* held by read-ahead now (in mem[SL_MEM_IO]) */
    /* Of pass_consumer_wait_s (appended, 0.2), the wait for batches whose last position to finish
     * was a GPU engine's while the engines were busy (half a call's worth queued or in their calls
     * when the consumer asked; not waiting for the workers to stage samples): the wait the GPU
     * decode held up (decode gpu and prefer-gpu; 0 otherwise). */
    double pass_consumer_wait_gpu_s;
    /* Of pass_consumer_wait_s (appended, 0.2), the wait for batches whose last position to finish
     * was a CPU worker's decode, with the GPU stage on (0 otherwise): under prefer-gpu, the costly
     * images the engine does not take. What is left of the wait beside the two is for batches the
     * GPU finished last while its engines waited for the workers to stage samples. */
    double pass_consumer_wait_cpu_s;
    /* GPU decode (appended, 0.2): the GPU threads' wall time (host clock) in each step of their
     * calls, seconds summed over the engines: routing (nvJPEG parses each sample's header and says
     * which backend takes it), the hybrid backend's samples one by one, the hardware's batched
     * call, the resize kernels' launch, and the wait for the call's last GPU work. What is left
     * of a GPU thread's wall, it waited for samples to decode. */
    double gpu_thread_route_s, gpu_thread_hybrid_s, gpu_thread_hw_s, gpu_thread_launch_s, gpu_thread_wait_s;
    /* GPU decode (appended, 0.2): of gpu_hw_calls, those made without nvJPEG's pipeline, and the
     * times the engines moved their calls to the other mode, as their measure chose
     * (docs/gpu.md "The hardware's two modes") */
    uint64_t gpu_hw_calls_unpipelined, gpu_hw_mode_switches;
    /* ... and the last measure's hardware time a sample in each mode, microseconds (the slowest
     * engine's; 0 before the first measure, or where one mode is kept) */
    double gpu_hw_us_pipelined, gpu_hw_us_unpipelined;
} sl_stats;

/* Fill the first out_size bytes of *out and zero the rest past the fields
 * this library knows (callers pass sizeof: the macro). */
SL_API int sl_loader_stats_sized(const sl_loader *ld, sl_stats *out, size_t out_size);
#define sl_loader_stats(ld, out) sl_loader_stats_sized((ld), (out), sizeof *(out))

/* ---- the tuner's decisions ------------------------------------------------ */
/* cfg.workers = SL_WORKERS_AUTO: each move of the tuner, with why, in a
 * ring of the last SL_TUNER_LOG (docs/tuner.md). (0.2) */
typedef struct sl_tuner_decision {
    uint64_t seq;        /* 1 for the loader's first decision, then 2, 3, ... */
    double t;            /* seconds since the loader's first sl_loader_next */
    uint64_t batches;    /* batches delivered when it was taken */
    int what;            /* SL_TUNE_WORKERS or SL_TUNE_SLOTS: what moved */
    int why;             /* SL_TUNE_WHY_*: the rule that moved it */
    uint32_t from, to;   /* active workers or slots in use, before and after */
    char reason[168];    /* the measurements it decided on, as a sentence (NUL-terminated) */
} sl_tuner_decision;
#define SL_TUNER_LOG 16
enum { SL_TUNE_WORKERS = 1, SL_TUNE_SLOTS = 2 };
enum {
    SL_TUNE_WHY_CONSUMER_WAITED = 1, /* the consumer waited, the workers were busy: one more worker */
    SL_TUNE_WHY_SLOTS_FULL = 2,      /* a batch was ready at every call, workers idle: one parked */
    SL_TUNE_WHY_NO_FREE_SLOT = 3,    /* the consumer waited, the workers idle for want of a slot */
    SL_TUNE_WHY_READY_AHEAD = 4,     /* two batches or more were ready at every call: a slot fewer */
    SL_TUNE_WHY_CONSUMER_CPU = 5,    /* the consumer's thread kept a core busy: one worker fewer */
    SL_TUNE_WHY_NODE_SHARE = 6,      /* the node's CPUs were shared by demand among its ranks */
    SL_TUNE_WHY_GPU_HELD = 7         /* the consumer waited on the busy GPU decode, workers idle: one parked (0.2) */
};
/* "consumer_waited", "slots_full", ... for an SL_TUNE_WHY_* ("unknown"
 * past those this library knows). (0.2) */
SL_API const char *sl_tune_why_name(int why);
/* Copy the newest decisions, up to max, oldest first, into out, an array
 * of records elem_size bytes apart (the caller's sizeof: the macro).
 * Returns how many; 0 without the tuner. (0.2) */
SL_API size_t sl_loader_tuner_log_sized(const sl_loader *ld, sl_tuner_decision *out, size_t max, size_t elem_size);
#define sl_loader_tuner_log(ld, out, max) sl_loader_tuner_log_sized((ld), (out), (max), sizeof *(out))

/* ---- error records ----------------------------------------------------- */
typedef struct sl_error_record {
    uint64_t index;      /* dataset sample index */
    uint64_t epoch;
    int code;            /* SL_E* */
    char reason[116];    /* NUL-terminated */
} sl_error_record;

/* Copy up to max records starting at record first into out, an array of
 * records elem_size bytes apart (the caller's sizeof(sl_error_record): the
 * macro); returns the number copied. Records belong to delivered batches
 * only (samples of batches still in flight are not reported yet), in
 * delivery order; their number is sl_stats.errors (records beyond
 * cfg.max_error_records are counted, not kept). (0.2) */
SL_API size_t sl_loader_errors_sized(const sl_loader *ld, size_t first, sl_error_record *out, size_t max,
                                     size_t elem_size);
SL_API size_t sl_loader_errors(const sl_loader *ld, size_t first, sl_error_record *out, size_t max); /* 0.1's */
#define sl_loader_errors(ld, first, out, max) sl_loader_errors_sized((ld), (first), (out), (max), sizeof *(out))

/* The newest failure in a delivered (or dropped, SL_ESAMPLE) batch, kept
 * even when cfg.max_error_records are already kept: for saying which
 * sample a dropped batch lost. 0 and *out (out_size bytes), or SL_EEND
 * when none failed. (0.2) */
SL_API int sl_loader_last_error_sized(const sl_loader *ld, sl_error_record *out, size_t out_size);
SL_API int sl_loader_last_error(const sl_loader *ld, sl_error_record *out); /* 0.1's */
#define sl_loader_last_error(ld, out) sl_loader_last_error_sized((ld), (out), sizeof *(out))

/* ---- iteration state (resume) ------------------------------------------ */
/*
 * A state says where a loader stands in the epoch's global order (the
 * seeded permutation of the dataset: positions 0 .. dataset_size - 1).
 * The ranks of a world share a span of it: all of it, an order range, or
 * in the epoch after an elastic resume what an earlier world left:
 * [span_begin, span_end) less the gone_count positions of gone. Rank
 * `rank` of world_size takes the span's entries rank, rank + world_size,
 * ... (padded by wrapping, or cut with drop_last); of those it delivered
 * `batch` batches, refills took its share from `tail` on, and once they
 * used it up (bad samples), its first `pad` samples padded its batches.
 *
 * A state of one rank resumes that rank exactly (the same world_size,
 * rank, batch_size and flags). To resume on another number of ranks,
 * merge the states of every rank of the world (sl_state_merge): the
 * merged state names the positions none of them consumed, and any world
 * shares those. A state at the start of its span (batch 0 with nothing
 * refilled, as at every epoch's end) resumes any world too.
 */
typedef struct sl_state {
    uint64_t version;     /* SL_STATE_VERSION (2 from 0.2); a state of version 1 is read as
                             naming the whole order, whatever follows flags */
    uint64_t seed;
    uint64_t epoch;
    uint64_t batch;       /* next batch to deliver within epoch */
    uint64_t tail;        /* end of the unused part of the rank's order (refills) */
    uint64_t dataset_size;
    uint32_t rank, world_size, batch_size, flags; /* flags: 1 shuffle, 2 drop_last. A merged
                                                     state: world_size 0, batch_size, batch,
                                                     tail and rank 0, flags 1 or 0 */
    /* Appended (0.2): zeros keep 0.1's meaning (nothing padded, the whole order). */
    uint64_t pad;                  /* positions of the rank's order (from its start) that padded its
                                      batches once refills used it up (world_size > 1) */
    uint64_t span_begin, span_end; /* the epoch's span; [0, 0): the order range of the loader that
                                      resumes it (the whole order without one) */
    uint64_t gone_count;           /* positions of the span consumed by an earlier world ... */
    const uint32_t *gone;          /* ... ascending (NULL when none): memory of whoever made the
                                      state (sl_loader_get_state: the loader's, valid until it is
                                      destroyed or set_state runs twice more; sl_state_merge: the
                                      caller's gone_buf) */
} sl_state;
#define SL_STATE_VERSION 2

/* The state after the last delivered batch, into the first out_size bytes
 * of *out. A caller of 0.1's size gets its fields where the position
 * needs none of the later ones (a whole order, nothing padded), else
 * SL_EUNSUPPORTED. (0.2) */
SL_API int sl_loader_get_state_sized(const sl_loader *ld, sl_state *out, size_t out_size);
/* Resume from a state (st_size bytes): one rank's of the same world and
 * configuration (exactly there), a merged one (sl_state_merge) or one at
 * the start of its span (on any world: this loader's share of what the
 * span holds; an epoch that leaves this world nothing, drop_last, is
 * over). The seed, dataset size and shuffle must match, and the span lie
 * in this loader's order range. SL_ESTATE otherwise, and for a position no
 * loader can be at (a tail that leaves batch `batch` no sample, a batch
 * past the epoch; sl_loader_check_state says why); SL_EBUDGET when the
 * budget cannot hold the gone list's copy. Held batches stay valid. A
 * state from a newer library that sets fields this one does not know:
 * SL_EUNSUPPORTED. (0.2) */
SL_API int sl_loader_set_state_sized(sl_loader *ld, const sl_state *st, size_t st_size);
SL_API int sl_loader_get_state(const sl_loader *ld, sl_state *out); /* 0.1's */
SL_API int sl_loader_set_state(sl_loader *ld, const sl_state *st); /* 0.1's */
#define sl_loader_get_state(ld, out) sl_loader_get_state_sized((ld), (out), sizeof *(out))
#define sl_loader_set_state(ld, st) sl_loader_set_state_sized((ld), (st), sizeof *(st))
/* Would sl_loader_set_state accept st (st_size bytes)? 0, or SL_ESTATE /
 * SL_EINVAL / SL_EUNSUPPORTED with the reason in why (NUL-terminated, at
 * most len bytes). Never blocks. (0.2) */
SL_API int sl_loader_check_state_sized(const sl_loader *ld, const sl_state *st, size_t st_size, char *why,
                                       size_t len);
#define sl_loader_check_state(ld, st, why, len) sl_loader_check_state_sized((ld), (st), sizeof *(st), (why), (len))

/*
 * Merge the states of every rank of one world (states[r] rank r's, n ==
 * world_size of each), each taken after its last delivered batch of the
 * same epoch, into the state of the positions of that epoch none of them
 * consumed: every sample they delivered or found bad is left out, every
 * other one is in it once (padding, which repeats samples, leaves
 * nothing). Resumed on any world, the positions left are shared again:
 * each sample of the epoch delivered exactly once over both runs (but for
 * padding, documented). When the ranks left nothing the merged state is
 * the next epoch's start. The states and out are state_size bytes each
 * (the macro passes sizeof *out; at least 0.2's, which has the span). out
 * gets gone = gone_buf; with gone_cap too small, SL_EOVERFLOW and
 * out->gone_count the entries needed (call again). SL_ESTATE (with why)
 * when the states are not one world's at one epoch of one configuration,
 * or one is not reachable; SL_EINVAL for bad arguments. Allocates
 * nothing. (0.2)
 */
SL_API int sl_state_merge_sized(const sl_state *const *states, size_t n, sl_state *out, size_t state_size,
                                uint32_t *gone_buf, uint64_t gone_cap, char *why, size_t len);
#define sl_state_merge(states, n, out, gone_buf, gone_cap, why, len) \
    sl_state_merge_sized((states), (n), (out), sizeof *(out), (gone_buf), (gone_cap), (why), (len))

/* ---- sizing a pipeline without starting it ------------------------------ */
typedef struct sl_plan {
    uint64_t dataset_size;     /* samples in the source */
    uint64_t samples_per_rank; /* per epoch */
    uint64_t batches;          /* nominal batches per epoch */
    uint32_t workers;          /* what sl_loader_create would start for cfg */
    uint32_t slots;            /* batch slots it would carve for cfg */
    uint32_t num_fields;       /* outputs per batch (sl_batch_num_fields) */
    uint64_t sample_bytes;     /* one sample's outputs, all fields */
    uint64_t slot_bytes;       /* one batch slot, bookkeeping included */
    uint64_t worker_bytes;     /* fixed per worker: read buffer, decoder base, stack */
    uint64_t index_bytes;      /* index, sample orders, error records, tables */
    uint64_t fixed_bytes;      /* index + slots * slot + workers * worker */
    uint64_t min_budget;       /* the smallest budget create accepts for cfg */
    double index_seconds;
} sl_plan;

/*
 * Index cfg's source and size the pipeline exactly as sl_loader_create
 * would, without allocating slots or starting workers: what `sluice plan`
 * and other tools use to learn the sizing policy. Fills the first out_size
 * bytes of *out. Errors as sl_loader_create (SL_EBUDGET is not an error
 * here: min_budget says what is needed).
 */
SL_API int sl_loader_plan_sized(const sl_config *cfg, sl_plan *out, size_t out_size, char *errbuf, size_t errlen);
#define sl_loader_plan(cfg, out, errbuf, errlen) sl_loader_plan_sized((cfg), (out), sizeof *(out), (errbuf), (errlen))

/* 64-bit hash of len bytes (the one batch checksums use). */
SL_API uint64_t sl_hash64(const void *data, size_t len, uint64_t seed);

/* ---- single images (no loader) ----------------------------------------- */
enum { SL_FORMAT_UNKNOWN = 0, SL_FORMAT_JPEG = 1, SL_FORMAT_PNG = 2 };

typedef struct sl_image_info {
    uint32_t width, height;
    uint32_t channels;     /* in the file: 1 gray, 2 gray+alpha, 3, 4 (RGBA or CMYK) */
    int format;            /* SL_FORMAT_* */
    int progressive;       /* JPEG progressive or multi-scan / PNG interlaced */
    int orientation;       /* EXIF orientation 1..8 (1 when absent) */
    int bit_depth;
} sl_image_info;

/* Read the header only, into the first info_size bytes of *info.
 * SL_EFORMAT for no format this build knows. (0.2) */
SL_API int sl_image_probe_sized(const void *data, size_t len, sl_image_info *info, size_t info_size);
SL_API int sl_image_probe(const void *data, size_t len, sl_image_info *info); /* 0.1's */
#define sl_image_probe(data, len, info) sl_image_probe_sized((data), (len), (info), sizeof *(info))

enum { SL_TRANSFORM_NONE = -1 }; /* opts.preset: full decode, HWC */

typedef struct sl_decode_opts {
    size_t struct_size;    /* set by sl_decode_opts_init */
    int preset;            /* SL_PRESET_TRAIN, SL_PRESET_VAL or SL_TRANSFORM_NONE */
    uint32_t size;         /* output side for presets */
    uint64_t seed, epoch, index; /* train randomness: same as a loader's sample */
    uint64_t max_pixels, max_bytes; /* 0 = the default (2^26 pixels, 64 MiB), as in sl_config */
    uint32_t flags;        /* SL_FLAG_EXIF, SL_FLAG_KEEP_ALPHA, SL_FLAG_FAST */
    /* -- appended; zero keeps the behaviour of callers that predate them -- */
    uint64_t reserved_0_1_recipe[9]; /* as in sl_config: 0.1's embedded recipe */
    uint32_t max_scans;    /* as sl_config.max_scans (64) */
    /* Appended (0.2). */
    const sl_image_recipe *recipe; /* as sl_config.recipe (NULL: the classic presets) */
    const char *crop_group; /* train randomness of this schema field: its "crop_group", or its
                               name when it has none (NULL: "image", the field without a
                               schema). (0.2) */
} sl_decode_opts;

SL_API void sl_decode_opts_init_sized(sl_decode_opts *o, size_t struct_size);
#define sl_decode_opts_init(o) sl_decode_opts_init_sized((o), sizeof *(o))

/* Bytes sl_image_decode writes: C*height*width for presets (the recipe's
 * height and width, else size x size), C*W*H for NONE (after EXIF rotation
 * if asked). */
SL_API int sl_image_output_size(const void *data, size_t len, const sl_decode_opts *o,
                                uint32_t *width, uint32_t *height, uint32_t *channels);

/* sl_image_output_size with the reason: probe, limits and preset checked
 * from the header (nothing decoded); on failure the code and, if errbuf is
 * not NULL, a sentence with the numbers ("empty file", "image is
 * 9000x9000 = 81000000 pixels, over the max_pixels limit of ..."). */
SL_API int sl_image_check(const void *data, size_t len, const sl_decode_opts *o, uint32_t *width,
                          uint32_t *height, uint32_t *channels, char *errbuf, size_t errlen);

/* Decode into out (out_len from sl_image_output_size): presets write CHW,
 * NONE writes HWC. Uses the library's decode path bit-for-bit. */
SL_API int sl_image_decode(const void *data, size_t len, const sl_decode_opts *o,
                           void *out, size_t out_len, char *errbuf, size_t errlen);

/* The crop the train preset takes for this sample: box in source pixels
 * (x, y, w, h) and flip. For testing and inspection. */
SL_API int sl_image_train_crop(uint32_t width, uint32_t height, uint64_t seed, uint64_t epoch,
                               uint64_t index, uint32_t box[4], int *flip);

/* "38.5 MiB" (powers of 1024) into buf (len >= 16); returns buf. */
SL_API const char *sl_format_size(uint64_t bytes, char *buf, size_t len);
/* The same for a recipe: the box and flip the train preset takes for sample
 * (o->seed, o->epoch, o->index) of a width x height image under o->recipe
 * (scale, ratio, hflip). 0, or SL_EINVAL for a bad recipe or size. */
SL_API int sl_image_recipe_crop(uint32_t width, uint32_t height, const sl_decode_opts *o, uint32_t box[4],
                                int *flip);

/* Parse "512M", "2G", "1.5GiB", "1000" (K, M, G, T, optionally followed by
 * "i" or "iB": powers of 1024). Decimal units ("2GB") are refused. Returns
 * 0 and sets *out, or SL_EINVAL (not a size) / SL_EOVERFLOW (over 64 bits)
 * leaving *out unchanged. */
SL_API int sl_parse_size(const char *s, uint64_t *out);
/* As sl_parse_size; on failure also writes a sentence naming the input and
 * what to write instead to errbuf (when not NULL), e.g. "size '2GB': did you
 * mean 2G (GiB, powers of 1024)? ...". The one size rule of every front end. */
SL_API int sl_parse_size_msg(const char *s, uint64_t *out, char *errbuf, size_t errlen);

/* ---- video clips (no loader) -------------------------------------------
 * One clip of a video file, decoded as a loader's `kind: "video"` field
 * decodes it: T frames every `stride` (or at `fps`), a seeded temporal
 * offset (train) or the centred clip (val), one crop for every frame with
 * the image presets' semantics, uint8 [T][3][size][size] RGB planes. Needs
 * a build with FFmpeg's libraries (SL_EUNSUPPORTED otherwise). */

/* A clip asking for more frames than the video has. */
enum {
    SL_CLIP_PAD = 0,  /* repeat the last frame (default) */
    SL_CLIP_LOOP = 1, /* wrap around to the first frame */
    SL_CLIP_ERROR = 2 /* SL_ELIMIT */
};

typedef struct sl_video_opts {
    uint32_t frames;       /* T (default 16) */
    uint32_t stride;       /* frames between clip frames (default 2); unused when fps > 0 */
    double fps;            /* > 0: sample at this rate instead of every stride frames */
    uint32_t size;         /* output side (default 112) */
    int preset;            /* SL_PRESET_TRAIN (default) or SL_PRESET_VAL */
    int short_clip;        /* SL_CLIP_PAD (default), SL_CLIP_LOOP or SL_CLIP_ERROR */
    uint64_t seed, epoch, index; /* train randomness: same as a loader's sample */
    uint64_t max_pixels;   /* per frame (4096*2304; 0 = the default, as in sl_config; UINT64_MAX: none) */
    uint64_t max_frames;   /* frames in the video (default 1,000,000); 0: none */
    uint64_t max_bytes;    /* encoded file size (default 4 GiB); 0: none */
    double max_seconds;    /* duration (default 0: none) */
    const char *codecs;    /* allowed codecs, "h264,hevc,vp9" (NULL: h264 hevc vp8 vp9 mpeg4
                              mpeg2video mpeg1video mjpeg h263) */
    const char *crop_group; /* train randomness of this schema field: its "crop_group", or its
                               name when it has none (NULL: "image"). (0.2) */
} sl_video_opts;

/* The defaults above into the first struct_size bytes of *o. (0.2) */
SL_API void sl_video_opts_init_sized(sl_video_opts *o, size_t struct_size);
SL_API void sl_video_opts_init(sl_video_opts *o); /* 0.1's */
#define sl_video_opts_init(o) sl_video_opts_init_sized((o), sizeof *(o))

typedef struct sl_video_info {
    uint32_t width, height; /* displayed (after rotation) */
    int rotation;           /* clockwise degrees applied for display: 0, 90, 180, 270 */
    double fps, duration;   /* average frame rate, seconds */
    int64_t frames;         /* frames in the stream */
    char codec[16];
} sl_video_info;

/* Headers only (nothing decoded), limits of o (o_size bytes; o may be
 * NULL: the defaults) checked, into the first info_size bytes of *info.
 * 0, or SL_ENOENT/SL_EIO, SL_EFORMAT (no video stream), SL_ECORRUPT,
 * SL_EUNSUPPORTED, SL_ELIMIT with a reason in errbuf. (0.2) */
SL_API int sl_video_probe_sized(const char *path, const sl_video_opts *o, size_t o_size, sl_video_info *info,
                                size_t info_size, char *errbuf, size_t errlen);
SL_API int sl_video_probe(const char *path, const sl_video_opts *o, sl_video_info *info, char *errbuf,
                          size_t errlen); /* 0.1's */
#define sl_video_probe(path, o, info, errbuf, errlen) \
    sl_video_probe_sized((path), (o), sizeof(sl_video_opts), (info), sizeof *(info), (errbuf), (errlen))

/* What a clip took: for inspection and tests. */
typedef struct sl_video_clip {
    uint32_t box[4];             /* crop (x, y, w, h) in displayed pixels */
    int flip;                    /* mirrored (train) */
    uint32_t scaled_w, scaled_h; /* the box is scaled to this ... */
    uint32_t win_x, win_y;       /* ... and the size x size window at this offset kept (val) */
    int64_t *frame_index;        /* caller's array of o->frames entries, or NULL: the frames used */
} sl_video_clip;

/* Decode the clip into out (out_len >= frames*3*size*size); clip
 * (clip_size bytes, may be NULL) receives what was taken. Memory: what a
 * loader would reserve for the clip, allocated here and freed before
 * return. (0.2) */
SL_API int sl_video_decode_sized(const char *path, const sl_video_opts *o, size_t o_size, void *out,
                                 size_t out_len, sl_video_clip *clip, size_t clip_size, char *errbuf, size_t errlen);
SL_API int sl_video_decode(const char *path, const sl_video_opts *o, void *out, size_t out_len,
                           sl_video_clip *clip, char *errbuf, size_t errlen); /* 0.1's */
#define sl_video_decode(path, o, out, out_len, clip, errbuf, errlen)                                          \
    sl_video_decode_sized((path), (o), sizeof(sl_video_opts), (out), (out_len), (clip), sizeof(sl_video_clip), \
                          (errbuf), (errlen))
/* sl_image_info.format of a WebP file (lossy, lossless, with alpha). */
enum { SL_FORMAT_WEBP = 3 };

/* ---- shared budgets and the governor ----------------------------------- */
/*
 * One budget several loaders draw from (train and validation in one
 * process): set cfg.shared_budget for each, and together they never hold
 * more than its limit. Each loader keeps its own minimum working set
 * (batch slots, worker baselines and stacks, index): creating a loader
 * whose minimum does not fit what is left is refused with SL_EBUDGET and
 * the numbers. Reference counted: each loader holds a reference;
 * sl_budget_destroy drops the caller's, and the budget (its governor
 * thread too) goes with the last reference.
 *
 * fork(): as a loader, a budget belongs to the process that created it.
 * In a child of fork() every call on an inherited budget returns
 * SL_ESTATE (sl_budget_events: 0), a loader made on it is refused with
 * SL_ESTATE, and destroy frees only the child's copy (never joining the
 * parent's governor thread). Create budgets after the fork.
 */
typedef struct sl_budget sl_budget;

/* A budget of limit bytes (> 0): SL_EINVAL, SL_ENOMEM or SL_ESYS. */
SL_API int sl_budget_create(uint64_t limit, sl_budget **out);
/* Drop the caller's reference. NULL is ignored. */
SL_API void sl_budget_destroy(sl_budget *b);
/* 0 if b can be used here; SL_ESTATE in a child of fork() with a sentence
 * in why naming both processes and saying to create the budget after the
 * fork (why may be NULL). */
SL_API int sl_budget_poisoned(const sl_budget *b, char *why, size_t len);

/*
 * Move the limit while loaders run; it is the new ceiling too (the most
 * the governor may give). At once: no grant takes the total past it;
 * each loader is asked to give back what is over (free batch slots,
 * worker scratch; the cache its entries); a pending request that could
 * never fit under it fails with SL_EBUDGET rather than wait. Growing lets
 * waiting requests through and prefetch grow back. SL_EBUDGET with a
 * reason when limit is below the loaders' minimum working sets.
 */
SL_API int sl_budget_set_limit(sl_budget *b, uint64_t limit, char *errbuf, size_t errlen);

#define SL_BUDGET_STATS_LOADERS 8
typedef struct sl_budget_info {
    uint64_t limit;        /* live limit now */
    uint64_t ceiling;      /* the limit set by the user: the governor keeps limit <= ceiling */
    uint64_t used;         /* accounted now, all loaders together */
    uint64_t peak;         /* high-water mark of used */
    uint64_t fixed;        /* the loaders' minimum working sets (held for life) */
    uint64_t reserved_0_1_mem[7], reserved_0_1_mem_peak[7]; /* as in sl_stats: 0.1's mem, mem_peak */
    double wait_s;         /* summed over every thread that waited for budget */
    uint32_t waiters;      /* threads waiting now */
    uint32_t loaders;      /* loaders drawing on it now */
    uint64_t loader_used[SL_BUDGET_STATS_LOADERS];  /* the first loaders (by creation): use now, */
    uint64_t loader_peak[SL_BUDGET_STATS_LOADERS];  /* its high-water mark */
    uint64_t loader_fixed[SL_BUDGET_STATS_LOADERS]; /* and minimum working set */
    int governor;          /* 1 while a governor moves the limit */
    uint64_t governor_moves;     /* limit changes it made */
    uint64_t container_limit;    /* its last reading: the cgroup's limit (0: none), */
    uint64_t container_usage;    /* the cgroup's working set (usage - inactive file), */
    uint64_t mem_available;      /* MemAvailable, */
    double psi_some_avg10;       /* PSI memory "some" avg10 (percent) */
    /* Memory by category (0.2): entries [0, mem_count) of SL_MEM_CAPACITY. */
    uint32_t mem_count;
    uint64_t mem[SL_MEM_CAPACITY];      /* accounted now, by category (SL_MEM_*) */
    uint64_t mem_peak[SL_MEM_CAPACITY];
} sl_budget_info;

/* Fill the first out_size bytes of *out (the macro passes sizeof). (0.2) */
SL_API int sl_budget_stats_sized(const sl_budget *b, sl_budget_info *out, size_t out_size);
SL_API int sl_budget_stats(const sl_budget *b, sl_budget_info *out); /* 0.1's */
#define sl_budget_stats(b, out) sl_budget_stats_sized((b), (out), sizeof *(out))

/*
 * The governor: a thread of the budget that samples every period_ms the
 * memory cgroup (v1 or v2: limit, usage, events), PSI memory pressure and
 * MemAvailable, and moves the live limit to keep the process tree's
 * cgroup under its limit minus margin: down at once when room runs out
 * (pressure, an oom or max event), back up slowly (after the room has
 * held for grow_after_ms, by at most a step each period) up to the
 * ceiling. Loaders shed prefetch and scratch before anything fails. Each
 * move is an event (sl_budget_events).
 */
typedef struct sl_governor_opts {
    uint32_t period_ms;     /* sampling period (100) */
    uint64_t margin;        /* keep the cgroup this far under its limit (0: 5% of it, at least 64 MiB) */
    uint32_t grow_after_ms; /* room must last this long before the limit grows (1000) */
    double psi_high;        /* PSI memory some avg10 (percent) that counts as pressure (10) */
    const char *cgroup_dir; /* read this cgroup folder (v1 or v2), not the process's own (NULL) */
} sl_governor_opts;

/* The defaults above into the first struct_size bytes of *o. (0.2) */
SL_API void sl_governor_opts_init_sized(sl_governor_opts *o, size_t struct_size);
SL_API void sl_governor_opts_init(sl_governor_opts *o); /* 0.1's */
#define sl_governor_opts_init(o) sl_governor_opts_init_sized((o), sizeof *(o))
/* Start a governor on b; its ceiling is b's limit now. SL_ESTATE if one
 * runs already, SL_ESYS if the thread cannot start. o (o_size bytes)
 * NULL: defaults. (0.2) */
SL_API int sl_budget_govern_sized(sl_budget *b, const sl_governor_opts *o, size_t o_size, char *errbuf,
                                  size_t errlen);
/*
 * budget="auto": a governed budget whose ceiling is what the container
 * allows: the cgroup's limit minus margin, or without a cgroup limit
 * MemAvailable minus margin, read now. SL_ENOENT when neither can be read.
 * (0.2)
 */
SL_API int sl_budget_create_auto_sized(const sl_governor_opts *o, size_t o_size, sl_budget **out, char *errbuf,
                                       size_t errlen);
SL_API int sl_budget_govern(sl_budget *b, const sl_governor_opts *o, char *errbuf, size_t errlen); /* 0.1's */
SL_API int sl_budget_create_auto(const sl_governor_opts *o, sl_budget **out, char *errbuf, size_t errlen); /* 0.1's */
#define sl_budget_govern(b, o, errbuf, errlen) \
    sl_budget_govern_sized((b), (o), sizeof(sl_governor_opts), (errbuf), (errlen))
#define sl_budget_create_auto(o, out, errbuf, errlen) \
    sl_budget_create_auto_sized((o), sizeof(sl_governor_opts), (out), (errbuf), (errlen))

typedef struct sl_budget_event {
    double t;                /* seconds since the governor started */
    uint64_t old_limit, new_limit;
    uint64_t container_limit, container_usage, mem_available;
    char reason[112];        /* why, with the numbers */
} sl_budget_event;

/* Copy up to max events starting at event first (the governor keeps the
 * last 256; first counts from the first ever made) into out, an array of
 * events elem_size bytes apart (the caller's sizeof(sl_budget_event): the
 * macro); returns how many. (0.2) */
SL_API size_t sl_budget_events_sized(const sl_budget *b, uint64_t first, sl_budget_event *out, size_t max,
                                     size_t elem_size);
SL_API size_t sl_budget_events(const sl_budget *b, uint64_t first, sl_budget_event *out, size_t max); /* 0.1's */
#define sl_budget_events(b, first, out, max) sl_budget_events_sized((b), (first), (out), (max), sizeof *(out))

/* ---- sources (no loader) ------------------------------------------------
 * A dataset's samples and their raw values, indexed exactly as a loader
 * indexes cfg->source with cfg->fields (the schema's fields that take a
 * value from the source; without a schema the sample's file, "image", and
 * its label, "label"), and nothing decoded: for tools that copy or inspect
 * datasets (`sluice pack`). The index is counted in a budget of cfg->budget
 * bytes (SL_EBUDGET when it cannot hold it). An sl_source is read-only
 * after open: any number of threads may use it at once. */
typedef struct sl_source sl_source;

/* What a value is (sl_value.type). */
enum { SL_VALUE_FILE = 1, SL_VALUE_FILES = 2, SL_VALUE_INT = 3, SL_VALUE_NUMBERS = 4 };

typedef struct sl_value {
    const char *name;   /* the field's name (valid while the source is open) */
    int kind;           /* SL_KIND_* of the field (a sequence's: SL_KIND_SEQUENCE) */
    int type;           /* SL_VALUE_* */
    uint32_t count;     /* FILES: files, NUMBERS: numbers; else 1 */
    int64_t ival;       /* INT: the integer */
} sl_value;

/* Index cfg->source. 0, or the codes of sl_loader_create's indexing
 * (SL_ENOENT, SL_EPARSE, SL_EINVAL for a bad schema, SL_EBUDGET, ...) with
 * a sentence in errbuf. *out is freed by sl_source_close. */
SL_API int sl_source_open(const sl_config *cfg, sl_source **out, char *errbuf, size_t errlen);
SL_API void sl_source_close(sl_source *s);
/* Samples, and values per sample (fields with a value, in schema order). */
SL_API uint64_t sl_source_len(const sl_source *s);
SL_API int sl_source_num_values(const sl_source *s);
/* Value k of sample i into the first out_size bytes of *out. 0 or
 * SL_EINVAL (out of range). (0.2) */
SL_API int sl_source_value_sized(const sl_source *s, uint64_t i, int k, sl_value *out, size_t out_size);
SL_API int sl_source_value(const sl_source *s, uint64_t i, int k, sl_value *out); /* 0.1's */
#define sl_source_value(s, i, k, out) sl_source_value_sized((s), (i), (k), (out), sizeof *(out))
/* Numbers [first, first + n) of a NUMBERS or INT value into out: how many
 * the value holds in all, or SL_EINVAL. */
SL_API int sl_source_numbers(const sl_source *s, uint64_t i, int k, uint32_t first, double *out, uint32_t n);
/* File elem (0 for a FILE value; 0..count-1 for FILES) of value k of
 * sample i: its size in bytes, and its name into name (namelen bytes; may
 * be NULL): a path, or "SHARD:MEMBER" for a tar member. 0, or SL_EINVAL /
 * SL_ENOENT / SL_EIO with a sentence in errbuf. */
SL_API int sl_source_file(const sl_source *s, uint64_t i, int k, uint32_t elem, uint64_t *size, char *name,
                          size_t namelen, char *errbuf, size_t errlen);
/* Read that whole file into buf (len >= its size): its size, or SL_EOVERFLOW
 * (len too small) / SL_EINVAL / SL_ENOENT / SL_EIO with a sentence. */
SL_API int64_t sl_source_read(const sl_source *s, uint64_t i, int k, uint32_t elem, void *buf, size_t len,
                              char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */

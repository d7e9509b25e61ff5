/*
 * sluice pack SOURCE OUTDIR [--fields FILE.json] [--shard-size 256M]
 *   [--samples-per-shard N] [--max-side N [--quality 90]] [--name shard]
 *   [--workers N] [--budget 512M] [--json]
 *
 * Writes WebDataset tar shards OUTDIR/NAME-000000.tar, ... from any source
 * (folder, manifest, schema table, shards) through the public API
 * (sl_source_*): sample i becomes members "IIIIIIII.KEY" (the index,
 * zero-padded to 8 digits or more), in index order. Keys: without a schema
 * the image's own extension ("jpg", "png", ...) and "cls" (WebDataset's),
 * with one "FIELD.EXT" for a file and "FIELD.cls" for an integer, so that
 * the same schema loads the shards (a field finds "FIELD.EXT"). Lists and
 * numbers have no tar form: refused. A shard closes before the sample that
 * would take it past --shard-size (a larger sample gets a shard of its own)
 * or at --samples-per-shard.
 *
 * --max-side N re-encodes every image (kind image) whose longer side is
 * over N: decoded as the loader decodes, resized to N on the longer side
 * (Pillow-exact antialiased bilinear, aspect kept), JPEG at --quality;
 * images within N, and files that do not decode, are copied as they are.
 * EXIF orientation is not applied (as the loader by default) and not kept.
 *
 * Deterministic: the same source and options give the same bytes (headers
 * with mode 0644, owner 0, mtime 0; samples in index order) whatever the
 * worker count. Workers read and re-encode blocks of samples in parallel;
 * the main thread writes them in order.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "cli.h"
#include "common.h"
#include "sluice.h"

#define BLOCK 64          /* samples read and encoded between two writes */
#define MAX_MEMBERS 32    /* per sample */
/* The last member of every shard: its sample count and size, which the
 * loader checks (src/source/wds.h, SL_WDS_TRAILER, has the format).
 * WebDataset readers skip it: a top-level "__NAME__" is their metadata. */
#define SL_SHARD_TRAILER "__sluice_shard__"

typedef struct pack_opts {
    sl_config cfg;
    const char *source, *out, *name;
    char *fields;
    uint64_t shard_size, samples_per_shard;
    uint32_t max_side, quality, workers;
    int json;
} pack_opts;

static const char *const flags[] = {"--fields", "--shard-size", "--samples-per-shard", "--max-side", "--quality",
                                    "--name", "--workers", "--budget", "--json", "--help", NULL};

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice pack SOURCE OUTDIR [--fields FILE.json] [--shard-size 256M]\n"
            "                   [--samples-per-shard N] [--max-side N [--quality 90]]\n"
            "                   [--name shard] [--workers N] [--budget 512M] [--json]\n"
            "Writes WebDataset tar shards OUTDIR/NAME-000000.tar ... from SOURCE (a folder,\n"
            "a manifest, a schema table with --fields, or shards), samples in index order.\n"
            "--max-side re-encodes images larger than N on their longer side to N (JPEG at\n"
            "--quality); pixels then differ from the originals. Sizes take K, M, G.\n");
}

/* ---- options ------------------------------------------------------------------ */

static int number(const char *a, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    return sl_cli_whole("pack", a, v, lo, hi, out) ? 2 : 0;
}

static int option_value(pack_opts *o, const char *a, const char *v) {
    uint64_t x;
    if (!strcmp(a, "--shard-size") || !strcmp(a, "--budget")) {
        if (sl_parse_size(v, &x) || x == 0) {
            fprintf(stderr, "sluice pack: %s takes a size such as 256M, not '%s'\n", a, v);
            return 2;
        }
        *(a[2] == 's' ? &o->shard_size : &o->cfg.budget) = x;
        return 0;
    }
    if (!strcmp(a, "--samples-per-shard")) return number(a, v, 1, UINT64_MAX / 2, &o->samples_per_shard);
    if (!strcmp(a, "--max-side")) return number(a, v, 16, 16384, &x) ? 2 : (o->max_side = (uint32_t)x, 0);
    if (!strcmp(a, "--quality")) return number(a, v, 1, 100, &x) ? 2 : (o->quality = (uint32_t)x, 0);
    if (!strcmp(a, "--workers")) return number(a, v, 1, 1024, &x) ? 2 : (o->workers = (uint32_t)x, 0);
    if (!strcmp(a, "--name")) {
        if (!*v || strchr(v, '/') || strchr(v, '{') || strlen(v) > 64) {
            fprintf(stderr, "sluice pack: --name is a file name prefix (no '/', '{'), not '%s'\n", v);
            return 2;
        }
        o->name = v;
        return 0;
    }
    if (!strcmp(a, "--fields")) {
        free(o->fields);
        return (o->fields = sl_cli_read_fields("pack", v)) ? 0 : 2;
    }
    sl_cli_unknown_flag("pack", a, flags, NULL);
    usage(stderr);
    return 2;
}

static int parse_args(pack_opts *o, int argc, char **argv) {
    sl_config_init(&o->cfg);
    o->shard_size = (uint64_t)256 << 20;
    o->quality = 90;
    o->name = "shard";
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->workers = cpus > 0 ? (uint32_t)cpus : 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (a[0] == '-' && a[1]) {
            if (i + 1 >= argc) {
                if (sl_cli_flag_known(a, flags, NULL)) fprintf(stderr, "sluice pack: %s needs a value\n", a);
                else sl_cli_unknown_flag("pack", a, flags, NULL);
                return 2;
            }
            if (option_value(o, a, argv[++i])) return 2;
        } else if (!o->source) {
            o->source = a;
        } else if (!o->out) {
            o->out = a;
        } else {
            fprintf(stderr, "sluice pack: SOURCE and OUTDIR only ('%s' too)\n", a);
            return 2;
        }
    }
    if (!o->source || !o->out) {
        usage(stderr);
        return 2;
    }
    o->cfg.source = o->source;
    o->cfg.fields = o->fields;
    return 0;
}

/* ---- one sample's members ------------------------------------------------------ */

typedef struct member {
    char key[96];
    uint8_t *data; /* malloc'd */
    size_t size;
} member;

typedef struct packed {
    member m[MAX_MEMBERS];
    uint32_t n;
    uint64_t bytes;       /* members with headers and padding, as written */
    int reencoded, kept;  /* images re-encoded / left as they were (not decodable) */
    char err[512];        /* non-empty: the sample failed */
} packed;

typedef struct job {
    const pack_opts *o;
    const sl_source *src;
    int schema;            /* keys FIELD.EXT (1) or WebDataset's EXT / cls (0) */
    uint64_t first, n;     /* the block */
    packed *out;
    atomic_uint_fast64_t next;
} job;

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* The extension of a file name ("a/b.JPEG" -> "jpeg"; "" without one). */
static void extension(const char *name, char *ext, size_t len) {
    const char *slash = strrchr(name, '/'), *colon = strrchr(name, ':'), *base = name;
    if (slash && slash + 1 > base) base = slash + 1;
    if (colon && colon + 1 > base) base = colon + 1;
    const char *dot = strrchr(base, '.');
    size_t n = 0;
    for (const char *p = dot ? dot + 1 : ""; *p && n + 1 < len; p++)
        ext[n++] = lower(*p);
    ext[n] = 0;
}

/* JPEG of an HWC RGB image at quality q into *out (malloc'd by libjpeg). */
static void jpeg_encode(const uint8_t *hwc, uint32_t w, uint32_t h, int q, uint8_t **out, size_t *len) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned long n = 0;
    c.err = jpeg_std_error(&e); /* errors here are programming errors (libjpeg exits) */
    jpeg_create_compress(&c);
    *out = NULL;
    jpeg_mem_dest(&c, out, &n);
    c.image_width = w, c.image_height = h, c.input_components = 3, c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, q, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(hwc + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = n;
}

/* Re-encode m's image when its longer side is over max_side: 1 (replaced),
 * 0 (within the side: kept), -1 (does not decode: kept). */
static int reencode(member *m, uint32_t max_side, int quality) {
    sl_image_info info;
    if (sl_image_probe(m->data, m->size, &info)) return -1;
    uint32_t W = info.width, H = info.height;
    if (W <= max_side && H <= max_side) return 0;
    double s = (double)max_side / (W > H ? W : H);
    uint32_t ow = W >= H ? max_side : (uint32_t)(W * s + 0.5), oh = W >= H ? (uint32_t)(H * s + 0.5) : max_side;
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    sl_image_recipe r;
    sl_image_recipe_init(&r);
    o.preset = SL_PRESET_VAL; /* Resize keeping the aspect to cover ow x oh, centre crop ow x oh: the whole image */
    r.width = ow ? ow : 1, r.height = oh ? oh : 1;
    r.crop_pct = 1.0;
    o.recipe = &r;
    o.max_pixels = (uint64_t)1 << 32;
    o.max_bytes = (uint64_t)1 << 34;
    uint32_t w, h, ch;
    if (sl_image_output_size(m->data, m->size, &o, &w, &h, &ch) || ch != 3) return -1;
    uint8_t *chw = malloc((size_t)w * h * 3), *hwc = malloc((size_t)w * h * 3);
    int rc = chw && hwc ? sl_image_decode(m->data, m->size, &o, chw, (size_t)w * h * 3, NULL, 0) : SL_ENOMEM;
    if (!rc) {
        for (size_t p = 0, plane = (size_t)w * h; p < plane; p++)
            for (int c = 0; c < 3; c++) hwc[p * 3 + c] = chw[c * plane + p];
        uint8_t *jpg;
        size_t len;
        jpeg_encode(hwc, w, h, quality, &jpg, &len);
        free(m->data);
        m->data = jpg, m->size = len;
    }
    free(chw), free(hwc);
    return rc ? -1 : 1;
}

/* Member bytes in a shard: a header and the data padded to 512. */
static uint64_t member_bytes(uint64_t size) { return 512 + (size + 511) / 512 * 512; }

static int add_file(const job *j, uint64_t i, int k, const sl_value *v, packed *p) {
    uint64_t size;
    char name[4200], ext[24];
    if (sl_source_file(j->src, i, k, 0, &size, name, sizeof name, p->err, sizeof p->err)) return -1;
    member *m = &p->m[p->n];
    m->data = malloc(size ? size : 1);
    if (!m->data || sl_source_read(j->src, i, k, 0, m->data, size, p->err, sizeof p->err) != (int64_t)size) {
        if (!m->data) snprintf(p->err, sizeof p->err, "no memory for %.400s (%" PRIu64 " bytes)", name, size);
        free(m->data);
        return -1;
    }
    m->size = size;
    extension(name, ext, sizeof ext);
    if (v->kind == SL_KIND_IMAGE && j->o->max_side) {
        int r = reencode(m, j->o->max_side, (int)j->o->quality);
        if (r > 0) snprintf(ext, sizeof ext, "jpg");
        p->reencoded += r > 0, p->kept += r < 0;
    }
    if (j->schema) snprintf(m->key, sizeof m->key, "%s%s%s", v->name, ext[0] ? "." : "", ext);
    else snprintf(m->key, sizeof m->key, "%s", ext[0] ? ext : "bin");
    p->n++;
    return 0;
}

/* Sample i's members into p (p->err on failure). */
static void pack_sample(const job *j, uint64_t i, packed *p) {
    memset(p, 0, sizeof *p);
    int nv = sl_source_num_values(j->src);
    for (int k = 0; k < nv && !p->err[0]; k++) {
        sl_value v;
        if (sl_source_value(j->src, i, k, &v) || p->n == MAX_MEMBERS) {
            snprintf(p->err, sizeof p->err, "sample %" PRIu64 ": value %d unreadable", i, k);
        } else if (v.type == SL_VALUE_FILE) {
            add_file(j, i, k, &v, p);
        } else if (v.type == SL_VALUE_INT) {
            member *m = &p->m[p->n++];
            snprintf(m->key, sizeof m->key, "%s%scls", j->schema ? v.name : "", j->schema ? "." : "");
            m->data = malloc(24);
            m->size = m->data ? (size_t)snprintf((char *)m->data, 24, "%" PRId64, v.ival) : 0;
        } else {
            snprintf(p->err, sizeof p->err, "field \"%s\" is a %s: tar samples hold files and integers (keep it in a .jsonl manifest)",
                     v.name, v.type == SL_VALUE_FILES ? "list of files" : "list of numbers");
        }
    }
    for (uint32_t m = 0; m < p->n; m++) p->bytes += member_bytes(p->m[m].size);
}

static void *worker(void *arg) {
    job *j = arg;
    for (;;) {
        uint64_t k = atomic_fetch_add(&j->next, 1);
        if (k >= j->n) return NULL;
        pack_sample(j, j->first + k, &j->out[k]);
    }
}

static void packed_free(packed *p) {
    for (uint32_t m = 0; m < p->n; m++) free(p->m[m].data);
    p->n = 0;
}

/* ---- tar writing ----------------------------------------------------------------- */

typedef struct shard_writer {
    const pack_opts *o;
    FILE *f;
    char path[4200], partial[4220]; /* the shard's name, and its name until it is complete */
    uint32_t index;       /* of the open shard; shards written = index + (f != NULL) */
    uint64_t bytes, samples, total_bytes;
    int width;            /* digits of a sample's key */
} shard_writer;

static void octal(char *field, size_t n, uint64_t v) { snprintf(field, n, "%0*" PRIo64, (int)n - 1, v); }

/* A ustar header for a regular member (GNU base-256 for sizes of 8 GiB). */
static int tar_header(FILE *f, const char *name, uint64_t size) {
    char h[512] = {0};
    size_t n = strlen(name);
    if (n >= 100) return -1;
    memcpy(h, name, n);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    if (size < ((uint64_t)1 << 33)) octal(h + 124, 12, size);
    else {
        h[124] = (char)0x80;
        for (int b = 0; b < 8; b++) h[135 - b] = (char)(size >> (8 * b));
    }
    octal(h + 136, 12, 0);
    h[156] = '0';
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    return fwrite(h, 1, 512, f) == 512 ? 0 : -1;
}

/* The shard being written is dropped (a failed pack): no NAME.tar is
 * left that holds only part of what it should. */
static void shard_abandon(shard_writer *w) {
    if (!w->f) return;
    fclose(w->f);
    w->f = NULL;
    unlink(w->partial);
}

/* Finish the open shard: the trailer (its sample count and the bytes
 * before it, which a reader checks: wds.h, SL_WDS_TRAILER), tar's end
 * blocks, then flushed to the disk and renamed from NAME.tar.partial to
 * NAME.tar, so a NAME.tar is always whole: a pack killed midway leaves
 * the .partial, which a shard folder refuses, never a shorter shard. */
static int shard_close(shard_writer *w) {
    if (!w->f) return 0;
    static const char zeros[1024];
    char line[160];
    int n = snprintf(line, sizeof line, "{\"sluice_shard\": 1, \"samples\": %" PRIu64 ", \"bytes\": %" PRIu64 "}\n",
                     w->samples, w->bytes);
    uint64_t trailer = member_bytes((uint64_t)n);
    int bad = tar_header(w->f, SL_SHARD_TRAILER, (uint64_t)n) || fwrite(line, 1, (size_t)n, w->f) != (size_t)n ||
              fwrite(zeros, 1, trailer - 512 - (uint64_t)n, w->f) != trailer - 512 - (uint64_t)n;
    bad = bad || fwrite(zeros, 1, sizeof zeros, w->f) != sizeof zeros || fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    int e = errno;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (!bad && rename(w->partial, w->path) != 0) bad = 1, e = errno;
    if (bad) {
        fprintf(stderr, "sluice pack: writing %s failed: %s\n", w->path, strerror(e));
        unlink(w->partial);
        return -1;
    }
    w->total_bytes += w->bytes + trailer + 1024;
    w->index++;
    return 0;
}

static int shard_open(shard_writer *w) {
    char name[96];
    snprintf(name, sizeof name, "%s-%06u.tar", w->o->name, w->index);
    if (sl_cli_path_join(w->path, sizeof w->path, w->o->out, name)) {
        fprintf(stderr, "sluice pack: %s: the path is too long\n", w->o->out);
        return -1;
    }
    snprintf(w->partial, sizeof w->partial, "%s.partial", w->path);
    if (!(w->f = fopen(w->partial, "wb"))) {
        fprintf(stderr, "sluice pack: %s: %s\n", w->partial, strerror(errno));
        return -1;
    }
    w->bytes = w->samples = 0;
    return 0;
}

static int write_sample(shard_writer *w, uint64_t i, const packed *p) {
    const pack_opts *o = w->o;
    if (w->f && ((w->bytes && w->bytes + p->bytes > o->shard_size) ||
                 (o->samples_per_shard && w->samples == o->samples_per_shard)) && shard_close(w))
        return -1;
    if (!w->f && shard_open(w)) return -1;
    static const char pad[512];
    for (uint32_t k = 0; k < p->n; k++) {
        char name[160];
        snprintf(name, sizeof name, "%0*" PRIu64 ".%s", w->width, i, p->m[k].key);
        const member *m = &p->m[k];
        if (tar_header(w->f, name, m->size) || fwrite(m->data, 1, m->size, w->f) != m->size ||
            fwrite(pad, 1, (512 - m->size % 512) % 512, w->f) != (512 - m->size % 512) % 512) {
            fprintf(stderr, "sluice pack: writing %s (member %s) failed: %s\n", w->path, name,
                    strlen(name) >= 100 ? "name over 99 bytes" : strerror(errno));
            return -1;
        }
    }
    w->bytes += p->bytes;
    w->samples++;
    return 0;
}

/* ---- the run ------------------------------------------------------------------------ */

typedef struct pack_stats {
    uint64_t samples, reencoded, kept;
} pack_stats;

/* Pack every sample: blocks read and encoded by the workers, written in order. */
static int pack_all(const pack_opts *o, const sl_source *src, shard_writer *w, pack_stats *st) {
    uint64_t n = sl_source_len(src);
    packed *out = calloc(BLOCK, sizeof *out);
    pthread_t th[1024];
    job j = {.o = o, .src = src, .schema = o->fields != NULL, .out = out};
    int rc = out ? 0 : -1;
    for (uint64_t first = 0; first < n && !rc; first += BLOCK) {
        j.first = first, j.n = n - first < BLOCK ? n - first : BLOCK;
        atomic_store(&j.next, 0);
        uint32_t nt = o->workers < j.n ? o->workers : (uint32_t)j.n, started = 0;
        while (started + 1 < nt && pthread_create(&th[started], NULL, worker, &j) == 0) started++;
        worker(&j);
        for (uint32_t t = 0; t < started; t++) pthread_join(th[t], NULL);
        for (uint64_t k = 0; k < j.n; k++) {
            if (!rc && out[k].err[0]) {
                fprintf(stderr, "sluice pack: %s\n", out[k].err);
                rc = -1;
            }
            if (!rc) rc = write_sample(w, first + k, &out[k]);
            st->reencoded += (uint64_t)out[k].reencoded;
            st->kept += (uint64_t)out[k].kept;
            packed_free(&out[k]);
        }
        st->samples = rc ? st->samples : first + j.n;
    }
    free(out);
    return rc;
}

static void report(const pack_opts *o, const shard_writer *w, const pack_stats *st, double s) {
    uint32_t shards = w->index;
    char name[96], pattern[4300];
    snprintf(name, sizeof name, "%s-{000000..%06u}.tar", o->name, shards ? shards - 1 : 0);
    sl_cli_path_join(pattern, sizeof pattern, o->out, name); /* shorter than the shards' paths, which fit */
    if (o->json) {
        printf("{\"samples\": %" PRIu64 ", \"shards\": %u, \"bytes\": %" PRIu64 ", \"seconds\": %.3f, "
               "\"reencoded\": %" PRIu64 ", \"kept_undecodable\": %" PRIu64 ", \"pattern\": ",
               st->samples, shards, w->total_bytes, s, st->reencoded, st->kept);
        sl_cli_json_str(stdout, pattern);
        printf("}\n");
        return;
    }
    printf("sluice pack: %" PRIu64 " samples into %u shards, %.1f MiB, %.2f s\n", st->samples, shards,
           (double)w->total_bytes / 1048576.0, s);
    if (o->max_side)
        printf("  re-encoded %" PRIu64 " images over %u px (JPEG quality %u); %" PRIu64 " kept as they were (not decodable)\n",
               st->reencoded, o->max_side, o->quality, st->kept);
    printf("  %s\n", pattern);
}

/* Field names a loader could not tell apart in a shard refuse the pack:
 * member keys are lowercased (as WebDataset does) and a field finds KEY
 * and KEY.EXT, so "a" and "A" would make a key twice in a sample, and "a"
 * and "a.b" a member both fields find ("a.b.npy"): shards the loader
 * refuses. 0, or 2 with the two names on stderr. */
static int check_field_names(const sl_source *src) {
    int nv = sl_source_num_values(src);
    sl_value v[MAX_MEMBERS];
    for (int k = 0; k < nv && k < MAX_MEMBERS; k++) {
        if (sl_source_value(src, 0, k, &v[k])) return 0; /* the pack reports it, with the sample */
        for (int j = 0; j < k; j++) {
            const char *a = v[j].name, *b = v[k].name;
            size_t i = 0;
            while (a[i] && lower(a[i]) == lower(b[i])) i++;
            if ((!a[i] && (!b[i] || b[i] == '.')) || (!b[i] && a[i] == '.')) {
                fprintf(stderr,
                        "sluice pack: fields \"%s\" and \"%s\" cannot both be tar members: keys are compared "
                        "lowercased and a field finds KEY and KEY.EXT, so the loader would refuse these shards "
                        "(rename one)\n", a, b);
                return 2;
            }
        }
    }
    return 0;
}

/* mkdir -p */
static int make_dirs(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *q = '/';
    }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

int sl_cli_pack(int argc, char **argv) {
    pack_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(&o, argc, argv);
    if (rc) {
        free(o.fields);
        return rc == 1 ? 0 : 2;
    }
    char err[1024];
    sl_source *src = NULL;
    if ((rc = sl_source_open(&o.cfg, &src, err, sizeof err))) {
        sl_cli_error("pack", rc, err);
        free(o.fields);
        return 1;
    }
    if (o.fields && (rc = check_field_names(src))) {
        sl_source_close(src);
        free(o.fields);
        return rc;
    }
    if (make_dirs(o.out)) {
        fprintf(stderr, "sluice pack: %s: %s\n", o.out, strerror(errno));
        sl_source_close(src);
        free(o.fields);
        return 1;
    }
    shard_writer w = {.o = &o, .width = 8};
    for (uint64_t n = sl_source_len(src); n > 100000000ull; n /= 10) w.width++;
    pack_stats st = {0, 0, 0};
    double t0 = sl_cli_now_s();
    rc = pack_all(&o, src, &w, &st);
    if (rc) shard_abandon(&w);
    else if (shard_close(&w)) rc = -1;
    if (!rc) report(&o, &w, &st, sl_cli_now_s() - t0);
    sl_source_close(src);
    free(o.fields);
    return rc ? 1 : 0;
}

/*
 * Tar shard sources (the WebDataset layout): the source path is
 *   - a `.tar` file: one shard;
 *   - a brace pattern, "shards/train-{000000..000099}.tar" (tar.h's rules),
 *     when no file of that name exists: the shards it names, in its order;
 *   - a folder with `.tar` files at its top and no subfolder holding
 *     images or videos (shard_folder): its `.tar` files in byte order of
 *     their names; a `.tar.partial` there (an unfinished `sluice pack`)
 *     is refused.
 * Every shard is scanned at open (tar.c: headers only, one pread each),
 * its members grouped into samples (wds.c); samples follow the shards'
 * order, then the archive's. A sample's columns are its members, found by
 * key: the request's ';'-separated alternatives in turn, the first that a
 * member answers wins; a member answers an alternative when its key equals
 * it, or begins with it and a dot (the field "blur" finds "blur.npy": one
 * such member, else the sample is refused as ambiguous). Keys compare
 * lowercased (the grouper lowercases members').
 *
 *   FILE  a member range: rec.off = its data offset, rec.len = its size
 *         (SL__BIG: the size is at or above 2^32 - 1, and rec.off is then
 *         the arena offset of {offset, size}), rec.dir = the shard index
 *         | the member's key << 24 (an index into the keys met, at most
 *         255 distinct ones in a source: names in messages, extensions)
 *   INT   the member's text read at index time (one pread of at most 32
 *         bytes: WebDataset's `.cls`), a decimal integer with blanks or a
 *         line end around it; rec.off holds it
 * Lists and numbers have no tar form (SL_EINVAL at open: a sequence or a
 * target needs a .jsonl manifest). A last, hidden column holds the
 * sample's prefix (its name without keys) for paths and messages.
 *
 * Strict, as manifests: a shard that does not scan (tar.h's refusals), a
 * sample without a member a column needs, or a label that is not an
 * integer stops the index with the shard, the offset or sample, and the
 * reason. Nothing is guessed.
 *
 * Descriptors: shards stay open for the source's life (one fd each, so a
 * sample costs one pread of its member, after a dup the worker closes),
 * up to a quarter of the soft RLIMIT_NOFILE; shards past that are opened
 * by path per read (an open and a close more, the cost of a file in a
 * folder). sl__shards_open_fds() says how many are held. Memory: the
 * shard list, the table and the keys are counted under SL_MEM_INDEX.
 */
#define _GNU_SOURCE
#include "source/shards.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "io/url.h"
#include "source/folder.h"
#include "source/remote.h"
#include "source/table.h"
#include "source/tar.h"
#include "source/wds.h"

typedef unsigned long long ull;

#define SL__BIG UINT32_MAX
#define SHARD_BITS 24
#define SHARD_MASK ((1u << SHARD_BITS) - 1)
#define LABEL_MAX 32
#define MEMBER_KEYS 255

struct sl__shards {
    char *names;          /* arena: shard paths, then column keys, NUL-terminated */
    uint64_t names_len, names_cap;
    uint64_t *path_off;   /* nshards offsets into names */
    uint64_t path_cap;
    int *fds;             /* nshards: open descriptor, or -1 (opened per read) */
    sl__obj *objs;        /* remote shards (the source's engine): nshards objects, else NULL */
    uint32_t nshards, nopen;
    uint32_t ncols;       /* requested columns (the table has one more: the prefix) */
    uint64_t key_off[SL__MAX_COLS]; /* each column's lowercased key alternatives */
    uint64_t mkey_off[MEMBER_KEYS]; /* the member keys met (FILE values), interned */
    uint32_t nmkeys;
    uint32_t trailers;    /* shards ending with a trailer (tar.h, SL_WDS_TRAILER) */
    uint32_t untrailed;   /* the first shard without one (valid when trailers < nshards) */
};

/* ---- the shard list ------------------------------------------------------------ */

static int names_put(sl__budget *b, sl__shards *h, const char *p, size_t n, uint64_t *off) {
    uint64_t need;
    if (sl__add(h->names_len, n + 1, &need)) return SL_EOVERFLOW;
    if (need > h->names_cap) {
        uint64_t cap = h->names_cap ? h->names_cap : 1024;
        while (cap < need) cap *= 2;
        char *q = sl__realloc(b, h->names, (size_t)cap, SL_MEM_INDEX);
        if (!q) return sl__nomem_code(b, cap);
        h->names = q;
        h->names_cap = cap;
    }
    memcpy(h->names + h->names_len, p, n);
    h->names[h->names_len + n] = 0;
    *off = h->names_len;
    h->names_len = need;
    return 0;
}

typedef struct list_ctx {
    sl__budget *b;
    sl__shards *h;
    const char *dir; /* folder form: prefix of every name */
} list_ctx;

static int add_shard(void *arg, const char *name, size_t len) {
    list_ctx *c = arg;
    sl__shards *h = c->h;
    if (h->nshards > SHARD_MASK) return SL_ELIMIT;
    if (h->nshards == h->path_cap) {
        uint64_t cap = h->path_cap ? h->path_cap * 2 : 64;
        uint64_t *q = sl__realloc(c->b, h->path_off, (size_t)cap * sizeof *q, SL_MEM_INDEX);
        if (!q) return sl__nomem_code(c->b, cap * sizeof *q);
        h->path_off = q;
        h->path_cap = cap;
    }
    char full[PATH_MAX];
    int n = c->dir ? snprintf(full, sizeof full, "%s/%.*s", c->dir, (int)len, name) : -1;
    if (c->dir && (n < 0 || (size_t)n >= sizeof full)) return SL_ELIMIT;
    return names_put(c->b, h, c->dir ? full : name, c->dir ? (size_t)n : len, &h->path_off[h->nshards++]);
}

static int is_tar_name(const char *name) {
    size_t n = strlen(name);
    return n > 4 && strcasecmp(name + n - 4, ".tar") == 0;
}

/* `sluice pack` writes a shard as NAME.tar.partial and renames it when it
 * is complete: a folder still holding one is an unfinished pack. */
#define PARTIAL ".tar.partial"
static int is_partial_name(const char *name) {
    size_t n = strlen(name), m = sizeof PARTIAL - 1;
    return n > m && strcmp(name + n - m, PARTIAL) == 0;
}

static int is_dir_entry(DIR *d, const struct dirent *e, int follow) {
    struct stat st;
    if (e->d_type != DT_UNKNOWN && (e->d_type != DT_LNK || !follow)) return e->d_type == DT_DIR;
    return fstatat(dirfd(d), e->d_name, &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Does folder `name` of folder `at` hold, at most `depth` levels down, a
 * file an ImageFolder would take (an image or a video)? Its name into hit.
 * The folder itself may be a link (a class folder can be, as for
 * torchvision); links to folders inside it are not followed (a loop must
 * not make this walk endless). */
static int holds_media(int at, const char *name, int depth, int follow, char *hit, size_t hlen) {
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return 0;
    }
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(e->d_name);
        if (is_dir_entry(d, e, 0))
            found = depth > 0 && holds_media(dirfd(d), e->d_name, depth - 1, 0, hit, hlen);
        else
            found = sl__folder_ext_match(e->d_name, n, SL__MEDIA_IMAGE) ||
                    sl__folder_ext_match(e->d_name, n, SL__MEDIA_VIDEO);
        if (found == 1 && !hit[0]) snprintf(hit, hlen, "%s", e->d_name);
    }
    closedir(d);
    return found;
}

/* 1 when folder path is a shard folder: .tar files at its top (or an
 * unfinished pack's .tar.partial), and no subfolder holding images or
 * videos (anything else beside the shards, a log folder, a checkpoint
 * folder, is no class of an ImageFolder). 0: not shards (no .tar at its
 * top: an ImageFolder). SL_EINVAL: both shards and class folders with
 * images, which name two different datasets; err says which. */
static int shard_folder(const char *path, char *err, size_t errlen) {
    DIR *d = opendir(path);
    if (!d) return 0;
    int tars = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        tars += !is_dir_entry(d, e, 1) && (is_tar_name(e->d_name) || is_partial_name(e->d_name));
    char hit[256] = "", sub[256] = "";
    rewinddir(d);
    while (tars && !sub[0] && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !is_dir_entry(d, e, 1)) continue;
        if (holds_media(dirfd(d), e->d_name, 16, 1, hit, sizeof hit)) snprintf(sub, sizeof sub, "%s", e->d_name);
    }
    closedir(d);
    if (!tars) return 0;
    if (sub[0]) {
        sl__msg(err, errlen,
                "%s holds .tar shards and also folders with images (%.60s/ has %.60s): it could be shards or an "
                "ImageFolder; name the shards with a brace pattern (%s/NAME-{000000..000009}.tar), or move them out",
                path, sub, hit, path);
        return SL_EINVAL;
    }
    return 1;
}

int sl__shards_form(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode)) return is_tar_name(path) ? SL__SHARDS_FILE : 0;
        if (!S_ISDIR(st.st_mode)) return 0;
        int rc = shard_folder(path, err, errlen);
        return rc < 0 ? rc : rc ? SL__SHARDS_FOLDER : 0;
    }
    return strchr(path, '{') && strchr(path, '}') ? SL__SHARDS_PATTERN : 0;
}

static int by_name(const void *a, const void *b, void *arena) {
    return strcmp((const char *)arena + *(const uint64_t *)a, (const char *)arena + *(const uint64_t *)b);
}

/* The shards of a folder, sorted by name. */
static int list_folder(list_ctx *c, const char *path, char *err, size_t errlen) {
    DIR *d = opendir(path);
    if (!d) {
        sl__msg(err, errlen, "%s: cannot open folder: %s", path, strerror(errno));
        return SL_EIO;
    }
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (is_partial_name(e->d_name)) {
            sl__msg(err, errlen, "%s/%s is a shard `sluice pack` was still writing when it stopped: the pack did not "
                    "finish (pack again, or remove it to load the shards before it)", path, e->d_name);
            rc = SL_ECORRUPT;
        } else if (is_tar_name(e->d_name)) {
            rc = add_shard(c, e->d_name, strlen(e->d_name));
        }
    }
    closedir(d);
    if (rc == SL_ECORRUPT) return rc;
    if (rc) {
        sl__msg(err, errlen, "%s: listing its shards: %s", path, sl_strerror(rc));
        return rc;
    }
    qsort_r(c->h->path_off, c->h->nshards, sizeof *c->h->path_off, by_name, c->h->names);
    return 0;
}

static int list_shards(sl__source *s, sl__shards *h, const char *path, int form, char *err, size_t errlen) {
    list_ctx c = {s->b, h, NULL};
    int rc;
    if (errlen) err[0] = 0;
    if (form == SL__SHARDS_FOLDER && s->io) return sl__remote_list_shards(s, path, add_shard, &c, err, errlen);
    if (form == SL__SHARDS_FOLDER) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') n--;
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", (int)n, path);
        c.dir = dir;
        return list_folder(&c, dir, err, errlen);
    }
    if (form == SL__SHARDS_FILE) rc = add_shard(&c, path, strlen(path));
    else rc = sl__brace_expand(path, add_shard, &c, err, errlen);
    if (rc && !err[0]) sl__msg(err, errlen, "%s: listing its shards: %s", path, sl_strerror(rc));
    return rc;
}

/* ---- keys -------------------------------------------------------------------------- */

/* The member of m[0..n) answering one alternative alt[0, len): its index,
 * -1 (none), or -2 (two members begin with alt and a dot). */
static int member_for(const sl__wds_member *m, uint32_t n, const char *alt, size_t len) {
    int found = -1;
    for (uint32_t j = 0; j < n; j++)
        if (m[j].key_len == len && !memcmp(m[j].key, alt, len)) return (int)j;
    for (uint32_t j = 0; j < n; j++)
        if (m[j].key_len > len && m[j].key[len] == '.' && !memcmp(m[j].key, alt, len)) {
            if (found >= 0) return -2;
            found = (int)j;
        }
    return found;
}

/* The member for column keys: its index, or -1 / -2 (as member_for, for
 * the first alternative that is ambiguous). */
static int find_member(const sl__wds_member *m, uint32_t n, const char *keys) {
    const char *k = keys;
    for (;;) {
        const char *semi = strchr(k, ';');
        size_t len = semi ? (size_t)(semi - k) : strlen(k);
        int j = len ? member_for(m, n, k, len) : -1;
        if (j != -1) return j;
        if (!semi) return -1;
        k = semi + 1;
    }
}

/* ---- indexing ------------------------------------------------------------------------ */

typedef struct scan_ctx {
    sl__source *s;
    uint32_t shard;
    int fd;
    const char *path;
    sl__tar_read_fn read; /* a remote shard's reader for labels (remote.c), else NULL: pread fd */
    void *rctx;
} scan_ctx;

static int member_label(scan_ctx *c, const char *prefix, const sl__wds_member *m, int64_t *out, char *err,
                        size_t errlen) {
    char text[LABEL_MAX + 1];
    size_t n = (size_t)m->size;
    if (m->size == 0 || m->size > LABEL_MAX) {
        sl__msg(err, errlen, "%s: '%.60s.%s' holds %llu bytes, not an integer label", c->path, prefix, m->key,
                (ull)m->size);
        return SL_EPARSE;
    }
    ssize_t got;
    if (c->read) got = c->read(c->rctx, m->offset, text, n, err, errlen) ? -1 : (ssize_t)n;
    else do got = pread(c->fd, text, n, (off_t)m->offset);
    while (got < 0 && errno == EINTR);
    if (got != (ssize_t)n) {
        sl__msg(err, errlen, "%s: reading '%.60s.%s' failed", c->path, prefix, m->key);
        return SL_EIO;
    }
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
    if (sl__parse_int(text, n, out)) {
        sl__msg(err, errlen, "%s: '%.60s.%s' is not an integer label", c->path, prefix, m->key);
        return SL_EPARSE;
    }
    return 0;
}

/* The index of member key k among those met, added if new. */
static int intern_key(sl__source *s, const sl__wds_member *m, uint32_t *idx) {
    sl__shards *h = s->shards;
    for (uint32_t j = 0; j < h->nmkeys; j++)
        if (!strcmp(h->names + h->mkey_off[j], m->key)) return *idx = j, 0;
    if (h->nmkeys == MEMBER_KEYS) return SL_ELIMIT;
    *idx = h->nmkeys;
    return names_put(s->b, h, m->key, m->key_len, &h->mkey_off[h->nmkeys++]);
}

static int add_file(sl__source *s, uint32_t shard, const sl__wds_member *m) {
    uint32_t key;
    int rc = intern_key(s, m, &key);
    if (rc) return rc;
    sl__rec r = {m->offset, (uint32_t)m->size, shard | key << SHARD_BITS};
    if (m->size >= SL__BIG) {
        uint64_t pair[2] = {m->offset, m->size}, off;
        if ((rc = sl__table_put(s->b, s->tab, pair, sizeof pair, 1, &off))) return rc;
        r = (sl__rec){off, SL__BIG, r.dir};
    }
    return sl__table_add(s->b, s->tab, r);
}

static int no_member(scan_ctx *c, const char *prefix, const sl__wds_member *m, uint32_t n, const char *keys, int why,
                     char *err, size_t errlen) {
    char have[200] = "";
    size_t at = 0;
    for (uint32_t j = 0; j < n && at < sizeof have; j++)
        at += (size_t)snprintf(have + at, sizeof have - at, "%s%s", j ? ", " : "", m[j].key);
    sl__msg(err, errlen, "%s: sample '%.60s' has %s member for \"%s\" (its members: %s)", c->path, prefix,
            why == -2 ? "more than one" : "no", keys, have);
    return SL_EPARSE;
}

/* One sample of a shard: its columns, then its prefix. */
static int on_sample(void *ctx, const char *prefix, size_t plen, const sl__wds_member *m, uint32_t n, char *err,
                     size_t errlen) {
    scan_ctx *c = ctx;
    sl__source *s = c->s;
    sl__shards *h = s->shards;
    int rc = 0;
    for (uint32_t k = 0; k < h->ncols && !rc; k++) {
        const char *keys = h->names + h->key_off[k];
        int j = find_member(m, n, keys);
        if (j < 0) return no_member(c, prefix, m, n, keys, j, err, errlen);
        if (s->tab->types[k] == SL__VAL_FILE) {
            if ((rc = add_file(s, c->shard, &m[j])) == SL_ELIMIT) {
                sl__msg(err, errlen, "%s: sample '%.60s': more than %d different member keys in the shards", c->path,
                        prefix, MEMBER_KEYS);
                return rc;
            }
        } else {
            int64_t v;
            if ((rc = member_label(c, prefix, &m[j], &v, err, errlen))) return rc;
            rc = sl__table_add(s->b, s->tab, (sl__rec){(uint64_t)v, 0, 0});
        }
    }
    uint64_t off;
    if (!rc && plen > UINT32_MAX) rc = SL_ELIMIT;
    if (!rc) rc = sl__table_put(s->b, s->tab, prefix, plen, 0, &off);
    if (!rc) rc = sl__table_add(s->b, s->tab, (sl__rec){off, (uint32_t)plen, c->shard});
    if (rc) {
        char room[160];
        sl__msg(err, errlen, "%s: indexing needs more memory than the budget leaves: %s (%s)", c->path,
                sl__index_room(s->b, c->shard, h->nshards, room, sizeof room), sl_strerror(rc));
        return rc;
    }
    s->tab->nrows++;
    return 0;
}

static uint32_t fd_cap(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > ((rlim_t)1 << 30)) return 1u << 28;
    return (uint32_t)(rl.rlim_cur / 4);
}

/* The scanner's reasons start "tar: ..."; ours name the shard already. */
static void scan_error(const char *path, const char *why, char *err, size_t errlen) {
    int tar = !strncmp(why, "tar:", 4);
    sl__msg(err, errlen, "%s%s%s", tar ? path : "", tar ? ": " : "", strncmp(why, "tar: ", 5) ? why : why + 5);
}

/* Count shard i's trailer (every shard of a set has one, or none does). */
static void note_trailer(sl__shards *h, uint32_t i, const sl__wds_stats *ws) {
    if (ws->trailer) h->trailers++;
    else if (h->trailers == i) h->untrailed = i; /* the first without one */
}

/* Index remote shard i: from the node's record of it, or a scan through
 * windows of ranged reads (remote.c). */
static int index_remote_shard(sl__source *s, uint32_t i, char *err, size_t errlen) {
    sl__shards *h = s->shards;
    /* its own copy of the name: the names arena may move while keys are interned */
    char path[SL__URL_MAX], why[400] = "";
    snprintf(path, sizeof path, "%s", h->names + h->path_off[i]);
    scan_ctx c = {s, i, -1, path, NULL, NULL};
    sl__wds_stats ws;
    int rc = sl__remote_index_shard(s, path, &h->objs[i], on_sample, &c, &c.read, &c.rctx, &ws, why, sizeof why);
    if (!rc) note_trailer(h, i, &ws);
    if (rc) scan_error(path, why, err, errlen);
    h->objs[i].name = NULL; /* pointed at the copy: set again once the arena is final */
    return rc;
}

/* Scan shard i into the table; keep its descriptor while under cap. */
static int index_shard(sl__source *s, uint32_t i, uint32_t cap, char *err, size_t errlen) {
    sl__shards *h = s->shards;
    if (h->objs) return index_remote_shard(s, i, err, errlen);
    const char *path = h->names + h->path_off[i];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        sl__msg(err, errlen, "%s: %s", path, fd < 0 ? strerror(e) : "not a regular file");
        if (fd >= 0) close(fd);
        return fd < 0 && e == ENOENT ? SL_ENOENT : SL_EIO;
    }
    scan_ctx c = {s, i, fd, path, NULL, NULL};
    char why[256] = "";
    sl__wds_stats ws;
    int rc = sl__wds_scan(fd, (uint64_t)st.st_size, s->b, on_sample, &c, &ws, why, sizeof why);
    if (!rc) note_trailer(h, i, &ws);
    if (rc) {
        scan_error(path, why, err, errlen);
        close(fd);
        return rc;
    }
    if (h->nopen < cap) {
        h->fds[i] = fd;
        h->nopen++;
    } else {
        close(fd);
    }
    return 0;
}

static int setup(sl__source *s, const char *path, const sl__colreq *req, uint32_t nreq, char *err, size_t errlen) {
    sl__shards *h = s->shards;
    if (nreq == 0 || nreq >= SL__MAX_COLS) {
        sl__msg(err, errlen, "%s: %u columns requested (1 to %d)", path, nreq, SL__MAX_COLS - 1);
        return SL_EINVAL;
    }
    int rc = sl__table_new(s->b, nreq + 1, &s->tab);
    for (uint32_t k = 0; k < nreq && !rc; k++) {
        if (req[k].type != SL__VAL_FILE && req[k].type != SL__VAL_INT) {
            sl__msg(err, errlen,
                    "%s: \"%s\" asks for %s; a tar sample's members are files and integer labels (a sequence or "
                    "a target needs a .jsonl manifest)",
                    path, req[k].key, req[k].type == SL__VAL_FILES ? "a list of files" : "numbers");
            return SL_EINVAL;
        }
        char low[2 * 64 + 64];
        size_t n = strlen(req[k].key);
        if (n >= sizeof low) return SL_ELIMIT;
        for (size_t i = 0; i <= n; i++) low[i] = (char)(req[k].key[i] >= 'A' && req[k].key[i] <= 'Z' ? req[k].key[i] + 32 : req[k].key[i]);
        rc = names_put(s->b, h, low, n, &h->key_off[k]);
        s->tab->types[k] = req[k].type;
    }
    h->ncols = nreq;
    if (rc) sl__msg(err, errlen, "%s: no memory for the index (%s)", path, sl_strerror(rc));
    return rc;
}

/* Without a schema: the image (WebDataset's image extensions) and the label. */
static const sl__colreq default_req[2] = {{"jpg;jpeg;png;webp", SL__VAL_FILE, SL__MEDIA_IMAGE},
                                          {"cls;label", SL__VAL_INT, 0}};

/* Every remote shard's size and ETag, asked all at once. */
static int stat_shards(sl__source *s, char *err, size_t errlen) {
    sl__shards *h = s->shards;
    const char **names = sl__alloc(s->b, (size_t)h->nshards * sizeof *names, SL_MEM_INDEX);
    if (!names) {
        sl__msg(err, errlen, "no memory for %u shards' names", h->nshards);
        return sl__nomem_code(s->b, (uint64_t)h->nshards * sizeof *names);
    }
    for (uint32_t i = 0; i < h->nshards; i++) names[i] = h->names + h->path_off[i];
    int rc = sl__remote_stat_all(s, h->objs, names, h->nshards, err, errlen);
    sl__free(s->b, names);
    return rc;
}

int sl__shards_index(sl__source *s, const char *path, int form, const sl__colreq *req, uint32_t nreq, char *err,
                     size_t errlen) {
    sl__budget *b = s->b;
    sl__shards *h = s->shards = sl__calloc(b, 1, sizeof *h, SL_MEM_INDEX);
    if (!h) {
        sl__msg(err, errlen, "%s: no memory for the index", path);
        return sl__nomem_code(b, sizeof *h);
    }
    if (!req) req = default_req, nreq = 2;
    int rc = list_shards(s, h, path, form, err, errlen);
    if (!rc && h->nshards == 0) {
        sl__msg(err, errlen, "%s: no .tar shards", path);
        rc = SL_EEMPTY;
    }
    if (!rc && !(h->fds = sl__alloc(b, (size_t)h->nshards * sizeof(int), SL_MEM_INDEX))) {
        rc = sl__nomem_code(b, (uint64_t)h->nshards * sizeof(int));
        sl__msg(err, errlen, "%s: no memory for %u shards", path, h->nshards);
    }
    for (uint32_t i = 0; h->fds && i < h->nshards; i++) h->fds[i] = -1;
    if (!rc && s->io && !(h->objs = sl__calloc(b, h->nshards, sizeof(sl__obj), SL_MEM_INDEX))) {
        rc = sl__nomem_code(b, (uint64_t)h->nshards * sizeof(sl__obj));
        sl__msg(err, errlen, "%s: no memory for %u shards", path, h->nshards);
    }
    if (!rc) rc = setup(s, path, req, nreq, err, errlen);
    if (!rc && h->objs && sl__remote_records_on()) rc = stat_shards(s, err, errlen); /* the records' names */
    uint32_t cap = fd_cap();
    for (uint32_t i = 0; !rc && i < h->nshards; i++) rc = index_shard(s, i, cap, err, errlen);
    if (!rc && h->trailers && h->trailers < h->nshards) {
        /* `sluice pack` ends every shard with a trailer: one without it in
         * such a set lost its end (cut, and the cut mended with zeros) or
         * came from elsewhere; either way not the set that was written */
        sl__msg(err, errlen, "%s has no shard trailer (%s) while %u other shards of the set have one: cut short, or "
                "not written with them", h->names + h->path_off[h->untrailed], SL_WDS_TRAILER, h->trailers);
        rc = SL_ECORRUPT;
    }
    for (uint32_t i = 0; !rc && h->objs && i < h->nshards; i++) h->objs[i].name = h->names + h->path_off[i];
    if (!rc && s->tab->nrows == 0) {
        sl__msg(err, errlen, "%s: the shards hold no samples", path);
        rc = SL_EEMPTY;
    }
    if (!rc) sl__table_shrink(b, s->tab);
    s->count = rc ? 0 : s->tab->nrows;
    s->ncols = h->ncols;
    return rc;
}

void sl__shards_free(sl__budget *b, sl__shards *h) {
    if (!h) return;
    for (uint32_t i = 0; h->fds && i < h->nshards; i++)
        if (h->fds[i] >= 0) close(h->fds[i]);
    sl__free(b, h->fds);
    sl__free(b, h->objs);
    sl__free(b, h->path_off);
    sl__free(b, h->names);
    sl__free(b, h);
}

uint32_t sl__shards_open_fds(const sl__source *s) { return s->shards ? s->shards->nopen : 0; }

/* ---- samples --------------------------------------------------------------------------- */

/* The FILE record of (i, col): shard, member key, offset, size. */
static int member_at(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, uint32_t *shard, uint32_t *key,
                     uint64_t *offset, uint64_t *size) {
    if (i >= s->count || col >= s->shards->ncols || elem || s->tab->types[col] != SL__VAL_FILE) return SL_EINVAL;
    const sl__rec *r = sl__table_at(s->tab, i, col);
    *shard = r->dir & SHARD_MASK;
    *key = r->dir >> SHARD_BITS;
    if (r->len != SL__BIG) {
        *offset = r->off, *size = r->len;
        return 0;
    }
    uint64_t pair[2];
    memcpy(pair, s->tab->arena + r->off, sizeof pair);
    *offset = pair[0], *size = pair[1];
    return 0;
}

int sl__shards_open_file(const sl__source *s, uint64_t i, uint32_t col, uint32_t elem, sl__sample_file *f,
                         char *reason, size_t rlen) {
    uint32_t shard, key;
    if (member_at(s, i, col, elem, &shard, &key, &f->offset, &f->size)) {
        sl__msg(reason, rlen, "column %u element %u of sample %llu is not a file", col, elem, (ull)i);
        return SL_EINVAL;
    }
    const sl__shards *h = s->shards;
    if (h->objs) { /* a remote shard: its member's range, read by ranged GETs */
        f->fd = -1;
        f->obj = &h->objs[shard];
        return 0;
    }
    int held = h->fds[shard];
    f->fd = held >= 0 ? fcntl(held, F_DUPFD_CLOEXEC, 0) : open(h->names + h->path_off[shard], O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        sl__msg(reason, rlen, "%s: %s", h->names + h->path_off[shard], strerror(e));
        return e == ENOENT ? SL_ENOENT : sl__transient(e) ? SL_EAGAIN : SL_EIO;
    }
    return 0;
}

int sl__shards_remote(const sl__source *s, uint64_t i, uint32_t col, const sl__obj **obj, uint64_t *off,
                      uint64_t *size) {
    uint32_t shard, key;
    if (!s->shards->objs || member_at(s, i, col, 0, &shard, &key, off, size)) return SL_EINVAL;
    *obj = &s->shards->objs[shard];
    return 0;
}

/* "shard:prefix" and, for a file column, ".key" after it. */
int sl__shards_path(const sl__source *s, uint64_t i, int col, char *buf, size_t len) {
    if (i >= s->count || !buf || len == 0 || len > INT_MAX) return SL_EINVAL;
    const sl__shards *h = s->shards;
    const sl__rec *p = sl__table_at(s->tab, i, h->ncols);
    uint32_t shard = p->dir, key = 0;
    uint64_t off, size;
    if (col >= 0 && member_at(s, i, (uint32_t)col, 0, &shard, &key, &off, &size)) return SL_EINVAL;
    int n = snprintf(buf, len, "%s:%.*s%s%s", h->names + h->path_off[shard], (int)p->len, s->tab->arena + p->off,
                     col >= 0 ? "." : "", col >= 0 ? h->names + h->mkey_off[key] : "");
    return n < 0 || (size_t)n >= len ? SL_EOVERFLOW : n;
}

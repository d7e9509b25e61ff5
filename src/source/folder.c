/*
 * ImageFolder indexing, in torchvision's order:
 *   classes  = subfolders of root (symlinks followed), sorted by name;
 *   label    = position in that order (an empty class keeps its label);
 *   samples  = for each class, os.walk(class, followlinks=True) sorted:
 *              directories by their whole path string, the files of one
 *              directory by name, kept when the name ends (any case) in
 *              .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp.
 * Hidden files and folders are not skipped (torchvision does not either).
 *
 * Speed: directories are read with getdents64 into one budgeted buffer per
 * thread; d_type says file or folder, so only symlinks and DT_UNKNOWN
 * entries cost an fstatat. Names go into each class's arena. Classes are
 * scanned by up to `threads` threads, each class by one thread, so the
 * result does not depend on the thread count.
 */
#define _GNU_SOURCE
#include "source/folder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/thread.h"
#include "base/util.h"

#define DENTS_BUF ((size_t)32 << 10)

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* torchvision's IMG_EXTENSIONS, matched case-insensitively on the end of
 * the name. Python's str.lower() maps no non-ASCII character to these
 * ASCII letters, so ASCII folding gives the same answer. Video folders
 * (the UCF101 / Kinetics layout) take the video containers instead. */
int sl__folder_ext_match(const char *name, size_t n, int media) {
    static const char *const image[] = {".jpg", ".jpeg", ".png",  ".ppm",  ".bmp",
                                        ".pgm", ".tif",  ".tiff", ".webp", NULL};
    static const char *const video[] = {".mp4", ".avi", ".mkv", ".webm", ".mov", NULL};
    const char *const *ext = media == SL__MEDIA_VIDEO ? video : image;
    char low[5];
    size_t k = n < 5 ? n : 5;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)name[n - k + i];
        low[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    for (size_t e = 0; ext[e]; e++) {
        size_t m = strlen(ext[e]);
        if (m <= k && memcmp(low + k - m, ext[e], m) == 0) return 1;
    }
    return 0;
}

/* Is entry `name` of dirfd a directory, symlinks followed (Python's
 * DirEntry.is_dir())? A broken link or a vanished entry is not. */
static int entry_is_dir(int dirfd, const char *name, unsigned char type) {
    if (type == DT_DIR) return 1;
    if (type != DT_LNK && type != DT_UNKNOWN) return 0;
    struct stat st;
    return fstatat(dirfd, name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

/* Per-thread scratch, reused across classes. */
typedef struct scan_tls {
    char *dents;       /* DENTS_BUF bytes */
    uint64_t *dev_ino; /* 2 per directory of the current class (loop check) */
    uint64_t dev_cap;  /* in uint64_t */
    uint32_t *rank;    /* sorted position of each directory */
    uint64_t rank_cap;
} scan_tls;

typedef struct scan {
    sl__budget *b;
    int rootfd;
    const sl__chunk *classes; /* recs: class names, sorted */
    sl__chunk *chunks;        /* one per class */
    uint32_t nclasses;
    _Atomic uint32_t next;    /* next class to take */
    _Atomic int rc;           /* first fatal error; set, scanning stops */
    int media;                /* SL__MEDIA_*: which extensions to index */
} scan;

static int tls_grow(sl__budget *b, void **p, uint64_t *cap, uint64_t need, size_t sz) {
    if (need <= *cap) return 0;
    uint64_t nc = *cap ? *cap : 64, bytes;
    while (nc < need) nc *= 2;
    if (sl__mul(nc, sz, &bytes) || bytes > SIZE_MAX / 2) return SL_EOVERFLOW;
    void *q = sl__realloc(b, *p, (size_t)bytes, SL_MEM_INDEX);
    if (!q) return sl__nomem_code(b, bytes);
    *p = q;
    *cap = nc;
    return 0;
}

/* Read directory q of chunk c (path relative to rootfd) and append its
 * files and subdirectories. Unreadable directories are skipped, as os.walk
 * skips them; only memory errors are returned. */
static int scan_dir(scan *sc, scan_tls *t, sl__chunk *c, uint32_t q) {
    sl__budget *b = sc->b;
    char path[PATH_MAX];
    const sl__rec d = c->dirs[q];
    if (d.len >= sizeof path) return 0; /* os.walk would fail to list it too */
    memcpy(path, c->arena + d.off, d.len);
    path[d.len] = 0;
    int fd = openat(sc->rootfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;

    /* A symlink back to an ancestor would make os.walk loop until paths get
     * too long; we list each directory once per chain of ancestors. */
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) goto out;
    if ((rc = tls_grow(b, (void **)&t->dev_ino, &t->dev_cap, 2 * ((uint64_t)q + 1), sizeof(uint64_t))))
        goto out;
    t->dev_ino[2 * q] = (uint64_t)st.st_dev;
    t->dev_ino[2 * q + 1] = (uint64_t)st.st_ino;
    for (uint32_t a = c->dirs[q].dir; a != SL__DIR_NONE; a = c->dirs[a].dir) {
        if (t->dev_ino[2 * a] == (uint64_t)st.st_dev && t->dev_ino[2 * a + 1] == (uint64_t)st.st_ino)
            goto out;
    }

    for (;;) {
        long n = syscall(SYS_getdents64, fd, t->dents, DENTS_BUF);
        if (n <= 0) break; /* end, or an error os.walk would ignore */
        for (long pos = 0; pos < n;) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(t->dents + pos);
            pos += e->d_reclen;
            const char *name = e->d_name;
            if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
            size_t nl = strlen(name);
            if (entry_is_dir(fd, name, e->d_type)) {
                /* path of the subfolder: the path of this one + "/" + name */
                if ((size_t)d.len + 1 + nl >= sizeof path) continue;
                path[d.len] = '/';
                memcpy(path + d.len + 1, name, nl);
                uint64_t off;
                if ((rc = sl__chunk_put(b, c, path, d.len + 1 + nl, &off))) goto out;
                if ((rc = sl__chunk_add_dir(b, c, off, (uint32_t)(d.len + 1 + nl), q))) goto out;
            } else if (sl__folder_ext_match(name, nl, sc->media)) {
                uint64_t off;
                if ((rc = sl__chunk_put(b, c, name, nl, &off))) goto out;
                if ((rc = sl__chunk_add_rec(b, c, off, (uint32_t)nl, q))) goto out;
            }
        }
    }
out:
    close(fd);
    return rc;
}

/* Index class k into sc->chunks[k]: walk, then order as torchvision. */
static int scan_class(scan *sc, scan_tls *t, uint32_t k) {
    sl__budget *b = sc->b;
    sl__chunk *c = &sc->chunks[k];
    const sl__rec *cn = &sc->classes->recs[k];
    c->label = k;
    uint64_t off;
    int rc = sl__chunk_put(b, c, sc->classes->arena + cn->off, cn->len, &off);
    if (!rc) rc = sl__chunk_add_dir(b, c, off, cn->len, SL__DIR_NONE);
    /* Breadth first: dirs grows while we walk it. */
    for (uint64_t q = 0; !rc && q < c->ndir; q++) {
        if (atomic_load_explicit(&sc->rc, memory_order_relaxed)) return 0; /* someone failed */
        rc = scan_dir(sc, t, c, (uint32_t)q);
    }
    if (rc) return rc;

    /* Directories by whole path string; then samples by (directory rank,
     * name). The parent links (in .dir) are no longer needed. */
    if (c->ndir > 1) {
        for (uint64_t q = 0; q < c->ndir; q++) c->dirs[q].dir = (uint32_t)q;
        sl__recs_sort(c->dirs, c->ndir, c->arena, 0);
        if ((rc = tls_grow(b, (void **)&t->rank, &t->rank_cap, c->ndir, sizeof(uint32_t)))) return rc;
        for (uint64_t q = 0; q < c->ndir; q++) t->rank[c->dirs[q].dir] = (uint32_t)q;
        for (uint64_t i = 0; i < c->nrec; i++) c->recs[i].dir = t->rank[c->recs[i].dir];
    }
    sl__recs_sort(c->recs, c->nrec, c->arena, 1);
    return sl__chunk_shrink(b, c);
}

static void *scan_worker(void *arg) {
    scan *sc = arg;
    scan_tls t = {0};
    int rc = 0;
    t.dents = sl__alloc(sc->b, DENTS_BUF, SL_MEM_INDEX);
    if (!t.dents) rc = sl__nomem_code(sc->b, DENTS_BUF);
    while (!rc && !atomic_load(&sc->rc)) {
        uint32_t k = atomic_fetch_add(&sc->next, 1);
        if (k >= sc->nclasses) break;
        rc = scan_class(sc, &t, k);
    }
    if (rc) {
        int zero = 0;
        atomic_compare_exchange_strong(&sc->rc, &zero, rc);
    }
    sl__free(sc->b, t.dents);
    sl__free(sc->b, t.dev_ino);
    sl__free(sc->b, t.rank);
    return NULL;
}

/* Class names of root: subfolders, symlinks followed, sorted. */
static int list_classes(sl__budget *b, int rootfd, sl__chunk *cl) {
    int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return SL_EIO;
    int rc = 0;
    char *buf = sl__alloc(b, DENTS_BUF, SL_MEM_INDEX);
    if (!buf) rc = sl__nomem_code(b, DENTS_BUF);
    while (!rc) {
        long n = syscall(SYS_getdents64, fd, buf, DENTS_BUF);
        if (n < 0) rc = SL_EIO;
        if (n <= 0) break;
        for (long pos = 0; pos < n && !rc;) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(buf + pos);
            pos += e->d_reclen;
            const char *name = e->d_name;
            if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
            if (!entry_is_dir(fd, name, e->d_type)) continue;
            size_t nl = strlen(name);
            uint64_t off;
            rc = sl__chunk_put(b, cl, name, nl, &off);
            if (!rc) rc = sl__chunk_add_rec(b, cl, off, (uint32_t)nl, 0);
        }
    }
    sl__free(b, buf);
    close(fd);
    if (!rc) sl__recs_sort(cl->recs, cl->nrec, cl->arena, 0);
    return rc;
}

static void budget_msg(sl__source *s, const char *root, int rc, char *err, size_t errlen) {
    char need[32], lim[32], used[32];
    uint64_t idx = atomic_load(&s->b->cat[SL_MEM_INDEX]), peak = atomic_load(&s->b->cat_peak[SL_MEM_INDEX]);
    if (rc == SL_EBUDGET)
        sl__msg(err, errlen,
                "%s: the index needs more than %s of memory but the budget is %s (%s in use by others); "
                "raise the budget",
                root, sl__fmt_bytes(peak, need, sizeof need), sl__fmt_bytes(sl__budget_limit(s->b), lim, sizeof lim),
                sl__fmt_bytes(atomic_load(&s->b->used) - idx, used, sizeof used));
    else
        sl__msg(err, errlen, "%s: indexing failed: %s", root, sl_strerror(rc));
}

int sl__folder_index(sl__source *s, const char *root, uint32_t threads, char *err, size_t errlen) {
    sl__budget *b = s->b;
    sl__chunk classes = {0};
    scan sc = {.b = b, .rootfd = -1, .media = s->media};
    int rc = 0;

    sc.rootfd = openat(s->basefd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sc.rootfd < 0) {
        int e = errno;
        sl__msg(err, errlen, "%s: cannot read folder: %s", root, strerror(e));
        return e == ENOENT ? SL_ENOENT : SL_EIO;
    }
    rc = list_classes(b, sc.rootfd, &classes);
    if (rc == SL_EIO) {
        sl__msg(err, errlen, "%s: cannot list folder: %s", root, strerror(errno));
        goto out;
    }
    if (rc) goto fail;
    if (classes.nrec == 0) {
        sl__msg(err, errlen, "%s: no class folders (expected ImageFolder layout: ROOT/CLASS/IMAGE)", root);
        rc = SL_EEMPTY;
        goto out;
    }
    if (classes.nrec > UINT32_MAX - 1) {
        sl__msg(err, errlen, "%s: too many class folders", root);
        rc = SL_EOVERFLOW;
        goto out;
    }
    s->chunks = sl__calloc(b, classes.nrec, sizeof(sl__chunk), SL_MEM_INDEX);
    if (!s->chunks) {
        rc = sl__nomem_code(b, classes.nrec * sizeof(sl__chunk));
        goto fail;
    }
    s->nchunks = (uint32_t)classes.nrec;
    s->num_classes = s->nchunks;
    sc.classes = &classes;
    sc.chunks = s->chunks;
    sc.nclasses = s->nchunks;

    /* The calling thread scans too; extra threads are a speed-up only, so
     * a failed pthread_create just means fewer of them. */
    uint32_t nt = threads ? threads : 1;
    if (nt > sc.nclasses) nt = sc.nclasses;
    if (nt > 64) nt = 64;
    pthread_t tid[64];
    uint32_t started = 0;
    for (uint32_t i = 1; i < nt; i++) {
        if (sl__thread_start(&tid[started], scan_worker, &sc, 0, "sl-scan") != 0) break;
        started++;
    }
    scan_worker(&sc);
    for (uint32_t i = 0; i < started; i++) pthread_join(tid[i], NULL);
    rc = atomic_load(&sc.rc);
    if (rc) goto fail;

    uint64_t total = 0;
    for (uint32_t k = 0; k < s->nchunks; k++) {
        s->chunks[k].first = total;
        total += s->chunks[k].nrec;
    }
    s->count = total;
    if (total == 0) {
        sl__msg(err, errlen, "%s: no %s files in %u class folder%s (looked for %s, any case)", root,
                s->media == SL__MEDIA_VIDEO ? "video" : "image", s->nchunks, s->nchunks == 1 ? "" : "s",
                s->media == SL__MEDIA_VIDEO ? ".mp4 .avi .mkv .webm .mov" : ".jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp");
        rc = SL_EEMPTY;
    }
    goto out;
fail:
    budget_msg(s, root, rc, err, errlen);
out:
    sl__chunk_free(b, &classes);
    if (sc.rootfd >= 0) close(sc.rootfd);
    return rc;
}

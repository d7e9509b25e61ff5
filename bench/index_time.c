/*
 * Indexing benchmark driver for bench/index_1m.sh (and a debugging aid).
 *
 *   index_time make DIR CLASSES FILES   create CLASSES folders of FILES empty
 *                                       files img_N.JPEG under DIR/train
 *   index_time time PATH [THREADS]      index PATH through the library, print
 *                                       one JSON line: samples, classes,
 *                                       seconds (wall; CPU user and system,
 *                                       all threads), index bytes (final, peak)
 *   index_time list PATH [THREADS]      print "label<TAB>path" per sample
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "source/source.h"

static int make_tree(const char *dir, long classes, long files) {
    char p[4096];
    snprintf(p, sizeof p, "%s/train", dir);
    if (mkdir(dir, 0755) && errno != EEXIST) return perror(dir), 1;
    if (mkdir(p, 0755) && errno != EEXIST) return perror(p), 1;
    int root = open(p, O_RDONLY | O_DIRECTORY);
    if (root < 0) return perror(p), 1;
    long n = 0;
    for (long c = 0; c < classes; c++) {
        char cls[32], name[64];
        snprintf(cls, sizeof cls, "n%08ld", c);
        if (mkdirat(root, cls, 0755) && errno != EEXIST) return perror(cls), 1;
        int cfd = openat(root, cls, O_RDONLY | O_DIRECTORY);
        if (cfd < 0) return perror(cls), 1;
        for (long f = 0; f < files; f++, n++) {
            snprintf(name, sizeof name, "img_%ld.JPEG", n);
            int fd = openat(cfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0) return perror(name), 1;
            close(fd);
        }
        close(cfd);
    }
    close(root);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "make") == 0) return make_tree(argv[2], atol(argv[3]), atol(argv[4]));
    if (argc < 3 || (strcmp(argv[1], "time") && strcmp(argv[1], "list"))) {
        fprintf(stderr, "usage: index_time make DIR CLASSES FILES | time PATH [THREADS] | list PATH [THREADS]\n");
        return 2;
    }
    uint32_t threads = argc > 3 ? (uint32_t)atoi(argv[3]) : 1;
    sl__budget b;
    sl__budget_init(&b, (uint64_t)8 << 30);
    sl__source *s;
    char err[512];
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    uint64_t t0 = sl__now_ns();
    int rc = sl__source_open(&b, argv[2], threads, &s, err, sizeof err);
    double sec = (double)(sl__now_ns() - t0) / 1e9;
    getrusage(RUSAGE_SELF, &r1);
#define TV(t) ((double)(t).tv_sec + (double)(t).tv_usec / 1e6)
    double user = TV(r1.ru_utime) - TV(r0.ru_utime), sys = TV(r1.ru_stime) - TV(r0.ru_stime);
    if (rc) {
        fprintf(stderr, "index_time: %s (%s)\n", err, sl_strerror(rc));
        return 1;
    }
    if (argv[1][0] == 'l') {
        char path[8192];
        for (uint64_t i = 0; i < sl__source_count(s); i++) {
            if (sl__source_path(s, i, path, sizeof path) < 0) return 1;
            printf("%lld\t%s\n", (long long)sl__source_label(s, i), path);
        }
    } else {
        printf("{\"samples\": %llu, \"classes\": %u, \"threads\": %u, \"seconds\": %.4f, "
               "\"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, \"index_bytes\": %llu, \"index_peak_bytes\": %llu}\n",
               (unsigned long long)sl__source_count(s), sl__source_num_classes(s), threads, sec, user, sys,
               (unsigned long long)atomic_load(&b.cat[SL_MEM_INDEX]),
               (unsigned long long)atomic_load(&b.cat_peak[SL_MEM_INDEX]));
    }
    sl__source_close(s);
    sl__budget_fini(&b);
    return 0;
}

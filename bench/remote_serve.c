/*
 * Serve the files of DIR over http:// from memory, on 127.0.0.1 and a port
 * the kernel picks (printed on stdout), with LO..HI ms added before each
 * answer, until stdin closes: the C server of bench/remote_bench.py (the
 * test server of tests/c/httpd.h: Range, ETag, If-Match, keep-alive, one
 * thread a connection), so that on a many-core host the server is not the
 * ceiling a Python one would be.
 *
 *   cc -O2 -pthread -Itests/c bench/remote_serve.c -o remote_serve
 *   remote_serve DIR LO_MS HI_MS [SEED]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "httpd.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: remote_serve DIR LO_MS HI_MS [SEED]\n");
        return 2;
    }
    hd_server *s = hd_start();
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[4096], url[256];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        struct stat st;
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        FILE *f = fopen(path, "rb");
        char *buf = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!f || !buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
            fprintf(stderr, "remote_serve: cannot read %s\n", path);
            return 1;
        }
        fclose(f);
        snprintf(url, sizeof url, "/%.250s", e->d_name);
        hd_put(s, url, buf, (size_t)st.st_size);
        free(buf);
    }
    closedir(d);
    hd_latency(s, (uint32_t)(atof(argv[2]) * 1000), (uint32_t)(atof(argv[3]) * 1000),
               argc > 4 ? strtoull(argv[4], NULL, 10) : 1);
    printf("%d\n", s->port);
    fflush(stdout);
    char b[256];
    while (fread(b, 1, sizeof b, stdin) > 0) {
    }
    fprintf(stderr, "remote_serve: %d requests\n", atomic_load(&s->requests));
    hd_stop(s);
    return 0;
}

/*
 * A small HTTP/1.1 server for the remote-I/O tests, in the test process:
 * 127.0.0.1 on a free port, one thread a connection, keep-alive. It serves
 * objects held in memory by path: GET with Range (bytes=A-B, A-), If-Match
 * against each object's ETag, 404 (an S3-style NoSuchKey body) for what it
 * does not hold, 416 for a range past the end.
 *
 * Faults, on a schedule that depends only on the request count (never on
 * time): request k (from 1) gets the fault when k % every == 0, for at most
 * `limit` requests (0: no limit). Kinds: 503 with S3's SlowDown body; a
 * body cut short (the full Content-Length announced, half sent, then the
 * connection closed); a connection reset (SO_LINGER 0); a stall (nothing
 * is answered until hd_stop or hd_release); a server that ignores Range
 * (200 and the whole object, for every request); HD_MIX: the first three
 * in turn.
 */
#ifndef SL_TEST_HTTPD_H
#define SL_TEST_HTTPD_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HD_FN static __attribute__((unused))
#define HD_OBJECTS 256
#define HD_CONNS 256

enum { HD_OK = 0, HD_503, HD_CUT, HD_RESET, HD_STALL, HD_NORANGE, HD_MIX /* 503, cut, reset in turn */ };

typedef struct hd_object {
    char path[256];
    uint8_t *data;
    size_t len;
    char etag[40];
} hd_object;

typedef struct hd_server {
    int lfd;
    int port;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hd_object obj[HD_OBJECTS];
    int nobj;
    int conns[HD_CONNS];  /* open connection sockets (-1: free) */
    int live;             /* connection threads running */
    int stopping, released;
    /* faults */
    int fault, every, limit, faulted;
    uint32_t lat_lo_us, lat_hi_us; /* a delay drawn from [lo, hi] before each answer (benchmarks) */
    uint64_t rng;
    _Atomic int requests, ranged, concurrent, peak, stalled;
} hd_server;

HD_FN void hd_put(hd_server *s, const char *path, const void *data, size_t len) {
    pthread_mutex_lock(&s->mu);
    hd_object *o = NULL;
    for (int i = 0; i < s->nobj; i++)
        if (!strcmp(s->obj[i].path, path)) o = &s->obj[i];
    if (!o && s->nobj == HD_OBJECTS) {
        fprintf(stderr, "httpd: more than %d objects\n", HD_OBJECTS);
        abort();
    }
    if (!o) o = &s->obj[s->nobj++];
    free(o->data);
    snprintf(o->path, sizeof o->path, "%s", path);
    o->data = malloc(len ? len : 1);
    if (len) memcpy(o->data, data, len);
    o->len = len;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ o->data[i]) * 1099511628211ull;
    snprintf(o->etag, sizeof o->etag, "\"%016llx\"", (unsigned long long)h);
    pthread_mutex_unlock(&s->mu);
}

HD_FN void hd_remove(hd_server *s, const char *path) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nobj; i++)
        if (!strcmp(s->obj[i].path, path)) s->obj[i].path[0] = 0;
    pthread_mutex_unlock(&s->mu);
}

/* Faults from now on: kind on every `every`-th request, at most limit times. */
HD_FN void hd_faults(hd_server *s, int kind, int every, int limit) {
    pthread_mutex_lock(&s->mu);
    s->fault = kind, s->every = every, s->limit = limit, s->faulted = 0;
    pthread_mutex_unlock(&s->mu);
}

/* Faults served since hd_faults (read under the server's lock: its
 * connection threads write the count). */
HD_FN int hd_faulted(hd_server *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->faulted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Add a delay drawn uniformly from [lo_us, hi_us] before each answer (a
 * seeded generator: the same delays in the same request order). */
HD_FN void hd_latency(hd_server *s, uint32_t lo_us, uint32_t hi_us, uint64_t seed) {
    pthread_mutex_lock(&s->mu);
    s->lat_lo_us = lo_us, s->lat_hi_us = hi_us, s->rng = seed | 1;
    pthread_mutex_unlock(&s->mu);
}

/* Let stalled requests go (they are then answered normally). */
HD_FN void hd_release(hd_server *s) {
    pthread_mutex_lock(&s->mu);
    s->released = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int hd_send(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

typedef struct hd_conn {
    hd_server *s;
    int fd, slot;
} hd_conn;

/* One request from fd into buf: its length with headers, 0 on close. */
static size_t hd_read_request(int fd, char *buf, size_t cap, size_t *have) {
    for (;;) {
        buf[*have] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end) return (size_t)(end - buf) + 4;
        if (*have + 1 >= cap) return 0;
        ssize_t r = recv(fd, buf + *have, cap - 1 - *have, 0);
        if (r <= 0) return 0;
        *have += (size_t)r;
    }
}

static void hd_header(const char *req, const char *name, char *out, size_t len) {
    out[0] = 0;
    size_t nl = strlen(name);
    for (const char *p = strstr(req, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        if (!strncasecmp(p + 2, name, nl) && p[2 + nl] == ':') {
            const char *v = p + 3 + nl;
            while (*v == ' ') v++;
            size_t n = strcspn(v, "\r\n");
            snprintf(out, len, "%.*s", (int)n, v);
            return;
        }
    }
}

/* Answer one request; 0 to keep the connection, -1 to close it. */
static int hd_answer(hd_server *s, int fd, const char *req) {
    char method[16], target[1024], range[128], ifmatch[128], hdr[512];
    if (sscanf(req, "%15s %1023s", method, target) != 2) return -1;
    int k = atomic_fetch_add(&s->requests, 1) + 1;
    int now = atomic_fetch_add(&s->concurrent, 1) + 1;
    if (now > atomic_load(&s->peak)) atomic_store(&s->peak, now);
    hd_header(req, "Range", range, sizeof range);
    hd_header(req, "If-Match", ifmatch, sizeof ifmatch);
    if (range[0]) atomic_fetch_add(&s->ranged, 1);
    int fault = HD_OK, rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->fault == HD_NORANGE) fault = HD_NORANGE;
    else if (s->fault && s->every && k % s->every == 0 && (!s->limit || s->faulted < s->limit)) {
        fault = s->fault;
        if (fault == HD_MIX) fault = HD_503 + s->faulted % 3;
        s->faulted++;
    }
    uint32_t delay = 0;
    if (s->lat_hi_us) {
        s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
        delay = s->lat_lo_us + (uint32_t)(s->rng % (s->lat_hi_us - s->lat_lo_us + 1));
    }
    if (delay) { /* outside the lock: requests wait their delays side by side */
        pthread_mutex_unlock(&s->mu);
        usleep(delay);
        pthread_mutex_lock(&s->mu);
    }
    if (fault == HD_STALL) {
        atomic_fetch_add(&s->stalled, 1);
        while (!s->stopping && !s->released) pthread_cond_wait(&s->cv, &s->mu);
        fault = s->stopping ? HD_RESET : HD_OK;
    }
    char *q = strchr(target, '?');
    if (q) *q = 0;
    /* the bytes asked for, copied (the object may be replaced meanwhile) */
    unsigned long long ra = 0, rb = ~0ull;
    char *dash = strchr(range, '-');
    if (range[0] && fault != HD_NORANGE) {
        if (strncmp(range, "bytes=", 6) || !dash) {
            pthread_mutex_unlock(&s->mu);
            atomic_fetch_sub(&s->concurrent, 1);
            return -1;
        }
        ra = strtoull(range + 6, NULL, 10);
        if (dash[1]) rb = strtoull(dash + 1, NULL, 10);
    }
    hd_object o = {{0}, NULL, 0, {0}};
    size_t base = 0;
    for (int i = 0; i < s->nobj; i++)
        if (s->obj[i].path[0] && !strcmp(s->obj[i].path, target)) {
            o = s->obj[i];
            size_t lo = ra < o.len ? (size_t)ra : o.len, hi = rb < o.len ? (size_t)rb + 1 : o.len;
            if (hi < lo) hi = lo;
            o.data = malloc(hi - lo + 1);
            memcpy(o.data, s->obj[i].data + lo, hi - lo);
            base = lo;
        }
    pthread_mutex_unlock(&s->mu);
    if (fault == HD_RESET) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        rc = -1;
        goto out;
    }
    if (fault == HD_503) {
        static const char body[] = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Reduce your request "
                                   "rate.</Message></Error>";
        snprintf(hdr, sizeof hdr, "HTTP/1.1 503 Slow Down\r\nContent-Length: %zu\r\nContent-Type: application/xml\r\n\r\n",
                 sizeof body - 1);
        rc = hd_send(fd, hdr, strlen(hdr)) || hd_send(fd, body, sizeof body - 1) ? -1 : 0;
        goto out;
    }
    if (!o.data) {
        static const char body[] = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The specified key "
                                   "does not exist.</Message></Error>";
        snprintf(hdr, sizeof hdr, "HTTP/1.1 404 Not Found\r\nContent-Length: %zu\r\n\r\n", sizeof body - 1);
        rc = hd_send(fd, hdr, strlen(hdr)) || hd_send(fd, body, sizeof body - 1) ? -1 : 0;
        goto out;
    }
    if (ifmatch[0] && strcmp(ifmatch, o.etag)) {
        snprintf(hdr, sizeof hdr, "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n");
        rc = hd_send(fd, hdr, strlen(hdr));
        goto out;
    }
    unsigned long long a = 0, b = o.len ? o.len - 1 : 0;
    int partial = 0;
    if (range[0] && fault != HD_NORANGE) {
        a = ra;
        if (rb != ~0ull) b = rb;
        if (a >= o.len) {
            snprintf(hdr, sizeof hdr, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%zu\r\n"
                     "Content-Length: 0\r\n\r\n", o.len);
            rc = hd_send(fd, hdr, strlen(hdr));
            goto out;
        }
        if (b >= o.len) b = o.len - 1;
        partial = 1;
    }
    size_t n = o.len ? (size_t)(b - a + 1) : 0;
    if (partial)
        snprintf(hdr, sizeof hdr, "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\nContent-Range: bytes "
                 "%llu-%llu/%zu\r\nETag: %s\r\n\r\n", n, a, b, o.len, o.etag);
    else
        snprintf(hdr, sizeof hdr, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nETag: %s\r\n\r\n", n, o.etag);
    if (hd_send(fd, hdr, strlen(hdr))) rc = -1;
    else if (fault == HD_CUT) {
        hd_send(fd, o.data + (a - base), n / 2);
        rc = -1;
    } else {
        rc = hd_send(fd, o.data + (a - base), n);
    }
out:
    free(o.data);
    atomic_fetch_sub(&s->concurrent, 1);
    return rc;
}

static void *hd_conn_main(void *arg) {
    hd_conn *c = arg;
    hd_server *s = c->s;
    char *buf = malloc(16384);
    size_t have = 0;
    for (;;) {
        size_t n = hd_read_request(c->fd, buf, 16384, &have);
        if (!n || hd_answer(s, c->fd, buf)) break;
        memmove(buf, buf + n, have - n);
        have -= n;
    }
    free(buf);
    pthread_mutex_lock(&s->mu);
    close(c->fd);
    s->conns[c->slot] = -1;
    s->live--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(c);
    return NULL;
}

static void *hd_accept_main(void *arg) {
    hd_server *s = arg;
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) break;
        pthread_mutex_lock(&s->mu);
        int slot = -1;
        for (int i = 0; i < HD_CONNS && slot < 0; i++)
            if (s->conns[i] < 0) slot = i;
        int stopping = s->stopping;
        if (stopping || slot < 0) {
            pthread_mutex_unlock(&s->mu);
            close(fd);
            if (stopping) break;
            continue;
        }
        s->conns[slot] = fd;
        s->live++;
        int one = 1; /* no Nagle wait between a response's header and its body */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_mutex_unlock(&s->mu);
        hd_conn *c = malloc(sizeof *c);
        c->s = s, c->fd = fd, c->slot = slot;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_create(&t, &at, hd_conn_main, c);
        pthread_attr_destroy(&at);
    }
    return NULL;
}

HD_FN hd_server *hd_start(void) {
    hd_server *s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < HD_CONNS; i++) s->conns[i] = -1;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 128)) {
        perror("hd_start");
        exit(1);
    }
    socklen_t al = sizeof a;
    getsockname(s->lfd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->acceptor, NULL, hd_accept_main, s);
    return s;
}

/* "http://127.0.0.1:PORT" + path into out. */
HD_FN const char *hd_url(const hd_server *s, const char *path, char *out, size_t len) {
    snprintf(out, len, "http://127.0.0.1:%d%s", s->port, path);
    return out;
}

HD_FN void hd_stop(hd_server *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    for (int i = 0; i < HD_CONNS; i++)
        if (s->conns[i] >= 0) shutdown(s->conns[i], SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
    shutdown(s->lfd, SHUT_RDWR);
    pthread_join(s->acceptor, NULL);
    close(s->lfd);
    pthread_mutex_lock(&s->mu);
    while (s->live) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nobj; i++) free(s->obj[i].data);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

#endif

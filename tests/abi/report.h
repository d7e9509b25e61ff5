/*
 * What each side of test_abi read, as plain named values: old_0_1.c is
 * compiled against 0.1's header, test_abi.c against today's, and the two
 * cannot share a sluice type, so each writes what it read here and the
 * test compares the two reports key by key. No sluice header.
 */
#ifndef SL_ABI_REPORT_H
#define SL_ABI_REPORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct abi_val {
    char key[80];
    char kind;       /* 'u' unsigned, 'i' signed, 'd' double, 's' string */
    uint64_t u;
    int64_t i;
    double d;
    char s[200];
} abi_val;

typedef struct abi_report {
    size_t n, cap;
    abi_val *v;
} abi_report;

abi_report *abi_new(void);
void abi_free(abi_report *r);
/* Add a value under a printf-made key. */
void abi_u(abi_report *r, uint64_t v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void abi_i(abi_report *r, int64_t v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void abi_d(abi_report *r, double v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void abi_s(abi_report *r, const char *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The value under key, or NULL. */
const abi_val *abi_get(const abi_report *r, const char *key);
/* A field's place in its struct: T.f.offset, T.f.size, T.f.align. */
void abi_field(abi_report *r, const char *type, const char *field, size_t offset, size_t size, size_t align);

/* The part built against 0.1's header (old_0_1.c). Handles are opaque to
 * both sides, so they cross as void *. Each returns 0 or a negative code
 * and adds what it read to r; err gets the library's sentence. */
void abi01_layout(abi_report *r);
int abi01_loader_create(const char *root, void *shared_budget, void **ld, char *err, size_t errlen);
void abi01_loader_destroy(void *ld);
int abi01_next(void *ld, void **batch);
void abi01_release(void *ld, void *batch);
void abi01_batch(void *batch, abi_report *r);
int abi01_stats(void *ld, abi_report *r);
void abi01_errors(void *ld, abi_report *r);
int abi01_get_state(void *ld, abi_report *r);
int abi01_resume(void *ld);
int abi01_plan(const char *root, abi_report *r, char *err, size_t errlen);
void abi01_decode_opts(abi_report *r);
int abi01_image(const void *data, size_t len, abi_report *r);
void abi01_video_opts(abi_report *r);
int abi01_video(const char *path, abi_report *r);
void abi01_governor_opts(abi_report *r);
int abi01_budget_govern(void *budget, const char *cgroup_dir, char *err, size_t errlen);
int abi01_budget(void *budget, abi_report *r);
int abi01_source(const char *manifest, abi_report *r, char *err, size_t errlen);

#endif

/*
 * Minimal test harness. A test file holds cases written
 *     TEST(name) { ... }
 * at the start of a line; CMake registers each case as its own ctest test
 * (own process, timeout), running `test_file name`. Checks print both sides
 * and never vanish under NDEBUG.
 */
#ifndef SL_CHECK_H
#define SL_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*sl_test_fn)(void);
struct sl_test_case {
    const char *name;
    sl_test_fn fn;
};
#define SL_MAX_CASES 128
static struct sl_test_case sl_cases[SL_MAX_CASES];
static int sl_ncases;

#define TEST(name)                                                                   \
    static void test_##name(void);                                                   \
    __attribute__((constructor)) static void reg_##name(void) {                      \
        if (sl_ncases < SL_MAX_CASES) sl_cases[sl_ncases++] = (struct sl_test_case){#name, test_##name}; \
    }                                                                                \
    static void test_##name(void)

#define SL_FAIL(...)                                                                 \
    do {                                                                             \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                              \
        fprintf(stderr, __VA_ARGS__);                                                \
        fprintf(stderr, "\n");                                                       \
        exit(1);                                                                     \
    } while (0)

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) SL_FAIL("CHECK(%s) failed", #cond);                             \
    } while (0)

#define CHECK_EQ(a, b)                                                               \
    do {                                                                             \
        long long va_ = (long long)(a), vb_ = (long long)(b);                        \
        if (va_ != vb_) SL_FAIL("CHECK_EQ(%s, %s): %lld != %lld", #a, #b, va_, vb_); \
    } while (0)

#define CHECK_LE(a, b)                                                               \
    do {                                                                             \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b); \
        if (!(va_ <= vb_)) SL_FAIL("CHECK_LE(%s, %s): %llu > %llu", #a, #b, va_, vb_); \
    } while (0)

/* rc must be 0; prints sl_strerror otherwise. */
#define CHECK_OK(expr)                                                               \
    do {                                                                             \
        int rc_ = (expr);                                                            \
        if (rc_ != 0) SL_FAIL("%s returned %d (%s)", #expr, rc_, sl_strerror(rc_));  \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                              \
    do {                                                                             \
        const char *h_ = (hay), *n_ = (needle);                                      \
        if (!h_ || !strstr(h_, n_)) SL_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2) {
        for (int i = 0; i < sl_ncases; i++) printf("%s\n", sl_cases[i].name);
        return 0;
    }
    for (int i = 0; i < sl_ncases; i++) {
        if (strcmp(sl_cases[i].name, argv[1]) == 0) {
            sl_cases[i].fn();
            return 0;
        }
    }
    fprintf(stderr, "no test case %s\n", argv[1]);
    return 2;
}

#endif

/* Sizes written by people (sl_parse_size, sl_parse_size_msg): what is
 * taken, exactly, and every way of being refused with its message. */
#include <stdint.h>

#include "check.h"
#include "sluice.h"

static uint64_t parsed(const char *s) {
    uint64_t v = 12345;
    char err[256] = "";
    int rc = sl_parse_size_msg(s, &v, err, sizeof err);
    if (rc) SL_FAIL("sl_parse_size_msg(\"%s\") = %d: %s", s, rc, err);
    return v;
}

/* The refusal's code, its message in err, and *out untouched. */
static int refused(const char *s, char *err, size_t len) {
    uint64_t v = 777;
    err[0] = 0;
    int rc = sl_parse_size_msg(s, &v, err, len);
    CHECK(rc < 0);
    CHECK_EQ(v, 777);
    CHECK(err[0] != 0);
    return rc;
}

TEST(binary_units) {
    CHECK_EQ(parsed("0"), 0);
    CHECK_EQ(parsed("1000"), 1000);
    CHECK_EQ(parsed("1000B"), 1000);
    CHECK_EQ(parsed("512K"), 512ull << 10);
    CHECK_EQ(parsed("512M"), 512ull << 20);
    CHECK_EQ(parsed("2G"), 2ull << 30);
    CHECK_EQ(parsed("2g"), 2ull << 30);
    CHECK_EQ(parsed("2Gi"), 2ull << 30);
    CHECK_EQ(parsed("2GiB"), 2ull << 30);
    CHECK_EQ(parsed("3T"), 3ull << 40);
    CHECK_EQ(parsed(" 64M "), 64ull << 20);
}

TEST(fractions_are_exact) {
    CHECK_EQ(parsed("1.5G"), 3ull << 29);
    CHECK_EQ(parsed("0.5K"), 512);
    CHECK_EQ(parsed("0.3K"), 307); /* 307.2 bytes: the fraction of a byte is dropped */
    CHECK_EQ(parsed("1.25MiB"), 5ull << 18);
}

TEST(limits_of_64_bits) {
    CHECK_EQ(parsed("18446744073709551615"), UINT64_MAX);
    CHECK_EQ(parsed("16777215T"), 16777215ull << 40);
    char err[256];
    CHECK_EQ(refused("18446744073709551616", err, sizeof err), SL_EOVERFLOW);
    CHECK_STR_CONTAINS(err, "does not fit in 64 bits");
    CHECK_EQ(refused("16777216T", err, sizeof err), SL_EOVERFLOW);
}

TEST(decimal_units_refused) {
    char err[256];
    CHECK_EQ(refused("2GB", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "did you mean 2G (GiB, powers of 1024)?");
    CHECK_EQ(refused("512MB", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "did you mean 512M (MiB");
    CHECK_EQ(refused("1.5gb", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "did you mean 1.5G (GiB");
    CHECK_EQ(refused("8kB", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "did you mean 8K (KiB");
}

TEST(not_a_number) {
    char err[256];
    CHECK_EQ(refused("lots", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "'lots' is not a size");
    CHECK_EQ(refused("", err, sizeof err), SL_EINVAL);
    CHECK_EQ(refused("M", err, sizeof err), SL_EINVAL);
    CHECK_EQ(refused("0x10", err, sizeof err), SL_EINVAL);
    CHECK_EQ(refused("1e3", err, sizeof err), SL_EINVAL);
    CHECK_EQ(refused("5.", err, sizeof err), SL_EINVAL);
}

TEST(unknown_unit) {
    char err[256];
    CHECK_EQ(refused("12Q", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "unexpected 'Q'");
    CHECK_EQ(refused("2GiBs", err, sizeof err), SL_EINVAL);
    CHECK_EQ(refused("2 G", err, sizeof err), SL_EINVAL);
}

TEST(negative) {
    char err[256];
    CHECK_EQ(refused("-1", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "negative");
    CHECK_EQ(refused(" -2G", err, sizeof err), SL_EINVAL);
}

TEST(fraction_of_a_byte) {
    char err[256];
    CHECK_EQ(refused("1.5", err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "fraction of a byte");
    CHECK_EQ(refused("1.5B", err, sizeof err), SL_EINVAL);
}

TEST(null_arguments) {
    uint64_t v;
    char err[64];
    CHECK_EQ(sl_parse_size_msg(NULL, &v, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "no size");
    CHECK_EQ(sl_parse_size("1K", NULL), SL_EINVAL);
    /* no buffer for the message is fine; a short one is cut, NUL-terminated */
    CHECK_EQ(sl_parse_size("2GB", &v), SL_EINVAL);
    char tiny[8];
    CHECK_EQ(sl_parse_size_msg("2GB", &v, tiny, sizeof tiny), SL_EINVAL);
    CHECK_EQ(strlen(tiny), sizeof tiny - 1);
}

/*
 * Element conversion between the array dtypes, with the rules of
 * ops/array.h: one loop per (source, destination) pair, generated below,
 * loads and stores through memcpy (any alignment), native byte order.
 */
#include <math.h>
#include <string.h>

#include "ops/array.h"

/* ---- half floats ------------------------------------------------------------ */

static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, bits;
    if (e == 0 && m == 0) {
        bits = s;
    } else if (e == 0) { /* subnormal: m * 2^-24, normalised */
        e = 113;
        while (!(m & 0x400u)) m <<= 1, e--;
        bits = s | e << 23 | (m & 0x3FFu) << 13;
    } else if (e == 31) {
        bits = s | 0x7F800000u | m << 13; /* inf, NaN (payload kept) */
    } else {
        bits = s | (e + 112) << 23 | m << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, straight from the double (as numpy's
 * npy_double_to_half): no double rounding through float. */
static uint16_t f64_to_f16(double d) {
    uint64_t b;
    memcpy(&b, &d, 8);
    uint16_t s = (uint16_t)((b >> 48) & 0x8000u);
    uint64_t e = (b >> 52) & 0x7FFu, m = b & 0xFFFFFFFFFFFFFull;
    if (e == 0x7FF) {
        if (!m) return s | 0x7C00u;
        uint16_t r = (uint16_t)(0x7C00u | (m >> 42));
        return s | (r == 0x7C00u ? 0x7C01u : r); /* a NaN stays a NaN */
    }
    int64_t ue = (int64_t)e - 1023 + 15;
    if (ue >= 31) return s | 0x7C00u;
    if (ue <= 0) {
        if (ue < -10) return s;
        m |= (uint64_t)1 << 52;
        int shift = (int)(43 - ue);
        uint64_t h = m >> shift, rem = m & (((uint64_t)1 << shift) - 1), half = (uint64_t)1 << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return s | (uint16_t)h;
    }
    uint64_t rem = m & (((uint64_t)1 << 42) - 1), half = (uint64_t)1 << 41;
    uint32_t r = (uint32_t)((uint64_t)ue << 10 | m >> 42);
    if (rem > half || (rem == half && (r & 1))) r++; /* a carry may reach inf: right */
    return s | (uint16_t)r;
}

/* ---- loads and stores ----------------------------------------------------------- */

#define LD(T)                                                                                      \
    static inline T ld_##T(const uint8_t *p) {                                                     \
        T v;                                                                                       \
        memcpy(&v, p, sizeof v);                                                                   \
        return v;                                                                                  \
    }
LD(uint8_t)
LD(int8_t)
LD(int16_t)
LD(int32_t)
LD(int64_t)
LD(uint16_t)
LD(uint32_t)
LD(uint64_t)
LD(float)
LD(double)
static inline float ld_f16(const uint8_t *p) { return f16_to_f32(ld_uint16_t(p)); }
static inline uint8_t ld_b1(const uint8_t *p) { return p[0] != 0; }

/* Float to integer: truncation, NaN 0, saturation outside the range. */
#define SAT(T, LO, HI)                                                                             \
    static inline T sat_##T(double v) {                                                            \
        if (v != v) return 0;                                                                      \
        if (v <= (double)(LO)) return (T)(LO);                                                     \
        if (v >= (double)(HI)) return (T)(HI);                                                     \
        return (T)v;                                                                               \
    }
SAT(uint8_t, 0, UINT8_MAX)
SAT(int8_t, INT8_MIN, INT8_MAX)
SAT(int16_t, INT16_MIN, INT16_MAX)
SAT(int32_t, INT32_MIN, INT32_MAX)
SAT(uint16_t, 0, UINT16_MAX)
SAT(uint32_t, 0, UINT32_MAX)
/* 64-bit: (double)INT64_MAX is 2^63, not representable: compare to 2^63 */
static inline int64_t sat_int64_t(double v) {
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}
static inline uint64_t sat_uint64_t(double v) {
    if (v != v || v <= 0) return 0;
    if (v >= 18446744073709551616.0) return UINT64_MAX;
    return (uint64_t)v;
}

#define IS_FLOAT(v) _Generic((v), float: 1, double: 1, default: 0)
#define ST_INT(T)                                                                                  \
    static inline void st_##T##_i(uint8_t *p, T v) { memcpy(p, &v, sizeof v); }
ST_INT(uint8_t)
ST_INT(int8_t)
ST_INT(int16_t)
ST_INT(int32_t)
ST_INT(int64_t)
ST_INT(uint16_t)
ST_INT(uint32_t)
ST_INT(uint64_t)
/* Integer stores: floats saturate, integers wrap (C conversion). */
#define ST_I(T, p, v) st_##T##_i((p), IS_FLOAT(v) ? sat_##T((double)(v)) : (T)(v))
static inline void st_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }
static inline void st_f64(uint8_t *p, double v) { memcpy(p, &v, 8); }
static inline void st_f16(uint8_t *p, double v) {
    uint16_t h = f64_to_f16(v);
    memcpy(p, &h, 2);
}

/* Destination stores by short name; v is the loaded source value. */
#define ST_u8(p, v) ST_I(uint8_t, p, v)
#define ST_i8(p, v) ST_I(int8_t, p, v)
#define ST_i16(p, v) ST_I(int16_t, p, v)
#define ST_i32(p, v) ST_I(int32_t, p, v)
#define ST_i64(p, v) ST_I(int64_t, p, v)
#define ST_u16(p, v) ST_I(uint16_t, p, v)
#define ST_u32(p, v) ST_I(uint32_t, p, v)
#define ST_u64(p, v) ST_I(uint64_t, p, v)
#define ST_f16(p, v) st_f16((p), (double)(v))
#define ST_f32(p, v) st_f32((p), (float)(v))
#define ST_f64(p, v) st_f64((p), (double)(v))
#define ST_b1(p, v) ((p)[0] = (uint8_t)((v) != 0))

#define LD_u8 ld_uint8_t
#define LD_i8 ld_int8_t
#define LD_i16 ld_int16_t
#define LD_i32 ld_int32_t
#define LD_i64 ld_int64_t
#define LD_u16 ld_uint16_t
#define LD_u32 ld_uint32_t
#define LD_u64 ld_uint64_t
#define LD_f16 ld_f16
#define LD_f32 ld_float
#define LD_f64 ld_double
#define LD_b1 ld_b1

/* (short name, SL_DTYPE_ code, bytes) for every dtype; two copies of the
 * list, since a macro cannot expand inside itself. */
#define TYPES_S(X, D)                                                                              \
    X(u8, UINT8, 1, D) X(i8, INT8, 1, D) X(i16, INT16, 2, D) X(i32, INT32, 4, D) X(i64, INT64, 8, D) \
    X(u16, UINT16, 2, D) X(u32, UINT32, 4, D) X(u64, UINT64, 8, D) X(f16, FLOAT16, 2, D)          \
    X(f32, FLOAT32, 4, D) X(f64, FLOAT64, 8, D) X(b1, BOOL, 1, D)
#define TYPES_D(X)                                                                                 \
    X(u8, UINT8) X(i8, INT8) X(i16, INT16) X(i32, INT32) X(i64, INT64) X(u16, UINT16) X(u32, UINT32) \
    X(u64, UINT64) X(f16, FLOAT16) X(f32, FLOAT32) X(f64, FLOAT64) X(b1, BOOL)

#define CONV(S, SC, SZ, D)                                                                         \
    static void conv_##S##_##D(const void *s, void *d, uint64_t n, uint64_t stride) {              \
        const uint8_t *src = s;                                                                    \
        uint8_t *dst = d;                                                                          \
        for (uint64_t i = 0; i < n; i++) ST_##D(dst + i * stride, LD_##S(src + i * SZ));           \
    }
#define CONV_ROW(D, DC) TYPES_S(CONV, D)
TYPES_D(CONV_ROW)

#define ENTRY(S, SC, SZ, D) {SL_DTYPE_##SC, conv_##S##_##D},
#define ENTRY_ROW(D, DC) {SL_DTYPE_##DC, {TYPES_S(ENTRY, D)}},
static const struct {
    int to;
    struct {
        int from;
        sl__convert_fn fn;
    } from[12];
} conv_table[12] = {TYPES_D(ENTRY_ROW)};

sl__convert_fn sl__array_converter(int from, int to) {
    for (int i = 0; i < 12; i++) {
        if (conv_table[i].to != to) continue;
        for (int j = 0; j < 12; j++)
            if (conv_table[i].from[j].from == from) return conv_table[i].from[j].fn;
    }
    return NULL;
}

int sl__array_convert(int from, int to, const void *src, void *dst, uint64_t n, uint64_t dst_stride) {
    size_t size = sl_dtype_size(from);
    sl__convert_fn fn = sl__array_converter(from, to);
    if (!fn) return SL_EINVAL;
    if (from == to && dst_stride == size) memcpy(dst, src, (size_t)(n * size)); /* a plain copy */
    else fn(src, dst, n, dst_stride);
    return 0;
}

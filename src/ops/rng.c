/* xoshiro256** seeded through splitmix64 from (seed, epoch, index). */
#include <string.h>

#include "base/hash.h"
#include "ops/ops.h"

uint64_t sl__rng_stream(const char *group) {
    return group ? sl__hash64(group, strlen(group), 0) ^ sl__hash64("image", 5, 0) : 0;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sl__rng_init(sl__rng *r, uint64_t seed, uint64_t epoch, uint64_t index) {
    uint64_t x = seed;
    x = splitmix(&x) ^ epoch;
    x = splitmix(&x) ^ index;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sl__rng_next(sl__rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double sl__rng_uniform(sl__rng *r) { return (double)(sl__rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t sl__rng_below(sl__rng *r, uint64_t n) {
    if (n <= 1) return 0;
    /* Lemire's multiply-shift with rejection */
    __uint128_t m = (__uint128_t)sl__rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            m = (__uint128_t)sl__rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

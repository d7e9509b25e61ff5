/* 64-bit hash (the XXH64 construction) for checksums of delivered data. */
#ifndef SL_HASH_H
#define SL_HASH_H
#include <stddef.h>
#include <stdint.h>
uint64_t sl__hash64(const void *data, size_t len, uint64_t seed);
#endif

/* ctest: tsan */
/* The GPU engine's fixed-region allocator (src/gpu/pool.c): pure
 * arithmetic over offsets, tested without a GPU. */
#include <pthread.h>

#include "check.h"
#include "gpu/pool.h"

#define BASE 0x7f0000000000ull

static sl__budget host;

static void pool(sl__pool *p, uint64_t size, uint32_t blocks) {
    CHECK_OK(sl__budget_init(&host, 1 << 20));
    CHECK_OK(sl__pool_init(p, &host, BASE, size, 256, blocks));
}

TEST(first_fit_split_and_merge) {
    sl__pool p;
    pool(&p, 4096, 16);
    uint64_t a = sl__pool_alloc(&p, 100), b = sl__pool_alloc(&p, 256), c = sl__pool_alloc(&p, 257);
    CHECK_EQ(a, BASE);
    CHECK_EQ(b, BASE + 256);   /* 100 rounded up to the alignment */
    CHECK_EQ(c, BASE + 512);
    sl__pool_stats st;
    sl__pool_stats_get(&p, &st);
    CHECK_EQ(st.used, 1024);   /* 256 + 256 + 512 */
    CHECK_EQ(st.blocks, 3);
    CHECK_OK(sl__pool_free(&p, b));
    CHECK_EQ(sl__pool_alloc(&p, 512), BASE + 1024); /* the 256 hole is too small */
    CHECK_EQ(sl__pool_alloc(&p, 200), BASE + 256);  /* first fit takes the hole */
    CHECK_OK(sl__pool_free(&p, a));
    CHECK_OK(sl__pool_free(&p, BASE + 256));
    CHECK_OK(sl__pool_free(&p, c));
    CHECK_OK(sl__pool_free(&p, BASE + 1024));
    sl__pool_stats_get(&p, &st);
    CHECK_EQ(st.used, 0);
    CHECK_EQ(st.peak, 1536);
    CHECK_EQ(st.largest_free, 4096); /* merged back into one extent */
    CHECK_EQ(p.n, 1);
    sl__pool_fini(&p);
    CHECK_EQ(atomic_load(&host.used), 0);
}

TEST(full_pool_refuses_and_counts) {
    sl__pool p;
    pool(&p, 1024, 16);
    CHECK_EQ(sl__pool_alloc(&p, 1024), BASE);
    CHECK_EQ(sl__pool_alloc(&p, 1), 0);
    CHECK_EQ(sl__pool_alloc(&p, 0), 0);
    CHECK_EQ(sl__pool_alloc(&p, 1ull << 40), 0);
    sl__pool_stats st;
    sl__pool_stats_get(&p, &st);
    CHECK_EQ(st.fails, 2); /* 0 bytes is a bad request, not a refusal */
    CHECK_EQ(st.used, 1024);
    sl__pool_fini(&p);
}

TEST(table_full_refuses_a_split) {
    sl__pool p;
    pool(&p, 4096, 2);
    CHECK(sl__pool_alloc(&p, 256) != 0); /* extents: used, free */
    CHECK_EQ(sl__pool_alloc(&p, 256), 0); /* would need a third */
    CHECK(sl__pool_alloc(&p, 4096 - 256) != 0); /* an exact fit needs no split */
    sl__pool_fini(&p);
}

TEST(free_of_a_non_block_changes_nothing) {
    sl__pool p;
    pool(&p, 4096, 16);
    uint64_t a = sl__pool_alloc(&p, 512);
    CHECK_EQ(sl__pool_free(&p, a + 256), SL_EINVAL);
    CHECK_EQ(sl__pool_free(&p, BASE + 4096), SL_EINVAL);
    CHECK_EQ(sl__pool_free(&p, 12), SL_EINVAL);
    CHECK_EQ(sl__pool_free(&p, BASE + 512), SL_EINVAL); /* the free rest */
    CHECK_OK(sl__pool_free(&p, a));
    CHECK_EQ(sl__pool_free(&p, a), SL_EINVAL); /* twice */
    sl__pool_stats st;
    sl__pool_stats_get(&p, &st);
    CHECK_EQ(st.used, 0);
    sl__pool_fini(&p);
}

TEST(init_refuses_bad_arguments) {
    sl__pool p;
    CHECK_OK(sl__budget_init(&host, 1 << 20));
    CHECK_EQ(sl__pool_init(&p, &host, 0, 4096, 256, 4), SL_EINVAL);
    CHECK_EQ(sl__pool_init(&p, &host, BASE, 4096, 100, 4), SL_EINVAL);
    CHECK_EQ(sl__pool_init(&p, &host, BASE, 4000, 256, 4), SL_EINVAL);
    CHECK_EQ(sl__pool_init(&p, &host, BASE, 0, 256, 4), SL_EINVAL);
    CHECK_EQ(sl__pool_init(&p, &host, BASE, 4096, 256, 0), SL_EINVAL);
    CHECK_EQ(atomic_load(&host.used), 0);
}

TEST(init_table_counts_in_the_host_budget) {
    sl__pool p;
    CHECK_OK(sl__budget_init(&host, 1024));
    CHECK_EQ(sl__pool_init(&p, &host, BASE, 4096, 256, 1000), SL_EBUDGET);
    CHECK_EQ(atomic_load(&host.used), 0);
    CHECK_OK(sl__pool_init(&p, &host, BASE, 4096, 256, 8));
    CHECK(atomic_load(&host.cat[SL_MEM_OTHER]) >= 8 * sizeof(sl__pool_ext));
    sl__pool_fini(&p);
    CHECK_EQ(atomic_load(&host.used), 0);
}

/* nvJPEG may call the hooks from its own threads: the pool stays whole. */
static sl__pool shared;

static void *churn(void *arg) {
    uint64_t held[8] = {0};
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < 2000; i++) {
        int k = (int)(seed % 8);
        seed = seed * 1103515245u + 12345u;
        if (held[k]) {
            CHECK_OK(sl__pool_free(&shared, held[k]));
            held[k] = 0;
        } else {
            held[k] = sl__pool_alloc(&shared, 256 + seed % 3000);
        }
    }
    for (int k = 0; k < 8; k++)
        if (held[k]) CHECK_OK(sl__pool_free(&shared, held[k]));
    return NULL;
}

TEST(threads_leave_the_pool_whole) {
    CHECK_OK(sl__budget_init(&host, 1 << 20));
    CHECK_OK(sl__pool_init(&shared, &host, BASE, 1 << 20, 256, 512));
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) CHECK_OK(pthread_create(&t[i], NULL, churn, (void *)(i + 1)));
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    sl__pool_stats st;
    sl__pool_stats_get(&shared, &st);
    CHECK_EQ(st.used, 0);
    CHECK_EQ(st.blocks, 0);
    CHECK_EQ(shared.n, 1);
    CHECK_EQ(st.largest_free, 1 << 20);
    sl__pool_fini(&shared);
}

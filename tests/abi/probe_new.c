/*
 * abi_probe DATASET: a program built against today's header that may run
 * against an older libsluice (docs/abi.md, "Running on an older
 * library"). test_abi runs it against today's library and against 0.1's
 * and compares what it prints (key=value lines). It does what such a
 * program must: asks sl_version_number() first; against 0.1 it calls only
 * what 0.1 has (0.1's calls by name in parentheses, which the header's
 * macros leave alone) and reads no field past what 0.1 fills. Along the
 * way it checks what the protocol says an older library does:
 *  - sl_config_init in 0.1 records 0.1's size, not the caller's: the
 *    caller sees the library knows less than its header;
 *  - a struct_size past what the library knows is refused, never misread;
 *  - a sized call fills what the library knows and leaves the rest;
 *  - the calls added since are absent (dlsym finds none).
 * Linked with -z lazy, so that the 0.2 calls it never makes against 0.1
 * need not resolve. Exit 0, or 1 with the reason on stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        fprintf(stderr, "abi_probe: " __VA_ARGS__);                                                                \
        fputc('\n', stderr);                                                                                       \
        exit(1);                                                                                                   \
    } while (0)
#define OK(expr)                                                                                                   \
    do {                                                                                                           \
        int rc_ = (expr);                                                                                          \
        if (rc_) FAIL("%s: %s", #expr, sl_strerror(rc_));                                                          \
    } while (0)

/* Calls added in 0.2: none of them is in a 0.1 library. */
static const char *const added_0_2[] = {
    "sl_image_recipe_init_sized", "sl_mem_category_count", "sl_loader_errors_sized", "sl_loader_last_error_sized",
    "sl_loader_get_state_sized", "sl_loader_set_state_sized", "sl_image_probe_sized", "sl_video_opts_init_sized",
    "sl_video_probe_sized", "sl_video_decode_sized", "sl_budget_stats_sized", "sl_governor_opts_init_sized",
    "sl_budget_govern_sized", "sl_budget_create_auto_sized", "sl_budget_events_sized", "sl_source_value_sized",
};

int main(int argc, char **argv) {
    if (argc != 2) FAIL("usage: abi_probe DATASET");
    unsigned version = sl_version_number();
    int old = version < 200; /* 0.1: the library knows less than this header */
    printf("\nversion=%u\n", version);
    for (size_t i = 0; i < sizeof added_0_2 / sizeof added_0_2[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, added_0_2[i]);
        if (old ? f != NULL : f == NULL) FAIL("%s is %s in a library of version %u", added_0_2[i],
                                              f ? "there" : "missing", version);
    }

    /* the configuration */
    sl_config cfg;
    memset(&cfg, 0x5A, sizeof cfg); /* what a stack holds */
    sl_config_init(&cfg);
    size_t known = cfg.struct_size;
    if (old) {
        if (known != offsetof(sl_config, recipe)) FAIL("0.1's init recorded %zu", known);
    } else if (known != sizeof cfg || cfg.recipe != NULL) {
        FAIL("init recorded %zu, recipe %p", known, (const void *)cfg.recipe);
    }
    cfg.source = argv[1];
    cfg.batch_size = 4;
    cfg.size = 32;
    cfg.seed = 7;
    cfg.workers = 2;
    cfg.budget = 64u << 20;
    cfg.flags = SL_FLAG_CHECKSUM;
    sl_loader *ld = NULL;
    char err[512] = "";
    if (old) { /* a struct_size past what 0.1 knows: refused, not misread */
        cfg.struct_size = sizeof cfg;
        if (sl_loader_create(&cfg, &ld, err, sizeof err) != SL_EINVAL) FAIL("0.1 took a larger sl_config");
        printf("larger_config=%s\n", err);
        cfg.struct_size = known;
    }
    if (sl_loader_create(&cfg, &ld, err, sizeof err)) FAIL("create: %s", err);
    printf("dataset_size=%llu\nlen=%llu\nnum_samples=%llu\n", (unsigned long long)sl_loader_dataset_size(ld),
           (unsigned long long)sl_loader_len(ld), (unsigned long long)sl_loader_num_samples(ld));

    /* plan: what the schema and sampler decide */
    sl_plan p;
    if (sl_loader_plan(&cfg, &p, err, sizeof err)) FAIL("plan: %s", err);
    printf("plan=%llu,%llu,%llu,%u,%llu\n", (unsigned long long)p.dataset_size,
           (unsigned long long)p.samples_per_rank, (unsigned long long)p.batches, p.num_fields,
           (unsigned long long)p.sample_bytes);

    /* an epoch: fields of the first batch, the order */
    static char order[8192], fields[512];
    size_t oat = 0, fat = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        sl_field idx, label;
        OK(sl_batch_find(b, "index", &idx));
        OK(sl_batch_find(b, "label", &label));
        for (uint32_t k = 0; k < sl_batch_len(b) && oat < sizeof order - 64; k++)
            oat += (size_t)snprintf(order + oat, sizeof order - oat, "%lld:%lld,", (long long)((int64_t *)idx.data)[k],
                                    (long long)((int64_t *)label.data)[k]);
        if (!fat) /* the first batch's fields */
            for (int i = 0; i < sl_batch_num_fields(b); i++) {
                sl_field f;
                OK(sl_batch_field(b, i, &f));
                if (f.device_type != SL_DEVICE_CPU) FAIL("field %s device_type %d", f.name, f.device_type);
                fat += (size_t)snprintf(fields + fat, sizeof fields - fat, "%s:%d:%d:", f.name, f.dtype, f.kind);
                for (int k = 1; k < f.ndim; k++)
                    fat += (size_t)snprintf(fields + fat, sizeof fields - fat, "%lldx", (long long)f.shape[k]);
                fat += (size_t)snprintf(fields + fat, sizeof fields - fat, ";");
            }
        sl_loader_release(ld, b);
    }
    if (rc != SL_EEND) FAIL("next: %s", sl_strerror(rc));
    printf("fields=%s\norder=%s\n", fields, order);

    /* stats: a sized call, filled as far as the library knows */
    sl_stats st;
    memset(&st, 0x5A, sizeof st);
    OK(sl_loader_stats(ld, &st));
    printf("batches=%llu\nsamples=%llu\n", (unsigned long long)st.batches, (unsigned long long)st.samples);
    if (old) {
        if (st.mem_count != 0x5A5A5A5Au) FAIL("0.1 wrote past its sl_stats");
        printf("mem_batches=%llu (0.1's place)\n", (unsigned long long)st.reserved_0_1_mem[SL_MEM_BATCHES]);
    } else {
        if (st.mem_count != (uint32_t)sl_mem_category_count()) FAIL("mem_count %u", st.mem_count);
        if (st.mem[SL_MEM_BATCHES] != st.reserved_0_1_mem[SL_MEM_BATCHES]) FAIL("mem and 0.1's mem differ");
        printf("mem_batches=%llu\n", (unsigned long long)st.mem[SL_MEM_BATCHES]);
    }

    /* errors and the state: 0.1's calls where the sized ones are missing */
    sl_error_record recs[8];
    size_t n = old ? (sl_loader_errors)(ld, 0, recs, 8) : sl_loader_errors(ld, 0, recs, 8);
    printf("errors=%llu:", (unsigned long long)st.errors);
    for (size_t k = 0; k < n; k++) printf("%llu,", (unsigned long long)recs[k].index);
    printf("\n");
    sl_state s;
    OK(old ? (sl_loader_get_state)(ld, &s) : sl_loader_get_state(ld, &s));
    printf("state=%llu,%llu,%llu,%llu\n", (unsigned long long)s.epoch, (unsigned long long)s.batch,
           (unsigned long long)s.tail, (unsigned long long)s.dataset_size);
    OK(old ? (sl_loader_set_state)(ld, &s) : sl_loader_set_state(ld, &s));

    /* one image's header */
    char path[4096];
    if (!sl_loader_sample_path(ld, 0, path, sizeof path)) FAIL("no path for sample 0");
    FILE *f = fopen(path, "rb");
    if (!f) FAIL("cannot open %s", path);
    static unsigned char data[1 << 20];
    size_t len = fread(data, 1, sizeof data, f);
    fclose(f);
    sl_image_info info;
    OK(old ? (sl_image_probe)(data, len, &info) : sl_image_probe(data, len, &info));
    printf("info=%ux%u,%u,%d\n", info.width, info.height, info.channels, info.format);
    sl_loader_destroy(ld);
    return 0;
}

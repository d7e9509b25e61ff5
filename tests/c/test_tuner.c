/* ctest: tsan */
/*
 * The tuner (workers = SL_WORKERS_AUTO, docs/tuner.md): its rules on
 * windows made up here (sl__tune_decide is a pure function), then whole
 * loaders driven by consumers of known demand. A consumer that sleeps
 * 0.3 s a batch ends the epoch with fewer than 1.2 of 2 workers active on
 * average and waits under 5 % of its time; one that takes batches as fast
 * as it can keeps both; the bytes are a static run's while the tuner
 * moves. Nothing asserts on a clock: the decisions are read from the
 * tuner's own log and the waits from the loader's own stats, and each
 * rule has margins a loaded 2-core machine does not cross.
 */
#define _GNU_SOURCE
#include <time.h>

#include "check.h"
#include "fixture.h"
#include "monitor/top.h"
#include "pipeline/tuner.h"
#include "sluice.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ---- the rules ---------------------------------------------------------------- */

/* A window of 8 batches over 1 s: 2 of 2 workers, 4 slots (2 at least),
 * 4 CPUs, nothing measured yet. */
static sl__tune_in window(void) {
    sl__tune_in in = {.active = 2, .ceiling = 2, .cores = 4, .slots = 4, .slots_min = 2, .slots_max = 4,
                      .batches = 8, .wall_s = 1.0, .cpu_s = 0.0, .hold = 1};
    return in;
}

TEST(rule_waiting_consumer_wakes_a_worker) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.active = 1;
    in.wait_s = 0.2, in.busy_s = 0.95; /* waited 20 %, the one worker busy */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_WORKERS);
    CHECK_EQ(o.why, SL_TUNE_WHY_CONSUMER_WAITED);
    CHECK_EQ(o.to, 2);
    CHECK_STR_CONTAINS(o.reason, "waited 20%");
    in.active = 2; /* at the ceiling: nothing more to wake */
    in.busy_s = 1.9;
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
}

TEST(rule_idle_workers_and_a_wait_ask_for_a_slot) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.slots = 2;
    in.wait_s = 0.3, in.busy_s = 0.5; /* 0.5 of 2 workers busy: they lacked work */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_SLOTS);
    CHECK_EQ(o.why, SL_TUNE_WHY_NO_FREE_SLOT);
    CHECK_EQ(o.to, 3);
    in.slots = 4; /* every slot the budget admitted is in use: nothing */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
}

TEST(rule_full_slots_park_a_worker) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.wait_s = 0.001, in.ready_min = 1, in.busy_s = 0.3; /* 0.3 of 2 busy: fits in 1 */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_WORKERS);
    CHECK_EQ(o.why, SL_TUNE_WHY_SLOTS_FULL);
    CHECK_EQ(o.to, 1);
    CHECK_STR_CONTAINS(o.reason, "slots full");
    in.busy_s = 0.9; /* 0.9 of 2 would be 90 % of one: kept */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
    in.busy_s = 0.3, in.ready_min = 0; /* the consumer found none ready once: not the bottleneck */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
    in.ready_min = 1, in.wait_s = 0.03; /* between the margins: nothing moves */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
    CHECK_EQ(o.calm, 0);
}

TEST(rule_batches_ready_ahead_take_a_slot_back) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.active = 1;
    in.wait_s = 0, in.ready_min = 2, in.busy_s = 0.5;
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_SLOTS);
    CHECK_EQ(o.why, SL_TUNE_WHY_READY_AHEAD);
    CHECK_EQ(o.to, 3);
    in.slots = 2; /* at the floor */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
}

TEST(rule_a_step_down_waits_for_its_hold) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.wait_s = 0, in.ready_min = 1, in.busy_s = 0.2, in.hold = 2;
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
    CHECK_EQ(o.calm, 1); /* it qualified: counted */
    in.calm = 1;
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_WORKERS);
}

TEST(rule_a_cpu_busy_consumer_keeps_a_core) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.ceiling = 4, in.active = 4, in.cores = 4;
    in.cpu_s = 0.8, in.wait_s = 0.3, in.busy_s = 3.9; /* waits, but its thread is busy 80 % */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_WORKERS);
    CHECK_EQ(o.why, SL_TUNE_WHY_CONSUMER_CPU);
    CHECK_EQ(o.to, 3);
    in.active = 3; /* kept at 3 although it waits */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
    in.cpu_s = 0.1; /* the thread mostly sleeps or waits on the GPU: every core for the workers */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_WORKERS);
    CHECK_EQ(o.to, 4);
    in.active = 2, in.ceiling = 2, in.cpu_s = 0.9; /* 2 workers on 4 CPUs leave cores enough */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
    /* a loop that takes batches as fast as it can: on a CPU all of its little own time, 1 % of all */
    in.ceiling = 4, in.active = 4, in.wait_s = 0.99, in.cpu_s = 0.01, in.busy_s = 3.9;
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
}

TEST(rule_gpu_backlog_adds_no_cpu_worker) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.active = 1;
    in.wait_s = 0.3, in.busy_s = 0.99, in.gpu_backlog = 6; /* decode=gpu, the engine's queue full */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
}

/* ---- loaders ------------------------------------------------------------------- */

static fx_dataset ds;

/* A tuned loader over ds: at most 2 workers, batch 8 of 32 px. */
static sl_config tuned(void) {
    sl_config c;
    sl_config_init(&c);
    c.source = ds.root;
    c.batch_size = 8;
    c.size = 32;
    c.budget = 64ull << 20;
    c.flags = SL_FLAG_CHECKSUM;
    c.workers = SL_WORKERS_AUTO;
    c.workers_max = 2;
    return c;
}

static size_t read_log(sl_loader *ld, sl_tuner_decision *log) {
    size_t n = sl_loader_tuner_log(ld, log, SL_TUNER_LOG);
    for (size_t i = 0; i < n; i++)
        printf("decision %llu at batch %llu: %s %u -> %u (%d) %s\n", (unsigned long long)log[i].seq,
               (unsigned long long)log[i].batches, log[i].what == SL_TUNE_WORKERS ? "workers" : "slots", log[i].from,
               log[i].to, log[i].why, log[i].reason);
    return n;
}

TEST(sleeping_consumer_parks_a_worker) {
    fx_simple(&ds, 400, 0, 48, 96);
    sl_config c = tuned();
    sl_loader *ld = fx_open(&c);
    sl_stats st, first;
    sl_batch *b;
    int rc, k = 0;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        if (k++ == 0) CHECK_OK(sl_loader_stats(ld, &first));
        sleep_ms(300); /* the training step */
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    CHECK_EQ(k, 50);
    CHECK_OK(sl_loader_stats(ld, &st));
    sl_tuner_decision log[SL_TUNER_LOG];
    size_t n = read_log(ld, log);
    printf("workers active %u, mean %.3f over %.2f s; waited %.3f s (%.3f s from the second batch on); slots "
           "target %u, live %u, retired %u\n",
           st.workers_active, st.workers_active_mean, st.pass_seconds, st.pass_consumer_wait_s,
           st.pass_consumer_wait_s - first.pass_consumer_wait_s, st.slots_target, st.slots, st.slots_retired);
    CHECK_EQ(st.tuner, 1);
    CHECK_EQ(st.workers, 2);
    /* it parked a worker because the slots were full */
    int parked = 0;
    for (size_t i = 0; i < n; i++)
        parked |= log[i].what == SL_TUNE_WORKERS && log[i].why == SL_TUNE_WHY_SLOTS_FULL && log[i].to < log[i].from;
    CHECK(parked);
    CHECK(st.workers_active_mean <= 1.2);
    /* the steady state: from the second batch on, under 5 % of the time waiting */
    double wait = st.pass_consumer_wait_s - first.pass_consumer_wait_s, span = st.pass_seconds - first.pass_seconds;
    CHECK(span > 0 && wait <= 0.05 * span);
    sl_loader_destroy(ld);
}

TEST(free_consumer_keeps_every_worker) {
    fx_simple(&ds, 400, 0, 48, 96);
    sl_config c = tuned();
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) sl_loader_release(ld, b);
    CHECK_EQ(rc, SL_EEND);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    sl_tuner_decision log[SL_TUNER_LOG];
    read_log(ld, log);
    printf("workers active %u, mean %.3f over %.2f s, waited %.2f s\n", st.workers_active, st.workers_active_mean,
           st.pass_seconds, st.pass_consumer_wait_s);
    CHECK_EQ(st.workers, 2);
    CHECK_EQ(st.workers_active, 2);
    CHECK(st.workers_active_mean >= 1.8);
    sl_loader_destroy(ld);
}

/* Same bytes as static runs of 1 and 2 workers while the tuner parks and
 * wakes workers and moves the slots mid-epoch (bad files refilled too). */
TEST(bytes_equal_while_the_tuner_moves) {
    fx_simple(&ds, 300, 12, 48, 96);
    sl_config c = tuned();
    c.batch_size = 4;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    int rc, k = 0;
    uint64_t h = 0;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        uint64_t pair[2] = {h, sl_batch_checksum(b)};
        h = sl_hash64(pair, sizeof pair, 1);
        if (k++ < 40) sleep_ms(20); /* slow at first (the tuner parks), then flat out (it wakes one) */
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    sl_tuner_decision log[SL_TUNER_LOG];
    size_t n = read_log(ld, log);
    CHECK(n >= 1);
    /* read with a caller's larger stride: each record where its stride says, the rest zero */
    struct big {
        sl_tuner_decision d;
        uint64_t more;
    } wide[SL_TUNER_LOG];
    memset(wide, 0xAB, sizeof wide);
    size_t m = sl_loader_tuner_log_sized(ld, &wide[0].d, SL_TUNER_LOG, sizeof wide[0]);
    CHECK_EQ(m, n);
    for (size_t i = 0; i < m; i++) {
        CHECK_EQ(wide[i].d.seq, log[i].seq);
        CHECK_EQ(wide[i].more, 0);
    }
    sl_loader_destroy(ld);
    sl_config s = tuned();
    s.batch_size = 4;
    s.workers = 1;
    CHECK_EQ(fx_epoch_sum(&s, NULL), h);
    s.workers = 2;
    CHECK_EQ(fx_epoch_sum(&s, NULL), h);
}

TEST(fixed_workers_are_not_tuned) {
    fx_simple(&ds, 64, 0, 48, 96);
    sl_config c = tuned();
    c.workers = 2;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        sleep_ms(5);
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.tuner, 0);
    CHECK_EQ(st.workers_active, 2);
    CHECK(st.workers_active_mean == 2.0);
    CHECK_EQ(st.slots_target, st.slots);
    sl_tuner_decision log[SL_TUNER_LOG];
    CHECK_EQ(sl_loader_tuner_log(ld, log, SL_TUNER_LOG), 0);
    sl_loader_destroy(ld);
    c.workers = 0, c.workers_max = 1025;
    char err[256];
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "workers_max");
}

/* The loader's status file carries its tuner to sl__top (and `sluice
 * top`): workers, slots and the last decisions, the same as the log; a
 * file of this pid nobody holds is left out, and the file goes with the
 * loader. */
TEST(tuned_loader_shown_by_top) {
    char status[64] = "/tmp/sl_status_XXXXXX";
    CHECK(mkdtemp(status));
    fx_track(status);
    setenv("SLUICE_STATUS_DIR", status, 1);
    char stale[160], text[256];
    snprintf(stale, sizeof stale, "%s/sluice-loader-%d-99.json", status, (int)getpid());
    snprintf(text, sizeof text, "{\"version\":1,\"kind\":\"loader\",\"pid\":%d,\"id\":99}", (int)getpid());
    fx_write(stale, text, strlen(text));
    fx_simple(&ds, 200, 0, 48, 96);
    sl_config c = tuned();
    c.batch_size = 4;
    sl_loader *ld = fx_open(&c);
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        sleep_ms(10);
        sl_loader_release(ld, b);
    }
    CHECK_EQ(rc, SL_EEND);
    sl_tuner_decision log[SL_TUNER_LOG];
    size_t n = read_log(ld, log);
    CHECK(n >= 1);
    /* the last decision is published by the call after it: one more delivery */
    CHECK_EQ(sl_loader_next(ld, &b), 0);
    sl_loader_release(ld, b);
    sl__top_opts o;
    sl__top_opts_init(&o);
    o.pid = (int)getpid();
    o.nvml_lib = "libnvidia-ml-absent.so.1";
    o.kmsg = NULL;
    sl__top t;
    CHECK_OK(sl__top_init(&t, &o));
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.nloaders, 1);
    const sl__loader_status *l = &t.loaders[0];
    CHECK_EQ(l->pid, getpid());
    CHECK_EQ(l->workers, 2);
    CHECK_STR_CONTAINS(l->source, ds.root);
    CHECK_EQ(l->decisions, n);
    CHECK(l->nevents >= 1);
    const sl__loader_event *last = &l->event[l->nevents - 1];
    CHECK_EQ(last->to, log[n - 1].to);
    CHECK_EQ(strcmp(last->reason, log[n - 1].reason), 0);
    CHECK_EQ(strcmp(last->why, sl_tune_why_name(log[n - 1].why)), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl__top_text(&t, f, 5);
    fclose(f);
    CHECK_STR_CONTAINS(buf, "loader  pid");
    CHECK_STR_CONTAINS(buf, last->reason);
    free(buf);
    sl_loader_destroy(ld);
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.nloaders, 0);
    sl__top_fini(&t);
}

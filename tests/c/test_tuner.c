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
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "base/hash.h"
#include "base/node.h"
#include "monitor/govstatus.h"
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

/* The wait mostly for batches the busy GPU engines finished last: no CPU
 * worker shortens it, so an idle one parks (after the hold), a busy set
 * stays; a wait mostly the CPU's wakes one as before. */
TEST(rule_a_gpu_held_wait_parks_an_idle_worker) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.ceiling = 8, in.active = 8, in.slots = in.slots_max = 4;
    in.wait_s = 0.3, in.wait_gpu_s = 0.28, in.busy_s = 3.0;
    sl__tune_decide(&in, &o); /* nothing queued for the engines: the workers are not ahead, hold */
    CHECK(o.what == 0 && o.calm == 0);
    in.gpu_backlog = 5; /* a call's worth queued at 5 of the 8 deliveries */
    sl__tune_decide(&in, &o);
    CHECK(o.what == SL_TUNE_WORKERS && o.why == SL_TUNE_WHY_GPU_HELD && o.to == 7);
    CHECK(strstr(o.reason, "93% of it for the busy GPU decode (its queue full at 5 of them)") != NULL);
    CHECK(strcmp(sl_tune_why_name(SL_TUNE_WHY_GPU_HELD), "gpu_held") == 0);
    in.hold = 2; /* a step down waits for its hold */
    sl__tune_decide(&in, &o);
    CHECK(o.what == 0 && o.calm == 1);
    in.hold = 1, in.busy_s = 6.5; /* does not fit in 7 at 85 %: they are needed */
    sl__tune_decide(&in, &o);
    CHECK(o.what == 0 && o.calm == 0);
    in.active = 4, in.busy_s = 3.9, in.wait_gpu_s = 0.1, in.gpu_backlog = 0; /* the CPU's wait: wake one */
    sl__tune_decide(&in, &o);
    CHECK(o.what == SL_TUNE_WORKERS && o.why == SL_TUNE_WHY_CONSUMER_WAITED && o.to == 5);
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

/* The rest of the epoch, the consumer sleeping ms a batch: the code that ended it. */
static int epoch(sl_loader *ld, long ms) {
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        if (ms) sleep_ms(ms);
        sl_loader_release(ld, b);
    }
    return rc;
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
    /* small images: one worker keeps ahead of the consumer by far, under TSan beside other tests too
     * (at 48-96 px with two CPU hogs beside TSan the workers' busy time, wall time stretched by the
     * CPUs they waited for, read over 0.85 of a worker, and the tuner rightly kept both) */
    fx_simple(&ds, 400, 0, 16, 32);
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
    /* images large enough that the workers are the bottleneck in every window even where the
     * consumer's thread loses its core for a while to another process (CI runs tests in parallel) */
    fx_simple(&ds, 400, 0, 240, 320);
    sl_config c = tuned();
    sl_loader *ld = fx_open(&c);
    CHECK_EQ(epoch(ld, 0), SL_EEND);
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
    sl_tuner_decision seen[SL_TUNER_LOG];
    int slow = 1;
    while ((rc = sl_loader_next(ld, &b)) == 0) {
        uint64_t pair[2] = {h, sl_batch_checksum(b)};
        h = sl_hash64(pair, sizeof pair, 1);
        /* slow until the tuner has moved (it parks), then flat out (it wakes one). 40 batches
         * at 20 ms were not enough under TSan beside other tests: workers that slow never filled
         * the slots, so the tuner had nothing to do and the test nothing to show */
        if (slow) {
            sleep_ms(60);
            slow = ++k < 60 && sl_loader_tuner_log(ld, seen, SL_TUNER_LOG) == 0;
        }
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
    CHECK_EQ(epoch(ld, 5), SL_EEND);
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

/* The loader's status file carries its tuner to `sluice top`'s reader:
 * workers, slots and the last decisions, the same as the log; a file of
 * this pid nobody holds is left out, and the file goes with the loader.
 * (tests/python/test_tuner.py runs `sluice top` on it.) */
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
    /* a consumer slower than the workers (60 ms a batch) until the tuner
     * has moved, at most three epochs: one that slept a fixed 10 ms over
     * one epoch was no slower than TSan's workers beside other tests, and
     * nothing moved */
    sl_tuner_decision log[SL_TUNER_LOG];
    sl_batch *b;
    int rc = 0;
    for (int k = 0; k < 150 && sl_loader_tuner_log(ld, log, SL_TUNER_LOG) == 0; k++) {
        if ((rc = sl_loader_next(ld, &b)) == SL_EEND) continue; /* the next epoch */
        CHECK_OK(rc);
        sleep_ms(60);
        sl_loader_release(ld, b);
    }
    size_t n = read_log(ld, log);
    CHECK(n >= 1);
    /* the last decision is published by the call after it: one more delivery */
    for (int k = 0; k < 2 && (rc = sl_loader_next(ld, &b)) == SL_EEND; k++) {}
    CHECK_OK(rc);
    sl_loader_release(ld, b);
    sl__loader_status seen[4];
    CHECK_EQ(sl__loader_status_scan(status, NULL, NULL, seen, 4), 1);
    const sl__loader_status *l = &seen[0];
    CHECK_EQ(l->pid, getpid());
    CHECK_EQ(l->workers, 2);
    CHECK_STR_CONTAINS(l->source, ds.root);
    CHECK_EQ(l->decisions, n);
    CHECK(l->nevents >= 1);
    const sl__loader_event *last = &l->event[l->nevents - 1];
    CHECK_EQ(last->to, log[n - 1].to);
    CHECK_EQ(strcmp(last->reason, log[n - 1].reason), 0);
    CHECK_EQ(strcmp(last->why, sl_tune_why_name(log[n - 1].why)), 0);
    CHECK(l->wait_gpu_fraction == 0.0); /* no GPU decode */
    /* the wait the GPU decode held up, as a file of a GPU loader says it; none in an older file */
    char path[200], *key;
    snprintf(path, sizeof path, "%s/sluice-loader-%d-%u.json", status, (int)getpid(), l->id);
    char *file = fx_read_text(path);
    CHECK((key = strstr(file, "\"pass_consumer_wait_gpu_fraction\":0.0000,")) != NULL);
    sl__loader_status parsed;
    memcpy(key + strlen("\"pass_consumer_wait_gpu_fraction\":"), "0.2500", 6);
    CHECK_OK(sl__loader_status_parse(file, strlen(file), &parsed));
    CHECK(parsed.wait_gpu_fraction == 0.25 && parsed.decisions == l->decisions);
    memcpy(key, "\"pass_consumer_wait_gpu_fractiom\"", 33); /* renamed: an older writer's file */
    CHECK_OK(sl__loader_status_parse(file, strlen(file), &parsed));
    CHECK(parsed.wait_gpu_fraction == 0.0);
    free(file);
    sl_loader_destroy(ld);
    CHECK_EQ(sl__loader_status_scan(status, NULL, NULL, seen, 4), 0);
}

/* ---- the node's CPUs shared by demand (item 3) ------------------------------------------ */

TEST(rule_node_share) {
    CHECK_EQ(sl__node_allow(16, 4, 12, 8), 8);   /* the demands fit: the ceiling */
    CHECK_EQ(sl__node_allow(16, 8, 32, 16), 4);  /* 8 of 32 wanted: a quarter of 16 */
    CHECK_EQ(sl__node_allow(2, 2, 2.05, 2), 2);  /* another rank's idle worker costs nothing */
    CHECK_EQ(sl__node_allow(2, 2, 4, 2), 1);     /* two hungry ranks: half each */
    CHECK_EQ(sl__node_allow(2, 0.05, 2.05, 2), 1); /* at least 1 */
    sl__tune_in in = window();
    sl__tune_out o;
    in.node_allow = 1, in.node_cpus = 2, in.node_loaders = 2, in.node_demand = 4, in.demand = 2;
    in.wait_s = 0.5, in.busy_s = 1.9;
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, SL_TUNE_WORKERS);
    CHECK_EQ(o.why, SL_TUNE_WHY_NODE_SHARE);
    CHECK_EQ(o.to, 1);
    CHECK_STR_CONTAINS(o.reason, "2 loaders want 4.00, this one 2.00");
    in.active = 1; /* at its part: it waits, but wakes nobody */
    sl__tune_decide(&in, &o);
    CHECK_EQ(o.what, 0);
}

/* A loader's demand on the node's share agrees with the rules: one worker
 * more where rule 2 would wake one, else its workers' busy time; a wait
 * the GPU engines held up (gpu_held, or their queue full) asks for no more
 * CPUs than the workers used, as rule 2 parks an idle one instead. */
TEST(node_demand_agrees_with_the_rules) {
    sl__tune_in in = window();
    sl__tune_out o;
    in.ceiling = 8, in.active = 4, in.wait_s = 0.3, in.busy_s = 3.9; /* waited on busy workers */
    CHECK(sl__tune_demand(&in) == 5.0);
    sl__tune_decide(&in, &o);
    CHECK(o.what == SL_TUNE_WORKERS && o.why == SL_TUNE_WHY_CONSUMER_WAITED && o.to == 5);
    in.active = 8; /* at its ceiling: asks for the ceiling */
    CHECK(sl__tune_demand(&in) == 8.0);
    in.active = 4, in.wait_gpu_s = 0.2, in.busy_s = 2.0; /* two thirds of the wait the GPU's */
    CHECK(sl__tune_demand(&in) == 2.0);
    sl__tune_decide(&in, &o);
    CHECK(o.what == 0); /* nothing queued for the engines: no worker woken, none parked */
    in.wait_gpu_s = 0, in.gpu_backlog = 6; /* the engines' queue full at 6 of 8 deliveries */
    CHECK(sl__tune_demand(&in) == 2.0);
    sl__tune_decide(&in, &o);
    CHECK(o.what == SL_TUNE_WORKERS && o.why == SL_TUNE_WHY_GPU_HELD && o.to == 3);
    in.gpu_backlog = 0, in.wait_s = 0.02, in.busy_s = 0; /* no wait, idle workers: a floor above 0 */
    CHECK(sl__tune_demand(&in) > 0 && sl__tune_demand(&in) < 0.01);
}

typedef struct rank_report {
    sl_stats st;
    size_t n;
    sl_tuner_decision log[SL_TUNER_LOG];
} rank_report;

/* The pipes between the test and its two ranks. */
typedef struct rank_pipes {
    int ready[2], go[2], out[2][2], stop[2][2], fin[2][2];
} rank_pipes;

/* Rank k: a loader over root (2 workers at most), ready once made,
 * started by a byte on go; a consumer sleeping sleep_ms a batch over one
 * epoch (until_stop: epochs until a byte on its stop pipe); its stats and
 * log on its out pipe, then its loader destroyed at a byte on its fin
 * pipe. Never returns. */
static void rank_main(const rank_pipes *p, int k, const char *root, int sleep_ms_, int until_stop) {
    sl_config c = tuned();
    c.source = root;
    c.batch_size = 4;
    c.workers_max = 0; /* the node's default: this rank's share, and up to twice with local ranks */
    sl_loader *ld = NULL;
    char err[256], b1 = 1;
    if (sl_loader_create(&c, &ld, err, sizeof err)) _exit(2);
    if (write(p->ready[1], &b1, 1) != 1 || read(p->go[0], &b1, 1) != 1) _exit(3);
    fcntl(p->stop[k][0], F_SETFL, O_NONBLOCK);
    sl_batch *b;
    int rc;
    for (;;) {
        while ((rc = sl_loader_next(ld, &b)) == 0) {
            if (sleep_ms_) sleep_ms(sleep_ms_);
            sl_loader_release(ld, b);
            if (until_stop && read(p->stop[k][0], &b1, 1) == 1) break;
        }
        if ((rc && rc != SL_EEND) || !until_stop || b1 == 's') break;
    }
    rank_report r;
    memset(&r, 0, sizeof r);
    sl_loader_stats(ld, &r.st);
    r.n = sl_loader_tuner_log(ld, r.log, SL_TUNER_LOG);
    if (write(p->out[k][1], &r, sizeof r) != (ssize_t)sizeof r || read(p->fin[k][0], &b1, 1) != 1) _exit(4);
    sl_loader_destroy(ld);
    _exit(rc == 0 || rc == SL_EEND ? 0 : 5);
}

static void print_report(int k, const rank_report *r) {
    printf("rank %d: %u workers, %.2f active on average, node %u CPUs, %u loaders wanting %.2f, this one %.2f\n", k,
           r->st.workers, r->st.workers_active_mean, r->st.node_cpus, r->st.node_loaders, r->st.node_demand,
           r->st.demand);
    for (size_t i = 0; i < r->n; i++)
        printf("  %s %u -> %u (%s) %s\n", r->log[i].what == SL_TUNE_WORKERS ? "workers" : "slots", r->log[i].from,
               r->log[i].to, sl_tune_why_name(r->log[i].why), r->log[i].reason);
}

/* Two local ranks of one job on two CPUs (the affinity mask), consumers
 * sleeping s0 and s1 ms a batch over datasets d0 and d1; rank 1 with
 * until_stop runs until rank 0 has reported (both loaders live while
 * each reports). Their reports in r. */
static void two_ranks(const char *d0, int s0, const char *d1, int s1, int until_stop, rank_report *r) {
    cpu_set_t all, two;
    CHECK_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    CPU_ZERO(&two);
    for (int i = 0, n = 0; i < CPU_SETSIZE && n < 2; i++)
        if (CPU_ISSET(i, &all)) CPU_SET(i, &two), n++;
    CHECK_EQ(sched_setaffinity(0, sizeof two, &two), 0);
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("MASTER_ADDR");
    char job[64];
    snprintf(job, sizeof job, "test_tuner-%d", (int)getpid()); /* a job of its own: other cases run beside */
    setenv("SLUICE_CACHE_JOB", job, 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    rank_pipes p;
    CHECK(pipe(p.ready) == 0 && pipe(p.go) == 0);
    for (int k = 0; k < 2; k++) CHECK(pipe(p.out[k]) == 0 && pipe(p.stop[k]) == 0 && pipe(p.fin[k]) == 0);
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        pid[k] = fork();
        CHECK(pid[k] >= 0);
        if (pid[k] == 0) rank_main(&p, k, k ? d1 : d0, k ? s1 : s0, k && until_stop);
    }
    char b1;
    for (int k = 0; k < 2; k++) CHECK_EQ(read(p.ready[0], &b1, 1), 1); /* both loaders made */
    CHECK_EQ(write(p.go[1], "gg", 2), 2);
    CHECK_EQ(read(p.out[0][0], &r[0], sizeof r[0]), (ssize_t)sizeof r[0]);
    if (until_stop) CHECK_EQ(write(p.stop[1][1], "s", 1), 1);
    CHECK_EQ(read(p.out[1][0], &r[1], sizeof r[1]), (ssize_t)sizeof r[1]);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(write(p.fin[k][1], "f", 1), 1);
        int status;
        CHECK_EQ(waitpid(pid[k], &status, 0), pid[k]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        print_report(k, &r[k]);
    }
    /* the share's file went with its last loader */
    char key[512], path[128];
    sl__node_job_key(key, sizeof key);
    snprintf(path, sizeof path, "/dev/shm/sluice-cpus-%u-%016llx", (unsigned)geteuid(),
             (unsigned long long)sl__hash64(key, strlen(key), 0));
    CHECK(access(path, F_OK) != 0);
}

static int has_node_park(const rank_report *r) {
    for (size_t i = 0; i < r->n; i++)
        if (r->log[i].why == SL_TUNE_WHY_NODE_SHARE && r->log[i].to < r->log[i].from) return 1;
    return 0;
}

/* A rank whose consumer sleeps leaves the node's second CPU to the rank
 * whose consumer takes batches as fast as it can: that one keeps 2 workers
 * where a fixed division would give it 1. The sleeping rank's demand has
 * to stay well under the 0.66 of a worker that would round the hungry
 * one's part down to 1, on a loaded machine and under TSan too (its
 * workers' busy time is wall time, stretched there by the CPUs it waits
 * for): tiny images, 250 ms a batch. At 48-96 px and 100 ms its busy share
 * read 0.5-1.0 with two CPU hogs beside TSan, and the hungry rank parked. */
TEST(node_share_follows_demand) {
    fx_dataset *slow = fx_new(128, 0, 16, 32), *fast = fx_new(1200, 0, 160, 320);
    rank_report r[2];
    two_ranks(slow->root, 250, fast->root, 0, 1, r);
    CHECK_EQ(r[1].st.workers, 2); /* twice its share of 1 */
    CHECK_EQ(r[1].st.node_cpus, 2);
    CHECK_EQ(r[1].st.node_loaders, 2); /* it saw the sleeping rank's demand */
    CHECK(r[1].st.workers_active_mean >= 1.5);
    CHECK_EQ(r[0].st.workers_active, 1);
    CHECK(!has_node_park(&r[1]));
    free(slow);
    free(fast);
}

/* Two hungry ranks split the node's 2 CPUs: one worker each, parked for
 * the node's share. */
TEST(node_share_splits_between_hungry_ranks) {
    fx_dataset *a = fx_new(1200, 0, 160, 320);
    rank_report r[2];
    two_ranks(a->root, 0, a->root, 0, 0, r);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(r[k].st.workers, 2);
        CHECK(has_node_park(&r[k]));
    }
    free(a);
}

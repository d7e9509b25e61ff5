/*
 * The tuner: the consumer's demand decides how many workers take work and
 * how many batch slots may be in use (cfg.workers = SL_WORKERS_AUTO).
 *
 * What it reads, per delivered batch, all of it measured on the delivery
 * path the engine runs anyway: when the consumer asked and when it got the
 * batch (its wait), its thread's CPU time at each call
 * (CLOCK_THREAD_CPUTIME_ID, read by the engine before it takes its lock),
 * the batches ready when it asked, the workers' summed busy time, and with
 * decode=gpu (or prefer-gpu) whether the GPU engines had a backlog and
 * whether the batch's last position to finish was the GPU's while they
 * were busy (the wait it held up, pass_consumer_wait_gpu_s). A window is `window`
 * deliveries (at least 4, and at least 32 samples); the first delivery of
 * a pass (after create, an epoch's end or a reset) only starts one, so the
 * pipeline's fill and the consumer's work between epochs never count.
 *
 * The rules, once a window is complete (sl__tune_decide):
 *  0. With the node's CPUs shared among local ranks (base/node.h): more
 *     workers active than this loader's part of them by demand: one fewer.
 *     Its demand (sl__tune_demand) is one worker more than it runs where
 *     rule 2 would wake one, else what its workers were busy: a loader
 *     the GPU engines hold up asks for no CPU it would park.
 *  1. The consumer's thread was on a CPU half of its own time (the window
 *     less its waits) and a quarter of the window or more, and the workers
 *     could fill every CPU of the rank: one worker fewer, so the loop that
 *     launches the model's kernels keeps a core.
 *  2. The consumer waited more than 5 % of the window: with the workers
 *     busy (70 % of the active ones or more), wake a parked one; with them
 *     idle, they lacked a slot: one more slot in use. Neither past its
 *     ceiling (the workers started; the slots the budget admitted at
 *     create, brought back by a try-request). Not when the GPU engines are
 *     the bottleneck: their queue full (a call's worth past their calls) at
 *     most deliveries, or half the wait or more for batches the busy
 *     engines finished last (half a call's worth queued or in their calls:
 *     not short of staged samples). More CPU workers would only wait for
 *     the GPU; where the workers' busy time fits in one fewer at 85 % and
 *     they kept a call's worth queued for the engines at most deliveries
 *     (they are ahead), one parks (gpu_held, with the hold of rule 3), so
 *     the cores they leave go to the threads that launch the engines' and
 *     the model's work. Without that queue nothing moves: fewer workers
 *     would stage less, and the engines' calls would shrink (4 GPUs, DDP:
 *     parking on an empty queue took each rank to 4-5 workers, at 0.82 of
 *     8 fixed workers' images/s). Parked too far, the workers' staging or the
 *     costly images' CPU decodes make the wait theirs again, and rule 2
 *     wakes one.
 *  3. The consumer waited under 1 % and a batch was ready at every call
 *     (the consumer is the bottleneck): when the workers' busy time fits in
 *     one worker fewer at 85 %, park one; else, with two batches or more
 *     ready at every call, one slot fewer. A step down needs `hold` such
 *     windows in a row: 1, doubled (to 8) each time a step up undoes one
 *     down, so a load on the edge does not flap.
 * Up is fast (one window), down is slow; the margins (5 % / 1 %, 70 % /
 * 85 %) leave a band where nothing moves.
 *
 * Cost: a few additions per delivery, the rules once a window, all under
 * the engine's lock the delivery holds; no thread, no timer.
 */
#define _GNU_SOURCE
#include "pipeline/tuner.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#define WAIT_HIGH 0.05   /* the consumer waited more than this share: step up */
#define WAIT_LOW 0.01    /* under this, with a batch ready at every call: may step down */
#define BUSY_UP 0.7      /* the active workers' busy share above which a wait asks for a worker */
#define BUSY_DOWN 0.85   /* park one when the busy time fits in one fewer at this share */
#define CPU_BUSY 0.5     /* the consumer's thread on a CPU this share of its own time (not waiting)... */
#define CPU_USED 0.25    /* ... and this share of all of it: keep it a core */
#define HOLD_MAX 8u
#define WINDOW_MIN 4u
#define WINDOW_SAMPLES 32u
#define PUBLISH_NS 1000000000ull

/* ---- the rules ----------------------------------------------------------------- */

static void say(sl__tune_out *o, int what, int why, uint32_t to, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void say(sl__tune_out *o, int what, int why, uint32_t to, const char *fmt, ...) {
    o->what = what;
    o->why = why;
    o->to = to;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->reason, sizeof o->reason, fmt, ap);
    va_end(ap);
}

/* The GPU engines are the bottleneck of a window: their queue full (a
 * call's worth past their calls) at most deliveries, or half the wait or
 * more for batches the busy engines finished last. More CPU workers would
 * only wait for them. */
static int gpu_bound(const sl__tune_in *in) {
    return in->gpu_backlog * 2 > in->batches || (in->wait_s > 0 && in->wait_gpu_s * 2 >= in->wait_s);
}

/* Rule 2's ask for one more worker: the consumer waited more than
 * WAIT_HIGH, the GPU engines were not the bottleneck, and the workers
 * were busy or every slot is in use already. */
static int wants_worker(const sl__tune_in *in) {
    double wall = in->wall_s > 0 ? in->wall_s : 1e-9;
    return in->wait_s / wall > WAIT_HIGH && !gpu_bound(in) &&
           (in->busy_s / wall >= BUSY_UP * in->active || in->slots >= in->slots_max);
}

double sl__tune_demand(const sl__tune_in *in) {
    if (wants_worker(in)) return (double)SL_MIN(in->active + 1, in->ceiling);
    double busy = in->wall_s > 0 ? in->busy_s / in->wall_s : 0;
    return SL_MAX(busy, 0.001);
}

/* The workers' busy time fits in one fewer at BUSY_DOWN: one may park. */
static int spare_worker(double busy, uint32_t active) { return active > 1 && busy <= BUSY_DOWN * (active - 1); }

void sl__tune_decide(const sl__tune_in *in, sl__tune_out *o) {
    memset(o, 0, sizeof *o);
    double wall = in->wall_s > 0 ? in->wall_s : 1e-9;
    double wait = in->wait_s / wall, busy = in->busy_s / wall, cpu = in->cpu_s >= 0 ? in->cpu_s / wall : 0;
    double own = wall - in->wait_s > 1e-9 ? (in->cpu_s >= 0 ? in->cpu_s : 0) / (wall - in->wait_s) : 0;
    uint32_t a = in->active, n = in->batches;
    uint32_t cap = in->ceiling, cpus = in->node_allow ? in->node_allow : in->cores;
    int why = 0;
    if (in->node_allow && in->node_allow < cap) cap = in->node_allow, why = SL_TUNE_WHY_NODE_SHARE; /* rule 0 */
    if (cpu >= CPU_USED && own >= CPU_BUSY && cpus > 1 && cap > cpus - 1) /* rule 1 */
        cap = cpus - 1, why = SL_TUNE_WHY_CONSUMER_CPU;
    if (cap < 1) cap = 1;
    if (a > cap && why == SL_TUNE_WHY_NODE_SHARE) {
        say(o, SL_TUNE_WORKERS, why, a - 1,
            "the node's %u CPUs shared by demand: its %u loaders want %.2f, this one %.2f: %u workers for it",
            in->node_cpus, in->node_loaders, in->node_demand, in->demand, cap);
        return;
    }
    if (a > cap) {
        say(o, SL_TUNE_WORKERS, SL_TUNE_WHY_CONSUMER_CPU, a - 1,
            "the consumer's thread was on a CPU %.0f%% of the time it did not wait (%.0f%% of the last %u "
            "batches): %u of the %u CPUs left to the workers", 100 * own, 100 * cpu, n, cap, cpus);
        return;
    }
    if (wait > WAIT_HIGH) { /* rule 2 */
        /* the GPU engines are the bottleneck (a backlog, or the wait theirs): workers to spare? */
        if (gpu_bound(in)) {
            /* fewer workers stage less for the engines: park one only while a call's worth stays
             * queued for them at most deliveries (the workers ahead), else hold */
            if (in->gpu_backlog * 2 <= n || !spare_worker(busy, a)) return;
            o->calm = 1;
            if (in->calm + 1 < in->hold) return;
            say(o, SL_TUNE_WORKERS, SL_TUNE_WHY_GPU_HELD, a - 1,
                "the consumer waited %.0f%% of the last %u batches, %.0f%% of it for the busy GPU decode (its queue "
                "full at %u of them), with %.2f of %u workers busy: one parked", 100 * wait, n,
                100 * in->wait_gpu_s / in->wait_s, in->gpu_backlog, busy, a);
            return;
        }
        int busy_ok = busy >= BUSY_UP * a;
        if (a < cap && wants_worker(in))
            say(o, SL_TUNE_WORKERS, SL_TUNE_WHY_CONSUMER_WAITED, a + 1,
                "the consumer waited %.0f%% of the last %u batches (%.2f s) with %.2f of %u workers busy", 100 * wait,
                n, in->wait_s, busy, a);
        else if (!busy_ok && in->slots < in->slots_max)
            say(o, SL_TUNE_SLOTS, SL_TUNE_WHY_NO_FREE_SLOT, in->slots + 1,
                "the consumer waited %.0f%% of the last %u batches while %.2f of %u workers were busy: every one of "
                "the %u slots was in use", 100 * wait, n, busy, a, in->slots);
        return;
    }
    if (wait >= WAIT_LOW || in->ready_min < 1) return; /* rule 3 needs the consumer to be the bottleneck */
    int park = spare_worker(busy, a);
    int fewer = in->ready_min >= 2 && in->slots > in->slots_min;
    if (!park && !fewer) return;
    o->calm = 1;
    if (in->calm + 1 < in->hold) return;
    if (park)
        say(o, SL_TUNE_WORKERS, SL_TUNE_WHY_SLOTS_FULL, a - 1,
            "slots full: a batch was ready at each of the last %u calls (the consumer waited %.1f%%), %.2f of %u "
            "workers busy", n, 100 * wait, busy, a);
    else
        say(o, SL_TUNE_SLOTS, SL_TUNE_WHY_READY_AHEAD, in->slots - 1,
            "at least %u batches were ready at each of the last %u calls (the consumer waited %.1f%%): one slot "
            "fewer in use", in->ready_min, n, 100 * wait);
}

const char *sl_tune_why_name(int why) {
    static const char *const names[] = {"consumer_waited", "slots_full", "no_free_slot", "ready_ahead",
                                        "consumer_cpu", "node_share", "gpu_held"};
    return why >= 1 && why <= (int)(sizeof names / sizeof *names) ? names[why - 1] : "unknown";
}

uint32_t sl__node_allow(uint32_t cpus, double mine, double total, uint32_t ceiling) {
    if (total <= cpus || !(mine > 0)) return ceiling;
    double share = (double)cpus * mine / total + 0.5;
    uint32_t n = share >= (double)ceiling ? ceiling : (uint32_t)share;
    return n ? n : 1;
}

/* ---- the state ----------------------------------------------------------------- */

void sl__tuner_init(sl__tuner *t, int on, uint32_t ceiling, uint32_t cores, uint32_t batch, uint32_t slots,
                    uint32_t slots_min) {
    memset(t, 0, sizeof *t);
    t->on = on;
    t->window = SL_MAX(WINDOW_MIN, (WINDOW_SAMPLES + batch - 1) / (batch ? batch : 1));
    t->ceiling = ceiling ? ceiling : 1;
    t->cores = cores ? cores : 1;
    atomic_store(&t->active, t->ceiling);
    t->slots = t->slots_max = slots;
    t->slots_min = on ? SL_MIN(slots_min, slots) : slots;
    t->hold = 1;
    t->status.fd = -1;
    t->node.fd = -1;
}

void sl__tuner_node(sl__tuner *t, uint32_t node_cpus) {
    if (t->on && node_cpus) sl__cpushare_open(&t->node, node_cpus); /* failed: fd -1, its own share */
}

void sl__tuner_fini(sl__tuner *t) {
    /* a child of fork() leaves the parent's file alone (status.c forgot it) */
    if (t->status_on && t->status.pid == (long)getpid()) sl__status_close(&t->status);
    t->status_on = 0;
    sl__cpushare_close(&t->node);
}

void sl__tuner_forget(sl__tuner *t) { sl__cpushare_forget(&t->node); }

/* The integral of active workers over time, brought up to now. */
static void integrate(sl__tuner *t, uint64_t now) {
    if (t->pass_t0 && !t->pass_end && now > t->t_change) {
        t->active_ns += (uint64_t)sl__tuner_active(t) * (now - t->t_change);
        t->t_change = now;
    }
}

void sl__tuner_pass_begin(sl__tuner *t, uint64_t now, uint64_t gpu_samples, uint64_t cpu_samples) {
    if (!t->t_first) t->t_first = now;
    if (t->pass_t0 && !t->pass_end) return; /* a pass runs */
    t->pass_t0 = t->t_change = now;
    t->pass_end = 0;
    t->active_ns = t->pass_wait_ns = t->pass_wait_gpu_ns = t->pass_wait_cpu_ns = t->pass_cpu_ns = 0;
    t->pass_gpu0 = t->gpu_now = gpu_samples;
    t->pass_cpu0 = t->cpu_now = cpu_samples;
    t->have_prev = 0;
}

void sl__tuner_pass_end(sl__tuner *t, uint64_t now) {
    if (!t->pass_t0 || t->pass_end) return;
    integrate(t, now);
    t->pass_end = now;
    t->have_prev = 0;
}

static void window_start(sl__tuner *t, uint64_t now, uint64_t busy_ns) {
    t->n = 0;
    t->ready_min = UINT32_MAX;
    t->gpu_backlog = 0;
    t->w_wait_ns = t->w_wait_gpu_ns = t->w_cpu_ns = 0;
    t->cpu_known = 1;
    t->w_t0_ns = now;
    t->w_busy0_ns = busy_ns;
}

/* A move: applied to the state, logged. */
static void record(sl__tuner *t, const sl__tune_out *d, uint64_t now) {
    uint32_t from;
    if (d->what == SL_TUNE_WORKERS) {
        integrate(t, now);
        from = sl__tuner_active(t);
        atomic_store(&t->active, d->to);
    } else {
        from = t->slots;
        t->slots = d->to;
    }
    int dir = d->to > from ? 1 : -1;
    if (dir > 0 && t->last_move < 0) t->hold = SL_MIN(t->hold * 2, HOLD_MAX); /* a step down undone: slower next time */
    t->last_move = dir;
    sl_tuner_decision *r = &t->log[t->decisions % SL_TUNER_LOG];
    memset(r, 0, sizeof *r);
    r->seq = ++t->decisions;
    r->t = (double)(now - t->t_first) / 1e9;
    r->batches = t->delivered;
    r->what = d->what;
    r->why = d->why;
    r->from = from;
    r->to = d->to;
    snprintf(r->reason, sizeof r->reason, "%s", d->reason);
}

/* The node's share, once a window: this loader's demand (sl__tune_demand,
 * from the window the rules read), published; the others' read; what it
 * may run, into the window. A loader held under its ceiling by the share
 * keeps asking for one more while its consumer waits on busy workers, so
 * hungry ranks split the node evenly and an idle one's part goes to them;
 * one whose wait is the GPU engines' asks only for what its workers were
 * busy, as the rules park its idle ones (gpu_held). */
static void node_window(sl__tuner *t, sl__tune_in *in) {
    t->demand = sl__tune_demand(in);
    sl__cpushare_set(&t->node, t->demand);
    t->node_demand = sl__cpushare_total(&t->node, &t->node_loaders);
    t->node_allow = sl__node_allow(t->node.cpus, t->demand, t->node_demand, t->ceiling);
    in->node_allow = t->node_allow, in->node_cpus = t->node.cpus, in->node_loaders = t->node_loaders;
    in->node_demand = t->node_demand, in->demand = t->demand;
}

int sl__tuner_observe(sl__tuner *t, const sl__tune_obs *o, sl__tune_out *out) {
    out->what = 0;
    t->delivered++;
    if (!t->pass_t0 || t->pass_end) sl__tuner_pass_begin(t, o->asked_ns, o->gpu_samples, o->cpu_samples);
    uint64_t waited = o->now_ns > o->asked_ns ? o->now_ns - o->asked_ns : 0;
    t->pass_wait_ns += waited;
    if (o->gpu_held) t->pass_wait_gpu_ns += waited; /* it waited for the GPU's position */
    if (o->cpu_last) t->pass_wait_cpu_ns += waited;  /* ... for a CPU worker's */
    t->gpu_now = o->gpu_samples;
    t->cpu_now = o->cpu_samples;
    int prev = t->have_prev;
    uint64_t prev_cpu = t->prev_cpu_ns;
    t->have_prev = 1;
    t->prev_ns = o->now_ns;
    t->prev_cpu_ns = o->asked_cpu_ns;
    uint64_t cpu = prev && prev_cpu && o->asked_cpu_ns >= prev_cpu ? o->asked_cpu_ns - prev_cpu : 0;
    if (prev) t->pass_cpu_ns += cpu;
    if (!t->on) return 0;
    if (!prev) { /* the pass's first batch starts a window */
        window_start(t, o->now_ns, o->busy_ns);
        return 0;
    }
    t->n++;
    t->w_wait_ns += waited;
    if (o->gpu_held) t->w_wait_gpu_ns += waited;
    t->w_cpu_ns += cpu;
    if (!prev_cpu || !o->asked_cpu_ns) t->cpu_known = 0;
    if (o->ready < t->ready_min) t->ready_min = o->ready;
    t->gpu_backlog += o->gpu_backlog != 0;
    if (t->n < t->window) return 0;
    double wall = (double)(o->now_ns - t->w_t0_ns) / 1e9, busy = (double)(o->busy_ns - t->w_busy0_ns) / 1e9;
    sl__tune_in in = {.active = sl__tuner_active(t), .ceiling = t->ceiling, .cores = t->cores, .slots = t->slots,
                      .slots_min = t->slots_min, .slots_max = t->slots_max, .batches = t->n,
                      .wall_s = wall, .wait_s = (double)t->w_wait_ns / 1e9,
                      .wait_gpu_s = (double)t->w_wait_gpu_ns / 1e9,
                      .cpu_s = t->cpu_known ? (double)t->w_cpu_ns / 1e9 : -1.0,
                      .busy_s = busy, .ready_min = t->ready_min,
                      .gpu_backlog = t->gpu_backlog, .hold = t->hold, .calm = t->calm};
    if (sl__cpushare_on(&t->node)) node_window(t, &in);
    sl__tune_decide(&in, out);
    if (out->what) {
        record(t, out, o->now_ns);
        t->calm = 0;
    } else {
        t->calm = out->calm ? t->calm + 1 : 0;
    }
    window_start(t, o->now_ns, o->busy_ns);
    return out->what != 0;
}

void sl__tuner_stats(const sl__tuner *t, uint64_t now, sl_stats *o) {
    uint32_t a = sl__tuner_active(t);
    o->tuner = (uint32_t)t->on;
    o->workers_active = a;
    o->slots_target = t->slots;
    o->tuner_decisions = t->decisions;
    o->workers_active_mean = a;
    if (sl__cpushare_on(&t->node)) {
        o->node_cpus = t->node.cpus;
        o->node_loaders = t->node_loaders;
        o->node_demand = t->node_demand;
        o->demand = t->demand;
    }
    if (!t->pass_t0) return;
    uint64_t end = t->pass_end ? t->pass_end : now;
    uint64_t len = end > t->pass_t0 ? end - t->pass_t0 : 0;
    uint64_t area = t->active_ns + (t->pass_end ? 0 : (uint64_t)a * (end > t->t_change ? end - t->t_change : 0));
    if (len) o->workers_active_mean = (double)area / (double)len;
    o->pass_seconds = (double)len / 1e9;
    o->pass_consumer_wait_s = (double)t->pass_wait_ns / 1e9;
    o->pass_consumer_wait_gpu_s = (double)t->pass_wait_gpu_ns / 1e9;
    o->pass_consumer_wait_cpu_s = (double)t->pass_wait_cpu_ns / 1e9;
    o->pass_consumer_cpu_s = (double)t->pass_cpu_ns / 1e9;
    o->pass_gpu_samples = t->gpu_now - t->pass_gpu0;
    o->pass_cpu_samples = t->cpu_now - t->pass_cpu0;
}

size_t sl__tuner_log(const sl__tuner *t, sl_tuner_decision *out, size_t max) {
    uint64_t have = SL_MIN(t->decisions, (uint64_t)SL_TUNER_LOG);
    size_t n = (size_t)SL_MIN(have, (uint64_t)max);
    for (size_t i = 0; i < n; i++) out[i] = t->log[(t->decisions - n + i) % SL_TUNER_LOG];
    return n;
}

/* ---- the status file -------------------------------------------------------------- */

int sl__tuner_publish_due(sl__tuner *t, uint64_t now) {
    if (!t->on || atomic_load_explicit(&t->publishing, memory_order_relaxed)) return 0;
    if (t->decisions == t->published_seq && now - t->published_ns < PUBLISH_NS) return 0;
    t->published_seq = t->decisions;
    t->published_ns = now;
    return 1;
}

static const char *what_name(int what) { return what == SL_TUNE_WORKERS ? "workers" : "slots"; }

void sl__tuner_publish(sl__tuner *t, const sl_stats *st, const sl_tuner_decision *log, size_t nlog,
                       const char *source) {
    if (atomic_exchange(&t->publishing, 1)) return; /* another consumer thread writes it */
    sl__cpushare_refresh(&t->node); /* which of the node's loaders live: system calls, so here */
    if (!t->status_on && sl__status_open_named(&t->status, SL_STATUS_LOADER_PREFIX) == 0) t->status_on = 1;
    if (t->status_on) {
        typedef unsigned long long ull;
        char buf[8192];
        sl__stext x = {buf, 0, sizeof buf};
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        sl__stext_put(&x, "{\"version\":%d,\"kind\":\"loader\",\"pid\":%ld,\"start_time\":%llu,\"id\":%u,"
                          "\"time\":%.3f,\"t\":%.3f,\"source\":",
                      SL_STATUS_VERSION, t->status.pid, (ull)t->status.start_time, t->status.id,
                      (double)wall.tv_sec + (double)wall.tv_nsec / 1e9, st->seconds);
        sl__stext_str(&x, source);
        sl__stext_put(&x, ",\"samples\":%llu,\"samples_per_s\":%.1f,\"consumer_wait_fraction\":%.4f,"
                          "\"workers\":%u,\"workers_active\":%u,\"workers_active_mean\":%.3f,\"slots\":%u,"
                          "\"slots_target\":%u,\"decode\":\"%s\",\"gpu_samples\":%llu,\"cpu_samples\":%llu,"
                          "\"pass_consumer_wait_gpu_fraction\":%.4f,\"decisions\":%llu,\"events\":[",
                      (ull)st->samples, st->samples_per_s, st->seconds > 0 ? st->consumer_wait_s / st->seconds : 0.0,
                      st->workers, st->workers_active, st->workers_active_mean, st->slots, st->slots_target,
                      st->decode == SL_DECODE_GPU ? "gpu" : "cpu", (ull)st->gpu_samples, (ull)st->cpu_samples,
                      st->pass_seconds > 0 ? st->pass_consumer_wait_gpu_s / st->pass_seconds : 0.0,
                      (ull)st->tuner_decisions);
        for (size_t i = 0; i < nlog; i++) {
            sl__stext_put(&x, "%s{\"t\":%.3f,\"batches\":%llu,\"what\":\"%s\",\"why\":\"%s\",\"from\":%u,"
                              "\"to\":%u,\"reason\":",
                          i ? "," : "", log[i].t, (ull)log[i].batches, what_name(log[i].what),
                          sl_tune_why_name(log[i].why), log[i].from, log[i].to);
            sl__stext_str(&x, log[i].reason);
            sl__stext_put(&x, "}");
        }
        sl__stext_put(&x, "]}\n");
        sl__status_write(&t->status, buf, x.len);
    }
    atomic_store(&t->publishing, 0);
}

/* Tests of `sluice top`'s readers: procfs, cgroup v1/v2, PSI, kernel log,
 * NVML absent, JSON paths, and a fork tree of known private and shared
 * memory measured within 5%. Fixtures: tests/fixtures/top. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "base/mem.h"
#include "base/sys/cgroup.h"
#include "monitor/govstatus.h"
#include "monitor/json.h"
#include "monitor/nvml.h"
#include "monitor/oomlog.h"
#include "base/sys/procfs.h"
#include "base/sys/psi.h"
#include "monitor/svg.h"
#include "monitor/top.h"

#define MiB ((uint64_t)1 << 20)

static const char *fixture(const char *name, char *buf, size_t len) {
    const char *src = getenv("SL_SRC");
    snprintf(buf, len, "%s/tests/fixtures/top/%s", src ? src : ".", name);
    return buf;
}

static size_t load(const char *name, char *buf, size_t cap) {
    char path[1024];
    size_t len;
    CHECK_OK(sl__read_text(fixture(name, path, sizeof path), buf, cap, &len));
    return len;
}

TEST(smaps_rollup_fixture) {
    char buf[4096];
    size_t len = load("smaps_rollup.txt", buf, sizeof buf);
    sl__smaps m;
    CHECK_OK(sl__smaps_parse(buf, len, &m));
    CHECK_EQ(m.rss, 102400 * 1024ull);
    CHECK_EQ(m.pss, 51200 * 1024ull);
    CHECK_EQ(m.pss_anon, 40960 * 1024ull);
    CHECK_EQ(sl__smaps_uss(&m), (1024 + 39936) * 1024ull);
    CHECK_EQ(sl__smaps_shared(&m), (20480 + 40960) * 1024ull);
    CHECK_EQ(m.swap, 512 * 1024ull);
    CHECK_EQ(m.swap_pss, 256 * 1024ull);
    /* "Pss_Anon" must not count as "Pss", "SwapPss" not as "Swap". */
    CHECK_EQ(sl__smaps_parse("Nothing: 1 kB\n", 14, &m), SL_EPARSE);
}

TEST(meminfo_fixture) {
    char buf[4096];
    size_t len = load("meminfo.txt", buf, sizeof buf);
    sl__meminfo mi;
    CHECK_OK(sl__meminfo_parse(buf, len, &mi));
    CHECK_EQ(mi.total, 24683656 * 1024ull);
    CHECK_EQ(mi.available, 24086588 * 1024ull);
    CHECK_EQ(mi.swap_total, 2097148 * 1024ull);
    CHECK_EQ(mi.swap_free, 1048574 * 1024ull);
    /* Without MemAvailable: MemFree + Cached + Buffers. */
    const char *old = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n";
    CHECK_OK(sl__meminfo_parse(old, strlen(old), &mi));
    CHECK_EQ(mi.available, 310 * 1024ull);
    CHECK_EQ(sl__meminfo_parse("MemFree: 1 kB\n", 14, &mi), SL_EPARSE);
}

TEST(procstat_odd_names) {
    const char *s = "4242 (my (odd) name) S 77 4242 4242 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 1 0 123456 0 0\n";
    int pid, ppid;
    char comm[64];
    uint64_t st;
    CHECK_OK(sl__procstat_parse(s, strlen(s), &pid, &ppid, comm, sizeof comm, &st));
    CHECK_EQ(pid, 4242);
    CHECK_EQ(ppid, 77);
    CHECK(strcmp(comm, "my (odd) name") == 0);
    CHECK_EQ(st, 123456);
    CHECK_EQ(sl__procstat_parse("garbage", 7, &pid, &ppid, comm, sizeof comm, &st), SL_EPARSE);
    /* Our own stat, read live. */
    char buf[1024];
    size_t len;
    CHECK_OK(sl__read_text("/proc/self/stat", buf, sizeof buf, &len));
    CHECK_OK(sl__procstat_parse(buf, len, &pid, &ppid, comm, sizeof comm, NULL));
    CHECK_EQ(pid, getpid());
    CHECK_EQ(ppid, getppid());
}

TEST(cgroup_v2_fixture) {
    char dir[1024], stop[1024];
    sl__cgroup cg;
    fixture("cgv2/job/train", dir, sizeof dir);
    fixture("cgv2", stop, sizeof stop);
    CHECK_OK(sl__cgroup_read_v2(dir, stop, &cg));
    CHECK_EQ(cg.version, 2);
    /* train's memory.max is "max": the parent job's 512 MiB binds. */
    CHECK_EQ(cg.has_limit, 1);
    CHECK_EQ(cg.limit, 512 * MiB);
    CHECK_EQ(cg.current, 384 * MiB);
    CHECK_EQ(cg.events_max, 17);
    CHECK_EQ(cg.events_oom, 3);
    CHECK_EQ(cg.events_oom_kill, 2);
    CHECK_EQ(cg.has_oom_kill, 1);
    CHECK_EQ(cg.has_pressure, 1);
    CHECK(cg.pressure.some.avg10 == 12.5 && cg.pressure.full.avg10 == 4.0);
    /* Without the walk up, train alone has no limit. */
    CHECK_OK(sl__cgroup_read_v2(dir, NULL, &cg));
    CHECK_EQ(cg.has_limit, 0);
    /* A folder without the controller's files. */
    fixture("cgv1", dir, sizeof dir);
    CHECK_EQ(sl__cgroup_read_v2(dir, NULL, &cg), SL_ENOENT);
}

TEST(cgroup_v1_fixture) {
    char dir[1024];
    sl__cgroup cg;
    CHECK_OK(sl__cgroup_read_v1(fixture("cgv1", dir, sizeof dir), &cg));
    CHECK_EQ(cg.version, 1);
    /* limit_in_bytes 1 GiB, but a parent's 819.2 MiB binds (memory.stat). */
    CHECK_EQ(cg.limit, 858993459);
    CHECK_EQ(cg.current, 768 * MiB);
    CHECK_EQ(cg.failcnt, 42);
    CHECK_EQ(cg.events_oom_kill, 5);
    CHECK_EQ(cg.has_pressure, 0);
    int has;
    uint64_t v;
    CHECK_OK(sl__cgroup_parse_limit("9223372036854771712\n", &has, &v));
    CHECK_EQ(has, 0);
    CHECK_OK(sl__cgroup_parse_limit("max\n", &has, &v));
    CHECK_EQ(has, 0);
    CHECK_EQ(sl__cgroup_parse_limit("12x", &has, &v), SL_EPARSE);
}

TEST(cgroup_paths_and_mounts) {
    char buf[4096], v1[512], v2[512], m1[512], r1[512], m2[512], r2[512];
    size_t len = load("proc_cgroup_v1.txt", buf, sizeof buf);
    CHECK_EQ(sl__cgroup_paths_parse(buf, len, "memory", v1, sizeof v1, v2, sizeof v2), 3);
    CHECK(strcmp(v1, "/process_api/b37172a01af8850ebf21c19ad19c3786") == 0);
    CHECK(strcmp(v2, "/") == 0);
    /* another controller: its own v1 line, or the v2 path alone */
    CHECK_EQ(sl__cgroup_paths_parse(buf, len, "cpuacct", v1, sizeof v1, v2, sizeof v2), 3);
    CHECK(strcmp(v1, "/") == 0);
    CHECK_EQ(sl__cgroup_paths_parse(buf, len, "cpuset", v1, sizeof v1, v2, sizeof v2), 2);
    len = load("proc_cgroup_v2.txt", buf, sizeof buf);
    CHECK_EQ(sl__cgroup_paths_parse(buf, len, "memory", v1, sizeof v1, v2, sizeof v2), 2);
    CHECK(strcmp(v2, "/system.slice/train.service") == 0);
    len = load("mountinfo_hybrid.txt", buf, sizeof buf);
    CHECK_EQ(sl__cgroup_mounts_parse(buf, len, "memory", m1, r1, m2, r2, sizeof m1), 3);
    CHECK(strcmp(m1, "/sys/fs/cgroup/memory") == 0 && strcmp(r1, "/") == 0);
    CHECK(strcmp(m2, "/sys/fs/cgroup/unified") == 0);
    len = load("mountinfo_v2.txt", buf, sizeof buf);
    CHECK_EQ(sl__cgroup_mounts_parse(buf, len, "memory", m1, r1, m2, r2, sizeof m1), 2);
    CHECK(strcmp(m2, "/sys/fs/cgroup") == 0);
    /* This machine's own cgroup, whichever version: read without error
     * when one is found (containers may hide it). */
    sl__cgroup cg;
    int rc = sl__cgroup_of("/proc", 0, &cg);
    CHECK(rc == 0 || rc == SL_ENOENT);
    if (rc == 0) CHECK(cg.version == 1 || cg.version == 2);
    /* and its cpuset's folder (base/cpus.c), an existing one where found */
    char dir[1024];
    int version = 0;
    rc = sl__cgroup_dir("/proc", 0, "cpuset", &version, dir, NULL, sizeof dir);
    CHECK(rc == 0 || rc == SL_ENOENT);
    if (rc == 0) {
        struct stat st;
        CHECK((version == 1 || version == 2) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    }
}

/* A file of text under folder root (made as needed). */
static void put(const char *root, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = path + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* A limit binds from every folder between a process's cgroup and its
 * hierarchy's mount point, the mount point included (inside a cgroup
 * namespace it is the container's own cgroup): the CPU quota (base/cpus.c)
 * and the memory limit both walk up with sl__cgroup_up. */
TEST(cgroup_walk_and_cpu_quota) {
    char dir[1024];
    snprintf(dir, sizeof dir, "/x/mnt/a/b");
    CHECK_EQ(sl__cgroup_up(dir, "/x/mnt"), 1);
    CHECK(strcmp(dir, "/x/mnt/a") == 0);
    CHECK_EQ(sl__cgroup_up(dir, "/x/mnt/"), 1);
    CHECK(strcmp(dir, "/x/mnt") == 0);
    CHECK_EQ(sl__cgroup_up(dir, "/x/mnt"), 0); /* at the mount point */
    snprintf(dir, sizeof dir, "/x/mntb/a");
    CHECK_EQ(sl__cgroup_up(dir, "/x/mnt"), 0); /* not under it */
    CHECK(strcmp(dir, "/x/mntb/a") == 0);

    char root[] = "/tmp/sl_cgwalk_XXXXXX", mnt[1100], leaf[1100];
    CHECK(mkdtemp(root) != NULL);
    /* v2: the job's 1.5 CPUs bind its unlimited child; the mount point's
     * half CPU (a namespace's root) binds both */
    put(root, "v2/job/train/cpu.max", "max 100000\n");
    put(root, "v2/job/cpu.max", "150000 100000\n");
    snprintf(mnt, sizeof mnt, "%s/v2", root);
    snprintf(leaf, sizeof leaf, "%s/v2/job/train", root);
    CHECK_EQ(sl__cgroup_cpu_quota(leaf, mnt, 2), 2);
    put(root, "v2/cpu.max", "50000 100000\n");
    CHECK_EQ(sl__cgroup_cpu_quota(leaf, mnt, 2), 1);
    snprintf(leaf, sizeof leaf, "%s/v2/job", root);
    CHECK_EQ(sl__cgroup_cpu_quota(leaf, leaf, 2), 2); /* the walk stops at its mount point */
    /* v1: -1 is no quota; 4 CPUs below it */
    put(root, "v1/cpu.cfs_quota_us", "-1\n");
    put(root, "v1/cpu.cfs_period_us", "100000\n");
    put(root, "v1/slurm/cpu.cfs_quota_us", "400000\n");
    put(root, "v1/slurm/cpu.cfs_period_us", "100000\n");
    put(root, "v1/slurm/step/cpu.cfs_quota_us", "-1\n");
    snprintf(mnt, sizeof mnt, "%s/v1", root);
    snprintf(leaf, sizeof leaf, "%s/v1/slurm/step", root);
    CHECK_EQ(sl__cgroup_cpu_quota(leaf, mnt, 1), 4);
    CHECK_EQ(sl__cgroup_cpu_quota(mnt, mnt, 1), 0); /* none set */
    /* memory: the mount point's memory.max binds a child with none */
    put(root, "ns/memory.max", "268435456\n");
    put(root, "ns/inner/memory.max", "max\n");
    put(root, "ns/inner/memory.current", "1000\n");
    snprintf(mnt, sizeof mnt, "%s/ns", root);
    snprintf(leaf, sizeof leaf, "%s/ns/inner", root);
    sl__cgroup cg;
    CHECK_OK(sl__cgroup_read_v2(leaf, mnt, &cg));
    CHECK(cg.has_limit && cg.limit == 256 * MiB);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK_EQ(system(cmd), 0);

    /* this machine's CPU controller: a folder inside its mount point */
    int version = 0;
    char live[1024];
    int rc = sl__cgroup_dir("/proc", 0, "cpu", &version, live, mnt, sizeof live);
    CHECK(rc == 0 || rc == SL_ENOENT);
    if (rc == 0) CHECK(strncmp(live, mnt, strlen(mnt)) == 0 && (version == 1 || version == 2));
}

TEST(psi_lines) {
    char buf[1024];
    size_t len = load("psi_memory.txt", buf, sizeof buf);
    sl__psi p;
    CHECK_OK(sl__psi_parse(buf, len, &p));
    CHECK(p.some.present && p.full.present);
    CHECK(p.some.avg10 == 0.31 && p.some.avg60 == 1.20 && p.some.avg300 == 0.05);
    CHECK_EQ(p.some.total_us, 9876543);
    CHECK(p.full.avg10 == 0.10);
    CHECK_EQ(p.full.total_us, 1234567);
    /* Only a "some" line (cpu on old kernels): full absent, not an error. */
    const char *some = "some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n";
    CHECK_OK(sl__psi_parse(some, strlen(some), &p));
    CHECK(!p.full.present && p.some.avg300 == 3.0);
    CHECK_EQ(sl__psi_parse("nonsense\n", 9, &p), SL_EPARSE);
}

TEST(kmsg_records) {
    char buf[8192];
    size_t len = load("kmsg.txt", buf, sizeof buf);
    sl__oom_event ev[4];
    CHECK_EQ(sl__oom_scan(buf, len, ev, 4), 1);
    CHECK_EQ(ev[0].pid, 4242);
    CHECK(strcmp(ev[0].name, "pt_data_worker") == 0);
    CHECK(ev[0].uptime_s > 1234.567 && ev[0].uptime_s < 1234.569);
    CHECK_EQ(ev[0].anon_rss, 8388608 * 1024ull);
    CHECK_EQ(ev[0].file_rss, 65536 * 1024ull);
    CHECK_EQ(ev[0].shmem_rss, 1024 * 1024ull);
    CHECK_EQ(ev[0].total_vm, 12345678 * 1024ull);
    CHECK_EQ(ev[0].memcg_oom, 1);
    CHECK(strcmp(ev[0].constraint, "CONSTRAINT_MEMCG") == 0);
    CHECK(strcmp(ev[0].memcg, "/job/train") == 0);
}

TEST(dmesg_lines) {
    char buf[8192];
    size_t len = load("dmesg.txt", buf, sizeof buf);
    sl__oom_event ev[4];
    CHECK_EQ(sl__oom_scan(buf, len, ev, 4), 2);
    CHECK_EQ(ev[0].pid, 777);
    CHECK(strcmp(ev[0].constraint, "CONSTRAINT_NONE") == 0);
    CHECK(ev[0].uptime_s > 5012.3 && ev[0].uptime_s < 5012.4);
    CHECK_EQ(ev[0].anon_rss, 20000000 * 1024ull);
    CHECK_EQ(ev[0].memcg_oom, 0);
    /* A name with parentheses; the reaper line is not a second kill; no
     * constraint line came before this one. */
    CHECK_EQ(ev[1].pid, 888);
    CHECK(strcmp(ev[1].name, "my (odd) name") == 0);
    CHECK(ev[1].constraint[0] == 0);
    /* Only the last max kills are kept, oldest first. */
    CHECK_EQ(sl__oom_scan(buf, len, ev, 1), 2);
    CHECK_EQ(ev[0].pid, 888);
    /* Lines without a time, as journalctl -k prints them. */
    sl__oom_event e;
    CHECK_EQ(sl__oom_parse_line("kernel: Out of memory: Killed process 9 (x) total-vm:1kB, anon-rss:2kB, file-rss:3kB", &e),
             SL_OOM_LINE_KILLED);
    CHECK(e.uptime_s < 0 && e.pid == 9 && e.anon_rss == 2048);
    CHECK_EQ(sl__oom_parse_line("[1.0] usb 1-1: new device", &e), SL_OOM_LINE_NONE);
}

TEST(kmsg_unreadable) {
    sl__oom_event ev[2];
    CHECK_EQ(sl__oom_read_kmsg("/nonexistent/kmsg", ev, 2), SL_EIO);
}

TEST(nvml_absent) {
    sl__nvml h;
    CHECK_EQ(sl__nvml_open("libnvidia-ml-absent.so.1", &h), SL_ENOENT);
    /* A library without the NVML symbols is no GPU either. */
    CHECK_EQ(sl__nvml_open("libm.so.6", &h), SL_EUNSUPPORTED);
    /* The snapshot omits the GPU section. */
    sl__top_opts o;
    sl__top_opts_init(&o);
    o.pid = getpid();
    o.nvml_lib = "libnvidia-ml-absent.so.1";
    sl__top t;
    CHECK_OK(sl__top_init(&t, &o));
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.has_nvml, 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl__top_json(&t, f);
    fclose(f);
    CHECK(strstr(buf, "\"gpus\"") == NULL);
    double v;
    CHECK_OK(sl__json_number(buf, len, "tree.pss_bytes", &v));
    CHECK(v > 0);
    CHECK_OK(sl__json_number(buf, len, "tree.processes.0.pid", &v));
    CHECK_EQ((long)v, getpid());
    CHECK_EQ(sl__json_number(buf, len, "gpu_used_bytes", &v), SL_ENOENT);
    free(buf);
    sl__top_fini(&t);
}

TEST(json_paths) {
    const char *s = "{\"a\":{\"b\":[1,{\"c\":2.5e3}],\"s\":\"x}\\\"y\"},\"n\":null,\"z\":-7}";
    double v;
    CHECK_OK(sl__json_number(s, strlen(s), "a.b.1.c", &v));
    CHECK(v == 2500);
    CHECK_OK(sl__json_number(s, strlen(s), "z", &v));
    CHECK(v == -7);
    CHECK_EQ(sl__json_number(s, strlen(s), "n", &v), SL_ENOENT);
    CHECK_EQ(sl__json_number(s, strlen(s), "a.b.2", &v), SL_ENOENT);
    CHECK_EQ(sl__json_number(s, strlen(s), "a.s", &v), SL_ENOENT);
    CHECK_EQ(sl__json_number("{\"a\":", 5, "a", &v), SL_EPARSE);
    char str[8];
    CHECK_OK(sl__json_string(s, strlen(s), "a.s", str, sizeof str));
    CHECK(strcmp(str, "x}\"y") == 0);
    const char *u = "{\"r\":\"a\\u0041\\u00e9\\n\\\\ long tail\"}";
    CHECK_OK(sl__json_string(u, strlen(u), "r", str, sizeof str));
    CHECK(strcmp(str, "aA?\n\\ l") == 0); /* cut to the buffer */
    CHECK_EQ(sl__json_string(s, strlen(s), "z", str, sizeof str), SL_ENOENT);
    CHECK_EQ(sl__json_string(s, strlen(s), "q", str, sizeof str), SL_ENOENT);
}

/* ---- a fork tree of known memory ------------------------------------------ */

#define NCHILD 3
#define SHARED_MB 64

static void touch(volatile unsigned char *p, size_t n, int write) {
    unsigned sum = 0;
    for (size_t i = 0; i < n; i += 4096) {
        if (write) p[i] = (unsigned char)(i >> 12 | 1);
        else sum += p[i];
    }
    (void)sum;
}

static void self_rollup(sl__smaps *m) { CHECK_OK(sl__smaps_read("/proc", getpid(), m)); }

typedef struct expect {
    int pid;
    uint64_t rss, pss, uss;
} expect;

/* Pages the processes shared copy-on-write when the baselines were read
 * become private as any of them writes (the parent's allocator, stack and,
 * under ASan, its shadow): RSS stays, USS and PSS move by what was written,
 * a few MiB at most. The known regions are tens of MiB, so a wrong tree (a
 * missing child, shared pages counted per sharer) is far outside 5 % plus
 * this slack. */
#define COW_SLACK (4 * MiB)

static void within5(const char *what, int pid, uint64_t got, uint64_t want) {
    double diff = (double)got - (double)want;
    double rel = want ? diff / (double)want : 1;
    fprintf(stderr, "  %-4s pid %6d: got %8.2f MiB, expected %8.2f MiB (%+.2f%%)\n", what, pid, got / 1048576.0,
            want / 1048576.0, 100 * rel);
    if ((diff < 0 ? -diff : diff) > 0.05 * (double)want + (double)COW_SLACK)
        SL_FAIL("%s of pid %d off by more than 5%% + %d MiB", what, pid, (int)(COW_SLACK / MiB));
}

TEST(fork_tree_within_5pct) {
    size_t shared_len = SHARED_MB * MiB;
    unsigned char *shared = mmap(NULL, shared_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    touch(shared, shared_len, 1);
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    expect ex[NCHILD + 1];
    for (int i = 0; i < NCHILD; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(ready[0]);
            close(go[1]);
            /* Baseline before the known amounts: what the child is anyway. */
            sl__smaps base;
            self_rollup(&base);
            size_t priv = (size_t)(16 + 16 * i) * MiB;
            unsigned char *p = mmap(NULL, priv, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) _exit(3);
            touch(p, priv, 1);
            touch(shared, shared_len, 0); /* map every shared page */
            uint64_t msg[3] = {base.rss + priv + shared_len, base.pss + priv, sl__smaps_uss(&base) + priv};
            if (write(ready[1], msg, sizeof msg) != sizeof msg) _exit(4);
            char c;
            while (read(go[0], &c, 1) < 0) {
            }
            _exit(0);
        }
        uint64_t msg[3];
        CHECK_EQ(read(ready[0], msg, sizeof msg), (long)sizeof msg);
        /* The shared part of PSS is set below, once all sharers are known. */
        ex[i + 1] = (expect){pid, msg[0], msg[1], msg[2]};
    }
    sl__smaps base;
    self_rollup(&base); /* holds the shared region already */
    size_t priv = 24 * MiB;
    unsigned char *p = mmap(NULL, priv, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    touch(p, priv, 1);
    /* Parent: its PSS baseline already holds shared/(NCHILD+1). */
    ex[0] = (expect){getpid(), base.rss + priv, base.pss + priv, sl__smaps_uss(&base) + priv};
    for (int i = 1; i <= NCHILD; i++) ex[i].pss += shared_len / (NCHILD + 1);

    sl__top_opts o;
    sl__top_opts_init(&o);
    o.pid = getpid();
    o.nvml_lib = "libnvidia-ml-absent.so.1";
    o.kmsg = NULL;
    sl__top t;
    CHECK_OK(sl__top_init(&t, &o));
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.root_found, 1);
    CHECK_EQ(t.nmembers, NCHILD + 1);
    uint64_t tree_pss = 0;
    for (int i = 0; i <= NCHILD; i++) {
        const sl__proc *q = NULL;
        for (size_t k = 0; k < t.nmembers; k++)
            if (t.procs.v[t.members[k]].pid == ex[i].pid) q = &t.procs.v[t.members[k]];
        if (!q) SL_FAIL("pid %d missing from the tree", ex[i].pid);
        CHECK_EQ(q->status, 0);
        within5("RSS", ex[i].pid, q->m.rss, ex[i].rss);
        within5("PSS", ex[i].pid, q->m.pss, ex[i].pss);
        within5("USS", ex[i].pid, sl__smaps_uss(&q->m), ex[i].uss);
        tree_pss += ex[i].pss;
    }
    within5("tree", getpid(), t.tree.pss, tree_pss);
    /* The known part alone: shared once + every private region. */
    uint64_t known = shared_len + priv;
    for (int i = 0; i < NCHILD; i++) known += (16 + 16 * (uint64_t)i) * MiB;
    CHECK_LE(known, t.tree.pss);
    sl__top_fini(&t);
    close(go[1]); /* children exit */
    for (int i = 0; i < NCHILD; i++) {
        int st;
        CHECK_EQ(waitpid(ex[i + 1].pid, &st, 0), ex[i + 1].pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    munmap(p, priv);
    munmap(shared, shared_len);
}

TEST(machine_mode_and_slope) {
    sl__top_opts o;
    sl__top_opts_init(&o);
    o.nvml_lib = "libnvidia-ml-absent.so.1";
    o.warn_pct = 0.001; /* any usage warns */
    sl__top t;
    CHECK_OK(sl__top_init(&t, &o));
    CHECK_OK(sl__top_sample(&t));
    CHECK(t.ntrees >= 1);
    for (size_t i = 1; i < t.ntrees; i++) CHECK_LE(t.trees[i].pss, t.trees[i - 1].pss);
    CHECK(t.mem.total > 0 && t.limit > 0 && t.limit <= t.mem.total);
    CHECK_EQ(t.warning, 1);
    CHECK_EQ(t.has_slope, 0);
    usleep(50000);
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.has_slope, 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl__top_text(&t, f, 5);
    fclose(f);
    CHECK_STR_CONTAINS(buf, "WARNING usage");
    CHECK_STR_CONTAINS(buf, "largest trees by PSS");
    free(buf);
    sl__top_fini(&t);
    /* A PID that does not exist: no tree, not an error. */
    o.pid = 0x3ffffff0;
    CHECK_OK(sl__top_init(&t, &o));
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.root_found, 0);
    sl__top_fini(&t);
    o.warn_pct = 150;
    CHECK_EQ(sl__top_init(&t, &o), SL_EINVAL);
}

/* A loader's lines: the wait the GPU decode held up, and from a tenth of
 * the pass on, decode=cpu named (Python's PerformanceWarning says it too). */
TEST(loader_lines_name_the_gpu_held_wait) {
    sl__loader_status l;
    memset(&l, 0, sizeof l);
    l.pid = 7, l.workers = l.workers_active = 16, l.slots = l.slots_target = 4;
    snprintf(l.decode, sizeof l.decode, "gpu");
    double held[] = {0.0, 0.05, 0.166};
    for (int i = 0; i < 3; i++) {
        l.wait_gpu_fraction = held[i];
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        sl__top_loader_text(&l, f);
        fclose(f);
        CHECK_STR_CONTAINS(buf, "16 of 16 workers active");
        CHECK_EQ(strstr(buf, "waiting on the GPU decode") != NULL, i > 0);
        CHECK_EQ(strstr(buf, "decode=cpu feeds it without the GPU") != NULL, i == 2);
        if (i == 2) CHECK_STR_CONTAINS(buf, "of this pass, 17% waiting on the GPU decode");
        free(buf);
    }
}

TEST(svg_from_log) {
    /* Three samples and one broken line. */
    char *log = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&log, &len);
    for (int i = 0; i < 3; i++)
        fprintf(f, "{\"time\":%d,\"limit\":{\"bytes\":1000,\"usage_bytes\":%d,\"warn_pct\":90},\"tree\":{\"pss_bytes\":%d},\"gpu_used_bytes\":%d}\n",
                100 + i, 500 + 100 * i, 400 + 100 * i, 300);
    fputs("{not json\n", f);
    fclose(f);
    FILE *in = fmemopen(log, len, "r");
    char *svg = NULL;
    size_t slen = 0;
    FILE *out = open_memstream(&svg, &slen);
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 16 * MiB));
    size_t points, skipped;
    CHECK_OK(sl__svg_timeline(in, out, &b, &points, &skipped));
    fclose(out);
    fclose(in);
    CHECK_EQ(points, 3);
    CHECK_EQ(skipped, 1);
    CHECK_STR_CONTAINS(svg, "<svg");
    CHECK_STR_CONTAINS(svg, "tree PSS");
    CHECK_STR_CONTAINS(svg, "GPU memory used");
    CHECK_STR_CONTAINS(svg, "stroke-dasharray"); /* the warn line */
    CHECK_STR_CONTAINS(svg, "</svg>");
    CHECK_EQ(atomic_load(&b.used), 0); /* everything given back */
    sl__budget_fini(&b);
    free(svg);
    /* An empty log. */
    in = fmemopen((char *)"\n", 1, "r");
    out = fopen("/dev/null", "w");
    CHECK_OK(sl__budget_init(&b, 16 * MiB));
    CHECK_EQ(sl__svg_timeline(in, out, &b, &points, &skipped), SL_EEMPTY);
    sl__budget_fini(&b);
    fclose(in);
    fclose(out);
    free(log);
}

/* ---- governed budgets in `sluice top` ------------------------------------------ */

static void put_file(const char *dir, const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fputs(text, f);
    CHECK(fclose(f) == 0);
}

static int file_exists(const char *dir, const char *name) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void rm_tree(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* A governor over a made-up v2 cgroup moves its budget's limit; this
 * process's status file carries the move to sl__top (and `sluice top`),
 * a stale file of a reused pid is left out, and the file goes with the
 * budget. */
TEST(governor_moves_shown_by_top) {
    char status[64] = "/tmp/sl_status_XXXXXX", cg[64] = "/tmp/sl_fakecg_XXXXXX";
    CHECK(mkdtemp(status) && mkdtemp(cg));
    setenv("SLUICE_STATUS_DIR", status, 1);
    put_file(cg, "memory.max", "1073741824\n");
    put_file(cg, "memory.current", "104857600\n");
    put_file(cg, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
    put_file(cg, "memory.stat", "anon 0\ninactive_file 0\n");
    sl_budget *b;
    CHECK_OK(sl_budget_create(512 * MiB, &b));
    sl_governor_opts go;
    sl_governor_opts_init(&go);
    go.margin = 64 * MiB;
    go.period_ms = 20;
    go.cgroup_dir = cg;
    char err[256] = "", name[64];
    if (sl_budget_govern(b, &go, err, sizeof err)) SL_FAIL("govern: %s", err);
    snprintf(name, sizeof name, "sluice-gov-%d-1.json", (int)getpid());
    CHECK(file_exists(status, name));
    /* a stale file: this pid, another start time (a process that died before removing it) */
    char stale[64], text[512];
    snprintf(stale, sizeof stale, "sluice-gov-%d-99.json", (int)getpid());
    snprintf(text, sizeof text, "{\"version\":1,\"pid\":%d,\"start_time\":1,\"id\":99,\"time\":1,\"t\":1,"
             "\"limit_bytes\":1,\"ceiling_bytes\":1,\"used_bytes\":1,\"fixed_bytes\":1,\"container_limit_bytes\":0,"
             "\"container_usage_bytes\":0,\"mem_available_bytes\":0,\"psi_some_avg10\":0,\"moves\":0,\"events\":[]}",
             (int)getpid());
    put_file(status, stale, text);
    put_file(cg, "memory.current", "838860800\n"); /* 800 MiB of 1 GiB: room for 160 MiB */
    sl__top_opts o;
    sl__top_opts_init(&o);
    o.pid = (int)getpid();
    o.nvml_lib = "libnvidia-ml-absent.so.1";
    o.kmsg = NULL;
    sl__top t;
    CHECK_OK(sl__top_init(&t, &o));
    for (int i = 0; i < 3000; i++) { /* 30 s at most: the governor's first move, on a loaded machine too */
        CHECK_OK(sl__top_sample(&t));
        if (t.ngovs == 1 && t.govs[0].nmoves > 0) break;
        usleep(10000);
    }
    CHECK_EQ(t.ngovs, 1);
    const sl__gov_status *g = &t.govs[0];
    sl_budget_info bi;
    CHECK_OK(sl_budget_stats(b, &bi));
    CHECK_EQ(g->pid, getpid());
    CHECK_EQ(g->id, 1);
    CHECK_EQ(g->ceiling, 512 * MiB);
    CHECK_EQ(g->limit, bi.limit);
    CHECK(g->limit < 200 * MiB);
    CHECK_EQ(g->container_limit, 1024 * MiB);
    CHECK_EQ(g->move[g->nmoves - 1].new_limit, g->limit);
    CHECK_STR_CONTAINS(g->move[g->nmoves - 1].reason, "cgroup working set 800.0 MiB of limit 1.0 GiB");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl__top_json(&t, f);
    fclose(f);
    double v;
    CHECK_OK(sl__json_number(buf, len, "governors.0.limit_bytes", &v));
    CHECK_EQ((uint64_t)v, g->limit);
    CHECK_EQ(sl__json_number(buf, len, "governors.1.pid", &v), SL_ENOENT); /* the stale one is not shown */
    char reason[112];
    CHECK_OK(sl__json_string(buf, len, "governors.0.last_moves.0.reason", reason, sizeof reason));
    CHECK_STR_CONTAINS(reason, "cgroup working set");
    free(buf);
    f = open_memstream(&buf, &len);
    sl__top_text(&t, f, 5);
    fclose(f);
    CHECK_STR_CONTAINS(buf, "governed: limit ");
    CHECK_STR_CONTAINS(buf, "of ceiling 512.0 MiB");
    CHECK_STR_CONTAINS(buf, "cgroup working set 800.0 MiB");
    free(buf);
    /* the command itself, from another process (SLUICE_STATUS_DIR is inherited) */
    const char *build = getenv("SL_BUILD");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "'%s/sluice' top --once --json --nvml-lib libnvidia-ml-absent.so.1 %d",
             build ? build : "build", (int)getpid());
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CHECK_EQ(pclose(p), 0);
    CHECK_OK(sl__json_number(out, n, "governors.0.ceiling_bytes", &v));
    CHECK_EQ((uint64_t)v, 512 * MiB);
    /* the file goes with the budget */
    sl_budget_destroy(b);
    CHECK(!file_exists(status, name));
    CHECK_OK(sl__top_sample(&t));
    CHECK_EQ(t.ngovs, 0);
    sl__top_fini(&t);
    rm_tree(status);
    rm_tree(cg);
}

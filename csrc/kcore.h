/*
 * kcore.h - the ABI of koordlet's C core.
 *
 * This header is also the cffi cdef (csrc/build_native.py feeds it to ffibuilder.cdef after dropping the
 * preprocessor guard lines), so it holds only declarations cffi can parse: integer #defines, structs with
 * fixed-width members, opaque typedefs and prototypes.  No policy lives in C: thresholds, QoS and the
 * meaning of values stay in Python.  Every function returns 0 (or a count) on success and -errno on
 * failure, and fills caller-allocated memory; batch calls report an errno per entry.
 *
 * Bump KC_ABI_VERSION whenever anything below changes; koordlet/native/core.py refuses a mismatched build.
 */
#ifndef KOORDLET_KCORE_H
#define KOORDLET_KCORE_H
#include <stdint.h>

#define KC_ABI_VERSION 3

/* ---------------------------------------------------------------- capabilities compiled in */
#define KC_CAP_PERF 1          /* perf_event_open(2) wrappers */
#define KC_CAP_SCHED_CORE 2    /* prctl(PR_SCHED_CORE) wrappers */
#define KC_CAP_PSI_TRIGGER 4   /* PSI trigger registration + poll */

int kc_abi_version(void);
unsigned int kc_capabilities(void);
const char *kc_build_info(void);

/* ---------------------------------------------------------------- file kinds */
#define KC_KIND_INT 1      /* one integer ("123", "-1"); "max" reads as -1 */
#define KC_KIND_KV 2       /* "key value" lines: memory.stat, v1/v2 cpu.stat */
#define KC_KIND_CPU_MAX 3  /* v2 cpu.max: "max 100000" -> v[0]=-1, v[1]=100000 */
#define KC_KIND_CPULIST 4  /* "0-3,8" -> bitmap in v[] (bit c of word c/64), count = number of CPUs */
#define KC_KIND_PSI 5      /* PSI file: some/full avg10 avg60 avg300 total */
#define KC_KIND_MEMINFO 6  /* "Key:   123 kB" lines (a "Node N " prefix is skipped); values in bytes */
#define KC_KIND_RAW 7      /* read only, no parsing: count = bytes read (benchmarks, existence checks) */
#define KC_KIND_PROC_STAT 8 /* /proc/stat aggregate "cpu" line: v[0..count) = its fields (KC_CPU_FIELDS max) */

#define KC_MAX_VALUES 32   /* v[] slots: also the most keys one KV/MEMINFO entry may select */
#define KC_MAX_CPUS 2048   /* KC_MAX_VALUES * 64 bits */
#define KC_MAX_FILE 65536  /* larger cgroup/proc files are an EFBIG entry error */

/* PSI layout in v[]: avg values are hundredths (avg10=1.23 -> 123), total is microseconds.
 * found bit 0: "some" line present, bit 1: "full" line present. */
#define KC_PSI_SOME_AVG10 0
#define KC_PSI_SOME_AVG60 1
#define KC_PSI_SOME_AVG300 2
#define KC_PSI_SOME_TOTAL 3
#define KC_PSI_FULL_AVG10 4
#define KC_PSI_FULL_AVG60 5
#define KC_PSI_FULL_AVG300 6
#define KC_PSI_FULL_TOTAL 7

/* Per-entry errors beyond the OS ones: EBADMSG malformed content, ERANGE value or CPU id out of range,
 * ENODATA empty where a value is required, EFBIG file larger than KC_MAX_FILE. */
struct kc_result {
    int32_t err;     /* 0, or the positive errno of this entry alone */
    int32_t count;   /* INT 1, CPU_MAX 2, PSI 4 or 8, KV/MEMINFO keys found, CPULIST CPUs, RAW bytes */
    uint64_t found;  /* KV/MEMINFO: bit i set when selected key i was present; PSI: see above */
    int64_t v[32];   /* parsed values; KV/MEMINFO: v[i] is selected key i (0 when absent) */
};

/* ---------------------------------------------------------------- batch reads
 * A set holds files that are read together every tick.  Each file is opened on first read and kept open
 * (re-read with pread at offset 0, which returns fresh values on cgroupfs/procfs) while the process-wide
 * budget of kept fds allows; beyond it an entry is opened, read and closed each time.  A read that fails
 * with ENODEV/ENOENT/ESRCH (cgroup removed) closes the fd; the next read tries to open it again.
 * A set is not thread-safe: callers serialise use of one set. */
typedef struct kc_set kc_set;

/* Process-wide cap on fds kept open by all sets (default 0: keep nothing open).  Returns the old cap. */
int kc_set_fd_budget(int max_kept_fds);
int kc_kept_fds(void);

kc_set *kc_set_new(void);
void kc_set_free(kc_set *set);
/* keys: for KV/MEMINFO, the selected keys separated by single spaces (at most KC_MAX_VALUES), else NULL.
 * Returns the slot (>= 0, reused after kc_set_remove) or -errno (EINVAL bad kind/keys, ENOMEM). */
int kc_set_add(kc_set *set, const char *path, int kind, const char *keys);
int kc_set_remove(kc_set *set, int slot);
int kc_set_slots(kc_set *set);      /* highest slot in use + 1 */
int kc_set_open_fds(kc_set *set);   /* fds this set keeps open now */
/* Reads slots[0..n) into out[0..n); slots == NULL means slots 0..n-1 (free slots report EBADF).
 * Returns the number of entries with err == 0, or -errno for a bad call. */
int kc_set_read(kc_set *set, const int *slots, int n, struct kc_result *out);
/* Gathers one number per entry of a read into dest[i], NaN when out[slots[i]] failed or, with
 * found_bit >= 0, when that bit of its found mask is clear (a missing key, a PSI file without "full"):
 * KC_GATHER_VALUE takes v[index]; KC_GATHER_KEY_SUM the sum of the selected keys present.  Lets a
 * collector turn thousands of results into one array with one call. */
#define KC_GATHER_VALUE 1
#define KC_GATHER_KEY_SUM 2
int kc_gather(const struct kc_result *out, int nout, const int *slots, int n, int mode, int index, int found_bit,
              double *dest);

/* Parses bytes already in memory (content obtained elsewhere, and the parser property tests). */
int kc_parse_buffer(int kind, const char *keys, const char *buf, int len, struct kc_result *out);
/* kc_read_kv_all on bytes in memory. */
int kc_parse_kv_all_buffer(int kind, const char *buf, int len, char *names, int names_len, int64_t *values,
                           int max);
/* One file, nothing kept open. */
int kc_read_file(const char *path, int kind, const char *keys, struct kc_result *out);
/* Every key of a KV or MEMINFO file: names are written NUL-terminated one after another into names;
 * returns the number of keys (<= max), -ENOSPC when names or values run out, or -errno. */
int kc_read_kv_all(const char *path, int kind, char *names, int names_len, int64_t *values, int max);

/* ---------------------------------------------------------------- /proc/stat */
#define KC_CPU_FIELDS 10  /* user nice system idle iowait irq softirq steal guest guest_nice (jiffies) */
struct kc_cpu_times {
    int32_t cpu;      /* -1 for the aggregate "cpu" line */
    int32_t nfields;  /* fields present (older kernels print fewer) */
    uint64_t f[10];
};
/* Fills out[0] with the aggregate line and out[1..] with per-CPU lines; returns the count or -errno
 * (-ENOSPC when cap is too small). */
int kc_read_proc_stat(const char *path, struct kc_cpu_times *out, int cap);
/* kc_read_proc_stat on bytes in memory. */
int kc_parse_proc_stat_buffer(const char *buf, int len, struct kc_cpu_times *out, int cap);

/* ---------------------------------------------------------------- raw loops (benchmark floors) */
int kc_raw_open_read_close(const char **paths, int n, int64_t *bytes);
int kc_raw_open_all(const char **paths, int n, int *fds);  /* returns how many opened; failed fds = -1 */
int kc_raw_pread_all(const int *fds, int n, int64_t *bytes);
void kc_raw_close_all(int *fds, int n);

/* ---------------------------------------------------------------- metric rings
 * A series' recent samples in one buffer of doubles (koordlet/metriccache/ring.py):
 *   [capacity, start, length, pending, times[capacity], values[capacity]]
 * the header holding whole numbers.  The caller holds the rings' lock.
 * kc_ring_append_all appends values[i] at time t to rings[i] for every i, skipping NaN (a failed read), a NULL
 * ring, and a time not newer than the ring's last (a clock step back); returns how many were appended. */
#define KC_RING_HEADER 4
int kc_ring_append_all(double *const *rings, int n, double t, const double *values);
/* The newest sample of each ring into times[i] and values[i]; NaN for an empty ring or a NULL one (a series
 * not held). */
void kc_ring_last_all(double *const *rings, int n, double *times, double *values);

/* ---------------------------------------------------------------- history chunks (kcore_chunk.c)
 * One series' samples as the metric store writes them: the byte KC_CHUNK_XOR, then the times and the values,
 * each column XOR-encoded against a prediction, then a hash of those (the format is described in kcore_chunk.c).  kc_chunk_bound is
 * the most bytes a chunk of n samples takes; kc_chunk_encode writes one and returns its length;
 * kc_chunk_decode reads one of n samples, returning 0, or -1 when blob is not exactly such a chunk. */
#define KC_CHUNK_XOR 1
long kc_chunk_bound(long n);
long kc_chunk_encode(const double *times, const double *values, long n, unsigned char *out);
int kc_chunk_decode(const unsigned char *blob, long len, long n, double *times, double *values);
/* The samples of each ring not yet on disk (its pending count), encoded as a chunk each, one after another
 * into out, which holds kc_ring_pending_bound(rings, n) bytes: ring i's chunk is out[offsets[i]:offsets[i+1]]
 * of counts[i] samples (0: nothing pending, no bytes), from time t0[i] to t1[i] (NaN when none); each encoded
 * ring's pending count is reset to 0.  offsets holds n + 1 entries.  Returns the bytes written, -1 when out
 * of memory (nothing reset). */
long kc_ring_pending_bound(double *const *rings, int n);
long kc_ring_encode_pending(double *const *rings, int n, unsigned char *out, long *offsets, long *counts,
                            double *t0, double *t1);

/* ---------------------------------------------------------------- perf_event
 * One group of events per CPU on a cgroup (cgroup_dir: a cgroup v2 directory, cpus[0..ncpus)), or one
 * group on a task (cgroup_dir NULL, pid > 0, all CPUs).  Events the kernel lacks are dropped and their
 * errno is reported in event_errs[i]; the call fails only when no event opens at all. */
#define KC_PERF_MAX_EVENTS 16
typedef struct kc_perf kc_perf;
kc_perf *kc_perf_open(const char *cgroup_dir, int pid, const int *cpus, int ncpus,
                      const uint32_t *types, const uint64_t *configs, int nevents,
                      int32_t *event_errs, int32_t *err);
int kc_perf_enable(kc_perf *perf);
int kc_perf_disable(kc_perf *perf);
/* values[i]: event i summed over CPUs (0 for dropped events); enabled/running: group times summed. */
int kc_perf_read(kc_perf *perf, uint64_t *values, uint64_t *time_enabled, uint64_t *time_running);
void kc_perf_close(kc_perf *perf);

/* ---------------------------------------------------------------- core scheduling (prctl PR_SCHED_CORE) */
#define KC_SCHED_CORE_SCOPE_THREAD 0
#define KC_SCHED_CORE_SCOPE_THREAD_GROUP 1
#define KC_SCHED_CORE_SCOPE_PROCESS_GROUP 2
int kc_sched_core_get(int pid, uint64_t *cookie);
int kc_sched_core_create(int pid, int scope);
int kc_sched_core_share_to(int pid, int scope);
int kc_sched_core_share_from(int pid, int scope);

/* ---------------------------------------------------------------- PSI triggers */
/* Opens a pressure file O_RDWR|O_NONBLOCK and registers trigger (e.g. "some 150000 2000000");
 * returns the fd or -errno. */
int kc_psi_trigger_open(const char *path, const char *trigger);
/* Polls fds for POLLPRI; revents[i] gets each fd's events.  Returns how many fired, 0 on timeout. */
int kc_psi_poll(const int *fds, int n, int timeout_ms, int16_t *revents);
int kc_close(int fd);

/* ---------------------------------------------------------------- inotify (pod lifecycle events) */
#define KC_IN_CREATE 256       /* IN_CREATE */
#define KC_IN_DELETE 512       /* IN_DELETE */
#define KC_IN_MOVED_FROM 64    /* IN_MOVED_FROM */
#define KC_IN_MOVED_TO 128     /* IN_MOVED_TO */
#define KC_IN_DELETE_SELF 1024 /* IN_DELETE_SELF */
#define KC_IN_IGNORED 32768    /* IN_IGNORED: the watch was removed */
#define KC_IN_Q_OVERFLOW 16384 /* IN_Q_OVERFLOW: events were lost, rescan */
#define KC_IN_ISDIR 1073741824 /* IN_ISDIR */
/* A non-blocking, close-on-exec inotify fd, or -errno. */
int kc_inotify_open(void);
/* Watches path for mask; returns the watch descriptor or -errno. */
int kc_inotify_add(int fd, const char *path, uint32_t mask);
int kc_inotify_remove(int fd, int wd);
/* Reads pending events into buf (struct inotify_event records, see inotify(7)); returns bytes, 0 when
 * none are pending, or -errno. */
int kc_inotify_read(int fd, char *buf, int len);

#endif

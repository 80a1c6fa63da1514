/*
 * koordlet C core: batched cgroup/proc reads with kept-open fds, raw benchmark loops, /proc/stat.
 * perf_event, prctl(PR_SCHED_CORE) and PSI triggers live in kcore_sys.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcore.h"
#include "kcore_parse.h"

#define KC_STR2(x) #x
#define KC_STR(x) KC_STR2(x)

int kc_abi_version(void) { return KC_ABI_VERSION; }

unsigned int kc_capabilities(void)
{
    return KC_CAP_PERF | KC_CAP_SCHED_CORE | KC_CAP_PSI_TRIGGER;
}

const char *kc_build_info(void)
{
    return "kcore abi " KC_STR(KC_ABI_VERSION)
#ifdef __VERSION__
           " cc " __VERSION__
#endif
        ;
}

/* ------------------------------------------------------------------ kept-fd budget
 * Shared by every set in the process: RLIMIT_NOFILE is per process, and the Python side sets the budget
 * from it once.  Atomics because sets are read with the GIL released. */
static int g_budget;
static int g_kept;

int kc_set_fd_budget(int max_kept_fds)
{
    return __atomic_exchange_n(&g_budget, max_kept_fds < 0 ? 0 : max_kept_fds, __ATOMIC_SEQ_CST);
}

int kc_kept_fds(void) { return __atomic_load_n(&g_kept, __ATOMIC_SEQ_CST); }

static int budget_take(void)
{
    int now = __atomic_add_fetch(&g_kept, 1, __ATOMIC_SEQ_CST);
    if (now <= __atomic_load_n(&g_budget, __ATOMIC_SEQ_CST))
        return 1;
    __atomic_sub_fetch(&g_kept, 1, __ATOMIC_SEQ_CST);
    return 0;
}

static void budget_give(void) { __atomic_sub_fetch(&g_kept, 1, __ATOMIC_SEQ_CST); }

/* ------------------------------------------------------------------ sets */
struct kc_entry {
    char *path; /* NULL: free slot */
    int kind;
    int fd;     /* kept-open fd, or -1 */
    struct kc_keys *keys;
};

struct kc_keyset {
    char *spec;
    struct kc_keys keys;
};

struct kc_set {
    struct kc_entry *entries;
    int cap;
    int slots;  /* highest slot in use + 1 */
    int open_fds;
    char *buf;  /* KC_MAX_FILE + 1: a full buffer means the file is too large */
    /* Parsed key selections, shared: thousands of memory.stat entries select the same few keys, and a
     * parsed selection is 2 KiB. */
    struct kc_keyset **keysets;
    int nkeysets;
};

kc_set *kc_set_new(void)
{
    kc_set *set = calloc(1, sizeof(*set));
    if (!set)
        return NULL;
    set->buf = malloc(KC_MAX_FILE + 1);
    if (!set->buf) {
        free(set);
        return NULL;
    }
    return set;
}

static void entry_close(kc_set *set, struct kc_entry *e)
{
    if (e->fd >= 0) {
        close(e->fd);
        e->fd = -1;
        set->open_fds--;
        budget_give();
    }
}

static void entry_clear(kc_set *set, struct kc_entry *e)
{
    entry_close(set, e);
    free(e->path);
    e->path = NULL;
    e->keys = NULL;  /* owned by set->keysets */
}

/* The shared parsed form of a key selection; NULL with *err set on a bad spec or no memory. */
static struct kc_keys *keyset_for(kc_set *set, const char *spec, int *err)
{
    struct kc_keyset *ks, **grown;
    int i;
    for (i = 0; i < set->nkeysets; i++)
        if (strcmp(set->keysets[i]->spec, spec) == 0)
            return &set->keysets[i]->keys;
    ks = calloc(1, sizeof(*ks));
    if (!ks) {
        *err = ENOMEM;
        return NULL;
    }
    if (kc_keys_parse(spec, &ks->keys)) {
        free(ks);
        *err = EINVAL;
        return NULL;
    }
    ks->spec = strdup(spec);
    grown = realloc(set->keysets, (size_t)(set->nkeysets + 1) * sizeof(*grown));
    if (!ks->spec || !grown) {
        free(ks->spec);
        free(ks);
        if (grown)
            set->keysets = grown;
        *err = ENOMEM;
        return NULL;
    }
    set->keysets = grown;
    set->keysets[set->nkeysets++] = ks;
    return &ks->keys;
}

void kc_set_free(kc_set *set)
{
    int i;
    if (!set)
        return;
    for (i = 0; i < set->slots; i++)
        entry_clear(set, &set->entries[i]);
    for (i = 0; i < set->nkeysets; i++) {
        free(set->keysets[i]->spec);
        free(set->keysets[i]);
    }
    free(set->keysets);
    free(set->entries);
    free(set->buf);
    free(set);
}

static int kind_valid(int kind) { return kind >= KC_KIND_INT && kind <= KC_KIND_PROC_STAT; }
static int kind_has_keys(int kind) { return kind == KC_KIND_KV || kind == KC_KIND_MEMINFO; }

int kc_set_add(kc_set *set, const char *path, int kind, const char *keys)
{
    struct kc_entry *e;
    struct kc_keys *k = NULL;
    int slot;
    if (!set || !path || !*path || !kind_valid(kind) || (keys && !kind_has_keys(kind)))
        return -EINVAL;
    if (kind_has_keys(kind)) {
        int err = EINVAL;
        if (!keys || !(k = keyset_for(set, keys, &err)))
            return -err;
    }
    for (slot = 0; slot < set->slots && set->entries[slot].path; slot++)
        ;
    if (slot == set->cap) {
        int cap = set->cap ? set->cap * 2 : 64;
        struct kc_entry *grown = realloc(set->entries, (size_t)cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        memset(grown + set->cap, 0, (size_t)(cap - set->cap) * sizeof(*grown));
        set->entries = grown;
        set->cap = cap;
    }
    e = &set->entries[slot];
    e->path = strdup(path);
    if (!e->path)
        return -ENOMEM;
    e->kind = kind;
    e->fd = -1;
    e->keys = k;
    if (slot == set->slots)
        set->slots++;
    return slot;
}

int kc_set_remove(kc_set *set, int slot)
{
    if (!set || slot < 0 || slot >= set->slots || !set->entries[slot].path)
        return -EBADF;
    entry_clear(set, &set->entries[slot]);
    while (set->slots > 0 && !set->entries[set->slots - 1].path)
        set->slots--;
    return 0;
}

int kc_set_slots(kc_set *set) { return set ? set->slots : 0; }
int kc_set_open_fds(kc_set *set) { return set ? set->open_fds : 0; }

static int gone(int err) { return err == ENODEV || err == ENOENT || err == ESRCH; }

static void result_reset(struct kc_result *out)
{
    memset(out, 0, sizeof(*out));
}

/* One pread of the whole file: cgroupfs, procfs and regular files return everything that fits. */
static ssize_t read_whole(int fd, char *buf)
{
    ssize_t n;
    do
        n = pread(fd, buf, KC_MAX_FILE + 1, 0);
    while (n < 0 && errno == EINTR);
    return n;
}

static void read_entry(kc_set *set, struct kc_entry *e, struct kc_result *out)
{
    ssize_t n;
    int keep = 1, err;
    result_reset(out);
    if (e->fd < 0) {
        int fd = open(e->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            out->err = errno;
            return;
        }
        e->fd = fd;
        keep = budget_take();
        if (keep)
            set->open_fds++;
    }
    n = read_whole(e->fd, set->buf);
    err = n < 0 ? errno : 0;
    if (!keep) {
        close(e->fd);
        e->fd = -1;
    } else if (err && gone(err)) {
        /* The cgroup was removed: drop the fd now so removed containers do not pin fds. */
        entry_close(set, e);
    }
    if (err) {
        out->err = err;
        return;
    }
    if (n > KC_MAX_FILE) {
        out->err = EFBIG;
        return;
    }
    out->err = kc_parse(e->kind, e->keys, set->buf, (size_t)n, out);
}

int kc_set_read(kc_set *set, const int *slots, int n, struct kc_result *out)
{
    int i, ok = 0;
    if (!set || n < 0 || (n && !out))
        return -EINVAL;
    for (i = 0; i < n; i++) {
        int slot = slots ? slots[i] : i;
        if (slot < 0 || slot >= set->slots || !set->entries[slot].path) {
            result_reset(&out[i]);
            out[i].err = EBADF;
            continue;
        }
        read_entry(set, &set->entries[slot], &out[i]);
        ok += out[i].err == 0;
    }
    return ok;
}

int kc_gather(const struct kc_result *out, int nout, const int *slots, int n, int mode, int index, int found_bit,
              double *dest)
{
    int i, j;
    const double nan = __builtin_nan("");
    if (!out || !slots || !dest || n < 0 || index < 0 || index >= KC_MAX_VALUES || found_bit >= 64 ||
        (mode != KC_GATHER_VALUE && mode != KC_GATHER_KEY_SUM))
        return -EINVAL;
    for (i = 0; i < n; i++) {
        const struct kc_result *r = slots[i] >= 0 && slots[i] < nout ? &out[slots[i]] : NULL;
        if (!r || r->err || (found_bit >= 0 && !(r->found >> found_bit & 1))) {
            dest[i] = nan;
        } else if (mode == KC_GATHER_KEY_SUM) {
            double sum = 0;
            for (j = 0; j < KC_MAX_VALUES; j++)
                if (r->found >> j & 1)
                    sum += (double)r->v[j];
            dest[i] = sum;
        } else {
            dest[i] = (double)r->v[index];
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ one-shot reads */
static int read_path(const char *path, char **buf, ssize_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), err;
    if (fd < 0)
        return errno;
    *buf = malloc(KC_MAX_FILE + 1);
    if (!*buf) {
        close(fd);
        return ENOMEM;
    }
    *len = read_whole(fd, *buf);
    err = *len < 0 ? errno : 0;
    close(fd);
    if (!err && *len > KC_MAX_FILE)
        err = EFBIG;
    if (err) {
        free(*buf);
        *buf = NULL;
    }
    return err;
}

int kc_read_file(const char *path, int kind, const char *keys, struct kc_result *out)
{
    struct kc_keys k;
    char *buf;
    ssize_t len;
    int err;
    if (!path || !out || !kind_valid(kind) || (keys && !kind_has_keys(kind)) ||
        (kind_has_keys(kind) && kc_keys_parse(keys, &k)))
        return -EINVAL;
    result_reset(out);
    err = read_path(path, &buf, &len);
    if (!err) {
        err = kc_parse(kind, kind_has_keys(kind) ? &k : NULL, buf, (size_t)len, out);
        free(buf);
    }
    out->err = err;
    return -err;
}

int kc_parse_buffer(int kind, const char *keys, const char *buf, int len, struct kc_result *out)
{
    struct kc_keys k;
    if (!out || len < 0 || (len && !buf) || !kind_valid(kind) || (keys && !kind_has_keys(kind)) ||
        (kind_has_keys(kind) && kc_keys_parse(keys, &k)))
        return -EINVAL;
    result_reset(out);
    out->err = kc_parse(kind, kind_has_keys(kind) ? &k : NULL, buf ? buf : "", (size_t)len, out);
    return -out->err;
}

int kc_parse_kv_all_buffer(int kind, const char *buf, int len, char *names, int names_len, int64_t *values,
                           int max)
{
    int count = 0, err;
    if (len < 0 || (len && !buf) || !names || !values || !kind_has_keys(kind))
        return -EINVAL;
    err = kc_parse_kv_all(kind, buf ? buf : "", (size_t)len, names, names_len, values, max, &count);
    return err ? -err : count;
}

int kc_parse_proc_stat_buffer(const char *buf, int len, struct kc_cpu_times *out, int cap)
{
    int count = 0, err;
    if (len < 0 || (len && !buf) || !out)
        return -EINVAL;
    err = kc_parse_proc_stat(buf ? buf : "", (size_t)len, out, cap, &count);
    return err ? -err : count;
}

int kc_read_kv_all(const char *path, int kind, char *names, int names_len, int64_t *values, int max)
{
    char *buf;
    ssize_t len;
    int err, count = 0;
    if (!path || !names || !values || !kind_has_keys(kind))
        return -EINVAL;
    err = read_path(path, &buf, &len);
    if (err)
        return -err;
    err = kc_parse_kv_all(kind, buf, (size_t)len, names, names_len, values, max, &count);
    free(buf);
    return err ? -err : count;
}

int kc_read_proc_stat(const char *path, struct kc_cpu_times *out, int cap)
{
    /* /proc/stat grows with CPUs and interrupts: 64 KiB covers the cpu lines of ~500 CPUs, larger hosts
     * read with a bigger buffer. */
    size_t size = KC_MAX_FILE;
    int fd, err, count = 0;
    char *buf = NULL;
    ssize_t n;
    if (!path || !out || cap < 1)
        return -EINVAL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    for (;;) {
        char *grown = realloc(buf, size);
        if (!grown) {
            err = ENOMEM;
            goto out;
        }
        buf = grown;
        do
            n = pread(fd, buf, size, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
            err = errno;
            goto out;
        }
        if ((size_t)n < size)
            break;
        if (size >= 64u << 20) {
            err = EFBIG;
            goto out;
        }
        size *= 4;
    }
    err = kc_parse_proc_stat(buf, (size_t)n, out, cap, &count);
out:
    free(buf);
    close(fd);
    return err ? -err : count;
}

/* ------------------------------------------------------------------ raw loops */
int kc_raw_open_read_close(const char **paths, int n, int64_t *bytes)
{
    char buf[4096];
    int i, ok = 0;
    int64_t total = 0;
    for (i = 0; i < n; i++) {
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        ssize_t r;
        if (fd < 0)
            continue;
        r = read(fd, buf, sizeof(buf));
        if (r >= 0) {
            total += r;
            ok++;
        }
        close(fd);
    }
    if (bytes)
        *bytes = total;
    return ok;
}

int kc_raw_open_all(const char **paths, int n, int *fds)
{
    int i, ok = 0;
    for (i = 0; i < n; i++) {
        fds[i] = open(paths[i], O_RDONLY | O_CLOEXEC);
        ok += fds[i] >= 0;
    }
    return ok;
}

int kc_raw_pread_all(const int *fds, int n, int64_t *bytes)
{
    char buf[4096];
    int i, ok = 0;
    int64_t total = 0;
    for (i = 0; i < n; i++) {
        ssize_t r;
        if (fds[i] < 0)
            continue;
        r = pread(fds[i], buf, sizeof(buf), 0);
        if (r >= 0) {
            total += r;
            ok++;
        }
    }
    if (bytes)
        *bytes = total;
    return ok;
}

void kc_raw_close_all(int *fds, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

/* ---------------------------------------------------------------- metric rings */

int kc_ring_append_all(double *const *rings, int n, double t, const double *values)
{
    int i, appended = 0;
    for (i = 0; i < n; i++) {
        double *ring = rings[i];
        double value = values[i];
        long cap, start, len, slot, pending;
        if (value != value || ring == NULL)
            continue;
        cap = (long)ring[0];
        start = (long)ring[1];
        len = (long)ring[2];
        if (len) {
            long last = start + len - 1;
            if (last >= cap)
                last -= cap;
            if (t <= ring[KC_RING_HEADER + last])
                continue;
        }
        if (len < cap) {
            slot = start + len;
            if (slot >= cap)
                slot -= cap;
            len++;
            ring[2] = (double)len;
        } else {
            slot = start;
            ring[1] = (double)(start + 1 < cap ? start + 1 : 0);
        }
        ring[KC_RING_HEADER + slot] = t;
        ring[KC_RING_HEADER + cap + slot] = value;
        pending = (long)ring[3] + 1;
        ring[3] = (double)(pending < len ? pending : len);
        appended++;
    }
    return appended;
}

void kc_ring_last_all(double *const *rings, int n, double *times, double *values)
{
    int i;
    for (i = 0; i < n; i++) {
        const double *ring = rings[i];
        long cap, last, len;
        if (ring == NULL || (len = (long)ring[2]) == 0) {
            times[i] = values[i] = NAN;
            continue;
        }
        cap = (long)ring[0];
        last = (long)ring[1] + len - 1;
        if (last >= cap)
            last -= cap;
        times[i] = ring[KC_RING_HEADER + last];
        values[i] = ring[KC_RING_HEADER + cap + last];
    }
}

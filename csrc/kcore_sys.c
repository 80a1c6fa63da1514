/*
 * koordlet C core: perf_event groups, core scheduling cookies, PSI triggers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kcore.h"

/* Older libc headers lack these (added in Linux 5.14, include/uapi/linux/prctl.h). */
#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#endif
#ifndef PR_SCHED_CORE_GET
#define PR_SCHED_CORE_GET 0
#define PR_SCHED_CORE_CREATE 1
#define PR_SCHED_CORE_SHARE_TO 2
#define PR_SCHED_CORE_SHARE_FROM 3
#endif

/* ------------------------------------------------------------------ perf_event */
struct kc_perf {
    int ngroups;
    int nevents;
    int cgroup_fd;
    int32_t ok[KC_PERF_MAX_EVENTS]; /* 1 when event i is in every group */
    int *fds;                       /* ngroups * nevents, -1 for dropped events */
    uint64_t *ids;                  /* kernel event ids, same layout */
    uint64_t *readbuf;              /* 3 + 2 * nevents words */
};

static int perf_open(struct perf_event_attr *attr, int pid, int cpu, int group, unsigned long flags)
{
    long fd = syscall(SYS_perf_event_open, attr, pid, cpu, group, flags);
    return fd < 0 ? -errno : (int)fd;
}

static void perf_attr(struct perf_event_attr *attr, uint32_t type, uint64_t config, int leader)
{
    memset(attr, 0, sizeof(*attr));
    attr->size = sizeof(*attr);
    attr->type = type;
    attr->config = config;
    attr->read_format = PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED |
                        PERF_FORMAT_TOTAL_TIME_RUNNING;
    /* Only the leader starts disabled: enabling it with PERF_IOC_FLAG_GROUP starts the whole group. */
    attr->disabled = leader ? 1 : 0;
}

void kc_perf_close(kc_perf *perf)
{
    int i;
    if (!perf)
        return;
    if (perf->fds)
        for (i = perf->ngroups * perf->nevents - 1; i >= 0; i--)
            if (perf->fds[i] >= 0)
                close(perf->fds[i]);
    if (perf->cgroup_fd >= 0)
        close(perf->cgroup_fd);
    free(perf->fds);
    free(perf->ids);
    free(perf->readbuf);
    free(perf);
}

kc_perf *kc_perf_open(const char *cgroup_dir, int pid, const int *cpus, int ncpus,
                      const uint32_t *types, const uint64_t *configs, int nevents,
                      int32_t *event_errs, int32_t *err)
{
    struct perf_event_attr attr;
    unsigned long flags = PERF_FLAG_FD_CLOEXEC;
    int target, g, i, first_err = 0, any = 0;
    kc_perf *perf;

    *err = 0;
    if (nevents < 1 || nevents > KC_PERF_MAX_EVENTS || !types || !configs || !event_errs ||
        (cgroup_dir && (!cpus || ncpus < 1)) || (!cgroup_dir && pid <= 0)) {
        *err = EINVAL;
        return NULL;
    }
    perf = calloc(1, sizeof(*perf));
    if (!perf) {
        *err = ENOMEM;
        return NULL;
    }
    perf->cgroup_fd = -1;
    perf->nevents = nevents;
    perf->ngroups = cgroup_dir ? ncpus : 1;
    perf->fds = malloc((size_t)perf->ngroups * (size_t)nevents * sizeof(int));
    perf->ids = calloc((size_t)perf->ngroups * (size_t)nevents, sizeof(uint64_t));
    perf->readbuf = malloc((size_t)(3 + 2 * nevents) * sizeof(uint64_t));
    if (!perf->fds || !perf->ids || !perf->readbuf) {
        *err = ENOMEM;
        goto fail;
    }
    for (i = 0; i < perf->ngroups * nevents; i++)
        perf->fds[i] = -1;
    if (cgroup_dir) {
        /* Per-cgroup counting takes an fd of a cgroup v2 directory in place of the pid. */
        perf->cgroup_fd = open(cgroup_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (perf->cgroup_fd < 0) {
            *err = errno;
            goto fail;
        }
        target = perf->cgroup_fd;
        flags |= PERF_FLAG_PID_CGROUP;
    } else {
        target = pid;
    }

    /* Probe each event alone on the first target so a missing one (ENOENT: no PMU) is dropped before
     * groups are formed; a group cannot lose a member later without losing its layout. */
    for (i = 0; i < nevents; i++) {
        int fd;
        perf_attr(&attr, types[i], configs[i], 1);
        fd = perf_open(&attr, target, cgroup_dir ? cpus[0] : -1, -1, flags);
        if (fd < 0) {
            event_errs[i] = -fd;
            if (!first_err)
                first_err = -fd;
            continue;
        }
        close(fd);
        event_errs[i] = 0;
        perf->ok[i] = 1;
        any = 1;
    }
    if (!any) {
        *err = first_err;
        goto fail;
    }
    for (g = 0; g < perf->ngroups; g++) {
        int leader = -1, cpu = cgroup_dir ? cpus[g] : -1;
        for (i = 0; i < nevents; i++) {
            int fd;
            if (!perf->ok[i])
                continue;
            perf_attr(&attr, types[i], configs[i], leader < 0);
            fd = perf_open(&attr, target, cpu, leader, flags);
            if (fd < 0) {
                *err = -fd;
                goto fail;
            }
            perf->fds[g * nevents + i] = fd;
            if (ioctl(fd, PERF_EVENT_IOC_ID, &perf->ids[g * nevents + i]) < 0) {
                *err = errno;
                goto fail;
            }
            if (leader < 0)
                leader = fd;
        }
    }
    return perf;
fail:
    kc_perf_close(perf);
    return NULL;
}

static int group_leader(kc_perf *perf, int g)
{
    int i;
    for (i = 0; i < perf->nevents; i++)
        if (perf->fds[g * perf->nevents + i] >= 0)
            return perf->fds[g * perf->nevents + i];
    return -1;
}

static int perf_ioctl_groups(kc_perf *perf, unsigned long request)
{
    int g;
    if (!perf)
        return -EINVAL;
    for (g = 0; g < perf->ngroups; g++)
        if (ioctl(group_leader(perf, g), request, PERF_IOC_FLAG_GROUP) < 0)
            return -errno;
    return 0;
}

int kc_perf_enable(kc_perf *perf)
{
    int rc = perf_ioctl_groups(perf, PERF_EVENT_IOC_RESET);
    return rc ? rc : perf_ioctl_groups(perf, PERF_EVENT_IOC_ENABLE);
}

int kc_perf_disable(kc_perf *perf) { return perf_ioctl_groups(perf, PERF_EVENT_IOC_DISABLE); }

int kc_perf_read(kc_perf *perf, uint64_t *values, uint64_t *time_enabled, uint64_t *time_running)
{
    size_t size;
    int g, i, j;
    if (!perf || !values || !time_enabled || !time_running)
        return -EINVAL;
    size = (size_t)(3 + 2 * perf->nevents) * sizeof(uint64_t);
    memset(values, 0, (size_t)perf->nevents * sizeof(uint64_t));
    *time_enabled = *time_running = 0;
    for (g = 0; g < perf->ngroups; g++) {
        uint64_t *rb = perf->readbuf, nr;
        ssize_t n = read(group_leader(perf, g), rb, size);
        if (n < 0)
            return -errno;
        if (n < 24)
            return -EIO;
        /* Layout (PERF_FORMAT_GROUP|ID|TOTAL_TIME_*): nr, time_enabled, time_running, {value, id}[nr]. */
        nr = rb[0];
        if ((size_t)n < (3 + 2 * nr) * sizeof(uint64_t))
            return -EIO;
        *time_enabled += rb[1];
        *time_running += rb[2];
        for (j = 0; j < (int)nr; j++)
            for (i = 0; i < perf->nevents; i++)
                if (perf->fds[g * perf->nevents + i] >= 0 && perf->ids[g * perf->nevents + i] == rb[4 + 2 * j]) {
                    values[i] += rb[3 + 2 * j];
                    break;
                }
    }
    return 0;
}

/* ------------------------------------------------------------------ core scheduling */
static int sched_core(unsigned long op, int pid, int scope, unsigned long addr)
{
    if (prctl(PR_SCHED_CORE, op, (unsigned long)pid, (unsigned long)scope, addr) < 0)
        return -errno;
    return 0;
}

int kc_sched_core_get(int pid, uint64_t *cookie)
{
    if (!cookie)
        return -EINVAL;
    /* GET takes only PIDTYPE_PID (0) and an 8-byte aligned address. */
    return sched_core(PR_SCHED_CORE_GET, pid, KC_SCHED_CORE_SCOPE_THREAD, (unsigned long)cookie);
}

int kc_sched_core_create(int pid, int scope) { return sched_core(PR_SCHED_CORE_CREATE, pid, scope, 0); }
int kc_sched_core_share_to(int pid, int scope) { return sched_core(PR_SCHED_CORE_SHARE_TO, pid, scope, 0); }
int kc_sched_core_share_from(int pid, int scope)
{
    return sched_core(PR_SCHED_CORE_SHARE_FROM, pid, scope, 0);
}

/* ------------------------------------------------------------------ PSI triggers */
int kc_psi_trigger_open(const char *path, const char *trigger)
{
    int fd;
    ssize_t n;
    if (!path || !trigger || !*trigger)
        return -EINVAL;
    fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* The kernel parses the trigger as a C string: write the terminating NUL too
     * (Documentation/accounting/psi.rst). */
    n = write(fd, trigger, strlen(trigger) + 1);
    if (n < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

int kc_psi_poll(const int *fds, int n, int timeout_ms, int16_t *revents)
{
    struct pollfd stack[64], *pfds = stack;
    int i, rc;
    if (n < 0 || (n && (!fds || !revents)))
        return -EINVAL;
    if (n > 64) {
        pfds = calloc((size_t)n, sizeof(*pfds));
        if (!pfds)
            return -ENOMEM;
    }
    for (i = 0; i < n; i++) {
        pfds[i].fd = fds[i];
        pfds[i].events = POLLPRI;
        pfds[i].revents = 0;
    }
    /* No EINTR retry: returning lets Python run its signal handlers (a stop request) promptly. */
    rc = poll(pfds, (nfds_t)n, timeout_ms);
    if (rc < 0)
        rc = -errno;
    for (i = 0; i < n; i++)
        revents[i] = pfds[i].revents;
    if (pfds != stack)
        free(pfds);
    return rc;
}

int kc_close(int fd) { return close(fd) < 0 ? -errno : 0; }

/* ------------------------------------------------------------------ inotify */
int kc_inotify_open(void)
{
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int kc_inotify_add(int fd, const char *path, uint32_t mask)
{
    int wd;
    if (!path)
        return -EINVAL;
    wd = inotify_add_watch(fd, path, mask);
    return wd < 0 ? -errno : wd;
}

int kc_inotify_remove(int fd, int wd) { return inotify_rm_watch(fd, wd) < 0 ? -errno : 0; }

int kc_inotify_read(int fd, char *buf, int len)
{
    ssize_t n;
    if (!buf || len < (int)(sizeof(struct inotify_event) + NAME_MAX + 1))
        return -EINVAL;
    do
        n = read(fd, buf, (size_t)len);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? 0 : -errno;
    return (int)n;
}

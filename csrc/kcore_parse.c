/*
 * Parsers for cgroup and proc files.  koordlet/native_ref.py is the pure-Python reference of every function
 * here: the two must agree byte for byte on every input (tests/unit/native/ checks it, with property tests on
 * malformed input), so any change in accepted syntax goes into both.
 *
 * Shared syntax: lines end with '\n' (the last may not); fields are separated by runs of ' ' or '\t'; a line
 * holding only blanks is skipped; an integer is an optional '-' and decimal digits that fit int64.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kcore_parse.h"

static int is_blank(char c) { return c == ' ' || c == '\t'; }
static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Parses an unsigned decimal at *p (at least one digit); stops at the first non-digit. */
static int parse_u64(const char **p, const char *end, uint64_t limit, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    int overflow = 0;
    if (s >= end || !is_digit(*s))
        return EBADMSG;
    for (; s < end && is_digit(*s); s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (limit - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
    }
    *p = s;
    if (overflow)
        return ERANGE;
    *out = v;
    return 0;
}

static int parse_i64(const char **p, const char *end, int64_t *out)
{
    int neg = 0, rc;
    uint64_t v;
    if (*p < end && **p == '-') {
        neg = 1;
        (*p)++;
    }
    rc = parse_u64(p, end, (uint64_t)INT64_MAX, &v);
    if (rc)
        return rc;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && is_blank(*p))
        p++;
    return p;
}

/* Trims ' ', '\t' and '\n' on both sides. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && is_space(**b))
        (*b)++;
    while (*e > *b && is_space((*e)[-1]))
        (*e)--;
}

static int is_max(const char *p, const char *end)
{
    return end - p >= 3 && p[0] == 'm' && p[1] == 'a' && p[2] == 'x';
}

int kc_keys_parse(const char *spec, struct kc_keys *keys)
{
    const char *p = spec;
    keys->n = 0;
    if (!spec)
        return EINVAL;
    while (*p) {
        const char *start;
        size_t len;
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        start = p;
        while (*p && *p != ' ')
            p++;
        len = (size_t)(p - start);
        if (keys->n >= KC_MAX_VALUES || len >= sizeof(keys->name[0]))
            return EINVAL;
        memcpy(keys->name[keys->n], start, len);
        keys->name[keys->n][len] = '\0';
        keys->len[keys->n] = (unsigned char)len;
        keys->n++;
    }
    return keys->n ? 0 : EINVAL;
}

static int parse_int(const char *b, const char *e, struct kc_result *out)
{
    int rc;
    trim(&b, &e);
    if (b == e)
        return ENODATA;
    if (e - b == 3 && is_max(b, e)) {
        out->v[0] = -1;
    } else {
        rc = parse_i64(&b, e, &out->v[0]);
        if (rc)
            return rc;
        if (b != e)
            return EBADMSG;
    }
    out->count = 1;
    return 0;
}

static int parse_cpu_max(const char *b, const char *e, struct kc_result *out)
{
    const char *q;
    int rc;
    trim(&b, &e);
    if (b == e)
        return ENODATA;
    q = b;
    if (is_max(b, e) && (e - b == 3 || is_blank(b[3]))) {
        out->v[0] = -1;
        q = b + 3;
    } else {
        rc = parse_i64(&q, e, &out->v[0]);
        if (rc)
            return rc;
    }
    if (q >= e || !is_blank(*q))
        return EBADMSG;
    q = skip_blanks(q, e);
    rc = parse_i64(&q, e, &out->v[1]);
    if (rc)
        return rc;
    if (q != e)
        return EBADMSG;
    out->count = 2;
    return 0;
}

static int parse_cpulist(const char *b, const char *e, struct kc_result *out)
{
    uint64_t *bits = (uint64_t *)out->v;
    const char *p;
    int count = 0;
    trim(&b, &e);
    p = b;
    while (p < e) {
        uint64_t lo, hi, c;
        int rc = parse_u64(&p, e, UINT64_MAX, &lo);
        if (rc)
            return rc;
        hi = lo;
        if (p < e && *p == '-') {
            p++;
            rc = parse_u64(&p, e, UINT64_MAX, &hi);
            if (rc)
                return rc;
        }
        if (lo > hi)
            return EBADMSG;
        if (hi >= KC_MAX_CPUS)
            return ERANGE;
        if (p < e) {
            if (*p != ',' || p + 1 == e)
                return EBADMSG;
            p++;
        }
        for (c = lo; c <= hi; c++) {
            uint64_t bit = (uint64_t)1 << (c % 64);
            if (!(bits[c / 64] & bit)) {
                bits[c / 64] |= bit;
                count++;
            }
        }
    }
    out->count = count;
    return 0;
}

static int key_index(const struct kc_keys *keys, const char *k, size_t len)
{
    int i;
    for (i = 0; i < keys->n; i++)
        if (keys->len[i] == len && memcmp(keys->name[i], k, len) == 0)
            return i;
    return -1;
}

/*
 * One KV or MEMINFO line [b, e) with blanks trimmed.  On success sets the key (start, length) and the value.
 * MEMINFO: "[Node <n> ]Key: <int>[ kB]" with kB scaled to bytes.
 */
static int parse_kv_line(int kind, const char *b, const char *e, const char **key, size_t *klen,
                         int64_t *value)
{
    const char *p = b, *k;
    int rc;
    if (kind == KC_KIND_MEMINFO && e - p > 5 && memcmp(p, "Node", 4) == 0 && is_blank(p[4])) {
        uint64_t node;
        p = skip_blanks(p + 4, e);
        rc = parse_u64(&p, e, UINT64_MAX, &node);
        if (rc)
            return EBADMSG;
        if (p >= e || !is_blank(*p))
            return EBADMSG;
        p = skip_blanks(p, e);
    }
    k = p;
    if (kind == KC_KIND_MEMINFO) {
        while (p < e && !is_blank(*p) && *p != ':')
            p++;
        if (p == k || p >= e || *p != ':')
            return EBADMSG;
        *klen = (size_t)(p - k);
        p++;
    } else {
        while (p < e && !is_blank(*p))
            p++;
        *klen = (size_t)(p - k);
        if (p >= e || !is_blank(*p))
            return EBADMSG;
    }
    *key = k;
    p = skip_blanks(p, e);
    rc = parse_i64(&p, e, value);
    if (rc)
        return rc;
    if (kind == KC_KIND_MEMINFO && p < e) {
        const char *u = skip_blanks(p, e);
        if (u == p || e - u != 2 || u[0] != 'k' || u[1] != 'B')
            return EBADMSG;
        if (*value > INT64_MAX / 1024 || *value < INT64_MIN / 1024)
            return ERANGE;
        *value *= 1024;
        p = e;
    }
    return p == e ? 0 : EBADMSG;
}

/* Runs the trailing block for every non-blank line of [buf, buf+len) with blanks trimmed; stops at the first error. */
#define FOR_EACH_LINE(buf, len, lb, le, ...)                                                   \
    do {                                                                                        \
        const char *cur_ = (buf), *end_ = (buf) + (len);                                        \
        while (cur_ < end_) {                                                                   \
            const char *nl_ = memchr(cur_, '\n', (size_t)(end_ - cur_));                         \
            const char *lb = cur_, *le = nl_ ? nl_ : end_;                                      \
            cur_ = nl_ ? nl_ + 1 : end_;                                                        \
            lb = skip_blanks(lb, le);                                                           \
            while (le > lb && is_blank(le[-1]))                                                 \
                le--;                                                                           \
            if (lb == le)                                                                       \
                continue;                                                                       \
            __VA_ARGS__                                                                         \
        }                                                                                       \
    } while (0)

static int parse_kv(int kind, const struct kc_keys *keys, const char *buf, size_t len,
                    struct kc_result *out)
{
    int rc = 0;
    FOR_EACH_LINE(buf, len, lb, le, {
        const char *key;
        size_t klen;
        int64_t value;
        int i;
        rc = parse_kv_line(kind, lb, le, &key, &klen, &value);
        if (rc)
            return rc;
        i = key_index(keys, key, klen);
        if (i >= 0) {
            out->v[i] = value;
            out->found |= (uint64_t)1 << i;
        }
    });
    out->count = __builtin_popcountll(out->found);
    return 0;
}

/* "avg10=1.23": name, '=', digits, '.', exactly two digits -> hundredths. */
static int parse_psi_avg(const char **p, const char *end, const char *name, int64_t *out)
{
    size_t n = strlen(name);
    uint64_t whole;
    int rc;
    if ((size_t)(end - *p) < n + 1 || memcmp(*p, name, n) != 0 || (*p)[n] != '=')
        return EBADMSG;
    *p += n + 1;
    rc = parse_u64(p, end, (uint64_t)INT64_MAX / 100 - 1, &whole);
    if (rc)
        return rc;
    if (end - *p < 3 || (*p)[0] != '.' || !is_digit((*p)[1]) || !is_digit((*p)[2]))
        return EBADMSG;
    *out = (int64_t)(whole * 100 + (uint64_t)((*p)[1] - '0') * 10 + (uint64_t)((*p)[2] - '0'));
    *p += 3;
    return 0;
}

static int parse_psi(const char *buf, size_t len, struct kc_result *out)
{
    static const char *const avgs[] = {"avg10", "avg60", "avg300"};
    FOR_EACH_LINE(buf, len, lb, le, {
        const char *p = lb;
        int base, i, rc;
        uint64_t total;
        if (le - p > 4 && memcmp(p, "some", 4) == 0 && is_blank(p[4]))
            base = KC_PSI_SOME_AVG10;
        else if (le - p > 4 && memcmp(p, "full", 4) == 0 && is_blank(p[4]))
            base = KC_PSI_FULL_AVG10;
        else
            return EBADMSG;
        p += 4;
        for (i = 0; i < 3; i++) {
            if (p >= le || !is_blank(*p))
                return EBADMSG;
            p = skip_blanks(p, le);
            rc = parse_psi_avg(&p, le, avgs[i], &out->v[base + i]);
            if (rc)
                return rc;
        }
        if (p >= le || !is_blank(*p))
            return EBADMSG;
        p = skip_blanks(p, le);
        if (le - p < 6 || memcmp(p, "total=", 6) != 0)
            return EBADMSG;
        p += 6;
        rc = parse_u64(&p, le, (uint64_t)INT64_MAX, &total);
        if (rc)
            return rc;
        if (p != le)
            return EBADMSG;
        out->v[base + 3] = (int64_t)total;
        out->found |= base == KC_PSI_SOME_AVG10 ? 1u : 2u;
    });
    if (!(out->found & 1))
        return out->found ? EBADMSG : ENODATA;
    out->count = (out->found & 2) ? 8 : 4;
    return 0;
}

/* The aggregate line of /proc/stat (per-CPU lines and the rest are skipped unparsed: the node collector
 * reads this every tick). */
static int parse_proc_stat_total(const char *buf, size_t len, struct kc_result *out)
{
    FOR_EACH_LINE(buf, len, lb, le, {
        const char *p = lb + 3;
        int n = 0, rc;
        if (le - lb < 4 || memcmp(lb, "cpu", 3) != 0 || !is_blank(lb[3]))
            continue;
        while (p < le) {
            uint64_t value;
            if (!is_blank(*p))
                return EBADMSG;
            p = skip_blanks(p, le);
            rc = parse_u64(&p, le, (uint64_t)INT64_MAX, &value);
            if (rc)
                return rc;
            if (n < KC_CPU_FIELDS)
                out->v[n++] = (int64_t)value;
        }
        if (n < 4)
            return EBADMSG;
        out->count = n;
        return 0;
    });
    return EBADMSG;
}

int kc_parse(int kind, const struct kc_keys *keys, const char *buf, size_t len, struct kc_result *out)
{
    switch (kind) {
    case KC_KIND_INT:
        return parse_int(buf, buf + len, out);
    case KC_KIND_KV:
    case KC_KIND_MEMINFO:
        return parse_kv(kind, keys, buf, len, out);
    case KC_KIND_CPU_MAX:
        return parse_cpu_max(buf, buf + len, out);
    case KC_KIND_CPULIST:
        return parse_cpulist(buf, buf + len, out);
    case KC_KIND_PSI:
        return parse_psi(buf, len, out);
    case KC_KIND_RAW:
        out->count = (int32_t)len;
        return 0;
    case KC_KIND_PROC_STAT:
        return parse_proc_stat_total(buf, len, out);
    default:
        return EINVAL;
    }
}

int kc_parse_kv_all(int kind, const char *buf, size_t len, char *names, int names_len, int64_t *values,
                    int max, int *count)
{
    int n = 0, used = 0;
    FOR_EACH_LINE(buf, len, lb, le, {
        const char *key;
        size_t klen;
        int64_t value;
        int rc = parse_kv_line(kind, lb, le, &key, &klen, &value);
        if (rc)
            return rc;
        if (n >= max || used + (int)klen + 1 > names_len)
            return ENOSPC;
        memcpy(names + used, key, klen);
        names[used + klen] = '\0';
        used += (int)klen + 1;
        values[n++] = value;
    });
    *count = n;
    return 0;
}

int kc_parse_proc_stat(const char *buf, size_t len, struct kc_cpu_times *out, int cap, int *count)
{
    int n = 1, have_total = 0;
    if (cap < 1)
        return ENOSPC;
    FOR_EACH_LINE(buf, len, lb, le, {
        const char *p = lb + 3;
        struct kc_cpu_times *t;
        int rc;
        if (le - lb < 3 || memcmp(lb, "cpu", 3) != 0)
            continue;
        if (p < le && is_blank(*p)) {
            t = &out[0];
            t->cpu = -1;
            have_total = 1;
        } else {
            uint64_t id;
            rc = parse_u64(&p, le, INT32_MAX, &id);
            if (rc)
                return EBADMSG;
            if (n >= cap)
                return ENOSPC;
            t = &out[n++];
            t->cpu = (int32_t)id;
        }
        memset(t->f, 0, sizeof(t->f));
        t->nfields = 0;
        while (p < le) {
            if (!is_blank(*p))
                return EBADMSG;
            p = skip_blanks(p, le);
            if (t->nfields < KC_CPU_FIELDS) {
                rc = parse_u64(&p, le, UINT64_MAX, &t->f[t->nfields]);
                if (rc)
                    return rc;
                t->nfields++;
            } else {
                /* Fields a future kernel may add: validated, not stored. */
                uint64_t ignored;
                rc = parse_u64(&p, le, UINT64_MAX, &ignored);
                if (rc)
                    return rc;
            }
        }
        if (t->nfields < 4)
            return EBADMSG;
    });
    if (!have_total)
        return EBADMSG;
    *count = n;
    return 0;
}

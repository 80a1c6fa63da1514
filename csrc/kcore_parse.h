/*
 * Internal parsers shared by the C core's readers (not part of the ABI, not seen by cffi).
 * Each parser takes a buffer of len bytes (not NUL-terminated) and fills a kc_result; it returns 0 or a
 * positive errno (EBADMSG malformed, ERANGE out of range, ENODATA empty).
 */
#ifndef KOORDLET_KCORE_PARSE_H
#define KOORDLET_KCORE_PARSE_H
#include <stddef.h>
#include "kcore.h"

/* Selected keys of a KV/MEMINFO entry, parsed once at kc_set_add time. */
struct kc_keys {
    int n;
    unsigned char len[KC_MAX_VALUES];
    char name[KC_MAX_VALUES][64];
};

int kc_keys_parse(const char *spec, struct kc_keys *keys);
int kc_parse(int kind, const struct kc_keys *keys, const char *buf, size_t len, struct kc_result *out);
int kc_parse_kv_all(int kind, const char *buf, size_t len, char *names, int names_len, int64_t *values,
                    int max, int *count);
int kc_parse_proc_stat(const char *buf, size_t len, struct kc_cpu_times *out, int cap, int *count);

#endif

/*
 * kcore_chunk.c - history chunks: a series' samples as the metric store keeps them on disk.
 *
 * Each column (times, then values) is its first double's 8 bytes, then for every next double the XOR of its
 * bits with a prediction's, byte-aligned: a byte holding the XOR's count of leading zero bytes (high nibble)
 * and trailing zero bytes (low nibble), then the bytes between, lowest first.  Samples come at a steady
 * interval, so a time predicted from the two before it (t1 + (t1 - t0), exact IEEE arithmetic the decoder
 * repeats) leaves two or three bytes; a value is predicted by the one before it (Gorilla's XOR).  A general
 * compressor spent 15-25 us on each chunk of a few hundred bytes (a Huffman table per block) for a larger
 * result.  A chunk ends with the 32-bit FNV-1a hash of the columns' bytes (little-endian): a damaged row is
 * refused, not read as other numbers.
 */
#include "kcore.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t bits_of(double d)
{
    uint64_t x;
    memcpy(&x, &d, sizeof x);
    return x;
}

static double double_of(uint64_t x)
{
    double d;
    memcpy(&d, &x, sizeof d);
    return d;
}

static unsigned char *put_raw(unsigned char *p, uint64_t x)
{
    int j;
    for (j = 0; j < 8; j++, x >>= 8)
        *p++ = (unsigned char)x;
    return p;
}

static unsigned char *put_xor(unsigned char *p, uint64_t x)
{
    int lead, trail, k;
    if (x == 0) {
        *p++ = 0x80;
        return p;
    }
    lead = __builtin_clzll(x) / 8;
    trail = __builtin_ctzll(x) / 8;
    *p++ = (unsigned char)(lead << 4 | trail);
    x >>= 8 * trail;
    for (k = 8 - lead - trail; k > 0; k--, x >>= 8)
        *p++ = (unsigned char)x;
    return p;
}

/* The prediction of column[i] from the ones before it. */
static double predict(const double *column, long i, int is_time)
{
    if (is_time && i >= 2)
        return column[i - 1] + (column[i - 1] - column[i - 2]);
    return column[i - 1];
}

static unsigned char *put_column(unsigned char *p, const double *column, long n, int is_time)
{
    long i;
    p = put_raw(p, bits_of(column[0]));
    for (i = 1; i < n; i++)
        p = put_xor(p, bits_of(column[i]) ^ bits_of(predict(column, i, is_time)));
    return p;
}

/* Decodes n doubles into column; returns the byte after them, NULL when the bytes run out or a header is not
 * one put_xor writes. */
static const unsigned char *get_column(const unsigned char *p, const unsigned char *end, double *column, long n,
                                       int is_time)
{
    long i;
    int j;
    uint64_t x = 0;
    if (end - p < 8)
        return NULL;
    for (j = 7; j >= 0; j--)
        x = x << 8 | p[j];
    p += 8;
    column[0] = double_of(x);
    for (i = 1; i < n; i++) {
        int lead, trail, k;
        if (p >= end)
            return NULL;
        lead = *p >> 4;
        trail = *p & 15;
        p++;
        if (lead + trail > 8)
            return NULL;
        k = 8 - lead - trail;
        if (end - p < k)
            return NULL;
        for (x = 0, j = k - 1; j >= 0; j--)
            x = x << 8 | p[j];
        p += k;
        if (k)
            x <<= 8 * trail;
        column[i] = double_of(x ^ bits_of(predict(column, i, is_time)));
    }
    return p;
}

static uint32_t fnv1a(const unsigned char *p, const unsigned char *end)
{
    uint32_t h = 2166136261u;
    for (; p < end; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

long kc_chunk_bound(long n)
{
    return 1 + 4 + (n > 0 ? 2 * (8 + 9 * (n - 1)) : 0);
}

long kc_chunk_encode(const double *times, const double *values, long n, unsigned char *out)
{
    unsigned char *p = out;
    uint32_t h;
    int j;
    *p++ = KC_CHUNK_XOR;
    if (n > 0) {
        p = put_column(p, times, n, 1);
        p = put_column(p, values, n, 0);
    }
    h = fnv1a(out + 1, p);
    for (j = 0; j < 4; j++, h >>= 8)
        *p++ = (unsigned char)h;
    return (long)(p - out);
}

int kc_chunk_decode(const unsigned char *blob, long len, long n, double *times, double *values)
{
    const unsigned char *p = blob, *end = blob + len - 4;
    uint32_t h;
    if (len < 5 || n < 0 || *p++ != KC_CHUNK_XOR)
        return -1;
    h = (uint32_t)end[0] | (uint32_t)end[1] << 8 | (uint32_t)end[2] << 16 | (uint32_t)end[3] << 24;
    if (fnv1a(p, end) != h)
        return -1;
    if (n > 0) {
        p = get_column(p, end, times, n, 1);
        if (p != NULL)
            p = get_column(p, end, values, n, 0);
    }
    return p == end ? 0 : -1;
}

static long pending_of(const double *ring)
{
    long pending = (long)ring[3], len = (long)ring[2];
    return pending < len ? pending : len;
}

long kc_ring_pending_bound(double *const *rings, int n)
{
    long total = 0;
    int i;
    for (i = 0; i < n; i++)
        total += rings[i] == NULL ? 0 : kc_chunk_bound(pending_of(rings[i]));
    return total;
}

long kc_ring_encode_pending(double *const *rings, int n, unsigned char *out, long *offsets, long *counts,
                            double *t0, double *t1)
{
    long most = 0, at = 0;
    double *scratch;
    int i;
    for (i = 0; i < n; i++)
        if (rings[i] != NULL && pending_of(rings[i]) > most)
            most = pending_of(rings[i]);
    scratch = malloc(sizeof(double) * (size_t)(2 * most + 2));
    if (scratch == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        double *ring = rings[i];
        long cap, first, k, pending = ring == NULL ? 0 : pending_of(ring);
        offsets[i] = at;
        counts[i] = pending > 0 ? pending : 0;
        t0[i] = t1[i] = NAN;
        if (pending <= 0)
            continue;
        cap = (long)ring[0];
        first = ((long)ring[1] + (long)ring[2] - pending) % cap;
        for (k = 0; k < pending; k++) {
            long slot = (first + k) % cap;
            scratch[k] = ring[KC_RING_HEADER + slot];
            scratch[most + 1 + k] = ring[KC_RING_HEADER + cap + slot];
        }
        t0[i] = scratch[0];
        t1[i] = scratch[pending - 1];
        at += kc_chunk_encode(scratch, scratch + most + 1, pending, out + at);
        ring[3] = 0;
    }
    offsets[n] = at;
    free(scratch);
    return at;
}

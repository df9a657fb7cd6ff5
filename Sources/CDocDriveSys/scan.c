// scan: finds a word in the folded names the query index keeps in memory (QueryNames).
//
// Why not memmem: glibc's took 0.6 ms to find a word with 3 hits in the 2.5 MB of names of a
// 100,000-item drive; comparing the word's first and last bytes 16 positions at a time (SSE2,
// every x86-64 has it) and checking only where both match took 0.13 ms (fastest of 30 each).
#define _GNU_SOURCE
#include "docdrive_scan.h"
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The first occurrence of needle in h[0..<n], or NULL. */
static const uint8_t *find(const uint8_t *h, size_t n, const uint8_t *needle, size_t m) {
    if (m > n) return NULL;
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i first = _mm_set1_epi8((char)needle[0]), last = _mm_set1_epi8((char)needle[m - 1]);
    for (; i + 15 + m <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(h + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(h + i + m - 1));
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, last)));
        while (mask) {
            unsigned k = (unsigned)__builtin_ctz(mask);
            if (m <= 2 || memcmp(h + i + k + 1, needle + 1, m - 2) == 0) return h + i + k;
            mask &= mask - 1;
        }
    }
#endif
    for (; i + m <= n; i++) {
        if (h[i] == needle[0] && memcmp(h + i, needle, m) == 0) return h + i;
    }
    return NULL;
}

size_t dd_scan_entries(const uint8_t *buf, size_t n, const uint8_t *needle, size_t m, uint32_t *out, size_t cap) {
    size_t found = 0, at = 0;
    if (m == 0) return 0;
    while (at < n) {
        const uint8_t *hit = find(buf + at, n - at, needle, m);
        if (hit == NULL) break;
        if (found == cap) return cap + 1;
        // The entry's start: just after the NUL before the hit (entries are short).
        const uint8_t *start = hit;
        while (start > buf && start[-1] != 0) start--;
        out[found++] = (uint32_t)(start - buf);
        // Go on after the entry's end.
        const uint8_t *end = memchr(hit, 0, n - (size_t)(hit - buf));
        if (end == NULL) break;
        at = (size_t)(end - buf) + 1;
    }
    return found;
}

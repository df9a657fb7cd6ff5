// docdrive_scan: the query index's scan of folded names in memory (QueryNames).
#ifndef DOCDRIVE_SCAN_H
#define DOCDRIVE_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* buf[0..<n] holds entries, each ended by a NUL byte. Writes the offset of the first byte of each
   entry that contains needle[0..<m] (m > 0, no NUL in it) to out, in order, and returns how many
   entries contain it: at most cap, or cap + 1 once there are more (the scan stops there). */
size_t dd_scan_entries(const uint8_t *buf, size_t n, const uint8_t *needle, size_t m, uint32_t *out, size_t cap);

#endif

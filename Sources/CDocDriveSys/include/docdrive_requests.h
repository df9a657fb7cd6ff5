// Which request each libfuse worker holds, for the release barrier.
//
// A file whose open reply carried FOPEN_NOFLUSH gets no FLUSH at close(2): the kernel's RELEASE
// for it is queued in the background when the last descriptor closes, and close returns before
// the daemon has seen it. The kernel hands queued requests to the daemon in order (its
// background queue and its pending queue are both first in, first out), so a RELEASE the daemon
// causes itself comes after every RELEASE queued before it. Once that one arrives, the releases
// before it have all been read by some worker; `dd_fuse_await_earlier_releases` then waits for
// the workers still handling one of them.
//
// `dd_fuse_io_read` (passthrough.c) records, per worker thread, when it starts reading and
// what it read (opcode and unique id, from the request's header).
#ifndef DOCDRIVE_REQUESTS_H
#define DOCDRIVE_REQUESTS_H
#include <stdint.h>
#include <sys/types.h>

/* Called by dd_fuse_io_read around its read(2) of /dev/fuse. */
void dd_fuse_worker_reading(void);
void dd_fuse_worker_read(const void *buf, ssize_t n);

/* On the worker handling a request: waits until no other worker handles a RELEASE that the
   kernel queued before the calling worker's request (at most `timeout_ms`).
   0: none left; -1: timed out; -2: cannot tell (too many threads to track, or a worker's
   state in /proc/self/task cannot be read). */
int dd_fuse_await_earlier_releases(int timeout_ms);

/* The calling thread's id (gettid). */
int dd_gettid(void);
#endif

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
// `dd_fuse_read_request`, called by `dd_fuse_io_read` (passthrough.c), records per worker thread
// when it starts reading and what it read (opcode and unique id, from the request's header).
#ifndef DOCDRIVE_REQUESTS_H
#define DOCDRIVE_REQUESTS_H
#include <stdint.h>
#include <sys/types.h>

/* Reads the next request for `dd_fuse_io_read`, and records it.
 *
 * Before its read(2), a worker polls the device without sleeping for up to DD_FUSE_SPIN_US
 * microseconds (`dd_fuse_set_spin_us` changes it: the session sets DOCDRIVE_FUSE_SPIN_US from
 * the daemon's environment, 0 to 10000, 0 for none), if no other worker polls: a program's
 * next request usually comes a few microseconds after the answer to its last (a LOOKUP then
 * a CREATE, one lstat after another), and the polling worker takes it without being woken. On
 * a machine whose idle processors halt, as a virtual machine's do, waking a worker asleep in
 * read(2) costs more than most requests (README, "A worker that waits awake"). The others
 * sleep in read(2), as before. */
#define DD_FUSE_SPIN_US 20
ssize_t dd_fuse_read_request(int fd, void *buf, size_t len);

/* Sets the polling time in microseconds. */
void dd_fuse_set_spin_us(int us);

/* On the worker handling a request: waits until no other worker handles a RELEASE that the
   kernel queued before the calling worker's request (at most `timeout_ms`).
   0: none left; -1: timed out; -2: cannot tell (too many threads to track, or a worker's
   state in /proc/self/task cannot be read). */
int dd_fuse_await_earlier_releases(int timeout_ms);

/* The calling thread's id (gettid). */
int dd_gettid(void);
#endif

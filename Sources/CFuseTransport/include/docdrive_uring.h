// FUSE over io_uring (Linux 6.14+) on libfuse 3.14, which predates it.
//
// With the `fuse` module's `enable_uring` parameter on, the kernel offers FUSE_OVER_IO_URING in
// its INIT request. When the daemon accepts it, every ordinary request goes through a ring per
// processor instead of read(2) and writev(2) of /dev/fuse: the daemon registers buffers (one
// header and one payload buffer per ring entry) with the kernel, the kernel writes a request
// into an entry and completes it, and the daemon writes the answer into the same buffers and
// hands the entry back in the same submission that asks for the next request. One round trip
// through the kernel per request instead of two system calls, and the request is handled on
// the processor its program runs on.
//
// How it is put on libfuse 3.14 (uring.c):
// * A thread per possible processor (pinned to it) owns that processor's ring, of
//   DD_URING_DEPTH entries. It rebuilds each request as /dev/fuse would have delivered it (the
//   40-byte header, the operation's header, the payload, in one buffer: the payload buffer has
//   room before it) and gives it to fuse_session_process_buf.
// * Answers come back through the custom I/O's writev (passthrough.c), which hands an answer
//   to a ring request to `dd_uring_answer` instead of the device. Only the ring's own thread
//   submits to its ring: an answer made on another thread is posted to it (and an eventfd
//   wakes it).
// * A request that may wait (locks, fsync, the release barrier's RELEASEDIR, the drive's
//   status attributes, which may wait for the release barrier) is handled on a pool of threads
//   instead: a ring thread never waits for another request, which may be queued behind it on
//   its own ring.
// * FORGET, INTERRUPT and INIT still come through /dev/fuse, to libfuse's own workers, as do
//   the requests that come before every ring has registered its entries. Notifications are
//   written to /dev/fuse as before.
#ifndef DOCDRIVE_URING_H
#define DOCDRIVE_URING_H
#include <stdint.h>

struct fuse_session;

/* Entries per ring: a request waiting on the pool (a lock wait) holds its entry until it is
   answered, so there is room for as many waiters as libfuse's worker limit. */
#define DD_URING_DEPTH 64

/* Before the session's loop: the rings are made once the kernel's INIT offers them and the
   daemon's INIT answer has accepted them. `devfd` is the session's /dev/fuse descriptor.
   0, or -errno (a second session in the process). */
int dd_uring_prepare(struct fuse_session *se, int devfd);

/* After the session's loop has ended (the connection is gone): ends the ring threads and the
   pool (waiting for the requests they still handle) and frees the rings. */
void dd_uring_stop(void);

/* Requests the rings have delivered since the session began. */
uint64_t dd_uring_requests(void);

/* Called (from a ring thread) once with a sentence for the daemon's log when the rings serve
   requests or could not be set up; `error` is 0 or the errno. */
typedef void (*dd_uring_report_fn)(int error, const char *sentence);
void dd_uring_set_report(dd_uring_report_fn fn);
#endif

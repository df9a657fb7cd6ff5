// Between passthrough.c, requests.c and uring.c: not for Swift.
#ifndef DOCDRIVE_URING_INTERNAL_H
#define DOCDRIVE_URING_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* INIT flags (fuse_init_in/out): flags2 is valid; FUSE_OVER_IO_URING is bit 41, bit 9 of flags2. */
#define INIT_EXT (1u << 30)
#define OVER_IO_URING_FLAG2 (1u << 9)

/* passthrough.c: what the custom I/O's read notes of every request (the INIT offers, whether
   it asks the daemon to drop setuid/setgid); the ring's requests are noted the same way. */
void dd_fuse_note_request(const char *buf, size_t n);

/* uring.c, from the INIT request: the kernel offers FUSE_OVER_IO_URING. */
void dd_uring_offered(int yes);
/* uring.c, on the INIT answer (fuse_init_out, `len` bytes): accepts the rings when they were
   asked for and offered. */
void dd_uring_patch_init(char *init_out, size_t len);
/* uring.c, once the INIT answer is written: the kernel now takes the rings' entries. */
void dd_uring_init_answered(void);
/* uring.c: when the answer in `iov` is to a ring request, copies it into the request's entry and
   hands the entry back (1, with the answer's length in `*written`); 0 otherwise. */
int dd_uring_answer(const struct iovec *iov, int count, ssize_t *written);
/* uring.c: the same for an answer libfuse splices: `len` bytes of the pipe `fdin`. 1 when it
   was one (with `*written`), 0 otherwise. */
int dd_uring_answer_spliced(int fdin, size_t len, ssize_t *written);
/* uring.c: waits (at most `timeout_ms`) until no ring holds a RELEASE queued before `before`
   and not answered: 0, or -1 when the time ran out. */
int dd_uring_await_releases_before(uint64_t before, int timeout_ms);

/* requests.c: the scheduler state of thread `tid` of this process ('S' sleeping, 'R' running,
   ...), or 0. */
char dd_thread_state(int tid);

/* requests.c: the unique id of the ring request the calling thread handles (0: none). */
void dd_fuse_handling(uint64_t unique);
#endif

// FUSE passthrough (Linux 6.9+) on libfuse 3.14, which predates it.
//
// With passthrough, the kernel sends an open file's reads and writes straight to a backing file
// that the daemon registered, instead of to the daemon. libfuse 3.14 knows neither the INIT flag
// nor the open reply's backing id, so the daemon installs these functions as libfuse's custom
// I/O: they pass every request and reply through unchanged, except the few replies a handler
// marked just before sending them (on the same thread): the INIT reply gains FUSE_PASSTHROUGH,
// an open or create reply gains FOPEN_PASSTHROUGH and its backing id.
#ifndef DOCDRIVE_PASSTHROUGH_H
#define DOCDRIVE_PASSTHROUGH_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

enum dd_fuse_reply_mark {
    DD_REPLY_PLAIN = 0,
    DD_REPLY_INIT = 1,                /* the next reply answers INIT: passthrough when the
                                         backing id is 1, HANDLE_KILLPRIV_V2 when wanted */
    DD_REPLY_OPEN_PASSTHROUGH = 2,    /* the next reply answers OPEN: use backing_id */
    DD_REPLY_CREATE_PASSTHROUGH = 3,  /* the next reply answers CREATE: use backing_id */
};

/* libfuse custom I/O (struct fuse_custom_io's members). */
ssize_t dd_fuse_io_read(int fd, void *buf, size_t len, void *userdata);
ssize_t dd_fuse_io_writev(int fd, struct iovec *iov, int count, void *userdata);
ssize_t dd_fuse_io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                               unsigned int flags, void *userdata);

/* Marks the calling thread's next reply (DD_REPLY_PLAIN clears a mark that was not used). */
void dd_fuse_mark_reply(int mark, int32_t backing_id);
/* 1 once the kernel's INIT request offered passthrough (seen by dd_fuse_io_read). */
int dd_fuse_kernel_offers_passthrough(void);
/* FUSE_HANDLE_KILLPRIV_V2: the kernel stops asking for security.capability before every
   write (it may mark an inode S_NOSEC once it has none), and leaves dropping setuid/setgid to
   the daemon: a request of a caller without CAP_FSETID says so (WRITE, SETATTR of the size,
   OPEN and CREATE with O_TRUNC). Called from the INIT handler: asks for it in the INIT reply
   (marked DD_REPLY_INIT) when the kernel offered it; 1 if so. */
int dd_fuse_want_killpriv_v2(void);
/* 1 when the request this thread is handling asks the daemon to drop setuid/setgid. */
int dd_fuse_request_kills_suidgid(void);
/* FUSE_DEV_IOC_BACKING_OPEN on the session's /dev/fuse descriptor: a backing id (> 0), or
   -errno (EPERM without CAP_SYS_ADMIN, EOPNOTSUPP when the connection has no passthrough,
   ELOOP when the backing filesystem is itself stacked too deep). */
int32_t dd_fuse_backing_open(int devfd, int fd);
/* FUSE_DEV_IOC_BACKING_CLOSE: 0 or -errno. */
int dd_fuse_backing_close(int devfd, int32_t backing_id);
#endif

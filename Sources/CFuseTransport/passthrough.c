// FUSE passthrough on libfuse 3.14: see docdrive_passthrough.h.
// The kernel's protocol structures are stable ABI; their offsets are written out here because
// the installed <linux/fuse.h> may predate passthrough (protocol 7.40).
#define _GNU_SOURCE
#include "docdrive_passthrough.h"
#include "docdrive_requests.h"
#include "uring_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#define FUSE_INIT_OPCODE 26
#define IN_HEADER_SIZE 40           /* struct fuse_in_header */
#define OUT_HEADER_SIZE 16          /* struct fuse_out_header: len, error, unique */
#define PASSTHROUGH_FLAG2 (1u << 5) /* FUSE_PASSTHROUGH is bit 37, that is bit 5 of flags2 */
#define FOPEN_PASSTHROUGH (1u << 7)
/* The open flags the kernel accepts with passthrough (FOPEN_PASSTHROUGH_MASK): direct_io,
   parallel_direct_writes, noflush. Any other, such as keep_cache, makes the open fail (EIO). */
#define FOPEN_PASSTHROUGH_MASK ((1u << 0) | (1u << 6) | (1u << 5) | FOPEN_PASSTHROUGH)
#define OPEN_OUT_SIZE 16            /* struct fuse_open_out: fh, open_flags, backing_id */
#define ENTRY_OUT_SIZE 128          /* struct fuse_entry_out (protocol 7.9+) */
/* The fuse mount's own stack depth: its backing files may live on a plain filesystem
   (depth 0), and an overlay may still be stacked on the mount. */
#define MAX_STACK_DEPTH 1

struct dd_backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
#define DD_IOC_BACKING_OPEN _IOW(229, 1, struct dd_backing_map)
#define DD_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

/* FUSE_HANDLE_KILLPRIV_V2 (INIT flags bit 28, protocol 7.33) and the request flags it brings:
   the daemon, not the kernel, drops setuid/setgid when a caller without CAP_FSETID writes,
   truncates or opens with O_TRUNC (docdrive_passthrough.h). */
#define HANDLE_KILLPRIV_V2 (1u << 28)
#define OP_SETATTR 4
#define OP_OPEN 14
#define OP_WRITE 16
#define OP_CREATE 35
#define WRITE_KILL_SUIDGID (1u << 2)   /* fuse_write_in.write_flags, at 20 */
#define FATTR_KILL_SUIDGID (1u << 11)  /* fuse_setattr_in.valid, at 0 */
#define OPEN_KILL_SUIDGID (1u << 0)    /* fuse_open_in.open_flags at 4, fuse_create_in's at 12 */

static atomic_int offered = 0;
static atomic_ullong init_unique = 0;   /* the INIT request's, until it is answered */
static atomic_int killpriv_offered = 0;
static atomic_int killpriv_wanted = 0;
static __thread int request_kills_suidgid = 0;
static __thread int pending_mark = DD_REPLY_PLAIN;
static __thread int32_t pending_id = 0;

static uint32_t get32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void put32(char *p, uint32_t v) { memcpy(p, &v, 4); }

void dd_fuse_note_request(const char *p, size_t n) {
    const char *in = p + IN_HEADER_SIZE;
    int kills = 0;
    if (n >= IN_HEADER_SIZE) {
        switch (get32(p + 4)) {
        case OP_WRITE: kills = n >= IN_HEADER_SIZE + 24 && (get32(in + 20) & WRITE_KILL_SUIDGID); break;
        case OP_SETATTR: kills = n >= IN_HEADER_SIZE + 4 && (get32(in) & FATTR_KILL_SUIDGID); break;
        case OP_OPEN: kills = n >= IN_HEADER_SIZE + 8 && (get32(in + 4) & OPEN_KILL_SUIDGID); break;
        case OP_CREATE: kills = n >= IN_HEADER_SIZE + 16 && (get32(in + 12) & OPEN_KILL_SUIDGID); break;
        case FUSE_INIT_OPCODE:
            /* fuse_init_in after the header: major, minor, max_readahead, flags, flags2. */
            if (n >= IN_HEADER_SIZE + 20) {
                uint32_t flags = get32(in + 12), flags2 = get32(in + 16);
                atomic_store(&offered, (flags & INIT_EXT) && (flags2 & PASSTHROUGH_FLAG2));
                atomic_store(&killpriv_offered, (flags & HANDLE_KILLPRIV_V2) != 0);
                dd_uring_offered((flags & INIT_EXT) && (flags2 & OVER_IO_URING_FLAG2));
                uint64_t unique;
                memcpy(&unique, p + 8, 8);
                atomic_store(&init_unique, unique);
            }
            break;
        }
    }
    request_kills_suidgid = kills;
}

ssize_t dd_fuse_io_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t n = dd_fuse_read_request(fd, buf, len);
    dd_fuse_note_request(buf, n > 0 ? (size_t)n : 0);
    return n;
}

static void patch_open_out(char *o, int32_t id) {
    put32(o + 8, (get32(o + 8) | FOPEN_PASSTHROUGH) & FOPEN_PASSTHROUGH_MASK);
    memcpy(o + 12, &id, 4);
}

ssize_t dd_fuse_io_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    int mark = pending_mark;
    if (mark != DD_REPLY_PLAIN) {
        pending_mark = DD_REPLY_PLAIN;
        int32_t error;
        if (count >= 2 && iov[0].iov_len == OUT_HEADER_SIZE
            && (memcpy(&error, (char *)iov[0].iov_base + 4, 4), error == 0)) {
            char *a = iov[1].iov_base;
            size_t l = iov[1].iov_len;
            if (mark == DD_REPLY_INIT && l >= 40) {
                /* fuse_init_out: flags at 12, flags2 at 32, max_stack_depth at 36. */
                if (atomic_load(&killpriv_wanted)) put32(a + 12, get32(a + 12) | HANDLE_KILLPRIV_V2);
                if (pending_id) {
                    put32(a + 12, get32(a + 12) | INIT_EXT);
                    put32(a + 32, get32(a + 32) | PASSTHROUGH_FLAG2);
                    put32(a + 36, MAX_STACK_DEPTH);
                }
            } else if (mark == DD_REPLY_OPEN_PASSTHROUGH && l == OPEN_OUT_SIZE) {
                patch_open_out(a, pending_id);
            } else if (mark == DD_REPLY_CREATE_PASSTHROUGH && l == ENTRY_OUT_SIZE + OPEN_OUT_SIZE) {
                patch_open_out(a + ENTRY_OUT_SIZE, pending_id);
            }
        }
    }
    /* The INIT answer accepts the rings when they were asked for (docdrive_uring.h). */
    uint64_t unique = 0, init = atomic_load(&init_unique);
    if (count >= 1 && iov[0].iov_len == OUT_HEADER_SIZE) memcpy(&unique, (char *)iov[0].iov_base + 8, 8);
    if (init != 0 && unique == init) {
        int32_t error;
        memcpy(&error, (char *)iov[0].iov_base + 4, 4);
        if (error == 0 && count >= 2) dd_uring_patch_init(iov[1].iov_base, iov[1].iov_len);
        ssize_t n = writev(fd, iov, count);
        int e = errno;
        atomic_store(&init_unique, 0);
        dd_uring_init_answered();
        errno = e;
        return n;
    }
    ssize_t written;
    if (dd_uring_answer(iov, count, &written)) return written;
    return writev(fd, iov, count);
}

ssize_t dd_fuse_io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                               unsigned int flags, void *userdata) {
    (void)userdata;
    ssize_t written;
    if (offin == NULL && dd_uring_answer_spliced(fdin, len, &written)) return written;
    return splice(fdin, offin, fdout, offout, len, flags);
}

void dd_fuse_mark_reply(int mark, int32_t backing_id) {
    pending_mark = mark;
    pending_id = backing_id;
}

int dd_fuse_kernel_offers_passthrough(void) { return atomic_load(&offered); }

int dd_fuse_want_killpriv_v2(void) {
    int on = atomic_load(&killpriv_offered);
    atomic_store(&killpriv_wanted, on);
    return on;
}

int dd_fuse_request_kills_suidgid(void) { return request_kills_suidgid; }

int32_t dd_fuse_backing_open(int devfd, int fd) {
    struct dd_backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
    int r = ioctl(devfd, DD_IOC_BACKING_OPEN, &map);
    return r < 0 ? -errno : r;
}

int dd_fuse_backing_close(int devfd, int32_t backing_id) {
    uint32_t id = (uint32_t)backing_id;
    return ioctl(devfd, DD_IOC_BACKING_CLOSE, &id) < 0 ? -errno : 0;
}

// CDocDriveSys: thin C wrappers for Linux calls Swift cannot reach directly.
#define _GNU_SOURCE
#include "docdrive_sys.h"
#include <errno.h>
#include <stdint.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <spawn.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/fsuid.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <linux/fs.h>

const int dd_O_PATH = O_PATH;
const int dd_O_NOFOLLOW = O_NOFOLLOW;
const int dd_O_DIRECTORY = O_DIRECTORY;
const int dd_O_DIRECT = O_DIRECT;
const int dd_O_CLOEXEC = O_CLOEXEC;
const int dd_O_NOATIME = O_NOATIME;
const int dd_AT_EMPTY_PATH = AT_EMPTY_PATH;
const int dd_AT_SYMLINK_NOFOLLOW = AT_SYMLINK_NOFOLLOW;
const int dd_AT_REMOVEDIR = AT_REMOVEDIR;
const int dd_AT_SYMLINK_FOLLOW = AT_SYMLINK_FOLLOW;
const int dd_RENAME_NOREPLACE = RENAME_NOREPLACE;
const int dd_RENAME_EXCHANGE = RENAME_EXCHANGE;

int dd_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

ssize_t dd_copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned int flags) {
    return copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
}

int dd_fallocate(int fd, int mode, off_t offset, off_t len) { return fallocate(fd, mode, offset, len); }


static void proc_name(int fd, char *buf, size_t len) { snprintf(buf, len, "/proc/self/fd/%d", fd); }

int dd_contains(const void *hay, size_t hay_len, const void *needle, size_t needle_len) {
    return memmem(hay, hay_len, needle, needle_len) != NULL;
}

int dd_proc_path(int pathfd, char *buf, size_t len) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    ssize_t n = readlink(p, buf, len - 1);
    if (n < 0) return -1;
    buf[n] = 0;
    return (int)n;
}

int dd_reopen(int pathfd, int flags) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return open(p, (flags & ~O_NOFOLLOW) | O_CLOEXEC);
}

int dd_set_nofile_limit_max(uint64_t *result) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    /* Every inode the kernel holds costs one O_PATH descriptor: a root daemon raises the hard
       limit to the system's nr_open (a folder of 100,000 entries listed with ls -l needs it). */
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");
    if (f) {
        unsigned long long nr = 0;
        if (fscanf(f, "%llu", &nr) == 1 && nr > rl.rlim_max) {
            struct rlimit want = { (rlim_t)nr, (rlim_t)nr };
            if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
        }
        fclose(f);
    }
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    *result = rl.rlim_cur;
    return 0;
}

int dd_utimensat_fd(int pathfd, const struct timespec times[2], int is_symlink) {
    if (is_symlink) return utimensat(pathfd, "", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return utimensat(AT_FDCWD, p, times, 0);
}

int dd_fchmod_path(int pathfd, mode_t mode) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return chmod(p, mode);
}

int dd_access_fd(int pathfd, int mode) {
    /* faccessat2 (Linux 5.8+) checks the descriptor's own file with the effective ids; the
       /proc link is the fallback where it is missing. */
    long r = syscall(SYS_faccessat2, pathfd, "", mode, AT_EMPTY_PATH | AT_EACCESS);
    if (r == 0 || errno != ENOSYS) return (int)r;
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return faccessat(AT_FDCWD, p, mode, AT_EACCESS);
}

int dd_truncate_path(int pathfd, off_t size) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return truncate(p, size);
}

ssize_t dd_fgetxattr(int fd, const char *name, void *value, size_t size) {
    return fgetxattr(fd, name, value, size);
}
int dd_fremovexattr(int fd, const char *name) {
    return fremovexattr(fd, name);
}
int dd_syncfs(int fd) {
    return syncfs(fd);
}
int dd_fsetxattr(int fd, const char *name, const void *value, size_t size, int flags) {
    return fsetxattr(fd, name, value, size, flags);
}
ssize_t dd_getxattr_path(int pathfd, const char *name, void *value, size_t size) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return getxattr(p, name, value, size);
}
/* getxattrat(2), Linux 6.13: the same number on every architecture. */
#ifndef SYS_getxattrat
#define SYS_getxattrat 464
#endif
struct dd_xattr_args { uint64_t value; uint32_t size; uint32_t flags; };
static int getxattrat_missing;

ssize_t dd_getxattr_at(int dirfd, const char *path, const char *name, void *value, size_t size) {
    if (!__atomic_load_n(&getxattrat_missing, __ATOMIC_RELAXED)) {
        struct dd_xattr_args args = { (uint64_t)(uintptr_t)value, (uint32_t)size, 0 };
        long n = syscall(SYS_getxattrat, dirfd, path, AT_SYMLINK_NOFOLLOW, name, &args, sizeof args);
        if (n >= 0 || errno != ENOSYS) return (ssize_t)n;
        __atomic_store_n(&getxattrat_missing, 1, __ATOMIC_RELAXED);
    }
    int fd = openat(dirfd, path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = dd_getxattr_path(fd, name, value, size);
    int e = errno;
    close(fd);
    errno = e;
    return n;
}

int dd_setxattr_path(int pathfd, const char *name, const void *value, size_t size, int flags) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return setxattr(p, name, value, size, flags);
}
ssize_t dd_listxattr_path(int pathfd, char *list, size_t size) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return listxattr(p, list, size);
}
int dd_removexattr_path(int pathfd, const char *name) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return removexattr(p, name);
}
int dd_linkat_path(int pathfd, int newdirfd, const char *newname) {
    char p[64];
    proc_name(pathfd, p, sizeof p);
    return linkat(AT_FDCWD, p, newdirfd, newname, AT_SYMLINK_FOLLOW);
}

/* File handles, so that an idle node's descriptor can be closed and the node reopened later
   (wherever it was renamed to). The buffer holds a struct file_handle; copied through an
   aligned local because the caller's bytes need not be aligned. */
union dd_handle_buf {
    struct file_handle fh;
    unsigned char raw[DD_HANDLE_MAX];
};

int dd_name_to_handle(int pathfd, unsigned char *buf, int len) {
    union dd_handle_buf u;
    int mount_id;
    if (len < (int)sizeof u.fh) { errno = EINVAL; return -1; }
    u.fh.handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(pathfd, "", &u.fh, &mount_id, AT_EMPTY_PATH) != 0) return -1;
    int total = (int)(sizeof u.fh + u.fh.handle_bytes);
    if (total > len) { errno = EOVERFLOW; return -1; }
    memcpy(buf, u.raw, total);
    return total;
}

int dd_open_by_handle(int mountfd, const unsigned char *buf, int len, int flags) {
    union dd_handle_buf u;
    if (len < (int)sizeof u.fh || len > (int)sizeof u.raw) { errno = EINVAL; return -1; }
    memcpy(u.raw, buf, len);
    return open_by_handle_at(mountfd, &u.fh, flags | O_CLOEXEC);
}

/* Sets the calling thread's umask. The first call gives the thread a umask of its own
   (unshare(CLONE_FS)) and sets it, whatever the mask: a thread shares the umask of the thread
   that started it, which is not always the daemon's 0 (libfuse starts a new worker from a worker
   that had set a caller's umask; such a worker, taking "shared, so 0" for granted, made a folder
   with 022 under a caller's 0). The thread's current mask is remembered, so setting the same
   one again costs no system call. Returns the previous umask, or -1 if the thread cannot have
   its own. */
int dd_thread_umask(mode_t mask) {
    static __thread int own = 0;
    static __thread int current = -1;
    if (!own) {
        if (unshare(CLONE_FS) != 0) return -1;
        own = 1;
    }
    if ((int)mask == current) return current;
    int old = (int)umask(mask);
    current = (int)mask;
    return old;
}

int dd_errno(void) { return errno; }

int dd_spawn_daemon(const char *path, char *const argv[], int ready_fd_child, int ready_fd_parent, const char *log_path, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int rc;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    /* Close the parent's end first: it may be descriptor 3 itself. */
    if (ready_fd_parent >= 0) posix_spawn_file_actions_addclose(&fa, ready_fd_parent);
    posix_spawn_file_actions_adddup2(&fa, ready_fd_child, 3);
    extern char **environ;
    rc = posix_spawn(pid, path, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return rc;
}

int dd_stat(const char *path, struct stat *st) { return stat(path, st); }
const long dd_UTIME_NOW = UTIME_NOW;
const long dd_UTIME_OMIT = UTIME_OMIT;
int dd_statvfs(const char *path, struct statvfs *sv) { return statvfs(path, sv); }

void dd_background_thread(void) {
    pid_t tid = (pid_t)syscall(SYS_gettid);
    setpriority(PRIO_PROCESS, (id_t)tid, 10);
    /* ioprio_set(IOPRIO_WHO_PROCESS, tid, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)): the disk
       serves uploads when nothing else waits (mq-deadline and bfq honour it; mq-deadline
       still serves a starved request after its aging time, 10 s). With the lowest best-effort
       level instead, a 1 GiB upload's writes cut a native cold read from 1.2-1.4 GB/s to
       0.8-1.0 GB/s. */
    syscall(SYS_ioprio_set, 1, tid, (3 << 13) | 0);
}

#include <linux/openat2.h>
/* Opens `path` below `dirfd` without leaving it: no "..", no absolute path, no symlink on the
   way (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). */
int dd_open_beneath(int dirfd, const char *path, int flags, mode_t mode) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)(flags | O_CLOEXEC);
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

const int dd_O_TMPFILE = O_TMPFILE;

#include <sys/socket.h>
/* accept4 with SOCK_CLOEXEC (Glibc's overlay lacks accept4). */
int dd_accept(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC); }

/* The uid of a Unix socket's peer, or -1. */
long long dd_peer_uid(int fd) {
    struct ucred c;
    socklen_t len = sizeof c;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) return -1;
    return (long long)c.uid;
}
const short dd_F_RDLCK = F_RDLCK;
const short dd_F_WRLCK = F_WRLCK;
const short dd_F_UNLCK = F_UNLCK;
const int dd_LOCK_SH = LOCK_SH;
const int dd_LOCK_EX = LOCK_EX;
const int dd_LOCK_UN = LOCK_UN;
const int dd_LOCK_NB = LOCK_NB;

int dd_ofd_setlk(int fd, short type, int64_t start, int64_t len) {
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len, .l_pid = 0 };
    return fcntl(fd, F_OFD_SETLK, &fl);
}

int dd_ofd_getlk(int fd, short *type, int64_t *start, int64_t *len, int32_t *pid) {
    struct flock fl = { .l_type = *type, .l_whence = SEEK_SET, .l_start = *start, .l_len = *len, .l_pid = 0 };
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
    *type = fl.l_type;
    *start = fl.l_start;
    *len = fl.l_len;
    *pid = fl.l_pid;
    return 0;
}

int dd_flock(int fd, int op) { return flock(fd, op); }

/* Fills buf with random bytes from the kernel (getrandom); returns how many. */
long dd_random(void *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = getrandom((char *)buf + done, len - done, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        done += (size_t)n;
    }
    return (long)done;
}

/* mount_setattr(2) (Linux 5.12): sets the access-time handling of the mount at `path` (one of
   MOUNT_ATTR_RELATIME, _NOATIME, _STRICTATIME, with _NODIRATIME or not), leaving its other
   attributes as they are. Root only. */
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
struct dd_mount_attr { uint64_t attr_set; uint64_t attr_clr; uint64_t propagation; uint64_t userns_fd; };
int dd_set_mount_atime(const char *path, int noatime, int strictatime, int nodiratime) {
    struct dd_mount_attr a;
    memset(&a, 0, sizeof a);
    a.attr_clr = 0x70 /* MOUNT_ATTR__ATIME */ | 0x80 /* MOUNT_ATTR_NODIRATIME */;
    a.attr_set = noatime ? 0x10 : strictatime ? 0x20 : 0x00;
    if (nodiratime) a.attr_set |= 0x80;
    return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, 0, &a, sizeof a);
}

/* memfd_create(2) without MFD_CLOEXEC: the descriptor outlives an exec (docdrive pick runs its
   picker from one). */
int dd_memfd(const char *name) {
    return memfd_create(name, 0);
}

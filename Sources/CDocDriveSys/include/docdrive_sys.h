// CDocDriveSys: Linux calls and constants the Glibc Swift overlay lacks.
#ifndef DOCDRIVE_SYS_H
#define DOCDRIVE_SYS_H

#include <sys/types.h>
#include <sys/stat.h>
#include <stdint.h>
#include <sys/statvfs.h>

extern const int dd_O_PATH;
extern const int dd_O_NOFOLLOW;
extern const int dd_O_DIRECTORY;
extern const int dd_O_DIRECT;
extern const int dd_O_CLOEXEC;
/* Reads that leave the file's atime alone (the owner or CAP_FOWNER only: EPERM otherwise). */
extern const int dd_O_NOATIME;
extern const int dd_AT_EMPTY_PATH;
extern const int dd_AT_SYMLINK_NOFOLLOW;
extern const int dd_AT_REMOVEDIR;
extern const int dd_AT_SYMLINK_FOLLOW;
extern const int dd_RENAME_NOREPLACE;
extern const int dd_RENAME_EXCHANGE;
extern const long dd_UTIME_NOW;
extern const long dd_UTIME_OMIT;
int dd_statvfs(const char *path, struct statvfs *sv);

int dd_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);
ssize_t dd_copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned int flags);
int dd_fallocate(int fd, int mode, off_t offset, off_t len);
/* Opens an O_PATH descriptor through /proc/self/fd for ops that refuse O_PATH. */
int dd_reopen(int pathfd, int flags);
int dd_proc_path(int pathfd, char *buf, size_t len);
/* Whether `needle` occurs in `hay` (memmem, a GNU extension Swift's Glibc does not show). */
int dd_contains(const void *hay, size_t hay_len, const void *needle, size_t needle_len);
int dd_set_nofile_limit_max(uint64_t *result);
int dd_utimensat_fd(int pathfd, const struct timespec times[2], int is_symlink);
int dd_fchmod_path(int pathfd, mode_t mode);
int dd_truncate_path(int pathfd, off_t size);
/* access(2) of the descriptor's file (O_PATH is fine) for the effective ids. */
int dd_access_fd(int pathfd, int mode);
ssize_t dd_fgetxattr(int fd, const char *name, void *value, size_t size);
ssize_t dd_getxattr_path(int pathfd, const char *name, void *value, size_t size);
/* The extended attribute `name` of `path` in `dirfd`, not following a last symbolic link:
   getxattrat(2) where the kernel has it (6.13), else an O_PATH open and dd_getxattr_path. */
ssize_t dd_getxattr_at(int dirfd, const char *path, const char *name, void *value, size_t size);
int dd_setxattr_path(int pathfd, const char *name, const void *value, size_t size, int flags);
int dd_fremovexattr(int fd, const char *name);
/* syncfs(2): the file system holding fd, written to its disk. */
int dd_syncfs(int fd);
int dd_fsetxattr(int fd, const char *name, const void *value, size_t size, int flags);
ssize_t dd_listxattr_path(int pathfd, char *list, size_t size);
int dd_removexattr_path(int pathfd, const char *name);
int dd_linkat_path(int pathfd, int newdirfd, const char *newname);
int dd_stat(const char *path, struct stat *st);
/* Room for a struct file_handle with MAX_HANDLE_SZ bytes. */
#define DD_HANDLE_MAX (8 + 128)
/* The file handle of an O_PATH descriptor, written to buf: its length, or -1 with errno. */
int dd_name_to_handle(int pathfd, unsigned char *buf, int len);
/* Reopens a handle from dd_name_to_handle; mountfd: an open (not O_PATH) folder on the same filesystem. */
int dd_open_by_handle(int mountfd, const unsigned char *buf, int len, int flags);
int dd_errno(void);
/* openat2 beneath dirfd: no "..", no absolute paths, no symlinks. */
int dd_open_beneath(int dirfd, const char *path, int flags, mode_t mode);
extern const int dd_O_TMPFILE;
int dd_accept(int fd);
long long dd_peer_uid(int fd);
/* Advisory locks. fcntl takes a struct flock* through varargs and flock() shares its name with
   that struct, so Swift reaches both through these. type: F_RDLCK, F_WRLCK or F_UNLCK;
   len 0: to the end of the file, however far it grows. */
extern const short dd_F_RDLCK;
extern const short dd_F_WRLCK;
extern const short dd_F_UNLCK;
extern const int dd_LOCK_SH;
extern const int dd_LOCK_EX;
extern const int dd_LOCK_UN;
extern const int dd_LOCK_NB;
/* F_OFD_SETLK (never waits): 0, or -1 with errno (EAGAIN/EACCES: held by someone else). */
int dd_ofd_setlk(int fd, short type, int64_t start, int64_t len);
/* F_OFD_GETLK: on return *type is F_UNLCK when free, else the first conflicting lock
   (its range and pid; -1 for an OFD lock). */
int dd_ofd_getlk(int fd, short *type, int64_t *start, int64_t *len, int32_t *pid);
int dd_flock(int fd, int op);
/* The calling thread's own umask (see sys.c); returns the previous one or -1. */
int dd_thread_umask(mode_t mask);
/* Linux's spawn: start a detached daemon with extra descriptors. */
int dd_spawn_daemon(const char *path, char *const argv[], int ready_fd_child, int ready_fd_parent, const char *log_path, pid_t *pid);
/* Lowers the calling thread's CPU and I/O priority (background uploads yield to the user's work). */
void dd_background_thread(void);

/* Fills buf with random bytes from the kernel (getrandom); returns how many. */
long dd_random(void *buf, size_t len);
/* The crash guard (crashguard.c): `install` writes FOLDER/STORE when a fault kills the process
   on a thread that `thread_store` named as working for STORE (NULL: for none). */
int dd_crash_guard_install(const char *folder);
void dd_crash_guard_thread_store(const char *name);
const char *dd_crash_guard_current_store(void);
/* Sets how the mount at PATH moves access times (mount_setattr(2), root only); -1 and errno. */
int dd_set_mount_atime(const char *path, int noatime, int strictatime, int nodiratime);
/* A file in memory (memfd_create(2)), kept across exec: a program handed to an interpreter as
   /proc/self/fd/N. -1 and errno. */
int dd_memfd(const char *name);
#endif

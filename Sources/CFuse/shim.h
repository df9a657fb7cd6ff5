// CFuse: libfuse3's low-level API for Swift, with inline wrappers for what
// Swift cannot call directly (function-like macros, bitfields, varargs).
#ifndef DOCDRIVE_CFUSE_SHIM_H
#define DOCDRIVE_CFUSE_SHIM_H

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <fuse3/fuse_common.h>
#include <stdlib.h>
#include <string.h>

/* FUSE_ARGS_INIT is a macro. */
static inline struct fuse_args cfuse_args_init(int argc, char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(argc, argv);
    return a;
}

/* fuse_session_loop_mt is a macro that picks a versioned symbol. */
static inline int cfuse_session_loop_mt(struct fuse_session *se, unsigned int max_idle, unsigned int max_threads) {
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    if (!cfg) return -1;
    fuse_loop_cfg_set_clone_fd(cfg, 1);
    fuse_loop_cfg_set_idle_threads(cfg, max_idle);
    fuse_loop_cfg_set_max_threads(cfg, max_threads);
    int r = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
    return r;
}

/* Bitfields of fuse_file_info. */
static inline void cfuse_fi_set_open_flags(struct fuse_file_info *fi, int direct_io, int keep_cache, int noflush) {
    fi->direct_io = direct_io ? 1 : 0;
    fi->keep_cache = keep_cache ? 1 : 0;
    fi->noflush = noflush ? 1 : 0;
}

/* For a folder: the kernel may cache its listing (cache_readdir), and may keep what it has
   cached from earlier opens (keep_cache; without it the kernel drops that at this open). */
static inline void cfuse_fi_set_dir_flags(struct fuse_file_info *fi, int cache_readdir, int keep_cache) {
    fi->cache_readdir = cache_readdir ? 1 : 0;
    fi->keep_cache = keep_cache ? 1 : 0;
}

static inline int cfuse_fi_flush(const struct fuse_file_info *fi) { return fi->flush; }

/* Reply to a read with data taken straight from a file descriptor:
   libfuse splices it into /dev/fuse when it can, and preads otherwise. */
static inline int cfuse_reply_data_fd(fuse_req_t req, int fd, size_t size, off_t off) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = fd;
    buf.buf[0].pos = off;
    return fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static inline void cfuse_conn_enable(struct fuse_conn_info *conn, unsigned int cap) {
    if (conn->capable & cap) conn->want |= cap;
}
static inline void cfuse_conn_disable(struct fuse_conn_info *conn, unsigned int cap) {
    conn->want &= ~cap;
}

#endif

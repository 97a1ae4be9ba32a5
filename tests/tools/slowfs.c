/* slowfs: a FUSE passthrough of a directory whose fsync/fdatasync take a
 * fixed extra time, like a disk without a fast write cache.
 *
 * Why: flyto-bench compares submit_plan acks with a plain fdatasync loop
 * on the same filesystem. On a VM disk whose flush costs ~30 us, that
 * ratio measures CPU per ack, not group commit. Running the bench with
 * --dir on this filesystem shows the ratios where a flush costs what a
 * real disk's does. Not built by the tests or CI.
 *
 *   apt-get install libfuse3-dev fuse3     # Debian; run as root (FUSE mount)
 *   cc -O2 -o /tmp/slowfs tests/tools/slowfs.c $(pkg-config --cflags --libs fuse3)
 *   mkdir -p /tmp/slow-backing /tmp/slow
 *   SLOWFS_BACKING=/tmp/slow-backing SLOWFS_DELAY_US=1000 /tmp/slowfs /tmp/slow
 *   cargo run --release -p flyto-tests --bin flyto-bench -- submit --dir /tmp/slow
 *   fusermount3 -u /tmp/slow
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static const char *backing;
static long delay_us;

static void real(char *out, const char *path) {
    snprintf(out, PATH_MAX, "%s%s", backing, path);
}

static void flush_delay(void) {
    struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

#define REAL(p)        \
    char r[PATH_MAX]; \
    real(r, p)

static int s_getattr(const char *p, struct stat *st, struct fuse_file_info *fi) {
    if (fi) return fstat(fi->fh, st) == -1 ? -errno : 0;
    REAL(p);
    return lstat(r, st) == -1 ? -errno : 0;
}

static int s_readdir(const char *p, void *buf, fuse_fill_dir_t fill, off_t off,
                     struct fuse_file_info *fi, enum fuse_readdir_flags fl) {
    (void)off, (void)fi, (void)fl;
    REAL(p);
    DIR *d = opendir(r);
    if (!d) return -errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st = {0};
        st.st_ino = e->d_ino;
        st.st_mode = e->d_type << 12;
        if (fill(buf, e->d_name, &st, 0, 0)) break;
    }
    closedir(d);
    return 0;
}

static int s_mkdir(const char *p, mode_t m) { REAL(p); return mkdir(r, m) == -1 ? -errno : 0; }
static int s_unlink(const char *p) { REAL(p); return unlink(r) == -1 ? -errno : 0; }
static int s_rmdir(const char *p) { REAL(p); return rmdir(r) == -1 ? -errno : 0; }
static int s_chmod(const char *p, mode_t m, struct fuse_file_info *fi) {
    if (fi) return fchmod(fi->fh, m) == -1 ? -errno : 0;
    REAL(p);
    return chmod(r, m) == -1 ? -errno : 0;
}
static int s_access(const char *p, int m) { REAL(p); return access(r, m) == -1 ? -errno : 0; }
static int s_symlink(const char *from, const char *to) { REAL(to); return symlink(from, r) == -1 ? -errno : 0; }
static int s_readlink(const char *p, char *buf, size_t n) {
    REAL(p);
    ssize_t k = readlink(r, buf, n - 1);
    if (k == -1) return -errno;
    buf[k] = 0;
    return 0;
}

static int s_rename(const char *from, const char *to, unsigned int flags) {
    char a[PATH_MAX], b[PATH_MAX];
    real(a, from);
    real(b, to);
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, flags) == -1 ? -errno : 0;
}

static int s_truncate(const char *p, off_t size, struct fuse_file_info *fi) {
    if (fi) return ftruncate(fi->fh, size) == -1 ? -errno : 0;
    REAL(p);
    return truncate(r, size) == -1 ? -errno : 0;
}

static int s_utimens(const char *p, const struct timespec tv[2], struct fuse_file_info *fi) {
    if (fi) return futimens(fi->fh, tv) == -1 ? -errno : 0;
    REAL(p);
    return utimensat(AT_FDCWD, r, tv, AT_SYMLINK_NOFOLLOW) == -1 ? -errno : 0;
}

static int s_open(const char *p, struct fuse_file_info *fi) {
    REAL(p);
    int fd = open(r, fi->flags);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int s_create(const char *p, mode_t m, struct fuse_file_info *fi) {
    REAL(p);
    int fd = open(r, fi->flags, m);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int s_read(const char *p, char *buf, size_t n, off_t off, struct fuse_file_info *fi) {
    (void)p;
    ssize_t k = pread(fi->fh, buf, n, off);
    return k == -1 ? -errno : (int)k;
}

static int s_write(const char *p, const char *buf, size_t n, off_t off, struct fuse_file_info *fi) {
    (void)p;
    ssize_t k = pwrite(fi->fh, buf, n, off);
    return k == -1 ? -errno : (int)k;
}

static int s_statfs(const char *p, struct statvfs *st) {
    REAL(p);
    return statvfs(r, st) == -1 ? -errno : 0;
}

static int s_release(const char *p, struct fuse_file_info *fi) {
    (void)p;
    close(fi->fh);
    return 0;
}

static int s_fsync(const char *p, int datasync, struct fuse_file_info *fi) {
    (void)p;
    flush_delay();
    int rc = datasync ? fdatasync(fi->fh) : fsync(fi->fh);
    return rc == -1 ? -errno : 0;
}

static int s_fsyncdir(const char *p, int datasync, struct fuse_file_info *fi) {
    (void)datasync, (void)fi;
    REAL(p);
    int fd = open(r, O_RDONLY | O_DIRECTORY);
    if (fd == -1) return -errno;
    flush_delay();
    int rc = fsync(fd);
    close(fd);
    return rc == -1 ? -errno : 0;
}

static int s_fallocate(const char *p, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
    (void)p;
    return fallocate(fi->fh, mode, off, len) == -1 ? -errno : 0;
}

static int s_flock(const char *p, struct fuse_file_info *fi, int op) {
    (void)p;
    return flock(fi->fh, op) == -1 ? -errno : 0;
}

static void *s_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->use_ino = 1;
    /* The backing files change only through this mount. */
    cfg->entry_timeout = cfg->attr_timeout = cfg->negative_timeout = 1.0;
    return NULL;
}

static const struct fuse_operations ops = {
    .init = s_init,
    .getattr = s_getattr,
    .readdir = s_readdir,
    .mkdir = s_mkdir,
    .unlink = s_unlink,
    .rmdir = s_rmdir,
    .rename = s_rename,
    .chmod = s_chmod,
    .access = s_access,
    .symlink = s_symlink,
    .readlink = s_readlink,
    .truncate = s_truncate,
    .utimens = s_utimens,
    .open = s_open,
    .create = s_create,
    .read = s_read,
    .write = s_write,
    .statfs = s_statfs,
    .release = s_release,
    .fsync = s_fsync,
    .fsyncdir = s_fsyncdir,
    .fallocate = s_fallocate,
    .flock = s_flock,
};

int main(int argc, char *argv[]) {
    backing = getenv("SLOWFS_BACKING");
    const char *d = getenv("SLOWFS_DELAY_US");
    if (!backing || !d) {
        fprintf(stderr, "slowfs: set SLOWFS_BACKING (a directory) and SLOWFS_DELAY_US (extra microseconds per fsync), then: slowfs MOUNTPOINT\n");
        return 2;
    }
    delay_us = atol(d);
    return fuse_main(argc, argv, &ops, NULL);
}

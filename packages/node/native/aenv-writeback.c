/*
 * aenv-writeback: starts the write-back of a checkpoint's images while CRIU is still writing them, so the
 * sync a durable pause ends with finds almost nothing left to write (docs/runtime.md, "Durable pause").
 *
 *   aenv-writeback DIR
 *
 *   fd 0: a pipe from the node. EOF on it (the node closing its end once the dump is over): exit 0.
 *   fd 2: stderr (errors, as "aenv-writeback: <what>: <strerror>").
 *
 * Every few milliseconds each regular file directly in DIR (not followed through a symlink) that has at
 * least STEP_BYTES not yet handed to the kernel gets those bytes handed to it with
 * sync_file_range(SYNC_FILE_RANGE_WRITE): the write-back starts and the call returns without waiting for it
 * or taking the lock the writer needs (an fsync here would hold CRIU up). Files stay in the page cache, so a
 * resume right after still reads them from memory. Nothing is read or written through the files.
 *
 * It runs as root on the host, in a directory the node made (0711, root's), so no sandbox can put anything
 * in it. It dies with the node (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes a file must have grown by before they are handed on: fewer, larger write-backs. */
#define STEP_BYTES (1L << 20)
/* The pause between two passes over the directory. */
#define INTERVAL_MS 5
/* Files followed at once (CRIU writes a few large page images and many small ones that never reach a step). */
#define MAX_FILES 64

struct file {
  ino_t ino;
  int fd;
  off_t handed;
};

static struct file files[MAX_FILES];
static int nfiles;

static void fail(const char *what) {
  fprintf(stderr, "aenv-writeback: %s: %s\n", what, strerror(errno));
}

static struct file *tracked(ino_t ino) {
  for (int i = 0; i < nfiles; i++)
    if (files[i].ino == ino) return &files[i];
  return NULL;
}

/* One pass: hands every grown file's new bytes to the write-back. */
static void pass(const char *path) {
  int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return; /* not made yet, or removed after a failed dump: nothing to do */
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN) continue;
    struct stat st;
    if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    struct file *f = tracked(st.st_ino);
    if (!f) {
      if (st.st_size < STEP_BYTES || nfiles == MAX_FILES) continue;
      int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) continue;
      f = &files[nfiles++];
      f->ino = st.st_ino;
      f->fd = fd;
      f->handed = 0;
    }
    if (st.st_size - f->handed < STEP_BYTES) continue;
    if (sync_file_range(f->fd, f->handed, st.st_size - f->handed, SYNC_FILE_RANGE_WRITE) != 0) {
      fail("sync_file_range");
      continue;
    }
    f->handed = st.st_size;
  }
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc != 2 || argv[1][0] != '/') {
    fprintf(stderr, "usage: aenv-writeback /absolute/dir\n");
    return 2;
  }
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    fail("prctl");
    return 1;
  }
  if (getppid() == 1) return 0; /* the node is already gone */
  struct pollfd in = {.fd = 0, .events = POLLIN};
  for (;;) {
    pass(argv[1]);
    int n = poll(&in, 1, INTERVAL_MS);
    if (n < 0 && errno != EINTR) {
      fail("poll");
      return 1;
    }
    if (n > 0) {
      char buf[64];
      ssize_t r = read(0, buf, sizeof buf);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return 0;
    }
  }
}

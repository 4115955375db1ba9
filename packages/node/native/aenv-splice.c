/*
 * aenv-splice: copies the bytes of one passthrough connection of the node's egress proxy in the kernel
 * (docs/networking.md, "Kernel splice"). Node's stream pipes copy every byte through user space twice; this
 * moves them socket → pipe → socket with splice(2), so a bulk download costs no user-space copy.
 *
 *   aenv-splice        (no arguments; anything given is refused)
 *
 *   fd 0: a pipe from the node. The helper waits for one byte on it before it touches the sockets: the node
 *         first writes out what it had already read or queued, so no byte is reordered. EOF instead: exit 0
 *         without copying (the node gave up the hand-off).
 *   fd 2: stderr (errors, as "aenv-splice: <what>: <strerror>").
 *   fd 3, fd 4: the two sockets (the sandbox's, the upstream's), non-blocking, shared with the node.
 *
 * Both directions are copied until EOF; an EOF is passed on as shutdown(SHUT_WR) of the other socket (a
 * half-close stays a half-close). Exit 0 when both directions have ended. A socket error (reset, EPIPE) sets
 * SO_LINGER 0 on both sockets (their last close, the node's, resets them, as the node's own cut does) and
 * exits 1. The helper dies with the node (PR_SET_PDEATHSIG), so a crash leaves no copier behind.
 *
 * It runs as root on the host but is given only these fds: no argument, path or byte of the sandbox's
 * traffic is ever interpreted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define SOCK_A 3
#define SOCK_B 4
/* Pipe capacity per direction: at most 2 × 256 KiB of a connection in flight in the helper (pages are only
 * referenced while there); the default 64 KiB limits one splice to 16 pages. */
#define PIPE_BYTES (256 * 1024)

struct dir {
  int src, dst;
  int pipe[2];
  size_t queued; /* bytes in the pipe */
  size_t cap;    /* pipe capacity */
  int eof;       /* src reached EOF */
  int done;      /* EOF passed on to dst */
};

static void die(const char *what) {
  fprintf(stderr, "aenv-splice: %s: %s\n", what, strerror(errno));
  _exit(2);
}

static void reset_both(void) {
  struct linger l = {1, 0};
  setsockopt(SOCK_A, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  setsockopt(SOCK_B, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  _exit(1);
}

static void setup(struct dir *d, int src, int dst) {
  d->src = src;
  d->dst = dst;
  d->queued = 0;
  d->eof = 0;
  d->done = 0;
  if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0) die("pipe2");
  int got = fcntl(d->pipe[1], F_SETPIPE_SZ, PIPE_BYTES);
  if (got < 0) got = fcntl(d->pipe[1], F_GETPIPE_SZ);
  if (got <= 0) die("F_GETPIPE_SZ");
  d->cap = (size_t)got;
}

/* Moves what it can without blocking; returns -1 on a socket error. */
static int step(struct dir *d) {
  for (;;) {
    int moved = 0;
    if (!d->eof && d->queued < d->cap) {
      ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, d->cap - d->queued, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        d->queued += (size_t)n;
        moved = 1;
      } else if (n == 0) {
        d->eof = 1;
      } else if (errno != EAGAIN && errno != EINTR) {
        return -1;
      }
    }
    if (d->queued > 0) {
      ssize_t n = splice(d->pipe[0], NULL, d->dst, NULL, d->queued,
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (d->eof ? 0 : SPLICE_F_MORE));
      if (n > 0) {
        d->queued -= (size_t)n;
        moved = 1;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        return -1;
      }
    }
    if (d->eof && d->queued == 0 && !d->done) {
      if (shutdown(d->dst, SHUT_WR) < 0 && errno != ENOTCONN) return -1;
      d->done = 1;
    }
    if (!moved || d->done) return 0;
  }
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc != 1) {
    fprintf(stderr, "aenv-splice: takes no arguments\n");
    return 2;
  }
  /* Dies with the node. A node gone before this line closed fd 0 with it: the read below sees EOF. (No
   * getppid() == 1 check: the node may itself be PID 1 of a container.) */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("prctl");
  signal(SIGPIPE, SIG_IGN);

  for (int fd = SOCK_A; fd <= SOCK_B; fd++) {
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM) {
      fprintf(stderr, "aenv-splice: fd %d is not a stream socket\n", fd);
      return 2;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) die("fcntl");
  }

  char go;
  ssize_t r;
  do r = read(0, &go, 1);
  while (r < 0 && errno == EINTR);
  if (r <= 0) return 0;
  close(0);

  struct dir d[2];
  setup(&d[0], SOCK_A, SOCK_B);
  setup(&d[1], SOCK_B, SOCK_A);

  for (;;) {
    for (int i = 0; i < 2; i++)
      if (!d[i].done && step(&d[i]) < 0) reset_both();
    if (d[0].done && d[1].done) return 0;

    struct pollfd p[2] = {{SOCK_A, 0, 0}, {SOCK_B, 0, 0}};
    for (int i = 0; i < 2; i++) {
      if (d[i].done) continue;
      struct pollfd *src = d[i].src == SOCK_A ? &p[0] : &p[1];
      struct pollfd *dst = d[i].dst == SOCK_A ? &p[0] : &p[1];
      if (!d[i].eof && d[i].queued < d[i].cap) src->events |= POLLIN | POLLRDHUP;
      if (d[i].queued > 0) dst->events |= POLLOUT;
    }
    if (poll(p, 2, -1) < 0 && errno != EINTR) die("poll");
    /* A reset socket reports POLLERR whatever was asked: a reset while its direction waits is a reset. */
    for (int i = 0; i < 2; i++) {
      if (!(p[i].revents & POLLERR)) continue;
      int err = 0;
      socklen_t len = sizeof err;
      if (getsockopt(p[i].fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) reset_both();
    }
  }
}

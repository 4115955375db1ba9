/*
 * aenv-idmap: the two host operations that give every sandbox its own uid/gid range (docs/security.md,
 * "uid isolation"). Node has no API for either.
 *
 *   aenv-idmap mount FROM TO COUNT SRC DST [SRC DST ...] [-- CMD [ARGS...]]
 *       For each pair: an idmapped, read-only, nosuid, nodev bind mount of SRC at DST (created if missing),
 *       in which a file owned on disk by FROM+i (i < COUNT) appears owned by TO+i. The image layers are
 *       unpacked once, owned by the image range; each sandbox's overlay uses such views of them as its
 *       lower dirs, so the sandbox sees them owned by its own root without a copy. Then execs CMD, if
 *       given (the sandbox's other mounts: one process for both).
 *
 *   aenv-idmap mount-rw FROM TO COUNT SRC DST [SRC DST ...] [-- CMD [ARGS...]]
 *       The same, writable: a sandbox's view of a persistent volume (docs/volumes.md), whose files are
 *       owned on disk by the image range, so every sandbox that mounts it sees the same owners.
 *
 *   aenv-idmap shift FROM TO COUNT SPAN_START SPAN_END DIR
 *       Moves the ownership of DIR and everything below it (not following symlinks, not crossing into
 *       other filesystems) into the range TO..TO+COUNT-1: ids in FROM..FROM+COUNT-1 move by TO-FROM, ids
 *       already in the target range stay (hard links are visited twice), any other id inside
 *       SPAN_START..SPAN_END-1 (another sandbox's) becomes the target's overflow id, and ids outside the
 *       span (host root: overlay whiteouts) stay. chown(2) clears setuid/setgid bits and file
 *       capabilities, so both are put back — the capability's root id and POSIX ACL entries moved like
 *       the owners. FROM may be "-" (the source range is not known: nothing moves, only strays are
 *       confined). Used when a sandbox starts on a disk that another sandbox wrote (fork, snapshot and
 *       template launches).
 *
 *   aenv-idmap fstab NETNS FSTAB [DETACH ...]
 *       Mounts every line of FSTAB ("SOURCE TARGET TYPE OPTIONS DUMP PASS", paths relative to the working
 *       directory allowed) with mount(2), from inside the network namespace NETNS (a sysfs shows the
 *       interfaces of the netns it is mounted from; the mounts land in this process's mount namespace).
 *       OPTIONS ro, rw, nosuid, nodev, noexec, noatime and relatime are mount flags; the rest is passed
 *       to the filesystem. What `nsenter --net=NETNS mount --fstab FSTAB --all` did, without util-linux's
 *       two processes and libmount's checks of the whole mount table before each mount (≈ 10 ms of a
 *       sandbox start). Lines are mounted in order; the first that fails ends the command. Then each
 *       DETACH mount point is detached (umount2 MNT_DETACH): the idmapped layer views an overlay was just
 *       made of, which it holds private clones of, so they need not stay in the host's mount table (every
 *       new mount namespace, each `runc run`, copies that table whole).
 *
 *   aenv-idmap detach PATH [PATH ...]
 *       Detaches each mount point PATH (umount2 MNT_DETACH, not following a last symlink): a started
 *       sandbox's root and sysfs, which its own mount namespace holds copies of, taken out of the host's
 *       mount table (see fstab's DETACH). What `umount -l` did, without util-linux reading the whole mount
 *       table first.
 *
 *   aenv-idmap userns-limits PID NAME=VALUE [NAME=VALUE ...]
 *       Enters the user namespace of PID and writes each VALUE to its /proc/sys/user/NAME (per-namespace
 *       limits only a process privileged in that namespace may set: the host). NAME is lowercase letters and
 *       underscores, VALUE a decimal number. What `nsenter --user=... sh -c 'printf > ...'` did, in one
 *       process instead of three.
 *
 *   aenv-idmap qgroup-limit DIR BYTES|none VOLUME
 *       Sets (or, with none, clears) the referenced-bytes limit of the quota group of the btrfs subvolume DIR
 *       is, through VOLUME (the filesystem's root: acting through DIR itself would charge the change to DIR's
 *       own qgroup, which fails with EDQUOT once it is over its limit). What `btrfs inspect-internal rootid`
 *       + `btrfs qgroup limit SIZE 0/ID VOLUME` did, as two ioctls in one process.
 *
 *   aenv-idmap subvolume DIR
 *       Creates DIR as an empty btrfs subvolume (mode 0700, like mkdir with the server's umask). What
 *       `btrfs subvolume create` did, as one ioctl.
 *
 *   aenv-idmap commit DIR
 *       Makes everything written under the btrfs subvolume DIR durable, and nothing else: a snapshot of DIR
 *       (BTRFS_IOC_SNAP_CREATE_V2 writes back DIR's dirty data, waits for it and commits the transaction
 *       holding the snapshot, which holds DIR's metadata too), then that snapshot's deletion. A syncfs(2)
 *       would write back every dirty page of the filesystem, other sandboxes' writes included; an fsync of
 *       each file is one log commit each on btrfs. The snapshot is DIR's name + ".commit", beside DIR.
 *
 *   aenv-idmap hostnames
 *       Serves requests "PID NAME\n" read from stdin until it closes: sets the hostname of the UTS
 *       namespace PID is in to NAME and answers one line on stdout per request, in order: "ok" or
 *       "err <what>: <strerror>". A pre-started sandbox gets the name of the sandbox it is handed to this
 *       way (setns there and back in this one long-lived process) instead of one nsenter process per
 *       hand-out. NAME is checked by the caller (an RFC 1123 label).
 *
 * Errors go to stderr as "aenv-idmap: <what>: <strerror>", exit status 1 (2 for usage errors).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

static const char *current_path = "";

static void fail(const char *what, const char *path) {
  fprintf(stderr, "aenv-idmap: %s %s: %s\n", what, path, strerror(errno));
  exit(1);
}

static int parse_u32(const char *s, uint32_t *out) {
  char *end;
  if (!s || !*s || s[0] == '-') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > UINT32_MAX) return -1;
  *out = (uint32_t)v;
  return 0;
}

/* ---- mount ------------------------------------------------------------------------------------ */

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int saved = errno;
  close(fd);
  errno = saved;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A user namespace mapping FROM.. to TO..: a child blocks in it while we take its namespace fd. */
static int userns_fd(uint32_t from, uint32_t to, uint32_t count) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC)) fail("pipe", "");
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
  if (pid < 0) fail("clone(CLONE_NEWUSER)", "");
  if (pid == 0) {
    char b;
    close(pipefd[1]);
    ssize_t ignored = read(pipefd[0], &b, 1); /* returns when the parent closes its end */
    (void)ignored;
    _exit(0);
  }
  close(pipefd[0]);
  char path[64], map[96];
  snprintf(map, sizeof map, "%u %u %u\n", from, to, count);
  snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
  if (write_file(path, map)) fail("write", path);
  snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
  if (write_file(path, map)) fail("write", path);
  snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", path);
  close(pipefd[1]);
  waitpid(pid, NULL, 0);
  return fd;
}

static int cmd_mount(int argc, char **argv, int writable) {
  uint32_t from, to, count;
  int end = 4;
  while (end < argc && strcmp(argv[end], "--")) end++;
  if (argc < 6 || end < 6 || (end - 4) % 2 || parse_u32(argv[1], &from) || parse_u32(argv[2], &to) ||
      parse_u32(argv[3], &count) || count == 0 || (end < argc && end == argc - 1)) {
    fprintf(stderr, "usage: aenv-idmap mount|mount-rw FROM TO COUNT SRC DST [SRC DST ...] [-- CMD [ARGS...]]\n");
    return 2;
  }
  int ns = userns_fd(from, to, count);
  for (int i = 4; i < end; i += 2) {
    const char *src = argv[i], *dst = argv[i + 1];
    if (mkdir(dst, 0700) && errno != EEXIST) fail("mkdir", dst);
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0) fail("open_tree", src);
    struct mount_attr attr = {0};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY);
    attr.userns_fd = (uint64_t)ns;
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof attr)) fail("mount_setattr", src);
    if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH)) fail("move_mount", dst);
    close(fd);
  }
  close(ns);
  if (end < argc) {
    execvp(argv[end + 1], &argv[end + 1]);
    fail("exec", argv[end + 1]);
  }
  return 0;
}

/* ---- fstab ------------------------------------------------------------------------------------ */

struct mount_flag {
  const char *name;
  unsigned long set, clear;
};

static const struct mount_flag MOUNT_FLAGS[] = {
    {"ro", MS_RDONLY, 0},     {"rw", 0, MS_RDONLY},           {"nosuid", MS_NOSUID, 0},
    {"nodev", MS_NODEV, 0},   {"noexec", MS_NOEXEC, 0},       {"noatime", MS_NOATIME, 0},
    {"relatime", MS_RELATIME, 0},
};

/* Splits OPTIONS into mount flags and the filesystem's own options (written to `data`, comma-joined). */
static int parse_options(char *options, unsigned long *flags, char *data, size_t data_size) {
  size_t used = 0;
  *flags = 0;
  data[0] = 0;
  for (char *save = NULL, *opt = strtok_r(options, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
    int known = 0;
    for (size_t i = 0; i < sizeof MOUNT_FLAGS / sizeof MOUNT_FLAGS[0]; i++) {
      if (strcmp(opt, MOUNT_FLAGS[i].name)) continue;
      *flags = (*flags | MOUNT_FLAGS[i].set) & ~MOUNT_FLAGS[i].clear;
      known = 1;
      break;
    }
    if (known || !strcmp(opt, "defaults")) continue;
    size_t len = strlen(opt);
    if (used + len + 2 > data_size) return -1;
    if (used) data[used++] = ',';
    memcpy(data + used, opt, len + 1);
    used += len;
  }
  return 0;
}

static int detach_all(int n, char **paths) {
  for (int i = 0; i < n; i++)
    if (umount2(paths[i], MNT_DETACH | UMOUNT_NOFOLLOW)) fail("umount2", paths[i]);
  return 0;
}

static int cmd_fstab(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: aenv-idmap fstab NETNS FSTAB [DETACH ...]\n");
    return 2;
  }
  int ns = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (ns < 0) fail("open", argv[1]);
  if (setns(ns, CLONE_NEWNET)) fail("setns", argv[1]);
  close(ns);
  FILE *f = fopen(argv[2], "re");
  if (!f) fail("open", argv[2]);
  /* A mount's data is one page at most (the caller keeps overlay options within it). */
  static char line[16384], data[4096];
  for (int n = 1; fgets(line, sizeof line, f); n++) {
    if (!strchr(line, '\n') && !feof(f)) {
      fprintf(stderr, "aenv-idmap: %s line %d: longer than %zu bytes\n", argv[2], n, sizeof line - 1);
      return 1;
    }
    char *save = NULL;
    char *source = strtok_r(line, " \t\n", &save);
    if (!source || source[0] == '#') continue;
    char *target = strtok_r(NULL, " \t\n", &save);
    char *type = strtok_r(NULL, " \t\n", &save);
    char *options = strtok_r(NULL, " \t\n", &save);
    if (!target || !type || !options) {
      fprintf(stderr, "aenv-idmap: %s line %d: needs SOURCE TARGET TYPE OPTIONS\n", argv[2], n);
      return 1;
    }
    unsigned long flags;
    if (parse_options(options, &flags, data, sizeof data)) {
      fprintf(stderr, "aenv-idmap: %s line %d: options longer than %zu bytes\n", argv[2], n, sizeof data - 1);
      return 1;
    }
    if (mount(source, target, type, flags, data[0] ? data : NULL)) fail("mount", target);
  }
  if (ferror(f)) fail("read", argv[2]);
  fclose(f);
  return detach_all(argc - 3, argv + 3);
}

static int cmd_detach(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: aenv-idmap detach PATH [PATH ...]\n");
    return 2;
  }
  return detach_all(argc - 1, argv + 1);
}

/* ---- userns-limits ---------------------------------------------------------------------------- */

static int valid_limit(const char *name, const char *value) {
  if (!*name || !*value) return 0;
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || *c == '_')) return 0;
  for (const char *c = value; *c; c++)
    if (*c < '0' || *c > '9') return 0;
  return 1;
}

static int cmd_userns_limits(int argc, char **argv) {
  uint32_t pid;
  if (argc < 3 || parse_u32(argv[1], &pid) || pid == 0) {
    fprintf(stderr, "usage: aenv-idmap userns-limits PID NAME=VALUE [NAME=VALUE ...]\n");
    return 2;
  }
  for (int i = 2; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) {
      fprintf(stderr, "aenv-idmap: %s is not NAME=VALUE\n", argv[i]);
      return 2;
    }
    *eq = 0;
    if (!valid_limit(argv[i], eq + 1)) {
      fprintf(stderr, "aenv-idmap: bad limit %s=%s\n", argv[i], eq + 1);
      return 2;
    }
    *eq = '=';
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/proc/%u/ns/user", pid);
  int ns = open(path, O_RDONLY | O_CLOEXEC);
  if (ns < 0) fail("open", path);
  if (setns(ns, CLONE_NEWUSER)) fail("setns", path);
  close(ns);
  for (int i = 2; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    *eq = 0;
    snprintf(path, sizeof path, "/proc/sys/user/%s", argv[i]);
    if (write_file(path, eq + 1)) fail("write", path);
  }
  return 0;
}

/* ---- btrfs subvolumes ------------------------------------------------------------------------- */

/* An open fd of DIR, which must be the root of a btrfs subvolume (exits 1 with a message otherwise). */
static int open_subvolume(const char *path) {
  int dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) fail("open", path);
  struct stat st;
  if (fstat(dir, &st)) fail("stat", path);
  if (st.st_ino != BTRFS_FIRST_FREE_OBJECTID) {
    fprintf(stderr, "aenv-idmap: %s is not a btrfs subvolume\n", path);
    exit(1);
  }
  return dir;
}

/* ---- qgroup-limit ----------------------------------------------------------------------------- */

static int cmd_qgroup_limit(int argc, char **argv) {
  uint64_t bytes = (uint64_t)-1; /* the kernel's "clear the limit" */
  if (argc == 4 && strcmp(argv[2], "none")) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(argv[2], &end, 10);
    if (errno || *end || !*argv[2] || argv[2][0] == '-' || v == 0 || v == (unsigned long long)-1) argc = 0;
    bytes = (uint64_t)v;
  }
  if (argc != 4) {
    fprintf(stderr, "usage: aenv-idmap qgroup-limit DIR BYTES|none VOLUME\n");
    return 2;
  }
  /* A plain dir is refused: its subvolume's qgroup (the whole volume, for a dir at the top) is not DIR's. */
  int dir = open_subvolume(argv[1]);
  struct btrfs_ioctl_ino_lookup_args lookup = {0};
  lookup.objectid = BTRFS_FIRST_FREE_OBJECTID;
  if (ioctl(dir, BTRFS_IOC_INO_LOOKUP, &lookup)) fail("BTRFS_IOC_INO_LOOKUP", argv[1]);
  close(dir);
  int volume = open(argv[3], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (volume < 0) fail("open", argv[3]);
  struct btrfs_ioctl_qgroup_limit_args limit = {0};
  limit.qgroupid = lookup.treeid; /* level 0: the subvolume's own qgroup, 0/ID */
  limit.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  limit.lim.max_rfer = bytes;
  if (ioctl(volume, BTRFS_IOC_QGROUP_LIMIT, &limit)) fail("BTRFS_IOC_QGROUP_LIMIT", argv[1]);
  close(volume);
  return 0;
}

/* ---- subvolume, commit ----------------------------------------------------------------------- */

/* Splits PATH into an open fd of its parent dir and its last component (which must be a plain name). */
static int parent_of(const char *path, char *name, size_t size) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..") || strlen(base) >= size) {
    fprintf(stderr, "aenv-idmap: %s does not end in a name\n", path);
    exit(2);
  }
  snprintf(name, size, "%s", base);
  char parent[PATH_MAX];
  if (!slash) snprintf(parent, sizeof parent, ".");
  else if (slash == path) snprintf(parent, sizeof parent, "/");
  else if ((size_t)(slash - path) >= sizeof parent) fail("path", path);
  else snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
  int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open", parent);
  return fd;
}

static int cmd_subvolume(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: aenv-idmap subvolume DIR\n");
    return 2;
  }
  struct btrfs_ioctl_vol_args args = {0};
  int parent = parent_of(argv[1], args.name, sizeof args.name);
  if (ioctl(parent, BTRFS_IOC_SUBVOL_CREATE, &args)) fail("BTRFS_IOC_SUBVOL_CREATE", argv[1]);
  if (fchmodat(parent, args.name, 0700, 0)) fail("chmod", argv[1]);
  close(parent);
  return 0;
}

static void destroy_snapshot(int parent, const char *name, int missing_ok) {
  struct btrfs_ioctl_vol_args args = {0};
  snprintf(args.name, sizeof args.name, "%s", name);
  if (ioctl(parent, BTRFS_IOC_SNAP_DESTROY, &args) && !(missing_ok && errno == ENOENT))
    fail("BTRFS_IOC_SNAP_DESTROY", name);
}

static int cmd_commit(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: aenv-idmap commit DIR\n");
    return 2;
  }
  int dir = open_subvolume(argv[1]);
  char name[BTRFS_SUBVOL_NAME_MAX + 1];
  int parent = parent_of(argv[1], name, sizeof name);
  struct btrfs_ioctl_vol_args_v2 snap = {0};
  snap.fd = dir;
  int n = snprintf(snap.name, sizeof snap.name, "%s.commit", name);
  if (n < 0 || (size_t)n >= sizeof snap.name) {
    fprintf(stderr, "aenv-idmap: %s: name too long\n", argv[1]);
    return 2;
  }
  /* One left by a crash between the two ioctls holds nothing of its own: it goes first. */
  destroy_snapshot(parent, snap.name, 1);
  if (ioctl(parent, BTRFS_IOC_SNAP_CREATE_V2, &snap)) fail("BTRFS_IOC_SNAP_CREATE_V2", argv[1]);
  destroy_snapshot(parent, snap.name, 0);
  close(parent);
  close(dir);
  return 0;
}

/* ---- shift ------------------------------------------------------------------------------------ */

struct shift {
  int64_t from; /* -1: unknown */
  uint32_t to, count, span_start, span_end, overflow;
  dev_t dev;
};

static uint32_t shift_id(const struct shift *s, uint32_t id) {
  if (s->from >= 0 && id >= (uint64_t)s->from && id < (uint64_t)s->from + s->count)
    return s->to + (id - (uint32_t)s->from);
  if (id >= s->to && id < (uint64_t)s->to + s->count) return id;
  if (id >= s->span_start && id < s->span_end) return s->overflow;
  return id;
}

#define VFS_CAP_REVISION_MASK 0xFF000000u
#define VFS_CAP_REVISION_3 0x03000000u

/* security.capability: a v3 value names the namespace root it is for (bytes 20..23, little endian). */
static void shift_caps(const struct shift *s, unsigned char *v, ssize_t len) {
  if (len != 24) return;
  uint32_t magic = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 | (uint32_t)v[3] << 24;
  if ((magic & VFS_CAP_REVISION_MASK) != VFS_CAP_REVISION_3) return;
  uint32_t root = (uint32_t)v[20] | (uint32_t)v[21] << 8 | (uint32_t)v[22] << 16 | (uint32_t)v[23] << 24;
  root = shift_id(s, root);
  for (int i = 0; i < 4; i++) v[20 + i] = (unsigned char)(root >> (8 * i));
}

/* system.posix_acl_*: a 4-byte header, then 8-byte entries {u16 tag, u16 perm, u32 id}. */
static int shift_acl(const struct shift *s, unsigned char *v, ssize_t len) {
  int changed = 0;
  if (len < 4 || (len - 4) % 8) return 0;
  for (ssize_t off = 4; off + 8 <= len; off += 8) {
    uint16_t tag = (uint16_t)(v[off] | v[off + 1] << 8);
    if (tag != 0x02 && tag != 0x08) continue; /* ACL_USER, ACL_GROUP */
    uint32_t id = (uint32_t)v[off + 4] | (uint32_t)v[off + 5] << 8 | (uint32_t)v[off + 6] << 16 |
                  (uint32_t)v[off + 7] << 24;
    uint32_t n = shift_id(s, id);
    if (n == id) continue;
    for (int i = 0; i < 4; i++) v[off + 4 + i] = (unsigned char)(n >> (8 * i));
    changed = 1;
  }
  return changed;
}

struct xattr_val {
  const char *name;
  unsigned char buf[65536];
  ssize_t len; /* -1: absent */
};

static const char *const XATTRS[] = {"security.capability", "system.posix_acl_access",
                                     "system.posix_acl_default"};
#define NXATTRS 3

/* Reads the id-carrying xattrs of the file `proc` (its /proc/self/fd link, followed) refers to. */
static void read_xattrs(const char *proc, struct xattr_val *x) {
  char names[65536];
  ssize_t n = listxattr(proc, names, sizeof names);
  for (int i = 0; i < NXATTRS; i++) {
    x[i].name = XATTRS[i];
    x[i].len = -1;
  }
  if (n <= 0) return;
  for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1) {
    for (int i = 0; i < NXATTRS; i++) {
      if (strcmp(names + off, XATTRS[i])) continue;
      x[i].len = getxattr(proc, XATTRS[i], x[i].buf, sizeof x[i].buf);
      if (x[i].len < 0) fail("getxattr", current_path);
    }
  }
}

/* Shifts the file `fd` (O_PATH or a directory fd) refers to; `st` is its stat. */
static void shift_fd(const struct shift *s, int fd, const struct stat *st) {
  uint32_t uid = shift_id(s, st->st_uid), gid = shift_id(s, st->st_gid);
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  static struct xattr_val x[NXATTRS];
  read_xattrs(proc, x);
  int acl_changed[NXATTRS] = {0};
  for (int i = 1; i < NXATTRS; i++)
    if (x[i].len > 0) acl_changed[i] = shift_acl(s, x[i].buf, x[i].len);
  if (uid != st->st_uid || gid != st->st_gid) {
    if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH)) fail("chown", current_path);
    /* chown cleared setuid/setgid (not on directories) and the file capability: put them back. */
    if (!S_ISDIR(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)) &&
        chmod(proc, st->st_mode & 07777))
      fail("chmod", current_path);
    if (x[0].len > 0) {
      shift_caps(s, x[0].buf, x[0].len);
      if (setxattr(proc, x[0].name, x[0].buf, (size_t)x[0].len, 0)) fail("setxattr", current_path);
    }
  }
  for (int i = 1; i < NXATTRS; i++)
    if (acl_changed[i] && setxattr(proc, x[i].name, x[i].buf, (size_t)x[i].len, 0))
      fail("setxattr", current_path);
}

static void shift_entry(const struct shift *s, int dirfd, const char *name, const struct stat *st) {
  if (S_ISLNK(st->st_mode)) {
    uint32_t uid = shift_id(s, st->st_uid), gid = shift_id(s, st->st_gid);
    if ((uid != st->st_uid || gid != st->st_gid) &&
        fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW))
      fail("chown", current_path);
    return;
  }
  /* Everything else through an O_PATH fd: no path is resolved twice, so nothing can be swapped in between. */
  int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) fail("open", current_path);
  shift_fd(s, fd, st);
  close(fd);
}

static char path_buf[PATH_MAX * 2];

static void shift_dir(const struct shift *s, int dirfd, size_t path_len) {
  DIR *d = fdopendir(dirfd);
  if (!d) fail("opendir", path_buf);
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t n = strlen(e->d_name);
    if (path_len + 1 + n < sizeof path_buf) {
      path_buf[path_len] = '/';
      memcpy(path_buf + path_len + 1, e->d_name, n + 1);
    }
    current_path = path_buf;
    struct stat st;
    if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) fail("stat", path_buf);
    if (st.st_dev != s->dev) continue; /* another filesystem or subvolume: not part of this disk */
    shift_entry(s, dirfd, e->d_name, &st);
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) fail("open", path_buf);
      shift_dir(s, sub, path_len + 1 + n < sizeof path_buf ? path_len + 1 + n : path_len);
    }
    path_buf[path_len] = '\0';
    errno = 0;
  }
  if (errno) fail("readdir", path_buf);
  closedir(d);
}

static int cmd_shift(int argc, char **argv) {
  struct shift s = {0};
  uint32_t from = 0;
  int from_unknown = argc == 7 && !strcmp(argv[1], "-");
  if (argc != 7 || (!from_unknown && parse_u32(argv[1], &from)) || parse_u32(argv[2], &s.to) ||
      parse_u32(argv[3], &s.count) || parse_u32(argv[4], &s.span_start) ||
      parse_u32(argv[5], &s.span_end) || s.count == 0 || (uint64_t)s.to + s.count > UINT32_MAX) {
    fprintf(stderr, "usage: aenv-idmap shift FROM|- TO COUNT SPAN_START SPAN_END DIR\n");
    return 2;
  }
  s.from = from_unknown ? -1 : (int64_t)from;
  s.overflow = s.to + (s.count > 65534 ? 65534 : s.count - 1);
  /* One open directory per level: allow deep trees. */
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl)) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  const char *dir = argv[6];
  snprintf(path_buf, sizeof path_buf, "%s", dir);
  current_path = path_buf;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) fail("open", dir);
  struct stat st;
  if (fstat(fd, &st)) fail("stat", dir);
  s.dev = st.st_dev;
  shift_fd(&s, fd, &st);
  shift_dir(&s, fd, strlen(path_buf));
  return 0;
}

/* One "PID NAME" request of `hostnames`; answers on stdout. Returns -1 when it cannot return to its own
 * UTS namespace (then it must stop: it would name itself next). */
static int set_hostname(int self, char *req) {
  char *sp = strchr(req, ' ');
  if (!sp) return printf("err bad request\n") < 0 ? -1 : 0;
  *sp = 0;
  const char *name = sp + 1;
  char *end;
  errno = 0;
  long pid = strtol(req, &end, 10);
  size_t len = strlen(name);
  if (errno || *end || pid <= 0 || pid > INT_MAX || len == 0 || len > 64 || strchr(name, ' '))
    return printf("err bad request\n") < 0 ? -1 : 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/ns/uts", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return printf("err open %s: %s\n", path, strerror(errno)) < 0 ? -1 : 0;
  if (setns(fd, CLONE_NEWUTS) < 0) {
    int e = errno;
    close(fd);
    return printf("err setns %s: %s\n", path, strerror(e)) < 0 ? -1 : 0;
  }
  close(fd);
  int rc = sethostname(name, len), e = errno;
  if (setns(self, CLONE_NEWUTS) < 0) {
    fprintf(stderr, "aenv-idmap: setns back to its own UTS namespace: %s\n", strerror(errno));
    return -1;
  }
  if (rc < 0) return printf("err sethostname: %s\n", strerror(e)) < 0 ? -1 : 0;
  return printf("ok\n") < 0 ? -1 : 0;
}

static int cmd_hostnames(void) {
  int self = open("/proc/self/ns/uts", O_RDONLY | O_CLOEXEC);
  if (self < 0) {
    fprintf(stderr, "aenv-idmap: open /proc/self/ns/uts: %s\n", strerror(errno));
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    char *nl = strchr(line, '\n');
    if (!nl) {
      /* Longer than any valid request: skip the rest of it, answer once. */
      int c;
      while ((c = getchar()) != EOF && c != '\n') {
      }
      if (printf("err bad request\n") < 0) return 1;
      continue;
    }
    *nl = 0;
    if (set_hostname(self, line) < 0) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "mount")) return cmd_mount(argc - 1, argv + 1, 0);
  if (argc >= 2 && !strcmp(argv[1], "mount-rw")) return cmd_mount(argc - 1, argv + 1, 1);
  if (argc >= 2 && !strcmp(argv[1], "shift")) return cmd_shift(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "fstab")) return cmd_fstab(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "detach")) return cmd_detach(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "userns-limits")) return cmd_userns_limits(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "qgroup-limit")) return cmd_qgroup_limit(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "subvolume")) return cmd_subvolume(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "commit")) return cmd_commit(argc - 1, argv + 1);
  if (argc == 2 && !strcmp(argv[1], "hostnames")) return cmd_hostnames();
  fprintf(stderr,
          "usage: aenv-idmap mount|mount-rw|fstab|detach|userns-limits|qgroup-limit|subvolume|commit|shift|hostnames ...\n");
  return 2;
}

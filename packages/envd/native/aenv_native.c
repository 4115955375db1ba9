/*
 * aenv_native.node: the few syscalls envd needs that Node does not expose.
 *
 *   runAs(uid, gid, groups[], fn)  call fn() with this thread's filesystem credentials switched to the user
 *                                  (setfsuid/setfsgid + per-thread setgroups), so the kernel applies that
 *                                  user's permission checks and ownership to every *Sync fs call inside fn.
 *                                  Credentials are restored before returning, also when fn throws.
 *   getXattrs(path, prefix)        {name-without-prefix: value} for the xattrs starting with prefix (no follow)
 *   setXattr(path, name, value) / removeXattr(path, name)
 *   watchStart(cb)                 start the inotify reader thread; cb(events) gets [[wd, mask, cookie, name], ...]
 *   watchAdd(path, mask) -> wd / watchRemove(wd)
 *   spawn(file, argv[], envp[], cwd, pipeStdin, onExit[, as]) -> {pid, stdin, stdout, stderr}
 *                                  posix_spawn (vfork: no page-table copy of the big envd process, which
 *                                  Node's fork-based spawn pays on every command) in a new session, with
 *                                  pipes for stdout/stderr and stdin (or /dev/null); onExit(code, signal)
 *                                  comes from a waitpid thread. All fds are close-on-exec in envd.
 *                                  With as = {uid, gid, groups[], oomScoreAdj}: the child of a vfork
 *                                  takes that user's credentials and oom score itself and execs file,
 *                                  found on envp's PATH as execvp finds it, which is what
 *                                  `aenv-init exec-as` does in a process image of its own (an exec more).
 *
 * Linux credentials are per thread in the kernel; glibc's setgroups() broadcasts to all threads, so the raw
 * syscall is used. Only synchronous fs calls made inside fn run on this thread; async fs calls run on libuv's
 * pool with envd's own credentials, which is why envd keeps all user-scoped fs work synchronous.
 */
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <errno.h>
#include <node_api.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/fsuid.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CHECK(call)                                                                                                    \
  do {                                                                                                                 \
    if ((call) != napi_ok) return NULL;                                                                                \
  } while (0)

static napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path) {
  char msg[512];
  const char *code = NULL;
  switch (err) {
    case ENOENT: code = "ENOENT"; break;
    case EACCES: code = "EACCES"; break;
    case EPERM: code = "EPERM"; break;
    case ENOTSUP: code = "ENOTSUP"; break;
    case ENODATA: code = "ENODATA"; break;
    case ENOSPC: code = "ENOSPC"; break;
    case E2BIG: code = "E2BIG"; break;
    case ERANGE: code = "ERANGE"; break;
    case EROFS: code = "EROFS"; break;
    case ENOTDIR: code = "ENOTDIR"; break;
    case EINVAL: code = "EINVAL"; break;
    case EMFILE: code = "EMFILE"; break;
    case ENOMEM: code = "ENOMEM"; break;
    case EDQUOT: code = "EDQUOT"; break;
    default: code = "EIO"; break;
  }
  snprintf(msg, sizeof(msg), "%s: %s, %s '%s'", code, strerror(err), syscall, path ? path : "");
  napi_value error, code_v, msg_v, errno_v, syscall_v;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &msg_v);
  napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &code_v);
  napi_create_error(env, NULL, msg_v, &error);
  napi_set_named_property(env, error, "code", code_v);
  napi_create_int32(env, -err, &errno_v);
  napi_set_named_property(env, error, "errno", errno_v);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &syscall_v);
  napi_set_named_property(env, error, "syscall", syscall_v);
  if (path) {
    napi_value path_v;
    napi_create_string_utf8(env, path, NAPI_AUTO_LENGTH, &path_v);
    napi_set_named_property(env, error, "path", path_v);
  }
  napi_throw(env, error);
  return NULL;
}

static char *get_string(napi_env env, napi_value v) {
  size_t len;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return NULL;
  char *s = malloc(len + 1);
  if (!s) return NULL;
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  return s;
}

/* ---- per-thread credentials ------------------------------------------------------------------- */

static int set_thread_creds(uid_t uid, gid_t gid, const gid_t *groups, size_t n) {
  if (syscall(SYS_setgroups, n, groups) != 0) return -1;
  setfsgid(gid);
  setfsuid(uid);
  /* setfs*id report failure only by returning the previous value: read back to verify. */
  if ((uid_t)setfsuid((uid_t)-1) != uid || (gid_t)setfsgid((gid_t)-1) != gid) {
    errno = EPERM;
    return -1;
  }
  return 0;
}

static napi_value run_as(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 4) {
    napi_throw_type_error(env, NULL, "runAs(uid, gid, groups, fn)");
    return NULL;
  }
  uint32_t uid, gid, n;
  CHECK(napi_get_value_uint32(env, argv[0], &uid));
  CHECK(napi_get_value_uint32(env, argv[1], &gid));
  CHECK(napi_get_array_length(env, argv[2], &n));
  gid_t *groups = calloc(n ? n : 1, sizeof(gid_t));
  if (!groups) return throw_errno(env, ENOMEM, "runAs", NULL);
  for (uint32_t i = 0; i < n; i++) {
    napi_value el;
    uint32_t g;
    if (napi_get_element(env, argv[2], i, &el) != napi_ok || napi_get_value_uint32(env, el, &g) != napi_ok) {
      free(groups);
      napi_throw_type_error(env, NULL, "groups must be numbers");
      return NULL;
    }
    groups[i] = g;
  }

  uid_t old_uid = setfsuid((uid_t)-1);
  gid_t old_gid = setfsgid((gid_t)-1);
  int old_n = getgroups(0, NULL);
  gid_t *old_groups = calloc(old_n > 0 ? old_n : 1, sizeof(gid_t));
  if (!old_groups || (old_n > 0 && getgroups(old_n, old_groups) < 0)) {
    free(groups);
    free(old_groups);
    return throw_errno(env, ENOMEM, "getgroups", NULL);
  }

  napi_value result = NULL;
  if (set_thread_creds(uid, gid, groups, n) != 0) {
    int err = errno;
    set_thread_creds(old_uid, old_gid, old_groups, old_n > 0 ? old_n : 0);
    free(groups);
    free(old_groups);
    return throw_errno(env, err, "setfsuid", NULL);
  }
  napi_value global;
  napi_get_global(env, &global);
  napi_status st = napi_call_function(env, global, argv[3], 0, NULL, &result);
  set_thread_creds(old_uid, old_gid, old_groups, old_n > 0 ? old_n : 0);
  free(groups);
  free(old_groups);
  return st == napi_ok ? result : NULL; /* on failure the JS exception stays pending and propagates */
}

/* ---- xattrs ----------------------------------------------------------------------------------- */

static napi_value get_xattrs(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  char *prefix = argc > 1 ? get_string(env, argv[1]) : strdup("");
  napi_value out;
  napi_create_object(env, &out);
  if (!path || !prefix) goto done;
  size_t plen = strlen(prefix);
  ssize_t size = llistxattr(path, NULL, 0);
  if (size < 0) {
    int err = errno;
    if (err == ENOTSUP || err == ENODATA) goto done;
    free(prefix);
    napi_value r = throw_errno(env, err, "llistxattr", path);
    free(path);
    return r;
  }
  if (size == 0) goto done;
  char *names = malloc(size);
  if (!names) goto done;
  size = llistxattr(path, names, size);
  for (ssize_t off = 0; size > 0 && off < size; off += strlen(names + off) + 1) {
    const char *name = names + off;
    if (strncmp(name, prefix, plen)) continue;
    ssize_t vlen = lgetxattr(path, name, NULL, 0);
    if (vlen < 0) continue;
    char *value = malloc(vlen + 1);
    if (!value) continue;
    vlen = lgetxattr(path, name, value, vlen);
    if (vlen >= 0) {
      napi_value v;
      napi_create_string_utf8(env, value, vlen, &v);
      napi_set_named_property(env, out, name + plen, v);
    }
    free(value);
  }
  free(names);
done:
  free(path);
  free(prefix);
  return out;
}

static napi_value set_xattr(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]), *name = get_string(env, argv[1]), *value = get_string(env, argv[2]);
  napi_value r = NULL;
  if (path && name && value && lsetxattr(path, name, value, strlen(value), 0) != 0)
    r = throw_errno(env, errno, "lsetxattr", path);
  free(path);
  free(name);
  free(value);
  return r;
}

static napi_value remove_xattr(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]), *name = get_string(env, argv[1]);
  napi_value r = NULL;
  if (path && name && lremovexattr(path, name) != 0 && errno != ENODATA) r = throw_errno(env, errno, "lremovexattr", path);
  free(path);
  free(name);
  return r;
}

/* ---- inotify ---------------------------------------------------------------------------------- */

typedef struct {
  size_t len;
  char data[];
} event_batch;

static int inotify_fd = -1;
static napi_threadsafe_function watch_tsfn;
static pthread_t watch_thread;

static void *watch_reader(void *arg) {
  (void)arg;
  char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    struct pollfd p = {.fd = inotify_fd, .events = POLLIN};
    if (poll(&p, 1, -1) < 0) {
      if (errno == EINTR) continue;
      return NULL;
    }
    ssize_t n = read(inotify_fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return NULL;
    }
    event_batch *batch = malloc(sizeof(event_batch) + n);
    if (!batch) continue;
    batch->len = n;
    memcpy(batch->data, buf, n);
    if (napi_call_threadsafe_function(watch_tsfn, batch, napi_tsfn_blocking) != napi_ok) free(batch);
  }
}

static void deliver_events(napi_env env, napi_value cb, void *context, void *data) {
  (void)context;
  event_batch *batch = data;
  if (!env) {
    free(batch);
    return;
  }
  napi_value arr;
  napi_create_array(env, &arr);
  uint32_t i = 0;
  for (size_t off = 0; off < batch->len;) {
    struct inotify_event *ev = (struct inotify_event *)(batch->data + off);
    napi_value item, wd, mask, cookie, name;
    napi_create_array_with_length(env, 4, &item);
    napi_create_int32(env, ev->wd, &wd);
    napi_create_uint32(env, ev->mask, &mask);
    napi_create_uint32(env, ev->cookie, &cookie);
    napi_create_string_utf8(env, ev->len ? ev->name : "", NAPI_AUTO_LENGTH, &name);
    napi_set_element(env, item, 0, wd);
    napi_set_element(env, item, 1, mask);
    napi_set_element(env, item, 2, cookie);
    napi_set_element(env, item, 3, name);
    napi_set_element(env, arr, i++, item);
    off += sizeof(struct inotify_event) + ev->len;
  }
  free(batch);
  napi_value global;
  napi_get_global(env, &global);
  napi_call_function(env, global, cb, 1, &arr, NULL);
}

static napi_value watch_start(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (inotify_fd >= 0) {
    napi_throw_error(env, NULL, "watchStart called twice");
    return NULL;
  }
  inotify_fd = inotify_init1(IN_CLOEXEC);
  if (inotify_fd < 0) return throw_errno(env, errno, "inotify_init1", NULL);
  napi_value name;
  napi_create_string_utf8(env, "aenv-inotify", NAPI_AUTO_LENGTH, &name);
  CHECK(napi_create_threadsafe_function(env, argv[0], NULL, name, 0, 1, NULL, NULL, NULL, deliver_events, &watch_tsfn));
  /* The reader thread must not keep envd alive on its own. */
  napi_unref_threadsafe_function(env, watch_tsfn);
  if (pthread_create(&watch_thread, NULL, watch_reader, NULL) != 0) return throw_errno(env, errno, "pthread_create", NULL);
  pthread_detach(watch_thread);
  return NULL;
}

static napi_value watch_add(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  uint32_t mask;
  CHECK(napi_get_value_uint32(env, argv[1], &mask));
  char *path = get_string(env, argv[0]);
  if (!path) return NULL;
  int wd = inotify_add_watch(inotify_fd, path, mask);
  if (wd < 0) {
    napi_value r = throw_errno(env, errno, "inotify_add_watch", path);
    free(path);
    return r;
  }
  free(path);
  napi_value out;
  napi_create_int32(env, wd, &out);
  return out;
}

static napi_value watch_remove(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t wd;
  CHECK(napi_get_value_int32(env, argv[0], &wd));
  inotify_rm_watch(inotify_fd, wd); /* EINVAL when the kernel already dropped it (IN_IGNORED): fine */
  return NULL;
}


/* ---- spawn ------------------------------------------------------------------------------------ */

typedef struct {
  pid_t pid;
  napi_threadsafe_function tsfn;
} exit_watch;

typedef struct {
  int code;
  int signal;
} exit_info;

static void deliver_exit(napi_env env, napi_value cb, void *context, void *data) {
  (void)context;
  exit_info *info = data;
  if (env) {
    napi_value args[2], global;
    napi_create_int32(env, info->code, &args[0]);
    napi_create_int32(env, info->signal, &args[1]);
    napi_get_global(env, &global);
    napi_call_function(env, global, cb, 2, args, NULL);
  }
  free(info);
}

static void *exit_waiter(void *arg) {
  exit_watch *w = arg;
  int status = 0;
  while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
  }
  exit_info *info = malloc(sizeof(exit_info));
  if (info) {
    info->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    info->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (napi_call_threadsafe_function(w->tsfn, info, napi_tsfn_blocking) != napi_ok) free(info);
  }
  napi_release_threadsafe_function(w->tsfn, napi_tsfn_release);
  free(w);
  return NULL;
}

static char **string_array(napi_env env, napi_value arr) {
  uint32_t n = 0;
  if (napi_get_array_length(env, arr, &n) != napi_ok) return NULL;
  char **out = calloc(n + 1, sizeof(char *));
  if (!out) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value el;
    napi_get_element(env, arr, i, &el);
    out[i] = get_string(env, el);
    if (!out[i]) {
      for (uint32_t j = 0; j < i; j++) free(out[j]);
      free(out);
      return NULL;
    }
  }
  return out;
}

static void free_array(char **a) {
  if (!a) return;
  for (char **p = a; *p; p++) free(*p);
  free(a);
}

/* ---- spawn as a user ---------------------------------------------------------------------------- */

typedef struct {
  uid_t uid;
  gid_t gid;
  gid_t *groups;
  size_t ngroups;
  char oom[16]; /* "" = leave the oom score alone */
} spawn_user;

/* Writes "<a><b>: <strerror(err)>\n" to fd 2 and ends the child: only syscalls, no allocation (vfork child). */
_Noreturn static void child_fail(const char *a, const char *b, int err, int code) {
  const char *desc = strerrordesc_np(err);
  struct iovec v[5] = {
      {(void *)a, strlen(a)}, {(void *)b, strlen(b)}, {": ", 2},
      {(void *)(desc ? desc : "Unknown error"), strlen(desc ? desc : "Unknown error")}, {"\n", 1},
  };
  ssize_t ignored = writev(2, v, 5);
  (void)ignored;
  _exit(code);
}

/*
 * Where execvp would look for file, on the command's own PATH (envp's; confstr's default without one): made in
 * the parent, so the vfork child only tries them in order.
 */
static char **exec_candidates(const char *file, char **envp) {
  if (strchr(file, '/')) {
    char **one = calloc(2, sizeof(char *));
    if (one && !(one[0] = strdup(file))) {
      free(one);
      return NULL;
    }
    return one;
  }
  const char *path = "/bin:/usr/bin";
  for (char **e = envp; *e; e++)
    if (!strncmp(*e, "PATH=", 5)) path = *e + 5;
  size_t n = 1;
  for (const char *c = path; *c; c++) n += *c == ':';
  char **out = calloc(n + 1, sizeof(char *));
  if (!out) return NULL;
  size_t i = 0;
  for (const char *start = path;; i++) {
    const char *end = strchrnul(start, ':');
    int len = (int)(end - start);
    /* An empty element is the working directory, as for execvp. */
    if (asprintf(&out[i], "%.*s%s%s", len, start, len ? "/" : "", file) < 0) {
      out[i] = NULL;
      free_array(out);
      return NULL;
    }
    if (!*end) break;
    start = end + 1;
  }
  return out;
}

/* The vfork child's own frame: nothing it sets may land in its parent's, whose stack it shares. */
_Noreturn static void __attribute__((noinline))
vfork_child(char **candidates, char **args, char **envp, const char *cwd, int in_fd, int out_fd, int err_fd,
            const spawn_user *u, int errpipe) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &dfl, NULL);
  int err = 0;
  if (setsid() < 0) err = errno;
  if (!err && in_fd < 0 && (in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) err = errno;
  if (!err && (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)) err = errno;
  if (!err && chdir(cwd)) err = errno;
  if (err) {
    ssize_t ignored = write(errpipe, &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  /* The command gets 0-2 and nothing else of envd's, even a descriptor someone opened without O_CLOEXEC. */
  if (syscall(SYS_close_range, 3U, ~0U, 0U))
    for (int fd = 3; fd < 65536; fd++) close(fd);
  if (u->oom[0]) {
    /* Raising the score is always allowed; best effort so a read-only /proc does not block the command. */
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t ignored = write(fd, u->oom, strlen(u->oom));
      (void)ignored;
      close(fd);
    }
  }
  if (syscall(SYS_setgroups, u->ngroups, u->groups)) child_fail("envd: ", "setgroups", errno, 127);
  if (syscall(SYS_setresgid, u->gid, u->gid, u->gid)) child_fail("envd: ", "setgid", errno, 127);
  if (syscall(SYS_setresuid, u->uid, u->uid, u->uid)) child_fail("envd: ", "setuid", errno, 127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  int eacces = 0, last = ENOENT;
  for (char **c = candidates; *c; c++) {
    execve(*c, args, envp);
    last = errno;
    if (last == ENOEXEC) {
      /* A script without #!: execvp runs it with /bin/sh. */
      size_t argc = 0;
      while (args[argc]) argc++;
      char *sh[argc + 2];
      sh[0] = "/bin/sh";
      sh[1] = *c;
      for (size_t k = 1; k <= argc; k++) sh[k + 1] = args[k];
      execve(sh[0], sh, envp);
      last = errno;
      break;
    }
    if (last == EACCES) eacces = 1;
    else if (last != ENOENT && last != ENOTDIR && last != ESTALE && last != ENODEV && last != ETIMEDOUT) break;
  }
  if (eacces && (last == ENOENT || last == ENOTDIR)) last = EACCES;
  child_fail(args[0], "", last, last == ENOENT ? 127 : 126);
}

/*
 * vfork; in the child: default signal handlers, a new session, the pipes on 0-2, the working directory, every
 * other descriptor closed, the oom score, groups, gid and uid (raw syscalls: glibc's set*id() would signal
 * envd's threads, whose memory the child shares), an empty signal mask, then exec as execvp does. A failure before the exec comes back on
 * errpipe (chdir: the spawn fails, as posix_spawn's does) or, for the credentials and the exec, on the
 * command's stderr with exit status 127/126, as `aenv-init exec-as` reports it.
 */
static int spawn_as(pid_t *pid_out, char **candidates, char **args, char **envp, const char *cwd, int in_fd,
                    int out_fd, int err_fd, const spawn_user *u) {
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC)) return errno;
  sigset_t all, old;
  sigfillset(&all);
  /* No handler of envd's may run in the child, on envd's memory, before the child resets them. */
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = vfork();
  if (pid == 0) vfork_child(candidates, args, envp, cwd, in_fd, out_fd, err_fd, u, errpipe[1]);
  int saved = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(errpipe[1]);
  if (pid < 0) {
    close(errpipe[0]);
    return saved;
  }
  int child_err = 0;
  ssize_t got;
  while ((got = read(errpipe[0], &child_err, sizeof(child_err))) < 0 && errno == EINTR) {
  }
  close(errpipe[0]);
  if (got == (ssize_t)sizeof(child_err)) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return child_err ? child_err : EIO;
  }
  *pid_out = pid;
  return 0;
}

/* posix_spawn as envd's own user, in a new session, with every signal at its default and none blocked. */
static int spawn_plain(pid_t *pid_out, const char *file, char **args, char **envp, const char *cwd, int in_fd,
                       int out_fd, int err_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (in_fd >= 0) posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  posix_spawn_file_actions_addchdir_np(&fa, cwd);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  int rc = posix_spawn(pid_out, file, &fa, &at, args, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return rc;
}

/* An integer in [min, max] (a JS number that is exactly one), else false. */
static bool get_integer(napi_env env, napi_value v, double min, double max, double *out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || d != d || d < min || d > max || d != (double)(int64_t)d)
    return false;
  *out = d;
  return true;
}

/* A uid or gid the kernel can set: 0 .. 2^32-2 ((uid_t)-1 means "unchanged" to the set*id calls). */
static bool get_id(napi_env env, napi_value v, uint32_t *out) {
  double d;
  if (!get_integer(env, v, 0, 4294967294.0, &d)) return false;
  *out = (uint32_t)d;
  return true;
}

/* as = {uid, gid, groups, oomScoreAdj?}: 0 when read, else EINVAL/ENOMEM with nothing allocated. */
static int read_spawn_user(napi_env env, napi_value as, spawn_user *u) {
  napi_value v, groups;
  uint32_t uid, gid, n = 0;
  bool has_oom = false, is_array = false;
  memset(u, 0, sizeof(*u));
  if (napi_get_named_property(env, as, "uid", &v) != napi_ok || !get_id(env, v, &uid) ||
      napi_get_named_property(env, as, "gid", &v) != napi_ok || !get_id(env, v, &gid) ||
      napi_get_named_property(env, as, "groups", &groups) != napi_ok ||
      napi_is_array(env, groups, &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, groups, &n) != napi_ok || n > 65536)
    return EINVAL;
  if (napi_has_named_property(env, as, "oomScoreAdj", &has_oom) == napi_ok && has_oom) {
    double oom;
    if (napi_get_named_property(env, as, "oomScoreAdj", &v) != napi_ok || !get_integer(env, v, -1000, 1000, &oom))
      return EINVAL;
    snprintf(u->oom, sizeof(u->oom), "%d", (int)oom);
  }
  u->uid = uid;
  u->gid = gid;
  u->groups = calloc(n ? n : 1, sizeof(gid_t));
  if (!u->groups) return ENOMEM;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t g;
    if (napi_get_element(env, groups, i, &v) != napi_ok || !get_id(env, v, &g)) {
      free(u->groups);
      u->groups = NULL;
      return EINVAL;
    }
    u->groups[i] = g;
  }
  u->ngroups = n;
  return 0;
}

static napi_value spawn_process(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 6) {
    napi_throw_type_error(env, NULL, "spawn(file, argv, envp, cwd, pipeStdin, onExit[, as])");
    return NULL;
  }
  napi_valuetype as_type = napi_undefined;
  if (argc >= 7) CHECK(napi_typeof(env, argv[6], &as_type));
  spawn_user user;
  memset(&user, 0, sizeof(user));
  bool as_user = as_type == napi_object;
  if (as_user && read_spawn_user(env, argv[6], &user)) {
    napi_throw_type_error(env, NULL, "spawn: as must be {uid, gid, groups[], oomScoreAdj?} of valid ids");
    return NULL;
  }
  bool pipe_stdin;
  CHECK(napi_get_value_bool(env, argv[4], &pipe_stdin));
  char *file = get_string(env, argv[0]), *cwd = get_string(env, argv[3]);
  char **args = string_array(env, argv[1]), **envp = string_array(env, argv[2]);
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  napi_value result = NULL;
  int rc = 0;
  const char *what = "spawn";
  char **candidates = NULL;
  if (!file || !cwd || !args || !envp || !args[0] || (as_user && !(candidates = exec_candidates(file, envp)))) {
    rc = file && cwd && args && envp && !args[0] ? EINVAL : ENOMEM;
    goto done;
  }
  if ((pipe_stdin && pipe2(in, O_CLOEXEC)) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
    rc = errno;
    what = "pipe2";
    goto done;
  }
  pid_t pid;
  int in_fd = pipe_stdin ? in[0] : -1;
  rc = as_user ? spawn_as(&pid, candidates, args, envp, cwd, in_fd, out[1], err[1], &user)
               : spawn_plain(&pid, file, args, envp, cwd, in_fd, out[1], err[1]);
  if (rc) goto done;

  exit_watch *w = malloc(sizeof(exit_watch));
  napi_value name;
  napi_create_string_utf8(env, "aenv-exit", NAPI_AUTO_LENGTH, &name);
  pthread_t th;
  if (!w || napi_create_threadsafe_function(env, argv[5], NULL, name, 0, 1, NULL, NULL, NULL, deliver_exit, &w->tsfn) != napi_ok ||
      (w->pid = pid, pthread_create(&th, NULL, exit_waiter, w)) != 0) {
    /* Cannot watch it: do not leave an unreaped, unobserved child behind. */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    free(w);
    rc = EAGAIN;
    what = "pthread_create";
    goto done;
  }
  pthread_detach(th);

  napi_value obj, v;
  napi_create_object(env, &obj);
  napi_create_int32(env, pid, &v);
  napi_set_named_property(env, obj, "pid", v);
  napi_create_int32(env, pipe_stdin ? in[1] : -1, &v);
  napi_set_named_property(env, obj, "stdin", v);
  napi_create_int32(env, out[0], &v);
  napi_set_named_property(env, obj, "stdout", v);
  napi_create_int32(env, err[0], &v);
  napi_set_named_property(env, obj, "stderr", v);
  if (pipe_stdin) in[1] = -1;
  out[0] = err[0] = -1;
  result = obj;

done:
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0) close(in[i]);
    if (out[i] >= 0) close(out[i]);
    if (err[i] >= 0) close(err[i]);
  }
  free_array(args);
  free_array(envp);
  free_array(candidates);
  free(user.groups);
  free(cwd);
  if (rc) result = throw_errno(env, rc, what, file);
  free(file);
  return result;
}

NAPI_MODULE_INIT() {
  struct {
    const char *name;
    napi_callback fn;
  } fns[] = {
      {"runAs", run_as},           {"getXattrs", get_xattrs},   {"setXattr", set_xattr},
      {"removeXattr", remove_xattr}, {"watchStart", watch_start}, {"watchAdd", watch_add},
      {"watchRemove", watch_remove},   {"spawn", spawn_process},
  };
  for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
    napi_value f;
    napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].fn, NULL, &f);
    napi_set_named_property(env, exports, fns[i].name, f);
  }
  return exports;
}

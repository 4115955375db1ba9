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
 *   spawn(file, argv[], envp[], cwd, pipeStdin, onExit) -> {pid, stdin, stdout, stderr}
 *                                  posix_spawn (vfork: no page-table copy of the big envd process, which
 *                                  Node's fork-based spawn pays on every command) in a new session, with
 *                                  pipes for stdout/stderr and stdin (or /dev/null); onExit(code, signal)
 *                                  comes from a waitpid thread. All fds are close-on-exec in envd.
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

static napi_value spawn_process(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 6) {
    napi_throw_type_error(env, NULL, "spawn(file, argv, envp, cwd, pipeStdin, onExit)");
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
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (!file || !cwd || !args || !envp) {
    rc = ENOMEM;
    goto done;
  }
  if ((pipe_stdin && pipe2(in, O_CLOEXEC)) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
    rc = errno;
    what = "pipe2";
    goto done;
  }
  if (pipe_stdin) posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addchdir_np(&fa, cwd);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  pid_t pid;
  rc = posix_spawn(&pid, file, &fa, &at, args, envp);
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
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0) close(in[i]);
    if (out[i] >= 0) close(out[i]);
    if (err[i] >= 0) close(err[i]);
  }
  free_array(args);
  free_array(envp);
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

/*
 * aenv-init: PID 1 of an aenv sandbox, plus the one privileged helper envd needs.
 *
 *   aenv-init                                  supervise envd (<tools>/bin/node <flags> <tools>/envd/envd.cjs)
 *   aenv-init supervise -- CMD [ARGS...]       supervise an arbitrary command instead (used by tests)
 *   aenv-init exec-as UID GID GROUPS [--oom-score-adj N] -- CMD [ARGS...]
 *
 * Supervisor: starts the command, restarts it with exponential backoff when it exits, reaps every child
 * (orphans too: it is PID 1 or a child subreaper), forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2
 * to the command, and exits with the command's status after SIGTERM/SIGINT (SIGKILL after a grace period).
 *
 * exec-as: sets supplementary groups, gid and uid (in that order) and execs CMD. Node's spawn cannot set
 * supplementary groups (libuv calls setgroups(0, NULL) whenever uid/gid are given), so envd launches
 * every process through this. GROUPS is a comma list of numeric gids, or "-" for none.
 *
 * Built static (gcc -static -Os) so it runs in any rootfs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define STABLE_RUN_MS 10000
#define STOP_GRACE_MS 10000
#define MAX_FLAGS 32
#define MAX_GROUPS 65536

static void die(const char *what) {
  fprintf(stderr, "aenv-init: %s: %s\n", what, strerror(errno));
  exit(127);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_ulong(const char *s, unsigned long max, unsigned long *out) {
  char *end;
  if (!s || !*s) return -1;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || v > max || s[0] == '-') return -1;
  *out = v;
  return 0;
}

/* ---- exec-as ---------------------------------------------------------------------------------- */

static int parse_groups(const char *list, gid_t **out, size_t *count) {
  *out = NULL;
  *count = 0;
  if (!strcmp(list, "-") || !*list) return 0;
  size_t n = 1;
  for (const char *p = list; *p; p++)
    if (*p == ',') n++;
  if (n > MAX_GROUPS) return -1;
  gid_t *groups = calloc(n, sizeof(gid_t));
  if (!groups) return -1;
  char *copy = strdup(list);
  if (!copy) return -1;
  size_t i = 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    unsigned long g;
    if (parse_ulong(tok, UINT_MAX - 1, &g)) {
      free(copy);
      free(groups);
      return -1;
    }
    groups[i++] = (gid_t)g;
  }
  free(copy);
  *out = groups;
  *count = i;
  return 0;
}

static int exec_as(int argc, char **argv) {
  /* argv: exec-as UID GID GROUPS [opts] -- CMD ARGS */
  if (argc < 6) {
    fprintf(stderr, "usage: aenv-init exec-as UID GID GROUPS [--oom-score-adj N] -- CMD [ARGS...]\n");
    return 127;
  }
  unsigned long uid, gid;
  if (parse_ulong(argv[1], UINT_MAX - 1, &uid) || parse_ulong(argv[2], UINT_MAX - 1, &gid)) {
    fprintf(stderr, "aenv-init exec-as: bad uid/gid '%s' '%s'\n", argv[1], argv[2]);
    return 127;
  }
  gid_t *groups;
  size_t ngroups;
  if (parse_groups(argv[3], &groups, &ngroups)) {
    fprintf(stderr, "aenv-init exec-as: bad group list '%s'\n", argv[3]);
    return 127;
  }
  int i = 4;
  const char *oom = NULL;
  for (; i < argc && strcmp(argv[i], "--"); i++) {
    if (!strcmp(argv[i], "--oom-score-adj") && i + 1 < argc) {
      oom = argv[++i];
    } else {
      fprintf(stderr, "aenv-init exec-as: unknown option '%s'\n", argv[i]);
      return 127;
    }
  }
  if (i >= argc - 1) {
    fprintf(stderr, "aenv-init exec-as: missing -- CMD\n");
    return 127;
  }
  char **cmd = &argv[i + 1];

  if (oom) {
    /* Raising the score is always allowed; best effort so a read-only /proc does not block the command. */
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t ignored = write(fd, oom, strlen(oom));
      (void)ignored;
      close(fd);
    }
  }
  if (setgroups(ngroups, groups)) die("setgroups");
  if (setgid((gid_t)gid)) die("setgid");
  if (setuid((uid_t)uid)) die("setuid");
  execvp(cmd[0], cmd);
  int err = errno;
  fprintf(stderr, "%s: %s\n", cmd[0], strerror(err));
  return err == ENOENT ? 127 : 126;
}

/* ---- supervisor ------------------------------------------------------------------------------- */

static char *tools_root(void) {
  const char *env = getenv("AENV_TOOLS_DIR");
  if (env && *env) return strdup(env);
  static char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return strdup("/agentenv");
  exe[n] = 0;
  for (int k = 0; k < 2; k++) {
    char *slash = strrchr(exe, '/');
    if (!slash || slash == exe) return strdup("/agentenv");
    *slash = 0;
  }
  return strdup(exe);
}

/* <tools>/bin/node <flags from <tools>/envd/node-flags> <tools>/envd/envd.cjs */
static char **envd_command(void) {
  char *root = tools_root();
  static char node[PATH_MAX], script[PATH_MAX], flags_path[PATH_MAX];
  static char flags_buf[4096];
  static char *argv[MAX_FLAGS + 3];
  snprintf(node, sizeof(node), "%s/bin/node", root);
  snprintf(script, sizeof(script), "%s/envd/envd.cjs", root);
  snprintf(flags_path, sizeof(flags_path), "%s/envd/node-flags", root);
  free(root);
  int argc = 0;
  argv[argc++] = node;
  int fd = open(flags_path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, flags_buf, sizeof(flags_buf) - 1);
    close(fd);
    if (n > 0) {
      flags_buf[n] = 0;
      for (char *save = NULL, *tok = strtok_r(flags_buf, " \t\r\n", &save); tok && argc < MAX_FLAGS + 1;
           tok = strtok_r(NULL, " \t\r\n", &save))
        argv[argc++] = tok;
    }
  }
  argv[argc++] = script;
  argv[argc] = NULL;
  return argv;
}

// The sandbox's stdio is /dev/null (CRIU cannot dump host files). With AENV_INIT_LOG set, aenv-init and envd
// write to that file inside the sandbox instead (root only), cut back to empty when it grows past LOG_MAX.
#define LOG_MAX (4L * 1024 * 1024)
static int log_fd = -1;

static void open_log(void) {
  const char *path = getenv("AENV_INIT_LOG");
  if (!path || !*path) return;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = 0;
    mkdir(dir, 0700);
  }
  log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) return;
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
}

static void trim_log(void) {
  struct stat st;
  if (log_fd >= 0 && fstat(log_fd, &st) == 0 && st.st_size > LOG_MAX) {
    if (ftruncate(log_fd, 0) != 0) return;
  }
}

static pid_t start_child(char **cmd, const sigset_t *orig_mask) {
  trim_log();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "aenv-init: fork: %s\n", strerror(errno));
    return 0;
  }
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execv(cmd[0], cmd);
    fprintf(stderr, "aenv-init: exec %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
  }
  return pid;
}

static int supervise(char **cmd) {
  open_log();
  sigset_t all, orig;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &orig);
  if (getpid() != 1) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  pid_t child = start_child(cmd, &orig);
  long long started_at = now_ms(), restart_at = 0, stop_deadline = 0;
  long backoff = BACKOFF_MIN_MS;
  int stopping = 0, last_status = 0;

  for (;;) {
    long long now = now_ms();
    long long wake = -1;
    if (!child && !stopping) wake = restart_at;
    if (child && stopping) wake = stop_deadline;
    struct timespec ts, *tsp = NULL;
    if (wake >= 0) {
      long long wait = wake > now ? wake - now : 0;
      ts.tv_sec = wait / 1000;
      ts.tv_nsec = (wait % 1000) * 1000000;
      tsp = &ts;
    }
    siginfo_t info;
    int sig = tsp ? sigtimedwait(&all, &info, tsp) : sigwaitinfo(&all, &info);

    if (sig == SIGTERM || sig == SIGINT) {
      if (!stopping) {
        stopping = 1;
        stop_deadline = now_ms() + STOP_GRACE_MS;
      }
      if (child) kill(child, sig);
      else return 0;
    } else if (sig == SIGHUP || sig == SIGQUIT || sig == SIGUSR1 || sig == SIGUSR2) {
      if (child) kill(child, sig);
    }

    /* Reap everything that exited: our command and any orphan re-parented to us. */
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid != child) continue;
      child = 0;
      last_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (stopping) return last_status;
      long long ran = now_ms() - started_at;
      if (ran >= STABLE_RUN_MS) backoff = BACKOFF_MIN_MS;
      fprintf(stderr, "aenv-init: %s exited (status %d) after %lld ms; restarting in %ld ms\n", cmd[0], last_status,
              ran, backoff);
      restart_at = now_ms() + backoff;
      backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }

    now = now_ms();
    if (!child && !stopping && now >= restart_at) {
      child = start_child(cmd, &orig);
      started_at = now;
      if (!child) restart_at = now + backoff;
    }
    if (child && stopping && now >= stop_deadline) {
      kill(child, SIGKILL);
      stop_deadline = now + STOP_GRACE_MS;
    }
  }
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "exec-as")) return exec_as(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "supervise")) {
    if (argc < 4 || strcmp(argv[2], "--")) {
      fprintf(stderr, "usage: aenv-init supervise -- CMD [ARGS...]\n");
      return 127;
    }
    return supervise(argv + 3);
  }
  if (argc >= 2) {
    fprintf(stderr, "usage: aenv-init [supervise -- CMD ARGS | exec-as UID GID GROUPS -- CMD ARGS]\n");
    return 127;
  }
  return supervise(envd_command());
}

// A test-only Node addon (plain N-API, no headers needed) that lets the
// stress suite see sampling signals the sampler itself would swallow:
//
//   arm(sig)              replaces sig's handler, process-wide, with one
//                         that only counts (the old action is kept)
//   disarm(sig)           puts the old action back exactly and returns
//                         { count, timer, queued, tkill, other, firstTid,
//                           firstAfterNs } for what arrived meanwhile
//   forkAndCount(cpuMs)   fork()s; the child (the calling thread's copy,
//                         nothing of the sampler runs there) counts SIGURG
//                         and every real-time signal while it burns cpuMs
//                         of its own CPU time, then reports and _exit()s
//   signals()             { urg, rtmin, rtmax }: the numbers this libc uses
//
// The machsampler handler ignores a signal it did not expect, so "no
// sampling signal after stop()" and "a fork()ed child gets none" can only
// be seen from outside it: arm() right after stop() returns, and a child
// whose only handlers are these counters. Everything in the handler and
// in the child is async-signal-safe (atomics, clock_gettime, gettid,
// write, _exit).
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---- the few N-API declarations used (the ABI is stable across majors)
typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
extern napi_status napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
extern napi_status napi_get_value_double(napi_env, napi_value, double *);
extern napi_status napi_create_double(napi_env, double, napi_value *);
extern napi_status napi_create_object(napi_env, napi_value *);
extern napi_status napi_set_named_property(napi_env, napi_value, const char *, napi_value);
extern napi_status napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
extern napi_status napi_throw_error(napi_env, const char *, const char *);
#define AUTO_LENGTH SIZE_MAX

#define NSIG_MAX 65

struct tally {
  unsigned long count, timer, queued, tkill, other;
  long first_tid;
  int64_t first_ns;
};

static struct tally tallies[NSIG_MAX];
static int64_t armed_ns[NSIG_MAX];
static int armed[NSIG_MAX];
static struct sigaction saved[NSIG_MAX];

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void on_signal(int sig, siginfo_t *info, void *uc) {
  (void)uc;
  if (sig <= 0 || sig >= NSIG_MAX) return;
  struct tally *t = &tallies[sig];
  if (__atomic_fetch_add(&t->count, 1, __ATOMIC_RELAXED) == 0) {
    t->first_tid = syscall(SYS_gettid);
    t->first_ns = now_ns();
  }
  unsigned long *kind = &t->other;
  if (info->si_code == SI_TIMER) kind = &t->timer;
  else if (info->si_code == SI_QUEUE) kind = &t->queued;
  else if (info->si_code == SI_TKILL) kind = &t->tkill;
  __atomic_fetch_add(kind, 1, __ATOMIC_RELAXED);
}

static int install_counter(int sig, struct sigaction *old) {
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_sigaction = on_signal;
  act.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&act.sa_mask);
  return sigaction(sig, &act, old);
}

static napi_value num(napi_env env, double v) {
  napi_value r;
  napi_create_double(env, v, &r);
  return r;
}

static void put(napi_env env, napi_value obj, const char *k, double v) { napi_set_named_property(env, obj, k, num(env, v)); }

static napi_value tally_object(napi_env env, const struct tally *t, int64_t since) {
  napi_value o;
  napi_create_object(env, &o);
  put(env, o, "count", (double)t->count);
  put(env, o, "timer", (double)t->timer);
  put(env, o, "queued", (double)t->queued);
  put(env, o, "tkill", (double)t->tkill);
  put(env, o, "other", (double)t->other);
  put(env, o, "firstTid", t->count ? (double)t->first_tid : 0);
  put(env, o, "firstAfterNs", t->count && since ? (double)(t->first_ns - since) : -1);
  return o;
}

static int arg_signal(napi_env env, napi_callback_info info, int *sig) {
  size_t argc = 1;
  napi_value argv[1];
  double d = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != 0 || argc < 1 || napi_get_value_double(env, argv[0], &d) != 0 ||
      d < 1 || d >= NSIG_MAX || d != (int)d) {
    napi_throw_error(env, "EINVAL", "a signal number from 1 to 64");
    return -1;
  }
  *sig = (int)d;
  return 0;
}

static napi_value arm(napi_env env, napi_callback_info info) {
  int sig;
  if (arg_signal(env, info, &sig)) return NULL;
  if (armed[sig]) {
    napi_throw_error(env, "EAGAIN", "already armed");
    return NULL;
  }
  memset(&tallies[sig], 0, sizeof tallies[sig]);
  armed_ns[sig] = now_ns();
  if (install_counter(sig, &saved[sig]) != 0) {
    napi_throw_error(env, "EINVAL", strerror(errno));
    return NULL;
  }
  armed[sig] = 1;
  return NULL;
}

static napi_value disarm(napi_env env, napi_callback_info info) {
  int sig;
  if (arg_signal(env, info, &sig)) return NULL;
  if (!armed[sig]) {
    napi_throw_error(env, "ESRCH", "not armed");
    return NULL;
  }
  sigaction(sig, &saved[sig], NULL);
  armed[sig] = 0;
  struct tally t = tallies[sig];
  return tally_object(env, &t, armed_ns[sig]);
}

// What a forked child sends back: one tally per signal.
struct child_report {
  struct tally t[NSIG_MAX];
  int64_t cpu_ns;
};

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static volatile unsigned long sink;

static napi_value fork_and_count(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  double cpu_ms = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != 0 || argc < 1 || napi_get_value_double(env, argv[0], &cpu_ms) != 0 ||
      !(cpu_ms >= 0 && cpu_ms <= 10000)) {
    napi_throw_error(env, "EINVAL", "cpuMs from 0 to 10000");
    return NULL;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    napi_throw_error(env, "EIO", strerror(errno));
    return NULL;
  }
  // Everything blocked across fork(): a signal meant for the child before
  // its counters are in place stays pending and is counted after.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    memset(tallies, 0, sizeof tallies);
    install_counter(SIGURG, NULL);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++) install_counter(s, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int64_t start = thread_cpu_ns();
    while (thread_cpu_ns() - start < (int64_t)(cpu_ms * 1e6))
      for (int i = 0; i < 1000; i++) sink = sink * 6364136223846793005ul + 1;
    sigprocmask(SIG_SETMASK, &all, NULL);
    static struct child_report rep;
    memcpy(rep.t, tallies, sizeof tallies);
    rep.cpu_ns = thread_cpu_ns() - start;
    const char *p = (const char *)&rep;
    size_t left = sizeof rep;
    while (left > 0) {
      ssize_t n = write(fds[1], p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(2);
      p += n;
      left -= (size_t)n;
    }
    _exit(0);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    napi_throw_error(env, "EAGAIN", strerror(errno));
    return NULL;
  }
  static struct child_report rep;
  memset(&rep, 0, sizeof rep);
  char *p = (char *)&rep;
  size_t got = 0;
  while (got < sizeof rep) {
    ssize_t n = read(fds[0], p + got, sizeof rep - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  napi_value o, by;
  napi_create_object(env, &o);
  napi_create_object(env, &by);
  unsigned long total = 0;
  for (int s = 1; s < NSIG_MAX; s++) {
    if (!rep.t[s].count) continue;
    total += rep.t[s].count;
    char name[8];
    name[0] = 's';
    name[1] = (char)('0' + s / 10);
    name[2] = (char)('0' + s % 10);
    name[3] = 0;
    napi_set_named_property(env, by, name, tally_object(env, &rep.t[s], 0));
  }
  put(env, o, "complete", got == sizeof rep);
  put(env, o, "exitCode", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  put(env, o, "termSignal", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  put(env, o, "count", (double)total);
  put(env, o, "cpuMs", (double)rep.cpu_ns / 1e6);
  napi_set_named_property(env, o, "bySignal", by);
  return o;
}

static napi_value signals(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value o;
  napi_create_object(env, &o);
  put(env, o, "urg", SIGURG);
  put(env, o, "rtmin", SIGRTMIN);
  put(env, o, "rtmax", SIGRTMAX);
  return o;
}

static void export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value f;
  napi_create_function(env, name, AUTO_LENGTH, cb, NULL, &f);
  napi_set_named_property(env, exports, name, f);
}

__attribute__((visibility("default"))) napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  export_fn(env, exports, "arm", arm);
  export_fn(env, exports, "disarm", disarm);
  export_fn(env, exports, "forkAndCount", fork_and_count);
  export_fn(env, exports, "signals", signals);
  return exports;
}

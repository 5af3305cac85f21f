// Native threads for the reproducers, started from an LD_PRELOAD
// constructor so a plain `node` process has them without an addon.
// MACHSAMPLER_REPRO selects what they do; results go to the file named by
// MACHSAMPLER_REPRO_OUT, written at exit as `key value` lines.
//
//   fiber     a thread on a makecontext stack whose upper half becomes
//             PROT_NONE while rbp points there; it spins
//   eintr     a thread that works 2 ms then waits 5 ms, 300 times, in
//             poll, select, nanosleep and usleep in turn, counting EINTR
//   sigwait   a thread that blocks every signal and loops on
//             sigtimedwait(full set), counting the signals it takes
//   idle=N    N threads that sleep for good
//   small[=K] a thread with a 64 KiB stack that recurses until K KiB
//             (default 60, fractions allowed) are used and spins there
//   sort      a busy thread, as another addon's worker would be: qsort()
//             with a comparator, in a loop (libc code without frame
//             pointers, called back into this library)
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static volatile unsigned long sink;
static long eintr_poll, eintr_select, eintr_nanosleep, eintr_usleep, early_nanosleep, waits;
static long sigwait_taken[65];
// How the last signal taken was sent: si_code, and si_value for SI_QUEUE.
static long sigwait_code, sigwait_value;
static volatile int done;

static void spin_ms(int ms) {
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (;;) {
    for (int i = 0; i < 1000; i++) sink = sink * 6364136223846793005ul + 1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    if ((b.tv_sec - a.tv_sec) * 1000000000l + (b.tv_nsec - a.tv_nsec) >= ms * 1000000l) return;
  }
}

// ---- fiber
static ucontext_t main_ctx, fiber_ctx;
static char *fiber_stack;
static const size_t FIBER_SIZE = 256 * 1024;

static void on_fiber(void) {
  // rbp into the upper half, which is readable for 300 ms of this thread's
  // CPU time (a sampler sees one mapping around sp and fp), and then
  // becomes unreadable.
  char *upper = fiber_stack + FIBER_SIZE / 2 + 4096;
#if defined(__x86_64__)
  __asm__ volatile("mov %0, %%rbp" ::"r"(upper) : "memory");
#elif defined(__aarch64__)
  __asm__ volatile("mov x29, %0" ::"r"(upper) : "memory");
#endif
  spin_ms(300);
  mprotect(fiber_stack + FIBER_SIZE / 2, FIBER_SIZE / 2, PROT_NONE);
  for (;;) sink = sink * 6364136223846793005ul + 1;
}

static void *fiber_thread(void *arg) {
  (void)arg;
  fiber_stack = mmap(NULL, FIBER_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  getcontext(&fiber_ctx);
  fiber_ctx.uc_stack.ss_sp = fiber_stack;
  fiber_ctx.uc_stack.ss_size = FIBER_SIZE / 2;  // runs in the lower half
  fiber_ctx.uc_link = &main_ctx;
  makecontext(&fiber_ctx, on_fiber, 0);
  swapcontext(&main_ctx, &fiber_ctx);
  return NULL;
}

// ---- eintr
static void *eintr_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 300 && !done; i++) {
    spin_ms(2);
    waits++;
    switch (i % 4) {
      case 0:
        if (poll(NULL, 0, 5) < 0 && errno == EINTR) eintr_poll++;
        break;
      case 1: {
        struct timeval tv = {0, 5000};
        if (select(0, NULL, NULL, NULL, &tv) < 0 && errno == EINTR) eintr_select++;
        break;
      }
      case 2: {
        struct timespec ts = {0, 5000000}, rem = {0, 0};
        if (nanosleep(&ts, &rem) < 0 && errno == EINTR) {
          eintr_nanosleep++;
          if (rem.tv_nsec > 0) early_nanosleep++;
        }
        break;
      }
      case 3:
        if (usleep(5000) < 0 && errno == EINTR) eintr_usleep++;
        break;
    }
  }
  return NULL;
}

// ---- sigwait
static void *sigwait_thread(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  while (!done) {
    struct timespec ts = {0, 50000000};
    siginfo_t si;
    int s = sigtimedwait(&all, &si, &ts);
    if (s > 0 && s < 65) {
      sigwait_taken[s]++;
      sigwait_code = si.si_code;
      sigwait_value = (long)si.si_value.sival_ptr;
    }
  }
  return NULL;
}

// ---- idle
static void *idle_thread(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}

// ---- small stack
static size_t small_used = 60 * 1024;
static unsigned long recurse(int depth, char *top) {
  volatile char pad[256];
  pad[0] = (char)depth;
  if ((size_t)(top - (char *)pad) < small_used) return recurse(depth + 1, top) + pad[0];
  for (;;) sink = sink * 6364136223846793005ul + 1;
}

static void *small_thread(void *arg) {
  (void)arg;
  char top;
  return (void *)recurse(0, &top);
}

// ---- sort
static int compare_keys(const void *a, const void *b) {
  unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
  return x < y ? -1 : x > y;
}

static void *sort_thread(void *arg) {
  (void)arg;
  static unsigned long keys[4096];
  unsigned long seed = 1;
  pthread_setname_np(pthread_self(), "addon-sort");
  while (!done) {
    for (int i = 0; i < 4096; i++) keys[i] = seed = seed * 6364136223846793005ul + 1442695040888963407ul;
    qsort(keys, 4096, sizeof keys[0], compare_keys);
    sink += keys[0];
  }
  return NULL;
}

static void start(void *(*fn)(void *), size_t stack) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  if (stack) pthread_attr_setstacksize(&a, stack);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &a, fn, NULL);
  pthread_attr_destroy(&a);
}

static void report(void) {
  done = 1;
  const char *out = getenv("MACHSAMPLER_REPRO_OUT");
  if (!out) return;
  FILE *f = fopen(out, "w");
  if (!f) return;
  fprintf(f, "waits %ld\npoll %ld\nselect %ld\nnanosleep %ld\nnanosleep_early %ld\nusleep %ld\n", waits, eintr_poll,
          eintr_select, eintr_nanosleep, early_nanosleep, eintr_usleep);
  long taken = 0;
  for (int s = 1; s < 65; s++) taken += sigwait_taken[s];
  fprintf(f, "sigwait_taken %ld\n", taken);
  if (taken) fprintf(f, "sigwait_code %ld\nsigwait_value %ld\n", sigwait_code, sigwait_value);
  for (int s = 1; s < 65; s++)
    if (sigwait_taken[s]) fprintf(f, "sigwait_signal_%d %ld\n", s, sigwait_taken[s]);
  fclose(f);
}

__attribute__((constructor)) static void init(void) {
  const char *what = getenv("MACHSAMPLER_REPRO");
  if (!what) return;
  // Only the first process: not the programs it runs.
  unsetenv("MACHSAMPLER_REPRO");
  unsetenv("LD_PRELOAD");
  atexit(report);
  if (!strcmp(what, "fiber")) start(fiber_thread, 0);
  else if (!strcmp(what, "eintr")) start(eintr_thread, 0);
  else if (!strcmp(what, "sigwait")) start(sigwait_thread, 0);
  else if (!strncmp(what, "small", 5)) {
    if (what[5] == '=') small_used = (size_t)(atof(what + 6) * 1024);
    start(small_thread, 64 * 1024);
  }
  else if (!strcmp(what, "sort")) start(sort_thread, 0);
  else if (!strncmp(what, "idle=", 5)) {
    int n = atoi(what + 5);
    for (int i = 0; i < n; i++) start(idle_thread, 64 * 1024);
  }
}

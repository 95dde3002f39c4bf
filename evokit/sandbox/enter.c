/* evokit-enter: run one command inside a started evokit sandbox (what `docker exec` does).
 *
 * Built and documented by evokit/sandbox/enter.py, which also owns the command line:
 *
 *   evokit-enter PIDFD ROOTFD SECCOMPFD CWD CAPMASK NCG CGROUP_PROCS... NENV KEY=VALUE... -- ARGV...
 *
 * PIDFD      pidfd of the sandbox's pid 1: setns() into its mount, net, uts, ipc and pid namespaces
 *            in one atomic call (a pidfd cannot name a recycled pid);
 * ROOTFD     O_PATH fd of pid 1's root (/proc/<pid 1>/root): the child chroots to it;
 * SECCOMPFD  readable fd holding the classic-BPF filter (evokit/sandbox/seccomp.py), read to EOF;
 * CWD        working directory inside the sandbox;
 * CAPMASK    hex mask of the capabilities the command keeps (Docker's default set);
 * NCG, ...   how many cgroup.procs files to join, and their paths (before anything else);
 * NENV, ...  the command's whole environment (this program itself is started with an empty one);
 * ARGV       the command, looked up on the sandbox's PATH.
 *
 * One process joins the cgroups and the namespaces, then forks: a pid namespace applies to
 * children only. The child chroots, changes directory, sets no_new_privs, drops the bounding set
 * to CAPMASK, sets CAPMASK as its inheritable/permitted/effective/ambient sets (what bwrap
 * --cap-add gave before), loads the seccomp filter last and execs. The parent waits and exits
 * with the child's status (128 + signal when it was killed, as a shell reports it).
 * Exit codes of the helper itself: 125 setup failed, 126 exec failed, 127 command not found.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

static void die(const char *what, const char *arg) {
    fprintf(stderr, "evokit-enter: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
    _exit(125);
}

static int parse_fd(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1 << 20) {
        errno = EINVAL;
        die("bad fd argument", s);
    }
    return (int)v;
}

static void join_cgroup(const char *procs) {
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0) die("open", procs);
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (write(fd, pid, (size_t)n) != n) die("join cgroup", procs);
    close(fd);
}

static void load_seccomp(int fd) {
    static unsigned char buf[1 << 16];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof buf - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("read seccomp filter", NULL);
        if (r == 0) break;
        len += (size_t)r;
        if (len == sizeof buf) { errno = EFBIG; die("read seccomp filter", NULL); }
    }
    if (len == 0 || len % sizeof(struct sock_filter) != 0) { errno = EINVAL; die("seccomp filter size", NULL); }
    struct sock_fprog prog = {.len = (unsigned short)(len / sizeof(struct sock_filter)),
                              .filter = (struct sock_filter *)buf};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) die("load seccomp filter", NULL);
}

static void set_caps(uint64_t mask) {
    for (int cap = 0; cap < 64; cap++) {
        if (mask & (1ULL << cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die("drop bounding capability", NULL);
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) die("clear ambient capabilities", NULL);
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    for (int i = 0; i < 2; i++) {
        uint32_t m = (uint32_t)(mask >> (32 * i));
        data[i].effective = data[i].permitted = data[i].inheritable = m;
    }
    if (syscall(SYS_capset, &hdr, data) != 0) die("set capabilities", NULL);
    for (int cap = 0; cap < 64; cap++)
        if ((mask & (1ULL << cap)) && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0 && errno != EINVAL)
            die("raise ambient capability", NULL);
}

int main(int argc, char **argv) {
    if (argc < 9) { errno = EINVAL; die("usage: evokit-enter PIDFD ROOTFD SECCOMPFD CWD CAPMASK NCG ... NENV ... -- ARGV", NULL); }
    int pidfd = parse_fd(argv[1]), rootfd = parse_fd(argv[2]), seccompfd = parse_fd(argv[3]);
    const char *cwd = argv[4];
    uint64_t mask = strtoull(argv[5], NULL, 16);
    int i = 6;
    int ncg = parse_fd(argv[i++]);
    if (i + ncg >= argc) { errno = EINVAL; die("too few cgroup arguments", NULL); }
    for (int k = 0; k < ncg; k++) join_cgroup(argv[i++]);
    int nenv = parse_fd(argv[i++]);
    if (i + nenv >= argc) { errno = EINVAL; die("too few environment arguments", NULL); }
    char **envp = calloc((size_t)nenv + 1, sizeof(char *));
    if (!envp) die("calloc", NULL);
    for (int k = 0; k < nenv; k++) envp[k] = argv[i++];
    if (i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc) { errno = EINVAL; die("expected -- ARGV", NULL); }
    char **cmd = argv + i + 1;

    /* The three fds are evokit's, not the command's: close them on exec. */
    fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    fcntl(rootfd, F_SETFD, FD_CLOEXEC);
    fcntl(seccompfd, F_SETFD, FD_CLOEXEC);
    if (setns(pidfd, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID) != 0)
        die("enter the sandbox's namespaces", NULL);

    pid_t child = fork();
    if (child < 0) die("fork", NULL);
    if (child == 0) {
        /* Not dumpable until exec (which resets it): while this process still holds every
         * capability, no process of the sandbox may ptrace it or open its /proc files. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("set non-dumpable", NULL);
        if (fchdir(rootfd) != 0 || chroot(".") != 0) die("enter the sandbox's root", NULL);
        if (chdir(cwd) != 0) die("chdir to", cwd);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("set no_new_privs", NULL);
        set_caps(mask);
        load_seccomp(seccompfd);
        environ = envp;
        execvp(cmd[0], cmd);
        int err = errno;
        fprintf(stderr, "evokit-enter: exec %s: %s\n", cmd[0], strerror(err));
        _exit(err == ENOENT ? 127 : 126);
    }
    close(rootfd);
    close(seccompfd);
    close(pidfd);
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) die("wait", NULL);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

/* evokit-enter: run one command inside a started evokit sandbox (what `docker exec` does).
 *
 * Built and documented by evokit/sandbox/enter.py, which also owns the command line:
 *
 *   evokit-enter PIDFD ROOTFD SECCOMPFD CWD CAPMASK NCG CGROUP_PROCS... NMNT FD=TARGET... NENV KEY=VALUE... -- ARGV...
 *
 * PIDFD      pidfd of the sandbox's pid 1: setns() into its mount, net, uts, ipc and pid namespaces
 *            in one atomic call (a pidfd cannot name a recycled pid);
 * ROOTFD     O_PATH fd of pid 1's root (/proc/<pid 1>/root): the child chroots to it;
 * SECCOMPFD  readable fd holding the classic-BPF filter (evokit/sandbox/seccomp.py), read to EOF;
 * CWD        working directory inside the sandbox;
 * CAPMASK    hex mask of the capabilities the command keeps (Docker's default set);
 * NCG, ...   how many cgroup.procs files to join, and their paths (before anything else);
 * NMNT, ...  0 for a command of the sandbox; else the verifier's private mounts: each FD (a detached
 *            mount the host made, e.g. a tmpfs from fsmount(2)) is attached at TARGET (absolute) in a
 *            mount namespace of the verifier's own (see "The verifier's exec" below);
 * NENV, ...  the command's whole environment (this program itself is started with an empty one);
 * ARGV       the command, looked up on the sandbox's PATH.
 *
 * One process joins the cgroups and the namespaces, then forks: a pid namespace applies to
 * children only. The child chroots, changes directory, sets no_new_privs, drops the bounding set
 * to CAPMASK, sets CAPMASK as its inheritable/permitted/effective/ambient sets (what bwrap
 * --cap-add gave before), loads the seccomp filter last and execs. The parent waits and exits
 * with the child's status (128 + signal when it was killed, as a shell reports it).
 * Exit codes of the helper itself: 125 setup failed, 126 exec failed, 127 command not found.
 *
 * The verifier's exec (NMNT > 0). The command must see the sandbox's files, network, hostname
 * and IPC, while no process of the sandbox may see, signal, ptrace or write it, or its
 * /tests and /logs/verifier. So the helper enters pid 1's mount, net, uts and ipc namespaces
 * but NOT its pid namespace, chroots to pid 1's root, and unshares a mount namespace (a private
 * copy of the sandbox's, propagation cut) and a pid namespace. The new pid namespace is a child
 * of the host's: a sibling of the sandbox's, so the sandbox's processes cannot name any of its
 * pids. In the copy it attaches each FD at its TARGET (made if missing, every component opened
 * without following links, the mount attached to the very directory opened). Then it forks the
 * namespace's pid 1, which mounts a procfs of the new pid namespace on /proc with Docker's masked
 * and read-only paths and execs ARGV as above: evokit runs its anchor there (evokit-anchor, the
 * reaper), and every command of the verifier then enters these namespaces through the anchor's
 * pidfd like any exec. The helper stays, non-dumpable, until that pid 1 ends (the host kills it,
 * and with it every process of the namespace), and exits with its status.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif

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

/* The command's own process: root, cwd, no_new_privs, capabilities, seccomp last, exec. */
static void run_command(int rootfd, const char *cwd, uint64_t mask, int seccompfd, char **envp, char **cmd) {
    /* Not dumpable until exec (which resets it): while this process still holds every
     * capability, no process of the sandbox may ptrace it or open its /proc files. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("set non-dumpable", NULL);
    if (rootfd >= 0 && (fchdir(rootfd) != 0 || chroot(".") != 0)) die("enter the sandbox's root", NULL);
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

static int wait_status(pid_t child) {
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) die("wait", NULL);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* An O_PATH fd of the directory PATH (absolute) under the current root, made if missing; no
 * component may be a link (a planted `/tests -> /etc` is refused, never followed). */
static int open_mount_target(const char *path) {
    char buf[4096];
    if (path[0] != '/' || strlen(path) >= sizeof buf) { errno = EINVAL; die("bad mount target", path); }
    strcpy(buf, path);
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) die("open /", NULL);
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH};
    for (char *part = strtok(buf + 1, "/"); part; part = strtok(NULL, "/")) {
        if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0) { errno = EINVAL; die("bad mount target", path); }
        long fd = syscall(SYS_openat2, dir, part, &how, sizeof how);
        if (fd < 0 && errno == ENOENT) {
            if (mkdirat(dir, part, 0755) != 0 && errno != EEXIST) die("make the verifier's directory", path);
            fd = syscall(SYS_openat2, dir, part, &how, sizeof how);
        }
        if (fd < 0) die("open the verifier's directory (a link or a file where a directory belongs?)", path);
        close(dir);
        dir = (int)fd;
    }
    return dir;
}

static void attach(int mntfd, int target_fd, const char *what) {
    if (syscall(SYS_move_mount, mntfd, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
        die("attach the verifier's mount on", what);
}

/* Docker's masked and read-only /proc paths (moby oci/defaults.go), over the verifier's own procfs.
 * A masked file gets the host's /dev/null (a clone taken before entering the sandbox, so nothing
 * of the sandbox's /dev is trusted); a masked directory an empty read-only tmpfs. */
static const char *const MASKED[] = {"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
                                     "/proc/key-users", "/proc/latency_stats", "/proc/timer_list",
                                     "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", NULL};
static const char *const READ_ONLY[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
                                        NULL};

static void mount_proc(int nullfd) {
    const unsigned long nosuid = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    if (mount("proc", "/proc", "proc", nosuid, NULL) != 0) die("mount the verifier's /proc", NULL);
    const char *null_at = NULL;
    for (int i = 0; MASKED[i]; i++) {
        struct stat st;
        if (lstat(MASKED[i], &st) != 0) continue; /* not on this kernel */
        if (S_ISDIR(st.st_mode)) {
            if (mount("tmpfs", MASKED[i], "tmpfs", MS_RDONLY | nosuid, "size=0") != 0) die("mask", MASKED[i]);
        } else if (null_at == NULL) {
            int fd = open(MASKED[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) die("open", MASKED[i]);
            attach(nullfd, fd, MASKED[i]);
            close(fd);
            null_at = MASKED[i];
        } else if (mount(null_at, MASKED[i], NULL, MS_BIND, NULL) != 0) {
            die("mask", MASKED[i]);
        }
    }
    for (int i = 0; READ_ONLY[i]; i++) {
        if (mount(READ_ONLY[i], READ_ONLY[i], NULL, MS_BIND | MS_REC, NULL) != 0) {
            if (errno == ENOENT) continue;
            die("bind", READ_ONLY[i]);
        }
        if (mount(NULL, READ_ONLY[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | nosuid, NULL) != 0)
            die("make read-only", READ_ONLY[i]);
    }
}

int main(int argc, char **argv) {
    if (argc < 10) {
        errno = EINVAL;
        die("usage: evokit-enter PIDFD ROOTFD SECCOMPFD CWD CAPMASK NCG ... NMNT ... NENV ... -- ARGV", NULL);
    }
    int pidfd = parse_fd(argv[1]), rootfd = parse_fd(argv[2]), seccompfd = parse_fd(argv[3]);
    const char *cwd = argv[4];
    uint64_t mask = strtoull(argv[5], NULL, 16);
    int i = 6;
    int ncg = parse_fd(argv[i++]);
    if (i + ncg >= argc) { errno = EINVAL; die("too few cgroup arguments", NULL); }
    for (int k = 0; k < ncg; k++) join_cgroup(argv[i++]);
    int nmnt = parse_fd(argv[i++]);
    if (nmnt > 8 || i + nmnt >= argc) { errno = EINVAL; die("bad mount arguments", NULL); }
    int mntfds[8];
    const char *targets[8];
    for (int k = 0; k < nmnt; k++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) { errno = EINVAL; die("expected FD=TARGET", argv[i]); }
        *eq = '\0';
        mntfds[k] = parse_fd(argv[i]);
        targets[k] = eq + 1;
        fcntl(mntfds[k], F_SETFD, FD_CLOEXEC);
        i++;
    }
    int nenv = parse_fd(argv[i++]);
    if (i + nenv >= argc) { errno = EINVAL; die("too few environment arguments", NULL); }
    char **envp = calloc((size_t)nenv + 1, sizeof(char *));
    if (!envp) die("calloc", NULL);
    for (int k = 0; k < nenv; k++) envp[k] = argv[i++];
    if (i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc) { errno = EINVAL; die("expected -- ARGV", NULL); }
    char **cmd = argv + i + 1;

    /* The fds are evokit's, not the command's: close them on exec. */
    fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    fcntl(rootfd, F_SETFD, FD_CLOEXEC);
    fcntl(seccompfd, F_SETFD, FD_CLOEXEC);

    if (nmnt == 0) {
        if (setns(pidfd, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID) != 0)
            die("enter the sandbox's namespaces", NULL);
        pid_t child = fork();
        if (child < 0) die("fork", NULL);
        if (child == 0) run_command(rootfd, cwd, mask, seccompfd, envp, cmd);
        close(rootfd);
        close(seccompfd);
        close(pidfd);
        return wait_status(child);
    }

    /* The verifier's exec. Not dumpable: this process keeps every capability until it exits. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("set non-dumpable", NULL);
    int nullfd = (int)syscall(SYS_open_tree, AT_FDCWD, "/dev/null", OPEN_TREE_CLONE | O_CLOEXEC);
    if (nullfd < 0) die("clone the host's /dev/null", NULL);
    if (setns(pidfd, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC) != 0)
        die("enter the sandbox's namespaces", NULL);
    if (fchdir(rootfd) != 0 || chroot(".") != 0) die("enter the sandbox's root", NULL);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) die("unshare the verifier's namespaces", NULL);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("make the verifier's mounts private", NULL);
    for (int k = 0; k < nmnt; k++) {
        int target = open_mount_target(targets[k]);
        attach(mntfds[k], target, targets[k]);
        close(target);
        close(mntfds[k]);
    }
    close(rootfd);
    close(pidfd);
    pid_t init = fork();
    if (init < 0) die("fork", NULL);
    if (init == 0) {
        mount_proc(nullfd);
        close(nullfd);
        run_command(-1, cwd, mask, seccompfd, envp, cmd);
    }
    close(nullfd);
    close(seccompfd);
    return wait_status(init);
}

"""Kernel building blocks of the sandbox, through ctypes: namespaces, tmpfs, seccomp, privilege drop.

Nothing here needs a package beyond the OS: ``unshare``/``mount``/``prctl``/``capset`` come from libc, the
seccomp filter is compiled once by libseccomp (``libseccomp.so.2``, present wherever systemd is) and loaded in
each child with a single ``prctl``. Every layer reports whether it is available: the pool refuses to run
programs when an essential one is missing (see ``pool.ESSENTIAL``) and warns once about the others.

Two modes, chosen by who starts the worker:
- root: the worker's namespaces are owned by the host's user namespace; each child chroots and drops to its
  worker's own unprivileged uid;
- an ordinary user: the worker first enters a new *user* namespace (unprivileged user namespaces, as
  ``unshare -Urn``), which gives it the capabilities to create the others and mount a tmpfs inside it only;
  each child chroots and then drops every capability, keeping the user's uid, which maps to nobody else.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource

CLONE_NEWNS, CLONE_NEWNET, CLONE_THREAD = 0x00020000, 0x40000000, 0x00010000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWIPC = 0x10000000, 0x20000000, 0x08000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 38, 22, 36
SECCOMP_MODE_FILTER = 2
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
SCMP_FLTATR_CTL_OPTIMIZE = 8  # libseccomp >= 2.5: 2 = a binary tree of syscall numbers instead of a linear list


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


_libc = ctypes.CDLL(None, use_errno=True)
# libc's fork called with the GIL held (PyDLL): skips Python's at-fork hooks (threading/random re-initialisation),
# which cost ~180 copy-on-write page faults (~0.5 ms) per child. Only safe in a single-threaded process such as
# the sandbox worker; the child gets a copy of that one thread, holding the GIL, as with os.fork.
_raw_fork = ctypes.PyDLL(None, use_errno=True).fork
_raw_fork.restype = ctypes.c_int


def fork() -> int:
    pid = _raw_fork()
    if pid < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"fork: {os.strerror(e)}")
    return pid

# Syscalls a model-written program never needs and that could reach outside its execution. Files are not
# listed: the chroot into an empty scratch dir and the unprivileged uid already confine the filesystem.
DENIED_SYSCALLS = (
    # no network, no IPC endpoints
    "socket", "socketpair",
    # no new programs, no processes (threads are allowed, see clone below)
    "execve", "execveat", "fork", "vfork",
    # no signals to anyone (the uid drop already stops signals to other uids; this also stops self-tricks)
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    # no reaching into other processes or the kernel
    "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",  # io_uring ops bypass seccomp
    "keyctl", "add_key", "request_key", "personality", "syslog", "acct", "quotactl",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "iopl", "ioperm",
    # no namespace, mount or root changes
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "fsopen", "fsmount", "fsconfig", "move_mount", "open_tree", "mount_setattr",
    # limits and identity are fixed for the execution
    "setrlimit", "prlimit64", "setpriority", "sched_setaffinity", "sched_setscheduler",
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    "capset",
    # no SysV IPC or POSIX message queues: their objects outlive the process that made them (the worker's
    # private IPC namespace is the backstop, but it is shared by the executions of one worker)
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
    # no kernel randomness: a program that sneaks in entropy fails loudly instead of passing a determinism check
    "getrandom",
)


def unshare(flags: int) -> None:
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare: {os.strerror(e)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target}: {os.strerror(e)}")


_prctl = _libc.prctl  # bound once with its argument types: a child's call converts nothing and builds no ctypes objects
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def prctl(option: int, arg2: int = 0, arg3=None) -> None:
    if _prctl(option, arg2, arg3, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl({option}): {os.strerror(e)}")


def enter_user_namespace() -> None:
    """Become the owner of a new user namespace in which our own uid/gid map to themselves (the only mapping an
    unprivileged process may write). We keep our uid but gain, inside it only, the capabilities the other
    namespaces, the tmpfs mount and the children's chroot need."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _try(layers: dict, name: str, action) -> bool:
    try:
        action()
        layers[name] = "on"
        return True
    except OSError as e:
        layers[name] = f"off: {e}"
        return False


def isolate_worker(scratch_base: str, tmpfs_mb: int, disable: tuple[str, ...] = ()) -> dict[str, str]:
    """Once per worker: (as a user) a user namespace, then a private network namespace (no interfaces up: no
    network at all), a private IPC namespace, a private mount namespace holding a size-capped tmpfs for the
    scratch dirs, and a pid namespace that the worker's next fork starts (see ``worker.main``).
    Returns {layer: "on" | "off: why" | "n/a: why"}."""
    layers = {}
    if os.geteuid() == 0:
        layers["userns"] = "n/a: running as root"
    elif "userns" in disable:
        layers["userns"] = "off: disabled by Sandbox(disable_layers=...)"
    elif not _try(layers, "userns", enter_user_namespace):
        layers["userns"] += (" (unprivileged user namespaces are off: sysctl kernel.unprivileged_userns_clone=1 "
                             "and user.max_user_namespaces > 0, or a container that allows unshare)")
    _try(layers, "netns", lambda: unshare(CLONE_NEWNET))
    _try(layers, "ipcns", lambda: unshare(CLONE_NEWIPC))
    _try(layers, "pidns", lambda: unshare(CLONE_NEWPID))
    try:
        unshare(CLONE_NEWNS)
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # our mounts never propagate back to the host
        mount("tmpfs", scratch_base, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,nr_inodes=4096,mode=0711")
        layers["tmpfs"] = "on"
    except OSError as e:
        layers["tmpfs"] = f"off: {e}"
    layers["chroot+uid"] = ("on" if os.geteuid() == 0 or layers["userns"] == "on"
                            else "off: neither root nor a user namespace")
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a fallback-mode program come back to us to be reaped
    except OSError:
        pass
    return layers


# ---------------------------------------------------------------------------------------------- seccomp


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_libseccomp():
    lib = ctypes.CDLL("libseccomp.so.2")  # not ctypes.util.find_library: it drags subprocess into the worker
    lib.seccomp_init.restype, lib.seccomp_init.argtypes = ctypes.c_void_p, [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    return lib


def _add_rule(lib, ctx, action: int, name: str, cmps: list[_ArgCmp] = ()) -> None:
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr < 0:  # not a syscall on this architecture (e.g. fork on arm64): nothing to deny
        return
    arr = (_ArgCmp * len(cmps))(*cmps) if cmps else None
    rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
    if rc != 0:
        raise OSError(-rc, f"seccomp rule for {name}: {os.strerror(-rc)}")


def compile_seccomp() -> bytes:
    """The filter as raw BPF, compiled once per worker so each child loads it with one cheap prctl."""
    lib = _load_libseccomp()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        # a tree: loading it costs each child ~half as much kernel time (the kernel emulates the filter for every
        # syscall number to build its allow-cache); same rules, same actions. Older libseccomp: the linear list.
        lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)
        deny = _errno_action(errno.EPERM)
        for name in DENIED_SYSCALLS:
            _add_rule(lib, ctx, deny, name)
        # clone: threads yes (they die with the process), new processes no
        _add_rule(lib, ctx, deny, "clone", [_ArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)])
        # clone3 hides its flags in memory seccomp cannot read; ENOSYS makes glibc fall back to clone
        _add_rule(lib, ctx, _errno_action(errno.ENOSYS), "clone3")
        fd = os.memfd_create("seccomp-bpf")
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc != 0:
                raise OSError(-rc, "seccomp_export_bpf failed")
            os.lseek(fd, 0, os.SEEK_SET)
            return os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


def make_fprog(bpf: bytes):
    """A sock_fprog pointing at ``bpf``; both must stay alive until the filter is loaded (kept by the caller)."""
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    return _SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p)), buf


def load_seccomp(fprog, nnp: bool = True) -> None:
    """``fprog``: from :func:`make_fprog`, or its address (``ctypes.addressof``), as the worker pre-computes it.
    ``nnp=False`` when no_new_privs is already set (the worker sets it on itself once; children inherit it and
    nothing can clear it): without it the kernel refuses the filter (EACCES), so a mistake fails closed."""
    if nnp:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog if type(fprog) is int else ctypes.addressof(fprog))


# ------------------------------------------------------------------------------------------ per child


def limits(cpu_s: int, memory_mb: int, fsize: int, nofile: int = 64, nproc: int = 32) -> tuple:
    """The rlimits of a child as ``(resource, (soft, hard))`` pairs, hard = soft, so nothing in the child can raise
    them back (it is unprivileged after the drop anyway). Built by the worker before the fork (see
    :func:`set_limits`), so the child only makes the syscalls."""
    return tuple((res, (value, value)) for res, value in (
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_AS, memory_mb << 20),
        (resource.RLIMIT_FSIZE, fsize),
        (resource.RLIMIT_NOFILE, nofile),
        (resource.RLIMIT_NPROC, nproc),  # per uid, threads included; each worker slot has its own uid
        (resource.RLIMIT_CORE, 0),
    ))


def set_limits(pairs: tuple) -> None:
    """Apply :func:`limits`."""
    setrlimit = resource.setrlimit
    for res, pair in pairs:
        setrlimit(res, pair)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


# capset's arguments, built once at import (the worker imports this before it forks): the child passes two
# addresses and builds no ctypes object, so it touches (and copies on write) no more pages than it must
_CAP_HEADER, _CAP_EMPTY = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
_CAP_ARGS = (ctypes.addressof(_CAP_HEADER), ctypes.addressof(_CAP_EMPTY))
_capset = _libc.capset
_capset.argtypes, _capset.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int


def drop_capabilities() -> None:
    """Empty effective, permitted and inheritable sets: what a user-namespace child does instead of a uid drop.
    Our uid is not 0 inside the namespace, so no later exec could give them back (exec is denied anyway)."""
    if _capset(*_CAP_ARGS) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"capset: {os.strerror(e)}")


def drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # uid != 0 and no keep-caps: every capability is gone

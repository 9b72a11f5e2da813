"""One import of torch per test, not per rank: a fork server for the ranks
of a Python multi-rank test.

A rank process spends about 1.5 s of CPU importing torch (loading
libtorch's shared objects and torch's Python modules), which is most of
what a short test's ranks cost the test phase. testing/run_multirank.sh
starts the test's program once more as a *zygote* (DISTKIT_RANK_ZYGOTE_SERVE
set): it imports torch and distkit, then waits on a socket. Each rank that
distrun starts is the same program with DISTKIT_RANK_ZYGOTE set: before its
own code runs (this module is loaded from sitecustomize), it hands the
zygote its argv, environment, working directory, CPU affinity and standard
streams and becomes a stand-in: the zygote forks, the child takes them over
and returns to Python's start-up, which runs the program as __main__ as it
would have in the rank process itself. The stand-in forwards the signals it
gets to the child and exits as the child exited (by the same signal where
it was killed), so distrun, its timeouts and its replacements see the rank
they started. A stand-in killed outright (SIGKILL) takes its child with it:
the zygote kills a child whose stand-in has gone.

Every rank is still a process of its own; what it shares with the others is
what the zygote imported before any rank's code ran (no thread exists then,
so fork is safe). Where the zygote cannot be reached a rank runs as before.
"""
import json
import os
import select
import signal
import socket
import struct
import sys

SERVE = "DISTKIT_RANK_ZYGOTE_SERVE"
CONNECT = "DISTKIT_RANK_ZYGOTE"
_HEADER = struct.Struct("!I")
_STATUS = struct.Struct("!ii")  # (exit code, or -1) and (killing signal, or 0)
_PID = struct.Struct("!i")
_PR_SET_PDEATHSIG = 1
# The signals a stand-in passes on to its child: what distrun sends a rank
# (SIGTERM, then SIGKILL, which cannot be caught: see above) and what a
# terminal or an operator might.
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2, signal.SIGCONT)


def _die_with_parent():
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _recv_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def stand_in(address):
    """In a rank distrun started: the zygote's child runs the rank; this
    process waits for it and exits as it did. Returns (and the rank runs
    here, as before) where the zygote cannot be reached."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect("\0" + address)
    except OSError:
        conn.close()
        return
    env = dict(os.environ)
    env.pop(CONNECT, None)  # the rank's own Python subprocesses start as usual
    request = json.dumps({"argv": sys.argv, "env": env, "cwd": os.getcwd(),
                          "cpus": sorted(os.sched_getaffinity(0)),
                          "umask": os.umask(0o022), "signals": _dispositions(),
                          "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))
                          }).encode()
    socket.send_fds(conn, [_HEADER.pack(len(request)) + request], [0, 1, 2])
    (pid,) = _PID.unpack(_recv_exactly(conn, _PID.size))
    if pid < 0:  # another program than the zygote's (a job of several)
        conn.close()
        return
    # From here this process is the rank's stand-in and never runs the
    # program itself, whatever happens (its leaving makes the zygote kill
    # the child).
    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # it has ended; its status is on the way
            pass

    try:
        for sig in _FORWARDED:
            signal.signal(sig, forward)
        code, killed_by = _STATUS.unpack(_recv_exactly(conn, _STATUS.size))
        if killed_by:
            if killed_by not in (signal.SIGKILL, signal.SIGSTOP):  # those have no handler
                signal.signal(killed_by, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [killed_by])
            os.kill(os.getpid(), killed_by)
    except ConnectionError:
        print(f"rank_zygote: the zygote went away while rank process {pid} ran",
              file=sys.stderr, flush=True)
        code = 1
    except BaseException as e:  # noqa: B902 (never fall through to the program)
        print(f"rank_zygote: stand-in of rank process {pid} failed: {e!r}", file=sys.stderr,
              flush=True)
        code = 1
    os._exit(code)


def _dispositions():
    """What this process does on the forwarded signals: a child of the
    zygote (started in the background, SIGINT and SIGQUIT ignored) takes
    the stand-in's, as distrun gave them."""
    out = {}
    for sig in _FORWARDED:
        handler = signal.getsignal(sig)
        out[int(sig)] = ("ignore" if handler == signal.SIG_IGN else
                         "python" if handler is signal.default_int_handler else "default")
    return out


def _become_rank(request, streams, zygote):
    """In a fork of the zygote: the stand-in's streams, place, signal
    dispositions and environment; Python's start-up then runs the program."""
    _die_with_parent()
    if os.getppid() != zygote:  # it died before the line above
        os._exit(1)
    for sig, how in request["signals"].items():
        signal.signal(int(sig), {"ignore": signal.SIG_IGN, "python": signal.default_int_handler,
                                 "default": signal.SIG_DFL}[how])
    signal.pthread_sigmask(signal.SIG_SETMASK, request["blocked"])
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.sched_setaffinity(0, request["cpus"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv[:] = request["argv"]
    # random reseeds itself after a fork; numpy's global state does not, and
    # ranks started apart would each have drawn their own.
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()


def serve(address):
    """The zygote: imports what every rank imports, then forks a rank for
    each stand-in that connects. Returns only in a child, which then runs
    the program as the rank."""
    del os.environ[SERVE]
    _die_with_parent()  # run_multirank.sh's shell
    try:
        import importlib
        for module in ("torch", "distkit"):  # the point: imported once, before the forks
            importlib.import_module(module)
    except Exception as e:  # the ranks import them themselves, and say why
        print(f"rank_zygote: imports failed ({e}); ranks import for themselves",
              file=sys.stderr, flush=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + address)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children = {}  # pid -> the stand-in's connection
    zygote = os.getpid()
    with open(os.environ.get("TEST_TMPDIR", "/tmp") + "/rank_zygote." + address + ".ready",
              "w"):
        pass
    while True:
        watched = [listener, wake_r] + list(children.values())
        readable, _, _ = select.select(watched, [], [])
        for r in readable:
            if r is listener:
                conn, _ = listener.accept()
                _fork_for(conn, listener, wake_r, wake_w, children)
                if os.getpid() != zygote:  # the child, now the rank
                    return
            elif r == wake_r:
                os.read(wake_r, 4096)
                _reap(children)
            else:  # a stand-in went away (or wrote, which it never does)
                pid = next((p for p, c in children.items() if c is r), None)
                if pid is not None:  # (not reaped earlier in this round)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                _reap(children)


def _fork_for(conn, listener, wake_r, wake_w, children):
    """Reads one stand-in's request and forks its rank. Whatever goes wrong
    ends that request only: the stand-in's streams are closed here (distrun
    waits for every rank's pipes to close) and its child, if any, killed."""
    streams, pid = [], None
    try:
        msg, streams, _, _ = socket.recv_fds(conn, 65536, 3)
        (size,) = _HEADER.unpack(msg[:_HEADER.size])
        body = msg[_HEADER.size:]
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ConnectionError("closed")
            body += chunk
        request = json.loads(body)
        if os.path.realpath(request["argv"][0]) != os.path.realpath(sys.argv[0]):
            # Its child would run this program, not the rank's.
            conn.sendall(_PID.pack(-1))
            raise ConnectionAbortedError("another program")
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for c in [listener, conn] + list(children.values()):
                c.close()
            os.close(wake_r)
            os.close(wake_w)
            try:
                _become_rank(request, streams, zygote)
            except BaseException as e:  # noqa: B902 (half a rank must not run)
                print(f"rank_zygote: could not become the rank: {e!r}", file=sys.stderr,
                      flush=True)
                os._exit(1)
            return
        children[pid] = conn
        conn.sendall(_PID.pack(pid))
    except Exception as e:
        if not isinstance(e, ConnectionAbortedError):
            print(f"rank_zygote: a request failed ({e!r})", file=sys.stderr, flush=True)
        if pid is not None:  # the stand-in left before it heard of its child
            children.pop(pid, None)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        conn.close()
    finally:
        if pid != 0:
            for fd in streams:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _reap(children):
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        try:
            conn.sendall(_STATUS.pack(code, killed_by))
        except OSError:
            pass
        conn.close()

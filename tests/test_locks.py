"""Locks fail closed (issue 27): a lock that cannot be opened or taken is an error naming the
cause, never a write without it; a wait is bounded and names the holder's pid; ``repair``
says why it could not lock; a write through a symlink goes to its target under the target's
lock; without ``fcntl`` the first save warns. Processes where the class is about processes:
a stopped lock holder, a second user, two writers through a link and its target."""

from __future__ import annotations

import errno
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from fault_harness import small_ivf, unit_rows

import bbqlib
from bbqlib.formats.vectors import read_vectors, write_vectors
from bbqlib.index.ivf import storage as ST
from bbqlib.storage import atomic, locks
from bbqlib.storage.container import write_container

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or locks.fcntl is None, reason="POSIX advisory locks"
)

#: A child process imports only bbqlib's lock and atomic-write modules (stdlib only, fast,
#: and readable by a user who cannot read site-packages).
PRELUDE = f"""
import os, sys, types
pkg = types.ModuleType("bbqio")
pkg.__path__ = [{str(Path(locks.__file__).parent)!r}]
sys.modules["bbqio"] = pkg
from bbqio import atomic, locks
"""
HOLD = (
    PRELUDE
    + """
with locks.path_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()  # until the parent closes stdin or kills this process
"""
)


@pytest.fixture(scope="module")
def flat():
    index = bbqlib.FlatIndex(bits=1)
    index.add(unit_rows(40, 8, 0))
    return index


@pytest.fixture(scope="module")
def ivf_template(tmp_path_factory):
    where = tmp_path_factory.mktemp("ivf") / "index"
    small_ivf(where, n=300, d=8)
    return where


@pytest.fixture
def ivf_dir(ivf_template, tmp_path):
    where = tmp_path / "index"
    shutil.copytree(ivf_template, where)
    return where


@pytest.fixture(autouse=True)
def _default_timeout(monkeypatch):
    """Every test starts from the default lock timeout, whatever the environment says."""
    monkeypatch.delenv(locks.LOCK_TIMEOUT_ENV, raising=False)
    before = locks.set_lock_timeout(None)
    yield
    locks.set_lock_timeout(before)


def _snapshot(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _fail_lock_opens(monkeypatch, code: int) -> None:
    """``os.open`` of a lock file fails with ``code``, as it would for that cause."""
    real = os.open

    def fake(path, flags, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


class _Holder:
    """A child process holding ``lock_file`` (bbqlib's own lock code), optionally stopped."""

    def __init__(self, lock_file, *, stop: bool = True):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(lock_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=tempfile.gettempdir(),
        )
        line = self.proc.stdout.readline()
        assert line.strip() == b"held", f"the holder did not start: {line!r}"
        if stop:
            os.kill(self.proc.pid, signal.SIGSTOP)
        self.pid = self.proc.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()  # also ends a stopped process
        self.proc.wait(10)
        self.proc.stdin.close()
        self.proc.stdout.close()


# ------------------------------------------------------------------ 1. locks fail closed

WRITERS = ("flat_save", "vectors", "ivf_save", "ivf_add", "clean_directory")
CAUSES = {"EACCES": errno.EACCES, "EROFS": errno.EROFS, "EPERM": errno.EPERM,
          "ENOENT": errno.ENOENT}  # fmt: skip


def _write(kind: str, flat, where: Path):
    if kind == "flat_save":
        return flat.save(where / "a.bbq")
    if kind == "vectors":
        return write_vectors(where / "a.npy", unit_rows(5, 4, 1))
    index = bbqlib.IVFIndex.open(where / "index")
    if kind == "ivf_save":
        return index.save()
    if kind == "ivf_add":
        return index.add(unit_rows(20, 8, 2))
    return ST.clean_directory(where / "index", blocking=True)


@pytest.mark.parametrize("cause", sorted(CAUSES))
@pytest.mark.parametrize("kind", WRITERS)
def test_a_lock_that_cannot_be_opened_is_an_error_never_a_silent_write(
    kind, cause, flat, ivf_dir, monkeypatch
):
    where = ivf_dir.parent
    flat.save(where / "a.bbq")
    write_vectors(where / "a.npy", unit_rows(5, 4, 0))
    (ivf_dir / ".header.000009.bbq.0123456789abcdef.tmp").write_bytes(b"litter")
    before = (_snapshot(where), _snapshot(ivf_dir))
    _fail_lock_opens(monkeypatch, CAUSES[cause])
    with pytest.raises(bbqlib.LockError) as info:
        _write(kind, flat, where)
    err = info.value
    assert isinstance(err, OSError) and err.errno == CAUSES[cause]
    assert err.filename.endswith(".lock") and cause in str(err) and "nothing was" in str(err)
    assert (_snapshot(where), _snapshot(ivf_dir)) == before  # nothing written, nor removed


@pytest.mark.parametrize("cause", ["EROFS", "EACCES"])
def test_opens_still_work_where_the_lock_cannot_be_taken(cause, flat, ivf_dir, monkeypatch):
    where = ivf_dir.parent
    path = flat.save(where / "a.bbq")
    orphan = where / ".a.bbq.0123456789abcdef.tmp"
    orphan.write_bytes(b"left by a killed writer")
    litter = ivf_dir / "header.000077.bbq"
    litter.write_bytes(b"x")
    _fail_lock_opens(monkeypatch, CAUSES[cause])
    assert len(bbqlib.load(path)) == 40
    assert bbqlib.IVFIndex.open(ivf_dir).ntotal == 300
    assert orphan.exists() and litter.exists()  # cleanup skipped, left to a later open


def test_a_file_system_without_flock_is_an_error(flat, tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(locks.fcntl, "flock", no_flock)
    with pytest.raises(bbqlib.LockError, match="ENOLCK") as info:
        flat.save(tmp_path / "a.bbq")
    assert info.value.errno == errno.ENOLCK
    assert os.listdir(tmp_path) == [".a.bbq.lock"]  # an empty lock file, not the index


def test_a_second_user_cannot_write_without_the_lock(tmp_path):
    """Real EACCES: another user's lock file in a shared (world-writable) directory, and a
    directory the user may not write. As root, the writer is a child run as ``nobody``."""
    shared = Path(tempfile.mkdtemp(prefix="bbqlocks"))
    try:
        shared.chmod(0o755)
        (shared / "open").mkdir(mode=0o777)
        (shared / "open").chmod(0o777)  # the umask may have narrowed mkdir's mode
        (shared / "closed").mkdir(mode=0o755)
        for d in ("open", "closed"):
            (shared / d / "a.bin").write_bytes(b"old")
        stale = shared / "open" / ".a.bin.lock"  # a writer's lock file, not ours to open
        stale.write_bytes(b"1\n")
        stale.chmod(0o644)
        code = (
            PRELUDE
            + """
for d in sys.argv[1:]:
    try:
        with atomic.atomic_path(os.path.join(d, "a.bin")) as tmp:
            open(tmp, "wb").write(b"new")
        print("wrote")
    except locks.LockError as err:
        print(err.errno)
    except OSError as err:
        print("other", err.errno)
"""
        )
        args = [sys.executable, "-c", code, str(shared / "open"), str(shared / "closed")]
        if os.geteuid() == 0:
            import pwd

            try:
                nobody = pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("running as root and no user 'nobody' to run the writer as")
            for p in (shared, shared / "open", shared / "closed", stale):
                os.chown(p, 0, 0)
            user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            run = None
            for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
                try:  # the child needs only the standard library
                    run = subprocess.run([python, *args[1:]], capture_output=True,
                                         cwd=shared, timeout=60, **user)  # fmt: skip
                    break
                except (PermissionError, FileNotFoundError):
                    continue
            if run is None:
                pytest.skip("running as root and no Python that user 'nobody' may run")
        else:
            if stale.stat().st_uid == os.getuid():
                stale.chmod(0o444)  # our own file: make it unwritable to us instead
            (shared / "closed").chmod(0o555)
            run = subprocess.run(args, capture_output=True, cwd=shared, timeout=60)
        if run.returncode != 0:
            pytest.skip(f"the unprivileged writer could not run: {run.stderr.decode()[-300:]}")
        assert run.stdout.decode().split() == [str(errno.EACCES)] * 2
        for d in ("open", "closed"):
            assert (shared / d / "a.bin").read_bytes() == b"old"
    finally:
        (shared / "closed").chmod(0o755)
        shutil.rmtree(shared, ignore_errors=True)


# ------------------------------------------------------------------ 2. bounded waits


def test_a_stopped_holder_times_out_naming_its_pid(flat, tmp_path):
    path = flat.save(tmp_path / "a.bbq")
    before = path.read_bytes()
    locks.set_lock_timeout(0.3)
    with _Holder(atomic.file_lock_path(path)) as holder:
        with pytest.raises(bbqlib.LockTimeoutError) as info:
            flat.save(path)
        err = info.value
        assert isinstance(err, bbqlib.LockError) and isinstance(err, TimeoutError)
        assert err.pid == holder.pid and err.timeout == 0.3 and err.errno == errno.ETIMEDOUT
        message = str(err)
        assert f"pid {holder.pid}" in message and "0.3 s" in message
        assert "set_lock_timeout" in message and locks.LOCK_TIMEOUT_ENV in message
        report = bbqlib.repair(path)  # busy: a live holder, named
        assert report.status == "busy" and report.holder == holder.pid
        assert f"pid {holder.pid}" in str(report) and report.lock_error is None
        report = bbqlib.repair(path, wait=0.2)
        assert report.status == "busy" and report.holder == holder.pid
    assert path.read_bytes() == before
    flat.save(path)  # the kernel released the killed holder's lock


def test_ivf_writers_time_out_naming_the_holder(ivf_dir, monkeypatch):
    index = bbqlib.IVFIndex.open(ivf_dir)
    before = _snapshot(ivf_dir)
    monkeypatch.setenv(locks.LOCK_TIMEOUT_ENV, "0.25")
    assert locks.get_lock_timeout() == 0.25
    with _Holder(atomic.dir_lock_path(ivf_dir)) as holder:
        for write in (lambda: index.add(unit_rows(10, 8, 3)), index.save):
            with pytest.raises(bbqlib.LockTimeoutError, match=f"pid {holder.pid}"):
                write()
        report = bbqlib.repair(ivf_dir)
        assert report.status == "busy" and report.holder == holder.pid
    assert index.ntotal == 300 and {k: v for k, v in _snapshot(ivf_dir).items()
                                    if k != ".bbqlib.lock"} == before  # fmt: skip
    index.add(unit_rows(10, 8, 3))
    assert bbqlib.IVFIndex.open(ivf_dir).ntotal == 310


def test_a_thread_of_this_process_is_named_as_such(tmp_path):
    held, release = threading.Event(), threading.Event()
    lock = atomic.file_lock_path(tmp_path / "a.bin")

    def hold():
        with locks.path_lock(lock):
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    locks.set_lock_timeout(0.2)
    try:
        with pytest.raises(bbqlib.LockTimeoutError, match=r"\(this process") as info:
            with atomic.atomic_path(tmp_path / "a.bin", lock=True):
                pass
        assert info.value.pid == os.getpid()
    finally:
        release.set()
        t.join()


def test_the_lock_file_names_its_holder_and_goes_at_release(tmp_path):
    lock = tmp_path / ".a.lock"
    with locks.path_lock(lock):
        assert locks.lock_holder(lock) == os.getpid()
    assert not lock.exists() and locks.lock_holder(lock) is None


def test_the_timeout_setting(monkeypatch):
    assert locks.get_lock_timeout() == locks.DEFAULT_LOCK_TIMEOUT == 60.0
    monkeypatch.setenv(locks.LOCK_TIMEOUT_ENV, "inf")
    assert locks.get_lock_timeout() == math.inf
    assert locks.set_lock_timeout(2) is None and locks.get_lock_timeout() == 2.0
    assert locks.set_lock_timeout(0) == 2.0 and locks.get_lock_timeout() == 0.0
    locks.set_lock_timeout(None)
    monkeypatch.setenv(locks.LOCK_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=locks.LOCK_TIMEOUT_ENV):
        locks.get_lock_timeout()
    for bad in (-1, math.nan, "soon", None, True):
        with pytest.raises(ValueError, match="seconds >= 0"):
            locks._check_timeout(bad, "seconds")
    assert bbqlib.get_lock_timeout is locks.get_lock_timeout


def test_timeout_zero_fails_at_once_and_inf_waits(tmp_path):
    lock = tmp_path / ".a.lock"
    with _Holder(lock, stop=False) as holder:
        locks.set_lock_timeout(0)
        with pytest.raises(bbqlib.LockTimeoutError, match=f"pid {holder.pid}"):
            with locks.path_lock(lock):
                pass
        locks.set_lock_timeout(math.inf)
        got = []
        waiter = threading.Thread(target=lambda: got.append(_take(lock)))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # waits while the holder lives
        holder.proc.stdin.close()  # the holder releases and exits
        waiter.join(10)
        assert got == [True]


def _take(lock) -> bool:
    with locks.path_lock(lock) as got:
        return got


# ------------------------------------------------------------------ 3. repair says why


@pytest.mark.parametrize("cause", ["EROFS", "EACCES"])
def test_repair_reports_why_it_cannot_lock(cause, flat, ivf_dir, monkeypatch):
    path = flat.save(ivf_dir.parent / "a.bbq")
    (ivf_dir.parent / ".a.bbq.0123456789abcdef.tmp").write_bytes(b"x")
    _fail_lock_opens(monkeypatch, CAUSES[cause])
    for where in (path, ivf_dir):
        report = bbqlib.repair(where)
        assert report.status == "no_lock" and report.lock_error == cause
        assert not report.busy and report.holder is None and not report.removed
        assert cause in str(report) and "busy" not in str(report)
        assert "a live writer" not in str(report)


# ------------------------------------------------------------------ 4. symlinks


def test_a_save_through_a_symlink_writes_its_target(flat, tmp_path):
    real = tmp_path / "releases" / "v1.bbq"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "current.bbq"
    link.symlink_to(Path("releases") / "v1.bbq")  # relative, as deployments do
    flat.save(link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("releases", "v1.bbq")
    assert len(bbqlib.load(real)) == 40 and len(bbqlib.load(link)) == 40
    assert sorted(os.listdir(tmp_path)) == ["current.bbq", "releases"]  # no lock or temp
    assert os.listdir(real.parent) == ["v1.bbq"]
    vec_real = tmp_path / "releases" / "v.npy"
    np.save(vec_real, np.zeros((1, 4), np.float32))
    (tmp_path / "v.npy").symlink_to(vec_real)
    write_vectors(tmp_path / "v.npy", unit_rows(3, 4, 0))
    assert (tmp_path / "v.npy").is_symlink() and read_vectors(vec_real).shape == (3, 4)


def test_symlink_loops_and_dangling_links_are_clear_errors(flat, tmp_path):
    loop = tmp_path / "loop.bbq"
    loop.symlink_to(loop)
    with pytest.raises(OSError, match="symlink loop") as info:
        flat.save(loop)
    assert info.value.errno == errno.ELOOP and loop.is_symlink()
    dangling = tmp_path / "dangling.bbq"
    dangling.symlink_to(tmp_path / "gone" / "x.bbq")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        flat.save(dangling)
    ivf_link = tmp_path / "ivf"
    ivf_link.symlink_to(tmp_path / "no-such-dir")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        small_ivf(ivf_link, n=100, d=8)
    assert sorted(os.listdir(tmp_path)) == ["dangling.bbq", "ivf", "loop.bbq"]


def test_writers_through_a_link_and_its_target_exclude_each_other(tmp_path):
    """Two processes write one file in turns, one through a symlink and one through its
    target; inside each write a marker file is created exclusively, so two writers inside
    at once would show. The link stays a link and the target holds a whole payload."""
    real = tmp_path / "real.bin"
    real.write_bytes(b"start")
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    code = (
        PRELUDE
        + """
import time
path, tag, inside = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
clashes = 0
for i in range(40):
    with atomic.atomic_path(path) as tmp:
        try:
            os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            clashes += 1
        open(tmp, "wb").write(tag * 1000)
        time.sleep(0.001)
        try:
            os.unlink(inside)
        except FileNotFoundError:
            pass
print(clashes)
"""
    )
    inside = str(tmp_path / "inside")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p), tag, inside],
                              stdout=subprocess.PIPE, cwd=tempfile.gettempdir())
             for p, tag in ((link, "L"), (real, "T"))]  # fmt: skip
    outs = [p.communicate(timeout=60)[0].decode().strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and outs == ["0", "0"]
    assert link.is_symlink() and real.read_bytes() in (b"L" * 1000, b"T" * 1000)
    assert sorted(os.listdir(tmp_path)) == ["link.bin", "real.bin"]


def test_a_stopped_writer_through_the_target_holds_off_writers_through_the_link(flat, tmp_path):
    real = flat.save(tmp_path / "real.bbq")
    link = tmp_path / "link.bbq"
    link.symlink_to(real)
    locks.set_lock_timeout(0.2)
    with _Holder(atomic.file_lock_path(real)) as holder:
        with pytest.raises(bbqlib.LockTimeoutError, match=f"pid {holder.pid}"):
            flat.save(link)
    with _Holder(atomic.file_lock_path(link)):  # the link's own lock name guards nothing
        flat.save(link)


def test_a_symlinked_ivf_directory_is_written_in_its_target(ivf_dir, tmp_path):
    link = tmp_path / "current"
    link.symlink_to(ivf_dir)
    index = bbqlib.IVFIndex.open(link)
    index.add(unit_rows(10, 8, 4))
    index.delete([0])
    index.save(link)
    assert link.is_symlink() and bbqlib.IVFIndex.open(ivf_dir).ntotal == 310
    assert sorted(os.listdir(tmp_path)) == ["current", "index"]
    locks.set_lock_timeout(0.2)
    with _Holder(atomic.dir_lock_path(ivf_dir)) as holder:  # one lock, through either path
        with pytest.raises(bbqlib.LockTimeoutError, match=f"pid {holder.pid}"):
            index.add(unit_rows(5, 8, 5))
    with ST.directory_lock(ivf_dir), ST.directory_lock(link):  # re-entered, not deadlocked
        pass


# ------------------------------------------------------------------ 5. no advisory locks


def test_without_fcntl_the_first_save_warns_once(flat, tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "fcntl", None)
    monkeypatch.setattr(locks, "_warned_no_fcntl", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = flat.save(tmp_path / "a.bbq")
        assert len(bbqlib.load(path)) == 40
        flat.save(path)
        write_container(tmp_path / "b.bbq", "x", {}, {"a": np.zeros(3)})
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == [
        "this platform has no advisory file locks (fcntl): bbqlib cannot keep two processes "
        "from writing one index at once; write each index from one process"
    ]


# ------------------------------------------------------------------ the benchmark's cases


def test_every_lock_case_of_the_benchmark_is_named_not_silent(tmp_path, monkeypatch):
    """The lock cases of ``benchmarks/faults/faults.py`` (``lock_harness``), once each: 0 silent
    writes."""
    from lock_harness import LOCK_CASES, LockFixture, lock_trial

    fix = LockFixture(tmp_path)
    outcomes = {case: lock_trial(case, fix) for case in LOCK_CASES}
    assert outcomes == dict.fromkeys(LOCK_CASES, "named")
    assert locks.LOCK_TIMEOUT_ENV not in os.environ

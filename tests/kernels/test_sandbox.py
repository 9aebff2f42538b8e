"""The sandbox applies, and records, every layer it can; a missing layer is reported, not fatal."""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_hostile_cpu import FILLS_THE_DISK, WRITES_OUTSIDE, k  # tests/kernels is on sys.path (rootdir-relative imports)

from kernels import Outcome, SandboxPolicy, evaluate
from kernels.sandbox.policy import SandboxError
from kernels.sandbox.spawn import child_env

ROOT = os.geteuid() == 0
PROJECT = Path(__file__).resolve().parents[2]
root_only = pytest.mark.skipif(not ROOT, reason="needs root (privilege drop, namespaces, mount fallback)")


def run(source, quick_bench, params=None, **kw):
    kw.setdefault("timeout_s", 30)
    return evaluate("rmsnorm", source, params or {}, shape_set="test-small", bench=quick_bench, seed=5, **kw)


CORRECT = k("rms_rows(x, w, y, rows, hidden, eps);")


@root_only
def test_the_default_policy_applies_every_layer_and_records_it(quick_bench):
    ev = run(CORRECT, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    sb = ev.fingerprint["sandbox"]
    assert sb["network"] == "namespace"
    assert sb["filesystem"] in ("landlock", "mount-namespace")
    assert sb["user"] == {"uid": 65534, "gid": 65534, "dropped": True}
    assert sb["no_new_privs"] is True
    assert {"socket", "clone (processes)"} <= set(sb["seccomp"])
    assert sb["threads_at_lockdown"] == 1
    assert sb["notes"] == []


def test_without_a_network_namespace_the_evidence_says_shared(quick_bench):
    ev = run(CORRECT, quick_bench, sandbox=SandboxPolicy(network=False))
    assert ev.status == Outcome.ok
    assert ev.fingerprint["sandbox"]["network"] == "shared"
    assert "socket" in ev.fingerprint["sandbox"]["seccomp"]  # sockets are still denied


def _writes_outside(token: int) -> tuple[str, list[Path]]:
    src = f'#define PROJECT_DIR "{PROJECT}"\n' + WRITES_OUTSIDE
    return src, [Path(f"/tmp/pwned-{token}"), PROJECT / f"pwned-{token}"]


@root_only
def test_without_landlock_a_read_only_mount_namespace_keeps_writes_out(quick_bench):
    token = secrets.randbelow(10**9)
    src, files = _writes_outside(token)
    try:
        ev = run(src, quick_bench, {"TOKEN": token}, sandbox=SandboxPolicy(landlock=False))
        sb = ev.fingerprint["sandbox"]
        assert sb["filesystem"] == "mount-namespace" and sb["landlock_abi"] == 0
        assert ev.status == Outcome.wrong_result, ev.log
        assert not any(f.exists() for f in files)
    finally:
        for f in files:
            f.unlink(missing_ok=True)


@root_only
def test_with_only_the_privilege_drop_the_report_says_what_remains_writable(quick_bench):
    """No Landlock, no mount fallback: /tmp is writable for the sandbox user, and says so."""
    token = secrets.randbelow(10**9)
    src, files = _writes_outside(token)
    try:
        ev = run(src, quick_bench, {"TOKEN": token},
                 sandbox=SandboxPolicy(landlock=False, mount_fallback=False))
        sb = ev.fingerprint["sandbox"]
        assert sb["filesystem"] == "uid-permissions"
        assert any("/tmp" in w for w in sb["writable"])
        assert not files[1].exists()  # the project directory belongs to root: still protected
    finally:
        for f in files:
            f.unlink(missing_ok=True)


def test_with_every_layer_off_the_report_is_honest(quick_bench):
    policy = SandboxPolicy(user=None, network=False, landlock=False, mount_fallback=False, seccomp=False)
    ev = run(CORRECT, quick_bench, sandbox=policy)
    assert ev.status == Outcome.ok
    sb = ev.fingerprint["sandbox"]
    assert sb["network"] == "shared" and sb["filesystem"] == "uid-permissions" and sb["seccomp"] == []
    assert sb["user"]["dropped"] is False
    if ROOT:
        assert any("without a privilege drop" in n for n in sb["notes"])


@root_only
@pytest.mark.parametrize("user, message", [
    ("no-such-user-int21", "does not exist"),
    ("0:0", "is root"),
    ("abc:def", "expected a user name or 'uid:gid'"),
])
def test_a_bad_sandbox_user_is_an_infrastructure_error(user, message, quick_bench):
    with pytest.raises(SandboxError, match=message):
        run(CORRECT, quick_bench, sandbox=SandboxPolicy(user=user))


@root_only
def test_a_numeric_sandbox_user_is_used_as_given(quick_bench):
    ev = run(CORRECT, quick_bench, sandbox=SandboxPolicy(user="54321:54321"))
    assert ev.status == Outcome.ok, ev.log
    assert ev.fingerprint["sandbox"]["user"] == {"uid": 54321, "gid": 54321, "dropped": True}


def test_the_sandbox_user_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("KERNELS_SANDBOX_USER", raising=False)
    assert SandboxPolicy.from_env().user == "nobody"
    monkeypatch.setenv("KERNELS_SANDBOX_USER", "")
    assert SandboxPolicy.from_env().user is None
    with pytest.raises(ValueError, match="256 MiB"):
        SandboxPolicy(memory_bytes=1)
    monkeypatch.setenv("KERNELS_SANDBOX_DISK_BYTES", str(64 * 2**20))
    assert SandboxPolicy.from_env().disk_bytes == 64 * 2**20


def test_the_child_sees_only_its_own_environment(monkeypatch, quick_bench):
    monkeypatch.setenv("KERNELS_OMP_WAIT_POLICY", "PASSIVE")
    env = child_env({"OMP_WAIT_POLICY": "PASSIVE"})
    assert set(env) == {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PATH", "OMP_WAIT_POLICY"}
    src = k('const char *p = getenv("OMP_WAIT_POLICY");'
            'if (p && (!strcmp(p, "PASSIVE") || !strcmp(p, "ACTIVE")) && !getenv("HOME")'
            '    && !getenv("KERNELS_OMP_WAIT_POLICY"))'
            '    rms_rows(x, w, y, rows, hidden, eps);')
    ev = run(src, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    assert ev.fingerprint["omp"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert ev.fingerprint["omp_validation"]["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_compile_cache_is_out_of_reach_and_unchanged(quick_bench):
    import hashlib

    from kernels import config

    def contents(cache):  # the cache's hits touch their libraries' mtimes (LRU): compare bytes
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in cache.iterdir() if p.is_file()}

    cache = config.cache_dir()
    before = contents(cache)
    src = k(f'FILE *f = fopen("{cache}/probe", "w"); if (!f) rms_rows(x, w, y, rows, hidden, eps); else fclose(f);')
    ev = run(src, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    after = contents(cache)
    assert not (cache / "probe").exists()
    assert {n: d for n, d in after.items() if n in before} == before  # nothing rewritten


def test_waiting_for_a_child_returns_on_exit_and_on_timeout():
    import subprocess
    import sys

    from kernels.sandbox.disk_watch import DiskWatch
    from kernels.sandbox.spawn import _wait_exit

    watch = DiskWatch(Path(tempfile.mkdtemp()), 2**20, 64)
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    assert _wait_exit(quick, 30.0, watch) is True
    assert quick.wait(timeout=5) == 0
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _wait_exit(slow, 0.2, watch) is False
        assert slow.poll() is None
    finally:
        slow.kill()
        slow.wait()


# Counts open descriptors above stderr; correct only when exactly one is open (the result pipe).
ONLY_THE_RESULT_PIPE = k(
    "int open_fds = 0; for (int fd = 3; fd < 4096; fd++) if (fcntl(fd, F_GETFD) != -1) open_fds++;"
    "if (open_fds == 1) rms_rows(x, w, y, rows, hidden, eps);",
    prelude="#include <fcntl.h>\n",
)


@pytest.mark.parametrize("spawn", ["fork", "exec"])
def test_both_ways_of_starting_a_child_confine_it_alike(spawn, monkeypatch, quick_bench):
    monkeypatch.setenv("KERNELS_SANDBOX_SPAWN", spawn)
    ev = run(ONLY_THE_RESULT_PIPE, quick_bench)
    assert ev.status == Outcome.ok, ev.log  # no descriptor of the fork server or the evaluator leaked
    sb = ev.fingerprint["sandbox"]
    assert sb["spawn"] == spawn and sb["threads_at_lockdown"] == 1
    if ROOT:
        assert sb["network"] == "namespace" and sb["user"]["dropped"] is True


@pytest.mark.parametrize("spawn", ["fork", "exec"])
def test_both_ways_of_starting_a_child_enforce_the_disk_quota(spawn, monkeypatch, quick_bench):
    monkeypatch.setenv("KERNELS_SANDBOX_SPAWN", spawn)
    start = time.monotonic()
    ev = run(FILLS_THE_DISK, quick_bench, timeout_s=20, sandbox=replace(SandboxPolicy.from_env(), disk_bytes=8 * 2**20))
    assert ev.status == Outcome.runtime_error and "wrote more than 8 MiB" in ev.log, ev.log[-2000:]
    assert time.monotonic() - start < 10


def test_the_disk_watch_counts_only_what_the_child_adds(tmp_path):
    from kernels.sandbox.disk_watch import DiskWatch

    (tmp_path / "input.npy").write_bytes(b"x" * 3 * 2**20)  # put there by the evaluator: not counted
    watch = DiskWatch(tmp_path, 2**20, 64)
    assert not watch.check() and watch.exceeded is None
    with open(tmp_path / "sparse", "wb") as f:  # 1 GiB long, no blocks: uses no disk
        f.truncate(2**30)
    (tmp_path / "small").write_bytes(b"y" * 2**19)
    assert not watch.check()
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (nested / "big").write_bytes(b"z" * 2**20)
    assert watch.check() and "wrote more than 1 MiB" in watch.exceeded
    many = DiskWatch(tmp_path, 2**30, 64)
    for i in range(70):
        (tmp_path / f"e{i}").touch()
    assert many.check() and "more than 64 files and directories" in many.exceeded


def test_the_disk_watch_allows_the_evaluators_own_files_besides_the_quota_and_rebases(tmp_path):
    from kernels.sandbox.disk_watch import DiskWatch

    watch = DiskWatch(tmp_path, 2**20, 64, own_bytes=4 * 2**20, own_entries=3)
    (tmp_path / "candidate.so").write_bytes(b"x" * 2 * 2**20)  # put there by the evaluator after the start
    watch.rebase()  # at the go: not the child's
    (tmp_path / "out1.npy").write_bytes(b"y" * 3 * 2**20)  # the child's own snapshots: within its allowance
    assert not watch.check()
    (tmp_path / "extra").write_bytes(b"z" * 3 * 2**20)  # 6 MiB in all: over quota plus allowance
    assert watch.check()
    assert "wrote more than 1 MiB besides the evaluator's own files (up to 4 MiB)" in watch.exceeded
    files = DiskWatch(tmp_path, 2**30, 64, own_entries=10)
    for i in range(74):  # 64 + 10
        (tmp_path / f"e{i}").touch()
    assert not files.check()
    (tmp_path / "e74").touch()
    assert files.check() and "more than 64 files and directories in its private directory besides the " \
                               "evaluator's own 10" in files.exceeded


def test_the_free_space_is_a_guard_near_a_full_disk_only(tmp_path, monkeypatch):
    """Other processes' writes are not the child's: they count only when the disk is nearly
    full, and then only what the child's own additions do not explain."""
    from kernels.sandbox.disk_watch import DiskWatch

    free = [10 * 2**30]
    monkeypatch.setattr(DiskWatch, "_free", lambda self: free[0])
    watch = DiskWatch(tmp_path, 64 * 2**20, 64)
    free[0] -= 4 * 2**30  # another process wrote 4 GiB meanwhile
    assert not watch.check()
    free[0] = 40 * 2**20
    low = DiskWatch(tmp_path, 64 * 2**20, 64)
    (tmp_path / "more.npy").write_bytes(b"m" * 8 * 2**20)
    free[0] -= 8 * 2**20
    assert not low.check()
    free[0] -= DiskWatch.FLOOR_UNEXPLAINED + 2**20
    assert low.check() and "fell to" in low.exceeded and "or another process" in low.exceeded


def test_the_disk_watch_polls_less_often_when_a_walk_is_costly(tmp_path, monkeypatch):
    from kernels.sandbox.disk_watch import DiskWatch

    watch = DiskWatch(tmp_path, 2**20, 64)
    calls = []

    def slow_check():
        calls.append(1)
        time.sleep(0.05)
        return False

    monkeypatch.setattr(watch, "check", slow_check)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        watch.poll()
        time.sleep(0.01)
    assert 2 <= len(calls) <= 6  # each 50 ms walk is followed by 200 ms without one: <= 1/5 of a core


@pytest.mark.skipif(ROOT, reason="root reads any directory")
def test_a_directory_the_evaluator_cannot_read_is_over_quota(tmp_path):
    from kernels.sandbox.disk_watch import DiskWatch

    watch = DiskWatch(tmp_path, 2**30, 4096)
    (tmp_path / "hidden").mkdir(mode=0)
    try:
        assert watch.check() and "unmeasurable" in watch.exceeded
    finally:
        (tmp_path / "hidden").chmod(0o700)


def test_a_tree_its_owner_made_unwritable_is_still_removed(tmp_path):
    """A child running as the worker's own user (not root) can chmod its directories 0500:
    ``rmtree`` fails there, and the space would be lost for good."""
    from kernels.sandbox.workdirs import remove_tree

    tree = tmp_path / "workdir"
    (tree / "keep").mkdir(parents=True)
    (tree / "keep" / "blob").write_bytes(b"x" * 4096)
    (tree / "keep").chmod(0o500)
    remove_tree(tree)
    assert not tree.exists()


@pytest.mark.parametrize("field, value", [("disk_bytes", 2**19), ("disk_entries", 10)])
def test_a_disk_quota_too_small_to_evaluate_anything_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SandboxPolicy(**{field: value})


def test_a_killed_fork_server_is_replaced(quick_bench):
    from kernels.sandbox import forkserver

    assert run(CORRECT, quick_bench).status == Outcome.ok
    server = forkserver.server(child_env())
    old = server._proc
    old.kill()
    old.wait()
    ev = run(CORRECT, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    assert server._proc is not old and server._proc.poll() is None


def test_an_unknown_spawn_mode_is_refused(monkeypatch, quick_bench):
    monkeypatch.setenv("KERNELS_SANDBOX_SPAWN", "vfork")
    with pytest.raises(ValueError, match="KERNELS_SANDBOX_SPAWN='vfork': expected 'fork' or 'exec'"):
        run(CORRECT, quick_bench)


# Replaces both libraries of its private directory with a copy of itself whose constructor
# leaves a mark when it runs as root (i.e. before any lockdown).
SWAPS_LIBRARIES = k(
    "static int done; if (!done) { done = 1; copy_self(\"evict.so\"); copy_self(\"candidate.so\"); }"
    "rms_rows(x, w, y, rows, hidden, eps);",
    prelude=r"""
#include <fcntl.h>
__attribute__((constructor)) static void mark(void) {
    if (getuid() == 0) { FILE *f = fopen(getenv("INT21_MARK") ? getenv("INT21_MARK") : "/tmp/int21-pwned", "w"); if (f) fclose(f); }
}
static void copy_self(const char *to) {
    int in = open("candidate.so", O_RDONLY); if (in < 0) return;
    unlink(to);
    int out = open(to, O_CREAT | O_WRONLY | O_TRUNC, 0755);
    char buf[65536]; ssize_t n;
    while (out >= 0 && (n = read(in, buf, sizeof buf)) > 0) (void)!write(out, buf, n);
    close(in); if (out >= 0) close(out);
}
""",
)


@root_only
def test_nothing_the_validation_child_writes_is_loaded_before_the_lockdown(quick_bench):
    mark = Path("/tmp/int21-pwned")
    mark.unlink(missing_ok=True)
    ev = run(SWAPS_LIBRARIES, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    assert not mark.exists()  # the constructor never ran as root
    assert ev.fingerprint["flush"].startswith(("evict (", "rewrite"))


@root_only
def test_the_compiler_cannot_read_what_the_sandbox_user_cannot(tmp_path, quick_bench):
    secret = tmp_path / "secret.h"
    secret.write_text("#error TOPSECRET-4242\n")
    secret.chmod(0o600)
    ev = run(f'#include "{secret}"\n' + CORRECT, quick_bench)
    assert ev.status == Outcome.compile_error
    assert "TOPSECRET" not in ev.log and "Permission denied" in ev.log


def test_a_deep_directory_tree_left_by_a_candidate_is_removed(quick_bench):
    """Killed by the disk watch (too deep to measure), its tree still goes: ``shutil.rmtree``
    recurses past Python's limit here, ``rm -rf`` does not."""
    import glob

    before = set(glob.glob(f"/tmp/int21-eval-{os.getpid()}-*"))
    deep = k('static int done; if (!done) { done = 1; char cwd[4096]; if (getcwd(cwd, sizeof cwd)) {'
             ' for (int i = 0; i < 3000; i++) { if (mkdir("d", 0700) || chdir("d")) break; } (void)!chdir(cwd); } }'
             "rms_rows(x, w, y, rows, hidden, eps);", prelude="#include <sys/stat.h>\n")
    ev = run(deep, quick_bench)
    assert ev.status == Outcome.runtime_error and "nested deeper than 32 levels" in ev.log, ev.log[-2000:]
    assert set(glob.glob(f"/tmp/int21-eval-{os.getpid()}-*")) <= before


@root_only
def test_anonymous_memory_files_are_refused(quick_bench):
    src = k("int fd = memfd_create(\"x\", 0); if (fd < 0) rms_rows(x, w, y, rows, hidden, eps);",
            prelude="#define _GNU_SOURCE\n#include <sys/mman.h>\n")
    ev = run("#define _GNU_SOURCE\n" + src, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    assert "memfd_create" in ev.fingerprint["sandbox"]["seccomp"]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True])
def test_a_timeout_that_is_not_a_positive_number_is_refused(timeout, quick_bench):
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds"):
        run(CORRECT, quick_bench, timeout_s=timeout)


def test_a_request_larger_than_a_socket_buffer_reaches_a_forked_child(monkeypatch, quick_bench):
    from kernels.sandbox import spawn

    monkeypatch.setenv("KERNELS_SANDBOX_SPAWN", "fork")
    real = spawn.start_child

    def padded(request, *a, **kw):
        return real({**request, "padding": "x" * (4 << 20)}, *a, **kw)

    monkeypatch.setattr("kernels.evaluation.pipeline.start_child", padded)
    ev = run(CORRECT, quick_bench)
    assert ev.status == Outcome.ok, ev.log


def test_a_failed_child_set_up_is_the_sandboxs_error_not_the_candidates(monkeypatch, quick_bench):
    monkeypatch.setenv("KERNELS_SANDBOX_SPAWN", "fork")
    monkeypatch.setenv("KERNELS_SANDBOX_MEMORY_BYTES", str(2**64))  # above any hard limit
    with pytest.raises(SandboxError, match="set-up"):
        run(CORRECT, quick_bench)


@root_only
def test_a_work_directory_is_the_sandbox_users_only_once_every_file_is_in(monkeypatch, quick_bench):
    # A sandboxed process (same uid as every other child) must never be able to plant a link
    # where this process still writes: a child starts (and loads its inputs) as this process's
    # user while its directory is still being filled (the library after the compiler); the
    # directory becomes the sandbox user's only at the go, and the timing directory stays
    # root's while the validation child runs candidate code.
    from kernels.evaluation import pipeline
    from kernels.sandbox import spawn

    made, started, ran = [], [], []
    real_make, real_start, real_go = pipeline.make_workdir, pipeline.start_child, spawn.PendingChild.go

    def make(*a, **kw):
        made.append(real_make(*a, **kw))
        st = made[-1].stat()
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)  # not given away at creation
        return made[-1]

    def start(req, workdir, *a, **kw):
        assert workdir.stat().st_uid == 0  # still root's: this process may still write there
        started.append(workdir)
        child = real_start(req, workdir, *a, **kw)
        child.workdir = workdir
        return child

    def go(self, *a, **kw):
        owners = {d: d.stat().st_uid for d in made}
        ran.append(self.workdir)
        assert owners[self.workdir] == 65534 and (self.workdir / "candidate.so").stat().st_uid == 65534
        assert all(uid == 0 for d, uid in owners.items() if d not in ran)  # not yet run: root's
        assert not any(p.is_symlink() for p in self.workdir.iterdir())
        return real_go(self, *a, **kw)

    monkeypatch.setattr(pipeline, "make_workdir", make)
    monkeypatch.setattr(pipeline, "start_child", start)
    monkeypatch.setattr(spawn.PendingChild, "go", go)
    ev = run(CORRECT, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    assert len(made) == 2 and started == made and ran == made  # validation, then timing


def test_what_a_cpu_child_may_read_never_opens_tmp_or_the_project_again(monkeypatch):
    import sys

    from kernels.sandbox.isolation import readable_roots

    monkeypatch.setattr(sys, "path", [*sys.path, "/", str(PROJECT), "/tmp", str(PROJECT.parent)])
    roots = readable_roots(str(PROJECT))
    assert not {"/", str(PROJECT), "/tmp", str(PROJECT.parent)} & set(roots)
    assert str(PROJECT / "kernels") in roots and "/usr" in roots
    assert any(sys.prefix == r or sys.prefix.startswith(r.rstrip("/") + "/") for r in roots)  # the venv's imports


def test_directories_a_killed_process_left_are_swept(tmp_path, monkeypatch):
    import subprocess
    import sys

    from kernels.sandbox import workdirs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    left = [tmp_path / f"int21-{kind}-{dead}-abcd1234" for kind in ("eval", "log", "build")]
    for d in left:
        (d / "deep" / "er").mkdir(parents=True)
        (d / "deep" / "er" / "candidate.so").write_bytes(b"x" * 4096)
    mine = workdirs.private_tempdir("eval")  # this process: alive
    other = tmp_path / "int21-eval-1-abcd1234"  # pid 1: alive
    other.mkdir()
    unrelated = tmp_path / "int21-eval-notapid"
    unrelated.mkdir()
    assert workdirs.sweep_stale_tempdirs() == 3
    assert not any(d.exists() for d in left)
    assert mine.exists() and other.exists() and unrelated.exists()
    assert mine.name.startswith(f"int21-eval-{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("spawn", ["fork", "exec"])
def test_a_started_child_runs_nothing_before_the_go_and_a_cancelled_one_never_runs(spawn, monkeypatch, quick_bench):
    # Children start early (the validation child while the compiler runs, the timing child
    # while the validation is judged) and wait for the go before their lockdown: until then no
    # report, no candidate code. A child whose run is not needed (here the compiler fails, so
    # the validation child is cancelled; the timing child is never started) exits unrun.
    from kernels.evaluation import pipeline

    monkeypatch.setenv("KERNELS_SANDBOX_SPAWN", spawn)
    real_start = pipeline.start_child
    children = []

    def start(*a, **kw):
        child = real_start(*a, **kw)
        children.append(child)
        return child

    monkeypatch.setattr(pipeline, "start_child", start)
    slow = "#include \"/dev/null\"\n" + CORRECT  # compiles as usual
    real_compile = pipeline.get_backend("cpu").compile

    def compile_slowly(self, source, *a, **kw):
        if source.startswith(slow[:20]):  # the candidate (not the host's or the eviction helper's)
            time.sleep(1.0)  # the validation child is started and prepared meanwhile
            assert len(children) == 1 and children[0].chunks == [], "the child reported before its go"
            pid = children[0].proc.pid if children[0].proc is not None else children[0].pid
            assert _alive(pid)
        return real_compile(source, *a, **kw)

    monkeypatch.setattr(type(pipeline.get_backend("cpu")), "compile", compile_slowly)
    ev = run(slow, quick_bench)
    assert ev.status == Outcome.ok, ev.log
    assert len(children) == 2 and ev.fingerprint["sandbox"]["spawn"] == spawn

    children.clear()
    ev = run(CORRECT.replace("rms_rows(", "syntax error rms_rows("), quick_bench)
    assert ev.status == Outcome.compile_error
    assert len(children) == 1 and children[0].done and children[0].chunks == []
    pid = children[0].proc.pid if children[0].proc is not None else children[0].pid
    assert not _alive(pid)


def test_the_fork_server_refuses_a_waiting_child_without_its_go_pipe(monkeypatch):
    # A child told to wait for the go but given no go pipe would run the candidate at once,
    # before its directory is ready: the server refuses the request instead.
    import socket

    from kernels.sandbox import forkserver

    monkeypatch.setattr(socket, "send_fds", lambda sock, bufs, fds, *a: socket.socket.sendmsg(
        sock, bufs, [(socket.SOL_SOCKET, socket.SCM_RIGHTS, __import__("array").array("i", fds[:5]))]))
    rfd, wfd = os.pipe()
    go_r, go_w = os.pipe()
    with tempfile.TemporaryDirectory() as d, open(os.devnull, "wb") as null:
        server = forkserver.ForkServer(child_env())
        try:
            with pytest.raises(forkserver.ForkServerError):
                server.spawn({}, cwd=d, env=child_env(), limits=[], result_fd=wfd, stdout_fd=null.fileno(),
                             stderr_fd=null.fileno(), go_fd=go_r, answer_s=5)
        finally:
            server._stop()
            for fd in (rfd, wfd, go_r, go_w):
                os.close(fd)

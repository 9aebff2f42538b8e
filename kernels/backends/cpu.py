"""CPU backend: C + OpenMP compiled by the system compiler into a shared library."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kernels import config
from kernels.backends import CAPABILITIES, TARGET_PREFIXES
from kernels.sandbox.toolchain import CompileError, ToolTimeout, compiler_ids, failure, run_tool

FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
# Link flags: fail at compile time (compile_error) on undefined symbols, not at dlopen.
LINK_FLAGS: tuple[str, ...] = ("-Wl,--no-undefined", "-lm")
COMPILE_TIMEOUT_S = 60.0
PRUNE_EVERY = 16  # fresh compiles between two prunings of the cache (prune_cache)
_stored_since_prune = 0


def prune_cache(cache: Path, max_bytes: int, keep: Path | None = None) -> int:
    """Delete the least recently used libraries (``*.so``, by modification time: a cache hit
    touches its file) of ``cache`` until they take at most ``max_bytes``; ``keep`` stays.

    Every distinct candidate leaves a library here, and a kernel with a large static array
    makes one of up to the compiler's 64 MiB file limit, so without a bound the cache grows
    by that much per candidate. A worker may still be copying a library another one
    deletes; that evaluation fails as an infrastructure error, which a cap far above the
    working set makes rare. Returns the bytes deleted; never raises.
    """
    try:
        entries = []
        with os.scandir(cache) as it:
            for e in it:
                if e.name.endswith(".so") and e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    entries.append((st.st_mtime, st.st_size, e.path))
    except OSError:
        return 0
    total = sum(size for _, size, _ in entries)
    freed = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        if keep is not None and path == str(keep):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        freed += size
    return freed


@dataclass(frozen=True)
class Artifact:
    """A compiled candidate.

    Attributes:
        path: the shared library (``.so``) in the compile cache.
        log: compiler output (warnings); empty on a cache hit.
        key: sha256 hex of source, defines, flags, compiler version and CPU model.
        cached: True if reused from the cache.
    """

    path: Path
    log: str
    key: str
    cached: bool


@functools.cache
def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return out.stdout.splitlines()[0].strip() if out.stdout else f"unknown (rc={out.returncode})"


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class CpuBackend:
    """Compiles C sources with ``$CC`` (default ``cc``) and OpenMP for this host's CPU."""

    name = "cpu"
    target_prefix = TARGET_PREFIXES["cpu"]
    capabilities = CAPABILITIES["cpu"]

    def supports(self, target: str) -> bool:
        """True for ``cpu-<this machine>`` targets, e.g. ``cpu-x86_64``."""
        return target == f"cpu-{platform.machine()}"

    def fingerprint(self) -> dict:
        """Environment that determines compiled code and speed: compiler path and version,
        flags, CPU model, number of CPUs."""
        cc = config.compiler()
        return {
            "backend": self.name,
            "compiler": shutil.which(cc) or cc,
            "compiler_version": _compiler_version(cc),
            "flags": list(FLAGS + LINK_FLAGS),
            "cpu_model": _cpu_model(),
            "machine": platform.machine(),
            "nproc": os.cpu_count() or 1,
        }

    def cache_key(self, source: str, defines: str) -> str:
        """sha256 hex over everything that changes the binary (``-march=native`` makes the
        CPU model part of it)."""
        cc = config.compiler()
        h = hashlib.sha256()
        for part in (source, defines, " ".join(FLAGS + LINK_FLAGS), cc, _compiler_version(cc), _cpu_model()):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def compile(self, source: str, defines: str) -> Artifact:
        """Compile ``defines + source`` into a shared library, reusing the cache.

        Args:
            source: C source defining the workload's entry point.
            defines: ``#define`` lines prepended to ``source``.

        Returns:
            The cached or freshly built :class:`Artifact`.

        Raises:
            CompileError: compiler failure or timeout (60 s); ``.log`` has the compiler output.
        """
        key = self.cache_key(source, defines)
        cache = config.cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        target = cache / f"{key}.so"
        if target.is_file():
            try:  # recently used: the last the cache prunes (an hour is fine enough for LRU)
                if time.time() - target.stat().st_mtime > 3600:
                    os.utime(target)
            except OSError:
                pass
            return Artifact(target, "", key, True)
        cc = config.compiler()
        ids = compiler_ids()
        # Built outside the cache: the compiler may run as the sandbox user, who can neither
        # reach nor write the cache (nor any file only root may read: #include and .incbin
        # see what that user sees).
        with tempfile.TemporaryDirectory(prefix=f"int21-build-{os.getpid()}-") as tmp:
            src = Path(tmp) / "candidate.c"
            src.write_text(defines + source)
            out = Path(tmp) / "candidate.so"
            cmd = [cc, *FLAGS, "-o", str(out), str(src), *LINK_FLAGS]
            if ids:
                os.chown(tmp, *ids)
            try:
                returncode, log = run_tool(
                    cmd, cwd=tmp, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "TMPDIR": tmp},
                    timeout_s=COMPILE_TIMEOUT_S, ids=ids,
                )
            except ToolTimeout as exc:
                log = f"$ {' '.join(cmd)}\n{exc.log}\ncompiler timed out after {COMPILE_TIMEOUT_S:g} s"
                raise CompileError("compiler timed out", log.replace(tmp + "/", "")) from None
            except OSError as exc:
                raise CompileError(f"cannot run compiler {cc!r}", f"$ {' '.join(cmd)}\n{exc}") from None
            log = log.replace(tmp + "/", "")
            if returncode != 0 or not out.is_file() or out.is_symlink():
                raise CompileError(failure("compiler", returncode, log), f"$ {' '.join(cmd)}\n{log}".replace(tmp + "/", ""))
            # Into the cache as a file of ours: copied (never a link the compiler's user made),
            # then renamed atomically, so concurrent workers never see a partial .so.
            fd, staged = tempfile.mkstemp(prefix=".staged-", suffix=".so", dir=cache)
            os.close(fd)
            try:
                shutil.copyfile(out, staged, follow_symlinks=False)
                os.chmod(staged, 0o755)
                os.replace(staged, target)
            except BaseException:
                Path(staged).unlink(missing_ok=True)
                raise
        global _stored_since_prune
        _stored_since_prune += 1
        # A walk of the cache costs ~1 ms per 1,000 libraries: after every large library, else
        # every PRUNE_EVERY compiles.
        if _stored_since_prune >= PRUNE_EVERY or target.stat().st_size > 2**20:
            _stored_since_prune = 0
            prune_cache(cache, config.cache_max_bytes(), keep=target)
        return Artifact(target, log, key, False)

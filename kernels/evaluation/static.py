"""Static evidence of CUDA candidates, without a GPU: resource usage, occupancy, PTX.

Everything here needs only ``nvcc`` (and numpy-free standard library code):

- :func:`resource_usage` compiles a CUDA C (or PTX) source with
  ``nvcc -cubin -arch=sm_XX --resource-usage -Xptxas -v`` and parses, per ``__global__``
  entry point, registers per thread, spill stores/loads, stack frame, static shared memory,
  barriers; constant-bank sizes come from the cubin's ELF sections.
- :func:`occupancy` is the theoretical occupancy of one launch configuration, a line-by-line
  port of the CUDA Occupancy Calculator logic shipped as ``cuda_occupancy.h`` in the CUDA
  toolkit (CUDA 13.0: ``cudaOccMaxActiveBlocksPerMultiprocessor``, with the warp, register,
  shared-memory, block and barrier limits), over the per-architecture limits of
  :data:`ARCHS`.
- :func:`static_evidence` combines both for one kernel and block size (the flat dict stored
  as evidence and shown on the candidate page); :func:`ptx` returns ``nvcc -ptx`` output.

Results, failures included, are cached on disk (``$KERNELS_CACHE_DIR/cuda-static``) by a sha256 over the source,
defines, architecture, options and the nvcc version, written atomically (temp file, then
``os.replace``) like the CPU compile cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernels import config
from kernels.sandbox.toolchain import CompileError, ToolTimeout, compiler_ids, failure, run_tool

__all__ = [
    "ARCHS",
    "ArchLimits",
    "CompileError",
    "arch_limits",
    "atomic_write",
    "compile_cubin",
    "is_ptx",
    "nvcc_path",
    "nvcc_version",
    "occupancy",
    "ptx",
    "resource_usage",
    "static_evidence",
]

NVCC_TIMEOUT_S = 120.0
_KB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM hardware limits of one compute capability, as the occupancy rules use them.

    Sources: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
    Specifications per Compute Capability" (threads, warps, blocks, registers and shared
    memory per SM and per block), and ``cuda_occupancy.h`` of CUDA 13.0 (allocation
    granularities, sub-partitions, reserved shared memory, barrier slots, the shared-memory
    carveouts in ``cudaOccAlignUpShmemSizeVoltaPlus``). Byte counts are bytes, not KiB.

    Attributes:
        arch: ``sm_XY`` name.
        compute_capability: ``(major, minor)``.
        max_threads_per_block: 1024 on every listed architecture.
        max_threads_per_sm: resident threads per SM (64 warps on 8.0/9.0/10.0, 48 on
            8.6/8.9/12.0).
        max_blocks_per_sm: resident blocks per SM.
        warp_size: threads per warp.
        regs_per_sm: 32-bit registers per SM (64 Ki).
        regs_per_block: registers one block may hold (64 Ki).
        max_regs_per_thread: the occupancy header's per-thread limit (ptxas itself caps at
            255).
        reg_alloc_unit: registers are allocated per warp in units of this many (256).
        sub_partitions: warp schedulers per SM; registers are split evenly among them.
        smem_per_sm: largest shared-memory carveout per SM.
        smem_per_block: per-block limit without opt-in (48 KiB).
        smem_per_block_optin: per-block limit after ``cudaFuncSetAttribute(...,
            MaxDynamicSharedMemorySize)`` (the CUDA backend sets it when a launch asks for
            more than 48 KiB).
        reserved_smem_per_block: shared memory the driver reserves per block (1 KiB since
            8.0), counted against the SM's shared memory.
        smem_alloc_unit: shared memory is allocated per block in units of this many bytes.
        barrier_slots_per_block_slot: named-barrier slots per resident-block slot (limits
            blocks to ``slots * max_blocks_per_sm / barriers_used`` from 9.0 on).
    """

    arch: str
    compute_capability: tuple[int, int]
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    warp_size: int
    regs_per_sm: int
    regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int
    sub_partitions: int
    smem_per_sm: int
    smem_per_block: int
    smem_per_block_optin: int
    reserved_smem_per_block: int
    smem_alloc_unit: int
    barrier_slots_per_block_slot: int

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def _arch(arch: str, cc: tuple[int, int], threads_sm: int, blocks_sm: int, smem_sm_kb: int,
          optin_kb: int, barrier_slots: int) -> ArchLimits:
    return ArchLimits(
        arch=arch, compute_capability=cc, max_threads_per_block=1024, max_threads_per_sm=threads_sm,
        max_blocks_per_sm=blocks_sm, warp_size=32, regs_per_sm=64 * _KB, regs_per_block=64 * _KB,
        max_regs_per_thread=256, reg_alloc_unit=256, sub_partitions=4, smem_per_sm=smem_sm_kb * _KB,
        smem_per_block=48 * _KB, smem_per_block_optin=optin_kb * _KB, reserved_smem_per_block=1 * _KB,
        smem_alloc_unit=128, barrier_slots_per_block_slot=barrier_slots,
    )


# Programming Guide table + cuda_occupancy.h (CUDA 13.0), see ArchLimits.
ARCHS: dict[str, ArchLimits] = {
    "sm_80": _arch("sm_80", (8, 0), 2048, 32, 164, 163, 2),   # A100
    "sm_86": _arch("sm_86", (8, 6), 1536, 16, 100, 99, 1),    # RTX 30xx, A10/A40
    "sm_89": _arch("sm_89", (8, 9), 1536, 24, 100, 99, 1),    # L4, L40, RTX 40xx
    "sm_90": _arch("sm_90", (9, 0), 2048, 32, 228, 227, 2),   # H100, H200
    "sm_90a": _arch("sm_90a", (9, 0), 2048, 32, 228, 227, 2),
    "sm_100": _arch("sm_100", (10, 0), 2048, 32, 228, 227, 2),  # B200
    "sm_100a": _arch("sm_100a", (10, 0), 2048, 32, 228, 227, 2),
    "sm_120": _arch("sm_120", (12, 0), 1536, 24, 100, 99, 1),  # RTX 50xx
}


def arch_limits(arch: str) -> ArchLimits:
    """The :class:`ArchLimits` of ``arch`` (``"sm_90"``, ``"sm_100"``, ...).

    Raises:
        KeyError: unknown architecture; the message lists the known ones.
    """
    try:
        return ARCHS[arch]
    except KeyError:
        raise KeyError(f"unknown CUDA architecture '{arch}' (known: {', '.join(ARCHS)})") from None


# -- occupancy (port of cuda_occupancy.h, CUDA 13.0) --------------------------------------


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _round_up(x: int, y: int) -> int:
    return y * _cdiv(x, y)


def _smem_carveout(lim: ArchLimits, needed: int) -> int | None:
    """Smallest shared-memory carveout >= ``needed`` bytes (cudaOccAlignUpShmemSizeVoltaPlus)."""
    steps_kb = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
    for kb in steps_kb:
        if kb * _KB > lim.smem_per_sm:
            break
        if needed <= kb * _KB:
            return kb * _KB
    return None


def occupancy(
    arch: str,
    block_threads: int,
    registers: int,
    smem_static_bytes: int = 0,
    smem_dynamic_bytes: int = 0,
    barriers: int = 1,
) -> dict[str, Any]:
    """Theoretical occupancy of one kernel launch configuration on one SM.

    A port of ``cudaOccMaxActiveBlocksPerMultiprocessor`` from ``cuda_occupancy.h`` (CUDA
    13.0; the CUDA Occupancy Calculator's rules) with partitioned global caching off, the
    default shared-memory carveout (the whole ``smem_per_sm``), and the dynamic
    shared-memory opt-in set to exactly ``smem_dynamic_bytes`` (what the CUDA backend does).
    Per resource:

    - warps: ``floor(max_warps_per_sm / ceil(block_threads / 32))``;
    - registers: per warp ``round_up(registers * 32, 256)``; each of the 4 sub-partitions
      holds ``floor(regs_per_sm / 4 / regs_per_warp)`` warps; blocks =
      ``floor(4 * that / warps_per_block)``; 0 if a block needs more than 64 Ki registers
      (the hardware check rounds the block's warps up to a multiple of 4);
    - shared memory: per block ``round_up(static + dynamic + 1 KiB reserved, 128)``;
      blocks = ``floor(smem_per_sm / that)``; 0 above the per-block limit;
    - blocks: ``max_blocks_per_sm``; barriers (9.0+): ``slots * max_blocks / barriers``.

    Args:
        arch: ``"sm_90"`` etc. (see :data:`ARCHS`).
        block_threads: threads per block (product of the block dimensions).
        registers: registers per thread (``ptxas`` "Used N registers").
        smem_static_bytes: static shared memory per block (bytes).
        smem_dynamic_bytes: dynamic shared memory per block (bytes, the launch's
            ``shared_mem_bytes``).
        barriers: named barriers the kernel uses (``ptxas`` "used N barriers"; 0 if none).

    Returns:
        ``active_blocks_per_sm``, ``active_warps_per_sm``, ``max_warps_per_sm``,
        ``occupancy`` (active warps / max warps, 0..1), ``limiting_factor`` (the first of
        ``warps``, ``blocks``, ``registers``, ``shared_memory``, ``barriers`` that attains the
        minimum; ``"launch_fails"`` when 0 blocks fit), ``limiting_factors`` (all that attain
        it), ``limits`` (blocks per SM allowed by each resource), ``regs_allocated_per_block``,
        ``smem_allocated_per_block`` (bytes, incl. the reserved 1 KiB), ``smem_carveout_bytes``
        (smallest carveout that holds the resident blocks' shared memory) and ``reason`` (why
        a launch cannot fit, else empty).

    Raises:
        KeyError: unknown ``arch``.
        ValueError: negative sizes, or ``block_threads < 1``.
    """
    lim = arch_limits(arch)
    if block_threads < 1:
        raise ValueError(f"block_threads must be >= 1 (got {block_threads})")
    if min(registers, smem_static_bytes, smem_dynamic_bytes, barriers) < 0:
        raise ValueError("registers, shared memory sizes and barriers must be >= 0")
    big = 1 << 31
    reasons: list[str] = []
    warps_per_block = _cdiv(block_threads, lim.warp_size)

    # warps (cudaOccMaxBlocksPerSMWarpsLimit)
    if block_threads > lim.max_threads_per_block:
        by_warps = 0
        reasons.append(f"{block_threads} threads per block exceed the limit {lim.max_threads_per_block}")
    else:
        by_warps = lim.max_warps_per_sm // warps_per_block

    # registers (cudaOccMaxBlocksPerSMRegsLimit)
    regs_per_warp = _round_up(registers * lim.warp_size, lim.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps_per_block
    regs_assumed = regs_per_warp * _round_up(warps_per_block, lim.sub_partitions)
    if regs_assumed > lim.regs_per_block or regs_per_block > lim.regs_per_block or registers > lim.max_regs_per_thread:
        by_regs = 0
        reasons.append(
            f"{registers} registers x {block_threads} threads need {regs_assumed} registers per block "
            f"(allocated per warp in units of {lim.reg_alloc_unit}), more than {lim.regs_per_block}"
        )
    elif regs_per_warp > 0:
        warps_per_sub = (lim.regs_per_sm // lim.sub_partitions) // regs_per_warp
        by_regs = (warps_per_sub * lim.sub_partitions) // warps_per_block
    else:
        by_regs = big

    # shared memory (cudaOccMaxBlocksPerSMSmemLimit), opt-in set to the dynamic size
    smem_total = smem_static_bytes + lim.reserved_smem_per_block + smem_dynamic_bytes
    smem_alloc = _round_up(smem_total, lim.smem_alloc_unit)
    max_usage = smem_static_bytes + lim.reserved_smem_per_block + smem_dynamic_bytes
    smem_limit = (lim.smem_per_block_optin if max_usage > lim.smem_per_block else lim.smem_per_block)
    smem_limit += lim.reserved_smem_per_block
    if smem_alloc > smem_limit:
        by_smem = 0
        reasons.append(
            f"{smem_static_bytes} B static + {smem_dynamic_bytes} B dynamic shared memory per block "
            f"exceed the limit {lim.smem_per_block_optin} B"
        )
    else:
        by_smem = lim.smem_per_sm // smem_alloc if smem_alloc > 0 else big

    by_blocks = lim.max_blocks_per_sm
    limits = {"warps": by_warps, "blocks": by_blocks, "registers": by_regs, "shared_memory": by_smem}
    active = min(limits.values())
    if lim.compute_capability[0] >= 9 and barriers > 0:
        limits["barriers"] = (lim.barrier_slots_per_block_slot * lim.max_blocks_per_sm) // barriers
        active = min(active, limits["barriers"])
    factors = [k for k, v in limits.items() if v == active]
    active_warps = active * warps_per_block
    carveout = _smem_carveout(lim, active * smem_alloc) if active else None
    return {
        "arch": arch,
        "block_threads": block_threads,
        "active_blocks_per_sm": active,
        "active_warps_per_sm": active_warps,
        "max_warps_per_sm": lim.max_warps_per_sm,
        "occupancy": active_warps / lim.max_warps_per_sm,
        "limiting_factor": factors[0] if active else "launch_fails",
        "limiting_factors": factors,
        "limits": {k: (v if v < big else None) for k, v in limits.items()},
        "regs_allocated_per_block": regs_per_block,
        "smem_allocated_per_block": smem_alloc,
        "smem_carveout_bytes": carveout,
        "reason": "; ".join(reasons),
    }


# -- nvcc ---------------------------------------------------------------------------------


def nvcc_path() -> str | None:
    """The ``nvcc`` to use: ``$KERNELS_NVCC``, else ``nvcc`` on PATH, else
    ``/usr/local/cuda/bin/nvcc``; None when none exists."""
    for cand in (os.environ.get("KERNELS_NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


@functools.cache
def _nvcc_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    release = [ln for ln in lines if "release" in ln]
    return (release or lines or [f"unknown (rc={out.returncode})"])[-1]


def nvcc_version() -> str | None:
    """``nvcc --version``'s release line, e.g. ``'Cuda compilation tools, release 13.0,
    V13.0.88'``; None when nvcc is missing."""
    path = nvcc_path()
    return _nvcc_version(path) if path else None


_PTX_RE = re.compile(r"^\s*\.version\s+\d+\.\d+", re.M)
_PTX_TARGET_RE = re.compile(r"^\s*\.target\s+\w+", re.M)


def is_ptx(source: str) -> bool:
    """True if ``source`` is PTX assembly (has ``.version`` and ``.target`` directives)
    rather than CUDA C."""
    return bool(_PTX_RE.search(source) and _PTX_TARGET_RE.search(source))


def _arch_flags(arch: str) -> list[str]:
    """``-arch=sm_90``; arch-specific targets (``sm_90a``) use the ``-gencode`` form, which
    nvcc 13.0 assembles where the shorthand also runs a plain sm_90 pass (HOPPER.md)."""
    if arch.endswith("a"):
        num = arch[3:]
        return [f"-gencode=arch=compute_{num},code=sm_{num}"]
    return [f"-arch={arch}"]


def _cache_key(kind: str, source: str, defines: str, arch: str, options: Sequence[str], nvcc: str) -> str:
    h = hashlib.sha256()
    for part in (kind, source, defines, arch, "\x1f".join(options), nvcc, _nvcc_version(nvcc)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _static_dir() -> Path:
    d = config.cache_dir() / "cuda-static"
    d.mkdir(parents=True, exist_ok=True)
    return d


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and
    ``os.replace``, so concurrent workers never see a partial file.

    Raises:
        OSError: the directory is not writable.
    """
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cached_nvcc(error_path: Path, args: list[str], source_text: str, suffix: str,
                 out_name: str) -> tuple[bytes, str]:
    """:func:`_run_nvcc`, whose failures are cached too (``error_path``): a source that fails
    (or hangs nvcc until its timeout) fails the same way the next time, and a candidate's page
    asking for its static evidence again must not cost another nvcc run.

    Raises:
        CompileError: nvcc failed now or before (``"(cached)"``).
    """
    try:
        known = json.loads(error_path.read_text())
    except (OSError, ValueError):
        known = None  # no failure on record (or a damaged record): run nvcc
    if isinstance(known, dict) and isinstance(known.get("message"), str) and isinstance(known.get("log"), str):
        raise CompileError(f"{known['message']} (cached)", known["log"])
    try:
        return _run_nvcc(args, source_text, suffix, out_name)
    except CompileError as exc:
        atomic_write(error_path, json.dumps({"message": str(exc), "log": exc.log}).encode())
        raise


def _run_nvcc(args: list[str], source_text: str, suffix: str, out_name: str) -> tuple[bytes, str]:
    """Run nvcc on ``source_text`` in a private temp dir; returns (output bytes, log).

    As the C compiler does (:meth:`kernels.backends.cpu.CpuBackend.compile`), nvcc runs as
    the sandbox user when this process is root, in a directory outside the cache and with a
    minimal environment: a candidate's ``#include`` or ``.incbin`` sees only what that user
    may read, and nothing it builds can reach the cache except the output we copy.
    """
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found", "nvcc not found: set KERNELS_NVCC or put nvcc on PATH")
    ids = compiler_ids()
    with tempfile.TemporaryDirectory(prefix=f"int21-nvcc-{os.getpid()}-") as tmp:
        src = Path(tmp) / f"candidate{suffix}"
        src.write_text(source_text)
        out = Path(tmp) / out_name
        cmd = [nvcc, *args, "-o", str(out), str(src)]
        shown = " ".join(cmd).replace(tmp + "/", "")
        if ids:
            os.chown(tmp, *ids)
            os.chown(src, *ids)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "TMPDIR": tmp, "HOME": tmp}
        try:
            returncode, log = run_tool(cmd, cwd=tmp, env=env, timeout_s=NVCC_TIMEOUT_S, ids=ids)
        except ToolTimeout as exc:
            raise CompileError("nvcc timed out", f"$ {shown}\n{exc.log.replace(tmp + '/', '')}\n"
                                                 f"nvcc timed out after {NVCC_TIMEOUT_S:g} s") from None
        except OSError as exc:
            raise CompileError(f"cannot run nvcc {nvcc!r}", f"$ {shown}\n{exc}") from None
        log = log.replace(tmp + "/", "")
        if returncode != 0 or not out.is_file() or out.is_symlink():
            raise CompileError(failure("nvcc", returncode, log), f"$ {shown}\n{log}")
        return out.read_bytes(), log


# -- ptxas report parsing -------------------------------------------------------------------

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(.*)$")
_BYTES_RE = re.compile(r"(\d+) bytes (smem|cumulative stack size|cmem\[(\d+)\]|lmem)")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")


def parse_ptxas_report(log: str) -> dict[str, dict[str, int]]:
    """Per entry function, the numbers of ``ptxas -v`` / ``nvcc --resource-usage``.

    Understands the CUDA 12/13 format (``Used 32 registers, used 1 barriers, 256 bytes
    cumulative stack size, 1024 bytes smem``) and the older one (``Used 32 registers,
    1024 bytes smem, 368 bytes cmem[0]``).

    Returns:
        ``{kernel: {"registers", "spill_stores", "spill_loads", "stack_frame_bytes",
        "smem_static_bytes", "barriers", "cumulative_stack_bytes"}}`` plus
        ``"cmem_<bank>_bytes"`` when ptxas reports constant banks; byte counts in bytes.
    """
    kernels: dict[str, dict[str, int]] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    current: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            current = m.group(1)
            kernels.setdefault(current, {})
            continue
        if m := _PROPS_RE.search(line):
            props_for = m.group(1)
            continue
        if m := _FRAME_RE.search(line):
            if props_for is not None:
                frames[props_for] = tuple(int(g) for g in m.groups())  # type: ignore[assignment]
            continue
        if (m := _USED_RE.search(line)) and current is not None:
            info = kernels[current]
            info["registers"] = int(m.group(1))
            rest = m.group(2)
            info["smem_static_bytes"] = 0
            info["barriers"] = 0
            info["cumulative_stack_bytes"] = 0
            if b := _BARRIERS_RE.search(rest):
                info["barriers"] = int(b.group(1))
            for num, what, bank in _BYTES_RE.findall(rest):
                if what == "smem":
                    info["smem_static_bytes"] = int(num)
                elif what == "cumulative stack size":
                    info["cumulative_stack_bytes"] = int(num)
                elif what == "lmem":
                    info["lmem_bytes"] = int(num)
                elif bank:
                    info[f"cmem_{bank}_bytes"] = int(num)
    for name, info in kernels.items():
        stack, stores, loads = frames.get(name, (0, 0, 0))
        info.update(stack_frame_bytes=stack, spill_stores=stores, spill_loads=loads)
        info.setdefault("registers", 0)
        info.setdefault("smem_static_bytes", 0)
        info.setdefault("barriers", 0)
        info.setdefault("cumulative_stack_bytes", 0)
    return kernels


def elf_constant_sizes(cubin: bytes) -> tuple[dict[str, int], int]:
    """Constant-bank sizes from a cubin's ELF section headers.

    Returns:
        ``({kernel: bytes of .nv.constant0.<kernel>}, total bytes of module-level
        .nv.constant<N> banks, N != 0)``: bank 0 holds the kernel's parameters and driver
        constants, the module banks hold ``__constant__`` variables. Empty/0 when the data
        is not a 64-bit little-endian ELF.
    """
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        return {}, 0
    try:
        shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
        stroff = headers[shstrndx][4]

        def name(off: int) -> str:
            end = cubin.index(b"\0", stroff + off)
            return cubin[stroff + off:end].decode("ascii", "replace")

        params: dict[str, int] = {}
        module = 0
        for h in headers:
            n, size = name(h[0]), h[5]
            if m := re.fullmatch(r"\.nv\.constant(\d+)(?:\.(.+))?", n):
                bank, fn = int(m.group(1)), m.group(2)
                if fn and bank == 0:
                    params[fn] = size
                elif not fn and bank != 0:
                    module += size
        return params, module
    except (struct.error, IndexError, ValueError):
        return {}, 0


def compile_cubin(
    source: str, defines: str = "", *, arch: str = "sm_90", options: Sequence[str] = ()
) -> tuple[Path, dict[str, Any]]:
    """Compile to a cubin with nvcc and report resource usage; both cached.

    CUDA C sources get ``defines`` prepended; PTX sources (:func:`is_ptx`) are assembled as
    they are (a preprocessor does not run on PTX, so ``defines`` only reach the launch plan).

    Args:
        source: CUDA C with ``extern "C" __global__`` kernels, or PTX.
        defines: ``#define`` lines prepended to a CUDA C source.
        arch: target architecture, ``"sm_90"`` (H100/H200), ``"sm_100"`` (B200), ...
        options: extra nvcc options (e.g. ``("--use_fast_math",)``).

    Returns:
        ``(cubin path in the cache, report)`` where report is ``{"arch", "nvcc",
        "language": "cuda"|"ptx", "kernels": {name: {...}}, "constant_bytes", "log",
        "command"}``; per kernel: ``registers``, ``spill_stores``, ``spill_loads`` (bytes),
        ``stack_frame_bytes``, ``smem_static_bytes``, ``barriers``,
        ``cumulative_stack_bytes``, ``param_cmem_bytes``.

    Raises:
        CompileError: nvcc missing, failing or timing out (``.log`` has its output).
        KeyError: unknown ``arch``.
    """
    arch_limits(arch)
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found", "nvcc not found: set KERNELS_NVCC or put nvcc on PATH")
    ptx_in = is_ptx(source)
    key = _cache_key("cubin", source, "" if ptx_in else defines, arch, options, nvcc)
    d = _static_dir()
    cubin_path, report_path = d / f"{key}.cubin", d / f"{key}.json"
    if cubin_path.is_file() and report_path.is_file():
        try:
            return cubin_path, {**json.loads(report_path.read_text()), "cached": True}
        except ValueError:
            pass  # a damaged report is rebuilt
    args = ["-cubin", *_arch_flags(arch), "--resource-usage", "-Xptxas", "-v", *options]
    text = source if ptx_in else defines + source
    data, log = _cached_nvcc(d / f"{key}.error.json", args, text, ".ptx" if ptx_in else ".cu", "candidate.cubin")
    kernels = parse_ptxas_report(log)
    params, module_const = elf_constant_sizes(data)
    for name, info in kernels.items():
        info["param_cmem_bytes"] = params.get(name, 0)
    report = {
        "arch": arch,
        "nvcc": _nvcc_version(nvcc),
        "language": "ptx" if ptx_in else "cuda",
        "command": "nvcc " + " ".join(args),
        "kernels": kernels,
        "constant_bytes": module_const,
        "log": log,
    }
    atomic_write(cubin_path, data)
    atomic_write(report_path, json.dumps(report, sort_keys=True).encode())
    return cubin_path, {**report, "cached": False}


def resource_usage(
    source: str, defines: str = "", *, arch: str = "sm_90", options: Sequence[str] = ()
) -> dict[str, Any]:
    """Resource usage per kernel of ``defines + source`` on ``arch`` (see
    :func:`compile_cubin` for the report's keys and errors)."""
    return compile_cubin(source, defines, arch=arch, options=options)[1]


def static_evidence(
    source: str,
    defines: str = "",
    *,
    arch: str = "sm_90",
    kernel: str | None = None,
    block_threads: int = 256,
    dynamic_smem_bytes: int = 0,
    options: Sequence[str] = (),
) -> dict[str, Any]:
    """Flat static evidence of one kernel at one block size: resources plus occupancy.

    Args:
        source, defines, arch, options: as in :func:`compile_cubin`.
        kernel: entry point name; default the only (or first) one.
        block_threads: threads per block of the launch.
        dynamic_smem_bytes: the launch's dynamic shared memory (bytes).

    Returns:
        ``{"kernel", "arch", "registers", "spill_stores", "spill_loads",
        "stack_frame_bytes", "smem_static_bytes", "smem_dynamic_bytes", "barriers",
        "param_cmem_bytes", "constant_bytes", "block_threads", "occupancy",
        "active_blocks_per_sm", "active_warps_per_sm", "limiting_factor", ...}`` (all
        :func:`occupancy` keys).

    Raises:
        CompileError: as :func:`compile_cubin`.
        KeyError: ``kernel`` is not an entry point of the source (lists the ones found).
    """
    report = resource_usage(source, defines, arch=arch, options=options)
    kernels = report["kernels"]
    if kernel is None:
        if not kernels:
            raise KeyError("the source defines no __global__ entry point")
        kernel = next(iter(kernels))
    if kernel not in kernels:
        raise KeyError(f"no entry point '{kernel}' (found: {', '.join(kernels) or 'none'})")
    info = kernels[kernel]
    occ = occupancy(arch, block_threads, info["registers"], info["smem_static_bytes"], dynamic_smem_bytes,
                    info["barriers"])
    return {
        "kernel": kernel,
        **info,
        "constant_bytes": report["constant_bytes"],
        "smem_dynamic_bytes": dynamic_smem_bytes,
        **occ,
    }


def ptx(source: str, defines: str = "", arch: str = "sm_90", options: Sequence[str] = ()) -> str:
    """The PTX nvcc generates for ``defines + source`` (``nvcc -ptx``), for display.

    A PTX source is returned unchanged. Cached like :func:`compile_cubin`.

    Raises:
        CompileError: nvcc missing, failing or timing out.
        KeyError: unknown ``arch``.
    """
    arch_limits(arch)
    if is_ptx(source):
        return source
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompileError("nvcc not found", "nvcc not found: set KERNELS_NVCC or put nvcc on PATH")
    key = _cache_key("ptx", source, defines, arch, options, nvcc)
    path = _static_dir() / f"{key}.ptx"
    if path.is_file():
        return path.read_text()
    virt = arch[3:]
    args = ["-ptx", f"-arch=compute_{virt}", *options]
    data, _ = _cached_nvcc(path.with_suffix(".error.json"), args, defines + source, ".cu", "candidate.ptx")
    atomic_write(path, data)
    return data.decode()


def limits_dict(arch: str) -> dict[str, Any]:
    """:class:`ArchLimits` of ``arch`` as a JSON-serialisable dict (for evidence)."""
    d = asdict(arch_limits(arch))
    d["compute_capability"] = list(d["compute_capability"])
    return d

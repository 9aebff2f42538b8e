"""Run CUDA C kernels on the CPU (``cuda_emu.h``) through a resolved launch plan.

For tests without a GPU: the same template, defines and resolved launches the CUDA backend
would use, compiled with g++ against a small emulation of the CUDA execution model. The
binary depends only on the source and the plan's structure (kernel names, argument kinds);
sizes and scalar values are read at run time, so one build serves many shapes.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kernels.backends.cuda import ResolvedLaunch

HEADER = Path(__file__).with_name("cuda_emu.h")
_EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w+)\s+(\w+)\s*\[\s*\]\s*;")
_CTYPE = {"int32": "int", "int64": "long long", "uint32": "unsigned", "float32": "float", "float64": "double"}


def available() -> bool:
    return shutil.which("g++") is not None


def _program(source: str, launches: Sequence[ResolvedLaunch], buffers: Sequence[str]) -> str:
    body = _EXTERN_SHARED.sub(r"\1 *\2 = reinterpret_cast<\1 *>(emu::dyn_smem());", source)
    lines = [f'#include "{HEADER}"', body, "int main(int argc, char **argv) {",
             '  FILE *vf = std::fopen("values.txt", "r");', "  double v; long long off;"]
    for i, name in enumerate(buffers):
        lines += [f'  auto b{i} = emu_read("{name}.bin");',
                  "  if (std::fscanf(vf, \"%lld\", &off) != 1) return 3;",
                  f"  float *p{i} = reinterpret_cast<float *>(b{i}.data()) + off;"]
    for j, l in enumerate(launches):
        lines.append(f"  unsigned g{j}[3], k{j}[3]; long long s{j};")
        lines.append(f'  if (std::fscanf(vf, "%u %u %u %u %u %u %lld", &g{j}[0], &g{j}[1], &g{j}[2], '
                     f"&k{j}[0], &k{j}[1], &k{j}[2], &s{j}) != 7) return 3;")
        call_args = []
        for a, (kind, value) in enumerate(l.args):
            if kind == "buffer":
                call_args.append(f"p{list(buffers).index(value)}")
            else:
                lines.append(f'  if (std::fscanf(vf, "%lf", &v) != 1) return 3; {_CTYPE[kind]} a{j}_{a} = ({_CTYPE[kind]})v;')
                call_args.append(f"a{j}_{a}")
        lines.append(f"  emu_launch(dim3{{g{j}[0], g{j}[1], g{j}[2]}}, dim3{{k{j}[0], k{j}[1], k{j}[2]}}, s{j}, "
                     f"[&] {{ {l.kernel}({', '.join(call_args)}); }});")
    for i, name in enumerate(buffers):
        lines.append(f'  emu_write("{name}.bin", b{i}.data(), b{i}.size());')
    lines.append("  return 0;\n}")
    return "\n".join(lines)


def build(source: str, launches: Sequence[ResolvedLaunch], buffers: Sequence[str], cache: Path) -> Path:
    """Compile (cached by content) and return the emulator binary."""
    code = _program(source, launches, buffers)
    key = hashlib.sha256((code + HEADER.read_text()).encode()).hexdigest()[:24]
    exe = cache / f"emu-{key}"
    if not exe.exists():
        src = cache / f"emu-{key}.cpp"
        src.write_text(code)
        proc = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-w", "-o", str(exe), str(src)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"emulator build failed:\n{proc.stderr[-4000:]}")
    return exe


def run(
    source: str,
    launches: Sequence[ResolvedLaunch],
    buffers: Mapping[str, np.ndarray],
    offsets: Mapping[str, int],
    workdir: Path,
    cache: Path,
) -> dict[str, np.ndarray]:
    """Run ``launches`` of ``source`` (defines already prepended) on copies of ``buffers``.

    Args:
        buffers: float32 arrays (whole allocations, e.g. with guards).
        offsets: element offset of the kernel's pointer into each buffer.

    Returns:
        The buffers after the launches (same names, same sizes).
    """
    names = list(buffers)
    exe = build(source, launches, names, cache)
    workdir.mkdir(parents=True, exist_ok=True)
    for name, arr in buffers.items():
        np.ascontiguousarray(arr, dtype=np.float32).tofile(workdir / f"{name}.bin")
    vals = [str(int(offsets.get(n, 0))) for n in names]
    for l in launches:
        vals.append(" ".join(str(v) for v in (*l.grid, *l.block, l.shared_mem_bytes)))
        vals += [repr(float(v)) for k, v in l.args if k != "buffer"]
    (workdir / "values.txt").write_text("\n".join(vals) + "\n")
    proc = subprocess.run([str(exe)], cwd=workdir, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"emulated kernel failed (rc={proc.returncode}): {proc.stderr[-2000:]}")
    return {n: np.fromfile(workdir / f"{n}.bin", dtype=np.float32) for n in names}

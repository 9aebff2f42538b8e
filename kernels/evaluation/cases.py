"""The plan of one evaluation: validation cases and timed items with fresh seeds
(:func:`plan_cases`), and their inputs and float64 references computed ahead of the children
(:class:`Expected`)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from kernels.hashing import array_digest
from kernels.sandbox.guard_pages import GUARD_ELEMS, GuardLayout
from kernels.sandbox.policy import SandboxPolicy
from kernels.sandbox.workdirs import hand_over
from kernels.validation_store import StoredCase
from kernels.workloads import Workload

SENTINELS_ONLY = GuardLayout(GUARD_ELEMS)  # [1024 | data | 1024], no inaccessible pages (CUDA)
TIMED_INPUT_SETS = 2  # input sets rotated between timed calls (fresh contents)


def plan_cases(wl: Workload, shape_set: str, base_seed: int, stored: list[StoredCase] = ()) -> tuple[list[dict], list[dict]]:
    """Validation cases (every timed shape once, each odd shape twice, then the stored
    failure cases not already planned) and timed items, with fresh seeds from ``base_seed``."""
    rng = np.random.default_rng(base_seed)

    def fresh() -> int:
        return int(rng.integers(0, 2**62))

    shapes = [dict(s) for s in wl.shapes(shape_set)]
    odd = [dict(s) for s in wl.validation_shapes.get(shape_set, ())]
    cases = [{"id": f"v{i}", "kind": "validation", "shape": s, "seed": fresh()} for i, s in enumerate(shapes)]
    for s in odd:
        for _ in range(2):
            cases.append({"id": f"v{len(cases)}", "kind": "validation", "shape": s, "seed": fresh()})
    timed = [
        {"id": f"t{i}", "shape": s, "seeds": [fresh() for _ in range(TIMED_INPUT_SETS)], "fresh_seed": fresh()}
        for i, s in enumerate(shapes)
    ]
    planned = {(tuple(sorted(c["shape"].items())), c["seed"]) for c in cases}
    axes = list(shapes[0]) if shapes else [a.name for a in wl.args if a.kind == "int"]
    for sc in stored:
        if set(sc.shape) != set(axes) or sc.key in planned:
            continue  # a shape of another version of the workload, or already planned
        planned.add(sc.key)
        shape = {a: sc.shape[a] for a in axes}  # the workload's axis order (labels match)
        cases.append({"id": f"v{len(cases)}", "kind": "regression", "shape": shape, "seed": sc.seed})
    return cases, timed


def input_files(wl: Workload, prefix: str) -> dict[str, str]:
    """File names (in the child's directory) of the inputs of one input set: ``in_<prefix>_<name>.npy``."""
    return {a.name: f"in_{prefix}_{a.name}.npy" for a in wl.args if a.kind == "in"}


class Expected:
    """Inputs and float64 references of a plan, computed ahead of the children and the judge.

    The parent generates every input set from (shape, seed) exactly once, in a thread started
    before the compiler runs (numpy releases the GIL in its kernels). With ``workdirs``, each
    set is also saved into the directory of the child that calls the kernel on it, so the
    children load their inputs instead of generating them again; the inputs stay the
    parent's own copies (what the children save after the calls is compared with them).
    Order: the validation cases' inputs (then :meth:`wait` ``("validation")`` returns), the
    timed sets' (``"timing"``), then the references that are always needed (validation cases
    and fresh contents; the last timed call's is computed by the judge, from the inputs as
    that call saw them, see :func:`salted`; where the workload has a ``salted_reference``,
    the timed sets' too, which the judge updates for the swaps). Entries beyond ``budget_bytes`` (inputs +
    references) are not kept and :meth:`get` computes them again.

    Args:
        wl: the workload (with the shape set's attributes).
        cases: validation cases of :func:`plan_cases`.
        timed: timed items of :func:`plan_cases` (every input set and the fresh contents).
        budget_bytes: most bytes kept (default 512 MiB).
        workdirs: ``{"validation": dir, "timing": dir}``: where the children's input files go
            (none written without it).
        policy: the sandbox policy (input files are handed to its user, read-only).
    """

    def __init__(self, wl: Workload, cases: list[dict] = (), timed: list[dict] = (),
                 budget_bytes: int = 512 * 2**20, workdirs: dict[str, Path] | None = None,
                 policy: SandboxPolicy | None = None) -> None:
        self.wl = wl
        self.budget = budget_bytes
        self.workdirs = workdirs or {}
        self.policy = policy
        self.jobs: dict[str, list[tuple[dict, int, str]]] = {
            "validation": [(c["shape"], c["seed"], c["id"]) for c in cases],
            "timing": [(t["shape"], s, f"{t['id']}s{j}") for t in timed for j, s in enumerate(t["seeds"])]
            + [(t["shape"], t["fresh_seed"], f"{t['id']}f") for t in timed],
        }
        self.ahead = [(c["shape"], c["seed"]) for c in cases] + [(t["shape"], t["fresh_seed"]) for t in timed]
        if wl.salted_reference is not None:  # the timed sets' too: the salted ones are updates of them
            self.ahead += [(t["shape"], s) for t in timed for s in t["seeds"]]
        self.inputs_done: dict[tuple, dict] = {}
        self.refs_done: dict[tuple, dict] = {}
        self.digests_done: dict[tuple, dict[str, str]] = {}  # key -> {input: sha256}
        self.files: dict[str, dict[str, str]] = {}  # prefix -> {input name: file} written
        self.used = 0
        self.ready = {phase: threading.Event() for phase in self.jobs}
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.stop = False

    @property
    def done(self) -> dict[tuple, tuple[dict, dict]]:
        """``{key: (inputs, reference)}`` of the entries whose reference is kept."""
        return {k: (self.inputs_done[k], r) for k, r in self.refs_done.items() if k in self.inputs_done}

    @staticmethod
    def _key(shape: dict, seed: int) -> tuple:
        return tuple(sorted(shape.items())), int(seed)

    def _keep(self, table: dict, key: tuple, arrays: dict) -> None:
        self.used += sum(a.nbytes for a in arrays.values())
        if self.used <= self.budget:
            table[key] = arrays

    def _save(self, phase: str, prefix: str, inputs: dict) -> None:
        workdir = self.workdirs.get(phase)
        if workdir is None:
            return
        names = input_files(self.wl, prefix)
        for name, fname in names.items():
            path = workdir / fname
            np.save(path, np.ascontiguousarray(inputs[name], dtype=np.float32), allow_pickle=False)
            hand_over(self.policy, path)
        self.files[prefix] = names

    def _fill(self) -> None:
        try:
            for phase, jobs in self.jobs.items():
                for shape, seed, prefix in jobs:
                    if self.stop:
                        return
                    key = self._key(shape, seed)
                    inputs = self.inputs_done.get(key)
                    if inputs is None:
                        inputs = self.wl.generate(shape, seed)
                        self._keep(self.inputs_done, key, inputs)
                    if key not in self.digests_done:
                        self.digests_done[key] = {k: array_digest(v) for k, v in inputs.items()}
                    self._save(phase, prefix, inputs)
                self.ready[phase].set()
            for shape, seed in self.ahead:
                key = self._key(shape, seed)
                if self.stop or self.used > self.budget:
                    return
                if key not in self.refs_done:
                    self._keep(self.refs_done, key, self.wl.reference(self.inputs(shape, seed), self.wl.attrs))
        except BaseException as exc:  # noqa: BLE001  (surfaces in wait/get, in the caller's thread)
            self.error = exc
        finally:
            for ev in self.ready.values():
                ev.set()

    def start(self) -> Expected:
        """Start computing in a daemon thread."""
        self.thread = threading.Thread(target=self._fill, name="expected", daemon=True)
        self.thread.start()
        return self

    def wait(self, phase: str) -> None:
        """Block until the inputs of ``phase`` (``"validation"`` or ``"timing"``) are saved.

        Raises:
            OSError: (or whatever the thread raised) saving or generating failed.
        """
        self.ready[phase].wait()
        if self.error is not None:
            raise self.error

    def join(self) -> None:
        """Wait for the thread (errors surface from :meth:`wait`)."""
        if self.thread is not None:
            self.thread.join()

    def cancel(self) -> None:
        """Stop after the entry being computed (e.g. nothing left to judge)."""
        self.stop = True
        self.join()

    def with_files(self, phase: str, cases: list[dict], timed: list[dict]) -> tuple[list[dict], list[dict]]:
        """``cases`` and ``timed`` with the names of the input files saved for ``phase``:
        ``case["inputs"]``, ``item["inputs"]`` (one per seed) and ``item["fresh_inputs"]``,
        where every file of the set was written (else the child generates that set), and
        the digests of those sets (``digests``, ``fresh_digests``: the child saves an input
        whose digest differs after the calls, for the judge to count the changes)."""
        if phase == "validation":
            return [{**c, "inputs": self.files[c["id"]], "digests": self.digests(c["shape"], c["seed"])}
                    if c["id"] in self.files else c for c in cases], list(timed)
        out = []
        for t in timed:
            sets = [self.files.get(f"{t['id']}s{j}") for j in range(len(t["seeds"]))]
            fresh = self.files.get(f"{t['id']}f")
            out.append({**t, "inputs": sets, "fresh_inputs": fresh,
                        "digests": [self.digests(t["shape"], s) for s in t["seeds"]],
                        "fresh_digests": self.digests(t["shape"], t["fresh_seed"])}
                       if fresh and all(sets) else t)
        return list(cases), out

    def digests(self, shape: dict, seed: int) -> dict[str, str]:
        """``{input: sha256}`` of the inputs of (shape, seed) (:func:`kernels.hashing.array_digest`)."""
        hit = self.digests_done.get(self._key(shape, seed))
        return hit if hit is not None else {k: array_digest(v) for k, v in self.inputs(shape, seed).items()}

    def inputs(self, shape: dict, seed: int) -> dict:
        """The inputs of (shape, seed): kept, or generated again (the same arrays)."""
        hit = self.inputs_done.get(self._key(shape, seed))
        return hit if hit is not None else self.wl.generate(shape, seed)

    def get(self, shape: dict, seed: int) -> tuple[dict, dict]:
        """``(inputs, reference)`` of (shape, seed): kept ahead, or computed now."""
        self.join()
        inputs = self.inputs(shape, seed)
        ref = self.refs_done.get(self._key(shape, seed))
        return inputs, ref if ref is not None else self.wl.reference(inputs, self.wl.attrs)

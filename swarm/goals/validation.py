"""The rules a goal's fields must meet, with messages that say how to fix the input.

:func:`validate_goal` checks the fields of a goal being created or changed (workload, target,
shape set, objectives, constraints, design space, template, name) and returns them cleaned, or
raises :class:`GoalInvalid` carrying every problem found, each tied to its field (and, for
objectives and constraints, the item's index). The goal form and the API's goal serializer both
call it and show its messages in their own error formats.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import kernels
import kernels.backends
from swarm.models import Goal, target_backend

NAME_MAX_LENGTH = 200
METRIC_DIRECTIONS = ("minimize", "maximize")
CONSTRAINT_OPS = ("<=", ">=")
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
LOCKED_BY_RUNS = ("workload", "target", "shape_set")  # a goal's candidates were measured on these
ENUMERATE_LIMIT = 50_000  # spaces up to this size are counted exactly; larger ones estimated
ESTIMATE_SAMPLES = 20_000
FAILURE_PROBES = 256  # points tried to say why restrictions exclude a whole space


@dataclass(frozen=True)
class FieldError:
    """One problem: the goal field it belongs to (``workload``, ``target``, ``shape_set``,
    ``name``, ``objectives``, ``constraints``, ``parameters`` or ``restrictions`` (the design
    space's two parts), ``source``), the message, and for ``objectives`` / ``constraints`` the
    0-based index of the item at fault (``None``: the list as a whole)."""

    field: str
    message: str
    index: int | None = None


class GoalInvalid(ValueError):
    """A goal's fields break one or more rules; ``problems`` lists them in the order found."""

    def __init__(self, problems: list[FieldError]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in self.problems))

    @property
    def errors(self) -> dict[str, list[str]]:
        """Messages per field, in the order found."""
        out: dict[str, list[str]] = {}
        for p in self.problems:
            out.setdefault(p.field, []).append(p.message)
        return out


def is_replay(goal: Goal | None) -> bool:
    """Whether ``goal`` (the goal being changed, if any) is a replay goal (recorded evaluations)."""
    return goal is not None and goal.capabilities.recorded


def space_size(space: kernels.DesignSpace) -> dict[str, Any]:
    """Size of a design space: ``{"cartesian", "valid", "exact"}``.

    Spaces up to :data:`ENUMERATE_LIMIT` points are enumerated (``valid`` exact); larger ones
    are estimated from :data:`ESTIMATE_SAMPLES` uniform random points (seeded).
    """
    cartesian = space.cartesian_size()
    if not space.restrictions and space.domain is None:
        return {"cartesian": cartesian, "valid": cartesian, "exact": True}
    if cartesian <= ENUMERATE_LIMIT or space.domain is not None:
        return {"cartesian": cartesian, "valid": sum(1 for _ in space.iter_valid()), "exact": True}
    rng = np.random.default_rng(0)
    idx = [rng.integers(0, len(p.values), ESTIMATE_SAMPLES) for p in space.parameters]
    hits = sum(
        space.satisfies_restrictions({p.name: p.values[int(i[k])] for p, i in zip(space.parameters, idx)})
        for k in range(ESTIMATE_SAMPLES)
    )
    return {"cartesian": cartesian, "valid": round(cartesian * hits / ESTIMATE_SAMPLES), "exact": False}


def empty_space_message(space: kernels.DesignSpace, size: dict[str, Any]) -> str:
    """What to say when ``space``'s restrictions exclude every point: the count, and for each
    restriction that cannot be evaluated (a power over the exponent cap, a division by zero)
    why, at the first of up to :data:`FAILURE_PROBES` points where it fails."""
    text = f"the restrictions exclude every one of the {size['cartesian']} points"
    why: dict[str, str] = {}
    names = [p.name for p in space.parameters]
    for values in itertools.islice(itertools.product(*(p.values for p in space.parameters)), FAILURE_PROBES):
        point = dict(zip(names, values))
        for restriction, failure in space.restriction_failures(point).items():
            if restriction not in why:
                at = " ".join(f"{k}={v}" for k, v in point.items())
                why[restriction] = f"restriction '{restriction}' cannot be evaluated at {at}: {failure}"
    return "; ".join([text, *why.values()])


def default_template(workload: str, target: str) -> str:
    """The workload's template for the target's backend.

    Raises:
        KeyError: no template for that pair (message lists the known ones).
        ValueError: unknown target.
    """
    return kernels.load_template(workload, target_backend(target))


def template_problem(workload: str, target: str) -> str | None:
    """Why ``workload`` has no default template on ``target`` (``None``: it has one)."""
    try:
        default_template(workload, target)
    except (KeyError, ValueError) as exc:
        return str(exc).strip("'\"")
    return None


def check_space(value: Any, *, goal: Goal | None = None) -> tuple[kernels.DesignSpace, dict[str, Any]]:
    """Build the design space ``value`` (``{"parameters": [{"name", "values"}], "restrictions":
    [str]}``, plus ``domain`` on a replay goal, which keeps its own) and count its points.

    Returns ``(space, size)`` (see :func:`space_size`); a space whose restrictions exclude every
    point is returned too, for the caller to show its size (:func:`validate_goal` refuses it).

    Raises:
        GoalInvalid: on ``parameters`` or ``restrictions`` (the part the message is about).
    """
    try:
        space = kernels.DesignSpace.from_dict(value)
    except kernels.SpaceError as exc:
        field = "restrictions" if "restriction" in str(exc) else "parameters"
        raise GoalInvalid([FieldError(field, str(exc))]) from None
    if not space.parameters:
        raise GoalInvalid([FieldError("parameters", "give at least one parameter with its values: "
                                                    "a design space without parameters has nothing to search")])
    domain = goal.space.get("domain") if is_replay(goal) else None
    if space.domain != domain:
        raise GoalInvalid([FieldError("parameters", (
            f"this goal's space keeps its domain {domain!r} (the recorded configurations)" if domain else
            "'domain' belongs to replay goals (made by manage.py factory import-cache); leave it out"))])
    if domain:
        space = _recorded_labels(space, goal)  # the domain's points come from the recorded file
    return space, space_size(space)


def _recorded_labels(space: kernels.DesignSpace, goal: Goal) -> kernels.DesignSpace:
    """``space`` of the replay ``goal`` with each parameter that its file records by name given
    the names of its values (:attr:`~kernels.interchange.tuning_cache.TuningCache.labels`): the
    file, not the request, says what each position stands for.

    Raises:
        GoalInvalid: a value that is no position of a recorded name, or labels that differ from
            the file's names (left out, they are filled in).
    """
    recorded = goal.recorded_file().labels
    params = []
    for p in space.parameters:
        names = recorded.get(p.name)
        if names is None:
            if p.labels is not None:
                raise GoalInvalid([FieldError("parameters", f"parameter '{p.name}': the recorded file gives its values "
                                                            "as numbers; leave its labels out")])
            params.append(p)
            continue
        outside = [v for v in p.values if not (isinstance(v, int) and 0 <= v < len(names))]
        if outside:
            raise GoalInvalid([FieldError("parameters", f"parameter '{p.name}': value(s) {outside} are no recorded name's "
                                                        f"position; 0 .. {len(names) - 1} stand for {list(names)}")])
        labels = tuple(names[v] for v in p.values)
        if p.labels is not None and json.dumps(p.labels) != json.dumps(labels):  # true is not 1
            raise GoalInvalid([FieldError("parameters", f"parameter '{p.name}': its labels are the recorded names of "
                                                        f"its values, {list(labels)}; leave them out or give those")])
        params.append(kernels.Parameter(p.name, p.values, labels))
    return kernels.DesignSpace(tuple(params), space.restrictions, space.domain)


def _workload_problem(value: Any) -> str | None:
    if value not in kernels.WORKLOADS:
        return f"unknown workload {value!r}; known: {', '.join(sorted(kernels.WORKLOADS))}"
    return None


def _target_problem(value: Any, replay: bool, goal: Goal | None) -> str | None:
    try:
        backend = target_backend(str(value))
    except ValueError as exc:
        return str(exc)
    if kernels.backends.capabilities(backend).recorded and not (replay and value == goal.target):
        return "a replay goal is made from a Kernel Tuner cache file: manage.py factory import-cache <file>"
    return None


def _objective_problems(value: Any) -> list[FieldError]:
    if not isinstance(value, list) or not value:
        return [FieldError("objectives", 'give a non-empty list of {"metric", "direction"} objects')]
    problems = []
    for i, o in enumerate(value):
        if not isinstance(o, dict) or set(o) != {"metric", "direction"} or not isinstance(o["metric"], str):
            problems.append(FieldError(
                "objectives", f'objectives[{i}] must be {{"metric": str, "direction": "minimize"|"maximize"}}', i))
        elif not METRIC_NAME.match(o["metric"]):
            problems.append(FieldError(
                "objectives", f"objective {o['metric']!r}: a metric is named with letters, digits and _ "
                              "(e.g. latency_ms)", i))
        elif o["direction"] not in METRIC_DIRECTIONS:
            problems.append(FieldError(
                "objectives", f"objective {o['metric']!r}: direction must be minimize or maximize", i))
    if not problems:
        seen: set[str] = set()
        for i, o in enumerate(value):
            if o["metric"] in seen:
                problems.append(FieldError(
                    "objectives", f"objective {o['metric']!r} is given twice: each objective needs a different metric", i))
            seen.add(o["metric"])
    return problems


def _clean_constraints(value: Any) -> tuple[list[dict], list[FieldError]]:
    if not isinstance(value, list):
        return [], [FieldError("constraints", 'give a list of {"metric", "op", "value"} objects')]
    out, problems = [], []
    for i, c in enumerate(value):
        if not isinstance(c, dict) or set(c) != {"metric", "op", "value"} or not isinstance(c["metric"], str):
            problems.append(FieldError(
                "constraints", f'constraints[{i}] must be {{"metric": str, "op": "<=" | ">=", "value": number}}', i))
            continue
        metric, op = c["metric"], c["op"]
        if not METRIC_NAME.match(metric):
            problems.append(FieldError(
                "constraints", f"constraint on {metric!r}: a metric is named with letters, digits and _ "
                               "(e.g. gbps)", i))
            continue
        if op not in CONSTRAINT_OPS:
            problems.append(FieldError(
                "constraints", f"constraint on {metric}: op {op!r} must be <= or >=: expected 'METRIC <= VALUE' or "
                               """'METRIC >= VALUE' ({"metric": str, "op": "<=" | ">=", "value": number})""", i))
            continue
        try:
            if isinstance(c["value"], bool):
                raise TypeError("a boolean is not a bound")
            v = float(c["value"])
        except (TypeError, ValueError):
            problems.append(FieldError("constraints", f"constraint on {metric}: {c['value']!r} is not a number", i))
            continue
        except OverflowError:  # an integer beyond float range
            v = math.inf
        if not math.isfinite(v):
            problems.append(FieldError("constraints", f"constraint on {metric}: the bound must be a finite number", i))
            continue
        same = next((j for j, o in enumerate(out) if o["metric"] == metric and o["op"] == op), None)
        if same is not None:
            problems.append(FieldError("constraints", f"constraint '{metric} {op}' is given twice: give one bound per "
                                                      "metric and direction", i))
            continue
        other = next((o for o in out if o["metric"] == metric), None)
        if other is not None:
            lo, hi = (v, other["value"]) if op == ">=" else (other["value"], v)
            if lo > hi:
                problems.append(FieldError("constraints", f"constraints on {metric} contradict each other: "
                                                          f"{metric} >= {lo:g} and {metric} <= {hi:g} leave no value", i))
                continue
        out.append({"metric": metric, "op": op, "value": v})
    return out, problems


#: Largest prune factor accepted (a larger one never prunes anything on any real host).
PRUNE_FACTOR_MAX = 1000.0


def _clean_prune_factor(value: Any) -> tuple[Any, str | None]:
    """``(float value, None)``, or ``(value, message)`` when it is not a number in (1, 1000]."""
    try:
        k = float(value) if not isinstance(value, bool) and value not in (None, "") else None
    except (TypeError, ValueError):
        k = None
    if k is None or not math.isfinite(k):
        return value, (f"the prune factor k must be a number (e.g. 3: a candidate more than 3 times slower than "
                       f"the best so far is stopped early), not {value!r}")
    if not 1 < k <= PRUNE_FACTOR_MAX:
        return value, (f"the prune factor k must be more than 1 and at most {PRUNE_FACTOR_MAX:g} (k times slower "
                       f"than the best so far is pruned), not {k:g}")
    return k, None


def validate_goal(fields: Mapping[str, Any], *, goal: Goal | None = None) -> dict[str, Any]:
    """Check the goal fields in ``fields`` and return them cleaned.

    ``fields`` holds any of ``name``, ``workload``, ``target``, ``shape_set``, ``objectives``
    (``[{"metric", "direction": "minimize" | "maximize"}]``, the first primary), ``constraints``
    (``[{"metric", "op": "<=" | ">=", "value": number or numeric string}]``), ``space`` (see
    :func:`check_space`), ``source`` and ``prune_factor`` (``k`` in (1, 1000]: a candidate whose
    first timed calls are more than ``k`` times slower than the incumbent is pruned); a field left out is not checked on its own, and
    cross-field rules read it from ``goal`` (the goal being changed; ``None`` when creating).
    Presence and type of each field belong to the caller's form or serializer.

    Cleaned: constraint values are floats; ``space`` is the space's ``to_dict()``; a blank
    ``source`` (given or the goal's) becomes the workload's default template on the target's
    backend (a replay goal keeps none). A replay goal's workload, target and shape set name its
    recorded data set and cannot change; a goal with runs cannot change them either.

    Raises:
        GoalInvalid: every problem found, per field.
    """
    replay = is_replay(goal)
    cleaned = dict(fields)
    problems: list[FieldError] = []
    bad: set[str] = set()

    def refuse(field: str, message: str | None) -> None:
        if message:
            problems.append(FieldError(field, message))
            bad.add(field)

    if "name" in fields:
        name = str(fields["name"] or "").strip()
        refuse("name", "give the goal a name" if not name else
               f"at most {NAME_MAX_LENGTH} characters ({len(name)} given)" if len(name) > NAME_MAX_LENGTH else None)
    if "workload" in fields and not (replay and fields["workload"] == goal.workload):
        refuse("workload", _workload_problem(fields["workload"]))  # a replay goal's is a recorded kernel's name
    if "target" in fields:
        refuse("target", _target_problem(fields["target"], replay, goal))
    if "objectives" in fields:
        found = _objective_problems(fields["objectives"])
        problems += found
    if "constraints" in fields:
        cleaned["constraints"], found = _clean_constraints(fields["constraints"])
        problems += found
    if "prune_factor" in fields:
        cleaned["prune_factor"], why = _clean_prune_factor(fields["prune_factor"])
        refuse("prune_factor", why)
    if "space" in fields:
        try:
            space, size = check_space(fields["space"], goal=goal)
        except GoalInvalid as exc:
            problems += exc.problems
        else:
            if size["valid"] == 0:
                problems.append(FieldError("restrictions", empty_space_message(space, size)))
            cleaned["space"] = space.to_dict()

    if replay:
        for f in LOCKED_BY_RUNS:
            if f in fields and fields[f] != getattr(goal, f) and f not in bad:
                refuse(f, f"a replay goal's {f} is its recorded data set's ({getattr(goal, f)!r}); import another "
                          "cache file (manage.py factory import-cache) for another one")
        if problems:
            raise GoalInvalid(problems)
        return cleaned  # no template: a replay candidate is a recorded configuration

    merged = {f: fields.get(f, getattr(goal, f, None)) for f in ("workload", "target", "shape_set", "source")}
    if merged["workload"] and merged["shape_set"] and "workload" not in bad:
        sets = kernels.get_workload(merged["workload"]).shape_sets
        if merged["shape_set"] not in sets:
            refuse("shape_set", f"shape set {merged['shape_set']!r} is not one of {merged['workload']}'s: "
                                f"{', '.join(sets)}")
    if goal is not None and goal.pk and goal.runs.exists():
        for f in LOCKED_BY_RUNS:
            if f in fields and fields[f] != getattr(goal, f) and f not in bad:
                refuse(f, f"this goal has {goal.runs.count()} run(s) measured on {f.replace('_', ' ')} "
                          f"{getattr(goal, f)!r}; create a new goal to change it")
    if merged["workload"] and merged["target"] and not bad & {"workload", "target"} \
            and not (merged["source"] or "").strip():
        why = template_problem(merged["workload"] or "", merged["target"] or "")
        if why:
            refuse("source", f"no default template: {why}; give one")
        else:
            cleaned["source"] = default_template(merged["workload"], merged["target"])
    if problems:
        raise GoalInvalid(problems)
    return cleaned

"""The LLM agents' lane: their requests run beside the generations, never inside one.

Each generation, :func:`step` (called by the orchestrator while proposing) takes the answers
that finished since the last one (at most the agent's share of the generation), then starts new
requests up to the agent's ``concurrency``: first the repair of a failed candidate of the agent
(compile error, wrong result, runtime error or sandbox violation, in that candidate's
conversation, up to ``max_repairs`` times), else a fresh proposal. A request runs on a thread of
this process and stores its answer in its :class:`~swarm.models.LaneRequest` row, so any process
proposing the run's next generation can take it. Slots the lane could not fill go to the other
agents: the run waits for the lane only when no other agent proposed anything (:func:`wait`).

Each lane has a token and a cost budget per run (the agent's ``max_run_tokens`` and
``max_run_cost_usd``); each running request holds a reservation of it (``usage["reserved"]``),
and every finished request's usage is counted once, taken or not; once spent, its requests are cancelled and no new ones start, while the
run goes on. ``Run.llm_usage["lanes"][<agent>]`` holds its figures and state.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from kernels.space import format_defines
from swarm.agents import AGENTS, Proposal, RunView, make_agent
from swarm.agents.llm import Cancelled, RepairCase, budget_left
from swarm.agents.llm_answer import storable
from swarm.agents.llm_prompt import fence
from swarm.models import AgentRecord, Candidate, CandidateStatus, LaneRequest, ProposalFailure, Run

log = logging.getLogger(__name__)

#: Outcomes a repair is asked for (a sandbox violation is a runtime error).
REPAIRABLE = (CandidateStatus.COMPILE_ERROR, CandidateStatus.WRONG_RESULT, CandidateStatus.RUNTIME_ERROR)
#: A ``running`` request this long past its deadline is lost (its process died).
LOST_AFTER = timedelta(seconds=30)
USAGE_KEYS = ("calls", "prompt_tokens", "completion_tokens", "cost_usd")

_cancels: dict[int, threading.Event] = {}  # request id -> its cancel event (this process's)
_lock = threading.Lock()


def in_lane(kind: str) -> bool:
    """Whether agents of ``kind`` propose through the lane."""
    return bool(getattr(AGENTS.get(kind), "lane", False))


def proposal_to_dict(p: Proposal) -> dict[str, Any]:
    """JSON form of a proposal (``parents`` as a list)."""
    d = asdict(p)
    d["parents"] = list(p.parents)
    return d


def _proposal(d: dict[str, Any]) -> Proposal:
    return Proposal(params=d.get("params") or {}, source=d.get("source"), parents=tuple(d.get("parents") or ()),
                    rationale=d.get("rationale") or "", error=d.get("error"), raw=d.get("raw") or "",
                    transcript=d.get("transcript") or {})


def step(run: Run, records: list[AgentRecord], view: RunView, number: int, shares: dict[str, int],
         usage: dict[str, Any], holder: str) -> list[tuple[AgentRecord, Proposal]]:
    """Take finished answers and start new requests for the lane agents of ``records``.

    Args:
        run: the run (not locked; called outside any transaction).
        records: the run's lane agents.
        view: the generation's view (what new requests are asked from).
        number: the generation being proposed.
        shares: agent name -> slots of this generation; at most that many answers are taken.
        usage: the run's ``llm_usage``, updated in place with what the taken requests spent.
        holder: identity of this process (``host:pid:start``).

    Returns:
        ``(record, proposal)`` of the answers taken, failed ones included.
    """
    now = timezone.now()
    LaneRequest.objects.filter(run=run, state=LaneRequest.State.RUNNING, deadline__lt=now - LOST_AFTER).update(
        state=LaneRequest.State.FAILED, finished_at=now, error="lost: no answer stored by its deadline")
    taken: list[tuple[AgentRecord, Proposal]] = []
    lanes = usage.setdefault("lanes", {})
    for record in records:
        lane = lanes.setdefault(record.name, {**{k: 0 for k in USAGE_KEYS}, "state": "open"})
        for req in LaneRequest.objects.filter(run=run, agent=record.name, state=LaneRequest.State.DONE):
            usable = [p for p in map(_proposal, req.result) if not p.error]
            if len(usable) > shares.get(record.name, 0) - sum(1 for r, p in taken if r is record and not p.error):
                continue  # no slot left in this generation: the next one takes it
            if not LaneRequest.objects.filter(pk=req.pk, state=LaneRequest.State.DONE).update(state=LaneRequest.State.TAKEN):
                continue  # another process took it
            taken += [(record, p) for p in map(_proposal, req.result)]
        _count_finished(run, record.name, usage, lane)
        tokens_left, spent = budget_left(record.settings, lane)
        if spent:
            if lane["state"] != "spent":
                lane.update(state="spent", reason=spent, generation=number)
                cancel(run, agent=record.name)
            continue
        if record.paused or record.boost <= 0:
            continue
        running = list(LaneRequest.objects.filter(run=run, agent=record.name, state=LaneRequest.State.RUNNING)
                       .values_list("usage", flat=True))
        agent = make_agent(record.kind, 0, record.settings)
        new = max(agent.setting("concurrency") - len(running), 0)
        if tokens_left is not None and new:
            # each request in flight may spend only its reservation: the budget left less what
            # the running ones hold, split between the new ones
            free = tokens_left - sum(int((u or {}).get("reserved", 0)) for u in running)
            share = free // new
            if share < 16:  # not even max_tokens' floor: wait for the running ones to finish
                continue
            tokens_left = share
        for _ in range(new):
            _start(run, record, view, number, holder, tokens_left, agent)
    return taken


def _count_finished(run: Run, name: str, usage: dict[str, Any], lane: dict[str, Any]) -> None:
    """Add the usage of the agent's finished requests (taken or not, cancelled or failed) to
    ``usage`` and ``lane``, each once: the row is marked ``counted`` in the same update."""
    rows = (LaneRequest.objects.filter(run=run, agent=name, usage__has_key="calls")
            .exclude(state=LaneRequest.State.RUNNING).exclude(usage__has_key="counted"))
    for req in rows:
        marked = {**req.usage, "counted": True}
        if LaneRequest.objects.filter(pk=req.pk).exclude(usage__has_key="counted").update(usage=marked):
            _add(usage, lane, req.usage)


def settle(run: Run) -> None:
    """Count the usage of the run's finished requests not yet counted into ``run.llm_usage``
    (the run ending: answers finished but never taken were still paid for); saves the run."""
    usage = dict(run.llm_usage or {})
    lanes = usage.setdefault("lanes", {})
    for name in set(LaneRequest.objects.filter(run=run).values_list("agent", flat=True)):
        lane = lanes.setdefault(name, {**{k: 0 for k in USAGE_KEYS}, "state": "open"})
        _count_finished(run, name, usage, lane)
    run.llm_usage = usage
    run.save(update_fields=["llm_usage"])


def _add(usage: dict[str, Any], lane: dict[str, Any], spent: dict[str, Any]) -> None:
    for k in USAGE_KEYS:
        v = spent.get(k, 0) or 0
        usage[k] = usage.get(k, 0) + v
        lane[k] = lane.get(k, 0) + v


def _start(run: Run, record: AgentRecord, view: RunView, number: int, holder: str, tokens_left: int | None,
           agent) -> None:
    case = _repair_case(run, record, agent.setting("max_repairs"), number)
    req = LaneRequest.objects.create(
        run=run, agent=record.name, generation=number, holder=holder, repair_of_id=case.candidate if case else None,
        deadline=timezone.now() + timedelta(seconds=agent.request_deadline_s()),
        usage={"reserved": tokens_left} if tokens_left is not None else {})
    event = threading.Event()
    with _lock:
        _cancels[req.pk] = event
    # a daemon thread: a request still in flight never keeps the process alive after the run
    threading.Thread(target=_work, name=f"llm-lane-{req.pk}", daemon=True,
                     args=(req.pk, record.kind, record.name, dict(record.settings), view, case, tokens_left,
                           event)).start()


def _repair_case(run: Run, record: AgentRecord, max_repairs: int, number: int) -> RepairCase | None:
    """The oldest failed candidate of the agent still to repair, or None. A chain whose
    repairs are spent is recorded once as a failed proposal."""
    failed = (Candidate.objects.filter(run=run, agent=record.name, status__in=REPAIRABLE, repair_requests__isnull=True)
              .exclude(transcript={}).select_related("evidence").order_by("id"))
    for c in failed:
        attempt = int(c.transcript.get("attempt") or 1)
        if attempt > max_repairs:
            LaneRequest.objects.create(run=run, agent=record.name, generation=number, repair_of=c,
                                       state=LaneRequest.State.FAILED, deadline=timezone.now(),
                                       finished_at=timezone.now(), error="repairs spent")
            ProposalFailure.objects.create(
                run=run, agent=record.name, generation=number, raw=c.transcript.get("answer", "")[:20000],
                error=f"candidate {c.pk} still {c.status} after {attempt} attempts (max_repairs {max_repairs})")
            AgentRecord.objects.filter(pk=record.pk).update(failed_proposals=F("failed_proposals") + 1)
            continue
        return RepairCase(candidate=c.pk, source=format_defines(c.params) + c.source, params=c.params,
                          status=c.status, feedback=feedback(c), transcript=c.transcript)
    return None


def feedback(c: Candidate) -> str:
    """What went wrong with ``c``, for the model: the log tail, and for a wrong result the
    failing validation cases (shape, seed, errors, reason)."""
    ev = getattr(c, "evidence", None)
    logtail = (ev.log if ev else "")[-2500:]
    if c.status == CandidateStatus.COMPILE_ERROR:
        return f"The kernel did not compile:\n{fence(logtail)}"
    if c.status == CandidateStatus.WRONG_RESULT:
        bad = [x for x in (ev.cases if ev else []) if isinstance(x, dict) and x.get("passed") is False][:3]
        cases = "\n".join(
            f"- {x.get('kind')} case {x.get('label') or x.get('shape')} (seed {x.get('seed')}): max_abs_error "
            f"{x.get('max_abs_error')}, max_rel_error {x.get('max_rel_error')}; {x.get('reason') or ''}" for x in bad)
        return f"The kernel gave wrong results against the float64 reference.\nFailing cases:\n{cases or '(none recorded)'}\nlog:\n{fence(logtail)}"
    return f"The kernel failed at run time (a crash or a sandbox violation):\n{fence(logtail)}"


def _work(pk: int, kind: str, name: str, settings: dict, view: RunView, case: RepairCase | None,
          tokens_left: int | None, event: threading.Event) -> None:
    """Run one request on a lane thread and store what it gave (never raises)."""
    agent = make_agent(kind, pk, settings)
    agent.name, agent.tokens_left = name, tokens_left
    state, result, error = LaneRequest.State.DONE, [], ""
    agent.usage = {k: 0 for k in USAGE_KEYS}  # "calls" present: the row's usage is counted once it ends
    try:
        proposal = agent.repair(view, case, event) if case else agent.converse(view, event)
        result = [proposal_to_dict(proposal)]
    except Cancelled:
        state, error = LaneRequest.State.CANCELLED, "cancelled"
    except Exception as exc:  # noqa: BLE001 - a failing agent is a failed proposal, never a lost thread
        log.exception("lane request %s failed", pk)
        result = [proposal_to_dict(Proposal(params={}, error=storable(f"the agent failed: {type(exc).__name__}: {exc}", 2000)))]
    try:
        close_old_connections()
        LaneRequest.objects.filter(pk=pk, state=LaneRequest.State.RUNNING).update(
            state=state, result=result, usage=agent.usage, error=error, finished_at=timezone.now())
        # cancelled by the run (here or while the answer finished): its tokens still count
        LaneRequest.objects.filter(pk=pk, state=LaneRequest.State.CANCELLED, finished_at__isnull=True).update(
            usage=agent.usage, finished_at=timezone.now())
    except Exception:  # noqa: BLE001
        log.exception("lane request %s: its answer could not be stored", pk)
    finally:
        with _lock:
            _cancels.pop(pk, None)
        connection.close()


def cancel(run: Run, agent: str | None = None) -> int:
    """Cancel the run's running requests (of ``agent`` only when given): their rows become
    ``cancelled`` and this process's threads stop at their next chunk. Returns how many."""
    rows = LaneRequest.objects.filter(run=run, state=LaneRequest.State.RUNNING)
    if agent is not None:
        rows = rows.filter(agent=agent)
    pks = list(rows.values_list("pk", flat=True))
    n = LaneRequest.objects.filter(pk__in=pks, state=LaneRequest.State.RUNNING).update(state=LaneRequest.State.CANCELLED)
    with _lock:
        for pk in pks:
            if pk in _cancels:
                _cancels[pk].set()
    return n


def running(run: Run) -> bool:
    """Whether any of the run's requests is still running."""
    return LaneRequest.objects.filter(run=run, state=LaneRequest.State.RUNNING).exists()


def wait(run: Run, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Wait until one of the run's running requests ends (or ``timeout_s`` s pass).
    Returns True when one ended."""
    event = threading.Event()
    before = set(LaneRequest.objects.filter(run=run, state=LaneRequest.State.RUNNING).values_list("pk", flat=True))
    if not before:
        return False
    waited = 0.0
    while waited < timeout_s:
        event.wait(poll_s)
        waited += poll_s
        still = set(LaneRequest.objects.filter(pk__in=before, state=LaneRequest.State.RUNNING).values_list("pk", flat=True))
        if still != before:
            return True
        poll_s = min(poll_s * 1.5, 1.0)
    return False


def request_deadline_s(records: list[AgentRecord]) -> float:
    """The longest request deadline (s) of the lane agents of ``records``."""
    return max((make_agent(r.kind, 0, r.settings).request_deadline_s() for r in records), default=0.0)

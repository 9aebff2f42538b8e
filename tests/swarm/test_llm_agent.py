"""The LLM coding agent against a real local chat-completions server."""

import json

import pytest

from swarm import orchestrator
from swarm.agents import make_agent
from swarm.models import Candidate, ProposalFailure
from dataclasses import replace

from tests.contracts.agent_contract import view as synthetic_view
from tests.swarm.chat_server import ChatServer

GOOD_SOURCE = """
#include <math.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps) {
    for (int r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int i = 0; i < hidden; i++) ss += (double)x[(long)r * hidden + i] * x[(long)r * hidden + i];
        float inv = (float)(1.0 / sqrt(ss / hidden + eps));
        for (int i = 0; i < hidden; i++) y[(long)r * hidden + i] = x[(long)r * hidden + i] * inv * w[i];
    }
}
"""
GOOD = json.dumps({"source": GOOD_SOURCE, "params": {}, "rationale": "double accumulation, one pass"})


def view(history):
    return replace(synthetic_view(history), workload="rmsnorm")


def settings_for(server, **extra):
    return {"base_url": server.url, "model": "local-test", "api_key": "k", "backoff_s": 0.01,
            "price_prompt_per_mtok": 1.0, "price_completion_per_mtok": 2.0, **extra}


def test_a_well_formed_answer_becomes_a_proposal_with_source_and_rationale(db):
    with ChatServer([("ok", GOOD)]) as server:
        [p] = make_agent("llm", 1, settings_for(server)).propose(view([]), 1)
    assert p.error is None and "void rmsnorm(" in p.source and p.params == {}
    assert p.rationale == "double accumulation, one pass"
    body = server.requests[0]["body"]
    assert body["model"] == "local-test"
    assert "candidate contract" in body["messages"][1]["content"]
    assert body["max_tokens"] == 4096 and body["stream"] is True
    assert body["response_format"]["type"] == "json_schema"


def test_a_fenced_code_block_answer_is_accepted(db):
    answer = f"Here is a faster kernel.\n```c\n{GOOD_SOURCE}\n```\nIt accumulates in double."
    with ChatServer([("ok", answer)]) as server:
        [p] = make_agent("llm", 1, settings_for(server)).propose(view([]), 1)
    assert p.error is None and "void rmsnorm(" in p.source and "faster kernel" in p.rationale


def test_malformed_answers_are_retried_then_recorded_as_failed(db):
    script = [("ok", "I cannot help with that."), ("ok", '{"source": ""}'), ("ok", '{"source": "int main(){}"}')]
    with ChatServer(script) as server:
        agent = make_agent("llm", 1, settings_for(server))
        [p] = agent.propose(view([]), 1)
    assert len(server.requests) == 3
    assert p.error and "call 1: malformed" in p.error and "entry point 'rmsnorm'" in p.error
    assert p.raw == '{"source": "int main(){}"}'
    assert agent.usage["calls"] == 3 and agent.usage["prompt_tokens"] == 3000
    assert agent.usage["cost_usd"] == pytest.approx(3 * (1000 * 1.0 + 200 * 2.0) / 1e6)


def test_a_malformed_then_good_answer_succeeds(db):
    with ChatServer([("ok", "nope"), ("ok", GOOD)]) as server:
        [p] = make_agent("llm", 1, settings_for(server)).propose(view([]), 1)
    assert p.error is None


def test_http_errors_and_slow_answers_are_retried_with_backoff(db):
    script = [("status", 500), ("slow", 2.0), ("ok", GOOD)]
    with ChatServer(script) as server:
        [p] = make_agent("llm", 1, settings_for(server, timeout_s=0.5)).propose(view([]), 1)
    assert p.error is None
    assert len(server.requests) == 3


def test_an_unreachable_endpoint_is_a_failed_proposal_not_a_crash(db):
    [p] = make_agent("llm", 1, {"base_url": "http://127.0.0.1:9/v1", "max_attempts": 2, "backoff_s": 0.01}).propose(view([]), 1)
    assert p.error and "call 2" in p.error


@pytest.mark.django_db
def test_in_a_run_llm_kernels_are_evaluated_and_failures_and_usage_recorded(small_goal):
    with ChatServer([("ok", GOOD), ("ok", "garbage"), ("ok", "garbage"), ("ok", "garbage")]) as server:
        run, pending = orchestrator.start_run(
            small_goal, budget=2, seed=1, batch_size=2,
            agents=[{"name": "llm", "kind": "llm", "settings": settings_for(server)}],
        )
        prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "void rmsnorm(const float *x" in prompt  # the contract
    assert len(pending) == 1
    c = orchestrator.evaluate_candidate(pending[0].pk)
    assert c.status == "ok", c.evidence.log
    assert c.rationale and "void rmsnorm(" in c.source
    failure = ProposalFailure.objects.get(run=run)
    assert failure.agent == "llm" and "malformed" in failure.error and failure.raw == "garbage"
    run.refresh_from_db()
    assert run.llm_usage["calls"] == 4 and run.llm_usage["completion_tokens"] == 800
    assert run.agents.get().failed_proposals == 1
    assert Candidate.objects.filter(run=run).count() == 1

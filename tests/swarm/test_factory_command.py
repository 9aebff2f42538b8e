import json
from datetime import datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.django_db
def test_factory_run_prints_one_json_result():
    out = StringIO()
    call_command("factory", "run", "--workload", "rmsnorm", "--target", "cpu-x86_64", "--shape-set", "test-small",
                 "--budget", "5", "--seed", "11", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["evaluated"] == 5
    assert sum(result["status_counts"].values()) == 5
    assert result["best"]["metrics"]["latency_ms"] > 0
    assert set(result["best"]["params"]) == {"ROWS_PER_CHUNK", "UNROLL", "VEC", "ACC_DOUBLE"}
    assert result["best"]["id"] in [c["id"] for c in result["frontier"]]
    assert result["baseline"]["name"] == "numpy" and result["baseline"]["latency_ms"] > 0
    # The run's own time, from its creation to its end (what candidates per minute divide by).
    started, finished = (datetime.fromisoformat(result[k]) for k in ("started_at", "finished_at"))
    assert result["wall_s"] == pytest.approx((finished - started).total_seconds()) and result["wall_s"] > 0


@pytest.mark.django_db
def test_factory_run_shows_a_table_without_json():
    out = StringIO()
    call_command("factory", "run", "--shape-set", "test-small", "--budget", "2", "--no-baseline", stdout=out)
    assert "Pareto frontier" in out.getvalue()


@pytest.mark.django_db
def test_factory_run_rejects_an_unknown_workload():
    with pytest.raises(CommandError, match="unknown workload"):
        call_command("factory", "run", "--workload", "conv9d", "--budget", "2", "--json")

"""Work is sent to Celery by task name, to the queue of its target (or the embedded one)."""

from types import SimpleNamespace
from unittest import mock

import pytest
from celery import current_app

import swarm.tasks  # noqa: F401 - registers the tasks under their names
from int21_site.celery_app import app
from swarm.runs import dispatch
from swarm.runs.dispatch import EMBEDDED_QUEUE, EVALUATE, EVALUATE_BATCH, REPLAY_CHUNK

NAMES = (dispatch.EVALUATE, dispatch.EVALUATE_BATCH, dispatch.VALIDATE_PROMOTION, dispatch.MEASURE_PAIRED,
         dispatch.MEASURE_BASELINE)


def test_every_name_sent_is_a_task_of_the_project_app():
    assert current_app._get_current_object() is app
    for name in NAMES:
        assert app.tasks[name].name == name


def candidate(pk: int, target: str, backend: str):
    return SimpleNamespace(pk=pk, goal=SimpleNamespace(backend=backend, queue=f"target.{target}"))


@pytest.mark.django_db
def test_dispatch_sends_one_evaluate_per_measured_candidate_and_batches_replay_ones(settings,
                                                                                    django_capture_on_commit_callbacks):
    settings.EMBEDDED = False
    cands = [candidate(1, "cpu-x86_64", "cpu")] + [candidate(10 + i, "replay:t", "replay") for i in range(REPLAY_CHUNK + 1)]
    with mock.patch.object(current_app._get_current_object(), "send_task") as send_task:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            dispatch.dispatch(cands)
        assert not send_task.called  # only once the transaction commits
        for cb in callbacks:
            cb()
    assert send_task.call_args_list == [
        mock.call(EVALUATE, args=[1], queue="target.cpu-x86_64"),
        mock.call(EVALUATE_BATCH, args=[[10 + i for i in range(REPLAY_CHUNK)]], queue="target.replay:t"),
        mock.call(EVALUATE_BATCH, args=[[10 + REPLAY_CHUNK]], queue="target.replay:t"),
    ]


@pytest.mark.django_db
def test_in_embedded_mode_everything_goes_to_the_embedded_queue(settings, django_capture_on_commit_callbacks):
    settings.EMBEDDED = True
    with mock.patch.object(current_app._get_current_object(), "send_task") as send_task:
        with django_capture_on_commit_callbacks(execute=True):
            dispatch.dispatch([candidate(1, "cpu-x86_64", "cpu")])
    send_task.assert_called_once_with(EVALUATE, args=[1], queue=EMBEDDED_QUEUE)

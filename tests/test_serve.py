"""``python -m fl_ui.serve``: the background warm-up of the heavy pages' first views never takes the server down."""

from __future__ import annotations

import logging

import pytest

from fl_ui import channels, masterkeys, serve


def test_a_warm_up_that_stops_is_logged_in_one_line_and_the_next_one_runs(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The server shutting down cancels the warm-up's job; its thread must not print a traceback into the log."""
    ran = []

    def cancelled() -> None:
        raise RuntimeError("Cancelled. Start it again when you need it.")

    monkeypatch.setattr(channels, "warm_default_result", cancelled)
    monkeypatch.setattr(masterkeys, "warm_default_rescore", lambda: ran.append("rescore"))
    with caplog.at_level(logging.WARNING, logger=serve.__name__):
        serve.warm_worker_views()
    assert ran == ["rescore"]
    assert [r.getMessage() for r in caplog.records] == ["cancelled did not finish: Cancelled. Start it again when "
                                                        "you need it."]
    assert not any(r.exc_info for r in caplog.records)

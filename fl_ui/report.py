"""Cached checkpoint reports for the Report page: built on the engine, keyed by a
:class:`~fl_ui.jobs.ReportRequest` (the models, their files' stamps, the settings and the device); the HTML document is
written once per report. The documents a user downloads name uploads as the user named them, not by the server's upload
folder (:meth:`fl_ui.uploads.UploadStore.shareable`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from fl_core.errors import FilterLensError
from fl_core.lab.runs import SHIPPED_RUNS_DIR, list_runs
from fl_core.report.build import Report
from fl_core.report.html import report_html
from fl_core.report.series import series_stamp
from fl_core.report.settings import ReportSettings
from fl_ui import jobs
from fl_ui.cache import get_model
from fl_ui.lab import my_runs_dir
from fl_ui.memo import memoize, pooled
from fl_ui.state import Selection
from fl_ui.uploads import upload_store

report_result = pooled(jobs.report_job, max_entries=8)
"""The report a :class:`~fl_ui.jobs.ReportRequest` asks for (:func:`fl_ui.jobs.report_job`), on the engine."""


def report_key(models: jobs.ModelKeys, settings: ReportSettings, device: str) -> jobs.ReportRequest:
    """The request of :data:`report_result` for these models: their stamps go into the key."""
    return jobs.ReportRequest(models, tuple(series_stamp(spec) for spec, _ in models), settings, device)


@memoize(max_entries=8)
def report_document(request: jobs.ReportRequest) -> str:
    """The self-contained HTML file of a finished report (:func:`fl_core.report.html.report_html`)."""
    return shareable_html(report_result(request))


def shareable_html(report: Report) -> str:
    """The report's offline HTML file (:func:`fl_core.report.html.report_html`), uploads named by their file names."""
    return upload_store().shareable(report_html(report))


def shareable_json(report: Report) -> str:
    """The report's JSON file (its ``to_dict()``), uploads named by their file names."""
    return upload_store().shareable(json.dumps(report.to_dict(), indent=2, allow_nan=False))


def _label(spec: str, overrides: tuple) -> str:
    try:
        return get_model(spec, overrides).label
    except FilterLensError:
        return spec


def report_sources(selection: Selection, folder: str = "") -> Mapping[str, tuple[str, jobs.ModelKeys]]:
    """What the page can report on, by URL id: a server folder of one run's checkpoints (when given), each selected
    model, all of them as checkpoints of one run (in the sidebar's order), and each Training Lab run (shipped and
    this browser session's) as its snapshots."""
    keys = selection.model_keys()
    sources = {f"dir:{folder}": (f"the checkpoints in {folder}, in training order", ((f"weights:{folder}", ()),))
               } if folder else {}
    sources |= {f"model:{spec}": (_label(spec, overrides), ((spec, overrides),)) for spec, overrides in keys}
    if len(keys) > 1:
        sources["selected"] = (f"all {len(keys)} selected models, as checkpoints of one run (sidebar order)", keys)
    for folder in [*list_runs(SHIPPED_RUNS_DIR), *list_runs(my_runs_dir())]:
        sources[f"run:{folder}"] = (f"Training Lab run {folder.name} (its first-layer snapshots)",
                                    ((f"weights:{folder}", ()),))
    return sources

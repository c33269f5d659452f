"""Report: one self-contained HTML file with every analysis of a checkpoint, or of the checkpoints of one run."""

from __future__ import annotations

import functools

import pandas as pd
import streamlit as st

from fl_core.firstlayer.plots import profile_figure
from fl_core.io.paths import path_policy
from fl_core.report.build import PART_TITLES
from fl_core.report.html import HOW_TO_READ
from fl_core.report.plots import trajectory_summary_figure, weight_norms_figure
from fl_core.report.settings import ReportSettings
from fl_ui.cache import get_images, get_model
from fl_ui.forms import settings_widgets
from fl_ui.messages import show
from fl_ui.report import report_document, report_key, report_result, report_sources, shareable_json
from fl_ui.state import current_selection, page_model, page_param, set_page_param
from fl_ui.widgets import (
    heavy_result,
    job_status_area,
    plot_with_explanation,
    preprocessing_caption,
    result_file,
    slug,
    user_errors,
)


def how_to_add(report, labelled: bool) -> list[str]:
    """What to choose on this page to add the sections the report skipped for want of input (its reasons say what is
    missing, not where to pick it)."""
    advice = []
    if report.accuracy is None and not labelled:
        advice.append("For accuracy and channel axes, choose *upload a labelled set* (or a labelled folder on the "
                      "server) under *Images* in the sidebar.")
    if len(report.models) == 1:
        advice.append("To follow a run over training, report on all selected models or a Training Lab run, or name a "
                      "folder of one run's checkpoints above.")
    return advice


st.title("📄 Report")
status = job_status_area()  # the running job's progress and Cancel, in the first screen
st.markdown(
    "Every analysis of FilterLens that applies to a checkpoint in **one HTML file** you can attach to a paper, a "
    "bug report or a lab notebook: what was loaded, the first-layer energy profile against the theory and random "
    "filters, whitening, master keys for depthwise models, per-layer weight statistics (dead and duplicate "
    "filters), accuracy and channel axes on labelled images, and — for several checkpoints of one run — how all "
    "of it moved over training. The file opens offline in any browser.")

selection = current_selection()
with user_errors():
    folder = st.text_input("A folder of one run's checkpoints on the server (optional)", page_param("report_dir", ""),
                           key="report_dir", placeholder="/data/runs/resnet18/checkpoints",
                           help="Every checkpoint file of the folder, ordered by the epoch each records, else by "
                                "name (ckpt_2 before ckpt_10).").strip()
    if folder and (error := path_policy().error(folder)):
        show(st.error, "{}", error)
        folder = ""
    set_page_param("report_dir", folder)
    sources = report_sources(selection, folder)
    if not sources:
        st.info("Pick at least one model in the sidebar.")
        st.stop()
    ids = list(sources)
    chosen = page_model("Report on", ids, ids[0], key="report_source", url_key="report",
                        spec_of=lambda key: key.removeprefix("model:") if key.startswith("model:") else None,
                        format_func=lambda key: sources[key][0],
                        help="Several checkpoints (all selected models, or a Training Lab run) add a trajectory.")
    label, models = sources[chosen]
    with st.expander("Settings"):
        c1, c2 = st.columns(2)
        settings = settings_widgets(ReportSettings, {"seeds": "Random-init seeds"}, key="report", container=c1,
                                    base=ReportSettings(images=selection.images), url=True,
                                    options={"seeds": {"min_value": 2, "max_value": 100}})
        settings = settings_widgets(ReportSettings, {"trajectory_distance": "Whitening distance followed over "
                                                     "checkpoints (px)"}, key="report", container=c2, base=settings,
                                    url=True, options={"trajectory_distance": {"slider": True, "max_value": 40}})
    key = report_key(models, settings, selection.device)
    report = heavy_result("Checkpoint report", report_result, key, status=status)
    left, right, whole = st.columns(3)
    # The files are written only when their button is clicked: the HTML inlines plotly.js and every figure (MiBs).
    left.download_button("⬇ HTML report", functools.partial(report_document, key),
                         file_name=f"{slug(label)}_report.html", mime="text/html", key="report-html",
                         on_click="ignore", type="primary")
    right.download_button("⬇ JSON", functools.partial(shareable_json, report),
                          file_name=f"{slug(label)}_report.json", mime="application/json", key="report-json",
                          on_click="ignore")
    whole.download_button("⬇ Result (.flr)", functools.partial(result_file, report),
                          file_name=f"{slug(label)}_report.flr", mime="application/zip", key="report-flr",
                          on_click="ignore")
    show(st.caption, "{} checkpoint(s), images: {}.", len(report.models), report.images)
    if chosen.startswith("model:"):
        preprocessing_caption([get_model(*models[0])])
    status = pd.DataFrame([{"section": title, "time": f"{report.timings.get(name, 0.0):.1f}\u00a0s",  # no wrap
                            "status": f"skipped: {report.skipped[name]}" if name in report.skipped else "done"}
                           for name, title in PART_TITLES.items() if name in report.timings or name in report.skipped])
    st.table(status.set_index("section"))  # a static table wraps the reasons a section was skipped
    if advice := how_to_add(report, get_images(selection.images).labelled):
        st.caption(" ".join(advice))

    st.subheader("Preview")
    if report.trajectory is not None:
        plot_with_explanation(trajectory_summary_figure(report.trajectory), HOW_TO_READ["trajectory"],
                              "report_trajectory", frame=report.trajectory.to_frame())
    if report.energy is not None:
        plot_with_explanation(profile_figure(report.energy), HOW_TO_READ["energy"], "report_energy",
                              frame=report.energy.summary_frame())
    if report.weights is not None:
        plot_with_explanation(weight_norms_figure(report.weights), HOW_TO_READ["weights"], "report_weights",
                              frame=report.weights.to_frame())
    for name, part in report.sections.items():  # every other registered family's section (fl_core.families)
        plot_with_explanation(part.plot(), HOW_TO_READ[name], f"report_{name}", frame=part.to_frame())

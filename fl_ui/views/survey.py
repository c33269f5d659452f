"""Survey: one measure over many models, side by side: does every architecture learn the same first layer?"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fl_core.families import FAMILIES
from fl_core.io.sources import source_text
from fl_core.survey.analysis import HEADLINES
from fl_core.survey.models import specs_in_text, survey_models
from fl_core.survey.settings import SurveySettings, measure_label
from fl_ui.forms import settings_widgets
from fl_ui.messages import show
from fl_ui.state import current_selection
from fl_ui.survey import cancel_survey, run_survey, survey_pending
from fl_ui.widgets import job_status_area, plot_with_explanation, progress_bar, table_with_download, user_errors

# The most models one survey on the page may hold (`python -m fl_core survey` takes more).
PAGE_MAX_MODELS = 50
# Offered beside the sidebar's models: two ImageNet-trained networks and three architectures at random init.
EXAMPLES = ("demo:mobilenet_v2", "demo:squeezenet1_0", "timm:resnet18", "timm:convnext_atto",
            "timm:mobilenetv3_small_100")


def rows_for_screen(result) -> pd.DataFrame:
    """The survey's rows in columns that fit a 1024-px projector: model, the measure's two headline numbers (the
    figure's, whose legend gives the families), worker, and errors when a row failed; the CSV has every number,
    families and worker addresses included."""
    frame = result.to_frame()
    shown = frame[["model", *HEADLINES[result.settings.family]]].round(3)
    shown["worker"] = frame["worker"].map(result.worker_names)
    return shown.assign(error=frame["error"]) if result.failed else shown


st.title("🗂️ Survey")
status = job_status_area()  # the running survey's progress and Cancel, in the first screen
st.markdown(
    "The papers compared dozens of networks by hand. Here one measure runs over every model you list, each model on "
    "the next free worker of the engine, and the numbers come back side by side, coloured by architecture family. "
    "List specs (`timm:NAME`, `demo:NAME`, uploads from the sidebar) or name patterns such as `timm:convnext_*`; "
    "`python -m fl_core survey` runs the same from a shell, with folders and lists of checkpoints.")

selection = current_selection()
with user_errors():
    text = st.text_area(
        "Models, one a line", "\n".join(dict.fromkeys([*selection.specs, *EXAMPLES])), height=190, key="survey_models",
        help=f"A spec or a registry name pattern a line (timm:resnet1*, timm:convnext_*@pretrained); at most "
             f"{PAGE_MAX_MODELS} models. A model that fails becomes a row with its error.")
    measure, distance, seeds = st.columns([2, 1, 1])  # the measure's name whole at 1024 px
    settings = SurveySettings(images=selection.images)
    for column, (name, label) in zip((measure, distance, seeds), {
            "family": "Measure", "distance": "Whitening distance δ (px)", "seeds": "Random-init seeds"}.items()):
        settings = settings_widgets(SurveySettings, {name: label}, key="survey", container=column, base=settings,
                                    options={"family": {"format_func": measure_label}, "seeds": {"max_value": 20}})
    listed = (tuple(survey_models(specs_in_text(text), limit=PAGE_MAX_MODELS)), settings, selection.device)
    run, _ = st.columns([1, 2])  # "▶ Run survey" whole at 1024 px
    if run.button("▶ Run survey", type="primary", key="survey_run"):
        st.session_state["survey_requested"] = listed
    requested = st.session_state.get("survey_requested") == listed
    asked = listed if requested else (selection.specs, *listed[1:])
    if not requested:  # until the list runs: the sidebar's models, which every page shows at once
        show(st.caption, "Below: the sidebar's {} model(s). The {} models listed × {} on {} when you press Run survey.",
             len(selection.specs), len(listed[0]), measure_label(settings.family), source_text(selection.images))
    if not asked[0]:
        st.stop()

    def cancel() -> None:
        cancel_survey(*asked)
        st.session_state.pop("survey_requested", None)

    slot = status.empty()  # the progress and Cancel, only while a row waits or runs
    if survey_pending(*asked):
        box = slot.container(border=True)
        bar, stop = box.columns([5, 1], vertical_alignment="center")
        stop.button("■ Cancel", key="survey_cancel", on_click=cancel, help="Stop the rows still waiting or running.")
        with progress_bar("Survey", bar) as progress:
            result = run_survey(*asked, progress)
        slot.empty()
    else:
        result = run_survey(*asked)
    st.caption(f"{len(result.rows)} models in {result.seconds:.1f} s on {len(result.workers)} worker process(es); "
               f"{len(result.failed)} failed. Rows computed before with the same settings are kept.")
    plot_with_explanation(result.plot(), FAMILIES[settings.family].survey.explained(), "survey",
                          frame=result.to_frame(), result=result)
    st.subheader("One row per model")
    table_with_download(result.to_frame(), "survey_table", shown=rows_for_screen(result))

"""One rule for which model a page shows (fl_ui.state.page_model): the model added to the sidebar last, on every page
that offers it; a choice made in the page's picker until another model is added; a link's choice on opening."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fl_ui import DASHBOARD

from ..app_pages import app_pages
from ..conftest import TINY_MODELS, page_app

PICKER = textwrap.dedent("""
    import streamlit as st
    from fl_ui.state import current_selection, page_model

    options = [*current_selection().specs, "page-default"]
    st.write("shown:", page_model("Model", options, "page-default", key="picked"))
""")


@pytest.fixture()
def picker_page(tmp_path: Path) -> str:
    path = tmp_path / "picker.py"
    path.write_text(PICKER)
    return str(path)


def shown(app) -> str:
    return app.main.markdown[-1].value.removeprefix("shown: ")


def test_a_page_follows_the_model_added_last_and_keeps_a_choice_made_in_its_picker(picker_page: str) -> None:
    app = page_app(picker_page, models=TINY_MODELS)
    app.run()
    assert shown(app) == "demo:tiny_vgg_init"  # the latest of the models the link added
    app.selectbox(key="picked").select("page-default").run()
    app.run()
    assert shown(app) == "page-default" and app.query_params["picked"] == "page-default"  # the page's own choice stays
    app.multiselect(key="model_picker").set_value(["demo:tiny_vgg", "demo:tiny_vgg_init", "demo:lab_vgg_true_s0"])
    app.run()
    assert shown(app) == "demo:lab_vgg_true_s0"  # a model added to the sidebar: every page that offers it shows it


def test_a_link_opens_the_page_on_its_own_choice_and_the_defaults_do_not_count_as_added(picker_page: str) -> None:
    linked = page_app(picker_page, models=TINY_MODELS, picked="demo:tiny_vgg")
    linked.run()
    assert shown(linked) == "demo:tiny_vgg"
    fresh = page_app(picker_page)  # the sidebar's default models only
    fresh.run()
    assert shown(fresh) == "page-default"


PICKERS = {"views/channel_axes.py": '"Model"', "views/swap_rescore.py": '"Depthwise model"',
           "views/master_keys.py": '"Depthwise model"', "views/scale_space.py": '"Learned filters"',
           "views/report.py": '"Report on"', "views/whitening.py": '"Model"',
           "views/energy_profiles.py": '"Filters of"'}
"""Each page's pickers of one model, by the label they are drawn with."""


@pytest.mark.parametrize("page", [p.path for p in app_pages()])
def test_every_model_picker_of_every_page_follows_the_rule(page: str) -> None:
    source = (DASHBOARD.parent / page).read_text()
    pickers = [line for line in source.splitlines() if f"({PICKERS.get(page, chr(0))}" in line]
    assert all("page_model(" in line for line in pickers) and (page not in PICKERS or pickers), (page, pickers)
    assert "choices=selection.specs" not in source and "selectbox(\"Model\", selection.specs" not in source, page

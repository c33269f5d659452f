"""AppTest of the Survey page: the sidebar's models are surveyed at once, a list typed in when the button is pressed;
a survey's rows come from engine workers, a bad model is a row with its error, the figure compares the models; a
pattern matching too many models is refused."""

from __future__ import annotations

import json

import pytest

from fl_ui.testing import shown

from ..conftest import page_app

PAGE = "views/survey.py"
MODELS = "demo:tiny_vgg\ndemo:tiny_vgg_init\nweights:/no/such/file.pt  # a bad row, not a stopped survey"


@pytest.mark.slow
def test_a_survey_runs_each_model_on_a_worker_and_keeps_bad_models_as_rows() -> None:
    app = page_app(PAGE, models="demo:tiny_vgg").run()
    assert not app.exception and not app.error
    assert list(app.dataframe[-1].value["model"]) == ["tiny_vgg"]  # the sidebar's model, at once
    app.text_area(key="survey_models").input(MODELS).run()
    assert any("The 3 models listed × energy profile vs linear theory" in shown(caption) for caption in app.caption)
    assert list(app.dataframe[-1].value["model"]) == ["tiny_vgg"]  # the list waits for Run survey
    app.button(key="survey_run").click().run()
    assert not app.exception and not app.error, [shown(e) for e in (*app.exception, *app.error)]
    table = app.dataframe[-1].value.set_index("model")
    assert list(table.index) == ["tiny_vgg", "tiny_vgg_init", "weights:/no/such/file.pt"]
    assert table["worker"].iloc[:2].str.fullmatch(r"worker \d").all()  # not the engine's tcp://127.0.0.1:… address
    assert not any("tcp://" in shown(caption) for caption in app.caption)
    assert "No checkpoint file" in table.loc["weights:/no/such/file.pt", "error"]
    # the trained network's first layer follows the linear theory much better than its own initialization
    trained, init = (float(table.loc[name, "theory_r"]) for name in ("tiny_vgg", "tiny_vgg_init"))
    assert trained > 0.8 > init + 0.2  # (the column is shown as text: the bad model's cell reads "—")
    assert table.loc["weights:/no/such/file.pt", "theory_r"] == "—"
    layout = json.loads(app.get("plotly_chart")[0].proto.spec)["layout"]
    assert layout["title"]["text"] == "energy survey of 3 models (1 failed)"


@pytest.mark.slow
def test_a_pattern_matching_more_models_than_the_page_takes_is_refused() -> None:
    app = page_app(PAGE).run()
    app.text_area(key="survey_models").input("timm:*").run()
    assert any("more than its limit of 50" in shown(error) for error in app.error)
    assert not app.get("plotly_chart")

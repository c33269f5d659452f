"""AppTest of the Training Lab page: shipped runs open instantly with the paper's table; a run trains live from the
form, can be cancelled, and is then listed under "Your runs"."""

from __future__ import annotations

import shlex

import pytest

from fl_core.cli import build_parser
from fl_core.cli.train import cli_flags, config_from_args
from fl_core.lab.runs import SHIPPED_RUNS_DIR, RunSettings, list_runs, load_run, resolve_config
from fl_core.lab.train import TrainSettings
from fl_core.settings import replace_settings

from ..conftest import page_app

PAGE = "views/training_lab.py"


def assert_clean(app) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [e.value for e in app.error]


@pytest.fixture()
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_RUNS_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.slow
def test_shipped_runs_show_the_trajectory_and_the_paper_table() -> None:
    app = page_app(PAGE)
    app.run()
    assert_clean(app)
    assert app.selectbox(key="lab_run").value == "lab_vgg_true_s0"
    assert len(app.get("plotly_chart")) >= 5  # trajectory, fit over steps, curves, claims, consistency
    assert float(app.metric[0].value) > 0.85  # the theory fits the shipped run
    claims = app.dataframe[-1].value
    assert {"claim", "paper", "ours"} <= set(claims.columns)
    measured = claims.set_index("claim")["ours"]
    assert (measured != "not run").sum() >= 10  # the shipped suite tests (nearly) every claim
    assert "0.99 (CIFAR10)" in claims.set_index("claim").loc["Profiles agree across seeds", "paper"]
    assert len(list(SHIPPED_RUNS_DIR.iterdir())) == len(app.selectbox(key="lab_run").options)


def test_the_step_slider_shows_the_initialization_and_is_remembered_in_the_url() -> None:
    app = page_app(PAGE, run="lab_vgg_random_s0")
    app.run()
    slider = app.select_slider(key="lab_step_lab_vgg_random_s0")
    slider.set_value(0).run()
    assert_clean(app)
    assert app.query_params["step"] == "0" and app.query_params["run"] == "lab_vgg_random_s0"
    assert app.metric[2].value == "+1.000"  # at step 0 the profile is the initial one
    assert any("showing the raw profile" in c.value for c in app.caption)


def test_a_run_trains_live_from_the_form_and_appears_under_your_runs(runs_dir) -> None:
    app = page_app(PAGE, lab="train")
    app.run()
    assert_clean(app)
    for key, value in (("lab_crops", 20), ("lab_width", 8), ("lab_steps", 6), ("lab_batch", 16)):
        app.number_input(key=key).set_value(value)
    app.selectbox(key="lab_labels").select("random")
    app.button(key="lab_start").click().run()
    job = app.session_state["lab_job"]
    status = job.wait(timeout=600)
    assert status.state == "done", status.error
    app.run()
    assert_clean(app)
    assert any("saved" in s.value for s in app.success)
    assert status.run.config.labels == "random" and status.run.config.train.steps == 6
    app.radio(key="lab_mode").set_value("yours").run()
    assert_clean(app)
    assert app.selectbox(key="lab_run").options == [status.run.name]
    assert app.query_params["lab"] == "yours"


def test_a_running_job_can_be_cancelled_from_the_page(runs_dir) -> None:
    app = page_app(PAGE, lab="train")
    app.run()
    app.number_input(key="lab_crops").set_value(20)
    app.number_input(key="lab_steps").set_value(100_000)
    app.button(key="lab_start").click().run()
    app.button(key="lab_cancel").click().run()
    status = app.session_state["lab_job"].wait(timeout=600)
    assert status.state == "cancelled" and status.error is None


def test_the_command_line_shown_for_a_run_gives_back_its_configuration() -> None:
    configs = [RunSettings(), *(load_run(folder).config for folder in list_runs(SHIPPED_RUNS_DIR)),
               RunSettings(images="/data/my photos", max_images=50, crops_per_image=20, arch="small_resnet", width=7,
                         body_widths=(), first_kernel=7, labels="energy", label_component=2, alpha=2.5,
                         alpha_component=9, snapshots=3, train=TrainSettings(steps=123, batch_size=9, lr=0.3 / 7,
                                                                           momentum=0.9, weight_decay=1e-5,
                                                                           seed=11, freeze_first=True)),
               resolve_config(RunSettings(arch="timm:resnet10t"))]
    parser = build_parser()
    for config in configs:
        flags = cli_flags(config)
        assert config_from_args(parser.parse_args(["train", *shlex.split(flags)])) == config, flags
    assert cli_flags(RunSettings()) == ""  # defaults are left out
    flags = cli_flags(replace_settings(RunSettings(), {"labels": "random", "steps": 800}))
    assert flags == "--labels random --steps 800"


def test_a_run_shows_the_command_that_reproduces_it() -> None:
    app = page_app(PAGE, run="lab_vgg_random_s0")
    app.run()
    assert_clean(app)
    commands = [c.value for c in app.code]
    assert "python -m fl_core train --labels random --steps 800 --out runs/lab_vgg_random_s0" in commands

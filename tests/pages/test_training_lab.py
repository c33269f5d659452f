"""AppTest of the Training Lab page: shipped runs open instantly with the paper's table; a run trains live from the
form, can be cancelled, and is then listed under "Your runs"."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import time
from pathlib import Path

import pytest

from fl_core.channelaxes.claims import VERDICTS
from fl_core.cli import build_parser
from fl_core.cli.train import cli_flags, config_from_args
from fl_core.lab.runs import SHIPPED_RUNS_DIR, RunSettings, list_runs, load_run, resolve_config, session_runs_dir
from fl_core.lab.train import TrainSettings
from fl_core.settings import MAX_STEPS, replace_settings
from fl_ui import sessions
from fl_ui.testing import shown

from ..conftest import page_app
from .url_round_trip import assert_round_trip

PAGE = "views/training_lab.py"


def assert_clean(app) -> None:
    assert not app.exception, [e.value for e in app.exception]
    assert not app.error, [shown(e) for e in app.error]


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
    claims = app.table[-1].value  # a static table: its long texts wrap on a projector
    assert list(claims.columns)[:3] == ["claim", "verdict", "ours"]  # the verdict beside its claim, not off-screen
    measured = claims.set_index("claim")["ours"]
    assert (measured != "not run").sum() >= 10  # the shipped suite tests (nearly) every claim
    assert "0.99 (CIFAR10)" in claims.set_index("claim").loc["Profiles agree across seeds", "paper"]
    assert len(list(SHIPPED_RUNS_DIR.iterdir())) == len(app.selectbox(key="lab_run").options)


@pytest.mark.slow
def test_the_step_slider_shows_the_initialization_and_is_remembered_in_the_url() -> None:
    app = page_app(PAGE, run="lab_vgg_random_s0")
    app.run()
    slider = app.select_slider(key="lab_step_lab_vgg_random_s0")
    slider.set_value(0).run()
    assert_clean(app)
    assert app.query_params["step"] == "0" and app.query_params["run"] == "lab_vgg_random_s0"
    assert app.metric[2].value == "+1.000"  # at step 0 the profile is the initial one
    assert any("showing the raw profile" in shown(c) for c in app.caption)


@pytest.mark.slow
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
    assert any("saved" in shown(s) for s in app.success)
    assert status.run.config.labels == "random" and status.run.config.train.steps == 6
    app.radio(key="lab_mode").set_value("yours").run()
    assert_clean(app)
    assert app.selectbox(key="lab_run").options == [status.run.name]
    assert app.query_params["lab"] == "yours"


def test_a_running_job_can_be_cancelled_from_the_page(runs_dir) -> None:
    app = page_app(PAGE, lab="train")
    app.run()
    app.number_input(key="lab_crops").set_value(20)
    app.number_input(key="lab_steps").set_value(MAX_STEPS)
    app.button(key="lab_start").click().run()
    app.button(key="lab_cancel").click().run()
    status = app.session_state["lab_job"].wait(timeout=600)
    assert status.state == "cancelled" and status.error is None


@pytest.mark.slow
def test_after_cancel_the_bar_stops_at_the_step_reached_and_the_page_names_no_server_folder(runs_dir) -> None:
    app = page_app(PAGE, lab="train", run="lab_vgg_true_s0", step="400")  # the link of a shipped run's last step
    app.run()
    app.number_input(key="lab_crops").set_value(20)
    app.number_input(key="lab_steps").set_value(MAX_STEPS)
    app.button(key="lab_start").click().run()
    assert app.main.children[2].type != "form"  # the run's status comes before the form: in the first screen
    job, began = app.session_state["lab_job"], time.monotonic()
    while len(job.status().snapshots) < 2 and time.monotonic() - began < 600:  # some steps trained
        time.sleep(0.5)
    app.button(key="lab_cancel").click().run()
    status = app.session_state["lab_job"].wait(timeout=600)
    app.run()
    reached = status.run.history.steps[-1]
    assert status.state == "cancelled" and 0 < reached < MAX_STEPS
    [bar] = app.get("progress")
    assert bar.value == pytest.approx(reached / MAX_STEPS, abs=0.01) and f"step {reached} of {MAX_STEPS}" in bar.text
    texts = [shown(e) for kind in ("markdown", "caption", "warning", "success", "info", "code") for e in app.get(kind)]
    texts += [bar.text, *(str(v) for frame in app.dataframe for v in frame.value.to_numpy().ravel())]
    assert not [t for t in texts if "link's value" in t]
    assert not [t for t in texts if str(runs_dir) in t or re.search(r"[0-9a-f]{32}", t)]  # no folder, no session id
    assert not app.get("button") or not [b for b in app.get("button") if b.key == "lab_cancel"]


def test_a_run_over_the_memory_budget_is_refused_before_it_starts(runs_dir) -> None:
    app = page_app(PAGE, lab="train")
    app.run()
    app.number_input(key="lab_width").set_value(256)
    app.number_input(key="lab_batch").set_value(4096)
    app.button(key="lab_start").click().run()
    assert any("over the 1.0 GiB" in shown(e) and "FL_ANALYSIS_MEMORY_MB" in shown(e) for e in app.error)
    assert "lab_job" not in app.session_state and not list(runs_dir.iterdir())


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


@pytest.mark.slow
def test_a_run_shows_the_command_that_reproduces_it() -> None:
    app = page_app(PAGE, run="lab_vgg_random_s0")
    app.run()
    assert_clean(app)
    commands = [c.value for c in app.code]
    assert "python -m fl_core train --labels random --steps 800 --out runs/lab_vgg_random_s0" in commands


@pytest.mark.slow
def test_runs_belong_to_the_browser_and_a_link_shows_one_read_only(runs_dir, monkeypatch) -> None:
    """Ownership is never in a URL: a browser's tabs share its runs (its secret, an HttpOnly cookie on a served app),
    another browser given the link sees that one run and cannot train into, or list, the folder; a forged token is
    never a path."""
    secrets = {"alice": "a" * 43, "bob": "b" * 43, None: None}
    browser = {"now": "alice"}
    monkeypatch.setattr(sessions, "browser_secret", lambda: secrets[browser["now"]])

    def tab(who, **query):
        browser["now"] = who
        app = page_app(PAGE, **query)
        app.run()
        assert_clean(app)
        return app

    alice = tab("alice", lab="yours")
    mine = my_runs_folder(alice)
    assert runs_dir in mine.parents and mine.name not in secrets["alice"]  # named by a digest, never the secret
    shutil.copytree(SHIPPED_RUNS_DIR / "lab_vgg_true_s0", mine / "my_run")
    browser["now"] = "alice"
    alice.run()
    assert alice.selectbox(key="lab_run").options == ["lab_vgg_true_s0"]  # its name in run.json
    link = {"lab": "yours", "lab_runs": alice.query_params["lab_runs"], "run": "lab_vgg_true_s0"}
    again = tab("alice", lab="yours")  # another tab of hers, without the link: her runs
    assert my_runs_folder(again) == mine and again.selectbox(key="lab_run").options == ["lab_vgg_true_s0"]
    assert "lab_runs" not in tab("alice", lab="shipped").query_params  # only "Your runs" names the folder
    assert tab("alice", **link).selectbox(key="lab_run").options == ["lab_vgg_true_s0"]  # her own link: hers

    bob = tab("bob", **link)  # Alice's link, in Bob's browser
    assert my_runs_folder(bob) != mine  # he trains into, and lists, his own folder
    assert any("Run **lab_vgg_true_s0**, shared with a link" in shown(info) for info in bob.info)
    assert "lab_run" not in [box.key for box in bob.selectbox]  # no list of Alice's other runs
    assert any("Theory fit" in metric.label for metric in bob.metric)  # the run itself is shown
    bob.button(key="lab_my_runs").click()
    browser["now"] = "bob"
    bob.run()
    assert bob.query_params["lab_runs"] == my_runs_folder(bob).name and "run" not in bob.query_params
    assert any("No runs in this browser yet" in shown(info) for info in bob.info)
    assert tab("bob", lab="yours", lab_runs=mine.name).session_state["lab_runs"] != mine.name

    cookieless = tab(None, lab="yours", lab_runs="../../etc")  # a client without the cookie; a forged token
    assert runs_dir in my_runs_folder(cookieless).parents and my_runs_folder(cookieless) != mine


def my_runs_folder(app) -> Path:
    return session_runs_dir(app.session_state["lab_runs"])


def test_the_run_form_does_not_submit_on_enter_and_every_field_comes_back_from_the_url() -> None:
    query = {"lab": "train", "lab_images": "bundled", "lab_max_images": "5", "lab_crops": "20", "lab_arch": "timm",
             "lab_timm": "resnet10t", "lab_width": "8", "lab_kernel": "5", "lab_freeze": "1", "lab_labels": "energy",
             "lab_component": "3", "lab_alpha": "2.5", "lab_alpha_component": "4", "lab_seed": "7", "lab_steps": "6",
             "lab_batch": "16", "lab_lr": "0.05", "lab_momentum": "0.9", "lab_axes": "features.7",
             "lab_axes_bootstrap": "50"}
    app = page_app(PAGE, **query)
    app.run()
    assert_clean(app)
    [form] = [node for node in app.main if getattr(node, "type", "") == "form"]
    assert form.proto.form.enter_to_submit is False  # Enter in a field does not start a run
    widgets = {w.key: w.value for w in [*app.number_input, *app.selectbox, *app.checkbox, *app.text_input]
               if w.key in query}
    assert widgets == {"lab_images": "bundled", "lab_max_images": 5, "lab_crops": 20, "lab_arch": "timm",
                       "lab_timm": "resnet10t", "lab_width": 8, "lab_kernel": 5, "lab_freeze": True,
                       "lab_labels": "energy", "lab_component": 3, "lab_alpha": 2.5, "lab_alpha_component": 4,
                       "lab_seed": 7, "lab_steps": 6, "lab_batch": 16, "lab_lr": 0.05, "lab_momentum": 0.9,
                       "lab_axes": "features.7", "lab_axes_bootstrap": 50}
    for key, value in query.items():
        assert app.query_params[key] == value, key


@pytest.mark.slow
def test_the_claims_table_says_whether_each_measurement_agrees_with_the_paper_and_in_what_unit() -> None:
    app = page_app(PAGE, subtract="0", step="0", run="lab_vgg_true_s0")
    app.run()
    assert_clean(app)
    assert app.checkbox(key="lab_sub_lab_vgg_true_s0").value is False and app.query_params["subtract"] == "0"
    claims = app.table[-1].value.set_index("claim")
    assert set(claims["verdict"]) <= {"agrees", "differs", "not run"} and (claims["verdict"] == "agrees").sum() >= 5
    frozen = claims.loc["A frozen random first layer costs almost no accuracy"]
    assert frozen["ours"].endswith(" pp") and frozen["agrees when"] == "-5.00 … +5.00 pp"
    seeds = claims.loc["Profiles agree across seeds"]
    assert seeds["verdict"] == "agrees" and seeds["agrees when"] == "≥ 0.87"


@pytest.mark.slow
def test_a_link_restores_every_widget_of_a_shipped_run() -> None:
    again = assert_round_trip(PAGE, {"lab_run": "lab_vgg_random_s0", "lab_step_lab_vgg_random_s0": 129,
                                     "lab_sub_lab_vgg_random_s0": False}, fixed=frozenset({"lab_mode"}))
    assert again.query_params["run"] == "lab_vgg_random_s0" and again.query_params["step"] == "129"


@pytest.mark.slow
def test_a_run_that_followed_a_layer_trains_live_with_its_axes_and_shows_them(runs_dir) -> None:
    app = page_app(PAGE, lab="train")
    app.run()
    for key, value in (("lab_crops", 20), ("lab_width", 8), ("lab_steps", 4), ("lab_batch", 16),
                       ("lab_axes_bootstrap", 20)):
        app.number_input(key=key).set_value(value)
    app.text_input(key="lab_axes").input("features.7")
    app.button(key="lab_start").click().run()
    status = app.session_state["lab_job"].wait(timeout=600)
    assert status.state == "done", status.error
    assert status.axes is not None and status.axes.steps == status.run.steps
    app.run()
    assert_clean(app)
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in app.get("plotly_chart")]
    assert any("features.7 over training" in title for title in titles)
    assert any("claims, live" in shown(m) for m in app.markdown)
    claims = app.table[-1].value  # the two-axis paper's claims measured along the run
    assert [claim.split(".")[0] for claim in claims["claim"]] == ["1", "2", "5"]
    assert set(claims["verdict"]) <= set(VERDICTS) and "None" not in claims.to_string()

"""Training Lab: train small CNNs live and watch the first layer's energy profile approach the linear theory."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime

import pandas as pd
import streamlit as st

from fl_core.channelaxes.claims import CHANCE_ARI, EARLY_SHARE, NEAR_ORTHOGONAL, WEAK
from fl_core.channelaxes.plots import axes_over_training_figure, claims_table
from fl_core.cli.train import cli_flags
from fl_core.io.images import BUNDLED
from fl_core.io.sources import is_bundled
from fl_core.lab.claims import snapshot_trajectory
from fl_core.lab.plots import (
    claims_figure,
    claims_left_out,
    fit_over_steps_figure,
    run_correlation_figure,
    training_curves_figure,
    trajectory_figure,
)
from fl_core.lab.runs import SHIPPED_RUNS_DIR, Run
from fl_core.lab.settings import KERNELS, RunSettings
from fl_core.settings import replace_settings, settings_fields
from fl_ui.forms import setting_widget
from fl_ui.jobs import TrainingJob
from fl_ui.lab import (
    RUN_PARAM,
    RUNS_TOKEN,
    demo_name_of,
    get_claims,
    get_correlations,
    get_trajectory,
    linked_run,
    my_runs_dir,
    runs_in,
    session_token,
)
from fl_ui.messages import literal, show
from fl_ui.state import current_selection, encode_token, set_url_param, url_param, url_setting
from fl_ui.widgets import downloads, plot_with_explanation, table_with_download, user_errors

MODES = {"shipped": "📦 Shipped runs", "train": "🏋 Train a run", "yours": "🗂 Your runs"}
DEFAULT_RUN = "lab_vgg_true_s0"
FIELDS = {f.name: f for f in settings_fields(RunSettings)}
FIELDS["first_kernel"] = dataclasses.replace(FIELDS["first_kernel"], choices=KERNELS)  # the small nets' kernels

st.title("🧪 Training Lab")
st.markdown(
    "Chowers & Weiss claim that a CNN's **first layer** is shaped by the statistics of image patches and by "
    "gradient descent, not by the task: different seeds, widths, architectures and even **random labels** end up "
    "with nearly the same energy profile, which follows a closed-form linear-systems formula. Here you can watch it "
    "happen: browse the shipped runs (instant), or train your own on the bundled photos or an ImageFolder tree.")


ENERGY_PAGE = "views/energy_profiles.py"  # relative to the dashboard's main script (fl_ui/dashboard.py)


def select_only(token: str) -> None:
    """Before the rerun that opens Energy Profiles: the selection becomes this one model token (spec and its
    preprocessing), as a link with ``models=token`` opened it; the sidebar's picker is rebuilt from it."""
    st.session_state.pop("model_picker", None)
    st.query_params["models"] = token


def show_run(run: Run) -> None:
    """Trajectory animation, fit over steps, training curves and provenance of one run."""
    traj = get_trajectory(run)
    steps = [int(s) for s in traj.steps]
    if st.session_state.get("lab_shown_run", run.name) != run.name or st.query_params.get("run") != run.name:
        st.query_params.pop("step", None)  # a step of the run shown before, or of a run the link named: not this
    st.session_state["lab_shown_run"] = run.name  # one's (a run stopped at step 51 has no step 400)
    c1, c2 = st.columns([3, 1])
    step = c1.select_slider("Step", steps, value=url_param("step", steps[-1], choices=steps),
                            key=f"lab_step_{run.name}")
    set_url_param("step", step)
    moving = not run.config.train.freeze_first
    subtract = c2.checkbox("Subtract w₀", value=moving and url_param("subtract", True),
                           disabled=not moving, key=f"lab_sub_{run.name}",
                           help="Profile of w_t − w_0, the change since initialization (the authors' protocol); off: "
                                "the raw weights w_t.")
    if moving:
        set_url_param("subtract", subtract)
    index = steps.index(step)
    if subtract and step == 0:
        st.caption("At step 0 the layer is its initialization (w_t − w_0 = 0): showing the raw profile.")
        subtract = False
    elif not moving:
        st.caption("The first layer was frozen: it never leaves its initialization, so only raw profiles exist.")
    r, tau = (traj.r, traj.eta_t) if subtract else (traj.raw_r, traj.raw_eta_t)
    m = st.columns(4)
    m[0].metric("Theory fit r", f"{r[index]:.3f}")
    m[1].metric("Fitted ηt", f"{tau[index]:.3g}")
    m[2].metric("r vs initial", f"{traj.vs_init[index]:+.3f}",
                help="Pearson r between this profile and the initialization's.")
    m[3].metric("Accuracy (end)", f"{run.history.final_val_accuracy:.1%}",
                help=f"Validation accuracy at the end of training; chance: "
                     f"{run.provenance.get('chance_accuracy', float('nan')):.1%}.")
    plot_with_explanation(
        trajectory_figure(traj, subtract, start=index),
        "**The energy profile over training.** Each point is how strongly the first layer's filters respond to "
        "one principal component of image patches (left: smooth patterns with large variance λ; right: fine "
        "detail). The **dashed curve** is the linear theory e_i ∝ (1 − exp(−ηt·λ_i²))/λ_i, fitted with its one "
        "parameter ηt at every step. Early on it follows the patch spectrum (∝ λ); with more steps the largest "
        "components saturate and the profile flattens towards **whitening** (∝ 1/λ).\n\n"
        "Press ▶ to animate, or drag the slider. The dotted grey curve is the random initialization: flat, "
        "because random filters respond equally to every direction.",
        f"trajectory_{run.name}", frame=traj.to_frame(), result=traj,
        symbols=("e_i", "λ_i", "θ", "ηt", "r", "w_t − w_0"))
    plot_with_explanation(
        fit_over_steps_figure(traj),
        "**Does ηt grow with the steps?** The theory says the fitted time τ = ηt is proportional to the number "
        "of gradient steps. The blue curves show how well the theory fits (r), the red one the fitted ηt; the "
        "grey curve shows how much of the initial (random) profile is left in the raw weights.",
        f"fit_over_steps_{run.name}", frame=traj.steps_frame())
    history = pd.DataFrame({k: getattr(run.history, k) for k in ("steps", "train_loss", "train_accuracy",
                                                                 "val_loss", "val_accuracy")})
    plot_with_explanation(
        training_curves_figure([run]),
        "Loss and accuracy while training (dashed: running mean on the training batches; solid: the held-out "
        "validation crops, cut from a strip of each photo the training crops never touch). Random labels can only "
        "be memorized, so their validation accuracy stays at chance.",
        f"curves_{run.name}", frame=history)
    if run.channel_axes is not None:
        show_axes(run)
    with st.expander("Configuration, provenance and how to open this network elsewhere"):
        details = {**{f"config.{k}": v for k, v in run.config.to_dict().items()},
                   **{f"provenance.{k}": v for k, v in run.provenance.items() if not isinstance(v, list)}}
        table_with_download(pd.DataFrame({"field": list(details), "value": [str(v) for v in details.values()]}),
                            f"run_{run.name}")
        downloads(f"run_{run.name}", result=run)
        demo = demo_name_of(run)
        spec = run.weights_spec()
        if demo:
            st.markdown(f"Shipped as **`demo:{demo}`** (and `demo:{demo}_init`): pick it in the sidebar's model list.")
        elif spec is not None:  # a button, not a link: the checkpoint's server path is nowhere in the page's text
            token = encode_token(*spec)
            if st.button("Open it in Energy Profiles", key=f"lab_open_{run.name}", on_click=select_only, args=(token,)):
                st.switch_page(ENERGY_PAGE, query_params={"models": token})
            show(st.markdown, "Or download its checkpoint from *Your runs* and upload it with input size {}, crop {}, "
                 "mean {} and std {}.", run.input_config.input_size, f"{run.input_config.crop_pct:g}",
                 run.input_config.mean, run.input_config.std)
        else:
            st.caption("This run kept only its first-layer snapshots (no full checkpoints).")
        st.code(f"python -m fl_core train {cli_flags(run.config)} --out runs/{run.name}", language="bash")


AXES_EXPLANATION = (
    "**The two-axis paper's claims, live** (Safaai et al. 2026; the project's proposed definitions). At every "
    "snapshot the layer's channels are measured on the {n} validation crops: **input capture** I_X (how much input "
    "variance a filter passes) against **task information** I(ā;m) (how much its pooled activation tells about the "
    "logit margin). Left: their Spearman ρ (claim 1: strongly coupled at initialization, weakly aligned after "
    "training), the ARI of the groupings they induce (claim 2: near 0) and the share of channels whose task "
    "information beats its noise floor (permutation p < 0.05; when it is low, a ρ near 0 is partly noise). Right, "
    "claim 5: the cosine of the update of the layer's filters (−∇ loss) with the gradient of the total input capture "
    "and of the total task information; near 0 means training moves the filters in a direction that changes "
    "neither. Bars: 95 % bootstrap intervals over the images.")


TRAJECTORY_CLAIMS_EXPLANATION = (
    "**The two-axis paper's claims 1, 2 and 5 along this run.** Claim 1 holds when ρ starts coupled (step 0's "
    "interval above {weak}) and ends weak (the last interval inside ±{weak}); claim 2 when the last ARI's interval "
    "lies below {chance}; claim 5 when, after the first {early:.0f} % of the steps, both cosines' intervals lie inside "
    "±{near} at every snapshot. These thresholds are this project's proposal (the paper publishes none); every "
    "interval is a 95 % bootstrap over the {n} analysis images. A small network trained for a few hundred steps is not "
    "the paper's setting: a verdict here is about this run, not about networks in general.")


def show_axes(run: Run) -> None:
    """The followed layer's axes over training, with their table."""
    trajectory = run.channel_axes
    n = trajectory.snapshots[0].n_images if trajectory.snapshots else 0
    plot_with_explanation(axes_over_training_figure(trajectory), AXES_EXPLANATION.format(n=n),
                          f"channel_axes_{run.name}", frame=trajectory.to_frame(), data=trajectory.to_dict())
    st.caption(f"The same rows from the run's checkpoints: `python -m fl_core channels --model weights:RUN_DIR` "
               f"({trajectory.bootstrap} bootstrap resamples, seed {trajectory.seed}).")
    if trajectory.snapshots:
        claims = trajectory.claims()
        st.markdown(TRAJECTORY_CLAIMS_EXPLANATION.format(n=n, early=EARLY_SHARE * 100, near=NEAR_ORTHOGONAL, weak=WEAK,
                                                         chance=CHANCE_ARI))
        table_with_download(claims.to_frame(), f"axes_claims_{run.name}", shown=claims_table(claims), wrap=True,
                            data={"claims": claims.rows()})


def claims_for_screen(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims table in six columns that wrap on a 1024-px projector, the verdict beside the claim (the CSV keeps
    the sources, counts and the runs behind each value)."""
    matched = [f"{ours} ({verdict})" if isinstance(ours, str) and ours else "" for ours, verdict in
               zip(claims["ours at matched ηt (proposed)"], claims["verdict at matched ηt"])]
    return claims[["claim", "verdict", "ours", "agrees when", "paper"]].assign(**{"at matched ηt": matched})


def show_claims(runs: list[Run]) -> None:
    """The paper's claims on these runs, and their consistency matrix."""
    st.subheader("The paper's claims, measured on these runs")
    summary = get_claims(runs)
    st.caption("Pairs are found by configuration: two runs that differ in exactly one factor (seed, width, "
               "architecture, labels, frozen first layer; the number of steps aside). Paper values are for VGG11 on "
               "CIFAR10/CIFAR100/CelebA. *Matched ηt* (our proposal, not the paper's protocol) compares a pair at the "
               "same fitted training time: the theory says the profile depends on ηt only, so runs of different "
               "lengths are compared where they have trained equally far.")
    frame = summary.to_frame()
    st.caption("*verdict*: whether our value lies in the interval that agrees with the paper's claim (*agrees "
               "when*, our proposal). The pairs and runs behind each value are in the CSV and JSON.")
    table_with_download(frame, "training_lab_claims", shown=claims_for_screen(frame), wrap=True,
                        result=summary)
    left_out = claims_left_out(summary)
    plot_with_explanation(
        claims_figure(summary),
        "Our measurements (dots, mean ± sd over runs or pairs; triangles: pairs at matched ηt) next to the "
        "paper's CIFAR10 values (diamonds). "
        "High agreement across seeds, widths, architectures and labels, low agreement with the initialization and "
        "a good theory fit are the paper's qualitative table." + (
            f"\n\n**Not drawn** (every claim is in the table above): {literal('; '.join(left_out))}."
            if left_out else ""), "training_lab_claims_figure", symbols=("r", "ρ", "ηt"))
    corr = get_correlations(runs)
    plot_with_explanation(
        run_correlation_figure(corr),
        "Pearson correlation between the final profiles (w_T − w_0) of every pair of runs, measured in one patch "
        f"PCA ({corr.basis}). Paper: > 0.98 across seeds and widths, about 0.9 between true and random labels. "
        "A frozen first layer never moves, so it has no w_T − w_0 profile (blank row).",
        "training_lab_consistency", frame=corr.to_frame().reset_index(names="run"))


def browse(root, empty_message: str) -> None:
    runs = runs_in(root)
    if not runs:
        st.info(empty_message)
        return
    names = [run.name for run in runs]
    name = st.selectbox("Run", names, key="lab_run",
                        index=names.index(url_param("run", DEFAULT_RUN if DEFAULT_RUN in names else names[0],
                                                    choices=names)))
    set_url_param("run", name)
    show_run(runs[names.index(name)])
    show_claims(runs)


def show_own_runs() -> None:
    """Leave a shared run for this browser's own runs."""
    st.query_params[RUNS_TOKEN] = session_token()
    st.query_params.pop(RUN_PARAM, None)


def show_linked(run: Run) -> None:
    """A run another browser shared with a link, read-only: it trains into, and lists, runs of its own folder only."""
    show(st.info, "Run **{}**, shared with a link: you can look at it and download its data, not change it. The runs "
         "you train are saved in your own folder.", run.name)
    st.button("🗂 Show my runs", key="lab_my_runs", on_click=show_own_runs)
    show_run(run)


def config_form() -> RunSettings | None:
    """The run configuration form; returns a config when submitted."""
    selection = current_selection()
    values: dict = {}

    def field(name: str, label: str, container, key: str, value=None, **options) -> None:
        """A widget for the run setting ``name``, starting from (and written back to) the URL parameter ``key``."""
        setting = FIELDS[name]
        bounds = dataclasses.replace(setting, minimum=options.get("min_value", setting.minimum),
                                     maximum=options.get("max_value", setting.maximum))
        start = url_setting(key, bounds, setting.default if value is None else value)
        values[name] = setting_widget(setting, label, key=key, container=container, value=start, **options)
        set_url_param(key, values[name])

    with st.form("lab_form", enter_to_submit=False):
        st.markdown("**Data**")
        d1, d2, d3 = st.columns([2, 1, 1])
        sources = [BUNDLED] + ([] if is_bundled(selection.images) else [selection.images])
        values["images"] = d1.selectbox(
            "Images", sources, format_func=lambda s: "bundled photos (label = photo)" if is_bundled(s) else
            f"{s} (label = class folder)", key="lab_images",
            index=sources.index(url_param("lab_images", BUNDLED, choices=sources)),
            help="Pick a folder or ImageFolder tree in the sidebar to train on your own images.")
        set_url_param("lab_images", values["images"])
        field("max_images", "At most this many images (0 = all)", d2, "lab_max_images", value=0, min_value=0,
              max_value=100_000)
        field("crops_per_image", "Training crops per image (0 = auto)", d3, "lab_crops", value=0, min_value=0,
              max_value=5000)
        st.markdown("**Model**")
        m1, m2, m3 = st.columns(3)
        archs = ["small_vgg", "small_resnet", "timm"]
        arch = m1.selectbox("Architecture", archs, key="lab_arch", help=FIELDS["arch"].help,
                            index=archs.index(url_param("lab_arch", archs[0], choices=archs)))
        timm_name = m1.text_input("timm architecture", url_param("lab_timm", "resnet18"), key="lab_timm",
                                  help="Used with 'timm': random init, its own first layer, 32×32 input.")
        set_url_param("lab_arch", arch)
        set_url_param("lab_timm", timm_name)
        field("width", "First-layer width", m2, "lab_width", max_value=256)
        field("first_kernel", "First-layer kernel", m3, "lab_kernel")
        field("freeze_first", "Freeze the first layer", st, "lab_freeze")  # a row of its own: a checkbox's label
        # is cut at its column's width ("Freeze the…" in a quarter of the form)
        st.markdown("**Labels and input (App. D)**")
        v1, v2, v3, v4 = st.columns(4)
        field("labels", "Labels", v1, "lab_labels", format_func={
            "true": "true labels", "random": "random (a permutation)", "energy": "energy deciles (App. D.1)"}.get)
        field("label_component", "Energy component (App. D.1)", v2, "lab_component", max_value=147)
        field("alpha", "α (App. D.2; 1 = off)", v3, "lab_alpha", min_value=0.1, max_value=20.0, step=0.5)
        field("alpha_component", "Scaled component (App. D.2)", v4, "lab_alpha_component", max_value=147)
        st.markdown("**Plain SGD (the authors' optimizer)**")
        o1, o2, o3, o4, o5 = st.columns(5)
        field("seed", "Seed", o1, "lab_seed", min_value=0, max_value=10_000)
        field("steps", "Steps", o2, "lab_steps",
              help="The default 400 steps take about a minute on 2 idle cores (55 s measured) and up to 20 minutes "
                   "when a dozen processes share them (19.5 min measured at a load average of 13–24); random labels "
                   "need more steps (the shipped random-label runs use 2×).")
        field("batch_size", "Batch size", o3, "lab_batch", max_value=4096)
        field("lr", "Learning rate", o4, "lab_lr", min_value=1e-4, max_value=10.0, format="%.4f")
        field("momentum", "Momentum (0 = plain SGD)", o5, "lab_momentum", max_value=0.99)
        st.markdown("**A layer's channel axes over training (Safaai et al. 2026, claims 1, 2 and 5)**")
        a1, a2 = st.columns([2, 1])
        values["channel_axes"] = a1.text_input(
            "Follow the axes of this convolution (empty = none)", url_param("lab_axes", ""), key="lab_axes",
            help="A convolution of the network, e.g. features.7 (the small VGG's third): its ρ(I_X, I(ā;m)), ARI, "
                 "measurable task information and the claim-5 cosines are measured at every snapshot, on the "
                 "validation crops (a few seconds per snapshot).").strip() or None
        set_url_param("lab_axes", values["channel_axes"] or "")
        field("axes_bootstrap", "Bootstrap resamples of the axes", a2, "lab_axes_bootstrap", max_value=2000)
        if not st.form_submit_button("▶ Start training", type="primary", key="lab_start"):
            return None
    values["arch"] = f"timm:{timm_name.strip()}" if arch == "timm" else arch
    values["max_images"] = values["max_images"] or None
    values["crops_per_image"] = values["crops_per_image"] or None
    return replace_settings(RunSettings(), values)


def show_job(job: TrainingJob) -> None:
    """Live progress of the session's run (polled every second while it trains), with a cancel button."""

    @st.fragment(run_every=None if job.status().finished else 1.0)
    def live() -> None:
        status = job.status()
        st.progress(min(max(status.fraction, 0.0), 1.0), text=literal(f"{job.folder.name}: {status.message}"))
        if not status.finished:
            st.button("■ Cancel", key="lab_cancel", on_click=job.cancel,
                      help="Stop after the current step; what was trained so far is kept.")
        if not status.finished and status.pca is not None and len(status.snapshots) >= 2:
            traj = snapshot_trajectory(job.folder.name, status.snapshots, status.pca, status.reference_pca)
            st.plotly_chart(trajectory_figure(traj, not job.config.train.freeze_first), width="stretch",
                            key="lab_live_profile")
        if not status.finished and status.axes is not None and status.axes.snapshots:
            st.plotly_chart(axes_over_training_figure(status.axes), width="stretch", key="lab_live_axes")
        if status.state == "failed":
            show(st.error, "{}", status.error)
        elif status.finished and status.run is not None:
            show(st.success, "Run {} {}saved: validation accuracy {}. It is listed under “Your runs”.", status.run.name,
                 "stopped early and " if status.state == "cancelled" else "",
                 f"{status.run.history.final_val_accuracy:.1%}")
        if status.finished and st.session_state.get("lab_job_seen") != job.folder.name:
            st.session_state["lab_job_seen"] = job.folder.name
            st.rerun(scope="app")

    live()


def train_mode() -> None:
    top = st.container()  # the run's stage, progress and Cancel above the form: in the first screen at 1024×768
    config = config_form()
    if config is not None:
        job = st.session_state.get("lab_job")
        if job is not None and not job.status().finished:
            st.warning("Your previous run is still training: cancel it first.")
        else:
            folder = my_runs_dir() / f"{config.slug()}-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:4]}"
            st.session_state["lab_job"] = TrainingJob(config, folder, current_selection().device).start()
    job = st.session_state.get("lab_job")
    if job is not None:
        with top.container(border=True):
            show_job(job)
        status = job.status()
        if status.finished and status.run is not None:
            st.subheader("Your run")
            show_run(status.run)


with user_errors():
    mode_keys = list(MODES)
    mode = st.radio("Mode", mode_keys, format_func=MODES.get, horizontal=True, key="lab_mode",
                    index=mode_keys.index(url_param("lab", "shipped", choices=mode_keys)),
                    label_visibility="collapsed")
    set_url_param("lab", mode)
    shared = linked_run() if mode == "yours" else None
    if mode != "yours":  # a link names a runs folder only to show one of its runs
        st.query_params.pop(RUNS_TOKEN, None)
    elif shared is None:  # this browser's folder (no secret: it makes nobody else its owner)
        set_url_param(RUNS_TOKEN, my_runs_dir().name)
    if mode == "shipped":
        browse(SHIPPED_RUNS_DIR, "No shipped runs: build them with `python scripts/make_shipped_runs.py`.")
    elif shared is not None:
        show_linked(shared)
    elif mode == "yours":
        browse(my_runs_dir(), "No runs in this browser yet: train one under “Train a run”. Each browser has its own "
                              "folder on the server (under FL_RUNS_DIR), so others never see your runs unless you "
                              "send them a link to one.")
    else:
        train_mode()

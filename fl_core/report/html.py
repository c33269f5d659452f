"""The checkpoint report as ONE self-contained HTML file that opens offline.

plotly.js is inlined exactly once (one ``<script>`` from :func:`plotly.offline.get_plotlyjs`); every figure is drawn by
its result's ``plot()`` (the same call a notebook makes) and written as a ``fig.to_html(full_html=False,
include_plotlyjs=False, include_mathjax=False)`` fragment; styles are inline and nothing is fetched (no CDN, fonts
or MathJax). The report's ``to_dict()`` is embedded too (``<script type="application/json"
id="filterlens-report">``), so the file carries its own numbers.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from fl_core import __version__
from fl_core.families import report_sections
from fl_core.figures import standalone
from fl_core.firstlayer.whitening import REFERENCE_NAMES
from fl_core.masterkeys.plots import KEY_NAMES
from fl_core.report.build import FAMILY_SECTIONS, FIRST_LAYER_ONLY, PART_TITLES, SECTIONS, Report, scalar_rows

HOW_TO_READ = {
    "loaded": "The first table says which files were analysed: a weights-only file has no architecture, so only "
              "analyses of the weights apply, and the sha256 identifies the exact file. The second lists every "
              "convolution of the last checkpoint with its kind and says which sections used it and why the "
              "others did not.",
    **{name: family.how_to_read or family.summary for name, family in report_sections().items()},
    "trajectory": "The slider steps through the checkpoints in training order and shows each first-layer profile "
                  "against its own theory fit; the small multiples follow ηt, the fit r and whitening at a fixed "
                  "distance. The theory predicts ηt to grow with training and C(δ)/C(0) to fall below RGB as the "
                  "layer whitens.",
}
"""Two sentences per section for a student: what the figure shows and how to read it (a family's from its
registration, :mod:`fl_core.families`)."""

QUANTITY_LABELS = {
    "theory.eta_t": "fitted ηt (τ of the linear theory)",
    "theory.r": "theory fit: Pearson r between profile and theory",
    "theory.r_log": "theory fit on the log values: Pearson r of log e_i and log θ_i",
    "theory.affine.a": "affine map of the theory onto the profile, a + b·θ: offset a",
    "theory.affine.b": "affine map of the theory onto the profile, a + b·θ: slope b",
    "random_init.mean": "random-init banks: theory fit r, mean over seeds",
    "random_init.sd": "random-init banks: theory fit r, sd",
    "random_init.vs_profile_mean": "Pearson r between this profile and random-init profiles, mean",
    "random_init.vs_profile_sd": "Pearson r between this profile and random-init profiles, sd",
}
"""Readable names of the energy numbers; numbers the fit reports beyond these are shown under their keys."""

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:0 24px;
color:#222;line-height:1.45}
h1{margin-top:24px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:40px}
.how-to-read{background:#f3f6fa;border-left:4px solid #1f77b4;padding:8px 12px}
.skipped{background:#fff6e5;border-left:4px solid #ff7f0e;padding:8px 12px}
table{border-collapse:collapse;font-size:13px;margin:8px 0 16px}th,td{border:1px solid #ddd;padding:3px 6px;
text-align:left;vertical-align:top}td{white-space:nowrap}td.words{white-space:normal;min-width:16em}
th{background:#f5f5f5}.table-wrap{overflow-x:auto;max-height:520px;overflow-y:auto}
td:first-child{position:sticky;left:0;background:#fff}th:first-child{position:sticky;left:0;z-index:1}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
nav a{margin-right:12px}footer{color:#666;font-size:12px;margin:40px 0}
"""


def number(value: object) -> str:
    """How the report prints a value: 4 significant digits for floats, ``—`` for missing ones."""
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def figure_fragment(fig: go.Figure) -> str:
    """A figure (:func:`~fl_core.figures.standalone`) as an HTML fragment that uses the page's single plotly.js."""
    return standalone(fig).to_html(full_html=False, include_plotlyjs=False, include_mathjax=False, auto_play=False,
                       config={"displaylogo": False, "responsive": True})


HASH = re.compile(r"[0-9a-f]{40,64}")
"""A SHA-1 or SHA-256 in hex, shown shortened (:data:`HASH_SHOWN` digits) with the whole value on hover."""
HASH_SHOWN = 12


def cell_html(value: object) -> str:
    """One table cell: a word or number never broken (``features.1.conv.0.0``, ``0.06619``: a wide table scrolls),
    text of several words wrapped between them, a hash shortened with the full value on hover; escaped."""
    text = number(value)
    if HASH.fullmatch(text):
        return f'<td class="mono" title="{text}">{text[:HASH_SHOWN]}…</td>'
    words = ' class="words"' if " " in text.strip() else ""
    return f"<td{words}>{html.escape(text)}</td>"


def table_html(frame: pd.DataFrame) -> str:
    """A table with the report's number format (:func:`cell_html`), column names in words (``norm_mean`` → ``norm
    mean``) so that headers wrap between words; a table wider than the window scrolls sideways in its frame."""
    head = "".join(f"<th>{html.escape(str(column).replace('_', ' '))}</th>" for column in frame.columns)
    rows = "".join("<tr>" + "".join(cell_html(value) for value in row) + "</tr>"
                   for row in frame.itertuples(index=False, name=None))
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def quantities_table(data: Mapping, labels: Mapping[str, str] | None = None) -> str:
    labels = labels or {}
    rows = [{"quantity": labels.get(key, key), "value": value} for key, value in scalar_rows(data)]
    return table_html(pd.DataFrame(rows, columns=["quantity", "value"]))


def paragraph(text: str, css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    return f"<p{cls}>{html.escape(text)}</p>"


def _input_text(cfg: Mapping) -> str:
    return (f"{cfg['input_size']} px, crop {cfg['crop_pct']:g}, {cfg['interpolation']}, mean "
            f"{tuple(round(v, 4) for v in cfg['mean'])}, std {tuple(round(v, 4) for v in cfg['std'])}")


def _model_kind(entry: Mapping) -> str:
    if entry["weights_only"]:
        return "weights only (no architecture)"
    return "architecture, random init" if entry["random_init"] else "architecture + weights"


def loaded_section(report: Report) -> str:
    models = pd.DataFrame([{"checkpoint": m["label"], "spec": m["spec"], "what": _model_kind(m),
                            "parameters": f"{m['parameters']:,}", "input": _input_text(m["input_config"]),
                            "sha256": m["sha256"] or "—", "notes": "; ".join(m["notes"])} for m in report.models])
    skipped = "".join(f"<li><b>{html.escape(PART_TITLES[name])}</b>: {html.escape(reason)}</li>"
                      for name, reason in report.skipped.items())
    deeper = paragraph("Energy and whitening describe the first layer, as the paper does; the Energy Profiles page "
                       "(or the energy command's --layer option) extends the profile to a deeper layer, beyond the "
                       "paper.") if any(row["skipped"] == FIRST_LAYER_ONLY for row in report.layers) else ""
    return (table_html(models) + f"<h3>Convolutions of {html.escape(report.models[-1]['label'])}</h3>" + deeper
            + table_html(pd.DataFrame(list(report.layers))) + (f"<h3>Skipped sections</h3><ul>{skipped}</ul>"
                                                                if skipped else ""))


def energy_section(report: Report) -> str:
    energy = report.energy
    model = energy.models[0]
    summary = model.to_dict()
    numbers = {"theory": summary["theory"], "random_init": {k: v for k, v in summary["random_init"].items()
                                                            if k != "seeds"}}
    intro = (f"{model.n_filters} filters of {model.layer} on {energy.n_patches:,} patches from {energy.images}; "
             f"random-init band over {len(model.random_init.seeds)} seeds.")
    return (paragraph(intro) + quantities_table(numbers, QUANTITY_LABELS) + figure_fragment(energy.plot("profile"))
            + figure_fragment(energy.plot("spectrum")) + figure_fragment(model.plot("filters")))


def whitening_section(report: Report) -> str:
    whitening = report.whitening
    distance = min(report.settings.trajectory_distance, int(whitening.distances[-1]))
    values = pd.DataFrame([{"curve": REFERENCE_NAMES.get(name) or f"first layer: {whitening.labels.get(name, name)}",
                            f"C({distance})/C(0)": value} for name, value in whitening.at(distance).items()])
    return figure_fragment(whitening.plot("autocorrelation")) + table_html(values)


def masterkeys_section(report: Report) -> str:
    keys = report.masterkeys
    assignment = keys.published_assignment
    intro = (f"{keys.n_filters:,} {keys.kernel_size}×{keys.kernel_size} depthwise filters ({keys.n_constant} "
             f"constant), assigned to {assignment.templates}; {keys.k} clusters with mean |cos| {keys.objective:.3f} "
             "to their centroid.")
    counts = pd.DataFrame({"master key": list(KEY_NAMES), "filters": assignment.counts,
                           "mean |cos|": assignment.mean_abs_cosine})
    out = (paragraph(intro) + table_html(counts) + figure_fragment(keys.plot("stages"))
           + figure_fragment(keys.plot("centroids")))
    if report.scalespace is not None:
        out += (paragraph(f"Scale-space fit (method {report.scalespace.method}) of {report.scalespace.source}.")
                + table_html(report.scalespace.to_frame())
                + figure_fragment(report.scalespace.plot("sigma")))
    return out


def weights_section(report: Report) -> str:
    stats = report.weights
    totals = stats.totals
    intro = (f"{len(stats.layers)} convolutions: {totals['dead']} dead filters, {totals['duplicates']} duplicate "
             f"filters (peer R² ≥ {stats.duplicate_r2}), {totals['copies']} copies of a single peer, "
             f"{totals['non_finite']} non-finite weights. Duplicates are not reported (—) where a layer has at "
             "least as many peers as a filter has values: its peers then reconstruct any filter.")
    return paragraph(intro) + figure_fragment(stats.plot("norms")) + table_html(stats.to_frame())


def accuracy_section(report: Report) -> str:
    out = ""
    if report.accuracy is not None:
        acc = report.accuracy
        out += quantities_table({"images": acc.n_images, "images of the model's classes": acc.n_labelled,
                                 "top-1": acc.top1, "top-5": acc.top5, "loss (nats)": acc.loss, "classes": acc.classes})
        out += "".join(paragraph(warning, "skipped") for warning in acc.warnings)
    if report.channels is not None:
        channels = report.channels
        claims = channels.claims().to_frame()[["claim", "verdict", "measured", "ci_low", "ci_high", "paper", "why"]]
        out += (paragraph(f"Channel axes of {channels.layer} ({channels.data}).")
                + paragraph(channels.noise_floor_sentence()) + table_html(channels.summary_frame())
                + figure_fragment(channels.plot("axes"))
                + paragraph("The two-axis paper's claims measured on this one layer (95 % bootstrap intervals over "
                            "images; one layer of one network is a single data point):") + table_html(claims))
    return out


def trajectory_section(report: Report) -> str:
    traj = report.trajectory
    out = figure_fragment(traj.plot("profiles")) + figure_fragment(traj.plot("summary"))
    if traj.masterkey_counts is not None:
        out += figure_fragment(traj.plot("keys"))
    return out + table_html(traj.to_frame())


def family_section(report: Report, name: str) -> str:
    """A registered family's section (:data:`~fl_core.report.build.FAMILY_SECTIONS`): every figure its result draws
    (:meth:`~fl_core.results.Result.plot_kinds`), then its table (``to_frame()``)."""
    result = getattr(report, name)
    return "".join(figure_fragment(result.plot(kind)) for kind in result.plot_kinds()) + table_html(result.to_frame())


SECTION_BODIES = {"loaded": loaded_section, "energy": energy_section, "whitening": whitening_section,
                  "masterkeys": masterkeys_section, "weights": weights_section, "accuracy": accuracy_section,
                  **{name: functools.partial(family_section, name=name) for name in FAMILY_SECTIONS},
                  "trajectory": trajectory_section}


def _present(report: Report, name: str) -> bool:
    if name == "loaded":
        return True
    if name == "accuracy":
        return report.accuracy is not None or report.channels is not None
    return getattr(report, name) is not None


def skip_note(report: Report, name: str) -> str:
    """Why a section (or, in the accuracy section, the channel axes) was skipped."""
    if name in report.skipped:
        return paragraph(f"Skipped: {report.skipped[name]}", "skipped")
    if name == "accuracy" and "channels" in report.skipped:
        return paragraph(f"Channel axes skipped: {report.skipped['channels']}", "skipped")
    return ""


def section_html(report: Report, name: str) -> str:
    """One ``<section>``: title, how to read it, then its figures and tables or the reason it was skipped."""
    body = SECTION_BODIES[name](report) if _present(report, name) else ""
    body = skip_note(report, name) + body
    return (f'<section id="{name}"><h2>{html.escape(SECTIONS[name])}</h2>'
            f'{paragraph(HOW_TO_READ[name], "how-to-read")}{body}</section>')


def report_html(report: Report) -> str:
    """The whole report as one self-contained HTML document (module docstring).

    Args:
        report: what :func:`~fl_core.report.build.build_report` returned.
    """
    title = f"FilterLens report: {report.models[-1]['label']}"
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    nav = "".join(f'<a href="#{name}">{html.escape(heading)}</a>' for name, heading in SECTIONS.items())
    data = json.dumps(report.to_dict(), allow_nan=False).replace("</", "<\\/")
    timings = ", ".join(f"{PART_TITLES[k].lower()} {v:.1f} s" for k, v in report.timings.items())
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style>'
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f"<h1>{html.escape(title)}</h1>"
            + paragraph(f"{len(report.models)} checkpoint(s); images: {report.images}. Generated {generated} by "
                        f"FilterLens {__version__}.")
            + f"<nav>{nav}</nav>" + "".join(section_html(report, name) for name in SECTIONS)
            + f"<footer>Computed in: {html.escape(timings)}.</footer>"
            f'<script type="application/json" id="filterlens-report">{data}</script></body></html>')

"""What the symbols on the pages mean, in words, once for every page: :func:`explain_symbols` writes the ones a page
shows in a "What the symbols mean" expander beside its figures, so a projector shows them (a ``?`` tooltip only adds
detail). The definitions with their formulas are in docs/methods.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

SYMBOLS: dict[str, str] = {
    # first layer
    "e_i": "the energy profile at principal component i: how strongly the first-layer filters respond to the i-th "
           "principal component of image patches (root mean square of their projections, the largest scaled to 1)",
    "λ_i": "the spread (standard deviation) of the image patches along principal component i, the patch spectrum: "
           "component 1 has the largest, the smoothest pattern; the last ones are fine detail",
    "θ": "the linear-systems theory's profile, θ_i ∝ (1 − exp(−ηt·λ_i²)) / λ_i, for a first layer trained by "
         "gradient descent from small random weights",
    "a + b·θ": "the dashed curve: the theory mapped onto the measured profile by the best offset a and slope b "
               "(least squares), e.g. “0.05 + 0.70·θ”",
    "ηt": "the theory's one parameter: the learning rate η times the training time t; small early in training (the "
          "profile follows λ), large late (it flattens towards whitening, ∝ 1/λ)",
    "r": "Pearson correlation of two curves: 1 = the same shape up to scale and offset, 0 = unrelated",
    "r on logs": "the same correlation of the logarithms: every component counts alike, not only the large ones",
    "w_t − w_0": "the first layer's weights at step t minus its initial weights: what training changed",
    "C(δ)/C(0)": "how correlated the first layer's responses are at two positions δ pixels apart, relative to the "
                 "same position (1 = as alike as can be, 0 = unrelated)",
    "ZCA": "zero-phase component analysis: the whitening bank W = UΛ⁻¹Uᵀ built from the patch statistics (U: the "
           "principal directions, Λ: their spreads λ_i), which decorrelates the image perfectly; the ideal a trained "
           "layer is compared with",
    # channel axes
    "I_X": "input capture: how much of the variance of the layer's input a channel's filter picks up, relative to "
           "the layer's average (1 = like a random direction, above 1 = a direction the input varies in a lot)",
    "R̄_X": "peer overlap: the mean absolute correlation of a channel with the other channels of its layer (0 = "
           "alone, 1 = a copy of its peers)",
    "peer R²": "how well the channel's most correlated neighbours reconstruct it by linear regression, on held-out "
               "images (1 = perfectly, so removable)",
    "I(ā;m)": "task information: how much a channel's average activation ā over an image tells about the "
              "network's margin m for the right class (mutual information, in nats)",
    "TE": "target excess: what the channel tells about the margin m beyond what its closest peers already tell "
          "(nats; 0 = nothing new)",
    "nats": "units of information with the natural logarithm (1 nat = 1.44 bits)",
    "Δloss": "how much the cross-entropy on held-out images rises when the channel is removed (replaced by its "
             "average: a lesion) or replaced by its peers' reconstruction",
    "ρ": "Spearman rank correlation: do two numbers rank the channels in the same order (1 = the same order, 0 = "
         "unrelated, −1 = reversed)",
    "ARI": "adjusted Rand index: how much two groupings of the channels agree (1 = the same groups, 0 = no more "
           "than chance)",
    "AUC": "area under the pruning curve: the accuracy averaged over the range of channels removed (higher = the "
           "criterion removed the safer channels first)",
    "fold": "folding: writing a change of one layer's output into the weights of the layers that read it, so "
            "nothing extra is computed (exact for a per-channel constant, not where zero padding enters)",
    # master keys, scale space and swaps
    "|cos|": "the absolute cosine similarity of two filters read as vectors: 1 = the same shape up to sign and "
             "scale, 0 = unrelated",
    "k": "the number of clusters k-means looks for among the filters (each cluster's centre is then compared with "
         "the master keys)",
    "T": "the discrete Gaussian kernel: the scale-space smoothing of width σ",
    "σ": "the width (scale) of an idealized model's Gaussian, in pixels",
    "δx, δy": "differences along x or y: centred (δx, δy) or half a pixel forward or back (δx±, δy±)",
    "α∇²": "α times the Laplacian (the sum of second differences along x and y): key 7 is (δ − α∇²) T",
    "‖W − Ŵ‖/‖W‖": "relative reconstruction error: how far the replaced filters Ŵ are from the learned W (0 = "
                   "unchanged, about 1.4 for random filters of the same length)",
    "KL": "Kullback–Leibler divergence of the swapped network's output probabilities from the original's, in nats "
          "(0 = the same outputs)",
    "a·x + b": "a replacement keeps each filter's sign, scale a and offset b and changes only its shape x",
}
"""Every symbol a page shows, in words a student reads beside the figure."""


def explain_symbols(symbols: Sequence[str], container: Any = st, expanded: bool = False) -> None:
    """A "What the symbols mean" expander (in ``container``) listing ``symbols`` with their :data:`SYMBOLS` text."""
    with container.expander("What the symbols mean", expanded=expanded):
        st.markdown("\n".join(f"- **{symbol}**: {SYMBOLS[symbol]}" for symbol in symbols))

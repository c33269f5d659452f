"""Every symbol a page shows is explained in visible text on that page (the "What the symbols mean" expander of
fl_ui.glossary), not only in a ``?`` tooltip that a projector never shows."""

from __future__ import annotations

import pytest

from fl_ui.glossary import SYMBOLS
from fl_ui.testing import page_app, shown

from ..conftest import TINY_MODELS

PAGES = {  # page: the symbols its figures, metrics and tables show
    "views/home.py": ("θ", "ηt", "e_i", "λ_i", "ZCA", "C(δ)/C(0)"),
    "views/energy_profiles.py": ("θ", "ηt", "e_i", "λ_i", "r on logs"),
    "views/whitening.py": ("ZCA", "C(δ)/C(0)"),
    "views/channel_axes.py": ("ARI", "I(ā;m)", "TE", "R̄_X", "I_X", "ρ", "fold"),
}


def explained(app) -> str:
    """The text of the page's "What the symbols mean" expanders."""
    return " ".join(shown(m) for e in app.expander if e.label == "What the symbols mean" for m in e.markdown)


def test_every_symbol_has_words() -> None:
    assert all(len(text) > 40 for text in SYMBOLS.values())


@pytest.mark.slow
@pytest.mark.parametrize("page", list(PAGES))
def test_the_symbols_of_a_page_are_explained_on_it(page: str) -> None:
    app = page_app(page, models=TINY_MODELS, axes_ncal="64", axes_neval="32").run()
    assert not app.exception, [e.value for e in app.exception]
    text = explained(app)
    for symbol in PAGES[page]:
        assert f"**{symbol}**: {SYMBOLS[symbol]}" in text, (page, symbol)

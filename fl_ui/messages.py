"""Messages on the page that show user text literally.

Streamlit renders the body of ``st.error``, ``st.warning``, ``st.info``, ``st.success``, ``st.caption`` and
``st.markdown`` as Markdown: HTML is escaped, Markdown is not. A model spec, a path, a layer name or a URL value
holding ``![t](http://host/t.png) [Log in again](http://host/login)`` would make the browser fetch the image and show
a link on the lab's own page. So every message that can carry text from a user (typed, in a link, a file's or a
layer's name, an error that quotes one) is drawn by :func:`show`: its template is the page's own Markdown, and each
value put into it is escaped by :func:`literal`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fl_core.settings import printable

MARKDOWN_SPECIALS = re.compile(r"([!-/:-@\[-`{-~])")
"""Every ASCII punctuation character: CommonMark lets a backslash escape each of them, and between them they start
every Markdown construct (links, images, emphasis, code, headings, lists, tables, ``<autolinks>``, character
references), LaTeX (``$``) and Streamlit's ``:shortcode:``, ``:material/icon:`` and ``:color[text]``."""
AUTOLINK_STARTS = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)
"""Where GitHub-flavoured Markdown turns plain text into a link: ``http://``, ``www.`` and ``name@host``. Streamlit
finds these in the text *after* escapes are resolved, so escaping cannot stop them: a :data:`WORD_JOINER` goes there."""
WORD_JOINER = "\u2060"
"""An invisible character that breaks an autolink's pattern without changing what the text looks like."""


def literal(value: object) -> str:
    """``value``'s text as Markdown that renders as exactly that text: every :data:`MARKDOWN_SPECIALS` character
    backslash-escaped, a :data:`WORD_JOINER` where a bare URL or e-mail address would become a link
    (:data:`AUTOLINK_STARTS`), undecodable bytes of a file name shown as U+FFFD."""
    return MARKDOWN_SPECIALS.sub(r"\\\1", AUTOLINK_STARTS.sub(WORD_JOINER, printable(str(value))))


def show(element: Callable[..., Any], template: str, *values: object, **options: Any) -> Any:
    """Draw ``element`` (``st.error``, ``st.caption``, a container's ``.info``, ...) with ``template``, the page's own
    Markdown, each ``{}`` in it filled with a value shown literally (:func:`literal`); ``options`` go to the element.

    ``show(st.error, "{}", err)`` shows an error message as it is; ``show(st.info, "**{}** is weights-only.",
    loaded.label)`` keeps the page's bold around the model's name.
    """
    return element(template.format(*map(literal, values)), **options)

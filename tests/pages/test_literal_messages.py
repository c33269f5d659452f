"""User text is never rendered as Markdown: a link's value, a typed name or path, and every message that echoes one
(errors, URL notices, captions) show Markdown that would fetch an image and draw a "Log in again" link as the literal
text it is (:func:`fl_ui.messages.show`). Checked on every element whose body Streamlit renders as Markdown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fl_ui.testing import ESCAPED, page_app, shown

from ..conftest import REPO

HOSTILE = "![t](http://127.0.0.1:9/t.png) [Log in again](http://127.0.0.1:9/login)"
"""An image an outside server would be asked for, and a link to it, as Markdown."""
ECHO = "![t](http://127.0.0.1:9/t.png)"
"""What every message that echoes the value shows (URL notices cut it after 40 characters)."""
MARKDOWN_ELEMENTS = ("markdown", "caption", "error", "warning", "info", "success", "toast")
LIVE_MARKUP = re.compile(r"(?<!\\)\]\(|(?<!\\)<|(?<![\\/])127\.0\.0\.1:9")
"""Unescaped link or image markup (``](``), an autolink (``<``) or the outside address unescaped."""
BARE_LINK = re.compile(r"https?://|www\.|\w@\w", re.IGNORECASE)
"""What GitHub-flavoured Markdown links in the text once escapes are resolved."""

DOORS = {
    "images": ("views/home.py", {"images": HOSTILE}),
    "models=weights:": ("views/home.py", {"models": f"weights:{HOSTILE}"}),
    "models=timm:": ("views/home.py", {"models": f"timm:{HOSTILE}"}),
    "models=demo:": ("views/home.py", {"models": f"demo:{HOSTILE}"}),
    "device": ("views/home.py", {"models": "demo:tiny_vgg", "device": HOSTILE}),
    "report_dir": ("views/report.py", {"models": "demo:tiny_vgg", "report_dir": HOSTILE}),
    "energy seeds": ("views/energy_profiles.py", {"models": "demo:tiny_vgg", "energy_seeds": HOSTILE}),
    "energy layer": ("views/energy_profiles.py", {"models": "demo:tiny_vgg", "layer": HOSTILE}),
}


@pytest.fixture
def one_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A server with one data root (the markdown also goes through the path policy's refusals)."""
    monkeypatch.setenv("FL_DATA_ROOTS", str(tmp_path / "data"))
    monkeypatch.setenv("FL_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.chdir(REPO)
    return tmp_path / "data"


def live_markup(app) -> list[str]:
    """The bodies of the app's Markdown elements that hold live link or image markup."""
    bodies = [str(element.value) for kind in MARKDOWN_ELEMENTS for element in app.get(kind)]
    return [body for body in bodies if LIVE_MARKUP.search(body) or BARE_LINK.search(ESCAPED.sub(r"\1", body))]


def echoed(app) -> bool:
    return any(ECHO in shown(element) for kind in MARKDOWN_ELEMENTS for element in app.get(kind))


@pytest.mark.slow
@pytest.mark.parametrize("door", DOORS)
def test_markdown_in_a_link_value_is_shown_literally(one_data_root: Path, door: str) -> None:
    page, query = DOORS[door]
    app = page_app(page, **query).run()
    assert not app.exception, [e.value for e in app.exception]
    assert echoed(app), f"{door}: no message names the value"
    assert not live_markup(app)


@pytest.mark.slow
def test_markdown_typed_into_forms_is_shown_literally(one_data_root: Path) -> None:
    app = page_app("views/survey.py", models="demo:tiny_vgg").run()
    app.text_input(key="reg_name").input(HOSTILE)
    app.button(key="reg_add").click().run()
    assert echoed(app) and not live_markup(app)
    app.text_area(key="survey_models").input(f"weights:{HOSTILE}").run()
    assert echoed(app) and not live_markup(app)
    app.radio(key="img_choice").set_value("folder on the server").run()
    app.text_input(key="img_folder").input(HOSTILE).run()
    assert echoed(app) and not live_markup(app)


def test_literal_escapes_every_markdown_special_and_nothing_else() -> None:
    from fl_ui.messages import literal, show

    assert literal("plain words 42") == "plain words 42"
    assert literal("a_b*c`d$e:f[g](h)<i>&j|k~l#m") == r"a\_b\*c\`d\$e\:f\[g\]\(h\)\<i\>\&j\|k\~l\#m"
    assert literal("https://x www.y z@w") == "https\\:\u2060\\/\\/x www\u2060\\.y z\\@\u2060w"
    assert show(lambda body: body, "**{}** and {}", "[x](y)", 3) == r"**\[x\]\(y\)** and 3"

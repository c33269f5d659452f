"""The URL is untrusted input: typed page parameters fall back to their default with a notice naming them."""

from __future__ import annotations

import pytest

from fl_core.masterkeys.clustering import MasterKeySettings
from fl_core.settings import MAX_TEXT_LENGTH, parse_setting, settings_fields
from fl_ui.testing import page_app, shown

from .test_masterkeys import assert_clean

FIELDS = {f.name: f for f in settings_fields(MasterKeySettings)}


@pytest.mark.parametrize(("text", "reason"), [("abc", "must be an integer"), ("1e9", "must be an integer"),
                                              ("-3", "at least"),
                                              ("7\x00", "NUL"), ("9" * (MAX_TEXT_LENGTH + 1), "longer than")])
def test_a_setting_from_text_is_checked_like_the_command_line(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_setting(FIELDS["restarts"], text)
    assert parse_setting(FIELDS["restarts"], " 12 ") == 12


def test_booleans_tuples_and_optional_values_read_back_from_their_url_text() -> None:
    from fl_core.channelaxes.analysis import ChannelSettings

    fields = {f.name: f for f in settings_fields(ChannelSettings)}
    assert parse_setting(fields["lesion_kinds"], "mean,replace") == ("mean", "replace")
    with pytest.raises(ValueError, match="must be one of"):
        parse_setting(fields["lesion_kinds"], "mean,<script>")


@pytest.mark.slow
def test_an_invalid_url_value_falls_back_to_the_default_with_a_notice_and_a_valid_one_is_kept() -> None:
    app = page_app("views/master_keys.py", k="lots", sweep="maybe")
    app.run()
    assert_clean(app)
    assert app.slider[0].value == MasterKeySettings.k and app.checkbox[0].value is False
    notices = " ".join(shown(w) for w in app.warning)
    assert "'k'" in notices and "'lots'" in notices and "'sweep'" in notices
    assert app.query_params["k"] == str(MasterKeySettings.k)  # the URL now says what is shown
    app.run()  # said once, not on every rerun
    assert not any("'k'" in shown(w) for w in app.warning)

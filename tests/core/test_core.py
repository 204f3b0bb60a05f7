"""recon_core's small pieces: the atomic write, JSON values, the option checks, progress, page pieces."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from recon_core import htmlpage, progress
from recon_core.errors import ReconError, require_at_least, require_positive
from recon_core.files import write_atomically
from recon_core.headline import NOT_FOR_PUBLICATION, Headline, percent
from recon_core.jsonio import jsonable

HEADLINE = Headline(
    "Not as it is: <N> leaks.", "recovered", (("What it reveals", ("N.",)), ("What to do", ("a", "b")))
)


def test_write_atomically_replaces_the_file_whole(tmp_path):
    path = tmp_path / "deeper" / "state.pt"
    assert write_atomically(path, lambda temporary: temporary.write_text("first")) == path
    write_atomically(path, lambda temporary: temporary.write_text("second"))
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.pt"]  # no temporary left


def test_write_atomically_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "state.pt"
    write_atomically(path, lambda temporary: temporary.write_text("whole"))

    def half_then_fail(temporary):
        temporary.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, half_then_fail)
    assert path.read_text() == "whole"


def test_jsonable_gives_plain_json_types():
    value = {"a": np.arange(3), 1: (np.float32(0.5), np.bool_(True)), "bad": [math.nan, -math.inf], "n": None}
    plain = jsonable(value)
    assert plain == {"a": [0, 1, 2], "1": [0.5, True], "bad": [None, None], "n": None}
    assert json.loads(json.dumps(plain)) == plain


def test_option_checks_name_the_flag_and_are_the_one_error_type():
    assert issubclass(ReconError, ValueError)
    with pytest.raises(ReconError, match="--max-steps must be at least 1, got 0"):
        require_at_least(1, max_steps=0)
    with pytest.raises(ReconError, match="--lr must be a finite number, got nan"):
        require_positive(lr=math.nan)
    with pytest.raises(ReconError, match="--lr must be above 0"):
        require_positive(lr=0.0)
    require_at_least(0, seeds=0)
    require_positive(lr=1e-3)


def test_progress_is_silent_unless_turned_on(capsys):
    assert list(progress.progress(range(3), 3, "steps")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_page_pieces_escape_their_text():
    table = htmlpage.table(["name", "<b>"], [["a&b", 1]])
    assert "&lt;b&gt;" in table and "a&amp;b" in table
    page = htmlpage.page("t<itle>", HEADLINE, [table])
    assert page.startswith("<!DOCTYPE html>") and "<title>t&lt;itle&gt;</title>" in page


def test_page_opens_with_the_verdict_block(verdict_first):
    page = htmlpage.page("audit", HEADLINE, ["<h2>Details</h2>", htmlpage.table(("a",), [[1]])])
    verdict_first(page)
    assert "<section id='verdict' class='recovered'>" in page and "Not as it is: &lt;N&gt; leaks." in page
    assert "<li>a</li><li>b</li>" in page and "<dd>N.</dd>" in page  # one sentence bare, several a list


def test_headline_text_answers_first_and_warns_last():
    lines = HEADLINE.text(width=60).splitlines()
    assert lines[0] == "VERDICT: Not as it is: <N> leaks."
    assert lines[1:5] == ["  What it reveals:", "  - N.", "  What to do:", "  - a"]
    assert " ".join(lines).endswith(f"({NOT_FOR_PUBLICATION})")
    assert [percent(x) for x in (0.0123, 0.47, 2.36, 0, 1e-9)] == [
        "1.2\u00a0%", "47\u00a0%", "236\u00a0%", "0\u00a0%", "under 0.01\u00a0%"
    ]  # fmt: skip


def test_table_colours_cells_by_verdict():
    row = ["x", htmlpage.Cell("0.01", "recovered"), htmlpage.Cell("<b>", "not")]
    assert htmlpage.table(("",), [row]) == (
        "<table><tr><td>x</td><td class='recovered'>0.01</td><td class='not'>&lt;b&gt;</td></tr></table>"
    )

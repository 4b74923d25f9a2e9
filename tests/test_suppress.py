"""Suppression comments (`# skel: ignore[SK001] reason`) as `skel mine` and `skel catalog prompt` honour them,
and the comment parser on its own (forms, scopes, what is not a suppression)."""
from __future__ import annotations

import textwrap

from skel.skeletons.library import load_library
from skel.pipeline.prompt import build_brief, render_markdown
from skel.miner import suppress
from skel.miner.mine import mine

NORM = textwrap.dedent("""\
    import triton
    import triton.language as tl


    @triton.jit
    def norm_kernel(x, y, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        b = tl.load(x + i * D + o).to(tl.float32)
        b = b / tl.sqrt(tl.sum(b * b) + 1e-6){comment}
        tl.store(y + i * D + o, b)
    """)


def test_forms_and_scopes():
    text = textwrap.dedent("""\
        x = 1  # skel: ignore[SK001] reason one
        # skel: ignore[sk002, SK01*] - reason two

        y = 2
        z = 3  # noqa: SK003, E501
        s = "# skel: ignore[SK004] inside a string"
        # skel: SK005 opportunity
        # skel: ignore-file[SK006]
        w = 4  # skel: ignore
        v = 5  # skel: ignore[]
        """)
    got = suppress.parse(text)
    rows = [(s.line, s.target, s.codes, s.reason) for s in got.items]
    assert rows == [
        (1, 1, ("SK001",), "reason one"),
        (2, 4, ("SK002", "SK01*"), "reason two"),  # alone on its line: covers the next code line
        (5, 5, ("SK003",), "E501"),  # noqa's other codes are left as they are
        (8, 0, ("SK006",), ""),  # file scope
        (9, 9, (), ""),  # every skeleton
    ]
    assert [line for line, _ in got.problems] == [10]  # `ignore[]` names nothing: a problem, not "all"
    assert got.find("SK001", (1,)) and not got.find("SK001", (4,))
    assert got.find("SK013", (4,)) and not got.find("SK003", (4,))
    assert got.find("SK006", (123,)) and got.find("SK999", (9,))
    assert got.find("SK001", (1, 4)) is None  # a finding at two sites is silenced only when both are covered
    assert got.uncovered("SK001", (1, 4)) == (4,)


def test_mine_drops_suppressed_opportunities_keeps_the_rest(tmp_path):
    plain, silenced = tmp_path / "plain", tmp_path / "silenced"
    plain.mkdir(), silenced.mkdir()
    (plain / "k.py").write_text(NORM.format(comment=""))
    (silenced / "k.py").write_text(NORM.format(comment="  # skel: ignore[SK001] bit-exact with the paper"))
    a = mine([str(plain)], catalog=tmp_path / "a.sqlite")
    b = mine([str(silenced)], catalog=tmp_path / "b.sqlite")
    assert ("SK001", 10) in {(f.skeleton, f.line) for f in a.opportunities}
    assert "SK001" not in {f.skeleton for f in b.opportunities}
    assert {f.skeleton for f in a.opportunities} - {"SK001"} == {f.skeleton for f in b.opportunities}
    assert "an opportunity:" in b.summary() and "an instance:" in b.summary()


def test_prompt_lists_suppressed_skeletons_apart(tmp_path):
    f = tmp_path / "k.py"
    f.write_text(NORM.format(comment="  # skel: ignore[SK001] bit-exact with the paper"))
    brief = build_brief(str(f), load_library(), tmp_path / "none.sqlite")
    assert "SK001" not in [s.code for s in brief.applicable]
    assert "SK001" not in [n.code for n in brief.not_applicable]
    (line,) = [s for s in brief.suppressed if s.startswith("SK001")]
    assert "line 10" in line and "bit-exact with the paper" in line
    assert "## Suppressed in the source" in render_markdown(brief)
    f.write_text(NORM.format(comment=""))
    assert "SK001" in [s.code for s in build_brief(str(f), load_library(), tmp_path / "none.sqlite").applicable]

"""Conventions every verb keeps: --catalog everywhere, [tool.skel] defaults (catalog, shapes, dtype) filled in
under the flags, unknown [tool.skel] keys refused."""
from __future__ import annotations

import argparse

import pytest

from skel.cli import _project_defaults, build_parser, main


def leaf_parsers(parser: argparse.ArgumentParser, prefix=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for action in subs:
        seen = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias (import/merge) is the same parser
                continue
            seen.add(id(sub))
            yield from leaf_parsers(sub, (*prefix, name))


def test_every_verb_takes_catalog():
    verbs = list(leaf_parsers(build_parser()))
    assert len(verbs) >= 15
    missing = [" ".join(v) for v, p in verbs if not any("--catalog" in a.option_strings for a in p._actions)]
    assert not missing, f"verbs without --catalog: {missing}"


def test_every_verb_takes_json():
    missing = [" ".join(v) for v, p in leaf_parsers(build_parser())
               if not any("--json" in a.option_strings for a in p._actions)]
    assert not missing, f"verbs without --json: {missing}"


def test_tool_skel_fills_what_the_flags_left(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.skel]\ncatalog = ".skel/cat.sqlite"\nshapes = "decode"\n'
                                             'dtype = "bfloat16"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKEL_CATALOG", raising=False)
    parser = build_parser()
    args = parser.parse_args(["validate", "kda_decode", "cand.py"])
    _project_defaults(args)
    assert args.catalog == (tmp_path / ".skel" / "cat.sqlite").resolve()
    assert (args.shapes, args.dtype) == ("decode", "bfloat16")
    args = parser.parse_args(["validate", "kda_decode", "cand.py", "--catalog", "x.sqlite", "--shapes", "ci"])
    _project_defaults(args)
    assert (str(args.catalog), args.shapes) == ("x.sqlite", "ci")  # flags win
    monkeypatch.setenv("SKEL_CATALOG", str(tmp_path / "env.sqlite"))
    args = parser.parse_args(["mine", "."])
    _project_defaults(args)
    assert args.catalog is None  # $SKEL_CATALOG wins over the file: the store reads it


def test_a_typo_in_tool_skel_is_an_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.skel]\ncatalogue = "x"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["catalog", "list"]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) catalogue" in err and str(tmp_path / "pyproject.toml") in err
    (tmp_path / "pyproject.toml").write_text('[tool.skel]\nignore = "SK001"\nselect = [1]\n')
    assert main(["catalog", "list"]) == 2
    assert "select must be a list of strings" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["match", "--help"], ["results", "export", "--help"]])
def test_help_names_the_formats(argv, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    assert "--format" in out


def test_pre_commit_hook_runs_skel_match(tmp_path, monkeypatch, capsys):
    """The hook in .pre-commit-hooks.yaml is `skel match --quiet` over the staged files it selects: run that
    command line the way pre-commit does (entry + file names) on a kernel and a plain module."""
    import re
    import shlex
    from pathlib import Path

    import yaml  # the test extra installs pyyaml
    hooks = yaml.safe_load((Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "skel-match" and hook["language"] == "python"
    entry = shlex.split(hook["entry"])
    assert entry[:2] == ["skel", "match"]
    kernel = tmp_path / "norm.py"
    kernel.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, y, D: tl.constexpr):\n"
                      "    i = tl.program_id(0)\n    o = i * D + tl.arange(0, D)\n    b = tl.load(x + o).to(tl.float32)\n"
                      "    b = b / tl.sqrt(tl.sum(b * b) + 1e-6)\n    tl.store(y + o, b)\n")
    plain = tmp_path / "util.py"
    plain.write_text("def f():\n    return 1\n")
    files = [p for p in (kernel, plain, tmp_path / "notes.md") if re.search(hook["files"], p.name)]
    assert files == [kernel, plain]
    monkeypatch.chdir(tmp_path)
    assert main([*entry[1:], "--skeleton", "SK001", *map(str, files)]) == 1  # a finding fails the commit
    assert capsys.readouterr().out.startswith("norm.py:10: SK001 ")
    kernel.write_text(kernel.read_text().replace("1e-6)\n", "1e-6)  # skel: ignore[SK001] kept\n"))
    assert main([*entry[1:], "--skeleton", "SK001", *map(str, files)]) == 0  # silenced in the kernel: passes


def test_colour_only_on_a_terminal(monkeypatch):
    import io

    from skel.commands.console import print_lines

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    lines = [("  applies: SK001 at line 10", "applies"), ("  not SK007: no tl.dot", "dim")]
    plain, term = io.StringIO(), Tty()
    print_lines(lines, plain)
    print_lines(lines, term)
    assert plain.getvalue() == "  applies: SK001 at line 10\n  not SK007: no tl.dot\n"  # piped: byte for byte
    assert "\x1b[" in term.getvalue() and "applies: SK001 at line 10" in term.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    quiet = Tty()
    print_lines(lines, quiet)
    assert quiet.getvalue().startswith("  applies: SK001 at line 10\n")  # NO_COLOR: no colour (dim/bold may stay)

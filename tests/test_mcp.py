"""`skel mcp`: a real MCP client session over stdio, using the official SDK's client.

The server is spawned as `python -m skel mcp` (what an agent configures); the test talks to it
only through the protocol: initialize, list tools and resources, call tools, read resources,
and checks that a failing call comes back as an MCP tool error while the server keeps serving.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the mcp SDK is not installed")

import anyio  # noqa: E402  (installed with mcp)
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from skel.pipeline.prompt import estimate_tokens  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIXTURE = "skeletons/SK001-rsqrt-for-norm-division/examples/before.py"  # relative to the server's cwd
EXPECTED_TOOLS = {"list_skeletons", "show_skeleton", "search_skeletons", "match_kernel", "validate_candidate",
                  "apply_skeleton", "catalog_prompt"}


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _json(result) -> dict:
    assert not result.is_error, _text(result)
    return json.loads(_text(result))


async def _session_checks(tmp_path: Path) -> None:
    env = {"SKEL_CATALOG": str(tmp_path / "catalog.sqlite"), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "skel", "mcp"], env=env, cwd=str(REPO))
    with open(tmp_path / "server.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "skel"

            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert len(tools) >= 5 and EXPECTED_TOOLS <= set(tools), sorted(tools)
            assert tools["apply_skeleton"].input_schema["properties"]["dry_run"]["default"] is True
            _check_schemas(tools)

            # match: SK001 applies to its own before.py, because of the division on line 13
            match = _json(await session.call_tool("match_kernel", {"path": FIXTURE}))
            assert "SK001" in match["applicable"]
            (kernel,) = match["kernels"]
            assert kernel["name"] == "l2norm_scale_kernel"
            sk001 = next(a for a in kernel["applicable"] if a["skeleton"] == "SK001")
            divides = next(c for c in sk001["conditions"] if c["id"] == "divides-by-sqrt")
            assert divides["detail"].startswith("line 13: b_x = b_x / tl.sqrt(")
            not_applicable = {n["skeleton"]: n for n in kernel["not_applicable"]}
            assert "SK007" in not_applicable and not_applicable["SK007"]["reason"], "a miss says why"

            show = _json(await session.call_tool("show_skeleton", {"code": "sk001"}))
            assert show["code"] == "SK001" and show["name"] == "rsqrt-for-norm-division"
            assert "tl.rsqrt" in show["after"] and show["docs"]["Example"]
            assert [c["id"] for c in show["conditions"]] == ["divides-by-sqrt", "sqrt-of-reduction", "denominator-is-float32"]
            assert show["evidence"]["code"] == "SK001"

            listed = _json(await session.call_tool("list_skeletons", {"category": "memory"}))
            assert listed["skeletons"] and all(s["category"] == "memory" for s in listed["skeletons"])
            found = _json(await session.call_tool("search_skeletons", {"text": "rsqrt"}))
            assert found["results"][0]["code"] == "SK001"

            brief = await session.call_tool("catalog_prompt", {"path": FIXTURE, "budget": 1500})
            assert not brief.is_error, _text(brief)
            assert "SK001 rsqrt-for-norm-division" in _text(brief) and estimate_tokens(_text(brief)) <= 1500

            # the gate through the server (a child `skel validate`): the original judged against itself
            verdict = _json(await session.call_tool(
                "validate_candidate", {"target": "kda_decode", "candidate": "kernels/kda_decode/kernel.py"}))
            assert (verdict["exit_code"], verdict["outcome"]) == (0, "accepted"), verdict
            assert verdict["result"]["accepted"] is True and verdict["result"]["family"] == "kda_decode"
            progress = []

            async def on_progress(done, total, message):
                progress.append((done, total, message))

            dry_call = await session.call_tool("apply_skeleton", {"target": "kernels/kda_decode/kernel.py",
                                                                  "skeleton": "SK003"}, progress_callback=on_progress)
            dry = _json(dry_call)
            assert "--dry-run" in dry["command"] and dry["result"] is not None
            # a dry run writes nothing: no report, the diffs come back in the result, from the repository root
            assert dry["result"]["report"] is None
            assert dry["result"]["candidates"][0]["diff"].startswith("--- a/kernels/kda_decode/kernel.py")
            assert progress and any("candidate(s)" in (m or "") for _, _, m in progress), progress
            assert dry_call.structured_content == dry  # structured output, the same as the text

            # errors come back as tool errors with what and where; the server keeps serving
            bad = await session.call_tool("show_skeleton", {"code": "SK999"})
            assert bad.is_error and "no skeleton 'SK999'" in _text(bad) and "SK001" in _text(bad)
            missing = await session.call_tool("match_kernel", {"path": "no/such/kernel.py"})
            assert missing.is_error and "no/such/kernel.py: no such file" in _text(missing)
            nocand = await session.call_tool("validate_candidate", {"target": "kda_decode", "candidate": "nope.py"})
            assert nocand.is_error and "nope.py: no such file" in _text(nocand)
            # tools that execute code say so, and take only files under the workspace root (here: the repo)
            assert "EXECUTES" in tools["validate_candidate"].description
            assert "EXECUTES" in tools["apply_skeleton"].description
            outside = tmp_path / "outside.py"
            outside.write_text((REPO / "kernels/kda_decode/kernel.py").read_text())
            escaped = await session.call_tool("validate_candidate", {"target": "kda_decode", "candidate": str(outside)})
            assert escaped.is_error and "outside the workspace root" in _text(escaped), _text(escaped)
            (REPO / ".skel-test-link.py").unlink(missing_ok=True)
            (REPO / ".skel-test-link.py").symlink_to(outside)
            try:
                linked = await session.call_tool("apply_skeleton", {"target": ".skel-test-link.py", "skeleton": "SK001",
                                                                    "dry_run": False})
                assert linked.is_error and "outside the workspace root" in _text(linked), _text(linked)
            finally:
                (REPO / ".skel-test-link.py").unlink(missing_ok=True)
            tight = await session.call_tool("catalog_prompt", {"path": FIXTURE, "budget": 10})
            assert tight.is_error and "needs" in _text(tight)
            typo = await session.call_tool("match_kernel", {"file": FIXTURE})
            assert typo.is_error
            # values outside a parameter's enum, pattern or range are errors, not an empty answer
            for name, args in [("list_skeletons", {"category": "bogus"}), ("list_skeletons", {"family": "kda-decode"}),
                               ("show_skeleton", {"code": "rsqrt"}), ("catalog_prompt", {"path": FIXTURE, "budget": 0}),
                               ("validate_candidate", {"target": "kda_decode", "candidate": FIXTURE, "require": "fast"}),
                               ("search_skeletons", {"text": ""})]:
                wrong = await session.call_tool(name, args)
                assert wrong.is_error, (name, args, _text(wrong))
            listed_kda = _json(await session.call_tool("list_skeletons", {"family": "kda_decode"}))
            assert listed_kda["skeletons"], "the family spelt as kernels/ spells it finds skeletons"

            # resources: the skeleton docs, as `skel catalog show` prints them
            uris = {str(r.uri) for r in (await session.list_resources()).resources}
            assert "skel://skeleton/SK001" in uris and len(uris) >= 13
            doc = await session.read_resource("skel://skeleton/SK002")
            assert doc.contents[0].text.startswith("SK002 merge-v-tiles") and "## Example" in doc.contents[0].text
            with pytest.raises(MCPError, match="SK999"):
                await session.read_resource("skel://skeleton/SK999")

            again = await session.list_tools()  # still alive after every error above
            assert len(again.tools) == len(tools)


def _check_schemas(tools) -> None:
    """Every tool: a description, every parameter described and typed, enumerations where the values are a
    fixed set, annotations that say whether it only reads, and an output schema (structured output)."""
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 40, name
        assert tool.output_schema and tool.output_schema.get("type") == "object", name
        assert tool.annotations is not None and tool.annotations.read_only_hint is not None, name
        for pname, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{pname} has no description"
            assert "type" in prop or "anyOf" in prop, f"{name}.{pname} has no type"

    def enum(tool, pname):
        prop = tools[tool].input_schema["properties"][pname]
        return next((a["enum"] for a in prop.get("anyOf", [prop]) if "enum" in a), None)

    assert enum("list_skeletons", "category") == ["memory", "compute", "precision", "parallelism", "launch"]
    assert enum("list_skeletons", "target") == ["triton", "cuda"]
    assert "kda_decode" in enum("list_skeletons", "family") and "kda-decode" not in enum("list_skeletons", "family")
    assert enum("validate_candidate", "require") == ["correct", "not-slower", "faster"]
    read_only = {n for n, t in tools.items() if t.annotations.read_only_hint}
    assert read_only == {"list_skeletons", "show_skeleton", "search_skeletons", "match_kernel", "catalog_prompt"}
    assert all(t.annotations.destructive_hint is False for t in tools.values())  # nothing a user had is overwritten
    assert "ctx" not in tools["apply_skeleton"].input_schema["properties"]


def test_mcp_session_over_stdio(tmp_path):
    async def run():
        with anyio.fail_after(60):
            await _session_checks(tmp_path)

    anyio.run(run)


def test_skel_mcp_is_imported_lazily():
    """`skel` itself must work without the mcp SDK (the GPU machine has none)."""
    import subprocess

    code = ("import sys; sys.modules['mcp'] = None\n"
            "from skel.cli import build_parser; build_parser()\n"
            "assert 'skel.mcp_server' not in sys.modules\n"
            "from skel.cli import main; sys.exit(main(['mcp']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "`skel mcp` needs the MCP SDK" in proc.stderr and "pip install 'skel[mcp]'" in proc.stderr

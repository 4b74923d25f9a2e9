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
            dry = _json(await session.call_tool(
                "apply_skeleton", {"target": "kernels/kda_decode/kernel.py", "skeleton": "SK003"}))
            assert "--dry-run" in dry["command"] and dry["result"] is not None
            # its report lands in a temporary folder named in the result, not in the server's working tree
            assert Path(dry["result"]["report"]).is_file()
            assert not Path(dry["result"]["report"]).resolve().is_relative_to(Path.cwd().resolve())

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

            # resources: the skeleton docs, as `skel catalog show` prints them
            uris = {str(r.uri) for r in (await session.list_resources()).resources}
            assert "skel://skeleton/SK001" in uris and len(uris) >= 13
            doc = await session.read_resource("skel://skeleton/SK002")
            assert doc.contents[0].text.startswith("SK002 merge-v-tiles") and "## Example" in doc.contents[0].text
            with pytest.raises(MCPError, match="SK999"):
                await session.read_resource("skel://skeleton/SK999")

            again = await session.list_tools()  # still alive after every error above
            assert len(again.tools) == len(tools)


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
    assert "`skel mcp` needs the mcp SDK" in proc.stderr

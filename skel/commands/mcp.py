"""`skel mcp`: serve the catalog and the gate to coding agents over MCP (stdio).

The server lives in ``skel.mcp_server``; it is imported only here, when the verb runs,
because the ``mcp`` SDK is not installed everywhere skel runs (the GPU machine lacks it).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from skel.commands.common import add_catalog, add_json, add_library, library_dirs
from skel.errors import EXIT_OK, UsageError

DESCRIPTION = """\
Run an MCP server on stdin/stdout (configure it in the agent as the command `skel mcp`).
Tools: list_skeletons, show_skeleton, search_skeletons, match_kernel, validate_candidate,
apply_skeleton (dry run by default), catalog_prompt. Resources: skel://skeleton/CODE, the
text `skel catalog show CODE` prints. Tool errors come back as MCP tool errors (isError)
with what and where; the server keeps running. Relative paths are relative to the
directory the server was started in.

validate_candidate and apply_skeleton (not a dry run) execute the target, its spec and the
candidate, in the gate's contained workers; they take only files under the workspace root
(--workspace, default the directory the server was started in)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("mcp", help="serve the catalog and the gate to coding agents (MCP over stdio)",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_library(p)
    add_catalog(p)
    add_json(p)  # accepted for uniformity; the protocol is JSON-RPC already
    p.add_argument("--workspace", type=Path, metavar="DIR",
                   help="tools that execute code take only files under DIR (default: the current directory)")
    p.set_defaults(func=handler)


def handler(args) -> int:
    try:
        from skel.mcp_server import serve
    except ImportError as exc:
        raise UsageError(f"`skel mcp` needs the MCP SDK, an optional extra: pip install 'skel[mcp]' ({exc})") from None
    workspace = args.workspace or Path.cwd()
    if not workspace.is_dir():
        raise UsageError(f"--workspace {workspace}: not a directory")
    serve(library_dirs(args), args.catalog, workspace)
    return EXIT_OK

"""CI installs exactly as the README says: the README's two commands appear verbatim in .ci/run."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", setup, re.S)


def test_readme_has_two_setup_commands_and_ci_runs_them():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for cmd in commands:
        assert cmd.strip() in ci, f".ci/run does not run the README command: {cmd}"

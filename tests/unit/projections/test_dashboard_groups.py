"""The dashboard's observation log reads observation groups (spec §12): a heading naming the
group and its message range, the closing tag hidden (projections/static/observations.js in
Node.js, its pure line parser)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "projections" / "static" / "observations.js"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_group_lines_become_headings_and_closing_tags_disappear():
    lines = ['<observation-group id="0123456789abcdef" range="m1:m4">', "* 🔴 (09:00) dog is Biscuit",
             "</observation-group>", '<observation-group id="fedcba9876543210" range="m1:m9" kind="reflection">']
    program = (f"global.om = {{ el: () => null }};\n{SCRIPT.read_text(encoding='utf-8')}\n"
               f"console.log(JSON.stringify({json.dumps(lines)}.map(observations.parseLine)));")
    out = subprocess.run(["node", "-e", program], capture_output=True, text=True, timeout=30, check=True).stdout
    parsed = json.loads(out)
    assert parsed[0] == {"kind": "group", "text": "group 0123456789abcdef · messages m1:m4"}
    assert parsed[1]["kind"] == "item" and parsed[1]["text"] == "dog is Biscuit"
    assert parsed[2] is None
    assert parsed[3] == {"kind": "group", "text": "reflection group fedcba9876543210 · messages m1:m9"}

"""The README's Python snippets run as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
# snippets that need a reader only the full tier installs (pip install -e ".[test-full]")
FULL_TIER_IMPORTS = ("datasets",)


def _param(k: int, code: str):
    full = any(re.search(rf"^\s*(import|from) {m}\b", code, flags=re.M) for m in FULL_TIER_IMPORTS)
    return pytest.param(code, id=f"block{k}", marks=[pytest.mark.full] if full else [])


def test_readme_has_python_snippets():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", [_param(k, c) for k, c in enumerate(BLOCKS)])
def test_readme_python_snippet(code):
    exec(compile(code, str(README), "exec"), {})


def test_readme_commands_are_the_ci_commands():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_cmd = 'pip install -e ".[test]" && python -m pytest -q'
    assert test_cmd in text and test_cmd in ci

"""Every code block of README.md and docs/*.md runs, and prints what the page shows.

A doctest over Markdown. Each page's blocks run in order, in one namespace:

- a ```python block is executed (written to a file first: s2sgrad reads the
  source of the functions it differentiates);
- a ```bash block is run by bash in the repository root, its `s2sgrad` and
  `python` commands with this interpreter;
- a block right after the comment `<!-- doctest: output -->` is what the block
  before it prints (stdout), compared line by line; a line `...` stands for any
  number of lines;
- `<!-- doctest: skip (why) -->` before a block: not run (installs, timings);
- `<!-- doctest: quote PATH -->` before a block: every line of it is a line of
  the file PATH (code quoted from the package stays what the package says);
- `<!-- doctest: slow -->` before a block: run only by the slow suite
  (`pytest -m slow`, which `.ci/run` runs), in a namespace of its own;
- ```text blocks are illustrations (a synopsis, a diagram): not code.

A block of any other language, or a python/bash block that is neither run nor
marked, fails the test: nothing shown as code goes unchecked.
"""
import contextlib
import io
import os
import re
import subprocess
import sys
import types
import uuid
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.join("docs", p)
                               for p in os.listdir(os.path.join(ROOT, "docs"))
                               if p.endswith(".md"))
RUN = ("python", "bash")
SHOWN = RUN + ("text",)
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(output|skip|slow|quote)\b(.*?)-->\s*$")


@dataclass
class Block:
    page: str
    line: int            # 1-based line of the opening fence
    lang: str
    text: str
    marker: Optional[str] = None     # output, skip or slow
    why: str = ""
    output: Optional["Block"] = None   # the block showing what this one prints


def blocks(page: str) -> List[Block]:
    """The fenced blocks of a page, each with the marker comment right before it; an
    output block is attached to the block before it."""
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines()
    found: List[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        body = []
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        assert j < len(lines), f"{page}:{i + 1}: a code block that is never closed"
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = _MARKER.match(lines[k]) if k >= 0 else None
        block = Block(page, i + 1, lang, "\n".join(body) + "\n",
                      marker.group(1) if marker else None,
                      marker.group(2).strip() if marker else "")
        if block.marker == "output":
            assert found and found[-1].lang in RUN and found[-1].output is None, \
                f"{page}:{i + 1}: an output block must follow a python or bash block"
            found[-1].output = block
        else:
            found.append(block)
        i = j + 1
    return found


def _matches(expected: str, got: str) -> bool:
    """Line by line (trailing spaces ignored); a line `...` matches any lines, and
    `...` inside a line any text (a figure that changes from run to run)."""
    want = [line.rstrip() for line in expected.rstrip("\n").split("\n")]
    have = [line.rstrip() for line in got.rstrip("\n").split("\n")]

    def same(pattern: str, line: str) -> bool:
        if "..." not in pattern:
            return pattern == line
        return re.fullmatch(".*".join(map(re.escape, pattern.split("..."))), line) is not None

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(have)
        if want[i] == "...":
            return any(match(i + 1, k) for k in range(j, len(have) + 1))
        return j < len(have) and same(want[i], have[j]) and match(i + 1, j + 1)
    return match(0, 0)


class Page:
    """Runs one page's blocks in order, in one module namespace."""

    def __init__(self, page: str, directory):
        self.page = page
        self.directory = directory
        name = "s2s_doc_" + re.sub(r"\W", "_", page) + "_" + uuid.uuid4().hex[:6]
        self.module = types.ModuleType(name)
        self.module.__file__ = str(directory / f"{name}.py")
        sys.modules[name] = self.module

    def run(self, block: Block) -> str:
        if block.lang == "python":
            return self.python(block)
        return self.bash(block)

    def python(self, block: Block) -> str:
        stem = re.sub(r"\W", "_", f"{self.page}_{block.line}")
        path = self.directory / f"{stem}.py"
        path.write_text(block.text)
        code = compile(block.text, str(path), "exec")
        out = io.StringIO()
        options = np.get_printoptions()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, self.module.__dict__)
        finally:
            np.set_printoptions(**options)
        return out.getvalue()

    def bash(self, block: Block) -> str:
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env["NO_COLOR"] = "1"
        script = f"set -euo pipefail\npython() {{ {sys.executable} \"$@\"; }}\n" \
                 f"s2sgrad() {{ {sys.executable} -m s2sgrad \"$@\"; }}\n" + block.text
        proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, \
            f"{block.page}:{block.line}: exit code {proc.returncode}\n{proc.stderr}"
        return proc.stdout


def _check(page: Page, block: Block) -> None:
    try:
        got = page.run(block)
    except Exception as exc:
        raise AssertionError(f"{block.page}:{block.line}: the {block.lang} block raised "
                             f"{type(exc).__name__}: {exc}") from exc
    if block.output is not None:
        assert _matches(block.output.text, got), (
            f"{block.page}:{block.line}: printed\n{got}\nwhere the page shows "
            f"(line {block.output.line})\n{block.output.text}")


@pytest.mark.parametrize("name", PAGES)
def test_every_block_is_run_or_marked(name):
    for block in blocks(name):
        assert block.lang in SHOWN, (
            f"{name}:{block.line}: a ```{block.lang or ''} block: write python, bash or text "
            f"(text is not run)")
        if block.marker == "skip":
            assert block.why, f"{name}:{block.line}: say why a block is skipped"
        if block.marker == "quote":
            quoted = open(os.path.join(ROOT, block.why), encoding="utf-8").read().splitlines()
            quoted = {line.strip() for line in quoted}
            for line in block.text.splitlines():
                assert not line.strip() or line.strip() in quoted, (
                    f"{name}:{block.line}: {line.strip()!r} is not a line of {block.why}")


@pytest.mark.parametrize("name", PAGES)
def test_code_blocks_run_and_print_what_the_page_shows(name, tmp_path, monkeypatch,
                                                      restore_registry):
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(ROOT)
    page = Page(name, tmp_path)
    ran = 0
    for block in blocks(name):
        if block.lang in RUN and block.marker is None:
            _check(page, block)
            ran += 1
    assert ran or not any(b.lang in RUN and b.marker is None for b in blocks(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", PAGES)
def test_slow_code_blocks(name, tmp_path, monkeypatch, restore_registry):
    """Blocks marked slow (numba compiles, longer runs), each in a namespace of its own."""
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(ROOT)
    for block in blocks(name):
        if block.lang in RUN and block.marker == "slow":
            _check(Page(name, tmp_path), block)


_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("name", PAGES)
def test_links_between_pages_resolve(name):
    """Relative links name files that exist, and #anchors headings of that page."""
    text = open(os.path.join(ROOT, name), encoding="utf-8").read()
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = os.path.normpath(os.path.join(ROOT, os.path.dirname(name), path)) if path \
            else os.path.join(ROOT, name)
        assert os.path.exists(file), f"{name}: a link to {target}, which does not exist"
        if anchor and file.endswith(".md"):
            headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$",
                                                       open(file, encoding="utf-8").read(),
                                                       re.M)}
            assert anchor in headings, f"{name}: a link to {target}: no such heading"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_is_short_and_starts_with_the_user():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(text.splitlines()) <= 330
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Quick start", headings
    quick = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    commands = [line for line in quick.splitlines() if line.strip()]
    assert len(commands) == 2, commands
    assert commands[0].startswith("pip install . && python examples/demo.py")
    assert commands[1].startswith("pip install '.[test]' && python -m pytest")


def test_readme_test_command_is_what_ci_runs_first():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    quick = text.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    command = [line for line in quick.splitlines() if line.strip()][1].split("#")[0].strip()
    ci = [line for line in open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8")
          if line.strip() and not line.lstrip().startswith("#")]
    runs = [i for i, line in enumerate(ci) if command in line]
    slow = [i for i, line in enumerate(ci) if "-m slow" in line]
    check = [i for i, line in enumerate(ci) if "S2SGRAD_CHECK_OPTIMIZER=1" in line]
    assert runs and slow and check, ci
    assert runs[0] < slow[0] < check[0], ci

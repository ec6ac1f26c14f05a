"""The docs cannot rot: every fenced block in README.md and docs/*.md is run here, or
says in a comment just above it why not. Blocks run page by page, in order, in a
scratch folder laid out like a checkout after ./scripts/demo.sh (build/, .venv/,
examples/, artifacts/model.pt2), with the packages the rest of the suite compiles.

The comment right before a block says what it is:
    <!-- run -->                   a bash or python block, run here
    <!-- output -->                lines the previous run block of the page must print,
                                    in order; "…" stands for any text (a line of it alone
                                    for skipped lines)
    <!-- synopsis -->              a command's options in brackets: each --option must
                                    be in that command's --help
    <!-- tested by: T[, T] -->     run by the named tests (tests/FILE.py::NAME), which
                                    must exist
    <!-- not run: REASON -->       not run, and why (any test named in it must exist)
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO_ROOT, Build, CompiledPackage

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("**/*.md"))]
MARKER = re.compile(r"^<!--\s*(run|output|synopsis|tested by|not run)\s*(?::\s*(.*?))?\s*-->$")
TEST_NAME = re.compile(r"tests/[\w/]+\.py::\w+")
RUNNABLE = {"bash": "bash", "sh": "bash", "python": "python"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    kind: str | None  # the marker's kind, None when unmarked
    note: str  # the marker's text after the colon

    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, with the marker comment on the line before it."""
    lines = page.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, language = opening.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:end])
        marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
        blocks.append(Block(page, i + 1, language, body + "\n", marker.group(1) if marker else None,
                            (marker.group(2) or "") if marker else ""))
        i = end + 1
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in fenced_blocks(page)]


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


# --- every block is run or says why not: no Python or compile needed ---------------------

def test_every_block_is_run_or_marked_with_a_reason() -> None:
    problems = []
    for block in ALL_BLOCKS:
        if block.kind is None:
            problems.append(f"{block.where()}: a ```{block.language} block with no marker comment before it "
                            "(<!-- run -->, <!-- output -->, <!-- synopsis -->, <!-- tested by: ... --> "
                            "or <!-- not run: REASON -->)")
        elif block.kind == "not run" and len(block.note) < 10:
            problems.append(f"{block.where()}: 'not run' needs a reason, got {block.note!r}")
        elif block.kind == "run" and block.language not in RUNNABLE:
            problems.append(f"{block.where()}: a run block must be bash or python, got {block.language!r}")
        elif block.kind == "tested by" and not TEST_NAME.search(block.note):
            problems.append(f"{block.where()}: 'tested by' names no test (tests/FILE.py::NAME): {block.note!r}")
    assert not problems, "\n".join(problems)


def test_output_blocks_follow_a_run_block() -> None:
    for page in PAGES:
        seen_run = False
        for block in fenced_blocks(page):
            seen_run = seen_run or block.kind == "run"
            assert block.kind != "output" or seen_run, f"{block.where()}: an output block with no run block before it"


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_named_test_exists() -> None:
    missing = []
    for block in ALL_BLOCKS:
        for name in TEST_NAME.findall(block.note):
            file, function = name.split("::")
            path = REPO_ROOT / file
            if not path.is_file() or function not in _test_functions(path):
                missing.append(f"{block.where()}: {name} does not exist")
    assert not missing, "\n".join(missing)


def test_readme_is_a_front_page_with_the_two_commands() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "README.md is the front page: at most about 250 lines; move the rest to docs/"
    assert "./scripts/demo.sh" in readme and "./scripts/test.sh" in readme and "./scripts/docs.sh" in readme


def test_readme_links_point_at_files_that_exist() -> None:
    # mkdocs --strict checks the links inside docs/; the README is outside the site.
    readme = (REPO_ROOT / "README.md").read_text()
    broken = [target for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
              if "://" not in target and not (REPO_ROOT / target).exists()]
    assert not broken, broken


def test_every_page_is_in_the_site_navigation() -> None:
    config = (REPO_ROOT / "mkdocs.yml").read_text()
    for page in PAGES[1:]:
        assert f": {page.relative_to(REPO_ROOT / 'docs')}" in config, f"{page_id(page)} is not in mkdocs.yml's nav"


# --- synopses: each option exists --------------------------------------------------------

SYNOPSES = [block for block in ALL_BLOCKS if block.kind == "synopsis"]


def synopsis_commands(text: str) -> list[tuple[list[str], str]]:
    """(the command's words before its first option or argument, its whole text) per
    command of a synopsis; a line that starts with a space continues the one before."""
    commands: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0].isspace() and commands:
            commands[-1].append(line)
        else:
            commands.append([line])
    result = []
    for lines in commands:
        whole = " ".join(lines)
        words = []
        for word in whole.split():
            if word.startswith(("-", "[", "<")) or word.isupper() or "." in word.split("/")[-1]:
                break
            words.append(word)
        result.append((words, whole))
    return result


@pytest.mark.parametrize("block", SYNOPSES, ids=[block.where() for block in SYNOPSES])
def test_synopsis_options_exist(block: Block, build: Build) -> None:
    for words, whole in synopsis_commands(block.text):
        program = build.runner if words[0] == "build/aoti_runner" else Path(sys.executable).parent / words[0]
        result = subprocess.run([str(program), *words[1:], "--help"], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "COLUMNS": "300", "AOTI_DEPLOY_BUILD_DIR": str(build.dir)})
        help_text = result.stdout + result.stderr
        assert result.returncode == 0, f"{block.where()}: {' '.join(words)} --help failed:\n{help_text}"
        # Comments (after #) and prose in parentheses are not options.
        options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", re.sub(r"\s#.*|\(see [^)]*\)", "", whole)))
        missing = sorted(option for option in options if not re.search(rf"{re.escape(option)}(?![\w-])", help_text))
        assert not missing, f"{block.where()}: {' '.join(words)} has no {', '.join(missing)} in its --help"


# --- run blocks: page by page, in a scratch checkout ----------------------------------------

def _workspace(root: Path, build: Build, package: CompiledPackage) -> Path:
    """A folder laid out as a checkout after ./scripts/demo.sh: the session's build and
    venv, the examples, and the suite's demo package (2x3x8x12) as artifacts/model.pt2
    (and as artifacts/small.pt2, which README and signed-bundles.md export)."""
    root.mkdir(parents=True)
    (root / "build").symlink_to(build.dir)
    (root / ".venv").symlink_to(Path(sys.prefix))
    (root / "examples").symlink_to(REPO_ROOT / "examples")
    (root / "artifacts").mkdir()
    shutil.copy(package.path, root / "artifacts" / "model.pt2")
    # The pages that export the demo model at 2x3x8x12 write it beside the demo's
    # package, under its own name (a copy: a documented export is a cache hit).
    shutil.copy(package.path, root / "artifacts" / "small.pt2")
    return root


def run_block(block: Block, cwd: Path, build: Build) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AOTI_DEPLOY_BUILD_DIR": str(build.dir), "COLUMNS": "200", "PYTHONPATH": str(cwd),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("AOTI_DEPLOY_OPS_LIB", "AOTI_DEPLOY_TRUSTED_KEY"):
        env.pop(name, None)
    if RUNNABLE[block.language] == "python":
        command = [sys.executable, "-"]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-s"]
    return subprocess.run(command, input=block.text, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.strip().split("…")))


def missing_output_lines(shown: str, printed: str) -> list[str]:
    """The shown lines (in order, "…" for any text) not found in the printed output,
    each after the one before it."""
    actual = [line.strip() for line in printed.splitlines()]
    position = 0
    missing = []
    for line in shown.splitlines():
        if not line.strip() or line.strip() == "…":
            continue
        pattern = _pattern(line)
        for k in range(position, len(actual)):
            if pattern.fullmatch(actual[k]):
                position = k + 1
                break
        else:
            missing.append(line)
    return missing


RUN_PAGES = [page for page in PAGES if any(b.kind == "run" for b in fenced_blocks(page))]


@pytest.mark.parametrize("page", RUN_PAGES, ids=[page_id(page) for page in RUN_PAGES])
def test_page_commands_run_and_print_what_the_page_shows(page: Path, request: pytest.FixtureRequest, build: Build,
                                                         compiled_package: CompiledPackage, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path / "checkout", build, compiled_package)
    text = page.read_text()
    if "artifacts/scorer.pt2" in text:
        # The API example's export reuses the quickstart's package (the compile cache),
        # so the Scorer is compiled once per session.
        quickstart = request.getfixturevalue("api_quickstart")
        assert quickstart.result.returncode == 0, quickstart.result.stdout + quickstart.result.stderr
        shutil.copy(quickstart.out_dir / "scorer.pt2", workspace / "artifacts" / "scorer.pt2")
    ports = _free_ports_for(text)
    last: subprocess.CompletedProcess[str] | None = None
    kept: list[int] = []  # servers a page leaves running (aoti-deploy serve --keep), stopped whatever happens
    try:
        for block in fenced_blocks(page):
            block = dataclasses.replace(block, text=_with_ports(block.text, ports))
            if block.kind == "run":
                last = run_block(block, workspace, build)
                kept += [int(pid) for pid in re.findall(r"^the server keeps running: pid (\d+)$", last.stdout, re.M)]
                assert last.returncode == 0, (f"{block.where()} exited {last.returncode}:\n{block.text}\n"
                                              f"--- stdout\n{last.stdout}\n--- stderr\n{last.stderr}")
                if re.search(r"^(\S*/)?(export_compile|aoti-deploy export)\b(?! onnx)", block.text, re.M):
                    # The scratch checkout holds the session's packages, so a documented
                    # export reuses one (the compile cache) rather than compiling again.
                    assert "cached: " in last.stdout, \
                        f"{block.where()}: the export compiled; make it reuse a session package"
            elif block.kind == "output":
                assert last is not None
                missing = missing_output_lines(block.text, last.stdout + last.stderr)
                assert not missing, (f"{block.where()}: the page shows lines the command did not print: {missing}\n"
                                     f"--- printed\n{last.stdout}{last.stderr}")
        # A page that starts a server also stops it (a server finalizes its models first).
        left = [pid for pid in kept if not _gone(pid, timeout=30.0)]
        assert not left, f"{page_id(page)} left these servers running: {left}"
    finally:
        for pid in kept:
            _stop(pid)


# Triton's usual ports, which triton.md serves on: free loopback ports in their place
# here, so the page's server can never clash with another process.
TRITON_PORTS = ("8000", "8001", "8002")


def _free_ports_for(text: str) -> dict[str, str]:
    if "--http-port 8000" not in text:
        return {}
    from aoti_deploy.serve.loopback import free_ports

    return dict(zip(TRITON_PORTS, (str(port) for port in free_ports(len(TRITON_PORTS)))))


def _with_ports(text: str, ports: dict[str, str]) -> str:
    return re.sub(r"\b(8000|8001|8002)\b", lambda m: ports[m.group(1)], text) if ports else text


def _gone(pid: int, timeout: float) -> bool:
    """Whether the process has ended, waiting up to ``timeout`` seconds for it."""
    import time

    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stop(pid: int) -> None:
    """SIGTERM a process a page left running (a failed page), and wait for it."""
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    _gone(pid, timeout=30.0)


def test_output_matching_skips_and_orders() -> None:
    printed = "a 1\nb 2.5 s\nc\n"
    assert missing_output_lines("a 1\n…\nc\n", printed) == []
    assert missing_output_lines("b … s\n", printed) == []
    assert missing_output_lines("c\na 1\n", printed) == ["a 1"]
    assert missing_output_lines("d\n", printed) == ["d"]

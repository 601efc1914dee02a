"""What users read stays true: every relative link in README.md and docs/ resolves (file and
heading), no user-facing text sends readers to a file outside the repository (``DESIGN.md``,
``§`` references), and every command's ``--help`` carries an example that parses."""

from __future__ import annotations

import glob
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pipeline.cli.group import vigil

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
USER_FACING = [
    *PAGES,
    ROOT / "vigil.example.toml",
    ROOT / "Makefile",
    ROOT / "docs" / "openapi.json",
    ROOT / "deploy" / "prometheus" / "alerts.yml",
    *sorted((ROOT / "examples").iterdir()),
]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE_PATH = re.compile(r"`((?:docs|examples|deploy|schemas|benchmarks|tests)/[\w./-]+)`")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _links() -> Iterator[tuple[Path, str]]:
    for page in PAGES:
        text = _FENCE.sub("", page.read_text(encoding="utf-8"))
        for match in _LINK.finditer(text):
            yield page, match.group(1)
        for match in _CODE_PATH.finditer(text):
            if "*" not in match.group(1):
                yield page, match.group(1)


@pytest.mark.parametrize(("page", "target"), list(_links()), ids=lambda v: str(v))
def test_relative_link_resolves_to_a_file_and_heading(page: Path, target: str) -> None:
    if re.match(r"[a-z]+:", target):
        pytest.skip("absolute URL")
    path, _, anchor = target.partition("#")
    base = (
        page.parent
        if _LINK.search(f"[x]({target})")
        and not target.startswith(
            ("docs/", "examples/", "deploy/", "schemas/", "benchmarks/", "tests/")
        )
        else ROOT
    )
    resolved = (base / path).resolve() if path else page
    if not resolved.exists():
        resolved = (page.parent / path).resolve()
    assert resolved.exists(), f"{page.name}: {target} does not exist"
    assert resolved.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
    if anchor:
        assert anchor in _anchors(resolved), f"{page.name}: no heading #{anchor} in {path}"


def test_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    page = ROOT / "docs" / "operations.md"
    assert "no-such-heading" not in _anchors(page)
    assert "lag" in _anchors(page)
    assert not (ROOT / "docs" / "no-such-page.md").exists()


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_user_facing_text_never_points_outside_the_repository(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert "DESIGN.md" not in text and "§" not in text and "\\u00a7" not in text


def _commands() -> Iterator[tuple[list[str], click.Command]]:
    ctx = click.Context(vigil)

    def walk(command: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, [*path, name])

    yield from walk(vigil, [])


@pytest.mark.parametrize(
    ("path", "command"), list(_commands()), ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_every_help_has_an_example_that_parses_and_no_outside_reference(
    path: list[str], command: click.Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # examples name files of the repository
    result = CliRunner().invoke(vigil, [*path, "--help"])
    assert result.exit_code == 0
    assert "DESIGN" not in result.output and "§" not in result.output
    examples = _examples(result.output)
    assert examples, f"vigil {' '.join(path)} --help has no example"
    for example in examples:
        _parse(example)


def _examples(output: str) -> list[list[str]]:
    """The example command lines of a help text (``Example: vigil …`` or an ``Example:`` block
    of indented lines), each as argv; a line that is not a vigil command counts, unparsed."""
    found: list[list[str]] = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        head = re.match(r"\s*Examples?\b[^:]*:(.*)$", line)
        if head is None:
            continue
        block = [head.group(1)] if head.group(1).strip() else []
        for following in lines[i + 1 :]:
            if not following.strip():
                break
            if block and block[-1].rstrip().endswith("\\"):
                block[-1] = block[-1].rstrip()[:-1] + " " + following.strip()
            else:
                block.append(following)
        found.append([""])  # the header alone is an example (e.g. an MCP client's entry)
        for text in block:
            text = text.strip()
            if "$(vigil " in text:
                text = text.split("$(", 1)[1].split(")", 1)[0]
            if not text.startswith("vigil "):
                continue
            args: list[str] = []
            for token in shlex.split(text):
                if token in (">", "&", "|", "<", "&&"):
                    break
                args.append(token)
            found.append(args)
    return found


def _parse(args: list[str]) -> None:
    """Parse ``args`` down to the leaf command without running anything."""
    if args == [""] or not args:
        return
    args = [a for arg in args[1:] for a in (sorted(glob.glob(arg)) or [arg])]
    with vigil.make_context("vigil", args) as ctx:
        command: click.Command = vigil
        rest = _rest(ctx)
        while isinstance(command, click.Group) and rest:
            name, sub, rest = command.resolve_command(ctx, rest)
            assert sub is not None, name
            ctx = sub.make_context(name or "", list(rest), parent=ctx)
            command, rest = sub, _rest(ctx)
        ctx.close()


def _rest(ctx: click.Context) -> list[str]:
    """What a group left for its subcommand (click 8.2 deprecates ``protected_args``)."""
    return [*getattr(ctx, "_protected_args", []), *ctx.args]

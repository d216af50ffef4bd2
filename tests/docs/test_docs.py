"""The docs are checked against the code they describe, so they cannot drift quietly.

The site builds with ``mkdocs build --strict`` (a broken link or anchor, a missing page, an API
reference that does not resolve: a failure). Every code block of README.md and docs/ is checked:
Python compiles (blocks marked ``# executed by tests/docs/test_docs.py`` run), shell blocks pass
``bash -n`` and name only subcommands and options the real ``pathways-chaos`` parsers and this
pytest session accept, ``console`` blocks of cheap commands run and print what they show, YAML and
JSON parse. Faults in the text form parse, repository paths exist, ``--chaos-*`` options exist,
and the reference pages list every fault kind, trigger, event kind, CLI subcommand and public
name. Each checker is also run on a planted broken block that it must catch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXECUTED = "# executed by tests/docs/test_docs.py"
#: Subcommands cheap enough (no JAX, no cluster) that a console block of them is run.
RUN_IN_CONSOLE = ("ramdisk",)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)]


@dataclasses.dataclass
class Block:
    where: str  # path:line, for the message
    lang: str
    text: str


_FENCE = re.compile(r"^( {0,3})(```+|~~~+)[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1\2[ \t]*$", re.M | re.S)


def code_blocks(text: str, name: str) -> list[Block]:
    return [
        Block(f"{name}:{text.count(chr(10), 0, m.start()) + 1}", m.group(3).lower(), m.group(4))
        for m in _FENCE.finditer(text)
    ]


def prose(text: str) -> str:
    """The page without its fenced blocks."""
    return _FENCE.sub("", text)


def inline_code(text: str) -> list[str]:
    return re.findall(r"(?<!`)`([^`\n]+)`(?!`)", prose(text))


# -- the checkers: each returns one line per problem ------------------------------------------
def check_python(block: Block) -> list[str]:
    try:
        code = compile(block.text, block.where, "exec")
    except SyntaxError as error:
        return [f"{block.where}: Python does not compile: {error}"]
    if block.text.lstrip().startswith(EXECUTED):
        try:
            exec(code, {"__name__": "__docs__"})
        except Exception as error:
            return [f"{block.where}: the executed block fails: {type(error).__name__}: {error}"]
    return []


def check_yaml(block: Block) -> list[str]:
    try:
        list(yaml.safe_load_all(block.text))
    except yaml.YAMLError as error:
        return [f"{block.where}: YAML does not parse: {error}".replace("\n", " ")]
    return []


def check_json(block: Block) -> list[str]:
    try:
        json.loads(block.text)
    except ValueError as error:
        return [f"{block.where}: JSON does not parse: {error}"]
    return []


def shell_commands(block: Block) -> list[tuple[list[str], str]]:
    """Each command line of a shell block as tokens (continuations joined, comments dropped),
    with the output a console block shows after it."""
    lines = block.text.splitlines()
    out: list[tuple[list[str], str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if block.lang == "console":
            if not line.startswith("$ "):
                i += 1
                continue
            line = line[2:]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        shown = []
        if block.lang == "console":
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
        tokens = shlex.split(line, comments=True)
        if tokens:
            out.append((tokens, "\n".join(shown)))
    return out


def split_commands(tokens: list[str]) -> Iterator[list[str]]:
    command: list[str] = []
    for token in tokens:
        if token in ("&&", "||", ";", "|"):
            yield command
            command = []
        else:
            command.append(token)
    yield command


@functools.cache
def cli_help(*argv: str) -> str:
    """What ``pathways-chaos ARGV --help`` prints (the real parsers, in this process)."""
    from pathways_chaos.harness.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


def cli_subcommands(*argv: str) -> set[str]:
    """The subcommands ``pathways-chaos ARGV`` takes (``twin`` has ``up`` and ``down``)."""
    found = re.findall(r"\{([\w,-]+)\} \.\.\.", cli_help(*argv))[:1]  # a subparser's usage
    return set(found[0].split(",")) if found else set()


def help_options(text: str) -> set[str]:
    """The options an argparse help lists (``  -h, --help  ...``, ``  --slices SLICES``)."""
    found = set()
    for line in text.splitlines():
        if line.startswith("  -"):
            for part in line.strip().split("  ")[0].split(", "):
                found.add(part.split()[0])
    return found


def check_cli(args: list[str], where: str) -> list[str]:
    if not args or args[0].startswith("-"):
        return []  # pathways-chaos --help and the like
    sub = args[0]
    if sub not in cli_subcommands():
        return [f"{where}: pathways-chaos has no subcommand {sub!r} ({sorted(cli_subcommands())})"]
    loop = sub == "replay" and any(a == "--loop" or a.startswith("--loop=") for a in args)
    nested = cli_subcommands(sub)
    if nested and (len(args) < 2 or args[1] not in nested):
        return [f"{where}: pathways-chaos {sub} needs one of {sorted(nested)}"]
    argv = [sub, args[1]] if nested else [sub, "--loop", "x"] if loop else [sub]
    known = help_options(cli_help(*argv))
    problems = [
        f"{where}: pathways-chaos {' '.join(argv[: 2 if nested else 1])} has no option "
        f"{a.split('=')[0]}"
        for a in args[len(argv) if nested else 1 :]
        if a.startswith("-") and a.split("=")[0] not in known
    ]
    for i, a in enumerate(args[:-1]):
        if a == "--schedule":
            problems += check_schedule_text(args[i + 1], where)
    return problems


def check_pytest(args: list[str], where: str, known: Callable[[str], bool]) -> list[str]:
    problems = []
    for a in args:
        if a.startswith("--"):
            name = a.split("=")[0]
        elif a.startswith("-") and len(a) > 1:
            name = a[:2]
        else:
            continue
        if not known(name):
            problems.append(f"{where}: pytest has no option {name}")
    return problems


def check_shell(block: Block, known_pytest: Callable[[str], bool]) -> list[str]:
    problems = []
    if block.lang != "console":
        syntax = subprocess.run(["bash", "-n"], input=block.text, text=True, capture_output=True)
        if syntax.returncode:
            problems.append(f"{block.where}: not valid shell: {syntax.stderr.strip()}")
    for tokens, shown in shell_commands(block):
        for token in tokens:  # a path into this repository exists (an option's value too)
            path = token.split("=", 1)[-1].split(":")[0]
            if _PATH.fullmatch(path) and not (ROOT / path).exists():
                problems.append(f"{block.where}: {path} is not in the repository")
        for command in split_commands(tokens):
            if not command:
                continue
            program = Path(command[0]).name
            args = command[1:]
            if program.startswith("python") and args[:2] == ["-m", "pytest"]:
                program, args = "pytest", args[2:]
            if program == "pytest":
                problems += check_pytest(args, block.where, known_pytest)
            elif program == "pathways-chaos":
                problems += check_cli(args, block.where)
                if block.lang == "console" and args[:1] and args[0] in RUN_IN_CONSOLE:
                    problems += check_console_output(args, shown, block.where)
    return problems


def check_console_output(args: list[str], shown: str, where: str) -> list[str]:
    from pathways_chaos.harness.cli.main import main

    out = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(args)
    if out.getvalue().strip() != shown.strip():
        return [f"{where}: pathways-chaos {' '.join(args)} prints:\n{out.getvalue()}"]
    return []


#: A fault or schedule in the text form with every value concrete (no N, S, ..., [optional]).
_VALUE = r"(?![A-Z](?:[:,]|$))[\w.%-]+"
_FAULT = rf"[a-z_]+@[a-z]+=[0-9.]+(?::[a-z_]+={_VALUE})*"
CONCRETE = re.compile(rf"{_FAULT}(?:,{_FAULT})*")


def check_schedule_text(text: str, where: str) -> list[str]:
    from pathways_chaos.faults.model import FaultSpecError, parse_schedule

    candidates = [text]
    if "[" in text:  # the optional parameters left out, and all given
        candidates = [re.sub(r"\[[^]]*\]", "", text), text.replace("[", "").replace("]", "")]
    problems = []
    for candidate in candidates:
        if not CONCRETE.fullmatch(candidate):
            continue
        try:
            parse_schedule(candidate)
        except FaultSpecError as error:
            problems.append(f"{where}: {candidate!r} does not parse: {error}")
    return problems


_PATH = re.compile(
    r"(?:harness|faults|fixtures|suites|tests|bench|ci|pathways_chaos|docs|\.ci)/[\w./-]*"
)


def check_prose(text: str, name: str, options: set[str]) -> list[str]:
    """Inline code and prose of one page: faults parse, paths exist, our options exist."""
    problems = []
    for code in inline_code(text):
        problems += check_schedule_text(code, name)
        if "\\|" in code:
            problems.append(f"{name}: `{code}`: a table's escaped pipe shows its backslash in code")
        path = code.split(":")[0].split("::")[0]
        if _PATH.fullmatch(path) and not (ROOT / path).exists():
            problems.append(f"{name}: `{code}` names a path the repository does not have")
    for block in code_blocks(text, name):
        if block.lang in ("python", "text", ""):
            for quoted in re.findall(r"""["']([a-z_]+@[^"'\s]+)["']""", block.text):
                problems += check_schedule_text(quoted, block.where)
            if block.lang in ("text", ""):
                for line in block.text.splitlines():
                    problems += check_schedule_text(line.strip(), block.where)
    for option in set(re.findall(r"--(?:chaos|fake|acceptance)-[a-z][a-z-]*[a-z]", text)):
        if option not in options:
            problems.append(f"{name}: {option} is not an option of the pytest plugin")
    return problems


def check_links(text: str, page: Path) -> list[str]:
    """Relative links of a page outside the site (README.md) point at files that exist."""
    problems = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose(text)):
        if "://" not in target and not (page.parent / target).exists():
            problems.append(f"{page.name}: link to {target}, which does not exist")
    return problems


def check_block(block: Block, known_pytest: Callable[[str], bool]) -> list[str]:
    if block.lang in ("python", "py"):
        return check_python(block)
    if block.lang in ("yaml", "yml"):
        return check_yaml(block)
    if block.lang == "json":
        return check_json(block)
    if block.lang in ("bash", "sh", "shell", "console"):
        return check_shell(block, known_pytest)
    return []


# -- fixtures -----------------------------------------------------------------------------------
def _load_hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plugin_options() -> set[str]:
    return {name for names, _ in _load_hooks().plugin_options() for name in names}


@pytest.fixture
def known_pytest(pytestconfig: pytest.Config) -> Callable[[str], bool]:
    def known(option: str) -> bool:
        try:
            pytestconfig.getoption(option)
        except ValueError:
            return False
        return True

    return known


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# -- the docs as they are -----------------------------------------------------------------------
def test_the_site_builds_strict_with_the_generated_pages(tmp_path, plugin_options):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    options_page = _text(site / "reference" / "pytest-options" / "index.html")
    missing = sorted(o for o in plugin_options if f"<code>{o}</code>" not in options_page)
    assert not missing, f"the generated options table misses {missing}"
    import pathways_chaos

    api = _text(site / "reference" / "api" / "index.html")
    missing = [n for n in pathways_chaos.__all__ if f'id="pathways_chaos.{n}"' not in api]
    assert not missing, f"the API reference misses {missing}"


def test_every_code_block_is_valid(known_pytest):
    problems = []
    for page in pages():
        for block in code_blocks(_text(page), str(page.relative_to(ROOT))):
            problems += check_block(block, known_pytest)
    assert not problems, "\n".join(problems)


def test_faults_paths_and_options_named_in_the_prose_exist(plugin_options):
    problems = []
    for page in pages():
        problems += check_prose(_text(page), str(page.relative_to(ROOT)), plugin_options)
    problems += check_links(_text(ROOT / "README.md"), ROOT / "README.md")
    assert not problems, "\n".join(problems)


def test_the_readme_is_short_and_keeps_the_two_commands():
    readme = _text(ROOT / "README.md")
    assert len(readme.splitlines()) <= 150
    assert "ci/bootstrap.sh && .venv/bin/pytest -m chaos\n" in readme
    second = "ci/bootstrap.sh --kube --browser --redis && .venv/bin/pytest -n auto\n"
    assert second in readme
    # .ci/run is the second command on a fresh clone: the same install, the same test run
    ci_run = _text(ROOT / ".ci" / "run")
    install = second.split(" && ")[0]
    assert f"\n{install}\n" in ci_run and "pytest -n auto" in ci_run


def test_the_cli_page_lists_every_subcommand_and_option():
    page = _text(DOCS / "reference" / "cli.md")
    table = page.split("\n## ")[0]
    nested = [(s, n) for s in sorted(cli_subcommands()) for n in sorted(cli_subcommands(s))]
    wanted = [*sorted(cli_subcommands()), "demo --loop", "replay --loop"]
    wanted += [" ".join(pair) for pair in nested]
    problems = [f"`{s}` is not in the table" for s in wanted if f"| `{s}" not in table]
    helps = [(s,) for s in cli_subcommands()] + [("replay", "--loop", "x"), *nested]
    for argv in helps:
        for option in help_options(cli_help(*argv)) - {"-h", "--help"}:
            if f"`{option}" not in page:
                problems.append(f"pathways-chaos {argv[0]} {option} is not on the page")
    assert not problems, "\n".join(problems)


def test_the_fault_page_names_every_kind_and_the_trigger_page_every_trigger():
    from pathways_chaos.faults.model import TRIGGER_KINDS, fault_kinds

    faults = _text(DOCS / "reference" / "faults.md")
    missing = [k for k in fault_kinds() if f"`{k}@" not in faults]
    assert not missing, f"docs/reference/faults.md does not show {missing}"
    triggers = _text(DOCS / "reference" / "triggers.md")
    missing = [t for t in TRIGGER_KINDS if f"| `{t}=" not in triggers]
    assert not missing, f"docs/reference/triggers.md has no row for {missing}"


def _emitted_kinds() -> set[str]:
    kinds = set()
    for folder in ("harness", "faults", "fixtures"):
        for path in (ROOT / folder).rglob("*.py"):
            kinds |= set(re.findall(r"\b_?emit\(\s*(?:self,\s*)?\"([a-z_]+)\"", _text(path)))
    return kinds


def test_the_event_page_documents_every_kind_the_code_emits():
    page = _text(DOCS / "reference" / "events.md")
    documented = set()
    for cell in re.findall(r"^\| ([^|]+) \|", page, re.M):
        documented |= set(re.findall(r"`([a-z_]+)`", cell))
    emitted = _emitted_kinds()
    assert len(emitted) > 30  # the scan still finds the recorder's calls
    assert not emitted - documented, f"undocumented event kinds: {sorted(emitted - documented)}"
    source = "".join(
        _text(p) for f in ("harness", "faults", "fixtures") for p in (ROOT / f).rglob("*.py")
    )
    stale = sorted(k for k in documented if f'"{k}"' not in source)
    assert not stale, f"documented event kinds the code never names: {stale}"


def test_the_api_page_documents_exactly_the_public_names():
    import pathways_chaos

    page = _text(DOCS / "reference" / "api.md")
    listed = re.findall(r"^::: pathways_chaos\.(\w+)$", page, re.M)
    assert sorted(listed) == sorted(pathways_chaos.__all__)


def test_every_public_name_has_a_docstring_for_the_reference():
    """The API page is generated from docstrings: a name without one is a blank entry there."""
    import pathways_chaos

    blank = []
    for name in pathways_chaos.__all__:
        obj = getattr(pathways_chaos, name)
        doc = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__  # not inherited
        if not doc or doc.startswith(f"{name}("):  # a dataclass's generated signature
            blank.append(name)
    assert not blank, f"public names without a docstring of their own: {blank}"


# -- each checker catches a planted broken block ------------------------------------------------
def _planted(lang: str, text: str) -> Block:
    return Block("planted.md:1", lang, text)


@pytest.mark.parametrize(
    ("lang", "text", "says"),
    [
        ("python", "def f(:\n    pass\n", "does not compile"),
        ("python", f"{EXECUTED}\nimport pathways_chaos as pc\npc.parse_schedule('x@y')\n", "fails"),
        ("yaml", "jobs: [1, 2\n", "YAML does not parse"),
        ("json", '{"a": 1,}\n', "JSON does not parse"),
        ("bash", "if true; then echo\n", "not valid shell"),
        ("bash", ".venv/bin/pytest -m chaos --chaos-lop=pkg:main\n", "no option --chaos-lop"),
        ("bash", "pytest -m chaos -Z\n", "no option -Z"),
        ("bash", "ci/bootstrap.sh && .venv/bin/pathways-chaos demo --step 5\n", "no option --step"),
        ("bash", "pathways-chaos replay --loop m:f --slices 4\n", "no option --slices"),
        ("bash", "pathways-chaos replya --schedule x\n", "no subcommand 'replya'"),
        ("bash", "pathways-chaos twin up --manifst js.yaml\n", "twin up has no option --manifst"),
        ("bash", "pathways-chaos twin start --manifest js.yaml\n", "twin needs one of"),
        ("bash", "pathways-chaos demo --schedule 'data_loss@step=1:slise=2'\n", "slise"),
        ("bash", "pytest suites/properties/test_no_such_suite.py -q\n", "not in the repository"),
        ("bash", "pytest suites/acceptance --acceptance-source=suites/nope\n", "suites/nope"),
        ("console", "$ pathways-chaos ramdisk --params 8e9 --hosts-per-slice 16\n1 GB\n", "prints"),
    ],
)
def test_a_planted_broken_block_is_caught(known_pytest, lang, text, says):
    problems = check_block(_planted(lang, text), known_pytest)
    assert any(says in p for p in problems), problems


def test_the_planted_blocks_fixed_pass(known_pytest):
    """The same blocks, correct: the checkers do not fail everything."""
    good = [
        _planted("python", f"{EXECUTED}\nimport pathways_chaos as pc\npc.parse_schedule('')\n"),
        _planted("bash", "pathways-chaos replay --loop m:f --topology 4x2 --option a=1\n"),
        _planted("bash", ".venv/bin/pytest -m chaos -n auto -q --chaos-loop=pkg:main\n"),
        _planted("bash", "python -m pytest --pyargs pathways_chaos.suites.chaos -p no:x\n"),
    ]
    problems = [p for block in good for p in check_block(block, known_pytest)]
    assert not problems, problems


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("A fault: `data_loss@step=12:slise=2`.", "does not parse"),
        ("A fault: `flapping@step=3:slice=1[:times=0]`.", "does not parse"),
        ("```text\nnode_loss@step=12:hots=1\n```\n", "does not parse"),
        ("```python\nchaos.run('data_loss@step=1.5:slice=2')\n```\n", "does not parse"),
        ("The judge lives in `harness/judging/no_such_judge.py`.", "path the repository"),
        ("Pass `--chaos-lop` to point at a loop.", "not an option"),
        ("| `taint_node@step=1:slice=0:reason=a\\|b` | taint |", "shows its backslash"),
    ],
)
def test_a_planted_broken_line_of_prose_is_caught(plugin_options, text, says):
    problems = check_prose(text, "planted.md", plugin_options)
    assert any(says in p for p in problems), problems


def test_a_planted_broken_readme_link_is_caught():
    problems = check_links("see [the docs](docs/no-such-page.md)", ROOT / "README.md")
    assert problems and "no-such-page" in problems[0]

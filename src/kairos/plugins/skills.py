"""The ``Skills`` plugin: progressive disclosure of skills (book ch2 §3.9, Exp 2-6).

Three layers, each appended at the end of the trajectory and never edited afterwards:

1. **Catalog.** At the safe point before the first request of a session (after the user's
   message), one harness-made user message ``<skills_catalog fingerprint="…">`` lists each
   usable skill's name and description. Before
   every later request the catalog is recomputed; only when its fingerprint differs from the last
   one in the trajectory (a skill installed, removed, approved or revoked) is a
   ``<skills_catalog_update …>`` appended with just the difference. The fingerprint is read back
   from the trajectory and the listed entries are frozen in the session, so a resumed session
   continues from what its model has actually seen.
2. **Body.** ``load_skill(name)`` returns ``SKILL.md``'s body as a tool result, with the
   placeholders ``{{skill_dir}}`` and ``{{python}}`` replaced by the skill's absolute folder and
   the running Python, so the scripts it names can be run with the ``bash`` tool as written.
3. **Details.** ``read_skill_file(name, path)`` returns one sub-document, confined to the folder.

Nothing goes into the system prompt or the tool descriptions: both stay byte-identical while
skills come and go. Untrusted skills are absent from the catalog and cannot be loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kairos.agent.plugin import Plugin, RunContext, SafePoint
from kairos.context.session import SessionView
from kairos.models.types import Message, Origin
from kairos.skills.catalog import SKILL_FILE, Skill, SkillCatalog, SkillEntry
from kairos.skills.config import SkillsConfig
from kairos.tools.base import Resource, Tool, ToolContext, ToolResult, ToolSource
from kairos.tools.function import make_tool
from kairos.tools.sandbox import sandbox_of

CATALOG_TAG = "skills_catalog"
UPDATE_TAG = "skills_catalog_update"
_HEAD = re.compile(rf'^<({CATALOG_TAG}|{UPDATE_TAG}) fingerprint="([0-9a-f]+)">')
_STATE_KEY: Resource[dict[str, Any]] = Resource("kairos.skills")
_FROZEN_PREFIX = "kairos.skills.catalog."
CATALOG_INTRO = (
    "Skills are instruction packages for specific kinds of task, loaded on demand. When the user's task "
    "matches a skill's description, call load_skill with its name before you start, then follow its "
    "instructions; read its other files with read_skill_file only when the instructions point to them. "
    "Do not load a skill whose description does not match the task."
)
FOLLOW_UP = "Carry out the user's task now by following this skill's instructions, starting with their first step."
FIRST_COMMAND = (
    "The first command this skill runs is below. Call the bash tool with it now, "
    "after replacing its placeholders (such as FILE) with the user's values:\n{command}"
)
SKILLS_ORIGIN = Origin("harness", "skills")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def first_command(body: str) -> str | None:
    """The first inline command in a skill body that runs one of the skill's own files.

    Small models often read a skill and then improvise; naming the command in the load result's
    last line (what they act on) makes them run the skill's script instead.
    """
    steps = body.split("## Steps", 1)[-1]
    for text in (steps, body):
        for m in _CODE_SPAN.finditer(text):
            span = m.group(1).strip()
            if "{{skill_dir}}" in span and " " in span:
                return span
    return None


def fingerprint(entries: Mapping[str, str]) -> str:
    """A short hash of the catalog as the model sees it (names and descriptions)."""
    blob = json.dumps(sorted(entries.items()), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def render_catalog(entries: Mapping[str, str], fp: str) -> str:
    """The full catalog message: every skill's name and description, tagged with ``fp``."""
    lines = [f"- {name}: {desc}" for name, desc in sorted(entries.items())]
    return f'<{CATALOG_TAG} fingerprint="{fp}">\n{CATALOG_INTRO}\n' + "\n".join(lines) + f"\n</{CATALOG_TAG}>"


def render_update(old: Mapping[str, str], new: Mapping[str, str], fp: str) -> str:
    """Only what changed since the catalog the model last saw."""
    added = [f"- {n}: {d}" for n, d in sorted(new.items()) if old.get(n) != d]
    removed = sorted(set(old) - set(new))
    parts = ["The available skills changed."]
    if added:
        parts.append("New or changed skills:\n" + "\n".join(added))
    if removed:
        parts.append("No longer available (do not load them): " + ", ".join(removed))
    return f'<{UPDATE_TAG} fingerprint="{fp}">\n' + "\n".join(parts) + f"\n</{UPDATE_TAG}>"


def last_catalog(session: SessionView) -> str | None:
    """The fingerprint of the last catalog message in the trajectory (scans only new messages)."""
    memo = session.state.get_or_put(_STATE_KEY, lambda: {"scanned": 0, "fingerprint": None})
    messages = session.message_list()
    for m in messages[memo["scanned"] :]:
        if m.origin is not None:
            match = _HEAD.match(m.content)
            if match:
                memo["fingerprint"] = match.group(2)
    memo["scanned"] = len(messages)
    fp: str | None = memo["fingerprint"]
    return fp


class Skills(Plugin):
    """Skills for one workspace: the catalog at the safe point plus ``load_skill`` and ``read_skill_file``.

    Args:
        catalog: the skills found and their approval state (:meth:`from_config` builds it).
        max_file_chars: ``read_skill_file`` returns at most this many characters.
        python: the interpreter ``{{python}}`` in a skill's commands stands for; default this one.
        rescan_s: the skill folders are walked at most this often (see :attr:`rescan_s`).
    """

    stage = "annotate"

    def __init__(
        self,
        catalog: SkillCatalog,
        *,
        max_file_chars: int = 20_000,
        python: str | None = None,
        rescan_s: float = 1.0,
    ) -> None:
        self.catalog = catalog
        self.max_file_chars = max_file_chars
        self.python = python or sys.executable
        self.rescan_s = rescan_s
        """The catalog is checked before every request, but the skill folders are walked at most this
        often: requests a few milliseconds apart (fast tools, a fast model) reuse the last scan."""
        self._scanned: tuple[float, dict[str, str], str] | None = None
        """(when, entries, their fingerprint) of the last scan."""
        self._tools = [
            make_tool(self._load_skill_fn(), name="load_skill"),
            make_tool(self._read_skill_file_fn(), name="read_skill_file"),
        ]

    @classmethod
    def from_config(cls, workspace: Path, config: SkillsConfig | None = None) -> Skills:
        """The skills ``config`` makes available in ``workspace``."""
        config = config or SkillsConfig()
        catalog = SkillCatalog.for_workspace(workspace, config)
        return cls(catalog, max_file_chars=config.max_file_chars, rescan_s=config.rescan_s)

    def tools(self) -> Sequence[Tool | ToolSource]:
        """``load_skill`` and ``read_skill_file``."""
        return list(self._tools)

    async def at_safe_point(self, ctx: RunContext, at: SafePoint) -> Sequence[Message]:
        """Before each request: the catalog, then its changes.

        The catalog comes after the user's first message (measured: with the catalog placed before
        it, the 1.5B model loaded the matching skill in 1 of 5 trials, after it 8 of 8), and the
        change whenever a skill is created or removed, even during a turn.
        """
        if at != "before_request":
            return ()
        message = self.catalog_message(ctx.session)
        return (message,) if message is not None else ()

    # -- catalog -----------------------------------------------------------------------------

    def current_entries(self) -> dict[str, str]:
        """Name -> description of every usable skill (rescanned at most every ``rescan_s``)."""
        return dict(self._scan()[0])

    def _scan(self) -> tuple[dict[str, str], str]:
        now = time.monotonic()
        if self._scanned is None or now - self._scanned[0] >= self.rescan_s:
            entries = {s.name: s.summary for s in self.catalog.available()}
            self._scanned = (now, entries, fingerprint(entries))
        return self._scanned[1], self._scanned[2]

    def catalog_message(self, session: SessionView) -> Message | None:
        """The catalog, or the change since the last one, when the model's view is stale; else None."""
        entries, fp = self._scan()
        seen = last_catalog(session)
        if seen == fp or (seen is None and not entries):
            return None
        old = self._frozen_entries(session, seen) if seen is not None else None
        text = render_catalog(entries, fp) if old is None else render_update(old, entries, fp)
        session.freeze(_FROZEN_PREFIX + fp, json.dumps(entries, sort_keys=True, ensure_ascii=False))
        return Message.user(text, SKILLS_ORIGIN)

    @staticmethod
    def _frozen_entries(session: SessionView, fp: str) -> dict[str, str] | None:
        raw = session.frozen(_FROZEN_PREFIX + fp)
        if raw is None:  # e.g. a trajectory copied without its frozen decisions: resend in full
            return None
        data = json.loads(raw)
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None

    # -- tools -------------------------------------------------------------------------------

    def _usable(self, name: str) -> Skill | ToolResult:
        entry = self.catalog.find(name.strip())
        if entry is None or entry.status in ("needs_approval", "needs_trust"):
            names = ", ".join(s.name for s in self.catalog.available()) or "(none)"
            return ToolResult(f"No skill named {name!r}. Available skills: {names}.", is_error=True)
        if not entry.usable or entry.skill is None:
            return ToolResult(_unusable(entry), is_error=True)
        return entry.skill

    def substitute(self, skill: Skill, text: str) -> str:
        """Fill ``{{skill_dir}}`` and ``{{python}}`` so commands in a skill run as written."""
        return text.replace("{{skill_dir}}", shlex.quote(str(skill.folder))).replace(
            "{{python}}", shlex.quote(self.python)
        )

    def load(self, name: str, ctx: ToolContext | None = None) -> ToolResult:
        """``load_skill``: the skill's instructions, its files, and the command to run first.

        With ``ctx``, the skill's folder is shown to the session's sandbox (read-only), so that its
        scripts run even when it lies in a place commands cannot see (the home, /tmp).
        """
        found = self._usable(name)
        if isinstance(found, ToolResult):
            return found
        skill = found
        if ctx is not None:
            sandbox_of(ctx).show(skill.folder)
        body = self.substitute(skill, skill.body)
        files = skill.files()
        listing = f"Files in this skill: {', '.join(files)}\n" if files else ""
        # The files come first and a pointer to the steps last: small models act on what they read last.
        command = first_command(skill.body)
        follow_up = FIRST_COMMAND.format(command=self.substitute(skill, command)) if command else FOLLOW_UP
        text = f'<skill name="{skill.name}" folder="{skill.folder}">\n{listing}{body}\n</skill>\n{follow_up}'
        return ToolResult(text, metadata={"skill": skill.name, "digest": skill.digest})

    def read_file(self, name: str, path: str) -> ToolResult:
        """``read_skill_file``: a file inside the skill's folder (never outside it), capped."""
        found = self._usable(name)
        if isinstance(found, ToolResult):
            return found
        skill = found
        target = (skill.folder / path).resolve()
        if target != skill.folder and skill.folder not in target.parents:
            return ToolResult(
                f"{path!r} is outside the skill {skill.name!r}; give a path relative to its folder.", is_error=True
            )
        files = skill.files()
        if not target.is_file():
            return ToolResult(
                f"The skill {skill.name!r} has no file {path!r}. Its files: {', '.join(files) or '(none)'}.",
                is_error=True,
            )
        if target.name == SKILL_FILE and target.parent == skill.folder:
            return self.load(skill.name)
        data = target.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult(
                f"{path!r} is a binary file ({len(data)} bytes); use it by path from bash: {shlex.quote(str(target))}",
                is_error=True,
            )
        text = self.substitute(skill, text)
        note = ""
        if len(text) > self.max_file_chars:
            note = f"\n[truncated: showing the first {self.max_file_chars} of {len(text)} characters]"
            text = text[: self.max_file_chars]
        rel = target.relative_to(skill.folder).as_posix()
        return ToolResult(
            f'<skill_file skill="{skill.name}" path="{rel}">\n{text}\n</skill_file>{note}',
            metadata={"skill": skill.name, "path": rel},
        )

    def _load_skill_fn(self) -> Any:
        def load_skill(name: str, *, ctx: ToolContext) -> ToolResult:
            """Load a skill's full instructions. Skills are listed by name and description in the
            <skills_catalog> message. Call this before starting a task that matches a skill's description,
            then follow the instructions it returns (they may name scripts to run with bash and files to read
            with read_skill_file). Do not load skills that do not match the task.

            Args:
                name: the skill's name exactly as in the catalog, e.g. "report-writing".
            """
            return self.load(name, ctx)

        return load_skill

    def _read_skill_file_fn(self) -> Any:
        def read_skill_file(name: str, path: str) -> ToolResult:
            """Read one file of a loaded skill (a reference document or template it points to).
            Read only the files the skill's instructions say you need for the current task.

            Args:
                name: the skill's name, e.g. "report-writing".
                path: the file's path inside the skill folder, e.g. "reference.md".
            """
            return self.read_file(name, path)

        return read_skill_file


def _unusable(entry: SkillEntry) -> str:
    if entry.status == "invalid":
        return f"The skill {entry.name!r} is broken and cannot be loaded: {entry.reason}"
    return f"The skill {entry.name!r} is not approved by the user, so it cannot be loaded ({entry.status})."

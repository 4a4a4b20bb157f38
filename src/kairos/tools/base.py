"""Tools: what the model can call, as a small protocol, the context tools run in, and tool sets.

A :class:`Tool` is a name, a JSON-Schema spec, flags (read-only, external output, side effects,
timeout, output cap), ``validate(arguments)`` and ``call(arguments, ctx)``. Implementations:
:class:`~kairos.tools.function.FunctionTool` (``@tool``: a typed Python function) and
:class:`~kairos.tools.schema.SchemaTool` (only a JSON Schema and a handler, as MCP provides).

A :class:`ToolSource` is a set of tools that may change while kairos runs (an MCP server, a
plugin's dynamic tools): a fingerprint plus a list. A session works on a frozen :class:`ToolSet`
snapshot, refreshed at a turn start (and between model calls for a source with ``refresh_mid_turn =
True``, such as discovered tools), where new tools are appended (never reordered).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from kairos.models.types import Image, ToolSpec

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT_CHARS = 12_000
STATE_DIR_NAME = ".kairos"
SECRET_ENV_PATTERNS: tuple[str, ...] = (
    "*_KEY",
    "*_KEYS",
    "*APIKEY*",
    "*API_KEY*",
    "*ACCESS_KEY*",
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*COOKIE*",
)
"""Environment variables a tool's processes never see (case-insensitive fnmatch patterns)."""
READABLE_STATE = ("spill",)
"""Sub-folders of kairos's state that file tools may read (spilled outputs point there)."""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Resource(Generic[T]):
    """The typed key of one long-lived object in a session's :class:`ToolContext` (a shell, the sandbox…).

    ``ctx.get(KEY)`` is typed by the key, as openai-agents' ``RunContextWrapper[T]`` types a run's context: a
    tool finds what it needs without string keys or casts. The owner of a kind of object declares its key.
    """

    name: str
    """Stable and unique (``kairos.sandbox``): sub-agents name the resources they share by it."""


class Slots:
    """Objects kept under typed :class:`Resource` keys: a session's tool resources, plug-ins' per-session state.

    The one way a session's parts find each other: ``slots.get(KEY)`` is typed by the key.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[Resource[Any], Any] | None = None) -> None:
        self._items: dict[Resource[Any], Any] = dict(items or {})

    def get(self, key: Resource[T]) -> T | None:
        """The object kept under ``key``, or None."""
        found: T | None = self._items.get(key)
        return found

    def put(self, key: Resource[T], value: T) -> T:
        """Keep ``value`` under ``key`` (replacing what was there); returns it."""
        self._items[key] = value
        return value

    def get_or_put(self, key: Resource[T], make: Callable[[], T]) -> T:
        """The object under ``key``, made and kept by ``make()`` the first time."""
        found = self.get(key)
        return found if found is not None else self.put(key, make())

    def take(self, key: Resource[T]) -> T | None:
        """Remove and return the object under ``key`` (None: there was none)."""
        found: T | None = self._items.pop(key, None)
        return found

    def items(self) -> list[tuple[Resource[Any], Any]]:
        """What is kept, key and object (a copy: safe to change the slots meanwhile)."""
        return list(self._items.items())

    def share(self, other: Slots, names: Iterable[str]) -> None:
        """Keep here what ``other`` keeps under the keys named ``names`` (a sub-agent's shared resources)."""
        wanted = set(names)
        self._items.update({k: v for k, v in other._items.items() if k.name in wanted})

    def clear(self) -> None:
        """Forget everything (closing is the owner's: :meth:`ToolContext.aclose`)."""
        self._items.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Slots({', '.join(k.name for k in self._items)})"


class Services(Protocol):
    """What the host of a session (the runtime's handle) offers tools: its components, found by type."""

    @property
    def session_id(self) -> str:
        """The session the tool runs in."""
        ...

    def service(self, kind: type[T]) -> T | None:
        """The component of type ``kind``, or None when the host runs without one."""
        ...


RUNTIME_RESOURCE: Resource[Services] = Resource("kairos.runtime")
"""The runtime's handle, when a session runs under the runtime."""
NEWS_PENDING: Resource[Callable[[], bool]] = Resource("kairos.news_pending")
"""Whether an interrupt or a user's input waits for the agent: an action planned before it (the second call of
one reply, a browser step) should not run; the tool says so instead and the agent reads the news first."""
FOCUS_RESOURCE: Resource[str] = Resource("kairos.focus")
"""The turn's newest request (text): what long outputs are cut around."""


HARNESS_MADE = "kairos.harness"
"""Metadata key of a result kairos wrote itself (invalid arguments, a server that is down): not the tool's
output, so not external content even for an external tool."""


@dataclass(slots=True)
class ToolResult:
    """What a tool returns to the model."""

    content: str
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    """Facts for the harness and plugins (never shown to the model), e.g. ``exception``, ``truncated_from``."""
    images: tuple[Image, ...] = ()
    """Images for the model (a screenshot): they go into the trajectory with the text; a backend whose model
    reads only text sends a one-line note instead (:meth:`~kairos.models.types.Message.text_content`)."""

    @classmethod
    def harness_error(cls, content: str, **metadata: Any) -> ToolResult:
        """An error kairos writes about the call (never the tool's output: :data:`HARNESS_MADE`)."""
        return cls(content, is_error=True, metadata={**metadata, HARNESS_MADE: True})

    def with_content(self, content: str, metadata: dict[str, Any] | None = None) -> ToolResult:
        """This result with other text (and metadata), its images kept: what a hook that rewrites the text returns."""
        return ToolResult(content, self.is_error, self.metadata if metadata is None else metadata, self.images)


class InvalidArguments(ValueError):
    """The arguments do not match the tool's schema; the message is written for the model."""


@dataclass(slots=True)
class ToolContext:
    """Per-session facts and resources a tool may need (never shown to the model)."""

    workspace: Path
    """Root directory tools are confined to."""
    session_id: str = ""
    cwd: Path | None = None
    """Current directory of the session's shell; starts at ``workspace``."""
    resources: Slots = field(default_factory=Slots)
    """Long-lived per-session objects (the bash shell, caches) by their typed keys; closed with the session.
    A mapping given here becomes :class:`Slots`."""
    state_dirs: tuple[Path, ...] = ()
    """kairos's own state (trajectories, spill files): file tools never write there, and read only its
    ``spill`` folder. ``<workspace>/.kairos`` is always one of them."""
    secret_env: tuple[str, ...] = SECRET_ENV_PATTERNS
    """Environment variables kept from the processes tools start (see :meth:`environment`)."""
    home: Path | None = None
    """The session store's state dir (``$KAIROS_HOME`` or ``<workspace>/.kairos``): where a tool keeps
    per-session files a front end reads (the browser's screenshot). None: ``<workspace>/.kairos``."""

    def __post_init__(self) -> None:
        if not isinstance(self.resources, Slots):  # a plain mapping of typed keys (tests, callers)
            self.resources = Slots(self.resources)  # type: ignore[unreachable]
        self.workspace = self.workspace.resolve()
        if self.cwd is None:
            self.cwd = self.workspace
        # resolved: a ``.kairos`` that is a link must not open a way around the check
        dirs = {(self.workspace / STATE_DIR_NAME).resolve(), *(d.resolve() for d in self.state_dirs)}
        self.home = self.home.resolve() if self.home is not None else (self.workspace / STATE_DIR_NAME).resolve()
        self.state_dirs = tuple(sorted(dirs))

    def get(self, key: Resource[T]) -> T | None:
        """The resource kept under ``key``, or None."""
        return self.resources.get(key)

    def put(self, key: Resource[T], value: T) -> T:
        """Keep ``value`` under ``key`` (replacing what was there); returns it."""
        return self.resources.put(key, value)

    def get_or_put(self, key: Resource[T], make: Callable[[], T]) -> T:
        """The resource under ``key``, made and kept by ``make()`` the first time."""
        return self.resources.get_or_put(key, make)

    def take(self, key: Resource[T]) -> T | None:
        """Remove and return the resource under ``key`` (None: there was none)."""
        return self.resources.take(key)

    def resolve_path(self, path: str, *, write: bool = False) -> Path:
        """Resolve ``path`` against the cwd and refuse anything outside the workspace or inside kairos's state.

        Raises:
            PermissionError: the path (after following symlinks) leaves the workspace, or is kairos's
                own state (any write; a read outside its ``spill`` folder).
        """
        base = self.cwd or self.workspace
        p = (base / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
        if p != self.workspace and self.workspace not in p.parents:
            raise PermissionError(f"{path!r} is outside the workspace {self.workspace}; use a path inside it")
        for state in self.state_dirs:
            if p != state and state not in p.parents:
                continue
            readable = any(p == state / d or state / d in p.parents for d in READABLE_STATE)
            if write or not readable:
                raise PermissionError(
                    f"{path!r} is inside {state.name}/, kairos's own state (sessions, approvals); "
                    "tools cannot change it" + ("" if write else " or read it, except its spill/ files")
                )
        return p

    def environment(self) -> dict[str, str]:
        """``os.environ`` without secrets (API keys, tokens, passwords): what tool processes get."""
        return {k: v for k, v in os.environ.items() if not is_secret_name(k, self.secret_env)}

    async def aclose(self) -> None:
        """Close every resource that has an ``aclose`` (the bash shell, clients)."""
        for _, res in self.resources.items():
            close = getattr(res, "aclose", None)
            if close is not None:
                await close()
        self.resources.clear()


def is_secret_name(name: str, patterns: Iterable[str] = SECRET_ENV_PATTERNS) -> bool:
    """Whether an environment variable's name looks like it holds a secret."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


# ---- the protocol ---------------------------------------------------------------------------


@runtime_checkable
class Tool(Protocol):
    """Anything the model can call. ``validate`` runs before any hook; ``call`` only on valid arguments."""

    @property
    def name(self) -> str:
        """Unique name; what the model calls."""
        ...

    @property
    def spec(self) -> ToolSpec:
        """Name, description and JSON Schema of the arguments, as the model sees them."""
        ...

    @property
    def read_only(self) -> bool:
        """It only reads (safe to repeat, safe to run without asking).

        An identical call within a turn is answered from the first one's result unless a call with
        side effects ran in between; a tool whose answer changes by itself says ``volatile = True``
        (an optional attribute, see :class:`~kairos.tools.function.FunctionTool`).
        """
        ...

    @property
    def external(self) -> bool:
        """Its output comes from outside the trust boundary (web pages, mail, other people's files)."""
        ...

    @property
    def side_effects(self) -> bool:
        """Calling it changes the world (writes, sends, deletes)."""
        ...

    @property
    def timeout_s(self) -> float:
        """Seconds before the call is stopped and reported as timed out."""
        ...

    @property
    def max_output_chars(self) -> int:
        """Longer output is cut, with an explicit notice."""
        ...

    @property
    def long_running(self) -> bool:
        """Under a runtime with async tasks, a call returns a task id at once; the result comes as an event."""
        ...

    @property
    def volatile(self) -> bool:
        """Its answer changes by itself: an identical read-only call runs again (:mod:`kairos.agent.guard`)."""
        ...

    @property
    def irreversible(self) -> bool:
        """Cannot be undone: it runs only when repeated with a confirm token (:mod:`kairos.security.confirm`)."""
        ...

    def validate(self, arguments: dict[str, Any]) -> None:
        """Check ``arguments`` against the schema.

        Raises:
            InvalidArguments: with a message that tells the model what to send instead.
        """
        ...

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run on validated arguments (no timeout or capping: the executor adds those)."""
        ...


@runtime_checkable
class ToolSource(Protocol):
    """Tools that may change at run time. ``fingerprint`` is cheap and changes iff the list changes."""

    @property
    def refresh_mid_turn(self) -> bool:
        """A changed list is taken up between model calls, not only at the next turn start (tools just found)."""
        ...

    def fingerprint(self) -> str:
        """A short string that changes whenever the tools (names or specs) change."""
        ...

    async def list_tools(self) -> Sequence[Tool]:
        """The current tools."""
        ...


class StaticTools:
    """A fixed list of tools as a :class:`ToolSource`."""

    refresh_mid_turn = False

    def __init__(self, tools: Iterable[Tool]) -> None:
        self.tools = tuple(tools)
        names = [t.name for t in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"two tools are named {dupes[0]!r}; tool names must be unique")
        self._fingerprint = "static:" + ",".join(sorted(names))

    def fingerprint(self) -> str:
        """Constant: a static list never changes."""
        return self._fingerprint

    async def list_tools(self) -> Sequence[Tool]:
        """The tools given at construction."""
        return self.tools


def spec_digest(tools: Iterable[Tool]) -> str:
    """A digest of the tools' specs (for sources that compute their fingerprint from content)."""
    h = hashlib.sha256()
    for t in tools:
        h.update(t.spec.serialized().encode())
    return h.hexdigest()[:16]


class ToolSet:
    """An ordered, frozen snapshot of tools: what one session's requests list, in this order.

    The first snapshot is sorted by name; :meth:`updated` keeps existing positions, so the tool
    list never reorders when a source changes.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}; tool names must be unique")
            self._tools[t.name] = t
        self._specs = tuple(t.spec for t in self._tools.values())

    @classmethod
    def sorted(cls, tools: Iterable[Tool]) -> ToolSet:
        """A first snapshot: tools in name order."""
        return cls(sorted(tools, key=lambda t: t.name))

    def updated(self, current: Iterable[Tool]) -> tuple[ToolSet, str | None]:
        """The snapshot for ``current`` tools, and what changed (None when nothing did).

        Kept tools stay where they were (a changed spec is replaced in place), removed ones go, new
        ones are appended in name order.
        """
        now = {t.name: t for t in current}
        kept = [now[n] for n in self._tools if n in now]
        added = sorted((t for n, t in now.items() if n not in self._tools), key=lambda t: t.name)
        removed = [n for n in self._tools if n not in now]
        changed = [n for n, t in self._tools.items() if n in now and now[n].spec != t.spec]
        if not (added or removed or changed):
            return self, None
        parts = []
        if added:
            parts.append("added " + ", ".join(t.name for t in added))
        if removed:
            parts.append("removed " + ", ".join(removed))
        if changed:
            parts.append("changed " + ", ".join(changed))
        return ToolSet([*kept, *added]), "; ".join(parts)

    def get(self, name: str) -> Tool | None:
        """The tool named ``name``, if any."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Tool names in snapshot order."""
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """Specs in snapshot order (the same tuple every call: cheap identity checks)."""
        return self._specs

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

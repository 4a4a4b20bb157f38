"""The server stands on the runtime's methods: it never reaches into storage or the runtime's private parts."""

from __future__ import annotations

import re
from pathlib import Path

from kairos.agent import Agent
from kairos.context.session import SessionStore
from kairos.runtime import Runtime
from kairos.testing import ScriptedModel

SERVER = Path(__file__).parents[2] / "src" / "kairos" / "server"
REACHING_IN = re.compile(r"\b(?:runtime|rt)\.(?:store|db|_(?!_)\w*)\b")  # dunders (async with) are public


def test_no_route_touches_storage_or_private_members() -> None:
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(SERVER.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if REACHING_IN.search(line)
    ]
    assert found == []


async def test_a_user_session_kept_by_an_older_version_is_found_again(tmp_path: Path) -> None:
    async with Runtime(Agent(ScriptedModel()), SessionStore(tmp_path)) as rt:
        old = rt.create_session("openai user alice")
        rt.db.write("CREATE TABLE IF NOT EXISTS server_openai_users (user TEXT PRIMARY KEY, session TEXT NOT NULL)")
        rt.db.write("INSERT INTO server_openai_users (user, session) VALUES (?, ?)", ("alice", old))
        assert rt.named_session("openai", "alice", "openai user alice") == old
        bob = rt.named_session("openai", "bob", "openai user bob")
        assert bob != old and rt.named_session("openai", "bob", "x") == bob
        assert rt.named_session("mail", "bob", "x") != bob  # another namespace, another session

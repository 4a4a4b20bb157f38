"""The OpenAPI document describes the stream: ``StreamRecord`` and one schema per published type."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kairos.runtime.outbound import PAYLOADS, stream_record
from kairos.testing import ScriptedModel, call, reply
from kairos.tools.function import tool
from tests.server.conftest import api


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


async def test_the_openapi_document_has_the_stream_record_and_every_ref_resolves(tmp_path: Path) -> None:
    async with api(tmp_path, ScriptedModel()) as (_, client):
        doc = (await client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    record = schemas["StreamRecord"]
    assert set(record["discriminator"]["mapping"]) == {c.TYPE for c in PAYLOADS}
    for cls in PAYLOADS:
        data = schemas[f"{cls.__name__}Record"]["properties"]["data"]
        assert data == {"$ref": f"#/components/schemas/{cls.__name__}"}
    dangling = {r for r in _refs(doc) if r.removeprefix("#/components/schemas/") not in schemas}
    assert not dangling
    sse = doc["paths"]["/v1/sessions/{session_id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
    assert sse["itemSchema"]["properties"]["data"]["contentSchema"] == {"$ref": "#/components/schemas/StreamRecord"}


@tool
def lookup(key: str) -> str:
    """Look a value up."""
    return f"{key}=42"


async def test_what_a_session_streams_fits_the_documented_schema(tmp_path: Path) -> None:
    model = ScriptedModel([reply("", call("lookup", {"key": "x"})), reply("x is 42")])
    async with api(tmp_path, model, tools=[lookup]) as (rt, client):
        sid = (await client.post("/v1/sessions", json={"title": "t"})).json()["id"]
        assert (await client.post(f"/v1/sessions/{sid}/messages", json={"text": "x?"})).status_code == 202
        await rt.wait_idle(sid)
        records = (await client.get(f"/v1/sessions/{sid}/timeline")).json()["records"]
    assert {"run.started", "agent.tool_started", "agent.tool_finished", "agent.final"} <= {r["type"] for r in records}
    for r in records:
        assert stream_record().model_validate(r).root.data.to_data() == r["data"]

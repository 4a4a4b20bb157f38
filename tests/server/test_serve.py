"""``kairos serve`` as a real subprocess, its model a loopback OpenAI-compatible server."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import httpx

from kairos.context.session import SessionStore
from tests.support.kairos_cli import KairosProcess, run_kairos
from tests.support.openai_server import OpenAIServer, text_reply

TOKEN = "serve-test-token-9f2"


def test_refuses_a_public_address_without_a_token(workspace: Path, user_config_dir: Path, tmp_path: Path) -> None:
    code, out, err = run_kairos(
        "serve", "--host", "0.0.0.0", "-w", workspace, config_dir=user_config_dir, logs=tmp_path / "logs"
    )
    assert code == 1
    assert "refusing to listen on 0.0.0.0 without a bearer token" in err and "KAIROS_API_TOKEN" in err


def test_serves_answers_and_drains_on_sigterm(workspace: Path, user_config_dir: Path, tmp_path: Path) -> None:
    with OpenAIServer() as model:
        model.script(text_reply("served answer"), text_reply("second answer"))
        with KairosProcess(
            "serve",
            "--port",
            "0",
            "-w",
            workspace,
            "--model",
            "openai:fake-model",
            "--base-url",
            model.openai_base_url,
            config_dir=user_config_dir,
            logs=tmp_path / "logs",
            env={"KAIROS_API_TOKEN": TOKEN},
        ) as proc:
            proc.wait_until("serving", lambda: " on http://" in proc.stdout)
            match = re.search(r"on (http://[\d.]+:\d+)", proc.stdout)
            assert match is not None
            auth = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=match.group(1), headers=auth, timeout=30) as client:
                assert client.get("/v1/sessions", headers={"Authorization": "Bearer no"}).status_code == 401
                sid = client.post("/v1/sessions", json={"title": "served"}).json()["id"]
                assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).status_code == 202
                deadline = time.monotonic() + 60
                while client.get(f"/v1/sessions/{sid}").json()["messages"] < 2:
                    assert time.monotonic() < deadline, proc.stderr
                    time.sleep(0.05)
                second = client.post(f"/v1/sessions/{sid}/messages", json={"text": "and then?"})
                assert second.status_code == 202
            proc.send(signal.SIGTERM)
            assert proc.wait() == 0, proc.stderr
            assert TOKEN not in proc.stdout + proc.stderr
            assert "kairos stopped" in proc.stdout
    store = SessionStore(workspace)
    contents = [m.content for m in store.trajectories.load_messages(sid)]
    pending = [e.record for e in store.trajectories.pending_events(sid)]
    store.close()
    assert "hi" in contents[0] and "served answer" in contents  # the product agent stamps user messages
    # acknowledged before the stop: answered in the drain, or kept for the next start
    assert any("and then?" in c for c in contents) or any("and then?" in str(r) for r in pending)

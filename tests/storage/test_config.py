"""``[storage]``: store and bus URLs from the user config, never an untrusted workspace; passwords masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kairos.config import KairosConfig, load_config
from kairos.errors import ConfigError
from kairos.storage.config import StorageConfig, mask_url
from tests.support.kairos_cli import run_kairos

SECRET = "s3cr3t-pw"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://kairos:s3cr3t-pw@db:5432/k", "postgresql://kairos:***@db:5432/k"),
        ("postgresql://db/k?sslmode=require&password=s3cr3t-pw", "postgresql://db/k?sslmode=require&password=***"),
        ("postgresql://kairos@db/k", "postgresql://kairos@db/k"),  # a user name alone is no secret
        ("nats://s3cr3t-pw@127.0.0.1:4222", "nats://***@127.0.0.1:4222"),  # a NATS token is
        ("nats://a:s3cr3t-pw@n1:4222,nats://b:s3cr3t-pw@n2:4222", "nats://a:***@n1:4222,nats://b:***@n2:4222"),
        ("tls://u:s3cr3t-pw@n1", "tls://u:***@n1"),
        ("embedded", "embedded"),
    ],
)
def test_mask_url_hides_passwords_and_tokens(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_defaults_are_embedded(workspace: Path) -> None:
    storage = load_config(workspace).storage
    assert (storage.store, storage.bus, storage.store_kind, storage.bus_kind) == ("embedded",) * 4
    assert StorageConfig(store="sqlite", bus="sqlite") == storage == StorageConfig()


def test_the_user_config_sets_them_and_flags_override(workspace: Path, user_config_dir: Path) -> None:
    write(user_config_dir / "config.toml", '[storage]\nbus = "nats://127.0.0.1:4222"\ndeployment = "prod"\n')
    storage = load_config(workspace).storage
    assert (storage.bus, storage.bus_kind, storage.store_kind, storage.deployment) == (
        "nats://127.0.0.1:4222", "nats", "embedded", "prod",
    )  # fmt: skip
    flags = {"storage": {"bus": "nats://10.0.0.2:4222", "store": "postgresql://u@db/k"}}
    config = load_config(workspace, flags)
    assert (config.storage.bus, config.storage.store, config.storage.deployment) == (
        "nats://10.0.0.2:4222", "postgresql://u@db/k", "prod",
    )  # fmt: skip
    assert "command line storage" in config.sources


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('bus = "redis://u:s3cr3t-pw@host"', "nats://host:port"),
        ('store = "mysql://u:s3cr3t-pw@host/db"', "postgresql://"),
        ('bus = "nats://"', "nats://host:port"),
        ('deployment = "a.b"', "letters, digits"),
    ],
)
def test_a_bad_url_is_refused_without_showing_its_password(
    workspace: Path, user_config_dir: Path, table: str, problem: str
) -> None:
    write(user_config_dir / "config.toml", f"[storage]\n{table}\n")
    with pytest.raises(ConfigError, match="storage") as caught:
        load_config(workspace)
    assert problem in str(caught.value) and SECRET not in str(caught.value)


def test_an_untrusted_workspace_cannot_set_them(workspace: Path, user_config_dir: Path) -> None:
    write(user_config_dir / "config.toml", '[storage]\nbus = "nats://127.0.0.1:4222"\n')
    write(
        workspace / "kairos.toml",
        f'[storage]\nstore = "postgresql://evil:{SECRET}@evil.example/k"\nbus = "nats://evil.example:4222"\n',
    )
    config = load_config(workspace)
    assert (config.storage.store, config.storage.bus) == ("embedded", "nats://127.0.0.1:4222")  # the user's
    ignored = [n for n in config.notices if "ignored [storage]" in n]
    assert len(ignored) == 1 and "evil.example" in ignored[0] and SECRET not in "".join(config.notices)
    assert "evil:***@" in ignored[0] and "where your sessions and events are stored" in ignored[0]
    assert "kairos trust" in config.notices[-1]
    trusted = load_config(workspace, trusted=True)  # a trusted workspace's file counts as the user's
    assert trusted.storage.bus == "nats://evil.example:4222" and not trusted.notices


def test_kairos_config_shows_the_effective_storage_masked(
    workspace: Path, user_config_dir: Path, tmp_path: Path
) -> None:
    write(
        user_config_dir / "config.toml",
        f'[storage]\nstore = "postgresql://kairos:{SECRET}@db/k"\nbus = "nats://kairos:{SECRET}@127.0.0.1:4222"\n',
    )
    write(workspace / "kairos.toml", f'[storage]\nbus = "nats://{SECRET}@evil.example:4222"\n')
    code, out, err = run_kairos("config", "-w", workspace, config_dir=user_config_dir, logs=tmp_path / "logs")
    assert code == 0, err
    assert SECRET not in out + err
    shown = json.loads(out)["storage"]
    assert shown == {
        "store": "postgresql://kairos:***@db/k", "bus": "nats://kairos:***@127.0.0.1:4222", "deployment": None,
        "leader_retry_s": 5.0,
    }  # fmt: skip
    assert "ignored [storage]" in err and "***@evil.example" in err


def test_the_json_form_is_masked_and_the_python_form_keeps_the_url() -> None:
    config = KairosConfig(storage=StorageConfig(bus=f"nats://u:{SECRET}@127.0.0.1:4222"))
    assert config.model_dump(mode="json")["storage"]["bus"] == "nats://u:***@127.0.0.1:4222"  # /v1/settings
    assert SECRET not in config.model_dump_json()  # kairos config
    assert config.model_dump()["storage"]["bus"] == config.storage.bus == f"nats://u:{SECRET}@127.0.0.1:4222"


def test_kairos_run_uses_the_configured_store_and_names_it_masked(
    workspace: Path, user_config_dir: Path, tmp_path: Path
) -> None:
    from kairos.testing.servers import free_port

    url = f"postgresql://kairos:{SECRET}@127.0.0.1:{free_port()}/k"  # nothing listens: never SQLite in its place
    write(user_config_dir / "config.toml", f'[storage]\nstore = "{url}"\n')
    code, out, err = run_kairos("run", "-w", workspace, "hi", config_dir=user_config_dir, logs=tmp_path / "logs")
    assert code == 1 and "postgresql://kairos:***@127.0.0.1:" in err and "cannot be used" in err
    assert SECRET not in out + err and not (workspace / ".kairos" / "kairos.db").exists()

"""`kairos models assemble`: the install step also warms the default agent's prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.cli import app

runner = CliRunner()


def _installed() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    from kairos.models.bundled import list_bundled

    return next(r for r in list_bundled() if r.name == "local").installed


def test_assemble_does_not_warm_a_model_your_settings_do_not_use(
    user_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _installed():
        pytest.skip("bundled model parts not installed")
    (user_config_dir / "config.toml").write_text('model = "openai:gpt-x"\nbase_url = "http://127.0.0.1:9/v1"\n')
    result = runner.invoke(app, ["models", "assemble", "local"])
    assert result.exit_code == 0, result.output
    assert "not warming: your settings use model openai:gpt-x" in result.output


@pytest.mark.model
def test_assemble_warms_the_default_agents_prompt_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _installed():
        pytest.skip("bundled model parts not installed")
    monkeypatch.setenv("KAIROS_PREFIX_CACHE_DIR", str(tmp_path))
    first = runner.invoke(app, ["models", "assemble", "local"])
    assert first.exit_code == 0, first.output
    assert "warm kairos run: its prompt's first" in first.output and "computed in" in first.output
    assert "warm kairos chat and serve" in first.output
    assert len(list(tmp_path.glob("*.kvstate"))) == 2  # run's agent, and the runtime's with its own tools
    again = runner.invoke(app, ["models", "assemble", "local"])
    assert again.exit_code == 0 and again.output.count("already cached") == 2, again.output
    skipped = runner.invoke(app, ["models", "assemble", "local", "--no-warm"])
    assert skipped.exit_code == 0 and "warm" not in skipped.output.replace("--no-warm", "")

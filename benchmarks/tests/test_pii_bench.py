from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from kairos.memory.pii import PII_TOOL, PII_TYPES, Detection
from kairos.testing import ScriptedModel, call, reply
from kairos_bench import PII
from kairos_bench.pii import DATA, Labelled, load, overlaps, pick, run, score


def test_the_labelled_set_is_big_varied_and_consistent() -> None:
    items = load()
    assert len(items) >= 120
    clean = [i for i in items if not i.spans]
    assert 0.28 <= len(clean) / len(items) <= 0.45  # about a third without PII
    assert {t for i in items for _, _, t in i.spans} == set(PII_TYPES)
    assert any(i.external for i in items) and any(not i.external for i in items)
    assert len({i.id for i in items}) == len(items)


def test_a_span_that_does_not_match_its_text_is_an_error(tmp_path: Path) -> None:
    bad = {
        "id": "x",
        "source": "user",
        "text": "mail a@b.example",
        "spans": [{"start": 0, "end": 4, "type": "EMAIL", "text": "a@b."}],
    }
    (tmp_path / "bad.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="does not match"):
        load(tmp_path / "bad.jsonl")


def test_scoring_counts_matches_misses_and_policy() -> None:
    item = Labelled("t", "key sk-1 for a@b.example", False, ((4, 8, "SECRET"), (13, 24, "EMAIL")))
    clean = Labelled("c", "nothing here", False, ())
    found = (Detection("SECRET", 4, 8), Detection("NAME", 0, 3))
    row = score([item, clean], [found, ()], ["key [SECRET] for a@b.example", "nothing here"])
    assert row["recall"] == 0.5 and row["precision"] == 0.5
    assert row["per_type"]["EMAIL"]["recall"] == 0.0 and row["per_type"]["SECRET"]["precision"] == 1.0
    assert row["masked_required"] == 1.0 and row["kept_required"] == 1.0 and row["clean_texts_unchanged"] == 1.0
    assert overlaps((0, 10), (5, 20)) and not overlaps((0, 10), (9, 30))


def test_regex_only_run() -> None:
    result = run(Console(quiet=True), no_model=True)
    assert result["bench"] == "pii" and result["params"]["texts"] == len(load(DATA))
    regex, model_row = result["rows"]
    assert model_row["status"].startswith("not run")
    assert regex["precision"] >= 0.9 and regex["per_type"]["NAME"]["recall"] == 0.0  # names need the model
    assert result["summary"]["kept_required_regex"] == 1.0


def test_with_a_scripted_model_that_names_people() -> None:
    items = pick(load(), 12)

    # the bench sends the texts in order: one scripted answer per text, naming its people
    answers = [
        reply(
            "", call(PII_TOOL.name, {"spans": [{"text": i.text[s:e], "type": t} for s, e, t in i.spans if t == "NAME"]})
        )
        for i in items
    ]
    model = ScriptedModel(list(answers))
    result = run(Console(quiet=True), limit=12, llm=model)
    regex, with_model = result["rows"]
    assert with_model["model_failures"] == 0 and len(model.requests) == 12
    names = sum(1 for i in items for *_, t in i.spans if t == "NAME")
    assert names and with_model["per_type"]["NAME"]["recall"] == 1.0 and regex["per_type"]["NAME"]["recall"] == 0.0
    assert result["summary"]["recall_regex_model"] > result["summary"]["recall_regex"]


def test_data_folder_option(tmp_path: Path) -> None:
    rec = {
        "id": "a",
        "source": "external",
        "text": "tel +49 30 901820",
        "spans": [{"start": 4, "end": 17, "type": "PHONE", "text": "+49 30 901820"}],
    }
    (tmp_path / "pii_labelled.jsonl").write_text(json.dumps(rec) + "\n")
    result = run(Console(quiet=True), no_model=True, data=tmp_path)
    assert result["params"]["texts"] == 1 and result["summary"]["recall_regex"] == 1.0
    assert result["rows"][0]["masked_required"] == 1.0  # a phone number in external content is masked


def test_registered() -> None:
    assert "no_model" in PII.options and PII.takes_limit and PII.module == "pii"

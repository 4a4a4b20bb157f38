from __future__ import annotations

import asyncio

import pytest

from kairos.memory.pii import (
    MASK_ALL,
    MEMORY_POLICY,
    PII_TOOL,
    PiiScrubber,
    ScrubPolicy,
    find_regex,
    iban_ok,
    luhn_ok,
    windows,
)
from kairos.models.types import ModelResponse
from kairos.testing import ScriptedModel, call, reply

REGEX = PiiScrubber()
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w"


def types_of(text: str) -> list[tuple[str, str]]:
    return [(d.type, text[d.start : d.end]) for d in find_regex(text)]


# ---- the regex layer ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail jane.doe@example.co.uk now", ("EMAIL", "jane.doe@example.co.uk")),
        ("call +1 415 555 0132 today", ("PHONE", "+1 415 555 0132")),
        ("call (212) 555-0198", ("PHONE", "(212) 555-0198")),
        ("ring +33 1 42 68 53 00", ("PHONE", "+33 1 42 68 53 00")),
        ("text 07700 900123", ("PHONE", "07700 900123")),
        ("card 4111 1111 1111 1111 ok", ("CARD", "4111 1111 1111 1111")),
        ("iban DE89 3704 0044 0532 0130 00.", ("BANK_ACCOUNT", "DE89 3704 0044 0532 0130 00")),
        ("routing number 123006800", ("BANK_ACCOUNT", "123006800")),
        ("SSN 078-05-1120", ("GOV_ID", "078-05-1120")),
        ("passport number 533380006", ("GOV_ID", "533380006")),
        ("host 203.0.113.42.", ("IP", "203.0.113.42")),
        ("v6 2001:db8:85a3::8a2e:370:7334", ("IP", "2001:db8:85a3::8a2e:370:7334")),
        ("key sk-proj-Xa81kLq0ZzT3mB7vYp2QwErTy5Ui", ("SECRET", "sk-proj-Xa81kLq0ZzT3mB7vYp2QwErTy5Ui")),
        ("ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", ("SECRET", "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R")),
        ("id AKIAIOSFODNN7EXAMPLE", ("SECRET", "AKIAIOSFODNN7EXAMPLE")),
        (f"jwt {JWT}", ("SECRET", JWT)),
        ("my password is Tr0ub4dor&3 ok", ("SECRET", "Tr0ub4dor&3")),
        ("I was born on March 3, 1985.", ("DOB", "March 3, 1985")),
        ("at 42 Elm Street, Springfield, IL 62704.", ("ADDRESS", "42 Elm Street, Springfield, IL 62704")),
        ("policy number FS-447291 covers", ("ACCOUNT_REF", "FS-447291")),
        ("NHS number 943 476 5919.", ("MEDICAL_ID", "943 476 5919")),
    ],
)  # fmt: skip
def test_regex_finds_each_type(text: str, expected: tuple[str, str]) -> None:
    assert types_of(text) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "I like Thai food, especially green curry.",
        "Upgrade to Python 3.11.7 and numpy 1.26.4; the fix is in version 10.2.0.1.",
        "Your order #A-48213-77 ships; order number 112-4839201-5567342.",
        "ISBN 978-0-306-40615-7 and ISBN-10 0-306-40615-2.",
        "The meeting moved to 2024-06-12 at 14:00; deadline March 3, 2025.",
        "Tracking 1Z999AA10123456784, request 123e4567-e89b-12d3-a456-426614174000.",
        "It costs $1,234.56; latency 123.45 ms at 12:30:45; localhost:8080.",
        "Booking reference PAC-778K4M, seats 12C and 14C.",
        "def add(a, b):\n    return a + b  # issue 4521",
        "SKU 100-200-3000 is blue.",
    ],
)
def test_tricky_negatives_are_left_alone(text: str) -> None:
    assert find_regex(text) == []
    assert REGEX.prefilter(text).text == text


def test_checksums() -> None:
    assert luhn_ok("4242 4242 4242 4242") and not luhn_ok("4242 4242 4242 4241")
    assert not luhn_ok("0000 0000 0000 0000")  # passes Luhn, is no card
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB82 WEST 1234 5698 7654 33")
    assert find_regex("card 4242 4242 4242 4241") == []


# ---- the policy -----------------------------------------------------------------------------


def test_memory_policy_masks_secrets_and_keeps_what_the_user_wants_remembered() -> None:
    text = (
        "My card is 4242 4242 4242 4242, SSN 078-05-1120, key ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R. "
        "Routing number 123006800, account number 4429853327, policy number FS-447291, "
        "email me at ann@example.com. I like Thai food."
    )
    out = REGEX.prefilter(text).text
    assert "[CARD ending 4242]" in out and "4242 4242 4242 4242" not in out
    assert "[GOV_ID ending 1120]" in out and "078-05" not in out
    assert "[SECRET]" in out and "ghp_" not in out
    for kept in ("123006800", "4429853327", "FS-447291", "ann@example.com", "I like Thai food."):
        assert kept in out


def test_external_content_masks_contact_details() -> None:
    text = "From Tom <tom@acme.example>, tel +49 30 901820, server 198.51.100.23"
    out = REGEX.prefilter(text, external=True).text
    assert out == "From Tom <[EMAIL]>, tel [PHONE], server [IP]"
    assert REGEX.prefilter(text).text == text  # in the user's own words the same details stay


def test_policy_per_type_and_unknown_types_fail_safe() -> None:
    keep_email = PiiScrubber(policy=ScrubPolicy(own={"EMAIL": "keep"}))
    out = keep_email.prefilter("a@b.example and 4111 1111 1111 1111").text
    assert out == "a@b.example and [CARD]"  # CARD is not in the map: masked
    assert MEMORY_POLICY.action("SECRET") == "mask" and MASK_ALL.action("NAME") == "mask"


def test_prefilter_reports_kept_detections_too() -> None:
    result = REGEX.prefilter("policy number FS-447291")
    assert result.text == "policy number FS-447291"
    assert [(d.type, d.source) for d in result.detections] == [("ACCOUNT_REF", "regex")]


# ---- the model layer ------------------------------------------------------------------------


def spans(*items: tuple[str, str]) -> ModelResponse:
    return reply("", call(PII_TOOL.name, {"spans": [{"text": t, "type": k} for t, k in items]}))


async def test_model_adds_what_the_regex_missed_and_never_sees_secrets() -> None:
    model = ScriptedModel([spans(("Rosewood Court, Leeds LS6 2AB", "ADDRESS"), ("teertsmle", "SECRET"))])
    scrubber = PiiScrubber(model)
    text = "Key sk-proj-Xa81kLq0ZzT3mB7vYp2QwErTy5Ui. Mum lives at Rosewood Court, Leeds LS6 2AB; wifi teertsmle."
    result = await scrubber.detect(text)
    assert result.model_error is None
    assert result.text == "Key [SECRET]. Mum lives at Rosewood Court, Leeds LS6 2AB; wifi [SECRET]."
    assert {(d.type, d.source) for d in result.detections} == {
        ("SECRET", "regex"),
        ("ADDRESS", "model"),
        ("SECRET", "model"),
    }
    sent = model.requests[0]
    assert sent.tools == (PII_TOOL,)
    assert "sk-proj" not in sent.messages[0].content and "[SECRET]" in sent.messages[0].content


async def test_names_are_kept_in_memory_but_mask_all_hides_them() -> None:
    text = "My adjuster is Patricia Wong."
    assert await PiiScrubber(ScriptedModel([spans(("Patricia Wong", "NAME"))])).scrub(text) == text
    masked = await PiiScrubber(ScriptedModel([spans(("Patricia Wong", "NAME"))]), policy=MASK_ALL).scrub(text)
    assert masked == "My adjuster is [NAME]."


async def test_every_occurrence_is_masked_and_hallucinated_spans_ignored() -> None:
    model = ScriptedModel([spans(("Jake", "NAME"), ("Nobody Here", "NAME"), ("x", "NAME"))])
    result = await PiiScrubber(model, policy=MASK_ALL).detect("Jake said Jake would come.")
    assert result.text == "[NAME] said [NAME] would come."


@pytest.mark.parametrize(
    "step",
    [
        RuntimeError("backend down"),
        reply("I think there is no PII."),
        reply("", call(PII_TOOL.name, "{not json")),
        reply("", call(PII_TOOL.name, {"spans": "Jake"})),
        reply("", call("other_tool", {"spans": []})),
    ],
)
async def test_model_failure_falls_back_to_the_regex_result(step: object) -> None:
    text = "Jake's card is 4111 1111 1111 1111 and his password is hunter22!"
    scrubber = PiiScrubber(ScriptedModel([step]))  # type: ignore[list-item]
    result = await scrubber.detect(text)
    assert result.model_error is not None
    assert result.text == REGEX.prefilter(text).text
    assert "4111 1111" not in result.text and "hunter22" not in result.text


async def test_model_timeout_falls_back() -> None:
    model = ScriptedModel([spans(("Jake", "NAME"))], delay_s=5)
    result = await PiiScrubber(model, timeout_s=0.05, policy=MASK_ALL).detect("Jake at 10.0.0.1")
    assert result.model_error is not None and "within" in result.model_error
    assert result.text == "Jake at [IP]"


async def test_a_session_whose_model_pass_runs_out_of_time_says_so(caplog: pytest.LogCaptureFixture) -> None:
    model = ScriptedModel([spans(("Jake", "NAME")), spans(("Ann", "NAME"))], delay_s=5)
    texts = ["Jake at 10.0.0.1", "x " * 1000 + "Ann"]
    with caplog.at_level("WARNING", logger="kairos.memory"):
        out = await PiiScrubber(model, timeout_s=0.05, policy=MASK_ALL, window_chars=1000).scrub_many(
            texts, external=[False, False]
        )
    assert out[0] == "Jake at [IP]"  # the regex layer still ran
    assert "the model could not check 3 of 3 parts (no answer within" in caplog.text
    assert "keep the regex layer's masking" in caplog.text  # and says what that leaves unmasked


async def test_model_wrong_type_values_are_dropped_not_trusted() -> None:
    model = ScriptedModel([reply("", call(PII_TOOL.name, {"spans": [{"text": "Jake", "type": "CELEBRITY"}]}))])
    result = await PiiScrubber(model, policy=MASK_ALL).detect("Jake came.")
    assert result.text == "Jake came." and result.model_error is None


async def test_empty_text_does_not_call_the_model() -> None:
    model = ScriptedModel([])
    assert await PiiScrubber(model).scrub("   ") == "   "
    assert model.requests == []


def test_scrub_is_usable_from_sync_code() -> None:
    assert asyncio.run(PiiScrubber().scrub("mail a@b.example", external=True)) == "mail [EMAIL]"


async def test_a_long_text_goes_to_the_model_in_windows() -> None:
    text = ("Nothing to see here. " * 200) + "Call Priya Raman tomorrow."
    model = ScriptedModel([spans(), spans(("Priya Raman", "NAME"))])
    result = await PiiScrubber(model, policy=MASK_ALL, window_chars=3000).detect(text)
    assert len(model.requests) == 2 and all(len(r.messages[0].content) < 3100 for r in model.requests)
    assert result.text.endswith("Call [NAME] tomorrow.") and result.model_error is None


async def test_a_failed_window_keeps_what_the_others_found() -> None:
    text = "Call Priya Raman. " + ("Filler words here. " * 200)
    model = ScriptedModel([spans(("Priya Raman", "NAME")), RuntimeError("boom")])
    result = await PiiScrubber(model, policy=MASK_ALL, window_chars=3000).detect(text)
    assert result.text.startswith("Call [NAME].") and result.model_error is not None


@pytest.mark.parametrize("text", ["short", "word " * 1000, "x" * 7000, "line\n" * 900 + "tail"])
def test_windows_lose_nothing(text: str) -> None:
    parts = windows(text, 1000)
    assert "".join(parts) == text and all(len(p) <= 1000 for p in parts)


async def test_a_session_is_scrubbed_in_one_model_pass_and_each_text_keeps_its_own_policy() -> None:
    model = ScriptedModel([spans(("Rosewood Court, Leeds LS6 2AB", "SECRET"))])
    scrubber = PiiScrubber(model)
    texts = [
        "I live at Rosewood Court, Leeds LS6 2AB.",
        "mail sam@example.org about it",
        "From: sam@example.org. Rosewood Court, Leeds LS6 2AB is sold.",
    ]
    out = await scrubber.scrub_many(texts, external=[False, False, True])
    assert len(model.requests) == 1  # one window holds all three
    assert "Rosewood" not in out[0] and "Rosewood" not in out[2]  # a span named once is masked everywhere
    assert "sam@example.org" in out[1] and "sam@example.org" not in out[2]  # the user's own words keep contacts
    assert "sam@example.org" not in model.requests[0].messages[0].content  # the model never sees what regex found


async def test_only_texts_where_the_model_could_change_something_go_to_it() -> None:
    model = ScriptedModel([spans(("four four one nine", "SECRET"))])
    texts = [
        "I'm allergic to peanuts and I work on project Bluefin.",  # the user's own words: names and facts are kept
        "Sure, I will remember that.",
        "The PIN of my debit card is four four one nine.",  # talks of a secret: checked
        "Dr. Ann Lee, 12 Elm Street",  # a tool's output: external content, always checked
    ]
    out = await PiiScrubber(model).scrub_many(texts, external=[False, False, False, True])
    (request,) = model.requests
    seen = request.messages[0].content
    assert "four four one nine" in seen and "Ann Lee" in seen and "peanuts" not in seen and "remember" not in seen
    assert "four four one nine" not in out[2] and out[0] == texts[0]


async def test_a_session_with_nothing_to_check_costs_no_model_call() -> None:
    model = ScriptedModel([])
    texts = ["I use tabs for indentation.", "Noted."]
    assert await PiiScrubber(model).scrub_many(texts, external=[False, False]) == texts
    assert model.requests == []

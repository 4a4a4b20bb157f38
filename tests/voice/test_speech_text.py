from kairos.voice.speech_text import (
    ControlTokenParser,
    Pause,
    Rate,
    SpeakableChunker,
    SpeechItem,
    SpeechTextStream,
    Style,
    strip_control_tokens,
)

REPLY = "Sure, I can check that. [THINKING] Hmm. [SPEED:0.8x]The file is 3.5 MB. [EMO:happy]Done! [FOO:bar]See [1]."


def _stream(deltas: list[str]) -> list[SpeechItem]:
    s = SpeechTextStream()
    out: list[SpeechItem] = []
    for d in deltas:
        out.extend(s.feed(d))
    return [*out, *s.flush()]


def test_tokens_split_across_deltas_become_directives_and_are_never_text() -> None:
    every_char = _stream(list(REPLY))
    whole = _stream([REPLY])
    assert every_char == whole
    assert Pause(600) in whole and Rate(0.8) in whole and Style("happy") in whole
    text = " ".join(i for i in whole if isinstance(i, str))
    assert "[" not in text.replace("[1]", "")
    assert "THINKING" not in text and "SPEED" not in text and "FOO" not in text and "bar" not in text
    assert "See [1]." in text  # bracketed text that is not a token shape stays text


def test_directives_keep_their_place_in_the_spoken_order() -> None:
    items = _stream(["Let me see [THINK", "ING] right, yes."])
    assert items == ["Let me see", Pause(600), "right, yes."]


def test_unknown_tokens_are_dropped_and_recorded() -> None:
    p = ControlTokenParser()
    items = p.feed("a [LAUGH] b [SPEED:fast] c")
    assert "".join(i for i in items if isinstance(i, str)) == "a  b  c"
    assert p.dropped == ["[LAUGH]", "[SPEED:fast]"]


def test_an_unclosed_bracket_is_text_at_the_end() -> None:
    p = ControlTokenParser()
    assert p.feed("x [PAU") == ["x "]
    assert p.flush() == ["[PAU"]


def test_strip_control_tokens_for_display() -> None:
    assert strip_control_tokens("Hi [EMO:happy]there") == "Hi there"


def test_the_first_chunk_goes_out_before_the_text_ends() -> None:
    c = SpeakableChunker(first_words=6)
    words = "Well I think the answer is probably forty two but let me explain why. It is a long story."
    seen: list[tuple[int, str]] = []
    for n, w in enumerate(words.split(" ")):
        seen.extend((n, chunk) for chunk in c.feed(w + " "))
    seen.extend((99, chunk) for chunk in c.flush())
    assert seen[0] == (5, "Well I think the answer is")  # after six words, long before the end
    assert [chunk for _, chunk in seen[1:]] == ["probably forty two but let me explain why.", "It is a long story."]


def test_a_clause_ends_the_first_chunk_and_decimals_do_not_end_sentences() -> None:
    c = SpeakableChunker()
    out = c.feed("Yes, it weighs 3.5 kg. Dr. Smith said so. And")
    assert out == ["Yes,", "it weighs 3.5 kg.", "Dr. Smith said so."]
    assert c.flush() == ["And"]

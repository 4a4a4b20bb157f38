"""Focus excerpts rank paragraphs with the shared tokenizer: inflected and non-English focus words match."""

from __future__ import annotations

from kairos.tools.toolsets._pages import focus_excerpt

TEXT = "\n\n".join(
    [
        "# Annual report",
        "Our gardens grew tomatoes and beans this year. " * 8,
        "The ticket price rose by ten percent in March. " * 8,
        "Die Züricher Filiale eröffnete im Mai. " * 8,
        "Weather was mild; the harvest was early. " * 8,
    ]
)


def test_a_plural_focus_finds_the_singular_paragraph() -> None:
    ex = focus_excerpt(TEXT, "prices", 600)
    assert ex.matched and "ticket price rose" in ex.text and "gardens grew" not in ex.text
    assert ex.text.startswith("[offset=0] # Annual report")


def test_a_non_english_focus_word_matches_whole() -> None:
    ex = focus_excerpt(TEXT, "Züricher Filiale", 600)
    assert ex.matched and "Züricher Filiale" in ex.text and "ticket price" not in ex.text


def test_a_focus_of_only_stop_words_keeps_just_the_opening() -> None:
    ex = focus_excerpt(TEXT, "what was there", 600)
    assert not ex.matched and ex.kept == 1 and ex.of == 5

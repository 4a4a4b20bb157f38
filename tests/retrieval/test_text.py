"""The shared words of a text: what BM25, the full-text queries, the summariser's focus and memory compare."""

from __future__ import annotations

from kairos.retrieval.text import STOPWORDS, query_words, stem, tokens, words


def test_tokens_drop_stop_words_split_names_and_strip_plurals() -> None:
    assert tokens("Please show me the daily closing prices of IBM_stock") == ["daily", "clos", "price", "ibm", "stock"]
    assert tokens("get_weather_forecast: will it be raining in the cities?") == ["weather", "forecast", "rain", "city"]
    assert tokens("") == [] and tokens("the of and") == []


def test_tokens_keep_words_of_any_script_whole() -> None:
    assert tokens("Wetter in Zürich, ein Café") == ["wetter", "zürich", "ein", "café"]
    assert tokens("Погода в Москве") == ["погода", "в", "москве"]


def test_stem_is_light_and_leaves_short_or_latin_endings_alone() -> None:
    assert [stem(w) for w in ["prices", "cities", "forecasting", "bus", "class", "analysis", "gas", "sing"]] == [
        "price",
        "city",
        "forecast",
        "bus",
        "class",
        "analysis",
        "gas",
        "sing",
    ]


def test_stop_words_are_lower_case_words_and_never_carry_meaning() -> None:
    assert all(w == w.lower() and w.isalpha() for w in STOPWORDS)
    assert {"the", "please", "find", "did", "their"} <= STOPWORDS and "weather" not in STOPWORDS
    # negations, quantities and order words, and the month "may" are kept by every caller
    assert not {"not", "no", "never", "nor", "none", "nothing", "cannot", "without"} & STOPWORDS
    assert not {"all", "only", "more", "most", "first", "other", "may"} & STOPWORDS


def test_words_are_runs_of_letters_and_digits_lower_cased() -> None:
    found = words("The snake_case NAME, 2023-05-07; Zürich")
    assert found == ["the", "snake", "case", "name", "2023", "05", "07", "zürich"]


def test_query_words_drop_stop_words_unless_nothing_else_is_left() -> None:
    assert query_words("When did Caroline go to the gym? Caroline!") == ["caroline", "go", "gym"]
    assert query_words("what is it") == ["what", "is", "it"]
    assert query_words("Running shoes") == ["running", "shoes"]  # unstemmed: the index stems
    assert query_words("!!!") == []

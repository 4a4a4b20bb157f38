from kairos.voice.wer import normalize, word_error_rate


def test_digits_are_spelled_and_punctuation_ignored() -> None:
    assert normalize("Call 555-12, OK?") == ["call", "five", "five", "five", "one", "two", "ok"]
    assert word_error_rate("my number is five five five", "My number is 555.") == 0.0


def test_errors_are_counted_per_reference_word() -> None:
    assert word_error_rate("a b c d", "a x c") == 0.5
    assert word_error_rate("", "") == 0.0

"""The catalog: every key in both languages, the same fields in both, and the language choices."""

import re

import pytest

from fitcore import i18n

FIELD = re.compile(r"\{(\w*)[^{}]*\}")
HAN = re.compile(r"[\u4e00-\u9fff]")


def test_every_key_has_english_and_chinese_with_the_same_fields():
    missing = [k for k, e in i18n.catalog().items() if not e.get("en") or not e.get("zh")]
    assert missing == []
    differ = [k for k, e in i18n.catalog().items()
              if sorted(FIELD.findall(e["en"])) != sorted(FIELD.findall(e["zh"]))]
    assert differ == []


def test_every_chinese_text_is_chinese():
    # a zh entry copied from English would pass the key check: each must hold at least one Han character,
    # unless it is only code names and numbers (then it equals the English on purpose)
    # (a separator is Chinese by its full-width punctuation: "；", "，")
    chinese = lambda text: HAN.search(text) or re.fullmatch(r"[\u3000-\u303f\uff00-\uffef ]+", text)  # noqa: E731
    untranslated = [k for k, e in i18n.catalog().items() if not chinese(e["zh"]) and e["zh"] != e["en"]]
    assert untranslated == []


@pytest.mark.parametrize(
    "value, code",
    [("zh", "zh"), ("zh-CN", "zh"), ("zh_CN.UTF-8", "zh"), ("ZH-hans", "zh"), ("en", "en"), ("en-US", "en"),
     ("fr", None), ("", None), (None, None), (3, None), ("C.UTF-8", None)],
)
def test_language_codes(value, code):
    assert i18n.language(value) == code


@pytest.mark.parametrize(
    "env, code",
    [({}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "zh_CN.UTF-8", "LC_ALL": "en_US.UTF-8"}, "en"),
     ({"LC_MESSAGES": "zh_TW"}, "zh"), ({"LANG": "C"}, "en")],
)
def test_language_from_the_environment(env, code):
    assert i18n.from_env(env) == code


def test_t_count_and_using():
    assert i18n.t("count.step.other", n=3) == "3 steps"
    assert i18n.count("count.step", 1) == "1 step"
    with i18n.using("zh"):
        assert i18n.count("count.step", 2) == "2 步"
        assert i18n.current() == "zh"
    assert i18n.current() == "en"
    with pytest.raises(KeyError):
        i18n.t("no.such.key")

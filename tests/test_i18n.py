"""The catalog: every key in both languages, the same fields in both, and the language choices."""

import re

import pytest

from fitcore.core import i18n

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
    # (a separator is Chinese by its full-width punctuation: "；", "，"; so is a template of fields and
    # Markdown joined by it: "**{title}**：{lesson}")
    full_width = re.compile(r"[\u3000-\u303f\uff00-\uffef ]+")
    chinese = lambda text: HAN.search(text) or full_width.fullmatch(FIELD.sub("", text).replace("*", ""))  # noqa: E731
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


def test_every_chinese_text_glosses_a_term_with_the_glossarys_one_word():
    """One term per concept across the page, the command line and the live view: where a Chinese text
    puts a torch name beside its Chinese word ("gather（汇集）", "全收集（all-gather）"), the word is the
    glossary's."""
    import re

    catalog = i18n.catalog()
    glossary = {k.removeprefix("glossary."): e["zh"] for k, e in catalog.items() if k.startswith("glossary.")}
    assert {"scatter", "replicate", "parallel_apply", "gather", "reduce", "all-gather"} <= set(glossary)
    found = []
    for key, entry in catalog.items():
        zh = entry.get("zh", "")
        for term, word in re.findall(r"(?<![\w-])([A-Za-z_][\w-]*)（([^（）]{1,12})）", zh):
            found.append((key, term, word, glossary.get(term, word)))
        for word, term in re.findall(r"([\u4e00-\u9fff]{2,8})（([A-Za-z_][\w-]*)）", zh):
            if term in glossary:
                found.append((key, term, word[-len(glossary[term]):], glossary[term]))
    assert [f for f in found if f[2] != f[3]] == []
    assert sum(term == "gather" for _, term, _, _ in found) >= 5  # the check reads the texts it means to


"""The page's explanations, in Markdown: how each strategy trains, next to one another.

Their words are the catalog's (`fitcore/locales/explain.json`, keys `explain.<strategy>`); the names below,
which fitcore.strategies names as "fitcore.explain:NAME", give them in the current language.
"""

from fitcore.i18n import t

_KEYS = {"DATAPARALLEL_MARKDOWN": "explain.dataparallel", "DDP_MARKDOWN": "explain.ddp"}


def __getattr__(name: str) -> str:
    # a module attribute read at each use, so that a page in Chinese gets the Chinese text
    if name in _KEYS:
        return t(_KEYS[name])
    raise AttributeError(name)

"""Settings: every part reads its environment in one frozen object whose fields say the variable, its default,
its bounds and its meaning. docs/configuration.md's tables are written from those fields
(`python -m agentfn.shared.settings`), so the page and the code cannot drift apart.

    @dataclass(frozen=True)
    class PageSettings(Settings):
        daily_pages: int = setting("AGENTFN_PAGE_DAILY_PAGES", 200, "pages a caller may fetch per UTC day", minimum=1)

    PageSettings.from_env(os.environ).daily_pages

A value is parsed as its default's type (an int, a float, a bool, a str, or a tuple of comma-separated words);
one outside its bounds or choices stops the part at start-up, naming the variable. An empty variable counts as
unset, unless the setting keeps it (an empty list of admin groups: no one). A name may hold a placeholder
(`AGENTFN_TIER_<T>_URL`), filled by `from_env`'s keys.

    python -m agentfn.shared.settings           # write docs/configuration.md's tables again
    python -m agentfn.shared.settings --check   # exit 1 when they are stale
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

REQUIRED = object()  # the default of a setting a part cannot start without
TRUE, FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    meaning: str
    shown: str | None = None  # the default as the docs say it, when not the value itself ("the system's resolv.conf")
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None  # for a value that is not its default's type
    keep_empty: bool = False  # an empty variable is a value of its own ("no one"), not unset

    def read(self, env: Mapping[str, str], keys: Mapping[str, str]) -> Any:
        name = self.variable(keys)
        raw = (env.get(name) or "").strip()
        if not raw and not (self.keep_empty and name in env):
            if self.default is REQUIRED:
                raise RuntimeError(f"{name} is required")
            return self.default
        try:
            value = self._parse(raw)
        except ValueError:
            # The value is not repeated: a misplaced secret must not reach the log.
            raise RuntimeError(f"{name} must be {self._kind()}") from None
        if self.choices and value not in self.choices:
            raise RuntimeError(f"{name} must be one of {', '.join(self.choices)}")
        for number in value if isinstance(value, tuple) else (value,):
            if isinstance(number, int | float) and not isinstance(number, bool):
                if self.minimum is not None and number < self.minimum:
                    raise RuntimeError(f"{name} must be >= {self.minimum:g}")
                if self.maximum is not None and number > self.maximum:
                    raise RuntimeError(f"{name} must be <= {self.maximum:g}")
        return value

    def variable(self, keys: Mapping[str, str]) -> str:
        name = self.name
        for key, value in keys.items():
            name = name.replace(f"<{key}>", value.upper())
        return name

    def _parse(self, raw: str) -> Any:
        if self.parse is not None:
            return self.parse(raw)
        kind = type(self.default)
        if kind is bool:
            if raw.lower() not in TRUE | FALSE:
                raise ValueError(raw)
            return raw.lower() in TRUE
        if kind is tuple:
            return tuple(word.strip() for word in raw.split(",") if word.strip())
        if kind in (int, float):
            return kind(raw)
        return raw

    def _kind(self) -> str:
        kind = self.parse if self.parse in (int, float) else type(self.default)
        return {bool: "1 or 0", int: "a whole number", float: "a number"}.get(kind, "valid")

    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is REQUIRED:
            return "(required)"
        if self.default is None or self.default == "" or self.default == ():
            return "(none)"
        if isinstance(self.default, bool):
            return "`1`" if self.default else "`0`"
        if isinstance(self.default, tuple):
            return f"`{','.join(map(str, self.default))}`"
        if isinstance(self.default, float) and self.default.is_integer():
            return f"`{int(self.default)}`"
        return f"`{self.default}`"


def setting(
    name: str,
    default: Any,
    meaning: str,
    *,
    shown: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] = (),
    parse: Callable[[str], Any] | None = None,
    keep_empty: bool = False,
) -> Any:
    """A settings field: the variable `name`, its `default` (or REQUIRED), and what it means, for the docs."""
    described = Setting(name, default, meaning, shown, minimum, maximum, choices, parse, keep_empty)
    return dataclasses.field(default=None if default is REQUIRED else default, metadata={"setting": described})


@dataclass(frozen=True)
class Settings:
    """The base of every part's settings object; a subclass is a frozen dataclass of `setting` fields."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **keys: str) -> Self:
        env = os.environ if env is None else env
        return cls(**{field.name: described.read(env, keys) for field, described in _settings(cls)})

    @classmethod
    def describe(cls) -> Iterator[tuple[str, str, str]]:
        """(variable, default as the docs say it, meaning) of each setting, in the order they are declared."""
        for _, described in _settings(cls):
            yield described.name, described.default_text(), described.meaning


def _settings(cls: type) -> Iterator[tuple[dataclasses.Field, Setting]]:
    for field in dataclasses.fields(cls):
        if "setting" in field.metadata:
            yield field, field.metadata["setting"]


def table(*objects: type[Settings]) -> str:
    """The Markdown table of one or more settings objects."""
    rows = ["| name | default | meaning |", "|---|---|---|"]
    seen = set()
    for settings in objects:
        for name, default, meaning in settings.describe():
            if name not in seen:
                seen.add(name)
                rows.append(f"| `{name}` | {default} | {meaning} |")
    return "\n".join(rows) + "\n"


# --- docs/configuration.md ------------------------------------------------------------------------------

DOC = "docs/configuration.md"
BLOCK = re.compile(r"(<!-- settings: ([^>]+?) -->\n).*?(<!-- end of settings -->\n)", re.S)


def render(text: str) -> str:
    """The page with each settings block's table written again from the objects its marker names
    (`<!-- settings: agentfn.page.app:PageSettings, ... -->`)."""

    def block(match: re.Match) -> str:
        objects = []
        for path in match[2].split(","):
            module, _, name = path.strip().partition(":")
            objects.append(getattr(importlib.import_module(module), name))
        return match[1] + table(*objects) + match[3]

    return BLOCK.sub(block, text)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m agentfn.shared.settings", description="Write the settings tables of the configuration page."
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the tables are stale")
    parser.add_argument("--doc", type=Path, default=Path(__file__).resolve().parents[3] / DOC, help="the page")
    args = parser.parse_args(argv)
    path = args.doc
    text = path.read_text()
    fresh = render(text)
    if args.check:
        if fresh != text:
            print(f"{path} is stale: run python -m agentfn.shared.settings", file=sys.stderr)
            return 1
        return 0
    path.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

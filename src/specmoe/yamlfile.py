"""YAML read strictly: a mapping that gives a key twice is an error, not the last value silently.

PyYAML (and so Snakemake, which reads `config.yaml` and every `--configfile` with it) keeps the
last of two equal keys: a setting given twice changes the run without a word. `load` refuses it in
one line naming the file, the key and both lines. JSON is read too (YAML's subset), with the same
rule. A YAML merge key (`<<`) is not a duplicate: merging is what it asks for.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .errors import InputError


class _DuplicateKey(Exception):
    def __init__(self, key, first: int, again: int):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a duplicate key."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue  # SafeLoader's own error names an unhashable key
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
        return super().construct_mapping(node, deep)



def loads(text: str, where: str):
    """The document in `text` (`where` names it in the error); InputError for a duplicate key or
    text that is not YAML."""
    try:
        return yaml.load(text, Loader=StrictLoader)
    except _DuplicateKey as dup:
        raise InputError(f"{where}: line {dup.again}: key '{dup.key}' is given twice (first on "
                         f"line {dup.first}); YAML would keep the last silently: give it once"
                         ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{where}: {at}not valid YAML ({problem})") from None


def load(path: str | Path):
    """A YAML (or JSON) file read strictly; InputError, one line, where it is not a readable
    UTF-8 file, not YAML or gives a key twice."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a directory, not a YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"{p}: not a text file (not UTF-8): a YAML file is text") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror})") from None
    return loads(text, str(p))

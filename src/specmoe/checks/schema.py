"""The configuration's schema (workflow/schemas/config.schema.yaml): validation that fills the
schema's defaults, as `snakemake.utils.validate` does, and says each violation in one line.

A schema error is the key's path (`models[2].tp`, with the entry's name), what the value must be
(read from the schema: type, bounds, choices) and, for an unknown key or choice close to a known
one, "did you mean". The schema and the configuration are never printed. A misspelt required key
is one problem, not two: its "missing" line is left out where the "did you mean" names it.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path

from ..errors import InputError

_TYPES = {"array": "a list", "object": "a mapping", "string": "a string",
          "integer": "an integer", "number": "a number", "boolean": "true or false",
          "null": "null"}
_PLURAL = {"string": "strings", "integer": "integers", "number": "numbers", "object": "mappings",
           "boolean": "true/false values"}
_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]*$"


def load_schema(path: str | Path) -> dict:
    from ..yamlfile import load

    return load(path)


def validate(config: dict, schema: dict) -> list[str]:
    """The schema's violations of `config`, one line each ("config: <path>: <what is wrong>"),
    after filling its defaults into `config` (in place, as Snakemake's `validate` does)."""
    from jsonschema import Draft202012Validator, validators

    if not isinstance(config, dict):
        return [f"config: the configuration must be a mapping of keys (got {_kind(config)})"]
    base_properties = Draft202012Validator.VALIDATORS["properties"]

    def properties_with_defaults(validator, properties, instance, node):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    # a copy: the schema's own default (a mapping, a list) would be filled in
                    # place and shared by every configuration validated against it
                    instance[key] = copy.deepcopy(sub["default"])
        yield from base_properties(validator, properties, instance, node)

    cls = validators.extend(Draft202012Validator, {"properties": properties_with_defaults})
    infinite = _not_finite(config)
    errors = [e for e in cls(schema).iter_errors(config)
              if tuple(_deepest(e).absolute_path) not in infinite]
    return [f"{_where(p, config)}: must be a finite number (got {v})"
            for p, v in infinite.items()] + _lines(errors, config, schema)


def _not_finite(node, path: tuple = ()) -> dict[tuple, float]:
    """The paths of YAML's .nan and .inf: numbers to JSON Schema, and NaN passes every bound."""
    import math

    if isinstance(node, float) and not math.isfinite(node):
        return {path: node}
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    return {p: v for k, sub in items for p, v in _not_finite(sub, path + (k,)).items()}


def check(config: dict, schema_path: str | Path) -> None:
    """validate(); InputError with every violation, one per line."""
    found = validate(config, load_schema(schema_path))
    if found:
        raise InputError("\n".join(found))


# --- one line per violation ----------------------------------------------------------------------

# Top-level keys the configuration no longer has: the line for each says what replaced it.
REPLACED = {"shuffle_seed": "replaced by shuffle_null (true or false): the shuffle null is exact, "
                            "no permutation is drawn, so a seed's value changed nothing"}


def _lines(errors, config, schema: dict) -> list[str]:
    suggested: set[tuple] = set()  # (path, key) that a "did you mean" names
    found = []  # (path, line, the missing key a required-error names, else None)
    for err in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        err = _deepest(err)
        path = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and err.validator_value is False:
            known = list(err.schema.get("properties") or {})
            for key in sorted(set(err.instance) - set(known)):
                if not path and key in REPLACED:
                    found.append((path, f"config: {key}: {REPLACED[key]}", None))
                    continue
                hint = did_you_mean(key, known)
                if hint:  # the "missing" line of the key it names is left out
                    suggested.add((path, hint))
                found.append((path, f"{_where(path + (key,), config)}: unknown key"
                              + (f"; did you mean '{hint}'?" if hint else
                                 f" (known: {', '.join(known)})"), None))
        elif err.validator == "required":
            missing = next((k for k in err.validator_value if k not in (err.instance or {})), "?")
            cond = _condition(err, schema)
            found.append((path, f"{_where(path, config)}: missing key '{missing}'"
                          + (f" ({cond})" if cond else ""), missing))
        elif err.validator == "not" and _keys_refused(err):
            given = _keys_refused(err)
            cond = _condition(err, schema, "not read")
            them = "it" if len(given) == 1 else "them"
            found.append((path, f"{_where(path, config)}: {', '.join(given)}: "
                          f"{cond or 'not allowed here'}: leave {them} out", None))
        else:
            found.append((path, _line(err, path, config), None))
    out = []
    for path, line, missing in found:
        if (path, missing) not in suggested and line not in out:
            out.append(line)
    return out


def _deepest(err):
    """For oneOf/anyOf, the alternative that matches the value's type (its own error)."""
    from jsonschema.exceptions import best_match

    if err.validator in ("oneOf", "anyOf") and err.context:
        typed = [e for e in err.context if e.validator != "type"]
        if typed:
            return best_match(typed)
    return err


def _line(err, path: tuple, config) -> str:
    where = _where(path, config)
    v, node, got = err.validator, err.schema, err.instance
    if "propertyNames" in err.schema_path:  # a key of a map of names (hardware, datasets)
        if not isinstance(got, str):  # YAML reads an unquoted 4090 as a number
            what = "true or false" if isinstance(got, bool) else \
                "a number" if isinstance(got, (int, float)) else _kind(got)
            return f"{where}: the name {got!r} is read as {what}, not a name: quote it ('{got}')"
        return (f"{where}: the name {_show(got)} must be letters, digits, '.', '_' and '-', "
                "starting with a letter or digit")
    if v == "type" and path == ("models",):
        return f"{where}: must be a list of model entries (got {_kind(got)})"
    if v in ("oneOf", "anyOf"):
        alts = " or ".join(_expect(a) for a in err.validator_value)
        return f"{where}: must be {alts} (got {_show(got)})"
    if v == "enum":
        hint = did_you_mean(str(got), [str(x) for x in err.validator_value if x is not None])
        return (f"{where}: must be one of {', '.join(map(_yaml_word, err.validator_value))} "
                f"(got {_show(got)})" + (f"; did you mean '{hint}'?" if hint else ""))
    if v == "const":
        return f"{where}: must be {err.validator_value!r} (got {_show(got)})"
    if v == "minItems":
        return f"{where}: must have at least {err.validator_value} item(s)"
    if v == "minProperties":
        return f"{where}: must not be empty"
    if v == "minLength":
        return f"{where}: must not be empty (leave the key out for its default)"
    if v == "uniqueItems":
        return f"{where}: lists a value twice (got {_show(got)}): give each once"
    if v == "maxItems":
        return f"{where}: must have at most {err.validator_value} item(s) (got {len(got)})"
    if v == "pattern" and err.validator_value == _NAME_PATTERN:
        return (f"{where}: must be letters, digits, '.', '_' and '-', starting with a letter or "
                f"digit (got {_show(got)})")
    return f"{where}: must be {_expect(node)} (got {_show(got)})"


def _where(path: tuple, config) -> str:
    """models[2].tp (model qwen3-30b): the path, with the entry's name where it has one."""
    text, node, label = "", config, ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
        node = node[part] if isinstance(node, (dict, list)) and _has(node, part) else None
        if isinstance(part, int) and isinstance(node, dict) and isinstance(node.get("name"), str):
            what = {"models": "model", "drafters": "drafter"}.get(path[0], "entry")
            label = f" ({what} '{node['name']}')"
    return f"config: {text or 'the configuration'}{label}"


def _has(node, part) -> bool:
    return part in node if isinstance(node, dict) else 0 <= part < len(node)


def _keys_refused(err) -> list[str]:
    """The keys of the value that a `not: {anyOf: [{required: [key]}, ...]}` (or `not:
    {required: [...]}`) refuses, in the schema's order; [] for any other `not`."""
    node = err.validator_value if isinstance(err.validator_value, dict) else {}
    alts = node.get("anyOf", [node])
    if not all(isinstance(a, dict) and set(a) == {"required"} for a in alts):
        return []
    return [k for a in alts for k in a["required"] if k in (err.instance or {})]


def _condition(err, schema: dict, verb: str = "required") -> str | None:
    """'required for source hf' for a key that an if/then of the schema requires ('required
    unless cost_only true' for an if/else); `verb` in place of 'required' for a key it refuses
    ('not read for kind dense')."""
    parts = list(err.schema_path)
    branch = next((p for p in reversed(parts) if p in ("then", "else")), None)
    if branch is None:
        return None
    node = schema
    for part in parts[:len(parts) - 1 - parts[::-1].index(branch)]:
        node = node[part]
    cond = node.get("if", {}).get("properties", {})
    text = ", ".join(f"{k} {str(v['const']).lower()}" for k, v in cond.items() if "const" in v)
    return (f"{verb} {'for' if branch == 'then' else 'unless'} {text}") if text else None


def _yaml_word(value) -> str:
    """A choice as the configuration spells it (null, not Python's None)."""
    return "null" if value is None else str(value)


def _expect(node: dict) -> str:
    """What a schema node accepts, in words."""
    if "enum" in node:
        return "one of " + ", ".join(map(_yaml_word, node["enum"]))
    if "const" in node:
        return repr(node["const"])
    if "oneOf" in node:
        return " or ".join(_expect(a) for a in node["oneOf"])
    types = node.get("type")
    types = types if isinstance(types, list) else [types] if types else []
    text = " or ".join(_TYPES.get(t, t) for t in types) or "a value"
    bounds = _bounds(node)
    if "array" in types and isinstance(node.get("items"), dict):
        item = node["items"]
        kinds = item.get("type")
        text = f"a list of {_PLURAL[kinds]}" if kinds in _PLURAL else "a list"
        if _bounds(item):
            text += f" (each {_bounds(item)})"
        if node.get("minItems"):
            text += f", at least {node['minItems']}"
        return text
    return f"{text} {bounds}" if bounds else text


def _bounds(node: dict) -> str:
    return " and ".join(f"{op} {node[k]:g}" for k, op in (
        ("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if k in node)


def _show(value) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list" if len(repr(value)) > 40 else repr(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(
        type(value), type(value).__name__)


def did_you_mean(word: str, known) -> str | None:
    """The known name closest to `word`, if one is close (a typo, a case slip); names are
    compared as text (YAML reads a key such as 4090 as a number)."""
    word, known = str(word), [str(k) for k in known]
    hit = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if not hit:  # a case slip of a short name is not always a close match
        hit = [k for k in known if k.lower() == word.lower()]
    return hit[0] if hit else None

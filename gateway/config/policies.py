"""Policies: YAML files in ``policies/``, validated strictly at start-up.

Each file ``NAME.yaml`` holds one policy; any field of
``gateway.pruning.policy.Policy`` may be set, plus ``extends: OTHER`` to start
from another policy. Unknown keys and wrong types fail start-up with the file
and line::

    policies/agent.yaml:7: unknown key 'protect_last_unit' (did you mean 'protect_last_units'?)

The gateway reads them through a :class:`PolicyBook`: the default policy, and
the one each org is mapped to (``org_policies`` in the config)::

    book = PolicyBook.load(settings)
    book.for_identity(identity)      # the caller's org's policy, else the default
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import ConfigError
from gateway.pruning import (OVERRIDES, POLICY_FIELDS, POLICY_MODES, Policy, PolicyMode, SCORERS, SCORER_FALLBACKS,
    STRATEGIES, Strategy)
from gateway.config.settings import Settings
from gateway.wire import Identity

_TYPES = {"int": int, "float": (int, float), "bool": bool, "str": str}


class PolicyBook:
    def __init__(self, policies: dict[str, Policy], default: str, org_policies: dict[str, str]) -> None:
        self.default = policies[default]
        self._by_org = {org: policies[name] for org, name in org_policies.items()}

    @classmethod
    def load(cls, settings: Settings) -> "PolicyBook":
        """The settings' policies folder, strictly: a default or org policy it lacks is a ConfigError."""
        policies = load_policies(settings.policies_dir)
        if settings.default_policy not in policies:
            raise ConfigError(f"default policy {settings.default_policy!r} not found in {settings.policies_dir}")
        for org, name in settings.org_policies.items():
            if name not in policies:
                raise ConfigError(f"org_policies.{org}: policy {name!r} not found in {settings.policies_dir}")
        return cls(policies, settings.default_policy, dict(settings.org_policies))

    def in_use(self) -> list[Policy]:
        """The default policy and every org's, each once."""
        found = {self.default.name: self.default}
        found.update({p.name: p for p in self._by_org.values()})
        return list(found.values())

    def for_identity(self, identity: Identity) -> Policy:
        return self._by_org.get(identity.org, self.default)


def load_policies(folder: Path) -> dict[str, Policy]:
    """All policies of ``folder``; a built-in ``default`` exists even if no file names it."""
    raw: dict[str, tuple[Path, dict[str, tuple[Any, int]]]] = {}
    if folder.is_dir():
        for path in sorted(folder.glob("*.y*ml")):
            raw[path.stem] = (path, _read(path))
    elif folder != Path("policies"):
        raise ConfigError(f"{folder}: policies folder does not exist")
    policies: dict[str, Policy] = {}

    def build(name: str, chain: tuple[str, ...] = ()) -> Policy:
        if name in policies:
            return policies[name]
        if name not in raw:
            return Policy(name=name) if name == "default" else _missing(name, chain)
        path, fields = raw[name]
        base = Policy(name=name)
        if "extends" in fields:
            parent, line = fields["extends"]
            if parent in chain + (name,):
                raise ConfigError(f"{path}:{line}: 'extends' makes a cycle: {' -> '.join(chain + (name, parent))}")
            base = build(str(parent), chain + (name,))
        values = {k: v for k, (v, _) in fields.items() if k != "extends"}
        for key, value in values.items():
            values[key] = _check(path, fields[key][1], key, value)
        policy = base.with_overrides(name=name, **values)
        policies[name] = policy
        return policy

    for name in raw:
        build(name)
    policies.setdefault("default", Policy())
    return policies


def _read(path: Path) -> dict[str, tuple[Any, int]]:
    try:
        node = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read policy: {exc}") from exc
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}:{node.start_mark.line + 1}: a policy must be a mapping")
    out: dict[str, tuple[Any, int]] = {}
    for key_node, value_node in node.value:
        key, line = key_node.value, key_node.start_mark.line + 1
        if key != "extends" and key not in POLICY_FIELDS:
            hint = difflib.get_close_matches(key, list(POLICY_FIELDS), n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"{path}:{line}: unknown key {key!r}{suggestion}")
        out[key] = (yaml.safe_load(yaml.serialize(value_node)), line)
    return out


def _check(path: Path, line: int, key: str, value: Any) -> Any:
    """The value as the Policy holds it, or a ConfigError naming file and line."""
    if key == "allow_overrides":
        return _overrides(path, line, value)
    expected = _TYPES.get(str(POLICY_FIELDS[key]).replace("'", ""))
    if expected is not None and (not isinstance(value, expected) or (expected is not bool and isinstance(value, bool))):
        raise ConfigError(f"{path}:{line}: {key} must be {POLICY_FIELDS[key]}, got {value!r}")
    if key == "strategy":
        if value not in STRATEGIES:
            raise ConfigError(f"{path}:{line}: strategy must be one of {', '.join(STRATEGIES)}, got {value!r}")
        return Strategy(value)
    if key == "mode":
        if value not in POLICY_MODES:
            raise ConfigError(f"{path}:{line}: mode must be one of {', '.join(POLICY_MODES)}, got {value!r}")
        return PolicyMode(value)
    if key == "control_share" and not 0 <= value <= 1:
        raise ConfigError(f"{path}:{line}: control_share must be in [0, 1], got {value!r}")
    if key == "scorer" and value not in SCORERS:
        raise ConfigError(f"{path}:{line}: scorer must be one of {', '.join(SCORERS)}, got {value!r}")
    if key == "scorer_fallback" and value not in SCORER_FALLBACKS:
        raise ConfigError(f"{path}:{line}: scorer_fallback must be one of {', '.join(SCORER_FALLBACKS)}, got {value!r}")
    if key in ("scorer_batch_size", "scorer_batch_timeout_s", "scorer_deadline_s") and value <= 0:
        raise ConfigError(f"{path}:{line}: {key} must be positive, got {value!r}")
    if key == "embedding_weight" and not 0 <= value <= 1:
        raise ConfigError(f"{path}:{line}: embedding_weight must be in [0, 1], got {value!r}")
    if key in ("low_water_ratio", "loop_low_water_ratio") and not 0 < value <= 1:
        raise ConfigError(f"{path}:{line}: {key} must be in (0, 1], got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ConfigError(f"{path}:{line}: {key} must not be negative, got {value!r}")
    return value


def _overrides(path: Path, line: int, value: Any) -> tuple[str, ...]:
    if value is True:
        return OVERRIDES
    if value is False:
        return ()
    if isinstance(value, list) and all(v in OVERRIDES for v in value):
        return tuple(v for v in OVERRIDES if v in value)
    raise ConfigError(f"{path}:{line}: allow_overrides must be true, false or a list of "
                      f"{', '.join(OVERRIDES)}; got {value!r}")


def _missing(name: str, chain: tuple[str, ...]) -> Policy:
    where = f" (extended by {chain[-1]})" if chain else ""
    raise ConfigError(f"policy {name!r}{where} does not exist")

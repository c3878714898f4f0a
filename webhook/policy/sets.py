"""Policy sets: a Rego library folder read into an immutable ``PolicySet``, its enforcement
configuration, and the errors and interface every policy backend shares.

``PolicyUnavailable`` decides nothing: the server answers HTTP 503 and the webhook configuration's
``failurePolicy`` decides (k8s.io/apiserver pkg/admission/plugin/webhook/validating/dispatcher.go,
``callHook``: a non-200 answer is an ``ErrCallingWebhook``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import yaml

from taugate.files import MAX_POLICY_FILE_BYTES, InputError, read_text_limited
from taugate.webhook.decision import Action, Violation
from taugate.webhook.policy.determinism import deterministic

ACTIONS: tuple[Action, ...] = ("deny", "warn", "dryrun")
AGGREGATE_PACKAGE = "taugate.aggregate"
AGGREGATE_MODULE = "taugate/aggregate.rego"
RESULTS_RULE = f"data.{AGGREGATE_PACKAGE}.results"
POLICIES_PACKAGE = "taugate.policies"
DEFAULT_ENFORCEMENT_FILE = "enforcement.yaml"

class PolicyError(Exception):
    """A policy set that cannot be used (the command exits 2, a reload keeps the previous set).
    ``str(error)`` is one line: ``file:line: reason`` when a file is to blame."""

    def __init__(self, reason: str, file: str | None = None, line: int | None = None):
        self.reason, self.file, self.line = reason, file, line
        where = f"{file}:{line}: " if file and line else f"{file}: " if file else ""
        super().__init__(f"{where}{reason}")


class PolicyEvaluationError(PolicyError):
    """A policy failed at run time on this input: ``failed`` maps each failing policy to its reason
    (empty when the engine as a whole failed); ``results`` holds the other policies' violations."""

    def __init__(self, reason: str, file: str | None = None, line: int | None = None, *,
                 failed: dict[str, str] | None = None, results: list[Violation] | None = None):
        super().__init__(reason, file, line)
        self.failed = dict(failed or {})
        self.results = list(results or [])


class PolicyUnavailable(Exception):
    """The backend could not answer at all (an OPA server down, late or answering garbage). Not a
    ``PolicyError``: nothing is wrong with the policies or the object, so nothing is decided."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class PolicyEngine(Protocol):
    """What admission calls. ``digest``: sha256 hex of the active set's sources. ``remote``: True
    when ``evaluate`` waits on I/O (the server then never calls it on its event loop)."""

    @property
    def digest(self) -> str: ...  # read-only: each engine derives it from its active policy set

    remote: bool

    def evaluate(self, input: dict) -> list[Violation]: ...


# --------------------------------------------------------------------------- policy sets

@dataclass(frozen=True)
class RegoFile:
    """One Rego module: ``rel`` is the module name given to the engine, ``display`` the path shown
    in errors, ``package`` without ``data.``."""

    rel: str
    display: str
    source: str
    package: str
    test: bool


@dataclass(frozen=True)
class TestRule:

    __test__ = False  # not a pytest test class
    file: RegoFile
    line: int
    name: str

    @property
    def rule(self) -> str:
        return f"data.{self.file.package}.{self.name}"


@dataclass(frozen=True)
class PolicySet:
    """An immutable, loaded policy set. ``digest``: sha256 hex over every serving module (path and
    source, sorted) and the enforcement mapping."""

    root: Path
    modules: tuple[RegoFile, ...]
    tests: tuple[RegoFile, ...]
    policies: dict[str, str]
    enforcement: dict[str, Action]
    enforcement_file: str | None
    digest: str
    kinds: dict[str, tuple[str, ...]] = field(default_factory=dict)
    folders: dict[str, Path] = field(default_factory=dict)

    def folder(self, policy: str) -> Path:
        return self.folders.get(policy, self.root / policy)

    def display(self, rel: str) -> str:
        return next((f.display for f in self.modules + self.tests if f.rel == rel), display_path(self.root, rel))

    @property
    def parts(self) -> tuple[tuple[str, str, str], ...]:
        """``(package key, kind, rule)`` per ``deny``/``warn`` rule: ``rule`` is the generated rule
        holding that one policy's results, so a policy that fails at run time is evaluated alone."""
        return tuple((key, kind, f"data.{AGGREGATE_PACKAGE}.{key}__{kind}")
                     for key in sorted(self.kinds) for kind in self.kinds[key])

    @property
    def aggregate(self) -> RegoFile:
        rules = [f'{key}__{kind} := [["{key}", "{kind}", v] | some v in data.{POLICIES_PACKAGE}.{key}.{kind}]'
                 for key, kind, _ in self.parts]
        names = [f"\t{key}__{kind}," for key, kind, _ in self.parts]
        source = ("# Generated by webhook/policy/sets.py from the policy folders: do not edit.\n"
                  f"package {AGGREGATE_PACKAGE}\n\n" + "\n\n".join(rules) + "\n\nparts := [\n" + "\n".join(names)
                  + "\n]\n\nresults := [r | some p in parts; some r in p]\n")
        return RegoFile(AGGREGATE_MODULE, AGGREGATE_MODULE, source, AGGREGATE_PACKAGE, False)

    @property
    def serving_modules(self) -> tuple[RegoFile, ...]:
        return self.modules + (self.aggregate,)

    @cached_property
    def deterministic(self) -> bool:
        """True when results depend on the input alone; computed once per set."""
        return deterministic([m.source for m in self.serving_modules])

    def test_rules(self) -> list[TestRule]:
        out = []
        for f in self.tests:
            seen = set()
            for m in _TEST_RULE.finditer(f.source):
                if m.group(1) not in seen:
                    seen.add(m.group(1))
                    out.append(TestRule(f, f.source.count("\n", 0, m.start()) + 1, m.group(1)))
        return out

    def action(self, policy: str, kind: str) -> Action:
        """Configured for the policy, else its rule kind."""
        return self.enforcement.get(policy, "warn" if kind == "warn" else "deny")

    def to_violations(self, results: list) -> list[Violation]:
        """``data.taugate.aggregate.results`` as Violations, sorted by policy, field and message."""
        out = []
        for item in results or []:
            if not (isinstance(item, list) and len(item) == 3):
                continue
            key, kind, v = item
            name = self.policies.get(key, str(key).replace("_", "-"))
            v = v if isinstance(v, dict) else {"msg": json.dumps(v)}
            msg = v.get("msg")
            out.append(Violation(name, str(v.get("field") or ""), msg if isinstance(msg, str) else json.dumps(msg),
                                 self.action(name, kind)))
        out.sort(key=lambda x: (x.policy, x.field, x.message))
        return out


_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][\w.]*)", re.M)
_TEST_RULE = re.compile(r"^(test_[A-Za-z0-9_]*)\b", re.M)
_POLICY_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def package_key(policy: str) -> str:
    return policy.replace("-", "_")


def display_path(root: Path, rel: str) -> str:
    return str(root / rel)


def _read_rego(rel: str, path: Path) -> RegoFile:
    display = str(path)
    try:
        source = read_text_limited(path, MAX_POLICY_FILE_BYTES, "policy files")
    except InputError as e:
        raise PolicyError(f"cannot read: {str(e).removeprefix(str(path) + ': ')}", display) from None
    m = _PACKAGE.search(source)
    if not m:
        raise PolicyError("no package declaration", display, 1)
    return RegoFile(rel, display, source, m.group(1), path.name.endswith("_test.rego"))


def _line_of_key(text: str, key: str) -> int | None:
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            if getattr(k, "value", None) == key:
                return k.start_mark.line + 1
    return None


def _is_action(value: Any) -> TypeGuard[Action]:
    return value in ACTIONS


def load_enforcement(source: dict[str, str] | str | Path | None,
                     known: set[str]) -> tuple[dict[str, Action], str | None]:
    """A mapping ``policy-name: deny | warn | dryrun`` as a dict or a YAML file; returns (mapping,
    file or None). An unknown policy is a ``PolicyError``: a typo would otherwise silently leave a
    policy at its default."""
    if source is None:
        return {}, None
    text, where = None, None
    if isinstance(source, dict):
        data: Any = source
    else:
        where = str(source)
        if not Path(source).exists():
            raise PolicyError("enforcement file not found", where)
        try:
            text = read_text_limited(source, MAX_POLICY_FILE_BYTES, "policy files")
        except InputError as e:
            raise PolicyError(f"cannot read enforcement file: {str(e).removeprefix(where + ': ')}", where) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            raise PolicyError(f"invalid YAML: {getattr(e, 'problem', None) or e}", where,
                              mark.line + 1 if mark else None) from None
        if data is None:
            data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"enforcement must be a mapping of policy name to {' | '.join(ACTIONS)}", where)
    out: dict[str, Action] = {}
    for name, action in data.items():
        line = _line_of_key(text, str(name)) if text else None
        if not _is_action(action):
            raise PolicyError(f"policy {name!r}: enforcement {action!r} is not one of {', '.join(ACTIONS)}",
                              where, line)
        if name not in known:
            raise PolicyError(f"unknown policy {name!r} (policies here: {', '.join(sorted(known)) or 'none'})",
                              where, line)
        out[str(name)] = action
    return out, where


def _rego_files(base: Path, prefix: str = "") -> list[tuple[str, Path]]:
    return [(prefix + path.relative_to(base).as_posix(), path) for path in sorted(base.rglob("*.rego"))
            if not any(part.startswith(".") for part in path.relative_to(base).parts)]


def shared_library_candidates(folder: Path) -> list[Path]:
    """Where a single policy folder's ``lib/`` is looked for, in order: beside it (as in the library
    it was copied from), then the bundled library's."""
    from taugate.settings import Settings

    return list(dict.fromkeys((folder.resolve().parent / "lib", Path(Settings().policy_dir).resolve() / "lib")))


def _single_policy_files(root: Path) -> tuple[list[tuple[str, Path]], dict[str, Path]]:
    name = root.resolve().name
    lib = next((c for c in shared_library_candidates(root) if c.is_dir()), None)
    if lib is None:
        looked = " or ".join(str(c) for c in shared_library_candidates(root))
        raise PolicyError(f"a single policy folder needs the shared library lib/ (package taugate.lib); looked for "
                          f"{looked}: copy lib/ beside the folder", str(root))
    return _rego_files(root, f"{name}/") + _rego_files(lib, "lib/"), {name: root}


def read_policy_set(policy_dir: str | Path, enforcement: dict[str, str] | str | Path | None = None) -> PolicySet:
    """Read a policy folder into a ``PolicySet`` (no compilation; see ``check_policy_set``).
    ``enforcement`` None means ``<policy_dir>/enforcement.yaml`` when it exists. A folder holding
    ``policy.rego`` itself is one policy copied out of a library, read with the shared library.
    Raises ``PolicyError``."""
    root = Path(policy_dir)
    if not root.is_dir():
        raise PolicyError("policy folder not found", str(root))
    modules: list[RegoFile] = []
    tests: list[RegoFile] = []
    policies: dict[str, str] = {}
    kinds: dict[str, tuple[str, ...]] = {}
    single = (root / "policy.rego").is_file()
    files, folders = _single_policy_files(root) if single else (_rego_files(root), {})
    for rel, path in files:
        f = _read_rego(rel, path)
        top = Path(f.rel).parts[0]
        if path.name == "policy.rego" and len(Path(f.rel).parts) == 2 and top != "lib":
            if not _POLICY_NAME.match(top):
                raise PolicyError(f"policy folder name {top!r} must be lowercase letters, digits and '-'", f.display)
            expected = f"{POLICIES_PACKAGE}.{package_key(top)}"
            if f.package != expected:
                stated = _PACKAGE.search(f.source)
                raise PolicyError(f"package is {f.package!r}; a policy in folder {top!r} must use package {expected!r}",
                                  f.display, f.source.count("\n", 0, stated.start()) + 1 if stated else 1)
            policies[package_key(top)] = top
            kinds[package_key(top)] = tuple(k for k in ("deny", "warn")
                                            if re.search(rf"^{k}\s+contains\b", f.source, re.M))
            if not kinds[package_key(top)]:
                raise PolicyError("defines no `deny contains v` or `warn contains v` rule", f.display)
        elif top != "lib" and not f.test:
            raise PolicyError("unexpected Rego module: policies live in <name>/policy.rego, helpers in lib/, "
                              "tests in *_test.rego", f.display)
        (tests if f.test else modules).append(f)
    if not policies:
        raise PolicyError("no policies found (expected <name>/policy.rego folders)", str(root))
    for f in tests:
        top = Path(f.rel).parts[0]
        if top in policies.values():
            expected = f"{POLICIES_PACKAGE}.{package_key(top)}"
            if f.package not in (expected, expected + "_test"):
                raise PolicyError(f"package is {f.package!r}; tests of policy {top!r} use package {expected!r}",
                                  f.display, 1)
    if enforcement is None and (root / DEFAULT_ENFORCEMENT_FILE).is_file():
        enforcement = root / DEFAULT_ENFORCEMENT_FILE
    actions, efile = load_enforcement(enforcement, set(policies.values()))
    h = hashlib.sha256()
    for f in modules:
        h.update(f.rel.encode() + b"\0" + f.source.encode() + b"\0")
    h.update(json.dumps(actions, sort_keys=True).encode())
    return PolicySet(root, tuple(modules), tuple(tests), policies, actions, efile, h.hexdigest(), kinds, folders)


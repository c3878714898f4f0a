"""The Rego policy engine behind one interface (DESIGN.md section 3).

What the rest of taugate calls::

    engine = load_policy_engine("policies/")            # webhook/engines.py; PolicyError if the set cannot load
    violations = engine.evaluate(input_document)        # list[webhook.decision.Violation]
    engine.digest                                       # sha256 of the active set's sources
    engine.start_watching(0.5)                          # hot reload (a daemon thread), or
    await engine.store.watch(0.5)                       # the same as an asyncio task

Policy library layout (``policies/README.md`` is the author's guide): one folder per policy,
``<name>/policy.rego`` in package ``taugate.policies.<name with "_" for "-">`` defining
``deny contains v`` and/or ``warn contains v`` with ``v = {"msg", "field", "policy"}``,
``<name>/policy_test.rego`` (``test_`` rules), ``<name>/samples/``; shared helpers in ``lib/``.
Files ending in ``_test.rego`` are tests: loaded to check a set, never to serve it.
The engine adds one generated module, ``data.taugate.aggregate.results``, that names every
policy's ``deny``/``warn`` rule statically, so one engine query per admission request
evaluates every policy at once (a static reference is about twice as fast in regorus as
iterating ``data.taugate.policies[name]``).

Enforcement: a policy's ``deny`` results deny and its ``warn`` results warn, unless the
enforcement configuration (``policies/enforcement.yaml`` by default: a mapping
``policy-name: deny | warn | dryrun``) names the policy, in which case every result of that
policy gets the configured action (Gatekeeper's ``enforcementAction``, per policy).

Backends: ``embedded`` evaluates in process with regorus (``gordon-to-regorus``). A regorus
engine is *unsendable* (it panics when used from another thread), so every thread keeps its
own engine in a ``threading.local``, rebuilt when the active set's digest changes.
``opa`` pushes the same modules to an OPA server with ``opa-python-client`` and asks it for
the same ``data.taugate.aggregate.results`` document (``webhook/opa_backend.py``).

Reload: a ``PolicyStore`` polls the files; a changed set becomes active only after it parses,
compiles and passes every ``test_`` rule of its own tests. Otherwise the error is logged,
``taugate_policy_reload_failures_total`` counts it, ``taugate_policy_set_broken`` is 1 and
the previous set keeps serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import orjson
import regorus
import yaml
from prometheus_client import Counter, Gauge

from taugate.webhook.decision import Violation

log = logging.getLogger("taugate.policy")

ACTIONS = ("deny", "warn", "dryrun")
AGGREGATE_PACKAGE = "taugate.aggregate"
AGGREGATE_MODULE = "taugate/aggregate.rego"
RESULTS_RULE = f"data.{AGGREGATE_PACKAGE}.results"
POLICIES_PACKAGE = "taugate.policies"
DEFAULT_ENFORCEMENT_FILE = "enforcement.yaml"

POLICY_RELOADS = Counter("taugate_policy_reloads_total",
                         "Policy sets activated after a change on disk (initial load excluded).")
POLICY_RELOAD_FAILURES = Counter("taugate_policy_reload_failures_total",
                                 "Changed policy sets rejected (parse, compile or test failure); the previous set kept serving.")
POLICY_SET_BROKEN = Gauge("taugate_policy_set_broken",
                          "1 while the policy files on disk fail to load and an older set is serving, else 0.")


class PolicyError(Exception):
    """A policy set that cannot be used. ``str(error)`` is one line: ``file:line: reason``
    when a file is to blame, else the reason. ``file``/``line`` hold the parts."""

    def __init__(self, reason: str, file: str | None = None, line: int | None = None):
        self.reason, self.file, self.line = reason, file, line
        where = f"{file}:{line}: " if file and line else f"{file}: " if file else ""
        super().__init__(f"{where}{reason}")


class PolicyEvaluationError(PolicyError):
    """Evaluation failed at run time (a Rego runtime error, an unreachable OPA server).

    ``failed`` maps each policy that failed on this input to its one-line reason (empty when
    the engine as a whole failed, e.g. an OPA server out of reach); ``results`` holds the
    violations of the policies that did evaluate."""

    def __init__(self, reason: str, file: str | None = None, line: int | None = None, *,
                 failed: dict[str, str] | None = None, results: list[Violation] | None = None):
        super().__init__(reason, file, line)
        self.failed = dict(failed or {})
        self.results = list(results or [])


class PolicyEngine(Protocol):
    """What admission calls. ``digest``: sha256 hex of the active policy set's sources;
    ``evaluate(input)``: every result of every policy for one input document (shape:
    ``policies/input.schema.json``) as ``Violation``s whose ``action`` already follows the
    enforcement configuration; raises ``PolicyEvaluationError`` when evaluation fails."""

    digest: str

    def evaluate(self, input: dict) -> list[Violation]: ...


# --------------------------------------------------------------------------- policy sets

@dataclass(frozen=True)
class RegoFile:
    """One Rego module: ``rel`` is its path inside the policy folder (the module name given to
    the engine), ``display`` the path shown in errors, ``package`` its package (no ``data.``)."""

    rel: str
    display: str
    source: str
    package: str
    test: bool


@dataclass(frozen=True)
class TestRule:
    """One ``test_`` rule: where it is and its full rule path (``data.<package>.<name>``)."""

    __test__ = False  # not a pytest test class
    file: RegoFile
    line: int
    name: str

    @property
    def rule(self) -> str:
        return f"data.{self.file.package}.{self.name}"


@dataclass(frozen=True)
class PolicySet:
    """An immutable, loaded policy set.

    ``policies``: package key (``gpu_total_fits_queue``) -> policy name (folder,
    ``gpu-total-fits-queue``); ``modules``: what serves; ``tests``: ``_test.rego`` files;
    ``enforcement``: policy name -> action; ``digest``: sha256 hex over every serving module
    (path and source, sorted) and the enforcement mapping.
    """

    root: Path
    modules: tuple[RegoFile, ...]
    tests: tuple[RegoFile, ...]
    policies: dict[str, str]
    enforcement: dict[str, str]
    enforcement_file: str | None
    digest: str
    kinds: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def aggregate(self) -> RegoFile:
        """The generated module ``data.taugate.aggregate.results``: ``[[package key, kind, v]]``
        for every ``deny``/``warn`` rule the policies define."""
        parts = [f'\t[["{key}", "{kind}", v] | some v in data.{POLICIES_PACKAGE}.{key}.{kind}],'
                 for key in sorted(self.kinds) for kind in self.kinds[key]]
        source = ("# Generated by webhook/policy.py from the policy folders: do not edit.\n"
                  f"package {AGGREGATE_PACKAGE}\n\nparts := [\n" + "\n".join(parts) + "\n]\n\n"
                  "results := [r | some p in parts; some r in p]\n")
        return RegoFile(AGGREGATE_MODULE, AGGREGATE_MODULE, source, AGGREGATE_PACKAGE, False)

    @property
    def serving_modules(self) -> tuple[RegoFile, ...]:
        """What a serving engine loads: the library's modules plus the generated aggregate."""
        return self.modules + (self.aggregate,)

    def test_rules(self) -> list[TestRule]:
        """Every ``test_`` rule in the test files, in file order (OPA's convention: a rule whose
        name starts with ``test_``)."""
        out = []
        for f in self.tests:
            seen = set()
            for m in _TEST_RULE.finditer(f.source):
                if m.group(1) not in seen:
                    seen.add(m.group(1))
                    out.append(TestRule(f, f.source.count("\n", 0, m.start()) + 1, m.group(1)))
        return out

    def action(self, policy: str, kind: str) -> str:
        """The enforcement action of one result: configured for the policy, else its rule kind."""
        return self.enforcement.get(policy, "warn" if kind == "warn" else "deny")

    def to_violations(self, results: list) -> list[Violation]:
        """Turn ``data.taugate.aggregate.results`` (``[[package key, kind, v], ...]``) into
        Violations, sorted by policy, field and message."""
        out = []
        for item in results or []:
            if not (isinstance(item, list) and len(item) == 3):
                continue
            key, kind, v = item
            name = self.policies.get(key, str(key).replace("_", "-"))
            v = v if isinstance(v, dict) else {"msg": json.dumps(v)}
            msg = v.get("msg")
            out.append(Violation(name, str(v.get("field") or ""), msg if isinstance(msg, str) else json.dumps(msg),
                                 self.action(name, kind)))  # type: ignore[arg-type]
        out.sort(key=lambda x: (x.policy, x.field, x.message))
        return out


_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][\w.]*)", re.M)
_TEST_RULE = re.compile(r"^(test_[A-Za-z0-9_]*)\b", re.M)
_POLICY_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def package_key(policy: str) -> str:
    """The package key of a policy folder name: ``gpu-total-fits-queue`` -> ``gpu_total_fits_queue``."""
    return policy.replace("-", "_")


def _display(root: Path, rel: str) -> str:
    return str(root / rel)


def _read_rego(root: Path, path: Path) -> RegoFile:
    rel = path.relative_to(root).as_posix()
    display = _display(root, rel)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(f"cannot read: {e.__class__.__name__}", display) from None
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


def load_enforcement(source: dict[str, str] | str | Path | None, known: set[str]) -> tuple[dict[str, str], str | None]:
    """Read an enforcement configuration: a mapping ``policy-name: deny | warn | dryrun`` given
    as a dict or a YAML file. Returns (mapping, file or None). Raises ``PolicyError`` naming the
    file and line for invalid YAML, a value that is not an action, or an unknown policy (a typo
    would otherwise silently leave a policy at its default)."""
    if source is None:
        return {}, None
    text, where = None, None
    if isinstance(source, dict):
        data: Any = source
    else:
        where = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PolicyError("enforcement file not found", where) from None
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError(f"cannot read enforcement file: {e.__class__.__name__}", where) from None
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
    out: dict[str, str] = {}
    for name, action in data.items():
        line = _line_of_key(text, str(name)) if text else None
        if action not in ACTIONS:
            raise PolicyError(f"policy {name!r}: enforcement {action!r} is not one of {', '.join(ACTIONS)}", where, line)
        if name not in known:
            raise PolicyError(f"unknown policy {name!r} (policies here: {', '.join(sorted(known)) or 'none'})", where, line)
        out[str(name)] = action
    return out, where


def read_policy_set(policy_dir: str | Path, enforcement: dict[str, str] | str | Path | None = None) -> PolicySet:
    """Read a policy folder into a ``PolicySet`` (no compilation; see ``check_policy_set``).

    Checks the layout: every ``<name>/policy.rego`` declares package
    ``taugate.policies.<name with _>``; test files in a policy folder use that package (or
    ``<package>_test``); no two modules share a path. ``enforcement`` None means
    ``<policy_dir>/enforcement.yaml`` when it exists. Raises ``PolicyError``.
    """
    root = Path(policy_dir)
    if not root.is_dir():
        raise PolicyError("policy folder not found", str(root))
    modules: list[RegoFile] = []
    tests: list[RegoFile] = []
    policies: dict[str, str] = {}
    kinds: dict[str, tuple[str, ...]] = {}
    for path in sorted(root.rglob("*.rego")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        f = _read_rego(root, path)
        top = Path(f.rel).parts[0]
        if path.name == "policy.rego" and len(Path(f.rel).parts) == 2 and top != "lib":
            if not _POLICY_NAME.match(top):
                raise PolicyError(f"policy folder name {top!r} must be lowercase letters, digits and '-'", f.display)
            expected = f"{POLICIES_PACKAGE}.{package_key(top)}"
            if f.package != expected:
                raise PolicyError(f"package is {f.package!r}; a policy in folder {top!r} must use package {expected!r}",
                                  f.display, f.source.count("\n", 0, _PACKAGE.search(f.source).start()) + 1)
            policies[package_key(top)] = top
            kinds[package_key(top)] = tuple(k for k in ("deny", "warn") if re.search(rf"^{k}\s+contains\b", f.source, re.M))
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
                raise PolicyError(f"package is {f.package!r}; tests of policy {top!r} use package {expected!r}", f.display, 1)
    if enforcement is None and (root / DEFAULT_ENFORCEMENT_FILE).is_file():
        enforcement = root / DEFAULT_ENFORCEMENT_FILE
    actions, efile = load_enforcement(enforcement, set(policies.values()))
    h = hashlib.sha256()
    for f in modules:
        h.update(f.rel.encode() + b"\0" + f.source.encode() + b"\0")
    h.update(json.dumps(actions, sort_keys=True).encode())
    return PolicySet(root, tuple(modules), tuple(tests), policies, actions, efile, h.hexdigest(), kinds)


# --------------------------------------------------------------------------- regorus

def _regorus_error(e: BaseException, ps: PolicySet, cls: type[PolicyError] = PolicyError) -> PolicyError:
    """A regorus error (``--> file:line:col ... error: reason``) as a one-line PolicyError."""
    text = str(e).split("Stack backtrace")[0]
    loc = re.search(r"-->\s*(.+?):(\d+):\d+", text)
    reason = re.search(r"error:\s*(.+)", text)
    why = reason.group(1).strip() if reason else (text.strip().splitlines() or [type(e).__name__])[0]
    if loc:
        rel = loc.group(1)
        shown = _display(ps.root, rel) if not Path(rel).is_absolute() else rel
        return cls(why, shown, int(loc.group(2)))
    return cls(why)


def build_regorus_engine(ps: PolicySet, *, with_tests: bool = False) -> "regorus.Engine":
    """A regorus engine holding the set's modules (and test files), compiled: the results rule
    is evaluated once on an empty input, which makes regorus resolve every rule and function
    of every module. Use it only on the thread that built it. Raises ``PolicyError``
    (``file:line: reason``) for a parse or compile error."""
    engine = regorus.Engine()
    for f in ps.serving_modules + (ps.tests if with_tests else ()):
        try:
            engine.add_policy(f.rel, f.source)
        except BaseException as e:  # regorus raises RuntimeError; a Rust panic is a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise _regorus_error(e, ps) from None
    try:
        engine.set_input_json("{}")
        engine.eval_rule(RESULTS_RULE)
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise _regorus_error(e, ps) from None
    return engine


@dataclass(frozen=True)
class TestOutcome:
    """The result of one ``test_`` rule: passed, failed (false/undefined) or error."""

    __test__ = False  # not a pytest test class
    test: TestRule
    passed: bool
    error: str | None = None
    seconds: float = 0.0


def run_rego_tests(ps: PolicySet, engine: "regorus.Engine | None" = None) -> list[TestOutcome]:
    """Evaluate every ``test_`` rule with regorus (like ``opa test``: a test passes when its
    rule is true). ``engine`` must hold the tests (``build_regorus_engine(with_tests=True)``);
    built here when None. Raises ``PolicyError`` when the set does not compile."""
    engine = engine or build_regorus_engine(ps, with_tests=True)
    out = []
    engine.set_input_json("{}")
    for t in ps.test_rules():
        start = time.perf_counter()
        try:
            value = engine.eval_rule(t.rule)
            out.append(TestOutcome(t, value is True, None, time.perf_counter() - start))
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            out.append(TestOutcome(t, False, str(_regorus_error(e, ps)), time.perf_counter() - start))
    return out


def check_policy_set(ps: PolicySet) -> None:
    """Accept a set only if it parses, compiles and passes its own tests; else raise
    ``PolicyError`` naming the first failing file and line (the reload gate)."""
    outcomes = run_rego_tests(ps)
    failed = [o for o in outcomes if not o.passed]
    if failed:
        o = failed[0]
        more = f" (and {len(failed) - 1} more failing test(s))" if len(failed) > 1 else ""
        raise PolicyError(f"{o.test.name} {'errored: ' + o.error if o.error else 'failed'}{more}",
                          o.test.file.display, o.test.line)


# --------------------------------------------------------------------------- store / reload

def _fingerprint(root: Path, extra: Path | None) -> tuple:
    items = []
    try:
        paths = sorted(root.rglob("*.rego"))
    except OSError:
        paths = []
    if extra is not None:
        paths.append(extra)
    elif (root / DEFAULT_ENFORCEMENT_FILE).exists():
        paths.append(root / DEFAULT_ENFORCEMENT_FILE)
    for p in paths:
        try:
            st = p.stat()
            items.append((str(p), st.st_mtime_ns, st.st_size))
        except OSError:
            items.append((str(p), None, None))
    return tuple(items)


class PolicyStore:
    """The active policy set of one folder, reloaded when its files change.

    ``current`` is the active ``PolicySet`` (read it once per request: it is immutable).
    ``check_for_changes()`` reloads if any ``.rego`` file or the enforcement file changed;
    a new set is activated only after ``check_policy_set`` accepts it and every activation
    hook (``add_activation_hook``; the OPA backend pushes there) succeeded. On failure the
    old set keeps serving, ``last_error`` holds the one-line reason, the failure is logged
    and counted. ``start_watching(interval_s)`` polls in a daemon thread;
    ``await watch(interval_s)`` does the same as an asyncio task (reloads run in a worker
    thread, so the event loop is never blocked by compilation).
    """

    def __init__(self, policy_dir: str | Path, enforcement: dict[str, str] | str | Path | None = None, *,
                 check_tests: bool = True):
        self.policy_dir = Path(policy_dir)
        self._enforcement = enforcement
        self._enforcement_path = Path(enforcement) if isinstance(enforcement, (str, Path)) else None
        self._check_tests = check_tests
        self._lock = threading.Lock()
        self._hooks: list[Callable[[PolicySet, PolicySet | None], None]] = []
        self._listeners: list[Callable[[PolicySet], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self._failed_digest: str | None = None
        self._fp = _fingerprint(self.policy_dir, self._enforcement_path)
        self.current: PolicySet = self._load()

    @classmethod
    def serving(cls, ps: PolicySet) -> "PolicyStore":
        """A store that serves one already checked set as it is (no loading, no watching
        until ``start_watching``, which then reloads from ``ps.root``)."""
        store = cls.__new__(cls)
        store.policy_dir = ps.root
        store._enforcement = ps.enforcement_file or (dict(ps.enforcement) if ps.enforcement else None)
        store._enforcement_path = Path(ps.enforcement_file) if ps.enforcement_file else None
        store._check_tests = True
        store._lock = threading.Lock()
        store._hooks, store._listeners = [], []
        store._stop = threading.Event()
        store._thread = None
        store.last_error = None
        store._failed_digest = None
        store._fp = _fingerprint(store.policy_dir, store._enforcement_path)
        store.current = ps
        return store

    def _load(self) -> PolicySet:
        ps = read_policy_set(self.policy_dir, self._enforcement)
        if self._check_tests:
            check_policy_set(ps)
        else:
            build_regorus_engine(ps)
        return ps

    @property
    def digest(self) -> str:
        return self.current.digest

    def add_activation_hook(self, hook: Callable[[PolicySet, PolicySet | None], None]) -> None:
        """``hook(new, old)`` runs before a new set becomes active (and at once for the current
        set, with ``old`` None); if it raises, the new set is rejected."""
        hook(self.current, None)
        self._hooks.append(hook)

    def add_listener(self, listener: Callable[[PolicySet], None]) -> None:
        """``listener(new)`` runs after a new set became active (errors are logged only)."""
        self._listeners.append(listener)

    def reload(self) -> bool:
        """Load the folder now; activate it if it differs and passes. Returns True when a new
        set became active. Never raises for a bad set: see ``last_error``."""
        with self._lock:
            self._fp = _fingerprint(self.policy_dir, self._enforcement_path)
            try:
                ps = read_policy_set(self.policy_dir, self._enforcement)
            except PolicyError as e:
                return self._failed(str(e), None)
            if ps.digest == self.current.digest:
                self._ok()
                return False
            if ps.digest == self._failed_digest:
                return False
            try:
                if self._check_tests:
                    check_policy_set(ps)
                else:
                    build_regorus_engine(ps)
                for hook in self._hooks:
                    hook(ps, self.current)
            except PolicyError as e:
                return self._failed(str(e), ps.digest)
            except Exception as e:  # an activation hook (OPA push) failed
                return self._failed(f"activation failed: {e.__class__.__name__}: {e}", ps.digest)
            old, self.current = self.current, ps
            self._ok()
            POLICY_RELOADS.inc()
            log.info("policy set %s activated (was %s)", ps.digest[:12], old.digest[:12])
        for listener in self._listeners:
            try:
                listener(ps)
            except Exception:
                log.exception("policy set listener failed")
        return True

    def _ok(self) -> None:
        self.last_error = None
        self._failed_digest = None
        POLICY_SET_BROKEN.set(0)

    def _failed(self, reason: str, digest: str | None) -> bool:
        if reason != self.last_error:
            POLICY_RELOAD_FAILURES.inc()
            log.error("policy reload rejected, still serving %s: %s", self.current.digest[:12], reason)
        self.last_error = reason
        self._failed_digest = digest
        POLICY_SET_BROKEN.set(1)
        return False

    def check_for_changes(self) -> bool:
        """Reload when any policy file's mtime/size changed since the last look (cheap: stat
        only). Returns True when a new set became active."""
        if _fingerprint(self.policy_dir, self._enforcement_path) == self._fp:
            return False
        return self.reload()

    def start_watching(self, interval_s: float = 0.5) -> None:
        """Poll every ``interval_s`` seconds in a daemon thread (idempotent)."""
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.check_for_changes()
                except Exception:
                    log.exception("policy watch iteration failed")

        self._thread = threading.Thread(target=loop, name="taugate-policy-watch", daemon=True)
        self._thread.start()

    def stop_watching(self) -> None:
        """Stop the polling thread (waits for it)."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
            self._thread = None

    async def watch(self, interval_s: float = 0.5) -> None:
        """Poll forever on the running event loop; cancel the task to stop."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(self.check_for_changes)
            except Exception:
                log.exception("policy watch iteration failed")


# --------------------------------------------------------------------------- embedded engine

class EmbeddedPolicyEngine:
    """The in-process backend: one regorus engine per thread, for the store's active set.

    ``evaluate`` sets the input (serialised with orjson: ``json.dumps`` alone would cost a
    third of the budget) and evaluates ``data.taugate.aggregate.results`` once (about 0.2 ms
    for the KubeRay GPU RayJob sample on the 2-core dev machine, see bench/policy_eval.py); it
    may be called from any thread."""

    def __init__(self, store: PolicyStore):
        self.store = store
        self._local = threading.local()

    @property
    def digest(self) -> str:
        return self.store.current.digest

    def _engine(self, ps: PolicySet) -> "regorus.Engine":
        local = self._local
        if getattr(local, "digest", None) != ps.digest:
            local.engine = build_regorus_engine(ps)
            local.digest = ps.digest
        return local.engine

    def raw_results(self, input: dict, ps: PolicySet | None = None) -> tuple[PolicySet, list]:
        """The set used and the raw ``results`` list for one input."""
        ps = ps or self.store.current
        engine = self._engine(ps)
        try:
            engine.set_input_json(orjson.dumps(input).decode())
            return ps, engine.eval_rule(RESULTS_RULE) or []
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise _regorus_error(e, ps, PolicyEvaluationError) from None

    def evaluate(self, input: dict) -> list[Violation]:
        """Every result of every policy for ``input``, with enforcement actions applied.
        Raises ``PolicyEvaluationError`` when a policy fails at run time: each policy's rules
        are then evaluated alone (only on this failure path), so ``failed`` names the policies
        that failed and ``results`` keeps what the others found."""
        try:
            ps, raw = self.raw_results(input)
        except PolicyEvaluationError as e:
            raise self._isolate(input, e) from None
        return ps.to_violations(raw)

    def _isolate(self, input: dict, error: PolicyEvaluationError) -> PolicyEvaluationError:
        ps = self.store.current
        engine = self._engine(ps)
        raw: list = []
        failed: dict[str, str] = {}
        for key in sorted(ps.kinds):
            for kind in ps.kinds[key]:
                try:
                    found = engine.eval_rule(f"data.{POLICIES_PACKAGE}.{key}.{kind}") or []
                except BaseException as e:
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    failed.setdefault(ps.policies.get(key, key), str(_regorus_error(e, ps, PolicyEvaluationError)))
                    continue
                raw.extend([key, kind, v] for v in (found if isinstance(found, list) else [found]))
        if not failed:  # the aggregate failed but no policy alone does (the input itself): keep the error
            return error
        return PolicyEvaluationError(error.reason, error.file, error.line, failed=failed,
                                     results=ps.to_violations(raw))

    def start_watching(self, interval_s: float = 0.5) -> None:
        """Hot reload: see ``PolicyStore.start_watching``."""
        self.store.start_watching(interval_s)

    def stop_watching(self) -> None:
        self.store.stop_watching()


class RecordingEngine:
    """Wraps a ``PolicyEngine`` and keeps every input it evaluated and what came back (for
    ``taugate policy eval``, the sample runner and benchmarks: the input is exactly the one
    admission built). ``inputs[i]`` pairs with ``results[i]``."""

    def __init__(self, engine: PolicyEngine):
        self.engine = engine
        self.inputs: list[dict] = []
        self.results: list[list[Violation]] = []

    @property
    def digest(self) -> str:
        return self.engine.digest

    @property
    def store(self) -> "PolicyStore | None":
        return getattr(self.engine, "store", None)

    def evaluate(self, input: dict) -> list[Violation]:
        self.inputs.append(json.loads(json.dumps(input)))
        found = self.engine.evaluate(input)
        self.results.append(list(found))
        return found


def explain(engine: PolicyEngine, input: dict) -> dict[str, list[Violation]]:
    """Every policy of the engine's active set with its results for ``input`` (an empty list
    for a policy that passed), for ``taugate policy eval``."""
    store: PolicyStore | None = getattr(engine, "store", None)
    out: dict[str, list[Violation]] = {name: [] for name in sorted(store.current.policies.values())} if store else {}
    for v in engine.evaluate(input):
        out.setdefault(v.policy, []).append(v)
    return out


__all__ = [
    "ACTIONS", "EmbeddedPolicyEngine", "RecordingEngine", "PolicyEngine", "PolicyError", "PolicyEvaluationError", "PolicySet",
    "PolicyStore", "RegoFile", "TestOutcome", "TestRule", "build_regorus_engine", "check_policy_set", "explain",
    "load_enforcement", "package_key", "read_policy_set", "run_rego_tests",
]

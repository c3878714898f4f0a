"""The embedded policy backend: regorus in process. A regorus engine is *unsendable* (it panics
when used from another thread), so ``EmbeddedPolicyEngine`` keeps one per thread, rebuilt when the
active set's digest changes. ``check_policy_set`` is the reload gate's first step.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson
import regorus

from taugate.webhook.decision import Violation
from taugate.webhook.policy.sets import (
    RESULTS_RULE,
    PolicyError,
    PolicyEvaluationError,
    PolicySet,
    TestRule,
)


class ActiveSet(Protocol):
    """Where an engine reads the policy set to serve: ``current`` (a ``PolicyStore``)."""

    current: PolicySet

def _regorus_error(e: BaseException, ps: PolicySet, cls: type[PolicyError] = PolicyError) -> PolicyError:
    """A regorus error (``--> file:line:col ... error: reason``) as a one-line PolicyError."""
    text = str(e).split("Stack backtrace")[0]
    loc = re.search(r"-->\s*(.+?):(\d+):\d+", text)
    reason = re.search(r"error:\s*(.+)", text)
    why = reason.group(1).strip() if reason else (text.strip().splitlines() or [type(e).__name__])[0]
    if loc:
        rel = loc.group(1)
        shown = ps.display(rel) if not Path(rel).is_absolute() else rel
        return cls(why, shown, int(loc.group(2)))
    return cls(why)


def build_regorus_engine(ps: PolicySet, *, with_tests: bool = False) -> regorus.Engine:
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


def run_rego_tests(ps: PolicySet, engine: regorus.Engine | None = None) -> list[TestOutcome]:
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



DEFAULT_RESULTS_CACHE = 1024
"""How many evaluations ``EmbeddedPolicyEngine`` remembers by default (each entry is one whole
input's bytes and its results)."""
LARGE_INPUT_BYTES = 2**20
"""An input above this many bytes is dropped from its thread's regorus engine once evaluated."""
DEFAULT_RESULTS_CACHE_BYTES = 32 * 2**20
"""The most input bytes the results cache holds (an entry is its input's bytes): 32 MiB, so a run of
large distinct objects (each create has its own run-id) never grows the webhook past its memory
limit; an input above an eighth of it (4 MiB) is never remembered."""


class EmbeddedPolicyEngine:
    """The in-process backend: one regorus engine per thread, for the store's active set.

    ``evaluate`` serialises the whole input with orjson and evaluates
    ``data.taugate.aggregate.results`` once. The results are remembered by the policy set's digest
    and the input's exact bytes, least recently used first out, ``cache_size`` entries and
    ``cache_bytes`` input bytes (an input over an eighth of them is not remembered; 0: none;
    never for a set that calls a non-deterministic built-in, ``PolicySet.deterministic``): equal
    bytes are an equal input, and a policy reads nothing but its input and the set, so a hit is
    the answer evaluation would give (``tests/policies/test_the_results_cache_changes_no_decision.py``
    checks it over the fuzzer's corpus). Errors are never remembered. It may be called from any
    thread, the server's event loop included (``remote`` is False)."""

    remote = False

    def __init__(self, store: ActiveSet, cache_size: int = DEFAULT_RESULTS_CACHE,
                 cache_bytes: int = DEFAULT_RESULTS_CACHE_BYTES):
        self.store = store
        self._local = threading.local()
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._cache: OrderedDict[tuple[str, bytes], list] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.cache_hits = 0
        self.cache_misses = 0

    @property
    def digest(self) -> str:
        return self.store.current.digest

    def _engine(self, ps: PolicySet) -> regorus.Engine:
        local = self._local
        if getattr(local, "digest", None) != ps.digest:
            local.engine = build_regorus_engine(ps)
            local.digest = ps.digest
        return local.engine

    def raw_results(self, input: dict, ps: PolicySet | None = None) -> tuple[PolicySet, list]:
        """The set used and the raw ``results`` (remembered, see the class); the list is shared
        with the cache: read it, never change it."""
        ps = ps or self.store.current
        text = orjson.dumps(input)
        key = (ps.digest, text) if ps.deterministic and self.cache_size > 0 and \
            len(text) <= self.cache_bytes // 8 else None
        if key is not None:
            with self._cache_lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    self.cache_hits += 1
                    return ps, hit
        engine = self._engine(ps)
        try:
            engine.set_input_json(text.decode())
            raw = engine.eval_rule(RESULTS_RULE) or []
            if len(text) > LARGE_INPUT_BYTES:  # the thread's engine would keep it until its next review
                engine.set_input_json("{}")
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise _regorus_error(e, ps, PolicyEvaluationError) from None
        if key is not None:
            with self._cache_lock:
                self.cache_misses += 1
                if key not in self._cache:
                    self._cached_bytes += len(text)
                self._cache[key] = raw
                while len(self._cache) > self.cache_size or self._cached_bytes > self.cache_bytes:
                    (_, old), _ = self._cache.popitem(last=False)
                    self._cached_bytes -= len(old)
        return ps, raw

    def evaluate(self, input: dict) -> list[Violation]:
        """Every result of every policy for ``input``, with enforcement actions applied.
        Raises ``PolicyEvaluationError`` when a policy fails at run time: each policy's rules
        are then evaluated alone (only on this failure path), so ``failed`` names the policies
        that failed and ``results`` keeps what the others found."""
        ps, raw = self._raw(input)
        return ps.to_violations(raw)

    def _raw(self, input: dict, ps: PolicySet | None = None) -> tuple[PolicySet, list]:
        """``raw_results``, with a run-time failure narrowed to the policies that failed (``_isolate``),
        both on the one set read here (a reload in between changes neither)."""
        ps = ps or self.store.current
        try:
            return self.raw_results(input, ps)
        except PolicyEvaluationError as e:
            raise self._isolate(input, e, ps) from None

    def _isolate(self, input: dict, error: PolicyEvaluationError, ps: PolicySet) -> PolicyEvaluationError:
        """Each policy's rules alone (``PolicySet.parts``, arrays: a ``deny`` set of objects has no
        Python value) with the same input; regorus starts every ``eval_rule`` from a clean
        evaluation state, so what a failed query left behind reaches no other policy or request
        (tests/policies/test_a_broken_policy_breaks_nothing_else.py)."""
        engine = self._engine(ps)
        engine.set_input_json(orjson.dumps(input).decode())
        raw: list = []
        failed: dict[str, str] = {}
        for key, _kind, rule in ps.parts:
            try:
                found = engine.eval_rule(rule) or []
            except BaseException as e:
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                failed.setdefault(ps.policies.get(key, key), str(_regorus_error(e, ps, PolicyEvaluationError)))
                continue
            raw.extend(found)
        if not failed:  # the aggregate failed but no policy alone does (the input itself): keep the error
            return error
        results = ps.to_violations([r for r in raw if ps.policies.get(r[0], r[0]) not in failed])
        return PolicyEvaluationError(error.reason, error.file, error.line, failed=failed, results=results)


"""The policy library's test runner behind ``taugate policy test``: ``opa test`` plus Gatekeeper's
``gator verify``, with samples admitted through the webhook's own code path and every rule run on
inputs generated from them (one field changed at a time)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugate.access import metadata_of
from taugate.settings import Settings
from taugate.snapshot import ClusterState, SnapshotError, load_snapshot, read_objects
from taugate.webhook.decision import Decision
from taugate.webhook.policy.engine import (
    EmbeddedPolicyEngine,
    PolicyEngine,
    PolicyError,
    PolicySet,
    PolicyStore,
    TestOutcome,
    build_regorus_engine,
    read_policy_set,
    run_rego_tests,
)
from taugate.webhook.policy.schema import unknown_references

SAMPLE_KINDS = ("allowed", "disallowed")


def default_policy_dir() -> Path:
    return Path(Settings().policy_dir)


def default_cluster(policy_dir: Path) -> Path | None:
    """The first existing of ``DIR/../examples/cluster.yaml`` and the bundled library's
    ``examples/cluster.yaml``, so a copy of the library placed elsewhere still tests; else None."""
    return next((c for c in default_cluster_candidates(policy_dir) if c.is_file()), None)


def default_cluster_candidates(policy_dir: Path) -> list[Path]:
    return list(dict.fromkeys((policy_dir.resolve().parent / "examples" / "cluster.yaml",
                               Path(Settings().policy_dir).resolve().parent / "examples" / "cluster.yaml")))


# --------------------------------------------------------------------------- sample runner

@dataclass
class SampleResult:
    """One sample admitted through the webhook's code path; ``own``: its own policy's results,
    ``others``: every other denial or warning, ``error``: why it could not be admitted at all."""

    policy: str
    path: Path
    expect: str
    decision: Decision | None = None
    own: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        if self.error:
            return False
        return bool(self.own) if self.expect == "disallowed" else not self.own


def results_of(decision: Decision, policy: str) -> list[str]:
    out = [f"[deny] {v.field}: {v.message}" for v in decision.violations if v.policy == policy]
    out += [f"[warn] {w[len(policy) + 3:]}" for w in decision.warnings if w.startswith(f"[{policy}] ")]
    out += [f"[dryrun] {v.field}: {v.message}" for v in decision.dryrun if v.policy == policy]
    return out


def _others(decision: Decision, policy: str) -> list[str]:
    out = [v.render() for v in decision.violations if v.policy != policy]
    out += [w for w in decision.warnings if not w.startswith(f"[{policy}] ")]
    return out


def sample_files(ps: PolicySet) -> dict[str, list[tuple[str, Path]]]:
    out: dict[str, list[tuple[str, Path]]] = {}
    for name in sorted(ps.policies.values()):
        folder = ps.folder(name) / "samples"
        items = []
        for path in sorted(folder.glob("*.y*ml")) if folder.is_dir() else []:
            for kind in ("disallowed", "allowed"):
                if path.name.startswith(f"example_{kind}"):
                    items.append((kind, path))
                    break
        out[name] = items
    return out


def admit_sample(policy: str, expect: str, path: Path, *, engine: PolicyEngine, state: ClusterState,
                 settings: Settings) -> SampleResult:
    from taugate.webhook.review import admit

    result = SampleResult(policy, path, expect)
    try:
        objects = read_objects(path)
    except SnapshotError as e:
        result.error = str(e)
        return result
    if len(objects) != 1:
        result.error = f"{path}: a sample holds exactly one object, found {len(objects)}"
        return result
    obj = objects[0]
    namespace = metadata_of(obj).get("namespace")
    if not namespace:
        result.error = f"{path}: metadata.namespace is required (the workspace namespace the sample is admitted in)"
        return result
    try:
        decision = admit(obj, state=state, settings=settings, engine=engine, namespace=namespace)
    except PolicyError as e:
        result.error = f"{path}: evaluation failed: {e}"
        return result
    result.decision = decision
    result.own = results_of(decision, policy)
    result.others = _others(decision, policy)
    return result


@dataclass(frozen=True)
class RuntimeFailure:
    """A policy that failed at run time on a generated input (the field changed, the value)."""

    policy: str
    sample: Path
    field: str
    value: str
    error: str
    inputs: int = 1


_OTHER_TYPE: dict[type, tuple] = {
    str: (0, -1, 2**31, True, ["x"], {"x": "y"}), int: ("x", "", True, ["x"], {}), float: ("x", True, []),
    bool: ("true", 1, []), list: ("x", 0, {}), dict: ("x", 0, []), type(None): ("x", 0, [], {}),
}
_SAME_TYPE: dict[type, tuple] = {
    str: ("", "x", "-1", "1m"), int: (0, -1, 2**31 - 1, 2**31), float: (0.0, -1.0, 0.5), list: ([],), dict: ({},),
}


def generated_inputs(obj: dict) -> list[tuple[str, Any, dict]]:
    """Two variants per field (``(field path, value, object)``): a value of another JSON type and an
    edge value of its own type. ``apiVersion``, ``kind`` and ``metadata.namespace`` are kept (they
    choose the code path and the workspace)."""
    from taugate.fieldpath import field_path

    out: list[tuple[str, Any, dict]] = []
    n = 0

    def walk(value: Any, path: tuple) -> None:
        nonlocal n
        if path and path not in (("apiVersion",), ("kind",), ("metadata",), ("metadata", "namespace")):
            other = _OTHER_TYPE[type(value)]
            same = (not value,) if type(value) is bool else tuple(v for v in _SAME_TYPE[type(value)] if v != value) \
                if type(value) in _SAME_TYPE else ()
            for replacement in (other[n % len(other)],) + ((same[n % len(same)],) if same else ()):
                out.append((field_path(path), replacement, _replaced(obj, path, replacement)))
            n += 1
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, path + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, path + (i,))

    walk(obj, ())
    return out


def _replaced(obj: dict, path: tuple, value: Any) -> dict:
    copy = json.loads(json.dumps(obj))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


def find_runtime_failures(samples: list[tuple[Path, dict, ClusterState]], *, engine: PolicyEngine,
                          settings: Settings) -> list[RuntimeFailure]:
    """The policies that failed at run time on a generated input (the first input per policy, with
    the number it failed on)."""
    from taugate.webhook.review import admit

    found: dict[str, RuntimeFailure] = {}
    for path, obj, state in samples:
        namespace = (obj.get("metadata") or {}).get("namespace")
        for field_, value, variant in generated_inputs(obj):
            decision = admit(variant, state=state, settings=settings, engine=engine, namespace=namespace)
            for policy in decision.policy_failures:
                first = found.get(policy)
                if first is None:
                    error = next((v.message for v in decision.violations + decision.dryrun if v.policy == policy),
                                 next((w for w in decision.warnings if w.startswith(f"[{policy}]")), ""))
                    found[policy] = RuntimeFailure(policy, path, field_, json.dumps(value), error)
                else:
                    found[policy] = RuntimeFailure(first.policy, first.sample, first.field, first.value, first.error,
                                                   first.inputs + 1)
    return [found[p] for p in sorted(found)]


@dataclass
class Report:
    """Everything ``taugate policy test`` found; ``load_error`` set means nothing else ran."""

    policy_dir: Path
    cluster: Path | None = None
    load_error: str | None = None
    tests: list[TestOutcome] = field(default_factory=list)
    samples: list[SampleResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    runtime: list[RuntimeFailure] = field(default_factory=list)
    generated: int = 0

    @property
    def failures(self) -> int:
        return ((1 if self.load_error else 0) + sum(not t.passed for t in self.tests)
                + sum(not s.passed for s in self.samples) + len(self.problems) + len(self.runtime))

    @property
    def passed(self) -> int:
        return sum(t.passed for t in self.tests) + sum(s.passed for s in self.samples)

    @property
    def ok(self) -> bool:
        return self.failures == 0

    def summary(self) -> str:
        """The first failure in one line, and how many more (the reload gate's reason)."""
        lines = [line.strip().removeprefix("FAIL ") for line in render_report(self).splitlines()
                 if line.strip().startswith("FAIL ")]
        if not lines:
            return "passed"
        more = f" (and {self.failures - 1} more failure(s); run `taugate policy test {self.policy_dir}`)" \
            if self.failures > 1 else ""
        return lines[0] + more


def reload_gate(ps: PolicySet) -> None:
    """The hot-reload gate: everything ``taugate policy test`` checks. Raises ``PolicyError`` with
    the first failure, so the set stays inactive."""
    report = run_policy_set_tests(ps, cluster=default_cluster(ps.root))
    if not report.ok:
        raise PolicyError(f"taugate policy test failed: {report.summary()}")


def run_policy_tests(policy_dir: str | Path, *, cluster: str | Path | None = None, settings: Settings | None = None,
                     engine_factory: Callable[[PolicySet], PolicyEngine] | None = None,
                     generated: bool | None = None) -> Report:
    """Load, unit-test and sample-test a policy folder; never raises for a broken library.

    A policy that fails at run time on a sample or generated input would answer 503 when serving,
    so it is a failure. ``generated`` defaults to True with the embedded engine and False with an
    ``engine_factory`` (those compare engines on the samples). A missing or broken snapshot is
    reported once, and the samples that needed it are skipped."""
    root = Path(policy_dir)
    try:
        ps = read_policy_set(root)
    except PolicyError as e:
        return Report(root, load_error=str(e))
    return run_policy_set_tests(ps, cluster=cluster, settings=settings, engine_factory=engine_factory,
                           generated=generated)


def run_policy_set_tests(ps: PolicySet, *, cluster: str | Path | None = None, settings: Settings | None = None,
                    engine_factory: Callable[[PolicySet], PolicyEngine] | None = None,
                    generated: bool | None = None) -> Report:
    root = ps.root
    report = Report(root)
    settings = settings or Settings()
    try:
        compiled = build_regorus_engine(ps, with_tests=True)
    except PolicyError as e:
        report.load_error = str(e)
        return report
    report.tests = run_rego_tests(ps, compiled)
    try:
        report.problems += unknown_references(ps)
    except PolicyError as e:
        report.problems.append(str(e))
    by_file: dict[str, int] = {}
    for t in report.tests:
        by_file[t.test.file.rel] = by_file.get(t.test.file.rel, 0) + 1
    engine = engine_factory(ps) if engine_factory else EmbeddedPolicyEngine(PolicyStore.serving(ps))
    snapshots: dict[Path | None, ClusterState | None] = {}
    fallback = Path(cluster) if cluster else default_cluster(root)
    report.cluster = fallback
    admitted: list[tuple[Path, dict, ClusterState]] = []
    for name, items in sample_files(ps).items():
        report.problems += _coverage_problems(ps.folder(name), name, items, by_file)
        state = _sample_state(ps.folder(name) / "samples" / "cluster.yaml", fallback, snapshots, settings, report)
        if state is not None:
            admitted += _admit_samples(report, name, items, engine, state, settings)
    if (engine_factory is None if generated is None else generated) and admitted:
        report.runtime += [f for f in find_runtime_failures(admitted, engine=engine, settings=settings)
                           if f.policy not in {r.policy for r in report.runtime}]
        report.generated = sum(len(generated_inputs(obj)) for _, obj, _ in admitted)
    return report


def _coverage_problems(folder: Path, name: str, items: list[tuple[str, Path]],
                       tested_files: dict[str, int]) -> list[str]:
    problems = []
    if not any(rel.startswith(f"{name}/") for rel in tested_files):
        problems.append(f"{folder}: policy {name!r} has no test_ rules (add {name}/policy_test.rego)")
    for kind in SAMPLE_KINDS:
        if not any(k == kind for k, _ in items):
            problems.append(f"{folder / 'samples'}: policy {name!r} has no example_{kind}*.yaml sample")
    return problems


def _sample_state(own: Path, fallback: Path | None, snapshots: dict[Path | None, ClusterState | None],
                  settings: Settings, report: Report) -> ClusterState | None:
    """Its own ``samples/cluster.yaml``, else ``fallback``, loaded once per snapshot; None (one
    problem in ``report``) when there is none or it does not load."""
    snap = own if own.is_file() else fallback
    if snap in snapshots:
        return snapshots[snap]
    snapshots[snap] = None
    if snap is None:
        looked = " or ".join(str(c) for c in default_cluster_candidates(report.policy_dir))
        report.problems.append(f"no cluster snapshot for samples: looked for {looked}; pass --cluster SNAPSHOT")
        return None
    try:
        snapshots[snap] = load_snapshot(snap, settings)
    except SnapshotError as e:
        report.problems.append(f"cluster snapshot for samples: {e}")
    return snapshots[snap]


def _admit_samples(report: Report, name: str, items: list[tuple[str, Path]], engine: PolicyEngine,
                   state: ClusterState, settings: Settings) -> list[tuple[Path, dict, ClusterState]]:
    """Returns the admitted ``(path, object, state)`` the generated inputs start from."""
    admitted = []
    for kind, path in items:
        result = admit_sample(name, kind, path, engine=engine, state=state, settings=settings)
        report.samples.append(result)
        if result.decision is not None:
            for policy in result.decision.policy_failures:
                report.runtime.append(RuntimeFailure(policy, path, "(the sample as written)", "",
                                                     _failure_message(result.decision, policy)))
            admitted.append((path, read_objects(path)[0], state))
    return admitted


def _failure_message(decision: Decision, policy: str) -> str:
    return next((v.message for v in decision.violations + decision.dryrun if v.policy == policy),
                next((w for w in decision.warnings if w.startswith(f"[{policy}]")), ""))


def render_report(report: Report, *, verbose: bool = False) -> str:
    lines = [f"policy library {report.policy_dir}"]
    if report.load_error:
        lines.append(f"FAIL load: {report.load_error}")
    else:
        lines.append("rego tests:")
        for t in report.tests:
            if not t.passed:
                why = f": {t.error}" if t.error else " (false or undefined)"
                lines.append(f"  FAIL {t.test.file.display}:{t.test.line} {t.test.name}{why}")
            elif verbose:
                lines.append(f"  PASS {t.test.file.display}:{t.test.line} {t.test.name} ({t.seconds * 1e3:.1f} ms)")
        passed = sum(t.passed for t in report.tests)
        lines.append(f"  {passed}/{len(report.tests)} passed")
        against = f"cluster snapshot {report.cluster}" if report.cluster else "no cluster snapshot"
        lines.append(f"samples (admitted through mutation + validation, against {against} "
                     f"unless a policy has its own samples/cluster.yaml):")
        for s in report.samples:
            status = "PASS" if s.passed else "FAIL"
            if s.error:
                lines.append(f"  FAIL {s.path}: {s.error}")
                continue
            if s.passed and not verbose:
                continue
            want = f"{s.policy} reports it" if s.expect == "disallowed" else f"{s.policy} reports nothing"
            lines.append(f"  {status} {s.path} (expected: {want})")
            for r in s.own:
                lines.append(f"      {r}")
            if verbose or not s.passed:
                for r in s.others:
                    lines.append(f"      other: {r}")
        lines.append(f"  {sum(s.passed for s in report.samples)}/{len(report.samples)} passed")
        for p in report.problems:
            lines.append(f"FAIL {p}")
        lines.append(f"runtime errors (every rule on the samples and {report.generated} generated inputs):")
        for failure in report.runtime:
            more = failure.inputs - 1
            lines.append(f"  FAIL {failure.policy} failed at run time on {failure.sample} with {failure.field} = "
                         f"{failure.value or 'as written'}"
                         f"{f' (and {more} more generated input(s))' if more > 0 else ''}: {failure.error}")
        if not report.runtime:
            lines.append("  none")
    lines.append(f"{report.passed} passed, {report.failures} failed")
    return "\n".join(lines)

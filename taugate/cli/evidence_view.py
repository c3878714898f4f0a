"""The parts of ``taugate evidence show`` that render what repeating a run takes and the pods' log
tails (pure; any JSON in the record is accepted: a field of the wrong type is shown as it is or
skipped, never an error).
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list:
    return value if isinstance(value, list) else []


def safe_text(text: str) -> str:
    """``text`` with control characters (terminal escapes) shown as ``\\xNN``: a workload's log
    must not drive the reader's terminal. Newlines and tabs are kept."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render_repeat(doc: dict) -> list[str]:
    """The "To repeat this run" section: the admitted object (YAML, as ``kubectl apply`` takes
    it), each pod template container's image with the digest its pods ran (``imageDigests``),
    the profile, as the TauCluster resolved it, and the profile-set hash. Empty when the record
    holds none of them."""
    obj = doc.get("admittedObject")
    images = [_d(i) for i in _l(doc.get("images"))]
    digests = _d(doc.get("imageDigests"))
    resolved = _d(doc.get("resolvedProfile"))
    if not (obj or images or doc.get("profile") or doc.get("profileSetHash")):
        return []
    out = ["To repeat this run:"]
    out.append(f"  profile: {doc.get('profile') or '(none)'}  profileSetHash: {doc.get('profileSetHash') or '(none)'}")
    if resolved:
        if resolved.get("unavailable"):
            out.append(f"  resolved profile: unavailable ({resolved['unavailable']})")
        if isinstance(resolved.get("profile"), dict):
            match = "the admission's" if resolved.get("matchesAdmission") else "NOT the admission's"
            out.append(f"  resolved profile (TauCluster status, set hash {resolved.get('profileSetHash')}, "
                       f"{match}):")
            out.extend(f"    {line}" for line in _yaml(resolved["profile"]))
        elif not resolved.get("unavailable"):
            out.append(f"  resolved profile: {resolved.get('name')} is not in the TauCluster's status")
    if images:
        out.append("  images:")
        for i in images:
            image = i.get("image")
            digest = digests.get(image) if isinstance(image, str) else None
            init = " (init)" if i.get("init") else ""
            out.append(f"    - {i.get('template')} {i.get('container')}{init}: {image}"
                       + (f"  ({digest})" if digest else "  (digest not reported)"))
    extra = {k: v for k, v in digests.items() if k not in {i.get("image") for i in images}}
    for image, digest in sorted(extra.items()):
        out.append(f"    - (pods) {image}  ({digest})")
    if isinstance(obj, dict):
        out.append("  object (as admitted):")
        out.extend(f"    {line}" for line in _yaml(obj))
    return out


def _yaml(value: Any) -> list[str]:
    try:
        text = yaml.safe_dump(value, sort_keys=True, default_flow_style=False)
    except yaml.YAMLError:
        text = json.dumps(value, sort_keys=True, indent=2)
    return safe_text(text).rstrip("\n").splitlines()


def render_logs(doc: dict) -> list[str]:
    """The "Log tails" section: per ended container instance its pod, container, restart,
    exit, and the tail (or why it is unavailable), its bounds and SHA-256; the run's pod bound
    when it was reached. Empty when the record holds no log tails."""
    logs = [_d(x) for x in _l(doc.get("logs"))]
    limit = _d(doc.get("logsLimit"))
    if not logs and not limit:
        return []
    out = ["Log tails:"]
    for entry in logs:
        head = (f"  - pod {entry.get('pod')} container {entry.get('container')}"
                + (" (init)" if entry.get("init") else "")
                + f" restart {entry.get('restartCount')}"
                + (f" on node {entry['node']}" if entry.get("node") else "")
                + (f": {entry['reason']}" if entry.get("reason") else "")
                + (f" (exit code {entry['exitCode']})" if entry.get("exitCode") is not None else ""))
        out.append(head)
        if entry.get("unavailable"):
            msg = f": {entry['message']}" if entry.get("message") else ""
            out.append(f"    unavailable ({entry['unavailable']}){safe_text(str(msg))}")
            continue
        limits = _d(entry.get("limits"))
        cut = (f", truncated to the last {limits.get('lines')} lines / {limits.get('bytes')} bytes"
               if entry.get("truncated") else "")
        out.append(f"    {entry.get('lines')} lines, {entry.get('bytes')} bytes{cut}, sha256 {entry.get('sha256')}")
        text = entry.get("text")
        if isinstance(text, str) and text:
            out.extend(f"    | {line}" for line in safe_text(text).splitlines())
    if limit:
        first = _d(limit.get("firstOmitted"))
        out.append(f"  (tails of at most {limit.get('maxPods')} pods are kept; later pods' are not, the first "
                   f"left out: pod {first.get('pod')} container {first.get('container')})")
    return out

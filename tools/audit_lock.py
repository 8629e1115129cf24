"""The vulnerability audit of `make lint`: pip-audit over requirements.lock, and for each pin
that pip-audit could not look up, PyPI's per-project record instead.

pip-audit asks PyPI's per-release JSON (`/pypi/NAME/VERSION/json`); where only the
per-project JSON (`/pypi/NAME/json`) is reachable (some mirrors and proxies serve just that),
every pin comes back "could not be audited" and pip-audit alone would either skip them all
and pass (`No known vulnerabilities found`) or fail them all (`--strict`). The per-project
record lists the known vulnerabilities of the project's newest release: it answers for a pin
that is that release, and for any other pin the audit fails and says so. Nothing is passed
that was not looked up.

    python -m tools.audit_lock [requirements.lock]
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from typing import Any

PROJECT_JSON = "https://pypi.org/pypi/{name}/json"
TIMEOUT_S = 20.0

# Pins that cannot move to their package's newest release because a dependant caps them,
# with the cap. Where only the per-project record answers, such a pin cannot be looked up:
# it is reported on every run (not silently passed) and does not fail the audit, provided
# docs/supply-chain.md lists it with its reason (tests/test_lock.py checks that). An entry
# ends when the dependant lifts its cap (make lock then moves the pin).
HELD_BACK = {
    "python-dateutil": "botocore (the AWS identities) requires python-dateutil<3.0.0",
    "numpy": "numpy 2.5 requires Python >=3.12; the lock is for CPython 3.11",
    "opentelemetry-api": "opentelemetry-sdk 1.45.2, its newest, requires opentelemetry-api==1.45.2",
    "cryptography": "msal (azure-identity's) requires cryptography<51",
}


@dataclass
class Finding:
    name: str
    version: str
    problem: str  # a vulnerability id and summary, or why the pin was not audited


def pip_audit(lock: str) -> dict[str, Any]:
    """pip-audit's JSON report of `lock` (not --strict: the pins it skips are ours to judge)."""
    command = [sys.executable, "-m", "pip_audit", "--progress-spinner", "off", "--disable-pip"]
    command += ["--require-hashes", "-r", lock, "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"audit: pip-audit gave no report (exit {done.returncode})") from None
    return report


def pins(lock: str) -> dict[str, str]:
    """Normalised name -> version of every `name==version` line of the lock."""
    found = {}
    with open(lock, encoding="utf-8") as f:
        for line in f:
            head = line.split("\\", 1)[0].split(";", 1)[0].strip()
            if head and not head.startswith(("#", "-")) and "==" in head:
                name, version = head.split("==", 1)
                found[normalised(name)] = version.strip()
    return found


def normalised(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def project_record(name: str) -> dict[str, Any]:
    with urllib.request.urlopen(PROJECT_JSON.format(name=name), timeout=TIMEOUT_S) as answer:
        record: dict[str, Any] = json.load(answer)
    return record


def from_project_record(name: str, version: str) -> list[Finding]:
    try:
        record = project_record(name)
    except OSError as exc:
        return [Finding(name, version, f"not audited: PyPI did not answer ({exc})")]
    latest = record.get("info", {}).get("version")
    if latest != version and name in HELD_BACK:
        print(
            f"audit: {name}=={version}: not audited here (newest {latest}): held back, "
            f"{HELD_BACK[name]}; audit it where PyPI's per-release API answers",
            file=sys.stderr,
        )
        return []
    if latest != version:
        return [
            Finding(
                name,
                version,
                f"not audited: only the newest release ({latest}) can be looked up from "
                "here; move the pin (docs/supply-chain.md) or audit where pip-audit can",
            )
        ]
    return [
        Finding(name, version, f"{vuln.get('id')}: {(vuln.get('summary') or '').strip()}")
        for vuln in record.get("vulnerabilities") or []
        if not vuln.get("withdrawn")
    ]


def audit(lock: str) -> list[Finding]:
    versions = pins(lock)
    findings: list[Finding] = []
    for dep in pip_audit(lock).get("dependencies", []):
        name = normalised(dep["name"])
        version = dep.get("version") or versions.get(name, "?")
        if "skip_reason" in dep:
            findings += from_project_record(name, version)
        for vuln in dep.get("vulns", []):
            findings.append(
                Finding(name, version, f"{vuln['id']}: fixed in {vuln['fix_versions']}")
            )
    return findings


def main(argv: list[str]) -> int:
    lock = argv[0] if argv else "requirements.lock"
    findings = audit(lock)
    for f in findings:
        print(f"audit: {f.name}=={f.version}: {f.problem}", file=sys.stderr)
    if findings:
        print(f"audit: {len(findings)} problem(s) in {lock}", file=sys.stderr)
        return 1
    print(f"audit: {len(pins(lock))} pins of {lock}, no known vulnerabilities")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

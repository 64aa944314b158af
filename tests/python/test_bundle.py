"""The Python side the .vsix carries: bundled/requirements.txt agrees with pyproject.toml, pins every
library the bundled ones need, pins only platform-independent artifacts, and the protocol works with
msgpack's pure-Python fallback (what the bundle ships)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "bundled" / "requirements.txt"
BUNDLED_LIBS = ROOT / "bundled" / "libs"

USER_ENVIRONMENT = {"torch", "numpy", "matplotlib"}
"""pyproject dependencies the user's interpreter brings (torch), or that only pictures use (numpy, matplotlib)."""

SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


def bundled_pins() -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, its sha256 hashes), from the requirements file's logical lines."""
    text = re.sub(r"\\\n", " ", REQUIREMENTS.read_text(encoding="utf-8"))
    pins: dict[str, tuple[Version, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        name, _, version = spec.strip().partition("==")
        assert version, f"not pinned with ==: {line}"
        hashes = [o.removeprefix("hash=sha256:").strip() for o in options if o.startswith("hash=sha256:")]
        pins[canonicalize_name(name)] = (Version(version), hashes)
    return pins


def project_dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}


def needed_by(name: str) -> set[str] | None:
    """What a bundled distribution requires on any supported Python (extras left out): from the bundle
    when `make bundle` ran, else from this environment's installed copy (None: not installed here,
    as exceptiongroup is not on Python 3.11+)."""
    if BUNDLED_LIBS.is_dir():
        dists = [
            d for d in metadata.distributions(path=[str(BUNDLED_LIBS)]) if canonicalize_name(d.metadata["Name"]) == name
        ]
        dist = dists[0]
    else:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return None
    needed = set()
    for requirement in map(Requirement, dist.requires or []):
        marker = requirement.marker or Marker("python_version >= '0'")
        if any(marker.evaluate({"python_version": v, "extra": ""}) for v in SUPPORTED_PYTHONS):
            needed.add(canonicalize_name(requirement.name))
    return needed


def test_direct_dependencies_agree_with_pyproject():
    pins, project = bundled_pins(), project_dependencies()
    direct = set(project) - USER_ENVIRONMENT
    assert direct <= set(pins), f"pyproject dependencies the bundle lacks: {direct - set(pins)}"
    for name in direct:
        assert project[name].specifier.contains(pins[name][0]), (name, str(project[name].specifier), pins[name][0])
    assert USER_ENVIRONMENT <= set(project), "torch, numpy and matplotlib stay dependencies of the wheel"
    assert not USER_ENVIRONMENT & set(pins), "torch, NumPy and matplotlib are the user's, never bundled"


def test_every_library_a_bundled_one_needs_is_bundled_too():
    pins = bundled_pins()
    checked = 0
    for name in pins:
        needed = needed_by(name)
        if needed is None:
            continue
        checked += 1
        assert not needed - set(pins), f"{name} needs {needed - set(pins)}, which the bundle does not pin"
    assert checked >= len(pins) - 1, "the dependencies of the bundled libraries were read"


def test_every_pin_has_a_hash():
    for name, (_, hashes) in bundled_pins().items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def test_the_bundle_is_pure_python_when_built():
    if not BUNDLED_LIBS.is_dir():
        pytest.skip("bundled/libs is built by `make bundle` (make package)")
    wheels = {d.metadata["Name"]: d.read_text("WHEEL") or "" for d in metadata.distributions(path=[str(BUNDLED_LIBS)])}
    assert wheels, "bundled/libs holds no distribution"
    for name, wheel in wheels.items():
        tags = re.findall(r"^Tag: (\S+)", wheel, re.M)
        assert tags and all(t.endswith("-none-any") for t in tags), (name, tags)
    assert not list((BUNDLED_LIBS / "msgpack").glob("_cmsgpack*")), "msgpack is its pure-Python fallback"


def test_protocol_vectors_with_msgpack_pure_python_fallback():
    # The bundle ships msgpack without its C extension; the codec must agree with the shared vectors.
    env = {**os.environ, "MSGPACK_PUREPYTHON": "1"}
    check = "import msgpack, msgpack.fallback as f; assert msgpack.Packer is f.Packer"
    subprocess.run([sys.executable, "-c", check], env=env, check=True, timeout=60)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "python" / "test_protocol.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]

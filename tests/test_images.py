"""Fast checks of the image build inputs (no Docker): the hash-pinned lock, the Dockerfile's
hash-checked install, and the build scripts (mmdebstrap, no root, prerequisite checks).

The real build is exercised by tests/test_deploy_docker.py (opt-in).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
LOCK = DEPLOY / "requirements.lock"
DOCKERFILE = DEPLOY / "Dockerfile"
BUILD_SCRIPT = DEPLOY / "build-images.sh"
LOCK_SCRIPT = DEPLOY / "lock.sh"

# The image's interpreter and platform: the lock is resolved for them.
IMAGE_MARKERS = {
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}
SHA256 = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def _lock_entries() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of every requirement in the lock."""
    text = LOCK.read_text()
    # one logical line per requirement: join the backslash continuations
    logical = re.sub(r"\\\n", " ", text).splitlines()
    entries: dict[str, tuple[str, list[str]]] = {}
    for line in logical:
        stripped = line.split(" #", 1)[0].strip()
        if not stripped or stripped.startswith("#"):
            continue
        assert not stripped.startswith("-"), f"option line in the lock: {stripped}"
        spec = stripped.split(" --hash", 1)[0].strip()
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        (pin,) = list(requirement.specifier)  # exactly one specifier ...
        assert pin.operator == "==", f"{spec}: not pinned with =="  # ... and it is ==
        hashes = SHA256.findall(stripped)
        assert hashes, f"{spec}: no --hash=sha256:"
        assert len(hashes) == stripped.count("--hash="), f"{spec}: a hash that is not sha256"
        assert name not in entries, f"{name} is locked twice"
        entries[name] = (pin.version, hashes)
    return entries


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_requirement_line_is_pinned_with_sha256_hashes() -> None:
    entries = _lock_entries()
    assert len(entries) >= 10
    for name, (version, hashes) in entries.items():
        assert "*" not in version, name
        assert len(set(hashes)) == len(hashes), f"{name}: duplicate hashes"


def test_lock_pins_the_server_extra_and_the_build_backend_within_pyproject() -> None:
    pyproject = _pyproject()
    wanted = [
        *pyproject["project"]["dependencies"],
        *pyproject["project"]["optional-dependencies"]["server"],
        *pyproject["build-system"]["requires"],
    ]
    entries = _lock_entries()
    for line in wanted:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_MARKERS):
            continue
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} ({line}) is not locked: run deploy/lock.sh"
        version = entries[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"the lock pins {name}=={version}, pyproject.toml wants {line}: run deploy/lock.sh")
    assert "segshuffle" not in entries, "the project itself is installed from source, not locked"


def test_lock_is_closed_under_the_dependencies_of_the_locked_versions() -> None:
    # The metadata of the locked distributions installed here at exactly the locked version
    # tells their own requirements; every one of them must be locked too (pip's
    # --require-hashes refuses a dependency that is not).
    entries = _lock_entries()
    checked = 0
    for name, (version, _) in entries.items():
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Version(distribution.version) != Version(version):
            continue
        checked += 1
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_MARKERS):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in entries, f"{name}=={version} needs {line}, which is not locked"
    assert checked >= len(entries) // 2, (
        f"only {checked} of {len(entries)} locked versions are installed here to check against")


def test_lock_is_generated_by_the_lock_script_with_hashes_for_the_server_extra() -> None:
    assert "#    deploy/lock.sh\n" in LOCK.read_text(), "the lock's header must name deploy/lock.sh"
    script = LOCK_SCRIPT.read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert LOCK_SCRIPT.stat().st_mode & stat.S_IXUSR
    compile_command = script[script.index("pip-compile\" "):]
    for option in ("--generate-hashes", "--extra server", "--allow-unsafe",
                   "--build-deps-for wheel", "--output-file deploy/requirements.lock",
                   "pyproject.toml"):
        assert option in compile_command, option
    assert re.search(r'pip_tools_version="\d+\.\d+\.\d+"', script), "pip-tools itself is pinned"
    assert '"cpython 3.11 linux x86_64"' in script, "the lock is resolved for the image's Python"


def _dockerfile_runs() -> list[str]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [line for line in text.splitlines() if line.startswith("RUN ")]


def test_dockerfile_installs_only_hash_checked_locked_wheels_and_the_project_without_deps() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^COPY requirements\.lock /tmp/requirements\.lock$", text, re.MULTILINE)
    installs = [part for run in _dockerfile_runs() for part in run.split("&&")
                if "pip install" in part]
    assert installs, "no pip install in the Dockerfile"
    locked = [part for part in installs if "requirements.lock" in part]
    assert len(locked) == 1
    for option in ("--require-hashes", "--no-index", "--only-binary=:all:",
                   "--requirement /tmp/requirements.lock"):
        assert option in locked[0], option
    (project,) = [part for part in installs if part.rstrip().endswith("/src")]
    assert "--no-deps" in project and "--no-index" in project
    # nothing else is installed, and nothing reaches an index
    assert len(installs) == 2
    assert all("--no-index" in part for part in installs)
    assert "pip check" in text


def test_build_script_uses_mmdebstrap_and_needs_no_root() -> None:
    script = BUILD_SCRIPT.read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert "mmdebstrap" in code and "debootstrap " not in code.replace("mmdebstrap", "")
    assert "--mode=" in code and "unshare" in code
    # unshare mode for everyone but root; root is never demanded for it
    assert re.search(r'id -u\)" == "0" \]\]; then\s+printf \'root\\n\'\s+'
                     r'else\s+printf \'unshare\\n\'', code)
    assert not re.search(r'die "[^"]*needs root"\s*$', code, re.MULTILINE)
    assert "SOURCE_DATE_EPOCH" in code
    assert "segshuffle-proxy:bookworm" in code and "nginx-light" in code
    # the old constraints from the development venv are gone; the wheelhouse is the lock
    assert "pip freeze" not in code and "SEGSHUFFLE_CONSTRAINTS" not in code
    assert "--require-hashes" in code and 'requirements.lock' in code


def test_build_script_header_lists_its_prerequisites() -> None:
    header = BUILD_SCRIPT.read_text().split("set -euo pipefail", 1)[0]
    for item in ("Docker engine", "docker` group", "mmdebstrap", "uidmap", "/etc/subuid",
                 "python3.11", "openssl", "GiB"):
        assert item in header, item


@pytest.fixture
def bare_path(tmp_path: Path) -> str:
    """A PATH with bash and a few basic tools, but no docker, mmdebstrap or python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "date", "id", "sed", "cat", "grep"):
        for directory in ("/usr/bin", "/bin"):
            if (Path(directory) / tool).exists():
                (bin_dir / tool).symlink_to(Path(directory) / tool)
                break
    return str(bin_dir)


def _run(script: Path, *args: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_build_script_refuses_bad_arguments_with_one_line() -> None:
    result = _run(BUILD_SCRIPT, "--frobnicate")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unknown argument '--frobnicate'" in result.stderr
    assert result.stdout == ""


def test_build_script_dies_with_one_line_without_docker(bare_path: str) -> None:
    result = _run(BUILD_SCRIPT, "--check",
                  env={"PATH": bare_path, "HOME": os.environ.get("HOME", "/")})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("build-images: error: 'docker' is required")


def test_build_script_help_lists_the_options() -> None:
    result = _run(BUILD_SCRIPT, "--help")
    assert result.returncode == 0
    for option in ("--base-only", "--no-proxy", "--check"):
        assert option in result.stdout


def test_lock_script_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    result = _run(LOCK_SCRIPT, "--upgrade-package")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    result = _run(LOCK_SCRIPT, env={**os.environ, "SEGSHUFFLE_PYTHON": "/bin/false",
                                    "SEGSHUFFLE_BUILD_DIR": str(tmp_path)})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "cannot run /bin/false" in result.stderr
    assert not (tmp_path / "lock-venv").exists()

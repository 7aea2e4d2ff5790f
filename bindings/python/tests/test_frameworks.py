"""JAX, TensorFlow, Paddle and MLX through our API and the drop-in: each
framework's checks (``framework_cases.py``) in a process of its own, and
the promise that importing deathtensors imports none of them."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "3", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false", "GLOG_minloglevel": "3"}


@pytest.mark.parametrize("framework", ["jax", "tensorflow", "paddle", "mlx"])
def test_framework(framework):
    module = {"jax": "jax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}[framework]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    if framework == "mlx":
        pytest.importorskip("mlx.core", reason="mlx's CPU library (mlx[cpu]) is not installed")
    env = dict(os.environ, DT_TEST_FRAMEWORK=framework, **QUIET)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", str(HERE / "framework_cases.py"), "-q", "-p", "no:cacheprovider", "-x"],
        capture_output=True, text=True, env=env, cwd=HERE,
    )
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-6000:] + r.stderr[-3000:]


def test_importing_deathtensors_imports_no_framework():
    code = (
        "import sys, deathtensors, deathtensors.safetensors, deathtensors.safetensors.numpy; "
        "import deathtensors.safetensors as s; s.install(); import safetensors; "
        "print(sorted(m for m in ('jax', 'flax', 'tensorflow', 'paddle', 'mlx', 'mlx.core') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("module, framework", [("flax", "jax"), ("tensorflow", "tensorflow"), ("paddle", "paddle"), ("mlx", "mlx.core")])
def test_install_serves_the_framework_modules(module, framework):
    if importlib.util.find_spec(framework.split(".")[0]) is None:
        pytest.skip(f"{framework} is not installed")
    code = (
        "import deathtensors.safetensors as s; s.install(); "
        f"import safetensors.{module} as m; from safetensors.{module} import load_file, save_file, save, load; "
        f"assert m is s.{module}, m"
    )
    env = dict(os.environ, **QUIET)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode and "libmlx" in r.stderr:
        pytest.skip("mlx's CPU library (mlx[cpu]) is not installed")
    assert r.returncode == 0, r.stderr[-3000:]
    shim = subprocess.run(
        [sys.executable, "-c", f"import safetensors.{module} as m, deathtensors.safetensors as s; assert m is s.{module}"],
        capture_output=True, text=True, env=dict(env, PYTHONPATH=__import__("deathtensors.safetensors").safetensors.SHIM_PATH),
    )
    assert shim.returncode == 0, shim.stderr[-3000:]

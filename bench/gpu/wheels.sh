#!/usr/bin/env bash
# Download, here, the wheels a GPU machine lacks (Python 3.12, x86-64, no network there) into .whl/,
# at the versions this checkout's .venv runs: transformers, pydantic and orjson with everything they
# need, less what a PyTorch install already brings (numpy, filelock, fsspec, packaging, jinja2...).
# .whl/ is git-ignored; name it in the device call's carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
pins=$(.venv/bin/python - <<'PY'
import importlib.metadata as m
import re
from packaging.requirements import Requirement

WITH_TORCH = {"torch", "numpy", "filelock", "fsspec", "packaging", "jinja2", "markupsafe", "networkx",
              "sympy", "mpmath", "setuptools", "typing-extensions"}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
seen: dict[str, str] = {}
todo = ["transformers", "huggingface-hub", "pydantic", "orjson", "typing-extensions"]
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in seen:
        continue
    try:
        seen[name] = m.version(name)
    except m.PackageNotFoundError:
        continue
    for text in m.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            todo.append(req.name)
print(" ".join(f"{n}=={v}" for n, v in sorted(seen.items()) if n not in WITH_TORCH or n == "typing-extensions"))
PY
)
rm -rf .whl && mkdir -p .whl
for pin in $pins; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$pin" 2>&1 | grep -v "is ignored" || true
done
ls .whl | wc -l
du -sh .whl

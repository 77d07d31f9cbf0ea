#!/usr/bin/env bash
# Download, here, the wheels a GPU machine lacks (Python 3.12, x86-64, no network there) into .whl/,
# at the versions this checkout's .venv runs. .whl/ is git-ignored; name it in the device call's carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .whl && mkdir -p .whl
for pkg in pydantic pydantic_core annotated-types typing-inspection typing_extensions orjson transformers huggingface_hub; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$pkg==$(version "$pkg")"
done
du -sh .whl

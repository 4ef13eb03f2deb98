#!/usr/bin/env python3
"""Fetches the real (not generated) models of the bundled repository from PyPI, where their
authors publish them, and puts each file in place (git-ignored, like the generated ones):

    silero_vad/1/model.onnx   from silero-vad==6.2.3 (MIT): silero_vad/data/silero_vad.onnx

    python model_repository/fetch_models.py    # fetches what is missing

Only `pip download` is used (a wheel is a zip); nothing is installed.
"""
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

# model -> (requirement, file inside the wheel)
FETCHED = {
    "silero_vad": ("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx"),
}


def fetch(model, requirement, member):
    dest = os.path.join(HERE, model, "1", "model.onnx")
    if os.path.exists(dest):
        return False
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--no-deps", requirement, "-d", tmp], check=True)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(wheels) != 1:
            sys.exit(f"fetch_models.py: expected one wheel for {requirement}, got {wheels}")
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
            data = z.read(member)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, part = tempfile.mkstemp(dir=os.path.dirname(dest), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(part, 0o644)
    os.replace(part, dest)
    return True


def main():
    done = [m for m, (req, member) in FETCHED.items() if fetch(m, req, member)]
    if done:
        print(f"fetch_models.py: fetched {', '.join(done)}")


if __name__ == "__main__":
    main()
